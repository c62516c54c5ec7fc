//! The statistics of the figures, pure functions unit-tested here: medians (of rounds, of RSS
//! samples), nearest-rank quantiles (S1's p50/p90/p99), the peak RSS and the steady part of an idle
//! window.

use std::time::Duration;

/// S2 and S4: steady RSS is the median of the samples in this last part of the idle window (at most),
/// and the idle request rate is counted over it.
pub(crate) const STEADY_WINDOW: Duration = Duration::from_secs(120);

/// The steady part of an idle window of `idle_seconds`, in seconds: its last `STEADY_WINDOW`, or its
/// second half when that is shorter.
pub(crate) fn steady_seconds(idle_seconds: u64) -> u64 {
    STEADY_WINDOW.as_secs().min(idle_seconds.div_ceil(2)).max(1)
}

/// The peak RSS: `VmHWM` at the end, but never below an earlier `VmRSS` sample, since the kernel raises
/// the high-water mark lazily (see [`super::controller::rss`]).
pub fn peak_mib(hwm_mib: f64, samples_mib: &[f64]) -> f64 {
    samples_mib.iter().copied().fold(hwm_mib, f64::max)
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The nearest-rank `q` quantile of `sorted` (ascending): the smallest value with at least `q` of the
/// values at or below it; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        f64::NAN
    } else {
        sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_never_below_a_sample_even_when_the_high_water_mark_trails() {
        assert_eq!(peak_mib(548.0, &[547.9, 548.2, 548.1]), 548.2);
        assert_eq!(peak_mib(600.0, &[547.9, 548.2]), 600.0);
        assert_eq!(peak_mib(34.0, &[]), 34.0);
    }

    #[test]
    fn a_quantile_is_the_nearest_rank_and_nan_of_nothing() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(
            [0.5, 0.9, 0.99, 1.0].map(|q| quantile(&sorted, q)),
            [50.0, 90.0, 99.0, 100.0]
        );
        assert_eq!(quantile(&[7.0], 0.01), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0]), 5.0);
        assert!(median(&[]).is_nan());
    }
}
