use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::*;
use crate::hash::{self, Hashing};
use crate::history::testing::*;
use crate::history::*;
use crate::names;
use crate::refs::{self, ConfigKey, ConfigKind};
use crate::workload::{WorkloadKind, WorkloadRef};

#[test]
fn a_snapshot_holds_exactly_the_hashed_data_and_hashes_back_to_the_config_hash() {
    let refs = app_refs();
    let f = fetched(
        &[("level", b"info")],
        &[("password", b"s3cret"), ("unused", b"x")],
    );
    let snap = Snapshot::of("ns", &refs, &f);
    assert_eq!(
        snap.hash(&Hashing::Plain),
        hash::config_hash("ns", &refs, &f, &Hashing::Plain)
    );
    assert_eq!(
        snap.secrets["db"].keys().collect::<Vec<_>>(),
        ["password"],
        "only the key the workload uses"
    );
    let owner = OwnerReference {
        name: "web-1".into(),
        uid: "u".into(),
        ..OwnerReference::default()
    };
    let cm = snap.config_map(&workload(), "abc", owner.clone());
    let secret = snap
        .secret(&workload(), "abc", owner)
        .expect("a Secret is hashed");
    assert_eq!(cm.immutable, Some(true));
    assert_eq!(secret.immutable, Some(true));
    assert!(
        !serde_json::to_string(&cm)
            .unwrap()
            .contains(&STANDARD.encode("s3cret")),
        "Secret data never goes into the ConfigMap"
    );
    assert_eq!(Snapshot::read(&cm, Some(&secret)).unwrap(), snap);
    assert!(is_snapshot_of(&cm.metadata, &workload()));
    assert!(!format!("{snap:?}").contains("s3cret"));
}

#[test]
fn a_snapshot_without_secrets_is_a_config_map_alone() {
    let t = template(json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "app"}}]}]}));
    let refs = refs::discover("ns", &BTreeMap::new(), &t);
    let f = fetched(&[("level", b"info")], &[]);
    let snap = Snapshot::of("ns", &refs, &f);
    assert!(
        snap.secret(&workload(), "abc", OwnerReference::default())
            .is_none()
    );
}

#[test]
fn a_snapshot_name_fits_253_characters_and_names_kind_workload_and_hash() {
    let hash = "0123456789abcdef".repeat(4);
    assert_eq!(Snapshot::name(&workload(), &hash), "wave-deploy-web-0123456789ab");
    let long = WorkloadRef::new(WorkloadKind::STATEFUL_SET, "ns", "a".repeat(253));
    let name = Snapshot::name(&long, &hash);
    assert_eq!(name.len(), 253);
    assert!(name.starts_with("wave-sts-aaa") && name.ends_with("-0123456789ab"));
    let labels = Snapshot::labels(&long);
    assert!(labels.values().all(|v| v.len() <= 63), "{labels:?}");
}

#[test]
fn a_malformed_snapshot_is_an_error_that_names_the_object() {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("wave-deploy-web-1".into());
    let err = Snapshot::read(&cm, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "configmap wave-deploy-web-1 has no configMaps.json key: not a wave config snapshot"
    );
    cm.data = Some(BTreeMap::from([(CONFIG_MAPS_KEY.into(), "[1".into())]));
    assert_eq!(
        Snapshot::read(&cm, None).unwrap_err().kind(),
        "snapshot_malformed"
    );
}

#[test]
fn a_hash_that_reads_another_namespace_is_named_so_history_copies_nothing_across() {
    assert_eq!(foreign_config("ns", &app_refs()), None);
    let t = template(json!({"containers": [{"name": "c"}]}));
    let extra = BTreeMap::from([(names::EXTRA_SECRETS.to_string(), "own,victim/db".to_string())]);
    let refs = refs::discover("ns", &extra, &t);
    assert_eq!(
        foreign_config("ns", &refs),
        Some(&ConfigKey::new(ConfigKind::Secret, "victim", "db"))
    );
}

#[test]
fn a_stored_snapshot_with_an_entry_of_another_namespace_is_not_read() {
    let id = workload();
    let mut forged = Snapshot::default();
    forged
        .config_maps
        .insert("victim/cfg".into(), BTreeMap::from([("k".into(), "eA==".into())]));
    let cm = forged.config_map(&id, "abc", revision("u", "ReplicaSet").owner);
    let err = Snapshot::read(&cm, None).unwrap_err();
    assert_eq!(err.kind(), "snapshot_foreign");
    assert!(err.to_string().contains("victim/cfg"), "{err}");
}
