//! Driving an in-place restart (`wave_core::inplace`): the thin shell that reads a workload's pods,
//! asks the pure step what to do, and does it.
//!
//! ```text
//! a reconcile finds the workload's hash current, with an in-place record still restarting (or failed,
//! and its strategy since set back to rollout)
//!   ─► paused? held (its resume wakes it) ─► its strategy set back to rollout? fall back
//!   ─► gate ─► GET the workload (selector, uid, rolling-update budget) ─► LIST its pods by selector,
//!      kept only if the workload controls them (directly, or through a ReplicaSet of its name)
//!   ─► its update strategy OnDelete, or a partition? fall back
//!   ─► inplace::step ─► Mark   PATCH each pod's `restart-request` (guarded by its uid) ─► look again in 1 s
//!                     ─► Wait  look again in 1 s
//!                     ─► Done  the record says done ─► Normal RestartedInPlace
//!                     ─► Failed   the record says failed, with the failure record that halts its
//!                                 versions (`pace::Failure`) ─► Warning InPlaceRestartFailed
//!                     ─► Fallback the hash on the template (an ordinary rollout), the record removed
//!                                 ─► Warning InPlaceFallback
//! ```
//!
//! There is no pod watch: only a workload restarting in place has its pods read, once a second, so wave's
//! memory does not grow with the cluster's pods.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use serde_json::json;
use wave_core::inplace::{self, PodView, Record, Request, Step};
use wave_core::names::{self, action, reason};
use wave_core::pace::{self, Failure};
use wave_core::plan::{self, Write};
use wave_core::workload::{Workload, WorkloadKind, WorkloadRef};

use super::outcome::Outcome;
use super::write::{self, Patched, What};
use crate::api::{self, PatchStyle, is_conflict, is_not_found};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::state::Context;

/// How soon a workload restarting in place looks at its pods again.
pub const POLL: Duration = Duration::from_secs(1);
/// How soon to look again after the workload changed under a write of its record: its watch event
/// brings the new version, and looking at once would read the old one again.
const AFTER_CONFLICT: Duration = Duration::from_millis(200);

/// The in-place record wave goes on with for an opted-in `workload` whose hash is current: one still
/// restarting, or one that failed when its strategy has since been set back to `rollout` (which then
/// rolls the config out, as asked).
pub fn unfinished(ctx: &Context, workload: &Workload) -> Option<Record> {
    let record = Record::read(workload).filter(|_| workload.is_opted_in())?;
    let switched = inplace::Strategy::of(workload, ctx.restart).0 != inplace::Strategy::InPlace;
    (record.is_restarting() || (record.failed.is_some() && switched)).then_some(record)
}

/// Goes on with the in-place restart of `workload` into `record`, unless someone since paused it (no
/// pod is asked until it is resumed, as no hash is written to a paused Deployment) or set its strategy
/// back to `rollout` (it then rolls out, as asked).
pub async fn go_on(ctx: &Context, workload: &Workload, record: &Record) -> Result<Outcome, ReconcileError> {
    if workload.progress.paused {
        return Ok(Outcome::HeldPaused);
    }
    if inplace::Strategy::of(workload, ctx.restart).0 != inplace::Strategy::InPlace {
        let why = "its restart strategy is now rollout";
        return fall_back(ctx, workload, &record.hash, why).await;
    }
    if ctx.agent_image.is_none() {
        let why = "wave now runs without --agent-image (chart: inPlace.enabled=true)";
        return fall_back(ctx, workload, &record.hash, why).await;
    }
    drive(ctx, workload, record).await
}

/// One step of the in-place restart of `workload` into `record` (see the module docs).
async fn drive(ctx: &Context, workload: &Workload, record: &Record) -> Result<Outcome, ReconcileError> {
    let id = &workload.id;
    let failed = |what: String| {
        let id = id.clone();
        move |source| ReconcileError::RestartInPlace {
            workload: id,
            what,
            source: Box::new(source),
        }
    };
    if let Err(outcome) = write::gate(ctx).await {
        return Ok(outcome);
    }
    let Some((object, owned)) = read_pods(&ctx.client, id)
        .await
        .map_err(failed("listing its pods".into()))?
    else {
        return Ok(Outcome::Gone);
    };
    let views: Vec<PodView> = owned.iter().map(PodView::of).collect();
    let replicas = object
        .data
        .pointer("/status/replicas")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_default();
    if views.is_empty() && replicas > 0 {
        // Its status counts pods it does not control as wave finds them (an Argo Rollout's, say).
        let why = format!("none of its {replicas} pods is one wave finds as its own");
        return fall_back(ctx, workload, &record.hash, &why).await;
    }
    if let Some(why) = inplace::ruled_out_by_update_strategy(id.kind, &object.data) {
        return fall_back(ctx, workload, &record.hash, &why).await;
    }
    let budget = inplace::max_unavailable(id.kind, &object.data, views.len());
    let (deadline, _) = pace::deadline(workload, ctx.rollout_deadline);
    let now = Timestamp::now();
    match inplace::step(record, &views, budget, deadline, now) {
        Step::Wait => Ok(Outcome::RestartingInPlace(POLL)),
        Step::Mark(names) => {
            for (pod, view) in owned.iter().zip(&views).filter(|(_, v)| names.contains(&v.name)) {
                let request = Request {
                    hash: record.hash.clone(),
                    from: view
                        .agent
                        .as_ref()
                        .and_then(|a| a.container_id.clone())
                        .unwrap_or_default(),
                    at: now,
                };
                // Guarded by the uid: a pod of the same name made since is not this one.
                let body = json!({"metadata": {
                    "uid": pod.metadata.uid,
                    "annotations": {(names::RESTART_REQUEST): request.render()},
                }});
                match api::patch_pod(&ctx.client, &id.namespace, &view.name, &body).await {
                    Ok(_) => {
                        tracing::info!(workload = %id, pod = %view.name, hash = %record.hash, "asked the pod to restart in place");
                    }
                    // Gone, or replaced (its uid differs: 409): the next look sees what is there now.
                    Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                    Err(e) => return Err(failed(format!("asking pod {} to restart", view.name))(e)),
                }
            }
            Ok(Outcome::RestartingInPlace(POLL))
        }
        Step::Done => {
            let done = Record {
                done: true,
                ..record.clone()
            };
            let body = json!({"metadata": {
                "resourceVersion": workload.resource_version,
                "annotations": {(names::IN_PLACE): done.render()},
            }});
            if let Some(outcome) = write_or(ctx, workload, &body, What::InPlaceRecord).await? {
                return Ok(outcome);
            }
            let note = format!(
                "Restarted {} pod(s) in place into config hash {}: same pods, same IPs, no new ReplicaSet or revision.",
                views.iter().filter(|v| !v.deleting).count(),
                record.hash
            );
            tracing::info!(workload = %id, hash = %record.hash, "in-place restart done");
            ctx.events.publish(
                workload,
                EventType::Normal,
                reason::RESTARTED_IN_PLACE,
                action::RESTART_IN_PLACE,
                note,
            );
            Ok(Outcome::Noop)
        }
        Step::Failed { pod, why } => {
            let halted = Record {
                failed: Some(why.clone()),
                ..record.clone()
            };
            let failure = Failure {
                hash: record.hash.clone(),
                why: why.clone(),
                delivered: record.delivers.clone(),
            };
            let body = json!({"metadata": {
                "resourceVersion": workload.resource_version,
                "annotations": {
                    (names::IN_PLACE): halted.render(),
                    (names::ROLLOUT_FAILED): failure.render(),
                },
            }});
            if let Some(outcome) = write_or(ctx, workload, &body, What::InPlaceRecord).await? {
                return Ok(outcome);
            }
            let note = format!(
                "In-place restart halted: {why}. The pods not restarted keep their config until the next config change restarts them, or until `{}: rollout` rolls it out.",
                names::RESTART
            );
            tracing::warn!(workload = %id, pod = %pod, hash = %record.hash, "in-place restart halted");
            ctx.events.publish(
                workload,
                EventType::Warning,
                reason::IN_PLACE_RESTART_FAILED,
                action::RESTART_IN_PLACE,
                note,
            );
            Ok(Outcome::Halted)
        }
        Step::Fallback(why) => fall_back(ctx, workload, &record.hash, &why).await,
    }
}

/// Writes `body` to `workload` as `what`; when it was not written, the outcome to return: what the
/// write gate says, or, after a conflict (its status changed, or a new change), look again shortly.
async fn write_or(
    ctx: &Context,
    workload: &Workload,
    body: &serde_json::Value,
    what: What,
) -> Result<Option<Outcome>, ReconcileError> {
    Ok(match write::patch(ctx, workload, body, what).await? {
        Patched::Written => None,
        Patched::Not(outcome) => Some(outcome),
        Patched::Conflict => Some(Outcome::Waiting(AFTER_CONFLICT)),
    })
}

/// Rolls `workload` out to `hash` instead (its template gets the hash, the in-place record goes), and
/// says why in one Warning: the record is gone after this write, so the Event comes once per change.
pub async fn fall_back(
    ctx: &Context,
    workload: &Workload,
    hash: &str,
    why: &str,
) -> Result<Outcome, ReconcileError> {
    let write = Write {
        hash: Some(hash.to_string()),
        ..Write::default()
    };
    let body = plan::patch_body(workload, &write);
    let what = What::ConfigHash(PatchStyle::Merge);
    if let Some(outcome) = write_or(ctx, workload, &body, what).await? {
        return Ok(outcome);
    }
    say_fallback(ctx, workload, hash, why);
    Ok(Outcome::Written)
}

/// The Warning that a workload opted in to restarting in place rolled out instead, and why.
pub fn say_fallback(ctx: &Context, workload: &Workload, hash: &str, why: &str) {
    let note = format!("Rolled out to config hash {hash} instead of restarting in place: {why}.");
    tracing::warn!(workload = %workload.id, hash, "{note}");
    ctx.events.publish(
        workload,
        EventType::Warning,
        reason::IN_PLACE_FALLBACK,
        action::RESTART_IN_PLACE,
        note,
    );
}

/// The workload `id` as stored, and the pods it controls (see [`controlled_by`]); `None` when it is
/// gone. `wave explain` reads them the same way.
pub async fn read_pods(
    client: &Client,
    id: &WorkloadRef,
) -> Result<Option<(DynamicObject, Vec<Pod>)>, kube::Error> {
    let Some(object) = api::get_object(client, id).await? else {
        return Ok(None);
    };
    let listed = Api::<Pod>::namespaced(client.clone(), &id.namespace)
        .list(&ListParams::default().labels(&api::match_labels(&object)))
        .await?;
    let uid = object.metadata.uid.as_deref().unwrap_or_default();
    let owned = listed
        .items
        .into_iter()
        .filter(|p| controlled_by(p, id, uid))
        .collect();
    Ok(Some((object, owned)))
}

/// Whether `pod` belongs to the workload: a StatefulSet or DaemonSet controls it directly (by uid); a
/// Deployment through the ReplicaSet named after it and the pod's template hash, as the Deployment
/// controller names them. A pod of another workload that the selector also matches is left alone.
fn controlled_by(pod: &Pod, id: &WorkloadRef, uid: &str) -> bool {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    else {
        return false;
    };
    if id.kind == WorkloadKind::DEPLOYMENT {
        let template_hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"));
        owner.kind == "ReplicaSet" && template_hash.is_some_and(|h| owner.name == format!("{}-{h}", id.name))
    } else {
        owner.uid == uid && owner.kind == id.kind.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(owner_kind: &str, owner_name: &str, owner_uid: &str, template_hash: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {
            "name": "p",
            "labels": {"pod-template-hash": template_hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner_name,
                "uid": owner_uid, "controller": true}],
        }}))
        .unwrap()
    }

    #[test]
    fn only_pods_the_workload_controls_are_restarted() {
        let web = WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "web");
        assert!(controlled_by(
            &pod("ReplicaSet", "web-abc", "u", "abc"),
            &web,
            "w"
        ));
        assert!(!controlled_by(
            &pod("ReplicaSet", "web-admin-abc", "u", "abc"),
            &web,
            "w"
        ));
        assert!(!controlled_by(
            &pod("ReplicaSet", "other-abc", "u", "abc"),
            &web,
            "w"
        ));
        let db = WorkloadRef::new(WorkloadKind::STATEFUL_SET, "ns", "db");
        assert!(controlled_by(&pod("StatefulSet", "db", "s1", ""), &db, "s1"));
        assert!(
            !controlled_by(&pod("StatefulSet", "db", "s0", ""), &db, "s1"),
            "a db made before"
        );
        assert!(!controlled_by(&pod("DaemonSet", "db", "s1", ""), &db, "s1"));
    }
}
