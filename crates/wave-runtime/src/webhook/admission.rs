//! Admission: the webhook's decision for one AdmissionReview, with the same discovery, content cache and
//! hash as the reconciler.
//!
//! ```text
//! AdmissionReview ─► Workload (kind from the request) ─► refs + content cache (concurrent reads)
//!                  ─► wave_core::admission::decide ─► gate? confirm with live GETs, decide again
//!                  ─► JSON patch ─► AdmissionResponse (always allowed) ─► then the Event, if any
//! ```
//!
//! Only requests that carried the path token reach this module (`super`): the apiserver's. Nothing in
//! `userInfo` is read: the decision depends on the object, the operation, the request's namespace and
//! dry-run alone.
//!
//! It never denies (difference `never-deny`): any internal error admits the object unmodified, is logged
//! and counted, and the reconciler catches up. Before the watches have listed it admits unmodified too.
//! The decision has [`DECISION_DEADLINE`]; past it the object is admitted unmodified and counted as
//! `timeout`. Events are sent after the response, never inside the apiserver's timeout. No Events on
//! dry-run.
//!
//! Absence is never decided from the watch alone: with `kubectl apply -f dir/` or `helm install`, a
//! ConfigMap is created milliseconds before the workload that uses it, and the watch may not have
//! delivered it yet. Gating then would cost an extra ReplicaSet and a false Warning, so a gate is only
//! set after live GETs confirm something required is really missing.

use std::time::Duration;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as AdmissionOp};
use wave_core::admission::{self, Mutation, Operation};
use wave_core::decide::{self, Verdict};
use wave_core::hash::missing_message;
use wave_core::names::{self, action, reason};
use wave_core::pace;
use wave_core::workload::{Workload, WorkloadKind};

use crate::error::WebhookError;
use crate::events::EventType;
use crate::metrics::WebhookLabels;
use crate::state::Context;
use crate::state::memory;
use crate::state::pacing::{self, Slot};

/// How long the webhook may take to decide. The chart's `webhook.timeoutSeconds` (2 s by default) is
/// the apiserver's limit for the whole call, TLS and network included; the rest is that margin.
pub const DECISION_DEADLINE: Duration = Duration::from_secs(1);

/// What the webhook decided for one request.
struct Decision {
    /// Metric label: `hashed` or `gated`.
    label: &'static str,
    patch: json_patch::Patch,
    /// The Event to send once the response is on its way (none on dry-run).
    notice: Option<Notice>,
}

/// An Event about a workload.
struct Notice {
    workload: Workload,
    type_: EventType,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Handles one AdmissionReview from the apiserver (the caller presented the path token: `super`). It
/// never denies: see the module docs.
pub async fn mutate(ctx: &Context, review: AdmissionReview<DynamicObject>) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            count(ctx, "error");
            // Without a request uid the apiserver cannot match any reply, so it counts the call as
            // failed and `failurePolicy: Ignore` admits the object.
            tracing::warn!(error = %e, "malformed AdmissionReview; admitting");
            return AdmissionResponse::invalid(e.to_string()).into_review();
        }
    };
    let response = AdmissionResponse::from(&request);
    let started = std::time::Instant::now();
    let decided = tokio::time::timeout(DECISION_DEADLINE, admit(ctx, &request)).await;
    ctx.metrics
        .webhook_duration
        .observe(started.elapsed().as_secs_f64());
    let (result, response) = match decided {
        Ok(Ok(None)) => ("unchanged", response),
        Ok(Ok(Some(decision))) => match response.clone().with_patch(decision.patch) {
            Ok(r) => {
                if let Some(Notice {
                    workload,
                    type_,
                    reason,
                    action,
                    note,
                }) = decision.notice
                {
                    // Queued: the apiserver's timeout is not spent on Events.
                    ctx.events.publish(&workload, type_, reason, action, note);
                }
                (decision.label, r)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot serialise the patch; admitting unmodified");
                ("error", response)
            }
        },
        Ok(Err(why)) => {
            // Never deny: the reconciler catches up.
            tracing::warn!(kind = %request.kind.kind, namespace = ?request.namespace, name = %request.name, error = %crate::api::error_chain(&why), "webhook could not decide; admitting unmodified");
            ("error", response)
        }
        Err(_) => {
            tracing::warn!(kind = %request.kind.kind, namespace = ?request.namespace, name = %request.name, deadline = ?DECISION_DEADLINE, "webhook could not decide in time (reading the referenced config is slow); admitting unmodified");
            ("timeout", response)
        }
    };
    count(ctx, result);
    response.into_review()
}

/// Counts one request in `wave_webhook_requests_total{result}`.
pub(super) fn count(ctx: &Context, result: &'static str) {
    ctx.metrics
        .webhook_requests
        .get_or_create(&WebhookLabels { result })
        .inc();
}

/// The decision for one request, or `None` to admit it as it is. `Err` is an internal error.
async fn admit(
    ctx: &Context,
    req: &AdmissionRequest<DynamicObject>,
) -> Result<Option<Decision>, WebhookError> {
    let operation = match req.operation {
        AdmissionOp::Create => Operation::Create,
        AdmissionOp::Update => Operation::Update,
        _ => return Ok(None),
    };
    let Some(object) = &req.object else {
        return Ok(None);
    };
    let Some(kind) = WorkloadKind::from_type(&req.kind.api_version(), &req.kind.kind) else {
        return Ok(None);
    };
    let mut meta = object.metadata.clone();
    // The request's namespace is the apiserver's word; the object may not carry one yet on CREATE, and
    // an object naming another namespace is admitted as it is, never decided on.
    match (&meta.namespace, &req.namespace) {
        (None, _) => meta.namespace = req.namespace.clone(),
        (Some(object), Some(request)) if object == request => {}
        _ => return Ok(None),
    }
    let workload =
        Workload::from_object(kind, meta, &object.data).map_err(|source| WebhookError::Decode {
            kind: req.kind.kind.clone(),
            source,
        })?;
    if !workload.is_opted_in() {
        return Ok(None);
    }
    {
        let tracker = ctx.tracker();
        let ns = &workload.id.namespace;
        if !tracker.is_ready() || !tracker.watches_namespace(ns) || !tracker.selects_namespace(ns) {
            return Ok(None);
        }
    }
    // On UPDATE the hash the stored object carries stands when the update dropped it (`carry_hash`);
    // the patch is made against the object as admitted.
    let admitted = workload.clone();
    let mut workload = workload;
    let carried = match (&req.old_object, operation) {
        (Some(old), Operation::Update) => {
            let stored = Workload::from_object(kind, old.metadata.clone(), &old.data).ok();
            admission::carry_hash(&mut workload, stored.as_ref().and_then(|w| w.template_hash()))
        }
        _ => None,
    };
    let (refs, _unwatched) = ctx.tracker().references(&workload);
    let fetched = ctx
        .content
        .resolve(&refs, &ctx.tracker)
        .await
        .map_err(WebhookError::Content)?;
    memory::observe_data_changes(ctx);
    let mut mutation = admission::decide(&workload, &refs, &fetched, operation, &ctx.hashing);
    if matches!(mutation, Mutation::Gate { .. }) {
        let live = ctx
            .content
            .resolve_live(&refs, &ctx.tracker)
            .await
            .map_err(WebhookError::Content)?;
        mutation = admission::decide(&workload, &refs, &live, operation, &ctx.hashing);
    }
    let mut marker = None;
    if operation == Operation::Update {
        // The controller's rule, with what this replica knows (`wave_core::decide`): an undo, a halt,
        // flapping, coalescing or a full pacing line keep the hash the object had.
        let may_roll = match &mutation {
            Mutation::SetHash(desired) if workload.current_hash().is_some() => {
                let versions = pace::versions(&refs, &fetched, &ctx.hashing);
                let verdict = memory::with_memory(ctx, &workload.id, |memory| {
                    let delivers = decide::delivered(&workload, &versions, memory.rolled);
                    decide::rollout_verdict(&workload, Some(desired), &delivers, memory)
                });
                match verdict {
                    Verdict::Roll => match pacing::slot_for_webhook(ctx, &workload, desired, &versions) {
                        Slot::Off => true,
                        Slot::Free(m) => {
                            marker = Some(m);
                            true
                        }
                        Slot::Full => false,
                    },
                    Verdict::Undo(_) | Verdict::Hold(_) => false,
                }
            }
            _ => true,
        };
        mutation = admission::on_update(mutation, may_roll, carried);
        if !matches!(mutation, Mutation::SetHash(_)) {
            marker = None;
        }
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut ops = admission::patch_ops(&admitted, &mutation, &now);
    if let Some(marker) = &marker {
        ops.push(admission::marker_op(&marker.render()));
    }
    let (label, notice) = match &mutation {
        Mutation::None => return Ok(None),
        Mutation::SetHash(hash) => {
            let note = format!("Configuration hash updated to {hash}");
            let notice = (
                EventType::Normal,
                reason::CONFIG_CHANGED,
                action::UPDATE_CONFIG_HASH,
                note,
            );
            ("hashed", notice)
        }
        Mutation::Gate { missing } => {
            let message = missing_message(missing);
            if !req.dry_run {
                // The reconciler reports each distinct missing set once; this is that report, kept
                // until the workload appears (a create refused after admission never does: bounded).
                ctx.missing
                    .admitted(&workload.id, &message, std::time::Instant::now());
            }
            // Wave's reason and message, so alerts written for Wave keep working.
            let note = format!(
                "Disabled scheduling due to missing children: {message}. The pods are held by the scheduling gate {} until it exists.",
                names::SCHEDULING_GATE
            );
            let notice = (
                EventType::Warning,
                reason::SCHEDULING_DISABLED,
                action::GATE_SCHEDULING,
                note,
            );
            ("gated", notice)
        }
    };
    let patch = serde_json::from_value(serde_json::Value::Array(ops)).map_err(WebhookError::Patch)?;
    let (type_, reason, action, note) = notice;
    let notice = (!req.dry_run).then_some(Notice {
        workload,
        type_,
        reason,
        action,
        note,
    });
    Ok(Some(Decision { label, patch, notice }))
}
