//! Which stored objects are trusted as snapshots: only those wave made (its labels and annotations,
//! immutable, owned by one of the workload's revisions), and an object found under a snapshot's name is
//! adopted only if it is exactly the snapshot wave would write (`docs/security.md`).

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::{Revision, Snapshot};
use crate::names;
use crate::workload::WorkloadRef;

/// `workload`'s snapshot of `hash` from its stored ConfigMap (and Secret), when both pass [`untrusted`]
/// against the workload's `revisions` and read as a snapshot; `Err` says why it is not used. The
/// controller restores only from such a snapshot, and `wave history` / `wave diff` show only such.
pub fn read_trusted(
    config_map: &ConfigMap,
    secret: Option<&Secret>,
    workload: &WorkloadRef,
    hash: &str,
    revisions: &[Revision],
) -> Result<Snapshot, String> {
    let untrusted = untrusted(
        &config_map.metadata,
        config_map.immutable,
        workload,
        hash,
        revisions,
    )
    .or_else(|| {
        let s = secret?;
        untrusted(&s.metadata, s.immutable, workload, hash, revisions)
    });
    if let Some(why) = untrusted {
        return Err(format!("the config snapshot is not one wave wrote: {why}"));
    }
    Snapshot::read(config_map, secret).map_err(|e| e.to_string())
}

/// Whether `stored`, an object found under a snapshot's name, is exactly `expected`, the snapshot wave
/// would write there (both as JSON): the same data, immutable, and wave's labels. Anything else was made
/// by someone else (or is a name clash) and is never adopted as a snapshot.
pub fn same_snapshot(stored: &Value, expected: &Value) -> bool {
    let same = |field: &str| stored.get(field) == expected.get(field);
    let labels = |v: &Value| v.pointer("/metadata/labels").cloned().unwrap_or(Value::Null);
    let wave_labels = match (labels(stored), labels(expected)) {
        (Value::Object(have), Value::Object(want)) => want.iter().all(|(k, v)| have.get(k) == Some(v)),
        _ => false,
    };
    same("data") && same("binaryData") && same("immutable") && same("type") && wave_labels
}

/// Why the stored snapshot object `meta` (immutable or not) cannot be trusted as `workload`'s snapshot
/// of `hash`, or `None` when it can: wave's labels and annotations, immutable, and owned by one of the
/// workload's `revisions` (wave adds a revision as owner only to a snapshot it wrote or checked with
/// [`same_snapshot`]). Whether its data hashes to `hash` is [`restorable`]'s check.
pub fn untrusted(
    meta: &ObjectMeta,
    immutable: Option<bool>,
    workload: &WorkloadRef,
    hash: &str,
    revisions: &[Revision],
) -> Option<String> {
    let object = meta.name.clone().unwrap_or_default();
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let expected = Snapshot::labels(workload);
    if expected.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return Some(format!(
            "{object} does not carry the labels of a snapshot wave wrote"
        ));
    }
    if !is_snapshot_of(meta, workload)
        || annotations.get(names::SNAPSHOT_HASH).map(String::as_str) != Some(hash)
    {
        return Some(format!(
            "{object} is not annotated as {workload}'s snapshot of hash {hash}"
        ));
    }
    if immutable != Some(true) {
        return Some(format!(
            "{object} is not immutable, so its data may have been changed since wave wrote it"
        ));
    }
    let owned = meta.owner_references.iter().flatten().any(|o| {
        revisions
            .iter()
            .any(|r| r.owner.uid == o.uid && r.owner.kind == o.kind)
    });
    if !owned {
        return Some(format!("{object} is owned by none of {workload}'s revisions"));
    }
    None
}

/// Whether `meta` belongs to `workload`'s history.
pub fn is_snapshot_of(meta: &ObjectMeta, workload: &WorkloadRef) -> bool {
    let want = format!("{}/{}", workload.kind.info().short(), workload.name);
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(names::SNAPSHOT_OF))
        .is_some_and(|v| *v == want)
}

#[cfg(test)]
#[path = "trust_tests.rs"]
mod tests;
