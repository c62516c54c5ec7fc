//! `wave unpin KIND/NAME`: removes the pin wave set when the workload's template went back to an earlier
//! config hash (`docs/behaviour.md`, "Undo"). wave then rolls the workload to its current config.

use std::process::ExitCode;

use wave_core::undo::{self, Pin};
use wave_runtime::api;

use super::{CommandError, cluster_error};
use crate::cli::ClusterArgs;

/// Flags of `wave unpin`.
#[derive(Clone, Debug, clap::Args)]
pub struct UnpinArgs {
    /// `deployment/NAME`, `statefulset/NAME` or `daemonset/NAME`.
    pub target: String,
    /// Namespace of the workload; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Runs `wave unpin`.
pub async fn run(args: &UnpinArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let workload = super::read_workload(&client, &args.target, &ns).await?;
    let id = &workload.id;
    let Some(pin) = Pin::read(&workload) else {
        println!("{id} is not pinned.");
        return Ok(ExitCode::SUCCESS);
    };
    api::patch_workload(&client, id, &undo::unpin_patch())
        .await
        .map_err(cluster_error(format!("unpinning {id}")))?;
    println!(
        "Unpinned {id} (it was pinned at {}); wave now rolls it to its current config.",
        pin.hash
    );
    Ok(ExitCode::SUCCESS)
}
