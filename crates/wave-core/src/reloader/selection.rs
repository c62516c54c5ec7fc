//! What a workload asked Reloader to watch ([`Selection`], read from its annotations or its pod
//! template's), and the objects that selection involves before looking at its namespace ([`Needs`]).

use std::collections::{BTreeMap, BTreeSet};

use super::Options;
use crate::kind::WorkloadKind;
use crate::names::{csi, reloader as names};
use crate::refs::{ConfigKey, ConfigKind};
use crate::workload::Workload;

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
    pub(super) fn reloads(&self, name: &str, matched: bool) -> Option<bool> {
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
    /// For SecretProviderClasses, with `--enable-csi-integration` (empty without).
    pub provider_classes: KindSelection,
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
            ConfigKind::SecretProviderClass => &self.provider_classes,
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
        // The classes its CSI volumes mount, as Reloader's `getVolumeMountName` finds them.
        if self.provider_classes.selects_anything() {
            let classes = csi_classes(&workload.template.typed());
            needs.keys.extend(
                classes
                    .into_iter()
                    .map(|name| ConfigKey::new(ConfigKind::SecretProviderClass, ns, name)),
            );
        }
        for kind in KINDS {
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

/// The kinds a selection covers, in Reloader's order.
const KINDS: [ConfigKind; 3] = [
    ConfigKind::ConfigMap,
    ConfigKind::Secret,
    ConfigKind::SecretProviderClass,
];

/// The SecretProviderClasses the pod's `csi` volumes name (`volumeAttributes.secretProviderClass`).
pub(super) fn csi_classes(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> Vec<String> {
    template
        .spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .filter_map(|v| {
            v.csi
                .as_ref()?
                .volume_attributes
                .as_ref()?
                .get(csi::VOLUME_ATTRIBUTE)
        })
        .filter(|name| !name.is_empty())
        .cloned()
        .collect()
}

fn annotation_keys(kind: ConfigKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        ConfigKind::ConfigMap => (
            names::CONFIGMAP_RELOAD,
            names::CONFIGMAP_AUTO,
            names::CONFIGMAP_EXCLUDE,
        ),
        ConfigKind::Secret => (names::SECRET_RELOAD, names::SECRET_AUTO, names::SECRET_EXCLUDE),
        ConfigKind::SecretProviderClass => (
            names::SECRET_PROVIDER_CLASS_RELOAD,
            names::SECRET_PROVIDER_CLASS_AUTO,
            names::SECRET_PROVIDER_CLASS_EXCLUDE,
        ),
    }
}

/// What `workload` asked Reloader to watch; `None` when it did not opt in through Reloader's
/// annotations (or opted in to wave's own, which then wins). Per kind, like Reloader, the annotations
/// are read from the workload's metadata if it has any of that kind's (`reload`, `auto`, the kind's
/// `auto`, `search`), else from its pod template's; `exclude` only from the metadata.
pub fn selection(workload: &Workload, options: &Options) -> Option<Selection> {
    let kind = workload.id.kind;
    let reloadable = kind.info().rolls_out
        || kind == WorkloadKind::ROLLOUT
        || kind == WorkloadKind::CRON_JOB
        || kind == WorkloadKind::JOB;
    // `--ignored-workload-types=cronjobs` or `jobs`, as Reloader's `doRollingUpgrade` skips them. And,
    // unlike Reloader, a Job that says wave's own annotation (which wave cannot act on: a Job's template
    // cannot change) or that a controller made (a CronJob's: its history would run again) is left alone.
    let ignored = (kind == WorkloadKind::CRON_JOB && options.ignore_cron_jobs)
        || (kind == WorkloadKind::JOB
            && (options.ignore_jobs
                || workload.controlled
                || crate::refs::is_opted_in(&workload.annotations)));
    if workload.is_opted_in() || !reloadable || ignored {
        return None;
    }
    let pod = workload.template.annotations();
    let meta = &workload.annotations;
    let mut selection = Selection::default();
    for kind in KINDS {
        // Reloader follows SecretProviderClasses only under `--enable-csi-integration`.
        let unwatched = kind == ConfigKind::SecretProviderClass && !options.csi;
        if unwatched || options.ignored_kinds.contains(&kind) {
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
            ConfigKind::SecretProviderClass => selection.provider_classes = sel,
        }
    }
    KINDS
        .iter()
        .any(|kind| selection.of(*kind).selects_anything())
        .then_some(selection)
}

#[cfg(test)]
#[path = "selection_tests.rs"]
mod tests;
