//! Switching from Wave ≤ v0.6: with `--legacy-wave-cleanup` its finalizer and the owner references it
//! wrote on config are removed, and deleting a workload afterwards never deletes its config (the real
//! garbage collector runs in the testenv); owner references Wave did not write stay; and without the
//! rule the workload is still hashed and rolled, with one Warning.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use testenv::wait_for;
use wave_core::workload::WorkloadKind;

use crate::harness::*;

const FINALIZER: &str = "wave.pusher.com/finalizer";
const DEPLOY: WorkloadKind = WorkloadKind::DEPLOYMENT;

/// Creates an opted-in Deployment using `cm` and `secret`, with Wave v0.6's finalizer when `finalizer`;
/// returns its uid.
async fn create_v06(
    client: &kube::Client,
    ns: &str,
    name: &str,
    cm: &str,
    secret: &str,
    finalizer: bool,
) -> String {
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": cm}}, {"secretRef": {"name": secret}}]}),
        json!({}),
    );
    let mut b = body(DEPLOY, name, &opted_in(&[]), &spec);
    if finalizer {
        b["metadata"]["finalizers"] = json!([FINALIZER]);
    }
    let created = workloads(client, ns, DEPLOY)
        .create(&Default::default(), &serde_json::from_value(b).unwrap())
        .await
        .unwrap();
    created.metadata.uid.unwrap()
}

/// An owner reference as Wave v0.6 wrote it (`getOwnerReference`, pkg/core/owner_references.go at v0.6.0).
fn owner(kind: &str, api_version: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
           "controller": false, "blockOwnerDeletion": true})
}

/// An owner reference to a Deployment as controller-runtime's `SetOwnerReference` writes it: not Wave's.
fn other_tools_owner(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid, "blockOwnerDeletion": true})
}

async fn set_owners(client: &kube::Client, ns: &str, kind: &str, name: &str, owners: Vec<Value>) {
    let patch = Patch::Merge(json!({"metadata": {"ownerReferences": owners}}));
    let pp = PatchParams::default();
    if kind == "ConfigMap" {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch(name, &pp, &patch)
            .await
            .unwrap();
    } else {
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(name, &pp, &patch)
            .await
            .unwrap();
    }
}

/// The uids of a config object's owners; `None` if it does not exist.
async fn owners_of(client: &kube::Client, ns: &str, kind: &str, name: &str) -> Option<Vec<String>> {
    let meta = if kind == "ConfigMap" {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_metadata_opt(name)
            .await
            .unwrap()?
            .metadata
    } else {
        Api::<Secret>::namespaced(client.clone(), ns)
            .get_metadata_opt(name)
            .await
            .unwrap()?
            .metadata
    };
    Some(
        meta.owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|o| o.uid)
            .collect(),
    )
}

/// Deletes a Deployment and waits until it and its ReplicaSets are gone: by then the garbage collector
/// has acted on everything it owned.
async fn delete_and_wait_collected(client: &kube::Client, ns: &str, name: &str) {
    delete_workload(client, ns, DEPLOY, name).await;
    wait_for(
        &format!("{name} and its ReplicaSets collected"),
        TIMEOUT,
        || async {
            let gone = workloads(client, ns, DEPLOY)
                .get_opt(name)
                .await
                .unwrap()
                .is_none();
            let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
                .list(&ListParams::default().labels(&format!("app={name}")))
                .await
                .unwrap();
            (gone && rs.items.is_empty()).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn what_wave_v06_left_is_removed_and_deleting_a_workload_afterwards_keeps_its_config() {
    let (client, ns) = setup("wave-v06").await;
    for name in ["cfg", "cfg-terminating", "cfg-by-hand", "anchor", "collect-me"] {
        create_configmap(&client, &ns, name, json!({"k": "v"})).await;
    }
    create_secret(&client, &ns, "creds", json!({"password": "s3cret-canary"})).await;
    let anchor_uid = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("anchor")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let anchor = owner("ConfigMap", "v1", "anchor", &anchor_uid);

    // As Wave v0.6 left them: a managed workload with the finalizer and owned config (plus an owner
    // reference of someone else's, which stays) ...
    let old = create_v06(&client, &ns, "old", "cfg", "creds", true).await;
    let by_old = owner("Deployment", "apps/v1", "old", &old);
    set_owners(
        &client,
        &ns,
        "ConfigMap",
        "cfg",
        vec![by_old.clone(), anchor.clone()],
    )
    .await;
    set_owners(&client, &ns, "Secret", "creds", vec![by_old]).await;
    // ... config some other tool made owned by it, to be collected with it ...
    set_owners(
        &client,
        &ns,
        "ConfigMap",
        "collect-me",
        vec![other_tools_owner("old", &old)],
    )
    .await;
    // ... one deleted while Wave was gone, stuck Terminating on the finalizer ...
    let stuck = create_v06(&client, &ns, "terminating", "cfg-terminating", "creds", true).await;
    let by_stuck = owner("Deployment", "apps/v1", "terminating", &stuck);
    set_owners(&client, &ns, "ConfigMap", "cfg-terminating", vec![by_stuck]).await;
    delete_workload(&client, &ns, DEPLOY, "terminating").await;
    // ... and one whose finalizer was removed by hand, leaving its config owned.
    let by_hand = create_v06(&client, &ns, "by-hand", "cfg-by-hand", "creds", false).await;
    let owned_by_hand = owner("Deployment", "apps/v1", "by-hand", &by_hand);
    set_owners(&client, &ns, "ConfigMap", "cfg-by-hand", vec![owned_by_hand]).await;
    assert!(
        workloads(&client, &ns, DEPLOY)
            .get_opt("terminating")
            .await
            .unwrap()
            .is_some(),
        "the finalizer holds the deleted workload"
    );

    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--legacy-wave-cleanup"]).await;
    wait_for("the stuck workload to finish deleting", TIMEOUT, || async {
        workloads(&client, &ns, DEPLOY)
            .get_opt("terminating")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_for("the owner references to be removed", TIMEOUT, || async {
        let cfg = owners_of(&client, &ns, "ConfigMap", "cfg").await?;
        let creds = owners_of(&client, &ns, "Secret", "creds").await?;
        let by_hand = owners_of(&client, &ns, "ConfigMap", "cfg-by-hand").await?;
        (cfg == [anchor_uid.clone()] && creds.is_empty() && by_hand.is_empty()).then_some(())
    })
    .await;
    wait_for("the finalizer to be removed", TIMEOUT, || async {
        let d = workloads(&client, &ns, DEPLOY).get("old").await.unwrap();
        d.metadata.finalizers.unwrap_or_default().is_empty().then_some(())
    })
    .await;
    // The Event follows the last patch: wait for it rather than read it on sight.
    let note = wait_for("a LegacyWaveRemoved Event", TIMEOUT, || async {
        let events = events_for(&client, &ns, "old").await;
        events
            .into_iter()
            .find(|(_, r, _)| r == "LegacyWaveRemoved")
            .map(|(_, _, note)| note)
    })
    .await;
    assert!(note.contains("finalizer") && note.contains("cfg"), "{note}");
    assert_eq!(
        owners_of(&client, &ns, "ConfigMap", "collect-me").await,
        Some(vec![old.clone()]),
        "an owner reference Wave did not write stays"
    );

    delete_and_wait_collected(&client, &ns, "old").await;
    delete_and_wait_collected(&client, &ns, "by-hand").await;
    wait_for(
        "the config another tool made owned by old to be collected with it",
        TIMEOUT,
        || async {
            owners_of(&client, &ns, "ConfigMap", "collect-me")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    for (kind, name) in [
        ("ConfigMap", "cfg"),
        ("ConfigMap", "cfg-terminating"),
        ("ConfigMap", "cfg-by-hand"),
        ("Secret", "creds"),
    ] {
        assert!(
            owners_of(&client, &ns, kind, name).await.is_some(),
            "{kind} {name} was deleted with its workload"
        );
    }
    assert!(
        !wave.output().contains("s3cret-canary"),
        "a Secret value reached the log"
    );
}

/// The pod template of Deployment `name`.
async fn template_of(client: &kube::Client, ns: &str, name: &str) -> Value {
    workloads(client, ns, DEPLOY).get(name).await.unwrap().data["spec"]["template"].clone()
}

#[tokio::test]
async fn config_owned_by_a_workload_wave_never_managed_keeps_its_owner_reference() {
    let (client, ns) = setup("not-wave-s").await;
    create_configmap(&client, &ns, "owned", json!({"k": "v1"})).await;
    // Annotated for Reloader only, never for Wave, and without Wave's finalizer: its users made the
    // ConfigMap owned by it (even in exactly Wave's shape) so that it is collected with it.
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "owned"}}]}),
        json!({}),
    );
    let reloader_only = json!({"reloader.stakater.com/auto": "true"});
    let created = workloads(&client, &ns, DEPLOY)
        .create(
            &Default::default(),
            &serde_json::from_value(body(DEPLOY, "reloaded", &reloader_only, &spec)).unwrap(),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();
    set_owners(
        &client,
        &ns,
        "ConfigMap",
        "owned",
        vec![owner("Deployment", "apps/v1", "reloaded", &uid)],
    )
    .await;
    // A workload Wave did manage, in the same namespace: its cleanup shows that the cleanup runs.
    create_configmap(&client, &ns, "cfg", json!({"k": "v"})).await;
    create_secret(&client, &ns, "creds", json!({"password": "x"})).await;
    let old = create_v06(&client, &ns, "old", "cfg", "creds", true).await;
    set_owners(
        &client,
        &ns,
        "ConfigMap",
        "cfg",
        vec![owner("Deployment", "apps/v1", "old", &old)],
    )
    .await;

    let wave = Wave::start(
        &[&ns],
        &["--update-rate=inf", "--legacy-wave-cleanup", "--reloader-compat"],
    )
    .await;
    wait_event(
        &client,
        &ns,
        "old",
        "old's LegacyWaveRemoved Event",
        |(_, r, _)| r == "LegacyWaveRemoved",
    )
    .await;
    // The sentinel: a change of the ConfigMap reloads the Reloader-annotated Deployment, so wave has
    // reconciled it (and run the cleanup first) at start-up and again now.
    let before = template_of(&client, &ns, "reloaded").await;
    patch_configmap(&client, &ns, "owned", json!({"data": {"k": "v2"}})).await;
    wait_for("the Reloader-annotated Deployment to reload", TIMEOUT, || async {
        (template_of(&client, &ns, "reloaded").await != before).then_some(())
    })
    .await;
    assert_eq!(
        owners_of(&client, &ns, "ConfigMap", "owned").await,
        Some(vec![uid]),
        "wave removed an owner reference to a workload Wave never managed:\n{}",
        wave.output()
    );
    let legacy: Vec<_> = events_for(&client, &ns, "reloaded")
        .await
        .into_iter()
        .filter(|(_, r, _)| r.starts_with("LegacyWave"))
        .collect();
    assert!(legacy.is_empty(), "{legacy:?}");
}

#[tokio::test]
async fn with_the_charts_default_rbac_a_workload_wave_left_config_owned_is_still_hashed_and_rolled_with_one_warning()
 {
    let (client, ns) = setup("wave-v06-rbac").await;
    let release_ns = testenv::namespace(&client, "wave-v06-release").await;
    let release = format!("legacy{}", std::process::id());
    let kubeconfig = crate::ship::chart_identity(&release, &release_ns, &[], |_| {});
    create_configmap(&client, &ns, "cfg", json!({"k": "1"})).await;
    create_secret(&client, &ns, "creds", json!({"password": "s3cret-canary"})).await;
    let old = create_v06(&client, &ns, "old", "cfg", "creds", true).await;
    let by_old = owner("Deployment", "apps/v1", "old", &old);
    set_owners(&client, &ns, "ConfigMap", "cfg", vec![by_old.clone()]).await;
    set_owners(&client, &ns, "Secret", "creds", vec![by_old]).await;
    // Its finalizer alone: nothing is owned by it, so wave removes it (a workload patch) even so.
    create_v06(&client, &ns, "alone", "cfg", "creds", true).await;

    // As the chart runs it by default: no --legacy-wave-cleanup, and no rule to patch config. Then with
    // the flag but without the rule (the chart's value turned on by hand, a policy refusing): refused.
    let mut hash = None;
    let mut value = 1;
    for (flags, reason, says) in [
        (&[][..], "LegacyWaveLeft", "Wave v0.6 left owner references"),
        (
            &["--legacy-wave-cleanup"][..],
            "LegacyWaveCleanupFailed",
            "Could not remove Wave v0.6's",
        ),
    ] {
        let mut wave = Wave::start_as(
            &kubeconfig,
            &[&ns],
            &[&["--update-rate=inf", "--min-rollout-interval=0"][..], flags].concat(),
        )
        .await;
        // Hashed (on the first run), then rolled by two changes: each a reconcile that writes, followed by
        // the one its own write causes.
        if hash.is_none() {
            hash = Some(wait_hash_change(&client, &ns, DEPLOY, "old", None).await);
        }
        for _ in 0..2 {
            value += 1;
            patch_configmap(&client, &ns, "cfg", json!({"data": {"k": value.to_string()}})).await;
            hash = Some(wait_hash_change(&client, &ns, DEPLOY, "old", hash.as_deref()).await);
        }
        // The sentinel: the Event of the last write follows the Warnings of every earlier reconcile.
        let last = hash.clone().unwrap();
        wait_event(
            &client,
            &ns,
            "old",
            "the last ConfigChanged Event",
            |(_, r, note)| r == "ConfigChanged" && note.contains(&last),
        )
        .await;
        wait_for("the finalizer owning nothing to be removed", TIMEOUT, || async {
            let d = workloads(&client, &ns, DEPLOY).get("alone").await.unwrap();
            d.metadata.finalizers.is_none().then_some(())
        })
        .await;
        let warnings: Vec<_> = events_for(&client, &ns, "old")
            .await
            .into_iter()
            .filter(|(t, r, _)| t == "Warning" && r == reason)
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "one {reason}, not one per reconcile: {warnings:?}"
        );
        let note = &warnings[0].2;
        assert!(
            note.contains(says)
                && note.contains(&format!("configmap {ns}/cfg"))
                && note.contains(&format!("secret {ns}/creds"))
                && note.contains("rbac.legacyWaveCleanup=true"),
            "the Warning names what is left and the value that removes it: {note}"
        );
        let log = wave.output();
        assert_eq!(log.matches(says).count(), 1, "one log line:\n{log}");
        assert!(!log.contains("s3cret-canary"), "a Secret value reached the log");
        // Nothing was removed: the finalizer keeps the config from being deleted with the workload.
        let d = workloads(&client, &ns, DEPLOY).get("old").await.unwrap();
        assert_eq!(d.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
        for (kind, name) in [("ConfigMap", "cfg"), ("Secret", "creds")] {
            assert_eq!(
                owners_of(&client, &ns, kind, name).await,
                Some(vec![old.clone()]),
                "{kind} {name}"
            );
        }
        wave.kill();
    }
}
