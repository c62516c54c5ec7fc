//! What the admission webhook does to a workload being created or updated, and the JSON patch for it.
//!
//! ```text
//! Workload + References + Fetched + operation ─► decide() ─► Mutation::{None, SetHash, Gate}
//!                                                                 └─► patch_ops() ─► RFC 6902 operations
//! ```
//!
//! The same discovery, required check and hash as the reconciler. On CREATE with required config
//! missing, the pods are held by the scheduling gate `wave.pusher.com/config` (they show as
//! `SchedulingGated`) and the time is noted, so the reconciler can release the gate when the config
//! appears, on opt-out, or after the maximum gate duration. On UPDATE nothing is gated (Wave's rule).

use serde_json::{Value, json};

use super::hash::{self, Fetched, Hashing, Missing};
use super::inplace::{self, Strategy};
use super::refs::References;
use super::undo::Pin;
use super::workload::Workload;
use crate::names;

/// Whether the request is a CREATE or an UPDATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE.
    Update,
}

/// What to change in the admitted object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Admit it as it is.
    None,
    /// Set the config hash on the pod template.
    SetHash(String),
    /// Hold the pods until this missing config exists.
    Gate {
        /// What is missing.
        missing: Vec<Missing>,
    },
}

/// Decides the mutation of an admitted workload.
pub fn decide(
    workload: &Workload,
    refs: &References,
    fetched: &Fetched,
    operation: Operation,
    hashing: &Hashing,
) -> Mutation {
    if !workload.is_opted_in() {
        return Mutation::None;
    }
    let missing = hash::missing(refs, fetched);
    if !missing.is_empty() {
        return match operation {
            Operation::Create if !workload.has_scheduling_gate() => Mutation::Gate { missing },
            _ => Mutation::None,
        };
    }
    // A workload that restarts in place gets a config change from the controller, pod by pod: a hash
    // on its template here would roll it (its annotation tells; `--restart-strategy` is the
    // controller's). A template still without the agent gets its first hash, or rolls, as any other.
    if operation == Operation::Update
        && Strategy::of(workload, Strategy::Rollout).0 == Strategy::InPlace
        && inplace::has_agent(&workload.template)
    {
        return Mutation::None;
    }
    let new_hash = hash::config_hash(&workload.id.namespace, refs, fetched, hashing);
    let pinned = Pin::read(workload).is_some_and(|p| p.holds(workload.current_hash(), &new_hash));
    if pinned || workload.current_hash() == Some(new_hash.as_str()) {
        // A pinned undo keeps its hash through any update until the config changes (`undo`).
        Mutation::None
    } else {
        Mutation::SetHash(new_hash)
    }
}

/// On UPDATE, gives the admitted template the config hash the stored object carries when the update
/// dropped it (a `helm upgrade` or `kubectl apply` renders the template without wave's annotation):
/// a dropped hash is not a config change. Returns the hash carried over, if any.
pub fn carry_hash(workload: &mut Workload, stored: Option<&str>) -> Option<String> {
    let stored = stored?;
    // The template's own hash: an in-place record (`Workload::current_hash`) is not on the template.
    if workload.template_hash().is_some() {
        return None;
    }
    workload.template.set_annotation(names::CONFIG_HASH, stored);
    Some(stored.to_string())
}

/// The mutation on UPDATE once the rollout decision (`decide`) is known: the controller's holds apply
/// to the webhook too. A rollout that may not roll now keeps the hash the object had (`carried` puts
/// back one the update dropped); the controller rolls it when it may.
pub fn on_update(mutation: Mutation, may_roll: bool, carried: Option<String>) -> Mutation {
    match mutation {
        Mutation::SetHash(_) if !may_roll => carried.map_or(Mutation::None, Mutation::SetHash),
        Mutation::None => carried.map_or(Mutation::None, Mutation::SetHash),
        other => other,
    }
}

/// The operation that writes the rollout marker (`pace::Marker`) with a rollout the webhook admits
/// while pacing is on, so that pacing counts it. Opted-in workloads always carry annotations.
pub fn marker_op(marker: &str) -> Value {
    let path = format!("/metadata/annotations/{}", escape(names::ROLLOUT));
    json!({"op": "add", "path": path, "value": marker})
}

/// `~` and `/` escaped for a JSON pointer (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The RFC 6902 operations that apply `mutation` to `workload`; `now` is the gate's start (RFC 3339).
pub fn patch_ops(workload: &Workload, mutation: &Mutation, now: &str) -> Vec<Value> {
    // Where the kind keeps its pod template (`/spec/template` for the apps kinds).
    let template = workload.id.kind.info().template;
    match mutation {
        Mutation::None => Vec::new(),
        Mutation::SetHash(hash) => {
            let meta = workload.template.typed().metadata;
            let meta = meta.as_ref();
            if meta.is_none() {
                vec![json!({"op": "add", "path": format!("{template}/metadata"),
                            "value": {"annotations": {(names::CONFIG_HASH): hash}}})]
            } else if meta.and_then(|m| m.annotations.as_ref()).is_none() {
                vec![
                    json!({"op": "add", "path": format!("{template}/metadata/annotations"),
                            "value": {(names::CONFIG_HASH): hash}}),
                ]
            } else {
                let path = format!("{template}/metadata/annotations/{}", escape(names::CONFIG_HASH));
                vec![json!({"op": "add", "path": path, "value": hash})]
            }
        }
        Mutation::Gate { .. } => {
            let gate = json!({"name": names::SCHEDULING_GATE});
            let has_gates = workload
                .template
                .typed()
                .spec
                .and_then(|s| s.scheduling_gates)
                .is_some();
            let gate_op = if has_gates {
                json!({"op": "add", "path": format!("{template}/spec/schedulingGates/-"), "value": gate})
            } else {
                json!({"op": "add", "path": format!("{template}/spec/schedulingGates"), "value": [gate]})
            };
            // Opted-in workloads always carry annotations: the opt-in is one.
            let path = format!("/metadata/annotations/{}", escape(names::GATED_AT));
            vec![gate_op, json!({"op": "add", "path": path, "value": now})]
        }
    }
}

#[cfg(test)]
mod update_tests {
    use super::*;
    use crate::workload::testing::deployment;

    #[test]
    fn an_update_that_drops_the_hash_gets_the_stored_one_back() {
        let mut w = deployment("ns", "w", &[], json!({"containers": []}));
        assert_eq!(carry_hash(&mut w, Some("h1")), Some("h1".into()));
        assert_eq!(w.current_hash(), Some("h1"));
        assert_eq!(
            carry_hash(&mut w, Some("h0")),
            None,
            "a template with a hash keeps its own"
        );
        assert_eq!(carry_hash(&mut w, None), None);
    }

    #[test]
    fn a_held_rollout_keeps_the_hash_the_object_had() {
        let set = || Mutation::SetHash("h2".into());
        assert_eq!(on_update(set(), true, Some("h1".into())), set());
        assert_eq!(
            on_update(set(), false, Some("h1".into())),
            Mutation::SetHash("h1".into()),
            "the dropped hash is put back, not the held one"
        );
        assert_eq!(on_update(set(), false, None), Mutation::None);
        assert_eq!(
            on_update(Mutation::None, true, Some("h1".into())),
            Mutation::SetHash("h1".into())
        );
        let op = marker_op("{}");
        assert_eq!(op["path"], "/metadata/annotations/wave.pusher.com~1rollout");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::Content;
    use crate::refs::{ConfigKey, ConfigKind, CrossNamespace};
    use crate::workload::testing::deployment;
    use std::sync::Arc;

    fn uses_cm() -> Workload {
        deployment(
            "ns",
            "w",
            &[],
            json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]}),
        )
    }

    fn present() -> Fetched {
        Fetched::from([(
            ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm"),
            Arc::new(Content::default()),
        )])
    }

    /// Applies the operations to the workload's JSON, as the apiserver would.
    fn apply(w: &Workload, ops: Vec<Value>) -> Value {
        let mut doc =
            json!({"metadata": {"annotations": w.annotations}, "spec": {"template": w.template.typed()}});
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        json_patch::patch(&mut doc, &patch).expect("the operations apply");
        doc
    }

    #[test]
    fn existing_config_sets_the_hash_at_admission() {
        let w = uses_cm();
        let m = decide(
            &w,
            &w.references(CrossNamespace::Deny),
            &present(),
            Operation::Create,
            &Hashing::Plain,
        );
        let Mutation::SetHash(hash) = &m else {
            panic!("{m:?}")
        };
        let doc = apply(&w, patch_ops(&w, &m, "t"));
        assert_eq!(
            doc["spec"]["template"]["metadata"]["annotations"][names::CONFIG_HASH],
            json!(hash)
        );
    }

    #[test]
    fn an_update_of_a_workload_that_restarts_in_place_gets_no_hash_once_its_template_has_the_agent() {
        let annotations = [(names::RESTART, "in-place")];
        let agent = serde_json::to_value(inplace::agent_container("wave:1")).unwrap();
        let volume = serde_json::to_value(inplace::agent_volume()).unwrap();
        let with_agent = json!({"containers": [
            {"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}, agent], "volumes": [volume]});
        let w = deployment("ns", "w", &annotations, with_agent);
        let refs = w.references(CrossNamespace::Deny);
        let update = decide(&w, &refs, &present(), Operation::Update, &Hashing::Plain);
        assert_eq!(update, Mutation::None, "the controller restarts it in place");
        let create = decide(&w, &refs, &present(), Operation::Create, &Hashing::Plain);
        assert!(
            matches!(create, Mutation::SetHash(_)),
            "its first hash: {create:?}"
        );
        let mut without_agent = uses_cm();
        without_agent
            .annotations
            .insert(names::RESTART.into(), "in-place".into());
        let refs = without_agent.references(CrossNamespace::Deny);
        let update = decide(
            &without_agent,
            &refs,
            &present(),
            Operation::Update,
            &Hashing::Plain,
        );
        assert!(matches!(update, Mutation::SetHash(_)), "no agent yet: {update:?}");
    }

    #[test]
    fn missing_config_gates_on_create_only() {
        let w = uses_cm();
        let m = decide(
            &w,
            &w.references(CrossNamespace::Deny),
            &Fetched::new(),
            Operation::Create,
            &Hashing::Plain,
        );
        assert!(matches!(m, Mutation::Gate { .. }));
        let doc = apply(&w, patch_ops(&w, &m, "2026-11-22T12:00:00Z"));
        assert_eq!(
            doc["spec"]["template"]["spec"]["schedulingGates"],
            json!([{"name": names::SCHEDULING_GATE}])
        );
        assert_eq!(
            doc["metadata"]["annotations"][names::GATED_AT],
            json!("2026-11-22T12:00:00Z")
        );
        assert_eq!(
            decide(
                &w,
                &w.references(CrossNamespace::Deny),
                &Fetched::new(),
                Operation::Update,
                &Hashing::Plain
            ),
            Mutation::None
        );
    }

    #[test]
    fn the_gate_is_appended_to_existing_gates() {
        let mut w = uses_cm();
        w.template.edit(|t| {
            t.spec.as_mut().unwrap().scheduling_gates =
                Some(vec![serde_json::from_value(json!({"name": "other"})).unwrap()]);
        });
        let m = decide(
            &w,
            &w.references(CrossNamespace::Deny),
            &Fetched::new(),
            Operation::Create,
            &Hashing::Plain,
        );
        let doc = apply(&w, patch_ops(&w, &m, "t"));
        assert_eq!(
            doc["spec"]["template"]["spec"]["schedulingGates"],
            json!([{"name": "other"}, {"name": names::SCHEDULING_GATE}])
        );
    }

    #[test]
    fn workloads_not_opted_in_or_already_hashed_are_admitted_unchanged() {
        let mut w = uses_cm();
        w.annotations
            .insert(names::UPDATE_ON_CONFIG_CHANGE.into(), "no".into());
        assert_eq!(
            decide(
                &w,
                &w.references(CrossNamespace::Deny),
                &present(),
                Operation::Create,
                &Hashing::Plain
            ),
            Mutation::None
        );
        let w = uses_cm();
        let Mutation::SetHash(hash) = decide(
            &w,
            &w.references(CrossNamespace::Deny),
            &present(),
            Operation::Update,
            &Hashing::Plain,
        ) else {
            panic!()
        };
        let mut hashed = w.clone();
        hashed.template.edit(|t| {
            t.metadata.get_or_insert_with(Default::default).annotations =
                Some([(names::CONFIG_HASH.to_string(), hash)].into());
        });
        assert_eq!(
            decide(
                &hashed,
                &hashed.references(CrossNamespace::Deny),
                &present(),
                Operation::Update,
                &Hashing::Plain
            ),
            Mutation::None
        );
    }
}
