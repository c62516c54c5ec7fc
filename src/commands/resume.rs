//! `wave resume (configmap|secret)/NAME`: releases the halts of that object's current version, so it
//! rolls into the workloads it held back (`docs/behaviour.md`, "Halting a bad config").
//!
//! A halt is read from the cluster (`wave_core::pace::census`): a workload whose wave rollout of the
//! version failed (its failure record, or its marker). Releasing it marks that workload with
//! `wave.pusher.com/halt-released: <that rollout's hash>`;
//! the controller then no longer counts the failure as a halt, and wakes the workloads it held.

use std::process::ExitCode;

use serde_json::json;
use wave_core::names;
use wave_core::pace::{Failure, Marker};
use wave_runtime::api;

use super::{CommandError, cluster_error, config_target, halts_of, workloads_in};
use crate::cli::ClusterArgs;

/// Flags of `wave resume`.
#[derive(Clone, Debug, clap::Args)]
pub struct ResumeArgs {
    /// `configmap/NAME` or `secret/NAME`.
    pub target: String,
    /// Namespace of the object; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Runs `wave resume`.
pub async fn run(args: &ResumeArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let key = config_target(&args.target, &ns)?;
    let workloads = workloads_in(&client, None).await?;
    let halts = halts_of(&workloads, &key);
    if halts.is_empty() {
        println!("No halted rollout of {key}.");
        return Ok(ExitCode::SUCCESS);
    }
    for (halt, failed) in halts {
        // The halt comes from the failure wave recorded, or from the marker of a rollout failing now.
        let recorded = Failure::read(failed)
            .filter(|f| f.delivered.get(&halt.version.object) == Some(&halt.version.digest))
            .map(|f| f.hash);
        let Some(hash) = recorded.or_else(|| Marker::read(failed).map(|m| m.hash)) else {
            continue;
        };
        let body = json!({"metadata": {"annotations": {(names::HALT_RELEASED): hash}}});
        api::patch_workload(&client, &failed.id, &body)
            .await
            .map_err(cluster_error(format!("marking {} released", failed.id)))?;
        println!("Released: {}.", halt.describe());
    }
    Ok(ExitCode::SUCCESS)
}
