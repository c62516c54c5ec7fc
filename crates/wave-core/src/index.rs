//! The reverse index: config object → the opted-in workloads that reference it.
//!
//! ```text
//! workload watch ─► replace(workload, its ConfigKeys) ─┐
//!                   remove(workload)  ─────────────────┤  forward: WorkloadRef → [ConfigKey]
//!                                                      │  reverse: ConfigKey   → {WorkloadRef}
//! config watch ───► dependents(config key) ◄───────────┘
//! ```
//!
//! Keys include objects that do not exist yet, so their creation wakes the workload. Replacing one
//! workload's entries costs O(its references), never a scan of the index (Wave scans everything).

use std::collections::{BTreeSet, HashMap, HashSet};

use super::refs::ConfigKey;
use super::workload::WorkloadRef;

/// Config object → workloads, and back.
#[derive(Debug, Default)]
pub struct RefIndex {
    /// Each workload's keys, sorted. A boxed slice, not a `BTreeSet`: a set allocates a node of eleven
    /// slots (about 630 bytes) for the two or three keys a workload has, once per workload.
    forward: HashMap<WorkloadRef, Box<[ConfigKey]>>,
    reverse: HashMap<ConfigKey, HashSet<WorkloadRef>>,
}

impl RefIndex {
    /// Sets the objects `workload` references. Returns the keys nobody references any more.
    pub fn replace(&mut self, workload: &WorkloadRef, keys: BTreeSet<ConfigKey>) -> Vec<ConfigKey> {
        if keys.is_empty() {
            return self.remove(workload);
        }
        // A set iterates in order, so the slice is sorted; the keys move into it rather than being cloned,
        // since this runs on every workload event.
        let keys: Box<[ConfigKey]> = keys.into_iter().collect();
        let old = self.forward.remove(workload).unwrap_or_default();
        for key in keys.iter().filter(|k| old.binary_search(k).is_err()) {
            self.reverse
                .entry(key.clone())
                .or_default()
                .insert(workload.clone());
        }
        let orphans = old
            .into_iter()
            .filter(|k| keys.binary_search(k).is_err() && self.unlink(k, workload))
            .collect();
        self.forward.insert(workload.clone(), keys);
        orphans
    }

    /// Forgets `workload`. Returns the keys nobody references any more.
    pub fn remove(&mut self, workload: &WorkloadRef) -> Vec<ConfigKey> {
        let old = self.forward.remove(workload).unwrap_or_default();
        old.into_iter().filter(|k| self.unlink(k, workload)).collect()
    }

    /// Removes one reverse edge; true if the key has no dependents left.
    fn unlink(&mut self, key: &ConfigKey, workload: &WorkloadRef) -> bool {
        let Some(set) = self.reverse.get_mut(key) else {
            return true;
        };
        set.remove(workload);
        if set.is_empty() {
            self.reverse.remove(key);
            true
        } else {
            false
        }
    }

    /// The workloads that reference `key`.
    pub fn dependents(&self, key: &ConfigKey) -> impl Iterator<Item = &WorkloadRef> {
        self.reverse.get(key).into_iter().flatten()
    }

    /// Whether any workload references `key`.
    pub fn is_referenced(&self, key: &ConfigKey) -> bool {
        self.reverse.contains_key(key)
    }

    /// Number of indexed workloads.
    pub fn workload_count(&self) -> usize {
        self.forward.len()
    }

    /// Number of distinct referenced config objects (present or not).
    pub fn config_count(&self) -> usize {
        self.reverse.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::ConfigKind;
    use crate::workload::WorkloadKind;

    fn w(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", name)
    }

    fn cm(name: &str) -> ConfigKey {
        ConfigKey::new(ConfigKind::ConfigMap, "ns", name)
    }

    fn keys(names: &[&str]) -> BTreeSet<ConfigKey> {
        names.iter().map(|n| cm(n)).collect()
    }

    fn deps(index: &RefIndex, key: &str) -> BTreeSet<String> {
        index.dependents(&cm(key)).map(|w| w.name.clone()).collect()
    }

    #[test]
    fn dependents_are_found_from_the_config_object() {
        let mut index = RefIndex::default();
        index.replace(&w("a"), keys(&["x", "y"]));
        index.replace(&w("b"), keys(&["y"]));
        assert_eq!(deps(&index, "x"), BTreeSet::from(["a".into()]));
        assert_eq!(deps(&index, "y"), BTreeSet::from(["a".into(), "b".into()]));
        assert_eq!((index.workload_count(), index.config_count()), (2, 2));
    }

    #[test]
    fn replacing_references_drops_old_edges_and_reports_orphans() {
        let mut index = RefIndex::default();
        index.replace(&w("a"), keys(&["x", "y"]));
        index.replace(&w("b"), keys(&["y"]));
        let orphans = index.replace(&w("a"), keys(&["z"]));
        assert_eq!(orphans, vec![cm("x")], "y is still used by b");
        assert!(deps(&index, "x").is_empty());
        assert_eq!(deps(&index, "y"), BTreeSet::from(["b".into()]));
    }

    #[test]
    fn removing_a_workload_cleans_every_edge() {
        let mut index = RefIndex::default();
        index.replace(&w("a"), keys(&["x"]));
        assert_eq!(index.remove(&w("a")), vec![cm("x")]);
        assert_eq!((index.workload_count(), index.config_count()), (0, 0));
        assert!(index.remove(&w("a")).is_empty(), "removing twice is harmless");
    }

    #[test]
    fn replacing_with_the_same_or_more_references_orphans_nothing() {
        let mut index = RefIndex::default();
        index.replace(&w("a"), keys(&["y", "x"]));
        assert!(index.replace(&w("a"), keys(&["x", "y"])).is_empty());
        assert!(index.replace(&w("a"), keys(&["w", "x", "y"])).is_empty());
        for key in ["w", "x", "y"] {
            assert_eq!(deps(&index, key), BTreeSet::from(["a".into()]), "{key}");
        }
        assert_eq!(index.remove(&w("a")), vec![cm("w"), cm("x"), cm("y")], "sorted");
    }

    #[test]
    fn a_workload_with_no_references_is_not_indexed() {
        let mut index = RefIndex::default();
        index.replace(&w("a"), keys(&[]));
        assert_eq!(index.workload_count(), 0);
    }
}
