//! wave's runtime: the async shell around `wave_core`, used by the `wave` binary.
//!
//! ```text
//!  ConfigMap/Secret metadata watches ─┐                          ┌─► reconcile workers (bounded)
//!  workload watches (per kind) ───────┼─► controller::watch ─► core tracker ─► queue ─┤   content cache
//!                                     ┘     (streams)            (pure)               │   core plan (pure)
//!                                                                                     └─► token bucket → PATCH → Event
//!  lease (leader?) ───────────────────────────────────────────────────────────► only the leader writes
//!  admin server: /livez /readyz /metrics        webhook: certificates ─► TLS server ─► admission
//! ```
//!
//! - [`config`]: what `wave run` is told, as values (the binary's clap tree converts into it).
//! - [`api`]: every read and write of objects, shared by the controller, the webhook and the CLI.
//! - [`controller`]: `wave run`'s wiring, watches, reconciles, queue and bookkeeping.
//! - [`webhook`]: the admission webhook: certificates, serving, admission.
//! - [`apimetrics`]: every request to the apiserver counted and timed (a layer on the client).
//! - [`alerts`]: posts about reloads (Reloader's alerts and `--webhook-url`), never in a write's way.
//! - [`owner`]: what wave creates for itself is owned by its own Deployment, so an uninstall deletes it.
//! - [`lease`], [`admin`], [`metrics`], [`events`], [`telemetry`], [`error`]: the rest of the shell.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admin;
pub mod alerts;
pub mod api;
pub mod apimetrics;
pub mod config;
pub mod controller;
pub mod error;
pub mod events;
pub mod lease;
pub mod metrics;
pub mod owner;
pub mod state;
pub mod telemetry;
pub mod webhook;

pub use controller::run;
