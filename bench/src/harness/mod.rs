//! The harness every scenario runs on: nothing here measures a scenario, and nothing here knows the
//! driver's command line (each scenario is handed its own sizes by `main.rs`).
//!
//! ```text
//! session     a control plane's admin client, the controller's own user, kubeconfig, log and audit log
//! controller  the controllers under test (profiles, starting and stopping them, /proc figures)
//! population  the objects every controller gets alike (S1's workloads, S3/S6/S7/S8's, the canaries)
//! wait        template changes as they happen, the readiness probe, waits for a settled cluster
//! audit       requests per user, verb and resource, from the apiserver's audit log
//! metrics     wave's own histograms between two scrapes of its /metrics
//! stats       medians, percentiles, peak and steady RSS
//! ```

pub mod audit;
pub mod controller;
pub mod metrics;
pub mod population;
pub mod session;
pub mod stats;
pub mod wait;

use std::time::Duration;

/// The benchmark's errors: a sentence for the operator, printed as it is.
pub type Error = String;

/// How long waits may take: each wait names its limit for a real run, and `--smoke` caps them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// `--smoke`: at most a minute per wait, so that a hung controller fails CI in a minute instead
    /// of fifteen.
    pub smoke: bool,
}

impl Limits {
    /// How long a wait may take before it gives up: `full` in a real run, at most a minute under
    /// `--smoke`.
    pub fn limit(&self, full: Duration) -> Duration {
        if self.smoke {
            full.min(Duration::from_secs(60))
        } else {
            full
        }
    }
}

/// serde_json writes a figure that was not measured (NaN), or an unbounded one, as `null`;
/// `--combine` reads it back as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::Deserialize;
    Option::<f64>::deserialize(d).map(|v| v.unwrap_or(f64::NAN))
}
