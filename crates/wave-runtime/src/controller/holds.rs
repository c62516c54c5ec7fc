//! What a held rollout tells, once per reason, and when it looks again (`wave_core::decide::Hold`).

use std::time::Instant;

use wave_core::decide::Hold;
use wave_core::names::{action, reason};
use wave_core::workload::Workload;

use super::outcome::Outcome;
use crate::events::EventType;
use crate::state::{Context, pacing};

/// What a held rollout tells, once per reason, and when it looks again.
pub fn held(ctx: &Context, workload: &Workload, hold: Hold) -> Outcome {
    let now = Instant::now();
    let recheck = hold.recheck(now);
    match hold {
        Hold::Halted(halt) => {
            pacing::halted(ctx, workload, &halt);
            Outcome::Halted
        }
        Hold::Flapping { object, .. } => {
            if ctx.flaps().hold(&object, &workload.id) {
                let policy = ctx.flaps().policy();
                let note = format!(
                    "Held back: {object} is flapping (it changed more than {} times within {:?}). Its final value rolls once it has been unchanged for {:?}.",
                    policy.threshold, policy.window, policy.quiet
                );
                tracing::warn!(workload = %workload.id, config = %object, "rollout held back: config flapping");
                ctx.events.publish(
                    workload,
                    EventType::Warning,
                    reason::CONFIG_FLAPPING,
                    action::HOLD_ROLLOUT,
                    note,
                );
            }
            Outcome::HeldFlapping(recheck.unwrap_or_default())
        }
        Hold::Coalesced(wait) => {
            tracing::debug!(workload = %workload.id, ?wait, "rollout coalesced");
            Outcome::Coalesced(wait)
        }
        Hold::Paused => {
            // Its resume changes its generation, which wakes it.
            tracing::debug!(workload = %workload.id, "paused by its owner; the rollout waits for the resume");
            Outcome::HeldPaused
        }
    }
}
