//! Config history: a snapshot of the config behind each hash, owned by the revision that runs it and
//! collected with it; `undo: restore-config`; `wave history` and `wave diff` (`docs/history.md`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use testenv::{cluster, wait_for};
use wave_core::hash::{Content, Fetched, Hashing, config_hash};
use wave_core::history::{Revision, Snapshot};
use wave_core::refs::{self, ConfigKey, ConfigKind};
use wave_core::workload::{WorkloadKind, WorkloadRef};
use wave_runtime::api;

use crate::harness::*;
use crate::ship::chart_identity;

const CANARY: &str = "canary-3f9d2c";

/// `kubectl rollout undo KIND/NAME -n NS --to-revision=N`.
fn rollout_undo_to(ns: &str, kind: WorkloadKind, name: &str, revision: i64) {
    kubectl_rollout("undo", ns, kind, name, &[&format!("--to-revision={revision}")]);
}

/// `kubectl rollout undo` of `id` to its revision with `hash`, refused: the `ConfigRestoreRefused`
/// Warning's note.
async fn undo_refused(client: &kube::Client, id: &WorkloadRef, hash: &str) -> String {
    let revision = revision_with(client, id, hash).await.number;
    rollout_undo_to(&id.namespace, id.kind, &id.name, revision);
    wait_for("a ConfigRestoreRefused Warning", TIMEOUT, || async {
        events_for(client, &id.namespace, &id.name)
            .await
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "ConfigRestoreRefused")
            .map(|(_, _, n)| n)
    })
    .await
}

/// The snapshot ConfigMap and Secret of `id` at `hash`, as stored.
async fn snapshot(
    client: &kube::Client,
    id: &WorkloadRef,
    hash: &str,
) -> Option<(ConfigMap, Option<Secret>)> {
    api::get_snapshot(client, id, hash).await.unwrap()
}

/// The revision of `id` whose template carries `hash`.
async fn revision_with(client: &kube::Client, id: &WorkloadRef, hash: &str) -> Revision {
    let w = api::get_workload(client, id).await.unwrap().unwrap();
    let revisions = api::list_revisions(client, id, &w.uid, "").await.unwrap();
    wave_core::history::revision_with(&revisions, hash)
        .unwrap_or_else(|| panic!("{id}: no revision carries {hash}: {revisions:?}"))
        .clone()
}

/// The hash wave computes for a workload in `ns` with `spec` and this config: known before the workload
/// exists, so it can be created already carrying it (its first revision is then the first hash).
/// A config object for [`hash_for`]: its kind, name and values.
type Object<'a> = (ConfigKind, &'a str, &'a [(&'a str, &'a str)]);

fn hash_for(ns: &str, spec: &Value, objects: &[Object<'_>]) -> String {
    let template = serde_json::from_value(json!({"spec": spec})).unwrap();
    let refs = refs::discover(ns, &BTreeMap::new(), &template);
    let fetched: Fetched = objects
        .iter()
        .map(|(kind, name, values)| {
            let values = values
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect();
            (ConfigKey::new(*kind, ns, *name), Arc::new(Content::new(values)))
        })
        .collect();
    config_hash(ns, &refs, &fetched, &Hashing::Plain)
}

fn with_hash(kind: WorkloadKind, name: &str, annotations: &Value, spec: &Value, hash: &str) -> Value {
    let mut b = body(kind, name, annotations, spec);
    b["spec"]["template"]["metadata"]["annotations"] = json!({"wave.pusher.com/config-hash": hash});
    b
}

fn app_spec() -> Value {
    pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "app"}}],
               "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}),
        json!({}),
    )
}

#[tokio::test]
async fn a_snapshot_is_kept_for_each_hash_owned_by_its_revision_and_collected_with_it_for_every_kind() {
    let (client, ns) = setup("history").await;
    let release_ns = testenv::namespace(&client, "history-release").await;
    // wave runs with the chart's RBAC for history, which must be enough.
    let kubeconfig = chart_identity(
        &format!("h{}", std::process::id()),
        &release_ns,
        &["configHistory.enabled=true"],
        |_| {},
    );
    create_configmap(&client, &ns, "app", json!({"level": "1"})).await;
    create_secret(&client, &ns, "db", json!({"password": CANARY})).await;
    let wave = Wave::start_as(
        &kubeconfig,
        &[&ns],
        &[
            "--update-rate=inf",
            "--min-rollout-interval=0",
            "--config-history",
        ],
    )
    .await;
    let spec_with_limit = |kind: WorkloadKind| {
        let mut b = body(kind, &name(kind), &opted_in(&[]), &app_spec());
        b["spec"]["revisionHistoryLimit"] = json!(1);
        b
    };
    for kind in WorkloadKind::BUILT_IN {
        let b = spec_with_limit(kind);
        workloads(&client, &ns, kind)
            .create(&Default::default(), &serde_json::from_value(b).unwrap())
            .await
            .unwrap();
    }
    let mut hashes: Vec<Vec<String>> = vec![Vec::new(); 3];
    for round in 1..=3 {
        if round > 1 {
            patch_configmap(&client, &ns, "app", json!({"data": {"level": round.to_string()}})).await;
        }
        for (i, kind) in WorkloadKind::BUILT_IN.into_iter().enumerate() {
            let n = name(kind);
            let id = WorkloadRef::new(kind, &ns, &n);
            let h = wait_hash_change(&client, &ns, kind, &n, hashes[i].last().map(String::as_str)).await;
            let (cm, secret) = wait_for(&format!("{kind}'s snapshot of {h}"), TIMEOUT, || async {
                snapshot(&client, &id, &h).await
            })
            .await;
            let revision = revision_with(&client, &id, &h).await;
            let owners = cm.metadata.owner_references.clone().unwrap_or_default();
            assert!(
                owners
                    .iter()
                    .any(|o| o.uid == revision.owner.uid && o.kind == revision.owner.kind),
                "{kind}: the snapshot is owned by the {} carrying its hash: {owners:?}",
                revision.owner.kind
            );
            assert_eq!(cm.immutable, Some(true));
            let secret = secret.expect("the Secret's data is kept in a Secret");
            assert_eq!(secret.immutable, Some(true));
            let cm_text = serde_json::to_string(&cm).unwrap();
            assert!(
                !cm_text.contains(CANARY) && !cm_text.contains("Y2FuYXJ5"),
                "no Secret data in a ConfigMap"
            );
            let read = Snapshot::read(&cm, Some(&secret)).unwrap();
            assert_eq!(
                read.hash(&Hashing::Plain),
                h,
                "{kind}: the snapshot hashes back to its hash"
            );
            hashes[i].push(h);
        }
    }
    // revisionHistoryLimit 1: the first revision goes, and the garbage collector takes its snapshot.
    // Two controllers of kube-controller-manager act in turn here: a DaemonSet's controller prunes a
    // revision only once none of its pods runs it (kwok replaces them one node at a time), then the
    // garbage collector deletes what the revision owned. A CI run busy with the whole suite once timed
    // out here after one minute, so this wait allows three.
    for (i, kind) in WorkloadKind::BUILT_IN.into_iter().enumerate() {
        let id = WorkloadRef::new(kind, &ns, name(kind));
        let first = &hashes[i][0];
        wait_for(
            &format!("{kind}'s first snapshot collected"),
            3 * TIMEOUT,
            || async {
                let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns);
                let secret = Api::<Secret>::namespaced(client.clone(), &ns);
                let name = Snapshot::name(&id, first);
                let gone = cm.get_opt(&name).await.unwrap().is_none()
                    && secret.get_opt(&name).await.unwrap().is_none();
                gone.then_some(())
            },
        )
        .await;
        for h in &hashes[i][1..] {
            assert!(
                snapshot(&client, &id, h).await.is_some(),
                "{kind}: the snapshot of a kept revision stays"
            );
        }
        let refused: Vec<_> = events_for(&client, &ns, &name(kind))
            .await
            .into_iter()
            .filter(|(_, reason, _)| reason == "ConfigSnapshotFailed")
            .collect();
        assert!(refused.is_empty(), "{kind}: {refused:?}");
    }
    // The chart's RBAC was enough: nothing was refused. (Other errors are retried, and a CI run busy
    // with the whole suite can see a few: a write that conflicted five times in a row, a timeout.)
    assert_eq!(
        wave.metric("wave_reconcile_errors_total", &["_forbidden\""]),
        0.0,
        "{}",
        wave.output()
    );
    assert!(!wave.output().contains(CANARY));
}

#[tokio::test]
async fn without_the_rbac_for_history_a_workload_asking_for_it_gets_one_warning_and_still_rolls() {
    let (client, ns) = setup("history-norbac").await;
    let release_ns = testenv::namespace(&client, "history-norbac-release").await;
    let kubeconfig = chart_identity(&format!("hn{}", std::process::id()), &release_ns, &[], |_| {});
    create_configmap(&client, &ns, "app", json!({"level": "1"})).await;
    let wave = Wave::start_as(
        &kubeconfig,
        &[&ns],
        &["--update-rate=inf", "--min-rollout-interval=0"],
    )
    .await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(
        &client,
        &ns,
        kind,
        "web",
        opted_in(&[("wave.pusher.com/config-history", "true")]),
        spec,
    )
    .await;
    let h1 = wait_hash_change(&client, &ns, kind, "web", None).await;
    let note = wait_for("a ConfigSnapshotFailed Warning", TIMEOUT, || async {
        let events = events_for(&client, &ns, "web").await;
        events
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "ConfigSnapshotFailed")
            .map(|(_, _, note)| note)
    })
    .await;
    assert!(note.contains("forbidden"), "the refusal is named: {note}");
    patch_configmap(&client, &ns, "app", json!({"data": {"level": "2"}})).await;
    wait_hash_change(&client, &ns, kind, "web", Some(&h1)).await;
    wave.expect_writes(2, "history failing never stops a rollout")
        .await;
}

/// The pods of `name` in `ns` that are not being deleted, with their config hash.
async fn pod_hashes(client: &kube::Client, ns: &str, name: &str) -> Vec<Option<String>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap();
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            p.metadata
                .annotations
                .and_then(|a| a.get("wave.pusher.com/config-hash").cloned())
        })
        .collect()
}

#[tokio::test]
async fn restore_config_on_undo_restores_the_data_so_the_pods_end_on_the_old_hash_and_refuses_config_helm_or_argo_cd_manages()
 {
    let (client, ns) = setup("restore").await;
    create_configmap(&client, &ns, "app", json!({"level": "info"})).await;
    create_secret(&client, &ns, "db", json!({"password": CANARY})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=0"]).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let annotations = opted_in(&[
        ("wave.pusher.com/config-history", "true"),
        ("wave.pusher.com/undo", "restore-config"),
    ]);
    create_workload(&client, &ns, kind, "web", annotations, app_spec()).await;
    let id = WorkloadRef::new(kind, &ns, "web");
    let h1 = wait_hash_change(&client, &ns, kind, "web", None).await;
    wait_for("the snapshot of the first hash", TIMEOUT, || async {
        snapshot(&client, &id, &h1).await
    })
    .await;
    patch_configmap(
        &client,
        &ns,
        "app",
        json!({"data": {"level": "debug", "extra": "x"}}),
    )
    .await;
    patch_secret(
        &client,
        &ns,
        "db",
        json!({"stringData": {"password": "new-password"}}),
    )
    .await;
    let h2 = wait_for("the hash of the new config", TIMEOUT, || async {
        let h = hash_of(&client, &ns, kind, "web").await?;
        let desired = desired_hash(&cluster().kubeconfig(), &ns, kind, "web");
        (h != h1 && h == desired).then_some(h)
    })
    .await;
    wait_for("the snapshot of the second hash", TIMEOUT, || async {
        snapshot(&client, &id, &h2).await
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    let writes = wave.writes();

    // Changing the ConfigMap and the Secret may have made a revision in between: go back to the first.
    let first = revision_with(&client, &id, &h1).await.number;
    rollout_undo_to(&ns, kind, "web", first);
    let note = wait_for("a ConfigRestored Event", TIMEOUT, || async {
        events_for(&client, &ns, "web")
            .await
            .into_iter()
            .find(|(_, r, _)| r == "ConfigRestored")
            .map(|(_, _, n)| n)
    })
    .await;
    assert!(
        note.contains("configmap/app") && note.contains("secret/db") && note.contains(&h1),
        "{note}"
    );
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let app = cms.get("app").await.unwrap();
    assert_eq!(
        app.data,
        Some(BTreeMap::from([("level".to_string(), "info".to_string())])),
        "the whole ConfigMap is back, the key added since removed"
    );
    let db = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("db")
        .await
        .unwrap();
    assert_eq!(db.data.unwrap()["password"].0, CANARY.as_bytes());
    wait_for("the pods to run the old hash", TIMEOUT, || async {
        let hashes = pod_hashes(&client, &ns, "web").await;
        (hashes == [Some(h1.clone())]).then_some(())
    })
    .await;
    assert_eq!(
        desired_hash(&cluster().kubeconfig(), &ns, kind, "web"),
        h1,
        "the config is the old one"
    );
    let w = workload(&client, &ns, kind, "web").await;
    assert_eq!(w.current_hash(), Some(h1.as_str()));
    assert!(
        !w.annotations.contains_key("wave.pusher.com/pinned-hash"),
        "restored, not pinned"
    );
    assert_eq!(wave.writes(), writes, "the undo was not rolled forward");

    // A ConfigMap a tool manages is never restored: the template is pinned instead.
    patch_configmap(
        &client,
        &ns,
        "app",
        json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"}}, "data": {"level": "warn"}}),
    )
    .await;
    let h3 = wait_hash_change(&client, &ns, kind, "web", Some(&h1)).await;
    wait_for("the snapshot of the third hash", TIMEOUT, || async {
        snapshot(&client, &id, &h3).await
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    let note = undo_refused(&client, &id, &h1).await;
    assert!(note.contains("configmap") && note.contains("Helm"), "{note}");
    wait_for("the undo pinned", TIMEOUT, || async {
        let w = workload(&client, &ns, kind, "web").await;
        w.annotations
            .contains_key("wave.pusher.com/pinned-hash")
            .then_some(())
    })
    .await;
    assert_eq!(
        cms.get("app").await.unwrap().data.unwrap()["level"],
        "warn",
        "Helm's ConfigMap is left as it is"
    );

    // Nor a Secret Argo CD tracks. (Changing it rolls, and ends the pin; then undo once more.)
    let cm_labels = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}});
    patch_configmap(&client, &ns, "app", cm_labels).await;
    let tracked = json!({"metadata": {"annotations": {"argocd.argoproj.io/tracking-id": "shop:/Secret:ns/db"}},
                         "stringData": {"password": "argo-password"}});
    patch_secret(&client, &ns, "db", tracked).await;
    let h4 = wait_hash_change(&client, &ns, kind, "web", Some(&h1)).await;
    wait_for("the snapshot of the fourth hash", TIMEOUT, || async {
        snapshot(&client, &id, &h4).await
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    let back = revision_with(&client, &id, &h1).await.number;
    rollout_undo_to(&ns, kind, "web", back);
    wait_for(
        "a ConfigRestoreRefused Warning naming Argo CD",
        TIMEOUT,
        || async {
            events_for(&client, &ns, "web")
                .await
                .into_iter()
                .find(|(t, r, n)| t == "Warning" && r == "ConfigRestoreRefused" && n.contains("Argo CD"))
                .map(|_| ())
        },
    )
    .await;
    let db = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("db")
        .await
        .unwrap();
    assert_eq!(
        db.data.unwrap()["password"].0,
        b"argo-password",
        "Argo CD's Secret is left as it is"
    );
    assert!(!wave.output().contains(CANARY));
}

/// Replaces what differs between runs (the namespace, creation times) so output can be compared.
fn normalise(text: &str, ns: &str, times: &[String]) -> String {
    let mut out = text.replace(ns, "NS");
    for t in times {
        out = out.replace(t.as_str(), "2026-01-01T00:00:00Z");
    }
    out
}

#[tokio::test]
async fn wave_history_and_wave_diff_match_their_golden_files_and_never_show_a_secret_value() {
    let (client, ns) = setup("history-cli").await;
    let spec = app_spec();
    let v1 = "listen: 8080\nlevel: info\nworkers: 4\n";
    create_configmap(&client, &ns, "app", json!({"app.yaml": v1, "mode": "blue"})).await;
    create_secret(&client, &ns, "db", json!({"password": CANARY})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=0"]).await;
    // Created carrying its first hash, so that revision 1 is that hash in every run.
    let h1 = hash_for(
        &ns,
        &spec,
        &[
            (
                ConfigKind::ConfigMap,
                "app",
                &[("app.yaml", v1), ("mode", "blue")],
            ),
            (ConfigKind::Secret, "db", &[("password", CANARY)]),
        ],
    );
    let kind = WorkloadKind::DEPLOYMENT;
    let annotations = opted_in(&[("wave.pusher.com/config-history", "true")]);
    workloads(&client, &ns, kind)
        .create(
            &Default::default(),
            &serde_json::from_value(with_hash(kind, "web", &annotations, &spec, &h1)).unwrap(),
        )
        .await
        .unwrap();
    let id = WorkloadRef::new(kind, &ns, "web");
    wait_for("the snapshot of revision 1", TIMEOUT, || async {
        snapshot(&client, &id, &h1).await
    })
    .await;
    let mut last = h1.clone();
    for patch in [
        json!({"data": {"app.yaml": "listen: 8080\nlevel: debug\nworkers: 4\n"}}),
        json!({"data": {"mode": null, "color": "green"}}),
    ] {
        patch_configmap(&client, &ns, "app", patch).await;
        last = wait_hash_change(&client, &ns, kind, "web", Some(&last)).await;
        wait_for("its snapshot", TIMEOUT, || async {
            snapshot(&client, &id, &last).await
        })
        .await;
    }
    patch_secret(
        &client,
        &ns,
        "db",
        json!({"stringData": {"password": format!("{CANARY}-2")}}),
    )
    .await;
    last = wait_hash_change(&client, &ns, kind, "web", Some(&last)).await;
    wait_for("its snapshot", TIMEOUT, || async {
        snapshot(&client, &id, &last).await
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    wave.expect_writes(3, "three config changes").await;

    let kubeconfig = cluster().kubeconfig();
    let (code, json_out, err) = run_wave(
        &["history", "deployment/web", "-n", &ns, "-o", "json"],
        Some(&kubeconfig),
    );
    assert_eq!(code, 0, "{err}");
    let views: Vec<Value> = serde_json::from_str(&json_out).unwrap();
    let times: Vec<String> = views
        .iter()
        .filter_map(|v| v["created"].as_str().map(str::to_string))
        .collect();
    assert_eq!(views.len(), 4, "four revisions: {json_out}");
    let mut outputs = vec![(
        "history",
        run_wave(&["history", "deployment/web", "-n", &ns], Some(&kubeconfig)),
    )];
    for revision in ["2", "3", "4"] {
        let args = ["diff", "deployment/web", "-n", &ns, "--revision", revision];
        outputs.push((revision, run_wave(&args, Some(&kubeconfig))));
    }
    outputs.push((
        "missing",
        run_wave(
            &["diff", "deployment/web", "-n", &ns, "--revision", "9"],
            Some(&kubeconfig),
        ),
    ));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/history");
    for (case, (code, out, err)) in outputs {
        let text = normalise(
            &format!("exit: {code}\n--- stdout\n{out}--- stderr\n{err}"),
            &ns,
            &times,
        );
        assert!(!text.contains(CANARY), "{case}: a Secret value leaked: {text}");
        let file = if case == "history" || case == "missing" {
            format!("{case}.out")
        } else {
            format!("diff-{case}.out")
        };
        crate::hash_golden::check_golden(&dir.join(file), &text);
    }
    // The hashes in the golden files depend only on the config: they are the hashes wave wrote.
    assert!(
        std::fs::read_to_string(dir.join("history.out"))
            .unwrap()
            .contains(&last[..12]),
        "the golden history names the current hash"
    );
}

#[tokio::test]
async fn every_hash_a_workload_settles_on_gets_its_snapshot_even_when_config_changes_during_the_first_snapshots()
 {
    let (client, ns) = setup("history-burst").await;
    let kind = WorkloadKind::DEPLOYMENT;
    for i in 0..12 {
        create_configmap(&client, &ns, &format!("cfg-{i}"), json!({"v": "1"})).await;
        let spec = pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": format!("cfg-{i}")}}]}),
            json!({}),
        );
        create_workload(&client, &ns, kind, &format!("app-{i}"), opted_in(&[]), spec).await;
    }
    let _wave = Wave::start(
        &[&ns],
        &[
            "--update-rate=inf",
            "--min-rollout-interval=0",
            "--config-history",
        ],
    )
    .await;
    let mut first = Vec::new();
    for i in 0..12 {
        first.push(wait_hash_change(&client, &ns, kind, &format!("app-{i}"), None).await);
    }
    // At once, while wave is still keeping the first snapshots.
    for i in 0..6 {
        patch_configmap(&client, &ns, &format!("cfg-{i}"), json!({"data": {"v": "2"}})).await;
    }
    for (i, h1) in first.iter().enumerate() {
        let name = format!("app-{i}");
        let id = WorkloadRef::new(kind, &ns, &name);
        let now = if i < 6 {
            wait_hash_change(&client, &ns, kind, &name, Some(h1)).await
        } else {
            h1.clone()
        };
        wait_for(
            &format!("{name}'s snapshot of its current hash"),
            TIMEOUT,
            || async { snapshot(&client, &id, &now).await },
        )
        .await;
    }
}

#[tokio::test]
async fn an_undo_never_restores_over_config_that_was_written_after_the_last_rollout() {
    let (client, ns) = setup("restore-unrun").await;
    create_configmap(&client, &ns, "app", json!({"level": "v1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=1h"]).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let annotations = opted_in(&[
        ("wave.pusher.com/config-history", "true"),
        ("wave.pusher.com/undo", "restore-config"),
    ]);
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    create_workload(&client, &ns, kind, "web", annotations, spec).await;
    let id = WorkloadRef::new(kind, &ns, "web");
    let h1 = wait_hash_change(&client, &ns, kind, "web", None).await;
    wait_for("the snapshot of the first hash", TIMEOUT, || async {
        snapshot(&client, &id, &h1).await
    })
    .await;
    // v2 rolls at once (the first rollout); v3 is written within the hour, and waits.
    patch_configmap(&client, &ns, "app", json!({"data": {"level": "v2"}})).await;
    let h2 = wait_hash_change(&client, &ns, kind, "web", Some(&h1)).await;
    wait_for("the snapshot of the second hash", TIMEOUT, || async {
        snapshot(&client, &id, &h2).await
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    patch_configmap(&client, &ns, "app", json!({"data": {"level": "v3"}})).await;
    wait_for("wave to hold v3", TIMEOUT, || async {
        (wave.metric("wave_reconciles_total", &["result=\"coalesced\""]) > 0.0).then_some(())
    })
    .await;

    // The user undoes v2's rollout. Restoring v1 would destroy v3, which never ran anywhere.
    let note = undo_refused(&client, &id, &h1).await;
    assert!(note.contains("never ran"), "{note}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("app")
        .await
        .unwrap();
    assert_eq!(
        cm.data.unwrap_or_default().get("level").map(String::as_str),
        Some("v3"),
        "the config the user wrote last is kept"
    );
    wait_for("the undo to stick: pinned", TIMEOUT, || async {
        let w = workload(&client, &ns, kind, "web").await;
        (w.annotations.get("wave.pusher.com/pinned-hash") == Some(&h1)).then_some(())
    })
    .await;
}

/// The `level` of ConfigMap `name`.
async fn level(client: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    cm.data.unwrap_or_default().remove("level")
}

/// `metadata.generation` of a Deployment: one more for each change of its template.
async fn generation(client: &kube::Client, ns: &str, name: &str) -> i64 {
    workload(client, ns, WorkloadKind::DEPLOYMENT, name)
        .await
        .generation
}

#[tokio::test]
async fn a_restore_that_fails_halfway_writes_back_what_it_restored_rolls_nothing_to_the_mix_and_completes_once_writes_work()
 {
    let (client, ns) = setup("restore-halfway").await;
    create_configmap(&client, &ns, "app", json!({"level": "v1"})).await;
    create_configmap(&client, &ns, "flags", json!({"level": "v1"})).await;
    // The failed attempts write `app` back and forth: not flapping for this test.
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--flap-threshold=0"]).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let both = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "app"}}, {"configMapRef": {"name": "flags"}}]}),
        json!({}),
    );
    let app_only = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    let restores = opted_in(&[
        ("wave.pusher.com/config-history", "true"),
        ("wave.pusher.com/undo", "restore-config"),
    ]);
    create_workload(&client, &ns, kind, "web", restores, both.clone()).await;
    create_workload(&client, &ns, kind, "side", opted_in(&[]), app_only.clone()).await;
    let id = WorkloadRef::new(kind, &ns, "web");
    let h1 = hash_for(
        &ns,
        &both,
        &[
            (ConfigKind::ConfigMap, "app", &[("level", "v1")]),
            (ConfigKind::ConfigMap, "flags", &[("level", "v1")]),
        ],
    );
    let h2 = hash_for(
        &ns,
        &both,
        &[
            (ConfigKind::ConfigMap, "app", &[("level", "v2")]),
            (ConfigKind::ConfigMap, "flags", &[("level", "v2")]),
        ],
    );
    let side_v1 = hash_for(
        &ns,
        &app_only,
        &[(ConfigKind::ConfigMap, "app", &[("level", "v1")])],
    );
    let side_v2 = hash_for(
        &ns,
        &app_only,
        &[(ConfigKind::ConfigMap, "app", &[("level", "v2")])],
    );
    wait_for("the snapshot of v1", TIMEOUT, || async {
        snapshot(&client, &id, &h1).await
    })
    .await;
    patch_configmap(&client, &ns, "app", json!({"data": {"level": "v2"}})).await;
    patch_configmap(&client, &ns, "flags", json!({"data": {"level": "v2"}})).await;
    wait_for("web on v2 with its snapshot", TIMEOUT, || async {
        let on_v2 = hash_of(&client, &ns, kind, "web").await.as_deref() == Some(h2.as_str());
        (on_v2 && snapshot(&client, &id, &h2).await.is_some()).then_some(())
    })
    .await;
    wait_for("side on v2", TIMEOUT, || async {
        (hash_of(&client, &ns, kind, "side").await.as_deref() == Some(side_v2.as_str())).then_some(())
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    let side_generation = generation(&client, &ns, "side").await;

    // Every write of `flags` now fails with a 500, after `app` was restored.
    patch_configmap(
        &client,
        &ns,
        "flags",
        json!({"metadata": {"labels": {(FailingWrites::LABEL): &ns}}}),
    )
    .await;
    let failing = FailingWrites::start(&client, &ns, "", "configmaps").await;
    let revision = revision_with(&client, &id, &h1).await.number;
    rollout_undo_to(&ns, kind, "web", revision);
    let (_, _, note) = wait_event(
        &client,
        &ns,
        "web",
        "a WriteFailed Warning on the restore",
        |(t, r, _)| t == "Warning" && r == "WriteFailed",
    )
    .await;
    assert!(
        note.contains("Restoring configmap") && note.contains("written back"),
        "{note}"
    );
    // Between attempts (each restores app, fails on flags, and writes app back) both are on v2.
    wait_for("app written back", TIMEOUT, || async {
        let app = level(&client, &ns, "app").await;
        let flags = level(&client, &ns, "flags").await;
        (app.as_deref() == Some("v2") && flags.as_deref() == Some("v2")).then_some(())
    })
    .await;
    wait_for("the restore to be tried again", TIMEOUT, || async {
        (wave.metric("wave_reconcile_errors_total", &["error=\"config_history\""]) >= 2.0).then_some(())
    })
    .await;
    let warnings = events_for(&client, &ns, "web").await;
    assert_eq!(
        warnings.iter().filter(|(_, r, _)| r == "WriteFailed").count(),
        1,
        "one Warning while it fails the same way: {warnings:?}"
    );
    assert_eq!(
        hash_of(&client, &ns, kind, "side").await.as_deref(),
        Some(side_v2.as_str()),
        "side never rolled to the half-restored config"
    );
    assert_eq!(generation(&client, &ns, "side").await, side_generation);

    // Writes work again: the restore completes, and side rolls once, to v1.
    failing.stop(&client).await;
    wait_event(&client, &ns, "web", "ConfigRestored", |(_, r, _)| {
        r == "ConfigRestored"
    })
    .await;
    assert_eq!(level(&client, &ns, "app").await.as_deref(), Some("v1"));
    assert_eq!(level(&client, &ns, "flags").await.as_deref(), Some("v1"));
    wait_for("side on v1", TIMEOUT, || async {
        (hash_of(&client, &ns, kind, "side").await.as_deref() == Some(side_v1.as_str())).then_some(())
    })
    .await;
    assert_eq!(
        generation(&client, &ns, "side").await,
        side_generation + 1,
        "side rolled once: to the restored config, never to a mix"
    );
    assert_eq!(
        hash_of(&client, &ns, kind, "web").await.as_deref(),
        Some(h1.as_str()),
        "web stays on the hash it went back to: {:?}",
        events_for(&client, &ns, "web").await
    );
}
