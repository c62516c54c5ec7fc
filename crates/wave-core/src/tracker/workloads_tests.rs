use crate::names;
use crate::tracker::testing::*;
use crate::tracker::*;

#[test]
fn a_change_of_rollout_progress_is_reported_as_progress_without_waking_the_workload() {
    let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![]);
    let mut w = uses_cm("a", "x");
    w.resource_version = "2".into();
    let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())));
    assert!(fx.progressed.is_empty(), "nothing that pacing reads changed");
    w.progress.updated = 1;
    let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())));
    assert_eq!(fx.progressed, [w.id.clone()]);
    assert!(fx.enqueue.is_empty(), "status alone wakes no reconcile");
    let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Delete(w.clone())));
    assert_eq!(fx.progressed, [w.id], "a deleted workload frees its slot");
}

#[test]
fn status_only_updates_wake_nothing_but_spec_and_annotation_changes_do() {
    let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![]);
    let mut w = uses_cm("a", "x");
    w.resource_version = "2".into();
    assert!(
        t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())))
            .enqueue
            .is_empty()
    );
    w.generation = 2;
    assert_eq!(
        names_of(&t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())))),
        ["a"]
    );
    w.annotations.insert(names::EXTRA_CONFIGMAPS.into(), "z".into());
    assert_eq!(
        names_of(&t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w)))),
        ["a"]
    );
}

#[test]
fn deleting_a_workload_cleans_its_index_entries() {
    let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![cm_meta("x", "1")]);
    let fx = t.apply(Change::Workload(
        scope(DEPLOYMENTS),
        Event::Delete(uses_cm("a", "x")),
    ));
    assert_eq!(fx.evict, vec![cm_meta("x", "1").key]);
    assert_eq!(
        names_of_deleted(&fx),
        ["a"],
        "what was remembered about it is forgotten"
    );
    assert_eq!(t.index().workload_count(), 0);
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "2"))));
    assert!(fx.enqueue.is_empty());
}

#[test]
fn opting_out_drops_the_index_entries_and_later_changes_wake_nothing() {
    let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![cm_meta("x", "1")]);
    let mut w = uses_cm("a", "x");
    w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
    let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w)));
    assert!(fx.enqueue.is_empty(), "an opted-out workload is never written");
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "2"))));
    assert!(fx.enqueue.is_empty());
}

#[test]
fn every_workload_that_appears_changes_for_the_census_or_goes_is_observed_opted_in_or_not() {
    let mut t = Tracker::new(&WorkloadKind::BUILT_IN, None);
    let deployments = scope(DEPLOYMENTS);
    t.apply(Change::Workload(deployments.clone(), Event::Init));
    let mut w = uses_cm("a", "x");
    let fx = t.apply(Change::Workload(deployments.clone(), Event::InitApply(w.clone())));
    assert_eq!(fx.observed, [w.id.clone()], "before the first list too");
    w.resource_version = "2".into();
    let fx = t.apply(Change::Workload(deployments.clone(), Event::Apply(w.clone())));
    assert!(fx.observed.is_empty(), "nothing the census reads changed");
    w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
    w.annotations.insert(names::ROLLOUT_FAILED.into(), "{}".into());
    let fx = t.apply(Change::Workload(deployments.clone(), Event::Apply(w.clone())));
    assert!(fx.progressed.is_empty());
    assert_eq!(
        fx.observed,
        [w.id.clone()],
        "opted out, it still counts in the census"
    );
    let fx = t.apply(Change::Workload(deployments, Event::Delete(w.clone())));
    assert_eq!(fx.observed, [w.id]);
}
