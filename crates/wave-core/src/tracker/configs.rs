//! Config objects, as their metadata watches show them: their versions (a change of uid or
//! resourceVersion wakes the workloads that use them, from the index; whether the content changed is
//! the reconcile's business), `wave.pusher.com/ignore` marks, and what created or deleted objects mean
//! to the flap breaker. Owners and Reloader's marks are noted on the way (`owners`, `reloader_compat`).

use super::relist::{Relisting, Tracked};
use super::{ConfigMeta, Effects, ObjectVersion, RefIndex, Resource, Tracker};
use crate::refs::ConfigKey;

impl Tracked for ConfigMeta {
    type Key = ConfigKey;

    fn key(&self) -> &ConfigKey {
        &self.key
    }

    fn place(key: &ConfigKey) -> (Resource, &str) {
        (Resource::Config(key.kind), &key.namespace)
    }

    fn relisting(tracker: &mut Tracker) -> &mut Relisting<ConfigKey> {
        &mut tracker.relisted_configs
    }

    fn held(tracker: &Tracker) -> impl Iterator<Item = &ConfigKey> {
        tracker.configs.keys()
    }

    fn upsert(tracker: &mut Tracker, meta: ConfigMeta, fx: &mut Effects) {
        tracker.upsert_config(meta, fx);
    }

    fn delete(tracker: &mut Tracker, key: &ConfigKey, last: Option<&Self>, fx: &mut Effects) {
        let deleted_at = last.and_then(|meta| crate::reloader::revision(&meta.version.resource_version));
        tracker.delete_config(key, deleted_at, fx);
    }
}

impl Tracker {
    /// The current version of a config object; `None` if it does not exist.
    pub fn config(&self, key: &ConfigKey) -> Option<&ObjectVersion> {
        self.configs.get(key)
    }

    /// The reverse index.
    pub fn index(&self) -> &RefIndex {
        &self.index
    }

    /// Number of config objects seen (referenced or not).
    pub fn config_object_count(&self) -> usize {
        self.configs.len()
    }

    fn upsert_config(&mut self, meta: ConfigMeta, fx: &mut Effects) {
        let changed = self.configs.get(&meta.key) != Some(&meta.version);
        self.note_reloader_marks(&meta);
        let was_ignored = self.ignored.contains(&meta.key);
        let created = !self.configs.contains_key(&meta.key);
        // An ignored object wakes nobody, except when it becomes ignored (it leaves the hash).
        if changed && !(meta.ignored && was_ignored) {
            self.wake_dependents(&meta.key, fx, created);
        }
        if meta.ignored {
            self.ignored.insert(meta.key.clone());
        } else if was_ignored {
            self.ignored.remove(&meta.key);
        }
        self.set_owners(&meta.key, meta.owners);
        self.configs.insert(meta.key, meta.version);
    }

    fn delete_config(&mut self, key: &ConfigKey, deleted_at: Option<u64>, fx: &mut Effects) {
        if self.configs.remove(key).is_some() {
            self.wake_dependents(key, fx, true);
        }
        self.set_owners(key, Vec::new());
        self.ignored.remove(key);
        self.forget_reloader_marks(key, deleted_at);
        fx.evict.push(key.clone());
    }

    /// Wakes the workloads that use `key`; `existence` when it was created or deleted (`Effects`).
    pub(super) fn wake_dependents(&self, key: &ConfigKey, fx: &mut Effects, existence: bool) {
        if !self.ready {
            return;
        }
        let before = fx.enqueue.len();
        fx.enqueue.extend(
            self.index
                .dependents(key)
                .filter(|w| self.selects_namespace(&w.namespace))
                .cloned(),
        );
        // The queue drops a workload enqueued twice.
        if self.selects_namespace(&key.namespace) {
            fx.enqueue
                .extend(self.scanning.get(&key.namespace).into_iter().flatten().cloned());
        }
        if fx.enqueue.len() > before {
            fx.config_triggered = true;
            if existence {
                fx.changed_configs.push(key.clone());
            }
        }
    }
}

#[cfg(test)]
#[path = "configs_tests.rs"]
mod tests;
