//! The sans-IO core: every rule that decides what wave writes, as pure functions and types.
//!
//! ```text
//! refs::discover ─► References ─┬─► hash::missing ─┐
//!                               └─► hash::config_hash ─► plan::plan ─► Plan ─► plan::patch_body
//!                                                      └─► admission::decide ─► Mutation ─► admission::patch_ops
//! tracker::Tracker (watch events → view + index::RefIndex → workloads to wake)
//! queue::QueueState (dedupe, one reconcile per key at a time)   ratelimit::TokenBucket (global writes)
//! ```
//!
//! Nothing here talks to the network or reads the clock; the controller, the CLI and the webhook all
//! call these same functions, so each rule has one implementation.

pub mod admission;
pub mod hash;
pub mod impact;
pub mod index;
pub mod manifest;
pub mod plan;
pub mod queue;
pub mod ratelimit;
pub mod refs;
pub mod tracker;
pub mod workload;
