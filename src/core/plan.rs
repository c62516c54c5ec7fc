//! The decision of what to write to one workload, and the exact patch that writes it.
//!
//! ```text
//! Workload + References + Fetched ─► plan() ─► Noop | Blocked { missing } | Write { hash, restore }
//!                                                                             │
//!                                                       patch_body(rv, write) ◄┘  (JSON merge patch)
//! ```
//!
//! Wave's rules (`wave-behaviour.md` §6): write only when the hash differs or scheduling must be restored;
//! a missing required object or key blocks the write. Fix W8: a workload that Wave gated and that opted
//! out is still restored, so its pods cannot be stranded.

use serde_json::{Value, json};

use super::hash::{self, Fetched, Missing};
use super::refs::References;
use super::workload::Workload;
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
    },
    /// Write this.
    Write(Write),
}

/// The content of one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The new config hash, when it changes.
    pub hash: Option<String>,
    /// Restore Wave's scheduling gate: the original scheduler to put back.
    pub restore_scheduler: Option<String>,
}

/// Decides what to write to `workload`, given its references and the content of those that exist.
pub fn plan(workload: &Workload, refs: &References, fetched: &Fetched) -> Plan {
    let restore_scheduler = workload.wave_gate().map(|s| {
        if s.is_empty() {
            names::DEFAULT_SCHEDULER.to_string()
        } else {
            s.to_string()
        }
    });
    if !workload.is_opted_in() {
        return match restore_scheduler {
            Some(_) => Plan::Write(Write {
                hash: None,
                restore_scheduler,
            }),
            None => Plan::Noop,
        };
    }
    let missing = hash::missing(refs, fetched);
    if !missing.is_empty() {
        return Plan::Blocked { missing };
    }
    let new_hash = hash::config_hash(&workload.id.namespace, refs, fetched);
    let hash = (workload.current_hash() != Some(new_hash.as_str())).then_some(new_hash);
    if hash.is_none() && restore_scheduler.is_none() {
        Plan::Noop
    } else {
        Plan::Write(Write {
            hash,
            restore_scheduler,
        })
    }
}

/// The JSON merge patch for `write`. It carries the observed `resourceVersion`, so a write decided on a
/// stale view fails with 409 instead of stamping a hash computed from an old template.
pub fn patch_body(resource_version: &str, write: &Write) -> Value {
    let mut body = json!({ "metadata": { "resourceVersion": resource_version } });
    if let Some(hash) = &write.hash {
        body["spec"]["template"]["metadata"]["annotations"][names::CONFIG_HASH] = json!(hash);
    }
    if let Some(scheduler) = &write.restore_scheduler {
        body["metadata"]["annotations"][names::SCHEDULING_DISABLED] = Value::Null;
        body["spec"]["template"]["spec"]["schedulerName"] = json!(scheduler);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hash::Content;
    use crate::core::refs::{ConfigKey, ConfigKind};
    use crate::core::workload::testing::deployment;
    use serde_json::json;
    use std::sync::Arc;

    const EMPTY_HASH: &str = "100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d";

    fn with_hash(mut w: Workload, hash: &str) -> Workload {
        let meta = w.template.metadata.get_or_insert_with(Default::default);
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(names::CONFIG_HASH.into(), hash.into());
        w
    }

    #[test]
    fn new_opted_in_workload_gets_the_hash() {
        let w = deployment("ns", "w", &[], json!({"containers": [{"name": "c"}]}));
        let p = plan(&w, &w.references(), &Fetched::new());
        assert_eq!(
            p,
            Plan::Write(Write {
                hash: Some(EMPTY_HASH.into()),
                restore_scheduler: None
            })
        );
    }

    #[test]
    fn unchanged_hash_is_a_noop() {
        let w = with_hash(
            deployment("ns", "w", &[], json!({"containers": [{"name": "c"}]})),
            EMPTY_HASH,
        );
        assert_eq!(plan(&w, &w.references(), &Fetched::new()), Plan::Noop);
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
        let p = plan(&w, &w.references(), &Fetched::new());
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm");
        assert_eq!(
            p,
            Plan::Blocked {
                missing: vec![Missing::Object(key.clone())]
            }
        );
        let fetched = Fetched::from([(key, Arc::new(Content::default()))]);
        assert!(matches!(plan(&w, &w.references(), &fetched), Plan::Write(_)));
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
        };
        assert_eq!(plan(&w, &w.references(), &Fetched::new()), Plan::Write(expected));
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
        };
        assert_eq!(plan(&w, &w.references(), &Fetched::new()), Plan::Write(expected));
    }

    #[test]
    fn opted_out_workload_is_never_written() {
        let w = deployment(
            "ns",
            "w",
            &[(names::UPDATE_ON_CONFIG_CHANGE, "False")],
            json!({"containers": []}),
        );
        assert_eq!(plan(&w, &w.references(), &Fetched::new()), Plan::Noop);
    }

    #[test]
    fn patch_touches_only_the_hash_and_carries_the_resource_version() {
        let body = patch_body(
            "7",
            &Write {
                hash: Some("h".into()),
                restore_scheduler: None,
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
            "7",
            &Write {
                hash: None,
                restore_scheduler: Some("default-scheduler".into()),
            },
        );
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7", "annotations": {(names::SCHEDULING_DISABLED): null}},
                   "spec": {"template": {"spec": {"schedulerName": "default-scheduler"}}}})
        );
    }
}
