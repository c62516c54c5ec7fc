//! One controller's run: a fresh control plane, the same objects for every controller, and the six
//! scenarios of docs/benchmarks.md in a fixed order. Every wait has a timeout.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::Args;
use crate::audit::{self, Counts};
use crate::controller::{self, Profile, Running};

/// The annotation wave and Wave write.
const CONFIG_HASH: &str = "wave.pusher.com/config-hash";
/// S8's namespace.
const BAD_NS: &str = "bench-bad";
/// S8: the Deployments' `progressDeadlineSeconds`.
const BAD_PROGRESS_DEADLINE: Duration = Duration::from_secs(20);
/// Requests in flight while populating.
const CREATE_CONCURRENCY: usize = 16;
/// The namespace of the readiness probe; its requests are left out of every count.
pub(crate) const CANARY_NS: &str = "bench-canary";

type Error = String;

/// Everything measured for one controller.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ControllerResult {
    pub s1: Latency,
    pub s2: Vec<Memory>,
    pub s3: FanOut,
    pub s4: ApiCost,
    pub s5: Restart,
    pub s6: Storm,
    pub s7: Storm,
    pub s8: BadConfig,
    /// S1's latencies, for the CDF chart.
    #[serde(skip)]
    pub s1_samples_ms: Vec<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Updates whose change never reached the template within 30 s.
    pub missed: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Memory {
    pub payload_kib: usize,
    pub unreferenced_secrets: usize,
    pub peak_rss_mib: f64,
    pub steady_rss_mib: f64,
    pub idle_cpu_seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FanOut {
    pub deployments: usize,
    pub changed: usize,
    pub all_changed_ms: f64,
    pub workload_writes: u64,
    /// The 120 s wait ended before every Deployment changed: `changed` and `all_changed_ms` are partial.
    pub timed_out: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ApiCost {
    pub startup_requests: u64,
    pub startup: Counts,
    pub per_change_requests: f64,
    pub per_change_workload_writes: f64,
    pub idle_requests_per_minute: f64,
    pub idle: Counts,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Restart {
    pub workload_writes: u64,
    pub ready_ms: f64,
}

/// S8: a config change that makes every pod using it unready.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BadConfig {
    pub deployments: usize,
    /// wave's --max-concurrent-rollouts (0: the controller cannot pace).
    pub pacing: usize,
    /// Deployments whose template changed after the bad change.
    pub rolled: usize,
    /// Of those, the ones whose rollout did not complete: left with pods that never became ready.
    pub broken: usize,
    /// The wait for templates to stop changing gave up.
    pub timed_out: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Storm {
    pub deployments: usize,
    pub changes: usize,
    pub replicasets_per_deployment_mean: f64,
    pub replicasets_per_deployment_max: u64,
    pub workload_writes: u64,
    /// Templates were still changing when the 10-minute wait ended: the counts are partial.
    pub timed_out: bool,
}

/// Runs every scenario for `profile` on a control plane of its own.
pub async fn run(args: &Args, profile: &Profile) -> Result<ControllerResult, Error> {
    let dir = std::env::temp_dir().join(format!("wave-bench-{}-{}", std::process::id(), profile.name));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit", "--nodes", "4"]);
    let result = run_on(args, profile, &cluster).await;
    cluster.stop();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_on(
    args: &Args,
    profile: &Profile,
    cluster: &testenv::Cluster,
) -> Result<ControllerResult, Error> {
    let client = cluster.client().await;
    let user = format!("bench-{}", profile.name);
    let kubeconfig = cluster.user_kubeconfig(&user, Some("system:masters"));
    let log = cluster.dir().join("logs").join(format!("{}.log", profile.name));
    let audit_log = cluster.dir().join("logs/audit.log");
    let cost = |from, to| audit::count(&audit_log, &user, CANARY_NS, from, to);

    let t = Instant::now();
    populate(&client, args, profile).await?;
    eprintln!("  populated in {:.0?}", t.elapsed());
    let mut changes = TemplateChanges::start(&client).await?;
    let mut r = ControllerResult::default();

    // S4 at startup: until the controller handles a change (and, for hashing controllers, has hashed
    // every workload).
    let started = Timestamp::now();
    let mut running = Running::start(profile, &kubeconfig, &log).map_err(|e| format!("starting: {e}"))?;
    probe_ready(&client, &mut changes, &mut running).await?;
    if profile.hashes_at_start {
        wait_all_hashed(&client, args).await?;
    }
    let settled = Timestamp::now();
    r.s4.startup = cost(started, settled);
    r.s4.startup_requests = audit::total(&r.s4.startup);

    if !args.safety_only {
        spread_and_fan_out(args, &client, &mut changes, &cost, &mut r).await?;
    }

    // S6: 10 changes spread over 2 s; S7: one change per second for `flap_seconds`.
    r.s6 = churn(
        &client,
        &mut changes,
        &cost,
        ("bench-storm", "storm"),
        args.storm_deployments,
        args.storm_changes,
        Duration::from_secs(2) / args.storm_changes as u32,
    )
    .await?;
    eprintln!(
        "  S6 {:.1} ReplicaSets per Deployment",
        r.s6.replicasets_per_deployment_mean
    );
    r.s7 = churn(
        &client,
        &mut changes,
        &cost,
        ("bench-flap", "flap"),
        args.flap_deployments,
        args.flap_seconds as usize,
        Duration::from_secs(1),
    )
    .await?;
    eprintln!(
        "  S7 {:.1} ReplicaSets per Deployment",
        r.s7.replicasets_per_deployment_mean
    );

    // S8, with the controller restarted with whatever it has to pace rollouts.
    running.stop();
    running = Running::start_with(profile, &profile.pacing, &kubeconfig, &log)
        .map_err(|e| format!("restarting for S8: {e}"))?;
    probe_ready(&client, &mut changes, &mut running).await?;
    r.s8 = bad_config(&client, &mut changes, args, profile).await?;
    eprintln!(
        "  S8 {} of {} Deployments rolled, {} left broken",
        r.s8.rolled, r.s8.deployments, r.s8.broken
    );
    if args.safety_only {
        running.stop();
        return Ok(r);
    }

    // S2 per payload size, with S5 (restart with nothing changed) and S4 idle on the first.
    for (i, &kib) in args.payload_kib.iter().enumerate() {
        fill_unreferenced(&client, args.unreferenced, kib).await?;
        running.stop();
        let restarted = Timestamp::now();
        let t0 = Instant::now();
        running = Running::start(profile, &kubeconfig, &log).map_err(|e| format!("restarting: {e}"))?;
        let ready_at = probe_ready(&client, &mut changes, &mut running).await?;
        let idle_from = Timestamp::now();
        let cpu0 = controller::cpu_seconds(running.pid()).unwrap_or_default();
        tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
        let cpu1 = controller::cpu_seconds(running.pid()).unwrap_or_default();
        let idle_to = Timestamp::now();
        let (rss, hwm) = controller::rss(running.pid()).ok_or("the controller exited")?;
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        r.s2.push(Memory {
            payload_kib: kib,
            unreferenced_secrets: args.unreferenced,
            peak_rss_mib: mib(hwm),
            steady_rss_mib: mib(rss),
            idle_cpu_seconds: cpu1 - cpu0,
        });
        eprintln!(
            "  S2 {kib} KiB: peak {:.1} MiB, steady {:.1} MiB",
            mib(hwm),
            mib(rss)
        );
        if i == 0 {
            r.s5 = Restart {
                workload_writes: audit::workload_writes(&cost(restarted, idle_to)),
                ready_ms: ready_at.saturating_duration_since(t0).as_secs_f64() * 1000.0,
            };
            r.s4.idle = cost(idle_from, idle_to);
            r.s4.idle_requests_per_minute = audit::total(&r.s4.idle) as f64 * 60.0 / args.idle_seconds as f64;
        }
    }
    running.stop();
    Ok(r)
}

/// S1 (one change at a time: latency and cost) and S3 (one Secret shared by `fanout` Deployments).
pub(crate) async fn spread_and_fan_out(
    args: &Args,
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    r: &mut ControllerResult,
) -> Result<(), Error> {
    // S1.
    let from = Timestamp::now();
    let mut samples = Vec::new();
    for k in 0..args.updates {
        let j = k % args.deployments;
        let ns = format!("bench-{}", j % args.namespaces);
        changes.drain();
        if k % 2 == 0 {
            let body = json!({"data": {"app.conf": format!("v{}", k + 1)}});
            patch::<ConfigMap>(client, &ns, &format!("cfg-{j}"), body).await?;
        } else {
            let body = json!({"stringData": {"password": format!("v{}", k + 1)}});
            patch::<Secret>(client, &ns, &format!("sec-{j}"), body).await?;
        }
        let t0 = Instant::now();
        match changes
            .wait_for(&format!("{ns}/app-{j}"), Duration::from_secs(30))
            .await
        {
            Some(at) => samples.push(at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
            None => r.s1.missed += 1,
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // late duplicate writes still count
    let s1_cost = cost(from, Timestamp::now());
    r.s4.per_change_requests = audit::total(&s1_cost) as f64 / args.updates as f64;
    r.s4.per_change_workload_writes = audit::workload_writes(&s1_cost) as f64 / args.updates as f64;
    r.s1 = percentiles(&samples, r.s1.missed);
    r.s1_samples_ms = samples;
    eprintln!(
        "  S1 p50 {:.1} ms p99 {:.1} ms, {} missed",
        r.s1.p50_ms, r.s1.p99_ms, r.s1.missed
    );

    // S3.
    changes.drain();
    let from = Timestamp::now();
    patch::<Secret>(
        client,
        "bench-fanout",
        "shared",
        json!({"stringData": {"password": "changed"}}),
    )
    .await?;
    let t0 = Instant::now();
    let keys: HashSet<String> = (0..args.fanout)
        .map(|k| format!("bench-fanout/fan-{k}"))
        .collect();
    let seen = changes.collect(&keys, Duration::from_secs(120)).await;
    r.s3 = FanOut {
        deployments: args.fanout,
        changed: seen.len(),
        all_changed_ms: seen
            .values()
            .max()
            .map_or(0.0, |at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
        workload_writes: 0,
        timed_out: seen.len() < args.fanout,
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.s3.workload_writes = audit::workload_writes(&cost(from, Timestamp::now()));
    eprintln!(
        "  S3 {} of {} in {:.0} ms",
        r.s3.changed, args.fanout, r.s3.all_changed_ms
    );

    Ok(())
}

fn percentiles(samples: &[f64], missed: usize) -> Latency {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if s.is_empty() {
            f64::NAN
        } else {
            s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
        }
    };
    Latency {
        p50_ms: at(0.50),
        p90_ms: at(0.90),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        missed,
    }
}

/// The same objects for every controller; only the opt-in annotation differs.
pub(crate) async fn populate(client: &Client, args: &Args, profile: &Profile) -> Result<(), Error> {
    let mut namespaces: Vec<String> = (0..args.namespaces).map(|i| format!("bench-{i}")).collect();
    namespaces.extend(
        [
            "bench-fanout",
            "bench-storm",
            "bench-flap",
            BAD_NS,
            "bench-unref",
            CANARY_NS,
        ]
        .map(String::from),
    );
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in &namespaces {
        create(&api, json!({"metadata": {"name": ns}})).await?;
    }
    let (key, value) = profile.opt_in;
    let deployment = |name: &str, env_secret: &str, volume_cm: Option<&str>| {
        let mut spec = json!({
            "containers": [{"name": "app", "image": "registry.invalid/app:1",
                "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": env_secret, "key": "password"}}}]}]
        });
        if let Some(cm) = volume_cm {
            spec["volumes"] = json!([{"name": "cfg", "configMap": {"name": cm}}]);
            spec["containers"][0]["volumeMounts"] = json!([{"name": "cfg", "mountPath": "/etc/app"}]);
        }
        // No replicas: the controllers act on the template; pods would only add scheduler load. A long
        // revision history keeps every ReplicaSet a storm creates countable.
        json!({"metadata": {"name": name, "annotations": {key: value}},
               "spec": {"replicas": 0, "revisionHistoryLimit": 1000, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
    };
    // S6 and S8 run real pods on kwok's nodes: a rollout then takes the time a rollout takes.
    let with_pods = |mut body: serde_json::Value| {
        body["spec"]["replicas"] = json!(1);
        body["spec"]["template"]["spec"]["tolerations"] =
            json!([{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]);
        body
    };
    let mut objects: Vec<(String, &'static str, serde_json::Value)> = Vec::new();
    for j in 0..args.deployments {
        let ns = format!("bench-{}", j % args.namespaces);
        let (cm, sec) = (format!("cfg-{j}"), format!("sec-{j}"));
        objects.push((
            ns.clone(),
            "cm",
            json!({"metadata": {"name": cm}, "data": {"app.conf": "v0"}}),
        ));
        objects.push((
            ns.clone(),
            "secret",
            json!({"metadata": {"name": sec}, "stringData": {"password": "v0"}}),
        ));
        objects.push((ns, "deploy", deployment(&format!("app-{j}"), &sec, Some(&cm))));
    }
    for (ns, secret, prefix, n) in [
        ("bench-fanout", "shared", "fan", args.fanout),
        ("bench-storm", "storm", "storm", args.storm_deployments),
        ("bench-flap", "flap", "flap", args.flap_deployments),
    ] {
        objects.push((
            ns.into(),
            "secret",
            json!({"metadata": {"name": secret}, "stringData": {"password": "v0"}}),
        ));
        for k in 0..n {
            let body = deployment(&format!("{prefix}-{k}"), secret, None);
            let body = if ns == "bench-storm" {
                with_pods(body)
            } else {
                body
            };
            objects.push((ns.into(), "deploy", body));
        }
    }
    objects.push((
        BAD_NS.into(),
        "cm",
        json!({"metadata": {"name": "bad-cfg"}, "data": {"app.conf": "good"}}),
    ));
    objects.push((
        BAD_NS.into(),
        "secret",
        json!({"metadata": {"name": "bad-sec"}, "stringData": {"password": "v0"}}),
    ));
    let bad_hash = bad_hash(&deployment("bad", "bad-sec", Some("bad-cfg")))?;
    for k in 0..args.bad_deployments {
        let mut body = with_pods(deployment(&format!("bad-{k}"), "bad-sec", Some("bad-cfg")));
        body["spec"]["progressDeadlineSeconds"] = json!(BAD_PROGRESS_DEADLINE.as_secs());
        // What makes the change bad for kwok (hack/testenv, stage pod-unready-for-config-hash): the hash
        // wave and Wave write for it, or Reloader's mark of a reload (the bad change is the only one).
        body["spec"]["template"]["metadata"]["annotations"] = json!({
            "testenv.wave/unready-config-hash": bad_hash,
            "testenv.wave/unready-if-annotated": "reloader.stakater.com/last-reloaded-from",
        });
        objects.push((BAD_NS.into(), "deploy", body));
    }
    objects.push((
        CANARY_NS.into(),
        "cm",
        json!({"metadata": {"name": "canary"}, "data": {"n": "0"}}),
    ));
    objects.push((
        CANARY_NS.into(),
        "secret",
        json!({"metadata": {"name": "canary"}, "stringData": {"password": "v0"}}),
    ));
    objects.push((
        CANARY_NS.into(),
        "deploy",
        deployment("canary", "canary", Some("canary")),
    ));
    futures::stream::iter(objects)
        .map(|(ns, kind, body)| {
            let client = client.clone();
            async move {
                match kind {
                    "cm" => create(&Api::<ConfigMap>::namespaced(client, &ns), body).await,
                    "secret" => create(&Api::<Secret>::namespaced(client, &ns), body).await,
                    _ => create(&Api::<Deployment>::namespaced(client, &ns), body).await,
                }
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Replaces the unreferenced Secrets with `count` of `kib` KiB each.
async fn fill_unreferenced(client: &Client, count: usize, kib: usize) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), "bench-unref");
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map_err(|e| format!("deleting the unreferenced Secrets: {e}"))?;
    let t = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                // Distinct bytes per Secret, as release Secrets are: no compression of identical values.
                let payload: Vec<u8> = (0..kib * 1024).map(|b| ((b * 31 + i * 7) % 251) as u8).collect();
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(format!("release-{i}")),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([("release".to_string(), ByteString(payload))])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &secret)
                    .await
                    .map(drop)
                    .map_err(|e| format!("creating an unreferenced Secret: {e}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!("  {count} unreferenced {kib} KiB Secrets in {:.0?}", t.elapsed());
    Ok(())
}

async fn create<K>(api: &Api<K>, body: serde_json::Value) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body).map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(format!("creating {}: {e}", obj.name_any())),
    }
}

async fn patch<K>(client: &Client, ns: &str, name: &str, body: serde_json::Value) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map(drop)
        .map_err(|e| format!("patching {ns}/{name}: {e}"))
}

/// Changes the canary ConfigMap every 250 ms until the controller rolls the canary Deployment; returns
/// when it did. A controller that misses changes made before it listed is caught by the next one.
pub(crate) async fn probe_ready(
    client: &Client,
    changes: &mut TemplateChanges,
    running: &mut Running,
) -> Result<Instant, Error> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut n = 0;
    while Instant::now() < deadline {
        if !running.is_alive() {
            return Err("the controller exited; see its log in the run directory".into());
        }
        changes.drain();
        n += 1;
        patch::<ConfigMap>(client, CANARY_NS, "canary", json!({"data": {"n": n.to_string()}})).await?;
        if let Some(at) = changes
            .wait_for(&format!("{CANARY_NS}/canary"), Duration::from_millis(250))
            .await
        {
            return Ok(at);
        }
    }
    Err("the controller never rolled the canary within 10 minutes".into())
}

pub(crate) async fn wait_all_hashed(client: &Client, args: &Args) -> Result<(), Error> {
    let expected = args.deployments
        + args.fanout
        + args.storm_deployments
        + args.flap_deployments
        + args.bad_deployments
        + 1;
    let api: Api<Deployment> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if hashed(&list.items) >= expected {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err("not every workload was hashed within 15 minutes".into())
}

/// How many of `deployments` carry a config hash.
pub fn hashed(deployments: &[Deployment]) -> usize {
    deployments
        .iter()
        .filter(|d| {
            let t = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
            t.and_then(|m| m.annotations.as_ref())
                .is_some_and(|a| a.contains_key(CONFIG_HASH))
        })
        .count()
}

/// Changes Secret `(namespace, name)` `count` times, `every` apart; then, once no template has changed
/// for 5 s and the Deployment controller has caught up: ReplicaSets created per Deployment, and the
/// controller's workload writes.
async fn churn(
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    (namespace, name): (&str, &str),
    deployments: usize,
    count: usize,
    every: Duration,
) -> Result<Storm, Error> {
    // Count from a settled start: the Deployment controller has acted on every template so far.
    wait_observed(client, namespace).await?;
    let before = replicasets_per_owner(client, namespace).await?;
    changes.drain();
    let from = Timestamp::now();
    for c in 0..count {
        let body = json!({"stringData": {"password": format!("{name}-{c}")}});
        patch::<Secret>(client, namespace, name, body).await?;
        tokio::time::sleep(every).await;
    }
    let quiet = changes
        .quiet(Duration::from_secs(5), Duration::from_secs(600))
        .await;
    wait_observed(client, namespace).await?;
    let after = replicasets_per_owner(client, namespace).await?;
    let created: Vec<u64> = after
        .iter()
        .map(|(owner, n)| n.saturating_sub(before.get(owner).copied().unwrap_or(0)))
        .collect();
    Ok(Storm {
        deployments,
        changes: count,
        replicasets_per_deployment_mean: created.iter().sum::<u64>() as f64 / created.len().max(1) as f64,
        replicasets_per_deployment_max: created.iter().copied().max().unwrap_or(0),
        workload_writes: audit::workload_writes(&cost(from, Timestamp::now())),
        timed_out: !quiet,
    })
}

/// The config hash wave and Wave write on an S8 Deployment once `bad-cfg` holds the bad value
/// (computed beforehand, as `wave hash` would).
fn bad_hash(body: &serde_json::Value) -> Result<String, Error> {
    use wave_core::hash::{Content, Fetched, Hashing, config_hash};
    use wave_core::refs::{ConfigKey, ConfigKind};
    use wave_core::workload::{Workload, WorkloadKind};
    let meta = serde_json::from_value(body["metadata"].clone()).map_err(|e| e.to_string())?;
    let mut w = Workload::from_object(WorkloadKind::DEPLOYMENT, meta, body).map_err(|e| e.to_string())?;
    w.id.namespace = BAD_NS.into();
    w.annotations
        .insert("wave.pusher.com/update-on-config-change".into(), "true".into());
    let content = |k: &str, v: &str| {
        std::sync::Arc::new(Content::new(BTreeMap::from([(k.into(), v.as_bytes().to_vec())])))
    };
    let fetched = Fetched::from([
        (
            ConfigKey::new(ConfigKind::ConfigMap, BAD_NS, "bad-cfg"),
            content("app.conf", "bad"),
        ),
        (
            ConfigKey::new(ConfigKind::Secret, BAD_NS, "bad-sec"),
            content("password", "v0"),
        ),
    ]);
    Ok(config_hash(BAD_NS, &w.references(), &fetched, &Hashing::Plain))
}

/// Whether a Deployment is still rolling, as `kubectl rollout status` decides it (a rollout past its
/// progress deadline is not complete either).
fn is_rolling(d: &Deployment) -> bool {
    let Some(status) = &d.status else { return true };
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    status.observed_generation < d.metadata.generation
        || updated < replicas
        || status.replicas.unwrap_or(0) > updated
        || status.available_replicas.unwrap_or(0) < updated
}

/// S8: every Deployment done, then one change that makes every pod that uses it unready. Once every
/// rollout has had its progress deadline, and templates stopped changing: how many rolled, and how many
/// were left broken.
async fn bad_config(
    client: &Client,
    changes: &mut TemplateChanges,
    args: &Args,
    profile: &Profile,
) -> Result<BadConfig, Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), BAD_NS);
    let deadline = Instant::now() + Duration::from_secs(600);
    let before: HashMap<String, Option<i64>> = loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if list.items.len() == args.bad_deployments && !list.items.iter().any(is_rolling) {
            break list
                .items
                .iter()
                .map(|d| (d.name_any(), d.metadata.generation))
                .collect();
        }
        if Instant::now() > deadline {
            return Err("the S8 Deployments were not all rolled out within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    changes.drain();
    patch::<ConfigMap>(client, BAD_NS, "bad-cfg", json!({"data": {"app.conf": "bad"}})).await?;
    // Every rollout gets its progress deadline, and a controller that paces the time to see a failure.
    tokio::time::sleep(BAD_PROGRESS_DEADLINE + Duration::from_secs(20)).await;
    let quiet = changes
        .quiet(Duration::from_secs(15), Duration::from_secs(600))
        .await;
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let rolled: Vec<&Deployment> = list
        .items
        .iter()
        .filter(|d| before.get(&d.name_any()).copied().flatten() != d.metadata.generation)
        .collect();
    Ok(BadConfig {
        deployments: args.bad_deployments,
        pacing: if profile.pacing.is_empty() {
            0
        } else {
            args.bad_pacing
        },
        rolled: rolled.len(),
        broken: rolled.iter().filter(|d| is_rolling(d)).count(),
        timed_out: !quiet,
    })
}

/// Waits until the Deployment controller has seen the last template of every Deployment in `ns`, so
/// that every ReplicaSet it will create exists.
async fn wait_observed(client: &Client, ns: &str) -> Result<(), Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let behind = list.items.iter().any(|d| {
            let observed = d.status.as_ref().and_then(|s| s.observed_generation);
            observed < d.metadata.generation
        });
        if !behind {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "the Deployment controller did not catch up in {ns} within 5 minutes"
    ))
}

async fn replicasets_per_owner(client: &Client, ns: &str) -> Result<HashMap<String, u64>, Error> {
    let list = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut per = HashMap::new();
    for rs in list.items {
        if let Some(owner) = rs.owner_references().first() {
            *per.entry(owner.name.clone()).or_default() += 1;
        }
    }
    Ok(per)
}

/// Every change of a Deployment's pod template, as `namespace/name` and when it was seen.
pub(crate) struct TemplateChanges {
    rx: mpsc::UnboundedReceiver<(String, Instant)>,
}

impl TemplateChanges {
    pub(crate) async fn start(client: &Client) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let api: Api<Deployment> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut last: HashMap<String, u64> = HashMap::new();
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let (d, initial) = match event {
                    Ok(Event::Apply(d)) => (d, false),
                    Ok(Event::InitApply(d)) => (d, true),
                    Ok(Event::InitDone) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let key = format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
                let mut h = std::collections::hash_map::DefaultHasher::new();
                serde_json::to_string(&d.spec.map(|s| s.template))
                    .unwrap_or_default()
                    .hash(&mut h);
                let fp = h.finish();
                if last.insert(key.clone(), fp).is_some_and(|old| old != fp) && !initial {
                    let _ = tx.send((key, Instant::now()));
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .map_err(|_| "the Deployment watch did not list within 60 s".to_string())?
            .map_err(|_| "the Deployment watch ended".to_string())?;
        Ok(Self { rx })
    }

    fn drain(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }

    /// When `key` next changes, if within `timeout`.
    async fn wait_for(&mut self, key: &str, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((k, at))) if k == key => return Some(at),
                Ok(Some(_)) => continue,
                _ => return None,
            }
        }
    }

    /// The first change of each of `keys`, until all changed or `timeout` passed.
    async fn collect(&mut self, keys: &HashSet<String>, timeout: Duration) -> HashMap<String, Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = HashMap::new();
        while seen.len() < keys.len() {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((k, at))) if keys.contains(&k) => {
                    seen.entry(k).or_insert(at);
                }
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
        seen
    }

    /// Returns once no template changed for `quiet` (true), or after `limit` (false).
    async fn quiet(&mut self, quiet: Duration, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < end {
            match tokio::time::timeout(quiet, self.rx.recv()).await {
                Ok(Some(_)) => continue,
                _ => return true,
            }
        }
        false
    }
}
