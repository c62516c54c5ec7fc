//! What the reconcilers and the webhook remember between reconciles, each behind its own small type.
//!
//! A refused API call for one object (a 403 from RBAC or a policy engine) is not remembered here: it is
//! an Event, a metric (`wave_reconcile_errors_total{error="…_forbidden"}`) and a log line, and it never
//! makes `/readyz` fail. Readiness is only for "wave cannot work at all": a watch or list that fails.
//!
//! - [`MissingReports`]: the last missing-config message per workload, so that each distinct missing set
//!   is reported once (one `ConfigMissing` or `SchedulingDisabled` Event), and the
//!   `wave_workloads_waiting_for_config` gauge that counts them.
//! - [`KnownHashes`]: the last config hashes each workload carried, for undo detection.
//! - [`Liveness`]: the essential tasks (the watch router, the workers, the resync) that have ended,
//!   which makes `/livez` fail: a controller whose loop died must be restarted, not left "ok".
//! - [`KeptSnapshots`]: for each workload with config history, the hash and generation whose snapshot
//!   is known to exist and be owned by its revision, so that a snapshot is checked once, not per reconcile.
//! - [`Restores`]: the restores (`undo: restore-config`) the watches have not shown whole yet; a workload
//!   using one of their objects waits rather than roll to half-restored config.
//! - [`ReloaderSightings`]: with `--reloader-compat`, the Deployments found running Stakater Reloader,
//!   so that each is announced once, and the `wave_reloader_running` gauge.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use wave_core::history::RestoreInFlight;
use wave_core::refs::{ConfigKey, References};
use wave_core::tracker::{ObjectVersion, Tracker};
use wave_core::workload::WorkloadRef;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a few map operations that cannot panic half-way, so a poisoned lock
    // still holds a consistent map.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// See the module docs.
pub struct MissingReports {
    reported: Mutex<HashMap<WorkloadRef, String>>,
    gauge: Gauge,
}

impl MissingReports {
    /// No reports; `gauge` counts the workloads with one.
    pub fn new(gauge: Gauge) -> Self {
        Self {
            reported: Mutex::default(),
            gauge,
        }
    }

    /// Records that `workload` waits for the config `message` describes. True when this message was not
    /// the last one reported for it: the caller reports it.
    pub fn report(&self, workload: &WorkloadRef, message: &str) -> bool {
        let mut reported = lock(&self.reported);
        let is_new = reported.get(workload).map(String::as_str) != Some(message);
        if is_new {
            reported.insert(workload.clone(), message.to_string());
            self.gauge.set(reported.len() as i64);
        }
        is_new
    }

    /// Forgets `workload`: its config is complete, it opted out, or it was deleted.
    pub fn forget(&self, workload: &WorkloadRef) {
        let mut reported = lock(&self.reported);
        if reported.remove(workload).is_some() {
            self.gauge.set(reported.len() as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wave_core::workload::WorkloadKind;

    fn id(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", name)
    }

    #[test]
    fn each_distinct_missing_set_is_reported_once_and_counted_until_forgotten() {
        let gauge = Gauge::default();
        let reports = MissingReports::new(gauge.clone());
        assert!(reports.report(&id("a"), "missing configmap x"));
        assert!(
            !reports.report(&id("a"), "missing configmap x"),
            "the same set again"
        );
        assert!(reports.report(&id("a"), "missing configmap y"), "a different set");
        assert!(reports.report(&id("b"), "missing configmap x"));
        assert_eq!(gauge.get(), 2);
        reports.forget(&id("a"));
        assert_eq!(gauge.get(), 1);
        assert!(
            reports.report(&id("a"), "missing configmap y"),
            "reported again after forgetting"
        );
    }
}

/// The last config hashes each workload carried while wave watched it (written by wave, or current and
/// correct when wave looked), oldest first: what an undo goes back to (`wave_core::undo`). Eight per
/// workload, as 8-byte fingerprints; forgotten when the workload is deleted.
#[derive(Default)]
pub struct KnownHashes(Mutex<HashMap<WorkloadRef, VecDeque<u64>>>);

/// How many hashes are kept per workload.
const KNOWN_HASHES: usize = 8;

impl KnownHashes {
    /// Notes that `id` carries `hash` (a repeat of the last one is not noted twice).
    pub fn note(&self, id: &WorkloadRef, hash: &str) {
        let at = wave_core::undo::fingerprint(hash);
        let mut all = lock(&self.0);
        let known = all.entry(id.clone()).or_default();
        if known.back() != Some(&at) {
            known.retain(|h| *h != at);
            known.push_back(at);
            if known.len() > KNOWN_HASHES {
                known.pop_front();
            }
        }
    }

    /// The fingerprints known for `id`, oldest first.
    pub fn of(&self, id: &WorkloadRef) -> Vec<u64> {
        let all = lock(&self.0);
        all.get(id)
            .map(|k| k.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets `id`.
    pub fn forget(&self, id: &WorkloadRef) {
        lock(&self.0).remove(id);
    }
}

/// See the module docs: workload → (fingerprint of the hash, generation) last kept.
#[derive(Default)]
pub struct KeptSnapshots(Mutex<HashMap<WorkloadRef, (u64, i64)>>);

impl KeptSnapshots {
    /// Whether `id`'s snapshot of `hash` was kept at `generation` (a new generation may have a new
    /// revision for the same hash, which must own it too).
    pub fn kept(&self, id: &WorkloadRef, hash: &str, generation: i64) -> bool {
        lock(&self.0).get(id) == Some(&(wave_core::undo::fingerprint(hash), generation))
    }

    /// Notes that `id`'s snapshot of `hash` is kept (or failed for good) at `generation`.
    pub fn note(&self, id: &WorkloadRef, hash: &str, generation: i64) {
        lock(&self.0).insert(id.clone(), (wave_core::undo::fingerprint(hash), generation));
    }

    /// Forgets `id`.
    pub fn forget(&self, id: &WorkloadRef) {
        lock(&self.0).remove(id);
    }
}

/// How long after a restore began workloads using its objects wait for the watches to show it whole.
/// The watches show a write within a second or two; this bounds the wait when they never show the
/// restore's version because someone wrote the object again first (`RestoreInFlight`).
const RESTORE_SEEN_WITHIN: Duration = Duration::from_secs(15);

/// See the module docs: the restoring workload → its restore, and when the wait for it ends.
#[derive(Default)]
pub struct Restores(Mutex<HashMap<WorkloadRef, (RestoreInFlight, Instant)>>);

impl Restores {
    /// `id` is about to restore `keys`.
    pub fn begin(&self, id: &WorkloadRef, keys: impl IntoIterator<Item = ConfigKey>, now: Instant) {
        let restore = RestoreInFlight::new(keys);
        lock(&self.0).insert(id.clone(), (restore, now + RESTORE_SEEN_WITHIN));
    }

    /// `id`'s restore wrote `key`, which is now at `version`.
    pub fn written(&self, id: &WorkloadRef, key: &ConfigKey, version: ObjectVersion) {
        if let Some((restore, _)) = lock(&self.0).get_mut(id) {
            restore.written(key, version);
        }
    }

    /// `id`'s restore stopped part-way: nothing more will be written, so nobody waits for it.
    pub fn abandon(&self, id: &WorkloadRef) {
        lock(&self.0).remove(id);
    }

    /// Whether a workload using `refs` must wait: a restore of one of its objects is not yet shown whole
    /// by `tracker`. Restores shown whole, or waited for long enough, are forgotten.
    pub fn pending(&self, refs: &References, tracker: &Tracker, now: Instant) -> bool {
        let mut all = lock(&self.0);
        if all.is_empty() {
            return false;
        }
        all.retain(|_, (restore, until)| now < *until && !restore.seen(tracker));
        all.values().any(|(restore, _)| restore.touches(refs))
    }
}

#[cfg(test)]
mod restores_tests {
    use std::collections::BTreeMap;

    use wave_core::refs::ConfigKind;
    use wave_core::tracker::{Change, ConfigMeta, Event, Resource, Scope};
    use wave_core::workload::WorkloadKind;

    use super::*;

    fn uses_app() -> References {
        let template = serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "c", "envFrom": [{"configMapRef": {"name": "app"}}]}]}}))
        .unwrap();
        wave_core::refs::discover("ns", &BTreeMap::new(), &template)
    }

    fn app() -> ConfigKey {
        ConfigKey::new(ConfigKind::ConfigMap, "ns", "app")
    }

    fn version(rv: &str) -> ObjectVersion {
        ObjectVersion {
            uid: "u".into(),
            resource_version: rv.into(),
        }
    }

    fn watched(rv: &str) -> Tracker {
        let mut tracker = Tracker::new(&[WorkloadKind::DEPLOYMENT], None);
        let scope = Scope {
            resource: Resource::Config(ConfigKind::ConfigMap),
            namespace: None,
        };
        tracker.apply(Change::Config(
            scope,
            Event::Apply(ConfigMeta {
                key: app(),
                version: version(rv),
                owners: Vec::new(),
                ignored: false,
                reloader_match: false,
                labels: BTreeMap::new(),
            }),
        ));
        tracker
    }

    #[test]
    fn a_restore_holds_its_objects_users_until_seen_abandoned_or_waited_for_long_enough() {
        let id = WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "web");
        let now = Instant::now();
        let restores = Restores::default();
        assert!(!restores.pending(&uses_app(), &watched("1"), now), "no restore");

        restores.begin(&id, [app()], now);
        restores.written(&id, &app(), version("2"));
        assert!(restores.pending(&uses_app(), &watched("1"), now));
        assert!(!restores.pending(&uses_app(), &watched("2"), now), "seen");
        assert!(
            !restores.pending(&uses_app(), &watched("1"), now),
            "forgotten once seen"
        );

        restores.begin(&id, [app()], now);
        restores.abandon(&id);
        assert!(!restores.pending(&uses_app(), &watched("1"), now), "abandoned");

        restores.begin(&id, [app()], now);
        assert!(restores.pending(&uses_app(), &watched("1"), now));
        let later = now + RESTORE_SEEN_WITHIN;
        assert!(
            !restores.pending(&uses_app(), &watched("3"), later),
            "waited long enough"
        );
    }
}

/// See the module docs. Clones share the record.
#[derive(Clone, Default)]
pub struct Liveness(Arc<Mutex<Vec<String>>>);

impl Liveness {
    /// Spawns `task`, which should run for the life of the process; if it ends (returns or panics),
    /// that is recorded and [`check`](Self::check) fails from then on.
    pub fn spawn_essential<F>(&self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = tokio::spawn(task);
        let stopped = self.0.clone();
        tokio::spawn(async move {
            let how = match handle.await {
                Ok(()) => "returned".to_string(),
                Err(e) if e.is_panic() => "panicked".to_string(),
                Err(e) => e.to_string(),
            };
            tracing::error!(
                task = name,
                how,
                "an essential task ended; /livez now fails so that wave is restarted"
            );
            lock(&stopped).push(format!("{name} {how}"));
        });
    }

    /// `Err` naming the essential tasks that ended.
    pub fn check(&self) -> Result<(), String> {
        let stopped = lock(&self.0);
        if stopped.is_empty() {
            Ok(())
        } else {
            Err(format!("essential tasks ended: {}", stopped.join(", ")))
        }
    }
}

#[cfg(test)]
mod liveness_tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_or_returned_essential_task_makes_liveness_fail_and_a_running_one_does_not() {
        let live = Liveness::default();
        live.spawn_essential("forever", std::future::pending());
        tokio::task::yield_now().await;
        assert_eq!(live.check(), Ok(()));
        live.spawn_essential("worker", async { panic!("a bug") });
        live.spawn_essential("router", async {});
        for _ in 0..100 {
            if live
                .check()
                .is_err_and(|why| why.contains("worker panicked") && why.contains("router returned"))
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("liveness did not fail: {:?}", live.check());
    }
}

/// See the module docs.
pub struct ReloaderSightings {
    seen: Mutex<BTreeSet<WorkloadRef>>,
    gauge: Gauge,
    /// With compatibility off: how many workloads carried only Reloader's annotations when last told.
    reloader_only: Mutex<usize>,
}

impl ReloaderSightings {
    /// None seen; `gauge` counts those running now.
    pub fn new(gauge: Gauge) -> Self {
        Self {
            seen: Mutex::default(),
            gauge,
            reloader_only: Mutex::default(),
        }
    }

    /// Records that `count` workloads carry only Reloader's annotations; true when that is news (the
    /// caller says so once, not at every resync).
    pub fn note_reloader_only(&self, count: usize) -> bool {
        std::mem::replace(&mut *lock(&self.reloader_only), count) != count
    }

    /// Records that exactly `running` run Reloader now, and returns those not seen before (to announce).
    pub fn update(&self, running: Vec<WorkloadRef>) -> Vec<WorkloadRef> {
        let mut seen = lock(&self.seen);
        self.gauge.set(running.len() as i64);
        let new = running.iter().filter(|id| !seen.contains(*id)).cloned().collect();
        *seen = running.into_iter().collect();
        new
    }
}
