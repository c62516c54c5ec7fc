//! The `wave` binary's library: the command line and the client commands.
//!
//! ```text
//! main.rs ─► cli (one clap tree, WAVE_* variables) ─┬─► run      ─► wave_runtime::run(Config)
//!                                                   ├─► hash     ─► wave_core::manifest (offline)
//!                                                   └─► explain, impact, status, ... ─► wave_runtime::api + wave_core
//! ```
//!
//! `wave run`'s flags live in `cli`; each client command's flags live in its module under `commands`.
//!
//! The layers are crates: `wave-core` (pure rules) ◄── `wave-runtime` (the async shell) ◄── `wave` (this
//! crate). See `docs/development.md`.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod cli;
pub mod commands;
