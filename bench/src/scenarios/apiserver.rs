//! S11, apiserver restarts: per trial the kube-apiserver is killed, left down for 20 s and started
//! again, then one ConfigMap change; the time from `/readyz` answering ok until the template changed.
//! It runs last in a round: with the apiserver down, kwok's nodes stop renewing their leases, so
//! nothing that waits for a settled cluster can follow.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::nan_if_null;
use crate::harness::population::patch;
use crate::harness::stats::median;
use crate::harness::wait::template_fingerprint;
use crate::harness::{Error, Limits};

/// What S11 changes: S1's workloads, one per trial.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Restarts (each: 20 s down, then one config change).
    pub trials: usize,
    /// S1's workloads and namespaces.
    pub deployments: usize,
    pub namespaces: usize,
    pub limits: Limits,
}

/// S11: how long the kube-apiserver stays down.
const APISERVER_DOWN: Duration = Duration::from_secs(20);

/// S11: the kube-apiserver killed for 20 s and started again, then one config change.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ApiserverRestart {
    pub trials: usize,
    /// Per trial: from `/readyz` answering ok again to the change reaching the template.
    pub samples_ms: Vec<f64>,
    #[serde(deserialize_with = "nan_if_null")]
    pub median_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Some trial's change had not reached the template when the wait ended.
    pub timed_out: bool,
}

/// S11: per trial, the kube-apiserver SIGKILLed, left down for 20 s and started again (`hack/testenv
/// start` returns once `/readyz` answers ok); then one ConfigMap change, and the time from that answer
/// until the template changed, read by polling the Deployment (the benchmark's own watch is down too).
pub(crate) async fn apiserver_restart(
    cluster: &testenv::Cluster,
    client: &Client,
    sizes: &Sizes,
) -> Result<ApiserverRestart, Error> {
    let mut result = ApiserverRestart {
        trials: sizes.trials,
        ..Default::default()
    };
    let faults = cluster.faults();
    for trial in 0..sizes.trials {
        let j = trial % sizes.deployments.max(1);
        let ns = format!("bench-{}", j % sizes.namespaces);
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let name = format!("app-{j}");
        let before = template_fingerprint(&api.get(&name).await.map_err(|e| e.to_string())?);
        let f = faults.clone();
        tokio::task::spawn_blocking(move || f.kill("kube-apiserver"))
            .await
            .map_err(|e| format!("killing the apiserver: {e}"))?;
        // The fault itself: the apiserver stays down this long.
        tokio::time::sleep(APISERVER_DOWN).await;
        let f = faults.clone();
        tokio::task::spawn_blocking(move || f.start("kube-apiserver"))
            .await
            .map_err(|e| format!("starting the apiserver: {e}"))?;
        let ready = Instant::now();
        let body = json!({"data": {"app.conf": format!("s11-{trial}")}});
        patch::<ConfigMap>(client, &ns, &format!("cfg-{j}"), body).await?;
        let deadline = ready + sizes.limits.limit(Duration::from_secs(300));
        let seen = loop {
            if let Ok(d) = api.get(&name).await
                && template_fingerprint(&d) != before
            {
                break Some(ready.elapsed());
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match seen {
            Some(d) => result.samples_ms.push(d.as_secs_f64() * 1000.0),
            None => result.timed_out = true,
        }
    }
    result.median_ms = median(&result.samples_ms);
    result.max_ms = result.samples_ms.iter().copied().fold(f64::NAN, f64::max);
    Ok(result)
}
