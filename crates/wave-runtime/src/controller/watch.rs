//! Watch streams: one per [`Scope`] (resource × namespace), merged into one stream of [`Change`]s.
//!
//! ```text
//! Api<DynamicObject> per workload kind ─watcher─► Workload (template and progress kept) ───┐
//! Api<PartialObjectMeta<ConfigMap|Secret>> ─watcher─► ConfigMeta (key, uid, rv) ───────┼─► Change
//! Api<PartialObjectMeta<Namespace>> (--namespace-selector) ─► NamespaceMeta (name, labels) ┤
//! Api<DynamicObject> SecretProviderClassPodStatus (--enable-csi-integration) ─► ProviderStatus ┤
//! Api<PartialObjectMeta<SecretProviderClass>> (--enable-csi-integration) ─► ClassMeta ────────┘
//! ```
//!
//! ConfigMaps and Secrets are watched metadata-only: their values never cross the wire here, and each
//! object costs a key and two short strings. Watch errors are items, not the end of a stream
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
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::tracker::{
    Change, ConfigMeta, Event, NamespaceMeta, ObjectVersion, Resource as Watched, Scope,
};
use wave_core::workload::{Progress, Workload, WorkloadKind, pod_template};

use crate::api::{self, describe as describe_error};
use crate::metrics::{Metrics, ResourceLabel};
use crate::state::health::{WatchHealth, describe};

/// One merged stream of every scope's events.
pub fn changes(
    client: &Client,
    scopes: &[Scope],
    health: Arc<WatchHealth>,
    metrics: &Metrics,
) -> BoxStream<'static, Change> {
    let streams = scopes.iter().map(|scope| {
        let (h, m) = (health.clone(), metrics.clone());
        let ns = scope.namespace.as_deref();
        match scope.resource {
            Watched::Workload(kind) => {
                let api = api::workload_api(client, kind, ns);
                scoped(api, scope.clone(), h, m, workload_change(kind))
            }
            Watched::Config(ConfigKind::ConfigMap) => {
                let api = api::scoped::<PartialObjectMeta<ConfigMap>>(client, ns);
                scoped(api, scope.clone(), h, m, config_change(ConfigKind::ConfigMap))
            }
            Watched::Config(ConfigKind::Secret) => {
                let api = api::scoped::<PartialObjectMeta<Secret>>(client, ns);
                scoped(api, scope.clone(), h, m, config_change(ConfigKind::Secret))
            }
            // Their annotations only; what they mounted comes from their pods' statuses (below).
            Watched::Config(ConfigKind::SecretProviderClass) => {
                let api = api::provider_class_api(client, ns);
                scoped(api, scope.clone(), h, m, |scope, event| {
                    Change::ProviderClass(scope, event.map(to_class_meta))
                })
            }
            Watched::ProviderStatus => {
                let api = api::provider_status_api(client, ns);
                scoped(api, scope.clone(), h, m, |scope, event| {
                    Change::ProviderStatus(scope, event.map(to_provider_status))
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
    to_change: impl Fn(Scope, Event<K>) -> Change + Send + 'static,
) -> BoxStream<'static, Change>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Clone + Eq + Hash + Send + Sync,
{
    let label = ResourceLabel {
        resource: scope.resource.as_str(),
    };
    watcher::watcher(api, watcher::Config::default().page_size(200))
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

/// Workload events as the core's view.
fn workload_change(kind: WorkloadKind) -> impl Fn(Scope, Event<DynamicObject>) -> Change {
    move |scope, event| Change::Workload(scope, event.map(|object| to_workload(kind, object)))
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
    let matched = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(wave_core::names::reloader::MATCH))
        .is_some_and(|v| v == "true");
    wave_core::reloader::ClassMeta {
        ignored: wave_core::hash::is_reloader_ignored(&meta),
        matched,
        key: ConfigKey::new(
            ConfigKind::SecretProviderClass,
            meta.namespace.unwrap_or_default(),
            meta.name.unwrap_or_default(),
        ),
    }
}

fn config_change<K>(kind: ConfigKind) -> impl Fn(Scope, Event<PartialObjectMeta<K>>) -> Change {
    move |scope, event| {
        Change::Config(
            scope,
            event.map(|obj| {
                let meta = obj.metadata;
                let ignored = wave_core::hash::is_ignored(&meta);
                let reloader_match = meta
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(wave_core::names::reloader::MATCH))
                    .is_some_and(|v| v == "true");
                ConfigMeta {
                    key: ConfigKey::new(
                        kind,
                        meta.namespace.unwrap_or_default(),
                        meta.name.unwrap_or_default(),
                    ),
                    version: ObjectVersion {
                        uid: meta.uid.unwrap_or_default(),
                        resource_version: meta.resource_version.unwrap_or_default(),
                    },
                    ignored,
                    reloader_match,
                    labels: meta.labels.clone().unwrap_or_default(),
                    // Only the owner references Wave ≤ v0.6 could have written: the legacy cleanup
                    // never looks at the others.
                    owners: meta
                        .owner_references
                        .unwrap_or_default()
                        .into_iter()
                        .filter(wave_core::legacy::has_waves_shape)
                        .map(|o| o.uid)
                        .collect(),
                }
            }),
        )
    }
}
