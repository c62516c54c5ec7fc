//! wave's own histograms over a stretch of a scenario: two scrapes of its `/metrics`, before and
//! after, and the quantiles of their difference, so that they cover that stretch alone and not the
//! start-up. The quantiles are interpolated within buckets as Prometheus's `histogram_quantile` does;
//! the maximum is the upper bound of the highest bucket that counted anything. Beside them, where
//! wave's `/metrics` is ([`port`]), how to read it ([`scrape`]) and a counter's sum ([`counter`]).

use serde::{Deserialize, Serialize};

use super::controller::Profile;
use super::{Error, nan_if_null};

/// Quantiles of one histogram over a stretch, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Quantiles {
    /// Observations counted.
    pub count: u64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    /// The upper bound of the highest bucket that counted anything (infinite past the last bound,
    /// which JSON writes as `null`).
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
}

/// Histogram `name` (the series whose labels include every one of `labels`) between two scrapes.
pub fn between(before: &str, after: &str, name: &str, labels: &[&str]) -> Quantiles {
    of_buckets(&delta(
        &buckets(before, name, labels),
        &buckets(after, name, labels),
    ))
}

/// The port of wave's `/metrics`, from its profile's `--metrics-bind-address`.
pub fn port(profile: &Profile) -> Option<u16> {
    profile
        .args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-bind-address="))
        .and_then(|address| address.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
}

/// wave's `/metrics` as text.
pub fn scrape(port: u16) -> Result<String, Error> {
    match testenv::http_get(port, "/metrics") {
        Some((200, body)) => Ok(body),
        Some((status, _)) => Err(format!("wave's /metrics answered {status}")),
        None => Err("wave's /metrics did not answer".into()),
    }
}

/// Counter `name`, summed over its labelled series.
pub fn counter(text: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    text.lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The cumulative buckets (upper bound, count) of histogram `name` whose labels include `labels`.
fn buckets(text: &str, name: &str, labels: &[&str]) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (series, value) = rest.split_once("} ")?;
            if !labels.iter().all(|l| series.split(',').any(|x| x == *l)) {
                return None;
            }
            let le = series
                .split(',')
                .find_map(|x| x.strip_prefix("le="))?
                .trim_matches('"');
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value.trim().parse::<f64>().ok()? as u64))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// `after` less `before`, bucket by bucket (a histogram not yet in `before` counted nothing there).
fn delta(before: &[(f64, u64)], after: &[(f64, u64)]) -> Vec<(f64, u64)> {
    after
        .iter()
        .map(|&(le, n)| {
            let was = before.iter().find(|(b, _)| *b == le).map_or(0, |(_, c)| *c);
            (le, n.saturating_sub(was))
        })
        .collect()
}

/// p50, p99 and the maximum of cumulative buckets, in milliseconds.
fn of_buckets(cumulative: &[(f64, u64)]) -> Quantiles {
    let count = cumulative.last().map_or(0, |(_, n)| *n);
    if count == 0 {
        return Quantiles::default();
    }
    let quantile = |q: f64| {
        let rank = q * count as f64;
        let mut lower = (0.0, 0u64);
        for &(le, n) in cumulative {
            if n as f64 >= rank {
                if le.is_infinite() {
                    return lower.0;
                }
                let within = (n - lower.1) as f64;
                let share = if within > 0.0 {
                    (rank - lower.1 as f64) / within
                } else {
                    1.0
                };
                return lower.0 + (le - lower.0) * share;
            }
            lower = (le, n);
        }
        lower.0
    };
    let mut max = 0.0;
    let mut below = 0;
    for &(le, n) in cumulative {
        if n > below {
            max = if le.is_infinite() { f64::INFINITY } else { le };
        }
        below = n;
    }
    Quantiles {
        count,
        p50_ms: quantile(0.5) * 1000.0,
        p99_ms: quantile(0.99) * 1000.0,
        max_ms: max * 1000.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# TYPE wave_pacing_decision_seconds histogram
wave_pacing_decision_seconds_bucket{at=\"event\",le=\"0.001\"} 10
wave_pacing_decision_seconds_bucket{at=\"event\",le=\"0.002\"} 10
wave_pacing_decision_seconds_bucket{at=\"event\",le=\"+Inf\"} 10
wave_pacing_decision_seconds_bucket{at=\"admission\",le=\"0.001\"} 1
wave_pacing_decision_seconds_bucket{at=\"admission\",le=\"0.002\"} 1
wave_pacing_decision_seconds_bucket{at=\"admission\",le=\"+Inf\"} 1
";

    const AFTER: &str = "wave_pacing_decision_seconds_bucket{at=\"event\",le=\"0.001\"} 60
wave_pacing_decision_seconds_bucket{at=\"event\",le=\"0.002\"} 110
wave_pacing_decision_seconds_bucket{at=\"event\",le=\"+Inf\"} 110
wave_pacing_decision_seconds_bucket{at=\"admission\",le=\"0.001\"} 1
wave_pacing_decision_seconds_bucket{at=\"admission\",le=\"0.002\"} 1
wave_pacing_decision_seconds_bucket{at=\"admission\",le=\"+Inf\"} 1
wave_watch_router_lag_seconds_bucket{le=\"0.001\"} 3
wave_watch_router_lag_seconds_bucket{le=\"+Inf\"} 4
";

    #[test]
    fn the_histograms_over_the_change_are_the_difference_of_two_scrapes() {
        let name = "wave_pacing_decision_seconds";
        let event = &["at=\"event\""];
        let d = delta(&buckets(BEFORE, name, event), &buckets(AFTER, name, event));
        assert_eq!(d, [(0.001, 50), (0.002, 100), (f64::INFINITY, 100)]);
        let s = between(BEFORE, AFTER, name, event);
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 1.0).abs() < 1e-9, "{s:?}");
        assert!((s.p99_ms - 1.98).abs() < 1e-9, "{s:?}");
        assert!((s.max_ms - 2.0).abs() < 1e-9, "{s:?}");
        let admission = &["at=\"admission\""];
        let none = between(BEFORE, AFTER, name, admission);
        assert_eq!(none.count, 0, "nothing was decided over the change");
        let lag = between(BEFORE, AFTER, "wave_watch_router_lag_seconds", &[]);
        assert_eq!(lag.count, 4);
        assert!(lag.max_ms.is_infinite(), "one past the last bound: unbounded");
    }

    #[test]
    fn a_counter_is_summed_over_its_series_and_no_other_name() {
        let text = "# TYPE wave_reconciles_total counter
wave_reconciles_total{kind=\"Deployment\",result=\"write\"} 3
wave_reconciles_total{kind=\"Deployment\",result=\"noop\"} 4
wave_reconciles_total_other{kind=\"Deployment\"} 100
";
        assert_eq!(counter(text, "wave_reconciles_total"), 7.0);
        assert_eq!(counter(text, "wave_absent_total"), 0.0);
    }
}
