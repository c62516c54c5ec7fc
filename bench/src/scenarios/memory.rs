//! S2, memory (peak and steady RSS with Secrets that nothing references, at each payload size), S5, a
//! restart with nothing changed, and S4's API cost (at start-up, per change, idle): the figures' types,
//! and the idle window that S2 and S10 read RSS over.
//!
//! ```text
//! idle window: RSS (VmRSS) once a second for `seconds` ─► peak (VmHWM, never below a sample),
//!   steady (the median of the window's steady part), CPU time, a Go peer's heap at the end
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::nan_if_null;
use crate::harness::Error;
use crate::harness::audit::Counts;
use crate::harness::controller::{self, Profile, Running};
use crate::harness::stats::{median, peak_mib, steady_seconds};

/// An idle window: how long, and how many unreferenced Secrets the controller holds through it.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    pub seconds: u64,
    pub unreferenced: usize,
}

/// S2's figures at one payload size.

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Memory {
    pub payload_kib: usize,
    pub unreferenced_secrets: usize,
    /// The peak since the controller started: `VmHWM` at the end of the idle window, or the highest
    /// sample if that is higher ([`peak_mib`]).
    #[serde(deserialize_with = "nan_if_null")]
    pub peak_rss_mib: f64,
    /// The median of the per-second samples in the last 2 minutes of the idle window.
    #[serde(deserialize_with = "nan_if_null")]
    pub steady_rss_mib: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub idle_cpu_seconds: f64,
    /// `VmRSS` once a second through the idle window.
    pub rss_samples_mib: Vec<f64>,
    /// A Go controller's heap in use and allocated, from its `/metrics`, at the end of the window.
    pub go_heap_inuse_mib: Option<f64>,
    pub go_heap_alloc_mib: Option<f64>,
}

/// S4's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ApiCost {
    pub startup_requests: u64,
    pub startup: Counts,
    /// Requests per S1 update sent, over S1's updates and the second after them.
    #[serde(deserialize_with = "nan_if_null")]
    pub per_change_requests: f64,
    /// Workload writes per S1 update sent, over the same window.
    #[serde(deserialize_with = "nan_if_null")]
    pub per_change_workload_writes: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub idle_requests_per_minute: f64,
    pub idle: Counts,
}

/// S5's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Restart {
    pub workload_writes: u64,
    /// From the restart until a ConfigMap change and then a Secret change were both handled.
    #[serde(deserialize_with = "nan_if_null")]
    pub ready_ms: f64,
}

/// S2's idle window: RSS once a second, CPU time over the window, and a Go peer's heap at its end.
pub(crate) async fn idle_window(
    running: &mut Running,
    profile: &Profile,
    idle: Idle,
    kib: usize,
) -> Result<Memory, Error> {
    let pid = running.pid();
    let cpu0 = controller::cpu_seconds(pid).unwrap_or_default();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for _ in 0..idle.seconds {
        tick.tick().await;
        let (rss, _) = controller::rss(pid).ok_or("the controller exited during the idle window")?;
        samples.push(mib(rss));
    }
    let cpu1 = controller::cpu_seconds(pid).unwrap_or_default();
    let (_, hwm) = controller::rss(pid).ok_or("the controller exited")?;
    let heap = profile.go_metrics_port.and_then(controller::go_heap);
    let window = steady_seconds(idle.seconds) as usize;
    Ok(Memory {
        payload_kib: kib,
        unreferenced_secrets: idle.unreferenced,
        peak_rss_mib: peak_mib(mib(hwm), &samples),
        steady_rss_mib: median(&samples[samples.len().saturating_sub(window)..]),
        idle_cpu_seconds: cpu1 - cpu0,
        rss_samples_mib: samples,
        go_heap_inuse_mib: heap.map(|(inuse, _)| mib(inuse)),
        go_heap_alloc_mib: heap.map(|(_, alloc)| mib(alloc)),
    })
}
