//! Watch streams: one per [`Scope`] (resource × namespace), merged into one stream of [`Change`]s.
//!
//! ```text
//! Api<DynamicObject> per workload kind ─watcher─► Workload (template and progress kept) ───┐
//! Api<ConfigMap> ─watcher─► ConfigMeta (key, uid, rv) [+ Content: an update of a referenced one] ┤
//! Api<PartialObjectMeta<Secret>> ─watcher─► ConfigMeta (key, uid, rv) ──────────────────┼─► Arrival
//! Api<PartialObjectMeta<Namespace>> (--namespace-selector) ─► NamespaceMeta (name, labels) ┤
//! Api<DynamicObject> SecretProviderClassPodStatus (--enable-csi-integration) ─► ProviderStatus ┤
//! Api<PartialObjectMeta<SecretProviderClass>> (--enable-csi-integration) ─► ClassMeta ────────┘
//! ```
//!
//! Secrets are watched metadata-only: their values never cross the wire here, and each one costs a key
//! and two short strings; a referenced Secret's data is one GET when it changes. ConfigMaps hold no
//! secrets, so they are watched whole: an update of a ConfigMap some opted-in workload references
//! carries its content to the router, which caches it before the workload is woken, and the reconcile
//! needs no GET (one round trip less per change, S1 and S4 in docs/benchmarks.md). Every other
//! ConfigMap's data is dropped as soon as its event is read, so memory stays what the metadata costs;
//! the initial list's and a relist's contents are dropped too (the start-up's bulk read caches what is
//! referenced). A list page of ConfigMaps is the bulk read's (100 objects), since each may hold 1 MiB;
//! `controller::read` drops contents while the router's backlog is half full. Watch errors are items,
//! not the end of a stream
//! (kube-rs/kube#1615); the stream backs off and resumes, and the last error of each scope is kept for
//! `/readyz` so a permission problem is visible instead of silent.
//!
//! The backoff is short ([`watch_backoff`]): an apiserver restart (every managed-cluster upgrade) must
//! not leave wave blind for a minute after the apiserver is back.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use wave_core::hash::Content;
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::tracker::{
    Change, ConfigMeta, Event, NamespaceMeta, ObjectVersion, Resource as Watched, Scope,
};
use wave_core::workload::{Progress, Workload, WorkloadKind, pod_template};

use crate::api::{self, describe as describe_error};
use crate::metrics::{Metrics, ResourceLabel};
use crate::state::health::{WatchHealth, describe};

/// A watch event as the router takes it: the change, and for an update of a referenced ConfigMap, its
/// content (see the module docs).
pub struct Arrival {
    pub change: Change,
    pub content: Option<Content>,
}

impl From<Change> for Arrival {
    fn from(change: Change) -> Self {
        Arrival {
            change,
            content: None,
        }
    }
}

/// Whether some opted-in workload references a config object: whose content an update carries on.
pub type Referenced = Arc<dyn Fn(&ConfigKey) -> bool + Send + Sync>;

/// One merged stream of every scope's events.
pub fn changes(
    client: &Client,
    scopes: &[Scope],
    health: Arc<WatchHealth>,
    metrics: &Metrics,
    referenced: Referenced,
) -> BoxStream<'static, Arrival> {
    let streams = scopes.iter().map(|scope| {
        let (h, m) = (health.clone(), metrics.clone());
        let ns = scope.namespace.as_deref();
        match scope.resource {
            Watched::Workload(kind) => {
                let api = api::workload_api(client, kind, ns);
                scoped(api, scope.clone(), h, m, move |scope, event| {
                    Change::Workload(scope, event.map(|object| to_workload(kind, object))).into()
                })
            }
            Watched::Config(ConfigKind::ConfigMap) => {
                let api = api::scoped::<ConfigMap>(client, ns);
                let referenced = referenced.clone();
                scoped(api, scope.clone(), h, m, move |scope, event| {
                    let content = match &event {
                        Event::Apply(cm) => {
                            Some(cm).filter(|cm| referenced(&config_key(ConfigKind::ConfigMap, &cm.metadata)))
                        }
                        _ => None,
                    }
                    .map(Content::from_config_map);
                    let change = config_change(ConfigKind::ConfigMap, scope, event.map(|cm| cm.metadata));
                    Arrival { change, content }
                })
            }
            Watched::Config(ConfigKind::Secret) => {
                let api = api::scoped::<PartialObjectMeta<Secret>>(client, ns);
                scoped(api, scope.clone(), h, m, |scope, event| {
                    config_change(ConfigKind::Secret, scope, event.map(|s| s.metadata)).into()
                })
            }
            // Their annotations only; what they mounted comes from their pods' statuses (below).
            Watched::Config(ConfigKind::SecretProviderClass) => {
                let api = api::provider_class_api(client, ns);
                scoped(api, scope.clone(), h, m, |scope, event| {
                    Change::ProviderClass(scope, event.map(to_class_meta)).into()
                })
            }
            Watched::ProviderStatus => {
                let api = api::provider_status_api(client, ns);
                scoped(api, scope.clone(), h, m, |scope, event| {
                    Change::ProviderStatus(scope, event.map(to_provider_status)).into()
                })
            }
            Watched::Namespace => {
                let api = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
                scoped(api, scope.clone(), h, m, |scope, event| {
                    Change::Namespace(
                        scope,
                        event.map(|ns| NamespaceMeta {
                            name: ns.metadata.name.unwrap_or_default(),
                            labels: ns.metadata.labels.unwrap_or_default(),
                        }),
                    )
                    .into()
                })
            }
        }
    });
    futures::stream::select_all(streams).boxed()
}

fn scoped<K>(
    api: Api<K>,
    scope: Scope,
    health: Arc<WatchHealth>,
    metrics: Metrics,
    to_change: impl Fn(Scope, Event<K>) -> Arrival + Send + 'static,
) -> BoxStream<'static, Arrival>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Clone + Eq + Hash + Send + Sync,
{
    let label = ResourceLabel {
        resource: scope.resource.as_str(),
    };
    // A page of whole ConfigMaps (up to 1 MiB each) is held at once: the start-up's bulk read's page.
    let page = match scope.resource {
        Watched::Config(ConfigKind::ConfigMap) => api::LIST_PAGE,
        _ => WATCH_PAGE,
    };
    watcher::watcher(api, watcher::Config::default().page_size(page))
        .backoff(watch_backoff())
        .filter_map(move |result| {
            let out = match result {
                Ok(event) => {
                    metrics.watch_events.get_or_create(&label).inc();
                    if health.recovered(&scope) {
                        tracing::info!(watch = %describe(&scope), "watch recovered");
                    }
                    Some(to_change(scope.clone(), from_watcher(event)))
                }
                Err(e) => {
                    metrics.watch_errors.get_or_create(&label).inc();
                    let text = match &e {
                        watcher::Error::InitialListFailed(err) | watcher::Error::WatchStartFailed(err) => {
                            describe_error(err)
                        }
                        other => other.to_string(),
                    };
                    if health.failed(&scope, &text) {
                        tracing::warn!(watch = %describe(&scope), error = %text, "watch failing; retrying with backoff");
                    }
                    None
                }
            };
            std::future::ready(out)
        })
        .boxed()
}

/// Objects per page of a watch's list (metadata, or workloads' templates), but for ConfigMaps.
const WATCH_PAGE: u32 = 200;

/// The first retry after a watch error.
pub const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The longest wait between retries, before jitter (which adds up to as much again).
pub const WATCH_BACKOFF_MAX: Duration = Duration::from_millis(1500);

/// Exponential from [`WATCH_BACKOFF_MIN`] to [`WATCH_BACKOFF_MAX`], with jitter; reset by any event.
// NOTE: kube's `default_backoff` grows to 30 s and its jitter adds up to 100%, so after an apiserver
// restart a watch could stay down for up to a minute (measured 44–67 s). client-go's reflector has the
// same 30 s ceiling. A watch retry is one cheap request per scope, so wave keeps the ceiling at a few
// seconds. https://github.com/kube-rs/kube/blob/main/kube-runtime/src/watcher.rs (`DefaultBackoff`)
fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(WATCH_BACKOFF_MIN)
        .with_max_delay(WATCH_BACKOFF_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

fn from_watcher<K>(event: WatchEvent<K>) -> Event<K> {
    match event {
        WatchEvent::Apply(a) => Event::Apply(a),
        WatchEvent::Delete(a) => Event::Delete(a),
        WatchEvent::Init => Event::Init,
        WatchEvent::InitApply(a) => Event::InitApply(a),
        WatchEvent::InitDone => Event::InitDone,
    }
}

/// An object whose pod template cannot be read becomes an inert view (see `Workload::unreadable`): it
/// cannot be hashed, and the watch goes on for every other object.
fn to_workload(kind: WorkloadKind, object: DynamicObject) -> Workload {
    match pod_template(kind, &object.data) {
        Ok(template) => {
            let mut w = Workload::from_parts(kind, object.metadata, template);
            w.progress = Progress::read(kind, &object.data);
            w.template_from = wave_core::workload::template_from(kind, &object.data);
            w
        }
        Err(e) => {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
            tracing::warn!(workload = %format!("{kind} {namespace}/{name}"), error = %e, "cannot read the pod template; leaving this workload alone");
            Workload::unreadable(kind, object.metadata)
        }
    }
}

/// A SecretProviderClassPodStatus as the tracker takes it.
fn to_provider_status(object: DynamicObject) -> wave_core::reloader::ProviderStatus {
    let meta = object.metadata;
    let id = wave_core::reloader::StatusRef {
        namespace: meta.namespace.unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
    };
    let resource_version = meta.resource_version.unwrap_or_default();
    let labels = meta.labels.unwrap_or_default();
    wave_core::reloader::provider_status(id, resource_version, labels, object.data.get("status"))
}

/// What a SecretProviderClass's annotations ask of Reloader.
fn to_class_meta(object: PartialObjectMeta<DynamicObject>) -> wave_core::reloader::ClassMeta {
    let meta = object.metadata;
    wave_core::reloader::ClassMeta {
        ignored: wave_core::hash::is_reloader_ignored(&meta),
        matched: wave_core::hash::is_reloader_match(&meta),
        key: config_key(ConfigKind::SecretProviderClass, &meta),
    }
}

/// The key an object's metadata names.
fn config_key(kind: ConfigKind, meta: &ObjectMeta) -> ConfigKey {
    ConfigKey::new(
        kind,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// A ConfigMap's or Secret's event as the tracker takes it.
fn config_change(kind: ConfigKind, scope: Scope, event: Event<ObjectMeta>) -> Change {
    Change::Config(
        scope,
        event.map(|meta| ConfigMeta {
            ignored: wave_core::hash::is_ignored(&meta),
            reloader_match: wave_core::hash::is_reloader_match(&meta),
            key: config_key(kind, &meta),
            version: ObjectVersion {
                uid: meta.uid.unwrap_or_default(),
                resource_version: meta.resource_version.unwrap_or_default(),
            },
            labels: meta.labels.unwrap_or_default(),
            // Only the owner references Wave ≤ v0.6 could have written: the legacy cleanup never
            // looks at the others.
            owners: meta
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .filter(wave_core::legacy::has_waves_shape)
                .map(|o| o.uid)
                .collect(),
        }),
    )
}
