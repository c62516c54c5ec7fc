use serde_json::json;

use crate::names;
use crate::reloader;
use crate::selector::LabelSelector;
use crate::tracker::testing::*;
use crate::tracker::*;
use crate::workload::testing::deployment;
use crate::workload::{Workload, WorkloadKind};

fn reloader_workload(name: &str, annotation: (&str, &str), spec: serde_json::Value) -> Workload {
    let mut w = deployment("ns", name, &[annotation], spec);
    w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
    w
}

#[test]
fn reloader_annotated_workloads_are_tracked_only_with_compatibility_on() {
    let spec = json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]});
    let w = reloader_workload("r", (names::reloader::AUTO, "true"), spec);
    let (mut off, fx) = synced(vec![w.clone()], vec![cm_meta("cm", "1")]);
    assert!(fx.enqueue.is_empty());
    assert!(
        off.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("cm", "2"))
        ))
        .enqueue
        .is_empty()
    );

    let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(reloader::Options::default());
    let (mut on, fx) = synced_from(on, vec![w], vec![cm_meta("cm", "1")]);
    assert_eq!(names_of(&fx), ["r"]);
    let fx = on.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("cm", "2")),
    ));
    assert_eq!(names_of(&fx), ["r"]);
}

#[test]
fn a_reloader_workload_with_a_name_pattern_wakes_on_any_config_change_in_its_namespace() {
    let w = reloader_workload(
        "r",
        (names::reloader::CONFIGMAP_RELOAD, "app-.*"),
        json!({"containers": [{"name": "c"}]}),
    );
    let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(reloader::Options::default());
    let (mut t, _) = synced_from(
        on,
        vec![w.clone()],
        vec![cm_meta("app-1", "1"), cm_meta("other", "1")],
    );
    let needs = t.reloader_selection(&w).unwrap().needs(&w);
    assert_eq!(t.reloader_candidates(&w, &needs).len(), 2);
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("app-2", "1")),
    ));
    assert_eq!(names_of(&fx), ["r"]);
    t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Delete(w)));
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("app-3", "1")),
    ));
    assert!(fx.enqueue.is_empty(), "a deleted workload scans nothing");
}

#[test]
fn a_resource_label_selector_hides_unselected_config_from_reloader_workloads() {
    let spec = json!({"containers": [{"name": "c", "envFrom": [
        {"configMapRef": {"name": "picked"}}, {"configMapRef": {"name": "other"}}]}]});
    let w = reloader_workload("r", (names::reloader::AUTO, "true"), spec);
    let options = reloader::Options {
        resource_selector: Some(LabelSelector::parse("reload=yes").unwrap()),
        ..reloader::Options::default()
    };
    let mut picked = cm_meta("picked", "1");
    picked.labels.insert("reload".into(), "yes".into());
    let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(options);
    let (t, _) = synced_from(on, vec![w.clone()], vec![picked, cm_meta("other", "1")]);
    let needs = t.reloader_selection(&w).unwrap().needs(&w);
    let found: Vec<String> = t
        .reloader_candidates(&w, &needs)
        .into_iter()
        .map(|c| c.key.name)
        .collect();
    assert_eq!(found, ["picked"]);
}

#[test]
fn a_reloader_workload_created_after_the_first_list_dates_its_targets_from_its_creation() {
    let spec = json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]});
    let mut existing = reloader_workload("old", (names::reloader::AUTO, "true"), spec.clone());
    existing.resource_version = "3".into();
    let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(reloader::Options::default());
    let (mut t, _) = synced_from(on, vec![existing.clone()], vec![cm_meta("cm", "5")]);
    let cm = crate::refs::ConfigKey::new(crate::refs::ConfigKind::ConfigMap, "ns", "cm");
    let since = |t: &Tracker, w: &str, read_at| {
        let id = crate::workload::WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", w);
        t.reloader_since_creation(&id, &cm, read_at)
    };
    assert_eq!(
        since(&t, "old", Some("9")),
        reloader::SinceCreation::Unknown,
        "there at the first list: wave's first read is its starting point"
    );

    let mut new = reloader_workload("new", (names::reloader::AUTO, "true"), spec);
    new.resource_version = "10".into();
    t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(new.clone())));
    assert_eq!(since(&t, "new", Some("5")), reloader::SinceCreation::Unchanged);
    assert_eq!(since(&t, "new", Some("11")), reloader::SinceCreation::Changed);
    // Its next events (a status, a new resourceVersion) do not move its creation.
    new.resource_version = "12".into();
    t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(new)));
    assert_eq!(since(&t, "new", Some("11")), reloader::SinceCreation::Changed);
    // An object created after it, and not written since.
    t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("late", "13")),
    ));
    let late = crate::refs::ConfigKey::new(crate::refs::ConfigKind::ConfigMap, "ns", "late");
    let id = crate::workload::WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "new");
    assert_eq!(
        t.reloader_since_creation(&id, &late, Some("13")),
        reloader::SinceCreation::Created
    );
    // Once its first plan is recorded, what wave read is its starting point: the date is forgotten,
    // and so are the creations kept only for it.
    t.settle_reloader_birth(&id);
    assert_eq!(
        t.reloader_since_creation(&id, &cm, Some("11")),
        reloader::SinceCreation::Unknown
    );
    assert!(t.created.is_empty());
}
