use serde_json::json;

use super::*;
use crate::names::reloader as names;
use crate::reloader::testing::*;
use crate::reloader::*;
use crate::workload::testing::deployment;

#[test]
fn only_reloader_annotations_opt_a_workload_in_and_wave_s_own_wins() {
    let spec = json!({"containers": [{"name": "c"}]});
    let options = Options::default();
    assert!(selection(&reloader_workload(&[], spec.clone()), &options).is_none());
    assert!(
        selection(
            &reloader_workload(&[(names::AUTO, "false")], spec.clone()),
            &options
        )
        .is_none()
    );
    assert!(
        selection(
            &reloader_workload(&[(names::AUTO, "true")], spec.clone()),
            &options
        )
        .is_some()
    );
    let all = Options {
        auto_reload_all: true,
        ..Options::default()
    };
    assert!(selection(&reloader_workload(&[], spec.clone()), &all).is_some());
    assert!(selection(&reloader_workload(&[(names::AUTO, "false")], spec.clone()), &all).is_none());
    let both = deployment("ns", "web", &[(names::AUTO, "true")], spec);
    assert!(selection(&both, &options).is_none(), "wave's opt-in wins");
}

#[test]
fn annotations_on_the_pod_template_count_when_the_workload_has_none_of_that_kind() {
    let mut w = reloader_workload(&[], json!({"containers": [{"name": "c"}]}));
    w.template.edit(|t| {
        t.metadata =
            Some(serde_json::from_value(json!({"annotations": {(names::SECRET_RELOAD): "creds"}})).unwrap());
    });
    w.annotations
        .insert(names::CONFIGMAP_RELOAD.into(), "flags".into());
    let sel = selection(&w, &Options::default()).unwrap();
    assert!(sel.config_maps.patterns.iter().any(|p| p.matches("flags")));
    assert!(sel.secrets.patterns.iter().any(|p| p.matches("creds")));
}

#[test]
fn a_bad_pattern_is_reported_not_used() {
    let w = reloader_workload(
        &[(names::CONFIGMAP_RELOAD, "good,bad(")],
        json!({"containers": [{"name": "c"}]}),
    );
    let sel = selection(&w, &Options::default()).unwrap();
    assert_eq!(sel.config_maps.patterns.len(), 1);
    assert_eq!(sel.problems.len(), 1);
    assert!(sel.problems[0].contains("bad("), "{:?}", sel.problems);
}

#[test]
fn ignored_workload_types_cronjobs_leaves_reloader_annotated_cron_jobs_alone() {
    let mut cron_job = reloader_workload(&[(names::AUTO, "true")], json!({"containers": [{"name": "c"}]}));
    cron_job.id.kind = crate::workload::WorkloadKind::CRON_JOB;
    assert!(selection(&cron_job, &Options::default()).is_some());
    let ignoring = Options {
        ignore_cron_jobs: true,
        ..Options::default()
    };
    assert!(selection(&cron_job, &ignoring).is_none());
    let deployment = reloader_workload(&[(names::AUTO, "true")], json!({"containers": [{"name": "c"}]}));
    assert!(
        selection(&deployment, &ignoring).is_some(),
        "other kinds are not affected"
    );
}
