//! S9, the chaos soak: wave (two replicas, leader election) keeps 200 workloads current while their
//! config changes at random and faults fire at random. At the end, the invariants of the fault suite
//! (`tests/e2e/faults.rs`) are checked and counted.
//!
//! ```text
//! testenv up --audit (watch cache off, so a compaction makes watches expire) ─► ConfigMaps + Deployments
//! ─► two wave replicas ─► every workload hashed
//! ─► for --chaos-seconds: a config change every 300 ms; every --chaos-fault-every seconds one fault:
//!      apiserver killed and restarted · etcd restarted · etcd compacted + apiserver restarted (410 Gone)
//!      · the leader frozen past its lease · a replica SIGKILLed;   exited replicas are restarted
//! ─► quiet: wait (at most 120 s) until every workload carries the hash of its current config
//! ─► from the audit log: writes per workload, repeated rollouts (a hash written twice), lost changes
//! ```
//!
//! Every config value is new, so the same hash can never legitimately be written twice to one workload.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::json;
use wave_core::hash::{self, Content, Fetched, Hashing};
use wave_core::kind::WorkloadKind;
use wave_core::refs::CrossNamespace;
use wave_core::workload::Workload;

use futures::future::LocalBoxFuture;

use super::{Context, Figures};
use crate::harness::controller::{Profile, Running};
use crate::harness::session::cluster_dir;

const NS: &str = "chaos";

/// What S9 runs.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// How long the soak runs, in seconds; 0 skips it.
    pub seconds: u64,
    /// Opted-in Deployments (one ConfigMap per ten of them).
    pub workloads: usize,
    /// Seconds between faults.
    pub fault_every: u64,
    /// The seed of the faults and changes, to repeat a run; a new one from the clock when `None`.
    pub seed: Option<u64>,
    /// The wave binary (S9 runs wave alone).
    pub wave_bin: PathBuf,
}

/// S9 as [`super::REGISTRY`] runs it: skipped (`None`) when its seconds are 0.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move {
        let sizes = &ctx.sizes.chaos;
        if sizes.seconds == 0 {
            return Ok(Figures::Chaos(None));
        }
        eprintln!("== S9 chaos soak (wave, {} s)", sizes.seconds);
        run(sizes).await.map(|r| Figures::Chaos(Some(r)))
    })
}
const CONFIG_HASH: &str = "wave.pusher.com/config-hash";
/// The lease of the two replicas; a frozen leader is held for longer than this.
const LEASE_SECONDS: u64 = 4;
/// How long the end state may take to settle.
const QUIET_TIMEOUT: Duration = Duration::from_secs(120);

/// The S9 figures.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct ChaosResult {
    pub seconds: u64,
    pub workloads: usize,
    /// Faults injected (and survived: wave converged afterwards), by kind.
    pub faults: BTreeMap<String, u32>,
    pub faults_survived: u32,
    /// Config changes the apiserver accepted.
    pub changes_applied: u64,
    /// Successful writes of a hash, all workloads.
    pub workload_writes: u64,
    /// Workloads that do not carry the hash of their current config at the end. Target 0.
    pub lost_changes: usize,
    /// Writes of a hash the workload had already been given. Target 0.
    pub repeated_rollouts: u64,
    /// Replicas restarted after they exited (a lost lease) or were killed.
    pub replica_restarts: u32,
    /// Whether the end state did not settle within 120 s.
    pub timed_out: bool,
}

/// A small deterministic generator (xorshift64*), so that a run can be repeated with its seed.
pub(crate) struct Rng(u64);

impl Rng {
    /// From a non-zero seed.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One wave replica, restarted when it exits.
struct Replica {
    profile: Profile,
    kubeconfig: std::path::PathBuf,
    log: std::path::PathBuf,
    metrics_port: u16,
    running: Option<Running>,
}

impl Replica {
    fn new(sizes: &Sizes, cluster: &testenv::Cluster, name: &str) -> Replica {
        let metrics_port = testenv::free_port();
        let profile = Profile {
            name: "wave",
            bin: sizes.wave_bin.clone(),
            args: vec![
                "run".into(),
                format!("--namespaces={NS}"),
                "--update-rate=inf".into(),
                "--leader-election".into(),
                format!("--leader-election-lease-duration={LEASE_SECONDS}"),
                format!("--leader-election-namespace={NS}"),
                // Every ConfigMap here changes far more often than the default flap threshold allows,
                // so the breaker holds most rollouts; a short quiet period lets the end state settle
                // within the 120 s the soak waits, with the breaker still on.
                "--flap-quiet=10s".into(),
                format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
                format!("--health-bind-address=127.0.0.1:{}", testenv::free_port()),
                "--log-level=warn".into(),
            ],
            defaults: Vec::new(),
            fixed_limit: None,
            fixed_rate: None,
            go_metrics_port: None,
            opt_in: ("wave.pusher.com/update-on-config-change", "true"),
            hashes_at_start: true,
            pacing: Vec::new(),
        };
        Replica {
            profile,
            kubeconfig: cluster.user_kubeconfig(&format!("chaos-{name}"), Some("system:masters")),
            log: cluster.dir().join("logs").join(format!("wave-{name}.log")),
            metrics_port,
            running: None,
        }
    }

    /// Starts it if it is not running; whether it had to.
    fn ensure(&mut self) -> Result<bool, String> {
        if self.running.as_mut().is_some_and(Running::is_alive) {
            return Ok(false);
        }
        let started = Running::start(&self.profile, &self.kubeconfig, &self.log)
            .map_err(|e| format!("starting wave: {e}"))?;
        self.running = Some(started);
        Ok(true)
    }

    fn leads(&self) -> bool {
        testenv::http_get(self.metrics_port, "/metrics").is_some_and(|(_, body)| {
            body.lines()
                .any(|l| l.starts_with("wave_leader ") && l.ends_with(" 1"))
        })
    }

    fn signal(&self, sig: &str) {
        if let Some(r) = &self.running {
            let _ = std::process::Command::new("kill")
                .args([sig, &r.pid().to_string()])
                .status();
        }
    }
}

/// Runs S9 on a control plane of its own. When it fails, the error names the seed that repeats it
/// (`--chaos-seed`), and the control plane's and the replicas' logs are kept (`hack/testenv down`
/// removes the cluster's directory).
pub async fn run(sizes: &Sizes) -> Result<ChaosResult, String> {
    let dir = cluster_dir("chaos");
    let cluster = testenv::Cluster::start_in(
        dir.clone(),
        &["--audit", "--nodes", "1", "--apiserver-arg=--watch-cache=false"],
    );
    let seed = sizes.seed.unwrap_or_else(clock_seed);
    eprintln!("  S9 seed {seed}");
    let result = run_on(sizes, &cluster, seed).await.map_err(|e| {
        let kept = dir.with_file_name(format!("wave-bench-{}-chaos-logs", std::process::id()));
        let logs = match copy_logs(&dir.join("logs"), &kept) {
            Ok(()) => format!("the control plane's logs are kept in {}", kept.display()),
            Err(err) => format!("keeping the control plane's logs failed: {err}"),
        };
        format!("{e}\n  ({logs}; --chaos-seed {seed} repeats this run's faults and changes)")
    });
    cluster.stop();
    result
}

/// A non-zero seed from the clock.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1
}

/// Copies the files of `from` (one level: `logs/` holds one file per component) into `to`.
fn copy_logs(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

async fn run_on(sizes: &Sizes, cluster: &testenv::Cluster, seed: u64) -> Result<ChaosResult, String> {
    let client = cluster.client().await;
    let configs = (sizes.workloads / 10).max(1);
    populate(&client, sizes.workloads, configs).await?;
    let mut replicas = [
        Replica::new(sizes, cluster, "a"),
        Replica::new(sizes, cluster, "b"),
    ];
    for r in &mut replicas {
        r.ensure()?;
    }
    let mut result = ChaosResult {
        seconds: sizes.seconds,
        workloads: sizes.workloads,
        ..Default::default()
    };
    if !settle(&client, QUIET_TIMEOUT).await? {
        let stale = stale(&client).await?;
        let logs: Vec<String> = replicas.iter().map(|r| tail(&r.log)).collect();
        return Err(format!(
            "the workloads were not all hashed within 120 s of start: {} stale, e.g. {:?}\n{}",
            stale.len(),
            stale.first(),
            logs.join("\n")
        ));
    }

    let mut rng = Rng::new(seed);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let end = Instant::now() + Duration::from_secs(sizes.seconds);
    let mut next_fault = Instant::now() + Duration::from_secs(sizes.fault_every);
    let mut version = 0u64;
    while Instant::now() < end {
        version += 1;
        let name = format!("cfg-{}", rng.below(configs));
        let body = Patch::Merge(json!({"data": {"v": format!("{version}")}}));
        let params = PatchParams::default();
        let patched = tokio::time::timeout(Duration::from_secs(5), cms.patch(&name, &params, &body)).await;
        if matches!(patched, Ok(Ok(_))) {
            result.changes_applied += 1;
        }
        for r in &mut replicas {
            if r.ensure()? {
                result.replica_restarts += 1;
            }
        }
        if Instant::now() >= next_fault {
            let fault = inject(cluster, &mut replicas, &mut rng).await?;
            *result.faults.entry(fault.into()).or_default() += 1;
            next_fault = Instant::now() + Duration::from_secs(sizes.fault_every);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for r in &mut replicas {
        if r.ensure()? {
            result.replica_restarts += 1;
        }
    }
    result.timed_out = !settle(&client, QUIET_TIMEOUT).await?;
    result.lost_changes = stale(&client).await?.len();
    if result.lost_changes == 0 {
        result.faults_survived = result.faults.values().sum();
    }
    let (writes, repeated) = writes(cluster);
    result.workload_writes = writes;
    result.repeated_rollouts = repeated;
    eprintln!(
        "  S9 {} s: {} faults {:?}, {} changes, {} writes, {} lost, {} repeated",
        result.seconds,
        result.faults.values().sum::<u32>(),
        result.faults,
        result.changes_applied,
        result.workload_writes,
        result.lost_changes,
        result.repeated_rollouts
    );
    Ok(result)
}

/// The last lines of a log, for an error message.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "{}:\n{}",
        log.display(),
        lines[lines.len().saturating_sub(15)..].join("\n")
    )
}

/// Injects one fault at random, and lifts it; returns its name.
async fn inject(
    cluster: &testenv::Cluster,
    replicas: &mut [Replica; 2],
    rng: &mut Rng,
) -> Result<&'static str, String> {
    // The controls block until the component is down or ready again, so they run off the runtime.
    let faults = cluster.faults();
    let control = |f: Box<dyn FnOnce(&testenv::Faults) + Send>| {
        let faults = faults.clone();
        async move {
            tokio::task::spawn_blocking(move || f(&faults))
                .await
                .map_err(|e| format!("injecting a fault failed: {e}"))
        }
    };
    Ok(match rng.below(5) {
        0 => {
            control(Box::new(|f| f.kill("kube-apiserver"))).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            control(Box::new(|f| f.start("kube-apiserver"))).await?;
            "apiserver killed"
        }
        1 => {
            control(Box::new(|f| {
                f.kill("etcd");
                f.start("etcd");
            }))
            .await?;
            "etcd restarted"
        }
        2 => {
            control(Box::new(|f| {
                f.compact_etcd();
                f.kill("kube-apiserver");
                f.start("kube-apiserver");
            }))
            .await?;
            "watches expired (410 Gone)"
        }
        3 => {
            let Some(leader) = replicas.iter().position(Replica::leads) else {
                return Ok("no leader to freeze");
            };
            replicas[leader].signal("-STOP");
            tokio::time::sleep(Duration::from_secs(LEASE_SECONDS + 2)).await;
            replicas[leader].signal("-CONT");
            "leader frozen past its lease"
        }
        _ => {
            let victim = rng.below(2);
            replicas[victim].signal("-KILL");
            "replica killed"
        }
    })
}

async fn populate(client: &Client, workloads: usize, configs: usize) -> Result<(), String> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NS}})).map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map_err(|e| format!("creating namespace {NS}: {e}"))?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for i in 0..configs {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cfg-{i}")}, "data": {"v": "0"}}))
                .map_err(|e| e.to_string())?;
        cms.create(&PostParams::default(), &cm)
            .await
            .map_err(|e| format!("creating cfg-{i}: {e}"))?;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for j in 0..workloads {
        let name = format!("app-{j}");
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"wave.pusher.com/update-on-config-change": "true"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "nginx",
                                           "envFrom": [{"configMapRef": {"name": format!("cfg-{}", j % configs)}}]}]}}}
        }))
        .map_err(|e| e.to_string())?;
        deployments
            .create(&PostParams::default(), &d)
            .await
            .map_err(|e| format!("creating {name}: {e}"))?;
    }
    Ok(())
}

/// The workloads that do not carry the hash of their current config, computed by wave's own rule.
async fn stale(client: &Client) -> Result<Vec<String>, String> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default();
    let configs = cms
        .list(&lp)
        .await
        .map_err(|e| format!("listing ConfigMaps: {e}"))?;
    let mut fetched = Fetched::new();
    for cm in &configs.items {
        let key = wave_core::refs::ConfigKey::new(wave_core::refs::ConfigKind::ConfigMap, NS, cm.name_any());
        fetched.insert(key, std::sync::Arc::new(Content::from_config_map(cm)));
    }
    let list = deployments
        .list(&lp)
        .await
        .map_err(|e| format!("listing Deployments: {e}"))?;
    let mut out = Vec::new();
    for d in list.items {
        let value = serde_json::to_value(&d).map_err(|e| e.to_string())?;
        let w = Workload::from_object(WorkloadKind::DEPLOYMENT, d.metadata.clone(), &value)
            .map_err(|e| e.to_string())?;
        let refs = w.references(CrossNamespace::Deny);
        let desired = hash::config_hash(NS, &refs, &fetched, &Hashing::Plain);
        if w.current_hash() != Some(desired.as_str()) {
            out.push(w.id.name.clone());
        }
    }
    Ok(out)
}

/// Waits until no workload is stale; whether that happened within `timeout`.
async fn settle(client: &Client, timeout: Duration) -> Result<bool, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match stale(client).await {
            Ok(s) if s.is_empty() => return Ok(true),
            // The apiserver may still be coming back from the last fault.
            Ok(_) | Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Ok(_) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// Successful hash writes to the workloads by the replicas, and how many repeated a hash the workload
/// had already been given.
fn writes(cluster: &testenv::Cluster) -> (u64, u64) {
    let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
    let (mut writes, mut repeated) = (0, 0);
    for patch in cluster.workload_patches(NS, CONFIG_HASH) {
        let Some(hash) = patch
            .annotation
            .filter(|_| patch.code == 200 && patch.user.starts_with("chaos-"))
        else {
            continue;
        };
        writes += 1;
        if !seen.entry(patch.name).or_default().insert(hash) {
            repeated += 1;
        }
    }
    (writes, repeated)
}
