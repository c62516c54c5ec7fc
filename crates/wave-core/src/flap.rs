//! The flap circuit breaker (`docs/behaviour.md`, "Flapping config"): a ConfigMap or Secret that changes
//! more than `threshold` times within `window` rolls nothing until it has been quiet for `quiet`; then its
//! final value rolls once.
//!
//! ```text
//! observe(object, now)    a change of a referenced object ─► Started the first time it crosses the
//!                         threshold (one Warning per episode), else Counted
//! flapping(objects, now)  which of a workload's objects flap, and until when (`decide` holds only the
//!                         rollouts that deliver their change)
//! hold(object, workload)  true the first time a workload is held back in an episode (one Warning each)
//! settle(now)             episodes whose quiet period is over: the objects, and the workloads they held
//! ```
//!
//! Time is passed in; memory is bounded by the referenced objects (a change is only observed for those)
//! and each object keeps at most `threshold + 1` timestamps.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// When an object counts as flapping, and how long it must be quiet to settle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlapPolicy {
    /// More changes than this within `window` is flapping; `0` turns the breaker off.
    pub threshold: usize,
    /// The window the changes are counted in.
    pub window: Duration,
    /// How long a flapping object must not change before its final value rolls.
    pub quiet: Duration,
}

impl FlapPolicy {
    /// The defaults: more than 10 changes in 10 minutes, settled after 5 quiet minutes. A config that
    /// changes every minute for ten minutes is not being edited by people.
    pub const DEFAULT: FlapPolicy = FlapPolicy {
        threshold: 10,
        window: Duration::from_secs(600),
        quiet: Duration::from_secs(300),
    };
}

/// What one observed change meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Counted; the object does not flap (or the breaker is off).
    Counted,
    /// This change made the object flap.
    Started,
    /// The object was already flapping; its quiet period starts again.
    StillFlapping,
}

#[derive(Debug)]
struct Episode<W> {
    since: Instant,
    last_change: Instant,
    changes: usize,
    held: BTreeSet<W>,
}

/// A settled episode.
#[derive(Debug, PartialEq, Eq)]
pub struct Settled<K, W> {
    /// The object.
    pub object: K,
    /// Changes it made while flapping.
    pub changes: usize,
    /// The workloads it held back.
    pub held: BTreeSet<W>,
}

/// See the module docs.
#[derive(Debug)]
pub struct FlapDetector<K, W> {
    policy: FlapPolicy,
    recent: HashMap<K, VecDeque<Instant>>,
    flapping: HashMap<K, Episode<W>>,
}

impl<K: Eq + Hash + Clone + Ord, W: Ord + Clone> FlapDetector<K, W> {
    /// A detector with `policy`.
    pub fn new(policy: FlapPolicy) -> Self {
        Self {
            policy,
            recent: HashMap::new(),
            flapping: HashMap::new(),
        }
    }

    /// The policy it applies.
    pub fn policy(&self) -> FlapPolicy {
        self.policy
    }

    /// Notes that `object`'s data changed at `now`.
    pub fn observe(&mut self, object: &K, now: Instant) -> Observed {
        if self.policy.threshold == 0 {
            return Observed::Counted;
        }
        if let Some(episode) = self.flapping.get_mut(object) {
            episode.last_change = now;
            episode.changes += 1;
            return Observed::StillFlapping;
        }
        let times = self.recent.entry(object.clone()).or_default();
        times.push_back(now);
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.policy.window)
        {
            times.pop_front();
        }
        if times.len() <= self.policy.threshold {
            return Observed::Counted;
        }
        let changes = times.len();
        self.recent.remove(object);
        self.flapping.insert(
            object.clone(),
            Episode {
                since: now,
                last_change: now,
                changes,
                held: BTreeSet::new(),
            },
        );
        Observed::Started
    }

    /// Those of `objects` that flap at `now`, each with when it settles (`decide::Facts::flapping`).
    pub fn flapping<'a>(&self, objects: impl IntoIterator<Item = &'a K>, now: Instant) -> Vec<(K, Instant)>
    where
        K: 'a,
    {
        objects
            .into_iter()
            .filter_map(|k| {
                let until = self.flapping.get(k)?.last_change + self.policy.quiet;
                (until > now).then(|| (k.clone(), until))
            })
            .collect()
    }

    /// Notes that `object` holds `workload` back; whether that is new in this episode.
    pub fn hold(&mut self, object: &K, workload: &W) -> bool {
        self.flapping
            .get_mut(object)
            .is_some_and(|e| e.held.insert(workload.clone()))
    }

    /// When `object` started flapping, if it does.
    pub fn flapping_since(&self, object: &K) -> Option<Instant> {
        self.flapping.get(object).map(|e| e.since)
    }

    /// Ends the episodes whose quiet period is over at `now`.
    pub fn settle(&mut self, now: Instant) -> Vec<Settled<K, W>> {
        let quiet = self.policy.quiet;
        let done: Vec<K> = self
            .flapping
            .iter()
            .filter(|(_, e)| e.last_change + quiet <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out: Vec<Settled<K, W>> = done
            .into_iter()
            .filter_map(|k| {
                let e = self.flapping.remove(&k)?;
                Some(Settled {
                    object: k,
                    changes: e.changes,
                    held: e.held,
                })
            })
            .collect();
        out.sort_by(|a, b| a.object.cmp(&b.object));
        out
    }

    /// Forgets a deleted object; its episode, if any, ends without a settle.
    pub fn forget(&mut self, object: &K) {
        self.recent.remove(object);
        self.flapping.remove(object);
    }

    /// Objects flapping now (for the metric).
    pub fn flapping_count(&self) -> usize {
        self.flapping.len()
    }
}

#[cfg(test)]
// The tests need one real `Instant` to count from; the code under test never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn policy() -> FlapPolicy {
        FlapPolicy {
            threshold: 5,
            window: Duration::from_secs(30),
            quiet: Duration::from_secs(10),
        }
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn more_changes_than_the_threshold_within_the_window_is_flapping() {
        let t0 = Instant::now();
        let mut d: FlapDetector<&str, &str> = FlapDetector::new(policy());
        for s in 0..5 {
            assert_eq!(d.observe(&"cm", secs(t0, s)), Observed::Counted, "change {s}");
        }
        assert_eq!(d.observe(&"cm", secs(t0, 5)), Observed::Started);
        assert_eq!(d.observe(&"cm", secs(t0, 6)), Observed::StillFlapping);
        assert_eq!(d.flapping_since(&"cm"), Some(secs(t0, 5)));
        assert_eq!(d.flapping_count(), 1);
    }

    #[test]
    fn changes_spread_wider_than_the_window_never_flap() {
        let t0 = Instant::now();
        let mut d: FlapDetector<&str, &str> = FlapDetector::new(policy());
        for s in 0..100 {
            assert_eq!(d.observe(&"cm", secs(t0, s * 7)), Observed::Counted);
        }
    }

    #[test]
    fn a_flapping_object_holds_its_workloads_until_it_has_been_quiet_then_settles_once() {
        let t0 = Instant::now();
        let mut d: FlapDetector<&str, &str> = FlapDetector::new(policy());
        for s in 0..=5 {
            d.observe(&"cm", secs(t0, s));
        }
        assert_eq!(d.flapping([&"cm", &"other"], secs(t0, 6)), [("cm", secs(t0, 15))]);
        assert!(d.hold(&"cm", &"web"), "the first hold of a workload is new");
        assert!(!d.hold(&"cm", &"web"), "and only the first");
        d.observe(&"cm", secs(t0, 12));
        assert_eq!(
            d.flapping([&"cm"], secs(t0, 16)),
            [("cm", secs(t0, 22))],
            "each change restarts the quiet period"
        );
        assert!(d.settle(secs(t0, 21)).is_empty());
        let settled = d.settle(secs(t0, 22));
        assert_eq!(
            settled,
            vec![Settled {
                object: "cm",
                changes: 7,
                held: BTreeSet::from(["web"])
            }]
        );
        assert!(d.flapping([&"cm"], secs(t0, 22)).is_empty());
        assert!(d.settle(secs(t0, 60)).is_empty(), "settled once");
    }

    #[test]
    fn a_threshold_of_zero_turns_the_breaker_off() {
        let t0 = Instant::now();
        let mut d: FlapDetector<&str, &str> = FlapDetector::new(FlapPolicy {
            threshold: 0,
            ..policy()
        });
        for s in 0..1000 {
            assert_eq!(d.observe(&"cm", t0 + Duration::from_millis(s)), Observed::Counted);
        }
        assert!(d.flapping([&"cm"], t0).is_empty());
    }

    #[test]
    fn a_deleted_object_is_forgotten() {
        let t0 = Instant::now();
        let mut d: FlapDetector<&str, &str> = FlapDetector::new(policy());
        for s in 0..=5 {
            d.observe(&"cm", secs(t0, s));
        }
        d.forget(&"cm");
        assert_eq!(d.flapping_count(), 0);
        assert!(d.flapping([&"cm"], secs(t0, 6)).is_empty());
    }
}
