use super::*;
use crate::workload::testing::deployment;

fn t(s: &str) -> Timestamp {
    s.parse().expect("a timestamp")
}

fn record(hash: &str, at: &str) -> Record {
    Record::new(hash, t(at), BTreeMap::new(), None)
}

/// A Ready pod with the agent (container `c1`), created at `created` from a template with hash `born`.
fn pod(name: &str, created: &str, born: &str) -> PodView {
    PodView {
        name: name.into(),
        created: Some(t(created)),
        ready: true,
        deleting: false,
        born_with: Some(born.into()),
        request: None,
        agent: Some(Agent {
            container_id: Some("c1".into()),
            running: true,
            restarted_alone: false,
        }),
    }
}

fn ask(p: &mut PodView, hash: &str, at: &str) {
    p.request = Some(Request {
        hash: hash.into(),
        from: p.agent.as_ref().unwrap().container_id.clone().unwrap(),
        at: t(at),
    });
}

fn restarted(p: &mut PodView) {
    p.agent.as_mut().unwrap().container_id = Some("c2".into());
}

const T0: &str = "2026-11-26T10:00:00Z";
const T1: &str = "2026-11-26T10:01:00Z";
const DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn the_strategy_comes_from_the_annotation_then_the_default_and_a_bad_word_is_named() {
    let mut w = deployment("ns", "w", &[], serde_json::json!({"containers": []}));
    assert_eq!(Strategy::of(&w, Strategy::InPlace), (Strategy::InPlace, None));
    w.annotations.insert(names::RESTART.into(), "rollout".into());
    assert_eq!(Strategy::of(&w, Strategy::InPlace).0, Strategy::Rollout);
    w.annotations.insert(names::RESTART.into(), "inplace".into());
    let (s, why) = Strategy::of(&w, Strategy::Rollout);
    assert_eq!(s, Strategy::Rollout);
    let why = why.expect("a reason");
    assert!(why.contains("\"inplace\"") && why.contains("in-place"), "{why}");
}

#[test]
fn a_template_has_the_agent_only_with_its_rule_and_its_volume() {
    let with = |containers: serde_json::Value, volumes: serde_json::Value| {
        let w = deployment(
            "ns",
            "w",
            &[],
            serde_json::json!({"containers": containers, "volumes": volumes}),
        );
        has_agent(&w.template)
    };
    let agent = serde_json::to_value(agent_container("wave:1")).unwrap();
    let volume = serde_json::to_value(agent_volume()).unwrap();
    assert!(with(
        serde_json::json!([{"name": "app"}, agent]),
        serde_json::json!([volume])
    ));
    assert!(
        !with(serde_json::json!([{"name": "app"}, agent]), serde_json::json!([])),
        "no volume"
    );
    let mut no_rule = agent.clone();
    no_rule["restartPolicyRules"] = serde_json::Value::Null;
    assert!(
        !with(serde_json::json!([no_rule]), serde_json::json!([volume])),
        "no rule"
    );
    assert!(!with(serde_json::json!([{"name": "app"}]), serde_json::json!([])));
}

#[test]
fn a_record_and_a_request_read_back_what_they_render_and_garbage_reads_as_none() {
    let r = Record::new(
        "abc",
        t(T0),
        BTreeMap::from([("ConfigMap/ns/a".into(), "d1".into())]),
        None,
    );
    assert_eq!(Record::parse(&r.render()), Some(r));
    assert_eq!(Record::parse("not json"), None);
    let q = Request {
        hash: "abc".into(),
        from: "containerd://123".into(),
        at: t(T0),
    };
    assert_eq!(Request::parse(&q.render()), Some(q));
    assert_eq!(Request::parse("abc containerd://123"), None);
    assert_eq!(Request::parse("abc x 2026-11-26T10:00:00Z extra"), None);
}

#[test]
fn a_pod_runs_the_hash_it_restarted_into_or_was_created_with() {
    let r = record("new", T1);
    let old = pod("a", T0, "old");
    assert_eq!(pod_config(&old, Some(&r)), PodConfig::Runs("old".into()));
    let mut asked = old.clone();
    ask(&mut asked, "new", T1);
    assert_eq!(
        pod_config(&asked, Some(&r)),
        PodConfig::Restarting {
            to: "new".into(),
            since: t(T1)
        }
    );
    restarted(&mut asked);
    assert_eq!(pod_config(&asked, Some(&r)), PodConfig::Runs("new".into()));
}

#[test]
fn a_pod_created_after_the_record_runs_it_but_only_past_the_clock_margin() {
    let r = record("new", T1);
    let later = pod("b", "2026-11-26T10:01:05Z", "old");
    assert_eq!(pod_config(&later, Some(&r)), PodConfig::Runs("new".into()));
    let same_moment = pod("c", "2026-11-26T10:01:01Z", "old");
    assert_eq!(
        pod_config(&same_moment, Some(&r)),
        PodConfig::Unknown,
        "neither clearly before nor after: restarted once more"
    );
    let mut unknown = pod("d", T0, "x");
    unknown.born_with = None;
    assert_eq!(pod_config(&unknown, Some(&r)), PodConfig::Unknown);
}

#[test]
fn restarts_start_within_the_budget_and_the_rest_wait_for_the_first_to_be_ready() {
    let r = record("new", T1);
    let mut pods: Vec<PodView> = ["a", "b", "c"].iter().map(|n| pod(n, T0, "old")).collect();
    assert_eq!(step(&r, &pods, 1, DEADLINE, t(T1)), Step::Mark(vec!["a".into()]));
    assert_eq!(
        step(&r, &pods, 2, DEADLINE, t(T1)),
        Step::Mark(vec!["a".into(), "b".into()])
    );
    ask(&mut pods[0], "new", T1);
    assert_eq!(step(&r, &pods, 1, DEADLINE, t(T1)), Step::Wait, "a is restarting");
    restarted(&mut pods[0]);
    pods[0].ready = false;
    assert_eq!(
        step(&r, &pods, 1, DEADLINE, t(T1)),
        Step::Wait,
        "a is not Ready yet"
    );
    pods[0].ready = true;
    assert_eq!(step(&r, &pods, 1, DEADLINE, t(T1)), Step::Mark(vec!["b".into()]));
    for p in &mut pods[1..] {
        ask(p, "new", T1);
        restarted(p);
    }
    assert_eq!(step(&r, &pods, 1, DEADLINE, t(T1)), Step::Done);
}

#[test]
fn a_pod_that_is_not_ready_anyway_restarts_at_once_without_using_the_budget() {
    let r = record("new", T1);
    let mut pods: Vec<PodView> = ["a", "b"].iter().map(|n| pod(n, T0, "old")).collect();
    pods[1].ready = false;
    assert_eq!(step(&r, &pods, 1, DEADLINE, t(T1)), Step::Mark(vec!["b".into()]));
}

#[test]
fn a_pod_not_ready_past_the_deadline_halts_the_restart_and_names_itself() {
    let r = record("new", T1);
    let mut pods: Vec<PodView> = ["a", "b"].iter().map(|n| pod(n, T0, "old")).collect();
    ask(&mut pods[0], "new", T1);
    restarted(&mut pods[0]);
    pods[0].ready = false;
    let late = t("2026-11-26T10:03:01Z");
    let Step::Failed { pod, why } = step(&r, &pods, 1, DEADLINE, late) else {
        panic!("a restarted pod not Ready after the deadline halts");
    };
    assert_eq!(pod, "a");
    assert!(
        why.contains("pod a") && why.contains("120s") && why.contains("new"),
        "{why}"
    );
    assert_eq!(
        step(&r, &pods, 1, DEADLINE, t("2026-11-26T10:02:00Z")),
        Step::Wait
    );
}

#[test]
fn a_pod_that_never_restarts_halts_too() {
    let r = record("new", T1);
    let mut pods = vec![pod("a", T0, "old")];
    ask(&mut pods[0], "new", T1);
    let Step::Failed { why, .. } = step(&r, &pods, 1, DEADLINE, t("2026-11-26T10:04:00Z")) else {
        panic!("a pending restart past the deadline halts");
    };
    assert!(why.contains("did not restart"), "{why}");
}

#[test]
fn a_pod_without_the_agent_or_a_node_without_the_feature_falls_back_to_a_rollout() {
    let r = record("new", T1);
    let mut pods = vec![pod("a", T0, "old"), pod("b", T0, "old")];
    pods[1].agent = None;
    let Step::Fallback(why) = step(&r, &pods, 1, DEADLINE, t(T1)) else {
        panic!("no agent");
    };
    assert!(why.contains("pod b") && why.contains(AGENT_CONTAINER), "{why}");
    pods[1] = pod("b", T0, "old");
    pods[1].agent.as_mut().unwrap().restarted_alone = true;
    let Step::Fallback(why) = step(&r, &pods, 1, DEADLINE, t(T1)) else {
        panic!("only the agent restarted");
    };
    assert!(why.contains("RestartAllContainersOnContainerExits"), "{why}");
    pods[1].deleting = true;
    assert_eq!(
        step(&r, &pods, 1, DEADLINE, t(T1)),
        Step::Mark(vec!["a".into()]),
        "a pod being deleted counts for nothing"
    );
}

#[test]
fn the_budget_is_what_the_workloads_rolling_update_allows_and_at_least_one() {
    let d = WorkloadKind::DEPLOYMENT;
    assert_eq!(max_unavailable(d, &serde_json::json!({}), 8), 2, "25% of 8");
    assert_eq!(
        max_unavailable(d, &serde_json::json!({}), 3),
        1,
        "25% of 3 is 0: at least one"
    );
    let spec = |v: serde_json::Value| serde_json::json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": v}}}});
    assert_eq!(max_unavailable(d, &spec(serde_json::json!(0)), 3), 1);
    assert_eq!(max_unavailable(d, &spec(serde_json::json!("50%")), 4), 2);
    assert_eq!(max_unavailable(d, &spec(serde_json::json!(3)), 10), 3);
    let recreate = serde_json::json!({"spec": {"strategy": {"type": "Recreate"}}});
    assert_eq!(max_unavailable(d, &recreate, 4), 4);
    let s = WorkloadKind::STATEFUL_SET;
    assert_eq!(max_unavailable(s, &serde_json::json!({}), 3), 1);
    let two = serde_json::json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}});
    assert_eq!(max_unavailable(WorkloadKind::DAEMON_SET, &two, 5), 2);
}

#[test]
fn a_pod_is_read_from_its_spec_and_status() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "creationTimestamp": T0,
            "annotations": {(names::CONFIG_HASH): "old",
                (names::RESTART_REQUEST): format!("new containerd://1 {T1}")}},
        "spec": {"containers": [{"name": "app"}, agent_container("wave:1")]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": AGENT_CONTAINER, "containerID": "containerd://2",
                "state": {"running": {}},
                "image": "", "imageID": "", "ready": true, "restartCount": 1,
                "lastState": {"terminated": {"exitCode": 137, "reason": "RestartingAllContainers"}}}]
        }
    }))
    .unwrap();
    let v = PodView::of(&pod);
    assert!(v.ready && !v.deleting);
    assert_eq!(v.born_with.as_deref(), Some("old"));
    assert_eq!(
        v.agent.as_ref().and_then(|a| a.container_id.as_deref()),
        Some("containerd://2")
    );
    assert!(!v.agent.as_ref().unwrap().restarted_alone);
    assert_eq!(
        pod_config(&v, None),
        PodConfig::Runs("new".into()),
        "its agent restarted since the request"
    );
}

#[test]
fn a_pod_whose_agent_has_not_started_is_not_asked_yet() {
    let r = record("new", T1);
    let mut pods = vec![pod("a", T0, "old"), pod("b", T0, "old")];
    pods[0].agent.as_mut().unwrap().running = false;
    pods[0].ready = false;
    assert_eq!(step(&r, &pods, 2, DEADLINE, t(T1)), Step::Mark(vec!["b".into()]));
    assert_eq!(
        step(&r, &pods, 1, DEADLINE, t(T1)),
        Step::Wait,
        "a starting pod is unavailable"
    );
}

#[test]
fn the_agent_reads_the_request_line_as_written() {
    let file = format!("a=\"1\"\n{}=\"h c 2026\"\nz=\"2\"\n", names::RESTART_REQUEST);
    assert_eq!(requested_in(&file), Some("\"h c 2026\""));
    assert_eq!(requested_in("a=\"1\"\n"), None);
    let lookalike = format!("{}-x=\"1\"\n", names::RESTART_REQUEST);
    assert_eq!(requested_in(&lookalike), None);
}

#[test]
fn a_pod_created_between_two_restarts_is_not_taken_for_its_templates_hash() {
    // Template hash A; a restart into B; a pod made during B reads B but its template still says A;
    // the config goes back to A: that pod must restart, not count as running A.
    let into_b = record("B", T0);
    let back_to_a = Record::new("A", t(T1), BTreeMap::new(), Some(&into_b));
    let made_during_b = pod("x", "2026-11-26T10:00:30Z", "A");
    assert_eq!(pod_config(&made_during_b, Some(&back_to_a)), PodConfig::Unknown);
    let made_before = pod("y", "2026-11-26T09:59:00Z", "A");
    assert_eq!(
        pod_config(&made_before, Some(&back_to_a)),
        PodConfig::Runs("A".into())
    );
    assert_eq!(
        step(&back_to_a, &[made_during_b, made_before], 1, DEADLINE, t(T1)),
        Step::Mark(vec!["x".into()])
    );
}

#[test]
fn an_ended_pod_counts_for_nothing_and_a_pod_stuck_unavailable_halts_at_the_deadline_from_its_creation() {
    let r = record("new", T1);
    let mut evicted = pod("a", T0, "old");
    evicted.deleting = true;
    evicted.ready = false;
    let mut pending = pod("b", "2026-11-26T10:01:10Z", "old");
    pending.ready = false;
    pending.agent.as_mut().unwrap().running = false;
    let pods = [evicted, pending];
    assert_eq!(
        step(&r, &pods, 1, DEADLINE, t("2026-11-26T10:02:00Z")),
        Step::Wait
    );
    // Made 10 s after the record: its deadline counts from its creation, not from the record.
    assert_eq!(
        step(&r, &pods, 1, DEADLINE, t("2026-11-26T10:03:05Z")),
        Step::Wait
    );
    let Step::Failed { pod, why } = step(&r, &pods, 1, DEADLINE, t("2026-11-26T10:03:11Z")) else {
        panic!("a pod that never becomes Ready halts the restart at the deadline");
    };
    assert_eq!(pod, "b");
    assert!(why.contains("pod b") && why.contains("new"), "{why}");
}

#[test]
fn a_record_without_its_time_is_no_record() {
    assert_eq!(
        record_hash(r#"{"hash":"h","at":"2026-11-26T10:00:00Z"}"#),
        Some("h")
    );
    assert_eq!(record_hash(r#"{"hash":"h"}"#), None);
    assert_eq!(Record::parse(r#"{"hash":"h"}"#), None);
}

#[test]
fn on_delete_and_a_partition_rule_out_restarting_in_place() {
    let sts = WorkloadKind::STATEFUL_SET;
    let on_delete = serde_json::json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
    assert!(ruled_out_by_update_strategy(sts, &on_delete).is_some_and(|w| w.contains("OnDelete")));
    assert!(ruled_out_by_update_strategy(WorkloadKind::DAEMON_SET, &on_delete).is_some());
    let partition =
        |p: u64| serde_json::json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": p}}}});
    assert!(ruled_out_by_update_strategy(sts, &partition(2)).is_some_and(|w| w.contains("partition 2")));
    assert_eq!(ruled_out_by_update_strategy(sts, &partition(0)), None);
    assert_eq!(
        ruled_out_by_update_strategy(sts, &serde_json::json!({"spec": {}})),
        None
    );
    let recreate = serde_json::json!({"spec": {"strategy": {"type": "Recreate"}}});
    assert_eq!(
        ruled_out_by_update_strategy(WorkloadKind::DEPLOYMENT, &recreate),
        None
    );
}
