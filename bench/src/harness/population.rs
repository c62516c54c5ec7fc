//! The objects of a benchmark's control plane, the same for every controller (only the opt-in
//! annotation differs), and the writes that change them.
//!
//! ```text
//! populate(Population): namespaces ─► S1's ConfigMap + Secret + Deployment per workload
//!   ─► S3/S6/S7's shared Secret and Deployments ─► S8's ConfigMap, Secret and Deployments
//!   ─► the readiness probe's canaries          (all created 16 at a time; one that exists is fine)
//! fill_unreferenced: S2's Secrets that nothing references, replaced at each payload size
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::json;

use super::Error;
use super::controller::Profile;

/// The annotation wave and Wave write.
pub(crate) const CONFIG_HASH: &str = "wave.pusher.com/config-hash";

/// S8's namespace.
pub(crate) const BAD_NS: &str = "bench-bad";

/// S3's namespace.
pub(crate) const FANOUT_NS: &str = "bench-fanout";

/// S8: the Deployments' `progressDeadlineSeconds`.
pub(crate) const BAD_PROGRESS_DEADLINE: Duration = Duration::from_secs(20);

/// Requests in flight while populating.
const CREATE_CONCURRENCY: usize = 16;

/// The namespace of the readiness probe; its requests are left out of every count.
pub(crate) const CANARY_NS: &str = "bench-canary";

/// Canary pairs: each readiness probe uses the next, so that no canary object changes often enough to
/// trip wave's flap breaker (more than 10 changes in 10 minutes, per object) and no probe's change waits
/// out the coalescing interval of the previous probe's rollout (per workload).
pub(crate) const CANARIES: usize = 16;

/// How many of each kind of object [`populate`] creates; a scenario that needs only some sets the others
/// to zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Population {
    /// Namespaces that hold S1's workloads (`bench-0` …), created even when there are none.
    pub namespaces: usize,
    /// S1: opted-in Deployments, each referencing its own ConfigMap (volume) and Secret (env key).
    pub deployments: usize,
    /// S3: Deployments referencing one Secret.
    pub fanout: usize,
    /// S6: Deployments referencing the Secret that changes in a burst.
    pub storm_deployments: usize,
    /// S7: Deployments referencing the Secret that flaps.
    pub flap_deployments: usize,
    /// S8: Deployments sharing the ConfigMap that turns bad.
    pub bad_deployments: usize,
}

impl Population {
    /// S1's objects alone (with the readiness probe's, which every population has).
    pub fn s1_only(self) -> Self {
        Population {
            fanout: 0,
            storm_deployments: 0,
            flap_deployments: 0,
            bad_deployments: 0,
            ..self
        }
    }

    /// Every opted-in Deployment, the canaries' included: how many a hashing controller hashes.
    pub fn opted_in(&self) -> usize {
        self.deployments
            + self.fanout
            + self.storm_deployments
            + self.flap_deployments
            + self.bad_deployments
            + 2 * CANARIES
    }
}

/// Whether S1's Deployments run a pod each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum S1Pods {
    /// One replica on kwok (S1 and S3 as a cluster runs them).
    One,
    /// `replicas: 0`, where pods would measure the scheduler instead (S10's 20,000 Deployments; H1,
    /// whose published figures were taken so).
    None,
}

/// The same objects for every controller; only the opt-in annotation differs.
pub(crate) async fn populate(
    client: &Client,
    population: &Population,
    profile: &Profile,
    s1_pods: S1Pods,
) -> Result<(), Error> {
    let mut namespaces: Vec<String> = (0..population.namespaces).map(|i| format!("bench-{i}")).collect();
    namespaces.extend(
        [
            FANOUT_NS,
            "bench-storm",
            "bench-flap",
            BAD_NS,
            "bench-unref",
            CANARY_NS,
        ]
        .map(String::from),
    );
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in &namespaces {
        create(&api, json!({"metadata": {"name": ns}})).await?;
    }
    let (key, value) = profile.opt_in;
    let deployment = |name: &str, env_secret: &str, volume_cm: Option<&str>| {
        let mut spec = json!({
            "containers": [{"name": "app", "image": "registry.invalid/app:1",
                "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": env_secret, "key": "password"}}}]}]
        });
        if let Some(cm) = volume_cm {
            spec["volumes"] = json!([{"name": "cfg", "configMap": {"name": cm}}]);
            spec["containers"][0]["volumeMounts"] = json!([{"name": "cfg", "mountPath": "/etc/app"}]);
        }
        // No replicas unless `with_pods` below: S7 counts ReplicaSets, which the Deployment controller
        // creates with or without pods. A long revision history keeps every ReplicaSet countable.
        json!({"metadata": {"name": name, "annotations": {key: value}},
               "spec": {"replicas": 0, "revisionHistoryLimit": 1000, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
    };
    // S1, S3, S6 and S8 run real pods on kwok's nodes: a rollout creates and deletes pods as it would in
    // a cluster, and takes the time a rollout takes.
    let with_pods = |mut body: serde_json::Value| {
        body["spec"]["replicas"] = json!(1);
        body["spec"]["template"]["spec"]["tolerations"] =
            json!([{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]);
        body
    };
    let mut objects: Vec<(String, &'static str, serde_json::Value)> = Vec::new();
    for j in 0..population.deployments {
        let ns = format!("bench-{}", j % population.namespaces);
        let (cm, sec) = (format!("cfg-{j}"), format!("sec-{j}"));
        objects.push((
            ns.clone(),
            "cm",
            json!({"metadata": {"name": cm}, "data": {"app.conf": "v0"}}),
        ));
        objects.push((
            ns.clone(),
            "secret",
            json!({"metadata": {"name": sec}, "stringData": {"password": "v0"}}),
        ));
        let body = deployment(&format!("app-{j}"), &sec, Some(&cm));
        let body = match s1_pods {
            S1Pods::One => with_pods(body),
            S1Pods::None => body,
        };
        objects.push((ns, "deploy", body));
    }
    for (ns, secret, prefix, n) in [
        (FANOUT_NS, "shared", "fan", population.fanout),
        ("bench-storm", "storm", "storm", population.storm_deployments),
        ("bench-flap", "flap", "flap", population.flap_deployments),
    ] {
        objects.push((
            ns.into(),
            "secret",
            json!({"metadata": {"name": secret}, "stringData": {"password": "v0"}}),
        ));
        for k in 0..n {
            let body = deployment(&format!("{prefix}-{k}"), secret, None);
            let body = if ns == "bench-flap" { body } else { with_pods(body) };
            objects.push((ns.into(), "deploy", body));
        }
    }
    objects.push((
        BAD_NS.into(),
        "cm",
        json!({"metadata": {"name": "bad-cfg"}, "data": {"app.conf": "good"}}),
    ));
    objects.push((
        BAD_NS.into(),
        "secret",
        json!({"metadata": {"name": "bad-sec"}, "stringData": {"password": "v0"}}),
    ));
    let bad_hash = bad_hash(&deployment("bad", "bad-sec", Some("bad-cfg")))?;
    for k in 0..population.bad_deployments {
        let mut body = with_pods(deployment(&format!("bad-{k}"), "bad-sec", Some("bad-cfg")));
        body["spec"]["progressDeadlineSeconds"] = json!(BAD_PROGRESS_DEADLINE.as_secs());
        // What makes the change bad for kwok (hack/testenv, stage pod-unready-for-config-hash): the hash
        // wave and Wave write for it, or Reloader's mark of a reload (the bad change is the only one).
        body["spec"]["template"]["metadata"]["annotations"] = json!({
            "testenv.wave/unready-config-hash": bad_hash,
            "testenv.wave/unready-if-annotated": "reloader.stakater.com/last-reloaded-from",
        });
        objects.push((BAD_NS.into(), "deploy", body));
    }
    // Per pair: `canary-cm-N` uses ConfigMap `canary-N` (and a Secret that never changes), and
    // `canary-secret-N` uses Secret `canary-N`.
    objects.push((
        CANARY_NS.into(),
        "secret",
        json!({"metadata": {"name": "canary-static"}, "stringData": {"password": "v0"}}),
    ));
    for i in 0..CANARIES {
        let name = format!("canary-{i}");
        objects.push((
            CANARY_NS.into(),
            "cm",
            json!({"metadata": {"name": name}, "data": {"n": "0"}}),
        ));
        objects.push((
            CANARY_NS.into(),
            "secret",
            json!({"metadata": {"name": name}, "stringData": {"password": "v0"}}),
        ));
        objects.push((
            CANARY_NS.into(),
            "deploy",
            deployment(&format!("canary-cm-{i}"), "canary-static", Some(&name)),
        ));
        objects.push((
            CANARY_NS.into(),
            "deploy",
            deployment(&format!("canary-secret-{i}"), &name, None),
        ));
    }
    futures::stream::iter(objects)
        .map(|(ns, kind, body)| {
            let client = client.clone();
            async move {
                match kind {
                    "cm" => create(&Api::<ConfigMap>::namespaced(client, &ns), body).await,
                    "secret" => create(&Api::<Secret>::namespaced(client, &ns), body).await,
                    _ => create(&Api::<Deployment>::namespaced(client, &ns), body).await,
                }
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The config hash wave and Wave write on an S8 Deployment once `bad-cfg` holds the bad value
/// (computed beforehand, as `wave hash` would).
pub(crate) fn bad_hash(body: &serde_json::Value) -> Result<String, Error> {
    use wave_core::hash::{Content, Fetched, Hashing, config_hash};
    use wave_core::refs::{ConfigKey, ConfigKind};
    use wave_core::workload::{Workload, WorkloadKind};
    let meta = serde_json::from_value(body["metadata"].clone()).map_err(|e| e.to_string())?;
    let mut w = Workload::from_object(WorkloadKind::DEPLOYMENT, meta, body).map_err(|e| e.to_string())?;
    w.id.namespace = BAD_NS.into();
    w.annotations
        .insert("wave.pusher.com/update-on-config-change".into(), "true".into());
    let content = |k: &str, v: &str| {
        std::sync::Arc::new(Content::new(BTreeMap::from([(k.into(), v.as_bytes().to_vec())])))
    };
    let fetched = Fetched::from([
        (
            ConfigKey::new(ConfigKind::ConfigMap, BAD_NS, "bad-cfg"),
            content("app.conf", "bad"),
        ),
        (
            ConfigKey::new(ConfigKind::Secret, BAD_NS, "bad-sec"),
            content("password", "v0"),
        ),
    ]);
    Ok(config_hash(
        BAD_NS,
        &w.references(wave_core::refs::CrossNamespace::Deny),
        &fetched,
        &Hashing::Plain,
    ))
}

/// Replaces the unreferenced Secrets with `count` of `kib` KiB each.
pub(crate) async fn fill_unreferenced(client: &Client, count: usize, kib: usize) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), "bench-unref");
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map_err(|e| format!("deleting the unreferenced Secrets: {e}"))?;
    let t = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                // Distinct bytes per Secret, as release Secrets are: no compression of identical values.
                let payload: Vec<u8> = (0..kib * 1024).map(|b| ((b * 31 + i * 7) % 251) as u8).collect();
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(format!("release-{i}")),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([("release".to_string(), ByteString(payload))])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &secret)
                    .await
                    .map(drop)
                    .map_err(|e| format!("creating an unreferenced Secret: {e}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!("  {count} unreferenced {kib} KiB Secrets in {:.0?}", t.elapsed());
    Ok(())
}

/// Creates the object `body` describes through `api`; one that exists already is fine.
pub(crate) async fn create<K>(api: &Api<K>, body: serde_json::Value) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body).map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(format!("creating {}: {e}", obj.name_any())),
    }
}

pub(crate) async fn patch<K>(
    client: &Client,
    ns: &str,
    name: &str,
    body: serde_json::Value,
) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map(drop)
        .map_err(|e| format!("patching {ns}/{name}: {e}"))
}

/// How many of `deployments` carry a config hash.
pub fn hashed(deployments: &[Deployment]) -> usize {
    deployments
        .iter()
        .filter(|d| {
            let t = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
            t.and_then(|m| m.annotations.as_ref())
                .is_some_and(|a| a.contains_key(CONFIG_HASH))
        })
        .count()
}
