//! Safe rollouts: bursts coalesced into one rollout, flapping config held back until it settles.

use serde_json::{Value, json};
use testenv::{cluster, wait_for};
use wave_core::workload::WorkloadKind;

use crate::harness::*;

async fn wait_final(client: &kube::Client, ns: &str, kind: WorkloadKind) {
    let desired = desired_hash(&cluster().kubeconfig(), ns, kind, &name(kind));
    wait_for(&format!("{kind} to carry {desired}"), TIMEOUT, || async {
        (hash_of(client, ns, kind, &name(kind)).await.as_deref() == Some(desired.as_str())).then_some(())
    })
    .await;
}

fn writes_of(wave: &Wave, kind: WorkloadKind) -> u64 {
    wave.metric(
        "wave_reconciles_total",
        &["result=\"written\"", &format!("kind=\"{}\"", kind.as_str())],
    ) as u64
}

#[tokio::test]
async fn a_burst_of_ten_changes_rolls_each_workload_at_most_twice_and_ends_on_the_final_hash() {
    let (client, ns) = setup("burst").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "0"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=5s"]).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_every_kind(&client, &ns, opted_in(&[]), spec).await;
    for kind in WorkloadKind::BUILT_IN {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    }
    wave.expect_writes(3, "each workload hashed once").await;

    // Each change is handled before the next is made, as a burst spread over a couple of seconds
    // would be: without coalescing, each would roll every workload.
    let handled = || wave.metric("wave_reconciles_total", &[]);
    for v in 1..=10 {
        let before = handled();
        patch_configmap(&client, &ns, "cfg", json!({"data": {"v": v.to_string()}})).await;
        wait_for("wave to handle the change", TIMEOUT, || async {
            (handled() >= before + 3.0).then_some(())
        })
        .await;
    }
    for kind in WorkloadKind::BUILT_IN {
        wait_final(&client, &ns, kind).await;
    }
    for kind in WorkloadKind::BUILT_IN {
        let burst = writes_of(&wave, kind) - 1;
        assert!(
            (1..=2).contains(&burst),
            "{kind}: the burst rolled it {burst} times"
        );
    }
    assert!(wave.metric("wave_reconciles_total", &["result=\"coalesced\""]) > 0.0);
}

#[tokio::test]
async fn with_a_minimum_interval_of_zero_every_change_rolls_as_before() {
    let (client, ns) = setup("no-coalesce").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "0"})).await;
    // The flag keeps its default; the workload's annotation turns coalescing off for it.
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=1h"]).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    let kind = WorkloadKind::DEPLOYMENT;
    let annotations = opted_in(&[("wave.pusher.com/min-rollout-interval", "0")]);
    create_workload(&client, &ns, kind, &name(kind), annotations, spec).await;
    let mut hash = wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    for v in 1..=5 {
        patch_configmap(&client, &ns, "cfg", json!({"data": {"v": v.to_string()}})).await;
        hash = wait_hash_change(&client, &ns, kind, &name(kind), Some(&hash)).await;
    }
    wave.expect_writes(6, "every change rolled").await;
    assert_eq!(
        wave.metric("wave_reconciles_total", &["result=\"coalesced\""]),
        0.0
    );
}

#[tokio::test]
async fn a_flapping_secret_rolls_nothing_until_it_settles_then_rolls_once_with_its_final_value() {
    let (client, ns) = setup("flap").await;
    create_secret(&client, &ns, "token", json!({"t": "0"})).await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--update-rate=inf",
            "--min-rollout-interval=0",
            "--flap-threshold=5",
            "--flap-window=30s",
            "--flap-quiet=5s",
        ],
    )
    .await;
    let spec = pod_spec(
        json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}}]}),
        json!({}),
    );
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec).await;
    let mut hash = wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    // Five changes within the window roll, one by one.
    for v in 1..=5 {
        patch_secret(&client, &ns, "token", json!({"stringData": {"t": v.to_string()}})).await;
        hash = wait_hash_change(&client, &ns, kind, &name(kind), Some(&hash)).await;
    }
    // The sixth makes it flap; it and seven more roll nothing.
    let triggers = || wave.metric("wave_config_triggers_total", &[]);
    for v in 6..=13 {
        let before = triggers();
        patch_secret(&client, &ns, "token", json!({"stringData": {"t": v.to_string()}})).await;
        wait_for("wave to see the change", TIMEOUT, || async {
            (triggers() > before).then_some(())
        })
        .await;
    }
    wait_for(
        "the flapping Warning on the Secret and the workload",
        TIMEOUT,
        || async {
            let on = |name: &'static str| {
                let client = client.clone();
                let ns = ns.clone();
                async move {
                    events_for(&client, &ns, name)
                        .await
                        .into_iter()
                        .any(|(t, r, _)| t == "Warning" && r == "ConfigFlapping")
                }
            };
            (on("token").await && on("deployment").await).then_some(())
        },
    )
    .await;
    assert_eq!(wave.metric("wave_config_flapping", &[]), 1.0);
    assert_eq!(
        hash_of(&client, &ns, kind, &name(kind)).await.as_deref(),
        Some(hash.as_str()),
        "nothing rolled while it flapped"
    );
    assert_eq!(wave.writes(), 6, "no write while it flapped");
    let (code, out, err) = run_wave(
        &["explain", "deployment/deployment", "-n", &ns, "-o", "json"],
        Some(&cluster().kubeconfig()),
    );
    assert_eq!(code, 0, "{err}");
    let explained: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(explained["status"], "held", "{out}");
    assert!(
        explained["reason"]
            .as_str()
            .unwrap()
            .starts_with("held: config flapping since "),
        "{out}"
    );

    // Quiet for 5 s: one write, with the final value, and a ConfigSettled on both.
    wait_final(&client, &ns, kind).await;
    wait_for(
        "ConfigSettled on the Secret and the workload",
        TIMEOUT,
        || async {
            let settled =
                |events: Vec<(String, String, String)>| events.iter().any(|(_, r, _)| r == "ConfigSettled");
            (settled(events_for(&client, &ns, "token").await)
                && settled(events_for(&client, &ns, "deployment").await))
            .then_some(())
        },
    )
    .await;
    wave.expect_writes(7, "exactly one write once it settled").await;
    assert_eq!(wave.metric("wave_config_flapping", &[]), 0.0);
}

#[tokio::test]
async fn relabelling_a_secret_is_no_flapping_and_a_flapping_secret_holds_only_the_rollouts_it_causes() {
    let (client, ns) = setup("flap-meta").await;
    create_secret(&client, &ns, "token", json!({"t": "0"})).await;
    create_configmap(&client, &ns, "cfg", json!({"v": "0"})).await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--update-rate=inf",
            "--min-rollout-interval=0",
            "--flap-threshold=3",
            "--flap-window=10m",
            "--flap-quiet=1h",
        ],
    )
    .await;
    let spec = pod_spec(
        json!({
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}}],
            "envFrom": [{"configMapRef": {"name": "cfg"}}],
        }),
        json!({}),
    );
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec).await;
    let mut hash = wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    let handled = || wave.metric("wave_reconciles_total", &[]);

    // Twelve label changes: a new resourceVersion each, the same data.
    for i in 0..12 {
        let before = handled();
        let labels = json!({"metadata": {"labels": {"relabelled": i.to_string()}}});
        patch_secret(&client, &ns, "token", labels).await;
        wait_for("wave to look at the relabelled Secret", TIMEOUT, || async {
            (handled() > before).then_some(())
        })
        .await;
    }
    assert_eq!(
        wave.metric("wave_config_flapping", &[]),
        0.0,
        "labels are no flapping"
    );
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "1"}})).await;
    hash = wait_hash_change(&client, &ns, kind, &name(kind), Some(&hash)).await;

    // Data changes within the window, each rolled, until the fourth makes the Secret flap: that one
    // rolls nothing.
    let flapping = || wave.metric("wave_config_flapping", &[]) == 1.0;
    for v in 1..=4 {
        patch_secret(&client, &ns, "token", json!({"stringData": {"t": v.to_string()}})).await;
        let before = hash.clone();
        wait_for("the change to roll, or the Secret to flap", TIMEOUT, || async {
            let now = hash_of(&client, &ns, kind, &name(kind)).await?;
            (now != before || flapping()).then_some(())
        })
        .await;
        hash = hash_of(&client, &ns, kind, &name(kind)).await.unwrap();
        if flapping() {
            break;
        }
    }
    assert!(flapping(), "the fourth data change within the window flaps");
    let held = hash_of(&client, &ns, kind, &name(kind)).await.unwrap();
    assert_ne!(
        held,
        desired_hash(&cluster().kubeconfig(), &ns, kind, &name(kind)),
        "the flapping Secret's last change is held"
    );

    // A real change to the other object rolls at once, with every object's current value.
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "2"}})).await;
    hash = wait_hash_change(&client, &ns, kind, &name(kind), Some(&held)).await;
    assert_eq!(
        hash,
        desired_hash(&cluster().kubeconfig(), &ns, kind, &name(kind)),
        "the rollout carries the current config"
    );
}

#[tokio::test]
async fn a_hash_write_that_keeps_failing_with_a_500_gets_one_warning_and_lands_once_writes_work() {
    let (client, ns) = setup("write-fails").await;
    create_configmap(&client, &ns, "app", json!({"level": "v1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    create_workload(&client, &ns, kind, "web", opted_in(&[]), spec).await;
    let h1 = wait_hash_change(&client, &ns, kind, "web", None).await;
    patch_workload(
        &client,
        &ns,
        kind,
        "web",
        json!({"metadata": {"labels": {(FailingWrites::LABEL): &ns}}}),
    )
    .await;
    let failing = FailingWrites::start(&client, &ns, "apps", "deployments").await;

    patch_configmap(&client, &ns, "app", json!({"data": {"level": "v2"}})).await;
    wait_for("three failed writes of the hash", TIMEOUT, || async {
        (wave.metric("wave_reconcile_errors_total", &["error=\"patch_workload\""]) >= 3.0).then_some(())
    })
    .await;
    let failed = |events: &[(String, String, String)]| {
        events
            .iter()
            .filter(|(t, r, _)| t == "Warning" && r == "WriteFailed")
            .cloned()
            .collect::<Vec<_>>()
    };
    let warnings = failed(&events_for(&client, &ns, "web").await);
    assert_eq!(
        warnings.len(),
        1,
        "one Warning, not one per attempt: {warnings:?}"
    );
    assert!(
        warnings[0].2.starts_with("Writing the config hash failed"),
        "{warnings:?}"
    );
    assert_eq!(
        hash_of(&client, &ns, kind, "web").await.as_deref(),
        Some(h1.as_str())
    );

    failing.stop(&client).await;
    let h2 = wait_hash_change(&client, &ns, kind, "web", Some(&h1)).await;
    assert_eq!(h2, desired_hash(&cluster().kubeconfig(), &ns, kind, "web"));
    assert_eq!(failed(&events_for(&client, &ns, "web").await).len(), 1);
}
