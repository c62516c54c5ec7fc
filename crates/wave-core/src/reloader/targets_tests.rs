use serde_json::json;

use super::*;
use crate::names::reloader as names;
use crate::reloader::testing::*;
use crate::reloader::*;

#[test]
fn auto_reloads_only_referenced_objects_and_marks_the_container_that_uses_them() {
    let w = reloader_workload(
        &[(names::AUTO, "true")],
        json!({
            "containers": [
                {"name": "a"},
                {"name": "b", "envFrom": [{"configMapRef": {"name": "env"}}],
                 "volumeMounts": [{"name": "vol", "mountPath": "/c"}]}
            ],
            "volumes": [{"name": "vol", "configMap": {"name": "mounted"}}]
        }),
    );
    let sel = selection(&w, &Options::default()).unwrap();
    let found = targets(&w, &sel, &candidates(&[cm("env"), cm("mounted"), cm("unused")]));
    assert_eq!(
        found,
        vec![
            Target {
                key: cm("env"),
                container: "b".into(),
                lifecycle: Lifecycle::Existing,
                since_creation: SinceCreation::Unknown,
            },
            Target {
                key: cm("mounted"),
                container: "b".into(),
                lifecycle: Lifecycle::Existing,
                since_creation: SinceCreation::Unknown,
            },
        ]
    );
}

#[test]
fn named_objects_reload_even_when_unreferenced_through_the_first_container() {
    let w = reloader_workload(
        &[(names::CONFIGMAP_RELOAD, "flags, app-.*")],
        json!({"containers": [{"name": "main"}, {"name": "side"}]}),
    );
    let sel = selection(&w, &Options::default()).unwrap();
    assert!(sel.needs(&w).scan, "a pattern scans the namespace");
    assert!(sel.needs(&w).keys.contains(&cm("flags")));
    let found = targets(&w, &sel, &candidates(&[cm("flags"), cm("app-one"), cm("other")]));
    let names: Vec<&str> = found.iter().map(|t| t.key.name.as_str()).collect();
    assert_eq!(names, ["app-one", "flags"]);
    assert!(found.iter().all(|t| t.container == "main"));
}

#[test]
fn exclusions_search_and_match_follow_reloader() {
    let w = reloader_workload(
        &[
            (names::SEARCH, "true"),
            (names::CONFIGMAP_EXCLUDE, "skipped"),
            (names::CONFIGMAP_AUTO, "false"),
        ],
        json!({"containers": [{"name": "c", "envFrom": [
            {"configMapRef": {"name": "marked"}},
            {"configMapRef": {"name": "unmarked"}},
            {"configMapRef": {"name": "skipped"}}
        ]}]}),
    );
    let sel = selection(&w, &Options::default()).unwrap();
    let all = [
        Candidate {
            key: cm("marked"),
            matched: true,
            lifecycle: Lifecycle::Existing,
        },
        Candidate {
            key: cm("unmarked"),
            matched: false,
            lifecycle: Lifecycle::Existing,
        },
        Candidate {
            key: cm("skipped"),
            matched: true,
            lifecycle: Lifecycle::Existing,
        },
    ];
    let found = targets(&w, &sel, &all);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key, cm("marked"));
}
