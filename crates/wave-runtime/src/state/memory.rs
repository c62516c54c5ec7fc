//! What wave remembers between decisions, and the one way a decision reads it.
//!
//! ```text
//! router: a config object's data changed, or it came or went ─► observe_change ─► flap breaker
//! content cache: data changes seen on a read ─► observe_data_changes ─► flap breaker
//! controller / Reloader path / webhook UPDATE ─► with_memory ─► wave_core::decide::Memory
//!     (quiet flapping episodes settled first: one ConfigSettled each)
//! ```

use std::time::Instant;

use wave_core::decide::Memory;
use wave_core::flap::Observed;
use wave_core::names::{action, reason};
use wave_core::refs::ConfigKey;
use wave_core::workload::WorkloadRef;

use super::Context;
use crate::events::EventType;

/// A referenced config object's data changed, or it was created or deleted: the flap breaker counts it.
pub fn observe_change(ctx: &Context, key: &ConfigKey, at: Instant) {
    if ctx.flaps().observe(key, at) == Observed::Started {
        flap_started(ctx, key);
    }
}

/// Hands the data changes the content cache read to the flap breaker (after every read of content).
pub fn observe_data_changes(ctx: &Context) {
    for (key, at) in ctx.content.take_data_changes() {
        observe_change(ctx, &key, at);
    }
}

/// A config object started flapping: one Warning on the object, and the metrics.
fn flap_started(ctx: &Context, key: &ConfigKey) {
    let count = ctx.flaps().flapping_count();
    ctx.metrics.config_flapping.set(count as i64);
    ctx.metrics.flap_episodes.inc();
    let policy = ctx.flaps().policy();
    let note = format!(
        "{key} changed more than {} times within {:?}: it is flapping, and its changes roll nothing until it has been unchanged for {:?}; then its final value rolls once.",
        policy.threshold, policy.window, policy.quiet
    );
    tracing::warn!(config = %key, "{note}");
    ctx.events.publish_config(
        key,
        EventType::Warning,
        reason::CONFIG_FLAPPING,
        action::HOLD_ROLLOUT,
        note,
    );
}

/// Runs `f` with what wave remembers for `id` (`wave_core::decide::Memory`): the flap breaker and the
/// coalescer are locked meanwhile (`f` is pure and short).
pub fn with_memory<R>(ctx: &Context, id: &WorkloadRef, f: impl FnOnce(&Memory<'_>) -> R) -> R {
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
