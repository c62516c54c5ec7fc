//! Bad input, generated: annotations, manifests for `wave hash`, and admitted objects of any shape. No
//! panic, and every rejection explains itself. Plus the sizes at the edges: a 1 MiB Secret, a
//! 10,000-entry `extra-configmaps`, non-UTF-8 `binaryData`, and names at the apiserver's length limits.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use serde_json::{Value, json};
use wave_core::admission::{self, Operation};
use wave_core::hash::{self, Content, Fetched, Hashing};
use wave_core::kind::WorkloadKind;
use wave_core::manifest;
use wave_core::names;
use wave_core::refs::{self, ConfigKey, ConfigKind, CrossNamespace};
use wave_core::workload::Workload;

/// Text that looks like what people put in annotations: names, namespaces, separators, spaces,
/// unicode, and the odd control character.
fn annotation_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-z0-9.-]{0,20}",
        Just(",".to_string()),
        Just("/".to_string()),
        Just(" ".to_string()),
        Just("".to_string()),
        any::<String>(),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|p| p.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        "[a-zA-Z]{1,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        let key = prop_oneof![
            Just("containers".to_string()),
            Just("volumes".to_string()),
            Just("env".to_string()),
            Just("envFrom".to_string()),
            Just("configMap".to_string()),
            Just("secretRef".to_string()),
            Just("name".to_string()),
            Just("spec".to_string()),
            Just("metadata".to_string()),
            Just("annotations".to_string()),
            "[a-zA-Z]{1,8}",
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn meta(namespace: &str, name: &str, annotations: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        annotations: Some(annotations),
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_extra_annotation_is_either_a_reference_or_a_named_skip(
        cms in annotation_text(),
        secrets in annotation_text(),
        opt_in in annotation_text(),
    ) {
        let annotations = BTreeMap::from([
            (names::EXTRA_CONFIGMAPS.to_string(), cms.clone()),
            (names::EXTRA_SECRETS.to_string(), secrets.clone()),
            (names::UPDATE_ON_CONFIG_CHANGE.to_string(), opt_in.clone()),
        ]);
        let refs = refs::discover("team-a", &annotations, &PodTemplateSpec::default());
        // Every comma-separated entry is accounted for, once.
        let entries = cms.split(',').count() + secrets.split(',').count();
        prop_assert_eq!(refs.iter().count() + refs.skipped.len(), entries);
        for r in refs.iter() {
            prop_assert!(!r.key.name.is_empty() && !r.key.namespace.is_empty());
            prop_assert!(!r.required, "extra references are optional");
        }
        for skipped in &refs.skipped {
            prop_assert!(skipped.contains("names no object"), "{}", skipped);
        }
        prop_assert_eq!(refs::is_opted_in(&annotations), opt_in == "true");
        // Whatever was referenced, the hash can be computed.
        let h = hash::config_hash("team-a", &refs, &Fetched::new(), &Hashing::Plain);
        prop_assert_eq!(h.len(), 64);
    }

    #[test]
    fn any_text_given_to_wave_hash_parses_or_says_where_it_is_wrong(text in any::<String>()) {
        match manifest::parse(&text) {
            Ok(m) => {
                // Whatever parsed can be hashed (or rejected with a message) and rendered.
                match manifest::hash_all(&m, "default", true, &Hashing::Plain, CrossNamespace::Deny) {
                    Ok(_) => {}
                    Err(e) => prop_assert!(!e.to_string().is_empty()),
                }
                let _ = manifest::render(&m);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn manifests_built_from_plausible_lines_never_panic(
        lines in proptest::collection::vec(prop_oneof![
            Just("---"), Just("apiVersion: apps/v1"), Just("apiVersion: v1"), Just("kind: Deployment"),
            Just("kind: ConfigMap"), Just("kind: Secret"), Just("kind: List"), Just("items: [1, {}]"),
            Just("metadata:"), Just("  name: app"), Just("  namespace: x/y"), Just("  annotations:"),
            Just("    wave.pusher.com/update-on-config-change: \"true\""),
            Just("    wave.pusher.com/extra-configmaps: a,,b/,/c"), Just("spec:"), Just("  template: 3"),
            Just("  template:"), Just("    spec: {containers: [{name: a, envFrom: [{configMapRef: {}}]}]}"),
            Just("data: {k: v}"), Just("stringData: {pin: 987654}"), Just("binaryData: {b: '!!'}"),
            Just("  selector: null"), Just("- a"), Just(": :"), Just("\t"),
        ], 0..24),
    ) {
        let text = lines.join("\n");
        if let Ok(m) = manifest::parse(&text)
            && let Err(e) = manifest::hash_all(&m, "default", false, &Hashing::Plain, CrossNamespace::Deny)
        {
            prop_assert!(!e.to_string().is_empty());
            prop_assert!(!e.to_string().contains("987654"), "a Secret value leaked: {}", e);
        }
    }

    #[test]
    fn an_admitted_object_of_any_shape_is_decided_or_refused_without_panicking(
        body in json_value(),
        template in json_value(),
        annotations in proptest::collection::btree_map(
            prop_oneof![
                Just(names::UPDATE_ON_CONFIG_CHANGE.to_string()),
                Just(names::EXTRA_CONFIGMAPS.to_string()),
                Just(names::EXTRA_SECRETS.to_string()),
                Just(names::CONFIG_HASH.to_string()),
                Just(names::GATED_AT.to_string()),
                "[a-z./-]{1,20}",
            ],
            annotation_text(),
            0..5,
        ),
    ) {
        for kind in WorkloadKind::BUILT_IN {
            for candidate in [body.clone(), json!({"spec": {"template": template.clone()}})] {
                let Ok(w) = Workload::from_object(kind, meta("ns", "w", annotations.clone()), &candidate) else {
                    continue;
                };
                let refs = w.references(CrossNamespace::Deny);
                for operation in [Operation::Create, Operation::Update] {
                    let m = admission::decide(&w, &refs, &Fetched::new(), operation, &Hashing::Plain);
                    let ops = admission::patch_ops(&w, &m, "2026-11-23T00:00:00Z");
                    prop_assert!(serde_json::from_value::<json_patch::Patch>(Value::Array(ops)).is_ok());
                }
            }
        }
    }
}

#[test]
fn a_one_mebibyte_secret_is_hashed_and_its_value_never_printed() {
    let value = vec![b'x'; 1 << 20];
    let secret = Secret {
        data: Some(BTreeMap::from([("big".to_string(), ByteString(value))])),
        ..Default::default()
    };
    let content = Content::from_secret(&secret);
    assert!(content.contains("big"));
    assert!(!format!("{content:?}").contains("xxxx"), "Debug shows keys only");
    let annotations = BTreeMap::from([(names::EXTRA_SECRETS.to_string(), "big-secret".to_string())]);
    let refs = refs::discover("ns", &annotations, &PodTemplateSpec::default());
    let mut fetched = Fetched::new();
    fetched.insert(
        ConfigKey::new(ConfigKind::Secret, "ns", "big-secret"),
        Arc::new(content),
    );
    let source = hash::hash_source("ns", &refs, &fetched);
    assert!(
        source.as_bytes().len() > 1 << 20,
        "the value is in the hash source"
    );
    assert_ne!(
        hash::config_hash("ns", &refs, &fetched, &Hashing::Plain),
        hash::config_hash("ns", &refs, &Fetched::new(), &Hashing::Plain)
    );
}

#[test]
fn ten_thousand_extra_configmaps_are_each_referenced_once() {
    let value: Vec<String> = (0..10_000).map(|i| format!("cm-{i}")).collect();
    let annotations = BTreeMap::from([(names::EXTRA_CONFIGMAPS.to_string(), value.join(","))]);
    let refs = refs::discover("ns", &annotations, &PodTemplateSpec::default());
    assert_eq!(refs.iter().count(), 10_000);
    assert_eq!(refs.keys().len(), 10_000);
    assert!(refs.skipped.is_empty());
    assert_eq!(
        hash::config_hash("ns", &refs, &Fetched::new(), &Hashing::Plain).len(),
        64
    );
}

#[test]
fn non_utf8_binary_data_is_hashed_as_bytes() {
    let cm = ConfigMap {
        binary_data: Some(BTreeMap::from([(
            "blob".to_string(),
            ByteString(vec![0xff, 0xfe, 0x00, 0x80]),
        )])),
        ..Default::default()
    };
    let annotations = BTreeMap::from([(names::EXTRA_CONFIGMAPS.to_string(), "bin".to_string())]);
    let refs = refs::discover("ns", &annotations, &PodTemplateSpec::default());
    let mut fetched = Fetched::new();
    fetched.insert(
        ConfigKey::new(ConfigKind::ConfigMap, "ns", "bin"),
        Arc::new(Content::from_config_map(&cm)),
    );
    let source = hash::hash_source("ns", &refs, &fetched);
    let text = String::from_utf8(source.as_bytes().to_vec()).expect("the source is JSON text");
    assert!(text.contains("\"blob\":\"//4AgA==\""), "{text}");
}

#[test]
fn names_at_the_apiservers_length_limits_are_referenced_and_patched_intact() {
    // A namespace is a DNS label (63), a ConfigMap name a DNS subdomain (253).
    let namespace = "n".repeat(63);
    let name = format!("{}.{}", "a".repeat(126), "b".repeat(126));
    assert_eq!(name.len(), 253);
    let annotations = BTreeMap::from([
        (names::UPDATE_ON_CONFIG_CHANGE.to_string(), "true".to_string()),
        (names::EXTRA_CONFIGMAPS.to_string(), format!("{namespace}/{name}")),
    ]);
    let w = Workload::from_object(
        WorkloadKind::DEPLOYMENT,
        meta(&namespace, &name, annotations),
        &json!({"spec": {"template": {"spec": {"containers": []}}}}),
    )
    .unwrap();
    let refs = w.references(CrossNamespace::Deny);
    let key = refs.keys().into_iter().next().unwrap();
    assert_eq!(
        (key.namespace.as_str(), key.name.as_str()),
        (namespace.as_str(), name.as_str())
    );
    let m = admission::decide(&w, &refs, &Fetched::new(), Operation::Create, &Hashing::Plain);
    let ops = admission::patch_ops(&w, &m, "2026-11-23T00:00:00Z");
    assert_eq!(ops.len(), 1, "the hash is set: {ops:?}");
}
