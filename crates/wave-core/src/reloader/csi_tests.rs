use crate::names::reloader as names;
use serde_json::json;

use super::*;
use crate::reloader::testing::{candidates, reloader_workload};
use crate::reloader::{Options, env_var_name, selection, targets};

fn id(name: &str) -> StatusRef {
    StatusRef {
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn status(objects: Option<&[(&str, &str)]>) -> ProviderStatus {
    ProviderStatus {
        id: id("web-0-ns-vault-db"),
        class: "vault-db".into(),
        objects: objects.map(|list| {
            list.iter()
                .map(|(id, v)| (id.to_string(), v.to_string()))
                .collect()
        }),
        resource_version: "7".into(),
        labels: Default::default(),
    }
}

#[test]
fn the_sha_is_reloaders_over_the_objects_ids_versions_and_the_class_name() {
    // Expected values printed by another implementation of Reloader's rule: Python's hashlib over
    // "SecretProviderClassName=vault-db;secret/api=7;secret/db=v1" (sorted, joined with ';').
    let before = status(Some(&[("secret/db", "v1"), ("secret/api", "7")]));
    assert_eq!(before.sha(), "225e67fcd27634aed54915d5c7985471ff3cfa31");
    let rotated = status(Some(&[("secret/db", "v2"), ("secret/api", "7")]));
    assert_eq!(rotated.sha(), "e7d8519873104fa0e493fb6dd79500f1f1d9efbb");
    assert_eq!(status(None).sha(), "1614effc0230aca4ac64801f4d1ec246d8b42938");
    assert_eq!(status(Some(&[])).sha(), status(None).sha());
}

#[test]
fn a_status_is_read_from_its_json_and_fields_of_the_wrong_type_read_as_absent() {
    let json = json!({"secretProviderClassName": "vault-db", "podName": "web-0", "mounted": true,
        "objects": [{"id": "secret/db", "version": "v1"}, {"id": "secret/api"}]});
    let read = provider_status(id("s"), "9".into(), Default::default(), Some(&json));
    assert_eq!(
        read.class_key(),
        ConfigKey::new(ConfigKind::SecretProviderClass, "ns", "vault-db")
    );
    assert_eq!(
        read.objects,
        Some(vec![
            ("secret/db".to_string(), "v1".to_string()),
            ("secret/api".to_string(), String::new())
        ])
    );
    let no_objects = provider_status(
        id("s"),
        "9".into(),
        Default::default(),
        Some(&json!({"secretProviderClassName": "x"})),
    );
    assert_eq!(no_objects.objects, None);
    assert_eq!(
        provider_status(id("s"), "9".into(), Default::default(), None).class,
        ""
    );
    let garbage = json!({"secretProviderClassName": 7, "objects": "nope"});
    let read = provider_status(id("s"), "9".into(), Default::default(), Some(&garbage));
    assert_eq!((read.class.as_str(), read.objects), ("", None));
}

fn csi_spec() -> serde_json::Value {
    json!({"containers": [
            {"name": "sidecar"},
            {"name": "app", "volumeMounts": [{"name": "secrets", "mountPath": "/mnt"}]}],
        "volumes": [{"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io",
            "volumeAttributes": {"secretProviderClass": "vault-db"}}}]})
}

fn class(name: &str) -> ConfigKey {
    ConfigKey::new(ConfigKind::SecretProviderClass, "ns", name)
}

#[test]
fn a_mounted_class_reloads_through_the_container_mounting_it_only_with_csi_integration_on() {
    let w = reloader_workload(&[(names::SECRET_PROVIDER_CLASS_AUTO, "true")], csi_spec());
    assert!(
        selection(&w, &Options::default()).is_none(),
        "without --enable-csi-integration"
    );
    let options = Options {
        csi: true,
        ..Options::default()
    };
    let sel = selection(&w, &options).expect("selected");
    assert!(sel.needs(&w).keys.contains(&class("vault-db")));
    let found = targets(&w, &sel, &candidates(&[class("vault-db"), class("other")]));
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].key.clone(), found[0].container.as_str()),
        (class("vault-db"), "app")
    );
    assert_eq!(
        env_var_name(ConfigKind::SecretProviderClass, "vault-db"),
        "STAKATER_VAULT_DB_SECRETPROVIDERCLASS"
    );
}

#[test]
fn auto_covers_classes_and_exclude_and_reload_by_name_work_as_for_secrets() {
    let options = Options {
        csi: true,
        ..Options::default()
    };
    let auto = reloader_workload(&[(names::AUTO, "true")], csi_spec());
    let sel = selection(&auto, &options).expect("selected");
    assert_eq!(targets(&auto, &sel, &candidates(&[class("vault-db")])).len(), 1);

    let excluded = reloader_workload(
        &[
            (names::AUTO, "true"),
            (names::SECRET_PROVIDER_CLASS_EXCLUDE, "vault-db"),
        ],
        csi_spec(),
    );
    let sel = selection(&excluded, &options).expect("selected");
    assert!(targets(&excluded, &sel, &candidates(&[class("vault-db")])).is_empty());

    // Named, a class reloads through the first container even when no volume mounts it.
    let named = reloader_workload(
        &[(names::SECRET_PROVIDER_CLASS_RELOAD, "vault-.*")],
        json!({"containers": [{"name": "only"}]}),
    );
    let sel = selection(&named, &options).expect("selected");
    let found = targets(&named, &sel, &candidates(&[class("vault-api"), class("other")]));
    assert_eq!(
        found.iter().map(|t| t.key.clone()).collect::<Vec<_>>(),
        vec![class("vault-api")]
    );
    assert_eq!(found[0].container, "only");
}
