//! Leader election through a `coordination.k8s.io` Lease (kube-lease-manager). All replicas watch and
//! keep their view warm; only the leader writes. Losing the lease after holding it ends the process, so
//! a replica that was partitioned away can never write next to the new leader.
//!
//! The leader flag alone is not enough: a replica frozen past its lease (SIGSTOP, a stalled node, a long
//! GC pause of the host) wakes up still believing it leads, and its workers run before its lease loop
//! notices. So each write first asks [`LeaseCheck::confirm`]: the lease, as last read, is held by this
//! replica and does not expire within its margin ([`write_margin`]). Reads are cached until then, so this
//! costs about one GET per renewal period, not one per write. A leader that cannot confirm (its renewal is
//! late, or the read failed) writes nothing and retries shortly; it never drops the work.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;

use prometheus_client::metrics::gauge::Gauge;
use wave_core::names;

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
    /// wave's own Deployment (`--own-deployment`): the Lease is given its owner reference, so an
    /// uninstall deletes it (`crate::owner`).
    pub owner: Option<wave_core::workload::WorkloadRef>,
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

/// Whether this replica leads: set by [`campaign`], read before every write (and `wave_leader`).
pub struct Leadership {
    leading: AtomicBool,
    gauge: Gauge,
}

impl Leadership {
    /// Leading from the start (no leader election), or not until [`campaign`] wins the lease.
    pub fn new(leading: bool, gauge: Gauge) -> Self {
        gauge.set(i64::from(leading));
        Self {
            leading: AtomicBool::new(leading),
            gauge,
        }
    }

    /// Whether this replica leads.
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    fn set(&self, leading: bool) {
        self.leading.store(leading, Ordering::Release);
        self.gauge.set(i64::from(leading));
    }
}

/// Campaigns for the lease and keeps `leadership` current; `elected` runs each time this replica
/// becomes the leader (the controller checks every workload then). Returns only when the lease is lost
/// after being held, when a renewal fails while leading, or when the lease cannot be managed at all:
/// the caller then exits, so a replica that may have lost the lease never writes next to the new
/// leader.
pub async fn campaign(
    client: Client,
    config: LeaseConfig,
    leadership: &Leadership,
    elected: impl Fn(),
) -> RunError {
    let lease_err = |source| RunError::Lease {
        namespace: config.namespace.clone(),
        name: config.name.clone(),
        source: Box::new(source),
    };
    // NOTE: the grace is how long before expiry the holder renews; a third of the duration leaves room
    // for two renewals to fail before another replica may take over.
    let grace = (config.duration_seconds / 3).max(1);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let owner = match &config.owner {
        Some(id) => crate::owner::owner_in(&client, id, &config.namespace).await,
        None => None,
    };
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
    // The manager has created the Lease if it was missing.
    if let Some(owner) = &owner
        && let Err(e) = owner.adopt(&leases, &config.name).await
    {
        tracing::warn!(error = %crate::api::describe(&e), "cannot make wave's Deployment the owner of its Lease; an uninstall will leave the Lease behind");
    }
    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "campaigning for leadership");
    let step_down = || leadership.set(false);
    // NOTE: `LeaseManager::watch` logs renewal errors and keeps reporting "leader" while it retries
    // (kube-lease-manager `manager.rs`, `watch`), so a leader the apiserver keeps refusing would go on
    // writing. Driving `changed` directly lets an error while leading end the leadership at once.
    let mut held = false;
    loop {
        match manager.changed().await {
            Ok(true) if !held => {
                held = true;
                leadership.set(true);
                elected();
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

/// A write is allowed only while the lease stays valid for at least this long: the write's own round
/// trip must end before another replica may take over. An eighth of the lease, at most 2 s: always less
/// than the third of the lease before expiry at which the holder renews (see `campaign`), so a leader
/// whose renewals are on time is never refused.
pub fn write_margin(duration_seconds: u64) -> SignedDuration {
    let eighth = SignedDuration::from_millis((duration_seconds.min(3600) * 1000 / 8) as i64);
    eighth.min(SignedDuration::from_secs(2))
}

/// Confirms, before each write, that this replica still holds the lease.
pub struct LeaseCheck {
    api: Api<Lease>,
    name: String,
    identity: String,
    margin: SignedDuration,
    /// Until when the lease, as last read, is held by this replica.
    valid_until: Mutex<Option<Timestamp>>,
}

impl LeaseCheck {
    /// A check of the lease `config` describes.
    pub fn new(client: Client, config: &LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            name: config.name.clone(),
            identity: config.identity.clone(),
            margin: write_margin(config.duration_seconds),
            valid_until: Mutex::new(None),
        }
    }

    /// Whether this replica holds the lease for at least its margin more, reading it again when the
    /// last reading does not say so.
    // NOTE: the renew time is written by this replica's own clock (kube-lease-manager stamps
    // `renewTime` with `now()`), so comparing it with the local clock involves no clock skew.
    pub async fn confirm(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let cached = *self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        if cached.is_some_and(|until| holds_at(until, now, self.margin)) {
            return Ok(true);
        }
        let lease = self.api.get(&self.name).await?;
        let until = held_until(&lease, &self.identity);
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
        Ok(until.is_some_and(|until| holds_at(until, Timestamp::now(), self.margin)))
    }
}

fn holds_at(until: Timestamp, now: Timestamp, margin: SignedDuration) -> bool {
    now.checked_add(margin).is_ok_and(|t| t < until)
}

/// When `lease` expires, if `identity` holds it.
pub fn held_until(lease: &Lease, identity: &str) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renewed = spec.renew_time.as_ref()?.0;
    let seconds = spec.lease_duration_seconds?;
    renewed
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: Timestamp, seconds: i32) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "wave"},
            "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": seconds}
        }))
        .unwrap()
    }

    #[test]
    fn a_lease_held_by_this_replica_is_valid_until_renewal_plus_duration() {
        let t = Timestamp::from_second(1_000_000).unwrap();
        let until = held_until(&lease("me", t, 15), "me").unwrap();
        assert_eq!(until, Timestamp::from_second(1_000_015).unwrap());
        let margin = write_margin(15);
        assert!(holds_at(
            until,
            Timestamp::from_second(1_000_013).unwrap(),
            margin
        ));
        assert!(
            !holds_at(until, Timestamp::from_second(1_000_014).unwrap(), margin),
            "inside the margin a write could land after expiry"
        );
    }

    #[test]
    fn the_write_margin_is_shorter_than_the_renewal_grace_so_a_punctual_leader_is_never_refused() {
        for seconds in [2, 4, 15, 60, 3600, u64::MAX] {
            let grace = SignedDuration::from_secs((seconds.min(3600) / 3).max(1) as i64);
            let margin = write_margin(seconds);
            assert!(
                margin < grace,
                "{seconds} s lease: margin {margin:?}, grace {grace:?}"
            );
            assert!(margin > SignedDuration::ZERO && margin <= SignedDuration::from_secs(2));
        }
    }

    #[test]
    fn a_lease_held_by_another_replica_or_never_renewed_is_not_held() {
        let t = Timestamp::from_second(1_000_000).unwrap();
        assert_eq!(held_until(&lease("other", t, 15), "me"), None);
        let blank: Lease = serde_json::from_value(serde_json::json!({"metadata": {"name": "wave"}})).unwrap();
        assert_eq!(held_until(&blank, "me"), None);
    }

    #[test]
    fn every_replica_writes_the_lease_under_its_own_field_manager() {
        let (a, b) = (field_manager("wave-0_1"), field_manager("wave-1_1"));
        assert_ne!(a, b);
        assert_eq!(a, "wave-lease-wave-0_1");
        assert!(a.len() <= 128, "the apiserver's limit for a field manager");
    }
}
