use std::collections::{BTreeMap, BTreeSet};

use crate::refs::{ConfigKey, ConfigKind};
use crate::selector::LabelSelector;
use crate::tracker::testing::*;
use crate::tracker::*;
use crate::workload::WorkloadKind;

#[test]
fn nothing_is_enqueued_before_every_scope_listed_then_everything_once() {
    let mut t = Tracker::new(&WorkloadKind::BUILT_IN, None);
    let fx = t.apply(Change::Workload(
        scope(DEPLOYMENTS),
        Event::Apply(uses_cm("a", "x")),
    ));
    assert!(fx.enqueue.is_empty() && !t.is_ready());
    let (t, fx) = synced(vec![uses_cm("a", "x"), uses_cm("b", "y")], vec![]);
    assert!(t.is_ready() && fx.became_ready);
    assert_eq!(names_of(&fx), ["a", "b"]);
}

#[test]
fn relist_deletes_what_was_not_seen_and_wakes_only_what_changed() {
    let (mut t, _) = synced(
        vec![uses_cm("a", "x"), uses_cm("b", "y")],
        vec![cm_meta("x", "1"), cm_meta("y", "1")],
    );
    // A 410 makes the config watch relist: x unchanged, y gone.
    t.apply(Change::Config(scope(CONFIGMAPS), Event::Init));
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::InitApply(cm_meta("x", "1")),
    ));
    assert!(fx.enqueue.is_empty());
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::InitDone));
    assert_eq!(names_of(&fx), ["b"]);
    assert!(t.config(&cm_meta("y", "1").key).is_none());
    // The workload watch relists without b: b is forgotten.
    t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Init));
    t.apply(Change::Workload(
        scope(DEPLOYMENTS),
        Event::InitApply(uses_cm("a", "x")),
    ));
    let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::InitDone));
    assert!(fx.enqueue.is_empty(), "a, seen again unchanged, is not woken");
    assert!(t.workload(&uses_cm("b", "y").id).is_none());
}

#[test]
fn namespaced_scopes_only_prune_their_own_namespace() {
    let ns: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
    let mut t = Tracker::new(&WorkloadKind::BUILT_IN, Some(&ns));
    assert_eq!(t.scopes().len(), 10);
    let scope_a = Scope {
        resource: CONFIGMAPS,
        namespace: Some("a".into()),
    };
    let scope_b = Scope {
        resource: CONFIGMAPS,
        namespace: Some("b".into()),
    };
    let meta = |ns: &str| ConfigMeta {
        key: ConfigKey::new(ConfigKind::ConfigMap, ns, "x"),
        version: ObjectVersion {
            uid: "u".into(),
            resource_version: "1".into(),
        },
        owners: Vec::new(),
        ignored: false,
        reloader_match: false,
        labels: BTreeMap::new(),
    };
    t.apply(Change::Config(scope_b.clone(), Event::Apply(meta("b"))));
    t.apply(Change::Config(scope_a.clone(), Event::Init));
    t.apply(Change::Config(scope_a, Event::InitDone));
    assert!(
        t.config(&meta("b").key).is_some(),
        "scope a's relist must not prune namespace b"
    );
    assert!(t.watches_namespace("a") && !t.watches_namespace("c"));
    assert!(!t.is_ready());
}

#[test]
fn a_namespace_relist_deselects_the_namespaces_it_no_longer_shows() {
    let ns_scope = Scope {
        resource: Resource::Namespace,
        namespace: None,
    };
    let namespace = |name: &str| NamespaceMeta {
        name: name.into(),
        labels: BTreeMap::from([("team".to_string(), "a".to_string())]),
    };
    let t = Tracker::new(&WorkloadKind::BUILT_IN, None)
        .selecting_namespaces(LabelSelector::parse("team=a").unwrap());
    let (mut t, _) = synced_from(t, vec![], vec![]);
    t.apply(Change::Namespace(
        ns_scope.clone(),
        Event::Apply(namespace("kept")),
    ));
    t.apply(Change::Namespace(
        ns_scope.clone(),
        Event::Apply(namespace("gone")),
    ));
    assert_eq!(t.selected_namespace_count(), 2);
    // A 410 makes the namespace watch relist: "gone" was deleted meanwhile.
    t.apply(Change::Namespace(ns_scope.clone(), Event::Init));
    t.apply(Change::Namespace(
        ns_scope.clone(),
        Event::InitApply(namespace("kept")),
    ));
    assert_eq!(
        t.selected_namespace_count(),
        2,
        "nothing is forgotten before the relist ends"
    );
    t.apply(Change::Namespace(ns_scope, Event::InitDone));
    assert!(t.selects_namespace("kept") && !t.selects_namespace("gone"));
    assert_eq!(t.selected_namespace_count(), 1);
}
