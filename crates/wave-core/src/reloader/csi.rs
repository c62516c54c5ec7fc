//! Secrets Store CSI driver rotations (Reloader's `--enable-csi-integration`): what the driver reports
//! of one pod's mount ([`ProviderStatus`]), and the "data" of a SecretProviderClass that Reloader hashes
//! ([`ProviderStatus::content`]).
//!
//! The driver keeps one SecretProviderClassPodStatus per pod and class, with the ids and versions of the
//! objects it mounted (`status.objects`), and rewrites it when it rotates them. It never holds a secret's
//! value. Reloader v1.4.21 reacts to an *update* of one whose SHA-1 changed
//! (`ResourceUpdatedHandler.GetConfig`, `internal/pkg/handler/update.go`; creations and deletions are
//! ignored, `internal/pkg/controller/controller.go`) and reloads, as a change of the class the status
//! names, every workload of the namespace that mounts that class and asks for it. Its SHA-1 is
//! `GetSHAfromSecretProviderClassPodStatus` (`internal/pkg/util/util.go`): the entries `id=version`
//! of the objects and `SecretProviderClassName=<class>`, sorted and joined with `;`, the same shape as a
//! ConfigMap's, so [`super::sha`] hashes the [`Content`] built here.
//!
//! Which status speaks for a class is the tracker's rule (`tracker::provider_statuses`).

use std::collections::BTreeMap;

use crate::hash::Content;
use crate::names::csi;
use crate::refs::{ConfigKey, ConfigKind};

/// A SecretProviderClassPodStatus's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StatusRef {
    /// Its namespace (the pod's).
    pub namespace: String,
    /// Its name (`<pod>-<namespace>-<class>`, chosen by the driver).
    pub name: String,
}

/// One SecretProviderClassPodStatus, as its watch shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderStatus {
    /// Which one.
    pub id: StatusRef,
    /// `status.secretProviderClassName`: the class it reports on.
    pub class: String,
    /// `status.objects` as `(id, version)`; `None` when the field is absent (Reloader then counts the
    /// status as having had no SHA-1 at all).
    pub objects: Option<Vec<(String, String)>>,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// Its labels, for `--resource-label-selector` (which Reloader applies to its watch of statuses).
    pub labels: BTreeMap<String, String>,
}

impl ProviderStatus {
    /// The class it reports on, as a config object of its namespace.
    pub fn class_key(&self) -> ConfigKey {
        ConfigKey::new(ConfigKind::SecretProviderClass, &self.id.namespace, &self.class)
    }

    /// What Reloader hashes: each object's `id` with its version, and the class's name under
    /// `SecretProviderClassName`.
    // NOTE: two objects with one id would be two entries for Reloader and are one here; the driver
    // writes one entry per id (it is the mounted file's path), so the SHA-1s agree.
    // https://github.com/kubernetes-sigs/secrets-store-csi-driver/blob/v1.5.5/pkg/secrets-store/utils.go
    pub fn content(&self) -> Content {
        let mut values: BTreeMap<String, Vec<u8>> = self
            .objects
            .iter()
            .flatten()
            .map(|(id, version)| (id.clone(), version.as_bytes().to_vec()))
            .collect();
        values.insert(csi::CLASS_NAME_ENTRY.to_string(), self.class.as_bytes().to_vec());
        Content::new(values)
    }

    /// Reloader's SHA-1 of it.
    pub fn sha(&self) -> String {
        super::sha(ConfigKind::SecretProviderClass, &self.content())
    }
}

/// What a SecretProviderClass's own annotations ask of Reloader, as its metadata watch shows them
/// (Reloader reads them with a GET on each reload: `populateAnnotationsFromSecretProviderClass`,
/// `internal/pkg/handler/upgrade.go`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassMeta {
    /// The class, as a config object of its namespace.
    pub key: ConfigKey,
    /// It says `reloader.stakater.com/ignore: "true"`: its rotations reload nothing.
    pub ignored: bool,
    /// It says `reloader.stakater.com/match: "true"`: workloads that say `reloader.stakater.com/search`
    /// reload on its rotations.
    pub matched: bool,
}

/// A SecretProviderClassPodStatus's `status` as the watch delivers it (JSON), read into a
/// [`ProviderStatus`]. Fields of the wrong type read as absent; one that names no class (an empty
/// [`ProviderStatus::class`]) reports on nothing.
pub fn provider_status(
    id: StatusRef,
    resource_version: String,
    labels: BTreeMap<String, String>,
    status: Option<&serde_json::Value>,
) -> ProviderStatus {
    let field = |f: &str| status.and_then(|s| s.get(f));
    let class = field("secretProviderClassName")
        .and_then(|c| c.as_str())
        .unwrap_or_default()
        .to_string();
    let objects = field("objects").and_then(|o| o.as_array()).map(|list| {
        list.iter()
            .map(|o| {
                let field = |f: &str| o.get(f).and_then(|v| v.as_str()).unwrap_or_default().to_string();
                (field("id"), field("version"))
            })
            .collect()
    });
    ProviderStatus {
        id,
        class,
        objects,
        resource_version,
        labels,
    }
}

#[cfg(test)]
#[path = "csi_tests.rs"]
mod tests;
