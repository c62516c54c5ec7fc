//! `wave status [KIND/NAME] [-n NS | -A]`: every opted-in workload with its current and desired hash,
//! its state and why (the same assessment as `wave explain`: `wave_core::decide`'s decision, with the
//! halts of the census of the workloads it lists), how its rollout is doing, the pin an undo
//! left, and whether it keeps config history.

use std::collections::BTreeMap;
use std::process::ExitCode;

use k8s_openapi::jiff::Timestamp;
use wave_core::pace;
use wave_core::rollout::State;
use wave_core::undo::Pin;
use wave_core::workload::Workload;
use wave_core::{inplace, names};

use super::explain::{InPlace, RESTARTING_TO, UNKNOWN_CONFIG, assess, hashing, in_place_view, restart_state};
use super::{ClusterHalts, CommandError, read_workload, workloads_in};
use crate::cli::{ClusterArgs, CrossNamespaceArg, HashKeySecretArg, OutputArg, ReloaderCompatArg};

/// Flags of `wave status`.
#[derive(Clone, Debug, clap::Args)]
pub struct StatusArgs {
    /// One workload (`deployment/NAME`, ...); all opted-in workloads of the namespace without it.
    pub target: Option<String>,
    /// Namespace; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with_all = ["namespace", "target"])]
    pub all_namespaces: bool,
    /// `--hash-key-secret`, as `wave run` has it.
    #[command(flatten)]
    pub hash_key: HashKeySecretArg,
    /// `--cross-namespace-references`, as `wave run` has it.
    #[command(flatten)]
    pub cross_namespace: CrossNamespaceArg,
    /// `--reloader-compat`, as `wave run` has it.
    #[command(flatten)]
    pub reloader: ReloaderCompatArg,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// `-o/--output`.
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(serde::Serialize)]
struct StatusView {
    workload: String,
    current_hash: Option<String>,
    desired_hash: Option<String>,
    /// `explain`'s status: the decision's reason (up-to-date, blocked, rollout, write, halted, pinned,
    /// ...), or held or queued from wave's Events.
    state: &'static str,
    why: String,
    rollout: String,
    pinned: Option<String>,
    config_history: &'static str,
    /// How its pods get new config: `rollout` or `in-place` (as its annotation says).
    restart: &'static str,

    /// Restarting in place (or having done so): how many of its pods run each config hash (or are
    /// `restarting to HASH`, or run an `unknown` one).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pods: BTreeMap<String, usize>,
}

/// The rollout as the workload's own status tells it; or, while its pods restart in place or after
/// that failed, the restart (as `explain` tells it), since its own status shows no rollout then.
fn rollout_state(
    w: &Workload,
    record: Option<&inplace::Record>,
    restart: inplace::Strategy,
    now: Timestamp,
) -> String {
    if let Some(r) = record.filter(|r| r.is_restarting() || r.failed.is_some()) {
        return format!("in place: {}", restart_state(r));
    }
    let own = match pace::rollout_state(w, pace::DEFAULT_ROLLOUT_DEADLINE, now) {
        State::Complete => "complete".to_string(),
        State::Progressing => "progressing".to_string(),
        State::Paused => "paused".to_string(),
        State::Failed(why) => format!("failed: {why}"),
    };
    if restart == inplace::Strategy::InPlace {
        format!("{own} (in place)")
    } else {
        own
    }
}

/// Runs `wave status`.
pub async fn run(args: &StatusArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    // The halts come from the census of every workload listed, opted in or not (`explain`).
    let (workloads, mut halts) = match &args.target {
        Some(target) => (
            vec![read_workload(&client, target, &ns).await?],
            ClusterHalts::default(),
        ),
        None => {
            let place = (!args.all_namespaces).then_some(ns.as_str());
            let all = workloads_in(&client, place).await?;
            let opted_in = all.iter().filter(|w| w.is_opted_in()).cloned().collect();
            (opted_in, ClusterHalts::listed(all, place))
        }
    };
    let hashing = hashing(&client, args.hash_key.hash_key_secret.as_ref()).await?;
    let now = Timestamp::now();
    let mut views = Vec::new();
    for w in &workloads {
        let a = assess(
            &client,
            w,
            &hashing,
            args.cross_namespace.cross_namespace_references,
            args.reloader.reloader_compat,
            &mut halts,
        )
        .await?;
        let InPlace {
            restart,
            record,
            pods,
        } = in_place_view(&client, w).await?;
        let mut by_config = BTreeMap::new();
        for pod in pods {
            *by_config.entry(pod.config).or_default() += 1;
        }
        views.push(StatusView {
            workload: w.id.to_string(),
            current_hash: a.current_hash,
            desired_hash: a.desired_hash,
            state: a.status,
            why: a.reason,
            rollout: rollout_state(w, record.as_ref(), restart, now),
            pinned: Pin::read(w).map(|p| p.hash),
            config_history: match w.annotations.get(names::CONFIG_HISTORY).map(String::as_str) {
                Some("true") => "on",
                Some("false") => "off",
                _ => "if --config-history",
            },
            restart: restart.as_str(),
            pods: by_config,
        });
    }
    if super::print_structured(args.output.output, &views) {
        return Ok(ExitCode::SUCCESS);
    }
    if views.is_empty() {
        let place = if args.all_namespaces {
            "any namespace".to_string()
        } else {
            ns
        };
        println!("No opted-in workloads in {place}.");
        return Ok(ExitCode::SUCCESS);
    }
    let short = |h: &Option<String>| {
        h.as_deref()
            .map_or("-".to_string(), |h| wave_core::hash::short(h).to_string())
    };
    let rows: Vec<[String; 8]> = views
        .iter()
        .map(|v| {
            [
                v.workload.clone(),
                short(&v.current_hash),
                short(&v.desired_hash),
                v.state.to_string(),
                v.rollout.clone(),
                v.config_history.to_string(),
                pods_cell(&v.pods),
                v.why.clone(),
            ]
        })
        .collect();
    super::print_table(
        [
            "WORKLOAD", "HASH", "DESIRED", "STATE", "ROLLOUT", "HISTORY", "PODS", "WHY",
        ],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

/// The PODS cell: how many pods run each config (hashes cut to 12 characters), `-` when not read.
fn pods_cell(pods: &BTreeMap<String, usize>) -> String {
    if pods.is_empty() {
        return "-".to_string();
    }
    pods.iter()
        .map(|(config, n)| {
            let short = wave_core::hash::short;
            match config.strip_prefix(RESTARTING_TO) {
                Some(to) => format!("{n} restarting to {}", short(to)),
                None if config == UNKNOWN_CONFIG => format!("{n} on a config not known"),
                None => format!("{n} on {}", short(config)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pods_cell_counts_pods_per_config_with_short_hashes() {
        let pods = BTreeMap::from([
            ("0123456789abcdef".to_string(), 2),
            (format!("{RESTARTING_TO}fedcba9876543210"), 1),
            (UNKNOWN_CONFIG.to_string(), 1),
        ]);
        assert_eq!(
            pods_cell(&pods),
            "2 on 0123456789ab, 1 restarting to fedcba987654, 1 on a config not known"
        );
        assert_eq!(pods_cell(&BTreeMap::new()), "-");
    }
}
