//! The reconcile of one workload: a thin shell around the pure core.
//!
//! ```text
//! leader? ─► view from the tracker ─► what Wave v0.6 left removed, or reported (`legacy`; a refusal
//!   does not stop the reconcile) ─► refs (core)
//!   ─► an object it uses is being restored and the watches lag? look again shortly (Waiting)
//!   ─► content cache ─► plan (core)
//!   Noop    ─► done; with config history, the snapshot of the config behind the hash kept (`history`)
//!   Blocked ─► one Warning Event per distinct missing set; woken again when the config appears
//!   Write   ─► a rollout? held while a config object it uses flaps (`flap`), else coalesced to one
//!              per --min-rollout-interval (`coalesce`): requeued for when it may roll
//!           ─► the template went back to an earlier hash (an undo)? restore that config from its
//!              snapshot (`undo: restore-config`, `history`), or else pin it there (`undo`); no hash write
//!           ─► paced? (`pacing`) queued for a slot, or halted by a config version that failed
//!           ─► token (global bucket; none ⇒ a place in line, requeued for when it is due)
//!           ─► lease still held? (`lease::LeaseCheck`; no ⇒ NotLeader) ─► PATCH (merge patch,
//!              field manager `wave`, guarded by resourceVersion) ─► Events after success
//!              409 ⇒ re-read the workload and re-plan at once
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use wave_core::decide::{self, Decision, Hold, Memory, Rolled, Situation, UndoAction};
use wave_core::hash::{Fetched, missing_message};
use wave_core::names::{self, action, reason};
use wave_core::plan::{self, GateReason, Write};
use wave_core::refs::References;
use wave_core::undo::{self, Pin};
use wave_core::workload::{Workload, WorkloadRef};

use super::context::Context;
use super::{held_pods, history, legacy, pacing};
use crate::api::{self, PatchStyle, describe, error_chain, is_conflict, is_not_found};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::metrics::{KindError, KindLabel, KindResult};

/// How many times a write is re-planned after 409 Conflict before the reconcile fails.
pub(super) const CONFLICT_ATTEMPTS: usize = 5;

/// How soon a workload waiting for a restore to show whole looks again (the restored objects' watch
/// events wake it too).
const RESTORE_RECHECK: Duration = Duration::from_millis(200);

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
        }
    }
}

/// Reconciles one workload. `triggered` is when the config change behind this reconcile was seen.
pub async fn reconcile(
    ctx: &Context,
    id: &WorkloadRef,
    triggered: Option<Instant>,
) -> Result<Outcome, ReconcileError> {
    let result = plan_and_write(ctx, id, triggered).await;
    if !matches!(result, Ok(Outcome::RateLimited(_))) {
        // A waiter that woke to find nothing to write (or no workload) gives its token back.
        ctx.limiter().cancel(id);
    }
    if !matches!(result, Ok(Outcome::Queued(_) | Outcome::Halted)) {
        // Nothing left to wait for: it leaves the line.
        ctx.pacer().forget(id);
    }
    let write_coming = matches!(
        result,
        Ok(Outcome::Written
            | Outcome::RateLimited(_)
            | Outcome::LeaseUnconfirmed
            | Outcome::Waiting(_)
            | Outcome::Queued(_))
    );
    if !write_coming {
        // A slot taken for a write that will not come (the config went back meanwhile, or the write
        // failed) is given back; a written rollout keeps it until the watch shows it.
        pacing::cancel(ctx, id);
    }
    result
}

async fn plan_and_write(
    ctx: &Context,
    id: &WorkloadRef,
    triggered: Option<Instant>,
) -> Result<Outcome, ReconcileError> {
    if !ctx.is_leader() {
        return Ok(Outcome::NotLeader);
    }
    let Some(mut workload) = ctx.tracker().workload(id) else {
        ctx.missing.forget(id);
        ctx.denied.forget(id);
        return Ok(Outcome::Gone);
    };
    tracing::debug!(workload = %id, resource_version = %workload.resource_version, "reconciling");
    let selected = ctx.tracker().selects_namespace(&id.namespace);
    let reloads =
        selected && !workload.is_opted_in() && ctx.tracker().reloader_selection(&workload).is_some();
    if !reloads && let Some(outcome) = super::reloader::release_pause(ctx, &workload).await? {
        // A pause a reload made outlives nothing: not its annotations, nor the selection.
        return Ok(outcome);
    }
    if !selected {
        // Its namespace left the --namespace-selector after it was queued: leave it alone.
        return Ok(Outcome::Noop);
    }
    match legacy::clean(ctx, &workload).await? {
        legacy::Cleanup::Nothing => {}
        legacy::Cleanup::NotWriting => return Ok(not_writing(ctx)),
        legacy::Cleanup::Done => {
            // Its resourceVersion moved on: plan from what is stored now.
            let Some(fresh) = reread(ctx, id).await? else {
                return Ok(Outcome::Gone);
            };
            workload = fresh;
        }
    }
    if reloads {
        return super::reloader::reconcile(ctx, workload, triggered).await;
    }
    for attempt in 1..=CONFLICT_ATTEMPTS {
        let (refs, unwatched) = ctx.tracker().references(&workload);
        match refs.denied_message() {
            // The same words whether or not those objects exist (`docs/security.md`).
            Some(message) => ctx.warn_once(
                &ctx.denied,
                &workload,
                reason::CROSS_NAMESPACE_REFERENCE_DENIED,
                action::CHECK_CONFIG,
                message,
            ),
            None => ctx.denied.forget(id),
        }
        for key in &unwatched {
            tracing::warn!(workload = %id, config = %key, "reference outside the watched namespaces is treated as absent and optional");
        }
        for skipped in &refs.skipped {
            tracing::warn!(workload = %id, "{skipped}; skipped");
        }
        if ctx.restores.pending(&refs, &ctx.tracker(), Instant::now()) {
            // Planned now, it could hash half-restored config and roll to it (`Restores`).
            return Ok(Outcome::Waiting(RESTORE_RECHECK));
        }
        let fetched = ctx.content.resolve(&refs, &ctx.tracker).await?;
        super::observe_data_changes(ctx);
        let policy = plan::Policy {
            now: k8s_openapi::jiff::Timestamp::now(),
            max_gate: ctx.max_gate,
            hashing: ctx.hashing.clone(),
        };
        let decision = with_memory(ctx, id, |memory| {
            decide::decision(&Situation {
                workload: &workload,
                refs: &refs,
                fetched: &fetched,
                policy: &policy,
                memory: *memory,
            })
        });
        let (mut write, rollout, versions) = match decision {
            Decision::Nothing { rolled } => {
                tracing::debug!(
                    workload = %id,
                    resource_version = %workload.resource_version,
                    hash = ?workload.current_hash(),
                    pinned = ?undo::Pin::read(&workload).map(|p| p.hash),
                    "nothing to write"
                );
                ctx.missing.forget(id);
                if let Some(hash) = workload.current_hash() {
                    // Current and correct (or pinned): a hash an undo may go back to.
                    ctx.known_hashes.note(id, hash, rolled);
                }
                if let Some(outcome) = pacing::record_failure(ctx, &workload).await? {
                    return Ok(outcome);
                }
                if let Some(outcome) = history::keep(ctx, &workload, &refs, &fetched).await? {
                    return Ok(outcome);
                }
                return Ok(Outcome::Noop);
            }
            Decision::Blocked {
                missing,
                recheck_after,
            } => {
                report_missing(ctx, &workload, missing_message(&missing));
                return Ok(Outcome::Blocked { recheck_after });
            }
            Decision::DeleteHeldPods if !may_write(ctx, id).await? => return Ok(not_writing(ctx)),
            Decision::DeleteHeldPods => return held_pods::delete(ctx, &workload).await,
            Decision::Undo { pin, action } => {
                // The view may predate wave's own last write (the watch has not shown it yet), which
                // looks exactly like an undo: believe one only from the workload as stored now.
                let Some(fresh) = reread(ctx, id).await? else {
                    return Ok(Outcome::Gone);
                };
                if fresh.resource_version != workload.resource_version {
                    workload = fresh;
                    continue;
                }
                return undo(ctx, &workload, &refs, &fetched, &pin, action).await;
            }
            Decision::Hold(hold) => return Ok(held(ctx, &workload, hold)),
            Decision::Write {
                write,
                rollout,
                versions,
            } => (write, rollout, versions),
        };
        let marker = pacing::mark(ctx, &workload, &versions, &mut write);
        let paced = rollout && marker.is_some();
        if let Some(marker) = marker.as_ref().filter(|_| paced)
            && let Some(outcome) = pacing::admit(ctx, &workload, marker)
        {
            return Ok(outcome);
        }
        let body = plan::patch_body(&workload, &write);
        // No write coming gives its slot back (`reconcile`); a conflict is re-planned at once and
        // keeps it.
        let result = write_once(ctx, &workload, &body, PatchStyle::Merge).await;
        match result? {
            Some(Outcome::Written) => {
                if rollout {
                    // Only config-triggered rollouts start an interval: a workload's first hash does not.
                    ctx.coalescer().record(id, Instant::now());
                }
                ctx.missing.forget(id);
                if let Some(hash) = &write.hash {
                    ctx.known_hashes.note(id, hash, Some(Rolled::of(&versions)));
                }
                after_write(ctx, &workload, &write, triggered);
                return Ok(Outcome::Written);
            }
            Some(outcome) => return Ok(outcome),
            None if attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(workload = %id, attempt, "conflict; re-reading and re-planning");
                let Some(fresh) = reread(ctx, id).await? else {
                    return Ok(Outcome::Gone);
                };
                workload = fresh;
            }
            None => break,
        }
    }
    Err(ReconcileError::Conflict {
        workload: id.clone(),
        attempts: CONFLICT_ATTEMPTS,
    })
}

/// The workload as stored now; `None` if it is gone.
pub(super) async fn reread(ctx: &Context, id: &WorkloadRef) -> Result<Option<Arc<Workload>>, ReconcileError> {
    match api::get_workload(&ctx.client, id).await {
        // As the tracker would see it (a Deployment an Argo Rollout takes its template from).
        Ok(fresh) => Ok(fresh.map(|w| Arc::new(ctx.tracker().effective(&w).into_owned()))),
        Err(source) => Err(ReconcileError::GetWorkload {
            workload: id.clone(),
            source: Box::new(source),
        }),
    }
}

/// One write: a token, the lease, the PATCH. `Ok(None)` is a 409 Conflict (re-read and re-plan).
pub(super) async fn write_once(
    ctx: &Context,
    workload: &Workload,
    body: &serde_json::Value,
    style: PatchStyle,
) -> Result<Option<Outcome>, ReconcileError> {
    let id = &workload.id;
    if let Err(wait) = ctx.limiter().reserve(id, Instant::now()) {
        return Ok(Some(Outcome::RateLimited(wait)));
    }
    if !may_write(ctx, id).await? {
        return Ok(Some(not_writing(ctx)));
    }
    match api::patch_workload_as(&ctx.client, id, body, style).await {
        Ok(()) => Ok(Some(Outcome::Written)),
        Err(e) if is_not_found(&e) => Ok(Some(Outcome::Gone)),
        Err(e) if is_conflict(&e) => Ok(None),
        Err(source) => {
            let what = match style {
                PatchStyle::Merge => "the config hash",
                PatchStyle::Strategic => "the reload",
            };
            let note = format!("Writing {what} failed: {}", describe(&source));
            ctx.events.publish(
                workload,
                EventType::Warning,
                reason::WRITE_FAILED,
                action::UPDATE_CONFIG_HASH,
                note,
            );
            Err(ReconcileError::PatchWorkload {
                workload: id.clone(),
                source: Box::new(source),
            })
        }
    }
}

/// Someone took the template back to an earlier config hash (`kubectl rollout undo`): restore that
/// config from its snapshot (`undo: restore-config`), or else pin the template there, so that wave does
/// not roll it forward until the config changes (`wave_core::undo`).
async fn undo(
    ctx: &Context,
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
    pin: &Pin,
    action: UndoAction,
) -> Result<Outcome, ReconcileError> {
    let id = &workload.id;
    if !may_write(ctx, id).await? {
        return Ok(not_writing(ctx));
    }
    let refused = match action {
        UndoAction::Restore => match history::restore(ctx, workload, refs, fetched, pin).await? {
            history::Restored::Done(note) => {
                tracing::info!(workload = %id, reason = reason::CONFIG_RESTORED, "{note}");
                ctx.events.publish(
                    workload,
                    EventType::Normal,
                    reason::CONFIG_RESTORED,
                    action::RESTORE_CONFIG,
                    note,
                );
                remember_undone(ctx, id, pin);
                return Ok(Outcome::Restored);
            }
            history::Restored::Refused(why) => Some(why),
        },
        UndoAction::Pin { refused } => refused,
    };
    if let Some(why) = refused {
        let note =
            format!("Undo detected, but the config was not restored: {why}. The template is pinned instead.");
        tracing::info!(workload = %id, reason = reason::CONFIG_RESTORE_REFUSED, "{note}");
        ctx.events.publish(
            workload,
            EventType::Warning,
            reason::CONFIG_RESTORE_REFUSED,
            action::RESTORE_CONFIG,
            note,
        );
    }
    match api::patch_workload(&ctx.client, id, &undo::pin_patch(workload, pin)).await {
        Ok(()) => remember_undone(ctx, id, pin),
        Err(e) if is_not_found(&e) => return Ok(Outcome::Gone),
        Err(source) => {
            return Err(ReconcileError::PatchWorkload {
                workload: id.clone(),
                source: Box::new(source),
            });
        }
    }
    let revision = workload
        .annotations
        .get(names::DEPLOYMENT_REVISION)
        .map(|r| format!(" (revision {r})"))
        .unwrap_or_default();
    let note = format!(
        "Undo detected: the template went back to config hash {}{revision}, which it carried before; the current config's hash is {}. wave leaves it there until the config changes, or until `wave unpin {}/{} -n {}`.",
        pin.hash,
        pin.config,
        id.kind.as_str().to_lowercase(),
        id.name,
        id.namespace
    );
    tracing::info!(workload = %id, hash = %pin.hash, "undo detected; pinned");
    ctx.events.publish(
        workload,
        EventType::Normal,
        reason::ROLLOUT_UNDO_DETECTED,
        action::PIN_HASH,
        note,
    );
    Ok(Outcome::Pinned)
}

/// The template now stays on the hash it went back to: that is the hash it carries as far as undo
/// detection goes. Noted at once, not at the next reconcile (which would note it too), because a config
/// change may reach wave first: it would find the template still "back" on an earlier hash, take it for
/// a new undo, and pin (or restore) again instead of rolling the change out.
fn remember_undone(ctx: &Context, id: &WorkloadRef, pin: &Pin) {
    ctx.known_hashes.note(id, &pin.hash, None);
}

/// Runs `f` with what wave remembers for `id` (`wave_core::decide::Memory`): the flap breaker and the
/// coalescer are locked meanwhile (`f` is pure and short).
pub(crate) fn with_memory<R>(ctx: &Context, id: &WorkloadRef, f: impl FnOnce(&Memory<'_>) -> R) -> R {
    let now = Instant::now();
    settle_flaps(ctx, now);
    // The halts as of the last census: the router takes one on every change of a workload's status,
    // hash or annotations (`pacing::progressed`), so no decision reads every workload again.
    let halts = ctx.pacer().halts().clone();
    let carried = ctx.known_hashes.of(id);
    let rolled = ctx.known_hashes.rolled(id);
    let flaps = ctx.flaps();
    let coalescer = ctx.coalescer();
    f(&Memory {
        carried: &carried,
        rolled: rolled.as_ref(),
        flaps: &flaps,
        coalescer: &coalescer,
        min_interval: ctx.min_rollout_interval,
        halts: &halts,
        now,
    })
}

/// What a held rollout tells, once per reason, and when it looks again.
pub(super) fn held(ctx: &Context, workload: &Workload, hold: Hold) -> Outcome {
    let now = Instant::now();
    let recheck = hold.recheck(now);
    match hold {
        Hold::Halted(halt) => pacing::halted(ctx, workload, &halt),
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

/// Ends the flapping episodes whose quiet period is over: one `ConfigSettled` on each object; the
/// workloads they held get theirs with their write.
fn settle_flaps(ctx: &Context, now: Instant) {
    let settled = ctx.flaps().settle(now);
    if settled.is_empty() {
        return;
    }
    ctx.metrics
        .config_flapping
        .set(ctx.flaps().flapping_count() as i64);
    for s in settled {
        ctx.settled().extend(s.held.iter().cloned());
        let note = format!(
            "{} has not changed for {:?} after {} changes while flapping: its final value now rolls, once, to the {} workloads it held back.",
            s.object,
            ctx.flaps().policy().quiet,
            s.changes,
            s.held.len()
        );
        tracing::info!(config = %s.object, "config settled");
        ctx.events.publish_config(
            &s.object,
            EventType::Normal,
            reason::CONFIG_SETTLED,
            action::HOLD_ROLLOUT,
            note,
        );
    }
}

/// Why a write was not made: another replica leads (the work is dropped: the new leader checks every
/// workload when it takes over), or this one could not confirm its lease (the work is kept).
pub(super) fn not_writing(ctx: &Context) -> Outcome {
    if ctx.is_leader() {
        Outcome::LeaseUnconfirmed
    } else {
        Outcome::NotLeader
    }
}

/// Whether this replica may write now (see `Context::may_write`).
async fn may_write(ctx: &Context, id: &WorkloadRef) -> Result<bool, ReconcileError> {
    ctx.may_write()
        .await
        .map_err(|source| ReconcileError::ConfirmLease {
            workload: id.clone(),
            source: Box::new(source),
        })
}

/// Events and metrics after a successful write, never before (difference `merge-patch`).
fn after_write(ctx: &Context, workload: &Workload, write: &Write, triggered: Option<Instant>) {
    let kind = workload.id.kind.as_str();
    if let Some(hash) = &write.hash {
        if ctx.settled().remove(&workload.id) {
            let note = format!("The config that held this workload back settled; it rolled once, to {hash}.");
            ctx.events.publish(
                workload,
                EventType::Normal,
                reason::CONFIG_SETTLED,
                action::HOLD_ROLLOUT,
                note,
            );
        }
        ctx.metrics.rollouts.get_or_create(&KindLabel { kind }).inc();
        if let Some(t) = triggered {
            ctx.metrics
                .change_to_patch_seconds
                .observe(t.elapsed().as_secs_f64());
        }
        tracing::info!(workload = %workload.id, hash = %hash, "config hash updated");
        // Wave's exact message.
        let note = format!("Configuration hash updated to {hash}");
        ctx.events.publish(
            workload,
            EventType::Normal,
            reason::CONFIG_CHANGED,
            action::UPDATE_CONFIG_HASH,
            note,
        );
    }
    if let Some(release) = &write.release_gate {
        let gate = names::SCHEDULING_GATE;
        let (type_, reason, note) = match release.reason {
            GateReason::ConfigReady => (
                EventType::Normal,
                reason::SCHEDULING_ENABLED,
                format!("Released the scheduling gate {gate}: all required config exists."),
            ),
            GateReason::OptedOut => (
                EventType::Normal,
                reason::SCHEDULING_ENABLED,
                format!("Released the scheduling gate {gate}: the workload no longer opts in."),
            ),
            GateReason::TimedOut => (
                EventType::Warning,
                reason::GATE_TIMED_OUT,
                format!(
                    "Released the scheduling gate {gate} after {:?}: required config is still missing.",
                    ctx.max_gate
                ),
            ),
        };
        if matches!(release.reason, GateReason::TimedOut) {
            ctx.metrics.gates_timed_out.inc();
        }
        tracing::info!(workload = %workload.id, reason, "scheduling gate released");
        ctx.events
            .publish(workload, type_, reason, action::GATE_SCHEDULING, note);
    }
    if write.restore_scheduler.is_some() {
        tracing::info!(workload = %workload.id, "scheduling restored");
        let note = "Enabled scheduling since all children became available.".to_string();
        ctx.events.publish(
            workload,
            EventType::Normal,
            reason::SCHEDULING_ENABLED,
            action::UPDATE_CONFIG_HASH,
            note,
        );
    }
}

fn report_missing(ctx: &Context, workload: &Workload, message: String) {
    if ctx.missing.report(&workload.id, &message) {
        tracing::warn!(workload = %workload.id, "{message}; not writing the hash until it exists");
        ctx.events.publish(
            workload,
            EventType::Warning,
            reason::CONFIG_MISSING,
            action::CHECK_CONFIG,
            message,
        );
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
