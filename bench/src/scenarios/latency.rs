//! S1, latency (one config change at a time, each until the template changed; its request cost is
//! S4's per-change figure) and S3, fan-out (one Secret shared by many Deployments). The round runs them
//! twice (with write limits off, then at the shipped defaults); H1 and S10 run S1 alone. S1L is S1 again
//! while a second client keeps the apiserver busy with unrelated writes and LISTs ([`Load`]).
//!
//! ```text
//! S1: for each update: ConfigMap or Secret of workload j patched ─► wait for app-j's template (30 s)
//!     ─► 1 s for late writes ─► requests in the window (audit log) ─► p50/p90/p99/max, missed
//! S3: `shared` patched ─► wait for every fan-k's template ─► 2 s for late writes ─► writes, refused
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::nan_if_null;
use crate::harness::audit::{self, Counts, Request};
use crate::harness::population::{FANOUT_NS, patch};
use crate::harness::stats::quantile;
use crate::harness::wait::TemplateChanges;
use crate::harness::{Error, Limits};
use crate::harness::{controller, metrics};

/// What S1 and S3 change: S1's workloads (`app-j` in `bench-{j % namespaces}`), one update each in
/// turn, and S3's Deployments.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub namespaces: usize,
    pub deployments: usize,
    /// S1: config objects updated, one at a time.
    pub updates: usize,
    /// S3: Deployments referencing one Secret; 0 runs S1 alone.
    pub fanout: usize,
    pub limits: Limits,
}

/// Missed S1 updates of one kind in a row after which the rest of that kind are not sent, and count
/// as missed.
const GIVE_UP_AFTER_MISSES: usize = 5;

/// S1's figures.
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
    /// Updates whose change never reached the template within 30 s, with those not sent (below).
    pub missed: usize,
    /// Updates not sent, because the controller had missed [`GIVE_UP_AFTER_MISSES`] of their kind in
    /// a row: a controller that far behind would make every one of them wait out its 30 s.
    #[serde(default)]
    pub not_sent: usize,
    /// Every update sent, in order: what changed and how long until the template changed.
    pub samples: Vec<LatencySample>,
    /// Where the time went, step by step, from the audit log ([`profile_steps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<StepProfile>,
    /// wave's own histograms over the updates (wave only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnSteps>,
    /// The controller's CPU time (user and system) over the updates and the second after them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
}

/// wave's own histograms over S1's updates ([`crate::harness::metrics`]): where its share of each
/// update went, inside the process, which the audit log cannot see. Counts cover every observation
/// in the window, so the router's include the workload events that wave's own writes cause, and
/// under load (S1L) the events of the load client's unreferenced ConfigMaps as well.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OwnSteps {
    /// `wave_watch_router_lag_seconds`: a watch event's arrival to the end of the router's handling.
    pub router_lag: metrics::Quantiles,
    /// `wave_workqueue_wait_seconds`: a workload's wait in the queue for a worker.
    pub queue_wait: metrics::Quantiles,
    /// `wave_reconcile_duration_seconds{kind="Deployment"}`: one reconcile, its reads and write included.
    pub reconcile: metrics::Quantiles,
    /// `wave_api_request_duration_seconds{verb="get",resource="secrets"}`, as wave's client saw it.
    pub secret_get: metrics::Quantiles,
    /// The same for `{verb="patch",resource="deployments"}`: the workload write.
    pub workload_patch: metrics::Quantiles,
    /// `wave_config_change_to_patch_seconds`: a config object's watch event to the workload's patch.
    pub change_to_patch: metrics::Quantiles,
}

impl OwnSteps {
    /// The histograms between two scrapes of wave's `/metrics`.
    fn between(before: &str, after: &str) -> Self {
        let of = |name, labels: &[&str]| metrics::between(before, after, name, labels);
        let api = "wave_api_request_duration_seconds";
        Self {
            router_lag: of("wave_watch_router_lag_seconds", &[]),
            queue_wait: of("wave_workqueue_wait_seconds", &[]),
            reconcile: of("wave_reconcile_duration_seconds", &["kind=\"Deployment\""]),
            secret_get: of(api, &["verb=\"get\"", "resource=\"secrets\""]),
            workload_patch: of(api, &["verb=\"patch\"", "resource=\"deployments\""]),
            change_to_patch: of("wave_config_change_to_patch_seconds", &[]),
        }
    }
}

/// One S1 update.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LatencySample {
    /// `configmap` or `secret`.
    pub kind: String,
    /// From the update's response to the template change; `None` when it was missed.
    pub ms: Option<f64>,
    /// Its steps, when the audit log shows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Steps>,
    /// Just before the update was sent, and what it updated and should change: what
    /// [`profile_steps`] looks for in the audit log.
    #[serde(skip)]
    pub sent: Option<Timestamp>,
    #[serde(skip)]
    pub object: (String, String),
    #[serde(skip)]
    pub workload: String,
}

/// One update's steps, as the apiserver saw them (its audit log, in microseconds), in milliseconds.
/// The read is the controller's GET of the object; Wave and Reloader read theirs from their caches,
/// so theirs have none, and their `to_write_ms` holds the watch's delivery as well.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Steps {
    /// From the update's completion to the arrival of the controller's read: the watch event's
    /// delivery, and the controller's own work until it asks (below 0 when the watch delivered the
    /// update before the apiserver had finished answering it).
    pub to_read_ms: Option<f64>,
    /// The read, in the apiserver.
    pub read_ms: Option<f64>,
    /// From the read's answer (or, without a read, the update's completion) to the arrival of the
    /// workload write: the controller's own work.
    pub to_write_ms: f64,
    /// The workload write, in the apiserver.
    pub write_ms: f64,
    /// From the write's completion to the bench seeing the template change (its watch's delivery).
    pub to_seen_ms: f64,
}

/// One step over an S1 run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepFigure {
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    /// The mean over the slowest tenth of the updates (by their whole latency): where the tail goes.
    #[serde(deserialize_with = "nan_if_null")]
    pub tail_mean_ms: f64,
}

/// [`Steps`] over an S1 run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepProfile {
    /// Updates whose steps the audit log showed.
    pub profiled: usize,
    /// Of those, updates the controller read with a GET.
    pub read: usize,
    pub to_read: StepFigure,
    pub read_step: StepFigure,
    pub to_write: StepFigure,
    pub write: StepFigure,
    pub to_seen: StepFigure,
}

/// Fills each sample's [`Steps`] and the run's [`StepProfile`] from `requests` (the audit log's, see
/// [`crate::harness::audit::completed`]): per update, the update itself (sent by the bench), the
/// controller's first GET of the object after it, and the controller's first write of the workload
/// after it.
pub fn profile_steps(s1: &mut Latency, requests: &[Request], controller: &str) {
    let ms = |from: Timestamp, to: Timestamp| to.duration_since(from).as_secs_f64() * 1000.0;
    for sample in &mut s1.samples {
        let (Some(sent), Some(total)) = (sample.sent, sample.ms) else {
            continue;
        };
        let resource = format!("{}s", sample.kind);
        let (ns, name) = &sample.object;
        let object = |r: &&Request| r.resource == resource && &r.namespace == ns && &r.name == name;
        let Some(update) = requests
            .iter()
            .filter(object)
            .find(|r| r.user != controller && r.verb == "patch" && r.received >= sent)
        else {
            continue;
        };
        // The watch may deliver the update before the apiserver has finished answering it: what the
        // controller sends after the update arrived is its answer to it (the one before was done).
        let after = |r: &&Request| r.user == controller && r.received >= update.received;
        let Some(write) = requests.iter().filter(after).find(|r| {
            matches!(r.verb.as_str(), "patch" | "update")
                && r.resource == "deployments"
                && &r.namespace == ns
                && r.name == sample.workload
        }) else {
            continue;
        };
        let read = requests
            .iter()
            .filter(after)
            .filter(object)
            .find(|r| r.verb == "get" && r.received <= write.received);
        let ready = read.map_or(update.completed, |r| r.completed);
        sample.steps = Some(Steps {
            to_read_ms: read.map(|r| ms(update.completed, r.received)),
            read_ms: read.map(|r| ms(r.received, r.completed)),
            to_write_ms: ms(ready, write.received),
            write_ms: ms(write.received, write.completed),
            to_seen_ms: total - ms(update.completed, write.completed),
        });
    }
    let profiled: Vec<(f64, &Steps)> = s1
        .samples
        .iter()
        .filter_map(|s| Some((s.ms?, s.steps.as_ref()?)))
        .collect();
    if profiled.is_empty() {
        return;
    }
    let tail_from = {
        let mut totals: Vec<f64> = profiled.iter().map(|(total, _)| *total).collect();
        totals.sort_by(f64::total_cmp);
        quantile(&totals, 0.9)
    };
    let figure = |step: &dyn Fn(&Steps) -> Option<f64>| {
        let mut all: Vec<f64> = profiled.iter().filter_map(|(_, s)| step(s)).collect();
        all.sort_by(f64::total_cmp);
        let tail: Vec<f64> = profiled
            .iter()
            .filter(|(total, _)| *total >= tail_from)
            .filter_map(|(_, s)| step(s))
            .collect();
        StepFigure {
            p50_ms: quantile(&all, 0.5),
            p99_ms: quantile(&all, 0.99),
            tail_mean_ms: tail.iter().sum::<f64>() / tail.len() as f64,
        }
    };
    s1.steps = Some(StepProfile {
        profiled: profiled.len(),
        read: profiled.iter().filter(|(_, s)| s.read_ms.is_some()).count(),
        to_read: figure(&|s| s.to_read_ms),
        read_step: figure(&|s| s.read_ms),
        to_write: figure(&|s| Some(s.to_write_ms)),
        write: figure(&|s| Some(s.write_ms)),
        to_seen: figure(&|s| Some(s.to_seen_ms)),
    });
}

/// S1L's background load: a second client that writes unrelated ConfigMaps and LISTs every ConfigMap
/// of the cluster at fixed rates while S1 runs, so that the apiserver (and etcd) are busy as in a
/// shared cluster. Nothing the controllers watch-for references what it writes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Load {
    /// ConfigMap patches per second, in turn over [`LOAD_OBJECTS`] objects of [`LOAD_NS`].
    pub writes_per_s: u32,
    /// LISTs of every ConfigMap in the cluster per second (paginated by 500, as client-go lists).
    pub lists_per_s: u32,
}

/// The namespace the load writes in.
pub const LOAD_NS: &str = "bench-load";
/// The ConfigMaps it writes, in turn.
pub const LOAD_OBJECTS: usize = 20;
/// The load S1L runs under.
pub const LOAD: Load = Load {
    writes_per_s: 50,
    lists_per_s: 5,
};

/// S1L's figures: S1 under [`LOAD`], and the load as it was delivered.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UnderLoad {
    pub s1: Latency,
    /// The load asked for.
    pub writes_per_s: u32,
    pub lists_per_s: u32,
    /// What the second client achieved over S1's duration (a busy apiserver may deliver less).
    pub writes_done_per_s: f64,
    pub lists_done_per_s: f64,
    /// Requests of the load that failed.
    pub load_errors: u64,
}

/// Creates [`LOAD_NS`] and its [`LOAD_OBJECTS`] ConfigMaps.
pub async fn prepare_load(client: &Client) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let pp = PostParams::default();
    let ns = serde_json::from_value(json!({"metadata": {"name": LOAD_NS}})).map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await
        .map_err(|e| format!("creating {LOAD_NS}: {e}"))?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), LOAD_NS);
    for k in 0..LOAD_OBJECTS {
        let cm =
            serde_json::from_value(json!({"metadata": {"name": format!("load-{k}")}, "data": {"n": "0"}}))
                .map_err(|e| e.to_string())?;
        api.create(&pp, &cm)
            .await
            .map_err(|e| format!("creating {LOAD_NS}/load-{k}: {e}"))?;
    }
    Ok(())
}

/// Deletes [`LOAD_NS`] (in the background: the namespace controller empties it), so that the steps
/// after S1L see the population as it was.
pub async fn remove_load(client: &Client) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, DeleteParams};
    Api::<Namespace>::all(client.clone())
        .delete(LOAD_NS, &DeleteParams::default())
        .await
        .map(drop)
        .map_err(|e| format!("deleting {LOAD_NS}: {e}"))
}

/// Requests of the load in flight at most: a stalled apiserver makes the load wait, not pile up.
const LOAD_IN_FLIGHT: usize = 32;

/// Runs [`LOAD`] until `stop` says so; returns (writes done, LISTs done, errors). Each request runs on
/// its own task, so a slow LIST delays no write and the rates hold while the apiserver keeps up. A LIST
/// is read as text and only its continue token is parsed: the apiserver does the whole work, and the
/// bench spends no CPU decoding objects on the machine it measures.
pub async fn run_load(client: Client, mut stop: tokio::sync::watch::Receiver<bool>) -> (u64, u64, u64) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut writes = tokio::time::interval(Duration::from_secs(1) / LOAD.writes_per_s);
    let mut lists = tokio::time::interval(Duration::from_secs(1) / LOAD.lists_per_s);
    // A busy apiserver may answer late: the load does not catch up in bursts, it stays at its rate.
    writes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    lists.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let slots = Arc::new(tokio::sync::Semaphore::new(LOAD_IN_FLIGHT));
    let (written, listed, errors) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut n = 0usize;
    loop {
        let is_write = tokio::select! {
            _ = stop.changed() => break,
            _ = writes.tick() => true,
            _ = lists.tick() => false,
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let client = client.clone();
        let done = if is_write { &written } else { &listed }.clone();
        let failed = errors.clone();
        n += 1;
        tokio::spawn(async move {
            let ok = if is_write {
                let body = json!({"data": {"n": n.to_string()}});
                let name = format!("load-{}", n % LOAD_OBJECTS);
                patch::<ConfigMap>(&client, LOAD_NS, &name, body).await.is_ok()
            } else {
                list_every_config_map(&client).await.is_ok()
            };
            let counter = if ok { done } else { failed };
            counter.fetch_add(1, Ordering::Relaxed);
            drop(slot);
        });
    }
    let done = |c: &Arc<AtomicU64>| c.load(Ordering::Relaxed);
    (done(&written), done(&listed), done(&errors))
}

/// One LIST of every ConfigMap in the cluster, page by page (500 a page, as client-go lists).
async fn list_every_config_map(client: &Client) -> Result<(), kube::Error> {
    use kube::api::ListParams;
    use kube::core::{ListMeta, Request};
    #[derive(Deserialize)]
    struct Page {
        metadata: ListMeta,
    }
    let mut params = ListParams::default().limit(500);
    loop {
        let request = Request::new("/api/v1/configmaps")
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let text = client.request_text(request).await?;
        let page: Page = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// S3's figures.
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
    /// The controller's CPU time (user and system) from the change until 2 s after the last template
    /// changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
}

/// What S1 and S3 may read of the controller under test besides the apiserver.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probe {
    /// Its process, for its CPU time.
    pub pid: Option<u32>,
    /// The port of its `/metrics`, for wave's own histograms ([`OwnSteps`]).
    pub wave_metrics: Option<u16>,
}

impl Probe {
    /// Its CPU time so far, to pass to [`Probe::cpu_since`] at the end of a stretch.
    fn cpu_seconds(&self) -> Option<f64> {
        self.pid.and_then(controller::cpu_seconds)
    }

    /// Its CPU time since `before` (from [`Probe::cpu_seconds`]).
    fn cpu_since(&self, before: Option<f64>) -> Option<f64> {
        self.cpu_seconds()
            .zip(before)
            .map(|(after, before)| after - before)
    }
}

/// S1 and S3 of one pass, with S4's per-change cost.
pub(crate) struct Pass {
    pub s1: Latency,
    pub s3: FanOut,
    pub per_change_requests: f64,
    pub per_change_workload_writes: f64,
}

/// S1 (one change at a time: latency and cost) and S3 (one Secret shared by `fanout` Deployments).
/// Values are prefixed with `pass` so that a second pass changes every object again.
pub(crate) async fn spread_and_fan_out(
    sizes: &Sizes,
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    pass: &str,
    probe: Probe,
) -> Result<Pass, Error> {
    // S1.
    let scrape = |port| {
        metrics::scrape(port)
            .inspect_err(|e| eprintln!("  S1 ({pass}): wave's own steps not read: {e}"))
            .ok()
    };
    let before = probe.wave_metrics.and_then(scrape);
    let cpu = probe.cpu_seconds();
    let from = Timestamp::now();
    let mut samples: Vec<LatencySample> = Vec::new();
    for k in 0..sizes.updates {
        let kind = if k % 2 == 0 { "configmap" } else { "secret" };
        if gives_up(&samples, kind) {
            continue;
        }
        let j = k % sizes.deployments.max(1);
        let ns = format!("bench-{}", j % sizes.namespaces);
        changes.drain();
        let sent = Timestamp::now();
        let name = if kind == "configmap" {
            let (name, body) = (
                format!("cfg-{j}"),
                json!({"data": {"app.conf": format!("{pass}{}", k + 1)}}),
            );
            patch::<ConfigMap>(client, &ns, &name, body).await?;
            name
        } else {
            let (name, body) = (
                format!("sec-{j}"),
                json!({"stringData": {"password": format!("{pass}{}", k + 1)}}),
            );
            patch::<Secret>(client, &ns, &name, body).await?;
            name
        };
        let t0 = Instant::now();
        let workload = format!("app-{j}");
        let seen = changes
            .wait_for(
                &format!("{ns}/{workload}"),
                sizes.limits.limit(Duration::from_secs(30)),
            )
            .await;
        samples.push(LatencySample {
            kind: kind.to_string(),
            ms: seen.map(|at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
            steps: None,
            sent: Some(sent),
            object: (ns, name),
            workload,
        });
    }
    // A late duplicate write still counts; this is the window the cost is read over, not a wait.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s1_cost = cost(from, Timestamp::now());
    let sent = samples.len();
    let not_sent = sizes.updates - sent;
    if not_sent > 0 {
        eprintln!(
            "  S1 ({pass}): {not_sent} updates not sent, after {GIVE_UP_AFTER_MISSES} of their kind missed in a row"
        );
    }
    let mut s1 = percentiles(samples, not_sent);
    s1.cpu_seconds = probe.cpu_since(cpu);
    if let (Some(before), Some(after)) = (before, probe.wave_metrics.and_then(scrape)) {
        s1.own = Some(OwnSteps::between(&before, &after));
    }
    eprintln!(
        "  S1 ({pass}) p50 {:.1} ms p99 {:.1} ms, {} missed, {:.2} s CPU",
        s1.p50_ms,
        s1.p99_ms,
        s1.missed,
        s1.cpu_seconds.unwrap_or(f64::NAN)
    );

    let per_change_requests = audit::total(&s1_cost) as f64 / sent.max(1) as f64;
    let per_change_workload_writes = audit::workload_writes(&s1_cost) as f64 / sent.max(1) as f64;
    if sizes.fanout == 0 {
        // S10 and H1 measure S1 alone.
        return Ok(Pass {
            s1,
            s3: FanOut::default(),
            per_change_requests,
            per_change_workload_writes,
        });
    }

    // S3.
    changes.drain();
    let cpu = probe.cpu_seconds();
    let from = Timestamp::now();
    patch::<Secret>(
        client,
        FANOUT_NS,
        "shared",
        json!({"stringData": {"password": format!("{pass}-changed")}}),
    )
    .await?;
    let t0 = Instant::now();
    let keys: HashSet<String> = (0..sizes.fanout)
        .map(|k| format!("{FANOUT_NS}/fan-{k}"))
        .collect();
    let seen = changes
        .collect(&keys, sizes.limits.limit(Duration::from_secs(600)))
        .await;
    let mut s3 = FanOut {
        deployments: sizes.fanout,
        changed: seen.len(),
        all_changed_ms: seen
            .values()
            .max()
            .map_or(0.0, |at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
        workload_writes: 0,
        refused_writes: 0,
        timed_out: seen.len() < sizes.fanout,
        cpu_seconds: None,
    };
    // Writes that land after the last template change still count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s3_cost = cost(from, Timestamp::now());
    s3.cpu_seconds = probe.cpu_since(cpu);
    s3.workload_writes = audit::workload_writes(&s3_cost);
    s3.refused_writes = audit::refused_workload_writes(&s3_cost);
    eprintln!(
        "  S3 ({pass}) {} of {} in {:.0} ms, {:.2} s CPU",
        s3.changed,
        sizes.fanout,
        s3.all_changed_ms,
        s3.cpu_seconds.unwrap_or(f64::NAN)
    );
    Ok(Pass {
        s1,
        s3,
        per_change_requests,
        per_change_workload_writes,
    })
}

/// Whether the last [`GIVE_UP_AFTER_MISSES`] updates of `kind` were all missed.
fn gives_up(samples: &[LatencySample], kind: &str) -> bool {
    samples
        .iter()
        .rev()
        .filter(|s| s.kind == kind)
        .take(GIVE_UP_AFTER_MISSES)
        .filter(|s| s.ms.is_none())
        .count()
        == GIVE_UP_AFTER_MISSES
}

/// S1's percentiles of the updates seen; the missed ones, and the `not_sent`, are counted apart.
fn percentiles(samples: Vec<LatencySample>, not_sent: usize) -> Latency {
    let mut s: Vec<f64> = samples.iter().filter_map(|x| x.ms).collect();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| quantile(&s, q);
    Latency {
        p50_ms: at(0.50),
        p90_ms: at(0.90),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        missed: samples.len() - s.len() + not_sent,
        not_sent,
        samples,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s1_gives_up_on_a_kind_after_five_of_it_missed_in_a_row_whatever_the_other_kind_does() {
        let sample = |kind: &str, ms: Option<f64>| LatencySample {
            kind: kind.into(),
            ms,
            ..Default::default()
        };
        // Secrets all missed, ConfigMaps all seen, alternately.
        let mut samples: Vec<LatencySample> = (0..GIVE_UP_AFTER_MISSES - 1)
            .flat_map(|_| [sample("configmap", Some(10.0)), sample("secret", None)])
            .collect();
        assert!(!gives_up(&samples, "secret"), "four missed");
        samples.push(sample("secret", None));
        assert!(gives_up(&samples, "secret"));
        assert!(!gives_up(&samples, "configmap"));
        samples.push(sample("secret", Some(10.0)));
        assert!(!gives_up(&samples, "secret"), "seen again after five missed");
        // Five missed, but not in a row.
        let apart: Vec<LatencySample> = (0..10)
            .map(|k| sample("secret", (k % 2 == 1).then_some(10.0)))
            .collect();
        assert!(!gives_up(&apart, "secret"));
    }

    #[test]
    fn percentiles_leave_missed_updates_out_and_count_them_with_those_not_sent() {
        let samples: Vec<LatencySample> = (1..=100)
            .map(|ms| LatencySample {
                kind: "secret".into(),
                ms: Some(ms as f64),
                ..Default::default()
            })
            .chain(std::iter::once(LatencySample {
                kind: "configmap".into(),
                ms: None,
                ..Default::default()
            }))
            .collect();
        let l = percentiles(samples, 2);
        assert_eq!(
            (l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!((l.missed, l.not_sent, l.samples.len()), (3, 2, 101));
    }

    /// A moment `ms` milliseconds into a fixed second, for audit records.
    fn at(ms: u32) -> Timestamp {
        format!("2026-11-28T10:00:00.{ms:03}Z").parse().unwrap()
    }

    /// An audit record of a request in `bench-0`, received and completed at those milliseconds.
    fn request(user: &str, verb: &str, resource: &str, name: &str, from: u32, to: u32) -> Request {
        Request {
            user: user.into(),
            verb: verb.into(),
            resource: resource.into(),
            namespace: "bench-0".into(),
            name: name.into(),
            received: at(from),
            completed: at(to),
        }
    }

    #[test]
    fn steps_are_read_from_the_bench_update_the_controllers_read_and_its_workload_write() {
        let requests = vec![
            // An earlier read of the same object is not this update's.
            request("bench-wave", "get", "configmaps", "cfg-0", 90, 91),
            request("admin", "patch", "configmaps", "cfg-0", 100, 104),
            // Another user's read and another object's are not the controller's.
            request("admin", "get", "configmaps", "cfg-0", 105, 106),
            request("bench-wave", "get", "configmaps", "cfg-1", 106, 107),
            request("bench-wave", "get", "configmaps", "cfg-0", 110, 112),
            request("bench-wave", "patch", "deployments", "app-1", 113, 114),
            request("bench-wave", "patch", "deployments", "app-0", 115, 119),
            // A controller that reads from its cache: no read.
            request("admin", "patch", "secrets", "sec-0", 200, 201),
            request("bench-wave", "update", "deployments", "app-0", 230, 240),
        ];
        let sample = |kind: &str, name: &str, sent: u32, ms: f64| LatencySample {
            kind: kind.into(),
            ms: Some(ms),
            sent: Some(at(sent)),
            object: ("bench-0".into(), name.into()),
            workload: "app-0".into(),
            ..Default::default()
        };
        let mut s1 = percentiles(
            vec![
                sample("configmap", "cfg-0", 95, 20.0),
                sample("secret", "sec-0", 199, 42.0),
            ],
            0,
        );
        profile_steps(&mut s1, &requests, "bench-wave");
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
        let first = s1.samples[0].steps.clone().expect("profiled");
        assert!(
            close(first.to_read_ms, 6.0) && close(first.read_ms, 2.0),
            "{first:?}"
        );
        assert!(close(Some(first.to_write_ms), 3.0) && close(Some(first.write_ms), 4.0));
        assert!(
            close(Some(first.to_seen_ms), 5.0),
            "20 ms in all, 15 of them until the write completed"
        );
        let second = s1.samples[1].steps.clone().expect("profiled");
        assert_eq!((second.to_read_ms, second.read_ms), (None, None));
        assert!(close(Some(second.to_write_ms), 29.0) && close(Some(second.to_seen_ms), 3.0));
        let profile = s1.steps.expect("a profile");
        assert_eq!((profile.profiled, profile.read), (2, 1));
        assert!(
            (profile.write.tail_mean_ms - 10.0).abs() < 1e-6,
            "the slowest tenth is the second update"
        );
    }

    #[test]
    fn a_read_sent_before_the_apiserver_finished_answering_the_update_is_its_read() {
        let requests = vec![
            request("admin", "patch", "secrets", "sec-0", 100, 110),
            request("bench-wave", "get", "secrets", "sec-0", 108, 109),
            request("bench-wave", "patch", "deployments", "app-0", 112, 120),
        ];
        let mut s1 = percentiles(
            vec![LatencySample {
                kind: "secret".into(),
                ms: Some(25.0),
                sent: Some(at(99)),
                object: ("bench-0".into(), "sec-0".into()),
                workload: "app-0".into(),
                ..Default::default()
            }],
            0,
        );
        profile_steps(&mut s1, &requests, "bench-wave");
        let steps = s1.samples[0].steps.clone().expect("profiled");
        assert_eq!((steps.to_read_ms, steps.read_ms), (Some(-2.0), Some(1.0)));
        assert_eq!(
            (steps.to_write_ms, steps.write_ms, steps.to_seen_ms),
            (3.0, 8.0, 15.0)
        );
    }
}
