//! `make demo`, for real: a busybox httpd serves one ConfigMap key mounted by `subPath` and shows
//! another as an env var; wave, installed by its chart from its image, rolls it on every change.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::json;
use testenv::{create_configmap, http_get_at, namespace, patch_configmap, wait_for};

use crate::harness::{TIMEOUT, exec_env, install_wave, pods, served, turn};

const CHANGES: usize = 20;

fn site(version: usize) -> serde_json::Value {
    json!({"index.html": format!("site v{version}\n"), "greeting": format!("hello v{version}")})
}

/// Two replicas of busybox httpd: `index.html` by subPath, `GREETING` from the same ConfigMap.
fn web(ns: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": ns,
            "annotations": {"wave.pusher.com/update-on-config-change": "true"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "httpd", "image": "busybox:testenv", "imagePullPolicy": "Never",
                        "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                        "env": [{"name": "GREETING", "valueFrom":
                            {"configMapKeyRef": {"name": "site", "key": "greeting"}}}],
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

/// Every pod of `web` that is not being deleted is Ready, there are exactly `replicas` of them, and
/// each serves `want` over the pod network.
async fn all_serve(client: &kube::Client, ns: &str, want: &str) -> Option<Vec<(String, String)>> {
    let pods = pods(client, ns, "app=web").await;
    if pods.len() != 2 || pods.iter().any(|(_, _, ready)| !ready) {
        return None;
    }
    pods.iter()
        .all(|(_, ip, _)| served(ip, 8080, "/index.html").as_deref() == Some(want))
        .then(|| pods.into_iter().map(|(name, ip, _)| (name, ip)).collect())
}

#[tokio::test]
async fn a_config_change_is_served_by_every_real_pod_and_seen_in_their_env() {
    let Some(node) = turn("demo").await else { return };
    let client = node.client.clone();
    let ns = namespace(&client, "real-demo").await;
    // Twenty changes of one ConfigMap within minutes is what the flap breaker holds (more than 10 in
    // 10 min); here each change is one a person makes and waits for, so it is off.
    install_wave(
        node.cluster,
        &ns,
        &[
            "updateRate=0",
            "extraArgs={--min-rollout-interval=0,--flap-threshold=0}",
        ],
    );

    create_configmap(&client, &ns, "site", site(0)).await;
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &web(&ns))
        .await
        .expect("create deployment");
    let first = wait_for("both pods to serve v0", TIMEOUT, || {
        all_serve(&client, &ns, "site v0\n")
    })
    .await;

    // wave's metrics, scraped over the pod network as Prometheus would.
    let wave_pod = pods(&client, &ns, "app.kubernetes.io/name=wave").await;
    let (_, wave_ip, _) = wave_pod.first().expect("wave's pod").clone();
    let metrics = wait_for("wave's metrics on the pod network", TIMEOUT, || {
        let ip = wave_ip.clone();
        async move {
            http_get_at(&ip, 8080, "/metrics")
                .filter(|(s, _)| *s == 200)
                .map(|(_, b)| b)
        }
    })
    .await;
    assert!(
        metrics.contains("wave_build_info"),
        "no wave_build_info in:\n{metrics}"
    );

    let mut old: Vec<String> = first.into_iter().map(|(name, _)| name).collect();
    let mut took = Vec::with_capacity(CHANGES);
    for version in 1..=CHANGES {
        let changed = Instant::now();
        patch_configmap(&client, &ns, "site", json!({"data": site(version)})).await;
        let want = format!("site v{version}\n");
        let now = wait_for(&format!("both pods to serve v{version}"), TIMEOUT, || {
            all_serve(&client, &ns, &want)
        })
        .await;
        // The last old pod is gone: none of the pods that served the old config is left, at all.
        wait_for(
            &format!("the pods of v{} to be gone", version - 1),
            TIMEOUT,
            || {
                let (client, ns, old) = (client.clone(), ns.clone(), old.clone());
                async move {
                    let left = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, &ns)
                        .list(&Default::default())
                        .await
                        .ok()?;
                    left.items
                        .iter()
                        .all(|p| !old.contains(p.metadata.name.as_ref().unwrap()))
                        .then_some(())
                }
            },
        )
        .await;
        took.push(changed.elapsed());
        let names: Vec<String> = now.into_iter().map(|(name, _)| name).collect();
        assert!(
            names.iter().all(|n| !old.contains(n)),
            "a pod of the old config still serves"
        );
        let env = exec_env(node.cluster, &ns, &names[0]);
        assert!(
            env.lines().any(|l| l == format!("GREETING=hello v{version}")),
            "env of {}:\n{env}",
            names[0]
        );
        old = names;
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    eprintln!(
        "real node: a config change to the last old pod gone, over {CHANGES} changes: median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        ms(took[CHANGES / 2]),
        ms(took[(CHANGES * 99).div_ceil(100) - 1]),
        ms(took[CHANGES - 1]),
    );
}
