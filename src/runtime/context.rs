//! The one `Context` built at startup and handed to every task.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kube::Client;

use super::content::ContentCache;
use super::events::EventPublisher;
use super::metrics::Metrics;
use super::watch::WatchHealth;
use super::workqueue::WorkQueue;
use crate::core::ratelimit::TokenBucket;
use crate::core::tracker::Tracker;
use crate::core::workload::WorkloadRef;

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
    /// The one process-wide write bucket.
    pub limiter: Mutex<TokenBucket>,
    /// Events about workloads.
    pub events: EventPublisher,
    /// Metrics.
    pub metrics: Metrics,
    /// Watch errors, for `/readyz`.
    pub watch_health: Arc<WatchHealth>,
    /// Whether this replica may write (always true without leader election).
    pub leader: AtomicBool,
    /// The last missing-config message reported per workload, so each distinct set is reported once.
    pub reported_missing: Mutex<HashMap<WorkloadRef, String>>,
    /// `--max-gate-duration`: how long wave's scheduling gate may hold pods.
    pub max_gate: std::time::Duration,
    /// Permission errors of reconciles, by error kind, until the same operation succeeds again.
    pub permission_errors: Mutex<BTreeMap<&'static str, String>>,
}

impl Context {
    /// Whether this replica is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }

    /// Whether the controller is ready: every watch listed once and none failing. `Err` says why not.
    pub fn readiness(&self) -> Result<(), String> {
        let failing = self.watch_health.failing();
        if !failing.is_empty() {
            return Err(format!("watches failing: {}", failing.join("; ")));
        }
        let denied: Vec<String> = self
            .permission_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        if !denied.is_empty() {
            return Err(format!("permission denied: {}", denied.join("; ")));
        }
        let tracker = super::content::read(&self.tracker);
        let unsynced = tracker.unsynced();
        if unsynced.is_empty() {
            Ok(())
        } else {
            let names: Vec<String> = unsynced.iter().map(|s| super::watch::describe(s)).collect();
            Err(format!("waiting for the first list of: {}", names.join(", ")))
        }
    }
}
