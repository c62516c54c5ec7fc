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
//!   a class first learned after that, from a pod created then, is [`reloader::Lifecycle::Appeared`]
//!   until it rotates (what a workload carries for it may predate what that pod mounts);
//! - a **deleted** status changes nothing, not even the class's last one while the SecretProviderClass
//!   exists: the class keeps what it holds, so pods created after a scale to zero report a creation
//!   (Reloader ignores deletions too; `--reload-on-delete` and `--reload-on-create` do not apply to
//!   classes). A class no status names and that no longer exists is forgotten.
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

/// What the tracker knows of one SecretProviderClass (an entry exists while a status names it or the
/// object exists).
#[derive(Debug, Default)]
pub(super) struct Class {
    /// What its last rotation mounted (its starting point before any); `None` until a status names it.
    content: Option<Arc<Content>>,
    /// The statuses that name it now.
    statuses: usize,
    /// The SecretProviderClass itself exists (its metadata watch shows it).
    exists: bool,
    /// It says `reloader.stakater.com/ignore: "true"`.
    ignored: bool,
    /// Learned, after wave was ready, from a pod created then, and not rotated since: what a workload
    /// carries for it may predate a rotation that pod already mounts (`reloader::Lifecycle::Appeared`).
    appeared: bool,
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
        if let Some(gone) = tracker.statuses.remove(key) {
            tracker.release_class(&gone.class);
        }
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
        tracker.classes.iter().filter(|(_, c)| c.exists).map(|(k, _)| k)
    }

    fn upsert(tracker: &mut Tracker, meta: ClassMeta, fx: &mut Effects) {
        tracker.classes.entry(meta.key.clone()).or_default().exists = true;
        tracker.mark_class(&meta.key, meta.ignored, meta.matched, fx);
    }

    fn delete(tracker: &mut Tracker, key: &ConfigKey, _: Option<&Self>, fx: &mut Effects) {
        // A class deleted while pods still mount it (the driver keeps what it mounted) says nothing.
        tracker.mark_class(key, false, false, fx);
        if let Some(class) = tracker.classes.get_mut(key) {
            class.exists = false;
        }
        tracker.forget_class_if_unused(key);
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
        let was_ignored = self.classes.get(key).is_some_and(|c| c.ignored);
        let changed = (was_ignored, self.matched.contains(key)) != (ignored, matched);
        if let Some(class) = self.classes.get_mut(key) {
            class.ignored = ignored;
        }
        if matched {
            self.matched.insert(key.clone());
        } else {
            self.matched.remove(key);
        }
        if changed && self.configs.contains_key(key) {
            self.wake_dependents(key, fx, false);
        }
    }

    /// One status naming `class` went.
    fn release_class(&mut self, class: &ConfigKey) {
        if let Some(held) = self.classes.get_mut(class) {
            held.statuses = held.statuses.saturating_sub(1);
        }
        self.forget_class_if_unused(class);
    }

    /// Forgets `class` once no status names it and it no longer exists (its namespace went, or it was
    /// deleted with its pods): what wave keeps does not grow with classes come and gone. A class that
    /// exists keeps what it holds with no status, so a workload scaled to zero while it rotated is not
    /// reloaded when it scales up (its new pods' statuses are creations).
    fn forget_class_if_unused(&mut self, key: &ConfigKey) {
        if self
            .classes
            .get(key)
            .is_some_and(|c| c.statuses == 0 && !c.exists)
        {
            self.classes.remove(key);
            self.configs.remove(key);
            self.matched.remove(key);
        }
    }

    /// Whether class `key` was learned from a pod created after wave was ready and has not rotated since.
    pub(super) fn class_appeared(&self, key: &ConfigKey) -> bool {
        self.classes.get(key).is_some_and(|c| c.appeared)
    }

    /// What the class `key` mounted at its last rotation (its starting point before any), once some
    /// status has named it.
    pub fn provider_class(&self, key: &ConfigKey) -> Option<Arc<Content>> {
        let class = self.classes.get(key)?;
        let content = class.content.as_ref()?;
        if !class.ignored {
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
            if let Some(gone) = self.statuses.remove(&status.id) {
                self.release_class(&gone.class);
            }
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
        let rotated = match &before {
            Some(old) if old.class == class => old.sha.is_none() || old.sha != sha,
            _ => {
                self.classes.entry(class.clone()).or_default().statuses += 1;
                if let Some(old) = before {
                    self.release_class(&old.class);
                }
                false
            }
        };
        let held_at = self.configs.get(&class).map(|v| v.resource_version.clone());
        let newer = !self.ready
            && held_at
                .as_deref()
                .is_some_and(|at| reloader::revision(&status.resource_version) > reloader::revision(at));
        if !(rotated || held_at.is_none() || newer) {
            return;
        }
        let version = ObjectVersion {
            uid: String::new(),
            resource_version: status.resource_version.clone(),
        };
        let content = Arc::new(status.content());
        let ready = self.ready;
        let held = self.classes.entry(class.clone()).or_default();
        // Another pod's status catching up with the class's rotation changes nothing; during the first
        // list, the newest status's version is kept even with the same content, for the next ones.
        if held.content.as_deref() == Some(&*content) {
            if newer {
                self.configs.insert(class, version);
            }
            return;
        }
        held.appeared = if held.content.is_none() {
            ready
        } else {
            held.appeared && !rotated
        };
        held.content = Some(content);
        // A rotation is a data change: it wakes the class's workloads and counts for the flap breaker.
        self.wake_dependents(&class, fx, true);
        self.configs.insert(class, version);
    }
}

#[cfg(test)]
#[path = "provider_statuses_tests.rs"]
mod tests;
