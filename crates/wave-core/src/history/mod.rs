//! Config history: a snapshot of exactly the data behind each config hash, kept as long as the revision
//! that runs it (`docs/history.md`).
//!
//! ```text
//! template on hash H, config hashes to H ─► Snapshot::of (the hash source's two sections)
//!   ─► ConfigMap wave-<kind>-<name>-<H[..12]>  data["configMaps.json"]  immutable, owned by the revision
//!      Secret    (same name)                   data["secrets.json"]     (only when Secrets are hashed)
//!   revision = the ReplicaSet (Deployment) or ControllerRevision (StatefulSet, DaemonSet) carrying H:
//!   the garbage collector deletes the snapshot when revisionHistoryLimit drops the last such revision
//! undo to H with `undo: restore-config` ─► restore_plan ─► one restore_patch per config object
//! `wave history` / `wave diff` ─► Snapshot::read ─► changes() / diff()
//! ```
//!
//! A snapshot stores the hash source's sections as they are (`{entry: {key: base64}}`), so its data
//! hashes back to the hash it is named after (`Snapshot::hash`), and nothing is lost or reinterpreted.
//!
//! History never crosses a namespace (`docs/security.md`): no snapshot is kept of a hash that reads
//! config from another namespace ([`foreign_config`]), a snapshot naming an entry of another namespace is
//! never read back ([`Snapshot::read`]), a restore writes only objects in the workload's own namespace
//! ([`restore_plan`]), and a stored object is trusted as a snapshot only if wave made it: wave's labels
//! and annotations, immutable, owned by one of the workload's revisions ([`untrusted`]), with data that
//! hashes to the hash it is named after ([`restorable`]). An object found under a snapshot's name that
//! is not exactly the snapshot wave would write is never adopted ([`same_snapshot`]).
//!
//! Which file holds what (the tests of `x.rs` are in `x_tests.rs`, their shared fixtures in `testing.rs`):
//! - `mod.rs`: the snapshot objects' keys, whether history is on for a workload, and whether an undo
//!   restores its config;
//! - `snapshot.rs`: the snapshot format ([`Snapshot`]: made, named, labelled, read back);
//! - `trust.rs`: which stored objects are trusted as snapshots ([`read_trusted`], [`untrusted`]);
//! - `revisions.rs`: a workload's revisions, which own its snapshots ([`Revision`]);
//! - `diff.rs`: what changed between two snapshots ([`changes`], [`diff`]);
//! - `restore.rs`: restoring a snapshot ([`restore_plan`], [`restore_patch`], [`RestoreInFlight`]).

use crate::names;
use crate::workload::Workload;

mod diff;
mod restore;
mod revisions;
mod snapshot;
#[cfg(test)]
mod testing;
mod trust;

pub use diff::{Change, ChangeKind, changes, diff};
pub use restore::{
    CurrentObject, Restore, RestoreInFlight, managed_by, restorable, restore_patch, restore_plan,
};
pub use revisions::{Revision, revision_kind, revision_with};
pub use snapshot::{Snapshot, SnapshotError, foreign_config};
pub use trust::{is_snapshot_of, read_trusted, same_snapshot, untrusted};

/// The ConfigMap snapshot's one key: the hash source's `configMaps` section as JSON.
pub const CONFIG_MAPS_KEY: &str = "configMaps.json";

/// The Secret snapshot's one key: the hash source's `secrets` section as JSON.
pub const SECRETS_KEY: &str = "secrets.json";

/// Whether history is on for `workload`: `wave.pusher.com/config-history: "true"`, or `--config-history`
/// unless the workload says `"false"`. CronJobs have no revisions to own a snapshot, so never.
pub fn enabled(workload: &Workload, all: bool) -> bool {
    if !workload.id.kind.info().rolls_out {
        return false;
    }
    match workload
        .annotations
        .get(names::CONFIG_HISTORY)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        _ => all,
    }
}

/// Whether an undo of `workload` restores its config (`wave.pusher.com/undo: restore-config`).
pub fn restores_config(workload: &Workload) -> bool {
    workload.annotations.get(names::UNDO).map(String::as_str) == Some(names::UNDO_RESTORE_CONFIG)
}
