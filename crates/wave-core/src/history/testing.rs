//! Fixtures shared by the tests of config history.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};

use super::Revision;
use crate::hash::{Content, Fetched};
use crate::refs::{self, ConfigKey, ConfigKind, References};
use crate::workload::{WorkloadKind, WorkloadRef};

pub(super) fn content(pairs: &[(&str, &[u8])]) -> Arc<Content> {
    Arc::new(Content::new(
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect(),
    ))
}

pub(super) fn template(spec: Value) -> k8s_openapi::api::core::v1::PodTemplateSpec {
    serde_json::from_value(json!({"spec": spec})).unwrap()
}

pub(super) fn app_refs() -> References {
    let t = template(json!({"containers": [{"name": "c",
        "envFrom": [{"configMapRef": {"name": "app"}}],
        "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]}));
    refs::discover("ns", &BTreeMap::new(), &t)
}

pub(super) fn fetched(app: &[(&str, &[u8])], db: &[(&str, &[u8])]) -> Fetched {
    Fetched::from([
        (ConfigKey::new(ConfigKind::ConfigMap, "ns", "app"), content(app)),
        (ConfigKey::new(ConfigKind::Secret, "ns", "db"), content(db)),
    ])
}

pub(super) fn workload() -> WorkloadRef {
    WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "web")
}

pub(super) fn revision(uid: &str, kind: &str) -> Revision {
    Revision {
        number: 1,
        hash: Some("h".into()),
        owner: OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: "web-1".into(),
            uid: uid.into(),
            ..OwnerReference::default()
        },
        created: None,
    }
}
