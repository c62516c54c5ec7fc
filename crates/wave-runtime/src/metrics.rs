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

/// Every metric wave serves.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles by kind and result.
    pub reconciles: Family<KindResult, Counter>,
    /// Reconcile errors by kind and error kind.
    pub reconcile_errors: Family<KindError, Counter>,
    /// Writes that changed the config hash (each starts a rollout).
    pub rollouts: Family<KindLabel, Counter>,
    /// Workloads whose required config is missing.
    pub waiting_for_config: Gauge,
    /// Opted-in workloads in the index.
    pub tracked_workloads: Gauge,
    /// Distinct config objects referenced by opted-in workloads (present or not).
    pub tracked_config_objects: Gauge,
    /// Config objects seen by the metadata watches (referenced or not).
    pub watched_config_objects: Gauge,
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
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` under the `wave_` prefix.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            rollouts: Family::default(),
            waiting_for_config: Gauge::default(),
            tracked_workloads: Gauge::default(),
            tracked_config_objects: Gauge::default(),
            watched_config_objects: Gauge::default(),
            cached_config_objects: Gauge::default(),
            change_to_patch_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            config_triggers: Counter::default(),
            content_fetches: Family::default(),
            watch_events: Family::default(),
            watch_errors: Family::default(),
            leader: Gauge::default(),
            webhook_requests: Family::default(),
            config_flapping: Gauge::default(),
            flap_episodes: Counter::default(),
            rollouts_in_progress: Gauge::default(),
            rollouts_queued: Gauge::default(),
            rollouts_halted: Gauge::default(),
            rollout_halts: Counter::default(),
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
        m
    }
}
