//! Relists and readiness, for every resource alike. A watch stream relists after a start or a 410:
//! `Init` begins one for its scope, `InitApply` marks an object seen and applies it like any change,
//! `InitDone` deletes what the tracker holds in that scope but the relist did not show again, then marks
//! the scope listed. Objects seen again unchanged wake nothing. **Readiness gate**: nothing is enqueued
//! until every scope has finished its first list; then every workload that needs it is enqueued once.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use super::{Effects, Event, Resource, Scope, Tracker};

/// Per scope whose relist is under way, the keys of the objects it has shown so far.
pub(super) type Relisting<K> = HashMap<Scope, HashSet<K>>;

/// What the tracker keeps of one resource, as [`Tracker::apply_event`] needs it: implemented by
/// `Workload` (`workloads`), `ConfigMeta` (`configs`) and `NamespaceMeta` (`namespaces`).
pub(super) trait Tracked: Sized {
    /// What identifies an object.
    type Key: Eq + Hash + Clone + 'static;
    /// The object's key.
    fn key(&self) -> &Self::Key;
    /// The resource and namespace of the object `key` names: which scopes cover it.
    fn place(key: &Self::Key) -> (Resource, &str);
    /// The relists of this resource under way.
    fn relisting(tracker: &mut Tracker) -> &mut Relisting<Self::Key>;
    /// The keys of the objects the tracker holds, in every scope.
    fn held(tracker: &Tracker) -> impl Iterator<Item = &Self::Key>;
    /// The object was created or changed, or a relist showed it.
    fn upsert(tracker: &mut Tracker, object: Self, fx: &mut Effects);
    /// The object was deleted (`last`: its watch event, carrying the deletion's resourceVersion), or a
    /// relist did not show it again (`None`).
    fn delete(tracker: &mut Tracker, key: &Self::Key, last: Option<&Self>, fx: &mut Effects);
}

impl Tracker {
    /// Applies one event of the watch stream of `scope`.
    pub(super) fn apply_event<T: Tracked>(&mut self, scope: Scope, event: Event<T>, fx: &mut Effects) {
        match event {
            Event::Init => {
                T::relisting(self).insert(scope, HashSet::new());
            }
            Event::InitApply(object) => {
                T::relisting(self)
                    .entry(scope)
                    .or_default()
                    .insert(object.key().clone());
                T::upsert(self, object, fx);
            }
            Event::Apply(object) => T::upsert(self, object, fx),
            Event::Delete(object) => T::delete(self, object.key(), Some(&object), fx),
            Event::InitDone => {
                let seen = T::relisting(self).remove(&scope).unwrap_or_default();
                let gone: Vec<T::Key> = T::held(self)
                    .filter(|key| {
                        let (resource, namespace) = T::place(key);
                        scope.covers(resource, namespace) && !seen.contains(*key)
                    })
                    .cloned()
                    .collect();
                for key in gone {
                    T::delete(self, &key, None, fx);
                }
                self.mark_synced(scope, fx);
            }
        }
    }

    fn mark_synced(&mut self, scope: Scope, fx: &mut Effects) {
        self.synced.insert(scope);
        if !self.ready && self.scopes.iter().all(|s| self.synced.contains(s)) {
            self.ready = true;
            fx.became_ready = true;
            fx.enqueue = self.all_to_reconcile();
            fx.config_triggered = false;
        }
    }
}

#[cfg(test)]
#[path = "relist_tests.rs"]
mod tests;
