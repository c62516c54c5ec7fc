//! What Wave ≤ v0.6 left behind (`wave_core::legacy`): first the owner references Wave wrote on the
//! workload's config objects, then its finalizer, before anything else is done for the workload. A
//! cleanup that cannot be done never stops the workload from being hashed and rolled.
//!
//! ```text
//! workload ─► decide (core): the config objects whose Wave-shaped owner references name it (tracker),
//!             its finalizer, --legacy-wave-cleanup
//!   Nothing ─► done
//!   Report  ─► nothing written; one Warning LegacyWaveLeft per distinct set, and a log line
//!   Remove  ─► per object: read its metadata, merge-patch the owner references that stay (only Wave's
//!              go; resourceVersion-guarded) ─► the finalizer, if any ─► one Normal LegacyWaveRemoved
//!     refused (403) ─► the finalizer stays; one Warning LegacyWaveCleanupFailed naming what is left and
//!                      the chart value; the reconcile goes on; tried again at the next reconcile
//!     other failure ─► the finalizer stays; the same Warning; the reconcile fails, retried with backoff
//! ```

use wave_core::legacy::{self, Action, Leftover};
use wave_core::names::{action, reason};
use wave_core::refs::ConfigKey;
use wave_core::workload::Workload;

use super::outcome::Outcome;
use super::write;
use crate::api::{self, describe, is_not_found, status_code};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::state::Context;

/// What [`clean`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Nothing was removed: nothing was left, or what was left stays (and was reported).
    Nothing,
    /// Something was left, but this replica may not write now: why.
    NotWriting(Outcome),
    /// Something was removed: the workload's resourceVersion may have moved on.
    Done,
}

/// Removes what Wave ≤ v0.6 left on `workload` (once this replica has confirmed it may write), or says
/// once what it leaves.
pub async fn clean(ctx: &Context, workload: &Workload) -> Result<Cleanup, ReconcileError> {
    let owned = ctx.tracker().owned_by(&workload.uid);
    let owned = match legacy::decide(workload, owned, ctx.legacy_wave_cleanup) {
        Action::Nothing => {
            ctx.legacy_reports.forget(&workload.id);
            return Ok(Cleanup::Nothing);
        }
        Action::Report { owned } => {
            warn_once(
                ctx,
                workload,
                reason::LEGACY_WAVE_LEFT,
                legacy::left_note(workload, &owned),
            );
            return Ok(Cleanup::Nothing);
        }
        Action::Remove { owned } => owned,
    };
    if let Err(outcome) = write::gate(ctx).await {
        return Ok(Cleanup::NotWriting(outcome));
    }
    let Removal { removed, left } = remove(ctx, workload, &owned).await;
    if !removed.is_empty() {
        let note = format!(
            "Removed what Wave v0.6 left: {}. Deleting this workload no longer deletes its config, nor waits for Wave.",
            removed.join(", ")
        );
        tracing::info!(workload = %workload.id, "{note}");
        ctx.events.publish(
            workload,
            EventType::Normal,
            reason::LEGACY_WAVE_REMOVED,
            action::REMOVE_LEGACY,
            note,
        );
    }
    let done = if removed.is_empty() {
        Cleanup::Nothing
    } else {
        Cleanup::Done
    };
    let Some((left, error)) = left else {
        ctx.legacy_reports.forget(&workload.id);
        return Ok(done);
    };
    let leftover = match &left {
        Some(keys) => Leftover::OwnerReferences(keys),
        None => Leftover::Finalizer,
    };
    let note = legacy::failed_note(workload, leftover, &describe(&error));
    warn_once(ctx, workload, reason::LEGACY_WAVE_CLEANUP_FAILED, note);
    if status_code(&error) == Some(403) {
        // Refused (RBAC, or a policy): retrying at once would only repeat it. The workload is still
        // hashed; the next reconcile tries again, so granting the rule is enough.
        return Ok(done);
    }
    Err(ReconcileError::LegacyCleanup {
        workload: workload.id.clone(),
        what: leftover.to_string(),
        source: Box::new(error),
    })
}

/// Publishes a Warning about `workload`'s leftovers, and logs it, unless it is what was said last.
fn warn_once(ctx: &Context, workload: &Workload, reason: &'static str, note: String) {
    ctx.warn_once(&ctx.legacy_reports, workload, reason, action::REMOVE_LEGACY, note);
}

/// What [`remove`] did.
struct Removal {
    /// What was removed, in words.
    removed: Vec<String>,
    /// What could not be removed (the config objects still owned, or `None` for the finalizer), and
    /// why. What came after it was not tried: the finalizer stays.
    left: Option<(Option<Vec<ConfigKey>>, kube::Error)>,
}

/// The removals, owner references first, then the finalizer; the first failure stops them.
async fn remove(ctx: &Context, workload: &Workload, owned: &[ConfigKey]) -> Removal {
    let mut removed = Vec::new();
    for (i, key) in owned.iter().enumerate() {
        let result = match api::config_metadata(&ctx.client, key).await {
            Ok(Some(meta)) => match legacy::owner_patch(&meta, workload) {
                Some(patch) => api::patch_config_metadata(&ctx.client, key, &patch)
                    .await
                    .map(|()| true),
                None => Ok(false),
            },
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        match result {
            Ok(true) => removed.push(Leftover::OwnerReferences(std::slice::from_ref(key)).to_string()),
            Ok(false) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Removal {
                    removed,
                    left: Some((Some(owned[i..].to_vec()), e)),
                };
            }
        }
    }
    if workload.legacy_finalizer {
        let result = match api::workload_metadata(&ctx.client, &workload.id).await {
            Ok(meta) => match meta.as_ref().and_then(legacy::finalizer_patch) {
                Some(patch) => api::patch_workload(&ctx.client, &workload.id, &patch)
                    .await
                    .map(|()| true),
                None => Ok(false),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(true) => removed.push(Leftover::Finalizer.to_string()),
            Ok(false) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Removal {
                    removed,
                    left: Some((None, e)),
                };
            }
        }
    }
    Removal { removed, left: None }
}
