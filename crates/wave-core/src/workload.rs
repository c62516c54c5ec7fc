//! The one view of a Deployment, StatefulSet or DaemonSet that the rest of wave works with.
//!
//! The watch streams convert each typed object into a [`Workload`] at once, keeping only what deciding
//! needs (identity, versions, metadata annotations, the pod template, and the few status fields that
//! say how far a rollout got: [`Progress`]); the rest of the spec and status is dropped, and the pod
//! template is kept as a [`PodTemplate`] (compact JSON, not the large typed structs), which keeps the
//! in-memory view small.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

pub use super::kind::WorkloadKind;
use super::refs::{self, CrossNamespace, References};
pub use super::rollout::Progress;
pub use super::template::PodTemplate;
use crate::names;

/// Identity of a workload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadRef {
    /// The kind.
    pub kind: WorkloadKind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl WorkloadRef {
    /// A reference to `kind` `namespace/name`.
    pub fn new(kind: WorkloadKind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What wave knows of one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Identity.
    pub id: WorkloadRef,
    /// `metadata.uid`, for Event references.
    pub uid: String,
    /// `metadata.resourceVersion`: the precondition of every write.
    pub resource_version: String,
    /// `metadata.generation`: changes with the spec, not with status.
    pub generation: i64,
    /// `metadata.annotations` (opt-in, `extra-*`, Wave's scheduling gate).
    pub annotations: BTreeMap<String, String>,
    /// `spec.template`, kept compact.
    pub template: PodTemplate,
    /// How far its rollout got (`rollout::state` reads it).
    pub progress: Progress,
    /// It still carries Wave ≤ v0.6's finalizer `wave.pusher.com/finalizer`, which wave removes
    /// (`docs/migrating-from-wave.md`).
    pub legacy_finalizer: bool,
    /// An Argo Rollout whose pod template is a Deployment's (`spec.workloadRef`): the name of that
    /// Deployment, in the same namespace. Its hash goes there (`Tracker`, "workloadRef").
    pub template_from: Option<String>,
    /// Whoever last set `spec.paused` also wrote Reloader's `paused-at` (`managedFields`): the pause is
    /// a reload's (wave's, or Reloader's before the switch), not the user's (`reloader::pause`).
    pub reload_paused: bool,
    /// It has a controller (an owner reference with `controller: true`): a CronJob's Job, say.
    pub controlled: bool,
}

/// Whether one field manager owns both `spec.paused` and the `paused-at` annotation: the pause a
/// reload made. Someone who resumed or paused by hand since (`kubectl rollout resume`/`pause`) owns
/// `spec.paused` alone. Read from `managedFields`, so it survives a restart; kept as one bool.
fn reload_paused(meta: &ObjectMeta) -> bool {
    let has_paused_at = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(names::reloader::PAUSED_AT));
    // Every workload event passes here: most carry no reload pause at all.
    if !has_paused_at {
        return false;
    }
    let names_paused_at = |k: &String| k.strip_prefix("f:") == Some(names::reloader::PAUSED_AT);
    meta.managed_fields.iter().flatten().any(|entry| {
        let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else {
            return false;
        };
        let owns_paused = fields.get("f:spec").and_then(|s| s.get("f:paused")).is_some();
        let owns_paused_at = fields
            .get("f:metadata")
            .and_then(|m| m.get("f:annotations"))
            .and_then(|a| a.as_object())
            .is_some_and(|a| a.keys().any(names_paused_at));
        owns_paused && owns_paused_at
    })
}

/// The Deployment an Argo Rollout takes its pod template from (`spec.workloadRef` naming an `apps/v1`
/// Deployment), if it does.
pub fn template_from(kind: WorkloadKind, body: &serde_json::Value) -> Option<String> {
    if kind != WorkloadKind::ROLLOUT {
        return None;
    }
    let r = body.pointer("/spec/workloadRef")?;
    let deployment = r.get("kind")?.as_str()? == "Deployment"
        && r.get("apiVersion")
            .and_then(|v| v.as_str())
            .is_none_or(|v| v == "apps/v1");
    deployment.then(|| r.get("name")?.as_str().map(str::to_string))?
}

/// The pod template in `body` (the object without its metadata, or the whole object) at the kind's
/// template pointer; an empty one when there is none. A template that is not a pod template is an error.
pub fn pod_template(kind: WorkloadKind, body: &serde_json::Value) -> Result<PodTemplate, serde_json::Error> {
    match body.pointer(kind.info().template) {
        Some(template) => PodTemplate::new(PodTemplateSpec::deserialize(template)?),
        None => Ok(PodTemplate::default()),
    }
}

impl Workload {
    /// The view of an object of `kind`: its metadata, and its pod template (see [`pod_template`]).
    pub fn from_object(
        kind: WorkloadKind,
        meta: ObjectMeta,
        body: &serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        let mut w = Self::from_parts(kind, meta, pod_template(kind, body)?);
        w.progress = Progress::read(kind, body);
        w.template_from = template_from(kind, body);
        Ok(w)
    }

    /// The view of an object whose pod template cannot be read: its identity only, and no annotations,
    /// so wave leaves it alone (it cannot be hashed) and still notices when it is deleted.
    pub fn unreadable(kind: WorkloadKind, meta: ObjectMeta) -> Self {
        let mut w = Self::from_parts(kind, meta, PodTemplate::default());
        w.annotations.clear();
        w
    }

    /// The view of an object of `kind` from its metadata and its pod template.
    pub fn from_parts(kind: WorkloadKind, meta: ObjectMeta, template: PodTemplate) -> Self {
        let reload_paused = reload_paused(&meta);
        Self {
            id: WorkloadRef::new(
                kind,
                meta.namespace.unwrap_or_default(),
                meta.name.unwrap_or_default(),
            ),
            legacy_finalizer: meta
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == names::LEGACY_FINALIZER)),
            uid: meta.uid.unwrap_or_default(),
            resource_version: meta.resource_version.unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            template,
            reload_paused,
            controlled: meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true)),
            progress: Progress::default(),
            template_from: None,
        }
    }

    /// Whether the workload opted in with `wave.pusher.com/update-on-config-change: "true"` and has a
    /// pod template of its own to write to (a Rollout with `spec.workloadRef` has not: its Deployment
    /// is opted in in its place; a Job's cannot change once it is created, so on a Job only Reloader's
    /// annotations mean something).
    pub fn is_opted_in(&self) -> bool {
        refs::is_opted_in(&self.annotations)
            && self.template_from.is_none()
            && self.id.kind != WorkloadKind::JOB
    }

    /// This view as wave acts on it when `rollout` (an opted-in Argo Rollout) takes its pod template
    /// from it: with the Rollout's `wave.pusher.com/` annotations added where it has none of its own.
    pub fn adopted_by(&self, rollout: &Workload) -> Workload {
        let mut view = self.clone();
        for (key, value) in &rollout.annotations {
            if key.starts_with(names::PREFIX) {
                view.annotations
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        view
    }

    /// The references of the workload (empty unless opted in), with `policy` applied to those naming
    /// another namespace.
    pub fn references(&self, policy: CrossNamespace) -> References {
        if self.is_opted_in() {
            refs::discover(&self.id.namespace, &self.annotations, &self.template.typed())
                .confine(&self.id.namespace, policy)
        } else {
            References::default()
        }
    }

    /// The hash on the pod template, whatever an in-place record says.
    pub fn template_hash(&self) -> Option<&str> {
        self.template.annotation(names::CONFIG_HASH)
    }

    /// The config hash its pods run, or are restarting into: an in-place restart's
    /// (`inplace::Record`) when it has one, else the hash on the pod template, if any.
    pub fn current_hash(&self) -> Option<&str> {
        self.annotations
            .get(names::IN_PLACE)
            .and_then(|record| crate::inplace::record_hash(record))
            .or_else(|| self.template_hash())
    }

    /// The original scheduler saved by Wave's webhook when it gated this workload.
    pub fn wave_gate(&self) -> Option<&str> {
        self.annotations
            .get(names::SCHEDULING_DISABLED)
            .map(String::as_str)
    }

    /// Whether wave's webhook holds this workload's pods with its scheduling gate.
    pub fn has_scheduling_gate(&self) -> bool {
        self.template
            .scheduling_gates()
            .iter()
            .any(|g| g == names::SCHEDULING_GATE)
    }

    /// When wave's webhook gated the workload, if it says.
    pub fn gated_at(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        self.annotations.get(names::GATED_AT)?.parse().ok()
    }

    /// Whether the gate was released from the template but pods it held may still exist: the
    /// StatefulSet and DaemonSet controllers do not replace them on their own (see `core::plan`).
    pub fn has_held_pods(&self) -> bool {
        self.annotations.contains_key(names::GATED_AT) && !self.has_scheduling_gate()
    }

    /// Whether wave has anything to do for this workload: it opted in, a gate (Wave's or wave's) is
    /// to be released, pods that wave's gate held are to be cleaned up, or Wave ≤ v0.6's finalizer is
    /// to be removed.
    pub fn needs_reconcile(&self) -> bool {
        self.is_opted_in()
            || self.wave_gate().is_some()
            || self.has_scheduling_gate()
            || self.has_held_pods()
            || self.legacy_finalizer
            || self.holds_reload_pause()
    }

    /// A reload paused it and it is still paused: wave resumes it when the period is over, whatever
    /// happened to its annotations, its namespace's selection or compatibility since
    /// (`reloader::pause`).
    pub fn holds_reload_pause(&self) -> bool {
        self.progress.paused
            && self.reload_paused
            && self.annotations.contains_key(names::reloader::PAUSED_AT)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builders for unit tests.
    use super::*;

    /// An opted-in Deployment whose template is `spec` (a PodSpec as JSON).
    pub fn deployment(
        ns: &str,
        name: &str,
        annotations: &[(&str, &str)],
        spec: serde_json::Value,
    ) -> Workload {
        let mut all: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.entry(names::UPDATE_ON_CONFIG_CHANGE.into())
            .or_insert_with(|| "true".into());
        Workload {
            id: WorkloadRef::new(WorkloadKind::DEPLOYMENT, ns, name),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
            generation: 1,
            annotations: all,
            template: PodTemplate::new(
                serde_json::from_value(serde_json::json!({ "spec": spec })).expect("pod spec"),
            )
            .expect("a typed template encodes"),
            progress: Progress::default(),
            legacy_finalizer: false,
            template_from: None,
            reload_paused: false,
            controlled: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::CrossNamespace;

    #[test]
    fn deployment_converts_to_a_workload_view() {
        let meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "web", "namespace": "prod", "uid": "u1", "resourceVersion": "42",
            "generation": 3, "annotations": {(names::UPDATE_ON_CONFIG_CHANGE): "true"}
        }))
        .unwrap();
        let body = serde_json::json!({
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {(names::CONFIG_HASH): "abc"}}}},
            "status": {"replicas": 3}
        });
        let w = Workload::from_object(WorkloadKind::DEPLOYMENT, meta, &body).unwrap();
        assert_eq!(w.id, WorkloadRef::new(WorkloadKind::DEPLOYMENT, "prod", "web"));
        assert_eq!((w.resource_version.as_str(), w.generation), ("42", 3));
        assert!(w.is_opted_in());
        assert_eq!(w.current_hash(), Some("abc"));
    }

    #[test]
    fn an_object_whose_template_is_not_a_pod_template_is_refused() {
        let body = serde_json::json!({"spec": {"template": {"spec": {"containers": "not a list"}}}});
        assert!(Workload::from_object(WorkloadKind::DAEMON_SET, ObjectMeta::default(), &body).is_err());
        let empty = Workload::from_object(
            WorkloadKind::DAEMON_SET,
            ObjectMeta::default(),
            &serde_json::json!({}),
        )
        .expect("no template is an empty template");
        assert_eq!(empty.current_hash(), None);
    }

    #[test]
    fn workloads_not_opted_in_have_no_references() {
        let mut w = testing::deployment(
            "ns",
            "w",
            &[],
            serde_json::json!({"containers": [
            {"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]}),
        );
        assert_eq!(w.references(CrossNamespace::Deny).iter().count(), 1);
        w.annotations
            .insert(names::UPDATE_ON_CONFIG_CHANGE.into(), "false".into());
        assert_eq!(w.references(CrossNamespace::Deny).iter().count(), 0);
        assert!(!w.needs_reconcile());
    }
}
