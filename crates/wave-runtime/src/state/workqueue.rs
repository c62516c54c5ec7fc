//! The async reconcile queue: [`QueueState`](wave_core::queue::QueueState) behind a mutex, plus a
//! `Notify` for idle workers, and one timer task ([`WorkQueue::run_timer`]) for every delayed re-add
//! ([`Delays`](wave_core::queue::Delays): one entry per key, the earliest wins).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;

use wave_core::queue::{Delays, QueueState};

/// A de-duplicating queue shared by the watch router (producer) and the workers (consumers).
pub struct WorkQueue<K> {
    state: Mutex<QueueState<K>>,
    notify: Notify,
    /// When each waiting key was first added, for the wait-time histogram.
    added: Mutex<HashMap<K, Instant>>,
    delays: Mutex<Delays<K>>,
    /// Wakes the timer task when the earliest delay moved earlier.
    rearm: Notify,
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
            delays: Mutex::default(),
            rearm: Notify::new(),
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

    fn delays(&self) -> std::sync::MutexGuard<'_, Delays<K>> {
        self.delays.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `key` after `delay`, keeping the time of the change that triggered it. A key already due
    /// sooner keeps its time ([`Delays`]).
    pub fn add_after(&self, key: K, delay: Duration, triggered: Option<Instant>) {
        if self.delays().schedule(key, Instant::now() + delay, triggered) {
            self.rearm.notify_one();
        }
    }

    /// The timer: adds each delayed key when it is due. Runs for the life of the controller.
    pub async fn run_timer(&self) {
        loop {
            let rearmed = self.rearm.notified();
            let (due, next) = {
                let mut delays = self.delays();
                let due = delays.pop_due(Instant::now());
                (due, delays.next_due())
            };
            for (key, triggered) in due {
                self.add(key, triggered);
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => {}
                        () = rearmed => {}
                    }
                }
                None => rearmed.await,
            }
        }
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
