//! One controller's run: a fresh control plane, the same objects for every controller, and the
//! scenarios of docs/benchmarks.md in a fixed order. Every wait has a limit ([`Args::limit`]), and a
//! figure whose wait gave up says so (`timed_out`).
//!
//! ```text
//! populate ─► start ─► ready (a ConfigMap and a Secret change handled) ─► hashed ─► settled: S4 startup
//! ─► S1 (raw samples) ─► S3 ─► settled ─► S6 ─► S7 ─► restart with pacing: S8
//! ─► defaults pass: S1 + S3 at shipped settings (or, without it: restart, S8's held-back rollouts written)
//! ─► per payload size: unreferenced Secrets, restart, S5, idle window (RSS each second): S2, S4 idle
//!    (both read over the window's last 2 minutes)
//! ─► unreferenced Secrets deleted, restart: S11 (apiserver killed for 20 s, each trial), last
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodTemplateSpec, Secret};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::mpsc;

use crate::Args;
use crate::audit::{self, Counts};
use crate::controller::{self, Profile, Running};

/// The annotation wave and Wave write.
const CONFIG_HASH: &str = "wave.pusher.com/config-hash";
/// S8's namespace.
const BAD_NS: &str = "bench-bad";
/// S3's namespace.
const FANOUT_NS: &str = "bench-fanout";
/// S8: the Deployments' `progressDeadlineSeconds`.
const BAD_PROGRESS_DEADLINE: Duration = Duration::from_secs(20);
/// S11: how long the kube-apiserver stays down.
const APISERVER_DOWN: Duration = Duration::from_secs(20);
/// The defaults pass: the shipped burst of 100 writes refills in 100 s at 1 write per second (wave and
/// Wave); the pass starts after this long without a template change.
const DEFAULTS_REFILL: Duration = Duration::from_secs(100);
/// After S8: the controller has written what S8 held back once no template changed for this long.
const PENDING_QUIET: Duration = Duration::from_secs(15);
/// Under `--smoke`, the quiet period that stands for `DEFAULTS_REFILL` and `PENDING_QUIET`.
const SMOKE_QUIET: Duration = Duration::from_secs(5);
/// S2 and S4: steady RSS is the median of the samples in this last part of the idle window (at most),
/// and the idle request rate is counted over it.
const STEADY_WINDOW: Duration = Duration::from_secs(120);
/// How long the Deployment controller may take per Deployment to finish rollouts, past 5 minutes: at
/// 20,000 Deployments it finished about 64 rollouts a second and was 773 behind after 300 s; 50 ms
/// each is three times that pace.
const SETTLE_PER_DEPLOYMENT: Duration = Duration::from_millis(50);
/// Requests in flight while populating.
const CREATE_CONCURRENCY: usize = 16;
/// The namespace of the readiness probe; its requests are left out of every count.
pub(crate) const CANARY_NS: &str = "bench-canary";
/// Canary pairs: each readiness probe uses the next, so that no canary object changes often enough to
/// trip wave's flap breaker (more than 10 changes in 10 minutes, per object) and no probe's change waits
/// out the coalescing interval of the previous probe's rollout (per workload).
const CANARIES: usize = 16;
/// Readiness probes so far in this process (the next canary pair to use).
static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

type Error = String;

/// Everything measured for one controller in one round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ControllerResult {
    pub s1: Latency,
    pub s2: Vec<Memory>,
    pub s3: FanOut,
    pub s4: ApiCost,
    pub s5: Restart,
    pub s6: Storm,
    pub s7: Storm,
    pub s8: BadConfig,
    pub s11: ApiserverRestart,
    /// S1 and S3 again with the controller at its shipped defaults (write limits on).
    pub defaults: Option<DefaultsPass>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p90_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Updates whose change never reached the template within 30 s.
    pub missed: usize,
    /// Every update, in order: what changed and how long until the template changed.
    pub samples: Vec<LatencySample>,
}

/// One S1 update.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencySample {
    /// `configmap` or `secret`.
    pub kind: String,
    /// From the update's response to the template change; `None` when it was missed.
    pub ms: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Memory {
    pub payload_kib: usize,
    pub unreferenced_secrets: usize,
    /// The peak since the controller started: `VmHWM` at the end of the idle window, or the highest
    /// sample if that is higher ([`peak_mib`]).
    #[serde(deserialize_with = "nan_if_null")]
    pub peak_rss_mib: f64,
    /// The median of the per-second samples in the last 2 minutes of the idle window.
    #[serde(deserialize_with = "nan_if_null")]
    pub steady_rss_mib: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub idle_cpu_seconds: f64,
    /// `VmRSS` once a second through the idle window.
    pub rss_samples_mib: Vec<f64>,
    /// A Go controller's heap in use and allocated, from its `/metrics`, at the end of the window.
    pub go_heap_inuse_mib: Option<f64>,
    pub go_heap_alloc_mib: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FanOut {
    pub deployments: usize,
    pub changed: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub all_changed_ms: f64,
    /// Successful workload writes.
    pub workload_writes: u64,
    /// Workload writes the apiserver refused (409 Conflict).
    pub refused_writes: u64,
    /// The wait ended before every Deployment changed: `changed` and `all_changed_ms` are partial.
    pub timed_out: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ApiCost {
    pub startup_requests: u64,
    pub startup: Counts,
    #[serde(deserialize_with = "nan_if_null")]
    pub per_change_requests: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub per_change_workload_writes: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub idle_requests_per_minute: f64,
    pub idle: Counts,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Restart {
    pub workload_writes: u64,
    /// From the restart until a ConfigMap change and then a Secret change were both handled.
    #[serde(deserialize_with = "nan_if_null")]
    pub ready_ms: f64,
}

/// S8: a config change that makes every pod using it unready.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
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

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Storm {
    pub deployments: usize,
    pub changes: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub replicasets_per_deployment_mean: f64,
    pub replicasets_per_deployment_max: u64,
    /// Successful workload writes.
    pub workload_writes: u64,
    /// Workload writes the apiserver refused (409 Conflict).
    pub refused_writes: u64,
    /// Templates were still changing when the wait ended: the counts are partial.
    pub timed_out: bool,
}

/// S11: the kube-apiserver killed for 20 s and started again, then one config change.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ApiserverRestart {
    pub trials: usize,
    /// Per trial: from `/readyz` answering ok again to the change reaching the template.
    pub samples_ms: Vec<f64>,
    #[serde(deserialize_with = "nan_if_null")]
    pub median_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Some trial's change had not reached the template when the wait ended.
    pub timed_out: bool,
}

/// S1 and S3 with the controller at its shipped defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DefaultsPass {
    pub s1: Latency,
    pub s3: FanOut,
}

/// serde_json writes a figure that was not measured (NaN) as `null`; `--combine` reads it back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Option::<f64>::deserialize(d).map(|v| v.unwrap_or(f64::NAN))
}

/// Runs every scenario for `profile` on a control plane of its own; `defaults_pass` adds S1 and S3 at
/// the controller's shipped settings.
pub async fn run(args: &Args, profile: &Profile, defaults_pass: bool) -> Result<ControllerResult, Error> {
    let dir = std::env::temp_dir().join(format!("wave-bench-{}-{}", std::process::id(), profile.name));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit", "--nodes", "4"]);
    let result = run_on(args, profile, &cluster, defaults_pass).await;
    let result = result.map_err(|e| format!("{e} (logs: {})", keep_logs(&cluster, args, profile).display()));
    cluster.stop();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Copies a failed run's logs (the controller's, the control plane's, the audit log) to
/// `<out>/failed-<controller>/`, since stopping the control plane removes its directory.
pub(crate) fn keep_logs(cluster: &testenv::Cluster, args: &Args, profile: &Profile) -> std::path::PathBuf {
    let to = args.out.join(format!("failed-{}", profile.name));
    let _ = std::fs::create_dir_all(&to);
    if let Ok(entries) = std::fs::read_dir(cluster.dir().join("logs")) {
        for entry in entries.flatten() {
            let _ = std::fs::copy(entry.path(), to.join(entry.file_name()));
        }
    }
    to
}

async fn run_on(
    args: &Args,
    profile: &Profile,
    cluster: &testenv::Cluster,
    defaults_pass: bool,
) -> Result<ControllerResult, Error> {
    let session = Session::new(cluster, profile).await;
    let (client, kubeconfig, log) = (&session.client, &session.kubeconfig, &session.log);
    let cost = |from, to| session.cost(from, to);

    let t = Instant::now();
    populate(client, args, profile, S1Pods::One).await?;
    wait_settled(client, None, args).await?;
    eprintln!("  populated in {:.0?}", t.elapsed());
    let mut changes = TemplateChanges::start(client).await?;
    let mut r = ControllerResult::default();

    // S4 at startup: until the controller handles a change of each kind (and, for hashing
    // controllers, has hashed every workload).
    let started = Timestamp::now();
    let mut running = Running::start(profile, kubeconfig, log).map_err(|e| format!("starting: {e}"))?;
    probe_ready(client, &mut changes, &mut running, args).await?;
    if profile.hashes_at_start {
        wait_all_hashed(client, args).await?;
    }
    let settled = Timestamp::now();
    r.s4.startup = cost(started, settled);
    r.s4.startup_requests = audit::total(&r.s4.startup);
    // Every rollout the start-up caused is over before anything is timed.
    wait_settled(client, None, args).await?;

    if !args.safety_only {
        let spread = spread_and_fan_out(args, client, &mut changes, &cost, "v").await?;
        r.s4.per_change_requests = spread.per_change_requests;
        r.s4.per_change_workload_writes = spread.per_change_workload_writes;
        (r.s1, r.s3) = (spread.s1, spread.s3);
        // S6 starts once the Deployment controller is done with S3's rollouts, not in their backlog.
        wait_settled(client, Some(FANOUT_NS), args).await?;
    }

    // S6: 10 changes spread over 2 s; S7: one change per second for `flap_seconds`.
    r.s6 = churn(
        client,
        &mut changes,
        &cost,
        profile,
        ("bench-storm", "storm"),
        (args.storm_deployments, args.storm_changes),
        Duration::from_secs(2) / args.storm_changes.max(1) as u32,
        args,
    )
    .await?;
    eprintln!(
        "  S6 {:.1} ReplicaSets per Deployment",
        r.s6.replicasets_per_deployment_mean
    );
    r.s7 = churn(
        client,
        &mut changes,
        &cost,
        profile,
        ("bench-flap", "flap"),
        (args.flap_deployments, args.flap_seconds as usize),
        Duration::from_secs(1),
        args,
    )
    .await?;
    eprintln!(
        "  S7 {:.1} ReplicaSets per Deployment",
        r.s7.replicasets_per_deployment_mean
    );

    // S8, with the controller restarted with whatever it has to pace rollouts.
    running.stop();
    running = Running::start_with(profile, &profile.pacing, kubeconfig, log)
        .map_err(|e| format!("restarting for S8: {e}"))?;
    probe_ready(client, &mut changes, &mut running, args).await?;
    r.s8 = bad_config(client, &mut changes, args, profile).await?;
    eprintln!(
        "  S8 {} of {} Deployments rolled, {} left broken",
        r.s8.rolled, r.s8.deployments, r.s8.broken
    );
    running.stop();
    if args.safety_only {
        return Ok(r);
    }

    if defaults_pass {
        // Timing starts with a full write limiter: the restarted controller first writes what the
        // scenarios before left pending, and those writes spend the burst.
        running = start_and_write_pending(
            &session,
            &mut changes,
            &profile.at_defaults(),
            DEFAULTS_REFILL,
            args,
        )
        .await
        .map_err(|e| format!("restarting at its defaults: {e}"))?;
        let spread = spread_and_fan_out(args, client, &mut changes, &cost, "d").await?;
        r.defaults = Some(DefaultsPass {
            s1: spread.s1,
            s3: spread.s3,
        });
    } else {
        // S5 is a restart with nothing changed, so what is pending is written first, as the defaults
        // pass does at its start. Without this, S5 counted S8's 95 held-back writes in the rounds that
        // run no defaults pass.
        running = start_and_write_pending(&session, &mut changes, profile, PENDING_QUIET, args)
            .await
            .map_err(|e| format!("restarting after S8: {e}"))?;
    }
    wait_settled(client, None, args).await?;
    running.stop();

    // S2 per payload size, with S5 (restart with nothing changed) and S4 idle on the first.
    for (i, &kib) in args.payload_kib.iter().enumerate() {
        fill_unreferenced(client, args.unreferenced, kib).await?;
        let restarted = Timestamp::now();
        let t0 = Instant::now();
        running = Running::start(profile, kubeconfig, log).map_err(|e| format!("restarting: {e}"))?;
        let ready_at = probe_ready(client, &mut changes, &mut running, args).await?;
        let idle_from = Timestamp::now();
        let memory = idle_window(&mut running, profile, args, kib).await?;
        let idle_to = Timestamp::now();
        eprintln!(
            "  S2 {kib} KiB: peak {:.1} MiB, steady {:.1} MiB",
            memory.peak_rss_mib, memory.steady_rss_mib
        );
        r.s2.push(memory);
        if i == 0 {
            r.s5 = Restart {
                workload_writes: audit::workload_writes(&cost(restarted, idle_to)),
                ready_ms: ready_at.saturating_duration_since(t0).as_secs_f64() * 1000.0,
            };
            // S4's idle rate is read over the window's steady part, as S2's steady RSS is: the window
            // starts at readiness, and a controller may still be finishing its start-up then (wave's
            // reads of the restart's 10,000 Secrets fell inside the window in two of three rounds).
            let steady = steady_seconds(args.idle_seconds);
            let steady_from = idle_to
                .checked_sub(SignedDuration::from_secs(steady as i64))
                .map_or(idle_from, |at| at.max(idle_from));
            r.s4.idle = cost(steady_from, idle_to);
            r.s4.idle_requests_per_minute = audit::total(&r.s4.idle) as f64 * 60.0 / steady as f64;
        }
        running.stop();
    }

    // S11 comes last, on S1's cluster state (the unreferenced Secrets gone): with the apiserver down,
    // kwok's nodes stop renewing their leases and the node lifecycle controller marks them unreachable,
    // so pods are left unavailable for a while, and nothing that waits for a settled cluster can follow.
    fill_unreferenced(client, 0, 1).await?;
    running = Running::start(profile, kubeconfig, log).map_err(|e| format!("restarting: {e}"))?;
    probe_ready(client, &mut changes, &mut running, args).await?;
    r.s11 = apiserver_restart(cluster, client, args).await?;
    eprintln!(
        "  S11 median {:.0} ms, max {:.0} ms after /readyz",
        r.s11.median_ms, r.s11.max_ms
    );
    running.stop();
    Ok(r)
}

/// Starts the controller as `profile` says and lets it write what the scenarios before left pending
/// (S8's held-back Deployments, which it writes once it runs without pacing, and S7's settling
/// rollout): returns once no template has changed for `quiet` (`SMOKE_QUIET` under `--smoke`).
async fn start_and_write_pending(
    session: &Session,
    changes: &mut TemplateChanges,
    profile: &Profile,
    quiet: Duration,
    args: &Args,
) -> Result<Running, Error> {
    let mut running =
        Running::start(profile, &session.kubeconfig, &session.log).map_err(|e| format!("starting: {e}"))?;
    probe_ready(&session.client, changes, &mut running, args).await?;
    wait_settled(&session.client, None, args).await?;
    let quiet = if args.smoke { SMOKE_QUIET } else { quiet };
    changes.drain();
    if !changes.quiet(quiet, args.limit(Duration::from_secs(900))).await {
        return Err(format!(
            "the controller kept writing: no {quiet:?} without a template change"
        ));
    }
    Ok(running)
}

/// What a run of one controller on one control plane needs: the admin client, and the controller's own
/// user (so the audit log attributes its requests), kubeconfig and log.
pub(crate) struct Session {
    pub client: Client,
    pub user: String,
    pub kubeconfig: std::path::PathBuf,
    pub log: std::path::PathBuf,
    pub audit_log: std::path::PathBuf,
}

impl Session {
    pub(crate) async fn new(cluster: &testenv::Cluster, profile: &Profile) -> Session {
        let user = format!("bench-{}", profile.name);
        Session {
            client: cluster.client().await,
            kubeconfig: cluster.user_kubeconfig(&user, Some("system:masters")),
            log: cluster.dir().join("logs").join(format!("{}.log", profile.name)),
            audit_log: cluster.dir().join("logs/audit.log"),
            user,
        }
    }

    /// The controller's requests between `from` and `to`, the readiness probe's left out.
    pub(crate) fn cost(&self, from: Timestamp, to: Timestamp) -> Counts {
        audit::count(&self.audit_log, &self.user, CANARY_NS, from, to)
    }
}

/// S2's idle window: RSS once a second, CPU time over the window, and a Go peer's heap at its end.
pub(crate) async fn idle_window(
    running: &mut Running,
    profile: &Profile,
    args: &Args,
    kib: usize,
) -> Result<Memory, Error> {
    let pid = running.pid();
    let cpu0 = controller::cpu_seconds(pid).unwrap_or_default();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for _ in 0..args.idle_seconds {
        tick.tick().await;
        let (rss, _) = controller::rss(pid).ok_or("the controller exited during the idle window")?;
        samples.push(mib(rss));
    }
    let cpu1 = controller::cpu_seconds(pid).unwrap_or_default();
    let (_, hwm) = controller::rss(pid).ok_or("the controller exited")?;
    let heap = profile.go_metrics_port.and_then(controller::go_heap);
    let window = steady_seconds(args.idle_seconds) as usize;
    Ok(Memory {
        payload_kib: kib,
        unreferenced_secrets: args.unreferenced,
        peak_rss_mib: peak_mib(mib(hwm), &samples),
        steady_rss_mib: median(&samples[samples.len().saturating_sub(window)..]),
        idle_cpu_seconds: cpu1 - cpu0,
        rss_samples_mib: samples,
        go_heap_inuse_mib: heap.map(|(inuse, _)| mib(inuse)),
        go_heap_alloc_mib: heap.map(|(_, alloc)| mib(alloc)),
    })
}

/// The steady part of an idle window of `idle_seconds`, in seconds: its last `STEADY_WINDOW`, or its
/// second half when that is shorter.
fn steady_seconds(idle_seconds: u64) -> u64 {
    STEADY_WINDOW.as_secs().min(idle_seconds.div_ceil(2)).max(1)
}

/// The peak RSS: `VmHWM` at the end, but never below an earlier `VmRSS` sample, since the kernel raises
/// the high-water mark lazily (see [`controller::rss`]).
pub fn peak_mib(hwm_mib: f64, samples_mib: &[f64]) -> f64 {
    samples_mib.iter().copied().fold(hwm_mib, f64::max)
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// S1 and S3 of one pass, with S4's per-change cost.
pub(crate) struct Spread {
    pub s1: Latency,
    pub s3: FanOut,
    pub per_change_requests: f64,
    pub per_change_workload_writes: f64,
}

/// S1 (one change at a time: latency and cost) and S3 (one Secret shared by `fanout` Deployments).
/// Values are prefixed with `pass` so that a second pass changes every object again.
pub(crate) async fn spread_and_fan_out(
    args: &Args,
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    pass: &str,
) -> Result<Spread, Error> {
    // S1.
    let from = Timestamp::now();
    let mut samples = Vec::new();
    for k in 0..args.updates {
        let j = k % args.deployments.max(1);
        let ns = format!("bench-{}", j % args.namespaces);
        changes.drain();
        let kind = if k % 2 == 0 {
            let body = json!({"data": {"app.conf": format!("{pass}{}", k + 1)}});
            patch::<ConfigMap>(client, &ns, &format!("cfg-{j}"), body).await?;
            "configmap"
        } else {
            let body = json!({"stringData": {"password": format!("{pass}{}", k + 1)}});
            patch::<Secret>(client, &ns, &format!("sec-{j}"), body).await?;
            "secret"
        };
        let t0 = Instant::now();
        let seen = changes
            .wait_for(&format!("{ns}/app-{j}"), args.limit(Duration::from_secs(30)))
            .await;
        samples.push(LatencySample {
            kind: kind.to_string(),
            ms: seen.map(|at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
        });
    }
    // A late duplicate write still counts; this is the window the cost is read over, not a wait.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s1_cost = cost(from, Timestamp::now());
    let s1 = percentiles(samples);
    eprintln!(
        "  S1 ({pass}) p50 {:.1} ms p99 {:.1} ms, {} missed",
        s1.p50_ms, s1.p99_ms, s1.missed
    );

    let per_change_requests = audit::total(&s1_cost) as f64 / args.updates.max(1) as f64;
    let per_change_workload_writes = audit::workload_writes(&s1_cost) as f64 / args.updates.max(1) as f64;
    if args.fanout == 0 {
        // S10 and H1 measure S1 alone.
        return Ok(Spread {
            s1,
            s3: FanOut::default(),
            per_change_requests,
            per_change_workload_writes,
        });
    }

    // S3.
    changes.drain();
    let from = Timestamp::now();
    patch::<Secret>(
        client,
        FANOUT_NS,
        "shared",
        json!({"stringData": {"password": format!("{pass}-changed")}}),
    )
    .await?;
    let t0 = Instant::now();
    let keys: HashSet<String> = (0..args.fanout).map(|k| format!("{FANOUT_NS}/fan-{k}")).collect();
    let seen = changes.collect(&keys, args.limit(Duration::from_secs(600))).await;
    let mut s3 = FanOut {
        deployments: args.fanout,
        changed: seen.len(),
        all_changed_ms: seen
            .values()
            .max()
            .map_or(0.0, |at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
        workload_writes: 0,
        refused_writes: 0,
        timed_out: seen.len() < args.fanout,
    };
    // Writes that land after the last template change still count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s3_cost = cost(from, Timestamp::now());
    s3.workload_writes = audit::workload_writes(&s3_cost);
    s3.refused_writes = audit::refused_workload_writes(&s3_cost);
    eprintln!(
        "  S3 ({pass}) {} of {} in {:.0} ms",
        s3.changed, args.fanout, s3.all_changed_ms
    );
    Ok(Spread {
        s1,
        s3,
        per_change_requests,
        per_change_workload_writes,
    })
}

fn percentiles(samples: Vec<LatencySample>) -> Latency {
    let mut s: Vec<f64> = samples.iter().filter_map(|x| x.ms).collect();
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
        missed: samples.len() - s.len(),
        samples,
    }
}

/// S11: per trial, the kube-apiserver SIGKILLed, left down for 20 s and started again (`hack/testenv
/// start` returns once `/readyz` answers ok); then one ConfigMap change, and the time from that answer
/// until the template changed, read by polling the Deployment (the benchmark's own watch is down too).
async fn apiserver_restart(
    cluster: &testenv::Cluster,
    client: &Client,
    args: &Args,
) -> Result<ApiserverRestart, Error> {
    let mut result = ApiserverRestart {
        trials: args.restart_trials,
        ..Default::default()
    };
    let faults = cluster.faults();
    for trial in 0..args.restart_trials {
        let j = trial % args.deployments.max(1);
        let ns = format!("bench-{}", j % args.namespaces);
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let name = format!("app-{j}");
        let before = template_fingerprint(&api.get(&name).await.map_err(|e| e.to_string())?);
        let f = faults.clone();
        tokio::task::spawn_blocking(move || f.kill("kube-apiserver"))
            .await
            .map_err(|e| format!("killing the apiserver: {e}"))?;
        // The fault itself: the apiserver stays down this long.
        tokio::time::sleep(APISERVER_DOWN).await;
        let f = faults.clone();
        tokio::task::spawn_blocking(move || f.start("kube-apiserver"))
            .await
            .map_err(|e| format!("starting the apiserver: {e}"))?;
        let ready = Instant::now();
        let body = json!({"data": {"app.conf": format!("s11-{trial}")}});
        patch::<ConfigMap>(client, &ns, &format!("cfg-{j}"), body).await?;
        let deadline = ready + args.limit(Duration::from_secs(300));
        let seen = loop {
            if let Ok(d) = api.get(&name).await
                && template_fingerprint(&d) != before
            {
                break Some(ready.elapsed());
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match seen {
            Some(d) => result.samples_ms.push(d.as_secs_f64() * 1000.0),
            None => result.timed_out = true,
        }
    }
    result.median_ms = median(&result.samples_ms);
    result.max_ms = result.samples_ms.iter().copied().fold(f64::NAN, f64::max);
    Ok(result)
}

/// A digest of a workload's pod template: any change of it is a rollout.
fn template_fingerprint<K: HasTemplate>(w: &K) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&w.template())
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}
/// Whether S1's Deployments run a pod each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum S1Pods {
    /// One replica on kwok (S1 and S3 as a cluster runs them).
    One,
    /// `replicas: 0`, where pods would measure the scheduler instead (S10's 20,000 Deployments; H1,
    /// whose published figures were taken so).
    None,
}

/// The same objects for every controller; only the opt-in annotation differs.
pub(crate) async fn populate(
    client: &Client,
    args: &Args,
    profile: &Profile,
    s1_pods: S1Pods,
) -> Result<(), Error> {
    let mut namespaces: Vec<String> = (0..args.namespaces).map(|i| format!("bench-{i}")).collect();
    namespaces.extend(
        [
            FANOUT_NS,
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
        // No replicas unless `with_pods` below: S7 counts ReplicaSets, which the Deployment controller
        // creates with or without pods. A long revision history keeps every ReplicaSet countable.
        json!({"metadata": {"name": name, "annotations": {key: value}},
               "spec": {"replicas": 0, "revisionHistoryLimit": 1000, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
    };
    // S1, S3, S6 and S8 run real pods on kwok's nodes: a rollout creates and deletes pods as it would in
    // a cluster, and takes the time a rollout takes.
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
        let body = deployment(&format!("app-{j}"), &sec, Some(&cm));
        let body = match s1_pods {
            S1Pods::One => with_pods(body),
            S1Pods::None => body,
        };
        objects.push((ns, "deploy", body));
    }
    for (ns, secret, prefix, n) in [
        (FANOUT_NS, "shared", "fan", args.fanout),
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
            let body = if ns == "bench-flap" { body } else { with_pods(body) };
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
    // Per pair: `canary-cm-N` uses ConfigMap `canary-N` (and a Secret that never changes), and
    // `canary-secret-N` uses Secret `canary-N`.
    objects.push((
        CANARY_NS.into(),
        "secret",
        json!({"metadata": {"name": "canary-static"}, "stringData": {"password": "v0"}}),
    ));
    for i in 0..CANARIES {
        let name = format!("canary-{i}");
        objects.push((
            CANARY_NS.into(),
            "cm",
            json!({"metadata": {"name": name}, "data": {"n": "0"}}),
        ));
        objects.push((
            CANARY_NS.into(),
            "secret",
            json!({"metadata": {"name": name}, "stringData": {"password": "v0"}}),
        ));
        objects.push((
            CANARY_NS.into(),
            "deploy",
            deployment(&format!("canary-cm-{i}"), "canary-static", Some(&name)),
        ));
        objects.push((
            CANARY_NS.into(),
            "deploy",
            deployment(&format!("canary-secret-{i}"), &name, None),
        ));
    }
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
pub(crate) async fn fill_unreferenced(client: &Client, count: usize, kib: usize) -> Result<(), Error> {
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

/// Creates the object `body` describes through `api`; one that exists already is fine.
pub(crate) async fn create<K>(api: &Api<K>, body: serde_json::Value) -> Result<(), Error>
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

/// Changes a fresh canary ConfigMap until the controller rolls its Deployment, then a fresh canary
/// Secret the same way; returns when the second was rolled. Both kinds, because a controller may list
/// and watch them separately (Reloader does): ready for one is not ready for the other. A controller
/// that misses changes made before it listed is caught by a later one; the retries back off from
/// 250 ms to 8 s, so a slow start changes a canary only a few times.
pub(crate) async fn probe_ready(
    client: &Client,
    changes: &mut TemplateChanges,
    running: &mut Running,
    args: &Args,
) -> Result<Instant, Error> {
    let limit = args.limit(Duration::from_secs(600));
    let deadline = Instant::now() + limit;
    let pair = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % CANARIES;
    let object = format!("canary-{pair}");
    let mut seen = None;
    for kind in ["configmap", "secret"] {
        let deployment = format!(
            "{CANARY_NS}/canary-{}-{pair}",
            if kind == "configmap" { "cm" } else { "secret" }
        );
        let mut wait = Duration::from_millis(250);
        let mut n = 0;
        seen = loop {
            if !running.is_alive() {
                return Err("the controller exited; see its log".into());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the controller never rolled the canary for a {kind} change within {limit:?}"
                ));
            }
            changes.drain();
            n += 1;
            let value = format!("probe-{}-{n}", PROBES.load(std::sync::atomic::Ordering::Relaxed));
            if kind == "configmap" {
                patch::<ConfigMap>(client, CANARY_NS, &object, json!({"data": {"n": value}})).await?;
            } else {
                let body = json!({"stringData": {"password": value}});
                patch::<Secret>(client, CANARY_NS, &object, body).await?;
            }
            if let Some(at) = changes.wait_for(&deployment, wait).await {
                break Some(at);
            }
            wait = (wait * 2).min(Duration::from_secs(8));
        };
    }
    seen.ok_or_else(|| "no canary was probed".to_string())
}

pub(crate) async fn wait_all_hashed(client: &Client, args: &Args) -> Result<(), Error> {
    let expected = args.deployments
        + args.fanout
        + args.storm_deployments
        + args.flap_deployments
        + args.bad_deployments
        + 2 * CANARIES;
    let api: Api<Deployment> = Api::all(client.clone());
    let limit = args.limit(Duration::from_secs(900));
    let deadline = Instant::now() + limit;
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
    Err(format!("not every workload was hashed within {limit:?}"))
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
/// for 5 s (within 10 minutes, plus the backlog of a controller held to a fixed request rate: a reload
/// per change per Deployment) and the Deployment controller has caught up: ReplicaSets created per
/// Deployment, and the controller's workload writes.
#[allow(clippy::too_many_arguments)]
async fn churn(
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    profile: &Profile,
    (namespace, name): (&str, &str),
    (deployments, count): (usize, usize),
    every: Duration,
    args: &Args,
) -> Result<Storm, Error> {
    // Count from a settled start: the Deployment controller has acted on every template so far.
    wait_observed(client, namespace, args).await?;
    let before = replicasets_per_owner(client, namespace).await?;
    changes.drain();
    let from = Timestamp::now();
    for c in 0..count {
        let body = json!({"stringData": {"password": format!("{name}-{c}")}});
        patch::<Secret>(client, namespace, name, body).await?;
        tokio::time::sleep(every).await;
    }
    let backlog = profile.backlog((count * deployments) as u64);
    let quiet = changes
        .quiet(
            Duration::from_secs(5),
            args.limit(Duration::from_secs(600) + backlog),
        )
        .await;
    wait_observed(client, namespace, args).await?;
    let after = replicasets_per_owner(client, namespace).await?;
    let created: Vec<u64> = after
        .iter()
        .map(|(owner, n)| n.saturating_sub(before.get(owner).copied().unwrap_or(0)))
        .collect();
    let writes = cost(from, Timestamp::now());
    Ok(Storm {
        deployments,
        changes: count,
        replicasets_per_deployment_mean: created.iter().sum::<u64>() as f64 / created.len().max(1) as f64,
        replicasets_per_deployment_max: created.iter().copied().max().unwrap_or(0),
        workload_writes: audit::workload_writes(&writes),
        refused_writes: audit::refused_workload_writes(&writes),
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
    Ok(config_hash(
        BAD_NS,
        &w.references(wave_core::refs::CrossNamespace::Deny),
        &fetched,
        &Hashing::Plain,
    ))
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
    let limit = args.limit(Duration::from_secs(600));
    let deadline = Instant::now() + limit;
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
            return Err(format!(
                "the S8 Deployments were not all rolled out within {limit:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    changes.drain();
    patch::<ConfigMap>(client, BAD_NS, "bad-cfg", json!({"data": {"app.conf": "bad"}})).await?;
    // Every rollout gets its progress deadline, and a controller that paces the time to see a failure:
    // this is the scenario's observation window, not a wait for a condition.
    tokio::time::sleep(BAD_PROGRESS_DEADLINE + Duration::from_secs(20)).await;
    let quiet = changes
        .quiet(Duration::from_secs(15), args.limit(Duration::from_secs(600)))
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
async fn wait_observed(client: &Client, ns: &str, args: &Args) -> Result<(), Error> {
    wait_deployments(client, Some(ns), args, "seen every template", |d| {
        let observed = d.status.as_ref().and_then(|s| s.observed_generation);
        observed < d.metadata.generation
    })
    .await
}

/// Waits until every Deployment in `ns` (all namespaces: `None`) has finished its rollout, so that
/// what follows is not measured inside the Deployment controller's backlog. S8's Deployments are left
/// out: after S8 some of them never finish, by design.
pub(crate) async fn wait_settled(client: &Client, ns: Option<&str>, args: &Args) -> Result<(), Error> {
    wait_deployments(client, ns, args, "finished every rollout", |d| {
        d.namespace().as_deref() != Some(BAD_NS) && is_rolling(d)
    })
    .await
}

/// Waits until no Deployment in `ns` is `behind`: within 5 minutes, or [`SETTLE_PER_DEPLOYMENT`] for
/// each Deployment listed when there are more (the Deployment controller works through rollouts at its
/// own request rate, so a wait that does not grow with the count fails the large S10 sizes by design).
async fn wait_deployments(
    client: &Client,
    ns: Option<&str>,
    args: &Args,
    what: &str,
    behind: impl Fn(&Deployment) -> bool,
) -> Result<(), Error> {
    let api: Api<Deployment> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let started = Instant::now();
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let limit = args.limit(Duration::from_secs(300).max(SETTLE_PER_DEPLOYMENT * list.items.len() as u32));
        let deadline = started + limit;
        let late: Vec<String> = list
            .items
            .iter()
            .filter(|d| behind(d))
            .map(|d| d.name_any())
            .collect();
        if late.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the Deployment controller had not {what} in {} within {limit:?}: {} behind, e.g. {}",
                ns.unwrap_or("any namespace"),
                late.len(),
                late[0]
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

/// A workload kind with a pod template.
pub(crate) trait HasTemplate:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn template(&self) -> Option<&PodTemplateSpec>;
}

impl HasTemplate for Deployment {
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

impl HasTemplate for StatefulSet {
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

impl HasTemplate for DaemonSet {
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

/// Sends `namespace/name` and the time for every change of a `K`'s pod template; the receiver fires
/// once the first list is in.
fn watch_templates<K: HasTemplate>(
    client: &Client,
    tx: mpsc::UnboundedSender<(String, Instant)>,
) -> tokio::sync::oneshot::Receiver<()> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut last: HashMap<String, u64> = HashMap::new();
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let (w, initial) = match event {
                Ok(Event::Apply(w)) => (w, false),
                Ok(Event::InitApply(w)) => (w, true),
                Ok(Event::InitDone) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                    continue;
                }
                Ok(_) => continue,
                // The apiserver is away (S11): retry without spinning on the two cores measured.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let key = format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any());
            let fp = template_fingerprint(&w);
            if last.insert(key.clone(), fp).is_some_and(|old| old != fp) && !initial {
                let _ = tx.send((key, Instant::now()));
            }
        }
    });
    ready_rx
}

/// Every change of a workload's pod template, as `namespace/name` and when it was seen. Whatever reads
/// the changes, the last change of every workload stays known ([`TemplateChanges::last`]).
pub(crate) struct TemplateChanges {
    rx: mpsc::UnboundedReceiver<(String, Instant)>,
    last: HashMap<String, Instant>,
}

impl TemplateChanges {
    /// Watches every Deployment, StatefulSet and DaemonSet; returns once all three have listed.
    pub(crate) async fn start(client: &Client) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let ready = [
            watch_templates::<Deployment>(client, tx.clone()),
            watch_templates::<StatefulSet>(client, tx.clone()),
            watch_templates::<DaemonSet>(client, tx),
        ];
        for r in ready {
            tokio::time::timeout(Duration::from_secs(60), r)
                .await
                .map_err(|_| "a workload watch did not list within 60 s".to_string())?
                .map_err(|_| "a workload watch ended".to_string())?;
        }
        Ok(Self {
            rx,
            last: HashMap::new(),
        })
    }

    /// When each workload's template last changed, as far as seen now.
    pub(crate) fn last(&mut self) -> &HashMap<String, Instant> {
        self.drain();
        &self.last
    }

    /// The next change, within `deadline`.
    async fn next(&mut self, deadline: tokio::time::Instant) -> Option<(String, Instant)> {
        let (k, at) = tokio::time::timeout_at(deadline, self.rx.recv()).await.ok()??;
        self.last.insert(k.clone(), at);
        Some((k, at))
    }

    /// Forgets the changes not yet read (their times stay in [`TemplateChanges::last`]).
    fn drain(&mut self) {
        while let Ok((k, at)) = self.rx.try_recv() {
            self.last.insert(k, at);
        }
    }

    /// When `key` next changes, if within `timeout`.
    async fn wait_for(&mut self, key: &str, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.next(deadline).await {
                Some((k, at)) if k == key => return Some(at),
                Some(_) => continue,
                None => return None,
            }
        }
    }

    /// The first change of each of `keys`, until all changed or `timeout` passed.
    async fn collect(&mut self, keys: &HashSet<String>, timeout: Duration) -> HashMap<String, Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = HashMap::new();
        while seen.len() < keys.len() {
            match self.next(deadline).await {
                Some((k, at)) if keys.contains(&k) => {
                    seen.entry(k).or_insert(at);
                }
                Some(_) => continue,
                None => break,
            }
        }
        seen
    }

    /// Returns once no template changed for `quiet` (true), or after `limit` (false).
    async fn quiet(&mut self, quiet: Duration, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < end {
            if self.next(tokio::time::Instant::now() + quiet).await.is_none() {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_never_below_a_sample_even_when_the_high_water_mark_trails() {
        assert_eq!(peak_mib(548.0, &[547.9, 548.2, 548.1]), 548.2);
        assert_eq!(peak_mib(600.0, &[547.9, 548.2]), 600.0);
        assert_eq!(peak_mib(34.0, &[]), 34.0);
    }

    #[test]
    fn percentiles_leave_missed_updates_out_and_count_them() {
        let samples: Vec<LatencySample> = (1..=100)
            .map(|ms| LatencySample {
                kind: "secret".into(),
                ms: Some(ms as f64),
            })
            .chain(std::iter::once(LatencySample {
                kind: "configmap".into(),
                ms: None,
            }))
            .collect();
        let l = percentiles(samples);
        assert_eq!(
            (l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!((l.missed, l.samples.len()), (1, 101));
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0]), 5.0);
        assert!(median(&[]).is_nan());
    }
}
