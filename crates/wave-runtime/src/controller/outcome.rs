//! What a reconcile did, and what follows from it: the metrics it counts and when the workload is
//! looked at again.

use std::time::Duration;

use wave_core::workload::WorkloadRef;

use crate::api::error_chain;
use crate::error::ReconcileError;
use crate::metrics::{KindError, KindResult};
use crate::state::Context;

/// What a reconcile did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The workload no longer exists.
    Gone,
    /// Another replica leads; nothing was done.
    NotLeader,
    /// This replica leads but could not confirm its lease just now (a renewal is due, or the read
    /// failed): nothing was written; try again shortly.
    LeaseUnconfirmed,
    /// Nothing to write.
    Noop,
    /// Required config is missing; nothing was written. A gated workload is checked again when its
    /// gate times out.
    Blocked {
        /// When to check again.
        recheck_after: Option<Duration>,
    },
    /// The write was made.
    Written,
    /// No write token: try again after this long.
    RateLimited(Duration),
    /// The workload rolled less than its minimum interval ago: roll, with the final hash, after this long.
    Coalesced(Duration),
    /// A config object it uses is flapping: look again once that has been quiet, after this long.
    HeldFlapping(Duration),
    /// Someone paused the Deployment: its resume wakes it.
    HeldPaused,
    /// Waiting for a rollout slot: woken when one frees (or look again after this long).
    Queued(Option<Duration>),
    /// A config version it would roll failed on another workload: woken when the halt ends.
    Halted,
    /// Its template went back to an earlier config hash (an undo), and wave pinned it there.
    Pinned,
    /// Its template went back to an earlier config hash (an undo), and wave restored that config.
    Restored,
    /// The pods held by a released gate were deleted, and the mark removed.
    HeldPodsDeleted,
    /// The workload's controller has not yet seen wave's last write: look again after this long.
    Waiting(Duration),
    /// Its pods are restarting in place (`in_place`): look at them again after this long.
    RestartingInPlace(Duration),
    /// A reload paused the Deployment (`deployment.reloader.stakater.com/pause-period`): resume it after
    /// this long.
    Paused(Duration),
}

impl Outcome {
    /// Metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Gone => "gone",
            Outcome::NotLeader => "not_leader",
            Outcome::LeaseUnconfirmed => "lease_unconfirmed",
            Outcome::Noop => "noop",
            Outcome::Blocked { .. } => "blocked",
            Outcome::Written => "written",
            Outcome::RateLimited(_) => "rate_limited",
            Outcome::Coalesced(_) => "coalesced",
            Outcome::HeldFlapping(_) => "held_flapping",
            Outcome::HeldPaused => "held_paused",
            Outcome::Queued(_) => "queued",
            Outcome::Halted => "halted",
            Outcome::Pinned => "pinned",
            Outcome::Restored => "restored",
            Outcome::HeldPodsDeleted => "held_pods_deleted",
            Outcome::Waiting(_) => "waiting",
            Outcome::Paused(_) => "paused",
            Outcome::RestartingInPlace(_) => "restarting_in_place",
        }
    }
}

/// Records the result of one reconcile and says when to retry, if at all.
pub fn record(
    ctx: &Context,
    id: &WorkloadRef,
    result: &Result<Outcome, ReconcileError>,
    failures: u32,
) -> Option<Duration> {
    let kind = id.kind.as_str();
    match result {
        Ok(outcome) => {
            tracing::debug!(workload = %id, outcome = outcome.as_str(), "reconciled");
            ctx.metrics
                .reconciles
                .get_or_create(&KindResult {
                    kind,
                    result: outcome.as_str(),
                })
                .inc();
        }
        Err(e) => {
            ctx.metrics
                .reconciles
                .get_or_create(&KindResult {
                    kind,
                    result: "error",
                })
                .inc();
            ctx.metrics
                .reconcile_errors
                .get_or_create(&KindError {
                    kind,
                    error: e.kind(),
                })
                .inc();
            tracing::warn!(workload = %id, error = %error_chain(e), retry_in = ?backoff(failures), "reconcile failed");
        }
    }
    retry_after(result, failures)
}

/// How soon a leader that could not confirm its lease asks again.
const LEASE_RECHECK: Duration = Duration::from_millis(250);

/// When to reconcile again: when a token or the workload's controller is due, when a gate times out, or
/// after a backoff that grows with `failures`; `None` when the workload is done until it changes.
fn retry_after(result: &Result<Outcome, ReconcileError>, failures: u32) -> Option<Duration> {
    match result {
        Ok(
            Outcome::RateLimited(wait)
            | Outcome::Waiting(wait)
            | Outcome::Paused(wait)
            | Outcome::RestartingInPlace(wait)
            | Outcome::Coalesced(wait)
            | Outcome::HeldFlapping(wait),
        ) => Some(*wait),
        Ok(Outcome::Queued(recheck)) => *recheck,
        Ok(Outcome::LeaseUnconfirmed) => Some(LEASE_RECHECK),
        Ok(Outcome::Blocked { recheck_after }) => *recheck_after,
        Ok(_) => None,
        Err(_) => Some(backoff(failures)),
    }
}

/// Exponential backoff for repeated failures of one workload: 1 s, doubling up to 256 s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(8)).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_and_stops_at_five_minutes() {
        let delays: Vec<u64> = (0..12).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 256, 256]);
        assert!(backoff(u32::MAX) <= Duration::from_secs(300));
    }

    #[test]
    fn only_waiting_outcomes_and_errors_ask_for_a_retry() {
        let wait = Duration::from_millis(250);
        assert_eq!(retry_after(&Ok(Outcome::RateLimited(wait)), 0), Some(wait));
        assert_eq!(retry_after(&Ok(Outcome::Waiting(wait)), 0), Some(wait));
        assert_eq!(
            retry_after(&Ok(Outcome::LeaseUnconfirmed), 0),
            Some(LEASE_RECHECK),
            "a leader that could not confirm its lease keeps the work"
        );
        assert_eq!(
            retry_after(
                &Ok(Outcome::Blocked {
                    recheck_after: Some(wait)
                }),
                0
            ),
            Some(wait)
        );
        for done in [
            Outcome::Written,
            Outcome::Noop,
            Outcome::Gone,
            Outcome::NotLeader,
            Outcome::HeldPodsDeleted,
            Outcome::Halted,
            Outcome::Pinned,
            Outcome::Restored,
            Outcome::Queued(None),
        ] {
            assert_eq!(retry_after(&Ok(done.clone()), 0), None, "{done:?}");
        }
        let failed = Err(ReconcileError::Conflict {
            workload: WorkloadRef::new(wave_core::workload::WorkloadKind::DEPLOYMENT, "ns", "w"),
            attempts: 5,
        });
        assert_eq!(retry_after(&failed, 3), Some(backoff(3)));
    }
}
