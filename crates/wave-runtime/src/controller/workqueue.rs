//! The async reconcile queue: [`QueueState`](wave_core::queue::QueueState) behind a mutex, plus a
//! `Notify` for idle workers and timers for delayed re-adds.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;

use wave_core::queue::QueueState;

/// A de-duplicating queue shared by the watch router (producer) and the workers (consumers).
pub struct WorkQueue<K> {
    state: Mutex<QueueState<K>>,
    notify: Notify,
    /// When each waiting key was first added, for the wait-time histogram.
    added: Mutex<HashMap<K, Instant>>,
    depth: Gauge,
    wait: Histogram,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue reporting its depth and its keys' wait times to `depth` and `wait`.
    pub fn new(depth: Gauge, wait: Histogram) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(QueueState::default()),
            notify: Notify::new(),
            added: Mutex::default(),
            depth,
            wait,
        })
    }

    fn added(&self) -> std::sync::MutexGuard<'_, HashMap<K, Instant>> {
        self.added.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, QueueState<K>> {
        // A panic while holding this lock cannot leave the state half-updated (every method is a few
        // map operations), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `key`; `triggered` is when the config change that caused it was seen.
    pub fn add(&self, key: K, triggered: Option<Instant>) {
        self.added().entry(key.clone()).or_insert_with(Instant::now);
        let mut state = self.state();
        let ready = state.add(key, triggered);
        self.depth.set(state.len() as i64);
        drop(state);
        if ready {
            self.notify.notify_one();
        }
    }

    /// Adds `key` after `delay`, keeping the time of the change that triggered it.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration, triggered: Option<Instant>) {
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key, triggered);
        });
    }

    /// Waits for the next key; the caller must call [`done`](Self::done) when finished with it.
    pub async fn next(&self) -> (K, Option<Instant>) {
        loop {
            let notified = self.notify.notified();
            let popped = {
                let mut state = self.state();
                let popped = state.pop();
                self.depth.set(state.len() as i64);
                popped
            };
            if let Some(item) = popped {
                if let Some(at) = self.added().remove(&item.0) {
                    self.wait.observe(at.elapsed().as_secs_f64());
                }
                return item;
            }
            notified.await;
        }
    }

    /// Marks `key` finished.
    pub fn done(&self, key: &K) {
        if self.state().done(key) {
            self.notify.notify_one();
        }
    }
}
