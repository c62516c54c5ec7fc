//! `wave status [KIND/NAME]`: one line per opted-in workload, from the workloads alone (no config is
//! read): its hash, its rollout as its own status tells it, the pin an undo left, and whether it keeps
//! config history.

use std::process::ExitCode;

use k8s_openapi::jiff::Timestamp;
use wave_core::names;
use wave_core::pace::{self, Marker};
use wave_core::rollout::{self, State};
use wave_core::undo::Pin;
use wave_core::workload::{Workload, WorkloadKind};
use wave_runtime::api;

use super::{CommandError, cluster_error, read_workload};
use crate::cli::StatusArgs;

#[derive(serde::Serialize)]
struct StatusView {
    workload: String,
    hash: Option<String>,
    rollout: String,
    pinned: Option<String>,
    config_history: &'static str,
}

fn view(w: &Workload, now: Timestamp) -> StatusView {
    let started = Marker::read(w)
        .filter(|m| Some(m.hash.as_str()) == w.current_hash())
        .and_then(|m| m.at.parse().ok());
    let (deadline, _) = pace::deadline(w, pace::DEFAULT_ROLLOUT_DEADLINE);
    let rollout = match rollout::state(w.id.kind, w.generation, &w.progress, started, deadline, now) {
        State::Complete => "complete".to_string(),
        State::Progressing => "progressing".to_string(),
        State::Failed(why) => format!("failed: {why}"),
    };
    StatusView {
        workload: w.id.to_string(),
        hash: w.current_hash().map(str::to_string),
        rollout,
        pinned: Pin::read(w).map(|p| p.hash),
        config_history: match w.annotations.get(names::CONFIG_HISTORY).map(String::as_str) {
            Some("true") => "on",
            Some("false") => "off",
            _ => "if --config-history",
        },
    }
}

/// Runs `wave status`.
pub async fn run(args: &StatusArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let workloads = match &args.target {
        Some(target) => vec![read_workload(&client, target, &ns).await?],
        None => {
            let mut all = Vec::new();
            for kind in WorkloadKind::ALL {
                let listed = api::workload_api(&client, kind, Some(&ns))
                    .list(&Default::default())
                    .await;
                let listed = match listed {
                    Err(e)
                        if !WorkloadKind::BUILT_IN.contains(&kind) && api::status_code(&e) == Some(403) =>
                    {
                        continue;
                    }
                    other => {
                        other.map_err(cluster_error(format!("listing {} in {ns}", kind.info().plural)))?
                    }
                };
                for object in listed.items {
                    let w = api::to_workload(kind, object).map_err(|e| CommandError::Input(e.to_string()))?;
                    if w.is_opted_in() {
                        all.push(w);
                    }
                }
            }
            all
        }
    };
    let now = Timestamp::now();
    let views: Vec<StatusView> = workloads.iter().map(|w| view(w, now)).collect();
    if super::print_structured(args.output, &views) {
        return Ok(ExitCode::SUCCESS);
    }
    if views.is_empty() {
        println!("No opted-in workloads in {ns}.");
        return Ok(ExitCode::SUCCESS);
    }
    let short = |h: &Option<String>| {
        h.as_deref()
            .map_or("-".to_string(), |h| h[..h.len().min(12)].to_string())
    };
    let rows: Vec<[String; 5]> = views
        .iter()
        .map(|v| {
            [
                v.workload.clone(),
                short(&v.hash),
                v.rollout.clone(),
                v.pinned.as_ref().map_or("-".to_string(), |p| {
                    format!("pinned at {}", short(&Some(p.clone())))
                }),
                v.config_history.to_string(),
            ]
        })
        .collect();
    super::print_table(["WORKLOAD", "HASH", "ROLLOUT", "UNDO", "HISTORY"], &rows);
    Ok(ExitCode::SUCCESS)
}
