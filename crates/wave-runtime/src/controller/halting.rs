//! Recording a failed rollout on its workload, so that its halt outlives whatever happens to the
//! workload next (`wave_core::pace::Failure`; `docs/behaviour.md`, "Halting a bad config").

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use wave_core::pace;
use wave_core::workload::Workload;

use super::outcome::Outcome;
use super::write::{self, Conflicts, Patched, What};
use crate::error::ReconcileError;
use crate::state::Context;

/// Records on the workload's rollout marker that its rollout failed, once (`pace::unrecorded_failure`):
/// the halt then holds whatever happens to the workload next. `None` when there is nothing to record.
pub async fn record_failure(ctx: &Context, workload: &Workload) -> Result<Option<Outcome>, ReconcileError> {
    if !ctx.pacer().is_on() {
        return Ok(None);
    }
    let mut workload = Arc::new(workload.clone());
    let mut conflicts = Conflicts::new(&workload.id);
    loop {
        let Some(body) = pace::unrecorded_failure(&workload, ctx.rollout_deadline, Timestamp::now()) else {
            return Ok(None);
        };
        match write::patch(ctx, &workload, &body, What::FailureRecord).await? {
            Patched::Written => {
                tracing::info!(workload = %workload.id, "recorded the failure of its rollout on its marker");
                return Ok(Some(Outcome::Noop));
            }
            Patched::Not(outcome) => return Ok(Some(outcome)),
            // Its status moves on often while it fails: read it again and record on that.
            Patched::Conflict => match conflicts.reread(ctx).await? {
                Some(fresh) => workload = fresh,
                None => return Ok(Some(Outcome::Gone)),
            },
        }
    }
}
