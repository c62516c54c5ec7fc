//! Bulk-read planning: the paginated LISTs that read the referenced ConfigMaps at start-up more cheaply
//! than one GET each (`docs/benchmarks.md`). Secrets are never read in bulk.

use std::collections::BTreeMap;

use super::{Resource, Tracker};
use crate::refs::ConfigKind;

impl Tracker {
    /// The paginated LISTs (of `page` objects per request) that read the referenced ConfigMaps more
    /// cheaply than one GET each, as the content of every workload is first read after start-up:
    ///
    /// - each namespace where at least [`BULK_READ_MIN`] referenced ConfigMaps exist and they are at
    ///   least half of the ConfigMaps there (so the LIST reads little that nobody references); the rest
    ///   are GETs;
    /// - or, when wave watches ConfigMaps in every namespace and ignores none, one LIST of the whole
    ///   cluster, if referenced ConfigMaps are at least half of all and it takes fewer requests than that.
    ///
    /// Secrets are never read in bulk: a LIST returns the data of every Secret in its scope, and wave
    /// reads the data of only the Secrets a workload references, one GET each (docs/behaviour.md,
    /// "Secrets nobody references are never read"). That costs one request per referenced Secret at
    /// start-up (S4 in docs/benchmarks.md).
    pub fn bulk_reads(&self, page: usize) -> Vec<BulkRead> {
        let page = page.max(1);
        let pages = |objects: usize| objects.div_ceil(page);
        let kind = ConfigKind::ConfigMap;
        // namespace → (referenced, present)
        let mut namespaces: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for key in self.configs.keys().filter(|key| key.kind == kind) {
            let (referenced, present) = namespaces.entry(key.namespace.as_str()).or_default();
            *present += 1;
            if self.index.is_referenced(key) {
                *referenced += 1;
            }
        }
        let by_namespace =
            |(referenced, present): (usize, usize)| referenced >= BULK_READ_MIN && 2 * referenced >= present;
        let requests_by_namespace: usize = namespaces
            .values()
            .map(|&(referenced, present)| {
                if by_namespace((referenced, present)) {
                    pages(present)
                } else {
                    referenced
                }
            })
            .sum();
        let (referenced, present) = namespaces
            .values()
            .fold((0, 0), |(r, p), &(referenced, present)| {
                (r + referenced, p + present)
            });
        let cluster_wide = self.ignored_namespaces.is_empty()
            && self
                .scopes
                .iter()
                .any(|s| s.resource == Resource::Config(kind) && s.namespace.is_none());
        if cluster_wide && 2 * referenced >= present && pages(present) < requests_by_namespace {
            return vec![BulkRead { namespace: None }];
        }
        namespaces
            .into_iter()
            .filter(|(_, counts)| by_namespace(*counts))
            .map(|(namespace, _)| BulkRead {
                namespace: Some(namespace.to_string()),
            })
            .collect()
    }
}

/// The fewest referenced ConfigMaps in one namespace that [`Tracker::bulk_reads`] reads with a LIST:
/// below it, a few GETs cost no more.
pub const BULK_READ_MIN: usize = 8;

/// One paginated LIST of ConfigMaps, with their data, of [`Tracker::bulk_reads`]. There is no such
/// thing for Secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkRead {
    /// The namespace listed; `None` for every namespace.
    pub namespace: Option<String>,
}
#[cfg(test)]
#[path = "bulk_tests.rs"]
mod tests;
