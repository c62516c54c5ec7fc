//! The shell of pacing and halting (`wave_core::pace`; `docs/behaviour.md`, "Pacing rollouts" and
//! "Halting a bad config").
//!
//! ```text
//! reconcile: a rollout ─► halts: census (tracker) ─► wave_core::decide
//!     Hold(Halted) ─► halted: Warning RolloutHalted once per halt; woken when the halt ends
//!     Roll         ─► admit: Pacer::decide
//!         Go      ─► the write carries a new rollout marker
//!         Queued  ─► Normal RolloutQueued once; nothing held (no worker, no token) until woken
//! reconcile: nothing to write, but its rollout failed ─► record_failure on its marker (the halt then
//!     outlives an undo or a fix by hand)
//! router: a workload appeared, changed or went ─► observe: the census takes in that one workload
//! router: a workload progressed ─► progressed: observe, then look ─► new halts: Warning on the config
//!                                                                   object
//!                                                                ─► wake the head of the line (free slots)
//!                                                                ─► a halt ended: wake the workloads it held
//! ```
//!
//! The census is kept one workload at a time (`Pacer::observe`): no event and no decision reads every
//! workload again, so what pacing costs per event does not grow with the number of workloads
//! (`wave_pacing_decision_seconds`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use wave_core::names::{action, reason};
use wave_core::pace::{self, Admission, Census, Halt, HaltChanges, Marker};
use wave_core::plan::Write;
use wave_core::workload::{Workload, WorkloadRef};

use super::Context;
use crate::events::EventType;

/// Adds the rollout marker to a write that sets a hash, while pacing is on: every rollout, paced or
/// not (a workload's first hash), can then be found again after a restart. Returns the marker.
pub fn mark(
    ctx: &Context,
    workload: &Workload,
    versions: &BTreeMap<String, String>,
    write: &mut Write,
) -> Option<Marker> {
    let hash = write.hash.as_deref()?;
    if !ctx.pacer().is_on() {
        return None;
    }
    let previous = Marker::read(workload);
    let marker = Marker::next(
        hash,
        versions.clone(),
        previous.as_ref(),
        Timestamp::now(),
        workload.generation,
    );
    write.rollout = Some(marker.render());
    Some(marker)
}

/// A halt holds `workload` back (`wave_core::decide`): one Warning per halt.
pub fn halted(ctx: &Context, workload: &Workload, halt: &Halt) {
    let first = {
        let mut pacer = ctx.pacer();
        let first = pacer.hold(&workload.id, halt);
        let (waiting, halted) = pacer.counts();
        ctx.metrics.rollouts_queued.set(waiting as i64);
        ctx.metrics.rollouts_halted.set(halted as i64);
        first
    };
    if first {
        let note = format!(
            "Halted: {}. This workload keeps its current config; a new change to the object resumes, or run `wave resume {}`.",
            halt.describe(),
            resume_target(&halt.version)
        );
        tracing::warn!(workload = %workload.id, halt = %halt.describe(), "rollout halted");
        ctx.events.publish(
            workload,
            EventType::Warning,
            reason::ROLLOUT_HALTED,
            action::PACE_ROLLOUT,
            note,
        );
    }
}

/// Whether the webhook may let an UPDATE roll now, under pacing.
pub enum Slot {
    /// Pacing is off.
    Off,
    /// A slot is free (no line ahead): the rollout carries this marker, so the census counts it.
    Free(Marker),
    /// Every slot is taken, or others wait: the controller rolls it in its turn.
    Full,
}

/// A slot for a rollout the webhook admits on UPDATE. It takes none in memory: an admitted request may
/// still be refused after the webhook, and a slot taken for it would never free. The census counts
/// the rollout once its marker is stored; two admissions at the same moment may both see the last
/// free slot (`docs/behaviour.md`, "Pacing rollouts").
pub fn slot_for_webhook(
    ctx: &Context,
    workload: &Workload,
    hash: &str,
    versions: &BTreeMap<String, String>,
) -> Slot {
    if !ctx.pacer().is_on() {
        return Slot::Off;
    }
    let timer = DecisionTimer::start(ctx, "webhook");
    let free = {
        let tracker = ctx.tracker();
        let mut pacer = ctx.pacer();
        let (census, _, _) = look(ctx, &tracker, &mut pacer);
        pacer.has_room(&workload.id, &census)
    };
    drop(timer);
    if !free {
        return Slot::Full;
    }
    let previous = Marker::read(workload);
    Slot::Free(Marker::next(
        hash,
        versions.clone(),
        previous.as_ref(),
        Timestamp::now(),
        workload.generation,
    ))
}

/// Decides a rollout that may roll (`wave_core::decide`) under pacing, with the marker [`mark`] made
/// for its write: `None` to write now, else it waits in line, and looks again after the time given at
/// the latest.
pub fn admit(ctx: &Context, workload: &Workload, marker: &Marker) -> Option<Duration> {
    let (priority, ignored) = pace::priority(workload);
    if let Some(why) = ignored {
        tracing::warn!(workload = %workload.id, "{why}");
    }
    let timer = DecisionTimer::start(ctx, "admission");
    let (admission, census, changes, wake) = {
        let tracker = ctx.tracker();
        let mut pacer = ctx.pacer();
        let (census, changes, wake) = look(ctx, &tracker, &mut pacer);
        let admission = pacer.decide(workload, priority, &census);
        if admission == Admission::Go {
            pacer.superseded(&marker.delivers());
        }
        update_metrics(ctx, &census, &pacer);
        (admission, census, changes, wake)
    };
    for id in wake.into_iter().filter(|w| w != &workload.id) {
        ctx.queue.add(id, None);
    }
    drop(timer);
    announce(ctx, changes);
    match admission {
        Admission::Go => None,
        Admission::Queued {
            first,
            position,
            waiting,
            rolling,
        } => {
            if first {
                let note = format!(
                    "Queued: {} of {waiting}, waiting for {rolling} rollouts (--max-concurrent-rollouts).",
                    ordinal(position)
                );
                tracing::info!(workload = %workload.id, position, waiting, rolling, "rollout queued");
                ctx.events.publish(
                    workload,
                    EventType::Normal,
                    reason::ROLLOUT_QUEUED,
                    action::PACE_ROLLOUT,
                    note,
                );
            }
            Some(recheck(&census))
        }
    }
}

/// The census takes in each of `changed` (a workload that appeared, changed in what it reads, or went
/// away; `Effects::observed`), one at a time: nothing else is read again.
pub fn observe(ctx: &Context, changed: &[WorkloadRef]) {
    if changed.is_empty() || !ctx.pacer().is_on() {
        return;
    }
    let timer = DecisionTimer::start(ctx, "event");
    let tracker = ctx.tracker();
    observe_in(ctx, &tracker, &mut ctx.pacer(), changed);
    drop(tracker);
    drop(timer);
}

fn observe_in(
    ctx: &Context,
    tracker: &wave_core::tracker::Tracker,
    pacer: &mut pace::Pacer,
    changed: &[WorkloadRef],
) {
    let now = Timestamp::now();
    for id in changed {
        pacer.observe(id, tracker.workload_view(id), ctx.rollout_deadline, now);
    }
}

/// Something a paced rollout may wait for changed (a workload's status, hash or annotations, or a
/// workload went away): the census takes in `changed` (as [`observe`]), and whoever may now roll is
/// woken. Returns the halts to [`announce`].
pub fn progressed(ctx: &Context, changed: &[WorkloadRef]) -> HaltChanges {
    // Asked on every status change of every workload: without pacing, take no tracker lock at all.
    if !ctx.pacer().is_on() {
        return HaltChanges::default();
    }
    let timer = DecisionTimer::start(ctx, "event");
    let (wake, changes) = {
        let tracker = ctx.tracker();
        let mut pacer = ctx.pacer();
        observe_in(ctx, &tracker, &mut pacer, changed);
        let (census, changes, mut wake) = look(ctx, &tracker, &mut pacer);
        update_metrics(ctx, &census, &pacer);
        wake.extend(pacer.due(&census));
        (wake, changes)
    };
    for id in wake {
        ctx.queue.add(id, None);
    }
    drop(timer);
    changes
}

/// A slot was taken for a write that was not made: give it back, and wake the next in line.
pub fn cancel(ctx: &Context, id: &WorkloadRef) {
    let had = ctx.pacer().cancel(id);
    if had {
        announce(ctx, progressed(ctx, &[]));
    }
}

/// The census as observed (`Pacer::look`: the tracker is read only for rollouts admitted or past
/// their deadline), what changed in the halts, and who is to look again because of that: on a new
/// halt every waiting workload (it may be held by it), when a halt ends every workload held.
fn look(
    ctx: &Context,
    tracker: &wave_core::tracker::Tracker,
    pacer: &mut pace::Pacer,
) -> (Census, HaltChanges, Vec<WorkloadRef>) {
    let (census, changes) = pacer.look(
        |id| tracker.workload_view(id),
        ctx.rollout_deadline,
        Timestamp::now(),
    );
    let mut wake = changes.to_record.clone();
    if !changes.new.is_empty() {
        wake.extend(pacer.waiting().cloned());
    }
    if changes.ended {
        wake.extend(pacer.halted().cloned());
    }
    (census, changes, wake)
}

/// Observes how long one step of pacing took, locks included, into `wave_pacing_decision_seconds`
/// when dropped: `at` is `event` (the watch router's share of a workload event), `admission` (a
/// reconcile's slot or place in line) or `webhook`.
struct DecisionTimer<'a> {
    ctx: &'a Context,
    at: &'static str,
    started: Instant,
}

impl<'a> DecisionTimer<'a> {
    fn start(ctx: &'a Context, at: &'static str) -> Self {
        Self {
            ctx,
            at,
            started: Instant::now(),
        }
    }
}

impl Drop for DecisionTimer<'_> {
    fn drop(&mut self) {
        self.ctx
            .metrics
            .pacing_decision
            .get_or_create(&crate::metrics::PacingLabel { at: self.at })
            .observe(self.started.elapsed().as_secs_f64());
    }
}

fn update_metrics(ctx: &Context, census: &Census, pacer: &pace::Pacer) {
    let (waiting, halted) = pacer.counts();
    ctx.metrics.rollouts_in_progress.set(census.rolling.len() as i64);
    ctx.metrics.rollouts_queued.set(waiting as i64);
    ctx.metrics.rollouts_halted.set(halted as i64);
}

/// One Warning on each newly halted config object.
pub fn announce(ctx: &Context, changes: HaltChanges) {
    for halt in changes.new {
        ctx.metrics.rollout_halts.inc();
        tracing::warn!(halt = %halt.describe(), "config version halted");
        let Some(key) = halt.version.key() else { continue };
        let note = format!(
            "Halted: {}. Workloads that have not rolled it keep their current config; a new change resumes, or run `wave resume {}`.",
            halt.describe(),
            resume_target(&halt.version)
        );
        ctx.events.publish_config(
            &key,
            EventType::Warning,
            reason::ROLLOUT_HALTED,
            action::PACE_ROLLOUT,
            note,
        );
    }
}

/// How long a queued workload waits at most before it looks again by itself: a freed slot wakes it,
/// but a wake that never comes (a slot freed by something no event tells) must not stop the line.
const QUEUED_RECHECK: Duration = Duration::from_secs(30);

/// When a queued workload looks again by itself: when a rolling StatefulSet or DaemonSet passes its
/// deadline (nothing else would wake it then), and at the latest after [`QUEUED_RECHECK`].
fn recheck(census: &Census) -> Duration {
    let Some(at) = census.next_deadline else {
        return QUEUED_RECHECK;
    };
    let wait = at.duration_since(Timestamp::now()).as_secs_f64().max(0.0);
    (Duration::from_secs_f64(wait) + Duration::from_secs(1)).min(QUEUED_RECHECK)
}

/// `configmap/NAME -n NS` for `wave resume`.
fn resume_target(version: &pace::Version) -> String {
    match version.key() {
        Some(key) => format!("{}/{} -n {}", key.kind.as_str(), key.name, key.namespace),
        None => version.object.clone(),
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_as_english_ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 112].map(ordinal).into();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "112th"
            ]
        );
    }
}
