//! `deployment.reloader.stakater.com/pause-period`: a reload pauses the Deployment, and wave resumes it
//! when the period is over, reading the pause's start from `paused-at` (level-triggered: it survives a
//! restart). A pause is a reload's only while one field manager owns both `spec.paused` and `paused-at`.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::kind::WorkloadKind;
use crate::names::reloader as names;
use crate::workload::Workload;

/// What `deployment.reloader.stakater.com/pause-period` asks of a Deployment now (Reloader's
/// `pause_deployment.go`, level-triggered: the pause's start is the `paused-at` annotation, not a timer
/// in memory, so it survives a restart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Nothing: no pause period, or a pause that is not Reloader's (or wave's).
    None,
    /// Resume it now: `spec.paused: false`, `paused-at` removed.
    ResumeNow,
    /// Paused; resume it after this long.
    ResumeAfter(Duration),
}

/// The pause period a Deployment asks for with each reload; `Err` names a value that is not a Go
/// duration (the reload is then written without a pause).
pub fn pause_period(workload: &Workload) -> Option<Result<Duration, String>> {
    if workload.id.kind != WorkloadKind::DEPLOYMENT {
        return None;
    }
    let value = workload.annotations.get(names::PAUSE_PERIOD)?;
    Some(crate::duration::parse_go_duration(value).map_err(|e| {
        format!(
            "annotation {}: {value:?}: {e}; reloading without a pause",
            names::PAUSE_PERIOD
        )
    }))
}

/// Whether a Deployment that a reload paused is due to resume, at `now`. A pause whose period
/// annotation is gone or unreadable, or whose start cannot be read, resumes at once (Reloader would
/// leave such a Deployment paused after a restart). A pause is a reload's only while whoever set
/// `spec.paused` also wrote `paused-at` (`Workload::reload_paused`): a user who resumed and paused
/// again by hand since keeps their pause, even with a stale `paused-at`.
pub fn pause(workload: &Workload, now: Timestamp) -> Pause {
    if !workload.holds_reload_pause() {
        return Pause::None;
    }
    let Some(at) = workload.annotations.get(names::PAUSED_AT) else {
        return Pause::None;
    };
    let period = pause_period(workload).and_then(Result::ok);
    let started = at.parse::<Timestamp>().ok();
    match (period, started) {
        (Some(period), Some(started)) => {
            let elapsed = Duration::try_from(now.duration_since(started)).unwrap_or_default();
            match period.checked_sub(elapsed).filter(|left| !left.is_zero()) {
                Some(left) => Pause::ResumeAfter(left),
                None => Pause::ResumeNow,
            }
        }
        _ => Pause::ResumeNow,
    }
}

/// The merge of a reload's patch that pauses the Deployment, as Reloader does: `spec.paused: true`
/// and `paused-at` (RFC 3339, seconds). Nothing when it is paused already.
pub fn add_pause(body: &mut Value, workload: &Workload, now: Timestamp) {
    if workload.progress.paused {
        return;
    }
    body["spec"]["paused"] = json!(true);
    body["metadata"]["annotations"][names::PAUSED_AT] = json!(rfc3339(now));
}

/// `now` as Go's `time.RFC3339` writes it in UTC, to the second (what Reloader writes).
pub(super) fn rfc3339(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The patch that resumes a Deployment a reload paused, guarded by its resourceVersion.
pub fn resume_patch(workload: &Workload) -> Value {
    json!({
        "metadata": {"resourceVersion": workload.resource_version, "annotations": {(names::PAUSED_AT): null}},
        "spec": {"paused": false},
    })
}

#[cfg(test)]
#[path = "pause_tests.rs"]
mod tests;
