//! Namespaces: `--namespaces-to-ignore` (nothing in them is tracked), which namespaces are watched,
//! and `--namespace-selector` (workloads are acted on only in the namespaces it selects now, as the
//! namespace watch shows their labels; a namespace newly selected has its workloads checked).

use std::collections::BTreeSet;

use super::relist::{Relisting, Tracked};
use super::{Effects, NamespaceMeta, Resource, Scope, Tracker};
use crate::selector::LabelSelector;
use crate::workload::WorkloadRef;

impl Tracked for NamespaceMeta {
    type Key = String;

    fn key(&self) -> &String {
        &self.name
    }

    fn place(name: &String) -> (Resource, &str) {
        (Resource::Namespace, name)
    }

    fn relisting(tracker: &mut Tracker) -> &mut Relisting<String> {
        &mut tracker.relisted_namespaces
    }

    fn held(tracker: &Tracker) -> impl Iterator<Item = &String> {
        tracker.selected.iter()
    }

    fn upsert(tracker: &mut Tracker, ns: NamespaceMeta, fx: &mut Effects) {
        tracker.upsert_namespace(ns, fx);
    }

    fn delete(tracker: &mut Tracker, name: &String, _: Option<&Self>, _: &mut Effects) {
        tracker.selected.remove(name);
    }
}

impl Tracker {
    /// The same tracker, leaving out everything in `namespaces` (`--namespaces-to-ignore`).
    pub fn ignoring(mut self, namespaces: BTreeSet<String>) -> Self {
        self.ignored_namespaces = namespaces;
        self
    }

    /// Whether `namespace` is watched; a reference outside the watched namespaces cannot be tracked.
    pub fn watches_namespace(&self, namespace: &str) -> bool {
        !self.ignored_namespaces.contains(namespace)
            && self
                .scopes
                .iter()
                .any(|s| s.namespace.as_deref().is_none_or(|ns| ns == namespace))
    }

    /// The same tracker, acting only on workloads in the namespaces `selector` selects, as their labels
    /// say now (a namespace watch joins the scopes).
    pub fn selecting_namespaces(mut self, selector: LabelSelector) -> Self {
        self.namespace_selector = Some(selector);
        self.scopes.push(Scope {
            resource: Resource::Namespace,
            namespace: None,
        });
        self
    }

    /// How many namespaces `--namespace-selector` selects now (0 without one).
    pub fn selected_namespace_count(&self) -> usize {
        self.selected.len()
    }

    /// Whether wave acts on workloads in `namespace` (always, without `--namespace-selector`).
    pub fn selects_namespace(&self, namespace: &str) -> bool {
        self.namespace_selector.is_none() || self.selected.contains(namespace)
    }

    fn upsert_namespace(&mut self, ns: NamespaceMeta, fx: &mut Effects) {
        let now = self
            .namespace_selector
            .as_ref()
            .is_none_or(|s| s.matches(&ns.labels));
        let was = !self.selected.insert(ns.name.clone());
        if !now {
            self.selected.remove(&ns.name);
        } else if !was && self.ready {
            // Newly selected: every workload there is checked, as at startup.
            let mut woken: Vec<WorkloadRef> = self
                .workloads
                .values()
                .filter(|w| w.id.namespace == ns.name && self.needs_reconcile(w))
                .map(|w| w.id.clone())
                .collect();
            woken.sort();
            fx.enqueue.extend(woken);
        }
    }
}

#[cfg(test)]
#[path = "namespaces_tests.rs"]
mod tests;
