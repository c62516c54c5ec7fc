//! One controller's session on one control plane of `hack/testenv`: the control plane's directory,
//! the admin client, the controller's own client-certificate user (so that the apiserver's audit log
//! attributes every request), its kubeconfig and log, and what it cost between two instants.
//!
//! ```text
//! cluster_dir(tag) ─► testenv::Cluster::start_in ─► Session::new ─► … cost(from, to) … ─► cluster.stop
//!                                                    (on failure: keep_logs to <out>/failed-<controller>/)
//! ```

use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use kube::Client;

use super::audit::{self, Counts};
use super::controller::Profile;
use super::population::CANARY_NS;

/// A fresh directory for a control plane of its own, `<tmp>/wave-bench-<pid>-<tag>`: what an earlier
/// run left there is removed.
pub fn cluster_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wave-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// What a run of one controller on one control plane needs: the admin client, and the controller's own
/// user (so the audit log attributes its requests), kubeconfig and log.
pub(crate) struct Session {
    pub client: Client,
    pub user: String,
    pub kubeconfig: PathBuf,
    pub log: PathBuf,
    pub audit_log: PathBuf,
}

impl Session {
    pub(crate) async fn new(cluster: &testenv::Cluster, profile: &Profile) -> Session {
        let user = format!("bench-{}", profile.name);
        Session {
            client: cluster.client().await,
            kubeconfig: cluster.user_kubeconfig(&user, Some("system:masters")),
            log: cluster.dir().join("logs").join(format!("{}.log", profile.name)),
            audit_log: cluster.dir().join("logs/audit.log"),
            user,
        }
    }

    /// The controller's requests between `from` and `to`, the readiness probe's left out.
    pub(crate) fn cost(&self, from: Timestamp, to: Timestamp) -> Counts {
        audit::count(&self.audit_log, &self.user, CANARY_NS, from, to)
    }
}

/// Copies a failed run's logs (the controller's, the control plane's, the audit log) to
/// `<out>/failed-<controller>/`, since stopping the control plane removes its directory.
pub(crate) fn keep_logs(cluster: &testenv::Cluster, out: &Path, profile: &Profile) -> PathBuf {
    let to = out.join(format!("failed-{}", profile.name));
    let _ = std::fs::create_dir_all(&to);
    if let Ok(entries) = std::fs::read_dir(cluster.dir().join("logs")) {
        for entry in entries.flatten() {
            let _ = std::fs::copy(entry.path(), to.join(entry.file_name()));
        }
    }
    to
}
