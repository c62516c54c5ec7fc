//! Watch streams: one per [`Scope`] (resource × namespace), merged into one stream of [`Change`]s.
//!
//! ```text
//! Api<Deployment|StatefulSet|DaemonSet> ─watcher─► Workload (status and spec dropped) ─┐
//! Api<PartialObjectMeta<ConfigMap|Secret>> ─watcher─► ConfigMeta (key, uid, rv) ───────┼─► Change
//! ```
//!
//! ConfigMaps and Secrets are watched metadata-only: their values never cross the wire here, and each
//! object costs a key and two short strings. Watch errors are items, not the end of a stream
//! (kube-rs/kube#1615); the stream backs off and resumes, and the last error of each scope is kept for
//! `/readyz` so a permission problem is visible instead of silent.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PartialObjectMeta;
use kube::core::NamespaceResourceScope;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::error;
use super::metrics::{Metrics, ResourceLabel};
use crate::core::refs::{ConfigKey, ConfigKind};
use crate::core::tracker::{Change, ConfigMeta, ObjectVersion, Resource as Watched, Scope};
use crate::core::workload::{Workload, WorkloadKind};

/// The last error of each watch scope, cleared by its next successful event.
#[derive(Default)]
pub struct WatchHealth {
    errors: Mutex<HashMap<Scope, String>>,
}

impl WatchHealth {
    fn errors(&self) -> std::sync::MutexGuard<'_, HashMap<Scope, String>> {
        self.errors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Scopes whose watch is currently failing, with the error, for `/readyz`.
    pub fn failing(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .errors()
            .iter()
            .map(|(s, e)| format!("{}: {e}", describe(s)))
            .collect();
        out.sort();
        out
    }
}

/// `secrets in namespace a` / `secrets in all namespaces`.
pub fn describe(scope: &Scope) -> String {
    match &scope.namespace {
        Some(ns) => format!("{} in namespace {ns}", scope.resource.as_str()),
        None => format!("{} in all namespaces", scope.resource.as_str()),
    }
}

/// One merged stream of every scope's events.
pub fn changes(
    client: &Client,
    scopes: &[Scope],
    health: Arc<WatchHealth>,
    metrics: &Metrics,
) -> BoxStream<'static, Change> {
    let streams = scopes.iter().map(|scope| {
        let (c, s, h, m) = (client.clone(), scope.clone(), health.clone(), metrics.clone());
        match scope.resource {
            Watched::Workload(WorkloadKind::Deployment) => scoped::<Deployment>(c, s, h, m, workload_change),
            Watched::Workload(WorkloadKind::StatefulSet) => {
                scoped::<StatefulSet>(c, s, h, m, workload_change)
            }
            Watched::Workload(WorkloadKind::DaemonSet) => scoped::<DaemonSet>(c, s, h, m, workload_change),
            Watched::Config(ConfigKind::ConfigMap) => {
                scoped::<PartialObjectMeta<ConfigMap>>(c, s, h, m, config_change(ConfigKind::ConfigMap))
            }
            Watched::Config(ConfigKind::Secret) => {
                scoped::<PartialObjectMeta<Secret>>(c, s, h, m, config_change(ConfigKind::Secret))
            }
        }
    });
    futures::stream::select_all(streams).boxed()
}

fn scoped<K>(
    client: Client,
    scope: Scope,
    health: Arc<WatchHealth>,
    metrics: Metrics,
    to_change: impl Fn(Scope, Event<K>) -> Change + Send + 'static,
) -> BoxStream<'static, Change>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + 'static,
{
    let api: Api<K> = match &scope.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let label = ResourceLabel {
        resource: scope.resource.as_str(),
    };
    watcher::watcher(api, watcher::Config::default().page_size(200))
        .default_backoff()
        .filter_map(move |result| {
            let out = match result {
                Ok(event) => {
                    metrics.watch_events.get_or_create(&label).inc();
                    if health.errors().remove(&scope).is_some() {
                        tracing::info!(watch = %describe(&scope), "watch recovered");
                    }
                    Some(to_change(scope.clone(), event))
                }
                Err(e) => {
                    metrics.watch_errors.get_or_create(&label).inc();
                    let text = match &e {
                        watcher::Error::InitialListFailed(err) | watcher::Error::WatchStartFailed(err) => {
                            error::describe(err)
                        }
                        other => other.to_string(),
                    };
                    let previous = health.errors().insert(scope.clone(), text.clone());
                    if previous.as_deref() != Some(text.as_str()) {
                        tracing::warn!(watch = %describe(&scope), error = %text, "watch failing; retrying with backoff");
                    }
                    None
                }
            };
            std::future::ready(out)
        })
        .boxed()
}

fn map_event<A, B>(event: Event<A>, f: impl Fn(A) -> B) -> Event<B> {
    match event {
        Event::Apply(a) => Event::Apply(f(a)),
        Event::Delete(a) => Event::Delete(f(a)),
        Event::Init => Event::Init,
        Event::InitApply(a) => Event::InitApply(f(a)),
        Event::InitDone => Event::InitDone,
    }
}

fn workload_change<K: Into<Workload>>(scope: Scope, event: Event<K>) -> Change {
    Change::Workload(scope, map_event(event, Into::into))
}

fn config_change<K>(kind: ConfigKind) -> impl Fn(Scope, Event<PartialObjectMeta<K>>) -> Change {
    move |scope, event| {
        Change::Config(
            scope,
            map_event(event, |obj| {
                let meta = obj.metadata;
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
                }
            }),
        )
    }
}
