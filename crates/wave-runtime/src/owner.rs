//! What wave creates for itself, outside any release manifest, is owned by wave's own Deployment
//! (`--own-deployment`, which the chart sets): the webhook's certificate Secret, when wave issues it,
//! and the leader-election Lease. Deleting wave (`helm uninstall`) then lets the garbage collector
//! delete them too, and nothing of wave is left behind.
//!
//! ```text
//! certs::ensure, when it writes the Secret or the Secret names no Deployment of that name:
//!     owner_in: GET own Deployment ─► Owner (its uid) ─► the Secret carries the reference
//! lease::campaign, once: owner_in ─► Owner::adopt: the Lease is given it (one patch)
//! ```
//!
//! The Deployment is read when a reference is written, never kept: one deleted and made again (a new
//! uid, pods orphaned and adopted) owns what wave writes next. What the earlier one owned is deleted by
//! the garbage collector: wave issues its certificate again at its next check, and the leader, whose
//! Lease renewals then fail, exits, and its successor makes the Lease again, owned.
//!
//! An owner reference names no namespace: the garbage collector looks for the owner in the dependent's
//! own namespace, and deletes a dependent whose owner it cannot find there. So an object in another
//! namespace than the Deployment's (a `--webhook-secret-namespace` or `--leader-election-namespace`
//! set apart by hand) is never given the reference, and the Deployment is not even read for it
//! ([`owner_in`]).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use wave_core::workload::WorkloadRef;

/// The owner's API version: wave's own Deployment.
const API_VERSION: &str = "apps/v1";
/// The owner's kind.
const KIND: &str = "Deployment";

/// wave's own Deployment, as an owner of what wave creates for itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    namespace: String,
    reference: OwnerReference,
}

impl Owner {
    /// An owner made of a Deployment as read (`None` without a name or uid).
    pub fn of(deployment: &Deployment) -> Option<Self> {
        let meta = &deployment.metadata;
        Some(Self {
            namespace: meta.namespace.clone()?,
            reference: OwnerReference {
                api_version: API_VERSION.into(),
                kind: KIND.into(),
                name: meta.name.clone()?,
                uid: meta.uid.clone()?,
                // Neither: wave's Deployment does not control these objects, and blocking its deletion
                // would need `update` on its finalizers.
                controller: None,
                block_owner_deletion: None,
            },
        })
    }

    /// The reference for an object in `namespace`: `None` in any other namespace than the
    /// Deployment's, where the garbage collector would not find the owner and would delete the object.
    pub fn reference_in(&self, namespace: &str) -> Option<&OwnerReference> {
        (namespace == self.namespace).then_some(&self.reference)
    }

    /// `existing` with this owner's reference added, if `namespace` is the Deployment's and it is not
    /// there yet, and without a reference to an earlier Deployment of the same name (deleted and made
    /// again: the garbage collector would delete the object for it); `None` when nothing is to change.
    pub fn references_for(
        &self,
        namespace: &str,
        existing: Option<&[OwnerReference]>,
    ) -> Option<Vec<OwnerReference>> {
        let reference = self.reference_in(namespace)?;
        let existing = existing.unwrap_or_default();
        if existing.iter().any(|r| r.uid == reference.uid) {
            return None;
        }
        Some(
            existing
                .iter()
                .filter(|r| !is_deployment_named(r, &reference.name))
                .cloned()
                .chain([reference.clone()])
                .collect(),
        )
    }

    /// Gives `name`, in the namespace `api` and this owner share, this owner's reference unless it has
    /// it: one read, and one merge patch of the whole list, guarded by the version read (a 409, another
    /// replica adopting it at the same moment, is an error the caller reports).
    pub async fn adopt<K>(&self, api: &Api<K>, name: &str) -> Result<(), kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let object = api.get(name).await?;
        let references = object
            .meta()
            .namespace
            .as_deref()
            .and_then(|ns| self.references_for(ns, object.meta().owner_references.as_deref()));
        let Some(references) = references else {
            return Ok(());
        };
        let body = serde_json::json!({"metadata": {
            "ownerReferences": references,
            "resourceVersion": object.meta().resource_version,
        }});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(drop)
    }
}

/// Whether `existing` names the Deployment `id` (whatever its uid): it is owned, or will be deleted
/// with an earlier Deployment of that name and made again. Nothing to read for it then.
pub fn names(existing: Option<&[OwnerReference]>, id: &WorkloadRef) -> bool {
    existing
        .unwrap_or_default()
        .iter()
        .any(|r| is_deployment_named(r, &id.name))
}

fn is_deployment_named(r: &OwnerReference, name: &str) -> bool {
    r.kind == KIND && r.api_version == API_VERSION && r.name == name
}

/// wave's own Deployment `id` as the owner of an object in `namespace`: `None` without a read in any
/// other namespace; `None`, with a warning, when it cannot be read (wave runs on, and what it creates
/// for itself is then left behind by an uninstall).
pub async fn owner_in(client: &Client, id: &WorkloadRef, namespace: &str) -> Option<Owner> {
    if id.namespace != namespace {
        return None;
    }
    let api: Api<Deployment> = Api::namespaced(client.clone(), &id.namespace);
    match api.get(&id.name).await {
        Ok(deployment) => Owner::of(&deployment),
        Err(e) => {
            tracing::warn!(deployment = %id, error = %crate::api::describe(&e), "cannot read wave's own Deployment (--own-deployment); what wave creates for itself (its webhook certificate, its Lease) will not be deleted with it");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn owner() -> Owner {
        Owner::of(&Deployment {
            metadata: ObjectMeta {
                namespace: Some("wave".into()),
                name: Some("wave".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .expect("an owner")
    }

    #[test]
    fn an_object_in_another_namespace_is_never_given_the_reference_that_would_get_it_deleted() {
        let owner = owner();
        assert!(owner.reference_in("tenant").is_none());
        assert_eq!(owner.references_for("tenant", None), None);
        assert_eq!(owner.reference_in("wave").map(|r| r.uid.as_str()), Some("u-1"));
    }

    #[test]
    fn the_reference_is_added_once_and_keeps_the_other_owners() {
        let owner = owner();
        let other = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "other".into(),
            uid: "u-2".into(),
            ..Default::default()
        };
        let added = owner
            .references_for("wave", Some(std::slice::from_ref(&other)))
            .expect("added");
        assert_eq!(
            added.iter().map(|r| r.uid.as_str()).collect::<Vec<_>>(),
            ["u-2", "u-1"]
        );
        assert_eq!(owner.references_for("wave", Some(&added)), None);
    }

    #[test]
    fn a_reference_to_an_earlier_deployment_of_the_same_name_is_replaced() {
        let owner = owner();
        let earlier = OwnerReference {
            uid: "u-0".into(),
            ..owner.reference_in("wave").expect("same namespace").clone()
        };
        let replaced = owner
            .references_for("wave", Some(std::slice::from_ref(&earlier)))
            .expect("replaced");
        assert_eq!(
            replaced.iter().map(|r| r.uid.as_str()).collect::<Vec<_>>(),
            ["u-1"]
        );
    }

    #[test]
    fn a_reference_to_the_deployment_by_name_whatever_its_uid_needs_no_read() {
        let owner = owner();
        let id = WorkloadRef::new(wave_core::workload::WorkloadKind::DEPLOYMENT, "wave", "wave");
        let earlier = OwnerReference {
            uid: "u-0".into(),
            ..owner.reference_in("wave").expect("same namespace").clone()
        };
        assert!(names(Some(std::slice::from_ref(&earlier)), &id));
        let other = OwnerReference {
            name: "other".into(),
            ..earlier
        };
        assert!(!names(Some(std::slice::from_ref(&other)), &id));
        assert!(!names(None, &id));
    }

    #[test]
    fn the_reference_neither_controls_nor_blocks_the_deletion_of_wave() {
        let owner = owner();
        let reference = owner.reference_in("wave").expect("same namespace");
        assert_eq!(reference.controller, None);
        assert_eq!(reference.block_owner_deletion, None);
        assert_eq!(
            (reference.kind.as_str(), reference.api_version.as_str()),
            ("Deployment", "apps/v1")
        );
    }

    #[test]
    fn a_deployment_without_a_uid_is_no_owner() {
        let deployment = Deployment {
            metadata: ObjectMeta {
                namespace: Some("wave".into()),
                name: Some("wave".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(Owner::of(&deployment), None);
    }
}
