use serde_json::json;

use crate::names;
use crate::refs::{ConfigKey, ConfigKind};
use crate::reloader::{self, Candidate, Lifecycle, ProviderStatus, StatusRef};
use crate::tracker::testing::*;
use crate::tracker::*;
use crate::workload::testing::deployment;
use crate::workload::{Workload, WorkloadKind};

const STATUSES: Resource = Resource::ProviderStatus;

fn options() -> reloader::Options {
    reloader::Options {
        csi: true,
        reload_on_delete: true,
        reload_on_create: true,
        ..reloader::Options::default()
    }
}

fn mounts(namespace: &str, name: &str, class: &str) -> Workload {
    let mut w = deployment(
        namespace,
        name,
        &[(names::reloader::SECRET_PROVIDER_CLASS_AUTO, "true")],
        json!({"containers": [{"name": "c", "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
               "volumes": [{"name": "s", "csi": {"driver": "secrets-store.csi.k8s.io",
                   "volumeAttributes": {"secretProviderClass": class}}}]}),
    );
    w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
    w
}

fn status(namespace: &str, pod: &str, class: &str, version: &str, rv: &str) -> ProviderStatus {
    ProviderStatus {
        id: StatusRef {
            namespace: namespace.into(),
            name: format!("{pod}-{namespace}-{class}"),
        },
        class: class.into(),
        objects: Some(vec![("secret/db".into(), version.into())]),
        resource_version: rv.into(),
        labels: Default::default(),
    }
}

fn class(namespace: &str, name: &str) -> ConfigKey {
    ConfigKey::new(ConfigKind::SecretProviderClass, namespace, name)
}

fn version_of(t: &Tracker, key: &ConfigKey) -> Option<String> {
    let content = t.provider_class(key)?;
    content
        .value("secret/db")
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// A tracker with CSI statuses followed, whose first list showed `workloads` and `statuses`.
fn with_statuses(workloads: Vec<Workload>, statuses: Vec<ProviderStatus>) -> Tracker {
    let mut t = Tracker::new(&WorkloadKind::BUILT_IN, None)
        .with_reloader(options())
        .with_provider_statuses();
    let scopes = t.scopes().to_vec();
    for s in &scopes {
        t.apply(boundary(s, true));
    }
    for w in workloads {
        t.apply(Change::Workload(scope(DEPLOYMENTS), Event::InitApply(w)));
    }
    for s in statuses {
        apply(&mut t, Event::InitApply(s));
    }
    for s in &scopes {
        t.apply(boundary(s, false));
    }
    assert!(t.is_ready());
    t
}

fn apply(t: &mut Tracker, event: Event<ProviderStatus>) -> Effects {
    t.apply(Change::ProviderStatus(scope(STATUSES), event))
}

#[test]
fn statuses_are_watched_only_where_config_maps_are_and_gate_readiness() {
    let namespaces = std::collections::BTreeSet::from(["a".to_string(), "b".to_string()]);
    let t = Tracker::new(&WorkloadKind::BUILT_IN, Some(&namespaces)).with_provider_statuses();
    let watched: Vec<_> = t
        .scopes()
        .iter()
        .filter(|s| s.resource == STATUSES)
        .map(|s| s.namespace.as_deref())
        .collect();
    assert_eq!(watched, [Some("a"), Some("b")]);
    let classes = Resource::Config(ConfigKind::SecretProviderClass);
    for resource in [STATUSES, classes] {
        let unsynced = t.unsynced().iter().filter(|s| s.resource == resource).count();
        assert_eq!(
            unsynced, 2,
            "{resource:?} in each namespace, before its first list"
        );
    }
}

#[test]
fn a_rotation_wakes_the_workloads_mounting_the_class_and_the_class_holds_what_it_mounted() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault"), mounts("ns", "other", "elsewhere")],
        vec![status("ns", "web-0", "vault", "v1", "10")],
    );
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v1"));
    let fx = apply(&mut t, Event::Apply(status("ns", "web-0", "vault", "v2", "11")));
    assert_eq!(names_of(&fx), ["web"]);
    assert!(fx.config_triggered);
    assert_eq!(
        fx.changed_configs,
        [class("ns", "vault")],
        "the flap breaker counts it"
    );
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v2"));
    assert_eq!(
        t.config(&class("ns", "vault"))
            .map(|v| v.resource_version.as_str()),
        Some("11")
    );

    // The same SHA-1 written again (a label, the driver's periodic check) is no rotation.
    let fx = apply(&mut t, Event::Apply(status("ns", "web-0", "vault", "v2", "12")));
    assert!(fx.enqueue.is_empty());
}

#[test]
fn a_new_pods_status_and_another_pod_catching_up_change_nothing() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault")],
        vec![
            status("ns", "web-0", "vault", "v1", "10"),
            status("ns", "web-1", "vault", "v1", "11"),
        ],
    );
    let fx = apply(&mut t, Event::Apply(status("ns", "web-0", "vault", "v2", "12")));
    assert_eq!(names_of(&fx), ["web"]);
    let fx = apply(&mut t, Event::Apply(status("ns", "web-1", "vault", "v2", "13")));
    assert!(fx.enqueue.is_empty(), "web-1 caught up with the rotation");
    // A pod created later reports whatever it mounted: Reloader ignores creations, and so does wave.
    let fx = apply(&mut t, Event::Apply(status("ns", "web-2", "vault", "v3", "14")));
    assert!(fx.enqueue.is_empty());
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v2"));
}

#[test]
fn an_update_of_a_status_that_had_no_objects_is_a_rotation_as_in_reloader() {
    let mut empty = status("ns", "web-0", "vault", "", "10");
    empty.objects = None;
    let mut t = with_statuses(vec![mounts("ns", "web", "vault")], vec![empty]);
    let fx = apply(&mut t, Event::Apply(status("ns", "web-0", "vault", "v1", "11")));
    assert_eq!(names_of(&fx), ["web"]);
}

#[test]
fn a_status_in_another_namespace_naming_the_same_class_wakes_nothing_here() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault")],
        vec![
            status("ns", "web-0", "vault", "v1", "10"),
            status("tenant", "evil-0", "vault", "v1", "11"),
        ],
    );
    let fx = apply(
        &mut t,
        Event::Apply(status("tenant", "evil-0", "vault", "v9", "12")),
    );
    assert!(fx.enqueue.is_empty());
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v1"));
    assert_eq!(version_of(&t, &class("tenant", "vault")).as_deref(), Some("v9"));
}

/// `Init` (`start`) or `InitDone` for the stream of `s`.
fn boundary(s: &Scope, start: bool) -> Change {
    fn event<T>(start: bool) -> Event<T> {
        if start { Event::Init } else { Event::InitDone }
    }
    match s.resource {
        Resource::Workload(_) => Change::Workload(s.clone(), event(start)),
        Resource::Config(ConfigKind::SecretProviderClass) => Change::ProviderClass(s.clone(), event(start)),
        Resource::Config(_) => Change::Config(s.clone(), event(start)),
        Resource::Namespace => Change::Namespace(s.clone(), event(start)),
        Resource::ProviderStatus => Change::ProviderStatus(s.clone(), event(start)),
    }
}

#[test]
fn the_first_list_starts_each_class_from_its_newest_status() {
    // A rotation half done across pods when wave starts: web-1 has the newest.
    let t = with_statuses(
        vec![],
        vec![
            status("ns", "web-0", "vault", "v1", "20"),
            status("ns", "web-1", "vault", "v2", "21"),
            status("ns", "web-2", "vault", "v1", "19"),
        ],
    );
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v2"));
}

#[test]
fn a_relist_showing_a_status_rotated_while_the_watch_was_down_is_a_rotation() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault")],
        vec![status("ns", "web-0", "vault", "v1", "10")],
    );
    apply(&mut t, Event::Init);
    let fx = apply(
        &mut t,
        Event::InitApply(status("ns", "web-0", "vault", "v2", "30")),
    );
    assert_eq!(names_of(&fx), ["web"]);
    apply(&mut t, Event::InitDone);
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v2"));
}

#[test]
fn a_class_outlives_its_last_status_so_pods_of_a_scale_up_reload_nothing() {
    let w = mounts("ns", "web", "vault");
    let mut t = with_statuses(
        vec![w.clone()],
        vec![
            status("ns", "web-0", "vault", "v1", "10"),
            status("ns", "web-1", "vault", "v1", "11"),
        ],
    );
    let key = class("ns", "vault");
    mark(&mut t, class_meta("vault", false, false));
    let needs = t.reloader_selection(&w).expect("selected").needs(&w);
    let existing = vec![Candidate {
        key: key.clone(),
        matched: false,
        lifecycle: Lifecycle::Existing,
    }];
    // Created after the first list, under --reload-on-create: still no creation to reload for.
    assert_eq!(t.reloader_candidates(&w, &needs), existing);

    // Scaled to zero: every status goes, and nothing is woken; the class, which exists, is kept.
    for pod in ["web-0", "web-1"] {
        let fx = apply(&mut t, Event::Delete(status("ns", pod, "vault", "v1", "12")));
        assert!(fx.enqueue.is_empty());
    }
    assert_eq!(version_of(&t, &key).as_deref(), Some("v1"));
    // Under --reload-on-delete too, the class is still there: nothing to remove.
    assert_eq!(t.reloader_candidates(&w, &needs), existing);
    // The secret rotated meanwhile; the pods of the scale-up mount v2 from the start: no reload.
    let fx = apply(&mut t, Event::Apply(status("ns", "web-2", "vault", "v2", "13")));
    assert!(fx.enqueue.is_empty());
    // Their next rotation is one.
    let fx = apply(&mut t, Event::Apply(status("ns", "web-2", "vault", "v3", "14")));
    assert_eq!(names_of(&fx), ["web"]);
    assert_eq!(version_of(&t, &key).as_deref(), Some("v3"));
}

#[test]
fn a_status_naming_no_class_or_renaming_its_class_is_no_rotation() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault"), mounts("ns", "api", "other")],
        vec![
            status("ns", "web-0", "vault", "v1", "10"),
            status("ns", "api-0", "other", "v1", "11"),
        ],
    );
    let mut renamed = status("ns", "web-0", "other", "v7", "12");
    renamed.id.name = "web-0-ns-vault".into();
    assert!(apply(&mut t, Event::Apply(renamed)).enqueue.is_empty());
    let mut unnamed = status("ns", "web-0", "", "v8", "13");
    unnamed.id.name = "web-0-ns-vault".into();
    assert!(apply(&mut t, Event::Apply(unnamed)).enqueue.is_empty());
    assert_eq!(version_of(&t, &class("ns", "other")).as_deref(), Some("v1"));
    assert_eq!(t.provider_class(&class("ns", "")), None);
}

fn class_meta(name: &str, ignored: bool, matched: bool) -> reloader::ClassMeta {
    reloader::ClassMeta {
        key: class("ns", name),
        ignored,
        matched,
    }
}

fn mark(t: &mut Tracker, meta: reloader::ClassMeta) -> Effects {
    let classes = scope(Resource::Config(ConfigKind::SecretProviderClass));
    t.apply(Change::ProviderClass(classes, Event::Apply(meta)))
}

#[test]
fn a_class_that_says_ignore_holds_its_rotations_as_ignored_and_saying_it_wakes_its_workloads() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault")],
        vec![status("ns", "web-0", "vault", "v1", "10")],
    );
    let key = class("ns", "vault");
    assert!(!t.provider_class(&key).expect("held").reloader_ignored);
    assert_eq!(names_of(&mark(&mut t, class_meta("vault", true, false))), ["web"]);
    assert!(t.provider_class(&key).expect("held").reloader_ignored);
    assert!(
        mark(&mut t, class_meta("vault", true, false)).enqueue.is_empty(),
        "nothing new said"
    );
    assert_eq!(
        names_of(&mark(&mut t, class_meta("vault", false, false))),
        ["web"]
    );
    assert!(!t.provider_class(&key).expect("held").reloader_ignored);
}

#[test]
fn a_class_that_says_match_is_found_by_workloads_that_say_search() {
    let mut w = mounts("ns", "web", "vault");
    w.annotations.clear();
    w.annotations
        .insert(names::reloader::SEARCH.into(), "true".into());
    let mut t = with_statuses(vec![w.clone()], vec![status("ns", "web-0", "vault", "v1", "10")]);
    let found = |t: &Tracker| {
        let sel = t.reloader_selection(&w).expect("selected");
        let candidates = t.reloader_candidates(&w, &sel.needs(&w));
        reloader::targets(&w, &sel, &candidates).len()
    };
    assert_eq!(found(&t), 0);
    mark(&mut t, class_meta("vault", false, true));
    assert_eq!(found(&t), 1);
    // Deleted, the class says nothing more (its pods' statuses still hold what they mounted).
    let classes = scope(Resource::Config(ConfigKind::SecretProviderClass));
    t.apply(Change::ProviderClass(
        classes,
        Event::Delete(class_meta("vault", false, true)),
    ));
    assert_eq!(found(&t), 0);
    assert!(t.provider_class(&class("ns", "vault")).is_some());
}

#[test]
fn with_a_resource_label_selector_only_the_statuses_it_selects_count_as_reloader_lists_them() {
    let selector = crate::selector::LabelSelector::parse("team=a").expect("a selector");
    let options = reloader::Options {
        resource_selector: Some(selector),
        ..options()
    };
    let t = Tracker::new(&WorkloadKind::BUILT_IN, None)
        .with_reloader(options)
        .with_provider_statuses();
    let (mut t, _) = synced_from(t, vec![mounts("ns", "web", "vault")], vec![]);
    let mut labelled = status("ns", "web-0", "vault", "v1", "10");
    labelled.labels.insert("team".into(), "a".into());
    apply(&mut t, Event::Apply(status("ns", "web-1", "vault", "v1", "9")));
    assert_eq!(t.provider_class(&class("ns", "vault")), None, "not selected");
    apply(&mut t, Event::Apply(labelled.clone()));
    labelled.objects = Some(vec![("secret/db".into(), "v2".into())]);
    labelled.resource_version = "11".into();
    assert_eq!(names_of(&apply(&mut t, Event::Apply(labelled))), ["web"]);
    let fx = apply(&mut t, Event::Apply(status("ns", "web-1", "vault", "v3", "12")));
    assert!(fx.enqueue.is_empty());
}

#[test]
fn a_class_no_status_names_and_that_no_longer_exists_is_forgotten() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault")],
        vec![status("ns", "web-0", "vault", "v1", "10")],
    );
    mark(&mut t, class_meta("vault", true, true));
    let classes = scope(Resource::Config(ConfigKind::SecretProviderClass));
    t.apply(Change::ProviderClass(
        classes,
        Event::Delete(class_meta("vault", true, true)),
    ));
    assert!(
        t.provider_class(&class("ns", "vault")).is_some(),
        "a pod still mounts it"
    );
    apply(&mut t, Event::Delete(status("ns", "web-0", "vault", "v1", "11")));
    assert_eq!(t.provider_class(&class("ns", "vault")), None);
    assert_eq!(t.config(&class("ns", "vault")), None);
    // A status never named in a class that never existed leaves nothing behind either.
    apply(&mut t, Event::Apply(status("ns", "tmp-0", "tmp", "v1", "12")));
    apply(&mut t, Event::Delete(status("ns", "tmp-0", "tmp", "v1", "13")));
    assert_eq!(t.config(&class("ns", "tmp")), None);
}

#[test]
fn a_relist_of_classes_clears_what_a_class_no_longer_there_said() {
    let mut t = with_statuses(
        vec![mounts("ns", "web", "vault")],
        vec![status("ns", "web-0", "vault", "v1", "10")],
    );
    mark(&mut t, class_meta("vault", true, false));
    assert!(
        t.provider_class(&class("ns", "vault"))
            .expect("held")
            .reloader_ignored
    );
    let classes = scope(Resource::Config(ConfigKind::SecretProviderClass));
    t.apply(Change::ProviderClass(classes.clone(), Event::Init));
    let fx = t.apply(Change::ProviderClass(classes, Event::InitDone));
    assert_eq!(names_of(&fx), ["web"], "told vault no longer says ignore");
    assert!(
        !t.provider_class(&class("ns", "vault"))
            .expect("held")
            .reloader_ignored
    );
}

#[test]
fn at_start_the_newest_status_wins_even_after_one_with_the_same_content() {
    let t = with_statuses(
        vec![],
        vec![
            status("ns", "a", "vault", "v1", "20"),
            status("ns", "b", "vault", "v1", "25"),
            status("ns", "c", "vault", "v2", "22"),
        ],
    );
    assert_eq!(version_of(&t, &class("ns", "vault")).as_deref(), Some("v1"));
}

#[test]
fn a_class_first_learned_from_a_pod_created_after_start_carries_no_starting_point_until_it_rotates() {
    // wave restarted while `web` was scaled to zero; it carries the mark of v1, and the secret rotated
    // to v2 meanwhile. Its scale-up's pod mounts v2 from the start.
    let mut w = mounts("ns", "web", "vault");
    let v1 = status("ns", "x", "vault", "v1", "1").sha();
    w.template = crate::workload::testing::deployment(
        "ns",
        "web",
        &[],
        json!({"containers": [{"name": "c", "env": [{"name": "STAKATER_VAULT_SECRETPROVIDERCLASS", "value": v1}],
            "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
            "volumes": [{"name": "s", "csi": {"driver": "secrets-store.csi.k8s.io",
                "volumeAttributes": {"secretProviderClass": "vault"}}}]}),
    )
    .template;
    let mut t = with_statuses(vec![w.clone()], vec![]);
    let fx = apply(&mut t, Event::Apply(status("ns", "web-0", "vault", "v2", "10")));
    assert_eq!(names_of(&fx), ["web"]);
    let plan = |t: &Tracker| {
        let sel = t.reloader_selection(&w).expect("selected");
        let targets = reloader::targets(&w, &sel, &t.reloader_candidates(&w, &sel.needs(&w)));
        let mut fetched = crate::hash::Fetched::new();
        fetched.insert(
            class("ns", "vault"),
            t.provider_class(&class("ns", "vault")).expect("held"),
        );
        (
            targets[0].lifecycle,
            reloader::plan(&w, &targets, &fetched, &options(), &Default::default(), 0),
        )
    };
    let (lifecycle, decision) = plan(&t);
    assert_eq!(lifecycle, Lifecycle::Appeared);
    assert!(decision.marks.is_empty(), "no reload of pods that mount v2");
    // Its first rotation reloads it.
    apply(&mut t, Event::Apply(status("ns", "web-0", "vault", "v3", "11")));
    let (lifecycle, decision) = plan(&t);
    assert_eq!(lifecycle, Lifecycle::Existing);
    assert_eq!(decision.marks.len(), 1);
}
