//! The one writer: every path that writes (a reconcile's hash, a Reloader reload or pause, a failure
//! record, an undo's pin, the pods a released gate held, Wave v0.6's leftovers, history's snapshots and
//! restores) asks it whether this replica may write, and writes workloads and restored config through
//! it.
//!
//! ```text
//! gate: leader? ─► lease confirmed (lease::LeaseCheck)? ─► write
//!        no ─► NotLeader (the work is dropped: a new leader checks every workload)
//!        unconfirmed, or the Lease read failed ─► LeaseUnconfirmed (kept; asked again in 250 ms)
//! workload: token (rollouts only) ─► gate ─► PATCH as field manager `wave`, guarded by resourceVersion
//!        200 ─► Written (a failure noted earlier is forgotten)
//!        404 ─► Gone        409 ─► Conflict: `Conflicts` re-reads, the caller re-plans (5 writes at most)
//!        else ─► one WriteFailed Warning per workload and kind of failure, and an error: the reconcile
//!                is retried with backoff (`outcome::retry_after`)
//! config (a restore): gate ─► PATCH, guarded by resourceVersion; 429, 5xx or no answer ─► twice more
//!        within a second (gated again each time), so one blip does not undo a whole restore; a 409 on
//!        a retry is `Unsure` (the first try may have landed: the caller reads the object to know).
//!        A write-back of wave's own restore skips the gate: it is guarded by the version wave wrote.
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use wave_core::names::{action, reason};
use wave_core::refs::ConfigKey;
use wave_core::tracker::ObjectVersion;
use wave_core::workload::{Workload, WorkloadRef};

use super::outcome::Outcome;
use crate::api::{self, PatchStyle, describe, is_conflict, is_not_found, status_code};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::state::Context;

/// How many times a write is re-planned after 409 Conflict before the reconcile fails.
pub const CONFLICT_ATTEMPTS: usize = 5;

/// Whether this replica may write now. `Err` is why not: another replica leads, or this one could not
/// confirm its lease (its renewal is late, or the read of the Lease failed). A failed read is not an
/// error of the reconcile: the lease loop retries it within a second (`lease`), so the work is asked
/// again shortly, never after a reconcile's backoff.
pub async fn gate(ctx: &Context) -> Result<(), Outcome> {
    if !ctx.is_leader() {
        return Err(Outcome::NotLeader);
    }
    let Some(lease) = &ctx.lease else {
        return Ok(());
    };
    match lease.confirm().await {
        Ok(true) => Ok(()),
        Ok(false) => Err(not_writing(ctx)),
        Err(e) => {
            tracing::warn!(error = %describe(&e), "reading the lease before a write failed; asking again shortly");
            ctx.metrics.lease_check_errors.inc();
            Err(not_writing(ctx))
        }
    }
}

/// Why a write was not made: another replica leads (the work is dropped: the new leader checks every
/// workload when it takes over), or this one could not confirm its lease (the work is kept).
pub fn not_writing(ctx: &Context) -> Outcome {
    if ctx.is_leader() {
        Outcome::LeaseUnconfirmed
    } else {
        Outcome::NotLeader
    }
}

/// What a workload write is, for its token and the words of a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// The config hash (or a gate released, scheduling restored, an in-place restart begun): a rollout,
    /// so it takes a token. Strategic when it adds the in-place agent (`plan::Write::is_strategic`).
    ConfigHash(PatchStyle),
    /// How far an in-place restart got (`wave_core::inplace::Record`), with its failure's record.
    InPlaceRecord,
    /// What Reloader writes (an env var or annotation, a pause), as Reloader applies it (a strategic
    /// merge patch, or a merge patch for an Argo Rollout): a rollout, so it takes a token. A CronJob's
    /// reload is a Job started from it (`start`).
    Reload(PatchStyle),
    /// The end of a reload's pause: the Deployment rolls what changed meanwhile, so it takes a token.
    Resume,
    /// The record that a rollout failed (`wave_core::pace::Failure`).
    FailureRecord,
    /// An undo's pin.
    Pin,
}

impl What {
    fn words(self) -> &'static str {
        match self {
            What::ConfigHash(_) => "Writing the config hash",
            What::InPlaceRecord => "Recording an in-place restart",
            What::Reload(_) => "Writing the reload",
            What::Resume => "Ending the reload's pause",
            What::FailureRecord => "Recording a failed rollout",
            What::Pin => "Pinning the undo",
        }
    }

    fn style(self) -> PatchStyle {
        match self {
            What::Reload(style) | What::ConfigHash(style) => style,
            _ => PatchStyle::Merge,
        }
    }

    fn takes_token(self) -> bool {
        matches!(
            self,
            What::ConfigHash(_) | What::Reload(_) | What::Resume | What::FailureRecord
        )
    }
}

/// What a workload write came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Patched {
    /// Written.
    Written,
    /// 409 Conflict: the workload changed since it was read. Re-read it ([`Conflicts`]) and re-plan.
    Conflict,
    /// Not written, and no error: the outcome says why (`Gone`, `NotLeader`, `LeaseUnconfirmed`,
    /// `RateLimited`).
    Not(Outcome),
}

/// Whether `what` may be written to `id` now: its token (for a rollout), then the gate. `Err` is why
/// not (`RateLimited`: a place in line; `NotLeader`, `LeaseUnconfirmed`).
pub async fn ready(ctx: &Context, id: &WorkloadRef, what: What) -> Result<(), Outcome> {
    if what.takes_token()
        && let Err(wait) = ctx.limiter().reserve(id, Instant::now())
    {
        return Err(Outcome::RateLimited(wait));
    }
    gate(ctx).await
}

/// Writes `body` to `workload`: [`ready`], then the PATCH.
pub async fn patch(
    ctx: &Context,
    workload: &Workload,
    body: &serde_json::Value,
    what: What,
) -> Result<Patched, ReconcileError> {
    let id = &workload.id;
    if let Err(outcome) = ready(ctx, id, what).await {
        return Ok(Patched::Not(outcome));
    }
    match api::patch_workload_as(&ctx.client, id, body, what.style()).await {
        Ok(()) => {
            ctx.write_failures.forget(id);
            Ok(Patched::Written)
        }
        Err(e) if is_not_found(&e) => Ok(Patched::Not(Outcome::Gone)),
        Err(e) if is_conflict(&e) => Ok(Patched::Conflict),
        Err(source) => {
            failed(ctx, workload, what.words(), &source, "", false);
            Err(ReconcileError::PatchWorkload {
                workload: id.clone(),
                source: Box::new(source),
            })
        }
    }
}

/// Why a write failed, in words for an Event: the apiserver's message, unless the write was of a
/// Secret (`secret`): a policy's message about a Secret write may quote what was written, and an Event
/// is read by more people than the Secret, so then only its status code.
pub fn reason(error: &kube::Error, secret: bool) -> String {
    match (secret, status_code(error)) {
        (false, _) => describe(error),
        (true, Some(code)) => {
            format!("the apiserver answered {code} (its message is not quoted: it may quote the Secret)")
        }
        (true, None) => "the apiserver did not answer".to_string(),
    }
}

/// One `WriteFailed` Warning per workload and kind of failure (a 429 or 5xx repeats while the
/// reconcile backs off; the Warning does not), until a write of it succeeds. `what` is the write in
/// words, capitalised (`Writing the config hash`, `Restoring configmap ns/app`); `then` is what became
/// of it. The apiserver's message is quoted unless `secret` ([`reason`]).
pub fn failed(ctx: &Context, workload: &Workload, what: &str, error: &kube::Error, then: &str, secret: bool) {
    let code = match status_code(error) {
        Some(code) => code.to_string(),
        None => "no answer".to_string(),
    };
    if ctx
        .write_failures
        .report(&workload.id, &format!("{what}: {code}"))
    {
        let why = reason(error, secret);
        let note = format!(
            "{what} failed: {why}. {then}wave retries with backoff; this Warning is not repeated while it fails the same way."
        );
        tracing::warn!(workload = %workload.id, "{note}");
        ctx.events.publish(
            workload,
            EventType::Warning,
            reason::WRITE_FAILED,
            action::UPDATE_CONFIG_HASH,
            note,
        );
    }
}

/// The workload as stored now; `None` if it is gone.
pub async fn reread(ctx: &Context, id: &WorkloadRef) -> Result<Option<Arc<Workload>>, ReconcileError> {
    match api::get_workload(&ctx.client, id).await {
        // As the tracker would see it (a Deployment an Argo Rollout takes its template from).
        Ok(fresh) => Ok(fresh.map(|w| Arc::new(ctx.tracker().effective(&w).into_owned()))),
        Err(source) => Err(ReconcileError::GetWorkload {
            workload: id.clone(),
            source: Box::new(source),
        }),
    }
}

/// The re-plans of one write after 409 Conflicts: each re-reads the workload, and after
/// [`CONFLICT_ATTEMPTS`] the reconcile fails (and is retried with backoff).
pub struct Conflicts {
    id: WorkloadRef,
    left: usize,
}

impl Conflicts {
    /// For writes of `id`.
    pub fn new(id: &WorkloadRef) -> Self {
        Self {
            id: id.clone(),
            left: CONFLICT_ATTEMPTS,
        }
    }

    /// A write met a conflict: the workload as stored now (`None` if it is gone), to plan again from.
    pub async fn reread(&mut self, ctx: &Context) -> Result<Option<Arc<Workload>>, ReconcileError> {
        self.again()?;
        tracing::debug!(workload = %self.id, left = self.left, "conflict; re-reading and re-planning");
        reread(ctx, &self.id).await
    }

    /// The plan is to be made again from a newer workload read by the caller: one attempt fewer.
    pub fn again(&mut self) -> Result<(), ReconcileError> {
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            return Err(ReconcileError::Conflict {
                workload: self.id.clone(),
                attempts: CONFLICT_ATTEMPTS,
            });
        }
        Ok(())
    }
}

/// How often, and after how long, a config write that met a passing failure is tried again.
const CONFIG_RETRIES: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(600)];

/// Whether `e` may pass by itself: the apiserver was busy (429), failed (5xx), or did not answer.
fn is_passing(e: &kube::Error) -> bool {
    match status_code(e) {
        Some(code) => code == 429 || code >= 500,
        None => !matches!(e, kube::Error::SerdeError(_)),
    }
}

/// What a config write came to.
pub enum ConfigWrite {
    /// Written: the object is now at this version.
    Written(ObjectVersion),
    /// A retry met 409 Conflict: the first try may have landed with its answer lost, or someone
    /// wrote the object. The caller reads it to know which.
    Unsure,
    /// Not written, and no error: this replica may not write now.
    Not(Outcome),
}

/// Whether a config write asks the gate first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gated {
    /// Yes: any write wave decided.
    Yes,
    /// No: a write-back of wave's own restore, guarded by the version wave wrote, which must end even
    /// when this replica stops leading part-way (the next leader could not finish it).
    WriteBack,
}

/// Writes `body` (a merge patch guarded by resourceVersion) to config object `key`: the gate, the
/// PATCH, and the retries of a passing failure (see the module docs).
pub async fn config(
    ctx: &Context,
    key: &ConfigKey,
    body: &serde_json::Value,
    gated: Gated,
) -> Result<ConfigWrite, kube::Error> {
    let mut retries = CONFIG_RETRIES.iter();
    let mut retried = false;
    loop {
        if gated == Gated::Yes
            && let Err(outcome) = gate(ctx).await
        {
            return Ok(ConfigWrite::Not(outcome));
        }
        match api::patch_config(&ctx.client, key, body).await {
            Ok(version) => return Ok(ConfigWrite::Written(version)),
            Err(e) if retried && is_conflict(&e) => return Ok(ConfigWrite::Unsure),
            Err(e) if is_passing(&e) => match retries.next() {
                Some(wait) => {
                    // The code only: the message of a refused Secret write may quote it.
                    tracing::debug!(config = %key, code = ?status_code(&e), ?wait, "config write failed; trying again");
                    tokio::time::sleep(*wait).await;
                    retried = true;
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}
