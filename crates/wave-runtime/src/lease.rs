//! Leader election through a `coordination.k8s.io` Lease (kube-lease-manager). All replicas watch and
//! keep their view warm; only the leader writes. Losing the lease after holding it ends the process, so
//! a replica that was partitioned away can never write next to the new leader.

use std::sync::Arc;
use std::sync::atomic::Ordering;

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

/// Campaigns for the lease and keeps `ctx.leader` current. Returns only when the lease is lost after
/// being held (or cannot be managed at all): the caller then exits.
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
        .with_field_manager(names::FIELD_MANAGER)
        .build()
        .await
    {
        Ok(m) => m,
        Err(e) => return lease_err(e),
    };
    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "campaigning for leadership");
    let (mut leading, task) = manager.watch().await;
    let mut held = false;
    loop {
        let now = *leading.borrow_and_update();
        if now && !held {
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
        } else if !now && held {
            ctx.leader.store(false, Ordering::Release);
            ctx.metrics.leader.set(0);
            return RunError::LeaseLost {
                namespace: config.namespace,
                name: config.name,
            };
        }
        if leading.changed().await.is_err() {
            // The lease task ended: it only does so on an error it could not recover from.
            ctx.leader.store(false, Ordering::Release);
            return match task.await {
                Ok(Err(e)) => lease_err(e),
                _ => RunError::LeaseLost {
                    namespace: config.namespace,
                    name: config.name,
                },
            };
        }
    }
}
