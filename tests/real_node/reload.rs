//! `wave-reload` in a real pod: the reload demo app mounts a ConfigMap as a directory (not `subPath`),
//! and after each change serves the new value without a restart, having reloaded exactly once for
//! each of the kubelet's atomic swaps. It also measures how long the kubelet takes to bring a change
//! into the pod's volume.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use testenv::{create_configmap, namespace, patch_configmap, wait_for};

use crate::harness::{TIMEOUT, reload_demo_image, run, served, turn};

fn demo(image: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "reload-demo", "labels": {"app": "reload-demo"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "Never",
                "env": [{"name": "CONFIG_DIR", "value": "/etc/reload-demo"},
                        {"name": "LISTEN", "value": "0.0.0.0:3000"}],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/reload-demo"}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 3000}, "periodSeconds": 1}
            }],
            "volumes": [{"name": "config", "configMap": {"name": "demo"}}]
        }
    }))
    .expect("pod")
}

fn config(message: &str) -> serde_json::Value {
    json!({"config.yaml": format!("message: {message}\n")})
}

/// The pod's IP once it is Ready.
async fn ready_ip(client: &Client, ns: &str) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    wait_for("the reload demo to be Ready", TIMEOUT, || async {
        let pod = pods.get("reload-demo").await.ok()?;
        let status = pod.status?;
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(status.pod_ip?)
    })
    .await
}

/// The pod's uid and its container's restart count.
async fn identity(client: &Client, ns: &str) -> (String, i32) {
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get("reload-demo")
        .await
        .expect("the pod");
    let restarts = pod
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.first().map(|c| c.restart_count))
        .expect("a container status");
    (pod.metadata.uid.expect("uid"), restarts)
}

#[tokio::test]
async fn a_reloading_app_serves_each_change_without_a_restart_after_exactly_one_reload() {
    let Some(node) = turn("reload").await else { return };
    let client = node.client.clone();
    let image = reload_demo_image(node.cluster);
    let ns = namespace(&client, "real-reload").await;
    create_configmap(&client, &ns, "demo", config("hello")).await;
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &demo(image))
        .await
        .expect("create pod");
    let ip = ready_ip(&client, &ns).await;
    assert_eq!(served(&ip, 3000, "/").as_deref(), Some("hello\n"));
    let (uid, restarts) = identity(&client, &ns).await;
    assert_eq!(restarts, 0);

    let mut delays = Vec::new();
    for message in ["hi again", "third time"] {
        patch_configmap(&client, &ns, "demo", json!({"data": config(message)})).await;
        let changed = Instant::now();
        let want = format!("{message}\n");
        // The kubelet brings the change into the volume on its next sync of the pod; the app reloads
        // when it sees the swap.
        wait_for(&format!("the pod to serve {message:?}"), TIMEOUT, || async {
            (served(&ip, 3000, "/").as_deref() == Some(want.as_str())).then_some(())
        })
        .await;
        delays.push(changed.elapsed());
    }

    // The same pod, never restarted, and one reload per swap: a second reload of the first swap would
    // show as a line with its message before the second's.
    assert_eq!(
        identity(&client, &ns).await,
        (uid, 0),
        "the pod was replaced or restarted"
    );
    // The app logs a reload just after it starts serving it.
    let logs = wait_for("the app to log its second reload", TIMEOUT, || async {
        let logs = run(node.cluster.kubectl().args(["logs", "-n", &ns, "reload-demo"]));
        logs.contains("reloaded (#2)").then_some(logs)
    })
    .await;
    let reloads: Vec<&str> = logs.lines().filter(|l| l.starts_with("reloaded")).collect();
    assert_eq!(
        reloads,
        ["reloaded (#1): \"hi again\"", "reloaded (#2): \"third time\""],
        "the app's log:\n{logs}"
    );
    let s = |d: &Duration| format!("{:.1} s", d.as_secs_f64());
    eprintln!(
        "real node: a ConfigMap change to the new value served by the reloading app (the kubelet's propagation and one reload): {}",
        delays.iter().map(s).collect::<Vec<_>>().join(", ")
    );
}
