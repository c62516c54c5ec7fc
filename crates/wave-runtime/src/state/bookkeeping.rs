//! What the reconcilers and the webhook remember between reconciles, each behind its own small type.
//!
//! A refused API call for one object (a 403 from RBAC or a policy engine) is not remembered here: it is
//! an Event, a metric (`wave_reconcile_errors_total{error="…_forbidden"}`) and a log line, and it never
//! makes `/readyz` fail. Readiness is only for "wave cannot work at all": a watch or list that fails.
//!
//! - [`MissingReports`]: the last missing-config message per workload, so that each distinct missing set
//!   is reported once (one `ConfigMissing` or `SchedulingDisabled` Event), and the
//!   `wave_workloads_waiting_for_config` gauge that counts them. The webhook's reports, for workloads
//!   the watches may not show yet (or ever: a create refused after admission), are capped and expire.
//! - [`Notes`]: the last Warning of one kind published about each workload, so that each is said once,
//!   not once per reconcile: what Wave ≤ v0.6 left on it (left in place without
//!   `--legacy-wave-cleanup`, or refused), and its references to other namespaces that were denied.
//! - [`KnownHashes`]: the last config hashes each workload carried, for undo detection.
//! - [`Liveness`]: the essential tasks (the watch router, the workers, the resync) that have ended,
//!   which makes `/livez` fail: a controller whose loop died must be restarted, not left "ok".
//! - [`KeptSnapshots`]: for each workload with config history, the hash and generation whose snapshot
//!   is known to exist and be owned by its revision, so that a snapshot is checked once, not per reconcile.
//! - [`Restores`]: the restores (`undo: restore-config`) the watches have not shown whole yet; a workload
//!   using one of their objects waits rather than roll to half-restored config.
//! - [`ReloaderSightings`]: with `--reloader-compat`, the Deployments found running Stakater Reloader,
//!   so that each is announced once, and the `wave_reloader_running` gauge.
//! - [`PendingJobs`]: Jobs wave deleted to create again (a reload through Reloader's annotations) and
//!   has not created yet, with what to create: until the create lands, the Job exists only here.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use wave_core::decide::Rolled;
use wave_core::history::RestoreInFlight;
use wave_core::refs::{ConfigKey, References};
use wave_core::tracker::{ObjectVersion, Tracker};
use wave_core::workload::WorkloadRef;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a few map operations that cannot panic half-way, so a poisoned lock
    // still holds a consistent map.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many of the webhook's reports wait for their workload to appear, at most. Each is one map
/// entry of a few dozen bytes; the watch shows an admitted workload within a second or two, so only a
/// burst of gated creates larger than this in that time (or creates refused after admission) reach it.
const ADMITTED_CAP: usize = 4096;
/// How long the webhook's report waits for its workload before it may be dropped to make room: a create
/// refused after admission (a later webhook, a quota) never appears.
const ADMITTED_FOR: Duration = Duration::from_secs(300);

/// See the module docs. Messages are kept as fingerprints: only "the same as last time?" is asked.
pub struct MissingReports {
    reports: Mutex<Reports>,
    gauge: Gauge,
    dropped: Counter,
}

#[derive(Default)]
struct Reports {
    /// The reconciler's: workloads it saw waiting, until their config is complete or they go.
    reported: HashMap<WorkloadRef, u64>,
    /// The webhook's: workloads it gated at creation, until the reconciler sees them, they go, or they
    /// are old enough to be dropped for room. At most [`ADMITTED_CAP`].
    admitted: HashMap<WorkloadRef, (u64, Instant)>,
    /// The cap was hit and is still: one warning per episode.
    full: bool,
}

fn fingerprint(message: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // Fixed keys: the same message gives the same fingerprint for the life of the process.
    let mut h = std::hash::DefaultHasher::new();
    message.hash(&mut h);
    h.finish()
}

impl MissingReports {
    /// No reports; `gauge` counts the workloads the reconciler saw waiting, `dropped` the webhook's
    /// reports not kept for lack of room.
    pub fn new(gauge: Gauge, dropped: Counter) -> Self {
        Self {
            reports: Mutex::default(),
            gauge,
            dropped,
        }
    }

    /// Records that `workload` waits for the config `message` describes (the reconciler). True when
    /// nobody reported this message for it last, neither the reconciler nor the webhook: the caller
    /// reports it.
    pub fn report(&self, workload: &WorkloadRef, message: &str) -> bool {
        let at = fingerprint(message);
        let mut r = lock(&self.reports);
        let by_webhook = r.admitted.remove(workload).map(|(f, _)| f);
        if r.reported.get(workload) == Some(&at) {
            return false;
        }
        r.reported.insert(workload.clone(), at);
        self.gauge.set(r.reported.len() as i64);
        by_webhook != Some(at)
    }

    /// Records that the webhook gated `workload` at `now` with an Event saying `message`, so that the
    /// reconciler does not say it again once the workload appears. Bounded: when [`ADMITTED_CAP`] are
    /// waiting and none is older than [`ADMITTED_FOR`], it is not kept (counted, and warned once per
    /// episode); the only cost is a second Event for that workload.
    pub fn admitted(&self, workload: &WorkloadRef, message: &str, now: Instant) {
        let at = fingerprint(message);
        let mut r = lock(&self.reports);
        if !r.admitted.contains_key(workload) && r.admitted.len() >= ADMITTED_CAP {
            r.admitted
                .retain(|_, (_, since)| now.saturating_duration_since(*since) < ADMITTED_FOR);
        }
        if r.admitted.contains_key(workload) || r.admitted.len() < ADMITTED_CAP {
            r.admitted.insert(workload.clone(), (at, now));
            if r.admitted.len() < ADMITTED_CAP {
                r.full = false;
            }
            return;
        }
        self.dropped.inc();
        if !std::mem::replace(&mut r.full, true) {
            tracing::warn!(
                cap = ADMITTED_CAP,
                "the webhook gated more workloads than it can remember until they appear; each one beyond gets a second missing-config Event (wave_webhook_reports_dropped_total)"
            );
        }
    }

    /// Forgets `workload`: its config is complete, it opted out, or it was deleted.
    pub fn forget(&self, workload: &WorkloadRef) {
        let mut r = lock(&self.reports);
        r.admitted.remove(workload);
        if r.reported.remove(workload).is_some() {
            self.gauge.set(r.reported.len() as i64);
        }
    }

    /// How many of the webhook's reports are kept.
    #[cfg(test)]
    fn admitted_count(&self) -> usize {
        lock(&self.reports).admitted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wave_core::workload::WorkloadKind;

    fn id(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", name)
    }

    fn reports() -> (MissingReports, Gauge, Counter) {
        let (gauge, dropped) = (Gauge::default(), Counter::default());
        (
            MissingReports::new(gauge.clone(), dropped.clone()),
            gauge,
            dropped,
        )
    }

    #[test]
    fn each_distinct_missing_set_is_reported_once_and_counted_until_forgotten() {
        let (reports, gauge, _) = reports();
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

    #[test]
    fn what_the_webhook_reported_is_not_reported_again_by_the_reconciler() {
        let (reports, gauge, _) = reports();
        let now = Instant::now();
        reports.admitted(&id("a"), "missing configmap x", now);
        assert_eq!(gauge.get(), 0, "counted once the reconciler sees it");
        assert!(!reports.report(&id("a"), "missing configmap x"));
        assert_eq!(gauge.get(), 1);
        assert_eq!(reports.admitted_count(), 0, "handed over");
        reports.admitted(&id("b"), "missing configmap x", now);
        assert!(reports.report(&id("b"), "missing configmap y"), "another set");
        reports.admitted(&id("c"), "missing configmap x", now);
        reports.forget(&id("c"));
        assert_eq!(reports.admitted_count(), 0);
    }

    #[test]
    fn the_webhooks_reports_for_workloads_that_never_appear_are_bounded() {
        let (reports, _, dropped) = reports();
        let start = Instant::now();
        for i in 0..ADMITTED_CAP {
            reports.admitted(&id(&format!("w{i}")), "missing configmap x", start);
        }
        reports.admitted(&id("one-more"), "missing configmap x", start);
        assert_eq!(reports.admitted_count(), ADMITTED_CAP, "never beyond the cap");
        assert_eq!(dropped.get(), 1, "counted");
        assert!(
            reports.report(&id("one-more"), "missing configmap x"),
            "not kept: the reconciler reports it itself"
        );
        // A report already kept is updated in place, even at the cap.
        reports.admitted(&id("w0"), "missing configmap y", start);
        assert_eq!(dropped.get(), 1);
        // Once they are old enough, the ones that never appeared make room.
        let later = start + ADMITTED_FOR;
        reports.admitted(&id("after"), "missing configmap x", later);
        assert_eq!(reports.admitted_count(), 1, "the stale ones are gone");
        assert_eq!(dropped.get(), 1);
        assert!(!reports.report(&id("after"), "missing configmap x"));
    }
}

/// See the module docs: workload → the last note of one kind published about it. Holds only workloads
/// with something to say; forgotten once that is gone, or the workload is.
#[derive(Default)]
pub struct Notes {
    notes: Mutex<HashMap<WorkloadRef, String>>,
    /// Counts the workloads with a note, when given.
    gauge: Option<Gauge>,
}

impl Notes {
    /// Notes whose number `gauge` follows.
    pub fn counted(gauge: Gauge) -> Self {
        Self {
            notes: Mutex::default(),
            gauge: Some(gauge),
        }
    }

    /// Records `note` for `workload`. True when it is not the last one recorded: the caller publishes it.
    pub fn report(&self, workload: &WorkloadRef, note: &str) -> bool {
        let mut notes = lock(&self.notes);
        let is_new = notes.get(workload).map(String::as_str) != Some(note);
        if is_new {
            notes.insert(workload.clone(), note.to_string());
            self.count(&notes);
        }
        is_new
    }

    /// Forgets `workload`: nothing is left to say about it, or it was deleted.
    pub fn forget(&self, workload: &WorkloadRef) {
        let mut notes = lock(&self.notes);
        if notes.remove(workload).is_some() {
            self.count(&notes);
        }
    }

    fn count(&self, notes: &HashMap<WorkloadRef, String>) {
        if let Some(gauge) = &self.gauge {
            gauge.set(notes.len() as i64);
        }
    }
}

#[cfg(test)]
mod notes_tests {
    use super::*;
    use wave_core::workload::WorkloadKind;

    #[test]
    fn each_note_is_published_once_per_workload_until_forgotten_and_counted() {
        let gauge = Gauge::default();
        let reports = Notes::counted(gauge.clone());
        let web = WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "web");
        let db = WorkloadRef::new(WorkloadKind::STATEFUL_SET, "ns", "db");
        assert!(reports.report(&web, "left on configmap ns/a"));
        assert!(
            !reports.report(&web, "left on configmap ns/a"),
            "the next reconcile"
        );
        assert!(reports.report(&db, "left on configmap ns/a"), "another workload");
        assert!(
            reports.report(&web, "left on configmap ns/a, configmap ns/b"),
            "something new"
        );
        assert_eq!(gauge.get(), 2, "two workloads with a note");
        reports.forget(&web);
        assert_eq!(gauge.get(), 1);
        assert!(reports.report(&web, "left on configmap ns/a, configmap ns/b"));
    }
}

/// The last config hashes each workload carried while wave watched it (written by wave, or current and
/// correct when wave looked), oldest first: what an undo goes back to (`wave_core::undo`). Eight per
/// workload, as 8-byte fingerprints, with the config versions behind the last one
/// (`wave_core::decide::Rolled`: what the next rollout delivers); forgotten when the workload is deleted.
#[derive(Default)]
pub struct KnownHashes(Mutex<HashMap<WorkloadRef, Known>>);

#[derive(Default)]
struct Known {
    hashes: VecDeque<u64>,
    rolled: Option<Rolled>,
}

/// How many hashes are kept per workload.
const KNOWN_HASHES: usize = 8;

impl KnownHashes {
    /// Notes that `id` carries `hash` (a repeat of the last one is not noted twice), and, when known,
    /// the config versions behind it.
    pub fn note(&self, id: &WorkloadRef, hash: &str, rolled: Option<Rolled>) {
        let at = wave_core::undo::fingerprint(hash);
        let mut all = lock(&self.0);
        let known = all.entry(id.clone()).or_default();
        if known.hashes.back() != Some(&at) {
            known.hashes.retain(|h| *h != at);
            known.hashes.push_back(at);
            if known.hashes.len() > KNOWN_HASHES {
                known.hashes.pop_front();
            }
            known.rolled = None;
        }
        if rolled.is_some() {
            known.rolled = rolled;
        }
    }

    /// The fingerprints known for `id`, oldest first.
    pub fn of(&self, id: &WorkloadRef) -> Vec<u64> {
        let all = lock(&self.0);
        all.get(id)
            .map(|k| k.hashes.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The config versions behind `id`'s last known hash, if noted.
    pub fn rolled(&self, id: &WorkloadRef) -> Option<Rolled> {
        lock(&self.0).get(id).and_then(|k| k.rolled.clone())
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

    /// `id`'s restore wrote `key`, which is now at `version`: the wait is counted from the last write
    /// (a slow write must not end it before the watches could show the rest).
    pub fn written(&self, id: &WorkloadRef, key: &ConfigKey, version: ObjectVersion, now: Instant) {
        if let Some((restore, until)) = lock(&self.0).get_mut(id) {
            restore.written(key, version);
            *until = now + RESTORE_SEEN_WITHIN;
        }
    }

    /// `id`'s restore stopped part-way and wrote back what it had restored (`back`: each object at the
    /// version its write-back produced; `left`: restored objects it could not write back). Workloads
    /// using those objects wait until the watches show them written back, so none rolls to the
    /// half-restored mix; for one left restored they wait the whole bound.
    pub fn rolled_back(
        &self,
        id: &WorkloadRef,
        back: &[(ConfigKey, ObjectVersion)],
        left: &[ConfigKey],
        now: Instant,
    ) {
        let mut all = lock(&self.0);
        if back.is_empty() && left.is_empty() {
            all.remove(id);
            return;
        }
        let keys = back.iter().map(|(key, _)| key).chain(left).cloned();
        let mut restore = RestoreInFlight::new(keys);
        for (key, version) in back {
            restore.written(key, version.clone());
        }
        all.insert(id.clone(), (restore, now + RESTORE_SEEN_WITHIN));
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

/// Restores that failed in a row, per workload. After [`RESTORE_ATTEMPTS`] an undo pins instead: each
/// failed attempt writes its objects twice (the restore, the write-back), which must not go on without
/// end (nor make them look like flapping config).
#[derive(Default)]
pub struct RestoreFailures(Mutex<HashMap<WorkloadRef, u32>>);

/// How many restores of one undo are tried before it pins instead.
pub const RESTORE_ATTEMPTS: u32 = 4;

impl RestoreFailures {
    /// Whether `id`'s restores failed [`RESTORE_ATTEMPTS`] times in a row.
    pub fn exhausted(&self, id: &WorkloadRef) -> bool {
        lock(&self.0).get(id).is_some_and(|n| *n >= RESTORE_ATTEMPTS)
    }

    /// `id`'s restore failed once more.
    pub fn failed(&self, id: &WorkloadRef) {
        *lock(&self.0).entry(id.clone()).or_default() += 1;
    }

    /// `id`'s restore ended (done, refused, or the workload went): the count starts again.
    pub fn forget(&self, id: &WorkloadRef) {
        lock(&self.0).remove(id);
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
    fn a_restore_holds_its_objects_users_until_seen_rolled_back_or_waited_for_long_enough() {
        let id = WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "web");
        let now = Instant::now();
        let restores = Restores::default();
        assert!(!restores.pending(&uses_app(), &watched("1"), now), "no restore");

        restores.begin(&id, [app()], now);
        restores.written(&id, &app(), version("2"), now);
        assert!(restores.pending(&uses_app(), &watched("1"), now));
        assert!(!restores.pending(&uses_app(), &watched("2"), now), "seen");
        assert!(
            !restores.pending(&uses_app(), &watched("1"), now),
            "forgotten once seen"
        );

        restores.begin(&id, [app()], now);
        restores.rolled_back(&id, &[], &[], now);
        assert!(
            !restores.pending(&uses_app(), &watched("1"), now),
            "stopped before any write: nothing to wait for"
        );

        restores.begin(&id, [app()], now);
        restores.written(&id, &app(), version("2"), now);
        restores.rolled_back(&id, &[(app(), version("3"))], &[], now);
        assert!(
            restores.pending(&uses_app(), &watched("2"), now),
            "the half-restored version is never planned from"
        );
        assert!(
            !restores.pending(&uses_app(), &watched("3"), now),
            "written back and seen"
        );

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

/// A Job deleted to be created again, not created yet.
#[derive(Clone)]
pub struct PendingJob {
    /// The deleted Job, as wave last saw it (for Events about it).
    pub job: Arc<wave_core::workload::Workload>,
    /// The deleted Job's uid: a Job of the same name with this uid is the old one, still terminating.
    pub old_uid: String,
    /// The Job to create.
    pub manifest: serde_json::Value,
    /// The reload it carries: said (Event, alert, metrics) once the Job is created.
    pub decision: wave_core::reloader::Decision,
}

/// The Jobs wave deletes to create again and has not created yet (`controller::reloader`), held from
/// just before the delete. In memory only: wave holds the only copy between the delete and the create,
/// so a create that fails is tried again, with backoff, until it lands, a Job of that name appears by
/// other hands, or its namespace goes. One entry per Job being re-created: a Job leaves as soon as it is
/// created.
#[derive(Default)]
pub struct PendingJobs(Mutex<HashMap<WorkloadRef, PendingJob>>);

impl PendingJobs {
    /// Keeps `pending` for `id` until [`PendingJobs::done`].
    pub fn hold(&self, id: &WorkloadRef, pending: PendingJob) {
        lock(&self.0).insert(id.clone(), pending);
    }

    /// What is to be created for `id`, if anything.
    pub fn get(&self, id: &WorkloadRef) -> Option<PendingJob> {
        lock(&self.0).get(id).cloned()
    }

    /// `id`'s Job was created (or one of that name appeared).
    pub fn done(&self, id: &WorkloadRef) {
        lock(&self.0).remove(id);
    }
}
