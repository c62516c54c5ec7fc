//! Restoring config on an undo with `undo: restore-config`: whether a snapshot can bring the hash back
//! ([`restorable`]), what to write ([`restore_plan`], one [`restore_patch`] per object, only in the
//! workload's own namespace), who else manages an object ([`managed_by`]), and when the watches show the
//! whole restore ([`RestoreInFlight`]).

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::Snapshot;
use crate::hash::Hashing;
use crate::names;
use crate::refs::{ConfigKey, ConfigKind, Keys, References};
use crate::tracker::{ObjectVersion, Tracker};

/// Whether restoring `snapshot` gives the config hash `hash` back, for a workload whose config is `now`
/// (its snapshot taken of the config as it is): `Err` says why not, and nothing should be written.
pub fn restorable(snapshot: &Snapshot, now: &Snapshot, hashing: &Hashing, hash: &str) -> Result<(), String> {
    if snapshot.config_maps.is_empty() && snapshot.secrets.is_empty() {
        return Err("the snapshot holds no config".into());
    }
    if snapshot.hash(hashing) != hash {
        return Err(format!(
            "the snapshot's data does not hash to {hash} (was the hash key changed since?)"
        ));
    }
    for (kind, then, now) in [
        (ConfigKind::ConfigMap, &snapshot.config_maps, &now.config_maps),
        (ConfigKind::Secret, &snapshot.secrets, &now.secrets),
    ] {
        if let Some(entry) = now.keys().find(|e| !then.contains_key(*e)) {
            return Err(format!(
                "{kind} {entry} is used now but was absent then, so no restore can bring the hash back"
            ));
        }
    }
    Ok(())
}

/// One config object to restore from a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restore<'a> {
    /// The object.
    pub key: ConfigKey,
    /// The workload uses every key of it: keys not in the snapshot are removed.
    pub whole: bool,
    /// The snapshot's keys (base64 values).
    pub values: &'a BTreeMap<String, String>,
}

impl Restore<'_> {
    /// Whether `content` is what this restore writes: each of its keys at its value and, when it
    /// replaces the whole object, no other key. Tells whether a write whose answer was lost landed.
    pub fn is_in(&self, content: &crate::hash::Content) -> bool {
        let values_match = self.values.iter().all(|(key, b64)| {
            STANDARD
                .decode(b64)
                .is_ok_and(|bytes| content.value(key) == Some(bytes.as_slice()))
        });
        values_match && (!self.whole || content.keys().all(|key| self.values.contains_key(key)))
    }
}

/// What restoring `snapshot` writes, for a workload in `namespace` with `refs` (its template now: the one
/// an undo went back to). Objects the snapshot does not hold (absent or ignored then) are left alone.
pub fn restore_plan<'a>(namespace: &str, refs: &References, snapshot: &'a Snapshot) -> Vec<Restore<'a>> {
    let mut out: Vec<Restore<'a>> = Vec::new();
    // Only the workload's own namespace is ever written (`docs/security.md`); the caller refuses a
    // restore whose references leave it ([`foreign_config`]), and this keeps that true regardless.
    for r in refs.iter().filter(|r| r.key.namespace == namespace) {
        let section = match r.key.kind {
            ConfigKind::ConfigMap => &snapshot.config_maps,
            ConfigKind::Secret => &snapshot.secrets,
            // A snapshot holds what wave hashes: never one of these.
            ConfigKind::SecretProviderClass => continue,
        };
        // Objects of the workload's namespace are always named bare in the hash source.
        let Some(values) = section.get(&r.key.name) else {
            continue;
        };
        let whole = r.keys == Keys::All;
        match out.iter_mut().find(|x| x.key == r.key) {
            Some(existing) => existing.whole |= whole,
            None => out.push(Restore {
                key: r.key.clone(),
                whole,
                values,
            }),
        }
    }
    out
}

/// The merge patch that puts `restore`'s values back into the object as it is now (`current`: its
/// metadata and key placement), guarded by its resourceVersion. A ConfigMap value that is UTF-8 goes to
/// `data`, any other to `binaryData` (the hash reads both the same way).
pub fn restore_patch(restore: &Restore<'_>, current: &CurrentObject) -> Value {
    let mut data = Map::new();
    let mut binary = Map::new();
    for (key, b64) in restore.values {
        let bytes = STANDARD.decode(b64).unwrap_or_default();
        match (restore.key.kind, String::from_utf8(bytes)) {
            (ConfigKind::ConfigMap, Ok(text)) => {
                data.insert(key.clone(), Value::String(text));
                if current.binary_keys.contains(key) {
                    binary.insert(key.clone(), Value::Null);
                }
            }
            (ConfigKind::ConfigMap, Err(_)) => {
                binary.insert(key.clone(), Value::String(b64.clone()));
                if current.data_keys.contains(key) {
                    data.insert(key.clone(), Value::Null);
                }
            }
            (ConfigKind::Secret, _) => {
                data.insert(key.clone(), Value::String(b64.clone()));
            }
            // `restore_plan` never plans one (a snapshot holds none).
            (ConfigKind::SecretProviderClass, _) => {}
        }
    }
    if restore.whole {
        for key in current
            .data_keys
            .iter()
            .filter(|k| !restore.values.contains_key(*k))
        {
            data.insert(key.clone(), Value::Null);
        }
        for key in current
            .binary_keys
            .iter()
            .filter(|k| !restore.values.contains_key(*k))
        {
            binary.insert(key.clone(), Value::Null);
        }
    }
    let mut patch = json!({"metadata": {"resourceVersion": current.resource_version}, "data": data});
    if !binary.is_empty() {
        patch["binaryData"] = Value::Object(binary);
    }
    patch
}

/// The parts of a config object as it is now that a restore needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CurrentObject {
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// Keys in `data`.
    pub data_keys: BTreeSet<String>,
    /// Keys in `binaryData` (ConfigMaps).
    pub binary_keys: BTreeSet<String>,
    /// Who manages it, if a tool does (`managed_by`).
    pub managed_by: Option<String>,
    /// `immutable: true`: it cannot be restored.
    pub immutable: bool,
}

impl CurrentObject {
    /// A ConfigMap as it is now.
    pub fn of_config_map(cm: &ConfigMap) -> Self {
        Self {
            resource_version: cm.metadata.resource_version.clone().unwrap_or_default(),
            data_keys: cm.data.iter().flatten().map(|(k, _)| k.clone()).collect(),
            binary_keys: cm.binary_data.iter().flatten().map(|(k, _)| k.clone()).collect(),
            managed_by: managed_by(&cm.metadata),
            immutable: cm.immutable == Some(true),
        }
    }

    /// A Secret as it is now.
    pub fn of_secret(secret: &Secret) -> Self {
        Self {
            resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
            data_keys: secret.data.iter().flatten().map(|(k, _)| k.clone()).collect(),
            binary_keys: BTreeSet::new(),
            managed_by: managed_by(&secret.metadata),
            immutable: secret.immutable == Some(true),
        }
    }
}

/// The tool that manages a config object, by the labels and annotations the common ones set: a restore
/// would fight it, so wave refuses (`docs/history.md`, "Restoring config").
pub fn managed_by(meta: &ObjectMeta) -> Option<String> {
    let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k));
    let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k));
    if annotation("meta.helm.sh/release-name").is_some()
        || label(names::MANAGED_BY_LABEL).is_some_and(|v| v == "Helm")
    {
        return Some("Helm".into());
    }
    if annotation("argocd.argoproj.io/tracking-id").is_some()
        || label("argocd.argoproj.io/instance").is_some()
    {
        return Some("Argo CD".into());
    }
    if label("kustomize.toolkit.fluxcd.io/name").is_some() || label("helm.toolkit.fluxcd.io/name").is_some() {
        return Some("Flux".into());
    }
    if let Some(owner) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        return Some(format!("its controller {} {}", owner.kind, owner.name));
    }
    // `app.kubernetes.io/instance` is Argo CD's default tracking label (and Helm's convention).
    if let Some(instance) = label("app.kubernetes.io/instance") {
        return Some(format!("Argo CD or Helm (app.kubernetes.io/instance={instance})"));
    }
    label(names::MANAGED_BY_LABEL)
        .filter(|v| *v != names::CONTROLLER_NAME)
        .map(|v| format!("{v} (app.kubernetes.io/managed-by)"))
}

/// A restore as the watches must show it before a workload using its objects is planned again.
///
/// A restore writes one object at a time, and each write reaches the watch on its own. A workload that
/// uses two of them, planned between the two events, would hash half the restored config and half the
/// undone one, roll to that mix, and roll again a moment later. So every workload using an object of a
/// restore waits until the tracker shows each object at the version the restore wrote (`seen`), or the
/// restore failed. Versions are compared for equality only: a `resourceVersion` is opaque, so a later
/// write by someone else is not "newer", and the shell bounds the wait instead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreInFlight {
    /// Each object the restore writes, with the version its write produced once it has.
    writes: Vec<(ConfigKey, Option<ObjectVersion>)>,
}

impl RestoreInFlight {
    /// A restore about to write `keys`.
    pub fn new(keys: impl IntoIterator<Item = ConfigKey>) -> Self {
        Self {
            writes: keys.into_iter().map(|k| (k, None)).collect(),
        }
    }

    /// Notes that writing `key` produced `version`.
    pub fn written(&mut self, key: &ConfigKey, version: ObjectVersion) {
        if let Some((_, v)) = self.writes.iter_mut().find(|(k, _)| k == key) {
            *v = Some(version);
        }
    }

    /// Whether a workload with `refs` uses an object this restore writes.
    pub fn touches(&self, refs: &References) -> bool {
        refs.iter().any(|r| self.writes.iter().any(|(k, _)| *k == r.key))
    }

    /// Whether every write is done and `tracker` shows each object at the version it wrote.
    pub fn seen(&self, tracker: &Tracker) -> bool {
        self.writes
            .iter()
            .all(|(key, written)| written.is_some() && tracker.config(key) == written.as_ref())
    }
}

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
