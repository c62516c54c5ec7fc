//! Errors at the runtime's boundaries. Each enum has a stable `kind()` used as a metric label and an
//! Event reason; messages name the object and the operation, never a config value.

use wave_core::refs::ConfigKey;
use wave_core::workload::WorkloadRef;

use crate::api::status_code;

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
    /// Re-reading the workload (after a conflict, or after removing what Wave v0.6 left) failed.
    #[error("re-reading {workload} failed")]
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
    /// Reading a workload's pods, or asking one to restart in place, failed.
    #[error("{what} for the in-place restart of {workload} failed")]
    RestartInPlace {
        /// The workload.
        workload: WorkloadRef,
        /// What: `listing its pods`, `asking pod x to restart`.
        what: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Deleting a Job to create it again (a reload through Reloader's annotations), or creating it
    /// after the delete, failed. After the delete wave keeps the Job to create and tries again.
    #[error("{step} Job {workload} failed")]
    RecreateJob {
        /// The Job.
        workload: WorkloadRef,
        /// `deleting` or `creating again`.
        step: &'static str,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Removing what Wave ≤ v0.6 left (an owner reference on a config object, or its finalizer) failed.
    #[error("removing Wave v0.6's {what} for {workload} failed")]
    LegacyCleanup {
        /// The workload.
        workload: WorkloadRef,
        /// What: `owner reference on ConfigMap ns/x`, or `finalizer`.
        what: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Keeping a config snapshot, or restoring config from one, failed.
    #[error("{what} for {workload} failed")]
    History {
        /// The workload.
        workload: WorkloadRef,
        /// What: `listing its revisions`, `creating snapshot …`, `restoring ConfigMap ns/x`.
        what: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The reconcile panicked (a bug). The worker survives, the workload is retried with backoff.
    #[error("reconciling {workload} panicked: {message}")]
    Panicked {
        /// The workload.
        workload: WorkloadRef,
        /// The panic's message.
        message: String,
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

/// The API operations of a reconcile, named in error metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Reading a referenced ConfigMap or Secret.
    FetchConfig,
    /// Reading the workload again after a conflict.
    GetWorkload,
    /// Patching the workload.
    PatchWorkload,
    /// Deleting the pods a released gate held.
    DeleteHeldPods,
    /// Listing or marking a workload's pods for an in-place restart.
    RestartInPlace,
    /// Removing what Wave ≤ v0.6 left.
    LegacyCleanup,
    /// Deleting a Job and creating it again.
    RecreateJob,
    /// Keeping or restoring config history.
    History,
}

impl Operation {
    /// Stable name, a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::FetchConfig => "fetch_config",
            Operation::GetWorkload => "get_workload",
            Operation::PatchWorkload => "patch_workload",
            Operation::DeleteHeldPods => "delete_held_pods",
            Operation::RestartInPlace => "restart_in_place",
            Operation::LegacyCleanup => "legacy_cleanup",
            Operation::RecreateJob => "recreate_job",
            Operation::History => "config_history",
        }
    }

    fn forbidden(self) -> &'static str {
        match self {
            Operation::FetchConfig => "fetch_config_forbidden",
            Operation::GetWorkload => "get_workload_forbidden",
            Operation::PatchWorkload => "patch_workload_forbidden",
            Operation::DeleteHeldPods => "delete_held_pods_forbidden",
            Operation::RestartInPlace => "restart_in_place_forbidden",
            Operation::LegacyCleanup => "legacy_cleanup_forbidden",
            Operation::RecreateJob => "recreate_job_forbidden",
            Operation::History => "config_history_forbidden",
        }
    }
}

impl ReconcileError {
    /// The API operation that failed, and its error; `None` for a conflict that never resolved.
    pub fn api_error(&self) -> Option<(Operation, &kube::Error)> {
        match self {
            ReconcileError::FetchConfig { source, .. } => Some((Operation::FetchConfig, source)),
            ReconcileError::GetWorkload { source, .. } => Some((Operation::GetWorkload, source)),
            ReconcileError::PatchWorkload { source, .. } => Some((Operation::PatchWorkload, source)),
            ReconcileError::DeleteHeldPods { source, .. } => Some((Operation::DeleteHeldPods, source)),
            ReconcileError::RestartInPlace { source, .. } => Some((Operation::RestartInPlace, source)),
            ReconcileError::LegacyCleanup { source, .. } => Some((Operation::LegacyCleanup, source)),
            ReconcileError::RecreateJob { source, .. } => Some((Operation::RecreateJob, source)),
            ReconcileError::History { source, .. } => Some((Operation::History, source)),
            ReconcileError::Conflict { .. } | ReconcileError::Panicked { .. } => None,
        }
    }

    /// Stable, low-cardinality name of the error, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self.api_error() {
            None if matches!(self, ReconcileError::Panicked { .. }) => "panic",
            None => "conflict",
            Some((op, e)) => match status_code(e) {
                Some(403) => op.forbidden(),
                Some(422) if op == Operation::PatchWorkload => "patch_workload_invalid",
                _ => op.as_str(),
            },
        }
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
    /// `--hash-key-secret` names a key that cannot be read.
    #[error("cannot read the key of the config hash (--hash-key-secret)")]
    HashKey(#[source] crate::api::HashKeyError),
    /// A `--workload-resource` names no resource the apiserver serves, or one without namespaces.
    #[error("--workload-resource {resource}: {reason}")]
    WorkloadResource {
        /// The flag's value.
        resource: wave_core::kind::ResourceSpec,
        /// What is wrong.
        reason: String,
    },
    /// The webhook could not be set up (certificate, Secret or configuration).
    #[error("cannot start the admission webhook")]
    Webhook(#[source] WebhookError),
    /// `--alert-webhook-url`, `--alert-webhook-proxy` or `--webhook-url` can never be posted to.
    #[error("cannot post alerts or --webhook-url notices")]
    Alerts(#[source] AlertError),
    /// `--enable-csi-integration`: whether the apiserver serves the CSI driver's statuses could not be
    /// found out (a missing CRD is a warning, not this).
    #[error("--enable-csi-integration: {0}")]
    CsiDiscovery(String),
}

/// Why a URL wave posts to about reloads can never be reached (`alerts`). It never holds the URL, which
/// for a chat webhook is its token.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// The URL cannot be used as given.
    #[error("{0}")]
    Url(&'static str),
    /// An `https` URL, and no CA certificate found to verify it.
    #[error(
        "no CA certificates found (SSL_CERT_FILE, SSL_CERT_DIR or the system's store) to verify an https sink"
    )]
    NoCertificates,
    /// rustls refused its configuration.
    #[error("TLS configuration")]
    Tls(#[source] rustls::Error),
}

/// Why the webhook could not start, or could not decide one request.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Generating a certificate failed.
    #[error("generating the webhook certificate failed")]
    Generate(#[from] rcgen::Error),
    /// Reading or writing the certificate's or the path token's Secret failed.
    #[error("reading or writing Secret {secret} failed")]
    Secret {
        /// `namespace/name`.
        secret: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// With `--webhook-certificate=secret`, the Secret does not exist.
    #[error(
        "Secret {secret} not found: with --webhook-certificate=secret, cert-manager (or you) must write it"
    )]
    SecretMissing {
        /// `namespace/name`.
        secret: String,
    },
    /// The Secret lacks `tls.crt` or `tls.key`.
    #[error("Secret {secret} has no tls.crt and tls.key")]
    SecretIncomplete {
        /// `namespace/name`.
        secret: String,
    },
    /// Other replicas kept rewriting the Secret.
    #[error("Secret {secret} kept changing while the certificate was issued")]
    SecretKeptChanging {
        /// `namespace/name`.
        secret: String,
    },
    /// The apiserver refused the update of the configuration's `caBundle` or paths. Its message, which
    /// may quote the refused path, is kept with the path token cut out.
    #[error("updating MutatingWebhookConfiguration {configuration} failed: {reason}")]
    RegistrationRefused {
        /// Its name.
        configuration: String,
        /// The apiserver's message, the token replaced by `<token>`.
        reason: String,
    },
    /// Reading or updating the configuration's `caBundle` or paths failed.
    #[error("reading or updating MutatingWebhookConfiguration {configuration} failed")]
    Registration {
        /// Its name.
        configuration: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The operating system's random number generator failed.
    #[error("generating the webhook's path token failed: no random numbers")]
    Random,
    /// The certificate or key is not PEM.
    #[error("reading the serving certificate or key failed")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// rustls refused the certificate or key.
    #[error("the serving certificate or key is unusable")]
    Key(#[source] rustls::Error),
    /// The listen address is taken or invalid.
    #[error("cannot serve the webhook on {address:?}")]
    Bind {
        /// The address given.
        address: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The admitted object is not a readable workload.
    #[error("decoding the admitted {kind} failed")]
    Decode {
        /// Its kind.
        kind: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Reading the referenced config failed.
    #[error("reading the referenced config failed")]
    Content(#[source] ReconcileError),
    /// The patch could not be encoded.
    #[error("encoding the patch failed")]
    Patch(#[source] serde_json::Error),
}
