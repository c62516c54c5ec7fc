//! The tracker: what the watches have shown so far, and which workloads each event wakes.
//!
//! ```text
//!  workload watches ──► Change::Workload ─┐                     ┌─► workloads: WorkloadRef → Workload
//!  (3 kinds × scopes)                     ├─► Tracker::apply() ─┼─► configs:   ConfigKey → (uid, rv)
//!  config meta watches ► Change::Config ──┤        │            └─► index:     ConfigKey → workloads
//!  (2 kinds × scopes)                     │        ▼
//!  CSI pod statuses ──► Change::ProviderStatus ┘   (--enable-csi-integration: classes as config objects)
//!                              Effects { enqueue: [WorkloadRef], evict: [ConfigKey] }
//! ```
//!
//! Rules that live here, because this is where they can be tested without a cluster:
//! - **Readiness gate.** Nothing is enqueued until every watch scope has finished its first list; then
//!   every workload that needs it is enqueued once. Before that, lookups would say "absent" for objects
//!   that exist, and the hash would be wrong (`docs/behaviour.md`, "When wave writes").
//! - **Relists** (`Init … InitApply … InitDone`): objects not seen again are deleted at `InitDone`;
//!   objects seen again unchanged wake nothing. One implementation serves workloads, config objects and
//!   namespaces alike (`relist.rs`).
//! - **Status updates are ignored** (`docs/behaviour.md`, difference `status-updates`): a workload wakes
//!   only when its generation or its metadata annotations change, or when it appears.
//! - **Config changes** wake the dependents from the index when the uid or resourceVersion changed;
//!   whether the *content* changed is the reconcile's business (it compares hashes, so a metadata-only
//!   change writes nothing).
//!
//! Which file holds what (the tests of `x.rs` are in `x_tests.rs`, their shared fixtures in `testing.rs`):
//! - `mod.rs`: the [`Tracker`] type, its settings, [`Tracker::apply`] (which routes each event) and
//!   the questions every part asks (does a workload need a reconcile, which references it has);
//! - `events.rs`: what the watches report ([`Change`], [`Event`], [`Scope`], [`ConfigMeta`], …) and
//!   what an event asks of the runtime ([`Effects`]);
//! - `relist.rs`: one event of any watch stream (relists, written once for every resource) and the
//!   readiness gate;
//! - `workloads.rs`: workloads, what they reference (the index) and the namespaces Reloader
//!   workloads scan;
//! - `adoption.rs`: Deployments that an Argo Rollout takes its template from;
//! - `configs.rs`: config object versions, `ignore` marks, and the workloads a change wakes;
//! - `owners.rs`: config objects by the uid of the owner Wave ≤ v0.6 gave them;
//! - `namespaces.rs`: ignored, watched and selected namespaces;
//! - `reloader_compat.rs`: Reloader compatibility's selections, candidates and marks;
//! - `provider_statuses.rs`: SecretProviderClass rotations, from the CSI driver's pod statuses;
//! - `bulk.rs`: which ConfigMaps to read with a LIST at start-up.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::index::RefIndex;
use super::refs::{ConfigKey, CrossNamespace, References};
use super::reloader;
use super::selector::LabelSelector;
use super::workload::{Workload, WorkloadKind, WorkloadRef};

mod adoption;
mod bulk;
mod configs;
mod events;
mod namespaces;
mod owners;
mod provider_statuses;
mod relist;
mod reloader_compat;
#[cfg(test)]
mod testing;
mod workloads;

pub use bulk::{BULK_READ_MIN, BulkRead};
pub use events::{Change, ConfigMeta, Effects, Event, NamespaceMeta, ObjectVersion, Resource, Scope};
use relist::Relisting;

/// The state built from the watches. See the module docs.
#[derive(Debug)]
pub struct Tracker {
    scopes: Vec<Scope>,
    workloads: HashMap<WorkloadRef, Arc<Workload>>,
    configs: HashMap<ConfigKey, ObjectVersion>,
    /// Config objects by the uid of each owner they name (only objects that have owners).
    owned: HashMap<String, BTreeSet<ConfigKey>>,
    /// The owners of each config object that has any.
    owners: HashMap<ConfigKey, Vec<String>>,
    /// Config objects marked `wave.pusher.com/ignore`.
    ignored: HashSet<ConfigKey>,
    /// `--namespaces-to-ignore`: nothing in them is tracked.
    ignored_namespaces: BTreeSet<String>,
    /// `--cross-namespace-references`: whether `extra-*` may name config in another namespace.
    cross_namespace: CrossNamespace,
    /// Reloader compatibility (`--reloader-compat`): workloads opted in through Reloader's annotations
    /// are tracked too (`reloader`).
    reloader: Option<reloader::Options>,
    /// Config objects marked `reloader.stakater.com/match` (kept for a deleted one while it is in
    /// `deleted`).
    matched: HashSet<ConfigKey>,
    /// With `--resource-label-selector`: config objects its selector does not select, which Reloader's
    /// annotations never see.
    unselected: HashSet<ConfigKey>,
    /// Config objects created after the first list, and the resourceVersion of their creation: for
    /// `--reload-on-create`, and the starting point of a workload created after the first list
    /// (`reloader::since_creation`; without `--reload-on-create`, kept only while such a workload is not
    /// settled).
    created: HashMap<ConfigKey, u64>,
    /// With `--reload-on-delete`: config objects deleted after the first list that a workload
    /// references or may find, until they are created again, and the deletion's resourceVersion.
    deleted: HashMap<ConfigKey, Option<u64>>,
    /// Workloads opted in through Reloader's annotations that were created after the first list, and
    /// the resourceVersion of their creation, until wave has read every target of theirs.
    born: HashMap<WorkloadRef, u64>,
    /// Deployments that an opted-in Argo Rollout takes its pod template from, and that Rollout.
    adopters: HashMap<WorkloadRef, WorkloadRef>,
    /// Per namespace, the Reloader workloads whose selection may involve any object there (name
    /// patterns, `search`): every config change in the namespace wakes them.
    scanning: HashMap<String, BTreeSet<WorkloadRef>>,
    /// `--namespace-selector`: only workloads in the namespaces it selects are acted on.
    namespace_selector: Option<LabelSelector>,
    /// The namespaces the selector selects now.
    selected: HashSet<String>,
    index: RefIndex,
    /// With `--enable-csi-integration`: each SecretProviderClassPodStatus's class and SHA-1
    /// (`provider_statuses`).
    statuses: HashMap<reloader::StatusRef, provider_statuses::Status>,
    /// Per SecretProviderClass that some status names or that exists: what it holds and says (its
    /// `match` mark is in `matched`).
    classes: HashMap<ConfigKey, provider_statuses::Class>,
    /// The relists under way (`relist`), per resource.
    relisted_workloads: Relisting<WorkloadRef>,
    relisted_configs: Relisting<ConfigKey>,
    relisted_namespaces: Relisting<String>,
    relisted_statuses: Relisting<reloader::StatusRef>,
    relisted_classes: Relisting<ConfigKey>,
    synced: HashSet<Scope>,
    ready: bool,
}

impl Tracker {
    /// A tracker of `kinds` expecting one stream per scope of `namespaces` (`None`: one cluster-wide
    /// stream per resource).
    pub fn new(kinds: &[WorkloadKind], namespaces: Option<&BTreeSet<String>>) -> Self {
        let scopes = Resource::all(kinds)
            .into_iter()
            .flat_map(|resource| match namespaces {
                None => vec![Scope {
                    resource,
                    namespace: None,
                }],
                Some(list) => list
                    .iter()
                    .map(|ns| Scope {
                        resource,
                        namespace: Some(ns.clone()),
                    })
                    .collect(),
            })
            .collect();
        Self {
            scopes,
            workloads: HashMap::new(),
            configs: HashMap::new(),
            owned: HashMap::new(),
            owners: HashMap::new(),
            ignored: HashSet::new(),
            ignored_namespaces: BTreeSet::new(),
            cross_namespace: CrossNamespace::Deny,
            reloader: None,
            matched: HashSet::new(),
            created: HashMap::new(),
            deleted: HashMap::new(),
            born: HashMap::new(),
            unselected: HashSet::new(),
            scanning: HashMap::new(),
            adopters: HashMap::new(),
            namespace_selector: None,
            selected: HashSet::new(),
            index: RefIndex::default(),
            statuses: HashMap::new(),
            classes: HashMap::new(),
            relisted_workloads: Relisting::new(),
            relisted_configs: Relisting::new(),
            relisted_namespaces: Relisting::new(),
            relisted_statuses: Relisting::new(),
            relisted_classes: Relisting::new(),
            synced: HashSet::new(),
            ready: false,
        }
    }

    /// The scopes to watch: one stream each.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// Whether every scope has been listed once.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The scopes that have not finished their first list yet (for `/readyz`).
    pub fn unsynced(&self) -> Vec<&Scope> {
        self.scopes.iter().filter(|s| !self.synced.contains(s)).collect()
    }

    /// The same tracker, under `policy` for references to other namespaces (the default denies them).
    pub fn with_cross_namespace(mut self, policy: CrossNamespace) -> Self {
        self.cross_namespace = policy;
        self
    }

    /// The references of `workload` as wave acts on them: its policy for other namespaces applied, and
    /// references into namespaces wave does not watch made optional (their existence cannot be known).
    /// The second value lists those unwatched keys, for a warning.
    pub fn references(&self, workload: &Workload) -> (References, Vec<ConfigKey>) {
        let mut refs = workload.references(self.cross_namespace);
        let unwatched = self.restrict_to_watched(&mut refs);
        (refs, unwatched)
    }

    /// Whether wave has anything to do for `workload`: its own reasons, or Reloader's annotations, in
    /// a namespace it acts on.
    fn needs_reconcile(&self, workload: &Workload) -> bool {
        // A reload's pause is released wherever the workload is (`Workload::holds_reload_pause`).
        workload.holds_reload_pause()
            || self.selects_namespace(&workload.id.namespace)
                && (workload.needs_reconcile() || self.reloader_selection(workload).is_some())
    }

    /// Every workload that needs a reconcile (after readiness, a leadership change or a resync).
    /// Empty until the tracker is ready: nothing may be decided on a partial view.
    pub fn all_to_reconcile(&self) -> Vec<WorkloadRef> {
        if !self.ready {
            return Vec::new();
        }
        let mut out: Vec<_> = self
            .workloads
            .values()
            .filter(|w| self.needs_reconcile(&self.effective(w)))
            .map(|w| w.id.clone())
            .collect();
        out.sort();
        out
    }

    /// Applies one watch event.
    pub fn apply(&mut self, change: Change) -> Effects {
        let mut fx = Effects::default();
        let namespace = match &change {
            Change::Workload(_, e) => e.object().map(|w| w.id.namespace.as_str()),
            Change::Config(_, e) => e.object().map(|c| c.key.namespace.as_str()),
            Change::Namespace(_, e) => e.object().map(|n| n.name.as_str()),
            Change::ProviderStatus(_, e) => e.object().map(|s| s.id.namespace.as_str()),
            Change::ProviderClass(_, e) => e.object().map(|c| c.key.namespace.as_str()),
        };
        if namespace.is_some_and(|ns| self.ignored_namespaces.contains(ns)) {
            return fx;
        }
        match change {
            Change::Workload(scope, event) => self.apply_event(scope, event, &mut fx),
            Change::Config(scope, event) => self.apply_event(scope, event, &mut fx),
            Change::Namespace(scope, event) => self.apply_event(scope, event, &mut fx),
            Change::ProviderStatus(scope, event) => self.apply_event(scope, event, &mut fx),
            Change::ProviderClass(scope, event) => self.apply_event(scope, event, &mut fx),
        }
        fx
    }

    /// Makes references to objects in namespaces wave does not watch optional, since their existence
    /// cannot be known. Returns the keys affected, for a warning.
    fn restrict_to_watched(&self, refs: &mut References) -> Vec<ConfigKey> {
        let mut out = Vec::new();
        for r in refs.config_maps.iter_mut().chain(refs.secrets.iter_mut()) {
            if !self.watches_namespace(&r.key.namespace) {
                r.required = false;
                out.push(r.key.clone());
            }
        }
        out
    }
}
