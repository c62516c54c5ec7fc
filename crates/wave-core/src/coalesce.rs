//! Coalescing: at most one config-triggered rollout per workload per interval (`docs/behaviour.md`,
//! "Coalescing bursts").
//!
//! ```text
//! plan says "write a new hash" ─► Coalescer::check(workload, now, interval)
//!     no rollout within the interval ─► write now (a single change keeps today's latency)
//!     the last rollout was t ago      ─► wait interval − t, then plan again: every change made in the
//!                                        meantime is merged into one write of the final hash
//! written ─► Coalescer::record(workload, now)
//! ```
//!
//! Time is passed in. The state is per process: a restarted wave may write the first change after it
//! starts at once, which is at most one write more than the interval allows.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::duration;
use crate::names;

/// `--min-rollout-interval`'s default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// When each workload was last rolled by wave.
#[derive(Debug)]
pub struct Coalescer<K> {
    last: HashMap<K, Instant>,
}

impl<K> Default for Coalescer<K> {
    fn default() -> Self {
        Self { last: HashMap::new() }
    }
}

impl<K: Eq + Hash + Clone> Coalescer<K> {
    /// `Ok` if `key` may roll at `now`, or how long until it may.
    pub fn check(&self, key: &K, now: Instant, interval: Duration) -> Result<(), Duration> {
        let Some(last) = self.last.get(key) else {
            return Ok(());
        };
        match (*last + interval).checked_duration_since(now) {
            Some(wait) if !wait.is_zero() => Err(wait),
            _ => Ok(()),
        }
    }

    /// Notes that `key` rolled at `now`.
    pub fn record(&mut self, key: &K, now: Instant) {
        self.last.insert(key.clone(), now);
    }

    /// Forgets a deleted workload.
    pub fn forget(&mut self, key: &K) {
        self.last.remove(key);
    }

    /// Workloads remembered (bounded by the opted-in workloads: deleted ones are forgotten).
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// The workload's interval: its `wave.pusher.com/min-rollout-interval` annotation (a Go duration; `0`
/// turns coalescing off), else `default`. `Err` says why the annotation was ignored; the default then
/// applies.
pub fn interval(annotations: &BTreeMap<String, String>, default: Duration) -> (Duration, Option<String>) {
    duration::annotation(annotations, names::MIN_ROLLOUT_INTERVAL, default)
}

#[cfg(test)]
// The tests need one real `Instant` to count from; the code under test never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn the_first_change_rolls_at_once_and_later_ones_wait_for_the_end_of_the_interval() {
        let t0 = Instant::now();
        let mut c = Coalescer::default();
        let five = Duration::from_secs(5);
        assert_eq!(c.check(&"w", t0, five), Ok(()));
        c.record(&"w", t0);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(c.check(&"w", t1, five), Err(Duration::from_secs(4)));
        assert_eq!(c.check(&"other", t1, five), Ok(()), "per workload");
        assert_eq!(c.check(&"w", t0 + five, five), Ok(()));
    }

    #[test]
    fn an_interval_of_zero_never_waits() {
        let t0 = Instant::now();
        let mut c = Coalescer::default();
        c.record(&"w", t0);
        assert_eq!(c.check(&"w", t0, Duration::ZERO), Ok(()));
    }

    #[test]
    fn a_forgotten_workload_rolls_at_once() {
        let t0 = Instant::now();
        let mut c = Coalescer::default();
        c.record(&"w", t0);
        c.forget(&"w");
        assert!(c.is_empty());
        assert_eq!(c.check(&"w", t0, DEFAULT_INTERVAL), Ok(()));
    }

    #[test]
    fn the_annotation_overrides_the_default_and_a_bad_one_is_named_and_ignored() {
        let ann = |v: &str| BTreeMap::from([(names::MIN_ROLLOUT_INTERVAL.to_string(), v.to_string())]);
        assert_eq!(
            interval(&BTreeMap::new(), DEFAULT_INTERVAL),
            (DEFAULT_INTERVAL, None)
        );
        assert_eq!(interval(&ann("30s"), DEFAULT_INTERVAL).0, Duration::from_secs(30));
        assert_eq!(interval(&ann("0"), DEFAULT_INTERVAL).0, Duration::ZERO);
        let (d, why) = interval(&ann("soon"), DEFAULT_INTERVAL);
        assert_eq!(d, DEFAULT_INTERVAL);
        assert!(why.unwrap().contains("min-rollout-interval"));
    }
}
