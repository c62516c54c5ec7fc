//! The state of the reconcile queue, without any I/O (client-go's workqueue discipline).
//!
//! ```text
//! add(k) ──► queued? ─yes─► merge (keep the earliest trigger time)
//!              │no
//!            active? ─yes─► dirty: run again once the current reconcile ends
//!              │no
//!              ▼
//!           pending ──pop()──► active ──done(k)──► (dirty? back to pending)
//! ```
//!
//! One key is never reconciled twice at once, duplicates merge, and an add during a reconcile is not lost.
//!
//! Delayed adds (a retry, a coalesced or held rollout looking again) go through [`Delays`]: one entry
//! per key, the earliest due time winning, as kube-runtime's scheduler merges them. A workload held
//! for minutes and woken by every event in between then has one timer, not one per event.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Instant;

/// Queue state for keys `K`. Each queued key carries the earliest time it was triggered by a config
/// change, for the change-to-patch latency metric.
#[derive(Debug)]
pub struct QueueState<K> {
    pending: VecDeque<K>,
    queued: HashMap<K, Option<Instant>>,
    active: HashSet<K>,
    dirty: HashMap<K, Option<Instant>>,
}

impl<K> Default for QueueState<K> {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
            queued: HashMap::new(),
            active: HashSet::new(),
            dirty: HashMap::new(),
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<K: Clone + Eq + Hash> QueueState<K> {
    /// Adds `key`. Returns true if it became poppable (a waiting worker should wake).
    pub fn add(&mut self, key: K, triggered: Option<Instant>) -> bool {
        if let Some(t) = self.queued.get_mut(&key) {
            *t = earliest(*t, triggered);
            return false;
        }
        if self.active.contains(&key) {
            let t = self.dirty.entry(key).or_insert(None);
            *t = earliest(*t, triggered);
            return false;
        }
        self.queued.insert(key.clone(), triggered);
        self.pending.push_back(key);
        true
    }

    /// Takes the next key to reconcile and marks it active.
    pub fn pop(&mut self) -> Option<(K, Option<Instant>)> {
        let key = self.pending.pop_front()?;
        let triggered = self.queued.remove(&key).flatten();
        self.active.insert(key.clone());
        Some((key, triggered))
    }

    /// Marks `key` finished. Returns true if it was re-added meanwhile and is pending again.
    pub fn done(&mut self, key: &K) -> bool {
        self.active.remove(key);
        match self.dirty.remove(key) {
            Some(triggered) => self.add(key.clone(), triggered),
            None => false,
        }
    }

    /// Keys waiting (not counting active ones).
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Keys to add later, one entry per key (see the module docs).
#[derive(Debug)]
pub struct Delays<K> {
    by_time: BTreeMap<(Instant, u64), K>,
    by_key: HashMap<K, ((Instant, u64), Option<Instant>)>,
    seq: u64,
}

impl<K> Default for Delays<K> {
    fn default() -> Self {
        Self {
            by_time: BTreeMap::new(),
            by_key: HashMap::new(),
            seq: 0,
        }
    }
}

impl<K: Clone + Eq + Hash> Delays<K> {
    /// Schedules `key` for `at`; an entry due earlier stays (its trigger time merges). Returns whether
    /// the earliest due time moved earlier (a sleeping timer is to wake and re-arm).
    pub fn schedule(&mut self, key: K, at: Instant, triggered: Option<Instant>) -> bool {
        let before = self.next_due();
        if let Some((slot, was)) = self.by_key.get_mut(&key) {
            *was = earliest(*was, triggered);
            if slot.0 <= at {
                return false;
            }
            let old = *slot;
            self.by_time.remove(&old);
        }
        let slot = (at, self.seq);
        self.seq += 1;
        let triggered = self.by_key.get(&key).and_then(|(_, t)| *t).or(triggered);
        self.by_time.insert(slot, key.clone());
        self.by_key.insert(key, (slot, triggered));
        before.is_none_or(|b| at < b)
    }

    /// When the next key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.by_time.keys().next().map(|(at, _)| *at)
    }

    /// The keys due at `now`, removed, in due order.
    pub fn pop_due(&mut self, now: Instant) -> Vec<(K, Option<Instant>)> {
        let mut due = Vec::new();
        while let Some(entry) = self.by_time.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            let triggered = self.by_key.remove(&key).and_then(|(_, t)| t);
            due.push((key, triggered));
        }
        due
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
// The tests need one real `Instant` to count from; the code under test never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn duplicate_adds_merge_and_keep_the_earliest_trigger() {
        let t0 = Instant::now();
        let mut q = QueueState::default();
        assert!(q.add("a", Some(t0 + Duration::from_secs(1))));
        assert!(!q.add("a", Some(t0)));
        assert!(!q.add("a", None));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some(("a", Some(t0))));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_key_added_while_active_runs_again_after_done_and_never_concurrently() {
        let mut q = QueueState::default();
        q.add("a", None);
        let (k, _) = q.pop().unwrap();
        assert!(!q.add("a", None), "active keys are not poppable");
        assert_eq!(q.pop(), None);
        assert!(q.done(&k), "the add during the reconcile is not lost");
        assert_eq!(q.pop().map(|(k, _)| k), Some("a"));
        assert!(!q.done(&"a"));
        assert!(q.is_empty());
    }

    #[test]
    fn keys_come_out_in_arrival_order() {
        let mut q = QueueState::default();
        for k in ["a", "b", "c"] {
            q.add(k, None);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(k, _)| k)).collect();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // one real Instant to count from
    fn a_key_scheduled_many_times_has_one_entry_due_at_its_earliest_time() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let mut d = Delays::default();
        assert!(d.schedule("w", at(10), None), "the first entry arms the timer");
        for s in 11..1000 {
            assert!(!d.schedule("w", at(s), Some(at(1))), "a later time merges");
        }
        assert_eq!(d.len(), 1);
        assert!(d.schedule("w", at(5), None), "an earlier time moves it");
        assert!(!d.schedule("x", at(7), None), "x is due after w: the timer stays");
        assert_eq!(d.next_due(), Some(at(5)));
        assert!(d.pop_due(at(4)).is_empty());
        assert_eq!(d.pop_due(at(7)), [("w", Some(at(1))), ("x", None)]);
        assert!(d.is_empty() && d.next_due().is_none());
    }
}
