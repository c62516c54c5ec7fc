//! The one view of a Deployment, StatefulSet or DaemonSet that the rest of wave works with.
//!
//! The watch streams convert each typed object into a [`Workload`] at once, keeping only what deciding
//! needs (identity, versions, metadata annotations, the pod template); status and the rest of the spec
//! are dropped, which keeps the in-memory view small.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::refs::{self, References};
use crate::names;

/// The workload kinds wave manages (`apps/v1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `apps/v1` DaemonSet.
    DaemonSet,
}

impl WorkloadKind {
    /// Every kind, in a fixed order.
    pub const ALL: [WorkloadKind; 3] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
    ];

    /// The Kubernetes kind, also used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }

    /// Parses `deployment`, `deploy`, `statefulset`, `sts`, `daemonset`, `ds` (any case, plural allowed).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().trim_end_matches('s') {
            "deployment" | "deploy" => Some(WorkloadKind::Deployment),
            "statefulset" | "st" => Some(WorkloadKind::StatefulSet),
            "daemonset" | "d" => Some(WorkloadKind::DaemonSet),
            _ => None,
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identity of a workload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadRef {
    /// Deployment, StatefulSet or DaemonSet.
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
    /// `spec.template` (boxed: it is most of the size, and views move through channels).
    pub template: Box<PodTemplateSpec>,
}

impl Workload {
    fn from_parts(kind: WorkloadKind, meta: ObjectMeta, template: Option<PodTemplateSpec>) -> Self {
        Self {
            id: WorkloadRef::new(
                kind,
                meta.namespace.unwrap_or_default(),
                meta.name.unwrap_or_default(),
            ),
            uid: meta.uid.unwrap_or_default(),
            resource_version: meta.resource_version.unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            template: Box::new(template.unwrap_or_default()),
        }
    }

    /// Whether the workload opted in with `wave.pusher.com/update-on-config-change: "true"`.
    pub fn is_opted_in(&self) -> bool {
        refs::is_opted_in(&self.annotations)
    }

    /// The references of the workload (empty unless opted in).
    pub fn references(&self) -> References {
        if self.is_opted_in() {
            refs::discover(&self.id.namespace, &self.annotations, &self.template)
        } else {
            References::default()
        }
    }

    /// The hash currently on the pod template, if any.
    pub fn current_hash(&self) -> Option<&str> {
        self.template
            .metadata
            .as_ref()?
            .annotations
            .as_ref()?
            .get(names::CONFIG_HASH)
            .map(String::as_str)
    }

    /// The original scheduler saved by Wave's webhook when it gated this workload.
    pub fn wave_gate(&self) -> Option<&str> {
        self.annotations
            .get(names::SCHEDULING_DISABLED)
            .map(String::as_str)
    }

    /// The pod template's scheduling gate names.
    pub fn scheduling_gates(&self) -> Vec<&str> {
        let gates = self
            .template
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or_default();
        gates.iter().map(|g| g.name.as_str()).collect()
    }

    /// Whether wave's webhook holds this workload's pods with its scheduling gate.
    pub fn has_scheduling_gate(&self) -> bool {
        self.scheduling_gates().contains(&names::SCHEDULING_GATE)
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
    /// to be released, or pods that wave's gate held are to be cleaned up.
    pub fn needs_reconcile(&self) -> bool {
        self.is_opted_in() || self.wave_gate().is_some() || self.has_scheduling_gate() || self.has_held_pods()
    }
}

impl From<Deployment> for Workload {
    fn from(d: Deployment) -> Self {
        Workload::from_parts(WorkloadKind::Deployment, d.metadata, d.spec.map(|s| s.template))
    }
}

impl From<StatefulSet> for Workload {
    fn from(s: StatefulSet) -> Self {
        Workload::from_parts(WorkloadKind::StatefulSet, s.metadata, s.spec.map(|s| s.template))
    }
}

impl From<DaemonSet> for Workload {
    fn from(d: DaemonSet) -> Self {
        Workload::from_parts(WorkloadKind::DaemonSet, d.metadata, d.spec.map(|s| s.template))
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
            id: WorkloadRef::new(WorkloadKind::Deployment, ns, name),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
            generation: 1,
            annotations: all,
            template: Box::new(
                serde_json::from_value(serde_json::json!({ "spec": spec })).expect("pod spec"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_kubectl_style_names() {
        for (s, k) in [
            ("deployment", WorkloadKind::Deployment),
            ("deploy", WorkloadKind::Deployment),
            ("Deployments", WorkloadKind::Deployment),
            ("sts", WorkloadKind::StatefulSet),
            ("statefulset", WorkloadKind::StatefulSet),
            ("ds", WorkloadKind::DaemonSet),
            ("daemonsets", WorkloadKind::DaemonSet),
        ] {
            assert_eq!(WorkloadKind::parse(s), Some(k), "{s}");
        }
        assert_eq!(WorkloadKind::parse("job"), None);
    }

    #[test]
    fn deployment_converts_to_a_workload_view() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1", "resourceVersion": "42",
                         "generation": 3, "annotations": {(names::UPDATE_ON_CONFIG_CHANGE): "true"}},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {(names::CONFIG_HASH): "abc"}}}}
        }))
        .unwrap();
        let w = Workload::from(d);
        assert_eq!(w.id, WorkloadRef::new(WorkloadKind::Deployment, "prod", "web"));
        assert_eq!((w.resource_version.as_str(), w.generation), ("42", 3));
        assert!(w.is_opted_in());
        assert_eq!(w.current_hash(), Some("abc"));
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
        assert_eq!(w.references().iter().count(), 1);
        w.annotations
            .insert(names::UPDATE_ON_CONFIG_CHANGE.into(), "false".into());
        assert_eq!(w.references().iter().count(), 0);
        assert!(!w.needs_reconcile());
    }
}
