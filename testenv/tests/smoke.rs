//! The control plane really runs workloads: ReplicaSets, controller revisions, pods bound by the
//! scheduler and marked Running by kwok, and rollouts that replace every pod.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::{cluster, namespace, tolerate_kwok, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);

fn template(app: &str) -> serde_json::Value {
    let mut spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(json!({"containers": [{"name": "c", "image": "nginx"}]})).unwrap();
    tolerate_kwok(&mut spec);
    json!({"metadata": {"labels": {"app": app}}, "spec": spec})
}

async fn running_pods(pods: &Api<Pod>, app: &str) -> BTreeSet<String> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .collect()
}

async fn all_pods(pods: &Api<Pod>, app: &str) -> BTreeSet<String> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap();
    list.items.into_iter().filter_map(|p| p.metadata.name).collect()
}

fn bump() -> Patch<serde_json::Value> {
    Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"bump": "1"}}}}}))
}

#[tokio::test]
async fn deployment_rolls_out_through_a_second_replicaset_and_replaces_its_pods() {
    let client = cluster().client().await;
    let ns = namespace(&client, "smoke-deploy").await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let (rs, pods): (Api<ReplicaSet>, Api<Pod>) = (
        Api::namespaced(client.clone(), &ns),
        Api::namespaced(client.clone(), &ns),
    );
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    let first = wait_for("2 running pods", TIMEOUT, || async {
        let running = running_pods(&pods, "web").await;
        (running.len() == 2).then_some(running)
    })
    .await;
    assert_eq!(rs.list(&ListParams::default()).await.unwrap().items.len(), 1);

    deploys
        .patch("web", &PatchParams::default(), &bump())
        .await
        .unwrap();
    wait_for("a second ReplicaSet", TIMEOUT, || async {
        (rs.list(&ListParams::default()).await.unwrap().items.len() == 2).then_some(())
    })
    .await;
    wait_for(
        "the rollout to complete with every old pod gone",
        TIMEOUT,
        || async {
            let d = deploys.get("web").await.unwrap();
            let s = d.status.unwrap_or_default();
            let done =
                s.updated_replicas == Some(2) && s.available_replicas == Some(2) && s.replicas == Some(2);
            let current = all_pods(&pods, "web").await;
            (done && current.len() == 2 && current.is_disjoint(&first)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn statefulset_rolls_to_a_new_revision_and_replaces_its_pods() {
    let client = cluster().client().await;
    let ns = namespace(&client, "smoke-sts").await;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let s: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}
    }))
    .unwrap();
    sts.create(&PostParams::default(), &s).await.unwrap();
    let first_uids = wait_for("2 running pods", TIMEOUT, || async {
        let list = pods.list(&ListParams::default().labels("app=db")).await.unwrap();
        let running: BTreeSet<String> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        (running.len() == 2).then_some(running)
    })
    .await;
    let revision = sts.get("db").await.unwrap().status.unwrap().update_revision;
    sts.patch("db", &PatchParams::default(), &bump()).await.unwrap();
    wait_for("a new revision with every pod replaced", TIMEOUT, || async {
        let s = sts.get("db").await.unwrap().status.unwrap_or_default();
        let list = pods.list(&ListParams::default().labels("app=db")).await.unwrap();
        let uids: BTreeSet<String> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        let done = s.update_revision != revision
            && s.current_revision == s.update_revision
            && s.updated_replicas == Some(2);
        (done && uids.len() == 2 && uids.is_disjoint(&first_uids)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn daemonset_rolls_out_on_every_fake_node() {
    let client = cluster().client().await;
    let ns = namespace(&client, "smoke-ds").await;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")}
    }))
    .unwrap();
    dss.create(&PostParams::default(), &ds).await.unwrap();
    let nodes = cluster_nodes(&client).await;
    let first = wait_for("one running pod per node", TIMEOUT, || async {
        let running = running_pods(&pods, "agent").await;
        (running.len() == nodes).then_some(running)
    })
    .await;
    dss.patch("agent", &PatchParams::default(), &bump())
        .await
        .unwrap();
    wait_for("every pod replaced", TIMEOUT, || async {
        let d = dss.get("agent").await.unwrap();
        let s = d.status.unwrap_or_default();
        let current = all_pods(&pods, "agent").await;
        let done =
            s.updated_number_scheduled == Some(nodes as i32) && s.number_available == Some(nodes as i32);
        (done && current.len() == nodes && current.is_disjoint(&first)).then_some(())
    })
    .await;
}

async fn cluster_nodes(client: &kube::Client) -> usize {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}
