//! S6, a storm (a Secret changed several times within 2 s) and S7, flapping (a Secret changed once a
//! second for minutes): how many rollouts, as ReplicaSets per Deployment, and how many workload writes.
//!
//! ```text
//! Deployment controller caught up ─► ReplicaSets per Deployment ─► the Secret changed `count` times
//!   ─► quiet 5 s (or the limit) ─► caught up again ─► ReplicaSets created per Deployment, writes
//! ```

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::nan_if_null;
use crate::harness::audit::{self, Counts};
use crate::harness::controller::Profile;
use crate::harness::population::patch;
use crate::harness::wait::{TemplateChanges, wait_observed};
use crate::harness::{Error, Limits};

/// S6's or S7's figures.

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Storm {
    pub deployments: usize,
    pub changes: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub replicasets_per_deployment_mean: f64,
    pub replicasets_per_deployment_max: u64,
    /// Successful workload writes.
    pub workload_writes: u64,
    /// Workload writes the apiserver refused (409 Conflict).
    pub refused_writes: u64,
    /// Templates were still changing when the wait ended: the counts are partial.
    pub timed_out: bool,
}

/// Changes Secret `(namespace, name)` `count` times, `every` apart; then, once no template has changed
/// for 5 s (within 10 minutes, plus the backlog of a controller held to a fixed request rate: a reload
/// per change per Deployment) and the Deployment controller has caught up: ReplicaSets created per
/// Deployment, and the controller's workload writes.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn churn(
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    profile: &Profile,
    (namespace, name): (&str, &str),
    (deployments, count): (usize, usize),
    every: Duration,
    limits: Limits,
) -> Result<Storm, Error> {
    // Count from a settled start: the Deployment controller has acted on every template so far.
    wait_observed(client, namespace, limits).await?;
    let before = replicasets_per_owner(client, namespace).await?;
    changes.drain();
    let from = Timestamp::now();
    for c in 0..count {
        let body = json!({"stringData": {"password": format!("{name}-{c}")}});
        patch::<Secret>(client, namespace, name, body).await?;
        tokio::time::sleep(every).await;
    }
    let backlog = profile.backlog((count * deployments) as u64);
    let quiet = changes
        .quiet(
            Duration::from_secs(5),
            limits.limit(Duration::from_secs(600) + backlog),
        )
        .await;
    wait_observed(client, namespace, limits).await?;
    let after = replicasets_per_owner(client, namespace).await?;
    let created: Vec<u64> = after
        .iter()
        .map(|(owner, n)| n.saturating_sub(before.get(owner).copied().unwrap_or(0)))
        .collect();
    let writes = cost(from, Timestamp::now());
    Ok(Storm {
        deployments,
        changes: count,
        replicasets_per_deployment_mean: created.iter().sum::<u64>() as f64 / created.len().max(1) as f64,
        replicasets_per_deployment_max: created.iter().copied().max().unwrap_or(0),
        workload_writes: audit::workload_writes(&writes),
        refused_writes: audit::refused_workload_writes(&writes),
        timed_out: !quiet,
    })
}

async fn replicasets_per_owner(client: &Client, ns: &str) -> Result<HashMap<String, u64>, Error> {
    let list = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut per = HashMap::new();
    for rs in list.items {
        if let Some(owner) = rs.owner_references().first() {
            *per.entry(owner.name.clone()).or_default() += 1;
        }
    }
    Ok(per)
}
