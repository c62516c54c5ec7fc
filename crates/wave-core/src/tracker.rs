//! The tracker: what the watches have shown so far, and which workloads each event wakes.
//!
//! ```text
//!  workload watches ──► Change::Workload ─┐                     ┌─► workloads: WorkloadRef → Workload
//!  (3 kinds × scopes)                     ├─► Tracker::apply() ─┼─► configs:   ConfigKey → (uid, rv)
//!  config meta watches ► Change::Config ──┘        │            └─► index:     ConfigKey → workloads
//!  (2 kinds × scopes)                              ▼
//!                              Effects { enqueue: [WorkloadRef], evict: [ConfigKey] }
//! ```
//!
//! Rules that live here, because this is where they can be tested without a cluster:
//! - **Readiness gate.** Nothing is enqueued until every watch scope has finished its first list; then
//!   every workload that needs it is enqueued once. Before that, lookups would say "absent" for objects
//!   that exist, and the hash would be wrong (`docs/behaviour.md`, "When wave writes").
//! - **Relists** (`Init … InitApply … InitDone`): objects not seen again are deleted at `InitDone`;
//!   objects seen again unchanged wake nothing.
//! - **Status updates are ignored** (`docs/behaviour.md`, difference `status-updates`): a workload wakes only when its generation or its metadata
//!   annotations change, or when it appears.
//! - **Config changes** wake the dependents from the index when the uid or resourceVersion changed;
//!   whether the *content* changed is the reconcile's business (it compares hashes, so a metadata-only
//!   change writes nothing).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::index::RefIndex;
use super::refs::{ConfigKey, ConfigKind, CrossNamespace, References};
use super::reloader;
use super::selector::LabelSelector;
use super::workload::{Workload, WorkloadKind, WorkloadRef};

/// Which objects one watch stream covers: a kind, in one namespace or in all.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The resource watched.
    pub resource: Resource,
    /// `None` for all namespaces.
    pub namespace: Option<String>,
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

impl Scope {
    fn covers(&self, resource: Resource, namespace: &str) -> bool {
        self.resource == resource && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
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
    /// With `--reload-on-create`: config objects created after the first list.
    created: HashSet<ConfigKey>,
    /// With `--reload-on-delete`: config objects deleted after the first list that a workload
    /// references or may find, until they are created again.
    deleted: HashSet<ConfigKey>,
    /// Deployments that an opted-in Argo Rollout takes its pod template from, and that Rollout.
    adopters: HashMap<WorkloadRef, WorkloadRef>,
    /// Per namespace, the Reloader workloads whose selection may involve any object there (name
    /// patterns, `search`): every config change in the namespace wakes them.
    scanning: HashMap<String, BTreeSet<WorkloadRef>>,
    /// `--namespace-selector`: only workloads in the namespaces it selects are acted on.
    namespace_selector: Option<LabelSelector>,
    /// The namespaces the selector selects now.
    selected: HashSet<String>,
    relisted_namespaces: Option<HashSet<String>>,
    index: RefIndex,
    relisted_workloads: HashMap<Scope, HashSet<WorkloadRef>>,
    relisted_configs: HashMap<Scope, HashSet<ConfigKey>>,
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
            created: HashSet::new(),
            deleted: HashSet::new(),
            unselected: HashSet::new(),
            scanning: HashMap::new(),
            adopters: HashMap::new(),
            namespace_selector: None,
            selected: HashSet::new(),
            relisted_namespaces: None,
            index: RefIndex::default(),
            relisted_workloads: HashMap::new(),
            relisted_configs: HashMap::new(),
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

    /// The same tracker, leaving out everything in `namespaces` (`--namespaces-to-ignore`).
    pub fn ignoring(mut self, namespaces: BTreeSet<String>) -> Self {
        self.ignored_namespaces = namespaces;
        self
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

    /// The same tracker, also tracking workloads opted in through Stakater Reloader's annotations.
    pub fn with_reloader(mut self, options: reloader::Options) -> Self {
        self.reloader = Some(options);
        self
    }

    /// Reloader compatibility's settings, when it is on.
    pub fn reloader(&self) -> Option<&reloader::Options> {
        self.reloader.as_ref()
    }

    /// What `workload` asked Reloader to watch, when compatibility is on and it asked anything.
    pub fn reloader_selection(&self, workload: &Workload) -> Option<reloader::Selection> {
        reloader::selection(workload, self.reloader.as_ref()?)
    }

    /// The objects that exist, or were deleted while wave watched, and may reload `workload` under
    /// `needs`: those it references or names, and, when it scans, every object of its namespace.
    pub fn reloader_candidates(
        &self,
        workload: &Workload,
        needs: &reloader::Needs,
    ) -> Vec<reloader::Candidate> {
        let candidate = |key: &ConfigKey| {
            let lifecycle = if self.deleted.contains(key) {
                reloader::Lifecycle::Deleted
            } else if self.created.contains(key) {
                reloader::Lifecycle::Created
            } else {
                reloader::Lifecycle::Existing
            };
            reloader::Candidate {
                key: key.clone(),
                matched: self.matched.contains(key),
                lifecycle,
            }
        };
        let ns = &workload.id.namespace;
        let known = self
            .configs
            .keys()
            .chain(&self.deleted)
            .filter(|k| !self.unselected.contains(*k));
        if needs.scan {
            known.filter(|k| &k.namespace == ns).map(candidate).collect()
        } else {
            known.filter(|k| needs.keys.contains(*k)).map(candidate).collect()
        }
    }

    /// Whether wave has anything to do for `workload`: its own reasons, or Reloader's annotations, in
    /// a namespace it acts on.
    fn needs_reconcile(&self, workload: &Workload) -> bool {
        // A reload's pause is released wherever the workload is (`Workload::holds_reload_pause`).
        workload.holds_reload_pause()
            || self.selects_namespace(&workload.id.namespace)
                && (workload.needs_reconcile() || self.reloader_selection(workload).is_some())
    }

    /// Whether `namespace` is watched; a reference outside the watched namespaces cannot be tracked.
    pub fn watches_namespace(&self, namespace: &str) -> bool {
        !self.ignored_namespaces.contains(namespace)
            && self
                .scopes
                .iter()
                .any(|s| s.namespace.as_deref().is_none_or(|ns| ns == namespace))
    }

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

    /// The current version of a config object; `None` if it does not exist.
    pub fn config(&self, key: &ConfigKey) -> Option<&ObjectVersion> {
        self.configs.get(key)
    }

    /// The reverse index.
    pub fn index(&self) -> &RefIndex {
        &self.index
    }

    /// Number of config objects seen (referenced or not).
    pub fn config_object_count(&self) -> usize {
        self.configs.len()
    }

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
        };
        if namespace.is_some_and(|ns| self.ignored_namespaces.contains(ns)) {
            return fx;
        }
        match change {
            Change::Workload(scope, event) => self.apply_workload(scope, event, &mut fx),
            Change::Config(scope, event) => self.apply_config(scope, event, &mut fx),
            Change::Namespace(scope, event) => self.apply_namespace(scope, event, &mut fx),
        }
        fx
    }

    fn apply_namespace(&mut self, scope: Scope, event: Event<NamespaceMeta>, fx: &mut Effects) {
        match event {
            Event::Init => self.relisted_namespaces = Some(HashSet::new()),
            Event::InitApply(ns) => {
                self.relisted_namespaces
                    .get_or_insert_with(HashSet::new)
                    .insert(ns.name.clone());
                self.upsert_namespace(ns, fx);
            }
            Event::Apply(ns) => self.upsert_namespace(ns, fx),
            Event::Delete(ns) => {
                self.selected.remove(&ns.name);
            }
            Event::InitDone => {
                let seen = self.relisted_namespaces.take().unwrap_or_default();
                self.selected.retain(|ns| seen.contains(ns));
                self.mark_synced(scope, fx);
            }
        }
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

    fn apply_workload(&mut self, scope: Scope, event: Event<Workload>, fx: &mut Effects) {
        match event {
            Event::Init => {
                self.relisted_workloads.insert(scope, HashSet::new());
            }
            Event::InitApply(w) => {
                self.relisted_workloads
                    .entry(scope)
                    .or_default()
                    .insert(w.id.clone());
                self.upsert_workload(w, fx);
            }
            Event::Apply(w) => self.upsert_workload(w, fx),
            Event::Delete(w) => self.delete_workload(&w.id, fx),
            Event::InitDone => {
                let seen = self.relisted_workloads.remove(&scope).unwrap_or_default();
                let gone: Vec<WorkloadRef> = self
                    .workloads
                    .keys()
                    .filter(|id| {
                        scope.covers(Resource::Workload(id.kind), &id.namespace) && !seen.contains(id)
                    })
                    .cloned()
                    .collect();
                for id in gone {
                    self.delete_workload(&id, fx);
                }
                self.mark_synced(scope, fx);
            }
        }
    }

    fn upsert_workload(&mut self, w: Workload, fx: &mut Effects) {
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
    fn reindex(&mut self, view: &Workload, fx: &mut Effects) {
        let reloader = self.reloader_selection(view).map(|sel| sel.needs(view));
        let keys = match &reloader {
            Some(needs) => needs.keys.clone(),
            None => view.references(self.cross_namespace).keys(),
        };
        self.set_scanning(&view.id, reloader.is_some_and(|n| n.scan));
        let orphans = self.index.replace(&view.id, keys);
        fx.evict.extend(orphans);
    }

    /// Rollout `rollout` took its template from `before` and now from `after` (either may be none, or
    /// both the same Deployment with other annotations): those Deployments are indexed and checked again.
    fn adopt(
        &mut self,
        rollout: &WorkloadRef,
        before: Option<WorkloadRef>,
        after: Option<WorkloadRef>,
        fx: &mut Effects,
    ) {
        if let Some(old) = &before
            && self.adopters.get(old) == Some(rollout)
        {
            self.adopters.remove(old);
        }
        if let Some(new) = &after {
            self.adopters.insert(new.clone(), rollout.clone());
        }
        for deployment in before.into_iter().chain(after) {
            let Some(raw) = self.workloads.get(&deployment).cloned() else {
                continue;
            };
            let view = self.effective(&raw);
            self.reindex(&view, fx);
            if self.ready && self.needs_reconcile(&view) {
                fx.enqueue.push(deployment);
            }
        }
    }

    /// `w` as wave acts on it: a Deployment an opted-in Argo Rollout takes its template from
    /// (`spec.workloadRef`) carries the Rollout's `wave.pusher.com/` annotations
    /// (`docs/behaviour.md`, "Argo Rollouts").
    pub fn effective<'a>(&self, w: &'a Workload) -> Cow<'a, Workload> {
        match self.adopters.get(&w.id).and_then(|r| self.workloads.get(r)) {
            Some(rollout) => Cow::Owned(w.adopted_by(rollout)),
            None => Cow::Borrowed(w),
        }
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

    fn apply_config(&mut self, scope: Scope, event: Event<ConfigMeta>, fx: &mut Effects) {
        match event {
            Event::Init => {
                self.relisted_configs.insert(scope, HashSet::new());
            }
            Event::InitApply(meta) => {
                self.relisted_configs
                    .entry(scope)
                    .or_default()
                    .insert(meta.key.clone());
                self.upsert_config(meta, fx);
            }
            Event::Apply(meta) => self.upsert_config(meta, fx),
            Event::Delete(meta) => self.delete_config(&meta.key, fx),
            Event::InitDone => {
                let seen = self.relisted_configs.remove(&scope).unwrap_or_default();
                let gone: Vec<ConfigKey> = self
                    .configs
                    .keys()
                    .filter(|k| scope.covers(Resource::Config(k.kind), &k.namespace) && !seen.contains(k))
                    .cloned()
                    .collect();
                for key in gone {
                    self.delete_config(&key, fx);
                }
                self.mark_synced(scope, fx);
            }
        }
    }

    fn upsert_config(&mut self, meta: ConfigMeta, fx: &mut Effects) {
        let changed = self.configs.get(&meta.key) != Some(&meta.version);
        let reloader = self.reloader.as_ref();
        if self.ready && !self.configs.contains_key(&meta.key) && reloader.is_some_and(|o| o.reload_on_create)
        {
            self.created.insert(meta.key.clone());
        }
        self.deleted.remove(&meta.key);
        match reloader.and_then(|o| o.resource_selector.as_ref()) {
            Some(selector) if !selector.matches(&meta.labels) => {
                self.unselected.insert(meta.key.clone());
            }
            _ => {
                self.unselected.remove(&meta.key);
            }
        }
        let was_ignored = self.ignored.contains(&meta.key);
        let created = !self.configs.contains_key(&meta.key);
        // An ignored object wakes nobody, except when it becomes ignored (it leaves the hash).
        if changed && !(meta.ignored && was_ignored) {
            self.wake_dependents(&meta.key, fx, created);
        }
        if meta.ignored {
            self.ignored.insert(meta.key.clone());
        } else if was_ignored {
            self.ignored.remove(&meta.key);
        }
        if meta.reloader_match {
            self.matched.insert(meta.key.clone());
        } else {
            self.matched.remove(&meta.key);
        }
        self.set_owners(&meta.key, meta.owners);
        self.configs.insert(meta.key, meta.version);
    }

    fn delete_config(&mut self, key: &ConfigKey, fx: &mut Effects) {
        if self.configs.remove(key).is_some() {
            self.wake_dependents(key, fx, true);
        }
        self.set_owners(key, Vec::new());
        self.ignored.remove(key);
        self.created.remove(key);
        self.unselected.remove(key);
        let wanted = self.index.is_referenced(key) || self.scanning.contains_key(&key.namespace);
        if self.ready && wanted && self.reloader.as_ref().is_some_and(|o| o.reload_on_delete) {
            self.deleted.insert(key.clone());
        } else {
            self.matched.remove(key);
        }
        fx.evict.push(key.clone());
    }

    fn set_owners(&mut self, key: &ConfigKey, owners: Vec<String>) {
        for uid in self.owners.remove(key).unwrap_or_default() {
            if let Some(keys) = self.owned.get_mut(&uid) {
                keys.remove(key);
                if keys.is_empty() {
                    self.owned.remove(&uid);
                }
            }
        }
        for uid in &owners {
            self.owned.entry(uid.clone()).or_default().insert(key.clone());
        }
        if !owners.is_empty() {
            self.owners.insert(key.clone(), owners);
        }
    }

    /// The config objects whose Wave-shaped `ownerReferences` name `uid` (see [`ConfigMeta::owners`]).
    pub fn owned_by(&self, uid: &str) -> Vec<ConfigKey> {
        self.owned
            .get(uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Wakes the workloads that use `key`; `existence` when it was created or deleted (`Effects`).
    fn wake_dependents(&self, key: &ConfigKey, fx: &mut Effects, existence: bool) {
        if !self.ready {
            return;
        }
        let before = fx.enqueue.len();
        fx.enqueue.extend(
            self.index
                .dependents(key)
                .filter(|w| self.selects_namespace(&w.namespace))
                .cloned(),
        );
        // The queue drops a workload enqueued twice.
        if self.selects_namespace(&key.namespace) {
            fx.enqueue
                .extend(self.scanning.get(&key.namespace).into_iter().flatten().cloned());
        }
        if fx.enqueue.len() > before {
            fx.config_triggered = true;
            if existence {
                fx.changed_configs.push(key.clone());
            }
        }
    }

    fn mark_synced(&mut self, scope: Scope, fx: &mut Effects) {
        self.synced.insert(scope);
        if !self.ready && self.scopes.iter().all(|s| self.synced.contains(s)) {
            self.ready = true;
            fx.became_ready = true;
            fx.enqueue = self.all_to_reconcile();
            fx.config_triggered = false;
        }
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

/// The Deployment an opted-in Argo Rollout takes its pod template from.
fn adoption(w: &Workload) -> Option<WorkloadRef> {
    let name = w.template_from.as_ref()?;
    crate::refs::is_opted_in(&w.annotations)
        .then(|| WorkloadRef::new(WorkloadKind::DEPLOYMENT, w.id.namespace.clone(), name.clone()))
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
mod tests {
    use super::*;
    use crate::names;
    use crate::workload::testing::deployment;
    use serde_json::json;

    fn scope(resource: Resource) -> Scope {
        Scope {
            resource,
            namespace: None,
        }
    }

    const DEPLOYMENTS: Resource = Resource::Workload(WorkloadKind::DEPLOYMENT);
    const CONFIGMAPS: Resource = Resource::Config(ConfigKind::ConfigMap);

    fn uses_cm(name: &str, cm: &str) -> Workload {
        deployment(
            "ns",
            name,
            &[],
            json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": cm}}]}]}),
        )
    }

    fn cm_meta(name: &str, rv: &str) -> ConfigMeta {
        ConfigMeta {
            key: ConfigKey::new(ConfigKind::ConfigMap, "ns", name),
            version: ObjectVersion {
                uid: format!("uid-{name}"),
                resource_version: rv.into(),
            },
            owners: Vec::new(),
            ignored: false,
            reloader_match: false,
            labels: BTreeMap::new(),
        }
    }

    fn names_of_deleted(fx: &Effects) -> Vec<&str> {
        fx.deleted.iter().map(|w| w.name.as_str()).collect()
    }

    fn names_of(fx: &Effects) -> Vec<&str> {
        fx.enqueue.iter().map(|w| w.name.as_str()).collect()
    }

    /// A tracker that has listed everything once: `workloads` and `configs` present.
    fn synced(workloads: Vec<Workload>, configs: Vec<ConfigMeta>) -> (Tracker, Effects) {
        synced_from(Tracker::new(&WorkloadKind::BUILT_IN, None), workloads, configs)
    }

    fn synced_from(mut t: Tracker, workloads: Vec<Workload>, configs: Vec<ConfigMeta>) -> (Tracker, Effects) {
        let mut last = Effects::default();
        for s in t.scopes().to_vec() {
            t.apply(match s.resource {
                Resource::Workload(_) => Change::Workload(s.clone(), Event::Init),
                Resource::Config(_) => Change::Config(s.clone(), Event::Init),
                Resource::Namespace => Change::Namespace(s.clone(), Event::Init),
            });
            if s.resource == DEPLOYMENTS {
                for w in &workloads {
                    t.apply(Change::Workload(s.clone(), Event::InitApply(w.clone())));
                }
            }
            if let Resource::Config(kind) = s.resource {
                for c in configs.iter().filter(|c| c.key.kind == kind) {
                    t.apply(Change::Config(s.clone(), Event::InitApply(c.clone())));
                }
            }
            last = t.apply(match s.resource {
                Resource::Workload(_) => Change::Workload(s, Event::InitDone),
                Resource::Config(_) => Change::Config(s, Event::InitDone),
                Resource::Namespace => Change::Namespace(s, Event::InitDone),
            });
        }
        (t, last)
    }

    #[test]
    fn nothing_is_enqueued_before_every_scope_listed_then_everything_once() {
        let mut t = Tracker::new(&WorkloadKind::BUILT_IN, None);
        let fx = t.apply(Change::Workload(
            scope(DEPLOYMENTS),
            Event::Apply(uses_cm("a", "x")),
        ));
        assert!(fx.enqueue.is_empty() && !t.is_ready());
        let (t, fx) = synced(vec![uses_cm("a", "x"), uses_cm("b", "y")], vec![]);
        assert!(t.is_ready() && fx.became_ready);
        assert_eq!(names_of(&fx), ["a", "b"]);
    }

    /// The page size the bulk-read tests assume.
    const PAGE: usize = 100;

    fn in_namespace(ns: &str, mut meta: ConfigMeta) -> ConfigMeta {
        meta.key.namespace = ns.into();
        meta
    }

    fn uses_cm_in(ns: &str, name: &str, cm: &str) -> Workload {
        let mut w = uses_cm(name, cm);
        w.id.namespace = ns.into();
        w
    }

    /// `used` and `unused` ConfigMaps in each of `namespaces`, a workload per used one, in `tracker`.
    fn spread(tracker: Tracker, namespaces: &[&str], used: usize, unused: usize) -> Tracker {
        let mut workloads = Vec::new();
        let mut configs = Vec::new();
        for ns in namespaces {
            for i in 0..used {
                workloads.push(uses_cm_in(ns, &format!("w{i}"), &format!("used{i}")));
                configs.push(in_namespace(ns, cm_meta(&format!("used{i}"), "1")));
            }
            for i in 0..unused {
                configs.push(in_namespace(ns, cm_meta(&format!("unused{i}"), "1")));
            }
        }
        synced_from(tracker, workloads, configs).0
    }

    fn namespace_reads(namespaces: &[&str]) -> Vec<BulkRead> {
        namespaces
            .iter()
            .map(|ns| BulkRead {
                namespace: Some(ns.to_string()),
            })
            .collect()
    }

    #[test]
    fn a_watched_namespace_is_read_in_bulk_only_where_many_objects_are_referenced_and_they_are_most_of_it() {
        let watched = BTreeSet::from(["ns".to_string()]);
        let all = || Tracker::new(&WorkloadKind::BUILT_IN, Some(&watched));
        assert_eq!(
            spread(all(), &["ns"], BULK_READ_MIN, BULK_READ_MIN).bulk_reads(PAGE),
            namespace_reads(&["ns"]),
            "half of the namespace is referenced"
        );
        assert!(
            spread(all(), &["ns"], BULK_READ_MIN, BULK_READ_MIN + 1)
                .bulk_reads(PAGE)
                .is_empty(),
            "less than half is referenced"
        );
        assert!(
            spread(all(), &["ns"], BULK_READ_MIN - 1, 0)
                .bulk_reads(PAGE)
                .is_empty(),
            "too few for a LIST to save anything"
        );
    }

    #[test]
    fn the_whole_cluster_is_read_in_one_list_when_that_takes_fewer_requests_and_wave_watches_every_namespace()
    {
        let namespaces = ["a", "b", "c"];
        let everything = vec![BulkRead { namespace: None }];
        let all = || Tracker::new(&WorkloadKind::BUILT_IN, None);
        assert_eq!(
            spread(all(), &namespaces, BULK_READ_MIN, 0).bulk_reads(PAGE),
            everything,
            "one page instead of three LISTs"
        );
        assert_eq!(
            spread(all(), &namespaces, 2, 0).bulk_reads(PAGE),
            everything,
            "one page instead of six GETs (no namespace holds enough for a LIST of its own)"
        );
        assert_eq!(
            spread(all(), &namespaces, BULK_READ_MIN, BULK_READ_MIN).bulk_reads(16),
            namespace_reads(&namespaces),
            "with 16 per page, the cluster takes as many pages as the namespaces: LISTs per namespace"
        );
        assert_eq!(
            spread(all(), &namespaces, 1, 2).bulk_reads(PAGE),
            [],
            "most of the cluster is unreferenced: three GETs"
        );

        let listed = BTreeSet::from(namespaces.map(String::from));
        let some = Tracker::new(&WorkloadKind::BUILT_IN, Some(&listed));
        assert_eq!(
            spread(some, &namespaces, BULK_READ_MIN, 0).bulk_reads(PAGE),
            namespace_reads(&namespaces),
            "watching some namespaces, wave may not list the others"
        );
        let ignoring = all().ignoring(BTreeSet::from(["quiet".to_string()]));
        assert_eq!(
            spread(ignoring, &namespaces, BULK_READ_MIN, 0).bulk_reads(PAGE),
            namespace_reads(&namespaces),
            "a cluster-wide LIST would read the ignored namespace too"
        );
    }

    /// `used` referenced and `unused` unreferenced Secrets in each of `namespaces`, and as many
    /// ConfigMaps of each, all referenced by one workload per used pair.
    fn spread_secrets(tracker: Tracker, namespaces: &[&str], used: usize, unused: usize) -> Tracker {
        let mut workloads = Vec::new();
        let mut configs = Vec::new();
        for ns in namespaces {
            for i in 0..used {
                let mut w = deployment(
                    ns,
                    &format!("w{i}"),
                    &[],
                    json!({"containers": [{"name": "c", "envFrom": [
                        {"configMapRef": {"name": format!("used{i}")}},
                        {"secretRef": {"name": format!("used{i}")}},
                    ]}]}),
                );
                w.id.namespace = ns.to_string();
                workloads.push(w);
                configs.push(in_namespace(ns, cm_meta(&format!("used{i}"), "1")));
                configs.push(in_namespace(ns, secret_meta(&format!("used{i}"))));
            }
            for i in 0..unused {
                configs.push(in_namespace(ns, cm_meta(&format!("unused{i}"), "1")));
                configs.push(in_namespace(ns, secret_meta(&format!("unused{i}"))));
            }
        }
        synced_from(tracker, workloads, configs).0
    }

    fn secret_meta(name: &str) -> ConfigMeta {
        let mut meta = cm_meta(name, "1");
        meta.key.kind = ConfigKind::Secret;
        meta
    }

    #[test]
    fn secrets_are_never_read_in_bulk_however_many_are_referenced_while_configmaps_still_are() {
        let namespaces = ["a", "b"];
        let watched = BTreeSet::from(namespaces.map(String::from));
        let cases = [
            // Every Secret of both namespaces referenced: a cluster-wide LIST would have read nothing
            // unreferenced, and still it is not made.
            (
                Tracker::new(&WorkloadKind::BUILT_IN, None),
                2 * BULK_READ_MIN,
                0,
                vec![BulkRead { namespace: None }],
            ),
            // Most referenced, a few not: the old rule listed each namespace, and with it the data of
            // the Secrets nobody references.
            (
                Tracker::new(&WorkloadKind::BUILT_IN, Some(&watched)),
                BULK_READ_MIN,
                BULK_READ_MIN / 2,
                namespace_reads(&namespaces),
            ),
        ];
        for (tracker, used, unused, configmap_reads) in cases {
            let t = spread_secrets(tracker, &namespaces, used, unused);
            let referenced_secrets = t
                .configs
                .keys()
                .filter(|k| k.kind == ConfigKind::Secret && t.index.is_referenced(k))
                .count();
            assert_eq!(
                referenced_secrets,
                namespaces.len() * used,
                "the Secrets are referenced"
            );
            // A BulkRead lists ConfigMaps: the type has no way to say Secrets.
            assert_eq!(
                t.bulk_reads(PAGE),
                configmap_reads,
                "{used} referenced and {unused} unreferenced of each kind per namespace: only ConfigMaps"
            );
        }
    }

    #[test]
    fn nothing_in_an_ignored_namespace_is_tracked_or_counts_as_watched() {
        let mut t =
            Tracker::new(&WorkloadKind::BUILT_IN, None).ignoring(BTreeSet::from(["quiet".to_string()]));
        let mut w = uses_cm("a", "x");
        w.id.namespace = "quiet".into();
        t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())));
        assert!(t.workload(&w.id).is_none());
        assert!(!t.watches_namespace("quiet") && t.watches_namespace("ns"));
    }

    #[test]
    fn an_ignored_object_wakes_nobody_except_when_it_becomes_or_stops_being_ignored() {
        let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![cm_meta("x", "1")]);
        let mut x = cm_meta("x", "2");
        x.ignored = true;
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(x.clone())));
        assert_eq!(names_of(&fx), ["a"], "becoming ignored changes the hash");
        x.version.resource_version = "3".into();
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(x.clone())));
        assert!(
            fx.enqueue.is_empty() && fx.changed_configs.is_empty(),
            "an ignored change wakes nobody"
        );
        x.version.resource_version = "4".into();
        x.ignored = false;
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(x)));
        assert_eq!(names_of(&fx), ["a"], "no longer ignored: it enters the hash");
    }

    #[test]
    fn config_objects_are_found_by_the_uid_of_their_owner_until_the_owner_reference_goes() {
        let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![]);
        let mut owned = cm_meta("x", "2");
        owned.owners = vec!["uid-a".into(), "uid-other".into()];
        t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(owned.clone())));
        assert_eq!(t.owned_by("uid-a"), [owned.key.clone()]);
        assert_eq!(t.owned_by("uid-other"), [owned.key.clone()]);
        owned.owners = vec!["uid-other".into()];
        owned.version.resource_version = "3".into();
        t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(owned.clone())));
        assert!(t.owned_by("uid-a").is_empty());
        t.apply(Change::Config(scope(CONFIGMAPS), Event::Delete(owned)));
        assert!(
            t.owned_by("uid-other").is_empty(),
            "a deleted object is forgotten"
        );
    }

    #[test]
    fn a_change_of_rollout_progress_is_reported_as_progress_without_waking_the_workload() {
        let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![]);
        let mut w = uses_cm("a", "x");
        w.resource_version = "2".into();
        let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())));
        assert!(fx.progressed.is_empty(), "nothing that pacing reads changed");
        w.progress.updated = 1;
        let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())));
        assert_eq!(fx.progressed, [w.id.clone()]);
        assert!(fx.enqueue.is_empty(), "status alone wakes no reconcile");
        let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Delete(w.clone())));
        assert_eq!(fx.progressed, [w.id], "a deleted workload frees its slot");
    }

    #[test]
    fn every_workload_that_appears_changes_for_the_census_or_goes_is_observed_opted_in_or_not() {
        let mut t = Tracker::new(&WorkloadKind::BUILT_IN, None);
        let deployments = scope(DEPLOYMENTS);
        t.apply(Change::Workload(deployments.clone(), Event::Init));
        let mut w = uses_cm("a", "x");
        let fx = t.apply(Change::Workload(deployments.clone(), Event::InitApply(w.clone())));
        assert_eq!(fx.observed, [w.id.clone()], "before the first list too");
        w.resource_version = "2".into();
        let fx = t.apply(Change::Workload(deployments.clone(), Event::Apply(w.clone())));
        assert!(fx.observed.is_empty(), "nothing the census reads changed");
        w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
        w.annotations.insert(names::ROLLOUT_FAILED.into(), "{}".into());
        let fx = t.apply(Change::Workload(deployments.clone(), Event::Apply(w.clone())));
        assert!(fx.progressed.is_empty());
        assert_eq!(
            fx.observed,
            [w.id.clone()],
            "opted out, it still counts in the census"
        );
        let fx = t.apply(Change::Workload(deployments, Event::Delete(w.clone())));
        assert_eq!(fx.observed, [w.id]);
    }

    #[test]
    fn status_only_updates_wake_nothing_but_spec_and_annotation_changes_do() {
        let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![]);
        let mut w = uses_cm("a", "x");
        w.resource_version = "2".into();
        assert!(
            t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())))
                .enqueue
                .is_empty()
        );
        w.generation = 2;
        assert_eq!(
            names_of(&t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w.clone())))),
            ["a"]
        );
        w.annotations.insert(names::EXTRA_CONFIGMAPS.into(), "z".into());
        assert_eq!(
            names_of(&t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w)))),
            ["a"]
        );
    }

    #[test]
    fn config_version_change_wakes_dependents_and_same_version_does_not() {
        let (mut t, _) = synced(
            vec![uses_cm("a", "x"), uses_cm("b", "y")],
            vec![cm_meta("x", "1")],
        );
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "1"))));
        assert!(fx.enqueue.is_empty());
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "2"))));
        assert_eq!(names_of(&fx), ["a"]);
        assert!(fx.config_triggered);
        assert!(
            fx.changed_configs.is_empty(),
            "an update is counted by the flap breaker only if its data changed, which the content tells"
        );
    }

    #[test]
    fn creating_a_referenced_object_that_did_not_exist_wakes_the_workload() {
        let (mut t, _) = synced(vec![uses_cm("a", "later")], vec![]);
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("later", "5")),
        ));
        assert_eq!(names_of(&fx), ["a"]);
    }

    #[test]
    fn deleting_a_workload_cleans_its_index_entries() {
        let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![cm_meta("x", "1")]);
        let fx = t.apply(Change::Workload(
            scope(DEPLOYMENTS),
            Event::Delete(uses_cm("a", "x")),
        ));
        assert_eq!(fx.evict, vec![cm_meta("x", "1").key]);
        assert_eq!(
            names_of_deleted(&fx),
            ["a"],
            "what was remembered about it is forgotten"
        );
        assert_eq!(t.index().workload_count(), 0);
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "2"))));
        assert!(fx.enqueue.is_empty());
    }

    #[test]
    fn opting_out_drops_the_index_entries_and_later_changes_wake_nothing() {
        let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![cm_meta("x", "1")]);
        let mut w = uses_cm("a", "x");
        w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
        let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(w)));
        assert!(fx.enqueue.is_empty(), "an opted-out workload is never written");
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(cm_meta("x", "2"))));
        assert!(fx.enqueue.is_empty());
    }

    #[test]
    fn relist_deletes_what_was_not_seen_and_wakes_only_what_changed() {
        let (mut t, _) = synced(
            vec![uses_cm("a", "x"), uses_cm("b", "y")],
            vec![cm_meta("x", "1"), cm_meta("y", "1")],
        );
        // A 410 makes the config watch relist: x unchanged, y gone.
        t.apply(Change::Config(scope(CONFIGMAPS), Event::Init));
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::InitApply(cm_meta("x", "1")),
        ));
        assert!(fx.enqueue.is_empty());
        let fx = t.apply(Change::Config(scope(CONFIGMAPS), Event::InitDone));
        assert_eq!(names_of(&fx), ["b"]);
        assert!(t.config(&cm_meta("y", "1").key).is_none());
        // The workload watch relists without b: b is forgotten.
        t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Init));
        t.apply(Change::Workload(
            scope(DEPLOYMENTS),
            Event::InitApply(uses_cm("a", "x")),
        ));
        let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::InitDone));
        assert!(fx.enqueue.is_empty(), "a, seen again unchanged, is not woken");
        assert!(t.workload(&uses_cm("b", "y").id).is_none());
    }

    #[test]
    fn namespaced_scopes_only_prune_their_own_namespace() {
        let ns: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let mut t = Tracker::new(&WorkloadKind::BUILT_IN, Some(&ns));
        assert_eq!(t.scopes().len(), 10);
        let scope_a = Scope {
            resource: CONFIGMAPS,
            namespace: Some("a".into()),
        };
        let scope_b = Scope {
            resource: CONFIGMAPS,
            namespace: Some("b".into()),
        };
        let meta = |ns: &str| ConfigMeta {
            key: ConfigKey::new(ConfigKind::ConfigMap, ns, "x"),
            version: ObjectVersion {
                uid: "u".into(),
                resource_version: "1".into(),
            },
            owners: Vec::new(),
            ignored: false,
            reloader_match: false,
            labels: BTreeMap::new(),
        };
        t.apply(Change::Config(scope_b.clone(), Event::Apply(meta("b"))));
        t.apply(Change::Config(scope_a.clone(), Event::Init));
        t.apply(Change::Config(scope_a, Event::InitDone));
        assert!(
            t.config(&meta("b").key).is_some(),
            "scope a's relist must not prune namespace b"
        );
        assert!(t.watches_namespace("a") && !t.watches_namespace("c"));
        assert!(!t.is_ready());
    }

    fn reloader_workload(name: &str, annotation: (&str, &str), spec: serde_json::Value) -> Workload {
        let mut w = deployment("ns", name, &[annotation], spec);
        w.annotations.remove(names::UPDATE_ON_CONFIG_CHANGE);
        w
    }

    #[test]
    fn reloader_annotated_workloads_are_tracked_only_with_compatibility_on() {
        let spec = json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}]});
        let w = reloader_workload("r", (names::reloader::AUTO, "true"), spec);
        let (mut off, fx) = synced(vec![w.clone()], vec![cm_meta("cm", "1")]);
        assert!(fx.enqueue.is_empty());
        assert!(
            off.apply(Change::Config(
                scope(CONFIGMAPS),
                Event::Apply(cm_meta("cm", "2"))
            ))
            .enqueue
            .is_empty()
        );

        let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(reloader::Options::default());
        let (mut on, fx) = synced_from(on, vec![w], vec![cm_meta("cm", "1")]);
        assert_eq!(names_of(&fx), ["r"]);
        let fx = on.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("cm", "2")),
        ));
        assert_eq!(names_of(&fx), ["r"]);
    }

    #[test]
    fn a_reloader_workload_with_a_name_pattern_wakes_on_any_config_change_in_its_namespace() {
        let w = reloader_workload(
            "r",
            (names::reloader::CONFIGMAP_RELOAD, "app-.*"),
            json!({"containers": [{"name": "c"}]}),
        );
        let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(reloader::Options::default());
        let (mut t, _) = synced_from(
            on,
            vec![w.clone()],
            vec![cm_meta("app-1", "1"), cm_meta("other", "1")],
        );
        let needs = t.reloader_selection(&w).unwrap().needs(&w);
        assert_eq!(t.reloader_candidates(&w, &needs).len(), 2);
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("app-2", "1")),
        ));
        assert_eq!(names_of(&fx), ["r"]);
        t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Delete(w)));
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("app-3", "1")),
        ));
        assert!(fx.enqueue.is_empty(), "a deleted workload scans nothing");
    }

    #[test]
    fn only_workloads_in_selected_namespaces_are_enqueued_and_labelling_one_brings_it_in() {
        let ns_scope = Scope {
            resource: Resource::Namespace,
            namespace: None,
        };
        let namespace = |name: &str, team: &str| NamespaceMeta {
            name: name.into(),
            labels: BTreeMap::from([("team".to_string(), team.to_string())]),
        };
        let t = Tracker::new(&WorkloadKind::BUILT_IN, None)
            .selecting_namespaces(LabelSelector::parse("team=a").unwrap());
        let (mut t, fx) = synced_from(t, vec![uses_cm("w", "cm")], vec![cm_meta("cm", "1")]);
        assert!(
            fx.became_ready && fx.enqueue.is_empty(),
            "not selected: not checked"
        );
        let fx = t.apply(Change::Namespace(
            ns_scope.clone(),
            Event::Apply(namespace("ns", "b")),
        ));
        assert!(fx.enqueue.is_empty());
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("cm", "2")),
        ));
        assert!(fx.enqueue.is_empty(), "not selected: not woken");
        let fx = t.apply(Change::Namespace(
            ns_scope.clone(),
            Event::Apply(namespace("ns", "a")),
        ));
        assert_eq!(names_of(&fx), ["w"], "newly selected: checked");
        assert_eq!(t.selected_namespace_count(), 1);
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("cm", "3")),
        ));
        assert_eq!(names_of(&fx), ["w"]);
        t.apply(Change::Namespace(ns_scope, Event::Apply(namespace("ns", "c"))));
        assert!(!t.selects_namespace("ns"));
        assert!(t.all_to_reconcile().is_empty());
    }

    #[test]
    fn a_deployment_an_opted_in_rollout_takes_its_template_from_is_acted_on_in_its_place() {
        let rollouts = Scope {
            resource: Resource::Workload(WorkloadKind::ROLLOUT),
            namespace: None,
        };
        let mut rollout = deployment("ns", "ro", &[(names::EXTRA_CONFIGMAPS, "extra")], json!({}));
        rollout.id.kind = WorkloadKind::ROLLOUT;
        rollout.template_from = Some("web".into());
        let mut web = uses_cm("web", "cm");
        web.annotations.clear();
        let kinds = [WorkloadKind::DEPLOYMENT, WorkloadKind::ROLLOUT];
        let mut t = Tracker::new(&kinds, None);
        for s in t.scopes().to_vec() {
            t.apply(match s.resource {
                Resource::Workload(_) => Change::Workload(s.clone(), Event::Init),
                _ => Change::Config(s.clone(), Event::Init),
            });
            t.apply(match s.resource {
                Resource::Workload(_) => Change::Workload(s.clone(), Event::InitDone),
                _ => Change::Config(s.clone(), Event::InitDone),
            });
        }
        let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(web.clone())));
        assert!(fx.enqueue.is_empty(), "not opted in on its own");
        let fx = t.apply(Change::Workload(rollouts.clone(), Event::Apply(rollout.clone())));
        assert_eq!(
            names_of(&fx),
            ["web"],
            "the Rollout's opt-in brings its Deployment in"
        );
        let view = t.workload(&web.id).unwrap();
        assert!(view.is_opted_in());
        assert_eq!(
            view.references(CrossNamespace::Allow).keys().len(),
            2,
            "its own reference and the Rollout's extra"
        );
        assert!(
            !t.workload(&rollout.id).unwrap().is_opted_in(),
            "nothing is written to the Rollout"
        );
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("extra", "1")),
        ));
        assert_eq!(names_of(&fx), ["web"]);
        t.apply(Change::Workload(rollouts, Event::Delete(rollout)));
        assert!(
            !t.workload(&web.id).unwrap().is_opted_in(),
            "released with the Rollout"
        );
        let fx = t.apply(Change::Config(
            scope(CONFIGMAPS),
            Event::Apply(cm_meta("extra", "2")),
        ));
        assert!(fx.enqueue.is_empty());
    }

    #[test]
    fn a_resource_label_selector_hides_unselected_config_from_reloader_workloads() {
        let spec = json!({"containers": [{"name": "c", "envFrom": [
            {"configMapRef": {"name": "picked"}}, {"configMapRef": {"name": "other"}}]}]});
        let w = reloader_workload("r", (names::reloader::AUTO, "true"), spec);
        let options = reloader::Options {
            resource_selector: Some(LabelSelector::parse("reload=yes").unwrap()),
            ..reloader::Options::default()
        };
        let mut picked = cm_meta("picked", "1");
        picked.labels.insert("reload".into(), "yes".into());
        let on = Tracker::new(&WorkloadKind::BUILT_IN, None).with_reloader(options);
        let (t, _) = synced_from(on, vec![w.clone()], vec![picked, cm_meta("other", "1")]);
        let needs = t.reloader_selection(&w).unwrap().needs(&w);
        let found: Vec<String> = t
            .reloader_candidates(&w, &needs)
            .into_iter()
            .map(|c| c.key.name)
            .collect();
        assert_eq!(found, ["picked"]);
    }
}
