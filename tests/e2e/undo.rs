//! Never fight an undo: `kubectl rollout undo` to an earlier config hash sticks (wave pins it), a later
//! config change rolls as usual, and `wave unpin` lets wave roll the workload to its current config.

use serde_json::json;
use testenv::{cluster, wait_for};
use wave_core::workload::WorkloadKind;

use crate::harness::*;

/// Waits until the workload's controller has recorded a revision for its current template, so that
/// `kubectl rollout undo` has an earlier one to go back to.
async fn wait_settled(client: &kube::Client, ns: &str, kind: WorkloadKind) {
    settled_revisions(client, ns, kind, &name(kind)).await;
}

fn pinned(w: &wave_core::workload::Workload) -> Option<&str> {
    w.annotations
        .get("wave.pusher.com/pinned-hash")
        .map(String::as_str)
}

#[tokio::test]
async fn an_undo_to_an_earlier_config_sticks_for_every_kind_until_the_config_changes_or_wave_unpin() {
    let (client, ns) = setup("undo").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=0"]).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_every_kind(&client, &ns, opted_in(&[]), spec).await;
    let mut first = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        first.push(wait_hash_change(&client, &ns, kind, &name(kind), None).await);
        wait_settled(&client, &ns, kind).await;
    }
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "2"}})).await;
    let mut second = Vec::new();
    for (kind, h1) in WorkloadKind::BUILT_IN.into_iter().zip(&first) {
        second.push(wait_hash_change(&client, &ns, kind, &name(kind), Some(h1)).await);
        wait_settled(&client, &ns, kind).await;
    }

    // The undo: each template goes back to its first hash, and stays there.
    wave.expect_writes(6, "two hashes for each of three workloads")
        .await;
    let noops = wave.noops();
    for kind in WorkloadKind::BUILT_IN {
        rollout_undo(&ns, kind, &name(kind));
    }
    for (kind, h1) in WorkloadKind::BUILT_IN.into_iter().zip(&first) {
        let n = name(kind);
        wait_for(&format!("{kind} pinned at its undone hash"), TIMEOUT, || async {
            let w = workload(&client, &ns, kind, &n).await;
            (pinned(&w) == Some(h1.as_str())).then_some(())
        })
        .await;
        assert_eq!(
            hash_of(&client, &ns, kind, &n).await.as_deref(),
            Some(h1.as_str()),
            "{kind}: wave rolled the undo forward"
        );
        let what = format!("{kind}'s RolloutUndoDetected Event");
        let (_, _, note) = wait_event(&client, &ns, &n, &what, |(_, r, _)| r == "RolloutUndoDetected").await;
        assert!(
            note.contains(h1.as_str()) && note.contains("wave unpin"),
            "{note}"
        );
    }
    // Each pin is itself a change that wave looks at: it must find nothing to write.
    wait_for("every pinned workload checked once more", TIMEOUT, || async {
        (wave.noops() >= noops + 3).then_some(())
    })
    .await;
    assert_eq!(wave.metric("wave_reconciles_total", &["result=\"pinned\""]), 3.0);
    assert_eq!(wave.writes(), 6, "nothing rolled the undo forward");
    for (kind, h1) in WorkloadKind::BUILT_IN.into_iter().zip(&first) {
        assert_eq!(
            hash_of(&client, &ns, kind, &name(kind)).await.as_deref(),
            Some(h1.as_str())
        );
    }
    let kubeconfig = cluster().kubeconfig();
    let (code, out, err) = run_wave(
        &["explain", "deployment/deployment", "-n", &ns],
        Some(&kubeconfig),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pinned"), "wave explain shows the pin: {out}");
    let (code, out, err) = run_wave(&["status", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0, "{err}");
    for (kind, h1) in WorkloadKind::BUILT_IN.into_iter().zip(&first) {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{kind} {ns}/")))
            .unwrap_or_else(|| panic!("wave status lists {kind}: {out}"));
        assert!(
            line.contains(" pinned ") && line.contains(&h1[..12]),
            "wave status shows the pin: {line}"
        );
    }

    // A config change during a pin rolls, and ends the pin.
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "3"}})).await;
    for (kind, h1) in WorkloadKind::BUILT_IN.into_iter().zip(&first) {
        let n = name(kind);
        let third = wait_hash_change(&client, &ns, kind, &n, Some(h1)).await;
        assert!(!first.contains(&third) && !second.contains(&third));
        wait_for(&format!("{kind}'s pin removed"), TIMEOUT, || async {
            pinned(&workload(&client, &ns, kind, &n).await)
                .is_none()
                .then_some(())
        })
        .await;
        wait_settled(&client, &ns, kind).await;
    }

    // Undo again, then `wave unpin`: wave rolls the Deployment to its current config.
    let kind = WorkloadKind::DEPLOYMENT;
    let n = name(kind);
    let third = hash_of(&client, &ns, kind, &n).await.unwrap();
    rollout_undo(&ns, kind, &n);
    let undone = wait_hash_change(&client, &ns, kind, &n, Some(&third)).await;
    // NOTE: the Deployment controller copies the Deployment's annotations onto its current ReplicaSet,
    // and `kubectl rollout undo` copies the ReplicaSet's back (kubernetes/kubectl,
    // pkg/polymorphichelpers/rollback.go): the undo itself restores the pin of the first undo, which
    // names the config of that time. Wait for wave's own pin, which names the config of now.
    wait_for("the Deployment pinned again by wave", TIMEOUT, || async {
        let w = workload(&client, &ns, kind, &n).await;
        let config = w
            .annotations
            .get("wave.pusher.com/pinned-config")
            .map(String::as_str);
        (pinned(&w) == Some(undone.as_str()) && config == Some(third.as_str())).then_some(())
    })
    .await;
    let (code, out, err) = run_wave(&["unpin", "deployment/deployment", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Unpinned"), "{out}");
    assert_eq!(
        wait_hash_change(&client, &ns, kind, &n, Some(&undone)).await,
        third
    );
    let (code, out, _) = run_wave(&["unpin", "deployment/deployment", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0);
    assert!(out.contains("is not pinned"), "{out}");
}
