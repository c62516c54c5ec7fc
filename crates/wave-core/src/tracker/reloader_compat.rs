//! Reloader compatibility's part of the tracker (`--reloader-compat`, `crate::reloader`): what a
//! workload asked Reloader to watch, the objects that may reload it ([`reloader::Candidate`]), and what
//! they need remembered: `reloader.stakater.com/match` marks, objects created or deleted after the first
//! list (`--reload-on-create`, `--reload-on-delete`), and objects `--resource-label-selector` hides.

use super::{ConfigMeta, Tracker};
use crate::refs::ConfigKey;
use crate::reloader;
use crate::workload::{Workload, WorkloadRef};

impl Tracker {
    /// The same tracker, also tracking workloads opted in through Stakater Reloader's annotations.
    pub fn with_reloader(mut self, options: reloader::Options) -> Self {
        self.reloader = Some(options);
        self
    }

    /// Reloader compatibility's settings, when it is on.
    pub fn reloader(&self) -> Option<&reloader::Options> {
        self.reloader.as_ref()
    }

    /// What `workload` asked Reloader to watch, when compatibility is on and it asked anything.
    pub fn reloader_selection(&self, workload: &Workload) -> Option<reloader::Selection> {
        reloader::selection(workload, self.reloader.as_ref()?)
    }

    /// The objects that exist, or were deleted while wave watched, and may reload `workload` under
    /// `needs`: those it references or names, and, when it scans, every object of its namespace.
    pub fn reloader_candidates(
        &self,
        workload: &Workload,
        needs: &reloader::Needs,
    ) -> Vec<reloader::Candidate> {
        let candidate = |key: &ConfigKey| {
            let reload_on_create = self.reloader.as_ref().is_some_and(|o| o.reload_on_create);
            let lifecycle = if self.class_appeared(key) {
                reloader::Lifecycle::Appeared
            } else if self.deleted.contains_key(key) {
                reloader::Lifecycle::Deleted
            } else if reload_on_create && self.created.contains_key(key) {
                reloader::Lifecycle::Created
            } else {
                reloader::Lifecycle::Existing
            };
            reloader::Candidate {
                key: key.clone(),
                matched: self.matched.contains(key),
                lifecycle,
            }
        };
        let ns = &workload.id.namespace;
        let known = self
            .configs
            .keys()
            .chain(self.deleted.keys())
            .filter(|k| !self.unselected.contains(*k));
        if needs.scan {
            known.filter(|k| &k.namespace == ns).map(candidate).collect()
        } else {
            known.filter(|k| needs.keys.contains(*k)).map(candidate).collect()
        }
    }

    /// Notes the creation of `workload`, first seen after the first list, when it opted in through
    /// Reloader's annotations: its resourceVersion is its starting point's (`reloader::since_creation`).
    pub(super) fn note_reloader_birth(&mut self, workload: &Workload) {
        if self.reloader_selection(workload).is_some()
            && let Some(at) = reloader::revision(&workload.resource_version)
        {
            self.born.insert(workload.id.clone(), at);
        }
    }

    /// Forgets when `workload` was created: wave has read every target of it, and what it read is
    /// each one's starting point from then on.
    pub fn settle_reloader_birth(&mut self, workload: &WorkloadRef) {
        self.born.remove(workload);
        // Without `--reload-on-create`, creations are remembered only to date them against a workload
        // not yet settled: with none left, they are dropped, so the map does not grow with creations.
        if self.born.is_empty() && !self.reloader.as_ref().is_some_and(|o| o.reload_on_create) {
            self.created.clear();
        }
    }

    /// What the object `key` went through since `workload` was created, when wave saw it created, for
    /// the data read at `read_at` (`None`: the object does not exist).
    pub fn reloader_since_creation(
        &self,
        workload: &WorkloadRef,
        key: &ConfigKey,
        read_at: Option<&str>,
    ) -> reloader::SinceCreation {
        // Most workloads were not seen created: no lookup of the object's history for them.
        let Some(born) = self.born.get(workload).copied() else {
            return reloader::SinceCreation::Unknown;
        };
        let history = reloader::History {
            read_at,
            created_at: self.created.get(key).copied(),
            deleted_at: self.deleted.get(key).copied().flatten(),
        };
        reloader::since_creation(Some(born), history)
    }

    /// Notes what Reloader compatibility remembers of `meta`, before its version is recorded: created
    /// after the first list, no longer deleted, selected by `--resource-label-selector` or not, marked
    /// `match` or not.
    pub(super) fn note_reloader_marks(&mut self, meta: &ConfigMeta) {
        let reloader = self.reloader.as_ref();
        if self.ready && !self.configs.contains_key(&meta.key) && reloader.is_some() {
            match reloader::revision(&meta.version.resource_version) {
                Some(at) => self.created.insert(meta.key.clone(), at),
                None => self.created.remove(&meta.key),
            };
        }
        self.deleted.remove(&meta.key);
        match reloader.and_then(|o| o.resource_selector.as_ref()) {
            Some(selector) if !selector.matches(&meta.labels) => {
                self.unselected.insert(meta.key.clone());
            }
            _ => {
                self.unselected.remove(&meta.key);
            }
        }
        if meta.reloader_match {
            self.matched.insert(meta.key.clone());
        } else {
            self.matched.remove(&meta.key);
        }
    }

    /// Forgets what Reloader compatibility remembers of the deleted object `key`, except, with
    /// `--reload-on-delete` after the first list, that it was deleted (and its `match` mark) when a
    /// workload references it or scans its namespace.
    pub(super) fn forget_reloader_marks(&mut self, key: &ConfigKey, deleted_at: Option<u64>) {
        self.created.remove(key);
        self.unselected.remove(key);
        let wanted = self.index.is_referenced(key) || self.scanning.contains_key(&key.namespace);
        if self.ready && wanted && self.reloader.as_ref().is_some_and(|o| o.reload_on_delete) {
            self.deleted.insert(key.clone(), deleted_at);
        } else {
            self.matched.remove(key);
        }
    }
}

#[cfg(test)]
#[path = "reloader_compat_tests.rs"]
mod tests;
