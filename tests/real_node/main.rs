//! Tests on a real node: a kubelet and containerd that really run the pods (`hack/testenv up
//! --real-node`), with wave installed by its chart from its own image.
//!
//! They share one real node (one per machine) and take turns on it (`harness::turn`); kwok tests in
//! the `e2e` binary stay parallel. Where the machine cannot run a real node they print
//! "skipped: no real node: <why>"; only "not root" and "not Linux" are accepted reasons.

mod bad_config;
mod chart;
mod demo;
mod harness;
mod in_place;
mod reload;
mod undo;
mod webhook;
