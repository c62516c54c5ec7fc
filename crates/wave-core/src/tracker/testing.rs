//! Fixtures shared by the tracker's tests.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Change, ConfigMeta, Effects, Event, ObjectVersion, Resource, Scope, Tracker};
use crate::refs::{ConfigKey, ConfigKind};
use crate::workload::testing::deployment;
use crate::workload::{Workload, WorkloadKind};

pub(super) fn scope(resource: Resource) -> Scope {
    Scope {
        resource,
        namespace: None,
    }
}

pub(super) const DEPLOYMENTS: Resource = Resource::Workload(WorkloadKind::DEPLOYMENT);

pub(super) const CONFIGMAPS: Resource = Resource::Config(ConfigKind::ConfigMap);

pub(super) fn uses_cm(name: &str, cm: &str) -> Workload {
    deployment(
        "ns",
        name,
        &[],
        json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": cm}}]}]}),
    )
}

pub(super) fn cm_meta(name: &str, rv: &str) -> ConfigMeta {
    ConfigMeta {
        key: ConfigKey::new(ConfigKind::ConfigMap, "ns", name),
        version: ObjectVersion {
            uid: format!("uid-{name}"),
            resource_version: rv.into(),
        },
        owners: Vec::new(),
        ignored: false,
        reloader_match: false,
        labels: BTreeMap::new(),
    }
}

pub(super) fn names_of_deleted(fx: &Effects) -> Vec<&str> {
    fx.deleted.iter().map(|w| w.name.as_str()).collect()
}

pub(super) fn names_of(fx: &Effects) -> Vec<&str> {
    fx.enqueue.iter().map(|w| w.name.as_str()).collect()
}

/// A tracker that has listed everything once: `workloads` and `configs` present.
pub(super) fn synced(workloads: Vec<Workload>, configs: Vec<ConfigMeta>) -> (Tracker, Effects) {
    synced_from(Tracker::new(&WorkloadKind::BUILT_IN, None), workloads, configs)
}

pub(super) fn synced_from(
    mut t: Tracker,
    workloads: Vec<Workload>,
    configs: Vec<ConfigMeta>,
) -> (Tracker, Effects) {
    let mut last = Effects::default();
    for s in t.scopes().to_vec() {
        t.apply(match s.resource {
            Resource::Workload(_) => Change::Workload(s.clone(), Event::Init),
            Resource::Config(ConfigKind::SecretProviderClass) => {
                Change::ProviderClass(s.clone(), Event::Init)
            }
            Resource::Config(_) => Change::Config(s.clone(), Event::Init),
            Resource::Namespace => Change::Namespace(s.clone(), Event::Init),
            Resource::ProviderStatus => Change::ProviderStatus(s.clone(), Event::Init),
        });
        if s.resource == DEPLOYMENTS {
            for w in &workloads {
                t.apply(Change::Workload(s.clone(), Event::InitApply(w.clone())));
            }
        }
        if let Resource::Config(kind) = s.resource {
            for c in configs.iter().filter(|c| c.key.kind == kind) {
                t.apply(Change::Config(s.clone(), Event::InitApply(c.clone())));
            }
        }
        last = t.apply(match s.resource {
            Resource::Workload(_) => Change::Workload(s, Event::InitDone),
            Resource::Config(ConfigKind::SecretProviderClass) => Change::ProviderClass(s, Event::InitDone),
            Resource::Config(_) => Change::Config(s, Event::InitDone),
            Resource::Namespace => Change::Namespace(s, Event::InitDone),
            Resource::ProviderStatus => Change::ProviderStatus(s, Event::InitDone),
        });
    }
    (t, last)
}
