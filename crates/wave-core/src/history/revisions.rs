//! A workload's revisions (its ReplicaSets, or the ControllerRevisions of a StatefulSet or DaemonSet):
//! the one carrying a hash owns that hash's snapshot, so the garbage collector deletes the snapshot with
//! the last revision that runs it.

use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::names;
use crate::workload::WorkloadKind;

/// One revision of a workload: a ReplicaSet or a ControllerRevision it controls.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    /// The revision number (`deployment.kubernetes.io/revision`, or `.revision`).
    pub number: i64,
    /// The config hash on its pod template, if any.
    pub hash: Option<String>,
    /// The revision object (an owner reference to it, for the snapshot).
    pub owner: OwnerReference,
    /// When it was created.
    pub created: Option<k8s_openapi::jiff::Timestamp>,
}

fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn owner_of(meta: &ObjectMeta, kind: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

impl Revision {
    /// The revision a ReplicaSet is, if the Deployment with `uid` controls it.
    pub fn of_replica_set(rs: &ReplicaSet, uid: &str) -> Option<Self> {
        let meta = &rs.metadata;
        if !controlled_by(meta, uid) {
            return None;
        }
        let number = meta
            .annotations
            .as_ref()?
            .get(names::DEPLOYMENT_REVISION)?
            .parse()
            .ok()?;
        let hash = rs
            .spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(names::CONFIG_HASH))
            .cloned();
        Some(Self {
            number,
            hash,
            owner: owner_of(meta, "ReplicaSet"),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
        })
    }

    /// The revision a ControllerRevision is, if the StatefulSet or DaemonSet with `uid` controls it.
    pub fn of_controller_revision(cr: &ControllerRevision, uid: &str) -> Option<Self> {
        let meta = &cr.metadata;
        if !controlled_by(meta, uid) {
            return None;
        }
        // NOTE: the data is the patch the controller applies to roll back (`{"spec":{"template":…}}`),
        // see https://github.com/kubernetes/kubernetes/blob/v1.32.0/pkg/controller/statefulset/stateful_set_utils.go
        let hash = cr
            .data
            .as_ref()
            .and_then(|d| d.0.pointer("/spec/template/metadata/annotations"))
            .and_then(|a| a.get(names::CONFIG_HASH))
            .and_then(Value::as_str)
            .map(str::to_string);
        Some(Self {
            number: cr.revision,
            hash,
            owner: owner_of(meta, "ControllerRevision"),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

/// The revision that carries `hash`: the newest with it on its template.
pub fn revision_with<'a>(revisions: &'a [Revision], hash: &str) -> Option<&'a Revision> {
    revisions
        .iter()
        .filter(|r| r.hash.as_deref() == Some(hash))
        .max_by_key(|r| r.number)
}

/// The kind whose objects are a workload's revisions.
pub fn revision_kind(kind: WorkloadKind) -> &'static str {
    if kind == WorkloadKind::DEPLOYMENT {
        "ReplicaSet"
    } else {
        "ControllerRevision"
    }
}

#[cfg(test)]
#[path = "revisions_tests.rs"]
mod tests;
