//! A bad config halts on a real readiness probe: with pacing 2, it reaches at most 2 of 10
//! Deployments, the other 8 keep serving the old content over HTTP, and a fix rolls all 10.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use testenv::{create_configmap, namespace, patch_configmap, wait_for};

use crate::harness::{TIMEOUT, install_wave, pods, served, turn};

const DEPLOYMENTS: usize = 10;

/// One replica of busybox httpd serving `index.html` by subPath, Ready only while the page does not
/// say "bad"; a rollout that is not Ready within 15 s has failed.
fn web(i: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": format!("web-{i}"),
            "annotations": {"wave.pusher.com/update-on-config-change": "true"}},
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": 15,
            "selector": {"matchLabels": {"app": format!("web-{i}")}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": format!("web-{i}")}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "httpd", "image": "busybox:testenv", "imagePullPolicy": "Never",
                        "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                        "volumeMounts": [{"name": "site", "mountPath": "/www/index.html",
                            "subPath": "index.html"}],
                        "readinessProbe": {"exec": {"command":
                            ["sh", "-c", "! grep -q bad /www/index.html"]}, "periodSeconds": 1}
                    }],
                    "volumes": [{"name": "site", "configMap": {"name": "site"}}]
                }
            }
        }
    }))
    .expect("deployment")
}

/// What each Deployment's pods serve: for `web-i`, the pages of its pods that answer.
async fn pages(client: &kube::Client, ns: &str) -> Vec<Vec<String>> {
    let mut all = Vec::with_capacity(DEPLOYMENTS);
    for i in 0..DEPLOYMENTS {
        let pods = pods(client, ns, &format!("app=web-{i}")).await;
        all.push(
            pods.iter()
                .filter_map(|(_, ip, _)| served(ip, 8080, "/index.html"))
                .collect(),
        );
    }
    all
}

/// Every Deployment has exactly one pod, Ready, serving `want`.
async fn all_serve(client: &kube::Client, ns: &str, want: &str) -> Option<()> {
    for i in 0..DEPLOYMENTS {
        let pods = pods(client, ns, &format!("app=web-{i}")).await;
        if pods.len() != 1 || !pods[0].2 || served(&pods[0].1, 8080, "/index.html").as_deref() != Some(want) {
            return None;
        }
    }
    Some(())
}

#[tokio::test]
async fn a_bad_config_reaches_at_most_two_of_ten_real_deployments_and_a_fix_rolls_all_ten() {
    let Some(node) = turn("bad_config").await else {
        return;
    };
    let client = node.client.clone();
    let ns = namespace(&client, "real-bad").await;
    install_wave(
        node.cluster,
        &ns,
        &[
            "updateRate=0",
            "extraArgs={--min-rollout-interval=0,--max-concurrent-rollouts=2}",
        ],
    );
    create_configmap(&client, &ns, "site", json!({"index.html": "good v1\n"})).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    for i in 0..DEPLOYMENTS {
        deployments
            .create(&PostParams::default(), &web(i))
            .await
            .expect("create deployment");
    }
    wait_for("every Deployment to serve good v1", TIMEOUT, || {
        all_serve(&client, &ns, "good v1\n")
    })
    .await;

    patch_configmap(&client, &ns, "site", json!({"data": {"index.html": "bad v2\n"}})).await;
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    wait_for("the halt on the ConfigMap", TIMEOUT, || async {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=site"))
            .await
            .ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolloutHalted"))
            .then_some(())
    })
    .await;
    // By HTTP, not by status: a Deployment the bad value reached has a pod that serves it (not Ready,
    // but it answers); every other one serves only the old page.
    let served = pages(&client, &ns).await;
    let reached = served
        .iter()
        .filter(|p| p.iter().any(|page| page == "bad v2\n"))
        .count();
    let untouched = served
        .iter()
        .filter(|p| !p.is_empty() && p.iter().all(|page| page == "good v1\n"))
        .count();
    eprintln!("real node: the bad config reached {reached} of {DEPLOYMENTS}; {untouched} serve the old page");
    assert!(
        reached <= 2,
        "the bad config reached {reached} Deployments: {served:?}"
    );
    assert!(
        untouched >= DEPLOYMENTS - 2,
        "only {untouched} Deployments serve the old page: {served:?}"
    );
    assert!(
        served.iter().all(|p| p.iter().any(|page| page == "good v1\n")),
        "a Deployment stopped serving the old page while its new pod failed: {served:?}"
    );

    patch_configmap(&client, &ns, "site", json!({"data": {"index.html": "good v3\n"}})).await;
    wait_for("every Deployment to serve the fix", TIMEOUT, || {
        all_serve(&client, &ns, "good v3\n")
    })
    .await;
}
