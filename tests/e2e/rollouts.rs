//! Which changes roll a workload, and which do not (issue: tests 1–10).
//!
//! "Nothing was written" is proven without sleeping: wave's own counters show that it saw the change and
//! decided `noop` (or that a later sentinel change was processed first), and the write counter did not
//! move.

use serde_json::{Value, json};
use testenv::wait_for;
use wave_core::workload::WorkloadKind;

use crate::harness::*;

#[tokio::test]
async fn opting_in_writes_the_hash_of_the_spec_for_every_kind() {
    let (client, ns) = setup("optin").await;
    create_configmap(&client, &ns, "app-config", json!({"a": "b"})).await;
    create_secret(&client, &ns, "creds", json!({"password": "hunter2"})).await;
    let _wave = Wave::start(&[&ns], &[]).await;
    for kind in WorkloadKind::BUILT_IN {
        let cm = pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": "app-config"}}]}),
            json!({}),
        );
        let secret = pod_spec(
            json!({}),
            json!({"volumes": [{"name": "s", "secret": {"secretName": "creds"}}]}),
        );
        create_workload(
            &client,
            &ns,
            kind,
            &format!("cm-{}", name(kind)),
            opted_in(&[]),
            cm,
        )
        .await;
        create_workload(
            &client,
            &ns,
            kind,
            &format!("secret-{}", name(kind)),
            opted_in(&[]),
            secret,
        )
        .await;
    }
    for kind in WorkloadKind::BUILT_IN {
        // The test vectors of `docs/behaviour.md`, "The hash", computed by Wave's algorithm.
        let h = wait_hash_change(&client, &ns, kind, &format!("cm-{}", name(kind)), None).await;
        assert_eq!(
            h, "c723035841cb99a64b7b37c2733cbf07045a0e31d539c67aff2bae20f55bff6b",
            "{kind}"
        );
        let h = wait_hash_change(&client, &ns, kind, &format!("secret-{}", name(kind)), None).await;
        assert_eq!(
            h, "aeeffb69d9a05df58ea1b4a549c0bd990a5f01b67094131e2a02f8028eb07085",
            "{kind}"
        );
    }
}

/// Creates one workload of each kind using `spec`, waits for the first hash, applies `change`, and
/// checks that every workload gets a new hash and a new ReplicaSet or revision.
async fn assert_change_rolls(prefix: &str, setup_config: Value, spec: Value, change: Value) {
    let (client, ns) = setup(prefix).await;
    if let Some(data) = setup_config.get("configmap") {
        create_configmap(&client, &ns, "cfg", data.clone()).await;
    }
    if let Some(data) = setup_config.get("secret") {
        create_secret(&client, &ns, "cfg", data.clone()).await;
    }
    let _wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let mut before = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    for kind in WorkloadKind::BUILT_IN {
        let h = wait_hash_change(&client, &ns, kind, &name(kind), None).await;
        before.push((kind, h, settled_revisions(&client, &ns, kind, &name(kind)).await));
    }
    if let Some(p) = change.get("configmap") {
        patch_configmap(&client, &ns, "cfg", json!({"data": p})).await;
    }
    if let Some(p) = change.get("secret") {
        patch_secret(&client, &ns, "cfg", json!({"stringData": p})).await;
    }
    for (kind, old, revs) in before {
        wait_hash_change(&client, &ns, kind, &name(kind), Some(&old)).await;
        wait_revisions(&client, &ns, kind, &name(kind), revs + 1).await;
    }
}

#[tokio::test]
async fn configmap_volume_change_rolls() {
    let spec = pod_spec(
        json!({}),
        json!({"volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}),
    );
    assert_change_rolls(
        "cm-vol",
        json!({"configmap": {"a": "1"}}),
        spec,
        json!({"configmap": {"a": "2"}}),
    )
    .await;
}

#[tokio::test]
async fn configmap_env_from_change_rolls() {
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    assert_change_rolls(
        "cm-envfrom",
        json!({"configmap": {"a": "1"}}),
        spec,
        json!({"configmap": {"b": "new"}}),
    )
    .await;
}

#[tokio::test]
async fn configmap_key_in_use_change_rolls() {
    let env = json!({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}}]});
    let spec = pod_spec(env, json!({}));
    assert_change_rolls(
        "cm-key",
        json!({"configmap": {"a": "1"}}),
        spec,
        json!({"configmap": {"a": "2"}}),
    )
    .await;
}

#[tokio::test]
async fn secret_volume_change_rolls() {
    let spec = pod_spec(
        json!({}),
        json!({"volumes": [{"name": "v", "secret": {"secretName": "cfg"}}]}),
    );
    assert_change_rolls(
        "sec-vol",
        json!({"secret": {"k": "1"}}),
        spec,
        json!({"secret": {"k": "2"}}),
    )
    .await;
}

#[tokio::test]
async fn secret_env_from_change_rolls() {
    let spec = pod_spec(json!({"envFrom": [{"secretRef": {"name": "cfg"}}]}), json!({}));
    assert_change_rolls(
        "sec-envfrom",
        json!({"secret": {"k": "1"}}),
        spec,
        json!({"secret": {"k": "2"}}),
    )
    .await;
}

#[tokio::test]
async fn secret_key_in_use_change_rolls() {
    let env = json!({"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "cfg", "key": "k"}}}]});
    let spec = pod_spec(env, json!({}));
    assert_change_rolls(
        "sec-key",
        json!({"secret": {"k": "1"}}),
        spec,
        json!({"secret": {"k": "2"}}),
    )
    .await;
}

#[tokio::test]
async fn projected_source_change_of_a_selected_item_rolls() {
    let volumes = json!({"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "a", "path": "a"}]}}]}}]});
    let spec = pod_spec(json!({}), volumes);
    assert_change_rolls(
        "projected",
        json!({"configmap": {"a": "1", "b": "1"}}),
        spec,
        json!({"configmap": {"a": "2"}}),
    )
    .await;
}

#[tokio::test]
async fn init_container_env_reference_change_rolls() {
    let extra = json!({"initContainers": [{"name": "init", "image": "busybox",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x"}}}]}]});
    let spec = pod_spec(json!({}), extra);
    assert_change_rolls(
        "init",
        json!({"configmap": {"x": "1"}}),
        spec,
        json!({"configmap": {"x": "2"}}),
    )
    .await;
}

/// Every kind, each with a keyed env reference to `a` and a projected item `a` of ConfigMap `cfg`.
async fn keyed_workloads(prefix: &str) -> (kube::Client, String, Wave, Vec<(WorkloadKind, String)>) {
    let (client, ns) = setup(prefix).await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1", "unused": "1"})).await;
    create_secret(&client, &ns, "sec", json!({"k": "1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let env = json!({"env": [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
        {"name": "K", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}}]});
    let volumes = json!({"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "a", "path": "a"}]}}]}}]});
    let mut hashes = Vec::new();
    create_every_kind(
        &client,
        &ns,
        opted_in(&[]),
        pod_spec(env.clone(), volumes.clone()),
    )
    .await;
    for kind in WorkloadKind::BUILT_IN {
        hashes.push((
            kind,
            wait_hash_change(&client, &ns, kind, &name(kind), None).await,
        ));
    }
    (client, ns, wave, hashes)
}

/// Waits for wave's `n` first writes and the no-op reconcile each write's own event causes, so that
/// counts taken afterwards belong to what the test does next.
async fn settle(wave: &Wave, n: u64) {
    wave.expect_writes(n, "one first write per workload").await;
    wait_for("the follow-up no-ops of the first writes", TIMEOUT, || async {
        (wave.noops() >= n).then_some(())
    })
    .await;
}

/// Waits until wave has decided `noop` at least `n` more times than `base`.
async fn wait_noops(wave: &Wave, base: u64, n: u64) {
    wait_for(&format!("{n} more no-op reconciles"), TIMEOUT, || async {
        (wave.noops() >= base + n).then_some(())
    })
    .await;
}

#[tokio::test]
async fn changing_an_unused_key_of_keyed_references_writes_nothing() {
    let (client, ns, wave, hashes) = keyed_workloads("unused-key").await;
    settle(&wave, 3).await;
    let (writes, noops) = (wave.writes(), wave.noops());
    patch_configmap(&client, &ns, "cfg", json!({"data": {"unused": "2"}})).await;
    wait_noops(&wave, noops, 3).await;
    assert_eq!(
        wave.writes(),
        writes,
        "a key no reference selects must not roll anything"
    );
    for (kind, h) in &hashes {
        assert_eq!(
            hash_of(&client, &ns, *kind, &name(*kind)).await.as_deref(),
            Some(h.as_str())
        );
    }
}

#[tokio::test]
async fn metadata_only_changes_write_nothing() {
    let (client, ns, wave, hashes) = keyed_workloads("meta-only").await;
    settle(&wave, 3).await;
    let (writes, noops) = (wave.writes(), wave.noops());
    patch_configmap(
        &client,
        &ns,
        "cfg",
        json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    wait_noops(&wave, noops, 3).await;
    patch_secret(
        &client,
        &ns,
        "sec",
        json!({"metadata": {"annotations": {"touched": "yes"}}}),
    )
    .await;
    wait_noops(&wave, noops, 6).await;
    assert_eq!(wave.writes(), writes);
    for (kind, h) in &hashes {
        assert_eq!(
            hash_of(&client, &ns, *kind, &name(*kind)).await.as_deref(),
            Some(h.as_str())
        );
    }
}

#[tokio::test]
async fn recreating_a_required_configmap_with_identical_data_rolls_nothing() {
    let (client, ns) = setup("recreate-req").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    for kind in WorkloadKind::BUILT_IN {
        create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    let mut revs = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
        revs.push(settled_revisions(&client, &ns, kind, &name(kind)).await);
    }
    settle(&wave, 3).await;
    let noops = wave.noops();
    delete_configmap(&client, &ns, "cfg").await;
    wait_for("the delete to block all three", TIMEOUT, || async {
        (wave.metric("wave_reconciles_total", &["result=\"blocked\""]) as u64 >= 3).then_some(())
    })
    .await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    wait_noops(&wave, noops, 3).await;
    assert_eq!(
        wave.writes(),
        3,
        "identical data means an identical hash: no write"
    );
    for (kind, rev) in WorkloadKind::BUILT_IN.into_iter().zip(revs) {
        assert_eq!(
            revisions(&client, &ns, kind, &name(kind)).await,
            rev,
            "{kind} rolled"
        );
    }
}

#[tokio::test]
async fn with_cronjobs_on_a_cron_jobs_next_job_runs_with_the_new_config_and_without_it_nothing_is_written() {
    let (client, ns) = setup("cronjob").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "1"})).await;
    let kind = WorkloadKind::CRON_JOB;
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}),
        json!({"restartPolicy": "Never"}),
    );
    let cron_job = |name: &str| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "annotations": opted_in(&[])},
            "spec": {"schedule": "0 0 1 1 *", "suspend": true,
                "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": spec.clone()}}}}})
    };
    for name in ["nightly", "untouched"] {
        workloads(&client, &ns, kind)
            .create(
                &Default::default(),
                &serde_json::from_value(cron_job(name)).unwrap(),
            )
            .await
            .unwrap();
    }
    // Without --cronjobs, CronJobs are not even watched: a Deployment's hash is the witness that wave ran.
    {
        let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
        let deploy = WorkloadKind::DEPLOYMENT;
        create_workload(
            &client,
            &ns,
            deploy,
            "witness",
            opted_in(&[]),
            pod_spec(json!({}), json!({})),
        )
        .await;
        wait_hash_change(&client, &ns, deploy, "witness", None).await;
        wave.expect_writes(1, "only the Deployment is written").await;
        assert_eq!(hash_of(&client, &ns, kind, "untouched").await, None);
    }
    let wave = Wave::start(
        &[&ns],
        &["--update-rate=inf", "--cronjobs", "--min-rollout-interval=0"],
    )
    .await;
    let first = wait_hash_change(&client, &ns, kind, "nightly", None).await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "2"}})).await;
    let second = wait_hash_change(&client, &ns, kind, "nightly", Some(&first)).await;
    assert_eq!(
        second,
        desired_hash(&testenv::cluster().kubeconfig(), &ns, kind, "nightly")
    );

    // The next Job is made from the CronJob's template: it carries the new hash.
    let out = testenv::cluster()
        .kubectl()
        .args(["create", "job", "next", "--from=cronjob/nightly", "-n", &ns])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let jobs = kube::Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns);
    let job = jobs.get("next").await.unwrap();
    let annotations = job
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap_or_default();
    assert_eq!(annotations.get("wave.pusher.com/config-hash"), Some(&second));
    drop(wave);
}
