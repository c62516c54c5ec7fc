//! What Wave ≤ v0.6 left behind, and the patches that remove it (`docs/migrating-from-wave.md`,
//! "From Wave ≤ v0.6").
//!
//! Wave ≤ v0.6 put the finalizer `wave.pusher.com/finalizer` on each workload it managed and an
//! `ownerReference` to the workload on each ConfigMap and Secret it referenced. With the finalizer and
//! no Wave to remove it, a deleted workload stays Terminating forever; with the owner references, the
//! garbage collector deletes the config together with the workload. Wave v0.7+ removes both (its
//! `deleteOwnerReferencesAndFinalizer`): first the owner references, then the finalizer, so that the
//! workload can never be deleted while its config still belongs to it. wave does the same.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::names;

/// The merge patch that removes the owner references to `uid` from a config object, guarded by its
/// resourceVersion; `None` when it has none.
pub fn owner_patch(meta: &ObjectMeta, uid: &str) -> Option<Value> {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let kept: Vec<_> = refs.iter().filter(|r| r.uid != uid).collect();
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

    fn meta(v: Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_the_owner_reference_to_the_workload_goes_and_the_others_stay() {
        let m = meta(json!({"resourceVersion": "7", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "w"},
            {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o"}]}));
        let patch = owner_patch(&m, "w").expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let kept = patch["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0]["uid"], "o");
        let only = meta(
            json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "w"}]}),
        );
        assert!(owner_patch(&only, "w").unwrap()["metadata"]["ownerReferences"].is_null());
        assert_eq!(owner_patch(&m, "nobody"), None);
        assert_eq!(owner_patch(&ObjectMeta::default(), "w"), None);
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
