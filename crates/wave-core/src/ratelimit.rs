//! The one process-wide token bucket that limits writes (difference `global-rate-limit`:
//! Wave builds one bucket per kind).
//!
//! Time is passed in, so the bucket is a pure value. A caller that gets no token is told how long to
//! wait and requeues itself for then, so waiting never holds a worker that other workloads need.

use std::time::{Duration, Instant};

/// Wave's defaults: `--update-rate 1.0`, `--update-burst 100`.
pub const DEFAULT_RATE: f64 = 1.0;
/// Default burst.
pub const DEFAULT_BURST: u32 = 100;
/// The longest wait the bucket asks for. A tiny rate (`--update-rate=1e-20`) would otherwise ask for a
/// wait no `Duration` can hold; the caller simply asks again after this long.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A token bucket refilled at `rate` tokens per second up to `burst`.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
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
        }
    }

    /// Whether the bucket never limits.
    pub fn is_unlimited(&self) -> bool {
        self.rate.is_infinite()
    }

    /// Takes one token at `now`, or says how long until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.is_unlimited() {
            return Ok(());
        }
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = Duration::try_from_secs_f64((1.0 - self.tokens) / self.rate).unwrap_or(MAX_WAIT);
            Err(wait.min(MAX_WAIT))
        }
    }
}

#[cfg(test)]
// The tests need one real `Instant` to count from; the code under test never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_available_at_once_then_tokens_come_at_the_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(2.0, 3);
        for _ in 0..3 {
            assert!(bucket.try_take(t0).is_ok());
        }
        let wait = bucket.try_take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(bucket.try_take(t0 + Duration::from_millis(499)).is_err());
        assert!(bucket.try_take(t0 + Duration::from_millis(500)).is_ok());
    }

    #[test]
    fn tokens_never_exceed_the_burst() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1.0, 2);
        let later = t0 + Duration::from_secs(3600);
        let granted = (0..10).filter(|_| bucket.try_take(later).is_ok()).count();
        assert_eq!(granted, 2);
    }

    #[test]
    fn infinite_rate_never_limits() {
        let mut bucket = TokenBucket::new(f64::INFINITY, 1);
        let t0 = Instant::now();
        assert!((0..10_000).all(|_| bucket.try_take(t0).is_ok()));
    }

    #[test]
    fn non_positive_rate_and_zero_burst_fall_back_to_wave_defaults() {
        let mut bucket = TokenBucket::new(0.0, 0);
        let t0 = Instant::now();
        let granted = (0..200).filter(|_| bucket.try_take(t0).is_ok()).count();
        assert_eq!(granted, DEFAULT_BURST as usize);
        assert_eq!(bucket.try_take(t0).unwrap_err(), Duration::from_secs(1));
    }

    #[test]
    fn a_vanishingly_small_rate_waits_at_most_the_maximum_instead_of_panicking() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1e-20, 1);
        assert_eq!(b.try_take(t0), Ok(()));
        assert_eq!(b.try_take(t0), Err(MAX_WAIT));
    }
}
