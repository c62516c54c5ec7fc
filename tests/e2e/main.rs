//! End-to-end tests of `wave run` against the real control plane of `hack/testenv`.
//!
//! One control plane for the whole binary (started on first use, torn down when the binary exits);
//! each test gets its own namespace and its own `wave` process scoped to it, so tests run in parallel.

mod commands;
mod faults;
mod harness;
mod hash_golden;
mod history;
mod image;
mod lifecycle;
mod migration;
mod operations;
mod pacing;
mod reloader;
mod reloader_alerts;
mod reloader_csi;
mod reloader_jobs;
mod reloader_parity;
mod rollouts;
mod safety;
mod ship;
mod tenancy;
mod undo;
mod webhook;
