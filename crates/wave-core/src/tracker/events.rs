//! What the watches report to the tracker ([`Change`]: an [`Event`] of one [`Scope`], carrying a
//! [`Workload`], a [`ConfigMeta`] or a [`NamespaceMeta`]) and what an event asks of the runtime
//! ([`Effects`]).

use std::collections::BTreeMap;

use crate::refs::{ConfigKey, ConfigKind};
use crate::workload::{Workload, WorkloadKind, WorkloadRef};

/// Which objects one watch stream covers: a kind, in one namespace or in all.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The resource watched.
    pub resource: Resource,
    /// `None` for all namespaces.
    pub namespace: Option<String>,
}

impl Scope {
    pub(super) fn covers(&self, resource: Resource, namespace: &str) -> bool {
        self.resource == resource && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

/// A resource wave watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// A workload kind (full objects).
    Workload(WorkloadKind),
    /// A config kind (metadata only).
    Config(ConfigKind),
    /// Namespaces (metadata only), with `--namespace-selector`.
    Namespace,
    /// The Secrets Store CSI driver's SecretProviderClassPodStatuses, with `--enable-csi-integration`:
    /// what each pod mounted of a SecretProviderClass (`reloader::csi`).
    ProviderStatus,
}

impl Resource {
    /// Every resource wave watches for these workload kinds: the kinds, then ConfigMaps and Secrets.
    pub fn all(kinds: &[WorkloadKind]) -> Vec<Resource> {
        let configs = [ConfigKind::ConfigMap, ConfigKind::Secret].map(Resource::Config);
        kinds
            .iter()
            .copied()
            .map(Resource::Workload)
            .chain(configs)
            .collect()
    }

    /// Lowercase plural, as in RBAC and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Workload(kind) => kind.info().plural,
            Resource::Config(ConfigKind::ConfigMap) => "configmaps",
            Resource::Config(ConfigKind::Secret) => "secrets",
            // Metadata only, for their own annotations; what they mount comes from their pods' statuses.
            Resource::Config(ConfigKind::SecretProviderClass) => "secretproviderclasses",
            Resource::ProviderStatus => crate::names::csi::POD_STATUS_PLURAL,
            Resource::Namespace => "namespaces",
        }
    }
}

/// One event of a watch stream, as the watcher reports it (kube's `watcher::Event`, mirrored here so
/// the core needs no client): a relist is `Init`, then `InitApply` for every object, then `InitDone`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<T> {
    /// A relist begins.
    Init,
    /// An object seen during a relist.
    InitApply(T),
    /// The relist is complete.
    InitDone,
    /// An object was created or changed.
    Apply(T),
    /// An object was deleted.
    Delete(T),
}

impl<T> Event<T> {
    /// The object the event carries, if any.
    pub fn object(&self) -> Option<&T> {
        match self {
            Event::InitApply(o) | Event::Apply(o) | Event::Delete(o) => Some(o),
            Event::Init | Event::InitDone => None,
        }
    }

    /// The same event carrying `f(object)`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Event<U> {
        match self {
            Event::Init => Event::Init,
            Event::InitApply(t) => Event::InitApply(f(t)),
            Event::InitDone => Event::InitDone,
            Event::Apply(t) => Event::Apply(f(t)),
            Event::Delete(t) => Event::Delete(f(t)),
        }
    }
}

/// The version of a config object as its metadata watch reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    /// `metadata.uid`: changes when the object is deleted and re-created.
    pub uid: String,
    /// `metadata.resourceVersion`: changes on every write.
    pub resource_version: String,
}

impl ObjectVersion {
    /// The version `meta` describes.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self {
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }

    /// Whether this is an earlier version of the same object than `other`: same uid, and a lower
    /// resourceVersion. Two reads of one object may answer out of order (a GET from the watch cache, a
    /// watch event, a LIST); the later answer must not replace the newer content.
    // NOTE: resourceVersions are opaque strings to clients
    // (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions); etcd's are
    // integers, and only two that both parse as integers are compared. Anything else is never older.
    pub fn is_older_than(&self, other: &ObjectVersion) -> bool {
        let number = |v: &ObjectVersion| v.resource_version.parse::<u64>().ok();
        self.uid == other.uid && matches!((number(self), number(other)), (Some(a), Some(b)) if a < b)
    }
}

/// Metadata of one config object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMeta {
    /// Identity.
    pub key: ConfigKey,
    /// Version.
    pub version: ObjectVersion,
    /// The uids named by those of its `ownerReferences` that have the shape Wave ≤ v0.6 wrote
    /// (`legacy::has_waves_shape`; `docs/migrating-from-wave.md`). Usually empty.
    pub owners: Vec<String>,
    /// It says `wave.pusher.com/ignore: "true"`: its changes wake nobody.
    pub ignored: bool,
    /// It says `reloader.stakater.com/match: "true"`: workloads that say `reloader.stakater.com/search`
    /// reload on its changes (`reloader`).
    pub reloader_match: bool,
    /// Its labels, for Reloader's `--resource-label-selector` (not kept).
    pub labels: BTreeMap<String, String>,
}

/// A namespace's name and labels, for `--namespace-selector`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceMeta {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// One watch event, tagged with the scope of its stream.
#[derive(Debug)]
pub enum Change {
    /// From a workload watch.
    Workload(Scope, Event<Workload>),
    /// From a config metadata watch.
    Config(Scope, Event<ConfigMeta>),
    /// From the namespace watch.
    Namespace(Scope, Event<NamespaceMeta>),
    /// From a SecretProviderClassPodStatus watch.
    ProviderStatus(Scope, Event<crate::reloader::ProviderStatus>),
    /// From a SecretProviderClass metadata watch (scope `Resource::Config(SecretProviderClass)`).
    ProviderClass(Scope, Event<crate::reloader::ClassMeta>),
}

/// What an event asks of the runtime.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Workloads to reconcile.
    pub enqueue: Vec<WorkloadRef>,
    /// Whether `enqueue` was caused by a config object change (for the latency metric).
    pub config_triggered: bool,
    /// Referenced config objects created or deleted after the first list: what the flap breaker counts
    /// of this event. An update counts only if its data changed, which only its content tells (the
    /// runtime's content cache); a metadata-only change (a label) counts for nothing.
    pub changed_configs: Vec<ConfigKey>,
    /// Config objects whose cached content is no longer needed.
    pub evict: Vec<ConfigKey>,
    /// Workloads that no longer exist: whatever was remembered about them is to be forgotten.
    pub deleted: Vec<WorkloadRef>,
    /// Workloads whose rollout progress, hash or annotations changed: what paced rollouts wait for.
    pub progressed: Vec<WorkloadRef>,
    /// Workloads that appeared, went away, or changed in what pacing's census reads (status, hash,
    /// generation, annotations), opted in or not, before the first list too: the census takes in
    /// each one (`pace::Pacer::observe`) instead of reading every workload again.
    pub observed: Vec<WorkloadRef>,
    /// The tracker just became ready (every scope listed once).
    pub became_ready: bool,
}

#[cfg(test)]
mod tests {
    use super::ObjectVersion;

    fn version(uid: &str, resource_version: &str) -> ObjectVersion {
        ObjectVersion {
            uid: uid.into(),
            resource_version: resource_version.into(),
        }
    }

    #[test]
    fn only_a_lower_numeric_resource_version_of_the_same_object_is_older() {
        assert!(
            version("a", "9").is_older_than(&version("a", "10")),
            "numbers, not strings"
        );
        assert!(!version("a", "10").is_older_than(&version("a", "9")));
        assert!(!version("a", "10").is_older_than(&version("a", "10")));
        assert!(
            !version("a", "9").is_older_than(&version("b", "10")),
            "another object (re-created)"
        );
        assert!(
            !version("a", "x9").is_older_than(&version("a", "10")),
            "opaque: not comparable"
        );
        assert!(!version("a", "").is_older_than(&version("a", "10")));
    }
}
