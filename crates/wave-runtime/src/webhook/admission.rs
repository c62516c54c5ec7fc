//! Admission: the webhook's decision for one AdmissionReview, with the same discovery, content cache and
//! hash as the reconciler.
//!
//! ```text
//! AdmissionReview ─► Workload (kind from the request) ─► refs + content cache
//!                  ─► wave_core::admission::decide ─► JSON patch ─► AdmissionResponse (always allowed)
//! ```
//!
//! It never denies (difference `never-deny`): any internal error admits the object unmodified, is logged
//! and counted, and the reconciler catches up. Before the watches have listed it admits unmodified too.
//! No Events on dry-run.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as AdmissionOp};
use wave_core::admission::{self, Mutation, Operation};
use wave_core::hash::missing_message;
use wave_core::names::{self, action, reason};
use wave_core::workload::{Workload, WorkloadKind};

use super::WebhookError;
use crate::controller::context::Context;
use crate::events::EventType;
use crate::metrics::WebhookLabels;

/// Handles one AdmissionReview. It never denies: see the module docs.
pub async fn mutate(
    State(ctx): State<Arc<Context>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            ctx.metrics
                .webhook_requests
                .get_or_create(&WebhookLabels { result: "error" })
                .inc();
            // Without a request uid the apiserver cannot match any reply, so it counts the call as
            // failed and `failurePolicy: Ignore` admits the object.
            tracing::warn!(error = %e, "malformed AdmissionReview; admitting");
            return Json(AdmissionResponse::invalid(e.to_string()).into_review());
        }
    };
    let response = AdmissionResponse::from(&request);
    let (result, response) = match admit(&ctx, &request).await {
        Ok(None) => ("unchanged", response),
        Ok(Some((label, patch))) => match response.clone().with_patch(patch) {
            Ok(r) => (label, r),
            Err(e) => {
                tracing::warn!(error = %e, "cannot serialise the patch; admitting unmodified");
                ("error", response)
            }
        },
        Err(why) => {
            // Never deny: the reconciler catches up.
            tracing::warn!(kind = %request.kind.kind, namespace = ?request.namespace, name = %request.name, error = %crate::api::error_chain(&why), "webhook could not decide; admitting unmodified");
            ("error", response)
        }
    };
    ctx.metrics
        .webhook_requests
        .get_or_create(&WebhookLabels { result })
        .inc();
    Json(response.into_review())
}

/// The patch for one request, or `None` to admit it as it is. `Err` is an internal error.
async fn admit(
    ctx: &Context,
    req: &AdmissionRequest<DynamicObject>,
) -> Result<Option<(&'static str, json_patch::Patch)>, WebhookError> {
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
    // The object may not carry its namespace yet on CREATE.
    if meta.namespace.is_none() {
        meta.namespace = req.namespace.clone();
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
        if !tracker.is_ready() || !tracker.watches_namespace(&workload.id.namespace) {
            return Ok(None);
        }
    }
    let mut refs = workload.references();
    ctx.tracker().restrict_to_watched(&mut refs);
    let fetched = ctx
        .content
        .resolve(&refs, &ctx.tracker)
        .await
        .map_err(WebhookError::Content)?;
    let mutation = admission::decide(&workload, &refs, &fetched, operation);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ops = admission::patch_ops(&workload, &mutation, &now);
    let dry_run = req.dry_run;
    let label = match &mutation {
        Mutation::None => return Ok(None),
        Mutation::SetHash(hash) => {
            if !dry_run {
                let note = format!("Configuration hash updated to {hash}");
                ctx.events
                    .publish(
                        &workload,
                        EventType::Normal,
                        reason::CONFIG_CHANGED,
                        action::UPDATE_CONFIG_HASH,
                        note,
                    )
                    .await;
            }
            "hashed"
        }
        Mutation::Gate { missing } => {
            if !dry_run {
                let message = missing_message(missing);
                // The reconciler reports each distinct missing set once; this is that report.
                ctx.missing.report(&workload.id, &message);
                // Wave's reason and message, so alerts written for Wave keep working.
                let note = format!(
                    "Disabled scheduling due to missing children: {message}. The pods are held by the scheduling gate {} until it exists.",
                    names::SCHEDULING_GATE
                );
                ctx.events
                    .publish(
                        &workload,
                        EventType::Warning,
                        reason::SCHEDULING_DISABLED,
                        action::GATE_SCHEDULING,
                        note,
                    )
                    .await;
            }
            "gated"
        }
    };
    let patch = serde_json::from_value(serde_json::Value::Array(ops)).map_err(WebhookError::Patch)?;
    Ok(Some((label, patch)))
}
