//! The async shell around the core: watches, the reconcile that applies a plan, the lease, the
//! admin server and the admission webhook. See `app` for how they are wired.

pub mod admin;
pub mod app;
pub mod content;
pub mod context;
pub mod error;
pub mod events;
pub mod lease;
pub mod metrics;
pub mod reconcile;
pub mod telemetry;
pub mod watch;
pub mod webhook;
pub mod workqueue;

pub use app::run;
