//! Pacing (`--max-concurrent-rollouts`) and health-gated propagation (`docs/behaviour.md`, "Pacing
//! rollouts" and "Halting a bad config").
//!
//! ```text
//! workloads (tracker) ─► census: which wave rollouts are in progress (their own status, `rollout`),
//!                                which failed, and so which config versions are halted
//! a rollout that may roll (`decide`: not halted, flapping or coalesced)
//!   ─► Pacer::decide(census) ─► Go | Queued (first come, by priority)
//! a slot frees (status) ─► Pacer::due ─► the next waiting workloads are woken
//! ```
//!
//! What must survive a restart lives in the cluster, not in memory: every write wave makes while
//! pacing carries a *rollout marker* on the workload's metadata (the hash it rolled, when, and the
//! version of each config object that went into it). From the markers and the workloads' status a
//! restarted wave rebuilds which rollouts are in progress and which config versions failed. Memory
//! only holds the order of the waiting workloads (rebuilt, in a new order, by the startup reconcile)
//! and the rollouts just admitted that the watch has not shown yet.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::hash::{Fetched, Hashing};
use super::refs::{ConfigKey, ConfigKind, References};
use super::rollout::{self, State};
use super::workload::{Workload, WorkloadKind, WorkloadRef};
use crate::duration;
use crate::names;

/// `--rollout-deadline` default: how long a StatefulSet or DaemonSet rollout may take before it counts
/// as failed (Deployments use their own `progressDeadlineSeconds`).
pub const DEFAULT_ROLLOUT_DEADLINE: Duration = Duration::from_secs(600);

/// Stands in for the digest of a referenced object that does not exist.
const ABSENT: &str = "absent";

/// One version of one config object: `ConfigMap/ns/name` and a short digest of its data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// `Kind/namespace/name`.
    pub object: String,
    /// Short digest of its data (keyed like the config hash).
    pub digest: String,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} version {}", self.object, self.digest)
    }
}

impl Version {
    /// The config object, read back from its name.
    pub fn key(&self) -> Option<ConfigKey> {
        let mut parts = self.object.splitn(3, '/');
        let kind = match parts.next()? {
            "ConfigMap" => ConfigKind::ConfigMap,
            "Secret" => ConfigKind::Secret,
            _ => return None,
        };
        Some(ConfigKey::new(kind, parts.next()?, parts.next()?))
    }
}

/// The name of a config object in a marker: `ConfigMap/ns/name`.
pub fn object_name(key: &ConfigKey) -> String {
    format!("{}/{}/{}", key.kind.kind(), key.namespace, key.name)
}

/// The version of every object `refs` names, from its fetched content.
pub fn versions(refs: &References, fetched: &Fetched, hashing: &Hashing) -> BTreeMap<String, String> {
    refs.keys()
        .into_iter()
        .map(|key| {
            let digest = fetched
                .get(&key)
                .map_or_else(|| ABSENT.to_string(), |c| c.digest(hashing));
            (object_name(&key), digest)
        })
        .collect()
}

/// The rollout marker, `wave.pusher.com/rollout` on the workload's metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The config hash this rollout wrote.
    pub hash: String,
    /// When wave wrote it (RFC 3339): the start of the rollout deadline.
    pub at: String,
    /// The version of each config object in the hash.
    pub config: BTreeMap<String, String>,
    /// The objects whose version differs from the previous rollout's: what this rollout delivers.
    pub changed: BTreeSet<String>,
    /// The workload's `metadata.generation` after this write. Only a failure of that generation is
    /// wave's own to record: a later spec change (`kubectl set image`, a scale) makes the rollout in
    /// progress someone else's too. Absent in markers written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

/// The record of a failed wave rollout, `wave.pusher.com/rollout-failed` on the workload's metadata:
/// written once wave sees the rollout fail, so that the halt outlives whatever happens to the workload
/// next (an undo, a fix by hand, a status that flickers), until a new change or `wave resume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The hash of the rollout that failed.
    pub hash: String,
    /// Why it failed.
    pub why: String,
    /// The config versions it delivered: the halted ones.
    pub delivered: BTreeMap<String, String>,
}

impl Failure {
    /// The record on a workload, if it has a readable one.
    pub fn read(workload: &Workload) -> Option<Self> {
        serde_json::from_str(workload.annotations.get(names::ROLLOUT_FAILED)?).ok()
    }

    /// The annotation value.
    pub fn render(&self) -> String {
        serde_json::to_string(self).expect("a failure record always serialises")
    }

    fn versions(&self) -> impl Iterator<Item = Version> + '_ {
        self.delivered.iter().map(|(object, digest)| Version {
            object: object.clone(),
            digest: digest.clone(),
        })
    }
}

impl Marker {
    /// The marker on a workload, if it has a readable one (an unreadable one is treated as absent:
    /// the workload then counts as never paced).
    pub fn read(workload: &Workload) -> Option<Self> {
        serde_json::from_str(workload.annotations.get(names::ROLLOUT)?).ok()
    }

    /// The marker for a rollout to `hash` with `versions`, after `previous`, written to a workload now
    /// at `generation` (the write changes its template, so it makes the next one).
    pub fn next(
        hash: &str,
        versions: BTreeMap<String, String>,
        previous: Option<&Marker>,
        now: Timestamp,
        generation: i64,
    ) -> Self {
        let changed = triggers(previous, &versions)
            .into_iter()
            .map(|v| v.object)
            .collect();
        Self {
            hash: hash.to_string(),
            at: now.to_string(),
            config: versions,
            changed,
            generation: Some(generation + 1),
        }
    }

    /// Whether the rollout in progress is still exactly the one wave's write started (no spec
    /// change since): only then is its failure wave's to record.
    fn is_own_generation(&self, w: &Workload) -> bool {
        self.generation.is_none_or(|g| g == w.generation)
    }

    /// Whether this marker describes `w`'s current rollout: it names the hash the template carries.
    pub fn is_current(&self, w: &Workload) -> bool {
        w.current_hash() == Some(self.hash.as_str())
    }

    /// The config versions this rollout delivers: the objects in `changed`, at their version.
    pub fn delivers(&self) -> Vec<Version> {
        self.changed
            .iter()
            .map(|object| Version {
                object: object.clone(),
                digest: self.config.get(object).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// The annotation value.
    pub fn render(&self) -> String {
        serde_json::to_string(self).expect("a marker always serialises")
    }

    fn started(&self) -> Option<Timestamp> {
        self.at.parse().ok()
    }
}

/// The config versions a rollout to `versions` would deliver: those that differ from `previous`
/// (all of them when there is no previous marker).
fn triggers(previous: Option<&Marker>, versions: &BTreeMap<String, String>) -> Vec<Version> {
    versions
        .iter()
        .filter(|(object, digest)| previous.is_none_or(|p| p.config.get(*object) != Some(*digest)))
        .map(|(object, digest)| Version {
            object: object.clone(),
            digest: digest.clone(),
        })
        .collect()
}

/// The workload's rollout deadline: `wave.pusher.com/rollout-deadline`, else `default`. The second value
/// says why a bad annotation was ignored.
pub fn deadline(workload: &Workload, default: Duration) -> (Duration, Option<String>) {
    duration::annotation(&workload.annotations, names::ROLLOUT_DEADLINE, default)
}

/// The workload's place in the queue: `wave.pusher.com/rollout-priority` (an integer, higher first;
/// default 0). The second value says why a bad annotation was ignored.
pub fn priority(workload: &Workload) -> (i64, Option<String>) {
    match workload.annotations.get(names::ROLLOUT_PRIORITY) {
        None => (0, None),
        Some(v) => match v.trim().parse() {
            Ok(p) => (p, None),
            Err(_) => (
                0,
                Some(format!(
                    "{}: {v:?} is not an integer; using 0",
                    names::ROLLOUT_PRIORITY
                )),
            ),
        },
    }
}

/// A config version that failed: wave rolls it into no further workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    /// The version.
    pub version: Version,
    /// The workload whose rollout of it failed (the first one, in name order).
    pub failed: WorkloadRef,
    /// Why that rollout failed.
    pub why: String,
}

impl Halt {
    /// The sentence Events, logs and `wave explain` use.
    pub fn describe(&self) -> String {
        format!("{} failed on {} ({})", self.version, self.failed, self.why)
    }
}

/// What the cluster says about wave's paced rollouts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Workloads whose wave rollout is in progress.
    pub rolling: BTreeSet<WorkloadRef>,
    /// Workloads whose wave rollout failed, and why.
    pub failed: BTreeMap<WorkloadRef, String>,
    /// Halted config versions.
    pub halts: BTreeMap<Version, Halt>,
    /// The earliest time a rolling StatefulSet or DaemonSet passes its deadline.
    pub next_deadline: Option<Timestamp>,
    /// Failed workloads whose marker does not record the failure yet (`unrecorded_failure`).
    pub unrecorded: BTreeSet<WorkloadRef>,
    /// Versions whose failure `wave resume` released.
    pub released: BTreeSet<Version>,
}

impl Census {
    /// The halt, if any, that a rollout delivering `triggers` runs into.
    pub fn halt_for<'a>(&'a self, triggers: &[Version]) -> Option<&'a Halt> {
        triggers.iter().find_map(|v| self.halts.get(v))
    }
}

/// The state of `w`'s current rollout as its own status tells it, timed from its rollout marker when
/// the marker names its current hash (`wave status`; the census reads the same rule below).
pub fn rollout_state(w: &Workload, default_deadline: Duration, now: Timestamp) -> State {
    let started = Marker::read(w)
        .filter(|m| m.is_current(w))
        .and_then(|m| m.started());
    let (limit, _) = deadline(w, default_deadline);
    rollout::state(w.id.kind, w.generation, &w.progress, started, limit, now)
}

/// Reads the census from `workloads`: each one whose marker names its current hash is a wave rollout,
/// and its own status says whether that rollout is in progress, failed or complete. (`wave resume` and
/// tests read it whole; `wave run`'s [`Pacer`] keeps the same census up to date one workload at a time:
/// [`Pacer::observe`].)
pub fn census<'a>(
    workloads: impl IntoIterator<Item = &'a Workload>,
    default_deadline: Duration,
    now: Timestamp,
) -> Census {
    let mut c = Census::default();
    for w in workloads {
        let share = Share::of(w, default_deadline, now);
        if share.rolling {
            c.rolling.insert(w.id.clone());
        }
        if let Some(end) = share.deadline {
            c.next_deadline = Some(c.next_deadline.map_or(end, |d| d.min(end)));
        }
        if share.unrecorded {
            c.unrecorded.insert(w.id.clone());
        }
        if let Some(why) = share.failed {
            c.failed.insert(w.id.clone(), why);
        }
        c.released.extend(share.released);
        for (version, why) in share.halts {
            c.halts.entry(version.clone()).or_insert_with(|| Halt {
                version,
                failed: w.id.clone(),
                why,
            });
        }
    }
    c
}

/// One workload's part in the census: what [`census`] adds for it. The whole rule is here, so the
/// census read at once and the one kept up to date ([`Tally`]) cannot disagree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Share {
    /// Its wave rollout is in progress.
    rolling: bool,
    /// A rolling StatefulSet or DaemonSet: when it passes its deadline (it then fails with no event to
    /// say so: the only part of a share that time alone changes).
    deadline: Option<Timestamp>,
    /// Its wave rollout failed (now, or as recorded): why.
    failed: Option<String>,
    /// Its current rollout failed and the failure is not recorded on it yet.
    unrecorded: bool,
    /// The versions its failures halt, with why (the first failure naming a version tells).
    halts: BTreeMap<Version, String>,
    /// The versions whose failure on it `wave resume` released.
    released: BTreeSet<Version>,
}

impl Share {
    fn of(w: &Workload, default_deadline: Duration, now: Timestamp) -> Self {
        let mut share = Self::default();
        // A failure wave recorded stays one, whatever the workload's status, template or marker says
        // now: a halt ends only with a new change or `wave resume`.
        let recorded = Failure::read(w);
        if let Some(f) = &recorded {
            let released = w.annotations.get(names::HALT_RELEASED) == Some(&f.hash);
            share.add_failure(w, f.versions(), &f.why, released);
        }
        if let Some(record) = crate::inplace::Record::read(w) {
            // An in-place restart leaves the workload's status alone: the record says how far it got,
            // and its failure is recorded above like a rollout's.
            // Only a restart wave goes on with holds a slot: not one of a workload opted out or
            // paused, nor a record forged on a workload wave leaves alone; and only within its
            // deadline (`Record::is_live`: say, a restart stalled on a config change that is blocked).
            let (limit, _) = deadline(w, default_deadline);
            share.rolling = record.is_live(limit, now) && w.is_opted_in() && !w.progress.paused;
            return share;
        }
        let Some(marker) = Marker::read(w).filter(|m| m.is_current(w)) else {
            return share;
        };
        let (limit, _) = deadline(w, default_deadline);
        let started = marker.started();
        match rollout::state(w.id.kind, w.generation, &w.progress, started, limit, now) {
            State::Complete | State::Paused => {}
            State::Progressing => {
                share.rolling = true;
                if w.id.kind != WorkloadKind::DEPLOYMENT {
                    share.deadline = started.and_then(|s| s.checked_add(limit).ok());
                }
            }
            State::Failed(why) => {
                share.unrecorded =
                    recorded.as_ref().is_none_or(|f| f.hash != marker.hash) && marker.is_own_generation(w);
                let released = w.annotations.get(names::HALT_RELEASED) == Some(&marker.hash);
                share.add_failure(w, marker.delivers().into_iter(), &why, released);
            }
        }
        share
    }

    /// `w`'s rollout delivering `versions` failed: it goes first in line, and, unless released, those
    /// versions are halted.
    fn add_failure(
        &mut self,
        w: &Workload,
        versions: impl Iterator<Item = Version>,
        why: &str,
        released: bool,
    ) {
        // A marker, record or release is metadata its workload's owner can write, so a failure halts,
        // and a release releases, only versions of config in the workload's own namespace: nobody
        // halts or releases another namespace's rollouts (`docs/security.md`).
        let own = |v: &Version| v.key().is_some_and(|k| k.namespace == w.id.namespace);
        let versions = versions.filter(own);
        if released {
            self.released.extend(versions);
        } else {
            for version in versions {
                self.halts.entry(version).or_insert_with(|| why.to_string());
            }
        }
        self.failed = Some(why.to_string());
    }

    fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// The census kept up to date one workload at a time: each workload's [`Share`] and their sums, so a
/// change costs the size of one workload's share, not a read of every workload. It equals [`census`]
/// of the same workloads read in name order (the test `the_tally_equals_the_census_read_whole`).
#[derive(Debug, Default)]
struct Tally {
    /// Only the workloads with a part in the census: most have none.
    shares: HashMap<WorkloadRef, Share>,
    rolling: BTreeSet<WorkloadRef>,
    failed: BTreeMap<WorkloadRef, String>,
    unrecorded: BTreeSet<WorkloadRef>,
    /// Each halted version with every workload whose failure halts it (the first in name order is the
    /// one named), so that one of them going away leaves the others' halt.
    halts: BTreeMap<Version, BTreeMap<WorkloadRef, String>>,
    /// Each released version, with how many workloads release it.
    released: BTreeMap<Version, usize>,
    /// Rolling StatefulSets and DaemonSets, by when they pass their deadline.
    deadlines: BTreeSet<(Timestamp, WorkloadRef)>,
}

impl Tally {
    /// The tally of `workloads`, read whole.
    fn of<'a>(
        workloads: impl IntoIterator<Item = &'a Workload>,
        default_deadline: Duration,
        now: Timestamp,
    ) -> Self {
        let mut tally = Self::default();
        for w in workloads {
            tally.set(&w.id, Some(Share::of(w, default_deadline, now)));
        }
        tally
    }

    /// `id`'s part is now `share` (`None`: it is gone).
    fn set(&mut self, id: &WorkloadRef, share: Option<Share>) {
        let share = share.filter(|s| !s.is_empty());
        if self.shares.get(id) == share.as_ref() {
            return;
        }
        if let Some(old) = self.shares.remove(id) {
            self.subtract(id, &old);
        }
        if let Some(new) = share {
            self.add(id, &new);
            self.shares.insert(id.clone(), new);
        }
    }

    fn add(&mut self, id: &WorkloadRef, s: &Share) {
        if s.rolling {
            self.rolling.insert(id.clone());
        }
        if let Some(end) = s.deadline {
            self.deadlines.insert((end, id.clone()));
        }
        if s.unrecorded {
            self.unrecorded.insert(id.clone());
        }
        if let Some(why) = &s.failed {
            self.failed.insert(id.clone(), why.clone());
        }
        for (version, why) in &s.halts {
            self.halts
                .entry(version.clone())
                .or_default()
                .insert(id.clone(), why.clone());
        }
        for version in &s.released {
            *self.released.entry(version.clone()).or_default() += 1;
        }
    }

    fn subtract(&mut self, id: &WorkloadRef, s: &Share) {
        self.rolling.remove(id);
        if let Some(end) = s.deadline {
            self.deadlines.remove(&(end, id.clone()));
        }
        self.unrecorded.remove(id);
        self.failed.remove(id);
        for version in s.halts.keys() {
            if let Some(by) = self.halts.get_mut(version) {
                by.remove(id);
                if by.is_empty() {
                    self.halts.remove(version);
                }
            }
        }
        for version in &s.released {
            if let Some(n) = self.released.get_mut(version) {
                *n -= 1;
                if *n == 0 {
                    self.released.remove(version);
                }
            }
        }
    }

    /// Reads again the share of each rollout whose deadline passed by `now` (time alone turns it into a
    /// failure); one whose workload `lookup` no longer finds leaves.
    fn expire<'a>(
        &mut self,
        lookup: impl Fn(&WorkloadRef) -> Option<&'a Workload>,
        default_deadline: Duration,
        now: Timestamp,
    ) {
        let due: Vec<WorkloadRef> = self
            .deadlines
            .iter()
            .take_while(|(end, _)| *end <= now)
            .map(|(_, id)| id.clone())
            .collect();
        for id in due {
            let share = lookup(&id).map(|w| Share::of(w, default_deadline, now));
            self.set(&id, share);
        }
    }

    /// The census as it stands: the size of what it holds (rollouts in progress, failures, halts),
    /// whatever the number of workloads.
    fn census(&self) -> Census {
        let halts = self
            .halts
            .iter()
            .filter_map(|(version, by)| {
                let (failed, why) = by.first_key_value()?;
                let halt = Halt {
                    version: version.clone(),
                    failed: failed.clone(),
                    why: why.clone(),
                };
                Some((version.clone(), halt))
            })
            .collect();
        Census {
            rolling: self.rolling.clone(),
            failed: self.failed.clone(),
            halts,
            next_deadline: self.deadlines.first().map(|(end, _)| *end),
            unrecorded: self.unrecorded.clone(),
            released: self.released.keys().cloned().collect(),
        }
    }
}

/// The failure of `w`'s current wave rollout that is not recorded yet, and the patch that records it
/// ([`Failure`]; guarded by its resourceVersion).
pub fn unrecorded_failure(
    w: &Workload,
    default_deadline: Duration,
    now: Timestamp,
) -> Option<serde_json::Value> {
    let marker = Marker::read(w).filter(|m| m.is_current(w) && m.is_own_generation(w))?;
    if Failure::read(w).is_some_and(|f| f.hash == marker.hash) {
        return None;
    }
    let State::Failed(why) = rollout_state(w, default_deadline, now) else {
        return None;
    };
    let delivered = marker
        .delivers()
        .into_iter()
        .map(|v| (v.object, v.digest))
        .collect();
    let record = Failure {
        hash: marker.hash,
        why,
        delivered,
    };
    Some(serde_json::json!({"metadata": {
        "resourceVersion": w.resource_version,
        "annotations": {(names::ROLLOUT_FAILED): record.render()},
    }}))
}

/// What the pacer says about one rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Roll now: the workload holds a slot until its rollout completes or fails.
    Go,
    /// Wait: the workload is `position`th (from 1) of `waiting`, behind `rolling` rollouts in progress.
    Queued {
        /// Whether it just joined the line (so it is told once).
        first: bool,
        /// Place in line, from 1.
        position: usize,
        /// How many wait.
        waiting: usize,
        /// Rollouts in progress.
        rolling: usize,
    },
}

/// A place in line: higher priority first, then first come (the arrival number).
type Place = (Reverse<i64>, u64);

/// The waiting line, kept in order as workloads join and leave, so that a decision reads the head of
/// the line, or counts its place, without sorting the whole line. A workload whose last rollout
/// failed goes before all others; those are few, and sorted when asked.
#[derive(Debug, Default)]
struct Line {
    places: HashMap<WorkloadRef, Place>,
    order: BTreeMap<Place, WorkloadRef>,
}

impl Line {
    fn len(&self) -> usize {
        self.places.len()
    }

    fn ids(&self) -> impl Iterator<Item = &WorkloadRef> {
        self.places.keys()
    }

    /// `id` joins the line as arrival `seq` (or, already in it, keeps its arrival and takes
    /// `priority`); whether it just joined.
    fn join(&mut self, id: &WorkloadRef, priority: i64, seq: u64) -> bool {
        let place = match self.places.get(id) {
            Some(&(Reverse(p), _)) if p == priority => return false,
            Some(&(old, seq)) => {
                self.order.remove(&(old, seq));
                (Reverse(priority), seq)
            }
            None => (Reverse(priority), seq),
        };
        let first = self.places.insert(id.clone(), place).is_none();
        self.order.insert(place, id.clone());
        first
    }

    fn leave(&mut self, id: &WorkloadRef) {
        if let Some(place) = self.places.remove(id) {
            self.order.remove(&place);
        }
    }

    /// The waiting workloads whose last rollout failed, in order: they go first.
    fn failed_first<'a>(&'a self, failed: &BTreeMap<WorkloadRef, String>) -> Vec<(Place, &'a WorkloadRef)> {
        let mut first: Vec<(Place, &WorkloadRef)> = if failed.len() <= self.places.len() {
            failed
                .keys()
                .filter_map(|id| self.places.get_key_value(id))
                .map(|(id, place)| (*place, id))
                .collect()
        } else {
            self.places
                .iter()
                .filter(|(id, _)| failed.contains_key(*id))
                .map(|(id, place)| (*place, id))
                .collect()
        };
        first.sort_unstable();
        first
    }

    /// The first `n` of the line.
    fn head(&self, failed: &BTreeMap<WorkloadRef, String>, n: usize) -> Vec<WorkloadRef> {
        let mut head: Vec<WorkloadRef> = self
            .failed_first(failed)
            .into_iter()
            .take(n)
            .map(|(_, id)| id.clone())
            .collect();
        let rest = n - head.len();
        head.extend(
            self.order
                .values()
                .filter(|id| !failed.contains_key(*id))
                .take(rest)
                .cloned(),
        );
        head
    }

    /// `id`'s place in line, from 0.
    fn position(&self, id: &WorkloadRef, failed: &BTreeMap<WorkloadRef, String>) -> Option<usize> {
        let place = *self.places.get(id)?;
        let first = self.failed_first(failed);
        if failed.contains_key(id) {
            return first.iter().position(|(p, _)| *p == place);
        }
        let failed_before = first.iter().filter(|(p, _)| *p < place).count();
        Some(first.len() + self.before(place) - failed_before)
    }

    /// How many places come before `place` (which is in the line), counted from whichever end of the
    /// line is nearer: a newcomer at the back, or the head that is about to roll, costs little.
    fn before(&self, place: Place) -> usize {
        let (mut ahead, mut behind) = (self.order.range(..place), self.order.range(place..));
        let mut n = 0;
        loop {
            if ahead.next().is_none() {
                return n;
            }
            if behind.next().is_none() {
                return self.order.len() - n;
            }
            n += 1;
        }
    }
}

/// The in-memory half of pacing: the waiting line, the rollouts admitted but not yet seen, and the
/// census kept up to date from each workload that changes ([`Pacer::observe`]).
#[derive(Debug)]
pub struct Pacer {
    limit: usize,
    line: Line,
    /// Admitted rollouts the watch has not shown yet: the workload's resourceVersion when admitted.
    admitted: HashMap<WorkloadRef, String>,
    halted: BTreeMap<WorkloadRef, Version>,
    /// The census of the workloads observed, one share per workload.
    tally: Tally,
    /// The halts as last seen (by the last census: `halts()`).
    halts: BTreeMap<Version, Halt>,
    /// Halts the cluster no longer shows, though neither released nor superseded: the failed workload
    /// was deleted, or undone (`kubectl rollout undo` puts back the old ReplicaSet's annotations, and
    /// with them an old marker, and removes the failure record). Memory keeps them until the object
    /// changes (a rollout of another version of it is admitted); a restart forgets them
    /// (`docs/behaviour.md`, "Halting a bad config").
    remembered: BTreeMap<Version, Halt>,
    /// Halts a newer version superseded since the last census: not to be remembered.
    superseded: BTreeSet<Version>,
    unrecorded: BTreeSet<WorkloadRef>,
    next_seq: u64,
}

/// How the halts changed since the pacer last looked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HaltChanges {
    /// Versions newly halted.
    pub new: Vec<Halt>,
    /// Whether a halt ended (by a new version or by hand): the workloads it held are to look again.
    pub ended: bool,
    /// Workloads newly failed whose failure is to be recorded on their marker: to look again once.
    pub to_record: Vec<WorkloadRef>,
}

impl Pacer {
    /// A pacer allowing `limit` rollouts at once; 0 turns pacing off.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            line: Line::default(),
            admitted: HashMap::new(),
            halted: BTreeMap::new(),
            tally: Tally::default(),
            halts: BTreeMap::new(),
            remembered: BTreeMap::new(),
            superseded: BTreeSet::new(),
            unrecorded: BTreeSet::new(),
            next_seq: 0,
        }
    }

    /// Whether pacing is on.
    pub fn is_on(&self) -> bool {
        self.limit > 0
    }

    /// The census of `workloads`, read whole (they replace whatever was observed before), and what
    /// changed in the halts: [`Pacer::look`].
    pub fn census<'a>(
        &mut self,
        workloads: impl IntoIterator<Item = &'a Workload>,
        lookup: impl Fn(&WorkloadRef) -> Option<&'a Workload>,
        default_deadline: Duration,
        now: Timestamp,
    ) -> (Census, HaltChanges) {
        self.tally = Tally::of(workloads, default_deadline, now);
        self.look(lookup, default_deadline, now)
    }

    /// `id` changed in something the census reads (its status, hash, generation or annotations), or
    /// appeared (`workload` is its view), or is gone (`None`): only its share of the census is read.
    pub fn observe(
        &mut self,
        id: &WorkloadRef,
        workload: Option<&Workload>,
        default_deadline: Duration,
        now: Timestamp,
    ) {
        self.tally
            .set(id, workload.map(|w| Share::of(w, default_deadline, now)));
    }

    /// The census of the workloads observed, as of `now` (a rolling StatefulSet or DaemonSet past its
    /// deadline is read again through `lookup`: it failed), with the rollouts admitted but not yet
    /// seen counted as in progress (an admitted one is seen once any newer version of its workload is:
    /// wave's write, or whatever came first; from then on its marker tells), and what changed in the
    /// halts since the last call. It costs what the census holds, not the number of workloads.
    pub fn look<'a>(
        &mut self,
        lookup: impl Fn(&WorkloadRef) -> Option<&'a Workload>,
        default_deadline: Duration,
        now: Timestamp,
    ) -> (Census, HaltChanges) {
        self.tally.expire(&lookup, default_deadline, now);
        let mut c = self.tally.census();
        self.admitted
            .retain(|id, at| lookup(id).is_some_and(|w| &w.resource_version == at));
        c.rolling.extend(self.admitted.keys().cloned());
        let superseded = std::mem::take(&mut self.superseded);
        for (version, halt) in &self.halts {
            if !c.halts.contains_key(version)
                && !c.released.contains(version)
                && !superseded.contains(version)
            {
                self.remembered.insert(version.clone(), halt.clone());
            }
        }
        self.remembered
            .retain(|version, _| !c.halts.contains_key(version) && !c.released.contains(version));
        for (version, halt) in &self.remembered {
            c.halts.insert(version.clone(), halt.clone());
        }
        let to_record = c
            .unrecorded
            .iter()
            .filter(|id| !self.unrecorded.contains(*id))
            .cloned()
            .collect();
        self.unrecorded = c.unrecorded.clone();
        let changes = HaltChanges {
            new: c
                .halts
                .values()
                .filter(|h| !self.halts.contains_key(&h.version))
                .cloned()
                .collect(),
            ended: self.halts.keys().any(|v| !c.halts.contains_key(v)),
            to_record,
        };
        self.halts = c.halts.clone();
        (c, changes)
    }

    /// The halts as of the last census. The watch router takes one on every change of a workload's
    /// status, hash or annotations, so this is current without a census per decision.
    pub fn halts(&self) -> &BTreeMap<Version, Halt> {
        &self.halts
    }

    /// Notes that a halt holds `id` back (`decide::Hold::Halted`); whether that is new for this halt
    /// (so it is told once). It leaves the line meanwhile.
    pub fn hold(&mut self, id: &WorkloadRef, halt: &Halt) -> bool {
        self.line.leave(id);
        self.admitted.remove(id);
        self.halted.insert(id.clone(), halt.version.clone()).as_ref() != Some(&halt.version)
    }

    /// Decides one rollout of `id` to `hash` that may roll (`decide::Verdict::Roll`): a slot now, or
    /// a place in line. `Go` admits it at once (the slot is taken before the write, so concurrent
    /// decisions never over-admit).
    pub fn decide(&mut self, workload: &Workload, priority: i64, census: &Census) -> Admission {
        let id = &workload.id;
        let at = &workload.resource_version;
        self.halted.remove(id);
        // Admitted, its write not seen yet: a newer change replaces that write in its slot. A workload
        // the census shows rolling waits in line like any other: the rollout it counts for may be
        // someone else's (a `helm upgrade` whose template kept the hash), and letting every such
        // workload through would roll them all at once.
        if self.admitted.contains_key(id) {
            self.line.leave(id);
            self.admitted.insert(id.clone(), at.clone());
            return Admission::Go;
        }
        let first = self.line.join(id, priority, self.next_seq);
        if first {
            self.next_seq += 1;
        }
        let rolling = census.rolling.len();
        let free = self.limit.saturating_sub(rolling);
        let position = self.line.position(id, &census.failed).unwrap_or(0);
        if position < free {
            self.line.leave(id);
            self.admitted.insert(id.clone(), at.clone());
            Admission::Go
        } else {
            Admission::Queued {
                first,
                position: position + 1,
                waiting: self.line.len(),
                rolling,
            }
        }
    }

    /// Whether `id` could roll now without a place in line: it is rolling already, or a slot is free
    /// beyond the workloads waiting (the webhook's question: it cannot queue).
    pub fn has_room(&self, id: &WorkloadRef, census: &Census) -> bool {
        self.admitted.contains_key(id) || census.rolling.len() + self.line.len() < self.limit
    }

    /// The waiting workloads in the order they roll: a workload whose last rollout failed first (a
    /// new version is its fix), then higher priority, then first come.
    #[cfg(test)]
    fn line(&self, census: &Census) -> Vec<WorkloadRef> {
        self.line.head(&census.failed, self.line.len())
    }

    /// The waiting workloads that may roll now: the head of the line, as many as slots are free.
    pub fn due(&self, census: &Census) -> Vec<WorkloadRef> {
        let free = self.limit.saturating_sub(census.rolling.len());
        self.line.head(&census.failed, free.min(self.line.len()))
    }

    /// The workloads waiting in the line.
    pub fn waiting(&self) -> impl Iterator<Item = &WorkloadRef> {
        self.line.ids()
    }

    /// The workloads a halt holds back.
    pub fn halted(&self) -> impl Iterator<Item = &WorkloadRef> {
        self.halted.keys()
    }

    /// How many wait, and how many are held by halts.
    pub fn counts(&self) -> (usize, usize) {
        (self.line.len(), self.halted.len())
    }

    /// Forgets `id` in the line and among the held (it has nothing to roll, or it is gone).
    pub fn forget(&mut self, id: &WorkloadRef) {
        self.line.leave(id);
        self.halted.remove(id);
    }

    /// `id` was deleted: it leaves the line and the census (a halt its failure caused stays: see
    /// `remembered`).
    pub fn deleted(&mut self, id: &WorkloadRef) {
        self.forget(id);
        self.admitted.remove(id);
        self.tally.set(id, None);
    }

    /// A rollout delivering `delivers` was admitted: remembered halts of other versions of those
    /// objects end (the object changed since).
    pub fn superseded(&mut self, delivers: &[Version]) {
        let newer = |halted: &Version| {
            delivers
                .iter()
                .any(|v| v.object == halted.object && v.digest != halted.digest)
        };
        self.remembered.retain(|halted, _| !newer(halted));
        let gone: Vec<Version> = self.halts.keys().filter(|h| newer(h)).cloned().collect();
        self.superseded.extend(gone);
    }

    /// Gives back the slot taken for a write that was not made; whether there was one.
    pub fn cancel(&mut self, id: &WorkloadRef) -> bool {
        self.admitted.remove(id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Progress;
    use crate::workload::testing::deployment;
    use proptest::prelude::*;
    use serde_json::json;

    const NOW: &str = "2026-11-23T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn v(object: &str, digest: &str) -> Version {
        Version {
            object: object.into(),
            digest: digest.into(),
        }
    }

    /// A Deployment rolled by wave to `hash`, delivering `changed` at `digest`, in `status`.
    fn rolled(name: &str, hash: &str, digest: &str, status: serde_json::Value) -> Workload {
        let mut w = deployment("ns", name, &[], json!({"containers": []}));
        let versions = BTreeMap::from([("ConfigMap/ns/cm".to_string(), digest.to_string())]);
        let marker = Marker::next(hash, versions, None, now(), 0);
        w.annotations.insert(names::ROLLOUT.into(), marker.render());
        w.template.edit(|t| {
            t.metadata =
                Some(serde_json::from_value(json!({"annotations": {(names::CONFIG_HASH): hash}})).unwrap());
        });
        w.progress = Progress::read(
            WorkloadKind::DEPLOYMENT,
            &json!({"spec": {"replicas": 1}, "status": status}),
        );
        w
    }

    fn rolling() -> serde_json::Value {
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1})
    }

    fn failed() -> serde_json::Value {
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]})
    }

    fn done() -> serde_json::Value {
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1})
    }

    fn wl(name: &str) -> Workload {
        deployment("ns", name, &[], json!({"containers": []}))
    }

    fn id(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", name)
    }

    #[test]
    fn a_marker_names_what_changed_since_the_previous_rollout() {
        let first = BTreeMap::from([
            ("ConfigMap/ns/a".to_string(), "1".to_string()),
            ("Secret/ns/b".to_string(), "1".to_string()),
        ]);
        let m1 = Marker::next("h1", first.clone(), None, now(), 0);
        assert_eq!(
            m1.changed.len(),
            2,
            "without a previous marker everything is delivered"
        );
        let mut second = first;
        second.insert("Secret/ns/b".into(), "2".into());
        let m2 = Marker::next("h2", second.clone(), Some(&m1), now(), 0);
        assert_eq!(m2.changed, BTreeSet::from(["Secret/ns/b".to_string()]));
        assert_eq!(triggers(Some(&m2), &second), vec![]);
        assert_eq!(m2.delivers(), vec![v("Secret/ns/b", "2")]);
        let mut w = deployment("ns", "w", &[], json!({"containers": []}));
        w.annotations.insert(names::ROLLOUT.into(), m2.render());
        assert_eq!(Marker::read(&w), Some(m2));
        w.annotations.insert(names::ROLLOUT.into(), "{not json".into());
        assert_eq!(Marker::read(&w), None, "an unreadable marker counts as none");
    }

    #[test]
    fn the_census_counts_rolling_and_failed_rollouts_and_halts_the_versions_that_failed() {
        let ws = [
            rolled("a", "h", "bad", rolling()),
            rolled("b", "h", "bad", failed()),
            rolled("c", "h", "bad", done()),
        ];
        let c = census(&ws, DEFAULT_ROLLOUT_DEADLINE, now());
        assert_eq!(c.rolling, BTreeSet::from([id("a")]));
        assert_eq!(c.failed.keys().collect::<Vec<_>>(), [&id("b")]);
        let halt = &c.halts[&v("ConfigMap/ns/cm", "bad")];
        assert_eq!(halt.failed, id("b"));
        assert!(halt.describe().contains("ProgressDeadlineExceeded"));
        assert!(c.halt_for(&[v("ConfigMap/ns/cm", "good")]).is_none());
        assert_eq!(
            halt.version.key(),
            Some(ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm")),
            "the object is read back from the marker"
        );
    }

    #[test]
    fn an_in_place_restart_holds_a_slot_only_while_wave_goes_on_with_it() {
        let record = crate::inplace::Record::new("h2", now(), BTreeMap::new(), None);
        let restarting = |annotations: &[(&str, &str)], paused: bool| {
            let mut w = deployment("ns", "w", annotations, json!({"containers": []}));
            w.annotations.insert(names::IN_PLACE.into(), record.render());
            w.progress.paused = paused;
            let c = census([&w], Duration::from_secs(600), now());
            c.rolling.contains(&id("w"))
        };
        assert!(restarting(&[], false), "opted in and restarting");
        assert!(!restarting(&[], true), "paused: wave asks no pod");
        let opted_out = [(names::UPDATE_ON_CONFIG_CHANGE, "false")];
        assert!(
            !restarting(&opted_out, false),
            "a record on a workload wave leaves alone"
        );
        let mut done = deployment("ns", "w", &[], json!({"containers": []}));
        let finished = crate::inplace::Record {
            done: true,
            ..record.clone()
        };
        done.annotations.insert(names::IN_PLACE.into(), finished.render());
        assert!(
            census([&done], Duration::from_secs(600), now())
                .rolling
                .is_empty()
        );
    }

    #[test]
    fn an_in_place_restart_past_its_deadline_or_dated_in_the_future_holds_no_slot() {
        let holds = |at: Timestamp| {
            let record = crate::inplace::Record::new("h2", at, BTreeMap::new(), None);
            let mut w = deployment("ns", "w", &[], json!({"containers": []}));
            w.annotations.insert(names::IN_PLACE.into(), record.render());
            census([&w], Duration::from_secs(600), now())
                .rolling
                .contains(&id("w"))
        };
        let ago = |secs: i64| now().checked_sub(jiff::SignedDuration::from_secs(secs)).unwrap();
        assert!(holds(ago(599)), "within the deadline");
        assert!(!holds(ago(601)), "stalled past the deadline");
        assert!(holds(ago(-1)), "a second ahead: within the clocks' margin");
        assert!(!holds(ago(-3600)), "forged an hour ahead");
    }

    #[test]
    fn a_failed_rollout_halts_no_config_version_of_another_namespace_whatever_its_marker_says() {
        // A tenant can write any marker on their own workload and make its rollout fail: naming the
        // victim's ConfigMap in it must not halt the victim's rollouts.
        let mut forged = rolled("a", "h", "bad", failed());
        let versions = BTreeMap::from([
            ("ConfigMap/victim/cfg".to_string(), "guessed".to_string()),
            ("ConfigMap/ns/cm".to_string(), "bad".to_string()),
        ]);
        let marker = Marker::next("h", versions, None, now(), 0);
        forged.annotations.insert(names::ROLLOUT.into(), marker.render());
        let c = census([&forged], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.halt_for(&[v("ConfigMap/victim/cfg", "guessed")]).is_none());
        assert!(
            c.halt_for(&[v("ConfigMap/ns/cm", "bad")]).is_some(),
            "its own config still halts"
        );
    }

    #[test]
    fn a_marker_that_is_not_the_current_hash_or_a_released_halt_counts_for_nothing() {
        let mut stale = rolled("a", "h", "bad", failed());
        stale.template.edit(|t| t.metadata = None);
        let mut released = rolled("b", "h", "bad", failed());
        released
            .annotations
            .insert(names::HALT_RELEASED.into(), "h".into());
        let c = census([&stale, &released], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.halts.is_empty());
        assert!(!c.failed.contains_key(&id("a")));
        assert!(
            c.failed.contains_key(&id("b")),
            "released, but its own rollout still failed"
        );
    }

    #[test]
    fn at_most_the_limit_rolls_and_the_rest_wait_first_come_first_served() {
        let mut p = Pacer::new(2);
        let c = Census::default();
        assert_eq!(p.decide(&wl("a"), 0, &c), Admission::Go);
        let (c, _) = p.census([], |_| None::<&Workload>, DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(
            c.rolling.is_empty(),
            "an admitted workload that is gone holds no slot"
        );
        let mut c = Census::default();
        for name in ["a", "b"] {
            assert_eq!(p.decide(&wl(name), 0, &c), Admission::Go);
            c.rolling.insert(id(name));
        }
        assert_eq!(
            p.decide(&wl("c"), 0, &c),
            Admission::Queued {
                first: true,
                position: 1,
                waiting: 1,
                rolling: 2
            }
        );
        assert_eq!(
            p.decide(&wl("d"), 0, &c),
            Admission::Queued {
                first: true,
                position: 2,
                waiting: 2,
                rolling: 2
            }
        );
        assert_eq!(
            p.decide(&wl("c"), 0, &c),
            Admission::Queued {
                first: false,
                position: 1,
                waiting: 2,
                rolling: 2
            },
            "asking again keeps the place"
        );
        c.rolling.remove(&id("a"));
        assert_eq!(p.due(&c), [id("c")]);
        assert_eq!(
            p.decide(&wl("d"), 0, &c),
            Admission::Queued {
                first: false,
                position: 2,
                waiting: 2,
                rolling: 1
            },
            "the free slot is c's"
        );
        assert_eq!(p.decide(&wl("c"), 0, &c), Admission::Go);
        assert_eq!(
            p.decide(&wl("b"), 0, &c),
            Admission::Go,
            "a rolling workload keeps its slot"
        );
    }

    #[test]
    fn priority_goes_before_arrival_and_a_failed_workload_goes_first() {
        let mut p = Pacer::new(1);
        let mut c = Census::default();
        c.rolling.insert(id("busy"));
        for (name, prio) in [("low", 0), ("high", 5), ("broken", 0)] {
            assert!(matches!(p.decide(&wl(name), prio, &c), Admission::Queued { .. }));
        }
        assert_eq!(p.line(&c), [id("high"), id("low"), id("broken")]);
        c.failed.insert(id("broken"), "ProgressDeadlineExceeded".into());
        assert_eq!(p.line(&c)[0], id("broken"));
    }

    #[test]
    fn a_held_workload_is_told_once_per_halt_and_the_end_of_a_halt_is_reported() {
        let mut p = Pacer::new(5);
        let ws = [rolled("failed", "h", "bad", failed())];
        let lookup = |i: &WorkloadRef| ws.iter().find(|w| &w.id == i);
        let (c, changes) = p.census(&ws, lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        assert_eq!(changes.new.len(), 1);
        let halt = c.halt_for(&[v("ConfigMap/ns/cm", "bad")]).unwrap().clone();
        assert_eq!(halt.failed, id("failed"));
        assert!(p.hold(&id("other"), &halt));
        assert!(!p.hold(&id("other"), &halt), "told once");
        assert_eq!(p.counts(), (0, 1));
        assert_eq!(p.decide(&wl("other"), 0, &c), Admission::Go);
        assert_eq!(p.counts(), (0, 0), "a workload that may roll is no longer held");
        let (_, changes) = p.census(&ws, lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        assert_eq!(changes, HaltChanges::default(), "a halt is reported once");
        let mut released = ws[0].clone();
        released
            .annotations
            .insert(names::HALT_RELEASED.into(), "h".into());
        let (c, changes) = p.census([&released], lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(changes.ended && c.halts.is_empty(), "released by wave resume");
    }

    #[test]
    fn a_recorded_failure_halts_after_an_undo_or_a_fix_by_hand_until_resumed() {
        let w = rolled("failed", "h", "bad", failed());
        let patch = unrecorded_failure(&w, DEFAULT_ROLLOUT_DEADLINE, now()).expect("a failure to record");
        let mut recorded = w.clone();
        let record = patch["metadata"]["annotations"][names::ROLLOUT_FAILED]
            .as_str()
            .unwrap();
        recorded
            .annotations
            .insert(names::ROLLOUT_FAILED.into(), record.into());
        assert_eq!(
            unrecorded_failure(&recorded, DEFAULT_ROLLOUT_DEADLINE, now()),
            None,
            "recorded once"
        );
        let bad = [v("ConfigMap/ns/cm", "bad")];
        let mut undone = recorded.clone();
        undone.template.edit(|t| t.metadata = None);
        // An undo also brings back the old marker (kubectl copies the old ReplicaSet's annotations).
        let old = Marker::next("h0", BTreeMap::new(), None, now(), 0);
        undone.annotations.insert(names::ROLLOUT.into(), old.render());
        let mut fixed = rolled("failed", "h", "bad", done());
        fixed
            .annotations
            .insert(names::ROLLOUT_FAILED.into(), record.into());
        for w in [&undone, &fixed] {
            let c = census([w], DEFAULT_ROLLOUT_DEADLINE, now());
            assert!(c.halt_for(&bad).is_some(), "{:?}", w.progress);
        }
        undone.annotations.insert(names::HALT_RELEASED.into(), "h".into());
        let c = census([&undone], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.halt_for(&bad).is_none(), "released by wave resume");
        assert_eq!(
            unrecorded_failure(&rolled("ok", "h", "bad", done()), DEFAULT_ROLLOUT_DEADLINE, now()),
            None
        );
    }

    #[test]
    fn a_halt_outlives_the_deletion_of_its_failed_workload_until_the_object_changes() {
        let mut p = Pacer::new(5);
        let ws = [rolled("failed", "h", "bad", failed())];
        let lookup = |i: &WorkloadRef| ws.iter().find(|w| &w.id == i);
        let (_, changes) = p.census(&ws, lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        assert_eq!(
            changes.to_record,
            [id("failed")],
            "its failure is to be recorded, once"
        );
        p.deleted(&id("failed"));
        let (c, changes) = p.census([], |_| None, DEFAULT_ROLLOUT_DEADLINE, now());
        let bad = [v("ConfigMap/ns/cm", "bad")];
        assert!(c.halt_for(&bad).is_some(), "still halted");
        assert!(!changes.ended && changes.to_record.is_empty());
        p.superseded(&[v("ConfigMap/ns/cm", "fixed")]);
        let (c, changes) = p.census([], |_| None, DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(
            c.halt_for(&bad).is_none() && changes.ended,
            "a new version ends it"
        );
    }

    #[test]
    fn a_failure_after_someone_else_changed_the_spec_is_not_wave_s_to_record() {
        let mut w = rolled("a", "h", "v", failed());
        // `kubectl set image` after wave's write: a new generation, observed, and failing.
        w.generation = 2;
        w.progress.observed_generation = Some(2);
        assert_eq!(unrecorded_failure(&w, DEFAULT_ROLLOUT_DEADLINE, now()), None);
        let c = census([&w], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.unrecorded.is_empty());
        assert!(
            c.halt_for(&[v("ConfigMap/ns/cm", "v")]).is_some(),
            "it still halts while it fails, as before"
        );
    }

    #[test]
    fn a_forged_failure_record_halts_nothing_in_another_namespace() {
        let mut w = deployment("tenant", "w", &[], json!({"containers": []}));
        let record = Failure {
            hash: "h".into(),
            why: "forged".into(),
            delivered: BTreeMap::from([("ConfigMap/victim/cfg".to_string(), "v".to_string())]),
        };
        w.annotations
            .insert(names::ROLLOUT_FAILED.into(), record.render());
        let c = census([&w], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.halt_for(&[v("ConfigMap/victim/cfg", "v")]).is_none());
    }

    #[test]
    fn a_forged_release_releases_nothing_in_another_namespace() {
        let mut w = deployment("tenant", "w", &[], json!({"containers": []}));
        let record = Failure {
            hash: "h".into(),
            why: "forged".into(),
            delivered: BTreeMap::from([("ConfigMap/victim/cfg".to_string(), "bad".to_string())]),
        };
        w.annotations
            .insert(names::ROLLOUT_FAILED.into(), record.render());
        w.annotations.insert(names::HALT_RELEASED.into(), "h".into());
        let c = census([&w], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.released.is_empty() && c.halts.is_empty());
    }

    #[test]
    fn a_paused_deployment_holds_no_slot() {
        let mut w = rolled("a", "h", "v", rolling());
        w.progress.paused = true;
        let c = census([&w], DEFAULT_ROLLOUT_DEADLINE, now());
        assert!(c.rolling.is_empty() && c.failed.is_empty());
    }

    /// The objects markers and failure records name in the generated workloads (one in another
    /// namespace than most workloads).
    const OBJECTS: [&str; 3] = ["ConfigMap/ns/a", "Secret/ns/b", "ConfigMap/other/c"];

    /// A generated marker: its hash, how long before now it was written, each object's digest (0: not
    /// in its config), which objects it delivers (a bit each), the generation it records.
    type GeneratedMarker = (u8, u64, [u8; 3], u8, Option<i64>);

    /// One generated state of a workload: what the census reads of it.
    #[derive(Clone, Debug)]
    struct Spec {
        marker: Option<GeneratedMarker>,
        /// The hash on its template.
        template: Option<u8>,
        /// A failure record: its hash, what it delivered (a bit per object), why.
        failure: Option<(u8, u8, u8)>,
        released: Option<u8>,
        deadline: Option<u8>,
        /// Rolling, failed, done, paused or OnDelete, not observed yet.
        status: u8,
        generation: i64,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            proptest::option::of((
                0u8..3,
                0u64..1200,
                proptest::array::uniform3(0u8..3),
                0u8..8,
                proptest::option::of(1i64..4),
            )),
            proptest::option::of(0u8..3),
            proptest::option::of((0u8..3, 0u8..8, 0u8..2)),
            proptest::option::of(0u8..3),
            proptest::option::of(0u8..3),
            0u8..5,
            1i64..4,
        )
            .prop_map(
                |(marker, template, failure, released, deadline, status, generation)| Spec {
                    marker,
                    template,
                    failure,
                    released,
                    deadline,
                    status,
                    generation,
                },
            )
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Workload `w` is created or changes to this state.
        Put(usize, Spec),
        /// Workload `w` is deleted; `told`: the pacer hears of it as the router tells it
        /// (`Pacer::deleted`), else only as a workload gone (`observe` with none).
        Delete(usize, bool),
        /// Time passes.
        Tick(u64),
        /// A rollout delivering a new version of an object was admitted (`Pacer::superseded`).
        Supersede(usize, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0usize..6, spec()).prop_map(|(w, s)| Op::Put(w, s)),
            2 => (0usize..6, any::<bool>()).prop_map(|(w, told)| Op::Delete(w, told)),
            2 => (0u64..400).prop_map(Op::Tick),
            1 => (0usize..3, 0u8..3).prop_map(|(o, d)| Op::Supersede(o, d)),
        ]
    }

    /// Workload `i` (a Deployment or a StatefulSet, in `ns` or `other`) in state `s`, at `now`.
    fn build(i: usize, s: &Spec, now: Timestamp) -> Workload {
        let ns = if i < 4 { "ns" } else { "other" };
        let mut w = deployment(ns, &format!("w{i}"), &[], json!({"containers": []}));
        let stateful = i % 2 == 1;
        if stateful {
            w.id.kind = WorkloadKind::STATEFUL_SET;
        }
        w.generation = s.generation;
        let bits = |mask: u8| -> Vec<&str> {
            OBJECTS
                .iter()
                .enumerate()
                .filter(|(k, _)| mask & (1 << k) != 0)
                .map(|(_, o)| *o)
                .collect()
        };
        if let Some((hash, back, digests, changed, generation)) = s.marker {
            let marker = Marker {
                hash: format!("h{hash}"),
                at: now.checked_sub(Duration::from_secs(back)).unwrap().to_string(),
                config: OBJECTS
                    .iter()
                    .zip(digests)
                    .filter(|(_, d)| *d > 0)
                    .map(|(o, d)| (o.to_string(), d.to_string()))
                    .collect(),
                changed: bits(changed).into_iter().map(String::from).collect(),
                generation,
            };
            w.annotations.insert(names::ROLLOUT.into(), marker.render());
        }
        if let Some(hash) = s.template {
            w.template.edit(|t| {
                t.metadata = Some(
                    serde_json::from_value(
                        json!({"annotations": {(names::CONFIG_HASH): format!("h{hash}")}}),
                    )
                    .unwrap(),
                );
            });
        }
        if let Some((hash, delivered, why)) = s.failure {
            let record = Failure {
                hash: format!("h{hash}"),
                why: ["bad", "worse"][why as usize].into(),
                delivered: bits(delivered)
                    .into_iter()
                    .map(|o| (o.to_string(), "1".to_string()))
                    .collect(),
            };
            w.annotations
                .insert(names::ROLLOUT_FAILED.into(), record.render());
        }
        if let Some(hash) = s.released {
            w.annotations
                .insert(names::HALT_RELEASED.into(), format!("h{hash}"));
        }
        if let Some(d) = s.deadline {
            w.annotations.insert(
                names::ROLLOUT_DEADLINE.into(),
                ["30s", "5m", "soon"][d as usize].into(),
            );
        }
        let p = &mut w.progress;
        p.observed_generation = (s.status != 4).then_some(s.generation);
        p.spec_replicas = Some(1);
        p.rolls_by_itself = !(stateful && s.status == 3);
        if stateful {
            p.ready = i64::from(s.status == 2);
        } else {
            (p.replicas, p.updated, p.available) = if s.status == 2 { (1, 1, 1) } else { (2, 1, 1) };
            p.deadline_exceeded = s.status == 1;
            p.paused = s.status == 3;
        }
        w
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The census kept one workload at a time, and the pacer's look at it, equal the census read
        /// whole after any sequence of changes, deletions and time passing (rollouts past their
        /// deadline among them).
        #[test]
        fn the_tally_equals_the_census_read_whole(ops in proptest::collection::vec(op(), 1..40)) {
            let mut now = now();
            let mut world: BTreeMap<WorkloadRef, Workload> = BTreeMap::new();
            let mut tally = Tally::default();
            let (mut incremental, mut whole) = (Pacer::new(3), Pacer::new(3));
            let ids: Vec<WorkloadRef> = (0..6).map(|i| build(i, &spec_none(), now).id).collect();
            for op in ops {
                match op {
                    Op::Put(i, s) => {
                        let w = build(i, &s, now);
                        tally.set(&w.id, Some(Share::of(&w, DEFAULT_ROLLOUT_DEADLINE, now)));
                        incremental.observe(&w.id, Some(&w), DEFAULT_ROLLOUT_DEADLINE, now);
                        world.insert(w.id.clone(), w);
                    }
                    Op::Delete(i, told) => {
                        let id = &ids[i];
                        world.remove(id);
                        tally.set(id, None);
                        if told {
                            incremental.deleted(id);
                            whole.deleted(id);
                        } else {
                            incremental.observe(id, None, DEFAULT_ROLLOUT_DEADLINE, now);
                        }
                    }
                    Op::Tick(secs) => now = now.checked_add(Duration::from_secs(secs)).unwrap(),
                    Op::Supersede(o, d) => {
                        let version = [v(OBJECTS[o], &d.to_string())];
                        incremental.superseded(&version);
                        whole.superseded(&version);
                    }
                }
                let lookup = |id: &WorkloadRef| world.get(id);
                tally.expire(lookup, DEFAULT_ROLLOUT_DEADLINE, now);
                let read = census(world.values(), DEFAULT_ROLLOUT_DEADLINE, now);
                prop_assert_eq!(&tally.census(), &read);
                let kept = incremental.look(lookup, DEFAULT_ROLLOUT_DEADLINE, now);
                let full = whole.census(world.values(), lookup, DEFAULT_ROLLOUT_DEADLINE, now);
                prop_assert_eq!(kept, full);
            }
        }

        /// The line kept in order gives the same order and places as sorting the whole line
        /// (failed first, then priority, then first come), as workloads join, ask again with another
        /// priority, and leave.
        #[test]
        fn the_line_keeps_the_order_a_full_sort_gives(
            ops in proptest::collection::vec((0usize..8, proptest::option::of(-2i64..3)), 1..60),
            failed in proptest::collection::btree_set(0usize..8, 0..4),
        ) {
            let name = |i: usize| id(&format!("w{i}"));
            let failed: BTreeMap<WorkloadRef, String> =
                failed.into_iter().map(|i| (name(i), "failed".to_string())).collect();
            let mut line = Line::default();
            let mut naive: BTreeMap<WorkloadRef, (i64, u64)> = BTreeMap::new();
            for (seq, (i, priority)) in (0u64..).zip(ops) {
                let w = name(i);
                match priority {
                    Some(p) => {
                        let first = line.join(&w, p, seq);
                        prop_assert_eq!(first, !naive.contains_key(&w));
                        naive.entry(w).or_insert((p, seq)).0 = p;
                    }
                    None => {
                        line.leave(&w);
                        naive.remove(&w);
                    }
                }
                let mut sorted: Vec<(&WorkloadRef, &(i64, u64))> = naive.iter().collect();
                sorted.sort_by_key(|(w, (p, s))| (!failed.contains_key(*w), Reverse(*p), *s));
                let sorted: Vec<WorkloadRef> = sorted.into_iter().map(|(w, _)| w.clone()).collect();
                prop_assert_eq!(line.head(&failed, line.len()), sorted.clone());
                prop_assert_eq!(line.head(&failed, 2.min(line.len())), sorted[..2.min(sorted.len())].to_vec());
                for (k, w) in sorted.iter().enumerate() {
                    prop_assert_eq!(line.position(w, &failed), Some(k));
                }
            }
        }
    }

    fn spec_none() -> Spec {
        Spec {
            marker: None,
            template: None,
            failure: None,
            released: None,
            deadline: None,
            status: 2,
            generation: 1,
        }
    }

    #[test]
    fn a_rolling_stateful_set_fails_when_its_deadline_passes_without_an_event() {
        let mut p = Pacer::new(1);
        let spec = Spec {
            marker: Some((0, 0, [1, 0, 0], 1, None)),
            template: Some(0),
            status: 0,
            deadline: Some(0),
            ..spec_none()
        };
        let w = build(1, &spec, now());
        p.observe(&w.id, Some(&w), DEFAULT_ROLLOUT_DEADLINE, now());
        let lookup = |i: &WorkloadRef| (i == &w.id).then_some(&w);
        let (c, _) = p.look(lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        assert_eq!(c.rolling, BTreeSet::from([w.id.clone()]));
        let end = now().checked_add(Duration::from_secs(30)).unwrap();
        assert_eq!(c.next_deadline, Some(end));
        let later = end.checked_add(Duration::from_secs(1)).unwrap();
        let (c, changes) = p.look(lookup, DEFAULT_ROLLOUT_DEADLINE, later);
        assert!(c.rolling.is_empty() && c.next_deadline.is_none());
        assert_eq!(changes.to_record, std::slice::from_ref(&w.id));
        assert_eq!(changes.new.len(), 1, "its version is halted");
    }

    #[test]
    fn a_halt_two_workloads_caused_outlives_the_first_one_s_deletion() {
        let mut p = Pacer::new(5);
        let ws = [
            rolled("a", "h", "bad", failed()),
            rolled("b", "h", "bad", failed()),
        ];
        for w in &ws {
            p.observe(&w.id, Some(w), DEFAULT_ROLLOUT_DEADLINE, now());
        }
        let lookup = |i: &WorkloadRef| ws.iter().find(|w| &w.id == i);
        let (c, _) = p.look(lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        let bad = v("ConfigMap/ns/cm", "bad");
        assert_eq!(c.halts[&bad].failed, id("a"), "the first in name order is named");
        p.observe(&id("a"), None, DEFAULT_ROLLOUT_DEADLINE, now());
        let lookup = |i: &WorkloadRef| ws[1..].iter().find(|w| &w.id == i);
        let (c, changes) = p.look(lookup, DEFAULT_ROLLOUT_DEADLINE, now());
        assert_eq!(c.halts[&bad].failed, id("b"));
        assert!(!changes.ended && changes.new.is_empty());
    }

    #[test]
    fn the_lowest_and_highest_priorities_order_without_overflow() {
        let mut p = Pacer::new(1);
        let mut c = Census::default();
        c.rolling.insert(id("busy"));
        for (name, prio) in [("min", i64::MIN), ("max", i64::MAX), ("zero", 0)] {
            assert!(matches!(p.decide(&wl(name), prio, &c), Admission::Queued { .. }));
        }
        assert_eq!(p.line(&c), [id("max"), id("zero"), id("min")]);
    }

    #[test]
    fn a_bad_priority_or_deadline_annotation_is_named_and_ignored() {
        let w = deployment(
            "ns",
            "w",
            &[
                (names::ROLLOUT_PRIORITY, "high"),
                (names::ROLLOUT_DEADLINE, "soon"),
            ],
            json!({"containers": []}),
        );
        let (p, why) = priority(&w);
        assert_eq!(p, 0);
        assert!(why.unwrap().contains(names::ROLLOUT_PRIORITY));
        let (d, why) = deadline(&w, DEFAULT_ROLLOUT_DEADLINE);
        assert_eq!(d, DEFAULT_ROLLOUT_DEADLINE);
        assert!(why.unwrap().contains(names::ROLLOUT_DEADLINE));
    }
}
