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
    /// Whether changing the template starts a rollout that the kind's status follows. A CronJob's has
    /// none: its next Job simply runs with the new template.
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
    /// The kinds `wave run` manages by default, in listing order.
    pub const BUILT_IN: [WorkloadKind; 3] = [Self::DEPLOYMENT, Self::STATEFUL_SET, Self::DAEMON_SET];
    /// Every kind wave knows: the CLI reads and hashes them all.
    pub const ALL: [WorkloadKind; 4] = [
        Self::DEPLOYMENT,
        Self::STATEFUL_SET,
        Self::DAEMON_SET,
        Self::CRON_JOB,
    ];

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
}
