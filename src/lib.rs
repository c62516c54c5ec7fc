//! wave: rolls Kubernetes workloads when the ConfigMaps and Secrets they use change.
//!
//! ```text
//!  ConfigMap/Secret metadata watches ─┐                          ┌─► reconcile workers (bounded)
//!  Deployment/StatefulSet/DaemonSet ──┼─► runtime::watch ─► core::tracker ─► queue ─┤   content cache (GET on
//!  watches                            ┘     (streams)        (pure)                 │   miss, by uid+rv)
//!                                                                                   │   core::plan (pure)
//!                                                                                   └─► token bucket → PATCH → Event
//!  lease (leader?) ─────────────────────────────────────────────────────────► only the leader writes
//!  admin server: /livez /readyz /metrics
//! ```
//!
//! - [`core`]: the sans-IO rules (discovery, hash, index, plan, queue, rate limit).
//! - [`runtime`]: the thin async shell (watches, reconcile, leases, admin server).
//! - [`cli`]: the command line; [`commands`]: `wave hash`, `explain` and `impact`.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod cli;
pub mod commands;
pub mod core;
pub mod names;
pub mod runtime;
