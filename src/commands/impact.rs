//! `wave impact (configmap|secret)/NAME`: the opted-in workloads a change to that object would roll.

use std::collections::BTreeSet;
use std::process::ExitCode;

use wave_core::impact::{Impact, impact};
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::workload::{Workload, WorkloadKind};
use wave_runtime::api;

use super::{CommandError, split_target};
use crate::cli::{ImpactArgs, Output};

#[derive(serde::Serialize)]
struct Row {
    workload: String,
    #[serde(flatten)]
    impact: Impact,
}

/// Runs `wave impact`.
pub async fn run(args: &ImpactArgs) -> Result<ExitCode, CommandError> {
    let (kind, name) = split_target(&args.target)?;
    let kind = match kind.to_ascii_lowercase().as_str() {
        "configmap" | "configmaps" | "cm" => ConfigKind::ConfigMap,
        "secret" | "secrets" => ConfigKind::Secret,
        other => {
            return Err(CommandError::Input(format!(
                "{other:?} is not configmap or secret"
            )));
        }
    };
    let client = super::client().await?;
    let ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let key = ConfigKey::new(kind, &ns, name);
    let changed: Option<BTreeSet<String>> = args.keys.as_ref().map(|k| k.iter().cloned().collect());
    // References can come from any namespace (extra-* annotations), so every workload is considered.
    let mut workloads: Vec<Workload> = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        let listed = api::list_workloads(&client, kind)
            .await
            .map_err(|e| CommandError::Cluster {
                what: format!("listing {} in all namespaces", kind.info().plural),
                source: Box::new(e),
            })?;
        workloads.extend(listed);
    }
    workloads.sort_by(|a, b| a.id.cmp(&b.id));
    let rows: Vec<Row> = workloads
        .iter()
        .filter(|w| w.is_opted_in())
        .map(|w| Row {
            workload: w.id.to_string(),
            impact: impact(&w.references(), &key, changed.as_ref()),
        })
        .filter(|r| r.impact != Impact::NotReferenced)
        .collect();
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default()),
        Output::Table if rows.is_empty() => println!("No opted-in workload references {key}."),
        Output::Table => {
            let width = rows
                .iter()
                .map(|r| r.workload.len())
                .max()
                .unwrap_or(0)
                .max("WORKLOAD".len());
            println!("{:<width$}  IMPACT", "WORKLOAD");
            for r in &rows {
                let what = match &r.impact {
                    Impact::Rolls => "rolls".to_string(),
                    Impact::Unaffected(keys) => format!(
                        "unaffected (uses only {})",
                        keys.iter().cloned().collect::<Vec<_>>().join(",")
                    ),
                    Impact::NotReferenced => continue,
                };
                println!("{:<width$}  {what}", r.workload);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
