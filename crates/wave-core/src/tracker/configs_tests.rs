use crate::tracker::testing::*;
use crate::tracker::*;

#[test]
fn an_ignored_object_wakes_nobody_except_when_it_becomes_or_stops_being_ignored() {
    let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![cm_meta("x", "1")]);
    let mut x = cm_meta("x", "2");
    x.ignored = true;
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(x.clone())));
    assert_eq!(names_of(&fx), ["a"], "becoming ignored changes the hash");
    x.version.resource_version = "3".into();
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(x.clone())));
    assert!(
        fx.enqueue.is_empty() && fx.changed_configs.is_empty(),
        "an ignored change wakes nobody"
    );
    x.version.resource_version = "4".into();
    x.ignored = false;
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(x)));
    assert_eq!(names_of(&fx), ["a"], "no longer ignored: it enters the hash");
}

#[test]
fn config_version_change_wakes_dependents_and_same_version_does_not() {
    let (mut t, _) = synced(
        vec![uses_cm("a", "x"), uses_cm("b", "y")],
        vec![cm_meta("x", "1")],
    );
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "1"))));
    assert!(fx.enqueue.is_empty());
    let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "2"))));
    assert_eq!(names_of(&fx), ["a"]);
    assert!(fx.config_triggered);
    assert!(
        fx.changed_configs.is_empty(),
        "an update is counted by the flap breaker only if its data changed, which the content tells"
    );
}

#[test]
fn creating_a_referenced_object_that_did_not_exist_wakes_the_workload() {
    let (mut t, _) = synced(vec![uses_cm("a", "later")], vec![]);
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("later", "5")),
    ));
    assert_eq!(names_of(&fx), ["a"]);
}
