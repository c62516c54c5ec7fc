//! Cleaning up after the webhook's scheduling gate: the pods it held are deleted once the gate is
//! released from the template, for kinds whose controller does not replace them by itself.
//!
//! ```text
//! Plan::DeleteHeldPods ─► kind replaces held pods (Deployment)? ─► only remove the gated-at mark
//!                       └─► otherwise: read the owner (uid, selector, observedGeneration)
//!                             controller still catching up ─► Waiting (look again shortly)
//!                             else delete its pods that still carry the gate ─► remove the mark ─► Event
//! ```
//!
//! `wave_core::plan` explains why: pod gates can only be removed from each pod, a StatefulSet waits for
//! its gated pod forever, and a DaemonSet with `OnDelete` never replaces it. The held pods never ran, so
//! their controller recreating them from the released template is not a restart.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Api, Client};
use wave_core::names::{self, action, reason};
use wave_core::workload::{Workload, WorkloadRef};

use super::outcome::Outcome;
use super::write;
use crate::api::{self, is_conflict, is_not_found, status_code};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::state::Context;

/// How soon to look again while a StatefulSet or DaemonSet controller has not yet seen the release.
const CONTROLLER_CATCH_UP: Duration = Duration::from_secs(1);

/// The part of a workload that cleaning up held pods needs.
#[derive(Debug, PartialEq, Eq)]
struct PodOwner {
    uid: String,
    /// `metadata.generation` is ahead of `status.observedGeneration`: the controller has not yet seen
    /// the released template, and may still create gated pods.
    catching_up: bool,
    /// `spec.selector.matchLabels` as a label selector (the owner check in [`is_held_pod`] decides).
    selector: String,
}

impl PodOwner {
    fn from_object(object: &DynamicObject) -> Self {
        let observed = object
            .data
            .pointer("/status/observedGeneration")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or_default();
        let selector = api::match_labels(object);
        PodOwner {
            uid: object.metadata.uid.clone().unwrap_or_default(),
            catching_up: observed < object.metadata.generation.unwrap_or_default(),
            selector,
        }
    }
}

/// Deletes the pods that wave's released scheduling gate held, then removes the `gated-at` mark.
pub async fn delete(ctx: &Context, workload: &Workload) -> Result<Outcome, ReconcileError> {
    let id = &workload.id;
    let failed = |source| ReconcileError::DeleteHeldPods {
        workload: id.clone(),
        source: Box::new(source),
    };
    if let Err(outcome) = write::gate(ctx).await {
        return Ok(outcome);
    }
    // A kind whose controller replaces the held pods (a Deployment's new ReplicaSet) only has its mark
    // removed (say, one left after the gate was removed by hand).
    let (uid, deleted) = if id.kind.info().replaces_held_pods {
        (workload.uid.clone(), 0)
    } else {
        let Some(object) = api::get_object(&ctx.client, id).await.map_err(failed)? else {
            return Ok(Outcome::Gone);
        };
        let owner = PodOwner::from_object(&object);
        if owner.catching_up {
            return Ok(Outcome::Waiting(CONTROLLER_CATCH_UP));
        }
        let deleted = delete_gated_pods(&ctx.client, id, &owner).await.map_err(failed)?;
        (owner.uid, deleted)
    };
    // Guarded by the uid, not the resourceVersion: the controller's status updates after the deletes
    // would make that fail, and removing the mark from the same object is right whatever changed.
    let body = serde_json::json!({ "metadata": {
        "uid": uid,
        "annotations": { (names::GATED_AT): null },
    }});
    match api::patch_workload(&ctx.client, id, &body).await {
        Ok(()) => {}
        // Deleted, or deleted and re-created (a different uid is refused as 422 "field is immutable"):
        // the new object is planned on its own.
        Err(e) if is_not_found(&e) || status_code(&e) == Some(422) => return Ok(Outcome::Gone),
        Err(source) => {
            return Err(ReconcileError::PatchWorkload {
                workload: id.clone(),
                source: Box::new(source),
            });
        }
    }
    if deleted > 0 {
        let note = format!(
            "Deleted {deleted} pod(s) held by the released scheduling gate {}; the {} controller recreates them from the current template.",
            names::SCHEDULING_GATE,
            id.kind
        );
        ctx.events.publish(
            workload,
            EventType::Normal,
            reason::HELD_PODS_DELETED,
            action::GATE_SCHEDULING,
            note,
        );
    }
    Ok(Outcome::HeldPodsDeleted)
}

/// Deletes the pods of `owner` that still carry wave's gate; returns how many.
async fn delete_gated_pods(
    client: &Client,
    id: &WorkloadRef,
    owner: &PodOwner,
) -> Result<usize, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
    let listed = pods.list(&ListParams::default().labels(&owner.selector)).await?;
    let mut deleted = 0;
    for pod in listed.items.iter().filter(|p| is_held_pod(p, &owner.uid)) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match pods.delete(name, &params).await {
            Ok(_) => {
                tracing::info!(workload = %id, pod = name, "deleted a pod the scheduling gate held");
                deleted += 1;
            }
            // Already gone, or replaced by a pod of the same name.
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Whether `pod` is controlled by the workload `owner_uid`, still carries wave's gate, and is not
/// already being deleted.
fn is_held_pod(pod: &Pod, owner_uid: &str) -> bool {
    let controlled = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid);
    let gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.name == names::SCHEDULING_GATE));
    controlled && gated && pod.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(owner_uid: &str, controller: bool, gates: &[&str], deleting: bool) -> Pod {
        let gates: Vec<_> = gates.iter().map(|g| json!({"name": g})).collect();
        let mut meta = json!({"name": "p", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": owner_uid,
            "controller": controller}]});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta,
            "spec": {"containers": [], "schedulingGates": gates}}))
        .unwrap()
    }

    #[test]
    fn only_gated_pods_controlled_by_the_owner_and_not_terminating_are_held() {
        let gate = names::SCHEDULING_GATE;
        assert!(is_held_pod(&pod("u1", true, &[gate], false), "u1"));
        assert!(
            !is_held_pod(&pod("u2", true, &[gate], false), "u1"),
            "another owner"
        );
        assert!(
            !is_held_pod(&pod("u1", false, &[gate], false), "u1"),
            "owned, not controlled"
        );
        assert!(
            !is_held_pod(&pod("u1", true, &["other/gate"], false), "u1"),
            "someone else's gate"
        );
        assert!(
            !is_held_pod(&pod("u1", true, &[gate], true), "u1"),
            "already terminating"
        );
    }

    #[test]
    fn the_owner_is_read_from_its_selector_and_generations() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "uid": "u1", "generation": 3},
            "spec": {"selector": {"matchLabels": {"app": "db", "tier": "data"}}},
            "status": {"observedGeneration": 2}
        }))
        .unwrap();
        assert_eq!(
            PodOwner::from_object(&object),
            PodOwner {
                uid: "u1".into(),
                catching_up: true,
                selector: "app=db,tier=data".into(),
            }
        );
        let mut seen = object;
        seen.data["status"]["observedGeneration"] = json!(3);
        assert!(!PodOwner::from_object(&seen).catching_up);
    }
}
