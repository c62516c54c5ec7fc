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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use wave_core::decide::{self, Decision, Rolled, Situation, UndoAction};
use wave_core::hash::{Fetched, missing_message};
use wave_core::inplace;
use wave_core::names::{self, action, reason};
use wave_core::plan::{self, GateReason, Write};
use wave_core::refs::{ConfigKey, References};
use wave_core::tracker::ObjectVersion;
use wave_core::undo::{self, Pin};
use wave_core::workload::{Workload, WorkloadRef};

use super::outcome::Outcome;
use super::write::{self, Conflicts, Patched, What};
use super::{halting, held_pods, history, holds, in_place, legacy};
use crate::api::PatchStyle;
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::metrics::KindLabel;
use crate::state::{Context, memory, pacing};

/// How soon a workload waiting for a restore to show whole looks again (the restored objects' watch
/// events wake it too).
const RESTORE_RECHECK: Duration = Duration::from_millis(200);

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
    if let Some(outcome) = super::reloader::finish_recreation(ctx, id).await? {
        // A Job deleted to be created again: nothing else is decided until it exists again.
        return Ok(outcome);
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
        legacy::Cleanup::NotWriting(outcome) => return Ok(outcome),
        legacy::Cleanup::Done => {
            // Its resourceVersion moved on: plan from what is stored now.
            let Some(fresh) = write::reread(ctx, id).await? else {
                return Ok(Outcome::Gone);
            };
            workload = fresh;
        }
    }
    if reloads {
        return super::reloader::reconcile(ctx, workload, triggered).await;
    }
    let mut conflicts = Conflicts::new(id);
    loop {
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
        // The versions before the content is read: a restore overwrites only these (`history::restore`).
        let read = if wave_core::history::restores_config(&workload) {
            let tracker = ctx.tracker();
            refs.keys()
                .into_iter()
                .filter_map(|key| Some((key.clone(), tracker.config(&key)?.clone())))
                .collect()
        } else {
            BTreeMap::new()
        };
        let fetched = ctx.content.resolve(&refs, &ctx.tracker).await?;
        memory::observe_data_changes(ctx);
        let policy = plan::Policy {
            now: k8s_openapi::jiff::Timestamp::now(),
            max_gate: ctx.max_gate,
            hashing: ctx.hashing.clone(),
            restart: ctx.restart,
            agent_image: ctx.agent_image.clone(),
        };
        let decision = memory::with_memory(ctx, id, |memory| {
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
                if let Some(outcome) = halting::record_failure(ctx, &workload).await? {
                    return Ok(outcome);
                }
                if let Some(record) = in_place::unfinished(ctx, &workload) {
                    return in_place::go_on(ctx, &workload, &record).await;
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
            Decision::DeleteHeldPods => return held_pods::delete(ctx, &workload).await,
            Decision::Undo { pin, action } => {
                // The view may predate wave's own last write (the watch has not shown it yet), which
                // looks exactly like an undo: believe one only from the workload as stored now.
                let Some(fresh) = write::reread(ctx, id).await? else {
                    return Ok(Outcome::Gone);
                };
                if fresh.resource_version != workload.resource_version {
                    conflicts.again()?;
                    workload = fresh;
                    continue;
                }
                match undo(ctx, &workload, &refs, &fetched, &read, &pin, action).await? {
                    Some(outcome) => return Ok(outcome),
                    None => match conflicts.reread(ctx).await? {
                        Some(fresh) => workload = fresh,
                        None => return Ok(Outcome::Gone),
                    },
                }
                continue;
            }
            Decision::Hold(hold) => return Ok(holds::held(ctx, &workload, hold)),
            Decision::Write {
                write,
                rollout,
                versions,
            } => (write, rollout, versions),
        };
        let marker = pacing::mark(ctx, &workload, &versions, &mut write);
        let paced = rollout && marker.is_some();
        if let Some(marker) = marker.as_ref().filter(|_| paced)
            && let Some(recheck) = pacing::admit(ctx, &workload, marker)
        {
            return Ok(Outcome::Queued(Some(recheck)));
        }
        let body = plan::patch_body(&workload, &write);
        let style = if write.is_strategic() {
            PatchStyle::Strategic
        } else {
            PatchStyle::Merge
        };
        // No write coming gives its slot back (`reconcile`); a conflict is re-planned at once and
        // keeps it.
        match write::patch(ctx, &workload, &body, What::ConfigHash(style)).await? {
            Patched::Written => {
                if rollout {
                    // Only config-triggered rollouts start an interval: a workload's first hash does not.
                    ctx.coalescer().record(id, Instant::now());
                }
                ctx.missing.forget(id);
                if let Some(hash) = &write.hash {
                    ctx.known_hashes.note(id, hash, Some(Rolled::of(&versions)));
                }
                after_write(ctx, &workload, &write, triggered);
                if rollout {
                    say_in_place_fallback(ctx, &workload, &write);
                }
                return Ok(Outcome::Written);
            }
            Patched::Not(outcome) => return Ok(outcome),
            Patched::Conflict => match conflicts.reread(ctx).await? {
                Some(fresh) => workload = fresh,
                None => return Ok(Outcome::Gone),
            },
        }
    }
}

/// Someone took the template back to an earlier config hash (`kubectl rollout undo`): restore that
/// config from its snapshot (`undo: restore-config`), or else pin the template there, so that wave does
/// not roll it forward until the config changes (`wave_core::undo`). `None` when the pin met a newer
/// workload (409): decide again.
async fn undo(
    ctx: &Context,
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
    read: &BTreeMap<ConfigKey, ObjectVersion>,
    pin: &Pin,
    action: UndoAction,
) -> Result<Option<Outcome>, ReconcileError> {
    let id = &workload.id;
    if let Err(outcome) = write::gate(ctx).await {
        return Ok(Some(outcome));
    }
    let refused = match action {
        UndoAction::Restore => match history::restore(ctx, workload, refs, fetched, read, pin).await? {
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
                return Ok(Some(Outcome::Restored));
            }
            history::Restored::Refused(why) => Some(why),
            history::Restored::Stopped => return Ok(Some(write::not_writing(ctx))),
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
    match write::patch(ctx, workload, &undo::pin_patch(workload, pin), What::Pin).await? {
        Patched::Written => remember_undone(ctx, id, pin),
        // The pin is guarded by the resourceVersion the undo was seen at: a newer workload is
        // decided again.
        Patched::Conflict => return Ok(None),
        Patched::Not(outcome) => return Ok(Some(outcome)),
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
    Ok(Some(Outcome::Pinned))
}

/// The template now stays on the hash it went back to: that is the hash it carries as far as undo
/// detection goes. Noted at once, not at the next reconcile (which would note it too), because a config
/// change may reach wave first: it would find the template still "back" on an earlier hash, take it for
/// a new undo, and pin (or restore) again instead of rolling the change out.
fn remember_undone(ctx: &Context, id: &WorkloadRef, pin: &Pin) {
    ctx.known_hashes.note(id, &pin.hash, None);
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

/// A config rollout of a workload opted in to restarting in place that rolled out instead says why,
/// once per change: its pods had no agent (this rollout adds it), or wave runs without --agent-image.
fn say_in_place_fallback(ctx: &Context, workload: &Workload, write: &Write) {
    let Some(hash) = write.hash.as_deref().filter(|_| write.in_place.is_none()) else {
        return;
    };
    if inplace::Strategy::of(workload, ctx.restart).0 != inplace::Strategy::InPlace {
        return;
    }
    let why = if write.add_agent.is_some() {
        format!(
            "its pods have no {} container yet; this rollout adds it, and the next change restarts them in place",
            inplace::AGENT_CONTAINER
        )
    } else if ctx.agent_image.is_none() {
        "wave runs without --agent-image (chart: inPlace.enabled=true)".to_string()
    } else {
        return;
    };
    in_place::say_fallback(ctx, workload, hash, &why);
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
