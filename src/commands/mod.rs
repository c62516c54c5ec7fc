//! The client commands: `wave hash` (offline), `wave explain`, `wave impact`, `wave resume`,
//! `wave unpin`, `wave history`, `wave diff` and `wave status` (live cluster). They use the same discovery, hash, plan and pacing code as the controller.
//!
//! Exit codes: 0 success; 1 `wave hash` found missing required config; 2 bad usage or unreadable input;
//! 3 the cluster could not be asked, or the object does not exist.

pub mod explain;
pub mod hash;
pub mod history;
pub mod impact;
pub mod resume;
pub mod status;
pub mod unpin;

use std::process::ExitCode;
use std::time::Duration;

use wave_core::pace::{self, Halt};
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::workload::{Workload, WorkloadKind, WorkloadRef};
use wave_runtime::api;

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
    /// The object does not exist (exit 3).
    #[error("{0} not found")]
    NotFound(String),
}

impl CommandError {
    /// The process exit code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CommandError::Input(_) => ExitCode::from(2),
            CommandError::Cluster { .. } | CommandError::NotFound(_) => ExitCode::from(3),
        }
    }
}

/// A client from the kubeconfig (or in-cluster configuration) and its default namespace.
pub async fn client() -> Result<kube::Client, CommandError> {
    kube::Client::try_default()
        .await
        .map_err(|e| CommandError::Cluster {
            what: "cannot configure the Kubernetes client".into(),
            source: Box::new(e),
        })
}

/// A client, and `namespace` or else the kubeconfig's default namespace.
pub async fn client_in(namespace: Option<&str>) -> Result<(kube::Client, String), CommandError> {
    let client = client().await?;
    let ns = namespace.map_or_else(|| client.default_namespace().to_string(), str::to_string);
    Ok((client, ns))
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

/// Every workload of every kind in the cluster (references can cross namespaces: `extra-*`). CronJobs,
/// which `wave run` manages only with `--cronjobs`, are skipped when they may not be listed.
pub async fn all_workloads(client: &kube::Client) -> Result<Vec<Workload>, CommandError> {
    let mut workloads = Vec::new();
    for kind in WorkloadKind::ALL {
        let listed = match api::list_workloads(client, kind).await {
            Ok(listed) => listed,
            Err(e) if !WorkloadKind::BUILT_IN.contains(&kind) && api::status_code(&e) == Some(403) => {
                eprintln!("wave: not listing {}: forbidden", kind.info().plural);
                continue;
            }
            Err(e) => {
                return Err(CommandError::Cluster {
                    what: format!("listing {} in all namespaces", kind.info().plural),
                    source: Box::new(e),
                });
            }
        };
        workloads.extend(listed);
    }
    workloads.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(workloads)
}

/// The halts of `key` in the cluster now (`wave_core::pace::census`, with `wave run`'s default
/// `--rollout-deadline`).
pub fn halts_of<'a>(workloads: &'a [Workload], key: &ConfigKey) -> Vec<(Halt, &'a Workload)> {
    let census = pace::census(
        workloads,
        pace::DEFAULT_ROLLOUT_DEADLINE,
        k8s_openapi::jiff::Timestamp::now(),
    );
    let object = pace::object_name(key);
    census
        .halts
        .into_values()
        .filter(|h| h.version.object == object)
        .filter_map(|h| {
            let failed = workloads.iter().find(|w| w.id == h.failed)?;
            Some((h, failed))
        })
        .collect()
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
pub fn cluster(what: impl Into<String>) -> impl FnOnce(kube::Error) -> CommandError {
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
        .map_err(cluster(format!("reading {id}")))?
        .ok_or_else(|| CommandError::NotFound(id.to_string()))
}
