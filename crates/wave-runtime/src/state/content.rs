//! The content cache: the values of referenced ConfigMaps and Secrets, keyed by `(uid, resourceVersion)`.
//!
//! ```text
//! resolve(refs) ─► for each referenced key, concurrently:
//!                    tracker says absent           ─► absent (no request)
//!                    cached at the tracker's version ─► cached content
//!                    otherwise                      ─► one GET at least as new as the tracker's
//!                                                       version (from the watch cache), cache, use
//! resolve_live(refs) ─► one GET per referenced key, concurrently (the webhook, before it gates)
//! warm (once, when every watch has listed) ─► the paginated LISTs of ConfigMaps Tracker::bulk_reads
//!                                             chooses (per namespace, or cluster-wide); the
//!                                             referenced ones are cached
//! ```
//!
//! Warming first turns the start-up's one GET per referenced ConfigMap into a few LISTs where a
//! namespace holds many referenced ones (S4 in docs/benchmarks.md: thousands of GETs where Wave made
//! none). A LIST that fails only costs its GETs later. Secrets are never listed with their data: each
//! referenced Secret is one GET, so the data of a Secret nobody references never reaches wave.
//!
//! A newer version whose data differs from the cached one is a *data change*, noted for the flap breaker
//! ([`ContentCache::take_data_changes`]): a new resourceVersion alone may be a label or an annotation,
//! which must neither trigger nor delay a rollout.
//!
//! Only objects some opted-in workload references are kept, so memory does not grow with Secrets
//! nobody references. Entries are evicted when the index drops the last reference or the object is
//! deleted. A GET that answers NotFound while the watch still lists the object means a delete is in
//! flight: the object is treated as absent, and its delete event wakes the workload again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use kube::Client;

use wave_core::hash::{Content, Fetched};
use wave_core::refs::{ConfigKey, ConfigKind, References};
use wave_core::tracker::{BulkRead, ObjectVersion, Tracker};

use crate::api::{LIST_PAGE, describe, fetch_content, list_config_maps};
use crate::error::ReconcileError;
use crate::metrics::{KindLabel, Metrics};

struct Entry {
    version: ObjectVersion,
    content: Arc<Content>,
}

/// See the module docs.
pub struct ContentCache {
    client: Client,
    entries: Mutex<HashMap<ConfigKey, Entry>>,
    /// Objects whose data changed, and when that was read, not yet handed to the flap breaker.
    data_changes: Mutex<Vec<(ConfigKey, Instant)>>,
    metrics: Metrics,
}

impl ContentCache {
    /// An empty cache reading through `client`.
    pub fn new(client: Client, metrics: Metrics) -> Self {
        Self {
            client,
            entries: Mutex::new(HashMap::new()),
            data_changes: Mutex::new(Vec::new()),
            metrics,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<ConfigKey, Entry>> {
        // Map operations only under this lock; a poisoned lock is still consistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The content of every referenced object that exists.
    pub async fn resolve(
        &self,
        refs: &References,
        tracker: &RwLock<Tracker>,
    ) -> Result<Fetched, ReconcileError> {
        Ok(self.resolve_versions(refs, tracker).await?.0)
    }

    /// [`Self::resolve`], with the resourceVersion of each content it returns (the version the cache
    /// holds, or the one the GET answered: possibly newer than the watch's).
    pub async fn resolve_versions(
        &self,
        refs: &References,
        tracker: &RwLock<Tracker>,
    ) -> Result<(Fetched, HashMap<ConfigKey, String>), ReconcileError> {
        let lookups = refs.keys().into_iter().map(|key| async move {
            let version = read(tracker).config(&key).cloned();
            let Some(version) = version else {
                return Ok((key, None));
            };
            let cached = self
                .entries()
                .get(&key)
                .filter(|e| e.version == version)
                .map(|e| e.content.clone());
            let read = match cached {
                Some(content) => Some((version, content)),
                None => self.fetch(&key, Some(&version.resource_version), tracker).await?,
            };
            Ok((key, read))
        });
        let found: Vec<_> = futures::future::try_join_all(lookups).await?;
        let versions = found
            .iter()
            .filter_map(|(key, read)| Some((key.clone(), read.as_ref()?.0.resource_version.clone())))
            .collect();
        let fetched = found
            .into_iter()
            .map(|(key, read)| (key, read.map(|(_, content)| content)))
            .collect();
        Ok((collect(fetched), versions))
    }

    /// The content of every referenced object that exists, read from the apiserver whatever the
    /// watches say: a watch may not yet have delivered an object created a moment ago.
    pub async fn resolve_live(
        &self,
        refs: &References,
        tracker: &RwLock<Tracker>,
    ) -> Result<Fetched, ReconcileError> {
        let lookups = refs.keys().into_iter().map(|key| async move {
            let content = self.fetch(&key, None, tracker).await?;
            Ok((key, content.map(|(_, content)| content)))
        });
        Ok(collect(futures::future::try_join_all(lookups).await?))
    }

    /// Reads the referenced ConfigMaps with the paginated LISTs [`Tracker::bulk_reads`] chooses (per
    /// namespace, or of the whole cluster), and caches them, so that the reconciles after start-up find
    /// them cached. Secrets are left to their GETs.
    pub async fn warm(&self, tracker: &RwLock<Tracker>) {
        let bulk = read(tracker).bulk_reads(LIST_PAGE as usize);
        for BulkRead { namespace } in bulk {
            let mut cached = 0;
            let listed = list_config_maps(&self.client, namespace.as_deref(), |meta, content| {
                let key = ConfigKey::new(
                    ConfigKind::ConfigMap,
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default(),
                );
                if self.keep(key, ObjectVersion::of(&meta), Arc::new(content), tracker) {
                    cached += 1;
                }
            })
            .await;
            let namespace = namespace.as_deref().unwrap_or("(all)");
            match listed {
                Ok(()) => tracing::debug!(namespace, cached, "read ConfigMaps in bulk"),
                Err(e) => {
                    tracing::warn!(namespace, error = %describe(&e), "reading ConfigMaps in bulk failed; each is read on its own")
                }
            }
        }
    }

    /// One GET: at least as new as `at`, the version the watch delivered (so that the apiserver can
    /// answer from its watch cache), or a consistent read without it. An apiserver whose cache is behind
    /// `at` answers 504 after 3 s ("Too large resource version"); then one consistent read follows. Any
    /// other error is the answer: a second read would fail alike and only double the requests.
    async fn fetch(
        &self,
        key: &ConfigKey,
        at: Option<&str>,
        tracker: &RwLock<Tracker>,
    ) -> Result<Option<(ObjectVersion, Arc<Content>)>, ReconcileError> {
        self.metrics
            .content_fetches
            .get_or_create(&KindLabel {
                kind: key.kind.kind(),
            })
            .inc();
        let read = match fetch_content(&self.client, key, at).await {
            Err(kube::Error::Api(e)) if at.is_some() && e.code == 504 => {
                tracing::debug!(config = %key, error = %e.message, "the watch cache is behind the watched version; reading from etcd");
                fetch_content(&self.client, key, None).await
            }
            read => read,
        };
        let Some((meta, content)) = read.map_err(|source| ReconcileError::FetchConfig {
            key: key.clone(),
            source: Box::new(source),
        })?
        else {
            return Ok(None);
        };
        let content = Arc::new(content);
        let version = ObjectVersion::of(&meta);
        self.keep(key.clone(), version.clone(), content.clone(), tracker);
        Ok(Some((version, content)))
    }

    /// Caches `content` read at `version` (by a GET or a LIST), only while someone still references the
    /// object, so that a read racing an eviction cannot leave an entry behind. Whether it was cached.
    fn keep(
        &self,
        key: ConfigKey,
        version: ObjectVersion,
        content: Arc<Content>,
        tracker: &RwLock<Tracker>,
    ) -> bool {
        // The read guard is held across the insert (lock order: tracker, then entries, as the router's),
        // so an unreference cannot land between the check and the insert and leave an entry behind.
        let tracker = read(tracker);
        tracker.index().is_referenced(&key) && self.insert(key, version, content)
    }

    /// Caches the content a watch event carried, called by the router under the tracker's write lock
    /// right after it applied that event: only if the tracker now holds exactly this version of a
    /// referenced object (not in an ignored namespace, not gone by now). A reconcile reads the tracker
    /// and the cache after the lock is released, so it finds both at the new version, and needs no GET.
    pub fn keep_watched(
        &self,
        key: ConfigKey,
        version: ObjectVersion,
        content: Content,
        tracker: &Tracker,
    ) -> bool {
        let current = tracker.config(&key) == Some(&version) && tracker.index().is_referenced(&key);
        current && self.insert(key, version, Arc::new(content))
    }

    /// Caches `content` unless a newer version of the object is cached already (two reads may answer
    /// out of order), and notes a data change when it replaces an older version with other data.
    fn insert(&self, key: ConfigKey, version: ObjectVersion, content: Arc<Content>) -> bool {
        let mut entries = self.entries();
        if let Some(old) = entries.get(&key) {
            if version.is_older_than(&old.version) {
                return false;
            }
            if old.version != version && old.content.as_ref() != content.as_ref() {
                let mut changes = self.data_changes.lock().unwrap_or_else(|e| e.into_inner());
                changes.push((key.clone(), Instant::now()));
            }
        }
        entries.insert(key, Entry { version, content });
        self.metrics.cached_config_objects.set(entries.len() as i64);
        true
    }

    /// The data changes read since the last call (see the module docs), oldest first.
    pub fn take_data_changes(&self) -> Vec<(ConfigKey, Instant)> {
        std::mem::take(&mut *self.data_changes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Drops the cached content of `key`.
    pub fn evict(&self, key: &ConfigKey) {
        let mut entries = self.entries();
        if entries.remove(key).is_some() {
            self.metrics.cached_config_objects.set(entries.len() as i64);
        }
    }
}

fn collect(found: Vec<(ConfigKey, Option<Arc<Content>>)>) -> Fetched {
    let mut fetched = Fetched::new();
    for (key, content) in found {
        if let Some(content) = content {
            fetched.insert(key, content);
        }
    }
    fetched
}

/// Read access to the tracker. Writers only run short, non-panicking map updates, so a poisoned lock
/// still holds a consistent view.
pub fn read(tracker: &RwLock<Tracker>) -> std::sync::RwLockReadGuard<'_, Tracker> {
    tracker.read().unwrap_or_else(|e| e.into_inner())
}

/// Write access to the tracker (see [`read`]).
pub fn write(tracker: &RwLock<Tracker>) -> std::sync::RwLockWriteGuard<'_, Tracker> {
    tracker.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cache() -> ContentCache {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        ContentCache::new(client, Metrics::new(&mut registry))
    }

    fn content(value: &str) -> Arc<Content> {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({"data": {"k": value}})).unwrap();
        Arc::new(Content::from_config_map(&cm))
    }

    fn version(resource_version: &str) -> ObjectVersion {
        ObjectVersion {
            uid: "u".into(),
            resource_version: resource_version.into(),
        }
    }

    #[tokio::test]
    async fn a_late_read_never_replaces_a_newer_version_and_each_data_change_is_noted_once() {
        let cache = cache();
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cfg");
        let cached = |c: &ContentCache| {
            c.entries()
                .get(&key)
                .map(|e| (e.version.clone(), e.content.clone()))
        };
        assert!(cache.insert(key.clone(), version("10"), content("a")));
        assert!(
            !cache.insert(key.clone(), version("9"), content("old")),
            "an older answer arriving late"
        );
        assert_eq!(cached(&cache), Some((version("10"), content("a"))));
        assert!(
            cache.take_data_changes().is_empty(),
            "the late read changed nothing"
        );
        assert!(cache.insert(key.clone(), version("11"), content("b")));
        assert!(
            cache.insert(key.clone(), version("11"), content("b")),
            "the same version read twice"
        );
        assert_eq!(cache.take_data_changes().len(), 1, "one change, from a to b");
        assert!(cache.insert(key.clone(), version("12"), content("b")));
        assert!(
            cache.take_data_changes().is_empty(),
            "a new version with the same data is no change"
        );
    }
}
