//! The reconcile of one workload: a thin shell around the pure core.
//!
//! ```text
//! leader? ─► view from the tracker ─► refs (core) ─► content cache ─► plan (core)
//!   Noop    ─► done
//!   Blocked ─► one Warning Event per distinct missing set; woken again when the config appears
//!   Write   ─► token (global bucket; none ⇒ requeue for when one is due) ─► PATCH (merge patch,
//!              field manager `wave`, guarded by resourceVersion) ─► Events after success
//!              409 ⇒ re-read the workload and re-plan at once
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};

use super::content;
use super::context::Context;
use super::error::{self, ReconcileError};
use super::events::EventType;
use super::metrics::{KindLabel, KindResult};
use crate::core::hash::missing_message;
use crate::core::plan::{self, GateReason, Plan, Write};
use crate::core::workload::{Workload, WorkloadKind, WorkloadRef};
use crate::names::{self, action, reason};

/// How many times a write is re-planned after 409 Conflict before the reconcile fails.
const CONFLICT_ATTEMPTS: usize = 5;

/// What a reconcile did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The workload no longer exists.
    Gone,
    /// Another replica leads; nothing was done.
    NotLeader,
    /// Nothing to write.
    Noop,
    /// Required config is missing; nothing was written. A gated workload is checked again when its
    /// gate times out.
    Blocked {
        /// When to check again.
        recheck_after: Option<Duration>,
    },
    /// The write was made.
    Written,
    /// No write token: try again after this long.
    RateLimited(Duration),
    /// The pods held by a released gate were deleted, and the mark removed.
    HeldPodsDeleted,
    /// The workload's controller has not yet seen wave's last write: look again after this long.
    Waiting(Duration),
}

impl Outcome {
    /// Metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Gone => "gone",
            Outcome::NotLeader => "not_leader",
            Outcome::Noop => "noop",
            Outcome::Blocked { .. } => "blocked",
            Outcome::Written => "written",
            Outcome::RateLimited(_) => "rate_limited",
            Outcome::HeldPodsDeleted => "held_pods_deleted",
            Outcome::Waiting(_) => "waiting",
        }
    }
}

/// Reconciles one workload. `triggered` is when the config change behind this reconcile was seen.
pub async fn reconcile(
    ctx: &Context,
    id: &WorkloadRef,
    triggered: Option<Instant>,
) -> Result<Outcome, ReconcileError> {
    if !ctx.is_leader() {
        return Ok(Outcome::NotLeader);
    }
    let Some(mut workload) = content::read(&ctx.tracker).workload(id) else {
        forget_missing(ctx, id);
        return Ok(Outcome::Gone);
    };
    for attempt in 1..=CONFLICT_ATTEMPTS {
        let mut refs = workload.references();
        let unwatched = content::read(&ctx.tracker).restrict_to_watched(&mut refs);
        for key in &unwatched {
            tracing::warn!(workload = %id, config = %key, "reference outside the watched namespaces is treated as absent and optional");
        }
        for skipped in &refs.skipped {
            tracing::warn!(workload = %id, "{skipped}; skipped");
        }
        let fetched = ctx.content.resolve(&refs, &ctx.tracker).await?;
        let policy = plan::GatePolicy {
            now: k8s_openapi::jiff::Timestamp::now(),
            max_gate: ctx.max_gate,
        };
        let write = match plan::plan(&workload, &refs, &fetched, &policy) {
            Plan::Noop => {
                forget_missing(ctx, id);
                return Ok(Outcome::Noop);
            }
            Plan::Blocked {
                missing,
                recheck_after,
            } => {
                report_missing(ctx, &workload, missing_message(&missing)).await;
                return Ok(Outcome::Blocked { recheck_after });
            }
            Plan::Write(write) => write,
            Plan::DeleteHeldPods => return delete_held_pods(ctx, &workload).await,
        };
        let now = Instant::now();
        if let Err(wait) = ctx
            .limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_take(now)
        {
            return Ok(Outcome::RateLimited(wait));
        }
        let body = plan::patch_body(&workload.resource_version, &write);
        match patch(&ctx.client, id, &body).await {
            Ok(()) => {
                forget_missing(ctx, id);
                after_write(ctx, &workload, &write, triggered).await;
                return Ok(Outcome::Written);
            }
            Err(e) if error::is_not_found(&e) => return Ok(Outcome::Gone),
            Err(e) if error::is_conflict(&e) && attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(workload = %id, attempt, "conflict; re-reading and re-planning");
                match get(&ctx.client, id).await {
                    Ok(Some(fresh)) => workload = Arc::new(fresh),
                    Ok(None) => return Ok(Outcome::Gone),
                    Err(source) => {
                        return Err(ReconcileError::GetWorkload {
                            workload: id.clone(),
                            source: Box::new(source),
                        });
                    }
                }
            }
            Err(e) if error::is_conflict(&e) => break,
            Err(source) => {
                let note = format!("Writing the config hash failed: {}", error::describe(&source));
                publish(
                    ctx,
                    &workload,
                    EventType::Warning,
                    reason::WRITE_FAILED,
                    action::UPDATE_CONFIG_HASH,
                    note,
                )
                .await;
                return Err(ReconcileError::PatchWorkload {
                    workload: id.clone(),
                    source: Box::new(source),
                });
            }
        }
    }
    Err(ReconcileError::Conflict {
        workload: id.clone(),
        attempts: CONFLICT_ATTEMPTS,
    })
}

/// Events and metrics after a successful write (never before: fix W6).
async fn after_write(ctx: &Context, workload: &Workload, write: &Write, triggered: Option<Instant>) {
    let kind = workload.id.kind.as_str();
    if let Some(hash) = &write.hash {
        ctx.metrics.rollouts.get_or_create(&KindLabel { kind }).inc();
        if let Some(t) = triggered {
            ctx.metrics
                .change_to_patch_seconds
                .observe(t.elapsed().as_secs_f64());
        }
        tracing::info!(workload = %workload.id, hash = %hash, "config hash updated");
        // Wave's exact message.
        let note = format!("Configuration hash updated to {hash}");
        publish(
            ctx,
            workload,
            EventType::Normal,
            reason::CONFIG_CHANGED,
            action::UPDATE_CONFIG_HASH,
            note,
        )
        .await;
    }
    if let Some(release) = &write.release_gate {
        let gate = names::SCHEDULING_GATE;
        let (type_, reason, note) = match release.reason {
            GateReason::ConfigReady => (
                EventType::Normal,
                reason::SCHEDULING_ENABLED,
                format!("Released the scheduling gate {gate}: all required config exists."),
            ),
            GateReason::OptedOut => (
                EventType::Normal,
                reason::SCHEDULING_ENABLED,
                format!("Released the scheduling gate {gate}: the workload no longer opts in."),
            ),
            GateReason::TimedOut => (
                EventType::Warning,
                reason::GATE_TIMED_OUT,
                format!(
                    "Released the scheduling gate {gate} after {:?}: required config is still missing.",
                    ctx.max_gate
                ),
            ),
        };
        tracing::info!(workload = %workload.id, reason, "scheduling gate released");
        publish(ctx, workload, type_, reason, action::GATE_SCHEDULING, note).await;
    }
    if write.restore_scheduler.is_some() {
        tracing::info!(workload = %workload.id, "scheduling restored");
        let note = "Enabled scheduling since all children became available.".to_string();
        publish(
            ctx,
            workload,
            EventType::Normal,
            reason::SCHEDULING_ENABLED,
            action::UPDATE_CONFIG_HASH,
            note,
        )
        .await;
    }
}

/// How soon to look again while a StatefulSet or DaemonSet controller has not yet seen the release.
const CONTROLLER_CATCH_UP: Duration = Duration::from_secs(1);

/// The part of a StatefulSet or DaemonSet that cleaning up held pods needs.
struct PodOwner {
    uid: String,
    /// `metadata.generation` is ahead of `status.observedGeneration`: the controller has not yet seen
    /// the released template, and may still create gated pods.
    catching_up: bool,
    /// `spec.selector.matchLabels` as a label selector (the owner check below is what decides).
    selector: String,
}

/// Deletes the pods that wave's released scheduling gate held, then removes the `gated-at` mark
/// (`core::plan` explains why). Those pods never ran, so their controller recreating them from the
/// released template is not a restart.
async fn delete_held_pods(ctx: &Context, workload: &Workload) -> Result<Outcome, ReconcileError> {
    let id = &workload.id;
    let failed = |source| ReconcileError::DeleteHeldPods {
        workload: id.clone(),
        source: Box::new(source),
    };
    // A Deployment's new ReplicaSet replaces the pods its gate held; a mark left on one (say, after the
    // gate was removed by hand) is only removed.
    let (uid, deleted) = match id.kind {
        WorkloadKind::Deployment => (workload.uid.clone(), 0),
        WorkloadKind::StatefulSet | WorkloadKind::DaemonSet => {
            let Some(owner) = pod_owner(&ctx.client, id).await.map_err(failed)? else {
                return Ok(Outcome::Gone);
            };
            if owner.catching_up {
                return Ok(Outcome::Waiting(CONTROLLER_CATCH_UP));
            }
            let deleted = delete_gated_pods(&ctx.client, id, &owner).await.map_err(failed)?;
            (owner.uid, deleted)
        }
    };
    // Guarded by the uid, not the resourceVersion: the controller's status updates after the deletes
    // would make that fail, and removing the mark from the same object is right whatever changed.
    let body = serde_json::json!({ "metadata": {
        "uid": uid,
        "annotations": { (names::GATED_AT): null },
    }});
    match patch(&ctx.client, id, &body).await {
        Ok(()) => {}
        // Deleted, or deleted and re-created (a different uid is refused as 422 "field is immutable"):
        // the new object is planned on its own.
        Err(e) if error::is_not_found(&e) || error::status_code(&e) == Some(422) => return Ok(Outcome::Gone),
        Err(source) => {
            return Err(ReconcileError::PatchWorkload {
                workload: id.clone(),
                source: Box::new(source),
            });
        }
    }
    if deleted > 0 {
        let note = format!(
            "Deleted {} pod(s) held by the released scheduling gate {}; the {} controller recreates them from the current template.",
            deleted,
            names::SCHEDULING_GATE,
            id.kind
        );
        publish(
            ctx,
            workload,
            EventType::Normal,
            reason::HELD_PODS_DELETED,
            action::GATE_SCHEDULING,
            note,
        )
        .await;
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
            Err(e) if error::is_not_found(&e) || error::is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Whether `pod` is controlled by the workload `owner_uid` and still carries wave's gate.
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

async fn pod_owner(client: &Client, id: &WorkloadRef) -> Result<Option<PodOwner>, kube::Error> {
    fn owner(meta: ObjectMeta, observed: Option<i64>, selector: LabelSelector) -> PodOwner {
        let selector = selector
            .match_labels
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        PodOwner {
            uid: meta.uid.unwrap_or_default(),
            catching_up: observed.unwrap_or_default() < meta.generation.unwrap_or_default(),
            selector,
        }
    }
    let ns = &id.namespace;
    Ok(match id.kind {
        WorkloadKind::Deployment => None,
        WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), ns)
            .get_opt(&id.name)
            .await?
            .map(|s| {
                let observed = s.status.and_then(|st| st.observed_generation);
                owner(s.metadata, observed, s.spec.unwrap_or_default().selector)
            }),
        WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(client.clone(), ns)
            .get_opt(&id.name)
            .await?
            .map(|d| {
                let observed = d.status.and_then(|st| st.observed_generation);
                owner(d.metadata, observed, d.spec.unwrap_or_default().selector)
            }),
    })
}

async fn report_missing(ctx: &Context, workload: &Workload, message: String) {
    let is_new = {
        let mut reported = ctx.reported_missing.lock().unwrap_or_else(|e| e.into_inner());
        let is_new = reported.get(&workload.id) != Some(&message);
        reported.insert(workload.id.clone(), message.clone());
        ctx.metrics.waiting_for_config.set(reported.len() as i64);
        is_new
    };
    if is_new {
        tracing::warn!(workload = %workload.id, "{message}; not writing the hash until it exists");
        publish(
            ctx,
            workload,
            EventType::Warning,
            reason::CONFIG_MISSING,
            action::CHECK_CONFIG,
            message,
        )
        .await;
    }
}

fn forget_missing(ctx: &Context, id: &WorkloadRef) {
    let mut reported = ctx.reported_missing.lock().unwrap_or_else(|e| e.into_inner());
    if reported.remove(id).is_some() {
        ctx.metrics.waiting_for_config.set(reported.len() as i64);
    }
}

async fn publish(
    ctx: &Context,
    workload: &Workload,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    if let Err(e) = ctx.events.publish(workload, type_, reason, action, note).await {
        tracing::warn!(workload = %workload.id, reason, error = %error::describe(&e), "could not publish Event");
    }
}

async fn patch(client: &Client, id: &WorkloadRef, body: &serde_json::Value) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = Patch::Merge(body);
    let ns = &id.namespace;
    match id.kind {
        WorkloadKind::Deployment => Api::<Deployment>::namespaced(client.clone(), ns)
            .patch(&id.name, &params, &patch)
            .await
            .map(drop),
        WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), ns)
            .patch(&id.name, &params, &patch)
            .await
            .map(drop),
        WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(client.clone(), ns)
            .patch(&id.name, &params, &patch)
            .await
            .map(drop),
    }
}

/// Reads a workload directly from the apiserver.
pub async fn get(client: &Client, id: &WorkloadRef) -> Result<Option<Workload>, kube::Error> {
    let ns = &id.namespace;
    Ok(match id.kind {
        WorkloadKind::Deployment => Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt(&id.name)
            .await?
            .map(Into::into),
        WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), ns)
            .get_opt(&id.name)
            .await?
            .map(Into::into),
        WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(client.clone(), ns)
            .get_opt(&id.name)
            .await?
            .map(Into::into),
    })
}

/// Records the result of one reconcile and says when to retry, if at all.
pub fn record(
    ctx: &Context,
    id: &WorkloadRef,
    result: &Result<Outcome, ReconcileError>,
    failures: u32,
) -> Option<Duration> {
    track_permissions(ctx, result);
    let kind = id.kind.as_str();
    match result {
        Ok(outcome) => {
            ctx.metrics
                .reconciles
                .get_or_create(&KindResult {
                    kind,
                    result: outcome.as_str(),
                })
                .inc();
            match outcome {
                Outcome::RateLimited(wait) | Outcome::Waiting(wait) => Some(*wait),
                Outcome::Blocked { recheck_after } => *recheck_after,
                _ => None,
            }
        }
        Err(e) => {
            ctx.metrics
                .reconciles
                .get_or_create(&KindResult {
                    kind,
                    result: "error",
                })
                .inc();
            ctx.metrics
                .reconcile_errors
                .get_or_create(&super::metrics::KindError {
                    kind,
                    error: e.kind(),
                })
                .inc();
            let backoff = backoff(failures);
            tracing::warn!(workload = %id, error = %error_chain(e), retry_in = ?backoff, "reconcile failed");
            Some(backoff)
        }
    }
}

/// Keeps `/readyz` failing while an operation is forbidden, until the same operation succeeds.
fn track_permissions(ctx: &Context, result: &Result<Outcome, ReconcileError>) {
    let mut denied = ctx.permission_errors.lock().unwrap_or_else(|e| e.into_inner());
    match result {
        Err(e) if e.kind().ends_with("_forbidden") => {
            denied.insert(e.kind(), error_chain(e));
        }
        // Content was read: reads are allowed.
        Ok(Outcome::Noop | Outcome::Blocked { .. }) => {
            denied.remove("fetch_config_forbidden");
        }
        Ok(Outcome::Written) => {
            denied.remove("fetch_config_forbidden");
            denied.remove("patch_workload_forbidden");
            denied.remove("get_workload_forbidden");
        }
        Ok(Outcome::HeldPodsDeleted) => {
            denied.remove("delete_held_pods_forbidden");
        }
        _ => {}
    }
}

/// Exponential backoff for repeated failures of one workload: 1 s doubling to 5 min.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(8)).min(Duration::from_secs(300))
}

/// `error: cause: cause` in one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
