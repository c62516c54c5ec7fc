//! Leader election through a `coordination.k8s.io` Lease (kube-lease-manager). All replicas watch and
//! keep their view warm; only the leader writes. Losing the lease after holding it ends the process, so
//! a replica that was partitioned away can never write next to the new leader.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;

use wave_core::names;

use crate::controller::context::Context;
use crate::error::RunError;

/// Where the lease lives and how long it lasts.
pub struct LeaseConfig {
    /// Lease name (`--leader-election-id`).
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// Lease duration in seconds.
    pub duration_seconds: u64,
}

/// The namespace for the lease: the flag, else `POD_NAMESPACE`, else the in-cluster namespace, else
/// `default`.
pub fn lease_namespace(flag: Option<&str>) -> String {
    if let Some(ns) = flag.filter(|s| !s.is_empty()) {
        return ns.to_string();
    }
    if let Ok(ns) = std::env::var("POD_NAMESPACE")
        && !ns.is_empty()
    {
        return ns;
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// This replica's identity: `POD_NAME`, else the host name, with the PID to tell local processes apart.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "wave".into());
    format!("{host}_{}", std::process::id())
}

/// The field manager of this replica's Lease writes. It must differ per identity: with one shared
/// manager, server-side apply lets two replicas both take a free lease (kube-lease-manager's own default
/// is `kube-lease-manager-<identity>` for this reason).
pub fn field_manager(identity: &str) -> String {
    format!("{}-lease-{identity}", names::FIELD_MANAGER)
}

/// How long to wait before asking again after a lease error while not leading.
const RETRY: Duration = Duration::from_secs(1);

/// Campaigns for the lease and keeps `ctx.leader` current. Returns only when the lease is lost after
/// being held, when a renewal fails while leading, or when the lease cannot be managed at all: the
/// caller then exits, so a replica that may have lost the lease never writes next to the new leader.
pub async fn campaign(client: Client, config: LeaseConfig, ctx: Arc<Context>) -> RunError {
    let lease_err = |source| RunError::Lease {
        namespace: config.namespace.clone(),
        name: config.name.clone(),
        source: Box::new(source),
    };
    // NOTE: the grace is how long before expiry the holder renews; a third of the duration leaves room
    // for two renewals to fail before another replica may take over.
    let grace = (config.duration_seconds / 3).max(1);
    let manager = match LeaseManagerBuilder::new(client, &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration_seconds)
        .with_grace(grace)
        .with_field_manager(field_manager(&config.identity))
        .build()
        .await
    {
        Ok(m) => m,
        Err(e) => return lease_err(e),
    };
    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "campaigning for leadership");
    let step_down = || {
        ctx.leader.store(false, Ordering::Release);
        ctx.metrics.leader.set(0);
    };
    // NOTE: `LeaseManager::watch` logs renewal errors and keeps reporting "leader" while it retries
    // (kube-lease-manager `manager.rs`, `watch`), so a leader the apiserver keeps refusing would go on
    // writing. Driving `changed` directly lets an error while leading end the leadership at once.
    let mut held = false;
    loop {
        match manager.changed().await {
            Ok(true) if !held => {
                held = true;
                ctx.leader.store(true, Ordering::Release);
                ctx.metrics.leader.set(1);
                let all = ctx.tracker().all_to_reconcile();
                tracing::info!(
                    workloads = all.len(),
                    "became the leader; checking every workload"
                );
                for id in all {
                    ctx.queue.add(id, None);
                }
            }
            Ok(false) if held => {
                step_down();
                return RunError::LeaseLost {
                    namespace: config.namespace,
                    name: config.name,
                };
            }
            Ok(_) => {}
            Err(e) if held => {
                step_down();
                tracing::error!(error = %crate::api::error_chain(&e), "renewing the lease failed; stepping down");
                return lease_err(e);
            }
            Err(e) => {
                tracing::warn!(error = %crate::api::error_chain(&e), "lease error; retrying");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_writes_the_lease_under_its_own_field_manager() {
        let (a, b) = (field_manager("wave-0_1"), field_manager("wave-1_1"));
        assert_ne!(a, b);
        assert_eq!(a, "wave-lease-wave-0_1");
        assert!(a.len() <= 128, "the apiserver's limit for a field manager");
    }
}
