//! R1: restarting in place against a rolling update, on the real node (docs/behaviour.md, "Restarting
//! in place"): wave alone, on a control plane whose one node is a real kubelet, one strategy after the
//! other, the same workloads and the same changes.
//!
//! ```text
//! testenv up --real-node ─► wave's image imported (the agent runs from it) ─► wave
//!   per strategy (rollout, then in-place), in a namespace of its own:
//!     ConfigMap `site` ─► N Deployments of R pods and a StatefulSet of R, each with a headless Service
//!     ─► settled: wave's first hash rolled out, every pod Ready and serving v1 by HTTP
//!     ─► per change: a pod watch, an EndpointSlice watch and one prober per workload start
//!        ─► the ConfigMap changes ─► every pod asked by HTTP until each workload's serve the new version
//!        ─► settled ─► ReplicaSets and revisions, pods created and scheduled, IPs changed, probes failed
//!     ─► the namespace deleted, its pods gone
//! ```
//!
//! The prober stands in for a Service's clients: it sends one request every [`PROBE_EVERY`] to each
//! workload, round-robin over the addresses its EndpointSlices call ready, as kube-proxy would route
//! them (the test node has no kube-proxy). Both strategies get the same unavailability: the Deployments
//! roll with `maxSurge: 0, maxUnavailable: 1`, which is also the in-place budget wave reads from them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use wave_core::{inplace, names};

use super::{Context, Figures};
use crate::harness::Limits;
use crate::harness::controller::{Profile, Running};
use crate::harness::session::{Session, keep_logs};
use crate::harness::stats::median;

type Error = String;

/// How often the prober sends a request to each workload.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// How often the pods are asked, by HTTP, which config they serve.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// The image wave's agent runs from, imported into the node.
const WAVE_IMAGE: &str = "wave:testenv";

/// The StatefulSet's name (and app label); the Deployments are `web-0` … `web-N-1`.
const STATEFUL: &str = "db";

/// What R1 runs.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Deployments, each of `replicas` pods.
    pub deployments: usize,
    /// Pods of each Deployment and of the StatefulSet.
    pub replicas: usize,
    /// Config changes per strategy, one at a time, each once the last has settled.
    pub changes: usize,
    /// wave's static binary, which the image of the agent is made from (`make static`).
    pub agent_bin: PathBuf,
    pub limits: Limits,
    /// Where a failed run's logs are kept (`<out>/failed-wave/`).
    pub out: PathBuf,
}

/// R1 as [`super::REGISTRY`] runs it, with wave's profile.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move {
        let wave = ctx.profile("wave")?;
        run(&ctx.sizes.in_place, wave).await.map(Figures::InPlace)
    })
}

/// R1's figures: each strategy's changes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Comparison {
    /// Why this machine ran no real node ("not root", "not Linux"), when it did not.
    pub skipped: Option<String>,
    pub deployments: usize,
    pub replicas: usize,
    pub probe_every_ms: u64,
    /// `wave.pusher.com/restart: rollout` (the default): a new hash on the pod template.
    pub rollout: Strategy,
    /// `wave.pusher.com/restart: in-place`.
    pub in_place: Strategy,
}

/// One strategy's changes, and the medians of their figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Strategy {
    pub changes: Vec<Change>,
    pub deployments_all_s: f64,
    pub statefulset_s: f64,
}

/// What one config change cost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Change {
    /// From the ConfigMap's update until every pod of every Deployment served the new version (each
    /// of its containers started with it: the env var and the `subPath` file, by HTTP).
    pub deployments_all_s: f64,
    /// The median, over the Deployments, of the same time for each alone.
    pub deployment_median_s: f64,
    /// The same for the StatefulSet.
    pub statefulset_s: f64,
    /// ReplicaSets and ControllerRevisions that exist after the change and did not before.
    pub replica_sets_created: usize,
    pub revisions_created: usize,
    /// Pods that did not exist before the change, and those of them the scheduler bound.
    pub pods_created: usize,
    pub pods_scheduled: usize,
    /// Pods, after the change, whose IP no pod of their workload had before it.
    pub ips_changed: usize,
    /// The prober's requests while the change went on, and those refused, failed or not answered 200.
    pub probes: u64,
    pub probes_failed: u64,
}

/// The workloads of one strategy's namespace: `(kind, name)`.
fn workloads(sizes: &Sizes) -> Vec<(&'static str, String)> {
    (0..sizes.deployments)
        .map(|i| ("Deployment", format!("web-{i}")))
        .chain(std::iter::once(("StatefulSet", STATEFUL.to_string())))
        .collect()
}

/// One R1 run: both strategies on one real node.
pub async fn run(sizes: &Sizes, wave: &Profile) -> Result<Comparison, Error> {
    let mut comparison = Comparison {
        deployments: sizes.deployments,
        replicas: sizes.replicas,
        probe_every_ms: PROBE_EVERY.as_millis() as u64,
        ..Comparison::default()
    };
    if let Some(why) = testenv::real_node_unsupported() {
        eprintln!("R1: skipped: no real node: {why}");
        comparison.skipped = Some(why);
        return Ok(comparison);
    }
    if !sizes.agent_bin.is_file() {
        return Err(format!(
            "R1 needs wave's static binary for the agent's image, and {} is not a file (`make static`; \
             or set WAVE_STATIC_BIN)",
            sizes.agent_bin.display()
        ));
    }
    let dir = testenv::private_dir("wave-bench-r1");
    let cluster = tokio::task::spawn_blocking(move || {
        testenv::Cluster::start_in(dir, &["--real-node", "--nodes", "0"])
    })
    .await
    .map_err(|e| format!("starting the real node: {e}"))?;
    let result = on_node(sizes, wave, &cluster, &mut comparison).await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .map_err(|e| format!("stopping the real node: {e}"))?;
    result.map(|()| comparison)
}

async fn on_node(
    sizes: &Sizes,
    wave: &Profile,
    cluster: &testenv::Cluster,
    comparison: &mut Comparison,
) -> Result<(), Error> {
    import_wave_image(cluster, &sizes.agent_bin)?;
    let session = Session::new(cluster, wave).await;
    let extra = [
        format!("--agent-image={WAVE_IMAGE}"),
        "--min-rollout-interval=0".to_string(),
    ];
    let _wave = Running::start_with(wave, &extra, &session.kubeconfig, &session.log)
        .map_err(|e| format!("starting wave: {e}"))?;
    for in_place in [false, true] {
        let label = if in_place { "in-place" } else { "rollout" };
        eprintln!("R1: {label}");
        let strategy = one_strategy(sizes, &session.client, in_place)
            .await
            .map_err(|e| {
                let kept = keep_logs(cluster, &sizes.out, wave);
                format!("{label}: {e} (logs kept in {})", kept.display())
            })?;
        if in_place {
            comparison.in_place = strategy;
        } else {
            comparison.rollout = strategy;
        }
    }
    Ok(())
}

/// `hack/oci-image wave BIN`, imported into the node as [`WAVE_IMAGE`].
fn import_wave_image(cluster: &testenv::Cluster, bin: &Path) -> Result<(), Error> {
    let archive = cluster.dir().join("wave-image.tar");
    let out = std::process::Command::new(testenv::repo_root().join("hack/oci-image"))
        .arg("wave")
        .arg(bin)
        .arg(&archive)
        .args(["--name", WAVE_IMAGE, "--commit", "bench"])
        .output()
        .map_err(|e| format!("hack/oci-image: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "hack/oci-image wave failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    cluster.import_image(&archive);
    Ok(())
}

/// One strategy's namespace and what R1 looks at in it.
struct Place<'a> {
    sizes: &'a Sizes,
    client: &'a Client,
    ns: &'a str,
    workloads: &'a [(&'static str, String)],
    in_place: bool,
}

/// One strategy: its namespace, its workloads settled, its changes, then the namespace gone.
async fn one_strategy(sizes: &Sizes, client: &Client, in_place: bool) -> Result<Strategy, Error> {
    let ns = if in_place { "r1-in-place" } else { "r1-rollout" };
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).map_err(|e| e.to_string())?,
        )
        .await
        .map_err(|e| format!("creating namespace {ns}: {e}"))?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "site"}, "data": site(1)}))
                .map_err(|e| e.to_string())?,
        )
        .await
        .map_err(|e| format!("creating the ConfigMap: {e}"))?;
    for (kind, name) in workloads(sizes) {
        create(client, ns, kind, &name, sizes.replicas, in_place).await?;
    }
    let workloads = workloads(sizes);
    let place = Place {
        sizes,
        client,
        ns,
        workloads: &workloads,
        in_place,
    };
    settle(&place, 1).await?;
    let mut changes = Vec::new();
    for version in 2..2 + sizes.changes {
        let change = one_change(&place, version).await?;
        eprintln!("R1: {ns} v{version}: {change:?}");
        changes.push(change);
    }
    namespaces
        .delete(ns, &DeleteParams::background())
        .await
        .map_err(|e| format!("deleting namespace {ns}: {e}"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait(
        sizes.limits.limit(Duration::from_secs(300)),
        "the namespace's pods to go",
        || async {
            pods.list(&ListParams::default())
                .await
                .is_ok_and(|l| l.items.is_empty())
                .then_some(())
        },
    )
    .await?;
    let med = |f: fn(&Change) -> f64| median(&changes.iter().map(f).collect::<Vec<_>>());
    Ok(Strategy {
        deployments_all_s: med(|c| c.deployments_all_s),
        statefulset_s: med(|c| c.statefulset_s),
        changes,
    })
}

fn site(version: usize) -> Value {
    json!({"index.html": format!("site v{version}\n"), "greeting": format!("hello v{version}")})
}

/// A workload of busybox httpd serving `/index.html` from the ConfigMap `site` by `subPath` and `/env`
/// with the env var GREETING from it, as its container saw them when it started; and its headless
/// Service (the StatefulSet's governing one).
async fn create(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    replicas: usize,
    in_place: bool,
) -> Result<(), Error> {
    let mut annotations = json!({(names::UPDATE_ON_CONFIG_CHANGE): "true"});
    if in_place {
        annotations[names::RESTART] = json!("in-place");
    }
    let template = json!({
        "metadata": {"labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "httpd", "image": "busybox:testenv", "imagePullPolicy": "Never",
                "command": ["sh", "-c", "echo \"$GREETING\" > /www/env; exec httpd -f -p 8080 -h /www"],
                "env": [{"name": "GREETING", "valueFrom":
                    {"configMapKeyRef": {"name": "site", "key": "greeting"}}}],
                "volumeMounts": [{"name": "site", "mountPath": "/www/index.html", "subPath": "index.html"}],
                "readinessProbe": {"httpGet": {"path": "/env", "port": 8080}, "periodSeconds": 1}
            }],
            "volumes": [{"name": "site", "configMap": {"name": "site"}}]
        }
    });
    let mut spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": template,
    });
    if kind == "Deployment" {
        spec["strategy"] = json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}});
    } else {
        spec["serviceName"] = json!(name);
    }
    let object = json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    });
    let pp = PostParams::default();
    let created = if kind == "Deployment" {
        let d: Deployment = serde_json::from_value(object).map_err(|e| e.to_string())?;
        Api::<Deployment>::namespaced(client.clone(), ns)
            .create(&pp, &d)
            .await
            .map(drop)
    } else {
        let s: StatefulSet = serde_json::from_value(object).map_err(|e| e.to_string())?;
        Api::<StatefulSet>::namespaced(client.clone(), ns)
            .create(&pp, &s)
            .await
            .map(drop)
    };
    created.map_err(|e| format!("creating {kind} {name}: {e}"))?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 8080}]}
    }))
    .map_err(|e| e.to_string())?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&pp, &service)
        .await
        .map_err(|e| format!("creating Service {name}: {e}"))?;
    Ok(())
}

/// A pod as R1 looks at it.
#[derive(Clone, Debug)]
struct PodNow {
    uid: String,
    ip: Option<String>,
    ready: bool,
    agent: bool,
}

/// The pods of the namespace that are not being deleted, by their `app` label.
async fn pods_by_app(client: &Client, ns: &str) -> Result<HashMap<String, Vec<PodNow>>, Error> {
    let list = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing pods: {e}"))?;
    let mut by_app: HashMap<String, Vec<PodNow>> = HashMap::new();
    for pod in list.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(app) = pod.labels().get("app").cloned() else {
            continue;
        };
        let status = pod.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let agent = pod
            .spec
            .as_ref()
            .is_some_and(|s| s.containers.iter().any(|c| c.name == inplace::AGENT_CONTAINER));
        by_app.entry(app).or_default().push(PodNow {
            uid: pod.uid().unwrap_or_default(),
            ip: status.pod_ip,
            ready,
            agent,
        });
    }
    Ok(by_app)
}

/// Whether the pod at `ip` serves `version`: the `subPath` file and the env var, by HTTP.
fn serves(ip: &str, version: usize) -> bool {
    let get = |path| {
        testenv::http_get_at(ip, 8080, path)
            .filter(|(status, _)| *status == 200)
            .map(|(_, body)| body)
    };
    get("/index.html").as_deref() == Some(format!("site v{version}\n").as_str())
        && get("/env").as_deref() == Some(format!("hello v{version}\n").as_str())
}

/// Whether `pods` are the `replicas` pods a workload should have, each Ready and known (by UID, in
/// `confirmed`) to serve `version`; asks by HTTP the pods not yet known, and remembers those that do.
async fn all_serve(
    pods: &[PodNow],
    replicas: usize,
    version: usize,
    confirmed: &mut BTreeSet<String>,
) -> bool {
    if pods.len() != replicas || !pods.iter().all(|p| p.ready && p.ip.is_some()) {
        return false;
    }
    for pod in pods {
        if confirmed.contains(&pod.uid) {
            continue;
        }
        let ip = pod.ip.clone().unwrap_or_default();
        if tokio::task::spawn_blocking(move || serves(&ip, version))
            .await
            .unwrap_or(false)
        {
            confirmed.insert(pod.uid.clone());
        } else {
            return false;
        }
    }
    true
}

/// Waits until every workload's own controller has finished (and, in place, wave's restart is done),
/// every pod is Ready and serves `version`, and wave's hash is on the template (the first time: a
/// rollout).
async fn settle(place: &Place<'_>, version: usize) -> Result<(), Error> {
    let Place { sizes, ns, .. } = place;
    let limit = sizes.limits.limit(Duration::from_secs(600));
    let started = Instant::now();
    let mut confirmed = BTreeSet::new();
    loop {
        if settled(place, version, &mut confirmed).await {
            return Ok(());
        }
        if started.elapsed() > limit {
            return Err(format!("waited {limit:?} for {ns} to settle on v{version}"));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// [`settle`]'s condition, now.
async fn settled(place: &Place<'_>, version: usize, confirmed: &mut BTreeSet<String>) -> bool {
    let Place {
        sizes,
        client,
        ns,
        workloads,
        in_place,
    } = *place;
    let Ok(pods) = pods_by_app(client, ns).await else {
        return false;
    };
    let replicas = Some(sizes.replicas as i32);
    for (kind, name) in workloads {
        let (meta, template, done) = if *kind == "Deployment" {
            let Ok(d) = Api::<Deployment>::namespaced(client.clone(), ns).get(name).await else {
                return false;
            };
            let status = d.status.unwrap_or_default();
            let done = status.observed_generation >= d.metadata.generation
                && status.updated_replicas == replicas
                && status.replicas == replicas;
            (d.metadata, d.spec.map(|s| s.template), done)
        } else {
            let Ok(s) = Api::<StatefulSet>::namespaced(client.clone(), ns).get(name).await else {
                return false;
            };
            let status = s.status.unwrap_or_default();
            let done = status.observed_generation >= s.metadata.generation
                && status.current_revision == status.update_revision
                && status.updated_replicas == replicas;
            (s.metadata, s.spec.map(|s| s.template), done)
        };
        let restarting = meta
            .annotations
            .unwrap_or_default()
            .get(names::IN_PLACE)
            .and_then(|r| inplace::Record::parse(r))
            .is_some_and(|r| r.is_restarting());
        let hashed = template
            .and_then(|t| t.metadata?.annotations)
            .is_some_and(|a| a.contains_key(names::CONFIG_HASH));
        let app_pods = pods.get(name.as_str()).map_or(&[][..], Vec::as_slice);
        if !done
            || restarting
            || !hashed
            || (in_place && !app_pods.iter().all(|p| p.agent))
            || !all_serve(app_pods, sizes.replicas, version, confirmed).await
        {
            return false;
        }
    }
    true
}

/// One config change, measured: see [`Change`].
async fn one_change(place: &Place<'_>, version: usize) -> Result<Change, Error> {
    let Place {
        sizes,
        client,
        ns,
        workloads,
        ..
    } = *place;
    let sets_before = uids::<ReplicaSet>(client, ns).await?;
    let revisions_before = uids::<ControllerRevision>(client, ns).await?;
    let ips_before: HashMap<String, BTreeSet<String>> = pods_by_app(client, ns)
        .await?
        .into_iter()
        .map(|(app, pods)| (app, pods.into_iter().filter_map(|p| p.ip).collect()))
        .collect();
    let pod_watch = PodWatch::start(client, ns).await?;
    let endpoints = Endpoints::start(client, ns).await?;
    let prober = Prober::start(
        &endpoints,
        workloads.iter().map(|(_, name)| name.clone()).collect(),
    );

    let started = Instant::now();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "site",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": site(version)})),
        )
        .await
        .map_err(|e| format!("changing the ConfigMap: {e}"))?;
    let mut done: BTreeMap<String, f64> = BTreeMap::new();
    let mut confirmed = BTreeSet::new();
    let limit = sizes.limits.limit(Duration::from_secs(600));
    while done.len() < workloads.len() {
        if started.elapsed() > limit {
            let left: Vec<&str> = workloads
                .iter()
                .map(|(_, n)| n.as_str())
                .filter(|n| !done.contains_key(*n))
                .collect();
            return Err(format!(
                "{ns}: v{version} not served by every pod of {left:?} within {limit:?}"
            ));
        }
        let pods = pods_by_app(client, ns).await?;
        for (_, name) in workloads {
            if done.contains_key(name) {
                continue;
            }
            let app_pods = pods.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            if all_serve(app_pods, sizes.replicas, version, &mut confirmed).await {
                done.insert(name.clone(), started.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    settle(place, version).await?;
    let (probes, probes_failed) = prober.stop();
    endpoints.stop();
    let (pods_created, pods_scheduled) = pod_watch.stop();

    let ips_after = pods_by_app(client, ns).await?;
    let ips_changed = ips_after
        .iter()
        .flat_map(|(app, pods)| {
            let before = ips_before.get(app);
            pods.iter().filter(move |p| {
                p.ip.as_ref()
                    .is_none_or(|ip| !before.is_some_and(|b| b.contains(ip)))
            })
        })
        .count();
    let deployment_times: Vec<f64> = done
        .iter()
        .filter(|(name, _)| name.as_str() != STATEFUL)
        .map(|(_, s)| *s)
        .collect();
    Ok(Change {
        deployments_all_s: deployment_times.iter().copied().fold(0.0, f64::max),
        deployment_median_s: median(&deployment_times),
        statefulset_s: done.get(STATEFUL).copied().unwrap_or(f64::NAN),
        replica_sets_created: uids::<ReplicaSet>(client, ns)
            .await?
            .difference(&sets_before)
            .count(),
        revisions_created: uids::<ControllerRevision>(client, ns)
            .await?
            .difference(&revisions_before)
            .count(),
        pods_created,
        pods_scheduled,
        ips_changed,
        probes,
        probes_failed,
    })
}

/// The UIDs of the `K`s in `ns` (ReplicaSets, ControllerRevisions).
async fn uids<K>(client: &Client, ns: &str) -> Result<BTreeSet<String>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let list = Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing {}s: {e}", K::kind(&())))?;
    Ok(list.items.iter().filter_map(|r| r.uid()).collect())
}

/// Calls `check` until it gives a value, at most `limit`.
async fn wait<F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let started = Instant::now();
    loop {
        if check().await.is_some() {
            return Ok(());
        }
        if started.elapsed() > limit {
            return Err(format!("waited {limit:?} for {what}"));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The pods that appear after it starts: those created, and of them those bound to a node.
struct PodWatch {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<(BTreeSet<String>, BTreeSet<String>)>>,
}

impl PodWatch {
    /// Returns once the watch has listed the pods there are (which are not counted).
    async fn start(client: &Client, ns: &str) -> Result<PodWatch, Error> {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let seen = Arc::new(Mutex::new((BTreeSet::new(), BTreeSet::new())));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut ready = Some(ready_tx);
                // The pods of the first list; a later list (the watch restarted) counts those it
                // brings that were not in it, as any event does.
                let mut before = BTreeSet::new();
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(Event::InitApply(p)) if ready.is_some() => {
                            before.insert(p.uid().unwrap_or_default());
                        }
                        Ok(Event::InitDone) => {
                            if let Some(r) = ready.take() {
                                let _ = r.send(());
                            }
                        }
                        Ok(Event::Apply(p) | Event::InitApply(p)) => {
                            let uid = p.uid().unwrap_or_default();
                            if before.contains(&uid) {
                                continue;
                            }
                            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                            if p.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
                                seen.1.insert(uid.clone());
                            }
                            seen.0.insert(uid);
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .map_err(|_| "the pod watch did not list within 60 s".to_string())?
            .map_err(|_| "the pod watch ended".to_string())?;
        Ok(PodWatch { task, seen })
    }

    /// Pods created, pods scheduled.
    fn stop(self) -> (usize, usize) {
        self.task.abort();
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        (seen.0.len(), seen.1.len())
    }
}

/// The ready addresses of each Service, from its EndpointSlices, as kube-proxy would route.
#[derive(Clone)]
struct Endpoints {
    by_service: Arc<Mutex<HashMap<String, Vec<String>>>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Endpoints {
    async fn start(client: &Client, ns: &str) -> Result<Endpoints, Error> {
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        let by_service = Arc::new(Mutex::new(HashMap::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let by_service = by_service.clone();
            async move {
                let mut ready = Some(ready_tx);
                // Slice name → (its Service, its ready addresses).
                let mut slices: HashMap<String, (String, Vec<String>)> = HashMap::new();
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(Event::Apply(s) | Event::InitApply(s)) => {
                            let service = s
                                .labels()
                                .get("kubernetes.io/service-name")
                                .cloned()
                                .unwrap_or_default();
                            let ready_ips = s
                                .endpoints
                                .iter()
                                .flatten()
                                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                                .flat_map(|e| e.addresses.iter().cloned())
                                .collect();
                            slices.insert(s.name_any(), (service, ready_ips));
                        }
                        Ok(Event::Delete(s)) => {
                            slices.remove(&s.name_any());
                        }
                        Ok(Event::InitDone) => {
                            if let Some(r) = ready.take() {
                                let _ = r.send(());
                            }
                        }
                        Ok(Event::Init) => slices.clear(),
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    }
                    let mut now: HashMap<String, Vec<String>> = HashMap::new();
                    for (service, ips) in slices.values() {
                        now.entry(service.clone())
                            .or_default()
                            .extend(ips.iter().cloned());
                    }
                    *by_service.lock().unwrap_or_else(|e| e.into_inner()) = now;
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .map_err(|_| "the EndpointSlice watch did not list within 60 s".to_string())?
            .map_err(|_| "the EndpointSlice watch ended".to_string())?;
        Ok(Endpoints {
            by_service,
            task: Arc::new(task),
        })
    }

    fn ready(&self, service: &str) -> Vec<String> {
        self.by_service
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(service)
            .cloned()
            .unwrap_or_default()
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// One thread per workload, each sending a request every [`PROBE_EVERY`] to the next of its Service's
/// ready addresses; a workload with none counts a failure, as a Service without endpoints refuses.
struct Prober {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    sent: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Prober {
    fn start(endpoints: &Endpoints, services: Vec<String>) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let threads = services
            .into_iter()
            .map(|service| {
                let (stop, sent, failed, endpoints) =
                    (stop.clone(), sent.clone(), failed.clone(), endpoints.clone());
                std::thread::spawn(move || {
                    let mut next = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let ips = endpoints.ready(&service);
                        let ok = !ips.is_empty() && {
                            next = next.wrapping_add(1);
                            testenv::http_get_at(&ips[next % ips.len()], 8080, "/env")
                                .is_some_and(|(status, _)| status == 200)
                        };
                        sent.fetch_add(1, Ordering::Relaxed);
                        if !ok {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        std::thread::sleep(PROBE_EVERY);
                    }
                })
            })
            .collect();
        Prober {
            stop,
            threads,
            sent,
            failed,
        }
    }

    /// Requests sent, requests failed.
    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        (
            self.sent.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

impl Strategy {
    /// The rows of R1's table.
    const ROWS: [&str; 9] = [
        "every Deployment's pods on the new config",
        "one Deployment's pods on it (median)",
        "the StatefulSet's pods on it",
        "ReplicaSets created",
        "revisions created",
        "pods created",
        "pods scheduled",
        "pod IPs changed",
        "probes failed / sent",
    ];

    /// Its column of R1's table: times as medians of the changes, counts summed over them.
    fn cells(&self) -> [String; 9] {
        let sum = |f: fn(&Change) -> usize| self.changes.iter().map(f).sum::<usize>().to_string();
        let probes = |f: fn(&Change) -> u64| self.changes.iter().map(f).sum::<u64>();
        let median_of = |f: fn(&Change) -> f64| median(&self.changes.iter().map(f).collect::<Vec<_>>());
        [
            format!("{:.1} s", self.deployments_all_s),
            format!("{:.1} s", median_of(|c| c.deployment_median_s)),
            format!("{:.1} s", self.statefulset_s),
            sum(|c| c.replica_sets_created),
            sum(|c| c.revisions_created),
            sum(|c| c.pods_created),
            sum(|c| c.pods_scheduled),
            sum(|c| c.ips_changed),
            format!("{} / {}", probes(|c| c.probes_failed), probes(|c| c.probes)),
        ]
    }
}

impl Comparison {
    /// The figures as docs/benchmarks.md shows them.
    pub fn markdown(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("R1 skipped: no real node ({why})");
        }
        let mut t = format!(
            "R1: {} Deployments of {} pods and a StatefulSet of {}, one config change at a time \
             (median of {} changes; counts summed)\n\n\
             | | rolling update | in place |\n|---|---|---|\n",
            self.deployments,
            self.replicas,
            self.replicas,
            self.rollout.changes.len()
        );
        let (rollout, in_place) = (self.rollout.cells(), self.in_place.cells());
        for ((name, a), b) in Strategy::ROWS.iter().zip(rollout).zip(in_place) {
            t.push_str(&format!("| {name} | {a} | {b} |\n"));
        }
        t
    }

    /// Under `--smoke`: every change measured for both strategies, and in place with no new pod,
    /// ReplicaSet or revision.
    pub fn smoke_check(&self) -> Result<(), String> {
        if self.skipped.is_some() {
            return Ok(());
        }
        for (label, s) in [("rollout", &self.rollout), ("in place", &self.in_place)] {
            if s.changes.is_empty()
                || s.changes
                    .iter()
                    .any(|c| !c.deployments_all_s.is_finite() || c.probes == 0)
            {
                return Err(format!("R1 {label}: a change was not measured: {s:?}"));
            }
        }
        let created: usize = self
            .in_place
            .changes
            .iter()
            .map(|c| c.pods_created + c.replica_sets_created + c.revisions_created + c.ips_changed)
            .sum();
        if created > 0 {
            return Err(format!(
                "R1 in place created pods, ReplicaSets or revisions: {:?}",
                self.in_place
            ));
        }
        Ok(())
    }
}
