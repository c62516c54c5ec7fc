//! Fixtures shared by the tests of Reloader compatibility.

use serde_json::{Value, json};

use super::{Candidate, Lifecycle};
use crate::hash::Content;
use crate::names::reloader as names;
use crate::refs::{ConfigKey, ConfigKind};
use crate::workload::Workload;
use crate::workload::testing::deployment;

pub(super) fn reloader_workload(annotations: &[(&str, &str)], spec: Value) -> Workload {
    let mut w = deployment("ns", "web", annotations, spec);
    w.annotations.remove(crate::names::UPDATE_ON_CONFIG_CHANGE);
    w
}

pub(super) fn content(pairs: &[(&str, &str)]) -> Content {
    Content::new(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect(),
    )
}

pub(super) fn cm(name: &str) -> ConfigKey {
    ConfigKey::new(ConfigKind::ConfigMap, "ns", name)
}

pub(super) fn candidates(keys: &[ConfigKey]) -> Vec<Candidate> {
    keys.iter()
        .map(|key| Candidate {
            key: key.clone(),
            matched: false,
            lifecycle: Lifecycle::Existing,
        })
        .collect()
}

pub(super) fn env_workload(value: Option<&str>) -> Workload {
    let env = value
        .map(|v| json!([{"name": "STAKATER_APP_CONFIGMAP", "value": v}]))
        .unwrap_or(json!([]));
    reloader_workload(
        &[(names::AUTO, "true")],
        json!({"containers": [{"name": "c", "env": env, "envFrom": [{"configMapRef": {"name": "app"}}]}]}),
    )
}
