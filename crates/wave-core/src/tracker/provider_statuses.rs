//! SecretProviderClass rotations (`--enable-csi-integration`, `reloader::csi`): the tracker keeps each
//! SecretProviderClassPodStatus's class and SHA-1, and, per class, what its last rotation mounted. That
//! is the class's "content", held as a config object of kind `SecretProviderClass` whose version is the
//! resourceVersion of the status that set it, so a rotation wakes the workloads that mount the class
//! like any config change, and the flap breaker counts it.
//!
//! Which status speaks for a class, following Reloader v1.4.21 (`reloader::csi`):
//! - an **update** of a status whose SHA-1 changed (or that had no `objects` before) is a rotation: the
//!   class now holds what it reports;
//! - a status **created** while the class already holds something changes nothing (Reloader ignores
//!   creations: a new pod mounts what is current);
//! - the first status of a class sets its starting point; during the first list, the one written last
//!   (the greatest resourceVersion) does, so a rotation half done across pods starts from its newest;
//! - a **deleted** status changes nothing, not even the class's last one: the class keeps what it holds
//!   (one entry per class and namespace), so pods created after a scale to zero report a creation
//!   (Reloader ignores deletions too; `--reload-on-delete` and `--reload-on-create` do not apply to
//!   classes, which are never created nor deleted as config objects).
//!
//! A class's own annotations (`reloader.stakater.com/ignore`, `match`) come from a metadata watch of
//! SecretProviderClasses ([`ClassMeta`]): an ignored class's content says so, and a `match` mark goes
//! where ConfigMaps' do. Statuses that `--resource-label-selector` does not select count as absent, as
//! Reloader lists them with it.
//!
//! Statuses are only read in the namespaces wave watches, and a status reloads only workloads of its
//! own namespace (a class is a config object of the status's namespace).

use std::sync::Arc;

use super::relist::{Relisting, Tracked};
use super::{Effects, ObjectVersion, Resource, Scope, Tracker};
use crate::hash::Content;
use crate::refs::{ConfigKey, ConfigKind};
use crate::reloader::{self, ClassMeta, ProviderStatus, StatusRef};

/// What is kept of one status.
#[derive(Debug)]
pub(super) struct Status {
    class: ConfigKey,
    /// Reloader's SHA-1 of it; `None` while it has no `objects`.
    sha: Option<String>,
}

impl Tracked for ProviderStatus {
    type Key = StatusRef;

    fn key(&self) -> &StatusRef {
        &self.id
    }

    fn place(key: &StatusRef) -> (Resource, &str) {
        (Resource::ProviderStatus, &key.namespace)
    }

    fn relisting(tracker: &mut Tracker) -> &mut Relisting<StatusRef> {
        &mut tracker.relisted_statuses
    }

    fn held(tracker: &Tracker) -> impl Iterator<Item = &StatusRef> {
        tracker.statuses.keys()
    }

    fn upsert(tracker: &mut Tracker, status: ProviderStatus, fx: &mut Effects) {
        tracker.upsert_status(status, fx);
    }

    fn delete(tracker: &mut Tracker, key: &StatusRef, _: Option<&Self>, _: &mut Effects) {
        // The class keeps what it holds (see the module docs).
        tracker.statuses.remove(key);
    }
}

impl Tracked for ClassMeta {
    type Key = ConfigKey;

    fn key(&self) -> &ConfigKey {
        &self.key
    }

    fn place(key: &ConfigKey) -> (Resource, &str) {
        (Resource::Config(key.kind), &key.namespace)
    }

    fn relisting(tracker: &mut Tracker) -> &mut Relisting<ConfigKey> {
        &mut tracker.relisted_classes
    }

    fn held(tracker: &Tracker) -> impl Iterator<Item = &ConfigKey> {
        // Only classes that say something are held; the matched ones are in both sets.
        tracker.ignored_classes.iter().chain(
            tracker
                .matched
                .iter()
                .filter(|k| k.kind == ConfigKind::SecretProviderClass),
        )
    }

    fn upsert(tracker: &mut Tracker, meta: ClassMeta, fx: &mut Effects) {
        tracker.mark_class(&meta.key, meta.ignored, meta.matched, fx);
    }

    fn delete(tracker: &mut Tracker, key: &ConfigKey, _: Option<&Self>, fx: &mut Effects) {
        // A class deleted while pods still mount it (the driver keeps what it mounted) says nothing.
        tracker.mark_class(key, false, false, fx);
    }
}

impl Tracker {
    /// The same tracker, also following the Secrets Store CSI driver's SecretProviderClassPodStatuses
    /// (`--enable-csi-integration`), in every namespace where it watches ConfigMaps.
    pub fn with_provider_statuses(mut self) -> Self {
        let extra: Vec<Scope> = self
            .scopes
            .iter()
            .filter(|s| s.resource == Resource::Config(ConfigKind::ConfigMap))
            .flat_map(|s| {
                [
                    Resource::ProviderStatus,
                    Resource::Config(ConfigKind::SecretProviderClass),
                ]
                .map(|resource| Scope {
                    resource,
                    namespace: s.namespace.clone(),
                })
            })
            .collect();
        self.scopes.extend(extra);
        self
    }

    /// Notes what class `key`'s own annotations say; a change wakes the workloads it may reload.
    fn mark_class(&mut self, key: &ConfigKey, ignored: bool, matched: bool, fx: &mut Effects) {
        let changed = (self.ignored_classes.contains(key), self.matched.contains(key)) != (ignored, matched);
        for (set, on) in [(&mut self.ignored_classes, ignored), (&mut self.matched, matched)] {
            if on {
                set.insert(key.clone());
            } else {
                set.remove(key);
            }
        }
        if changed && self.configs.contains_key(key) {
            self.wake_dependents(key, fx, false);
        }
    }

    /// What the class `key` mounted at its last rotation (its starting point before any), once some
    /// status has named it.
    pub fn provider_class(&self, key: &ConfigKey) -> Option<Arc<Content>> {
        let content = self.classes.get(key)?;
        if !self.ignored_classes.contains(key) {
            return Some(content.clone());
        }
        let mut ignored = Content::clone(content);
        ignored.reloader_ignored = true;
        Some(Arc::new(ignored))
    }

    fn upsert_status(&mut self, status: ProviderStatus, fx: &mut Effects) {
        // One that names no class reports on nothing (as if it did not exist), and so does one that
        // `--resource-label-selector` does not select (Reloader lists statuses with it).
        let selector = self.reloader.as_ref().and_then(|o| o.resource_selector.as_ref());
        if status.class.is_empty() || selector.is_some_and(|s| !s.matches(&status.labels)) {
            self.statuses.remove(&status.id);
            return;
        }
        let class = status.class_key();
        let sha = status.objects.is_some().then(|| status.sha());
        let before = self.statuses.insert(
            status.id.clone(),
            Status {
                class: class.clone(),
                sha: sha.clone(),
            },
        );
        // Reloader's rule: an update whose SHA-1 differs from the old one (none without objects). The
        // driver never renames a status's class; if it did, that counts as a creation.
        let rotated = before.is_some_and(|old| old.class == class && (old.sha.is_none() || old.sha != sha));
        let holds = self.configs.get(&class);
        let newer = !self.ready
            && holds.is_some_and(|v| {
                reloader::revision(&status.resource_version) > reloader::revision(&v.resource_version)
            });
        if !(rotated || holds.is_none() || newer) {
            return;
        }
        let content = Arc::new(status.content());
        // Another pod's status catching up with the class's rotation changes nothing.
        if holds.is_some() && self.classes.get(&class).is_some_and(|held| **held == *content) {
            return;
        }
        self.classes.insert(class.clone(), content);
        let version = ObjectVersion {
            uid: String::new(),
            resource_version: status.resource_version,
        };
        // A rotation is a data change: it wakes the class's workloads and counts for the flap breaker.
        self.wake_dependents(&class, fx, true);
        self.configs.insert(class, version);
    }
}

#[cfg(test)]
#[path = "provider_statuses_tests.rs"]
mod tests;
