//! Removing what Wave ≤ v0.6 left behind (`wave_core::legacy`): first the owner references from the
//! workload's config objects, then its finalizer, before anything else is done for the workload.
//!
//! ```text
//! workload with the finalizer, or opted in ─► tracker: config objects owned by its uid
//!   ─► per object: read its metadata, merge-patch the owner references that stay (resourceVersion-guarded)
//!   ─► the finalizer, if any ─► one Normal LegacyWaveRemoved Event
//!   any failure ─► one Warning LegacyWaveCleanupFailed per reconcile; the finalizer stays (so the
//!                  config is never deleted with the workload); retried with backoff
//! ```

use wave_core::legacy;
use wave_core::names::{action, reason};
use wave_core::workload::Workload;

use super::context::Context;
use crate::api::{self, describe, is_not_found};
use crate::error::ReconcileError;
use crate::events::EventType;

/// What [`clean`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Nothing was left.
    Nothing,
    /// Something was left, but this replica may not write now.
    NotWriting,
    /// Something was removed: the workload's resourceVersion moved on.
    Done,
}

/// Removes what Wave ≤ v0.6 left on `workload`, once this replica has confirmed it may write.
pub async fn clean(ctx: &Context, workload: &Workload) -> Result<Cleanup, ReconcileError> {
    let owned = ctx.tracker().owned_by(&workload.uid);
    if owned.is_empty() && !workload.legacy_finalizer {
        return Ok(Cleanup::Nothing);
    }
    let may_write = ctx
        .may_write()
        .await
        .map_err(|source| ReconcileError::ConfirmLease {
            workload: workload.id.clone(),
            source: Box::new(source),
        })?;
    if !may_write {
        return Ok(Cleanup::NotWriting);
    }
    let result = remove(ctx, workload, &owned).await;
    match &result {
        Ok(removed) if !removed.is_empty() => {
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
        Ok(_) => {}
        Err(e) => {
            let source = e.api_error().map(|(_, s)| describe(s)).unwrap_or_default();
            let note = format!(
                "Could not remove Wave v0.6's {}: {source}. Until it is removed the finalizer stays, so deleting the workload never deletes its config.",
                match e {
                    ReconcileError::LegacyCleanup { what, .. } => what.as_str(),
                    _ => "leftovers",
                }
            );
            ctx.events.publish(
                workload,
                EventType::Warning,
                reason::LEGACY_WAVE_CLEANUP_FAILED,
                action::REMOVE_LEGACY,
                note,
            );
        }
    }
    result.map(|removed| {
        if removed.is_empty() {
            Cleanup::Nothing
        } else {
            Cleanup::Done
        }
    })
}

/// The removals, owner references first; what was removed, in words.
async fn remove(
    ctx: &Context,
    workload: &Workload,
    owned: &[wave_core::refs::ConfigKey],
) -> Result<Vec<String>, ReconcileError> {
    let failed = |what: String| {
        let id = workload.id.clone();
        move |e: kube::Error| ReconcileError::LegacyCleanup {
            workload: id,
            what,
            source: Box::new(e),
        }
    };
    let mut removed = Vec::new();
    for key in owned {
        let what = format!("owner reference on {key}");
        let Some(meta) = api::config_metadata(&ctx.client, key)
            .await
            .map_err(failed(what.clone()))?
        else {
            continue;
        };
        let Some(patch) = legacy::owner_patch(&meta, &workload.uid) else {
            continue;
        };
        match api::patch_config_metadata(&ctx.client, key, &patch).await {
            Ok(()) => removed.push(what),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(failed(what)(e)),
        }
    }
    if workload.legacy_finalizer {
        let what = "finalizer wave.pusher.com/finalizer".to_string();
        let meta = api::workload_metadata(&ctx.client, &workload.id)
            .await
            .map_err(failed(what.clone()))?;
        if let Some(patch) = meta.as_ref().and_then(legacy::finalizer_patch) {
            match api::patch_workload(&ctx.client, &workload.id, &patch).await {
                Ok(()) => removed.push(what),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(failed(what)(e)),
            }
        }
    }
    Ok(removed)
}
