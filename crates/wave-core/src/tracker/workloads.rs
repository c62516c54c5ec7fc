//! Workloads: they appear, change (a reconcile only when their generation or annotations change, never
//! for status alone, `docs/behaviour.md` difference `status-updates`; rollout progress for pacing) and
//! go; what each references is indexed, and Reloader workloads that scan a namespace are noted.

use std::borrow::Cow;
use std::sync::Arc;

use super::relist::{Relisting, Tracked};
use super::{Effects, Resource, Tracker, adoption::adoption};
use crate::workload::{Workload, WorkloadRef};

impl Tracked for Workload {
    type Key = WorkloadRef;

    fn key(&self) -> &WorkloadRef {
        &self.id
    }

    fn place(id: &WorkloadRef) -> (Resource, &str) {
        (Resource::Workload(id.kind), &id.namespace)
    }

    fn relisting(tracker: &mut Tracker) -> &mut Relisting<WorkloadRef> {
        &mut tracker.relisted_workloads
    }

    fn held(tracker: &Tracker) -> impl Iterator<Item = &WorkloadRef> {
        tracker.workloads.keys()
    }

    fn upsert(tracker: &mut Tracker, workload: Workload, fx: &mut Effects) {
        tracker.upsert_workload(workload, fx);
    }

    fn delete(tracker: &mut Tracker, id: &WorkloadRef, _: Option<&Self>, fx: &mut Effects) {
        tracker.delete_workload(id, fx);
    }
}

impl Tracker {
    /// Every workload seen.
    pub fn workloads(&self) -> impl Iterator<Item = &Workload> + Clone {
        self.workloads.values().map(|w| w.as_ref())
    }

    /// The view of one workload, borrowed.
    pub fn workload_view(&self, id: &WorkloadRef) -> Option<&Workload> {
        self.workloads.get(id).map(|w| w.as_ref())
    }

    /// The view of one workload, shared.
    pub fn workload(&self, id: &WorkloadRef) -> Option<Arc<Workload>> {
        let w = self.workloads.get(id)?;
        Some(match self.effective(w) {
            Cow::Borrowed(_) => w.clone(),
            Cow::Owned(view) => Arc::new(view),
        })
    }

    fn upsert_workload(&mut self, w: Workload, fx: &mut Effects) {
        if self.ready && !self.workloads.contains_key(&w.id) {
            self.note_reloader_birth(&w);
        }
        let view = self.effective(&w);
        self.reindex(&view, fx);
        let changed = match self.workloads.get(&w.id) {
            None => true,
            Some(prev) => prev.generation != w.generation || prev.annotations != w.annotations,
        };
        let adopts = adoption(&w);
        let adopted = self.workloads.get(&w.id).and_then(|prev| adoption(prev));
        let enqueue = self.ready && changed && self.needs_reconcile(&view);
        drop(view);
        let progressed = self.workloads.get(&w.id).is_some_and(|prev| {
            changed || prev.progress != w.progress || prev.current_hash() != w.current_hash()
        });
        if self.ready && progressed && w.is_opted_in() {
            fx.progressed.push(w.id.clone());
        }
        if progressed || !self.workloads.contains_key(&w.id) {
            fx.observed.push(w.id.clone());
        }
        if enqueue {
            fx.enqueue.push(w.id.clone());
        }
        let id = w.id.clone();
        self.workloads.insert(w.id.clone(), Arc::new(w));
        if changed && (adopts.is_some() || adopted.is_some()) {
            self.adopt(&id, adopted, adopts, fx);
        }
    }

    /// Indexes what `view` references (Reloader's selection, or wave's references).
    pub(super) fn reindex(&mut self, view: &Workload, fx: &mut Effects) {
        let reloader = self.reloader_selection(view).map(|sel| sel.needs(view));
        let keys = match &reloader {
            Some(needs) => needs.keys.clone(),
            None => view.references(self.cross_namespace).keys(),
        };
        self.set_scanning(&view.id, reloader.is_some_and(|n| n.scan));
        let orphans = self.index.replace(&view.id, keys);
        fx.evict.extend(orphans);
    }

    fn delete_workload(&mut self, id: &WorkloadRef, fx: &mut Effects) {
        if let Some(gone) = self.workloads.remove(id) {
            fx.deleted.push(id.clone());
            fx.progressed.push(id.clone());
            fx.observed.push(id.clone());
            if let Some(deployment) = adoption(&gone) {
                self.adopt(id, Some(deployment), None, fx);
            }
        }
        self.set_scanning(id, false);
        self.born.remove(id);
        fx.evict.extend(self.index.remove(id));
    }

    fn set_scanning(&mut self, id: &WorkloadRef, scans: bool) {
        if scans {
            self.scanning
                .entry(id.namespace.clone())
                .or_default()
                .insert(id.clone());
        } else if let Some(set) = self.scanning.get_mut(&id.namespace) {
            set.remove(id);
            if set.is_empty() {
                self.scanning.remove(&id.namespace);
            }
        }
    }
}

#[cfg(test)]
#[path = "workloads_tests.rs"]
mod tests;
