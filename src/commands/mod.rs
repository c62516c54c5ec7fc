//! The client commands: `wave hash` (offline), `wave explain`, `wave impact`, `wave resume`,
//! `wave unpin`, `wave history`, `wave diff` and `wave status` (live cluster), and `wave completion`.
//! They use the same discovery, hash, plan and pacing code as the controller.
//!
//! Each module holds its command's clap arguments (`<Name>Args`) beside the `run` that uses them; a flag
//! that several commands take is a shared struct in [`crate::cli`].
//!
//! Exit codes: 0 success; 1 `wave hash` found missing required config; 2 bad usage or unreadable input;
//! 3 the cluster could not be asked, or the object does not exist.

pub mod agent;
pub mod completion;
pub mod explain;
pub mod hash;
pub mod history;
pub mod impact;
pub mod resume;
pub mod status;
pub mod unpin;

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use wave_core::coalesce::Coalescer;
use wave_core::decide::Memory;
use wave_core::flap::{FlapDetector, FlapPolicy};
use wave_core::pace::{self, Halt, Version};
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::workload::{Workload, WorkloadKind, WorkloadRef};
use wave_runtime::api;

use crate::cli::{ClusterArgs, Output};

/// `wave run`'s default `--max-gate-duration`, which `wave explain` assumes when it says whether a gate
/// has timed out.
pub const DEFAULT_MAX_GATE: Duration = Duration::from_secs(600);

/// Why a command failed; each maps to a documented exit code.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The input or an argument is wrong (exit 2).
    #[error("{0}")]
    Input(String),
    /// The cluster could not be asked (exit 3).
    #[error("{what}")]
    Cluster {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// No client could be configured: a kubeconfig, context or in-cluster setting is missing or wrong
    /// (exit 3).
    #[error("{what}")]
    Config {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The object does not exist (exit 3).
    #[error("{0} not found")]
    NotFound(String),
}

impl CommandError {
    /// The process exit code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CommandError::Input(_) => ExitCode::from(2),
            CommandError::Cluster { .. } | CommandError::Config { .. } | CommandError::NotFound(_) => {
                ExitCode::from(3)
            }
        }
    }
}

/// A client as `cluster` says (kubectl's flags and defaults), and `namespace` or else the
/// kubeconfig context's namespace.
pub async fn client_in(
    cluster: &ClusterArgs,
    namespace: Option<&str>,
) -> Result<(kube::Client, String), CommandError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let fail = |what: &str| {
        let what = what.to_string();
        move |e: Box<dyn std::error::Error + Send + Sync>| CommandError::Config { what, source: e }
    };
    let options = KubeConfigOptions {
        context: cluster.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &cluster.kubeconfig {
        Some(path) => {
            let what = format!("cannot read the kubeconfig {}", path.display());
            let file = Kubeconfig::read_from(path).map_err(|e| fail(&what)(e.into()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| fail(&what)(e.into()))?
        }
        None if cluster.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| fail("cannot load the kubeconfig context")(e.into()))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| fail("cannot configure the Kubernetes client")(e.into()))?,
    };
    if let Some(user) = &cluster.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !cluster.as_group.is_empty() {
        config.auth_info.impersonate_groups = Some(cluster.as_group.clone());
    }
    let ns = namespace.map_or_else(|| config.default_namespace.clone(), str::to_string);
    let client =
        kube::Client::try_from(config).map_err(cluster_error("cannot build the Kubernetes client"))?;
    Ok((client, ns))
}

/// Prints `value` as `output` asks when it is a structured format (JSON or YAML); false for a table,
/// which the caller prints.
pub fn print_structured<T: serde::Serialize>(output: Output, value: &T) -> bool {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(value).unwrap_or_default()),
        Output::Yaml => print!("{}", serde_norway::to_string(value).unwrap_or_default()),
        Output::Table => return false,
    }
    true
}

/// The config object `configmap/NAME` or `secret/NAME` names in `namespace`.
pub fn config_target(target: &str, namespace: &str) -> Result<ConfigKey, CommandError> {
    let (kind, name) = split_target(target)?;
    let kind = match kind.to_ascii_lowercase().as_str() {
        "configmap" | "configmaps" | "cm" => ConfigKind::ConfigMap,
        "secret" | "secrets" => ConfigKind::Secret,
        other => {
            return Err(CommandError::Input(format!(
                "{other:?} is not configmap or secret"
            )));
        }
    };
    Ok(ConfigKey::new(kind, namespace, name))
}

/// Every workload of every kind in `namespace`, or in the cluster with `None` (references can cross
/// namespaces: `extra-*`). CronJobs and Rollouts, which `wave run` manages only with `--cronjobs` and
/// `--argo-rollouts`, are skipped when they may not be listed or are not served.
pub async fn workloads_in(
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<Vec<Workload>, CommandError> {
    let mut workloads = Vec::new();
    for kind in WorkloadKind::ALL {
        let listed = match api::workload_api(client, kind, namespace)
            .list(&Default::default())
            .await
        {
            Ok(listed) => listed,
            Err(e) if !WorkloadKind::BUILT_IN.contains(&kind) && api::status_code(&e) == Some(403) => {
                eprintln!("wave: not listing {}: forbidden", kind.info().plural);
                continue;
            }
            // Argo Rollouts' kind exists only where its CustomResourceDefinition is installed.
            Err(e) if !WorkloadKind::BUILT_IN.contains(&kind) && api::status_code(&e) == Some(404) => {
                continue;
            }
            Err(e) => {
                let place = namespace.map_or("all namespaces".to_string(), |ns| format!("namespace {ns}"));
                return Err(cluster_error(format!(
                    "listing {} in {place}",
                    kind.info().plural
                ))(e));
            }
        };
        for object in listed.items {
            workloads.push(api::to_workload(kind, object).map_err(|e| CommandError::Input(e.to_string()))?);
        }
    }
    workloads.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(workloads)
}

/// The halts the controller's census finds in `workloads` now (`wave_core::pace::census`, with `wave
/// run`'s default `--rollout-deadline`). A failure halts only config in its workload's own namespace,
/// so the workloads of a namespace give every halt on that namespace's config.
pub fn census_halts<'a>(workloads: impl IntoIterator<Item = &'a Workload>) -> BTreeMap<Version, Halt> {
    pace::census(
        workloads,
        pace::DEFAULT_ROLLOUT_DEADLINE,
        k8s_openapi::jiff::Timestamp::now(),
    )
    .halts
}

/// The halts of `key` in the cluster now ([`census_halts`]), each with the workload it failed on.
pub fn halts_of<'a>(workloads: &'a [Workload], key: &ConfigKey) -> Vec<(Halt, &'a Workload)> {
    let object = pace::object_name(key);
    census_halts(workloads)
        .into_values()
        .filter(|h| h.version.object == object)
        .filter_map(|h| {
            let failed = workloads.iter().find(|w| w.id == h.failed)?;
            Some((h, failed))
        })
        .collect()
}

/// The halts on the config of the namespaces asked for so far ([`census_halts`]), listing each
/// namespace's workloads once (`wave status` asks for many workloads').
#[derive(Debug, Default)]
pub struct ClusterHalts {
    /// Every namespace is listed.
    everywhere: bool,
    listed: BTreeSet<String>,
    workloads: Vec<Workload>,
    halts: BTreeMap<Version, Halt>,
}

impl ClusterHalts {
    /// From `workloads` already listed in `namespace` (`None`: in every namespace).
    pub fn listed(workloads: Vec<Workload>, namespace: Option<&str>) -> Self {
        let halts = census_halts(&workloads);
        Self {
            everywhere: namespace.is_none(),
            listed: namespace.into_iter().map(str::to_string).collect(),
            workloads,
            halts,
        }
    }

    /// The halts on config in `namespaces` (and in those listed before), listing the workloads of
    /// each one not listed yet.
    pub async fn of(
        &mut self,
        client: &kube::Client,
        namespaces: impl IntoIterator<Item = String>,
    ) -> Result<&BTreeMap<Version, Halt>, CommandError> {
        let mut more = false;
        for ns in namespaces {
            if self.everywhere || self.listed.contains(&ns) {
                continue;
            }
            match workloads_in(client, Some(&ns)).await {
                Ok(workloads) => {
                    self.workloads.extend(workloads);
                    more = true;
                }
                // Config in a namespace the user may not list workloads of (an extra-* reference):
                // its halts are unknown here, which is said, not an error of the whole command.
                Err(CommandError::Cluster { source, .. }) if api::status_code(&source) == Some(403) => {
                    eprintln!(
                        "wave: halts on config in namespace {ns} are unknown: listing its workloads is forbidden"
                    );
                }
                Err(e) => return Err(e),
            }
            self.listed.insert(ns);
        }
        if more {
            self.halts = census_halts(&self.workloads);
        }
        Ok(&self.halts)
    }
}

/// Runs `f` with what a command can know of wave's memory ([`wave_core::decide::Memory`]), which lives
/// in the controller's process only:
/// - the halts: `halts`, from the cluster's census ([`census_halts`]), as the controller takes it (less
///   a halt only its memory keeps, after the failed workload was undone or deleted);
/// - not the hashes a workload carried: no undo is detected (a pin wave set is on the workload, and
///   the plan reads it);
/// - not what it last rolled: its rollout marker stands in (none without pacing: every version counts
///   as delivered);
/// - no flap breaker and no coalescer: they never hold here. `wave explain` reads wave's last Events
///   for flapping (and for the pacing line, which comes after the decision); coalescing tells no Event.
pub fn with_command_memory<R>(halts: &BTreeMap<Version, Halt>, f: impl FnOnce(&Memory<'_>) -> R) -> R {
    let flaps = FlapDetector::new(FlapPolicy::DEFAULT);
    let coalescer = Coalescer::default();
    f(&Memory {
        carried: &[],
        rolled: None,
        flaps: &flaps,
        coalescer: &coalescer,
        min_interval: Duration::ZERO,
        halts,
        now: Instant::now(),
    })
}

/// The workload `kind/name` names in `namespace`.
pub fn workload_target(target: &str, namespace: &str) -> Result<WorkloadRef, CommandError> {
    let (kind, name) = split_target(target)?;
    let kind = WorkloadKind::parse(kind).ok_or_else(|| {
        CommandError::Input(format!("{kind:?} is not a Deployment, StatefulSet or DaemonSet"))
    })?;
    Ok(WorkloadRef::new(kind, namespace, name))
}

/// Splits `kind/name`.
pub fn split_target(target: &str) -> Result<(&str, &str), CommandError> {
    match target.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => Ok((kind, name)),
        _ => Err(CommandError::Input(format!(
            "{target:?} is not KIND/NAME (e.g. deployment/web)"
        ))),
    }
}

/// Prints `rows` under `header` in left-aligned columns two spaces apart (kubectl's table style).
pub fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let header = header.map(String::from);
    let widths: Vec<usize> = (0..N)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

/// Maps a cluster error to a [`CommandError`] saying what was being done.
pub fn cluster_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> CommandError {
    let what = what.into();
    move |e| CommandError::Cluster {
        what,
        source: Box::new(e),
    }
}

/// The workload `target` names in `namespace`, read from the cluster.
pub async fn read_workload(
    client: &kube::Client,
    target: &str,
    namespace: &str,
) -> Result<Workload, CommandError> {
    let id = workload_target(target, namespace)?;
    api::get_workload(client, &id)
        .await
        .map_err(cluster_error(format!("reading {id}")))?
        .ok_or_else(|| CommandError::NotFound(id.to_string()))
}
