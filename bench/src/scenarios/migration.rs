//! M2, switching from Wave: Wave v0.11.0 hashes 100 Deployments and is stopped; wave starts on the same
//! objects; then Wave again. Each switch should write nothing, except to the workloads whose init
//! containers alone reference config (Wave ignores init containers; wave does not: difference
//! `init-containers` in docs/behaviour.md).
//!
//! ```text
//! testenv up --audit ─► 100 Deployments (5 with init-container-only references)
//!   ─► Wave until every one is hashed ─► stop ─► wave until it reconciled all ─► stop ─► Wave again
//!   writes by each, from the audit log
//! ```

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde::Serialize;
use serde_json::json;

use futures::future::LocalBoxFuture;

use super::{Context, Figures};
use crate::harness::controller::{Profile, Running};
use crate::harness::{audit, metrics};

const NS: &str = "bench-m2";
/// Deployments, and how many of them reference config from init containers only.
const WORKLOADS: usize = 100;
const INIT_ONLY: usize = 5;

type Error = String;

/// What M2 measured.
#[derive(Clone, Debug, Serialize)]
pub struct Migration {
    pub workloads: usize,
    /// Workloads whose init containers alone reference config.
    pub init_only: usize,
    /// wave's workload writes after taking over from Wave.
    pub wave_writes: u64,
    /// Wave's workload writes after taking over from wave again.
    pub wave_go_writes_back: u64,
}

/// M2 as [`super::REGISTRY`] runs it, with wave's and wave-go's profiles.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move {
        let (wave, wave_go) = (ctx.profile("wave")?, ctx.profile("wave-go")?);
        run(wave, wave_go).await.map(Figures::FromWave)
    })
}

/// Runs M2 with `wave` and `wave_go` on a control plane of its own.
pub async fn run(wave: &Profile, wave_go: &Profile) -> Result<Migration, Error> {
    let dir = std::env::temp_dir().join(format!("wave-bench-{}-m2", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit"]);
    let result = run_on(&cluster, wave, wave_go).await;
    cluster.stop();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_on(cluster: &testenv::Cluster, wave: &Profile, wave_go: &Profile) -> Result<Migration, Error> {
    let client = cluster.client().await;
    populate(&client).await?;
    let audit_log = cluster.dir().join("logs/audit.log");
    let log = cluster.dir().join("logs/m2.log");
    let kubeconfig =
        |p: &Profile| cluster.user_kubeconfig(&format!("bench-{}", p.name), Some("system:masters"));
    let writes = |p: &Profile, from| {
        let counts = audit::count(
            &audit_log,
            &format!("bench-{}", p.name),
            "-",
            from,
            Timestamp::now(),
        );
        audit::workload_writes(&counts)
    };

    let go =
        Running::start(wave_go, &kubeconfig(wave_go), &log).map_err(|e| format!("starting Wave: {e}"))?;
    wait_all_hashed(&client).await?;
    go.stop();

    let from = Timestamp::now();
    let mut ours =
        Running::start(wave, &kubeconfig(wave), &log).map_err(|e| format!("starting wave: {e}"))?;
    let port = metrics::port(wave).ok_or("wave's profile has no metrics address")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    // Every workload reconciled once (a write or a noop) since the start.
    while reconciles(port) < WORKLOADS as f64 {
        if !ours.is_alive() || Instant::now() > deadline {
            return Err("wave did not reconcile every workload within 5 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // a late write still counts
    let wave_writes = writes(wave, from);
    ours.stop();

    let from = Timestamp::now();
    let go =
        Running::start(wave_go, &kubeconfig(wave_go), &log).map_err(|e| format!("starting Wave: {e}"))?;
    // Wave has no readiness signal: give it the time its start-up takes with 100 Deployments, many
    // times over.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let wave_go_writes_back = writes(wave_go, from);
    go.stop();
    Ok(Migration {
        workloads: WORKLOADS,
        init_only: INIT_ONLY,
        wave_writes,
        wave_go_writes_back,
    })
}

/// 100 opted-in Deployments with every kind of reference Wave and wave both hash, the last five
/// referencing config from an init container only.
async fn populate(client: &Client) -> Result<(), Error> {
    let err = |e: kube::Error| e.to_string();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .map_err(err)?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    for name in ["cfg", "extra"] {
        let cm = json!({"metadata": {"name": name}, "data": {"app.conf": "v1", "other": "x"}});
        cms.create(&pp, &serde_json::from_value(cm).unwrap())
            .await
            .map_err(err)?;
    }
    let secret = json!({"metadata": {"name": "creds"}, "stringData": {"password": "p", "user": "u"}});
    secrets
        .create(&pp, &serde_json::from_value(secret).unwrap())
        .await
        .map_err(err)?;
    for j in 0..WORKLOADS {
        let name = format!("app-{j}");
        let mut annotations = json!({"wave.pusher.com/update-on-config-change": "true"});
        let mut container = json!({"name": "app", "image": "registry.invalid/app:1"});
        let mut spec = json!({});
        if j >= WORKLOADS - INIT_ONLY {
            spec["initContainers"] = json!([{"name": "init", "image": "registry.invalid/init:1",
                "envFrom": [{"configMapRef": {"name": "cfg"}}]}]);
        } else {
            match j % 3 {
                0 => {
                    spec["volumes"] = json!([{"name": "cfg", "configMap": {"name": "cfg"}}]);
                    container["env"] = json!([{"name": "P", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}]);
                }
                1 => {
                    container["envFrom"] = json!([{"configMapRef": {"name": "cfg"}}]);
                    spec["volumes"] = json!([{"name": "s", "projected": {"sources": [
                        {"secret": {"name": "creds", "items": [{"key": "user", "path": "u"}]}}]}}]);
                }
                _ => {
                    annotations["wave.pusher.com/extra-configmaps"] = json!("extra");
                    container["env"] = json!([{"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "app.conf"}}}]);
                }
            }
        }
        spec["containers"] = json!([container]);
        let d = json!({"metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}});
        deployments
            .create(&pp, &serde_json::from_value(d).unwrap())
            .await
            .map_err(err)?;
    }
    Ok(())
}

async fn wait_all_hashed(client: &Client) -> Result<(), Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let hashed = crate::harness::population::hashed(&list.items);
        if hashed == WORKLOADS {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("Wave hashed {hashed} of {WORKLOADS} within 5 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `wave_reconciles_total`, summed (0 while its `/metrics` does not answer).
pub(crate) fn reconciles(port: u16) -> f64 {
    metrics::scrape(port).map_or(0.0, |text| metrics::counter(&text, "wave_reconciles_total"))
}
