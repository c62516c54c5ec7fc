use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::*;
use crate::hash::{Fetched, Hashing};
use crate::history::testing::*;
use crate::history::*;
use crate::names;
use crate::refs::{self, ConfigKey, ConfigKind};
use crate::workload::WorkloadKind;

#[test]
fn a_restore_replaces_a_whole_object_and_sets_only_the_used_keys_of_a_partial_one() {
    let refs = app_refs();
    let snap = Snapshot::of(
        "ns",
        &refs,
        &fetched(&[("level", b"info"), ("bin", &[0xff])], &[("password", b"old")]),
    );
    let plan = restore_plan("ns", &refs, &snap);
    assert_eq!(plan.len(), 2);
    let cm = &plan[0];
    assert!(cm.whole && cm.key.name == "app");
    let current = CurrentObject {
        resource_version: "7".into(),
        data_keys: BTreeSet::from(["level".into(), "added-later".into(), "bin".into()]),
        ..CurrentObject::default()
    };
    assert_eq!(
        restore_patch(cm, &current),
        json!({"metadata": {"resourceVersion": "7"},
               "data": {"level": "info", "added-later": null, "bin": null},
               "binaryData": {"bin": STANDARD.encode([0xff])}})
    );
    let secret = &plan[1];
    assert!(!secret.whole, "only `password` is used");
    let current = CurrentObject {
        resource_version: "8".into(),
        data_keys: BTreeSet::from(["password".into(), "other".into()]),
        ..CurrentObject::default()
    };
    assert_eq!(
        restore_patch(secret, &current),
        json!({"metadata": {"resourceVersion": "8"}, "data": {"password": STANDARD.encode("old")}}),
        "a key the workload does not use is left alone"
    );
}

#[test]
fn a_restore_is_refused_when_it_could_not_bring_the_hash_back() {
    let refs = app_refs();
    let then = Snapshot::of(
        "ns",
        &refs,
        &fetched(&[("level", b"info")], &[("password", b"old")]),
    );
    let hash = then.hash(&Hashing::Plain);
    let now = Snapshot::of(
        "ns",
        &refs,
        &fetched(&[("level", b"debug")], &[("password", b"new")]),
    );
    assert_eq!(restorable(&then, &now, &Hashing::Plain, &hash), Ok(()));
    assert!(
        restorable(&then, &now, &Hashing::Plain, "other")
            .unwrap_err()
            .contains("does not hash")
    );
    let keyed = Hashing::Keyed(crate::hash::HashKey::new(b"k").unwrap());
    assert!(
        restorable(&then, &now, &keyed, &hash).is_err(),
        "a changed hash key"
    );
    let only_cm = Snapshot::of("ns", &refs, &fetched(&[("level", b"info")], &[]));
    let mut absent_secret = Fetched::new();
    absent_secret.insert(
        ConfigKey::new(ConfigKind::ConfigMap, "ns", "app"),
        content(&[("level", b"info")]),
    );
    let then = Snapshot::of("ns", &refs, &absent_secret);
    let hash = then.hash(&Hashing::Plain);
    assert_eq!(
        restorable(&then, &now, &Hashing::Plain, &hash).unwrap_err(),
        "secret db is used now but was absent then, so no restore can bring the hash back"
    );
    assert!(
        only_cm.secrets.contains_key("db"),
        "an empty Secret is still an entry"
    );
    assert!(restorable(&Snapshot::default(), &now, &Hashing::Plain, &hash).is_err());
}

#[test]
fn objects_managed_by_helm_argo_cd_flux_or_a_controller_are_recognised() {
    let meta = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| ObjectMeta {
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ObjectMeta::default()
    };
    assert_eq!(
        managed_by(&meta(&[("app.kubernetes.io/managed-by", "Helm")], &[])).as_deref(),
        Some("Helm")
    );
    assert_eq!(
        managed_by(&meta(&[], &[("meta.helm.sh/release-name", "r")])).as_deref(),
        Some("Helm")
    );
    assert_eq!(
        managed_by(&meta(
            &[],
            &[("argocd.argoproj.io/tracking-id", "a:/ConfigMap:ns/x")]
        ))
        .as_deref(),
        Some("Argo CD")
    );
    assert_eq!(
        managed_by(&meta(&[("kustomize.toolkit.fluxcd.io/name", "apps")], &[])).as_deref(),
        Some("Flux")
    );
    assert!(managed_by(&meta(&[("app.kubernetes.io/instance", "x")], &[])).is_some());
    assert_eq!(managed_by(&meta(&[("app", "web")], &[])), None);
    assert_eq!(
        managed_by(&meta(&[("app.kubernetes.io/managed-by", "wave")], &[])),
        None
    );
}

#[test]
fn workloads_using_a_restored_object_wait_until_the_watch_shows_every_write_of_the_restore() {
    use crate::tracker::{ConfigMeta, Event, Resource, Scope};
    let app = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
    let db = ConfigKey::new(ConfigKind::Secret, "ns", "db");
    let version = |rv: &str| ObjectVersion {
        uid: "u".into(),
        resource_version: rv.into(),
    };
    let watch = |tracker: &mut Tracker, key: &ConfigKey, rv: &str| {
        let scope = Scope {
            resource: Resource::Config(key.kind),
            namespace: None,
        };
        let meta = ConfigMeta {
            key: key.clone(),
            version: version(rv),
            owners: Vec::new(),
            ignored: false,
            reloader_match: false,
            labels: BTreeMap::new(),
        };
        tracker.apply(crate::tracker::Change::Config(scope, Event::Apply(meta)));
    };
    let mut tracker = Tracker::new(&[WorkloadKind::DEPLOYMENT], None);
    let mut restore = RestoreInFlight::new([app.clone(), db.clone()]);
    assert!(restore.touches(&app_refs()));
    let other = refs::discover(
        "ns",
        &BTreeMap::new(),
        &template(json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "other"}}]}]})),
    );
    assert!(
        !restore.touches(&other),
        "a workload using neither object does not wait"
    );

    watch(&mut tracker, &app, "10");
    watch(&mut tracker, &db, "11");
    restore.written(&app, version("20"));
    assert!(!restore.seen(&tracker), "the Secret is not written yet");
    watch(&mut tracker, &app, "20");
    assert!(
        !restore.seen(&tracker),
        "written, but the watch shows only the ConfigMap's write"
    );
    restore.written(&db, version("21"));
    assert!(!restore.seen(&tracker));
    watch(&mut tracker, &db, "21");
    assert!(restore.seen(&tracker));
    watch(&mut tracker, &db, "22");
    assert!(
        !restore.seen(&tracker),
        "a later write is not taken for the restore's: versions are only compared for equality"
    );
}

#[test]
fn a_restore_never_writes_outside_the_workloads_namespace_even_for_a_matching_entry() {
    // The reproduction: a snapshot taken when `db` was the workload's own, and a template that now
    // names `victim/db` (no clash, so its entry would be bare `db` too).
    let t = template(json!({"containers": [{"name": "c"}]}));
    let extra = BTreeMap::from([(names::EXTRA_SECRETS.to_string(), "victim/db".to_string())]);
    let refs = refs::discover("ns", &extra, &t);
    let mut snap = Snapshot::default();
    snap.secrets.insert(
        "db".into(),
        BTreeMap::from([("password".into(), "cHduZWQ=".into())]),
    );
    assert_eq!(restore_plan("ns", &refs, &snap), []);
}

#[test]
fn a_restore_is_in_an_object_only_with_its_values_and_for_a_whole_one_no_other_key() {
    use base64::Engine as _;
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let values = BTreeMap::from([("level".to_string(), b64("v1"))]);
    let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
    let content = |pairs: &[(&str, &str)]| {
        crate::hash::Content::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        )
    };
    let whole = Restore {
        key: key.clone(),
        whole: true,
        values: &values,
    };
    let partial = Restore {
        key,
        whole: false,
        values: &values,
    };
    assert!(whole.is_in(&content(&[("level", "v1")])));
    assert!(!whole.is_in(&content(&[("level", "v2")])), "another value");
    assert!(
        !whole.is_in(&content(&[("level", "v1"), ("extra", "x")])),
        "a key it removes"
    );
    assert!(
        partial.is_in(&content(&[("level", "v1"), ("extra", "x")])),
        "a key it keeps"
    );
    assert!(!partial.is_in(&content(&[("extra", "x")])), "its key missing");
}
