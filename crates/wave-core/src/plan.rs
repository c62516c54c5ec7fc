//! The decision of what to write to one workload, and the exact patch that writes it.
//!
//! ```text
//! Workload + References + Fetched ─► plan() ─► Noop | Blocked { missing } | Write { hash, restore }
//!                                                                             │
//!                                                 patch_body(workload, write) ◄┘  (JSON merge patch)
//! ```
//!
//! Wave's rules (`docs/behaviour.md`, "When wave writes" and "Missing config"): write only when the hash
//! differs or scheduling must be restored; a missing required object or key blocks the write. A workload
//! that Wave gated and that opted out is still restored, so its pods cannot be stranded (difference
//! `opt-out-restores-scheduling`).
//!
//! wave's own webhook holds pods with the scheduling gate `wave.pusher.com/config` while required config
//! is missing. The plan releases it, in the same write as the hash, when the config is complete; on
//! opt-out; or, without the hash, once it has been held longer than the maximum gate duration.
//!
//! Releasing the gate from the template does not release the pods created while it was there: pod gates
//! can only be removed from each pod. A Deployment's new ReplicaSet replaces them, but a StatefulSet
//! waits forever for its gated pod to become ready before it rolls (kubernetes/kubernetes#67250), and a
//! DaemonSet with `OnDelete` never replaces it. So for those two kinds the release keeps the
//! `gated-at` mark, and the next plan is [`Plan::DeleteHeldPods`]: the held pods never ran, so deleting
//! them costs nothing, and their controller recreates them from the released template.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use serde_json::{Value, json};

use super::hash::{self, Fetched, Hashing, Missing};
use super::refs::References;
use super::undo::Pin;
use super::workload::Workload;
use crate::inplace::{self, Record, Strategy};
use crate::names;

/// What to do for one workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to write.
    Noop,
    /// Required config is missing; nothing is written.
    Blocked {
        /// What is missing, in Wave's order.
        missing: Vec<Missing>,
        /// For a gated workload: when to check again, because the gate then times out.
        recheck_after: Option<Duration>,
    },
    /// Write this.
    Write(Write),
    /// Delete the pods the released gate held, then remove the `gated-at` mark.
    DeleteHeldPods,
}

/// The content of one write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Write {
    /// The new config hash, when it changes.
    pub hash: Option<String>,
    /// Restore Wave's scheduling gate: the original scheduler to put back.
    pub restore_scheduler: Option<String>,
    /// Release wave's scheduling gate.
    pub release_gate: Option<GateRelease>,
    /// Note when the gate started holding pods: the gate has no readable `gated-at` mark (removed or
    /// edited by hand), so the maximum gate duration counts from now.
    pub mark_gated_at: Option<Timestamp>,
    /// The rollout marker to write with the hash when rollouts are paced (`pace::Marker`).
    pub rollout: Option<String>,
    /// Remove the workload's pin (`undo`): the config changed since, and the new hash rolls.
    pub unpin: bool,
    /// Restart the pods in place into `hash` (`inplace`): this record goes on the workload's metadata,
    /// and nothing on its template.
    pub in_place: Option<Box<Record>>,
    /// Add the in-place agent from this image to the template with the hash (`inplace::agent_patch`):
    /// a strategic merge patch, so the workload's own containers and volumes stay.
    pub add_agent: Option<String>,
}

impl Write {
    /// Whether the patch is a strategic merge patch (it adds the agent) rather than a merge patch.
    pub fn is_strategic(&self) -> bool {
        self.add_agent.is_some()
    }
}

/// Removing `wave.pusher.com/config` from the pod template's scheduling gates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateRelease {
    /// The other gates, kept.
    pub remaining: Vec<String>,
    /// Why.
    pub reason: GateReason,
    /// The workload's controller does not replace the held pods (StatefulSet, DaemonSet): keep the
    /// `gated-at` mark, so that the next plan deletes them.
    pub delete_held_pods: bool,
}

/// Why the gate is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateReason {
    /// Every required object and key exists (the hash is written with it).
    ConfigReady,
    /// The workload opted out.
    OptedOut,
    /// Held longer than the maximum gate duration.
    TimedOut,
}

/// What the plan needs besides the workload and its config: now, how long a gate may hold pods, and
/// how the hash is computed.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The current time.
    pub now: Timestamp,
    /// `--max-gate-duration`.
    pub max_gate: Duration,
    /// Plain SHA-256, or keyed with `--hash-key-secret`.
    pub hashing: Hashing,
    /// `--restart-strategy`: how a workload without `wave.pusher.com/restart` gets new config.
    pub restart: Strategy,
    /// `--agent-image`: the image of the agent that restarting in place adds; none turns it off.
    pub agent_image: Option<String>,
}

/// Decides what to write to `workload`, given its references and the content of those that exist.
pub fn plan(workload: &Workload, refs: &References, fetched: &Fetched, policy: &Policy) -> Plan {
    if workload.has_held_pods() {
        return Plan::DeleteHeldPods;
    }
    let restore_scheduler = workload.wave_gate().map(|s| {
        if s.is_empty() {
            names::DEFAULT_SCHEDULER.to_string()
        } else {
            s.to_string()
        }
    });
    let release = |reason| {
        workload.has_scheduling_gate().then(|| GateRelease {
            remaining: workload
                .template
                .scheduling_gates()
                .iter()
                .filter(|g| *g != names::SCHEDULING_GATE)
                .cloned()
                .collect(),
            reason,
            delete_held_pods: !workload.id.kind.info().replaces_held_pods,
        })
    };
    if !workload.is_opted_in() {
        let release_gate = release(GateReason::OptedOut);
        return if restore_scheduler.is_none() && release_gate.is_none() {
            Plan::Noop
        } else {
            Plan::Write(Write {
                hash: None,
                restore_scheduler,
                release_gate,
                mark_gated_at: None,
                rollout: None,
                unpin: false,
                ..Default::default()
            })
        };
    }
    let missing = hash::missing(refs, fetched);
    if !missing.is_empty() {
        if !workload.has_scheduling_gate() {
            return Plan::Blocked {
                missing,
                recheck_after: None,
            };
        }
        // A gate without a readable start time gets one, now, so that the maximum duration counts from
        // there on every later pass (recomputing "now" each time would never time out).
        let Some(since) = workload.gated_at() else {
            return Plan::Write(Write {
                hash: None,
                restore_scheduler: None,
                release_gate: None,
                mark_gated_at: Some(policy.now),
                rollout: None,
                unpin: false,
                ..Default::default()
            });
        };
        let held = Duration::try_from(policy.now.duration_since(since)).unwrap_or_default();
        return match policy.max_gate.checked_sub(held).filter(|left| !left.is_zero()) {
            Some(left) => Plan::Blocked {
                missing,
                recheck_after: Some(left),
            },
            None => Plan::Write(Write {
                hash: None,
                restore_scheduler: None,
                release_gate: release(GateReason::TimedOut),
                mark_gated_at: None,
                rollout: None,
                unpin: false,
                ..Default::default()
            }),
        };
    }
    let new_hash = hash::config_hash(&workload.id.namespace, refs, fetched, &policy.hashing);
    // An undo that wave pinned keeps its hash until the config changes (`undo`).
    let pin = Pin::read(workload);
    let pinned = pin
        .as_ref()
        .is_some_and(|p| p.holds(workload.current_hash(), &new_hash));
    let hash = (!pinned && workload.current_hash() != Some(new_hash.as_str())).then_some(new_hash);
    let release_gate = release(GateReason::ConfigReady);
    if hash.is_none() && restore_scheduler.is_none() && release_gate.is_none() {
        Plan::Noop
    } else {
        Plan::Write(Write {
            unpin: hash.is_some() && pin.is_some(),
            hash,
            restore_scheduler,
            release_gate,
            mark_gated_at: None,
            rollout: None,
            ..Default::default()
        })
    }
}

/// The JSON merge patch for `write` to `workload`. It carries the observed `resourceVersion`, so a write
/// decided on a stale view fails with 409 instead of stamping a hash computed from an old template. The
/// template part goes where the workload's kind keeps its pod template.
pub fn patch_body(workload: &Workload, write: &Write) -> Value {
    let mut body = json!({ "metadata": { "resourceVersion": workload.resource_version } });
    let mut template = json!({});
    match (&write.hash, &write.in_place) {
        (Some(_), Some(record)) => {
            body["metadata"]["annotations"][names::IN_PLACE] = json!(record.render());
        }
        (Some(hash), None) => {
            template["metadata"]["annotations"][names::CONFIG_HASH] = json!(hash);
            if workload.annotations.contains_key(names::IN_PLACE) {
                // The template's hash is the current one again: pods created from it run it.
                body["metadata"]["annotations"][names::IN_PLACE] = Value::Null;
            }
            if let Some(image) = &write.add_agent {
                let agent = inplace::agent_patch(image);
                template["spec"] = agent["spec"].clone();
            }
        }
        (None, _) => {}
    }
    if let Some(scheduler) = &write.restore_scheduler {
        body["metadata"]["annotations"][names::SCHEDULING_DISABLED] = Value::Null;
        template["spec"]["schedulerName"] = json!(scheduler);
    }
    if let Some(release) = &write.release_gate {
        // A merge patch replaces lists whole: write the gates that stay (null removes the field).
        let gates: Vec<Value> = release.remaining.iter().map(|g| json!({ "name": g })).collect();
        template["spec"]["schedulingGates"] = if gates.is_empty() {
            Value::Null
        } else {
            Value::Array(gates)
        };
        if !release.delete_held_pods {
            body["metadata"]["annotations"][names::GATED_AT] = Value::Null;
        }
    }
    if write.unpin {
        body["metadata"]["annotations"][names::PINNED_HASH] = Value::Null;
        body["metadata"]["annotations"][names::PINNED_CONFIG] = Value::Null;
    }
    // An in-place restart's record is its marker: a rollout marker names the next generation, which an
    // in-place write (no template change) never makes, and someone else's rollout would.
    if let Some(marker) = write.rollout.as_ref().filter(|_| write.in_place.is_none()) {
        // The last failure's record and its release stay: they name that rollout's hash and versions,
        // and a halt ends only with a new version of the object or `wave resume`.
        body["metadata"]["annotations"][names::ROLLOUT] = json!(marker);
    }
    if let Some(at) = &write.mark_gated_at {
        body["metadata"]["annotations"][names::GATED_AT] = json!(at.to_string());
    }
    if template != json!({}) {
        // `/spec/template` becomes {"spec": {"template": …}}; the pointer's segments are plain names.
        let mut at = &mut body;
        for segment in workload.id.kind.info().template.split('/').skip(1) {
            at = &mut at[segment];
        }
        *at = template;
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::Content;
    use crate::kind::WorkloadKind;
    use crate::refs::{ConfigKey, ConfigKind, CrossNamespace};
    use crate::workload::testing::deployment;
    use serde_json::json;
    use std::sync::Arc;

    fn policy() -> Policy {
        Policy {
            now: "2026-11-22T12:00:00Z".parse().unwrap(),
            max_gate: Duration::from_secs(600),
            hashing: Hashing::Plain,
            restart: Strategy::Rollout,
            agent_image: None,
        }
    }

    fn plan(w: &Workload, refs: &crate::refs::References, fetched: &Fetched) -> Plan {
        super::plan(w, refs, fetched, &policy())
    }

    fn gated(mut w: Workload, at: &str) -> Workload {
        w.annotations.insert(names::GATED_AT.into(), at.into());
        w.template.edit(|t| {
            t.spec.get_or_insert_with(Default::default).scheduling_gates = Some(vec![
                serde_json::from_value(json!({"name": "other.example/gate"})).unwrap(),
                serde_json::from_value(json!({"name": names::SCHEDULING_GATE})).unwrap(),
            ]);
        });
        w
    }

    fn uses_missing_cm() -> Workload {
        deployment(
            "ns",
            "w",
            &[],
            json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]}),
        )
    }

    #[test]
    fn a_gated_workload_is_released_with_its_hash_once_config_exists() {
        let w = gated(uses_missing_cm(), "2026-11-22T11:59:00Z");
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm");
        let fetched = Fetched::from([(key, Arc::new(Content::default()))]);
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &fetched) else {
            panic!("expected a write")
        };
        assert!(write.hash.is_some());
        let release = write.release_gate.clone().expect("the gate is released");
        assert_eq!(
            (release.remaining, release.reason),
            (vec!["other.example/gate".to_string()], GateReason::ConfigReady)
        );
        let body = patch_body(&w, &write);
        assert_eq!(
            body["spec"]["template"]["spec"]["schedulingGates"],
            json!([{"name": "other.example/gate"}])
        );
        assert_eq!(body["metadata"]["annotations"][names::GATED_AT], Value::Null);
    }

    #[test]
    fn a_released_statefulset_keeps_its_mark_until_the_held_pods_are_deleted() {
        let mut w = gated(uses_missing_cm(), "2026-11-22T11:59:00Z");
        w.id.kind = WorkloadKind::STATEFUL_SET;
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm");
        let fetched = Fetched::from([(key, Arc::new(Content::default()))]);
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &fetched) else {
            panic!("expected a write")
        };
        assert!(write.release_gate.as_ref().is_some_and(|r| r.delete_held_pods));
        let body = patch_body(&w, &write);
        assert_eq!(
            body["metadata"].get("annotations"),
            None,
            "the gated-at mark stays"
        );

        // What the apiserver stores after that write: no gate, the mark still there.
        w.template
            .edit(|t| t.spec.as_mut().unwrap().scheduling_gates = None);
        assert!(w.has_held_pods() && w.needs_reconcile());
        assert_eq!(
            plan(&w, &w.references(CrossNamespace::Deny), &fetched),
            Plan::DeleteHeldPods
        );
        w.annotations.remove(names::GATED_AT);
        assert!(!w.has_held_pods());
        assert_ne!(
            plan(&w, &w.references(CrossNamespace::Deny), &fetched),
            Plan::DeleteHeldPods
        );
    }

    #[test]
    fn a_gated_workload_stays_blocked_until_the_gate_times_out() {
        let w = gated(uses_missing_cm(), "2026-11-22T11:59:00Z");
        let p = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new());
        let Plan::Blocked { recheck_after, .. } = p else {
            panic!("expected blocked, got {p:?}")
        };
        assert_eq!(
            recheck_after,
            Some(Duration::from_secs(540)),
            "10 min gate, held 1 min"
        );
        let w = gated(uses_missing_cm(), "2026-11-22T11:50:00Z");
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()) else {
            panic!("expected a write")
        };
        assert_eq!(write.hash, None, "a timed-out gate is released without a hash");
        assert_eq!(write.release_gate.map(|r| r.reason), Some(GateReason::TimedOut));
    }

    #[test]
    fn opting_out_releases_the_gate() {
        let mut w = gated(uses_missing_cm(), "2026-11-22T11:59:00Z");
        w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
        assert!(
            w.needs_reconcile(),
            "a gated workload needs a reconcile even when opted out"
        );
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()) else {
            panic!("expected a write")
        };
        assert_eq!(write.release_gate.map(|r| r.reason), Some(GateReason::OptedOut));
        assert_eq!(write.hash, None);
    }

    const EMPTY_HASH: &str = "100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d";

    fn with_hash(mut w: Workload, hash: &str) -> Workload {
        w.template.edit(|t| {
            t.metadata
                .get_or_insert_with(Default::default)
                .annotations
                .get_or_insert_with(Default::default)
                .insert(names::CONFIG_HASH.into(), hash.into());
        });
        w
    }

    #[test]
    fn a_pinned_undo_keeps_its_hash_until_the_config_changes_and_then_the_pin_goes() {
        let mut w = with_hash(
            deployment("ns", "w", &[], json!({"containers": [{"name": "c"}]})),
            "old",
        );
        w.annotations.insert(names::PINNED_HASH.into(), "old".into());
        w.annotations
            .insert(names::PINNED_CONFIG.into(), EMPTY_HASH.into());
        assert_eq!(
            plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()),
            Plan::Noop
        );
        w.annotations
            .insert(names::PINNED_CONFIG.into(), "an-earlier-config".into());
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()) else {
            panic!("a config change since the pin rolls")
        };
        assert_eq!(write.hash.as_deref(), Some(EMPTY_HASH));
        assert!(write.unpin);
        let body = patch_body(&w, &write);
        assert!(body["metadata"]["annotations"][names::PINNED_HASH].is_null());
    }

    #[test]
    fn new_opted_in_workload_gets_the_hash() {
        let w = deployment("ns", "w", &[], json!({"containers": [{"name": "c"}]}));
        let p = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new());
        assert_eq!(
            p,
            Plan::Write(Write {
                hash: Some(EMPTY_HASH.into()),
                restore_scheduler: None,
                release_gate: None,
                mark_gated_at: None,
                rollout: None,
                unpin: false,
                ..Default::default()
            })
        );
    }

    #[test]
    fn unchanged_hash_is_a_noop() {
        let w = with_hash(
            deployment("ns", "w", &[], json!({"containers": [{"name": "c"}]})),
            EMPTY_HASH,
        );
        assert_eq!(
            plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()),
            Plan::Noop
        );
    }

    #[test]
    fn missing_required_config_blocks_the_write() {
        let w = deployment(
            "ns",
            "w",
            &[],
            json!({"containers": [
            {"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]}),
        );
        let p = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new());
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm");
        assert_eq!(
            p,
            Plan::Blocked {
                missing: vec![Missing::Object(key.clone())],
                recheck_after: None
            }
        );
        let fetched = Fetched::from([(key, Arc::new(Content::default()))]);
        assert!(matches!(
            plan(&w, &w.references(CrossNamespace::Deny), &fetched),
            Plan::Write(_)
        ));
    }

    #[test]
    fn wave_gated_workload_is_restored_with_the_hash_in_one_write() {
        let w = deployment(
            "ns",
            "w",
            &[(names::SCHEDULING_DISABLED, "my-scheduler")],
            json!({
            "schedulerName": names::INVALID_SCHEDULER, "containers": [{"name": "c"}]}),
        );
        let expected = Write {
            hash: Some(EMPTY_HASH.into()),
            restore_scheduler: Some("my-scheduler".into()),
            release_gate: None,
            mark_gated_at: None,
            rollout: None,
            unpin: false,
            ..Default::default()
        };
        assert_eq!(
            plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()),
            Plan::Write(expected)
        );
    }

    #[test]
    fn opted_out_wave_gated_workload_is_restored_without_touching_the_hash() {
        let w = deployment(
            "ns",
            "w",
            &[
                (names::UPDATE_ON_CONFIG_CHANGE, "false"),
                (names::SCHEDULING_DISABLED, ""),
            ],
            json!({"containers": [{"name": "c"}]}),
        );
        let expected = Write {
            hash: None,
            restore_scheduler: Some(names::DEFAULT_SCHEDULER.into()),
            release_gate: None,
            mark_gated_at: None,
            rollout: None,
            unpin: false,
            ..Default::default()
        };
        assert_eq!(
            plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()),
            Plan::Write(expected)
        );
    }

    #[test]
    fn opted_out_workload_is_never_written() {
        let w = deployment(
            "ns",
            "w",
            &[(names::UPDATE_ON_CONFIG_CHANGE, "False")],
            json!({"containers": []}),
        );
        assert_eq!(
            plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()),
            Plan::Noop
        );
    }

    fn at_version(resource_version: &str) -> Workload {
        let mut w = deployment("ns", "w", &[], json!({"containers": []}));
        w.resource_version = resource_version.into();
        w
    }

    #[test]
    fn a_gate_without_a_readable_start_gets_one_and_then_times_out_from_it() {
        let mut w = gated(uses_missing_cm(), "not a time");
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()) else {
            panic!("expected the mark to be written")
        };
        let now = policy().now;
        assert_eq!(
            write,
            Write {
                hash: None,
                restore_scheduler: None,
                release_gate: None,
                mark_gated_at: Some(now),
                rollout: None,
                unpin: false,
                ..Default::default()
            }
        );
        let body = patch_body(&w, &write);
        assert_eq!(
            body["metadata"]["annotations"][names::GATED_AT],
            json!(now.to_string())
        );
        assert_eq!(body.get("spec"), None, "the template is not touched: no rollout");
        // Once marked, the gate times out from that mark.
        w.annotations
            .insert(names::GATED_AT.into(), "2026-11-22T11:50:00Z".into());
        let Plan::Write(write) = plan(&w, &w.references(CrossNamespace::Deny), &Fetched::new()) else {
            panic!("expected the gate to be released")
        };
        assert_eq!(write.release_gate.map(|r| r.reason), Some(GateReason::TimedOut));
    }

    #[test]
    fn patch_touches_only_the_hash_and_carries_the_resource_version() {
        let body = patch_body(
            &at_version("7"),
            &Write {
                hash: Some("h".into()),
                restore_scheduler: None,
                release_gate: None,
                mark_gated_at: None,
                rollout: None,
                unpin: false,
                ..Default::default()
            },
        );
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7"},
                   "spec": {"template": {"metadata": {"annotations": {(names::CONFIG_HASH): "h"}}}}})
        );
    }

    #[test]
    fn restoring_patch_removes_the_gate_annotation_and_sets_the_scheduler() {
        let body = patch_body(
            &at_version("7"),
            &Write {
                hash: None,
                restore_scheduler: Some("default-scheduler".into()),
                release_gate: None,
                mark_gated_at: None,
                rollout: None,
                unpin: false,
                ..Default::default()
            },
        );
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7", "annotations": {(names::SCHEDULING_DISABLED): null}},
                   "spec": {"template": {"spec": {"schedulerName": "default-scheduler"}}}})
        );
    }

    #[test]
    fn an_in_place_write_carries_its_record_and_no_rollout_marker_or_template_hash() {
        let record = Record::new(
            "h2",
            "2026-11-22T12:00:00Z".parse().unwrap(),
            Default::default(),
            None,
        );
        let body = patch_body(
            &at_version("7"),
            &Write {
                hash: Some("h2".into()),
                rollout: Some("a marker".into()),
                in_place: Some(Box::new(record.clone())),
                ..Default::default()
            },
        );
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7", "annotations": {(names::IN_PLACE): record.render()}}})
        );
    }
}
