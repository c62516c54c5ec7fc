use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::hash::Content;
use crate::names::reloader as names;
use crate::refs::{ConfigKey, ConfigKind};
use crate::reloader::testing::*;
use crate::reloader::*;
use crate::workload::Workload;

fn plan_for(w: &Workload, data: &str, seen: &BTreeMap<ConfigKey, String>, strategy: Strategy) -> Decision {
    let sel = selection(w, &Options::default()).unwrap();
    let t = targets(w, &sel, &candidates(&[cm("app")]));
    let fetched: Fetched = [(cm("app"), Arc::new(content(&[("k", data)])))].into();
    let options = Options {
        strategy,
        ..Options::default()
    };
    plan(w, &t, &fetched, &options, seen, 1_700_000_000)
}

#[test]
fn a_workload_whose_env_var_matches_the_config_is_not_written() {
    let current = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let d = plan_for(
        &env_workload(Some(&current)),
        "v1",
        &BTreeMap::new(),
        Strategy::EnvVars,
    );
    assert!(d.marks.is_empty());
    assert_eq!(d.observed.get(&cm("app")), Some(&current));
}

#[test]
fn a_change_made_while_nobody_watched_is_caught_from_the_env_var() {
    let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let d = plan_for(
        &env_workload(Some(&old)),
        "v2",
        &BTreeMap::new(),
        Strategy::EnvVars,
    );
    assert_eq!(
        d.marks,
        vec![Mark::EnvVar {
            container: "c".into(),
            name: "STAKATER_APP_CONFIGMAP".into(),
            value: sha(ConfigKind::ConfigMap, &content(&[("k", "v2")])),
        }]
    );
}

#[test]
fn an_object_never_reloaded_is_recorded_at_first_sight_and_written_once_it_changes() {
    let w = env_workload(None);
    let first = plan_for(&w, "v1", &BTreeMap::new(), Strategy::EnvVars);
    assert!(
        first.marks.is_empty(),
        "Reloader writes nothing for config that has not changed"
    );
    let later = plan_for(&w, "v2", &first.observed, Strategy::EnvVars);
    assert_eq!(later.marks.len(), 1);
    assert_eq!(later.changed, vec![cm("app")]);
}

#[test]
fn the_annotation_strategy_compares_with_the_object_last_reloaded_from_names() {
    let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let mut w = env_workload(None);
    let source = ReloadSource {
        type_: "CONFIGMAP".into(),
        name: "app".into(),
        namespace: "ns".into(),
        hash: old,
        container_refs: vec!["c".into()],
        observed_at: 1,
    };
    w.template.edit(|t| {
        t.metadata = Some(
            serde_json::from_value(json!({"annotations": {
                (names::LAST_RELOADED_FROM): serde_json::to_string(&source).unwrap()
            }}))
            .unwrap(),
        );
    });
    assert!(
        plan_for(&w, "v1", &BTreeMap::new(), Strategy::Annotations)
            .marks
            .is_empty()
    );
    let d = plan_for(&w, "v2", &BTreeMap::new(), Strategy::Annotations);
    let [Mark::Annotation(written)] = d.marks.as_slice() else {
        panic!("one annotation: {:?}", d.marks)
    };
    assert_eq!(written.hash, sha(ConfigKind::ConfigMap, &content(&[("k", "v2")])));
    assert_eq!(written.observed_at, 1_700_000_000);
    assert_eq!(written.container_refs, ["c"]);
}

#[test]
fn ignored_objects_are_recorded_but_never_written() {
    let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let w = env_workload(Some(&old));
    let sel = selection(&w, &Options::default()).unwrap();
    let t = targets(&w, &sel, &candidates(&[cm("app")]));
    let mut c = content(&[("k", "v2")]);
    c.reloader_ignored = true;
    let fetched: Fetched = [(cm("app"), Arc::new(c))].into();
    let d = plan(&w, &t, &fetched, &Options::default(), &BTreeMap::new(), 0);
    assert!(d.marks.is_empty());
    assert_eq!(d.observed.len(), 1);
}

fn lifecycle_plan(
    w: &Workload,
    lifecycle: Lifecycle,
    data: Option<&str>,
    strategy: Strategy,
    seen: &BTreeMap<ConfigKey, String>,
) -> Decision {
    since_plan(w, SinceCreation::Unknown, lifecycle, data, strategy, seen)
}

fn since_plan(
    w: &Workload,
    since_creation: SinceCreation,
    lifecycle: Lifecycle,
    data: Option<&str>,
    strategy: Strategy,
    seen: &BTreeMap<ConfigKey, String>,
) -> Decision {
    let target = Target {
        key: cm("app"),
        container: "c".into(),
        lifecycle,
        since_creation,
    };
    let fetched: Fetched = data
        .map(|d| (cm("app"), Arc::new(content(&[("k", d)]))))
        .into_iter()
        .collect();
    let options = Options {
        strategy,
        reload_on_create: true,
        reload_on_delete: true,
        ..Options::default()
    };
    plan(w, &[target], &fetched, &options, seen, 7)
}

#[test]
fn with_reload_on_create_an_object_created_while_watched_reloads_at_first_sight() {
    let w = env_workload(None);
    let d = lifecycle_plan(
        &w,
        Lifecycle::Created,
        Some("v1"),
        Strategy::EnvVars,
        &BTreeMap::new(),
    );
    assert_eq!(d.marks.len(), 1, "created counts as a change from no data");
    let d = lifecycle_plan(
        &w,
        Lifecycle::Existing,
        Some("v1"),
        Strategy::EnvVars,
        &BTreeMap::new(),
    );
    assert!(d.marks.is_empty(), "there at the first list: only recorded");
}

#[test]
fn with_reload_on_delete_a_deleted_object_s_env_var_goes_or_the_annotation_names_it_with_no_data() {
    let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let d = lifecycle_plan(
        &env_workload(Some(&old)),
        Lifecycle::Deleted,
        None,
        Strategy::EnvVars,
        &BTreeMap::new(),
    );
    assert_eq!(
        d.marks,
        vec![Mark::RemoveEnvVar {
            container: "c".into(),
            name: "STAKATER_APP_CONFIGMAP".into()
        }]
    );
    let body = patch_body(&env_workload(Some(&old)), &d.marks);
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["env"][0],
        json!({"name": "STAKATER_APP_CONFIGMAP", "$patch": "delete"})
    );
    // Once it is gone from the workload, nothing more is written.
    let d = lifecycle_plan(
        &env_workload(None),
        Lifecycle::Deleted,
        None,
        Strategy::EnvVars,
        &d.observed,
    );
    assert!(d.marks.is_empty());

    let seen = BTreeMap::from([(cm("app"), old)]);
    let d = lifecycle_plan(
        &env_workload(None),
        Lifecycle::Deleted,
        None,
        Strategy::Annotations,
        &seen,
    );
    let [Mark::Annotation(source)] = d.marks.as_slice() else {
        panic!("one annotation: {:?}", d.marks)
    };
    assert_eq!(source.hash, EMPTY_SHA);
    assert_eq!(EMPTY_SHA, sha(ConfigKind::ConfigMap, &Content::default()));
}

#[test]
fn a_workload_created_while_watched_reloads_for_data_written_after_its_creation_only() {
    let none = BTreeMap::new();
    for strategy in [Strategy::EnvVars, Strategy::Annotations] {
        let changed = since_plan(
            &env_workload(None),
            SinceCreation::Changed,
            Lifecycle::Existing,
            Some("v2"),
            strategy,
            &none,
        );
        assert_eq!(
            changed.marks.len(),
            1,
            "{strategy}: its pods started with other data"
        );
        let unchanged = since_plan(
            &env_workload(None),
            SinceCreation::Unchanged,
            Lifecycle::Created,
            Some("v1"),
            strategy,
            &none,
        );
        assert!(
            unchanged.marks.is_empty(),
            "{strategy}: written before the workload, even if created while wave watched: its starting point"
        );
        assert_eq!(unchanged.observed.len(), 1, "and recorded as such");
    }
    // Created after the workload: a change from no data under reload-on-create only.
    let created = since_plan(
        &env_workload(None),
        SinceCreation::Created,
        Lifecycle::Created,
        Some("v1"),
        Strategy::EnvVars,
        &none,
    );
    assert_eq!(created.marks.len(), 1);
    let target = Target {
        key: cm("app"),
        container: "c".into(),
        lifecycle: Lifecycle::Created,
        since_creation: SinceCreation::Created,
    };
    let fetched: Fetched = [(cm("app"), Arc::new(content(&[("k", "v1")])))].into();
    let quiet = plan(
        &env_workload(None),
        &[target],
        &fetched,
        &Options::default(),
        &none,
        7,
    );
    assert!(
        quiet.marks.is_empty(),
        "without reload-on-create, its pods started with it"
    );
}

#[test]
fn what_wave_read_before_a_change_still_decides_for_a_workload_created_while_watched() {
    // The first reconcile read v1 (written before the creation); v2 came after: one reload, for v2.
    let v1 = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let seen = BTreeMap::from([(cm("app"), v1.clone())]);
    let d = since_plan(
        &env_workload(None),
        SinceCreation::Changed,
        Lifecycle::Existing,
        Some("v2"),
        Strategy::EnvVars,
        &seen,
    );
    assert_eq!(d.marks.len(), 1);
    // Written again with the same data (a label, say): the SHA-1 wave read decides, nothing is written.
    let d = since_plan(
        &env_workload(None),
        SinceCreation::Changed,
        Lifecycle::Existing,
        Some("v1"),
        Strategy::EnvVars,
        &seen,
    );
    assert!(d.marks.is_empty());
}

#[test]
fn with_reload_on_delete_an_object_deleted_after_a_watched_creation_is_named_with_no_data() {
    let d = since_plan(
        &env_workload(None),
        SinceCreation::Changed,
        Lifecycle::Deleted,
        None,
        Strategy::Annotations,
        &BTreeMap::new(),
    );
    let [Mark::Annotation(source)] = d.marks.as_slice() else {
        panic!("one annotation: {:?}", d.marks)
    };
    assert_eq!(source.hash, EMPTY_SHA);
    // Under env-vars a workload that carries no env var for it has nothing to remove, as in Reloader.
    let d = since_plan(
        &env_workload(None),
        SinceCreation::Changed,
        Lifecycle::Deleted,
        None,
        Strategy::EnvVars,
        &BTreeMap::new(),
    );
    assert!(d.marks.is_empty());
}

#[test]
fn under_webhook_url_a_mark_the_workload_carries_is_no_starting_point_but_what_wave_saw_is() {
    let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
    let w = env_workload(Some(&old));
    let sel = selection(&w, &Options::default()).unwrap();
    let t = targets(&w, &sel, &candidates(&[cm("app")]));
    let fetched: Fetched = [(cm("app"), Arc::new(content(&[("k", "v2")])))].into();
    let options = Options {
        notify_only: true,
        ..Options::default()
    };
    // After a restart: the stale mark from before says nothing, so nothing is posted again.
    let first = plan(&w, &t, &fetched, &options, &BTreeMap::new(), 1_700_000_000);
    assert!(first.changed.is_empty());
    let now = first.observed.get(&cm("app")).cloned().unwrap();
    // A change from what wave saw is one.
    let seen: BTreeMap<ConfigKey, String> = [(cm("app"), old)].into();
    let second = plan(&w, &t, &fetched, &options, &seen, 1_700_000_000);
    assert_eq!(second.changed, vec![cm("app")]);
    assert_eq!(second.observed.get(&cm("app")), Some(&now));
}
