//! The marks to write for one workload ([`plan`] ─► [`Decision`]): level-triggered, each target's SHA-1
//! now against the one the workload carries, or else the one wave saw before ([`Seen`]).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::PodSpec;
use serde::Serialize;

use super::{EMPTY_SHA, Lifecycle, Options, SinceCreation, Strategy, Target, env_var_name, sha, type_name};
use crate::hash::Fetched;
use crate::names::reloader as names;
use crate::refs::ConfigKey;
use crate::workload::{Workload, WorkloadRef};

/// What a workload's pods started with when that is data wave never read: equal to no SHA-1.
const UNSEEN: &str = "";

/// What `last-reloaded-from` holds: Reloader's `ReloadSource`, with its fields in Reloader's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadSource {
    /// `CONFIGMAP` or `SECRET`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
    /// Its SHA-1 when the reload was written.
    pub hash: String,
    /// The container that uses it.
    pub container_refs: Vec<String>,
    /// When the reload was written (Unix seconds).
    pub observed_at: i64,
}

/// One mark to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Set env var `name` of container `container` to `value` (added at the end when absent).
    EnvVar {
        /// The container.
        container: String,
        /// `STAKATER_<NAME>_<KIND>`.
        name: String,
        /// The object's SHA-1.
        value: String,
    },
    /// Remove env var `name` of container `container` (its object was deleted).
    RemoveEnvVar {
        /// The container.
        container: String,
        /// `STAKATER_<NAME>_<KIND>`.
        name: String,
    },
    /// Set the pod-template annotation `last-reloaded-from` to this source.
    Annotation(ReloadSource),
}

/// What to do for one workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The marks to write (none: nothing changed).
    pub marks: Vec<Mark>,
    /// The objects whose change the marks carry.
    pub changed: Vec<ConfigKey>,
    /// Every target's SHA-1 now: what [`Seen`] records once the marks are written (or at once, if none).
    pub observed: BTreeMap<ConfigKey, String>,
}

fn env_value<'a>(spec: &'a PodSpec, container: &str, name: &str) -> Option<&'a str> {
    spec.containers
        .iter()
        .find(|c| c.name == container)?
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .map(|e| e.value.as_deref().unwrap_or_default())
}

/// The `last-reloaded-from` the pod template carries, if it parses.
pub fn last_reloaded_from(workload: &Workload) -> Option<ReloadSource> {
    let value = workload.template.annotation(names::LAST_RELOADED_FROM)?;
    serde_json::from_str(value).ok()
}

/// Decides the marks for `workload`. For each target that exists: its SHA-1 now is compared with the
/// SHA-1 the workload carries for it, or else with the one wave saw before (`seen`), or else, for a
/// workload wave saw created, with what its pods started with ([`Target::since_creation`]); a target
/// with none of these is only recorded (Reloader writes nothing for an object that has not changed). Objects marked
/// `ignore` (Reloader's or wave's) are recorded, never written. `observed_at` is the time to put in
/// `last-reloaded-from`.
pub fn plan(
    workload: &Workload,
    targets: &[Target],
    fetched: &Fetched,
    options: &Options,
    seen: &BTreeMap<ConfigKey, String>,
    observed_at: i64,
) -> Decision {
    let mut decision = Decision::default();
    let template = workload.template.typed();
    let Some(spec) = template.spec.as_ref() else {
        return decision;
    };
    let last = last_reloaded_from(workload);
    for target in targets {
        let kind = target.key.kind;
        let now = match (fetched.get(&target.key), target.lifecycle) {
            (Some(content), _) if content.ignored || content.reloader_ignored => {
                decision.observed.insert(target.key.clone(), sha(kind, content));
                continue;
            }
            (Some(content), _) => sha(kind, content),
            (None, Lifecycle::Deleted) if options.reload_on_delete => EMPTY_SHA.to_string(),
            (None, _) => continue,
        };
        decision.observed.insert(target.key.clone(), now.clone());
        let carried = match options.strategy {
            // Nothing is ever written under `--webhook-url`, so a mark the workload carries (Reloader's,
            // from before) would post the same change again after every restart: it is no starting point.
            _ if options.notify_only => None,
            _ if target.lifecycle == Lifecycle::Appeared => None,
            Strategy::EnvVars => env_value(spec, &target.container, &env_var_name(kind, &target.key.name)),
            Strategy::Annotations => last
                .as_ref()
                .filter(|l| l.type_ == type_name(kind) && l.name == target.key.name)
                .map(|l| l.hash.as_str()),
        };
        // An object created while wave watched counts as having come from no data.
        let created = options.reload_on_create.then_some(EMPTY_SHA);
        // For a workload wave saw created, what its pods started with (`since.rs`): data written since
        // its creation is not it (`UNSEEN` equals no SHA-1); an object created since came from no data;
        // data written before it is the starting point.
        let started_with = match target.since_creation {
            SinceCreation::Changed => Some(UNSEEN),
            SinceCreation::Created => created,
            SinceCreation::Unchanged => None,
            SinceCreation::Unknown if target.lifecycle == Lifecycle::Created => created,
            SinceCreation::Unknown => None,
        };
        let Some(before) = carried
            .or_else(|| seen.get(&target.key).map(String::as_str))
            .or(started_with)
        else {
            continue;
        };
        if before == now {
            continue;
        }
        decision.changed.push(target.key.clone());
        match options.strategy {
            // Deleted: its env var goes, if the workload carries one.
            Strategy::EnvVars if now == EMPTY_SHA && fetched.get(&target.key).is_none() => {
                if carried.is_some() {
                    decision.marks.push(Mark::RemoveEnvVar {
                        container: target.container.clone(),
                        name: env_var_name(kind, &target.key.name),
                    });
                }
            }
            Strategy::EnvVars => decision.marks.push(Mark::EnvVar {
                container: target.container.clone(),
                name: env_var_name(kind, &target.key.name),
                value: now,
            }),
            // One annotation names one object: the first change; the others are recorded with it.
            Strategy::Annotations if decision.marks.is_empty() => {
                decision.marks.push(Mark::Annotation(ReloadSource {
                    type_: type_name(kind).to_string(),
                    name: target.key.name.clone(),
                    namespace: target.key.namespace.clone(),
                    hash: now,
                    container_refs: vec![target.container.clone()],
                    observed_at,
                }));
            }
            Strategy::Annotations => {}
        }
    }
    decision
}

/// For each workload opted in through Reloader's annotations, the SHA-1 of each target as wave last saw
/// it (or wrote it): what a target the workload carries no mark for is compared with. In memory only; a
/// restart starts from what the workloads carry (`docs/migrating-from-reloader.md`, "After a restart").
#[derive(Debug, Default)]
pub struct Seen {
    by_workload: HashMap<WorkloadRef, BTreeMap<ConfigKey, String>>,
}

impl Seen {
    /// What was seen for `id`.
    pub fn of(&self, id: &WorkloadRef) -> BTreeMap<ConfigKey, String> {
        self.by_workload.get(id).cloned().unwrap_or_default()
    }

    /// Records `observed` for `id` (targets no longer observed are dropped).
    pub fn record(&mut self, id: &WorkloadRef, observed: BTreeMap<ConfigKey, String>) {
        if observed.is_empty() {
            self.by_workload.remove(id);
        } else {
            self.by_workload.insert(id.clone(), observed);
        }
    }

    /// Forgets a deleted workload.
    pub fn forget(&mut self, id: &WorkloadRef) {
        self.by_workload.remove(id);
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
