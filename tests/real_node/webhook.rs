//! The webhook, called by the apiserver through the chart's Service with wave's own certificates, on
//! real pods: a new Deployment has its hash at creation, and one whose ConfigMap does not exist yet is
//! held by the scheduling gate, then starts and serves the config once it is created.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use testenv::{create_configmap, namespace, wait_for};

use crate::harness::{TIMEOUT, config_hash, install_wave, pods, served, turn};

fn web(name: &str, configmap: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"wave.pusher.com/update-on-config-change": "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "httpd", "image": "busybox:testenv", "imagePullPolicy": "Never",
                        "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                        "volumeMounts": [{"name": "site", "mountPath": "/www/index.html",
                            "subPath": "index.html"}]
                    }],
                    "volumes": [{"name": "site", "configMap": {"name": configmap}}]
                }
            }
        }
    }))
    .expect("deployment")
}

#[tokio::test]
async fn the_webhook_hashes_at_creation_and_gates_a_pod_until_its_configmap_exists() {
    let Some(node) = turn("webhook").await else { return };
    let client = node.client.clone();
    let ns = namespace(&client, "real-webhook").await;
    install_wave(node.cluster, &ns, &["updateRate=0", "webhook.enabled=true"]);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);

    // The apiserver calls the webhook through the Service once wave's CA is in the registration; until
    // then (failurePolicy Ignore) a create is admitted unhashed. So: a dry run until one comes back hashed.
    create_configmap(&client, &ns, "site", json!({"index.html": "here v1\n"})).await;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for("the apiserver to call the webhook", TIMEOUT, || async {
        let d = deployments.create(&dry_run, &web("probe", "site")).await.ok()?;
        config_hash(&d).map(drop)
    })
    .await;

    let created = deployments
        .create(&PostParams::default(), &web("hashed", "site"))
        .await
        .expect("create");
    let hash = config_hash(&created);
    assert!(hash.is_some(), "the Deployment was created without its hash");
    wait_for("the hashed Deployment to serve v1", TIMEOUT, || async {
        let pods = pods(&client, &ns, "app=hashed").await;
        (pods.len() == 1 && served(&pods[0].1, 8080, "/index.html").as_deref() == Some("here v1\n"))
            .then_some(())
    })
    .await;
    let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("app=hashed"))
        .await
        .expect("list replicasets");
    assert_eq!(
        replicasets.items.len(),
        1,
        "hashed at creation: one ReplicaSet, no follow-up rollout"
    );

    deployments
        .create(&PostParams::default(), &web("early", "later"))
        .await
        .expect("create");
    let all_pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let gated = wait_for("the pod of `early` to be created, gated", TIMEOUT, || async {
        let list = all_pods
            .list(&ListParams::default().labels("app=early"))
            .await
            .ok()?;
        let pod = list.items.into_iter().next()?;
        let gates = pod.spec.as_ref()?.scheduling_gates.clone().unwrap_or_default();
        gates
            .iter()
            .any(|g| g.name == "wave.pusher.com/config")
            .then_some(pod)
    })
    .await;
    assert!(
        gated.spec.and_then(|s| s.node_name).is_none(),
        "a gated pod is never scheduled, so never started"
    );
    create_configmap(&client, &ns, "later", json!({"index.html": "arrived v1\n"})).await;
    wait_for(
        "the pod of `early` to start and serve the config",
        TIMEOUT,
        || async {
            let pods = pods(&client, &ns, "app=early").await;
            pods.iter()
                .any(|(_, ip, _)| served(ip, 8080, "/index.html").as_deref() == Some("arrived v1\n"))
                .then_some(())
        },
    )
    .await;
}
