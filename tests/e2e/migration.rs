//! Switching from Wave ≤ v0.6: its finalizer and its owner references on config are removed, and deleting
//! a workload afterwards never deletes its config (the real garbage collector runs in the testenv).

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

/// An owner reference as Wave v0.6 wrote it.
fn owner(kind: &str, api_version: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "blockOwnerDeletion": true})
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
    for name in ["cfg", "cfg-terminating", "cfg-by-hand", "anchor"] {
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

    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
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

    delete_and_wait_collected(&client, &ns, "old").await;
    delete_and_wait_collected(&client, &ns, "by-hand").await;
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
