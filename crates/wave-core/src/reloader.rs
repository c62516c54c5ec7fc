//! Stakater Reloader compatibility: workloads opted in with Reloader's annotations are handled the way
//! Reloader v1.4.21 handles them, and wave writes exactly what Reloader writes, so switching from
//! Reloader to wave rolls nothing (`docs/migrating-from-reloader.md`).
//!
//! ```text
//! selection(workload, options) ─► Selection (per kind: auto, name patterns, search, exclusions)
//!   Selection::needs ─► the objects to index (referenced, named) and whether to scan the namespace
//! targets(workload, selection, objects) ─► [Target] (an object, and the container Reloader marks)
//! plan(workload, targets, fetched, options, seen, now) ─► Decision { marks, observed }
//!   patch_body(workload, marks) ─► strategic merge patch (env var or pod-template annotation)
//! ```
//!
//! Reloader is edge-triggered: it reloads when an update event shows an object's SHA-1 changed, and
//! writes nothing for objects that never changed (so it cannot see a change made while it was down,
//! Reloader#814). wave is level-triggered: for each target it compares the object's SHA-1 now with the
//! one the workload carries (the `STAKATER_<NAME>_<KIND>` env var, or the object named by
//! `last-reloaded-from`), and, where the workload carries none, with the SHA-1 wave first saw ([`Seen`]).
//! So a workload Reloader managed is not written at startup unless its config changed meanwhile.
//!
//! The rules below follow Reloader's `ShouldReload` (`pkg/common/common.go`), `getContainerUsingResource`
//! and `updateContainerEnvVars` / `updatePodAnnotations` (`internal/pkg/handler/upgrade.go`) and
//! `GetSHAfromConfigmap` / `GetSHAfromSecret` (`internal/pkg/util/util.go`) at tag v1.4.21 of
//! <https://github.com/stakater/Reloader>; `docs/migrating-from-reloader.md` states them in prose.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde::Serialize;
use serde_json::{Value, json};
use sha1::{Digest as _, Sha1};

use crate::hash::{Content, Fetched};
use crate::kind::WorkloadKind;
use crate::names::reloader as names;
use crate::refs::{ConfigKey, ConfigKind};
use crate::tracker::ObjectVersion;
use crate::workload::{Workload, WorkloadRef};
use jiff::Timestamp;

/// How a reload is written (Reloader's `--reload-strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// An env var `STAKATER_<NAME>_<KIND>` holding the object's SHA-1, on the container that uses it.
    #[default]
    EnvVars,
    /// The pod-template annotation `reloader.stakater.com/last-reloaded-from`.
    Annotations,
}

impl Strategy {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::EnvVars => "env-vars",
            Strategy::Annotations => "annotations",
        }
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "env-vars" => Ok(Strategy::EnvVars),
            "annotations" => Ok(Strategy::Annotations),
            other => Err(format!(
                "unknown reload strategy {other:?}: expected \"env-vars\" or \"annotations\""
            )),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The settings of Reloader compatibility (`--reloader-compat` on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `--reload-strategy`.
    pub strategy: Strategy,
    /// `--auto-reload-all`: every workload whose `auto` annotations are unset behaves as `auto: "true"`.
    pub auto_reload_all: bool,
    /// `--resources-to-ignore`: the config kinds whose changes reload nothing.
    pub ignored_kinds: BTreeSet<ConfigKind>,
    /// `--resource-label-selector`: only ConfigMaps and Secrets whose labels it selects reload anything.
    pub resource_selector: Option<crate::selector::LabelSelector>,
    /// `--reload-on-create`: an object created while wave watched reloads the workloads it targets.
    pub reload_on_create: bool,
    /// `--reload-on-delete`: an object deleted while wave watched reloads them: its env var is removed,
    /// or `last-reloaded-from` names it with the SHA-1 of no data.
    pub reload_on_delete: bool,
}

/// The SHA-1 of an object with no data: what a deleted object counts as (Reloader's
/// `GetSHAfromEmptyData`).
pub const EMPTY_SHA: &str = "da39a3ee5e6b4b0d3255bfef95601890afd80709";

/// How wave has seen an object come and go (for `--reload-on-create` and `--reload-on-delete`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lifecycle {
    /// It exists, and was there when wave first listed, or wave does not track creations.
    #[default]
    Existing,
    /// It was created after wave's first list.
    Created,
    /// It was deleted after wave's first list.
    Deleted,
}

/// Reloader's name for a kind: the suffix of its env var and the `type` of `last-reloaded-from`.
pub fn type_name(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::ConfigMap => "CONFIGMAP",
        ConfigKind::Secret => "SECRET",
    }
}

/// Reloader's SHA-1 of an object: its entries as `key=value`, sorted as strings, joined with `;`. A
/// ConfigMap's `binaryData` values are written in standard base64; a Secret's values as raw bytes.
pub fn sha(kind: ConfigKind, content: &Content) -> String {
    let mut entries: Vec<Vec<u8>> = content
        .values()
        .map(|(key, value)| {
            let mut entry = Vec::with_capacity(key.len() + 1 + value.len());
            entry.extend_from_slice(key.as_bytes());
            entry.push(b'=');
            if kind == ConfigKind::ConfigMap && content.binary_keys.contains(key) {
                entry.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(value).as_bytes());
            } else {
                entry.extend_from_slice(value);
            }
            entry
        })
        .collect();
    // Go sorts the strings bytewise, as `Vec<u8>` does.
    entries.sort();
    let mut hasher = Sha1::new();
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            hasher.update(b";");
        }
        hasher.update(entry);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The env var Reloader keeps an object's SHA-1 in: `STAKATER_` + the name upper-cased, each run of
/// characters other than `A-Z0-9` after a valid one becoming one `_`, + `_CONFIGMAP` or `_SECRET`.
pub fn env_var_name(kind: ConfigKind, name: &str) -> String {
    let mut out = String::from(names::ENV_PREFIX);
    let mut last_valid = false;
    for c in name.bytes().map(|b| b.to_ascii_uppercase()) {
        if c.is_ascii_uppercase() || c.is_ascii_digit() {
            out.push(char::from(c));
            last_valid = true;
        } else {
            if last_valid {
                out.push('_');
            }
            last_valid = false;
        }
    }
    out.push('_');
    out.push_str(type_name(kind));
    out
}

/// Go's `strconv.ParseBool`, which Reloader uses for `auto`; anything else is false.
fn go_bool(value: Option<&String>) -> bool {
    matches!(
        value.map(String::as_str),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True")
    )
}

/// A name from a `reload` annotation: Reloader matches it as the regular expression `^name$`.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// A name with no regular-expression syntax in it: matches only itself.
    Literal(String),
    /// Anything else.
    Regex(regex::Regex),
}

impl Pattern {
    fn parse(value: &str) -> Result<Self, String> {
        if regex::escape(value) == value {
            return Ok(Pattern::Literal(value.to_string()));
        }
        regex::Regex::new(&format!("^{value}$"))
            .map(Pattern::Regex)
            .map_err(|e| format!("{value:?} is not a valid regular expression: {e}"))
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Literal(literal) => literal == name,
            Pattern::Regex(re) => re.is_match(name),
        }
    }
}

/// What a workload asked of one config kind.
#[derive(Clone, Debug, Default)]
pub struct KindSelection {
    /// `auto` or the kind's own `auto` is true (or unset, under `--auto-reload-all`): referenced objects.
    pub auto: bool,
    /// The `reload` annotation's names: matching objects, referenced or not.
    pub patterns: Vec<Pattern>,
    /// `search: "true"`: referenced objects marked `match: "true"`.
    pub search: bool,
    /// The `exclude` annotation's names: never these.
    pub exclude: BTreeSet<String>,
}

impl KindSelection {
    fn selects_anything(&self) -> bool {
        self.auto || self.search || !self.patterns.is_empty()
    }

    /// Whether a change to the object `name` (`matched`: it says `match: "true"`) reloads the workload,
    /// and if so whether as `auto` (only through a container that uses it) or by name (`Some(false)`).
    fn reloads(&self, name: &str, matched: bool) -> Option<bool> {
        if self.exclude.contains(name) {
            return None;
        }
        if self.patterns.iter().any(|p| p.matches(name)) {
            return Some(false);
        }
        if (self.search && matched) || self.auto {
            return Some(true);
        }
        None
    }
}

/// What a workload asked Reloader to watch. See [`selection`].
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// For ConfigMaps.
    pub config_maps: KindSelection,
    /// For Secrets.
    pub secrets: KindSelection,
    /// Annotation values that could not be used, for warnings (Reloader exits on a bad pattern).
    pub problems: Vec<String>,
}

/// The objects a [`Selection`] may involve, known before looking at the namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Objects it references, and objects its `reload` annotations name literally.
    pub keys: BTreeSet<ConfigKey>,
    /// It has name patterns or `search`: any object of the namespace may be involved.
    pub scan: bool,
}

impl Selection {
    /// The selection for `kind`.
    pub fn of(&self, kind: ConfigKind) -> &KindSelection {
        match kind {
            ConfigKind::ConfigMap => &self.config_maps,
            ConfigKind::Secret => &self.secrets,
        }
    }

    /// What the tracker indexes for the workload.
    pub fn needs(&self, workload: &Workload) -> Needs {
        let ns = &workload.id.namespace;
        // Reloader finds references where wave does (volumes, projected sources, env and envFrom of
        // containers and init containers), without wave's own annotations.
        let mut needs = Needs {
            keys: crate::refs::discover(ns, &BTreeMap::new(), &workload.template.typed()).keys(),
            scan: false,
        };
        for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
            let sel = self.of(kind);
            needs.scan |= sel.search;
            for pattern in &sel.patterns {
                match pattern {
                    Pattern::Literal(name) => {
                        needs.keys.insert(ConfigKey::new(kind, ns, name));
                    }
                    Pattern::Regex(_) => needs.scan = true,
                }
            }
        }
        needs
    }
}

fn annotation_keys(kind: ConfigKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        ConfigKind::ConfigMap => (
            names::CONFIGMAP_RELOAD,
            names::CONFIGMAP_AUTO,
            names::CONFIGMAP_EXCLUDE,
        ),
        ConfigKind::Secret => (names::SECRET_RELOAD, names::SECRET_AUTO, names::SECRET_EXCLUDE),
    }
}

/// What `workload` asked Reloader to watch; `None` when it did not opt in through Reloader's
/// annotations (or opted in to wave's own, which then wins). Per kind, like Reloader, the annotations
/// are read from the workload's metadata if it has any of that kind's (`reload`, `auto`, the kind's
/// `auto`, `search`), else from its pod template's; `exclude` only from the metadata.
pub fn selection(workload: &Workload, options: &Options) -> Option<Selection> {
    let kind = workload.id.kind;
    let reloadable = kind.info().rolls_out || kind == WorkloadKind::ROLLOUT || kind == WorkloadKind::CRON_JOB;
    if workload.is_opted_in() || !reloadable {
        return None;
    }
    let pod = workload.template.annotations();
    let meta = &workload.annotations;
    let mut selection = Selection::default();
    for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
        if options.ignored_kinds.contains(&kind) {
            continue;
        }
        let (reload, typed_auto, exclude) = annotation_keys(kind);
        let on_meta = [reload, typed_auto, names::AUTO, names::SEARCH]
            .iter()
            .any(|k| meta.contains_key(*k));
        let source = if on_meta { meta } else { pod };
        let auto = source.get(names::AUTO);
        let typed = source.get(typed_auto);
        let unset = |v: Option<&String>| v.is_none_or(String::is_empty);
        let mut sel = KindSelection {
            auto: go_bool(auto) || go_bool(typed) || (unset(auto) && unset(typed) && options.auto_reload_all),
            search: source.get(names::SEARCH).is_some_and(|v| v == "true"),
            exclude: meta
                .get(exclude)
                .map(|v| v.split(',').map(|n| n.trim().to_string()).collect())
                .unwrap_or_default(),
            patterns: Vec::new(),
        };
        for value in source.get(reload).into_iter().flat_map(|v| v.split(',')) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match Pattern::parse(value) {
                Ok(p) => sel.patterns.push(p),
                Err(e) => selection.problems.push(format!("annotation {reload}: {e}")),
            }
        }
        match kind {
            ConfigKind::ConfigMap => selection.config_maps = sel,
            ConfigKind::Secret => selection.secrets = sel,
        }
    }
    (selection.config_maps.selects_anything() || selection.secrets.selects_anything()).then_some(selection)
}

fn env_references(container: &Container, kind: ConfigKind) -> impl Iterator<Item = &str> {
    let env = container.env.iter().flatten().filter_map(move |e| {
        let source = e.value_from.as_ref()?;
        match kind {
            ConfigKind::ConfigMap => source.config_map_key_ref.as_ref().map(|r| r.name.as_str()),
            ConfigKind::Secret => source.secret_key_ref.as_ref().map(|r| r.name.as_str()),
        }
    });
    let env_from = container
        .env_from
        .iter()
        .flatten()
        .filter_map(move |e| match kind {
            ConfigKind::ConfigMap => e.config_map_ref.as_ref().map(|r| r.name.as_str()),
            ConfigKind::Secret => e.secret_ref.as_ref().map(|r| r.name.as_str()),
        });
    env.chain(env_from)
}

/// The container Reloader marks for object `name`: the first container mounting a volume of it; the
/// first container referencing it in its env; the first container, when only init containers use it;
/// the first container, when the workload named it (`auto` false); otherwise none (it is not used).
fn container_for(spec: &PodSpec, kind: ConfigKind, name: &str, auto: bool) -> Option<String> {
    let first = || spec.containers.first().map(|c| c.name.clone());
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let volume = spec.volumes.iter().flatten().find(|v| {
        let plain = match kind {
            ConfigKind::ConfigMap => v.config_map.as_ref().is_some_and(|c| c.name == name),
            ConfigKind::Secret => v
                .secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name)),
        };
        plain
            || v.projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten())
                .any(|s| match kind {
                    ConfigKind::ConfigMap => s.config_map.as_ref().is_some_and(|c| c.name == name),
                    ConfigKind::Secret => s.secret.as_ref().is_some_and(|c| c.name == name),
                })
    });
    if let Some(volume) = volume {
        let mounts = |c: &&Container| c.volume_mounts.iter().flatten().any(|m| m.name == volume.name);
        if let Some(c) = spec.containers.iter().find(mounts) {
            return Some(c.name.clone());
        }
        if init.iter().any(|c| mounts(&c)) {
            return first();
        }
    }
    let uses = |c: &&Container| env_references(c, kind).any(|n| n == name);
    if let Some(c) = spec.containers.iter().find(uses) {
        return Some(c.name.clone());
    }
    if init.iter().any(|c| uses(&c)) {
        return first();
    }
    if !auto {
        return first();
    }
    None
}

/// An object whose changes reload the workload, and the container that carries its mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The object.
    pub key: ConfigKey,
    /// The container whose env carries its SHA-1 (strategy `env-vars`), or that `containerRefs` names.
    pub container: String,
    /// Whether it was created or deleted while wave watched.
    pub lifecycle: Lifecycle,
}

/// An object that exists, or was deleted while wave watched, as the tracker knows it (its metadata only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The object.
    pub key: ConfigKey,
    /// It says (or, deleted, said) `reloader.stakater.com/match: "true"`.
    pub matched: bool,
    /// Whether it was created or deleted while wave watched.
    pub lifecycle: Lifecycle,
}

/// The objects among `candidates` (objects of the workload's namespace that exist) whose changes reload
/// the workload, sorted.
pub fn targets(workload: &Workload, selection: &Selection, candidates: &[Candidate]) -> Vec<Target> {
    let template = workload.template.typed();
    let Some(spec) = template.spec.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Target> = candidates
        .iter()
        .filter(|c| c.key.namespace == workload.id.namespace)
        .filter_map(|c| {
            let auto = selection.of(c.key.kind).reloads(&c.key.name, c.matched)?;
            let container = container_for(spec, c.key.kind, &c.key.name, auto)?;
            Some(Target {
                key: c.key.clone(),
                container,
                lifecycle: c.lifecycle,
            })
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out.dedup();
    out
}

/// What `last-reloaded-from` holds: Reloader's `ReloadSource`, with its fields in Reloader's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadSource {
    /// `CONFIGMAP` or `SECRET`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
    /// Its SHA-1 when the reload was written.
    pub hash: String,
    /// The container that uses it.
    pub container_refs: Vec<String>,
    /// When the reload was written (Unix seconds).
    pub observed_at: i64,
}

/// One mark to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Set env var `name` of container `container` to `value` (added at the end when absent).
    EnvVar {
        /// The container.
        container: String,
        /// `STAKATER_<NAME>_<KIND>`.
        name: String,
        /// The object's SHA-1.
        value: String,
    },
    /// Remove env var `name` of container `container` (its object was deleted).
    RemoveEnvVar {
        /// The container.
        container: String,
        /// `STAKATER_<NAME>_<KIND>`.
        name: String,
    },
    /// Set the pod-template annotation `last-reloaded-from` to this source.
    Annotation(ReloadSource),
}

/// What to do for one workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The marks to write (none: nothing changed).
    pub marks: Vec<Mark>,
    /// The objects whose change the marks carry.
    pub changed: Vec<ConfigKey>,
    /// Every target's SHA-1 now: what [`Seen`] records once the marks are written (or at once, if none).
    pub observed: BTreeMap<ConfigKey, String>,
}

fn env_value<'a>(spec: &'a PodSpec, container: &str, name: &str) -> Option<&'a str> {
    spec.containers
        .iter()
        .find(|c| c.name == container)?
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .map(|e| e.value.as_deref().unwrap_or_default())
}

/// The `last-reloaded-from` the pod template carries, if it parses.
pub fn last_reloaded_from(workload: &Workload) -> Option<ReloadSource> {
    let value = workload.template.annotation(names::LAST_RELOADED_FROM)?;
    serde_json::from_str(value).ok()
}

/// Decides the marks for `workload`. For each target that exists: its SHA-1 now is compared with the
/// SHA-1 the workload carries for it, or else with the one wave saw before (`seen`); a target with
/// neither is only recorded (Reloader writes nothing for an object that has not changed). Objects marked
/// `ignore` (Reloader's or wave's) are recorded, never written. `observed_at` is the time to put in
/// `last-reloaded-from`.
pub fn plan(
    workload: &Workload,
    targets: &[Target],
    fetched: &Fetched,
    options: &Options,
    seen: &BTreeMap<ConfigKey, String>,
    observed_at: i64,
) -> Decision {
    let mut decision = Decision::default();
    let template = workload.template.typed();
    let Some(spec) = template.spec.as_ref() else {
        return decision;
    };
    let last = last_reloaded_from(workload);
    for target in targets {
        let kind = target.key.kind;
        let now = match (fetched.get(&target.key), target.lifecycle) {
            (Some(content), _) if content.ignored || content.reloader_ignored => {
                decision.observed.insert(target.key.clone(), sha(kind, content));
                continue;
            }
            (Some(content), _) => sha(kind, content),
            (None, Lifecycle::Deleted) if options.reload_on_delete => EMPTY_SHA.to_string(),
            (None, _) => continue,
        };
        decision.observed.insert(target.key.clone(), now.clone());
        let carried = match options.strategy {
            Strategy::EnvVars => env_value(spec, &target.container, &env_var_name(kind, &target.key.name)),
            Strategy::Annotations => last
                .as_ref()
                .filter(|l| l.type_ == type_name(kind) && l.name == target.key.name)
                .map(|l| l.hash.as_str()),
        };
        // An object created while wave watched counts as having come from no data.
        let created =
            (target.lifecycle == Lifecycle::Created && options.reload_on_create).then_some(EMPTY_SHA);
        let Some(before) = carried
            .or_else(|| seen.get(&target.key).map(String::as_str))
            .or(created)
        else {
            continue;
        };
        if before == now {
            continue;
        }
        decision.changed.push(target.key.clone());
        match options.strategy {
            // Deleted: its env var goes, if the workload carries one.
            Strategy::EnvVars if now == EMPTY_SHA && fetched.get(&target.key).is_none() => {
                if carried.is_some() {
                    decision.marks.push(Mark::RemoveEnvVar {
                        container: target.container.clone(),
                        name: env_var_name(kind, &target.key.name),
                    });
                }
            }
            Strategy::EnvVars => decision.marks.push(Mark::EnvVar {
                container: target.container.clone(),
                name: env_var_name(kind, &target.key.name),
                value: now,
            }),
            // One annotation names one object: the first change; the others are recorded with it.
            Strategy::Annotations if decision.marks.is_empty() => {
                decision.marks.push(Mark::Annotation(ReloadSource {
                    type_: type_name(kind).to_string(),
                    name: target.key.name.clone(),
                    namespace: target.key.namespace.clone(),
                    hash: now,
                    container_refs: vec![target.container.clone()],
                    observed_at,
                }));
            }
            Strategy::Annotations => {}
        }
    }
    decision
}

/// How a reload's patch is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// Strategic merge patch: the `apps/v1` kinds.
    StrategicMerge,
    /// JSON merge patch: Argo Rollouts, whose API (a custom resource) takes no strategic merge patch.
    Merge,
}

/// With `reloader.stakater.com/rollout-strategy: restart`, a reload of an Argo Rollout sets
/// `spec.restartAt` (its pods restart, the template is left alone) instead of writing the mark.
pub const ROLLOUT_STRATEGY: &str = "reloader.stakater.com/rollout-strategy";

/// Applies `marks` to a pod template as Reloader does in memory before it updates an object whole: an
/// env var set in place or appended to its container, removed, or the `last-reloaded-from` annotation set.
fn apply_marks(template: &mut k8s_openapi::api::core::v1::PodTemplateSpec, marks: &[Mark]) {
    fn env_of<'a>(
        template: &'a mut k8s_openapi::api::core::v1::PodTemplateSpec,
        container: &str,
    ) -> Option<&'a mut Vec<k8s_openapi::api::core::v1::EnvVar>> {
        let c = template
            .spec
            .as_mut()?
            .containers
            .iter_mut()
            .find(|c| c.name == container)?;
        Some(c.env.get_or_insert_with(Vec::new))
    }
    for mark in marks {
        match mark {
            Mark::EnvVar {
                container,
                name,
                value,
            } => {
                if let Some(env) = env_of(template, container) {
                    match env.iter_mut().find(|e| &e.name == name) {
                        Some(e) => e.value = Some(value.clone()),
                        None => env.push(k8s_openapi::api::core::v1::EnvVar {
                            name: name.clone(),
                            value: Some(value.clone()),
                            ..Default::default()
                        }),
                    }
                }
            }
            Mark::RemoveEnvVar { container, name } => {
                if let Some(env) = env_of(template, container) {
                    env.retain(|e| &e.name != name);
                }
            }
            Mark::Annotation(source) => {
                let value = serde_json::to_string(source).unwrap_or_default();
                template
                    .metadata
                    .get_or_insert_with(Default::default)
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(names::LAST_RELOADED_FROM.to_string(), value);
            }
        }
    }
}

/// The patch writing `marks` to `workload`, as Reloader would leave it, guarded by the observed
/// `resourceVersion` like every wave write. For the `apps/v1` kinds a strategic merge patch: env vars
/// merge by name into their container's list (appended when new). For an Argo Rollout, which Reloader
/// updates whole: its containers with the marks applied, or, under `rollout-strategy: restart`,
/// `spec.restartAt` at `now`.
pub fn reload_patch(workload: &Workload, marks: &[Mark], now: Timestamp) -> (Value, PatchKind) {
    if workload.id.kind != WorkloadKind::ROLLOUT {
        return (patch_body(workload, marks), PatchKind::StrategicMerge);
    }
    let mut body = json!({ "metadata": { "resourceVersion": workload.resource_version } });
    if workload.annotations.get(ROLLOUT_STRATEGY).map(String::as_str) == Some("restart") {
        body["spec"]["restartAt"] = json!(rfc3339(now));
        return (body, PatchKind::Merge);
    }
    let mut template = workload.template.typed();
    apply_marks(&mut template, marks);
    if let Some(source) = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(names::LAST_RELOADED_FROM))
        .filter(|_| marks.iter().any(|m| matches!(m, Mark::Annotation(_))))
    {
        body["spec"]["template"]["metadata"]["annotations"][names::LAST_RELOADED_FROM] = json!(source);
    }
    if marks.iter().any(|m| !matches!(m, Mark::Annotation(_))) {
        // A merge patch replaces a list whole.
        let containers = template.spec.map(|s| s.containers).unwrap_or_default();
        body["spec"]["template"]["spec"]["containers"] =
            serde_json::to_value(&containers).unwrap_or_default();
    }
    (body, PatchKind::Merge)
}

/// The Job Reloader creates for a CronJob whose config changed, instead of patching it: the CronJob's
/// `jobTemplate` with the marks applied to its pod template, named after the CronJob, owned by it, and
/// marked as started by hand (`cronjob.kubernetes.io/instantiate: manual`), as `kubectl create job
/// --from=cronjob/…` does. `cron_job` is the CronJob object.
pub fn job_from_cron_job(cron_job: &Value, workload: &Workload, marks: &[Mark], name: &str) -> Value {
    let job_template = cron_job.pointer("/spec/jobTemplate").cloned().unwrap_or_default();
    let mut template = workload.template.typed();
    apply_marks(&mut template, marks);
    let mut spec = job_template.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["template"] = serde_json::to_value(&template).unwrap_or_default();
    let mut annotations = json!({ CRONJOB_INSTANTIATE: "manual" });
    if let Some(Value::Object(more)) = job_template.pointer("/metadata/annotations") {
        for (k, v) in more {
            annotations[k] = v.clone();
        }
    }
    let labels = job_template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": workload.id.namespace,
            "annotations": annotations,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "CronJob", "name": workload.id.name, "uid": workload.uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    })
}

/// The annotation of a Job started by hand from a CronJob.
pub const CRONJOB_INSTANTIATE: &str = "cronjob.kubernetes.io/instantiate";

/// The longest name wave gives a Job: the Job controller copies the name into a label of the Job's
/// pods (`batch.kubernetes.io/job-name`), and a label value holds at most 63 characters.
pub const JOB_NAME_MAX: usize = 63;

/// Hex digits of the version hash that ends a Job's name (40 bits).
const JOB_NAME_HASH: usize = 10;

/// The name of the Job that a reload of CronJob `cron_job` starts for the config `decision` reloads:
/// `<the CronJob's name>-<10 hex digits>`, the name cut (and stripped of a trailing `-` or `.`) so that
/// the whole fits [`JOB_NAME_MAX`]. The digits hash the CronJob's uid and, for each object whose
/// change the reload carries, its SHA-1 and the version its watch reported (`versions`: uid and
/// resourceVersion; none once deleted).
///
/// Reloader names the Job with `generateName`, so a create that timed out or failed with a 5xx after
/// it landed, retried, starts a second Job. With this name the retry is a 409 and nothing more, while a
/// later change, even back to earlier data (a new resourceVersion), names a new Job. A metadata-only
/// write to the object between a landed create and its retry also changes the name; that costs the
/// second Job Reloader would have started anyway. CronJob names have at most 52 characters, so the
/// cut is a guard, and the 10 digits never look like the CronJob controller's own `<name>-<minutes>`.
pub fn job_name(
    cron_job: &Workload,
    decision: &Decision,
    versions: &BTreeMap<ConfigKey, ObjectVersion>,
) -> String {
    let changed: BTreeSet<&ConfigKey> = decision.changed.iter().collect();
    let objects: Vec<Value> = changed
        .into_iter()
        .map(|key| {
            let version = versions.get(key);
            json!([
                key.kind.kind(),
                key.namespace,
                key.name,
                decision.observed.get(key),
                version.map(|v| &v.uid),
                version.map(|v| &v.resource_version),
            ])
        })
        .collect();
    // JSON arrays: no two inputs serialise alike.
    let input = json!([cron_job.uid, objects]).to_string();
    let digest = sha2::Sha256::digest(input.as_bytes());
    let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let keep = JOB_NAME_MAX - 1 - JOB_NAME_HASH;
    let mut prefix: &str = &cron_job.id.name;
    if prefix.len() > keep {
        // Names are ASCII; a non-ASCII one would be refused by the apiserver anyway.
        let mut end = keep;
        while !prefix.is_char_boundary(end) {
            end -= 1;
        }
        prefix = &prefix[..end];
    }
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{}", &hash[..JOB_NAME_HASH])
}

/// The strategic merge patch writing `marks` (what Reloader sends), guarded by the observed
/// `resourceVersion` like every wave write. Env vars merge by name into their container's list (appended
/// when new), so the template ends up exactly as Reloader would leave it.
pub fn patch_body(workload: &Workload, marks: &[Mark]) -> Value {
    let mut template = json!({});
    let mut containers: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for mark in marks {
        match mark {
            Mark::EnvVar {
                container,
                name,
                value,
            } => containers
                .entry(container)
                .or_default()
                .push(json!({ "name": name, "value": value })),
            // A strategic merge patch deletes a list item by its merge key.
            Mark::RemoveEnvVar { container, name } => containers
                .entry(container)
                .or_default()
                .push(json!({ "name": name, "$patch": "delete" })),
            Mark::Annotation(source) => {
                // Go's encoding/json writes the struct's fields in order, compactly, as serde_json does.
                let value = serde_json::to_string(source).unwrap_or_default();
                template["metadata"]["annotations"][names::LAST_RELOADED_FROM] = json!(value);
            }
        }
    }
    if !containers.is_empty() {
        template["spec"]["containers"] = containers
            .into_iter()
            .map(|(name, env)| json!({ "name": name, "env": env }))
            .collect();
    }
    let mut body = json!({ "metadata": { "resourceVersion": workload.resource_version } });
    let mut at = &mut body;
    for segment in workload.id.kind.info().template.split('/').skip(1) {
        at = &mut at[segment];
    }
    *at = template;
    body
}

/// What `deployment.reloader.stakater.com/pause-period` asks of a Deployment now (Reloader's
/// `pause_deployment.go`, level-triggered: the pause's start is the `paused-at` annotation, not a timer
/// in memory, so it survives a restart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Nothing: no pause period, or a pause that is not Reloader's (or wave's).
    None,
    /// Resume it now: `spec.paused: false`, `paused-at` removed.
    ResumeNow,
    /// Paused; resume it after this long.
    ResumeAfter(Duration),
}

/// The pause period a Deployment asks for with each reload; `Err` names a value that is not a Go
/// duration (the reload is then written without a pause).
pub fn pause_period(workload: &Workload) -> Option<Result<Duration, String>> {
    if workload.id.kind != WorkloadKind::DEPLOYMENT {
        return None;
    }
    let value = workload.annotations.get(names::PAUSE_PERIOD)?;
    Some(crate::duration::parse_go_duration(value).map_err(|e| {
        format!(
            "annotation {}: {value:?}: {e}; reloading without a pause",
            names::PAUSE_PERIOD
        )
    }))
}

/// Whether a Deployment that a reload paused is due to resume, at `now`. A pause whose period
/// annotation is gone or unreadable, or whose start cannot be read, resumes at once (Reloader would
/// leave such a Deployment paused after a restart). A pause is a reload's only while whoever set
/// `spec.paused` also wrote `paused-at` (`Workload::reload_paused`): a user who resumed and paused
/// again by hand since keeps their pause, even with a stale `paused-at`.
pub fn pause(workload: &Workload, now: Timestamp) -> Pause {
    if !workload.holds_reload_pause() {
        return Pause::None;
    }
    let Some(at) = workload.annotations.get(names::PAUSED_AT) else {
        return Pause::None;
    };
    let period = pause_period(workload).and_then(Result::ok);
    let started = at.parse::<Timestamp>().ok();
    match (period, started) {
        (Some(period), Some(started)) => {
            let elapsed = Duration::try_from(now.duration_since(started)).unwrap_or_default();
            match period.checked_sub(elapsed).filter(|left| !left.is_zero()) {
                Some(left) => Pause::ResumeAfter(left),
                None => Pause::ResumeNow,
            }
        }
        _ => Pause::ResumeNow,
    }
}

/// The merge of a reload's patch that pauses the Deployment, as Reloader does: `spec.paused: true`
/// and `paused-at` (RFC 3339, seconds). Nothing when it is paused already.
pub fn add_pause(body: &mut Value, workload: &Workload, now: Timestamp) {
    if workload.progress.paused {
        return;
    }
    body["spec"]["paused"] = json!(true);
    body["metadata"]["annotations"][names::PAUSED_AT] = json!(rfc3339(now));
}

/// `now` as Go's `time.RFC3339` writes it in UTC, to the second (what Reloader writes).
fn rfc3339(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The patch that resumes a Deployment a reload paused, guarded by its resourceVersion.
pub fn resume_patch(workload: &Workload) -> Value {
    json!({
        "metadata": {"resourceVersion": workload.resource_version, "annotations": {(names::PAUSED_AT): null}},
        "spec": {"paused": false},
    })
}

/// Whether `workload` runs Stakater Reloader: a Deployment scaled above zero whose pod template has a
/// container with Reloader's image (`stakater/reloader`, from any registry or mirror, any tag or
/// digest) or the env var `RELOADER_DEPLOYMENT_NAME` that Reloader's chart and manifests set (v1.4.21,
/// `deployments/kubernetes/chart/reloader/templates/deployment.yaml` and
/// `deployments/kubernetes/manifests/deployment.yaml` of <https://github.com/stakater/Reloader>).
///
/// Neither its name nor its labels say it reliably (the chart's `fullnameOverride`, `nameOverride`
/// and the plain manifests' bare `app` label), and its lease exists only with `--enable-ha`; the pod
/// template is already in wave's view of every workload, so this costs no request and no right.
pub fn runs_reloader(workload: &Workload) -> bool {
    if workload.id.kind != WorkloadKind::DEPLOYMENT || workload.progress.spec_replicas == Some(0) {
        return false;
    }
    let template = &workload.template;
    if !template.mentions(names::IMAGE) && !template.mentions(names::DEPLOYMENT_NAME_ENV) {
        return false;
    }
    let spec = template.typed().spec.unwrap_or_default();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.image.as_deref().is_some_and(is_reloader_image)
                || c.env
                    .iter()
                    .flatten()
                    .any(|e| e.name == names::DEPLOYMENT_NAME_ENV)
        })
}

/// Whether image reference `image` names Reloader's repository (`names::IMAGE`).
fn is_reloader_image(image: &str) -> bool {
    let repository = image.split('@').next().unwrap_or_default();
    // A tag follows the last `:` after the last `/` (an earlier `:` is a registry's port).
    let repository = match repository.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => repository,
    };
    repository == names::IMAGE
        || repository
            .strip_suffix(names::IMAGE)
            .is_some_and(|registry| registry.ends_with('/'))
}

/// The workloads among `workloads` that run Reloader ([`runs_reloader`]), sorted.
pub fn running_reloaders<'a>(workloads: impl IntoIterator<Item = &'a Workload>) -> Vec<WorkloadRef> {
    let mut found: Vec<WorkloadRef> = workloads
        .into_iter()
        .filter(|w| runs_reloader(w))
        .map(|w| w.id.clone())
        .collect();
    found.sort();
    found
}

/// For each workload opted in through Reloader's annotations, the SHA-1 of each target as wave last saw
/// it (or wrote it): what a target the workload carries no mark for is compared with. In memory only; a
/// restart starts from what the workloads carry (`docs/migrating-from-reloader.md`, "After a restart").
#[derive(Debug, Default)]
pub struct Seen {
    by_workload: HashMap<WorkloadRef, BTreeMap<ConfigKey, String>>,
}

impl Seen {
    /// What was seen for `id`.
    pub fn of(&self, id: &WorkloadRef) -> BTreeMap<ConfigKey, String> {
        self.by_workload.get(id).cloned().unwrap_or_default()
    }

    /// Records `observed` for `id` (targets no longer observed are dropped).
    pub fn record(&mut self, id: &WorkloadRef, observed: BTreeMap<ConfigKey, String>) {
        if observed.is_empty() {
            self.by_workload.remove(id);
        } else {
            self.by_workload.insert(id.clone(), observed);
        }
    }

    /// Forgets a deleted workload.
    pub fn forget(&mut self, id: &WorkloadRef) {
        self.by_workload.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::WorkloadKind;
    use crate::workload::testing::deployment;
    use std::sync::Arc;

    fn reloader_workload(annotations: &[(&str, &str)], spec: Value) -> Workload {
        let mut w = deployment("ns", "web", annotations, spec);
        w.annotations.remove(crate::names::UPDATE_ON_CONFIG_CHANGE);
        w
    }

    fn content(pairs: &[(&str, &str)]) -> Content {
        Content::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn cm(name: &str) -> ConfigKey {
        ConfigKey::new(ConfigKind::ConfigMap, "ns", name)
    }

    fn candidates(keys: &[ConfigKey]) -> Vec<Candidate> {
        keys.iter()
            .map(|key| Candidate {
                key: key.clone(),
                matched: false,
                lifecycle: Lifecycle::Existing,
            })
            .collect()
    }

    // The expected values are `printf '%s' 'a=1;b=2' | sha1sum` and so on: Reloader's input format,
    // hashed by another implementation.
    #[test]
    fn the_sha_of_a_config_map_is_sha1_of_its_sorted_key_value_pairs() {
        let c = content(&[("b", "2"), ("a", "1")]);
        assert_eq!(
            sha(ConfigKind::ConfigMap, &c),
            "f83e99e324ba68ccc373a58ef1eb42f8ab88646a"
        );
    }

    #[test]
    fn the_sha_sorts_whole_entries_so_a_dotted_key_comes_before_its_prefix() {
        // "a.b=x" < "a=y" because '.' sorts before '='.
        let c = content(&[("a", "y"), ("a.b", "x")]);
        assert_eq!(
            sha(ConfigKind::Secret, &c),
            "989b6369fc19f3c782f71c212178dafc1bdcaf7d"
        );
    }

    #[test]
    fn binary_data_enters_the_sha_in_base64() {
        let mut c = content(&[("bin", "\u{1}\u{2}")]);
        c.binary_keys.insert("bin".into());
        // base64 of [1, 2] is "AQI=".
        assert_eq!(
            sha(ConfigKind::ConfigMap, &c),
            "eed8cd9e5bc2a37aea7d141bea4f0f57a9714095"
        );
        // A Secret's values are hashed as raw bytes.
        assert_ne!(sha(ConfigKind::Secret, &c), sha(ConfigKind::ConfigMap, &c));
    }

    #[test]
    fn an_empty_object_hashes_the_empty_string() {
        assert_eq!(
            sha(ConfigKind::ConfigMap, &Content::default()),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
    }

    #[test]
    fn env_var_names_follow_reloader() {
        assert_eq!(
            env_var_name(ConfigKind::ConfigMap, "app-config"),
            "STAKATER_APP_CONFIG_CONFIGMAP"
        );
        assert_eq!(
            env_var_name(ConfigKind::Secret, "db.creds--v2"),
            "STAKATER_DB_CREDS_V2_SECRET"
        );
        // Leading separators vanish; a trailing one stays, as in Reloader.
        assert_eq!(env_var_name(ConfigKind::Secret, "-x-"), "STAKATER_X__SECRET");
    }

    #[test]
    fn only_reloader_annotations_opt_a_workload_in_and_wave_s_own_wins() {
        let spec = json!({"containers": [{"name": "c"}]});
        let options = Options::default();
        assert!(selection(&reloader_workload(&[], spec.clone()), &options).is_none());
        assert!(
            selection(
                &reloader_workload(&[(names::AUTO, "false")], spec.clone()),
                &options
            )
            .is_none()
        );
        assert!(
            selection(
                &reloader_workload(&[(names::AUTO, "true")], spec.clone()),
                &options
            )
            .is_some()
        );
        let all = Options {
            auto_reload_all: true,
            ..Options::default()
        };
        assert!(selection(&reloader_workload(&[], spec.clone()), &all).is_some());
        assert!(selection(&reloader_workload(&[(names::AUTO, "false")], spec.clone()), &all).is_none());
        let both = deployment("ns", "web", &[(names::AUTO, "true")], spec);
        assert!(selection(&both, &options).is_none(), "wave's opt-in wins");
    }

    #[test]
    fn auto_reloads_only_referenced_objects_and_marks_the_container_that_uses_them() {
        let w = reloader_workload(
            &[(names::AUTO, "true")],
            json!({
                "containers": [
                    {"name": "a"},
                    {"name": "b", "envFrom": [{"configMapRef": {"name": "env"}}],
                     "volumeMounts": [{"name": "vol", "mountPath": "/c"}]}
                ],
                "volumes": [{"name": "vol", "configMap": {"name": "mounted"}}]
            }),
        );
        let sel = selection(&w, &Options::default()).unwrap();
        let found = targets(&w, &sel, &candidates(&[cm("env"), cm("mounted"), cm("unused")]));
        assert_eq!(
            found,
            vec![
                Target {
                    key: cm("env"),
                    container: "b".into(),
                    lifecycle: Lifecycle::Existing,
                },
                Target {
                    key: cm("mounted"),
                    container: "b".into(),
                    lifecycle: Lifecycle::Existing,
                },
            ]
        );
    }

    #[test]
    fn named_objects_reload_even_when_unreferenced_through_the_first_container() {
        let w = reloader_workload(
            &[(names::CONFIGMAP_RELOAD, "flags, app-.*")],
            json!({"containers": [{"name": "main"}, {"name": "side"}]}),
        );
        let sel = selection(&w, &Options::default()).unwrap();
        assert!(sel.needs(&w).scan, "a pattern scans the namespace");
        assert!(sel.needs(&w).keys.contains(&cm("flags")));
        let found = targets(&w, &sel, &candidates(&[cm("flags"), cm("app-one"), cm("other")]));
        let names: Vec<&str> = found.iter().map(|t| t.key.name.as_str()).collect();
        assert_eq!(names, ["app-one", "flags"]);
        assert!(found.iter().all(|t| t.container == "main"));
    }

    #[test]
    fn exclusions_search_and_match_follow_reloader() {
        let w = reloader_workload(
            &[
                (names::SEARCH, "true"),
                (names::CONFIGMAP_EXCLUDE, "skipped"),
                (names::CONFIGMAP_AUTO, "false"),
            ],
            json!({"containers": [{"name": "c", "envFrom": [
                {"configMapRef": {"name": "marked"}},
                {"configMapRef": {"name": "unmarked"}},
                {"configMapRef": {"name": "skipped"}}
            ]}]}),
        );
        let sel = selection(&w, &Options::default()).unwrap();
        let all = [
            Candidate {
                key: cm("marked"),
                matched: true,
                lifecycle: Lifecycle::Existing,
            },
            Candidate {
                key: cm("unmarked"),
                matched: false,
                lifecycle: Lifecycle::Existing,
            },
            Candidate {
                key: cm("skipped"),
                matched: true,
                lifecycle: Lifecycle::Existing,
            },
        ];
        let found = targets(&w, &sel, &all);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, cm("marked"));
    }

    #[test]
    fn annotations_on_the_pod_template_count_when_the_workload_has_none_of_that_kind() {
        let mut w = reloader_workload(&[], json!({"containers": [{"name": "c"}]}));
        w.template.edit(|t| {
            t.metadata = Some(
                serde_json::from_value(json!({"annotations": {(names::SECRET_RELOAD): "creds"}})).unwrap(),
            );
        });
        w.annotations
            .insert(names::CONFIGMAP_RELOAD.into(), "flags".into());
        let sel = selection(&w, &Options::default()).unwrap();
        assert!(sel.config_maps.patterns.iter().any(|p| p.matches("flags")));
        assert!(sel.secrets.patterns.iter().any(|p| p.matches("creds")));
    }

    #[test]
    fn a_bad_pattern_is_reported_not_used() {
        let w = reloader_workload(
            &[(names::CONFIGMAP_RELOAD, "good,bad(")],
            json!({"containers": [{"name": "c"}]}),
        );
        let sel = selection(&w, &Options::default()).unwrap();
        assert_eq!(sel.config_maps.patterns.len(), 1);
        assert_eq!(sel.problems.len(), 1);
        assert!(sel.problems[0].contains("bad("), "{:?}", sel.problems);
    }

    fn env_workload(value: Option<&str>) -> Workload {
        let env = value
            .map(|v| json!([{"name": "STAKATER_APP_CONFIGMAP", "value": v}]))
            .unwrap_or(json!([]));
        reloader_workload(
            &[(names::AUTO, "true")],
            json!({"containers": [{"name": "c", "env": env, "envFrom": [{"configMapRef": {"name": "app"}}]}]}),
        )
    }

    fn plan_for(
        w: &Workload,
        data: &str,
        seen: &BTreeMap<ConfigKey, String>,
        strategy: Strategy,
    ) -> Decision {
        let sel = selection(w, &Options::default()).unwrap();
        let t = targets(w, &sel, &candidates(&[cm("app")]));
        let fetched: Fetched = [(cm("app"), Arc::new(content(&[("k", data)])))].into();
        let options = Options {
            strategy,
            ..Options::default()
        };
        plan(w, &t, &fetched, &options, seen, 1_700_000_000)
    }

    #[test]
    fn a_workload_whose_env_var_matches_the_config_is_not_written() {
        let current = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
        let d = plan_for(
            &env_workload(Some(&current)),
            "v1",
            &BTreeMap::new(),
            Strategy::EnvVars,
        );
        assert!(d.marks.is_empty());
        assert_eq!(d.observed.get(&cm("app")), Some(&current));
    }

    #[test]
    fn a_change_made_while_nobody_watched_is_caught_from_the_env_var() {
        let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
        let d = plan_for(
            &env_workload(Some(&old)),
            "v2",
            &BTreeMap::new(),
            Strategy::EnvVars,
        );
        assert_eq!(
            d.marks,
            vec![Mark::EnvVar {
                container: "c".into(),
                name: "STAKATER_APP_CONFIGMAP".into(),
                value: sha(ConfigKind::ConfigMap, &content(&[("k", "v2")])),
            }]
        );
    }

    #[test]
    fn an_object_never_reloaded_is_recorded_at_first_sight_and_written_once_it_changes() {
        let w = env_workload(None);
        let first = plan_for(&w, "v1", &BTreeMap::new(), Strategy::EnvVars);
        assert!(
            first.marks.is_empty(),
            "Reloader writes nothing for config that has not changed"
        );
        let later = plan_for(&w, "v2", &first.observed, Strategy::EnvVars);
        assert_eq!(later.marks.len(), 1);
        assert_eq!(later.changed, vec![cm("app")]);
    }

    #[test]
    fn the_annotation_strategy_compares_with_the_object_last_reloaded_from_names() {
        let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
        let mut w = env_workload(None);
        let source = ReloadSource {
            type_: "CONFIGMAP".into(),
            name: "app".into(),
            namespace: "ns".into(),
            hash: old,
            container_refs: vec!["c".into()],
            observed_at: 1,
        };
        w.template.edit(|t| {
            t.metadata = Some(
                serde_json::from_value(json!({"annotations": {
                    (names::LAST_RELOADED_FROM): serde_json::to_string(&source).unwrap()
                }}))
                .unwrap(),
            );
        });
        assert!(
            plan_for(&w, "v1", &BTreeMap::new(), Strategy::Annotations)
                .marks
                .is_empty()
        );
        let d = plan_for(&w, "v2", &BTreeMap::new(), Strategy::Annotations);
        let [Mark::Annotation(written)] = d.marks.as_slice() else {
            panic!("one annotation: {:?}", d.marks)
        };
        assert_eq!(written.hash, sha(ConfigKind::ConfigMap, &content(&[("k", "v2")])));
        assert_eq!(written.observed_at, 1_700_000_000);
        assert_eq!(written.container_refs, ["c"]);
    }

    #[test]
    fn the_annotation_is_the_json_reloader_writes() {
        let source = ReloadSource {
            type_: "SECRET".into(),
            name: "db".into(),
            namespace: "ns".into(),
            hash: "abc".into(),
            container_refs: vec!["c".into()],
            observed_at: 42,
        };
        let w = env_workload(None);
        let body = patch_body(&w, &[Mark::Annotation(source)]);
        assert_eq!(
            body["spec"]["template"]["metadata"]["annotations"][names::LAST_RELOADED_FROM],
            json!(
                r#"{"type":"SECRET","name":"db","namespace":"ns","hash":"abc","containerRefs":["c"],"observedAt":42}"#
            )
        );
        assert_eq!(body["metadata"]["resourceVersion"], json!("1"));
    }

    #[test]
    fn env_var_marks_merge_into_their_container_by_name() {
        let w = env_workload(None);
        let body = patch_body(
            &w,
            &[Mark::EnvVar {
                container: "c".into(),
                name: "STAKATER_APP_CONFIGMAP".into(),
                value: "abc".into(),
            }],
        );
        assert_eq!(
            body["spec"]["template"]["spec"],
            json!({"containers": [{"name": "c", "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": "abc"}]}]})
        );
    }

    #[test]
    fn ignored_objects_are_recorded_but_never_written() {
        let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
        let w = env_workload(Some(&old));
        let sel = selection(&w, &Options::default()).unwrap();
        let t = targets(&w, &sel, &candidates(&[cm("app")]));
        let mut c = content(&[("k", "v2")]);
        c.reloader_ignored = true;
        let fetched: Fetched = [(cm("app"), Arc::new(c))].into();
        let d = plan(&w, &t, &fetched, &Options::default(), &BTreeMap::new(), 0);
        assert!(d.marks.is_empty());
        assert_eq!(d.observed.len(), 1);
    }

    fn paused_deployment(period: Option<&str>, paused_at: Option<&str>, paused: bool) -> Workload {
        let mut annotations = vec![(names::AUTO, "true")];
        annotations.extend(period.map(|p| (names::PAUSE_PERIOD, p)));
        annotations.extend(paused_at.map(|p| (names::PAUSED_AT, p)));
        let mut w = reloader_workload(&annotations, json!({"containers": [{"name": "c"}]}));
        w.progress.paused = paused;
        // As the reload's write leaves it: one manager owns spec.paused and paused-at.
        w.reload_paused = paused && paused_at.is_some();
        w
    }

    #[test]
    fn a_pause_someone_else_set_since_is_never_resumed_by_wave() {
        let now: Timestamp = "2026-11-23T13:00:00Z".parse().unwrap();
        // Resumed by hand, then paused by hand: `kubectl rollout` owns spec.paused, the stale
        // paused-at is wave's.
        let mut users = paused_deployment(Some("1m"), Some("2026-11-23T12:00:00Z"), true);
        users.reload_paused = false;
        assert_eq!(pause(&users, now), Pause::None);
        assert!(!users.holds_reload_pause());
    }

    #[test]
    fn the_owner_of_a_pause_is_read_from_managed_fields() {
        let meta = |fields: serde_json::Value| -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            serde_json::from_value(json!({"name": "d", "namespace": "ns", "managedFields": fields,
                "annotations": {(names::PAUSED_AT): "2026-11-23T12:00:00Z"}}))
            .unwrap()
        };
        let both = json!({"f:spec": {"f:paused": {}}, "f:metadata": {"f:annotations": {(format!("f:{}", names::PAUSED_AT)): {}}}});
        let reload = meta(
            json!([{"manager": "wave", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": both}]),
        );
        let w = Workload::from_parts(WorkloadKind::DEPLOYMENT, reload, Default::default());
        assert!(w.reload_paused);
        let split = meta(json!([
            {"manager": "wave", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {(format!("f:{}", names::PAUSED_AT)): {}}}}},
            {"manager": "kubectl-rollout", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:paused": {}}}},
        ]));
        let w = Workload::from_parts(WorkloadKind::DEPLOYMENT, split, Default::default());
        assert!(!w.reload_paused, "the user paused it");
    }

    #[test]
    fn a_reload_pauses_a_deployment_that_asks_and_it_resumes_when_the_period_is_over() {
        let now: Timestamp = "2026-11-23T12:00:10Z".parse().unwrap();
        let w = paused_deployment(Some("1m"), None, false);
        let mut body = json!({});
        add_pause(&mut body, &w, now);
        assert_eq!(body["spec"]["paused"], json!(true));
        assert_eq!(
            body["metadata"]["annotations"][names::PAUSED_AT],
            json!("2026-11-23T12:00:10Z")
        );
        assert_eq!(pause_period(&w), Some(Ok(Duration::from_secs(60))));

        let paused = paused_deployment(Some("1m"), Some("2026-11-23T12:00:00Z"), true);
        assert_eq!(pause(&paused, now), Pause::ResumeAfter(Duration::from_secs(50)));
        let later: Timestamp = "2026-11-23T12:01:00Z".parse().unwrap();
        assert_eq!(pause(&paused, later), Pause::ResumeNow);
        let mut again = json!({});
        add_pause(&mut again, &paused, now);
        assert_eq!(again, json!({}), "already paused: the pause keeps its start");
    }

    #[test]
    fn a_pause_that_is_not_a_reload_s_is_left_alone_and_a_broken_one_resumes() {
        let now: Timestamp = "2026-11-23T12:00:10Z".parse().unwrap();
        // Paused by someone else (no paused-at), or paused-at left on a running Deployment.
        assert_eq!(
            pause(&paused_deployment(Some("1m"), None, true), now),
            Pause::None
        );
        assert_eq!(
            pause(
                &paused_deployment(Some("1m"), Some("2026-11-23T12:00:00Z"), false),
                now
            ),
            Pause::None
        );
        // Its period removed or unreadable, or its start unreadable: it would stay paused for ever.
        for (period, at) in [
            (None, "2026-11-23T12:00:00Z"),
            (Some("soon"), "2026-11-23T12:00:00Z"),
            (Some("1m"), "noon"),
        ] {
            assert_eq!(
                pause(&paused_deployment(period, Some(at), true), now),
                Pause::ResumeNow
            );
        }
        let bad = pause_period(&paused_deployment(Some("soon"), None, false))
            .unwrap()
            .unwrap_err();
        assert!(
            bad.contains("\"soon\"") && bad.contains(names::PAUSE_PERIOD),
            "{bad}"
        );
    }

    fn lifecycle_plan(
        w: &Workload,
        lifecycle: Lifecycle,
        data: Option<&str>,
        strategy: Strategy,
        seen: &BTreeMap<ConfigKey, String>,
    ) -> Decision {
        let target = Target {
            key: cm("app"),
            container: "c".into(),
            lifecycle,
        };
        let fetched: Fetched = data
            .map(|d| (cm("app"), Arc::new(content(&[("k", d)]))))
            .into_iter()
            .collect();
        let options = Options {
            strategy,
            reload_on_create: true,
            reload_on_delete: true,
            ..Options::default()
        };
        plan(w, &[target], &fetched, &options, seen, 7)
    }

    #[test]
    fn with_reload_on_create_an_object_created_while_watched_reloads_at_first_sight() {
        let w = env_workload(None);
        let d = lifecycle_plan(
            &w,
            Lifecycle::Created,
            Some("v1"),
            Strategy::EnvVars,
            &BTreeMap::new(),
        );
        assert_eq!(d.marks.len(), 1, "created counts as a change from no data");
        let d = lifecycle_plan(
            &w,
            Lifecycle::Existing,
            Some("v1"),
            Strategy::EnvVars,
            &BTreeMap::new(),
        );
        assert!(d.marks.is_empty(), "there at the first list: only recorded");
    }

    #[test]
    fn with_reload_on_delete_a_deleted_object_s_env_var_goes_or_the_annotation_names_it_with_no_data() {
        let old = sha(ConfigKind::ConfigMap, &content(&[("k", "v1")]));
        let d = lifecycle_plan(
            &env_workload(Some(&old)),
            Lifecycle::Deleted,
            None,
            Strategy::EnvVars,
            &BTreeMap::new(),
        );
        assert_eq!(
            d.marks,
            vec![Mark::RemoveEnvVar {
                container: "c".into(),
                name: "STAKATER_APP_CONFIGMAP".into()
            }]
        );
        let body = patch_body(&env_workload(Some(&old)), &d.marks);
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"][0]["env"][0],
            json!({"name": "STAKATER_APP_CONFIGMAP", "$patch": "delete"})
        );
        // Once it is gone from the workload, nothing more is written.
        let d = lifecycle_plan(
            &env_workload(None),
            Lifecycle::Deleted,
            None,
            Strategy::EnvVars,
            &d.observed,
        );
        assert!(d.marks.is_empty());

        let seen = BTreeMap::from([(cm("app"), old)]);
        let d = lifecycle_plan(
            &env_workload(None),
            Lifecycle::Deleted,
            None,
            Strategy::Annotations,
            &seen,
        );
        let [Mark::Annotation(source)] = d.marks.as_slice() else {
            panic!("one annotation: {:?}", d.marks)
        };
        assert_eq!(source.hash, EMPTY_SHA);
        assert_eq!(EMPTY_SHA, sha(ConfigKind::ConfigMap, &Content::default()));
    }

    #[test]
    fn an_argo_rollout_gets_its_containers_whole_or_a_restart() {
        let now: Timestamp = "2026-11-23T12:00:00Z".parse().unwrap();
        let mut w = env_workload(Some("old"));
        w.id.kind = WorkloadKind::ROLLOUT;
        assert!(
            selection(&w, &Options::default()).is_some(),
            "Reloader's annotations work on Rollouts"
        );
        let mark = Mark::EnvVar {
            container: "c".into(),
            name: "STAKATER_APP_CONFIGMAP".into(),
            value: "new".into(),
        };
        let (body, kind) = reload_patch(&w, std::slice::from_ref(&mark), now);
        assert_eq!(kind, PatchKind::Merge);
        let containers = &body["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["name"], "c");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "STAKATER_APP_CONFIGMAP", "value": "new"}])
        );
        assert_eq!(
            containers[0]["envFrom"],
            json!([{"configMapRef": {"name": "app"}}]),
            "the rest kept"
        );

        w.annotations.insert(ROLLOUT_STRATEGY.into(), "restart".into());
        let (body, _) = reload_patch(&w, &[mark], now);
        assert_eq!(body["spec"], json!({"restartAt": "2026-11-23T12:00:00Z"}));
        assert_eq!(body["metadata"]["resourceVersion"], json!("1"));
    }

    #[test]
    fn a_cron_job_s_reload_is_a_job_from_its_template_with_the_mark() {
        let mut w = env_workload(None);
        w.id.kind = WorkloadKind::CRON_JOB;
        w.uid = "cj-uid".into();
        assert!(selection(&w, &Options::default()).is_some());
        let cron_job = json!({"spec": {"schedule": "@daily", "jobTemplate": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {"backoffLimit": 2, "template": {}}}}});
        let mark = Mark::EnvVar {
            container: "c".into(),
            name: "STAKATER_APP_CONFIGMAP".into(),
            value: "sha".into(),
        };
        let job = job_from_cron_job(&cron_job, &w, &[mark], "web-0123456789");
        assert_eq!(job["metadata"]["name"], "web-0123456789");
        assert_eq!(job["metadata"].get("generateName"), None);
        assert_eq!(
            job["metadata"]["annotations"],
            json!({CRONJOB_INSTANTIATE: "manual", "note": "x"})
        );
        assert_eq!(job["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(job["metadata"]["ownerReferences"][0]["uid"], "cj-uid");
        assert_eq!(job["spec"]["backoffLimit"], 2);
        assert_eq!(
            job["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "STAKATER_APP_CONFIGMAP", "value": "sha"}])
        );
    }

    fn reload_of(key: &ConfigKey, sha: &str) -> Decision {
        Decision {
            marks: Vec::new(),
            changed: vec![key.clone()],
            observed: BTreeMap::from([(key.clone(), sha.to_string())]),
        }
    }

    fn at(key: &ConfigKey, uid: &str, rv: &str) -> BTreeMap<ConfigKey, ObjectVersion> {
        BTreeMap::from([(
            key.clone(),
            ObjectVersion {
                uid: uid.into(),
                resource_version: rv.into(),
            },
        )])
    }

    /// A DNS-1123 subdomain that is also a valid label value: what a Job's name must be.
    fn valid_job_name(name: &str) -> bool {
        name.len() <= JOB_NAME_MAX
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    }

    #[test]
    fn a_cron_job_s_job_name_is_stable_for_one_config_version_and_new_for_the_next() {
        let mut cron = env_workload(None);
        cron.id.kind = WorkloadKind::CRON_JOB;
        cron.uid = "cj-uid".into();
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
        let name = job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u1", "10"));
        assert!(
            name.starts_with("web-") && name.len() == "web-".len() + 10,
            "{name}"
        );
        assert!(valid_job_name(&name), "{name}");
        assert_eq!(
            job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u1", "10")),
            name,
            "a retry of the same reload names the same Job"
        );
        let others = [
            job_name(&cron, &reload_of(&key, "sha-b"), &at(&key, "u1", "11")),
            // The data back as it was (a revert) is a new version of the object.
            job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u1", "12")),
            // Deleted and re-created with the same data.
            job_name(&cron, &reload_of(&key, "sha-a"), &at(&key, "u2", "10")),
            // Deleted (with --reload-on-delete): no version.
            job_name(&cron, &reload_of(&key, EMPTY_SHA), &BTreeMap::new()),
            job_name(
                &cron,
                &reload_of(&ConfigKey::new(ConfigKind::Secret, "ns", "app"), "sha-a"),
                &at(&ConfigKey::new(ConfigKind::Secret, "ns", "app"), "u1", "10"),
            ),
        ];
        let mut seen = BTreeSet::from([name.clone()]);
        for other in &others {
            assert!(
                seen.insert(other.clone()),
                "{other} names another config version's Job too"
            );
        }
        let mut recreated = cron.clone();
        recreated.uid = "cj-uid-2".into();
        assert_ne!(
            job_name(&recreated, &reload_of(&key, "sha-a"), &at(&key, "u1", "10")),
            name,
            "a CronJob re-created under the same name never finds its predecessor's Job"
        );
    }

    #[test]
    fn a_cron_job_s_job_name_fits_a_label_value_however_long_the_cron_job_s_name() {
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
        let decision = reload_of(&key, "sha-a");
        let versions = at(&key, "u1", "10");
        for (cron_name, prefix) in [
            // The longest CronJob name the apiserver accepts: exactly 63 with the suffix.
            ("c".repeat(52), "c".repeat(52)),
            // Longer ones are cut; a cut that ends in `-` or `.` drops it.
            ("d".repeat(80), "d".repeat(52)),
            (format!("{}-tail", "e".repeat(51)), "e".repeat(51)),
            (format!("{}.-x", "f".repeat(50)), "f".repeat(50)),
            (format!("a.{}", "g".repeat(100)), format!("a.{}", "g".repeat(50))),
        ] {
            let mut cron = env_workload(None);
            cron.id.kind = WorkloadKind::CRON_JOB;
            cron.id.name = cron_name.clone();
            let name = job_name(&cron, &decision, &versions);
            assert!(valid_job_name(&name), "{name} ({} characters)", name.len());
            assert_eq!(
                name.rsplit_once('-').map(|(p, _)| p),
                Some(prefix.as_str()),
                "{cron_name}"
            );
        }
    }

    fn deployment_running(image: &str, env: Value, replicas: Option<i64>) -> Workload {
        let mut w = crate::workload::testing::deployment(
            "tools",
            "something",
            &[],
            json!({"containers": [{"name": "main", "image": image, "env": env}]}),
        );
        w.progress.spec_replicas = replicas;
        w
    }

    #[test]
    fn a_running_reloader_is_known_by_its_image_or_its_chart_s_env_var_and_not_when_scaled_to_zero() {
        for image in [
            "ghcr.io/stakater/reloader:v1.4.21",
            "stakater/reloader:v1.4.21-ubi",
            "docker.io/stakater/reloader",
            "registry.example.com:5000/mirror/stakater/reloader@sha256:0123",
        ] {
            assert!(
                runs_reloader(&deployment_running(image, json!([]), Some(1))),
                "{image}"
            );
        }
        let by_env = deployment_running(
            "registry.example.com/tools/config-reloader:1",
            json!([{"name": "RELOADER_DEPLOYMENT_NAME", "value": "reloader-reloader"}]),
            None,
        );
        assert!(runs_reloader(&by_env), "renamed image, the chart's env var");
        for image in [
            "ghcr.io/stakater/reloader-operator:v1",
            "example.com/notstakater/reloader:v1",
            "stakater/reloader-helper",
            "nginx",
        ] {
            assert!(
                !runs_reloader(&deployment_running(image, json!([]), Some(1))),
                "{image}"
            );
        }
        assert!(
            !runs_reloader(&deployment_running(
                "ghcr.io/stakater/reloader:v1.4.21",
                json!([]),
                Some(0)
            )),
            "scaled to zero: stopped, as docs/migrating-from-reloader.md says to"
        );
        let mut daemon = deployment_running("ghcr.io/stakater/reloader:v1.4.21", json!([]), Some(1));
        daemon.id.kind = WorkloadKind::DAEMON_SET;
        assert!(!runs_reloader(&daemon), "Reloader is shipped as a Deployment");
        let mut other = deployment_running("nginx", json!([]), Some(2));
        other.id.name = "web".into();
        let reloader = deployment_running("ghcr.io/stakater/reloader:v1.4.21", json!([]), Some(1));
        assert_eq!(
            running_reloaders([&other, &reloader]),
            std::slice::from_ref(&reloader.id)
        );
    }
}
