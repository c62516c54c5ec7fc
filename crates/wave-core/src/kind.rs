//! Workload kinds as data.
//!
//! Everything wave does with a workload (watch it, read it, patch its pod template, hash a rendered
//! manifest of it, admit it in the webhook) depends on a few facts about its kind: the API group,
//! version and plural, and where the pod template sits in the object. Those facts are one [`KindInfo`]
//! per kind, and the code that talks to the apiserver reads them instead of matching on the kind, so a
//! new workload kind is one more entry here, not one more arm in five places.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// The facts about one workload kind.
#[derive(Debug)]
pub struct KindInfo {
    /// API group (`apps`).
    pub group: &'static str,
    /// API version within the group (`v1`).
    pub version: &'static str,
    /// `apiVersion` as written in manifests (`apps/v1`).
    pub api_version: &'static str,
    /// The Kubernetes kind (`Deployment`); also the metric label.
    pub kind: &'static str,
    /// Lowercase plural, as in RBAC rules and URLs (`deployments`).
    pub plural: &'static str,
    /// Names accepted on the command line besides the kind and the plural (`deploy`).
    pub short_names: &'static [&'static str],
    /// JSON pointer to the pod template in the object (`/spec/template`).
    pub template: &'static str,
    /// Whether the kind's own controller replaces pods created from an older template by itself. A
    /// Deployment does (its new ReplicaSet); a StatefulSet waits for a never-ready pod forever and a
    /// DaemonSet with `OnDelete` never replaces it, so wave deletes the pods its gate held
    /// (`docs/webhook.md`, "What it does").
    pub replaces_held_pods: bool,
    /// Whether changing the template starts a rollout that wave can follow in the kind's status (the
    /// `apps/v1` kinds). A CronJob's has none: its next Job simply runs with the new template. Argo
    /// Rollouts and custom resources roll in their own ways, which wave does not read: pacing and config
    /// history are for the kinds that do.
    pub rolls_out: bool,
    /// Position in listings (lower first).
    pub rank: u8,
}

static DEPLOYMENT: KindInfo = KindInfo {
    group: "apps",
    version: "v1",
    api_version: "apps/v1",
    kind: "Deployment",
    plural: "deployments",
    short_names: &["deploy"],
    template: "/spec/template",
    replaces_held_pods: true,
    rolls_out: true,
    rank: 0,
};

static STATEFUL_SET: KindInfo = KindInfo {
    group: "apps",
    version: "v1",
    api_version: "apps/v1",
    kind: "StatefulSet",
    plural: "statefulsets",
    short_names: &["sts"],
    template: "/spec/template",
    replaces_held_pods: false,
    rolls_out: true,
    rank: 1,
};

static DAEMON_SET: KindInfo = KindInfo {
    group: "apps",
    version: "v1",
    api_version: "apps/v1",
    kind: "DaemonSet",
    plural: "daemonsets",
    short_names: &["ds"],
    template: "/spec/template",
    replaces_held_pods: false,
    rolls_out: true,
    rank: 2,
};

static CRON_JOB: KindInfo = KindInfo {
    group: "batch",
    version: "v1",
    api_version: "batch/v1",
    kind: "CronJob",
    plural: "cronjobs",
    short_names: &["cj"],
    template: "/spec/jobTemplate/spec/template",
    // The webhook does not gate CronJobs; a Job's pods are replaced by the Job controller anyway.
    replaces_held_pods: true,
    rolls_out: false,
    rank: 3,
};

static ROLLOUT: KindInfo = KindInfo {
    group: "argoproj.io",
    version: "v1alpha1",
    api_version: "argoproj.io/v1alpha1",
    kind: "Rollout",
    plural: "rollouts",
    short_names: &["ro"],
    template: "/spec/template",
    // Argo Rollouts' own ReplicaSets replace pods, as a Deployment's do.
    replaces_held_pods: true,
    rolls_out: false,
    rank: 4,
};

static JOB: KindInfo = KindInfo {
    group: "batch",
    version: "v1",
    api_version: "batch/v1",
    kind: "Job",
    plural: "jobs",
    short_names: &[],
    template: "/spec/template",
    replaces_held_pods: true,
    rolls_out: false,
    rank: 5,
};

/// One workload kind: a cheap, copyable handle on its [`KindInfo`]. Two handles are equal when they name
/// the same `apiVersion` and kind.
#[derive(Clone, Copy)]
pub struct WorkloadKind(&'static KindInfo);

impl KindInfo {
    /// The first short name (`deploy`, `sts`, `ds`, `cj`): names the kind in snapshot names and labels.
    pub fn short(&self) -> &'static str {
        self.short_names.first().copied().unwrap_or(self.plural)
    }
}

impl WorkloadKind {
    /// `apps/v1` Deployment.
    pub const DEPLOYMENT: WorkloadKind = WorkloadKind(&DEPLOYMENT);
    /// `apps/v1` StatefulSet.
    pub const STATEFUL_SET: WorkloadKind = WorkloadKind(&STATEFUL_SET);
    /// `apps/v1` DaemonSet.
    pub const DAEMON_SET: WorkloadKind = WorkloadKind(&DAEMON_SET);
    /// `batch/v1` CronJob: the hash goes on the template of the Jobs it creates. Watched only with
    /// `--cronjobs`.
    pub const CRON_JOB: WorkloadKind = WorkloadKind(&CRON_JOB);
    /// Argo Rollouts' `argoproj.io/v1alpha1` Rollout: the hash goes on `spec.template`. Watched only
    /// with `--argo-rollouts`.
    pub const ROLLOUT: WorkloadKind = WorkloadKind(&ROLLOUT);
    /// `batch/v1` Job: its pod template cannot change, so only a reload through Stakater Reloader's
    /// annotations acts on it, by creating it again (`--jobs`, with `--reloader-compat`). Not in
    /// [`WorkloadKind::ALL`]: no command reads or hashes Jobs.
    pub const JOB: WorkloadKind = WorkloadKind(&JOB);
    /// The kinds `wave run` manages by default, in listing order.
    pub const BUILT_IN: [WorkloadKind; 3] = [Self::DEPLOYMENT, Self::STATEFUL_SET, Self::DAEMON_SET];
    /// Every kind wave knows by name: the CLI reads and hashes them all.
    pub const ALL: [WorkloadKind; 5] = [
        Self::DEPLOYMENT,
        Self::STATEFUL_SET,
        Self::DAEMON_SET,
        Self::CRON_JOB,
        Self::ROLLOUT,
    ];

    /// A kind known only at run time (`--workload-resource`), named `kind` by the apiserver's discovery.
    /// Its facts are kept for the life of the process: there are a few, made once at startup.
    pub fn custom(resource: &ResourceSpec, kind: &str) -> Self {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let info = KindInfo {
            group: leak(resource.group.clone()),
            version: leak(resource.version.clone()),
            api_version: leak(resource.api_version()),
            kind: leak(kind.to_string()),
            plural: leak(resource.plural.clone()),
            short_names: &[],
            template: leak(resource.template.clone()),
            replaces_held_pods: true,
            rolls_out: false,
            rank: 6,
        };
        WorkloadKind(Box::leak(Box::new(info)))
    }

    /// The facts about this kind.
    pub fn info(self) -> &'static KindInfo {
        self.0
    }

    /// The Kubernetes kind, also used as a metric label.
    pub fn as_str(self) -> &'static str {
        self.0.kind
    }

    /// Finds a kind by a kubectl-style name: the kind, its plural or a short name, any case
    /// (`deployment`, `Deployments`, `deploy`, `sts`, `ds`, `cj`).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.to_ascii_lowercase();
        Self::ALL.into_iter().find(|k| {
            let info = k.info();
            s == info.kind.to_ascii_lowercase() || s == info.plural || info.short_names.contains(&s.as_str())
        })
    }

    /// Finds a kind by the `apiVersion` and `kind` of an object.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.info().api_version == api_version && k.info().kind == kind)
    }

    fn identity(self) -> (&'static str, &'static str) {
        (self.0.api_version, self.0.kind)
    }
}

impl PartialEq for WorkloadKind {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for WorkloadKind {}

impl Hash for WorkloadKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl PartialOrd for WorkloadKind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorkloadKind {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0.rank, self.identity()).cmp(&(other.0.rank, other.identity()))
    }
}

impl fmt::Debug for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.kind)
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.kind)
    }
}

/// A resource with a pod template, named on the command line as `GROUP/VERSION/RESOURCE:POINTER`
/// (`--workload-resource`; `VERSION/RESOURCE:POINTER` for the core group), e.g.
/// `example.com/v1/runners:/spec/template`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSpec {
    /// API group (empty for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Lowercase plural.
    pub plural: String,
    /// JSON pointer to the pod template.
    pub template: String,
}

impl ResourceSpec {
    /// Parses `GROUP/VERSION/RESOURCE:POINTER`; an error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let usage =
            "expected GROUP/VERSION/RESOURCE:JSON-POINTER, e.g. example.com/v1/runners:/spec/template";
        let (gvr, template) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: no JSON pointer to the pod template; {usage}"))?;
        let parts: Vec<&str> = gvr.split('/').collect();
        let (group, version, plural) = match parts.as_slice() {
            [group, version, plural] => (*group, *version, *plural),
            [version, plural] => ("", *version, *plural),
            _ => return Err(format!("{text:?}: {usage}")),
        };
        let name = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        };
        if !name(version) || !name(plural) || !(group.is_empty() || name(group)) {
            return Err(format!(
                "{text:?}: the group, version and resource are lowercase API names; {usage}"
            ));
        }
        let segments_ok = template.strip_prefix('/').is_some_and(|rest| {
            rest.split('/').all(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
        });
        if !segments_ok {
            return Err(format!(
                "{text:?}: {template:?} is not a JSON pointer of plain field names (such as /spec/template)"
            ));
        }
        Ok(Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            template: template.to_string(),
        })
    }

    /// `apiVersion` as written in manifests.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for ResourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.api_version(), self.plural, self.template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_kubectl_style_names() {
        for (s, k) in [
            ("deployment", WorkloadKind::DEPLOYMENT),
            ("deploy", WorkloadKind::DEPLOYMENT),
            ("Deployments", WorkloadKind::DEPLOYMENT),
            ("sts", WorkloadKind::STATEFUL_SET),
            ("statefulset", WorkloadKind::STATEFUL_SET),
            ("ds", WorkloadKind::DAEMON_SET),
            ("daemonsets", WorkloadKind::DAEMON_SET),
            ("cj", WorkloadKind::CRON_JOB),
            ("CronJob", WorkloadKind::CRON_JOB),
        ] {
            assert_eq!(WorkloadKind::parse(s), Some(k), "{s}");
        }
        assert_eq!(WorkloadKind::parse("job"), None);
    }

    #[test]
    fn kinds_are_found_by_api_version_and_kind_only() {
        assert_eq!(
            WorkloadKind::from_type("apps/v1", "StatefulSet"),
            Some(WorkloadKind::STATEFUL_SET)
        );
        assert_eq!(WorkloadKind::from_type("extensions/v1beta1", "Deployment"), None);
        assert_eq!(WorkloadKind::from_type("apps/v1", "ReplicaSet"), None);
    }

    #[test]
    fn kinds_sort_in_listing_order() {
        let mut kinds = vec![
            WorkloadKind::DAEMON_SET,
            WorkloadKind::DEPLOYMENT,
            WorkloadKind::STATEFUL_SET,
        ];
        kinds.sort();
        assert_eq!(kinds, WorkloadKind::BUILT_IN.to_vec());
    }

    #[test]
    fn a_workload_resource_parses_from_group_version_resource_and_pointer() {
        let r = ResourceSpec::parse("example.com/v1/runners:/spec/runner/template").unwrap();
        assert_eq!(r.api_version(), "example.com/v1");
        assert_eq!(
            (r.plural.as_str(), r.template.as_str()),
            ("runners", "/spec/runner/template")
        );
        let core = ResourceSpec::parse("v1/replicationcontrollers:/spec/template").unwrap();
        assert_eq!(core.api_version(), "v1");
        let kind = WorkloadKind::custom(&r, "Runner");
        assert_eq!(kind.info().template, "/spec/runner/template");
        assert_eq!(kind.as_str(), "Runner");
        assert!(!kind.info().rolls_out);
        for (bad, says) in [
            ("example.com/v1/runners", "no JSON pointer"),
            ("runners:/spec/template", "expected GROUP/VERSION/RESOURCE"),
            ("Example.com/v1/Runners:/spec/template", "lowercase"),
            ("example.com/v1/runners:spec/template", "not a JSON pointer"),
            ("example.com/v1/runners:/spec//template", "not a JSON pointer"),
        ] {
            let e = ResourceSpec::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
