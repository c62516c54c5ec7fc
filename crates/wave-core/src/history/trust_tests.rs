use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::*;
use crate::history::testing::*;
use crate::history::*;

#[test]
fn only_an_object_exactly_like_the_snapshot_wave_would_write_is_adopted() {
    let id = workload();
    let snap = Snapshot::of("ns", &app_refs(), &fetched(&[("a", b"1")], &[("password", b"p")]));
    let owner = revision("u", "ReplicaSet").owner;
    let want = serde_json::to_value(snap.config_map(&id, "abc", owner.clone())).unwrap();
    let mut same = want.clone();
    same["metadata"]["ownerReferences"] = json!([]);
    same["metadata"]["labels"]["extra"] = json!("kept");
    assert!(
        same_snapshot(&same, &want),
        "owners and extra labels do not matter"
    );
    for (field, value) in [
        ("/data", json!({"configMaps.json": "{}"})),
        ("/immutable", Value::Null),
        ("/metadata/labels", json!({})),
    ] {
        let mut other = want.clone();
        *other.pointer_mut(field).unwrap() = value;
        assert!(!same_snapshot(&other, &want), "{field} differs: not adopted");
    }
    let secret = serde_json::to_value(snap.secret(&id, "abc", owner).unwrap()).unwrap();
    assert!(same_snapshot(&secret, &secret));
    assert!(!same_snapshot(&want, &secret), "a ConfigMap is not the Secret");
}

#[test]
fn a_snapshot_is_trusted_only_with_waves_marks_immutable_and_owned_by_a_revision_of_the_workload() {
    let id = workload();
    let revisions = [revision("rs-1", "ReplicaSet")];
    let snap = Snapshot::of("ns", &app_refs(), &fetched(&[("a", b"1")], &[]));
    let cm = snap.config_map(&id, "abc", revisions[0].owner.clone());
    assert_eq!(
        untrusted(&cm.metadata, cm.immutable, &id, "abc", &revisions),
        None
    );
    let why = |meta: &ObjectMeta, immutable: Option<bool>| {
        untrusted(meta, immutable, &id, "abc", &revisions).expect("untrusted")
    };
    assert!(why(&cm.metadata, None).contains("not immutable"));
    let mut unowned = cm.metadata.clone();
    unowned.owner_references = Some(vec![revision("rs-of-another", "ReplicaSet").owner]);
    assert!(why(&unowned, Some(true)).contains("owned by none"));
    let mut relabelled = cm.metadata.clone();
    relabelled.labels = None;
    assert!(why(&relabelled, Some(true)).contains("labels"));
    assert!(
        untrusted(&cm.metadata, Some(true), &id, "other-hash", &revisions)
            .unwrap()
            .contains("not annotated")
    );
}
