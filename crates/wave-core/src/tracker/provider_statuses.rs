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
//! - a **deleted** status changes nothing, until the class's last one goes: then the class is gone
//!   (Reloader ignores deletions too, and nothing reloads: `--reload-on-delete` and `--reload-on-create`
//!   do not apply to classes, `reloader_compat`).
//!
//! Statuses are only read in the namespaces wave watches, and a status reloads only workloads of its
//! own namespace (a class is a config object of the status's namespace).

use std::sync::Arc;

use super::relist::{Relisting, Tracked};
use super::{Effects, ObjectVersion, Resource, Scope, Tracker};
use crate::hash::Content;
use crate::refs::ConfigKey;
use crate::reloader::{self, ProviderStatus, StatusRef};

/// What is kept of one status.
#[derive(Debug)]
pub(super) struct Status {
    class: ConfigKey,
    /// Reloader's SHA-1 of it; `None` while it has no `objects`.
    sha: Option<String>,
}

/// What a class holds: the content its last rotation mounted, and how many statuses name it.
#[derive(Debug)]
pub(super) struct Class {
    content: Arc<Content>,
    statuses: usize,
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

    fn delete(tracker: &mut Tracker, key: &StatusRef, _: Option<&Self>, fx: &mut Effects) {
        tracker.delete_status(key, fx);
    }
}

impl Tracker {
    /// The same tracker, also following the Secrets Store CSI driver's SecretProviderClassPodStatuses
    /// (`--enable-csi-integration`), in every namespace where it watches ConfigMaps.
    pub fn with_provider_statuses(mut self) -> Self {
        let extra: Vec<Scope> = self
            .scopes
            .iter()
            .filter(|s| s.resource == Resource::Config(crate::refs::ConfigKind::ConfigMap))
            .map(|s| Scope {
                resource: Resource::ProviderStatus,
                namespace: s.namespace.clone(),
            })
            .collect();
        self.scopes.extend(extra);
        self
    }

    /// What the class `key` mounted at its last rotation (its starting point before any), when some
    /// status names it.
    pub fn provider_class(&self, key: &ConfigKey) -> Option<Arc<Content>> {
        self.classes.get(key).map(|c| c.content.clone())
    }

    fn upsert_status(&mut self, status: ProviderStatus, fx: &mut Effects) {
        // One that names no class reports on nothing (as if it did not exist).
        if status.class.is_empty() {
            self.delete_status(&status.id, fx);
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
        let rotated = match &before {
            // The driver never renames a status's class; if it did, the old class loses a status.
            Some(old) if old.class != class => {
                self.release_class(&old.class, fx);
                self.count_status(&class);
                false
            }
            // Reloader's rule: an update whose SHA-1 differs from the old one (none without objects).
            Some(old) => old.sha.is_none() || old.sha != sha,
            None => {
                self.count_status(&class);
                false
            }
        };
        let holds = self.configs.get(&class).cloned();
        let newer = !self.ready
            && holds.as_ref().is_some_and(|v| {
                reloader::revision(&status.resource_version) > reloader::revision(&v.resource_version)
            });
        if !(rotated || holds.is_none() || newer) {
            return;
        }
        let content = Arc::new(status.content());
        if let Some(held) = self.classes.get_mut(&class) {
            // Another pod's status catching up with the class's rotation changes nothing.
            if holds.is_some() && *held.content == *content {
                return;
            }
            held.content = content;
        }
        let version = ObjectVersion {
            uid: String::new(),
            resource_version: status.resource_version,
        };
        // A rotation is a data change: it wakes the class's workloads and counts for the flap breaker.
        self.wake_dependents(&class, fx, true);
        self.configs.insert(class, version);
    }

    fn count_status(&mut self, class: &ConfigKey) {
        self.classes
            .entry(class.clone())
            .or_insert_with(|| Class {
                content: Arc::new(Content::default()),
                statuses: 0,
            })
            .statuses += 1;
    }

    fn delete_status(&mut self, id: &StatusRef, fx: &mut Effects) {
        if let Some(gone) = self.statuses.remove(id) {
            self.release_class(&gone.class, fx);
        }
    }

    /// One status naming `class` went: with the last one, the class is gone.
    fn release_class(&mut self, class: &ConfigKey, fx: &mut Effects) {
        let Some(held) = self.classes.get_mut(class) else {
            return;
        };
        held.statuses -= 1;
        if held.statuses == 0 {
            self.classes.remove(class);
            if self.configs.remove(class).is_some() {
                self.wake_dependents(class, fx, false);
            }
        }
    }
}

#[cfg(test)]
#[path = "provider_statuses_tests.rs"]
mod tests;
