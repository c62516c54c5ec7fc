//! M1, switching from Stakater Reloader: Reloader v1.4.21 (strategy `env-vars`, its default, and
//! `--enable-csi-integration`) manages 100 Deployments, 10 Jobs (which it deletes and creates again on
//! a reload) and 10 Deployments that mount a Secrets Store CSI volume and say
//! `secretproviderclass.reloader.stakater.com/auto`, through 7 config changes and a rotation of the
//! class (the driver's pod statuses, written as the driver would: no driver runs on kwok), and is
//! stopped; wave starts on the same objects (`--jobs --enable-csi-integration`). Then one more change and
//! one more rotation, made alike in a twin namespace that Reloader still manages: wave's env vars should
//! be exactly what Reloader writes.
//!
//! ```text
//! testenv up --audit, the CSI driver's CRDs ─► bench-m1 and its twin: the same 4 objects, 100
//!   Deployments (4 ways of opting in through Reloader's annotations), 10 Jobs, 10 CSI Deployments and
//!   their pods' statuses ─► Reloader: 7 changes and a rotation, each until every mark is written
//!   ─► stop ─► wave --namespaces=bench-m1 until it reconciled all 120: its writes (audit log)
//!   ─► Reloader again, on the twin only ─► change 8 and a rotation in both ─► every env compared
//! ```

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde::Serialize;
use serde_json::{Value, json};
use wave_core::hash::Content;
use wave_core::names::csi;
use wave_core::refs::ConfigKind;
use wave_core::reloader::{env_var_name, sha};

use futures::future::LocalBoxFuture;

use super::{Context, Figures};
use crate::harness::audit;
use crate::harness::controller::{Profile, Running};

const NS: &str = "bench-m1";
const TWIN: &str = "bench-m1-twin";
const WORKLOADS: usize = 100;
/// Jobs opted in with `reloader.stakater.com/auto` (suspended: the reload is the object, not its pods).
const JOBS: usize = 10;
/// Deployments mounting a CSI volume of SecretProviderClass `vault`: the even ones say only
/// `secretproviderclass.reloader.stakater.com/auto` (its rotations reload them), the odd ones also
/// `reloader.stakater.com/auto`, which reloads them for the ConfigMap they use too.
const CSI: usize = 10;
/// The class the CSI Deployments mount.
const CLASS: &str = "vault";
/// How long one change may take to be written everywhere (Reloader writes at 5 requests/s).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(600);

type Error = String;

/// What M1 measured.
#[derive(Clone, Debug, Serialize)]
pub struct Migration {
    pub workloads: usize,
    /// Of which Jobs.
    pub jobs: usize,
    /// Of which Deployments with a CSI volume and Reloader's SecretProviderClass annotation.
    pub csi_workloads: usize,
    /// Changes Reloader made before the switch.
    pub changes_before: usize,
    /// wave's workload writes after taking over from Reloader (from its start until it reconciled all):
    /// patches of Deployments, and deletes and creates of Jobs.
    pub wave_writes: u64,
    /// Rotations of the class Reloader handled before the switch.
    pub rotations_before: usize,
    /// After one more change and one more rotation: workloads whose containers' env is identical to
    /// their twin's, which Reloader wrote.
    pub identical_after_change: usize,
    /// Of those, the workloads the change reloaded (the others show that neither wrote).
    pub reloaded_by_change: usize,
    /// Of those, the workloads the rotation reloaded.
    pub reloaded_by_rotation: usize,
    /// The workloads that differ from their twin, by name (none expected).
    pub differing: Vec<String>,
}

/// The four objects, each with the values of change `n` (0: as created).
fn object(n: usize) -> (ConfigKind, &'static str, Value) {
    // Change n touches object n % 4, with value n.
    let which = n % 4;
    let data = |key: &str| json!({ key: format!("v{n}") });
    match which {
        0 => (ConfigKind::ConfigMap, "app", data("app.conf")),
        1 => (ConfigKind::Secret, "creds", data("password")),
        2 => (ConfigKind::ConfigMap, "flags", data("flag")),
        _ => (ConfigKind::Secret, "matched", data("token")),
    }
}

/// How Deployment `j` opts in, and which objects reload it: 0 `auto` (uses `app` and `creds`), 1 names
/// `app` and `flags` (`flags` unused), 2 `secret.reloader.stakater.com/auto`, 3 `search` (uses `app`,
/// and `matched`, which says `match`).
fn reloads(j: usize, object: &str) -> bool {
    match j % 4 {
        0 => matches!(object, "app" | "creds"),
        1 => matches!(object, "app" | "flags"),
        2 => object == "creds",
        _ => object == "matched",
    }
}

fn deployment(j: usize) -> Value {
    let name = format!("app-{j}");
    let mut container = json!({"name": "app", "image": "registry.invalid/app:1",
        "envFrom": [{"configMapRef": {"name": "app"}}],
        "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}]});
    let mut spec = json!({});
    let annotations = match j % 4 {
        0 => json!({"reloader.stakater.com/auto": "true"}),
        1 => json!({"configmap.reloader.stakater.com/reload": "app,flags"}),
        2 => json!({"secret.reloader.stakater.com/auto": "true"}),
        _ => {
            container["volumeMounts"] = json!([{"name": "m", "mountPath": "/m"}]);
            spec["volumes"] = json!([{"name": "m", "secret": {"secretName": "matched"}}]);
            json!({"reloader.stakater.com/search": "true"})
        }
    };
    spec["containers"] = json!([container, {"name": "side", "image": "registry.invalid/side:1"}]);
    json!({"metadata": {"name": name, "annotations": annotations},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

/// Job `j`: `reloader.stakater.com/auto`, using `app` (envFrom) and `creds` (env), suspended.
fn job(j: usize) -> Value {
    json!({"metadata": {"name": format!("job-{j}"), "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"suspend": true, "backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "app", "image": "registry.invalid/job:1",
                "envFrom": [{"configMapRef": {"name": "app"}}],
                "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}]}]}}}})
}

/// Deployment `csi-j`: a Secrets Store CSI volume of SecretProviderClass `vault`, and `app` (envFrom);
/// see [`CSI`] for its annotations.
fn csi_deployment(j: usize) -> Value {
    let name = format!("csi-{j}");
    let mut annotations = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    if j % 2 == 1 {
        annotations["reloader.stakater.com/auto"] = json!("true");
    }
    json!({"metadata": {"name": name, "annotations": annotations},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "volumes": [{"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": true,
                    "volumeAttributes": {"secretProviderClass": "vault"}}}],
                "containers": [{"name": "app", "image": "registry.invalid/app:1",
                    "envFrom": [{"configMapRef": {"name": "app"}}],
                    "volumeMounts": [{"name": "secrets", "mountPath": "/mnt/secrets"}]}]}}}})
}

/// How many workloads of every kind `object` reloads.
fn reloaded_by(object: &str) -> usize {
    let deployments = (0..WORKLOADS).filter(|j| reloads(*j, object)).count();
    let jobs = if matches!(object, "app" | "creds") {
        JOBS
    } else {
        0
    };
    let csi = if object == "app" { CSI / 2 } else { 0 };
    deployments + jobs + csi
}

/// M1 as [`super::REGISTRY`] runs it, with wave's and reloader's profiles.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move {
        let (wave, reloader) = (ctx.profile("wave")?, ctx.profile("reloader")?);
        run(wave, reloader).await.map(Figures::FromReloader)
    })
}

/// Runs M1 with `wave` and `reloader` on a control plane of its own.
pub async fn run(wave: &Profile, reloader: &Profile) -> Result<Migration, Error> {
    let dir = std::env::temp_dir().join(format!("wave-bench-{}-m1", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit"]);
    let result = run_on(&cluster, wave, reloader).await;
    cluster.stop();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_on(cluster: &testenv::Cluster, wave: &Profile, reloader: &Profile) -> Result<Migration, Error> {
    let client = cluster.client().await;
    // Before Reloader starts: it follows the driver's statuses only if their CRD is served then.
    cluster.install_csi_crds()?;
    for ns in [NS, TWIN] {
        populate(&client, ns).await?;
    }
    // The canary shows Reloader listening: it lives in the twin, which wave never watches.
    create(&client, TWIN, "canary", ConfigKind::ConfigMap, json!({"n": "0"})).await?;
    let canary = json!({"metadata": {"name": "canary", "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "canary"}},
            "template": {"metadata": {"labels": {"app": "canary"}}, "spec": {"containers": [{"name": "c",
                "image": "registry.invalid/c:1", "envFrom": [{"configMapRef": {"name": "canary"}}]}]}}}});
    Api::<Deployment>::namespaced(client.clone(), TWIN)
        .create(&PostParams::default(), &serde_json::from_value(canary).unwrap())
        .await
        .map_err(|e| e.to_string())?;

    let audit_log = cluster.dir().join("logs/audit.log");
    let log = cluster.dir().join("logs/m1.log");
    let kubeconfig =
        |p: &Profile| cluster.user_kubeconfig(&format!("bench-{}", p.name), Some("system:masters"));
    // Reloader's default strategy, env-vars: the one its users switch from most.
    let mut reloader = reloader.clone();
    reloader.args.retain(|a| !a.starts_with("--reload-strategy"));
    reloader.args.push("--enable-csi-integration".into());

    let mut theirs = Running::start(&reloader, &kubeconfig(&reloader), &log)
        .map_err(|e| format!("starting Reloader: {e}"))?;
    until_listening(&client, &mut theirs).await?;
    // Seven: every object changes at least once, and the last change (8) is `app`, which reloads
    // Deployments, Jobs and CSI Deployments alike.
    let changes_before = 7;
    for n in 1..=changes_before {
        change(&client, &[NS, TWIN], n).await?;
    }
    let rotations_before = 1;
    rotate(&client, &[NS, TWIN], "v1").await?;
    theirs.stop();

    let from = Timestamp::now();
    // Reloader compatibility is off by default: the switch turns it on.
    let ours = Running::start_with(
        wave,
        &[
            format!("--namespaces={NS}"),
            "--reloader-compat".into(),
            "--jobs".into(),
            "--enable-csi-integration".into(),
        ],
        &kubeconfig(wave),
        &log,
    )
    .map_err(|e| format!("starting wave: {e}"))?;
    let port = crate::harness::metrics::port(wave).ok_or("wave's profile has no metrics address")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while super::migration::reconciles(port) < (WORKLOADS + JOBS + CSI) as f64 {
        if Instant::now() > deadline {
            return Err("wave did not reconcile every workload within 5 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // a late write still counts
    let counts = audit::count(
        &audit_log,
        &format!("bench-{}", wave.name),
        "-",
        from,
        Timestamp::now(),
    );
    let wave_writes = audit::workload_writes(&counts) + audit::job_writes(&counts);

    let mut theirs = Running::start_with(
        &reloader,
        &[format!("--namespaces-to-ignore={NS}")],
        &kubeconfig(&reloader),
        &log,
    )
    .map_err(|e| format!("starting Reloader again: {e}"))?;
    until_listening(&client, &mut theirs).await?;
    let last = changes_before + 1;
    change(&client, &[NS, TWIN], last).await?;
    rotate(&client, &[NS, TWIN], "v2").await?;
    theirs.stop();
    ours.stop();

    let (_, changed, _) = object(last);
    let ours = containers_by_name(&client, NS).await?;
    let twins = containers_by_name(&client, TWIN).await?;
    let differing: Vec<String> = ours
        .iter()
        .filter(|(name, env)| twins.get(*name) != Some(env))
        .map(|(name, _)| name.clone())
        .collect();
    Ok(Migration {
        workloads: WORKLOADS + JOBS + CSI,
        jobs: JOBS,
        csi_workloads: CSI,
        changes_before,
        rotations_before,
        wave_writes,
        identical_after_change: ours.len() - differing.len(),
        reloaded_by_change: reloaded_by(changed),
        reloaded_by_rotation: CSI,
        differing,
    })
}

async fn create(client: &Client, ns: &str, name: &str, kind: ConfigKind, data: Value) -> Result<(), Error> {
    let pp = PostParams::default();
    let err = |e: kube::Error| format!("creating {ns}/{name}: {e}");
    let annotations = if name == "matched" {
        json!({"reloader.stakater.com/match": "true"})
    } else {
        json!({})
    };
    let meta = json!({"name": name, "annotations": annotations});
    match kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": meta, "data": data})).unwrap(),
            )
            .await
            .map(drop)
            .map_err(err),
        ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), ns)
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": meta, "stringData": data})).unwrap(),
            )
            .await
            .map(drop)
            .map_err(err),
        ConfigKind::SecretProviderClass => Err(format!("M1 creates no SecretProviderClass ({ns}/{name})")),
    }
}

async fn populate(client: &Client, ns: &str) -> Result<(), Error> {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .map_err(|e| e.to_string())?;
    for n in 0..4 {
        let (kind, name, data) = object(n);
        // As created, every object holds "v0".
        let data = data
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (k.clone(), json!("v0")))
            .collect();
        create(client, ns, name, kind, Value::Object(data)).await?;
    }
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployments = (0..WORKLOADS).map(deployment).chain((0..CSI).map(csi_deployment));
    for body in deployments {
        api.create(&PostParams::default(), &serde_json::from_value(body).unwrap())
            .await
            .map_err(|e| e.to_string())?;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    for j in 0..JOBS {
        jobs.create(&PostParams::default(), &serde_json::from_value(job(j)).unwrap())
            .await
            .map_err(|e| e.to_string())?;
    }
    // Each CSI Deployment's pod mounted `vault` at v0 (a creation: it reloads nothing).
    for j in 0..CSI {
        report(client, ns, j, "v0").await?;
    }
    Ok(())
}

/// Writes the status of CSI Deployment `j`'s pod as the driver would after mounting `version`.
async fn report(client: &Client, ns: &str, j: usize, version: &str) -> Result<(), Error> {
    let gvk = GroupVersionKind::gvk(csi::GROUP, csi::VERSION, csi::POD_STATUS_KIND);
    let resource = ApiResource::from_gvk_with_plural(&gvk, csi::POD_STATUS_PLURAL);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let pod = format!("csi-{j}-0");
    let name = format!("{pod}-{ns}-{CLASS}");
    let body = json!({"apiVersion": csi::API_VERSION, "kind": csi::POD_STATUS_KIND,
        "metadata": {"name": name},
        "status": {"podName": pod, "secretProviderClassName": CLASS, "mounted": true,
            "objects": [{"id": "secret/db", "version": version}]}});
    let params = PatchParams::apply("m1-csi-driver").force();
    api.patch(&name, &params, &Patch::Apply(body))
        .await
        .map(drop)
        .map_err(|e| format!("writing status {ns}/{name}: {e}"))
}

/// Rotates `vault` to `version` in each of `namespaces` (every CSI Deployment's pod reports it), then
/// waits until every CSI Deployment carries the class's new SHA-1 in each.
async fn rotate(client: &Client, namespaces: &[&str], version: &str) -> Result<(), Error> {
    for ns in namespaces {
        for j in 0..CSI {
            report(client, ns, j, version).await?;
        }
    }
    let status = wave_core::reloader::ProviderStatus {
        id: wave_core::reloader::StatusRef {
            namespace: String::new(),
            name: String::new(),
        },
        class: CLASS.into(),
        objects: Some(vec![("secret/db".into(), version.into())]),
        resource_version: String::new(),
        labels: Default::default(),
    };
    let (var, want) = (env_var_name(ConfigKind::SecretProviderClass, CLASS), status.sha());
    let what = format!("rotation to {version}");
    until_marked(client, namespaces, &var, &want, CSI, &what).await
}

/// Makes change `n` in each of `namespaces`, then waits until every Deployment it reloads carries the
/// new SHA-1 in each.
async fn change(client: &Client, namespaces: &[&str], n: usize) -> Result<(), Error> {
    let (kind, name, data) = object(n);
    for ns in namespaces {
        let pp = PatchParams::default();
        let result = match kind {
            ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), ns)
                .patch(name, &pp, &Patch::Merge(json!({"data": data})))
                .await
                .map(drop),
            ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), ns)
                .patch(name, &pp, &Patch::Merge(json!({"stringData": data})))
                .await
                .map(drop),
            ConfigKind::SecretProviderClass => {
                return Err(format!("M1 changes no SecretProviderClass ({name})"));
            }
        };
        result.map_err(|e| format!("change {n} of {ns}/{name}: {e}"))?;
    }
    let content = Content::new(
        data.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().as_bytes().to_vec()))
            .collect(),
    );
    let (var, want) = (env_var_name(kind, name), sha(kind, &content));
    let what = format!("change {n}");
    until_marked(client, namespaces, &var, &want, reloaded_by(name), &what).await
}

/// Waits until `expected` workloads carry env var `var` with value `want` in each of `namespaces`.
async fn until_marked(
    client: &Client,
    namespaces: &[&str],
    var: &str,
    want: &str,
    expected: usize,
    what: &str,
) -> Result<(), Error> {
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    for ns in namespaces {
        loop {
            let marked = containers_by_name(client, ns)
                .await?
                .values()
                .filter(|env| {
                    env.iter()
                        .any(|(n, v)| n.ends_with(&format!("/{var}")) && v == want)
                })
                .count();
            if marked == expected {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{what}: {marked} of {expected} workloads in {ns} marked after {CHANGE_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Changes the canary until Reloader writes it: it lists before it handles updates, and an update
/// made before its list is never seen.
async fn until_listening(client: &Client, running: &mut Running) -> Result<(), Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), TWIN);
    let generation = |d: Deployment| d.metadata.generation.unwrap_or_default();
    let before = generation(api.get("canary").await.map_err(|e| e.to_string())?);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut n = 0;
    while Instant::now() < deadline {
        if !running.is_alive() {
            return Err("Reloader exited; see logs/m1.log in the run directory".into());
        }
        n += 1;
        Api::<ConfigMap>::namespaced(client.clone(), TWIN)
            .patch(
                "canary",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"n": n.to_string()}})),
            )
            .await
            .map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if generation(api.get("canary").await.map_err(|e| e.to_string())?) != before {
            return Ok(());
        }
    }
    Err("Reloader never reloaded the canary within 5 minutes".into())
}

/// Every Deployment's and Job's containers' env (`name`, `value`) in order, by workload name (the canary
/// left out). A Job between Reloader's delete and its create is missing, and so counts as unmarked.
async fn containers_by_name(
    client: &Client,
    ns: &str,
) -> Result<std::collections::BTreeMap<String, Vec<(String, String)>>, Error> {
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .map(|d| {
            (
                d.metadata.name.unwrap_or_default(),
                d.spec.and_then(|s| s.template.spec),
            )
        });
    let jobs = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .map(|j| {
            (
                j.metadata.name.unwrap_or_default(),
                j.spec.and_then(|s| s.template.spec),
            )
        });
    Ok(deployments
        .chain(jobs)
        .filter(|(name, _)| name != "canary")
        .map(|(name, spec)| {
            let env = spec
                .map(|s| {
                    s.containers
                        .into_iter()
                        .flat_map(|c| {
                            let container = c.name;
                            c.env.unwrap_or_default().into_iter().map(move |e| {
                                (format!("{container}/{}", e.name), e.value.unwrap_or_default())
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            (name, env)
        })
        .collect())
}
