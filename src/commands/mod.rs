//! The client commands: `wave hash` (offline), `wave explain` and `wave impact` (live cluster). They
//! use the same discovery, hash and plan code as the controller.
//!
//! Exit codes: 0 success; 1 `wave hash` found missing required config; 2 bad usage or unreadable input;
//! 3 the cluster could not be asked, or the object does not exist.

pub mod explain;
pub mod hash;
pub mod impact;

use std::process::ExitCode;
use std::time::Duration;

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

/// Splits `kind/name`.
pub fn split_target(target: &str) -> Result<(&str, &str), CommandError> {
    match target.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => Ok((kind, name)),
        _ => Err(CommandError::Input(format!(
            "{target:?} is not KIND/NAME (e.g. deployment/web)"
        ))),
    }
}
