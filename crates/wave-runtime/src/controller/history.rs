//! Config history in the controller: keeping snapshots and restoring from them (`wave_core::history`,
//! `docs/history.md`).
//!
//! ```text
//! keep:    reconcile found nothing to write, history on, the template's hash is the config's hash,
//!          not yet kept for this hash and generation, and every reference in the workload's namespace
//!          (else ─► one Warning: history copies nothing across namespaces)
//!   ─► its controller has not reported this generation observed yet ─► look again shortly (Waiting)
//!   ─► the revision carrying the hash (ReplicaSets / ControllerRevisions listed by the template's labels)
//!   ─► create the snapshot ConfigMap (and Secret), or add the revision to the owners of one that is
//!      exactly this snapshot (an object of that name that is not ─► left alone)
//!      refused (RBAC, too large, not ours) ─► one Warning `ConfigSnapshotFailed` for this hash
//! restore: an undo of a workload with `undo: restore-config`, every reference in its namespace
//!   ─► the snapshot of the hash it went back to, trusted only if wave made it (labels, annotations,
//!      immutable, owned by one of the workload's revisions) and its data hashes to that hash
//!      (none, untrusted, or restoring it cannot give that hash ─► refused)
//!   ─► every object it restores exists, is mutable, and no tool manages it (else ─► refused)
//!   ─► one merge patch per object, guarded by its resourceVersion ─► `ConfigRestored`
//!      (noted in `Restores`: workloads using these objects wait until the watches show every write)
//!   refused ─► Warning `ConfigRestoreRefused`, and the template is pinned instead
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use wave_core::hash::Fetched;
use wave_core::history::{self, CurrentObject, Restore, Snapshot};
use wave_core::names::{action, reason};
use wave_core::refs::{ConfigKey, ConfigKind, References};
use wave_core::tracker::ObjectVersion;
use wave_core::undo::Pin;
use wave_core::workload::Workload;

use super::outcome::Outcome;
use super::write::{self, ConfigWrite, Gated};
use crate::api::{self, describe, is_conflict, status_code};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::state::Context;
use crate::state::bookkeeping::RESTORE_ATTEMPTS;

/// How soon to look again for the revision a just-written hash creates.
const REVISION_RECHECK: Duration = Duration::from_millis(500);

/// Keeps the snapshot of the config behind `workload`'s hash, when history is on for it. `Some` asks
/// the caller to look again (its revision does not exist yet).
pub async fn keep(
    ctx: &Context,
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
) -> Result<Option<Outcome>, ReconcileError> {
    let id = &workload.id;
    let Some(hash) = workload.current_hash() else {
        return Ok(None);
    };
    if !history::enabled(workload, ctx.config_history)
        || ctx.kept_snapshots.kept(id, hash, workload.generation)
    {
        return Ok(None);
    }
    if workload.progress.observed_generation < Some(workload.generation) {
        // Its controller makes the revision before it reports this generation observed: until then a
        // list would find nothing.
        return Ok(Some(Outcome::Waiting(REVISION_RECHECK)));
    }
    let snapshot = Snapshot::of(&id.namespace, refs, fetched);
    if snapshot.hash(&ctx.hashing) != hash {
        // Pinned to an earlier hash, or a hash someone else wrote: not the data behind it.
        return Ok(None);
    }
    if let Some(key) = history::foreign_config(&id.namespace, refs) {
        let note = format!(
            "No config snapshot of hash {hash}: it reads {key}, in another namespace, and history never copies config across namespaces (docs/security.md)"
        );
        refused(ctx, workload, hash, note);
        return Ok(None);
    }
    if let Err(outcome) = write::gate(ctx).await {
        // Not now (another replica leads, or the lease is unconfirmed): never skipped for good, or a
        // later restore would find no snapshot.
        return Ok(Some(outcome));
    }
    let fail = |what: String| {
        move |e: kube::Error| ReconcileError::History {
            workload: id.clone(),
            what,
            source: Box::new(e),
        }
    };
    let selector: Vec<String> = workload
        .template
        .typed()
        .metadata
        .iter()
        .flat_map(|m| m.labels.iter().flatten())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let revisions = match api::list_revisions(&ctx.client, id, &workload.uid, &selector.join(",")).await {
        Ok(revisions) => revisions,
        Err(e) if refused_for_good(&e) => {
            let note = format!("Listing the revisions of {id} failed: {}", describe(&e));
            refused(ctx, workload, hash, note);
            return Ok(None);
        }
        Err(e) => return Err(fail("listing its revisions".into())(e)),
    };
    let Some(revision) = history::revision_with(&revisions, hash) else {
        // Observed and still none: its controller makes no revision now (a paused Deployment); the next
        // change of the workload looks again.
        return Ok(None);
    };
    let owner = &revision.owner;
    let name = Snapshot::name(id, hash);
    // The Secret first: the ConfigMap is the snapshot's index, so once it exists the snapshot is whole.
    let secret = snapshot.secret(id, hash, owner.clone());
    let config_map = snapshot.config_map(id, hash, owner.clone());
    let mut results = Vec::new();
    if let Some(secret) = &secret {
        results.push(("Secret", api::create_or_own(&ctx.client, secret, owner).await));
    }
    if results
        .iter()
        .all(|(_, r)| matches!(r, Ok(k) if *k != api::Kept::NotOurs))
    {
        results.push((
            "ConfigMap",
            api::create_or_own(&ctx.client, &config_map, owner).await,
        ));
    }
    for (kind, result) in results {
        match result {
            Ok(api::Kept::NotOurs) => {
                let note = format!(
                    "Keeping the config snapshot {name} (revision {}): a {kind} of that name exists that is not the snapshot wave would write; it is left alone, and no snapshot is kept for this hash",
                    revision.number
                );
                refused(ctx, workload, hash, note);
                return Ok(None);
            }
            Ok(done) => {
                tracing::debug!(workload = %id, snapshot = %name, ?done, revision = revision.number, "config snapshot kept");
            }
            Err(e) if refused_for_good(&e) => {
                let note = format!(
                    "Keeping the config snapshot {name} (revision {}): {}",
                    revision.number,
                    describe(&e)
                );
                refused(ctx, workload, hash, note);
                return Ok(None);
            }
            Err(e) => return Err(fail(format!("keeping the config snapshot {name}"))(e)),
        }
    }
    ctx.kept_snapshots.note(id, hash, workload.generation);
    Ok(None)
}

/// Whether the apiserver refused for good: RBAC without history enabled (403), or data over its limit
/// (413, 422). Retrying would only repeat it.
fn refused_for_good(e: &kube::Error) -> bool {
    matches!(status_code(e), Some(403 | 413 | 422))
}

/// Says once for this hash that its snapshot cannot be kept, and why.
fn refused(ctx: &Context, workload: &Workload, hash: &str, why: String) {
    ctx.kept_snapshots.note(&workload.id, hash, workload.generation);
    let note = format!("{why}. See docs/history.md.");
    tracing::warn!(workload = %workload.id, "{note}");
    ctx.events.publish(
        workload,
        EventType::Warning,
        reason::CONFIG_SNAPSHOT_FAILED,
        action::KEEP_CONFIG_HISTORY,
        note,
    );
}

/// What [`restore`] did.
pub enum Restored {
    /// The config was restored: the note for the `ConfigRestored` Event.
    Done(String),
    /// Not restored, and why (for the `ConfigRestoreRefused` Event); nothing was written, or what was
    /// written was written back.
    Refused(String),
    /// This replica stopped writing part-way (its lease could not be confirmed); what was written was
    /// written back. Decided again shortly.
    Stopped,
}

/// What one restore write came to.
enum Wrote {
    /// Written: the object is now at this version.
    Version(ObjectVersion),
    /// This replica may not write now.
    NotWriting,
    /// Someone else wrote the object first (409).
    Changed,
}

/// Why a restore stopped part-way.
enum Stop {
    NotWriting,
    Changed,
    Failed(kube::Error),
}

/// Writes `restore` over `current`. A retry that meets 409 reads the object: when it holds what the
/// restore writes, the first try landed (its answer was lost), else someone wrote it meanwhile.
async fn write_one(
    ctx: &Context,
    restore: &Restore<'_>,
    current: &CurrentObject,
    gated: Gated,
) -> Result<Wrote, kube::Error> {
    let body = history::restore_patch(restore, current);
    match write::config(ctx, &restore.key, &body, gated).await {
        Ok(ConfigWrite::Written(version)) => Ok(Wrote::Version(version)),
        Ok(ConfigWrite::Not(_)) => Ok(Wrote::NotWriting),
        Ok(ConfigWrite::Unsure) => match api::fetch_content(&ctx.client, &restore.key, None).await? {
            Some((meta, content)) if restore.is_in(&content) => Ok(Wrote::Version(ObjectVersion::of(&meta))),
            _ => Ok(Wrote::Changed),
        },
        Err(e) if is_conflict(&e) => Ok(Wrote::Changed),
        Err(e) => Err(e),
    }
}

/// Writes back the objects of `written` (each at the version the restore made) to what they held
/// before the restore: `fetched`, the content the undo was decided on. An object written since by
/// someone else is left alone. The write-backs skip the gate (`write::Gated::WriteBack`): guarded by
/// the version wave wrote, they are safe, and must end even when this replica stops leading. Returns
/// each object written back, at its new version.
async fn roll_back(
    ctx: &Context,
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
    written: &[(ConfigKey, ObjectVersion)],
) -> Vec<(ConfigKey, ObjectVersion)> {
    let before = Snapshot::of(&workload.id.namespace, refs, fetched);
    let mut back = Vec::new();
    for restore in history::restore_plan(&workload.id.namespace, refs, &before) {
        let Some((_, ours)) = written.iter().find(|(key, _)| *key == restore.key) else {
            continue;
        };
        let current = match api::current_config(&ctx.client, &restore.key).await {
            Ok(Some(current)) if current.resource_version == ours.resource_version => current,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(workload = %workload.id, config = %restore.key, code = ?status_code(&e), "reading a restored object to write it back failed");
                continue;
            }
        };
        match write_one(ctx, &restore, &current, Gated::WriteBack).await {
            Ok(Wrote::Version(version)) => back.push((restore.key.clone(), version)),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(workload = %workload.id, config = %restore.key, code = ?status_code(&e), "writing back a restored object failed");
            }
        }
    }
    back
}

/// Says what a stopped restore wrote back, and what it left restored (`left`).
fn written_back(written: &[(ConfigKey, ObjectVersion)], left: &[ConfigKey]) -> String {
    if written.is_empty() {
        return "nothing had been written".to_string();
    }
    if left.is_empty() {
        return "what had been restored was written back".to_string();
    }
    let left: Vec<String> = left.iter().map(ToString::to_string).collect();
    format!(
        "what had been restored was written back, except {} (changed since, or the write-back failed)",
        left.join(", ")
    )
}

/// Restores the config of the revision an undo went back to (`pin.hash`) from its snapshot. `read` is
/// the version of each object as the tracker showed it before `fetched` was read: only those versions
/// are overwritten.
pub async fn restore(
    ctx: &Context,
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
    read: &BTreeMap<ConfigKey, ObjectVersion>,
    pin: &Pin,
) -> Result<Restored, ReconcileError> {
    let id = &workload.id;
    let fail = |what: String| {
        move |e: kube::Error| ReconcileError::History {
            workload: id.clone(),
            what,
            source: Box::new(e),
        }
    };
    if let Some(key) = history::foreign_config(&id.namespace, refs) {
        return Ok(Restored::Refused(format!(
            "the template reads {key}, in another namespace, and a restore writes only config in the workload's own namespace"
        )));
    }
    if ctx.restore_failures.exhausted(id) {
        ctx.restore_failures.forget(id);
        return Ok(Restored::Refused(format!(
            "restoring failed {RESTORE_ATTEMPTS} times in a row (each time, what had been restored was written back)"
        )));
    }
    let name = Snapshot::name(id, &pin.hash);
    let Some((cm, secret)) = api::get_snapshot(&ctx.client, id, &pin.hash)
        .await
        .map_err(fail(format!("reading the config snapshot {name}")))?
    else {
        return Ok(Restored::Refused(format!(
            "there is no config snapshot of hash {} (config history was off when it was written, or its revision was trimmed)",
            pin.hash
        )));
    };
    let revisions = api::list_revisions(&ctx.client, id, &workload.uid, "")
        .await
        .map_err(fail(format!("listing the revisions of {id}")))?;
    let snapshot = match history::read_trusted(&cm, secret.as_ref(), id, &pin.hash, &revisions) {
        Ok(snapshot) => snapshot,
        Err(why) => return Ok(Restored::Refused(why)),
    };
    // What the restore overwrites must have a snapshot too, or it would be lost for good: a version
    // wave wrote a moment ago may not have one yet (`wave_core::decide::undo_action`).
    let current = Snapshot::name(id, &pin.config);
    let kept = api::get_snapshot(&ctx.client, id, &pin.config)
        .await
        .map_err(fail(format!("reading the config snapshot {current}")))?;
    if kept.is_none() {
        return Ok(Restored::Refused(format!(
            "the current config (hash {}) has no snapshot yet, and restoring would lose it",
            pin.config
        )));
    }
    let now = Snapshot::of(&id.namespace, refs, fetched);
    if let Err(why) = history::restorable(&snapshot, &now, &ctx.hashing, &pin.hash) {
        return Ok(Restored::Refused(why));
    }
    let plan = history::restore_plan(&id.namespace, refs, &snapshot);
    let mut currents = Vec::new();
    for Restore { key, .. } in &plan {
        let current = api::current_config(&ctx.client, key)
            .await
            .map_err(fail(format!("reading {key}")))?;
        let refusal = match &current {
            None => Some(format!("{key} does not exist")),
            Some(c) if c.immutable => Some(format!("{key} is immutable")),
            // What the undo was decided on, and what is written back on a failure, is the version
            // read before the decision: a newer one is config nobody has run, never overwritten.
            Some(c)
                if read
                    .get(key)
                    .is_none_or(|v| v.resource_version != c.resource_version) =>
            {
                Some(format!(
                    "{key} changed since wave read it, and its newer config is not overwritten"
                ))
            }
            Some(c) => c.managed_by.as_ref().map(|tool| {
                format!("{key} is managed by {tool}, which would undo the restore (or be undone by it)")
            }),
        };
        if let Some(why) = refusal {
            return Ok(Restored::Refused(why));
        }
        currents.extend(current);
    }
    let mut restored = Vec::new();
    let mut written: Vec<(ConfigKey, ObjectVersion)> = Vec::new();
    ctx.restores
        .begin(id, plan.iter().map(|r| r.key.clone()), Instant::now());
    for (restore, current) in plan.iter().zip(&currents) {
        let failure = match write_one(ctx, restore, current, Gated::Yes).await {
            Ok(Wrote::Version(version)) => {
                ctx.restores
                    .written(id, &restore.key, version.clone(), Instant::now());
                written.push((restore.key.clone(), version));
                restored.push(format!("{}/{}", restore.key.kind, restore.key.name));
                continue;
            }
            Ok(Wrote::NotWriting) => Stop::NotWriting,
            Ok(Wrote::Changed) => Stop::Changed,
            Err(e) => Stop::Failed(e),
        };
        // Stopped part-way: what was restored is written back, so no workload rolls to (and no pod
        // reads) a mix of the two versions.
        let back = roll_back(ctx, workload, refs, fetched, &written).await;
        let left: Vec<ConfigKey> = written
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !back.iter().any(|(k, _)| k == *key))
            .cloned()
            .collect();
        ctx.restores.rolled_back(id, &back, &left, Instant::now());
        let then = written_back(&written, &left);
        let secret = restore.key.kind == ConfigKind::Secret;
        return match failure {
            Stop::Changed => Ok(Restored::Refused(format!(
                "{} changed during the restore, and its newer config is not overwritten; {then}",
                restore.key
            ))),
            Stop::Failed(e) if refused_for_good(&e) => {
                let why = write::reason(&e, secret);
                Ok(Restored::Refused(format!(
                    "writing {} was refused ({why}); {then}",
                    restore.key
                )))
            }
            Stop::Failed(e) => {
                ctx.restore_failures.failed(id);
                let what = format!("Restoring {}", restore.key);
                write::failed(
                    ctx,
                    workload,
                    &what,
                    &e,
                    &format!("An undo's restore stopped: {then}. "),
                    secret,
                );
                Err(fail(format!("restoring {}", restore.key))(e))
            }
            // The lease could not be confirmed: the undo is decided again shortly.
            Stop::NotWriting => Ok(Restored::Stopped),
        };
    }
    ctx.restore_failures.forget(id);
    ctx.write_failures.forget(id);
    Ok(Restored::Done(format!(
        "Undo detected: restored {} from the config snapshot {name}, so the pods run the config hash {} they were released with.",
        if restored.is_empty() {
            "nothing (the snapshot holds no object the template uses)".to_string()
        } else {
            restored.join(", ")
        },
        pin.hash
    )))
}
