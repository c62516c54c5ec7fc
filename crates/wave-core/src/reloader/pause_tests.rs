use std::time::Duration;

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::kind::WorkloadKind;
use crate::names::reloader as names;
use crate::reloader::testing::*;
use crate::workload::Workload;

fn paused_deployment(period: Option<&str>, paused_at: Option<&str>, paused: bool) -> Workload {
    let mut annotations = vec![(names::AUTO, "true")];
    annotations.extend(period.map(|p| (names::PAUSE_PERIOD, p)));
    annotations.extend(paused_at.map(|p| (names::PAUSED_AT, p)));
    let mut w = reloader_workload(&annotations, json!({"containers": [{"name": "c"}]}));
    w.progress.paused = paused;
    // As the reload's write leaves it: one manager owns spec.paused and paused-at.
    w.reload_paused = paused && paused_at.is_some();
    w
}

#[test]
fn a_pause_someone_else_set_since_is_never_resumed_by_wave() {
    let now: Timestamp = "2026-11-23T13:00:00Z".parse().unwrap();
    // Resumed by hand, then paused by hand: `kubectl rollout` owns spec.paused, the stale
    // paused-at is wave's.
    let mut users = paused_deployment(Some("1m"), Some("2026-11-23T12:00:00Z"), true);
    users.reload_paused = false;
    assert_eq!(pause(&users, now), Pause::None);
    assert!(!users.holds_reload_pause());
}

#[test]
fn the_owner_of_a_pause_is_read_from_managed_fields() {
    let meta = |fields: serde_json::Value| -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        serde_json::from_value(json!({"name": "d", "namespace": "ns", "managedFields": fields,
            "annotations": {(names::PAUSED_AT): "2026-11-23T12:00:00Z"}}))
        .unwrap()
    };
    let both = json!({"f:spec": {"f:paused": {}}, "f:metadata": {"f:annotations": {(format!("f:{}", names::PAUSED_AT)): {}}}});
    let reload =
        meta(json!([{"manager": "wave", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": both}]));
    let w = Workload::from_parts(WorkloadKind::DEPLOYMENT, reload, Default::default());
    assert!(w.reload_paused);
    let split = meta(json!([
        {"manager": "wave", "operation": "Update", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {(format!("f:{}", names::PAUSED_AT)): {}}}}},
        {"manager": "kubectl-rollout", "operation": "Update", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:paused": {}}}},
    ]));
    let w = Workload::from_parts(WorkloadKind::DEPLOYMENT, split, Default::default());
    assert!(!w.reload_paused, "the user paused it");
}

#[test]
fn a_reload_pauses_a_deployment_that_asks_and_it_resumes_when_the_period_is_over() {
    let now: Timestamp = "2026-11-23T12:00:10Z".parse().unwrap();
    let w = paused_deployment(Some("1m"), None, false);
    let mut body = json!({});
    add_pause(&mut body, &w, now);
    assert_eq!(body["spec"]["paused"], json!(true));
    assert_eq!(
        body["metadata"]["annotations"][names::PAUSED_AT],
        json!("2026-11-23T12:00:10Z")
    );
    assert_eq!(pause_period(&w), Some(Ok(Duration::from_secs(60))));

    let paused = paused_deployment(Some("1m"), Some("2026-11-23T12:00:00Z"), true);
    assert_eq!(pause(&paused, now), Pause::ResumeAfter(Duration::from_secs(50)));
    let later: Timestamp = "2026-11-23T12:01:00Z".parse().unwrap();
    assert_eq!(pause(&paused, later), Pause::ResumeNow);
    let mut again = json!({});
    add_pause(&mut again, &paused, now);
    assert_eq!(again, json!({}), "already paused: the pause keeps its start");
}

#[test]
fn a_pause_that_is_not_a_reload_s_is_left_alone_and_a_broken_one_resumes() {
    let now: Timestamp = "2026-11-23T12:00:10Z".parse().unwrap();
    // Paused by someone else (no paused-at), or paused-at left on a running Deployment.
    assert_eq!(
        pause(&paused_deployment(Some("1m"), None, true), now),
        Pause::None
    );
    assert_eq!(
        pause(
            &paused_deployment(Some("1m"), Some("2026-11-23T12:00:00Z"), false),
            now
        ),
        Pause::None
    );
    // Its period removed or unreadable, or its start unreadable: it would stay paused for ever.
    for (period, at) in [
        (None, "2026-11-23T12:00:00Z"),
        (Some("soon"), "2026-11-23T12:00:00Z"),
        (Some("1m"), "noon"),
    ] {
        assert_eq!(
            pause(&paused_deployment(period, Some(at), true), now),
            Pause::ResumeNow
        );
    }
    let bad = pause_period(&paused_deployment(Some("soon"), None, false))
        .unwrap()
        .unwrap_err();
    assert!(
        bad.contains("\"soon\"") && bad.contains(names::PAUSE_PERIOD),
        "{bad}"
    );
}
