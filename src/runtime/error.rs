//! Errors at the runtime's boundaries. Each enum has a stable `kind()` used as a metric label and an
//! Event reason; messages name the object and the operation, never a config value.

use crate::core::refs::ConfigKey;
use crate::core::workload::WorkloadRef;

/// Why a reconcile failed. It is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading a referenced ConfigMap or Secret failed (other than NotFound).
    #[error("reading {key} failed")]
    FetchConfig {
        /// The object.
        key: ConfigKey,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Re-reading the workload after a conflict failed.
    #[error("re-reading {workload} after a conflict failed")]
    GetWorkload {
        /// The workload.
        workload: WorkloadRef,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The patch of the workload failed.
    #[error("patching {workload} failed")]
    PatchWorkload {
        /// The workload.
        workload: WorkloadRef,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Deleting the pods a released scheduling gate held failed.
    #[error("deleting the pods the scheduling gate held for {workload} failed")]
    DeleteHeldPods {
        /// The workload.
        workload: WorkloadRef,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The workload kept changing under us.
    #[error("{workload} changed during each of {attempts} write attempts")]
    Conflict {
        /// The workload.
        workload: WorkloadRef,
        /// Attempts made.
        attempts: usize,
    },
}

impl ReconcileError {
    /// Stable, low-cardinality name of the error, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            ReconcileError::FetchConfig { source, .. } => api_kind("fetch_config", source),
            ReconcileError::GetWorkload { source, .. } => api_kind("get_workload", source),
            ReconcileError::PatchWorkload { source, .. } => api_kind("patch_workload", source),
            ReconcileError::DeleteHeldPods { source, .. } => api_kind("delete_held_pods", source),
            ReconcileError::Conflict { .. } => "conflict",
        }
    }
}

fn api_kind(op: &'static str, e: &kube::Error) -> &'static str {
    match (op, status_code(e)) {
        ("fetch_config", Some(403)) => "fetch_config_forbidden",
        ("get_workload", Some(403)) => "get_workload_forbidden",
        ("patch_workload", Some(403)) => "patch_workload_forbidden",
        ("patch_workload", Some(422)) => "patch_workload_invalid",
        ("delete_held_pods", Some(403)) => "delete_held_pods_forbidden",
        _ => op,
    }
}

/// The HTTP status of an API error, if the server answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether the error is the apiserver's 409 Conflict.
pub fn is_conflict(e: &kube::Error) -> bool {
    status_code(e) == Some(409)
}

/// Whether the error is the apiserver's 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    status_code(e) == Some(404)
}

/// A short human description of an API error for logs and `/readyz`: `forbidden: <server message>`.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!("{}: {}", status.reason.to_lowercase(), status.message),
        other => other.to_string(),
    }
}

/// Why the controller could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No kubeconfig or in-cluster configuration.
    #[error("cannot configure the Kubernetes client")]
    KubeConfig(#[source] Box<kube::Error>),
    /// An admin address is malformed or taken.
    #[error("cannot serve {what} on {address:?}")]
    Bind {
        /// metrics or health.
        what: &'static str,
        /// The address given.
        address: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Leader election could not start.
    #[error("leader election with Lease {namespace}/{name} failed")]
    Lease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The cause.
        #[source]
        source: Box<kube_lease_manager::LeaseManagerError>,
    },
    /// This replica lost the lease; it exits so that it can never write alongside the new leader.
    #[error("lost the leader lease {namespace}/{name}; exiting")]
    LeaseLost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
    /// The webhook could not be set up (certificate, Secret or configuration).
    #[error("webhook: {0}")]
    Webhook(String),
}

impl RunError {
    /// Stable name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::KubeConfig(_) => "kube_config",
            RunError::Bind { .. } => "bind",
            RunError::Lease { .. } => "lease",
            RunError::LeaseLost { .. } => "lease_lost",
            RunError::Webhook(_) => "webhook",
        }
    }
}
