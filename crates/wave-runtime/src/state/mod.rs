//! The state the controller and the webhook share, below both: the one `Context` built at startup and
//! handed to every task, what wave remembers between reconciles (`bookkeeping`, `memory`), the content
//! cache, the work queue, the watches' health and pacing's census.
//!
//! ```text
//! controller (watch, router, reconcile, writes) ─┐
//!                                                 ├─► state (Context, memory, census) ─► wave_core
//! webhook (admission)  ──────────────────────────┘      ─► api, events, metrics, lease
//! ```

pub mod bookkeeping;
pub mod content;
pub mod health;
pub mod memory;
pub mod pacing;
pub mod workqueue;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use kube::Client;
use wave_core::coalesce::Coalescer;
use wave_core::flap::FlapDetector;
use wave_core::hash::Hashing;
use wave_core::pace::Pacer;
use wave_core::ratelimit::TokenBucket;
use wave_core::refs::ConfigKey;
use wave_core::tracker::Tracker;
use wave_core::workload::{Workload, WorkloadRef};

use self::bookkeeping::{
    KeptSnapshots, KnownHashes, Liveness, MissingReports, Notes, PendingJobs, ReloaderSightings,
    RestoreFailures, Restores,
};
use self::content::ContentCache;
use self::health::WatchHealth;
use self::workqueue::WorkQueue;
use crate::admin::Probes;
use crate::events::{EventPublisher, EventType};
use crate::lease::{Leadership, LeaseCheck};
use crate::metrics::Metrics;

/// Everything the tasks share.
pub struct Context {
    /// API client.
    pub client: Client,
    /// What the watches have shown (pure state; short critical sections, never held across `.await`).
    pub tracker: RwLock<Tracker>,
    /// Content of referenced config objects.
    pub content: ContentCache,
    /// Workloads to reconcile.
    pub queue: Arc<WorkQueue<WorkloadRef>>,
    /// The one process-wide write bucket, with each waiting workload's place in line.
    pub limiter: Mutex<TokenBucket<WorkloadRef>>,
    /// Events about workloads.
    pub events: EventPublisher,
    /// Metrics.
    pub metrics: Metrics,
    /// Watch errors, for `/readyz`.
    pub watch_health: Arc<WatchHealth>,
    /// Whether this replica may write (always true without leader election).
    pub leadership: Leadership,
    /// With leader election: the check, before each write, that the lease is still held.
    pub lease: Option<LeaseCheck>,
    /// Workloads waiting for missing config, each reported once per distinct missing set.
    pub missing: MissingReports,
    /// Workloads whose references to another namespace were denied, each reported once per distinct set.
    pub denied: Notes,
    /// Workloads whose last write failed, each reported once per kind of failure (`controller::write`).
    pub write_failures: Notes,
    /// `--max-gate-duration`: how long wave's scheduling gate may hold pods.
    pub max_gate: Duration,
    /// How the config hash is computed (keyed with `--hash-key-secret`).
    pub hashing: Hashing,
    /// `--restart-strategy`.
    pub restart: wave_core::inplace::Strategy,
    /// `--agent-image`.
    pub agent_image: Option<String>,
    /// When each workload last rolled, for coalescing.
    pub coalescer: Mutex<Coalescer<WorkloadRef>>,
    /// `--min-rollout-interval`.
    pub min_rollout_interval: Duration,
    /// The flap breaker.
    pub flaps: Mutex<FlapDetector<ConfigKey, WorkloadRef>>,
    /// Workloads a flapping object held back and that are owed a `ConfigSettled` Event with their write.
    pub settled: Mutex<BTreeSet<WorkloadRef>>,
    /// Paced rollouts: the waiting line (`--max-concurrent-rollouts`; off at 0).
    pub pacer: Mutex<Pacer>,
    /// `--rollout-deadline`.
    pub rollout_deadline: Duration,
    /// The last config hashes of each workload, for undo detection.
    pub known_hashes: KnownHashes,
    /// `--config-history`: keep config snapshots for every workload that does not opt out.
    pub config_history: bool,
    /// `--legacy-wave-cleanup`: config objects may be patched to remove Wave ≤ v0.6's owner references.
    pub legacy_wave_cleanup: bool,
    /// What was said about Wave ≤ v0.6's leftovers, once per workload.
    pub legacy_reports: Notes,
    /// The config snapshots known to be kept.
    pub kept_snapshots: KeptSnapshots,
    /// Restores the watches have not shown whole yet.
    pub restores: Restores,
    /// Restores that failed in a row, per workload.
    pub restore_failures: RestoreFailures,
    /// The essential tasks, for `/livez`.
    pub liveness: Liveness,
    /// For workloads opted in through Reloader's annotations: the SHA-1s wave last saw.
    pub reloader_seen: Mutex<wave_core::reloader::Seen>,
    /// With `--reloader-compat`: the Deployments found running Reloader.
    pub reloader_sightings: ReloaderSightings,
    /// Jobs deleted to be created again, not created yet.
    pub pending_jobs: PendingJobs,
    /// With Reloader's alerts or `--webhook-url`: where posts about reloads are queued.
    pub outbox: Option<crate::alerts::Outbox>,
    /// `--own-deployment`: where start-up warnings are published as Events.
    pub own_deployment: Option<WorkloadRef>,
}

impl Context {
    /// Whether this replica is the leader.
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// The coalescer (short critical sections).
    pub fn coalescer(&self) -> MutexGuard<'_, Coalescer<WorkloadRef>> {
        self.coalescer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What wave saw of Reloader workloads' config (short critical sections).
    pub fn reloader_seen(&self) -> MutexGuard<'_, wave_core::reloader::Seen> {
        self.reloader_seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The flap breaker (short critical sections).
    pub fn flaps(&self) -> MutexGuard<'_, FlapDetector<ConfigKey, WorkloadRef>> {
        self.flaps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pacer (short critical sections; taken after the tracker's lock, never before it).
    pub fn pacer(&self) -> MutexGuard<'_, Pacer> {
        self.pacer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Workloads owed a `ConfigSettled` Event.
    pub fn settled(&self) -> MutexGuard<'_, BTreeSet<WorkloadRef>> {
        self.settled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The write bucket (short critical sections, never held across `.await`).
    pub fn limiter(&self) -> MutexGuard<'_, TokenBucket<WorkloadRef>> {
        self.limiter.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read access to the tracker.
    pub fn tracker(&self) -> RwLockReadGuard<'_, Tracker> {
        self::content::read(&self.tracker)
    }

    /// Write access to the tracker.
    pub fn tracker_mut(&self) -> RwLockWriteGuard<'_, Tracker> {
        self::content::write(&self.tracker)
    }

    /// Publishes a Warning about `workload`, and logs it, unless `notes` holds this note as the last
    /// one said about it: one Warning per distinct note, not one per reconcile.
    pub fn warn_once(
        &self,
        notes: &Notes,
        workload: &Workload,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        if notes.report(&workload.id, &note) {
            tracing::warn!(workload = %workload.id, "{note}");
            self.events
                .publish(workload, EventType::Warning, reason, action, note);
        }
    }

    /// Whether the controller is ready: every watch listed once and none failing. `Err` says why not.
    /// A refusal for one object never makes wave unready (see `bookkeeping`).
    pub fn readiness(&self) -> Result<(), String> {
        let failing = self.watch_health.failing();
        if !failing.is_empty() {
            return Err(format!("watches failing: {}", failing.join("; ")));
        }
        let tracker = self.tracker();
        let unsynced = tracker.unsynced();
        if unsynced.is_empty() {
            Ok(())
        } else {
            let names: Vec<String> = unsynced.iter().map(|s| self::health::describe(s)).collect();
            Err(format!("waiting for the first list of: {}", names.join(", ")))
        }
    }
}

impl Probes for Context {
    fn live(&self) -> Result<(), String> {
        self.liveness.check()
    }

    fn ready(&self) -> Result<(), String> {
        self.readiness()
    }
}
