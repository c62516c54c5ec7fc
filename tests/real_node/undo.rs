//! `kubectl rollout undo` with `wave.pusher.com/undo: restore-config`, on real pods: wave puts the
//! ConfigMap back as that revision ran it, the undo sticks, and the pods serve the old config.

use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use testenv::{create_configmap, namespace, patch_configmap, wait_for};

use crate::harness::{TIMEOUT, config_hash, install_wave, pods, run, served, turn};

fn web() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {
            "wave.pusher.com/update-on-config-change": "true",
            "wave.pusher.com/config-history": "true",
            "wave.pusher.com/undo": "restore-config"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "httpd", "image": "busybox:testenv", "imagePullPolicy": "Never",
                        "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                        "volumeMounts": [{"name": "site", "mountPath": "/www/index.html",
                            "subPath": "index.html"}],
                        "readinessProbe": {"httpGet": {"path": "/index.html", "port": 8080},
                            "periodSeconds": 1}
                    }],
                    "volumes": [{"name": "site", "configMap": {"name": "site"}}]
                }
            }
        }
    }))
    .expect("deployment")
}

/// The one pod of `web` is Ready and serves `want`.
async fn serves(client: &kube::Client, ns: &str, want: &str) -> Option<()> {
    let pods = pods(client, ns, "app=web").await;
    (pods.len() == 1 && pods[0].2 && served(&pods[0].1, 8080, "/index.html").as_deref() == Some(want))
        .then_some(())
}

#[tokio::test]
async fn a_rollout_undo_with_restore_config_ends_with_real_pods_serving_the_old_config() {
    let Some(node) = turn("undo").await else { return };
    let client = node.client.clone();
    let ns = namespace(&client, "real-undo").await;
    install_wave(
        node.cluster,
        &ns,
        &[
            "updateRate=0",
            "configHistory.enabled=true",
            "extraArgs={--min-rollout-interval=0}",
        ],
    );
    create_configmap(&client, &ns, "site", json!({"index.html": "good v1\n"})).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &web())
        .await
        .expect("create deployment");
    wait_for("the pod to serve v1", TIMEOUT, || {
        serves(&client, &ns, "good v1\n")
    })
    .await;
    let good = wait_for("the hash of v1", TIMEOUT, || async {
        config_hash(&deployments.get("web").await.ok()?)
    })
    .await;

    patch_configmap(&client, &ns, "site", json!({"data": {"index.html": "bad v2\n"}})).await;
    wait_for("the pod to serve v2", TIMEOUT, || {
        serves(&client, &ns, "bad v2\n")
    })
    .await;
    let bad = config_hash(&deployments.get("web").await.expect("get web")).expect("the hash of v2");
    // The undo restores from the snapshot of the revision it goes back to; wait until wave has
    // written the one of the revision it leaves too, as a user who looks at `wave history` would.
    let wave = env!("CARGO_BIN_EXE_wave");
    let snapshot = format!("\"snapshot\": \"wave-deploy-web-{}\"", &bad[..12]);
    wait_for("the snapshot of v2", TIMEOUT, || async {
        let out = Command::new(wave)
            .args(["history", "deployment/web", "-n", &ns, "-o", "json"])
            .env("KUBECONFIG", node.cluster.kubeconfig())
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .contains(&snapshot)
            .then_some(())
    })
    .await;

    run(node
        .cluster
        .kubectl()
        .args(["rollout", "undo", "deployment/web", "-n", &ns]));
    wait_for("the pod to serve v1 again", TIMEOUT, || {
        serves(&client, &ns, "good v1\n")
    })
    .await;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("site")
        .await
        .expect("get configmap");
    assert_eq!(
        cm.data.unwrap_or_default().get("index.html").map(String::as_str),
        Some("good v1\n")
    );
    let now = config_hash(&deployments.get("web").await.expect("get web"));
    assert_eq!(now.as_deref(), Some(good.as_str()), "the undo did not stick");
}
