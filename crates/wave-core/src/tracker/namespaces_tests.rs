use std::collections::{BTreeMap, BTreeSet};

use crate::selector::LabelSelector;
use crate::tracker::testing::*;
use crate::tracker::*;
use crate::workload::WorkloadKind;

#[test]
fn nothing_in_an_ignored_namespace_is_tracked_or_counts_as_watched() {
    let mut t = Tracker::new(&WorkloadKind::BUILT_IN, None).ignoring(BTreeSet::from(["quiet".to_string()]));
    let mut w = uses_cm("a", "x");
    w.id.namespace = "quiet".into();
    t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())));
    assert!(t.workload(&w.id).is_none());
    assert!(!t.watches_namespace("quiet") && t.watches_namespace("ns"));
}

#[test]
fn only_workloads_in_selected_namespaces_are_enqueued_and_labelling_one_brings_it_in() {
    let ns_scope = Scope {
        resource: Resource::Namespace,
        namespace: None,
    };
    let namespace = |name: &str, team: &str| NamespaceMeta {
        name: name.into(),
        labels: BTreeMap::from([("team".to_string(), team.to_string())]),
    };
    let t = Tracker::new(&WorkloadKind::BUILT_IN, None)
        .selecting_namespaces(LabelSelector::parse("team=a").unwrap());
    let (mut t, fx) = synced_from(t, vec![uses_cm("w", "cm")], vec![cm_meta("cm", "1")]);
    assert!(
        fx.became_ready && fx.enqueue.is_empty(),
        "not selected: not checked"
    );
    let fx = t.apply(Change::Namespace(
        ns_scope.clone(),
        Event::Apply(namespace("ns", "b")),
    ));
    assert!(fx.enqueue.is_empty());
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("cm", "2")),
    ));
    assert!(fx.enqueue.is_empty(), "not selected: not woken");
    let fx = t.apply(Change::Namespace(
        ns_scope.clone(),
        Event::Apply(namespace("ns", "a")),
    ));
    assert_eq!(names_of(&fx), ["w"], "newly selected: checked");
    assert_eq!(t.selected_namespace_count(), 1);
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("cm", "3")),
    ));
    assert_eq!(names_of(&fx), ["w"]);
    t.apply(Change::Namespace(ns_scope, Event::Apply(namespace("ns", "c"))));
    assert!(!t.selects_namespace("ns"));
    assert!(t.all_to_reconcile().is_empty());
}
