//! S8, bad config: one ConfigMap change that makes every pod using it unready (kwok's stage
//! `pod-unready-for-config-hash`), with the controller restarted with whatever it has to pace rollouts.
//! How many Deployments rolled onto the bad config, and how many were left broken.
//!
//! ```text
//! every S8 Deployment rolled out ─► bad-cfg patched ─► progress deadline + 20 s (the observation window)
//!   ─► quiet 15 s (or the limit) ─► rolled (generation moved), broken (still rolling)
//! ```

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::harness::controller::Profile;
use crate::harness::population::{BAD_NS, BAD_PROGRESS_DEADLINE, patch};
use crate::harness::wait::{TemplateChanges, is_rolling};
use crate::harness::{Error, Limits};

/// What S8 sets up.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Deployments (one replica each, on kwok) sharing the ConfigMap that turns bad.
    pub deployments: usize,
    /// wave's --max-concurrent-rollouts (the peers cannot pace).
    pub pacing: usize,
    pub limits: Limits,
}

/// S8: a config change that makes every pod using it unready.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BadConfig {
    pub deployments: usize,
    /// wave's --max-concurrent-rollouts (0: the controller cannot pace).
    pub pacing: usize,
    /// Deployments whose template changed after the bad change.
    pub rolled: usize,
    /// Of those, the ones whose rollout did not complete: left with pods that never became ready.
    pub broken: usize,
    /// The wait for templates to stop changing gave up.
    pub timed_out: bool,
}

/// S8: every Deployment done, then one change that makes every pod that uses it unready. Once every
/// rollout has had its progress deadline, and templates stopped changing: how many rolled, and how many
/// were left broken.
pub(crate) async fn bad_config(
    client: &Client,
    changes: &mut TemplateChanges,
    sizes: &Sizes,
    profile: &Profile,
) -> Result<BadConfig, Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), BAD_NS);
    let limit = sizes.limits.limit(Duration::from_secs(600));
    let deadline = Instant::now() + limit;
    let before: HashMap<String, Option<i64>> = loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if list.items.len() == sizes.deployments && !list.items.iter().any(is_rolling) {
            break list
                .items
                .iter()
                .map(|d| (d.name_any(), d.metadata.generation))
                .collect();
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the S8 Deployments were not all rolled out within {limit:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    changes.drain();
    patch::<ConfigMap>(client, BAD_NS, "bad-cfg", json!({"data": {"app.conf": "bad"}})).await?;
    // Every rollout gets its progress deadline, and a controller that paces the time to see a failure:
    // this is the scenario's observation window, not a wait for a condition.
    tokio::time::sleep(BAD_PROGRESS_DEADLINE + Duration::from_secs(20)).await;
    let quiet = changes
        .quiet(
            Duration::from_secs(15),
            sizes.limits.limit(Duration::from_secs(600)),
        )
        .await;
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let rolled: Vec<&Deployment> = list
        .items
        .iter()
        .filter(|d| before.get(&d.name_any()).copied().flatten() != d.metadata.generation)
        .collect();
    Ok(BadConfig {
        deployments: sizes.deployments,
        pacing: if profile.pacing.is_empty() {
            0
        } else {
            sizes.pacing
        },
        rolled: rolled.len(),
        broken: rolled.iter().filter(|d| is_rolling(d)).count(),
        timed_out: !quiet,
    })
}
