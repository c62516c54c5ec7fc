//! The shell of pacing and halting (`wave_core::pace`; `docs/behaviour.md`, "Pacing rollouts" and
//! "Halting a bad config").
//!
//! ```text
//! reconcile: a rollout ─► admit: census (tracker) + triggers (marker vs content) ─► Pacer::decide
//!     Go      ─► the write carries a new rollout marker
//!     Queued  ─► Normal RolloutQueued once; nothing held (no worker, no token) until woken
//!     Halted  ─► Warning RolloutHalted once per halt; woken when the halt ends
//! router: a workload progressed ─► progressed: census ─► new halts: Warning on the config object
//!                                                     ─► wake the head of the line (free slots)
//!                                                     ─► a halt ended: wake the workloads it held
//! ```

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use wave_core::hash::Fetched;
use wave_core::names::{action, reason};
use wave_core::pace::{self, Admission, Census, HaltChanges, Marker};
use wave_core::plan::Write;
use wave_core::refs::References;
use wave_core::workload::{Workload, WorkloadRef};

use super::context::Context;
use super::reconcile::Outcome;
use crate::events::EventType;

/// Adds the rollout marker to a write that sets a hash, while pacing is on: every rollout, paced or
/// not (a workload's first hash), can then be found again after a restart. Returns the marker.
pub fn mark(
    ctx: &Context,
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
    write: &mut Write,
) -> Option<Marker> {
    let hash = write.hash.as_deref()?;
    if !ctx.pacer().is_on() {
        return None;
    }
    let versions = pace::versions(refs, fetched, &ctx.hashing);
    let previous = Marker::read(workload);
    let marker = Marker::next(hash, versions, previous.as_ref(), Timestamp::now());
    write.rollout = Some(marker.render());
    Some(marker)
}

/// Decides a config-triggered rollout under pacing, with the marker [`mark`] made for its write:
/// `None` to write now, else why it waits.
pub fn admit(ctx: &Context, workload: &Workload, marker: &Marker) -> Option<Outcome> {
    let (priority, ignored) = pace::priority(workload);
    if let Some(why) = ignored {
        tracing::warn!(workload = %workload.id, "{why}");
    }
    let (hash, triggers) = (marker.hash.as_str(), marker.delivers());
    let (admission, census, changes, wake) = {
        let tracker = ctx.tracker();
        let mut pacer = ctx.pacer();
        let (census, changes, wake) = look(ctx, &tracker, &mut pacer);
        let admission = pacer.decide(&workload.id, hash, priority, &census, &triggers);
        update_metrics(ctx, &census, &pacer);
        (admission, census, changes, wake)
    };
    for id in wake.into_iter().filter(|w| w != &workload.id) {
        ctx.queue.add(id, None);
    }
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
            Some(Outcome::Queued(recheck(&census)))
        }
        Admission::Halted { halt, first } => {
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
            Some(Outcome::Halted)
        }
    }
}

/// Something a paced rollout may wait for changed (a workload's status, hash or annotations, or a
/// workload went away): wake whoever may now roll. Returns the halts to [`announce`].
pub fn progressed(ctx: &Context) -> HaltChanges {
    // Asked on every status change of every workload: without pacing, take no tracker lock at all.
    if !ctx.pacer().is_on() {
        return HaltChanges::default();
    }
    let (wake, changes) = {
        let tracker = ctx.tracker();
        let mut pacer = ctx.pacer();
        let (census, changes, mut wake) = look(ctx, &tracker, &mut pacer);
        update_metrics(ctx, &census, &pacer);
        wake.extend(pacer.due(&census));
        (wake, changes)
    };
    for id in wake {
        ctx.queue.add(id, None);
    }
    changes
}

/// A slot was taken for a write that was not made: give it back, and wake the next in line.
pub fn cancel(ctx: &Context, id: &WorkloadRef) {
    ctx.pacer().cancel(id);
    announce(ctx, progressed(ctx));
}

/// The census, what changed in the halts, and who is to look again because of that: on a new halt
/// every waiting workload (it may be held by it), when a halt ends every workload held.
fn look(
    ctx: &Context,
    tracker: &wave_core::tracker::Tracker,
    pacer: &mut pace::Pacer,
) -> (Census, HaltChanges, Vec<WorkloadRef>) {
    let (census, changes) = pacer.census(
        tracker.workloads(),
        |id| tracker.workload_view(id),
        ctx.rollout_deadline,
        Timestamp::now(),
    );
    let mut wake = Vec::new();
    if !changes.new.is_empty() {
        wake.extend(pacer.waiting().cloned());
    }
    if changes.ended {
        wake.extend(pacer.halted().cloned());
    }
    (census, changes, wake)
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

/// When a queued workload looks again by itself: when a rolling StatefulSet or DaemonSet passes its
/// deadline (nothing else would wake it then); otherwise a freed slot wakes it.
fn recheck(census: &Census) -> Option<Duration> {
    let at = census.next_deadline?;
    let wait = at.duration_since(Timestamp::now()).as_secs_f64().max(0.0);
    Some(Duration::from_secs_f64(wait) + Duration::from_secs(1))
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
