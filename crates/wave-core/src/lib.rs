//! wave's sans-IO core: every rule that decides what wave writes, as pure functions and types.
//!
//! ```text
//! kind::WorkloadKind (facts per kind) ─► workload::Workload (the one view of a workload;
//!                                        its pod template kept compact: template::PodTemplate)
//! refs::discover ─► References ─┬─► hash::missing ─┐
//!                               └─► hash::config_hash ─► plan::plan ─► Plan ─► plan::patch_body
//!                                                      └─► admission::decide ─► Mutation ─► admission::patch_ops
//! tracker::Tracker (watch events → view + index::RefIndex → workloads to wake)
//! queue::QueueState (dedupe, one reconcile per key at a time)   ratelimit::TokenBucket (global writes)
//! coalesce::Coalescer (one rollout per workload per interval)   flap::FlapDetector (flapping config)
//! rollout::state (a workload's own status) ─► pace::census ─► pace::Pacer (at most N rolling; halts)
//! undo::detect (an undo to an earlier hash) ─► undo::Pin, which plan::plan respects
//! decide::decide (a rollout: undo? halted? flapping? coalesced? else it may roll) ─► pace::Pacer (a slot)
//! legacy (what Wave ≤ v0.6 left: its finalizer, owner references on config) ─► the patches removing it
//! manifest (wave hash: rendered manifests)   impact (wave impact: would a change roll this workload)
//! webhook (the webhook's paths and the secret token in them: only the apiserver knows it)
//! ```
//!
//! Nothing here talks to the network, reads the clock or spawns a task: this crate depends on no async
//! runtime and no client, and `clippy.toml` beside its manifest forbids the clock and the file system.
//! The controller, the CLI and the webhook all call these same functions, so each rule has one
//! implementation. What each rule does for users is described in `docs/behaviour.md`; comments cite its
//! headings, and its differences from Wave by their names (`init-containers`, `namespace-clash`, …).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admission;
pub mod coalesce;
pub mod decide;
pub mod duration;
pub mod flap;
pub mod hash;
pub mod history;
pub mod impact;
pub mod index;
pub mod inplace;
pub mod kind;
pub mod legacy;
pub mod manifest;
pub mod names;
pub mod pace;
pub mod plan;
pub mod queue;
pub mod ratelimit;
pub mod refs;
pub mod reloader;
pub mod rollout;
pub mod selector;
pub mod template;
pub mod tracker;
pub mod undo;
pub mod webhook;
pub mod workload;
