//! What Wave ≤ v0.6 left behind, how to recognise it, what to do about it, and the patches that remove
//! it (`docs/migrating-from-wave.md`, "From Wave ≤ v0.6").
//!
//! ```text
//! config object's ownerReferences ─► has_waves_shape (the watch keeps only those uids)
//! workload + the config objects whose Wave-shaped references name its uid
//!   ─► decide(--legacy-wave-cleanup) ─► Nothing | Remove { owned } | Report { owned }
//!   Remove ─► owner_patch per object (only the references Wave wrote), then finalizer_patch
//! ```
//!
//! Wave ≤ v0.6 put the finalizer `wave.pusher.com/finalizer` on each workload it managed and an
//! `ownerReference` to the workload on each ConfigMap and Secret it referenced. With the finalizer and
//! no Wave to remove it, a deleted workload stays Terminating forever; with the owner references, the
//! garbage collector deletes the config together with the workload. Wave v0.7+ removes both (its
//! `deleteOwnerReferencesAndFinalizer`): first the owner references, then the finalizer, so that the
//! workload can never be deleted while its config still belongs to it. wave does the same, but only
//! for what Wave wrote, and only writes config objects when `--legacy-wave-cleanup` allows it.
//!
//! What Wave wrote, from its source (v0.1.0 to v0.6.0 write the same; cited from v0.6.0,
//! <https://github.com/wave-k8s/wave/blob/v0.6.0/pkg/core/owner_references.go>, `getOwnerReference`):
//!
//! ```go
//! metav1.OwnerReference{APIVersion: "apps/v1", Kind: kindOf(obj), Name: obj.GetName(),
//!     UID: obj.GetUID(), BlockOwnerDeletion: &t, Controller: &f}
//! ```
//!
//! `kindOf` is `Deployment`, `StatefulSet` or `DaemonSet`, and `Controller` is a pointer to `false`, so
//! the field is sent and stored as `controller: false` (an `omitempty` pointer is omitted only when
//! nil). Owner references that other tools write differ: the workload controllers' and
//! `metav1.NewControllerRef`'s say `controller: true`; controller-runtime's `SetOwnerReference` leaves
//! `controller` unset. Wave only looked for owned config in the workload's own namespace
//! (`getExistingChildren`, `pkg/core/children.go`).
//!
//! And to whom (`pkg/core/handler.go` at v0.6.0, `handlePodController`): only to workloads that say
//! `wave.pusher.com/update-on-config-change: "true"` (`hasRequiredAnnotation`), and in the same
//! reconcile it added the finalizer (`addFinalizer`) with the hash; it removed both together when the
//! annotation went or the workload was deleted (`handleDelete`, `pkg/core/delete.go`). So a workload
//! Wave managed carries the finalizer, or, if someone removed it by hand, still says Wave's opt-in
//! annotation (a workload that opted out while Wave ran lost its owner references with the finalizer).
//! A workload with neither, such as one annotated only for Stakater Reloader, was never Wave's: its
//! owner references are never touched, whatever their shape.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

use crate::names;
use crate::refs::{self, ConfigKey};
use crate::workload::{Workload, WorkloadKind};

/// The `apiVersion` of every owner reference Wave ≤ v0.6 wrote.
const WAVE_API_VERSION: &str = "apps/v1";

/// The kinds Wave ≤ v0.6 managed, and named in its owner references.
const WAVE_KINDS: [WorkloadKind; 3] = WorkloadKind::BUILT_IN;

/// Whether `r` has the shape of an owner reference Wave ≤ v0.6 wrote, whoever it names: `apps/v1`, a
/// Deployment, StatefulSet or DaemonSet, `controller: false` and `blockOwnerDeletion: true` (see the
/// module docs). The watch keeps only these.
pub fn has_waves_shape(r: &OwnerReference) -> bool {
    r.api_version == WAVE_API_VERSION
        && WAVE_KINDS.iter().any(|k| k.info().kind == r.kind)
        && r.controller == Some(false)
        && r.block_owner_deletion == Some(true)
}

/// Whether Wave ≤ v0.6 can have managed `workload`: a kind it managed, carrying its finalizer or its
/// opt-in annotation (see the module docs).
pub fn may_have_been_waves(workload: &Workload) -> bool {
    WAVE_KINDS.contains(&workload.id.kind)
        && (workload.legacy_finalizer || refs::is_opted_in(&workload.annotations))
}

/// Whether Wave ≤ v0.6 wrote `r`, found on a config object in `namespace`, for `workload`: Wave's shape,
/// naming exactly this workload, from its own namespace, and a workload Wave can have managed.
pub fn wrote(r: &OwnerReference, namespace: &str, workload: &Workload) -> bool {
    has_waves_shape(r)
        && r.uid == workload.uid
        && r.kind == workload.id.kind.info().kind
        && r.name == workload.id.name
        && namespace == workload.id.namespace
        && may_have_been_waves(workload)
}

/// What to do about what Wave ≤ v0.6 left on one workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Wave left nothing on it, or it was never Wave's.
    Nothing,
    /// Remove the owner references Wave wrote on `owned` (if any), then its finalizer (if any). With
    /// nothing owned, removing the finalizer orphans nothing, so it is done without
    /// `--legacy-wave-cleanup` too: wave patches workloads anyway.
    Remove {
        /// The config objects to remove its owner references from.
        owned: Vec<ConfigKey>,
    },
    /// Without `--legacy-wave-cleanup`, config objects are not written: leave everything (the
    /// finalizer too, which keeps the config from being deleted with the workload) and say so.
    Report {
        /// The config objects that still carry its owner references.
        owned: Vec<ConfigKey>,
    },
}

/// What to do for `workload`, given the config objects whose Wave-shaped owner references name its
/// uid (`owned`, from the watch) and whether config objects may be written (`cleanup`).
pub fn decide(workload: &Workload, mut owned: Vec<ConfigKey>, cleanup: bool) -> Action {
    if !may_have_been_waves(workload) {
        return Action::Nothing;
    }
    owned.retain(|k| k.namespace == workload.id.namespace);
    owned.sort();
    match (owned.is_empty(), workload.legacy_finalizer, cleanup) {
        (true, false, _) => Action::Nothing,
        (true, true, _) | (false, _, true) => Action::Remove { owned },
        (false, _, false) => Action::Report { owned },
    }
}

/// What could not be removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftover<'a> {
    /// The owner references Wave wrote on these config objects (the finalizer, if any, stays with them).
    OwnerReferences(&'a [ConfigKey]),
    /// The finalizer (the owner references are gone).
    Finalizer,
}

impl std::fmt::Display for Leftover<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leftover::OwnerReferences([one]) => write!(f, "owner reference on {one}"),
            Leftover::OwnerReferences(keys) => write!(f, "owner references on {}", list(keys)),
            Leftover::Finalizer => write!(f, "finalizer {}", names::LEGACY_FINALIZER),
        }
    }
}

/// What keeping Wave's owner references means for `workload`, in words.
fn consequence(workload: &Workload) -> &'static str {
    if workload.legacy_finalizer {
        "Its finalizer wave.pusher.com/finalizer stays until they are removed, so deleting it does not delete that config (it stays Terminating instead, unless deleted with --cascade=foreground)"
    } else {
        "Until they are removed, deleting it deletes that config too"
    }
}

/// The note of the `Warning LegacyWaveLeft` Event: Wave left owner references to `workload` on
/// `owned`, which stay without `--legacy-wave-cleanup`. The objects come last: an Event's note is cut at
/// 1 KiB, and what to do must survive.
pub fn left_note(workload: &Workload, owned: &[ConfigKey]) -> String {
    format!(
        "Wave v0.6 left owner references to this {} on its config, which wave removes only with --legacy-wave-cleanup (chart value rbac.legacyWaveCleanup=true; see docs/migrating-from-wave.md). {}. Left on: {}.",
        workload.id.kind.info().kind,
        consequence(workload),
        list(owned),
    )
}

/// The note of the `Warning LegacyWaveCleanupFailed` Event: `left` could not be removed (`error`).
pub fn failed_note(workload: &Workload, left: Leftover<'_>, error: &str) -> String {
    match left {
        Leftover::OwnerReferences(keys) => format!(
            "Could not remove Wave v0.6's owner references to this {}: {error}. Removing them needs patch on configmaps and secrets (chart value rbac.legacyWaveCleanup=true; see docs/migrating-from-wave.md). {}. Left on: {}.",
            workload.id.kind.info().kind,
            consequence(workload),
            list(keys),
        ),
        Leftover::Finalizer => format!(
            "Could not remove Wave v0.6's {left}: {error}. Until it is removed, deleting this workload leaves it Terminating; see docs/migrating-from-wave.md."
        ),
    }
}

fn list(keys: &[ConfigKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The merge patch that removes the owner references Wave ≤ v0.6 wrote for `workload` from a config
/// object (every other owner reference stays), guarded by its resourceVersion; `None` when it has none.
pub fn owner_patch(meta: &ObjectMeta, workload: &Workload) -> Option<Value> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let kept: Vec<_> = refs.iter().filter(|r| !wrote(r, namespace, workload)).collect();
    (kept.len() < refs.len()).then(|| {
        json!({"metadata": {
            "resourceVersion": meta.resource_version,
            // A merge patch replaces a list whole; null removes the field.
            "ownerReferences": if kept.is_empty() { Value::Null } else { json!(kept) },
        }})
    })
}

/// The merge patch that removes Wave's finalizer from a workload, guarded by its resourceVersion; `None`
/// when it has none.
pub fn finalizer_patch(meta: &ObjectMeta) -> Option<Value> {
    let all = meta.finalizers.as_deref().unwrap_or_default();
    let kept: Vec<&String> = all.iter().filter(|f| *f != names::LEGACY_FINALIZER).collect();
    (kept.len() < all.len()).then(|| {
        json!({"metadata": {
            "resourceVersion": meta.resource_version,
            "finalizers": if kept.is_empty() { Value::Null } else { json!(kept) },
        }})
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::ConfigKind;
    use crate::workload::testing::deployment;

    fn meta(v: Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap()
    }

    /// An owner reference exactly as Wave v0.6's `getOwnerReference` wrote it.
    fn waves(kind: &str, name: &str, uid: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
               "controller": false, "blockOwnerDeletion": true})
    }

    fn owner(v: Value) -> OwnerReference {
        serde_json::from_value(v).unwrap()
    }

    /// Deployment ns/web (uid `uid-web`): with Wave's finalizer and its opt-in annotation as asked.
    fn web(finalizer: bool, opted_in: bool) -> Workload {
        let mut w = deployment("ns", "web", &[], json!({"containers": []}));
        w.legacy_finalizer = finalizer;
        if !opted_in {
            w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
        }
        w
    }

    fn cm(name: &str) -> ConfigKey {
        ConfigKey::new(ConfigKind::ConfigMap, "ns", name)
    }

    #[test]
    fn only_the_shape_wave_wrote_is_recognised() {
        assert!(has_waves_shape(&owner(waves("Deployment", "web", "u"))));
        assert!(has_waves_shape(&owner(waves("StatefulSet", "db", "u"))));
        assert!(has_waves_shape(&owner(waves("DaemonSet", "agent", "u"))));
        let unlike = |change: Value| {
            let mut r = waves("Deployment", "web", "u");
            r.as_object_mut()
                .unwrap()
                .extend(change.as_object().unwrap().clone());
            !has_waves_shape(&owner(r))
        };
        assert!(unlike(json!({"controller": true})), "a controller reference");
        assert!(
            unlike(json!({"controller": null})),
            "controller-runtime's SetOwnerReference"
        );
        assert!(unlike(json!({"blockOwnerDeletion": false})));
        assert!(unlike(json!({"blockOwnerDeletion": null})));
        assert!(unlike(json!({"apiVersion": "extensions/v1beta1"})));
        assert!(unlike(json!({"kind": "CronJob", "apiVersion": "batch/v1"})));
        assert!(unlike(json!({"kind": "ReplicaSet"})));
    }

    #[test]
    fn wave_wrote_only_references_naming_the_workload_from_its_namespace_if_it_can_have_managed_it() {
        let w = web(true, true);
        assert!(wrote(&owner(waves("Deployment", "web", "uid-web")), "ns", &w));
        assert!(
            !wrote(&owner(waves("Deployment", "web", "uid-other")), "ns", &w),
            "another uid"
        );
        assert!(
            !wrote(&owner(waves("Deployment", "other", "uid-web")), "ns", &w),
            "another name"
        );
        assert!(
            !wrote(&owner(waves("StatefulSet", "web", "uid-web")), "ns", &w),
            "another kind"
        );
        assert!(
            !wrote(&owner(waves("Deployment", "web", "uid-web")), "other", &w),
            "another namespace"
        );
        // The finalizer removed by hand: Wave's opt-in annotation is what is left of its management.
        assert!(wrote(
            &owner(waves("Deployment", "web", "uid-web")),
            "ns",
            &web(false, true)
        ));
        // Opted out while Wave was gone: the finalizer says Wave managed it.
        assert!(wrote(
            &owner(waves("Deployment", "web", "uid-web")),
            "ns",
            &web(true, false)
        ));
        // Neither (only Reloader's annotations, say): never Wave's, whatever the shape.
        let mut reloader = web(false, false);
        reloader
            .annotations
            .insert("reloader.stakater.com/auto".into(), "true".into());
        assert!(!wrote(
            &owner(waves("Deployment", "web", "uid-web")),
            "ns",
            &reloader
        ));
        assert!(!may_have_been_waves(&reloader));
    }

    #[test]
    fn the_cleanup_writes_config_only_when_allowed_and_never_drops_the_finalizer_before_the_config_is_free() {
        let owned = vec![
            cm("b"),
            cm("a"),
            ConfigKey::new(ConfigKind::Secret, "elsewhere", "x"),
        ];
        let sorted = vec![cm("a"), cm("b")];
        assert_eq!(
            decide(&web(true, true), owned.clone(), true),
            Action::Remove {
                owned: sorted.clone()
            },
            "objects outside its namespace were not Wave's"
        );
        assert_eq!(
            decide(&web(true, true), owned.clone(), false),
            Action::Report {
                owned: sorted.clone()
            },
            "without --legacy-wave-cleanup the finalizer stays with the owned config"
        );
        assert_eq!(
            decide(&web(false, true), owned.clone(), false),
            Action::Report { owned: sorted }
        );
        assert_eq!(
            decide(&web(true, true), vec![], false),
            Action::Remove { owned: vec![] },
            "a finalizer alone orphans nothing: removed without the flag"
        );
        assert_eq!(decide(&web(false, true), vec![], true), Action::Nothing);
        assert_eq!(decide(&web(false, false), owned.clone(), true), Action::Nothing);
        let mut cron = web(true, true);
        cron.id.kind = WorkloadKind::CRON_JOB;
        assert_eq!(
            decide(&cron, owned, true),
            Action::Nothing,
            "Wave never managed CronJobs"
        );
    }

    #[test]
    fn the_notes_name_what_is_left_and_the_value_that_removes_it() {
        let note = left_note(
            &web(true, true),
            &[cm("a"), ConfigKey::new(ConfigKind::Secret, "ns", "s")],
        );
        assert!(note.ends_with("Left on: configmap ns/a, secret ns/s."), "{note}");
        assert!(note.contains("rbac.legacyWaveCleanup=true") && note.contains("--legacy-wave-cleanup"));
        assert!(note.contains("does not delete that config"), "{note}");
        let note = left_note(&web(false, true), &[cm("a")]);
        assert!(note.contains("deleting it deletes that config too"), "{note}");
        let left = [cm("a")];
        let note = failed_note(
            &web(true, true),
            Leftover::OwnerReferences(&left),
            "forbidden: no",
        );
        assert!(
            note.contains("to this Deployment: forbidden: no")
                && note.contains("rbac.legacyWaveCleanup=true")
                && note.ends_with("Left on: configmap ns/a."),
            "{note}"
        );
        assert_eq!(
            Leftover::OwnerReferences(&left).to_string(),
            "owner reference on configmap ns/a"
        );
        let left = [cm("a"), cm("b")];
        let note = failed_note(
            &web(false, true),
            Leftover::OwnerReferences(&left),
            "forbidden: no",
        );
        assert!(
            note.ends_with("Left on: configmap ns/a, configmap ns/b."),
            "{note}"
        );
        assert_eq!(
            Leftover::OwnerReferences(&left).to_string(),
            "owner references on configmap ns/a, configmap ns/b"
        );
        let note = failed_note(&web(true, true), Leftover::Finalizer, "the server is down");
        assert!(
            note.contains("finalizer wave.pusher.com/finalizer: the server is down")
                && !note.contains("configmaps"),
            "{note}"
        );
    }

    #[test]
    fn only_the_owner_reference_wave_wrote_goes_and_the_others_stay() {
        let w = web(true, true);
        let m = meta(
            json!({"namespace": "ns", "resourceVersion": "7", "ownerReferences": [
            waves("Deployment", "web", "uid-web"),
            {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o"},
            // The same workload, as another tool would name it: not Wave's.
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web", "blockOwnerDeletion": true}]}),
        );
        let patch = owner_patch(&m, &w).expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let kept = patch["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0]["uid"], "o");
        assert!(kept[1]["controller"].is_null());
        let only =
            meta(json!({"namespace": "ns", "ownerReferences": [waves("Deployment", "web", "uid-web")]}));
        assert!(owner_patch(&only, &w).unwrap()["metadata"]["ownerReferences"].is_null());
        let elsewhere =
            meta(json!({"namespace": "other", "ownerReferences": [waves("Deployment", "web", "uid-web")]}));
        assert_eq!(owner_patch(&elsewhere, &w), None);
        assert_eq!(owner_patch(&only, &web(false, false)), None, "never Wave's");
        assert_eq!(owner_patch(&ObjectMeta::default(), &w), None);
    }

    #[test]
    fn only_waves_finalizer_goes() {
        let m = meta(json!({"resourceVersion": "3", "finalizers": [names::LEGACY_FINALIZER, "other/x"]}));
        assert_eq!(
            finalizer_patch(&m).unwrap()["metadata"]["finalizers"],
            json!(["other/x"])
        );
        let only = meta(json!({"finalizers": [names::LEGACY_FINALIZER]}));
        assert!(finalizer_patch(&only).unwrap()["metadata"]["finalizers"].is_null());
        assert_eq!(finalizer_patch(&meta(json!({"finalizers": ["other/x"]}))), None);
    }
}
