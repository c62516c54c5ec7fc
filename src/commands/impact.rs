//! `wave impact (configmap|secret)/NAME`: the opted-in workloads a change to that object would roll.
//!
//! Which ones a halt of the object holds is `wave_core::decide`'s rollout verdict, with the halts of the
//! census of the workloads it lists and none of wave's memory (`super::with_command_memory`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use wave_core::decide::{self, Hold, Verdict};
use wave_core::hash::is_ignored;
use wave_core::impact::{Impact, impact};
use wave_core::names;
use wave_core::pace::{self, Halt};
use wave_core::workload::Workload;
use wave_runtime::api;

use super::{CommandError, census_halts, cluster_error, config_target, with_command_memory, workloads_in};
use crate::cli::{ClusterArgs, CrossNamespaceArg, Output, OutputArg};

/// Flags of `wave impact`.
#[derive(Clone, Debug, clap::Args)]
pub struct ImpactArgs {
    /// `configmap/NAME` or `secret/NAME`.
    pub target: String,
    /// Namespace of the object; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Only these keys change: workloads using only other keys are listed as unaffected.
    #[arg(long, value_delimiter = ',')]
    pub keys: Option<Vec<String>>,
    /// Look for workloads in every namespace (`extra-configmaps` / `extra-secrets` can reference the
    /// object from another one); without it, only the object's namespace is listed.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// `--cross-namespace-references`, as `wave run` has it.
    #[command(flatten)]
    pub cross_namespace: CrossNamespaceArg,
    /// `-o/--output`.
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(serde::Serialize)]
struct Row {
    workload: String,
    #[serde(flatten)]
    impact: Impact,
    /// A halt that keeps this workload from rolling the object's current version.
    #[serde(skip_serializing_if = "Option::is_none")]
    halted: Option<String>,
}

/// Runs `wave impact`.
pub async fn run(args: &ImpactArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let key = config_target(&args.target, &ns)?;
    let changed: Option<BTreeSet<String>> = args.keys.as_ref().map(|k| k.iter().cloned().collect());
    let meta = api::config_metadata(&client, &key)
        .await
        .map_err(cluster_error(format!("reading {key}")))?;
    if meta.as_ref().is_some_and(is_ignored) {
        if !super::print_structured(args.output.output, &Vec::<()>::new()) {
            println!(
                "{key} is ignored ({}: \"true\"): a change to it rolls nothing.",
                names::IGNORE
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Without -A, only the object's namespace is listed: what a user with a namespace's Role may see.
    let workloads = workloads_in(&client, (!args.all_namespaces).then_some(key.namespace.as_str())).await?;
    let census = census_halts(&workloads);
    let object = pace::object_name(&key);
    let halts: Vec<&Halt> = census.values().filter(|h| h.version.object == object).collect();
    // Whether a halt holds `w` is the decision's to say: would a rollout of the halted version of the
    // object into `w` (what it delivers, from its rollout marker) be held, with the census's halts?
    let halted = |w: &Workload| {
        with_command_memory(&census, |memory| {
            halts.iter().find_map(|h| {
                let versions = BTreeMap::from([(object.clone(), h.version.digest.clone())]);
                let delivers = decide::delivered(w, &versions, memory.rolled);
                match decide::rollout_verdict(w, None, &delivers, memory) {
                    Verdict::Hold(Hold::Halted(h)) => Some(format!("halted: {}", h.describe())),
                    _ => None,
                }
            })
        })
    };
    let rows: Vec<Row> = workloads
        .iter()
        .filter(|w| w.is_opted_in())
        .map(|w| Row {
            workload: w.id.to_string(),
            impact: impact(
                &w.references(args.cross_namespace.cross_namespace_references),
                &key,
                changed.as_ref(),
            ),
            halted: halted(w),
        })
        .filter(|r| r.impact != Impact::NotReferenced)
        .collect();
    match args.output.output {
        Output::Json | Output::Yaml => {
            super::print_structured(args.output.output, &rows);
        }
        Output::Table if rows.is_empty() => println!("No opted-in workload references {key}."),
        Output::Table => {
            for halt in &halts {
                println!("halted: {}; run `wave resume` to release it", halt.describe());
            }
            let width = rows
                .iter()
                .map(|r| r.workload.len())
                .max()
                .unwrap_or(0)
                .max("WORKLOAD".len());
            println!("{:<width$}  IMPACT", "WORKLOAD");
            for r in &rows {
                let what = match &r.impact {
                    Impact::Rolls if r.halted.is_some() => "held: its current version is halted".to_string(),
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
