//! The chart, run for real: installed with its default values from wave's image, a config change rolls
//! a workload; upgraded to the same chart with other values (two replicas and the webhook, so wave
//! creates a Lease and issues its certificate), a change still rolls; uninstalled, nothing of wave is
//! left in the cluster, neither what the chart made nor what wave made for itself.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testenv::{Cluster, create_configmap, namespace, patch_configmap, wait_for};

use crate::harness::{TIMEOUT, config_hash, helm, helm_wave, install_wave, run, turn, wave_image};

/// Kinds whose objects come and go on their own while the test runs.
const CHURNING: &[&str] = &["events", "events.events.k8s.io"];
/// The node's heartbeat Lease, which a node that has just started may not have written yet.
const NODE_HEARTBEATS: &str = "kube-node-lease/";

/// Every object in the cluster, as `namespace/resource/name`, of every kind that can be listed.
fn everything(cluster: &Cluster) -> BTreeSet<String> {
    let kinds = run(cluster
        .kubectl()
        .args(["api-resources", "--verbs=list", "-o", "name"]));
    let kinds: Vec<&str> = kinds.lines().filter(|k| !CHURNING.contains(k)).collect();
    let listed = run(cluster.kubectl().args([
        "get",
        &kinds.join(","),
        "--all-namespaces",
        "--no-headers",
        "-o",
        "custom-columns=NS:.metadata.namespace,KIND:.kind,NAME:.metadata.name",
    ]));
    listed
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join("/"))
        .filter(|l| !l.is_empty() && !l.starts_with(NODE_HEARTBEATS))
        .collect()
}

fn workload() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "app", "annotations": {"wave.pusher.com/update-on-config-change": "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "app", "image": "busybox:testenv", "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                        "envFrom": [{"configMapRef": {"name": "settings"}}]
                    }]
                }
            }
        }
    }))
    .expect("deployment")
}

/// Waits until the workload runs a hash other than `old`, rolled out: its one pod up to date and
/// available. Returns the new hash.
async fn rolled_from(client: &Client, ns: &str, old: Option<String>) -> String {
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    wait_for("the workload to roll to a new hash", TIMEOUT, || async {
        let d = deployments.get("app").await.ok()?;
        let hash = config_hash(&d)?;
        let status = d.status.as_ref()?;
        let done = Some(hash.clone()) != old
            && status.observed_generation >= d.metadata.generation
            && status.updated_replicas == Some(1)
            && status.available_replicas == Some(1)
            && status.replicas == Some(1);
        done.then_some(hash)
    })
    .await
}

async fn change(client: &Client, ns: &str, value: &str) {
    patch_configmap(client, ns, "settings", json!({"data": {"VALUE": value}})).await;
}

/// Whether `owners` names wave's Deployment (`uid`).
fn owned_by(
    owners: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    uid: &str,
) -> bool {
    owners.is_some_and(|o| o.iter().any(|r| r.kind == "Deployment" && r.uid == uid))
}

#[tokio::test]
async fn the_chart_installs_upgrades_and_uninstalls_leaving_nothing_behind() {
    let Some(node) = turn("chart").await else { return };
    let (cluster, client) = (node.cluster, node.client.clone());
    // The image is imported before the first look, and the namespace made: neither is the chart's.
    wave_image(cluster);
    let ns = namespace(&client, "real-chart").await;
    let before = everything(cluster);
    let release = format!("wave-{ns}");

    // Default values, but for the image and the namespace wave watches.
    install_wave(cluster, &ns, &[]);
    create_configmap(&client, &ns, "settings", json!({"VALUE": "one"})).await;
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &workload())
        .await
        .expect("create deployment");
    let first = rolled_from(&client, &ns, None).await;
    change(&client, &ns, "two").await;
    let second = rolled_from(&client, &ns, Some(first)).await;

    // The same chart with other values: two replicas (leader election, a PodDisruptionBudget) and the
    // webhook (a certificate wave issues into a Secret).
    helm_wave(cluster, "upgrade", &ns, &["replicas=2", "webhook.enabled=true"]);
    let wave = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(&release)
        .await
        .expect("wave's Deployment");
    let uid = wave.metadata.uid.clone().expect("uid");
    // What wave made for itself is owned by its Deployment, so the uninstall takes it too.
    let lease = wait_for("wave's Lease, owned by its Deployment", TIMEOUT, || async {
        let lease = Api::<Lease>::namespaced(client.clone(), &ns)
            .get_opt(&release)
            .await
            .ok()??;
        owned_by(lease.metadata.owner_references.as_ref(), &uid).then_some(lease)
    })
    .await;
    assert!(
        lease.spec.and_then(|s| s.holder_identity).is_some(),
        "the Lease has a holder"
    );
    wait_for(
        "the webhook's certificate, owned by wave's Deployment",
        TIMEOUT,
        || async {
            let secret = Api::<Secret>::namespaced(client.clone(), &ns)
                .get_opt(&format!("{release}-webhook-tls"))
                .await
                .ok()??;
            owned_by(secret.metadata.owner_references.as_ref(), &uid).then_some(())
        },
    )
    .await;
    change(&client, &ns, "three").await;
    rolled_from(&client, &ns, Some(second)).await;

    // The test's own objects go first; then the release.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .delete("app", &DeleteParams::foreground())
        .await
        .expect("delete the workload");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("settings", &DeleteParams::default())
        .await
        .expect("delete the configmap");
    run(helm(cluster).args([
        "uninstall",
        &release,
        "--namespace",
        &ns,
        "--wait",
        "--timeout",
        "180s",
    ]));
    // The garbage collector deletes what wave made once its Deployment is gone: wait for it, and name
    // what is left if it never goes.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left: Vec<String> = everything(cluster).difference(&before).cloned().collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind by helm uninstall:\n{}",
            left.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
