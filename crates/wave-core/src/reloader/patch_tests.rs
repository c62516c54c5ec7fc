use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::kind::WorkloadKind;
use crate::names::reloader as names;
use crate::refs::{ConfigKey, ConfigKind};
use crate::reloader::testing::*;
use crate::reloader::*;
use crate::tracker::ObjectVersion;
use crate::workload::Workload;

#[test]
fn the_annotation_is_the_json_reloader_writes() {
    let source = ReloadSource {
        type_: "SECRET".into(),
        name: "db".into(),
        namespace: "ns".into(),
        hash: "abc".into(),
        container_refs: vec!["c".into()],
        observed_at: 42,
    };
    let w = env_workload(None);
    let body = patch_body(&w, &[Mark::Annotation(source)]);
    assert_eq!(
        body["spec"]["template"]["metadata"]["annotations"][names::LAST_RELOADED_FROM],
        json!(
            r#"{"type":"SECRET","name":"db","namespace":"ns","hash":"abc","containerRefs":["c"],"observedAt":42}"#
        )
    );
    assert_eq!(body["metadata"]["resourceVersion"], json!("1"));
}

#[test]
fn env_var_marks_merge_into_their_container_by_name() {
    let w = env_workload(None);
    let body = patch_body(
        &w,
        &[Mark::EnvVar {
            container: "c".into(),
            name: "STAKATER_APP_CONFIGMAP".into(),
            value: "abc".into(),
        }],
    );
    assert_eq!(
        body["spec"]["template"]["spec"],
        json!({"containers": [{"name": "c", "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": "abc"}]}]})
    );
}

#[test]
fn an_argo_rollout_gets_its_containers_whole_or_a_restart() {
    let now: Timestamp = "2026-11-23T12:00:00Z".parse().unwrap();
    let mut w = env_workload(Some("old"));
    w.id.kind = WorkloadKind::ROLLOUT;
    assert!(
        selection(&w, &Options::default()).is_some(),
        "Reloader's annotations work on Rollouts"
    );
    let mark = Mark::EnvVar {
        container: "c".into(),
        name: "STAKATER_APP_CONFIGMAP".into(),
        value: "new".into(),
    };
    let (body, kind) = reload_patch(&w, std::slice::from_ref(&mark), now);
    assert_eq!(kind, PatchKind::Merge);
    let containers = &body["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["name"], "c");
    assert_eq!(
        containers[0]["env"],
        json!([{"name": "STAKATER_APP_CONFIGMAP", "value": "new"}])
    );
    assert_eq!(
        containers[0]["envFrom"],
        json!([{"configMapRef": {"name": "app"}}]),
        "the rest kept"
    );

    let source = ReloadSource {
        type_: "CONFIGMAP".into(),
        name: "app".into(),
        namespace: "ns".into(),
        hash: "new".into(),
        container_refs: vec!["c".into()],
        observed_at: 7,
    };
    let (body, _) = reload_patch(&w, &[Mark::Annotation(source)], now);
    assert_eq!(
        body["spec"]["template"],
        json!({"metadata": {"annotations": {names::LAST_RELOADED_FROM:
            r#"{"type":"CONFIGMAP","name":"app","namespace":"ns","hash":"new","containerRefs":["c"],"observedAt":7}"#}}}),
        "the annotation alone: no containers in a merge patch that does not change them"
    );

    w.annotations.insert(ROLLOUT_STRATEGY.into(), "restart".into());
    let (body, _) = reload_patch(&w, &[mark], now);
    assert_eq!(body["spec"], json!({"restartAt": "2026-11-23T12:00:00Z"}));
    assert_eq!(body["metadata"]["resourceVersion"], json!("1"));
}

#[test]
fn a_cron_job_s_reload_is_a_job_from_its_template_with_the_mark() {
    let mut w = env_workload(None);
    w.id.kind = WorkloadKind::CRON_JOB;
    w.uid = "cj-uid".into();
    assert!(selection(&w, &Options::default()).is_some());
    let cron_job = json!({"spec": {"schedule": "@daily", "jobTemplate": {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {"backoffLimit": 2, "template": {}}}}});
    let mark = Mark::EnvVar {
        container: "c".into(),
        name: "STAKATER_APP_CONFIGMAP".into(),
        value: "sha".into(),
    };
    let job = job_from_cron_job(&cron_job, &w, &[mark], "web-0123456789");
    assert_eq!(job["metadata"]["name"], "web-0123456789");
    assert_eq!(job["metadata"].get("generateName"), None);
    assert_eq!(
        job["metadata"]["annotations"],
        json!({CRONJOB_INSTANTIATE: "manual", "note": "x"})
    );
    assert_eq!(job["metadata"]["labels"], json!({"team": "a"}));
    assert_eq!(job["metadata"]["ownerReferences"][0]["uid"], "cj-uid");
    assert_eq!(job["spec"]["backoffLimit"], 2);
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "STAKATER_APP_CONFIGMAP", "value": "sha"}])
    );
}

fn reload_of(key: &ConfigKey, sha: &str) -> Decision {
    Decision {
        marks: Vec::new(),
        changed: vec![key.clone()],
        observed: BTreeMap::from([(key.clone(), sha.to_string())]),
    }
}

fn at(key: &ConfigKey, uid: &str, rv: &str) -> BTreeMap<ConfigKey, ObjectVersion> {
    BTreeMap::from([(
        key.clone(),
        ObjectVersion {
            uid: uid.into(),
            resource_version: rv.into(),
        },
    )])
}

/// A DNS-1123 subdomain that is also a valid label value: what a Job's name must be.
fn valid_job_name(name: &str) -> bool {
    name.len() <= JOB_NAME_MAX
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[test]
fn a_cron_job_s_job_name_is_stable_for_one_config_version_and_new_for_the_next() {
    let mut cron = env_workload(None);
    cron.id.kind = WorkloadKind::CRON_JOB;
    cron.uid = "cj-uid".into();
    let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
    let name = job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u1", "10"));
    assert!(
        name.starts_with("web-") && name.len() == "web-".len() + 10,
        "{name}"
    );
    assert!(valid_job_name(&name), "{name}");
    assert_eq!(
        job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u1", "10")),
        name,
        "a retry of the same reload names the same Job"
    );
    let others = [
        job_name(&cron, &reload_of(&key, "sha-b"), &at(&key, "u1", "11")),
        // The data back as it was (a revert) is a new version of the object.
        job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u1", "12")),
        // Deleted and re-created with the same data.
        job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u2", "10")),
        // Deleted (with --reload-on-delete): no version.
        job_name(&cron, &reload_of(&key, EMPTY_SHA), &BTreeMap::new()),
        job_name(
            &cron,
            &reload_of(&ConfigKey::new(ConfigKind::Secret, "ns", "app"), "sha-a"),
            &at(&ConfigKey::new(ConfigKind::Secret, "ns", "app"), "u1", "10"),
        ),
    ];
    let mut seen = BTreeSet::from([name.clone()]);
    for other in &others {
        assert!(
            seen.insert(other.clone()),
            "{other} names another config version's Job too"
        );
    }
    let mut recreated = cron.clone();
    recreated.uid = "cj-uid-2".into();
    assert_ne!(
        job_name(&recreated, &reload_of(&key, "sha-a"), &at(&key, "u1", "10")),
        name,
        "a CronJob re-created under the same name never finds its predecessor's Job"
    );
}

#[test]
fn a_cron_job_s_job_name_fits_a_label_value_however_long_the_cron_job_s_name() {
    let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
    let decision = reload_of(&key, "sha-a");
    let versions = at(&key, "u1", "10");
    for (cron_name, prefix) in [
        // The longest CronJob name the apiserver accepts: exactly 63 with the suffix.
        ("c".repeat(52), "c".repeat(52)),
        // Longer ones are cut; a cut that ends in `-` or `.` drops it.
        ("d".repeat(80), "d".repeat(52)),
        (format!("{}-tail", "e".repeat(51)), "e".repeat(51)),
        (format!("{}.-x", "f".repeat(50)), "f".repeat(50)),
        (format!("a.{}", "g".repeat(100)), format!("a.{}", "g".repeat(50))),
    ] {
        let mut cron = env_workload(None);
        cron.id.kind = WorkloadKind::CRON_JOB;
        cron.id.name = cron_name.clone();
        let name = job_name(&cron, &decision, &versions);
        assert!(valid_job_name(&name), "{name} ({} characters)", name.len());
        assert_eq!(
            name.rsplit_once('-').map(|(p, _)| p),
            Some(prefix.as_str()),
            "{cron_name}"
        );
    }
}

fn job_view(stored: &serde_json::Value) -> Workload {
    let meta = serde_json::from_value(stored["metadata"].clone()).unwrap();
    Workload::from_object(WorkloadKind::JOB, meta, stored).unwrap()
}

/// A Job as the apiserver returns it: with what it and the Job controller set.
fn stored_job(manual_selector: bool) -> serde_json::Value {
    let selector = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "old-uid"}});
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate", "namespace": "ns", "uid": "old-uid", "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1, "labels": {"team": "a"},
            "annotations": {"reloader.stakater.com/auto": "true"},
            "managedFields": [{"manager": "kubectl"}]},
        "spec": {"backoffLimit": 2, "manualSelector": manual_selector, "selector": selector,
            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "old-uid",
                    "controller-uid": "old-uid", "batch.kubernetes.io/job-name": "migrate",
                    "job-name": "migrate", "app": "migrate"}},
                "spec": {"restartPolicy": "Never", "futureField": {"x": 1},
                    "containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]}}},
        "status": {"succeeded": 1}
    })
}

#[test]
fn a_job_is_created_again_with_the_mark_and_without_what_its_first_creation_set() {
    let stored = stored_job(false);
    let w = job_view(&stored);
    assert!(
        selection(&w, &Options::default()).is_some(),
        "Reloader's annotation selects a Job"
    );
    let mark = Mark::EnvVar {
        container: "c".into(),
        name: "STAKATER_APP_CONFIGMAP".into(),
        value: "sha".into(),
    };
    let job = job_recreated(&stored, &[mark]);
    assert_eq!(
        job["metadata"],
        json!({"name": "migrate", "namespace": "ns", "labels": {"team": "a"},
            "annotations": {"reloader.stakater.com/auto": "true"}})
    );
    assert_eq!(job.get("status"), None);
    assert_eq!(job["spec"].get("selector"), None, "the apiserver makes a new one");
    assert_eq!(job["spec"]["backoffLimit"], 2);
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"],
        json!({"app": "migrate"})
    );
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "STAKATER_APP_CONFIGMAP", "value": "sha"}])
    );
    assert_eq!(
        job["spec"]["template"]["spec"]["futureField"],
        json!({"x": 1}),
        "a field wave's API types do not know is kept"
    );
    let source = ReloadSource {
        type_: "CONFIGMAP".into(),
        name: "app".into(),
        namespace: "ns".into(),
        hash: "sha".into(),
        container_refs: vec!["c".into()],
        observed_at: 1,
    };
    let annotated = job_recreated(&stored, &[Mark::Annotation(source)]);
    assert!(
        annotated["spec"]["template"]["metadata"]["annotations"][names::LAST_RELOADED_FROM]
            .as_str()
            .unwrap()
            .contains(r#""name":"app""#)
    );
}

#[test]
fn a_job_with_a_manual_selector_keeps_its_selector_and_labels() {
    let stored = stored_job(true);
    let job = job_recreated(&stored, &[]);
    assert_eq!(job["spec"]["selector"], stored["spec"]["selector"]);
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"],
        stored["spec"]["template"]["metadata"]["labels"]
    );
}

#[test]
fn a_job_that_says_wave_s_annotation_or_has_a_controller_or_is_ignored_is_left_alone() {
    let mut stored = stored_job(false);
    stored["metadata"]["annotations"]["wave.pusher.com/update-on-config-change"] = json!("true");
    let both = job_view(&stored);
    assert!(!both.is_opted_in(), "a Job's template cannot change");
    assert!(
        selection(&both, &Options::default()).is_none(),
        "wave's annotation wins, as on any kind"
    );
    let mut wave_only = stored.clone();
    wave_only["metadata"]["annotations"] = json!({"wave.pusher.com/update-on-config-change": "true"});
    let all = Options {
        auto_reload_all: true,
        ..Options::default()
    };
    assert!(
        selection(&job_view(&wave_only), &all).is_none(),
        "not even under --auto-reload-all"
    );
    let mut owned = stored_job(false);
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u", "controller": true}]);
    assert!(
        selection(&job_view(&owned), &Options::default()).is_none(),
        "a CronJob's Job"
    );
    let ignoring = Options {
        ignore_jobs: true,
        ..Options::default()
    };
    assert!(selection(&job_view(&stored_job(false)), &ignoring).is_none());
    assert!(selection(&job_view(&stored_job(false)), &Options::default()).is_some());
}
