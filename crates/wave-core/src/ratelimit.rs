//! The one process-wide token bucket that limits writes (difference `global-rate-limit`:
//! Wave builds one bucket per kind).
//!
//! Time is passed in, so the bucket is a pure value. A caller that gets no token is given a
//! *reservation*: the instant its token will be due, in first-come order. It requeues itself for that
//! instant, so waiting never holds a worker, and each waiter wakes once, when its own token is due,
//! instead of every waiter waking for every token (which re-planned all N waiters per token: O(N²)).
//!
//! ```text
//! reserve(key, now) ─ reservation due ≤ now ─► Ok (the reserved token is spent)
//!                   ─ reservation due > now ─► Err(due − now) (no second place in line)
//!                   ─ token in the bucket   ─► Ok
//!                   ─ otherwise             ─► a reservation at the next free slot ─► Err(wait)
//! cancel(key)       ─ a waiter that no longer needs its token gives it back
//! ```

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Wave's defaults: `--update-rate 1.0`, `--update-burst 100`.
pub const DEFAULT_RATE: f64 = 1.0;
/// Default burst.
pub const DEFAULT_BURST: u32 = 100;
/// The longest wait the bucket asks for. A tiny rate (`--update-rate=1e-20`) would otherwise ask for a
/// wait no `Duration` can hold; the caller simply asks again after this long.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A token bucket refilled at `rate` tokens per second up to `burst`, with first-come reservations.
#[derive(Debug)]
pub struct TokenBucket<K> {
    rate: f64,
    burst: f64,
    /// Tokens available; negative while tokens are promised to waiters.
    tokens: f64,
    last: Option<Instant>,
    reserved: HashMap<K, Instant>,
}

impl<K: Eq + Hash + Clone> TokenBucket<K> {
    /// A full bucket. Wave's flag rules: a rate `<= 0` (or NaN) means the default, `+Inf` means
    /// unlimited; a burst of 0 means the default.
    pub fn new(rate: f64, burst: u32) -> Self {
        let rate = if rate > 0.0 { rate } else { DEFAULT_RATE };
        let burst = f64::from(if burst == 0 { DEFAULT_BURST } else { burst });
        Self {
            rate,
            burst,
            tokens: burst,
            last: None,
            reserved: HashMap::new(),
        }
    }

    /// Whether the bucket never limits.
    pub fn is_unlimited(&self) -> bool {
        self.rate.is_infinite()
    }

    /// How many waiters hold a reservation.
    pub fn waiting(&self) -> usize {
        self.reserved.len()
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.last = Some(now.max(self.last.unwrap_or(now)));
    }

    /// Takes one token for `key` at `now`, or says how long until `key`'s reserved token is due.
    pub fn reserve(&mut self, key: &K, now: Instant) -> Result<(), Duration> {
        if self.is_unlimited() {
            return Ok(());
        }
        if let Some(due) = self.reserved.get(key).copied() {
            return match due.checked_duration_since(now) {
                Some(wait) if !wait.is_zero() => Err(wait),
                _ => {
                    self.reserved.remove(key);
                    Ok(())
                }
            };
        }
        self.refill(now);
        let before = self.tokens;
        self.tokens -= 1.0;
        if before >= 1.0 {
            return Ok(());
        }
        // The token is promised now (the bucket goes into debt), so the next waiter lines up behind.
        let wait = Duration::try_from_secs_f64((1.0 - before) / self.rate)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        self.reserved.insert(key.clone(), now + wait);
        Err(wait)
    }

    /// Gives back `key`'s reservation, if it holds one: it was woken and found nothing to write, or
    /// the workload is gone. Waiters behind it keep their places.
    pub fn cancel(&mut self, key: &K) {
        if self.reserved.remove(key).is_some() {
            self.tokens = (self.tokens + 1.0).min(self.burst);
        }
    }
}

#[cfg(test)]
// The tests need one real `Instant` to count from; the code under test never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    type Bucket = TokenBucket<u32>;

    #[test]
    fn burst_is_available_at_once_then_tokens_come_at_the_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(2.0, 3);
        for key in 0..3 {
            assert!(bucket.reserve(&key, t0).is_ok());
        }
        let wait = bucket.reserve(&3, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(bucket.reserve(&3, t0 + Duration::from_millis(499)).is_err());
        assert!(bucket.reserve(&3, t0 + Duration::from_millis(500)).is_ok());
    }

    #[test]
    fn waiters_get_consecutive_slots_in_the_order_they_asked() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(1.0, 1);
        assert!(bucket.reserve(&0, t0).is_ok());
        let waits: Vec<u64> = (1..=5)
            .map(|key| bucket.reserve(&key, t0).unwrap_err().as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 3, 4, 5], "first come, first served, one slot each");
        assert_eq!(bucket.waiting(), 5);
    }

    #[test]
    fn each_waiter_is_refused_only_until_its_own_slot_and_then_granted_once() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(1.0, 1);
        assert!(bucket.reserve(&0, t0).is_ok());
        for key in 1..=100 {
            bucket.reserve(&key, t0).unwrap_err();
        }
        // Draining N waiters takes N wake-ups: every waiter woken at its slot gets its token.
        for key in 1..=100u32 {
            let at = t0 + Duration::from_secs(u64::from(key));
            assert_eq!(bucket.reserve(&key, at), Ok(()), "waiter {key} at its slot");
        }
        assert_eq!(bucket.waiting(), 0);
    }

    #[test]
    fn asking_again_early_keeps_the_place_in_line_instead_of_taking_a_second_one() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(1.0, 1);
        assert!(bucket.reserve(&0, t0).is_ok());
        assert_eq!(bucket.reserve(&1, t0), Err(Duration::from_secs(1)));
        let half = t0 + Duration::from_millis(500);
        assert_eq!(bucket.reserve(&1, half), Err(Duration::from_millis(500)));
        assert_eq!(bucket.reserve(&2, half), Err(Duration::from_millis(1500)));
    }

    #[test]
    fn a_cancelled_reservation_returns_its_token() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(1.0, 1);
        assert!(bucket.reserve(&0, t0).is_ok());
        assert!(bucket.reserve(&1, t0).is_err());
        bucket.cancel(&1);
        bucket.cancel(&1);
        assert_eq!(bucket.waiting(), 0);
        let at = t0 + Duration::from_secs(1);
        assert_eq!(
            bucket.reserve(&2, at),
            Ok(()),
            "the token 1 gave back is free again"
        );
    }

    #[test]
    fn tokens_never_exceed_the_burst() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(1.0, 2);
        let later = t0 + Duration::from_secs(3600);
        let granted = (0..10).filter(|k| bucket.reserve(k, later).is_ok()).count();
        assert_eq!(granted, 2);
    }

    #[test]
    fn infinite_rate_never_limits() {
        let mut bucket = Bucket::new(f64::INFINITY, 1);
        let t0 = Instant::now();
        assert!((0..10_000).all(|k| bucket.reserve(&k, t0).is_ok()));
        assert_eq!(bucket.waiting(), 0);
    }

    #[test]
    fn non_positive_rate_and_zero_burst_fall_back_to_wave_defaults() {
        let mut bucket = Bucket::new(0.0, 0);
        let t0 = Instant::now();
        let granted = (0..200).filter(|k| bucket.reserve(k, t0).is_ok()).count();
        assert_eq!(granted, DEFAULT_BURST as usize);
        assert_eq!(bucket.reserve(&1000, t0).unwrap_err(), Duration::from_secs(101));
    }

    #[test]
    fn a_vanishingly_small_rate_waits_at_most_the_maximum_instead_of_panicking() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1e-20, 1);
        assert_eq!(b.reserve(&0, t0), Ok(()));
        assert_eq!(b.reserve(&1, t0), Err(MAX_WAIT));
    }
}
