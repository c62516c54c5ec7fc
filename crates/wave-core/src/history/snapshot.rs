//! The snapshot format: exactly the data behind one config hash, as the hash source's two sections,
//! stored as an immutable ConfigMap (and Secret) named after the workload and the hash ([`Snapshot`]),
//! and read back only when no entry names another namespace.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{CONFIG_MAPS_KEY, SECRETS_KEY};
use crate::hash::{self, Fetched, Hashing, Section};
use crate::names;
use crate::refs::{ConfigKey, References};
use crate::workload::WorkloadRef;

/// Why a stored snapshot cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The object lacks the key a snapshot has.
    #[error("{object} has no {key} key: not a wave config snapshot")]
    NoData {
        /// The snapshot object.
        object: String,
        /// The key expected.
        key: &'static str,
    },
    /// An entry names an object of another namespace: wave never writes such a snapshot.
    #[error("{object} holds {entry:?}, an entry of another namespace: not a snapshot wave wrote")]
    Foreign {
        /// The snapshot object.
        object: String,
        /// The entry.
        entry: String,
    },
    /// The key does not hold a section.
    #[error("{object} key {key} is not a config snapshot section")]
    Malformed {
        /// The snapshot object.
        object: String,
        /// The key read.
        key: &'static str,
        /// The cause (names positions, never values).
        #[source]
        source: serde_json::Error,
    },
}

impl SnapshotError {
    /// Stable label for metrics and Event reasons.
    pub fn kind(&self) -> &'static str {
        match self {
            SnapshotError::NoData { .. } => "snapshot_no_data",
            SnapshotError::Foreign { .. } => "snapshot_foreign",
            SnapshotError::Malformed { .. } => "snapshot_malformed",
        }
    }
}

/// Exactly the data behind one config hash: the hash source's two sections (values base64).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// ConfigMap entry → key → base64 value.
    pub config_maps: Section,
    /// Secret entry → key → base64 value.
    pub secrets: Section,
}

// Values may be Secret data: never print them.
impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = |s: &Section| -> Vec<String> {
            s.iter()
                .flat_map(|(e, keys)| keys.keys().map(move |k| format!("{e}:{k}")))
                .collect()
        };
        f.debug_struct("Snapshot")
            .field("config_maps", &keys(&self.config_maps))
            .field("secrets", &keys(&self.secrets))
            .finish()
    }
}

impl Snapshot {
    /// The data that goes into the hash of a workload in `namespace` with these references and content.
    pub fn of(namespace: &str, refs: &References, fetched: &Fetched) -> Self {
        let (config_maps, secrets) = hash::sections(namespace, refs, fetched);
        Self { config_maps, secrets }
    }

    /// The config hash this data makes under `hashing`.
    pub fn hash(&self, hashing: &Hashing) -> String {
        hash::source_of(&self.config_maps, &self.secrets).hash_with(hashing)
    }

    /// The snapshot objects' name for `workload` at `hash` (the ConfigMap and the Secret share it):
    /// `wave-<kind>-<workload name>-<first 12 hex of the hash>`, the name cut so that it fits 253.
    pub fn name(workload: &WorkloadRef, hash: &str) -> String {
        let short = crate::hash::short(hash);
        let kind = workload.kind.info().short();
        let room = 253 - "wave---".len() - kind.len() - short.len();
        let name = workload.name.get(..room).unwrap_or(&workload.name);
        format!("wave-{kind}-{}-{short}", name.trim_end_matches(['.', '-']))
    }

    /// The labels of `workload`'s snapshots (`wave history` selects on them).
    pub fn labels(workload: &WorkloadRef) -> BTreeMap<String, String> {
        BTreeMap::from([
            (names::MANAGED_BY_LABEL.into(), names::CONTROLLER_NAME.into()),
            (names::SNAPSHOT_KIND.into(), workload.kind.info().short().into()),
            (names::SNAPSHOT_OF.into(), label_value(&workload.name)),
        ])
    }

    fn metadata(workload: &WorkloadRef, hash: &str, owner: OwnerReference) -> ObjectMeta {
        let mut labels = Self::labels(workload);
        labels.insert(names::SNAPSHOT_HASH.into(), hash[..hash.len().min(63)].into());
        ObjectMeta {
            name: Some(Self::name(workload, hash)),
            namespace: Some(workload.namespace.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (
                    names::SNAPSHOT_OF.into(),
                    format!("{}/{}", workload.kind.info().short(), workload.name),
                ),
                (names::SNAPSHOT_HASH.into(), hash.into()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        }
    }

    /// The immutable ConfigMap holding the ConfigMap data (always made: it is the snapshot's index).
    pub fn config_map(&self, workload: &WorkloadRef, hash: &str, owner: OwnerReference) -> ConfigMap {
        let json = serde_json::to_string(&self.config_maps).expect("maps of strings always serialise");
        ConfigMap {
            metadata: Self::metadata(workload, hash, owner),
            data: Some(BTreeMap::from([(CONFIG_MAPS_KEY.into(), json)])),
            immutable: Some(true),
            ..ConfigMap::default()
        }
    }

    /// The immutable Secret holding the Secret data, when any Secret is hashed (Secrets stay Secrets).
    pub fn secret(&self, workload: &WorkloadRef, hash: &str, owner: OwnerReference) -> Option<Secret> {
        if self.secrets.is_empty() {
            return None;
        }
        let json = serde_json::to_vec(&self.secrets).expect("maps of strings always serialise");
        Some(Secret {
            metadata: Self::metadata(workload, hash, owner),
            data: Some(BTreeMap::from([(SECRETS_KEY.into(), ByteString(json))])),
            immutable: Some(true),
            type_: Some("Opaque".into()),
            ..Secret::default()
        })
    }

    /// A stored snapshot: its ConfigMap, and its Secret if there is one.
    pub fn read(config_map: &ConfigMap, secret: Option<&Secret>) -> Result<Self, SnapshotError> {
        let name = |m: &ObjectMeta| m.name.clone().unwrap_or_default();
        let object = format!("configmap {}", name(&config_map.metadata));
        let text = config_map
            .data
            .as_ref()
            .and_then(|d| d.get(CONFIG_MAPS_KEY))
            .ok_or_else(|| SnapshotError::NoData {
                object: object.clone(),
                key: CONFIG_MAPS_KEY,
            })?;
        let config_maps = serde_json::from_str(text).map_err(|source| SnapshotError::Malformed {
            object,
            key: CONFIG_MAPS_KEY,
            source,
        })?;
        let secrets = match secret {
            None => Section::new(),
            Some(secret) => {
                let object = format!("secret {}", name(&secret.metadata));
                let bytes = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(SECRETS_KEY))
                    .ok_or_else(|| SnapshotError::NoData {
                        object: object.clone(),
                        key: SECRETS_KEY,
                    })?;
                serde_json::from_slice(&bytes.0).map_err(|source| SnapshotError::Malformed {
                    object,
                    key: SECRETS_KEY,
                    source,
                })?
            }
        };
        let snapshot = Self { config_maps, secrets };
        // Entries are named as the hash source names them: bare for the workload's namespace, and
        // `namespace/name` only for another namespace, which wave never snapshots.
        for (kind, section) in [
            ("configmap", &snapshot.config_maps),
            ("secret", &snapshot.secrets),
        ] {
            if let Some(entry) = section.keys().find(|e| e.contains('/')) {
                let meta = match kind {
                    "configmap" => Some(&config_map.metadata),
                    _ => secret.map(|s| &s.metadata),
                };
                return Err(SnapshotError::Foreign {
                    object: format!("{kind} {}", meta.map(name).unwrap_or_default()),
                    entry: entry.clone(),
                });
            }
        }
        Ok(snapshot)
    }
}

/// The first config object outside `namespace` that a workload there references, if any. History keeps
/// no snapshot of such a hash (it would copy another namespace's data into this one) and restores
/// nothing for it (it would write into another namespace): `docs/security.md`.
pub fn foreign_config<'a>(namespace: &str, refs: &'a References) -> Option<&'a ConfigKey> {
    refs.iter().map(|r| &r.key).find(|k| k.namespace != namespace)
}

/// A label value naming `name`: the name itself when it fits 63 characters, else its first 50 and 12 hex
/// of its SHA-256 (stable across versions; the full name is in the `wave.pusher.com/snapshot-of`
/// annotation). Selects a workload's snapshots, e.g. `kubectl get cm -l wave.pusher.com/snapshot-of=web`.
fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(name.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}-{digest}", name[..50].trim_end_matches(['.', '-']))
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
