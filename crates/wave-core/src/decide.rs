//! The one decision whether a config change may roll a workload now, and if not, why and until when.
//!
//! ```text
//! Situation (the workload as read, its references and their content, the time, and wave's Memory:
//!            hashes it carried, what it last rolled, the flap breaker, the coalescer, the halts)
//!   ─► decision ─► plan::plan ─► Noop ─► Nothing        (the versions behind its hash, to note)
//!                              ─► Blocked / DeleteHeldPods
//!                              ─► Write, not a rollout (a first hash, a gate released) ─► Write
//!                              ─► Write, a rollout ─► rollout(Memory) ─► decide(Facts)
//!                                   Undo(pin)  the template went back to an earlier hash: pin it, or
//!                                              restore that config (undo_action)
//!                                   Hold(why)  halted / flapping / coalesced: keep the current hash
//!                                   Roll       ─► Write (with pacing, the line gives it a slot:
//!                                                 `pace::Pacer`, the one stateful step after this)
//! ```
//!
//! The controller, `wave explain` and `wave status` call [`decision`]; the webhook on UPDATE, the
//! Reloader path and `wave impact` call [`rollout_verdict`] (their own plans are `admission::decide` and
//! `reloader::plan`). They differ only in what they can read: a webhook replica that does not lead knows
//! nothing of coalescing, say, and the commands know nothing of wave's memory (the halts they read from
//! the cluster's census; flapping and the pacing line from wave's Events). The order is the
//! rule: a user's undo first (wave never fights it), then a halt (a version that failed reaches no
//! further workload, whatever else holds it), then flapping, then coalescing, and only a rollout that
//! may roll now asks pacing for a slot.
//!
//! What a rollout *delivers* is the config versions that differ from the ones the workload last rolled.
//! A flapping object holds only the rollouts it causes, those that deliver nothing but flapping
//! objects' changes: a real change to another object rolls (the pods then read every object's current
//! value, so the flapping one's too; its final value rolls once more when it settles if it changed
//! since). When the last rolled versions are not known (after a restart,
//! without a rollout marker), every referenced version counts as delivered, as pacing already assumes
//! for a first rollout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::coalesce::{self, Coalescer};
use crate::flap::FlapDetector;
use crate::hash::{Fetched, Missing};
use crate::inplace::{self, Record, Strategy};
use crate::pace::{self, Halt, Marker, Version};
use crate::plan::{self, Plan, Write};
use crate::refs::{ConfigKey, References};
use crate::undo::{self, Pin};
use crate::workload::{Workload, WorkloadRef};

/// What wave remembers (or, after a restart, does not) that the decision needs besides the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Memory<'a> {
    /// Fingerprints of the hashes the workload carried, oldest first (`undo`).
    pub carried: &'a [u64],
    /// The config versions behind its last hash, if noted.
    pub rolled: Option<&'a Rolled>,
    /// The flap breaker.
    pub flaps: &'a FlapDetector<ConfigKey, WorkloadRef>,
    /// When each workload last rolled.
    pub coalescer: &'a Coalescer<WorkloadRef>,
    /// `--min-rollout-interval` (a workload's annotation overrides it).
    pub min_interval: Duration,
    /// The halted config versions (none while pacing is off).
    pub halts: &'a BTreeMap<Version, Halt>,
    /// Now, for the flap breaker and the coalescer.
    pub now: Instant,
}

/// Everything one decision for one workload reads.
#[derive(Clone, Copy, Debug)]
pub struct Situation<'a> {
    /// The workload as read.
    pub workload: &'a Workload,
    /// Its references.
    pub refs: &'a References,
    /// The content of those that exist.
    pub fetched: &'a Fetched,
    /// The time, the gate limit and the hashing.
    pub policy: &'a plan::Policy,
    /// What wave remembers.
    pub memory: Memory<'a>,
}

/// What to do for one workload, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to write: its hash is current (or pinned). `rolled` is what it runs, to note, unless
    /// pinned.
    Nothing {
        /// The versions behind its current hash, when that hash is the current config's.
        rolled: Option<Rolled>,
    },
    /// Required config is missing (`plan::Plan::Blocked`).
    Blocked {
        /// What is missing.
        missing: Vec<Missing>,
        /// When a gated workload looks again.
        recheck_after: Option<Duration>,
    },
    /// Delete the pods a released gate held (`plan::Plan::DeleteHeldPods`).
    DeleteHeldPods,
    /// An undo: pin the template, or restore that config.
    Undo {
        /// The pin.
        pin: Pin,
        /// Restore or pin.
        action: UndoAction,
    },
    /// A rollout that waits.
    Hold(Hold),
    /// Write this. `rollout` when it rolls the workload because its config changed (pacing applies);
    /// `versions` are the config versions behind its hash (for the marker and the memory).
    Write {
        /// The write.
        write: Write,
        /// Whether it is a config-triggered rollout.
        rollout: bool,
        /// The version of every referenced object.
        versions: BTreeMap<String, String>,
    },
}

impl Decision {
    /// The reason in a word, for `wave explain`, logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Decision::Nothing { .. } => "up-to-date",
            Decision::Blocked { .. } => "blocked",
            Decision::DeleteHeldPods => "delete-held-pods",
            Decision::Undo {
                action: UndoAction::Restore,
                ..
            } => "restore",
            Decision::Undo { .. } => "pinned",
            Decision::Hold(Hold::Halted(_)) => "halted",
            Decision::Hold(Hold::Flapping { .. }) => "held",
            Decision::Hold(Hold::Coalesced(_)) => "coalesced",
            Decision::Hold(Hold::Paused) => "paused",
            Decision::Write { write, .. } if write.in_place.is_some() => "restart-in-place",
            Decision::Write { rollout: true, .. } => "rollout",
            Decision::Write { .. } => "write",
        }
    }
}

/// The one decision for one workload (see the module docs). An undo restores config when the workload
/// asks for it (`undo: restore-config`, `history::restores_config`) and [`undo_action`] allows it.
pub fn decision(s: &Situation<'_>) -> Decision {
    let w = s.workload;
    let hashing = &s.policy.hashing;
    let write = match plan::plan(w, s.refs, s.fetched, s.policy) {
        Plan::Noop => {
            let rolled = (pinned(w).is_none() && w.current_hash().is_some())
                .then(|| Rolled::of(&pace::versions(s.refs, s.fetched, hashing)));
            return Decision::Nothing { rolled };
        }
        Plan::Blocked {
            missing,
            recheck_after,
        } => {
            return Decision::Blocked {
                missing,
                recheck_after,
            };
        }
        Plan::DeleteHeldPods => return Decision::DeleteHeldPods,
        Plan::Write(write) => write,
    };
    let versions = pace::versions(s.refs, s.fetched, hashing);
    let rollout = is_rollout(w, &write);
    if rollout && let Some(desired) = write.hash.as_deref() {
        match rollout_verdict(
            w,
            Some(desired),
            &delivered(w, &versions, s.memory.rolled),
            &s.memory,
        ) {
            Verdict::Roll => {}
            Verdict::Undo(pin) => {
                let action = undo_action(&pin, crate::history::restores_config(w), s.memory.carried);
                return Decision::Undo { pin, action };
            }
            Verdict::Hold(hold) => return Decision::Hold(hold),
        }
    }
    let mut write = write;
    if let Some(image) = s.policy.agent_image.as_deref() {
        restart_in_place(
            w,
            &mut write,
            rollout,
            &versions,
            s.memory.rolled,
            s.policy,
            image,
        );
    }
    Decision::Write {
        write,
        rollout,
        versions,
    }
}

/// Shapes the config write of a workload that restarts in place (`inplace`): a config-triggered
/// rollout of a template that has the agent becomes an in-place restart (a record on the workload's
/// metadata, nothing on its template); any other hash write to a template without the agent adds it,
/// so that the next change restarts in place (for a rollout, the runtime says so in an Event). A gate
/// or scheduler write is left as it is.
fn restart_in_place(
    w: &Workload,
    write: &mut Write,
    rollout: bool,
    versions: &BTreeMap<String, String>,
    rolled: Option<&Rolled>,
    policy: &plan::Policy,
    image: &str,
) {
    let Some(hash) = write.hash.as_deref() else {
        return;
    };
    if write.release_gate.is_some()
        || write.restore_scheduler.is_some()
        || Strategy::of(w, policy.restart).0 != Strategy::InPlace
    {
        return;
    }
    if !inplace::has_agent(&w.template) {
        write.add_agent = Some(image.to_string());
    } else if rollout {
        let delivers = delivered(w, versions, rolled)
            .into_iter()
            .map(|v| (v.object, v.digest))
            .collect();
        let previous = Record::read(w);
        write.in_place = Some(Box::new(Record::new(
            hash,
            policy.now,
            delivers,
            previous.as_ref(),
        )));
    }
}

/// The pin that keeps `workload` where it is when [`decision`] finds nothing to write: its template is
/// still on the pinned hash (and the config unchanged since, or the plan would write). `wave explain`
/// says `pinned` for such a workload.
pub fn pinned(workload: &Workload) -> Option<Pin> {
    Pin::read(workload).filter(|p| Some(p.hash.as_str()) == workload.current_hash())
}

/// Whether `write` rolls the workload because its config changed: a new hash on a workload that had
/// one, with no scheduling to restore or gate to release (those are never delayed).
pub fn is_rollout(workload: &Workload, write: &Write) -> bool {
    write.hash.is_some()
        && workload.current_hash().is_some()
        && write.release_gate.is_none()
        && write.restore_scheduler.is_none()
}

/// The config versions a rollout of `workload` to `versions` delivers: those that differ from what it
/// last rolled, as its rollout marker (when it names its current hash) or wave's memory tells.
pub fn delivered(
    workload: &Workload,
    versions: &BTreeMap<String, String>,
    rolled: Option<&Rolled>,
) -> Vec<Version> {
    let marker = Marker::read(workload).filter(|m| workload.current_hash() == Some(m.hash.as_str()));
    let previous = match (&marker, rolled) {
        (Some(m), _) => Previous::Marker(&m.config),
        (None, Some(r)) => Previous::Rolled(r),
        (None, None) => Previous::Unknown,
    };
    delivers(versions, previous)
}

/// The decision for a rollout of `workload` (to hash `desired`, or a Reloader-style reload) that
/// delivers `delivers`, from `memory` (the webhook on UPDATE, and the Reloader path, call this).
pub fn rollout_verdict(
    workload: &Workload,
    desired: Option<&str>,
    delivers: &[Version],
    memory: &Memory<'_>,
) -> Verdict {
    let keys: Vec<ConfigKey> = delivers.iter().filter_map(|v| v.key()).collect();
    let flapping = memory.flaps.flapping(keys.iter(), memory.now);
    let (interval, _) = coalesce::interval(&workload.annotations, memory.min_interval);
    let coalesce = memory.coalescer.check(&workload.id, memory.now, interval).err();
    decide(&Facts {
        id: &workload.id,
        current: workload.current_hash(),
        desired,
        carried: memory.carried,
        delivers,
        flapping: &flapping,
        coalesce,
        halts: memory.halts,
        paused: workload.progress.paused,
        now: memory.now,
    })
}

/// What the caller could read about one rollout: a new hash for a workload that has one.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The workload.
    pub id: &'a WorkloadRef,
    /// The hash its template carries now.
    pub current: Option<&'a str>,
    /// The hash of its config now: what the rollout would write (none for a Reloader-style reload,
    /// which writes no hash and so cannot be an undo).
    pub desired: Option<&'a str>,
    /// Fingerprints (`undo::fingerprint`) of the hashes it carried, oldest first; empty when unknown.
    pub carried: &'a [u64],
    /// The config versions the rollout delivers (see the module docs).
    pub delivers: &'a [Version],
    /// Referenced objects that flap now, and when each would settle.
    pub flapping: &'a [(ConfigKey, Instant)],
    /// How long its minimum interval since its last rollout still runs, if it does.
    pub coalesce: Option<Duration>,
    /// The halted config versions.
    pub halts: &'a BTreeMap<Version, Halt>,
    /// Someone paused it (`kubectl rollout pause`): it would not roll anyway.
    pub paused: bool,
    /// Now.
    pub now: Instant,
}

/// The decision for one rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Someone took the template back to an earlier hash (an undo): write no hash; pin it there (or
    /// restore that config: [`undo_action`]).
    Undo(Pin),
    /// Keep the current hash, for this reason.
    Hold(Hold),
    /// It may roll now (with pacing, once the line gives it a slot).
    Roll,
}

/// Why a rollout waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// It would deliver a config version that failed on another workload: until a new change or
    /// `wave resume`.
    Halted(Halt),
    /// An object whose change it delivers flaps: until that object has been quiet long enough.
    Flapping {
        /// The object (the one that settles last).
        object: ConfigKey,
        /// When it settles.
        until: Instant,
    },
    /// It rolled less than its minimum interval ago: roll, with the final hash, after this long.
    Coalesced(Duration),
    /// Someone paused the Deployment: wave writes nothing until it is resumed (its watch event wakes
    /// it), so the rollout then goes through pacing like any other, and a paused Deployment never
    /// holds a slot.
    Paused,
}

impl Hold {
    /// When to look again by itself; `None` when only an event ends it (a halt).
    pub fn recheck(&self, now: Instant) -> Option<Duration> {
        match self {
            Hold::Halted(_) | Hold::Paused => None,
            Hold::Flapping { until, .. } => Some(until.saturating_duration_since(now)),
            Hold::Coalesced(wait) => Some(*wait),
        }
    }
}

/// Decides one rollout; see the module docs for the order.
pub fn decide(f: &Facts<'_>) -> Verdict {
    if let Some(pin) = f.desired.and_then(|d| undo::detect(f.current, d, f.carried)) {
        return Verdict::Undo(pin);
    }
    // A workload is not held by its own failure: a new version is its fix (`pace`).
    if let Some(halt) = f
        .delivers
        .iter()
        .find_map(|v| f.halts.get(v))
        .filter(|h| &h.failed != f.id)
    {
        return Verdict::Hold(Hold::Halted(halt.clone()));
    }
    if f.paused {
        return Verdict::Hold(Hold::Paused);
    }
    // Held only when every change it delivers is a flapping object's: a real change elsewhere rolls.
    let flapping_until = |v: &Version| {
        f.flapping
            .iter()
            .filter(|(key, until)| *until > f.now && crate::pace::object_name(key) == v.object)
            .map(|(key, until)| (key.clone(), *until))
            .next()
    };
    let held: Option<Vec<(ConfigKey, Instant)>> = f.delivers.iter().map(flapping_until).collect();
    if let Some((object, until)) = held.and_then(|all| all.into_iter().max_by_key(|(_, until)| *until)) {
        return Verdict::Hold(Hold::Flapping { object, until });
    }
    if let Some(wait) = f.coalesce.filter(|w| !w.is_zero()) {
        return Verdict::Hold(Hold::Coalesced(wait));
    }
    Verdict::Roll
}

/// The config versions a workload last rolled, as fingerprints (16 bytes an object: kept in memory for
/// every workload, so it must stay small). Noted when wave writes a hash and when it finds the hash
/// current; forgotten on a restart, when a rollout marker (pacing) or nothing stands in for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rolled(Box<[(u64, u64)]>);

impl Rolled {
    /// The fingerprints of `versions` (object name → digest, `pace::versions`).
    pub fn of(versions: &BTreeMap<String, String>) -> Self {
        let mut all: Vec<(u64, u64)> = versions
            .iter()
            .map(|(object, digest)| (undo::fingerprint(object), undo::fingerprint(digest)))
            .collect();
        all.sort_unstable();
        Self(all.into())
    }

    fn contains(&self, object: &str, digest: &str) -> bool {
        self.0
            .binary_search(&(undo::fingerprint(object), undo::fingerprint(digest)))
            .is_ok()
    }
}

/// What the workload last rolled, as far as the caller knows.
#[derive(Clone, Copy, Debug)]
pub enum Previous<'a> {
    /// Its rollout marker names the hash it carries: the versions in it.
    Marker(&'a BTreeMap<String, String>),
    /// Noted in memory by this process.
    Rolled(&'a Rolled),
    /// Not known: every version counts as delivered.
    Unknown,
}

/// The config versions a rollout to `versions` delivers: those that differ from what it last rolled.
pub fn delivers(versions: &BTreeMap<String, String>, previous: Previous<'_>) -> Vec<Version> {
    versions
        .iter()
        .filter(|(object, digest)| match previous {
            Previous::Marker(config) => config.get(*object) != Some(*digest),
            Previous::Rolled(rolled) => !rolled.contains(object, digest),
            Previous::Unknown => true,
        })
        .map(|(object, digest)| Version {
            object: object.clone(),
            digest: digest.clone(),
        })
        .collect()
}

/// What an undo does: restore the config the template went back to, or pin the template there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UndoAction {
    /// Restore that config from its snapshot (`undo: restore-config`), then the template is current.
    Restore,
    /// Pin the template; with restore-config on, say why it was not restored.
    Pin {
        /// Why a restore was refused (none when restore-config is off).
        refused: Option<String>,
    },
}

/// Whether an undo restores config: only with `restore-config`, and only when the config it would
/// overwrite is a version the workload has run (so it has a snapshot, and the user undid a rollout of
/// it). A version written after the last rollout (held by coalescing, a halt, pacing) has never run
/// anywhere and has no snapshot: overwriting it would lose it for good, so the undo pins instead.
pub fn undo_action(pin: &Pin, restores_config: bool, carried: &[u64]) -> UndoAction {
    if !restores_config {
        return UndoAction::Pin { refused: None };
    }
    if carried.contains(&undo::fingerprint(&pin.config)) {
        UndoAction::Restore
    } else {
        UndoAction::Pin {
            refused: Some(format!(
                "the current config (hash {}) was written after the last rollout and never ran on this workload, so it has no snapshot, and restoring would lose it",
                pin.config
            )),
        }
    }
}

#[cfg(test)]
// The tests need one real `Instant` to count from; the code under test never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::names;
    use crate::refs::ConfigKind;
    use crate::workload::WorkloadKind;

    fn id(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", name)
    }

    fn v(name: &str, digest: &str) -> Version {
        Version {
            object: format!("ConfigMap/ns/{name}"),
            digest: digest.into(),
        }
    }

    fn key(name: &str) -> ConfigKey {
        ConfigKey::new(ConfigKind::ConfigMap, "ns", name)
    }

    struct Case {
        id: WorkloadRef,
        carried: Vec<u64>,
        delivers: Vec<Version>,
        flapping: Vec<(ConfigKey, Instant)>,
        coalesce: Option<Duration>,
        halts: BTreeMap<Version, Halt>,
        paused: bool,
        now: Instant,
    }

    impl Case {
        fn new() -> Self {
            Self {
                id: id("w"),
                carried: vec![undo::fingerprint("h1")],
                delivers: vec![v("a", "2")],
                flapping: Vec::new(),
                coalesce: None,
                halts: BTreeMap::new(),
                paused: false,
                now: Instant::now(),
            }
        }

        fn decide(&self, current: &str, desired: &str) -> Verdict {
            decide(&Facts {
                id: &self.id,
                current: Some(current),
                desired: Some(desired),
                carried: &self.carried,
                delivers: &self.delivers,
                flapping: &self.flapping,
                coalesce: self.coalesce,
                halts: &self.halts,
                paused: self.paused,
                now: self.now,
            })
        }

        fn halt(&mut self, version: Version, failed: &str) {
            self.halts.insert(
                version.clone(),
                Halt {
                    version,
                    failed: id(failed),
                    why: "ProgressDeadlineExceeded".into(),
                },
            );
        }
    }

    #[test]
    fn a_change_nothing_holds_rolls() {
        assert_eq!(Case::new().decide("h1", "h2"), Verdict::Roll);
    }

    #[test]
    fn a_flapping_object_holds_only_the_rollouts_that_deliver_its_change() {
        let mut c = Case::new();
        let until = c.now + Duration::from_secs(60);
        c.flapping = vec![(key("b"), until)];
        assert_eq!(
            c.decide("h1", "h2"),
            Verdict::Roll,
            "a change to a, while b flaps"
        );
        c.delivers.push(v("b", "9"));
        assert_eq!(
            c.decide("h1", "h2"),
            Verdict::Roll,
            "a change to a rolls, with b's value of the moment"
        );
        c.delivers = vec![v("b", "9")];
        assert_eq!(
            c.decide("h1", "h2"),
            Verdict::Hold(Hold::Flapping {
                object: key("b"),
                until
            })
        );
        c.flapping = vec![(key("b"), c.now)];
        assert_eq!(c.decide("h1", "h2"), Verdict::Roll, "settled");
    }

    #[test]
    fn a_halted_version_holds_every_workload_but_the_one_that_failed_with_it() {
        let mut c = Case::new();
        c.halt(v("a", "2"), "other");
        c.flapping = vec![(key("a"), c.now + Duration::from_secs(60))];
        c.coalesce = Some(Duration::from_secs(5));
        assert!(
            matches!(c.decide("h1", "h2"), Verdict::Hold(Hold::Halted(h)) if h.failed == id("other")),
            "the halt comes before flapping and coalescing"
        );
        c.halts.clear();
        c.halt(v("a", "2"), "w");
        assert!(!matches!(c.decide("h1", "h2"), Verdict::Hold(Hold::Halted(_))));
        c.halts.clear();
        c.halt(v("a", "1"), "other");
        assert!(
            !matches!(c.decide("h1", "h2"), Verdict::Hold(Hold::Halted(_))),
            "a new version of the object is not halted"
        );
    }

    #[test]
    fn a_paused_deployment_rolls_nothing_until_resumed_but_an_undo_and_a_halt_still_come_first() {
        let mut c = Case::new();
        c.paused = true;
        assert_eq!(c.decide("h1", "h2"), Verdict::Hold(Hold::Paused));
        c.halt(v("a", "2"), "other");
        assert!(matches!(c.decide("h1", "h2"), Verdict::Hold(Hold::Halted(_))));
    }

    #[test]
    fn a_workload_inside_its_interval_is_coalesced() {
        let mut c = Case::new();
        c.coalesce = Some(Duration::from_secs(3));
        assert_eq!(
            c.decide("h1", "h2"),
            Verdict::Hold(Hold::Coalesced(Duration::from_secs(3)))
        );
    }

    #[test]
    fn an_undo_comes_before_every_hold() {
        let mut c = Case::new();
        c.carried = ["h1", "h2"].map(undo::fingerprint).into();
        c.halt(v("a", "2"), "other");
        c.coalesce = Some(Duration::from_secs(3));
        assert_eq!(
            c.decide("h1", "h2"),
            Verdict::Undo(Pin {
                hash: "h1".into(),
                config: "h2".into()
            })
        );
    }

    #[test]
    fn a_rollout_delivers_the_versions_that_differ_from_what_the_workload_last_rolled() {
        let before = BTreeMap::from([
            ("ConfigMap/ns/a".to_string(), "1".to_string()),
            ("ConfigMap/ns/b".to_string(), "1".to_string()),
        ]);
        let mut now = before.clone();
        now.insert("ConfigMap/ns/b".into(), "2".into());
        now.insert("ConfigMap/ns/c".into(), "1".into());
        let objects = |p| -> Vec<String> { delivers(&now, p).into_iter().map(|v| v.object).collect() };
        let changed = ["ConfigMap/ns/b", "ConfigMap/ns/c"];
        assert_eq!(objects(Previous::Marker(&before)), changed);
        let rolled = Rolled::of(&before);
        assert_eq!(objects(Previous::Rolled(&rolled)), changed);
        assert_eq!(objects(Previous::Unknown).len(), 3);
    }

    #[test]
    fn a_pin_keeps_a_workload_only_while_its_template_is_on_the_pinned_hash() {
        let pins = [(names::PINNED_HASH, "h1"), (names::PINNED_CONFIG, "h2")];
        let mut w =
            crate::workload::testing::deployment("ns", "w", &pins, serde_json::json!({"containers": []}));
        assert_eq!(pinned(&w), None, "no hash on the template");
        w.template.set_annotation(names::CONFIG_HASH, "h1");
        assert_eq!(pinned(&w).map(|p| p.hash), Some("h1".to_string()));
        w.template.set_annotation(names::CONFIG_HASH, "h3");
        assert_eq!(pinned(&w), None, "the template moved on");
    }

    #[test]
    fn an_undo_restores_only_config_the_workload_has_run() {
        let pin = Pin {
            hash: "h1".into(),
            config: "h3".into(),
        };
        assert_eq!(undo_action(&pin, false, &[]), UndoAction::Pin { refused: None });
        let ran = ["h1", "h3"].map(undo::fingerprint);
        assert_eq!(undo_action(&pin, true, &ran), UndoAction::Restore);
        let never_ran = ["h1", "h2"].map(undo::fingerprint);
        let UndoAction::Pin { refused: Some(why) } = undo_action(&pin, true, &never_ran) else {
            panic!("a version that never ran is not overwritten");
        };
        assert!(why.contains("h3") && why.contains("never ran"), "{why}");
    }
}
