//! Restarting in place on a real node (KEP-5532): a config change reaches every container of the
//! existing pods (same UIDs, same IPs) with no new ReplicaSet or revision; a bad config halts after the
//! pods the budget allows; a workload whose pods have no agent rolls out once, with one Event.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testenv::{create_configmap, namespace, patch_configmap, wait_for};
use wave_core::{inplace, names};

use crate::harness::{TIMEOUT, config_hash, install_wave, pods_seen, run, served, turn};

/// The chart's values for these tests: restarting in place on, from wave's own image.
const WAVE: &[&str] = &[
    "updateRate=0",
    "inPlace.enabled=true",
    "extraArgs={--min-rollout-interval=0}",
];

/// A pod template of busybox httpd serving `/index.html` from the ConfigMap `site` by subPath and
/// `/env` with the env var GREETING from the same ConfigMap, as each container saw them at its start.
/// It exits at once when the greeting is "bad", so a bad config is never Ready.
fn template(app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"type": "real"},
            "containers": [{
                "name": "httpd", "image": "busybox:testenv", "imagePullPolicy": "Never",
                "command": ["sh", "-c",
                    "[ \"$GREETING\" = bad ] && exit 1; echo \"$GREETING\" > /www/env; exec httpd -f -p 8080 -h /www"],
                "env": [{"name": "GREETING", "valueFrom":
                    {"configMapKeyRef": {"name": "site", "key": "greeting"}}}],
                "volumeMounts": [{"name": "site", "mountPath": "/www/index.html", "subPath": "index.html"}],
                "readinessProbe": {"httpGet": {"path": "/env", "port": 8080}, "periodSeconds": 1}
            }],
            "volumes": [{"name": "site", "configMap": {"name": "site"}}]
        }
    })
}

/// A workload of `kind` named `app` restarting in place (or not), with `spec` added.
fn workload(kind: &str, app: &str, in_place: bool, spec: Value) -> Value {
    let mut annotations = json!({(names::UPDATE_ON_CONFIG_CHANGE): "true", (names::ROLLOUT_DEADLINE): "20s"});
    if in_place {
        annotations[names::RESTART] = json!("in-place");
    }
    let mut w = json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": app, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": app}}, "template": template(app)}
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        w["spec"][k] = v.clone();
    }
    w
}

fn site(version: &str) -> Value {
    json!({"index.html": format!("site {version}\n"), "greeting": format!("hello {version}")})
}

async fn create(client: &Client, ns: &str, object: Value) {
    let kind = object["kind"].as_str().expect("kind").to_string();
    let api_resource = match kind.as_str() {
        "Deployment" => kube::discovery::ApiResource::erase::<Deployment>(&()),
        "StatefulSet" => kube::discovery::ApiResource::erase::<k8s_openapi::api::apps::v1::StatefulSet>(&()),
        _ => kube::discovery::ApiResource::erase::<k8s_openapi::api::apps::v1::DaemonSet>(&()),
    };
    let object: kube::core::DynamicObject = serde_json::from_value(object).expect("an object");
    Api::<kube::core::DynamicObject>::namespaced_with(client.clone(), ns, &api_resource)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {kind}: {e}"));
}

/// A pod as the test compares it: its UID, its IP, whether it is Ready, and whether it has the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    uid: String,
    ip: String,
    ready: bool,
    agent: bool,
}

/// The pods of `app` that are not being deleted, by name.
async fn pods_of(client: &Client, ns: &str, app: &str) -> BTreeMap<String, Seen> {
    pods_seen(client, ns, &format!("app={app}"))
        .await
        .into_iter()
        .map(|p| {
            let seen = Seen {
                uid: p.uid,
                ip: p.ip.unwrap_or_default(),
                ready: p.ready,
                agent: p.containers.iter().any(|c| c == inplace::AGENT_CONTAINER),
            };
            (p.name, seen)
        })
        .collect()
}

/// The pods of `app`, once there are `n`, all Ready, each serving `version` by HTTP: the subPath file
/// and the env var, as every one of its containers started with them.
async fn serving(
    client: &Client,
    ns: &str,
    app: &str,
    n: usize,
    version: &str,
) -> Option<BTreeMap<String, Seen>> {
    let pods = pods_of(client, ns, app).await;
    let page = format!("site {version}\n");
    let env = format!("hello {version}\n");
    let all = pods.len() == n
        && pods.values().all(|p| {
            p.ready
                && served(&p.ip, 8080, "/index.html").as_deref() == Some(page.as_str())
                && served(&p.ip, 8080, "/env").as_deref() == Some(env.as_str())
        });
    all.then_some(pods)
}

/// [`serving`], once every pod has the agent: wave's first hash adds it, which is a rollout, and it
/// must be over before a change can restart the pods in place.
async fn settled(client: &Client, ns: &str, app: &str, n: usize, version: &str) -> BTreeMap<String, Seen> {
    wait_for(
        &format!("{app} to serve {version} from pods with the agent"),
        TIMEOUT,
        || async {
            serving(client, ns, app, n, version)
                .await
                .filter(|pods| pods.values().all(|p| p.agent))
        },
    )
    .await
}

async fn replica_sets(client: &Client, ns: &str, app: &str) -> usize {
    let list = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list replicasets");
    list.items.len()
}

async fn revisions(client: &Client, ns: &str, app: &str) -> usize {
    let list = Api::<ControllerRevision>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list controllerrevisions");
    list.items.len()
}

/// How many pods of `app` carry a request of wave's to restart.
async fn asked_to_restart(client: &Client, ns: &str, app: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(names::RESTART_REQUEST))
        })
        .count()
}

/// `wave status KIND/NAME -n NS -o json`, as a user runs it against the node's cluster.
fn status(cluster: &testenv::Cluster, ns: &str, target: &str) -> Value {
    let out = run(std::process::Command::new(env!("CARGO_BIN_EXE_wave"))
        .args(["status", target, "-n", ns, "-o", "json"])
        .env("KUBECONFIG", cluster.kubeconfig()));
    let list: Value = serde_json::from_str(&out).expect("wave status prints JSON");
    list[0].clone()
}

/// How many Events on `name` have `reason`.
async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> usize {
    let list = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("list events");
    list.items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count()
}

/// A namespace of its own (`prefix-…`) with wave installed in it, watching only it, and the ConfigMap
/// `site` at v1.
async fn set_up(node: &crate::harness::Node, prefix: &str) -> String {
    let ns = namespace(&node.client, prefix).await;
    install_wave(node.cluster, &ns, WAVE);
    create_configmap(&node.client, &ns, "site", site("v1")).await;
    ns
}

#[tokio::test]
async fn a_deployment_a_statefulset_and_a_daemonset_restart_in_place_with_the_same_pods_and_no_new_revision()
{
    let Some(node) = turn("in_place").await else {
        return;
    };
    let client = node.client.clone();
    let ns = set_up(&node, "real-in-place").await;
    let workloads = [
        ("Deployment", "web", 2),
        ("StatefulSet", "db", 2),
        ("DaemonSet", "agent", 1),
    ];
    for (kind, app, replicas) in workloads {
        let spec = if kind == "DaemonSet" {
            json!({})
        } else {
            json!({"replicas": replicas})
        };
        create(&client, &ns, workload(kind, app, true, spec)).await;
    }
    let mut before = BTreeMap::new();
    for (_, app, replicas) in workloads {
        let pods = settled(&client, &ns, app, replicas, "v1").await;
        before.insert(app, pods);
    }
    let (sets, db_revisions, agent_revisions) = (
        replica_sets(&client, &ns, "web").await,
        revisions(&client, &ns, "db").await,
        revisions(&client, &ns, "agent").await,
    );

    let changed = std::time::Instant::now();
    patch_configmap(&client, &ns, "site", json!({"data": site("v2")})).await;
    for (_, app, replicas) in workloads {
        let after = wait_for(&format!("{app} to serve v2"), TIMEOUT, || {
            serving(&client, &ns, app, replicas, "v2")
        })
        .await;
        let same = |pods: &BTreeMap<String, Seen>| -> Vec<(String, String, String)> {
            pods.iter()
                .map(|(name, p)| (name.clone(), p.uid.clone(), p.ip.clone()))
                .collect()
        };
        assert_eq!(
            same(&after),
            same(&before[app]),
            "{app}: the same pods, UIDs and IPs"
        );
    }
    eprintln!(
        "real node: every pod of 3 workloads served v2 {:.1} s after the change, restarted in place",
        changed.elapsed().as_secs_f64()
    );
    assert_eq!(replica_sets(&client, &ns, "web").await, sets, "no new ReplicaSet");
    assert_eq!(
        revisions(&client, &ns, "db").await,
        db_revisions,
        "no new StatefulSet revision"
    );
    assert_eq!(
        revisions(&client, &ns, "agent").await,
        agent_revisions,
        "no new DaemonSet revision"
    );
    for (_, app, _) in workloads {
        wait_for(&format!("{app}'s RestartedInPlace Event"), TIMEOUT, || async {
            (events(&client, &ns, app, names::reason::RESTARTED_IN_PLACE).await > 0).then_some(())
        })
        .await;
    }
    for (kind, app, replicas) in workloads {
        let s = status(node.cluster, &ns, &format!("{}/{app}", kind.to_lowercase()));
        let hash = s["current_hash"].as_str().expect("a current hash").to_string();
        assert_eq!(
            (s["rollout"].as_str(), &s["pods"]),
            (Some("complete (in place)"), &json!({hash: replicas})),
            "wave status: every pod of {app} runs the hash of v2: {s}"
        );
    }
}

#[tokio::test]
async fn a_bad_config_halts_after_the_pods_the_budget_allows_and_the_rest_keep_serving_the_old_one() {
    let Some(node) = turn("in_place_bad").await else {
        return;
    };
    let client = node.client.clone();
    let ns = set_up(&node, "real-in-place-bad").await;
    let rolling = json!({"replicas": 3,
        "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}});
    create(&client, &ns, workload("Deployment", "web", true, rolling)).await;
    let before = settled(&client, &ns, "web", 3, "v1").await;
    // wave tells a pod's config from its creation only when that is clearly before the restart (by
    // more than the margin for the two clocks): the pods must be that old for `wave status` to say
    // they run v1's hash rather than one not known.
    wait_for(
        "web's pods to be older than the clock margin",
        TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), &ns)
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let now = k8s_openapi::jiff::Timestamp::now();
            pods.items
                .iter()
                .all(|p| {
                    p.metadata
                        .creation_timestamp
                        .as_ref()
                        .is_some_and(|t| now.duration_since(t.0) > inplace::CLOCK_MARGIN)
                })
                .then_some(())
        },
    )
    .await;

    let mut bad = site("v2");
    bad["greeting"] = json!("bad");
    patch_configmap(&client, &ns, "site", json!({"data": bad})).await;
    wait_for("the InPlaceRestartFailed Event", TIMEOUT, || async {
        (events(&client, &ns, "web", names::reason::IN_PLACE_RESTART_FAILED).await > 0).then_some(())
    })
    .await;
    let pods = pods_of(&client, &ns, "web").await;
    let old: Vec<&String> = pods
        .iter()
        .filter(|(_, p)| p.ready && served(&p.ip, 8080, "/env").as_deref() == Some("hello v1\n"))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(old.len(), 2, "two of three pods keep serving v1: {pods:?}");
    let asked = asked_to_restart(&client, &ns, "web").await;
    assert_eq!(asked, 1, "one pod (maxUnavailable) was asked to restart");
    let s = status(node.cluster, &ns, "deployment/web");
    let v1 = config_hash(
        &Api::<Deployment>::namespaced(client.clone(), &ns)
            .get("web")
            .await
            .expect("get web"),
    )
    .expect("the template keeps v1's hash");
    let by_config = s["pods"]
        .as_object()
        .expect("wave status counts the pods per config");
    assert_eq!(
        (
            by_config.get(&v1),
            by_config.values().filter_map(Value::as_u64).sum::<u64>()
        ),
        (Some(&json!(2)), 3),
        "wave status: two pods on v1, three in all: {s}"
    );
    assert!(
        s["rollout"]
            .as_str()
            .is_some_and(|r| r.starts_with("in place: failed")),
        "wave status says the restart failed: {s}"
    );
    let uids = |pods: &BTreeMap<String, Seen>| pods.values().map(|p| p.uid.clone()).collect::<Vec<_>>();
    assert_eq!(uids(&pods), uids(&before), "no pod was replaced");

    patch_configmap(&client, &ns, "site", json!({"data": site("v3")})).await;
    let after = wait_for("web to serve the fix", TIMEOUT, || {
        serving(&client, &ns, "web", 3, "v3")
    })
    .await;
    assert_eq!(
        uids(&after),
        uids(&before),
        "the fix restarted the same pods in place"
    );
}

#[tokio::test]
async fn pods_without_the_agent_roll_out_once_with_one_event_and_the_next_change_restarts_in_place() {
    let Some(node) = turn("in_place_fallback").await else {
        return;
    };
    let client = node.client.clone();
    let ns = set_up(&node, "real-in-place-fallback").await;
    create(
        &client,
        &ns,
        workload("Deployment", "web", false, json!({"replicas": 2})),
    )
    .await;
    let first = wait_for("web to serve v1", TIMEOUT, || {
        serving(&client, &ns, "web", 2, "v1")
    })
    .await;

    // Opted in to restarting in place after its pods were made: they have no agent.
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let opt_in = json!({"metadata": {"annotations": {(names::RESTART): "in-place"}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&opt_in))
        .await
        .expect("opt in");
    patch_configmap(&client, &ns, "site", json!({"data": site("v2")})).await;
    let rolled = wait_for("web to serve v2", TIMEOUT, || {
        serving(&client, &ns, "web", 2, "v2")
    })
    .await;
    let uids = |pods: &BTreeMap<String, Seen>| pods.values().map(|p| p.uid.clone()).collect::<Vec<_>>();
    assert!(
        uids(&rolled).iter().all(|u| !uids(&first).contains(u)),
        "the pods without the agent were replaced by a rollout"
    );
    let fallbacks = events(&client, &ns, "web", names::reason::IN_PLACE_FALLBACK).await;
    assert_eq!(fallbacks, 1, "one InPlaceFallback Event");

    let sets = replica_sets(&client, &ns, "web").await;
    patch_configmap(&client, &ns, "site", json!({"data": site("v3")})).await;
    let restarted = wait_for("web to serve v3", TIMEOUT, || {
        serving(&client, &ns, "web", 2, "v3")
    })
    .await;
    assert_eq!(
        uids(&restarted),
        uids(&rolled),
        "the next change restarted the same pods in place"
    );
    assert_eq!(replica_sets(&client, &ns, "web").await, sets, "no new ReplicaSet");
    let fallbacks_after = events(&client, &ns, "web", names::reason::IN_PLACE_FALLBACK).await;
    assert_eq!(fallbacks_after, 1, "still one InPlaceFallback Event");
}

#[tokio::test]
async fn a_restart_switched_back_to_rollout_midway_rolls_out_once_with_one_event() {
    let Some(node) = turn("in_place_switched").await else {
        return;
    };
    let client = node.client.clone();
    let ns = set_up(&node, "real-in-place-switch").await;
    let rolling = json!({"replicas": 3,
        "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}});
    let mut web = workload("Deployment", "web", true, rolling);
    // Long enough that the restart below is still waiting on its bad pod when the user steps in.
    web["metadata"]["annotations"][names::ROLLOUT_DEADLINE] = json!("10m");
    create(&client, &ns, web).await;
    settled(&client, &ns, "web", 3, "v1").await;

    let mut bad = site("v2");
    bad["greeting"] = json!("bad");
    patch_configmap(&client, &ns, "site", json!({"data": bad})).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let record = wait_for("a pod asked to restart into the bad config", TIMEOUT, || async {
        let asked = asked_to_restart(&client, &ns, "web").await > 0;
        let d = deployments.get("web").await.ok()?;
        let record = d.metadata.annotations?.get(names::IN_PLACE)?.clone();
        asked.then(|| inplace::Record::parse(&record).expect("a readable record"))
    })
    .await;
    assert!(record.is_restarting(), "still restarting: {record:?}");

    // The user sets the strategy back to rollout while the restart waits on its bad pod.
    let switch = json!({"metadata": {"annotations": {(names::RESTART): "rollout"}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&switch))
        .await
        .expect("switch to rollout");
    let d = wait_for("the hash of the bad config on the template", TIMEOUT, || async {
        let d = deployments.get("web").await.ok()?;
        (config_hash(&d).as_deref() == Some(record.hash.as_str())).then_some(d)
    })
    .await;
    let annotations = d.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key(names::IN_PLACE),
        "the in-place record is gone once the rollout is written: {annotations:?}"
    );
    let fallbacks = || async { events(&client, &ns, "web", names::reason::IN_PLACE_FALLBACK).await };
    wait_for("the InPlaceFallback Event", TIMEOUT, || async {
        (fallbacks().await > 0).then_some(())
    })
    .await;

    // The fix rolls out as an ordinary rollout, and the switch said so once.
    patch_configmap(&client, &ns, "site", json!({"data": site("v3")})).await;
    wait_for("web to serve the fix", TIMEOUT, || {
        serving(&client, &ns, "web", 3, "v3")
    })
    .await;
    assert_eq!(fallbacks().await, 1, "one InPlaceFallback Event");
}
