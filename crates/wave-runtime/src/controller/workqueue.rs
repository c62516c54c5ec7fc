//! The async reconcile queue: [`QueueState`](wave_core::queue::QueueState) behind a mutex, plus a
//! `Notify` for idle workers and timers for delayed re-adds.

use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use wave_core::queue::QueueState;

/// A de-duplicating queue shared by the watch router (producer) and the workers (consumers).
pub struct WorkQueue<K> {
    state: Mutex<QueueState<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(QueueState::default()),
            notify: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, QueueState<K>> {
        // A panic while holding this lock cannot leave the state half-updated (every method is a few
        // map operations), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `key`; `triggered` is when the config change that caused it was seen.
    pub fn add(&self, key: K, triggered: Option<Instant>) {
        if self.state().add(key, triggered) {
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
            if let Some(item) = self.state().pop() {
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
