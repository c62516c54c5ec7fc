//! Prometheus metrics, registered once in one registry and handed down in the `Context`.
//! Labels come from `&'static str` only (kinds, results, error kinds), never object names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels `{kind, result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResult {
    /// Workload kind.
    pub kind: &'static str,
    /// `noop`, `written`, `blocked`, `rate_limited`, `not_leader`, `gone`, `error`.
    pub result: &'static str,
}

/// Labels `{kind, error}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindError {
    /// Workload kind.
    pub kind: &'static str,
    /// `ReconcileError::kind()`.
    pub error: &'static str,
}

/// Labels `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// Workload or config kind.
    pub kind: &'static str,
}

/// Labels `{sink, result}` of `wave_alerts_total` (`alerts`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlertLabels {
    /// `slack`, `teams`, `gchat`, `raw`, or `webhook-url`.
    pub sink: &'static str,
    /// `sent`, `failed` (every attempt refused or unanswered) or `dropped` (the queue was full).
    pub result: &'static str,
}

/// Labels `{resource}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// Watched resource (plural).
    pub resource: &'static str,
}

/// Labels `{result}` of webhook requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `hashed`, `gated`, `unchanged` or `error` (admitted unmodified).
    pub result: &'static str,
}

/// Labels `{at}` of `wave_pacing_decision_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PacingLabel {
    /// `event` (the watch router's share of a workload event), `admission` (a reconcile's slot or
    /// place in line) or `webhook` (an UPDATE's free slot).
    pub at: &'static str,
}

/// Labels `{version, commit}` of `wave_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: &'static str,
    /// The git commit.
    pub commit: &'static str,
}

/// Registers `wave_build_info{version, commit} 1` and the standard `process_*` series (read from
/// `/proc/self` on each scrape) in `registry`.
pub fn register_process(registry: &mut Registry, build: &crate::config::BuildInfo) {
    let info: Family<BuildLabels, Gauge> = Family::default();
    info.get_or_create(&BuildLabels {
        version: build.version,
        commit: build.commit,
    })
    .set(1);
    registry.sub_registry_with_prefix("wave").register(
        "build_info",
        "The version and commit of the running binary",
        info,
    );
    registry.register_collector(Box::new(ProcessCollector));
}

/// The `process_*` series Prometheus client libraries export, from `/proc/self` (Linux only; elsewhere
/// none are served).
#[derive(Debug)]
struct ProcessCollector;

/// Linux reports CPU time and start time in clock ticks of `USER_HZ`, 100 on every architecture wave is
/// built for (reading `sysconf(_SC_CLK_TCK)` would need `unsafe` or libc).
const USER_HZ: f64 = 100.0;

/// What `/proc/self` says, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    start_time_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    open_fds: u64,
    max_fds: Option<u64>,
}

impl ProcessStats {
    /// From `/proc/self/stat`, `/proc/self/status`, `/proc/self/limits`, the boot time in `/proc/stat`
    /// and the number of open descriptors. `None` if `stat` cannot be parsed.
    fn parse(stat: &str, status: &str, limits: &str, proc_stat: &str, open_fds: u64) -> Option<Self> {
        // The fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        // stat(5): utime is field 14, stime 15, starttime 22; `fields` starts at field 3.
        let cpu_seconds = (field(11)? + field(12)?) / USER_HZ;
        let boot = proc_stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .map(|k| k * 1024)
        };
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
        Some(Self {
            cpu_seconds,
            start_time_seconds: boot + field(19)? / USER_HZ,
            resident_bytes: kib("VmRSS:").unwrap_or_default(),
            virtual_bytes: kib("VmSize:").unwrap_or_default(),
            open_fds,
            max_fds,
        })
    }

    fn read() -> Option<Self> {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        Self::parse(
            &read("/proc/self/stat"),
            &read("/proc/self/status"),
            &read("/proc/self/limits"),
            &read("/proc/stat"),
            open_fds,
        )
    }
}

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let Some(p) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let mut gauge = |name: &str, help: &str, value: f64| -> std::fmt::Result {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
        };
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            p.start_time_seconds,
        )?;
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            p.resident_bytes as f64,
        )?;
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            p.virtual_bytes as f64,
        )?;
        gauge(
            "process_open_fds",
            "Number of open file descriptors",
            p.open_fds as f64,
        )?;
        if let Some(max) = p.max_fds {
            gauge(
                "process_max_fds",
                "Maximum number of open file descriptors",
                max as f64,
            )?;
        }
        Ok(())
    }
}

/// Every metric wave serves.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles by kind and result.
    pub reconciles: Family<KindResult, Counter>,
    /// Reconcile errors by kind and error kind.
    pub reconcile_errors: Family<KindError, Counter>,
    /// Writes that changed the config hash (each starts a rollout).
    pub rollouts: Family<KindLabel, Counter>,
    /// Reads of the Lease before a write that failed (the write waited, and was asked again shortly).
    pub lease_check_errors: Counter,
    /// Workloads whose required config is missing.
    pub waiting_for_config: Gauge,
    /// Workloads whose references to another namespace `--cross-namespace-references=deny` left out.
    pub denied_references: Gauge,
    /// Opted-in workloads in the index.
    pub tracked_workloads: Gauge,
    /// Distinct config objects referenced by opted-in workloads (present or not).
    pub tracked_config_objects: Gauge,
    /// Config objects seen by the metadata watches (referenced or not).
    pub watched_config_objects: Gauge,
    /// With `--namespace-selector`: the namespaces it selects now.
    pub selected_namespaces: Gauge,
    /// Config objects whose content is cached.
    pub cached_config_objects: Gauge,
    /// Seconds from a config change event to the patch that carries it.
    pub change_to_patch_seconds: Histogram,
    /// Workload wake-ups caused by config object changes.
    pub config_triggers: Counter,
    /// Content reads (GET) of referenced objects, by kind.
    pub content_fetches: Family<KindLabel, Counter>,
    /// Watch events by resource.
    pub watch_events: Family<ResourceLabel, Counter>,
    /// Watch errors by resource.
    pub watch_errors: Family<ResourceLabel, Counter>,
    /// 1 while this replica is the leader.
    pub leader: Gauge,
    /// With `--reloader-compat`: Deployments found running Stakater Reloader.
    pub reloader_running: Gauge,
    /// Posts about reloads (Reloader's alerts, `--webhook-url`), by sink and result.
    pub alerts: Family<AlertLabels, Counter>,
    /// Admission requests by result.
    pub webhook_requests: Family<WebhookLabels, Counter>,
    /// Config objects whose changes roll nothing because they flap.
    pub config_flapping: Gauge,
    /// Flapping episodes that began.
    pub flap_episodes: Counter,
    /// Paced rollouts in progress (`--max-concurrent-rollouts`).
    pub rollouts_in_progress: Gauge,
    /// Workloads waiting for a rollout slot.
    pub rollouts_queued: Gauge,
    /// Workloads held back because a config version they would roll failed elsewhere.
    pub rollouts_halted: Gauge,
    /// Config versions halted because a rollout of them failed.
    pub rollout_halts: Counter,
    /// Scheduling gates released because required config stayed missing past `--max-gate-duration`.
    pub gates_timed_out: Counter,
    /// Events not created because too many were already waiting (`events`).
    pub events_dropped: Counter,
    /// The webhook's missing-config reports not kept because too many were waiting for their workload
    /// (`state::bookkeeping::MissingReports`).
    pub webhook_reports_dropped: Counter,
    /// How long one reconcile took, by workload kind.
    pub reconcile_duration: Family<KindLabel, Histogram>,
    /// Workloads waiting in the reconcile queue (not counting those being reconciled).
    pub queue_depth: Gauge,
    /// How long a workload waited in the queue before a worker took it.
    pub queue_wait: Histogram,
    /// How long the webhook took to answer one admission request.
    pub webhook_duration: Histogram,
    /// How long one step of pacing took, locks included, by where it was taken (`PacingLabel`).
    pub pacing_decision: Family<PacingLabel, Histogram>,
    /// From a watch event's arrival to the end of the watch router's handling of it.
    pub router_lag: Histogram,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` under the `wave_` prefix.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            rollouts: Family::default(),
            lease_check_errors: Counter::default(),
            waiting_for_config: Gauge::default(),
            denied_references: Gauge::default(),
            tracked_workloads: Gauge::default(),
            tracked_config_objects: Gauge::default(),
            selected_namespaces: Gauge::default(),
            watched_config_objects: Gauge::default(),
            cached_config_objects: Gauge::default(),
            change_to_patch_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            config_triggers: Counter::default(),
            content_fetches: Family::default(),
            watch_events: Family::default(),
            watch_errors: Family::default(),
            leader: Gauge::default(),
            reloader_running: Gauge::default(),
            alerts: Family::default(),
            webhook_requests: Family::default(),
            config_flapping: Gauge::default(),
            flap_episodes: Counter::default(),
            rollouts_in_progress: Gauge::default(),
            rollouts_queued: Gauge::default(),
            rollouts_halted: Gauge::default(),
            rollout_halts: Counter::default(),
            gates_timed_out: Counter::default(),
            events_dropped: Counter::default(),
            webhook_reports_dropped: Counter::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            queue_depth: Gauge::default(),
            queue_wait: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            webhook_duration: Histogram::new(exponential_buckets(0.001, 2.0, 12)),
            // 10 µs to about 5 s.
            pacing_decision: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_01, 2.0, 20))
            }),
            // 100 µs to about 52 s.
            router_lag: Histogram::new(exponential_buckets(0.000_1, 2.0, 20)),
        };
        let r = registry.sub_registry_with_prefix("wave");
        r.register(
            "reconciles",
            "Reconciles by workload kind and result",
            m.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconcile errors by workload kind and error",
            m.reconcile_errors.clone(),
        );
        r.register(
            "lease_check_errors",
            "Reads of the Lease before a write that failed; the write waited and was asked again shortly",
            m.lease_check_errors.clone(),
        );
        r.register(
            "rollouts_triggered",
            "Writes that changed the config hash",
            m.rollouts.clone(),
        );
        r.register(
            "workloads_waiting_for_config",
            "Opted-in workloads whose required config is missing",
            m.waiting_for_config.clone(),
        );
        r.register(
            "workloads_with_denied_references",
            "Opted-in workloads whose references to config in another namespace were left out",
            m.denied_references.clone(),
        );
        r.register(
            "tracked_workloads",
            "Opted-in workloads in the index",
            m.tracked_workloads.clone(),
        );
        r.register(
            "tracked_config_objects",
            "Config objects referenced by opted-in workloads",
            m.tracked_config_objects.clone(),
        );
        r.register(
            "selected_namespaces",
            "With --namespace-selector: the namespaces it selects now",
            m.selected_namespaces.clone(),
        );
        r.register(
            "watched_config_objects",
            "Config objects seen by the metadata watches",
            m.watched_config_objects.clone(),
        );
        r.register(
            "cached_config_objects",
            "Config objects whose content is cached",
            m.cached_config_objects.clone(),
        );
        r.register(
            "config_change_to_patch_seconds",
            "Latency from a config change event to the patch of a dependent workload",
            m.change_to_patch_seconds.clone(),
        );
        r.register(
            "config_triggers",
            "Workload wake-ups caused by config object changes",
            m.config_triggers.clone(),
        );
        r.register(
            "content_fetches",
            "Reads of referenced config objects",
            m.content_fetches.clone(),
        );
        r.register("watch_events", "Watch events by resource", m.watch_events.clone());
        r.register("watch_errors", "Watch errors by resource", m.watch_errors.clone());
        r.register("leader", "1 while this replica is the leader", m.leader.clone());
        r.register(
            "reloader_running",
            "With --reloader-compat: Deployments found running Stakater Reloader, which acts on the same changes",
            m.reloader_running.clone(),
        );
        r.register(
            "alerts",
            "Posts about reloads (Reloader's alerts and --webhook-url) by sink and result: sent, failed after every attempt, or dropped with too many waiting",
            m.alerts.clone(),
        );
        r.register(
            "webhook_requests",
            "Admission requests by result (error: admitted unmodified)",
            m.webhook_requests.clone(),
        );
        r.register(
            "config_flapping",
            "Config objects flapping now: their changes roll nothing until they are quiet",
            m.config_flapping.clone(),
        );
        r.register(
            "config_flap_episodes",
            "Times a config object started flapping",
            m.flap_episodes.clone(),
        );
        r.register(
            "rollouts_in_progress",
            "Paced wave-triggered rollouts in progress, from the workloads' own status",
            m.rollouts_in_progress.clone(),
        );
        r.register(
            "rollouts_queued",
            "Workloads waiting for a slot under --max-concurrent-rollouts",
            m.rollouts_queued.clone(),
        );
        r.register(
            "rollouts_halted",
            "Workloads held back because a config version they would roll failed on another workload",
            m.rollouts_halted.clone(),
        );
        r.register(
            "rollout_halts",
            "Config versions halted because a rollout of them failed",
            m.rollout_halts.clone(),
        );
        r.register(
            "gates_timed_out",
            "Scheduling gates released after --max-gate-duration with required config still missing",
            m.gates_timed_out.clone(),
        );
        r.register(
            "events_dropped",
            "Events not created because too many were already waiting to be created",
            m.events_dropped.clone(),
        );
        r.register(
            "webhook_reports_dropped",
            "Missing-config reports of the webhook not kept because too many were waiting for their workload to appear",
            m.webhook_reports_dropped.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "How long one reconcile took, by workload kind",
            m.reconcile_duration.clone(),
        );
        r.register(
            "workqueue_depth",
            "Workloads waiting in the reconcile queue",
            m.queue_depth.clone(),
        );
        r.register(
            "workqueue_wait_seconds",
            "How long a workload waited in the reconcile queue before a worker took it",
            m.queue_wait.clone(),
        );
        r.register(
            "webhook_duration_seconds",
            "How long the admission webhook took to answer a request",
            m.webhook_duration.clone(),
        );
        r.register(
            "pacing_decision_seconds",
            "How long one step of pacing took, locks included: at=event (the watch router's share of a workload event), admission (a rollout's slot or place in line), webhook",
            m.pacing_decision.clone(),
        );
        r.register(
            "watch_router_lag_seconds",
            "From a watch event's arrival to the end of the watch router's handling of it",
            m.router_lag.clone(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_figures_are_read_from_proc_the_way_the_kernel_writes_them() {
        let stat =
            "4242 (wave run (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 12345 99999 2500";
        let status = "Name:\twave\nVmSize:\t  200000 kB\nVmRSS:\t   40960 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        let proc_stat = "cpu  1 2 3\nbtime 1700000000\n";
        let p = ProcessStats::parse(stat, status, limits, proc_stat, 17).expect("parses");
        assert_eq!(
            p,
            ProcessStats {
                cpu_seconds: 3.0,
                start_time_seconds: 1_700_000_123.45,
                resident_bytes: 40960 * 1024,
                virtual_bytes: 200000 * 1024,
                open_fds: 17,
                max_fds: Some(1_048_576),
            }
        );
        assert_eq!(ProcessStats::parse("garbage", "", "", "", 0), None);
    }

    #[test]
    fn the_live_process_reports_memory_and_cpu() {
        let p = ProcessStats::read().expect("this test runs on Linux");
        assert!(
            p.resident_bytes > 0 && p.open_fds > 0 && p.start_time_seconds > 1.0e9,
            "{p:?}"
        );
    }
}
