//! In-place config restarts: new config in every container of a workload's existing pods, with no new
//! ReplicaSet or revision, no reschedule and no new pod (KEP-5532, `RestartAllContainersOnContainerExits`,
//! beta and on by default in Kubernetes 1.36; `docs/behaviour.md`, "Restarting in place").
//!
//! ```text
//! opted in (`wave.pusher.com/restart: in-place`, or `--restart-strategy=in-place`)
//!   template without the agent ─► an ordinary rollout that also adds the agent container and its
//!                                 downward-API volume (`agent_container`, `agent_volume`)
//!   template with the agent, config changed ─► decision Write with `in_place`: the record
//!       `wave.pusher.com/in-place` {hash, at, delivers} on the workload's metadata, nothing on the
//!       template (so nothing rolls); `Workload::current_hash` reads the record from then on
//!   each pass while the record is restarting ─► step(record, pods) ─►
//!       Mark(pods)   write `wave.pusher.com/restart-request: HASH FROM AT` on them (within the budget)
//!                    ─► the kubelet refreshes the pod's annotations file ─► the agent sees the request
//!                    change and exits 42 ─► the kubelet restarts every container of the pod in place
//!       Wait         restarts in flight, or no room in the budget
//!       Done         every pod runs the hash and is Ready
//!       Failed       a restarted pod not Ready within the deadline: the restart halts for that version
//!       Fallback     a pod without the agent or its rule, or a node that restarted only the agent:
//!                    an ordinary rollout instead, said once in an Event
//! ```
//!
//! Which config a pod runs ([`pod_config`]) is read from the pod alone, with no clock of wave's: a
//! restart request whose agent container has been replaced since (its container ID differs from the
//! one the request names) ran; a pod created after the record (by the apiserver's clock against the
//! record's time, with a margin for the two clocks) started with it; otherwise the config hash of the
//! template it was created from.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, ContainerRestartRuleOnExitCodes, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, ObjectFieldSelector, Pod, ResourceRequirements, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::kind::WorkloadKind;
use crate::names;
use crate::template::PodTemplate;
use crate::workload::Workload;

/// The agent container's name in the pod template.
pub const AGENT_CONTAINER: &str = "wave-agent";
/// The downward-API volume with the pod's annotations, mounted into the agent only.
pub const AGENT_VOLUME: &str = "wave-agent-pod";
/// Where the agent reads the pod's annotations.
pub const AGENT_MOUNT: &str = "/etc/wave-agent";
/// The file in [`AGENT_MOUNT`] with the pod's annotations, one `key="value"` a line.
pub const AGENT_FILE: &str = "annotations";
/// The exit code on which the kubelet restarts every container of the pod (the agent's restart rule).
pub const RESTART_EXIT_CODE: i32 = 42;
/// The restart rule's action (KEP-5532).
const RESTART_ALL: &str = "RestartAllContainers";
/// A pod counts as created after a record only when the apiserver stamped it at least this long after
/// the record's time (wave's clock): the two clocks may differ a little, and a pod wrongly taken for
/// younger would keep old config, while one wrongly taken for older only restarts once more.
pub const CLOCK_MARGIN: SignedDuration = SignedDuration::from_secs(2);

/// How a workload's pods get new config.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// A new config hash on the pod template: the workload's own controller replaces every pod.
    #[default]
    Rollout,
    /// The containers of the existing pods restart in place.
    InPlace,
}

impl Strategy {
    /// The annotation's (and flag's) word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Rollout => "rollout",
            Strategy::InPlace => "in-place",
        }
    }

    /// Reads a word; the error names what is accepted.
    pub fn parse(word: &str) -> Result<Self, String> {
        match word {
            "rollout" => Ok(Strategy::Rollout),
            "in-place" => Ok(Strategy::InPlace),
            other => Err(format!(
                "{other:?} is not a restart strategy: use \"rollout\" or \"in-place\""
            )),
        }
    }

    /// The strategy of `workload`: its `wave.pusher.com/restart` annotation, else `default`. An
    /// unreadable annotation counts as `default`, with the reason to log.
    pub fn of(workload: &Workload, default: Strategy) -> (Strategy, Option<String>) {
        let kinds = [
            WorkloadKind::DEPLOYMENT,
            WorkloadKind::STATEFUL_SET,
            WorkloadKind::DAEMON_SET,
        ];
        if !kinds.contains(&workload.id.kind) {
            return (Strategy::Rollout, None);
        }
        match workload.annotations.get(names::RESTART) {
            None => (default, None),
            Some(word) => match Strategy::parse(word.trim()) {
                Ok(s) => (s, None),
                Err(why) => (
                    default,
                    Some(format!("{}: {why}; using {}", names::RESTART, default.as_str())),
                ),
            },
        }
    }
}

/// An in-place restart of a workload: `wave.pusher.com/in-place` on its metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The config hash the pods restart into: the workload's current hash from then on.
    pub hash: String,
    /// When wave wrote it (RFC 3339, wave's clock).
    pub at: String,
    /// When the first in-place record since the template's hash was last written was: pods created
    /// from then on started with whatever config was current, not the template's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The config versions this restart delivers (object → digest, as the rollout marker): a failure
    /// halts these.
    #[serde(default)]
    pub delivers: BTreeMap<String, String>,
    /// Every pod ran it and was Ready.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
    /// Why it halted, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl Record {
    /// A restart into `hash`, delivering `delivers`, written at `now`, after `previous` (the record it
    /// replaces, if any).
    pub fn new(
        hash: &str,
        now: Timestamp,
        delivers: BTreeMap<String, String>,
        previous: Option<&Record>,
    ) -> Self {
        Self {
            hash: hash.to_string(),
            at: now.to_string(),
            since: previous.map(|p| p.since.clone().unwrap_or_else(|| p.at.clone())),
            delivers,
            done: false,
            failed: None,
        }
    }

    /// When pods stopped starting with the template's hash.
    fn template_stale_since(&self) -> Option<Timestamp> {
        self.since.as_deref().unwrap_or(&self.at).parse().ok()
    }

    /// The record on `workload`, if it has a readable one (an unreadable one counts as none: the
    /// template's hash is then the current one, and the next change rolls or restarts from there).
    pub fn read(workload: &Workload) -> Option<Self> {
        Self::parse(workload.annotations.get(names::IN_PLACE)?)
    }

    /// Reads an annotation value.
    pub fn parse(value: &str) -> Option<Self> {
        serde_json::from_str(value).ok()
    }

    /// The annotation value.
    pub fn render(&self) -> String {
        serde_json::to_string(self).expect("an in-place record always serialises")
    }

    /// Restarts are still to be made or finished.
    pub fn is_restarting(&self) -> bool {
        !self.done && self.failed.is_none()
    }

    /// When it was written.
    pub fn started(&self) -> Option<Timestamp> {
        self.at.parse().ok()
    }

    /// Still restarting at `now`, and written at most `deadline` before it (and not later than it,
    /// beyond the clocks' margin): a restart that stalls, or a record forged with a time to come,
    /// counts for no longer than a rollout would.
    pub fn is_live(&self, deadline: Duration, now: Timestamp) -> bool {
        let deadline = SignedDuration::try_from(deadline).unwrap_or(SignedDuration::MAX);
        self.is_restarting()
            && self.started().is_some_and(|at| {
                let age = now.duration_since(at);
                age >= -CLOCK_MARGIN && age <= deadline
            })
    }
}

/// The hash of an in-place record, borrowed from the annotation (`Workload::current_hash` asks on every
/// event of such a workload); `None` when the record is unreadable, exactly as [`Record::read`].
pub fn record_hash(value: &str) -> Option<&str> {
    #[derive(Deserialize)]
    struct Borrowed<'a> {
        hash: &'a str,
        #[allow(dead_code)]
        at: &'a str,
    }
    serde_json::from_str::<Borrowed<'_>>(value).ok().map(|r| r.hash)
}

/// The agent container wave adds to an in-place workload's template: it runs `wave agent` from
/// `image`, reads the pod's annotations from the downward-API volume (no API access, no RBAC), and
/// exits [`RESTART_EXIT_CODE`] when its pod's restart request changes; its restart rule then restarts
/// every container of the pod. Any other exit restarts only the agent.
pub fn agent_container(image: &str) -> Container {
    let quantity = |q: &str| Quantity(q.to_string());
    Container {
        name: AGENT_CONTAINER.to_string(),
        image: Some(image.to_string()),
        args: Some(vec![
            "agent".to_string(),
            format!("--annotations={AGENT_MOUNT}/{AGENT_FILE}"),
        ]),
        restart_policy: Some("Always".to_string()),
        restart_policy_rules: Some(vec![ContainerRestartRule {
            action: RESTART_ALL.to_string(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: "In".to_string(),
                values: Some(vec![RESTART_EXIT_CODE]),
            }),
        }]),
        volume_mounts: Some(vec![VolumeMount {
            name: AGENT_VOLUME.to_string(),
            mount_path: AGENT_MOUNT.to_string(),
            read_only: Some(true),
            ..Default::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), quantity("5m")),
                ("memory".to_string(), quantity("8Mi")),
            ])),
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), quantity("50m")),
                ("memory".to_string(), quantity("32Mi")),
            ])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Default::default()
            }),
            // PodSecurity's `restricted` level asks for it.
            seccomp_profile: Some(k8s_openapi::api::core::v1::SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The agent's volume: the pod's own annotations, which the kubelet keeps up to date.
pub fn agent_volume() -> Volume {
    Volume {
        name: AGENT_VOLUME.to_string(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: AGENT_FILE.to_string(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.annotations".to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The template part of a strategic merge patch that adds the agent and its volume (merged by name:
/// the workload's own containers and volumes stay as they are).
pub fn agent_patch(image: &str) -> serde_json::Value {
    serde_json::json!({
        "spec": {
            "containers": [agent_container(image)],
            "volumes": [agent_volume()],
        }
    })
}

/// Whether `container` is an agent that restarts its pod: wave's name, the restart rule on
/// [`RESTART_EXIT_CODE`], and the annotations volume mounted.
fn is_agent(container: &Container) -> bool {
    container.name == AGENT_CONTAINER
        && container.restart_policy_rules.iter().flatten().any(|rule| {
            rule.action == RESTART_ALL
                && rule.exit_codes.as_ref().is_some_and(|c| {
                    c.operator == "In" && c.values.iter().flatten().any(|v| *v == RESTART_EXIT_CODE)
                })
        })
        && container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == AGENT_VOLUME)
}

/// Whether `template` has the agent, with its rule and volume.
pub fn has_agent(template: &PodTemplate) -> bool {
    if !template.mentions(AGENT_CONTAINER) {
        return false;
    }
    let spec = template.typed().spec.unwrap_or_default();
    spec.containers.iter().any(is_agent)
        && spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name == AGENT_VOLUME && v.downward_api.is_some())
}

/// The restart request in the pod's annotations file as the downward API writes it (one `key="value"`
/// a line, the value quoted as Go quotes it), as written: the agent only compares it with what it read
/// at its start.
pub fn requested_in(annotations_file: &str) -> Option<&str> {
    annotations_file
        .lines()
        .find_map(|line| line.strip_prefix(names::RESTART_REQUEST)?.strip_prefix('='))
}

/// A restart request on a pod: `wave.pusher.com/restart-request: HASH FROM AT`, where FROM is the
/// agent's container ID when wave asked (the restart happened once it differs) and AT when (RFC 3339).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The hash the pod restarts into.
    pub hash: String,
    /// The agent's container ID when wave asked.
    pub from: String,
    /// When wave asked.
    pub at: Timestamp,
}

impl Request {
    /// Reads an annotation value.
    pub fn parse(value: &str) -> Option<Self> {
        let mut words = value.split_whitespace();
        let (hash, from, at) = (words.next()?, words.next()?, words.next()?.parse().ok()?);
        words.next().is_none().then(|| Self {
            hash: hash.to_string(),
            from: from.to_string(),
            at,
        })
    }

    /// The annotation value.
    pub fn render(&self) -> String {
        format!("{} {} {}", self.hash, self.from, self.at)
    }
}

/// What wave reads of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    /// Its name.
    pub name: String,
    /// When the apiserver created it.
    pub created: Option<Timestamp>,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// It is being deleted, or has ended (phase `Succeeded` or `Failed`, an evicted pod): its
    /// controller replaces it, and it counts for nothing.
    pub deleting: bool,
    /// The config hash of the template it was created from.
    pub born_with: Option<String>,
    /// wave's restart request on it.
    pub request: Option<Request>,
    /// Its agent container, if its spec has one with the restart rule.
    pub agent: Option<Agent>,
}

/// A pod's agent container as its status shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Agent {
    /// The running (or last) container's ID; none before it first started.
    pub container_id: Option<String>,
    /// It runs now, so it has read the pod's annotations: a request made from now on restarts the pod.
    /// (A request made before it started would be what it reads first, and restart nothing.)
    pub running: bool,
    /// It last ended with [`RESTART_EXIT_CODE`] and was restarted alone: the node does not restart
    /// every container (its kubelet lacks the feature), since there its end reads `RestartingAllContainers`.
    pub restarted_alone: bool,
}

impl PodView {
    /// Reads `pod`.
    pub fn of(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key));
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let has_agent = pod
            .spec
            .as_ref()
            .is_some_and(|s| s.containers.iter().any(is_agent));
        let agent = has_agent.then(|| {
            let st = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|all| all.iter().find(|c| c.name == AGENT_CONTAINER));
            Agent {
                container_id: st.and_then(|c| c.container_id.clone()),
                running: st
                    .and_then(|c| c.state.as_ref())
                    .is_some_and(|s| s.running.is_some()),
                restarted_alone: st
                    .and_then(|c| c.last_state.as_ref())
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == RESTART_EXIT_CODE),
            }
        });
        PodView {
            name: meta.name.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            ready,
            deleting: meta.deletion_timestamp.is_some()
                || status
                    .and_then(|s| s.phase.as_deref())
                    .is_some_and(|p| p == "Succeeded" || p == "Failed"),
            born_with: annotation(names::CONFIG_HASH).cloned(),
            request: annotation(names::RESTART_REQUEST).and_then(|v| Request::parse(v)),
            agent,
        }
    }

    /// Why wave cannot restart it in place now, if it cannot (`step` falls back on the first two;
    /// `wave explain` tells all three).
    pub fn not_restartable(&self) -> Option<NotRestartable> {
        match &self.agent {
            None => Some(NotRestartable::NoAgent),
            Some(a) if a.restarted_alone => Some(NotRestartable::NodeWithoutFeature),
            Some(a) if !a.running => Some(NotRestartable::AgentNotStarted),
            Some(_) => None,
        }
    }

    /// wave asked it to restart and it has not yet.
    fn pending(&self) -> Option<&Request> {
        let request = self.request.as_ref()?;
        let agent = self.agent.as_ref()?;
        (agent.container_id.as_deref().unwrap_or_default() == request.from).then_some(request)
    }

    fn born_after(&self, record: &Record) -> bool {
        match (self.created, record.started()) {
            (Some(created), Some(at)) => at.checked_add(CLOCK_MARGIN).is_ok_and(|after| created >= after),
            _ => false,
        }
    }

    /// Created clearly before pods stopped starting with the template's hash: its template's hash is
    /// the config it started with.
    fn born_before_stale(&self, record: &Record) -> bool {
        match (self.created, record.template_stale_since()) {
            (Some(created), Some(since)) => since
                .checked_sub(CLOCK_MARGIN)
                .is_ok_and(|before| created < before),
            _ => false,
        }
    }
}

/// Why a pod cannot restart in place now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRestartable {
    /// Its spec has no agent with the restart rule: the restart falls back to a rollout.
    NoAgent,
    /// Its node restarted only the agent: the restart falls back to a rollout.
    NodeWithoutFeature,
    /// Its agent has not read the pod's annotations yet: it waits.
    AgentNotStarted,
}

impl NotRestartable {
    /// In words, after "pod NAME".
    pub fn describe(self) -> String {
        match self {
            NotRestartable::NoAgent => format!(
                "has no {AGENT_CONTAINER} container with the restart rule (created before the agent was added, or the apiserver dropped the rule: restarting in place needs Kubernetes 1.35 or later with RestartAllContainersOnContainerExits)"
            ),
            NotRestartable::NodeWithoutFeature => format!(
                "was on a node that restarted only the {AGENT_CONTAINER} container (its kubelet does not have RestartAllContainersOnContainerExits)"
            ),
            NotRestartable::AgentNotStarted => "has an agent that has not started yet".to_string(),
        }
    }
}

/// Which config a pod runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodConfig {
    /// This hash.
    Runs(String),
    /// wave asked it to restart into `to` at `since`, and it has not yet.
    Restarting {
        /// The hash.
        to: String,
        /// When wave asked.
        since: Timestamp,
    },
    /// Not known: created from a template without a hash, and never restarted by wave.
    Unknown,
}

/// Which config `pod` runs, given its workload's in-place `record` (see the module docs).
pub fn pod_config(pod: &PodView, record: Option<&Record>) -> PodConfig {
    if let Some(r) = pod.pending() {
        return PodConfig::Restarting {
            to: r.hash.clone(),
            since: r.at,
        };
    }
    if let Some(record) = record.filter(|r| pod.born_after(r)) {
        return PodConfig::Runs(record.hash.clone());
    }
    if let Some(r) = &pod.request {
        return PodConfig::Runs(r.hash.clone());
    }
    // Created while records were restarting pods, it started with the config of that moment, which
    // no hash names: restarting it once more is safe, trusting its template's hash is not.
    if record.is_some_and(|r| !pod.born_before_stale(r)) {
        return PodConfig::Unknown;
    }
    pod.born_with.clone().map_or(PodConfig::Unknown, PodConfig::Runs)
}

/// What to do next for one in-place restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every pod runs the hash and is Ready.
    Done,
    /// Ask these pods (by name) to restart now.
    Mark(Vec<String>),
    /// Restarts are in flight, or there is no room to start one.
    Wait,
    /// This pod did not become Ready in time after its restart: halt the restart.
    Failed {
        /// The pod.
        pod: String,
        /// Why, in words.
        why: String,
    },
    /// Restarting in place cannot work here: roll out instead, for this reason.
    Fallback(String),
}

/// The next step of the restart into `record` of a workload whose pods are `pods`, restarting at most
/// `max_unavailable` at once (counting pods not Ready for any reason), each given `deadline` to be
/// Ready again.
pub fn step(
    record: &Record,
    pods: &[PodView],
    max_unavailable: usize,
    deadline: Duration,
    now: Timestamp,
) -> Step {
    let pods: Vec<&PodView> = pods.iter().filter(|p| !p.deleting).collect();
    for cause in [NotRestartable::NoAgent, NotRestartable::NodeWithoutFeature] {
        if let Some(p) = pods.iter().find(|p| p.not_restartable() == Some(cause)) {
            return Step::Fallback(format!("pod {} {}", p.name, cause.describe()));
        }
    }
    let overdue = |since: Timestamp| {
        let waited = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        waited > deadline
    };
    let failed = |p: &PodView, hash: &str, what: &str| Step::Failed {
        pod: p.name.clone(),
        why: format!(
            "pod {} {what} within {}s of wave's request to restart it in place into config hash {hash}",
            p.name,
            deadline.as_secs(),
        ),
    };
    // A pod unavailable with no request of wave's (Pending, or not Ready on its own) holds the restart
    // back; past the deadline, the restart halts rather than wait for good. The deadline counts from
    // the record, or from the pod's creation when that came later: a pod a scale-up, an eviction or a
    // resume made late in the restart gets the whole deadline to become Ready, as a new pod of a
    // rollout does.
    let stuck_overdue = |p: &PodView| record.started().max(p.created).is_some_and(overdue);
    let stuck = |p: &PodView| Step::Failed {
        pod: p.name.clone(),
        why: format!(
            "pod {} was not Ready within {}s of the in-place restart into config hash {}",
            p.name,
            deadline.as_secs(),
            record.hash
        ),
    };
    let mut unavailable = 0;
    // Pods that are not Ready anyway restart at no cost to availability; Ready ones within the budget.
    let (mut now_free, mut due) = (Vec::new(), Vec::new());
    for p in &pods {
        match pod_config(p, Some(record)) {
            PodConfig::Restarting { to, since } => {
                if overdue(since) {
                    return failed(p, &to, "did not restart");
                }
                unavailable += 1;
            }
            PodConfig::Runs(h) if h == record.hash => {
                if !p.ready {
                    match p.request.as_ref().filter(|r| r.hash == record.hash) {
                        Some(r) if overdue(r.at) => return failed(p, &r.hash, "was not Ready again"),
                        None if stuck_overdue(p) => return stuck(p),
                        _ => {}
                    }
                    unavailable += 1;
                }
            }
            // Its agent has not read the annotations yet: a request now would be its starting point.
            _ if p.not_restartable() == Some(NotRestartable::AgentNotStarted) => {
                if stuck_overdue(p) {
                    return stuck(p);
                }
                unavailable += 1;
            }
            _ if !p.ready => now_free.push(p.name.clone()),
            _ => due.push(p.name.clone()),
        }
    }
    if now_free.is_empty() && due.is_empty() && unavailable == 0 {
        return Step::Done;
    }
    due.sort();
    due.truncate(max_unavailable.saturating_sub(unavailable + now_free.len()));
    now_free.sort();
    now_free.extend(due);
    if now_free.is_empty() {
        Step::Wait
    } else {
        Step::Mark(now_free)
    }
}

/// Why the workload's own update strategy (`body` is the workload object) rules out restarting its pods
/// in place, if it does: an `OnDelete` StatefulSet or DaemonSet gets new config only in the pods its
/// user deletes, and a StatefulSet's `partition` keeps the pods below it as they are. Such a workload
/// rolls out instead, and Kubernetes applies its strategy to the rollout.
pub fn ruled_out_by_update_strategy(kind: WorkloadKind, body: &serde_json::Value) -> Option<String> {
    if kind == WorkloadKind::DEPLOYMENT {
        return None;
    }
    if body.pointer("/spec/updateStrategy/type").and_then(|t| t.as_str()) == Some("OnDelete") {
        return Some("its update strategy is OnDelete: its pods get new config when deleted".into());
    }
    body.pointer("/spec/updateStrategy/rollingUpdate/partition")
        .and_then(serde_json::Value::as_u64)
        .filter(|p| *p > 0)
        .map(|p| format!("its rolling update has partition {p}: the pods below it keep their config"))
}

/// How many of `replicas` pods may be unavailable at once, as the workload's rolling update allows
/// (`body` is the workload object): a Deployment's `maxUnavailable` (default 25%, rounded down), a
/// StatefulSet's or DaemonSet's (default 1); at least one, since a restart makes its pod unavailable.
pub fn max_unavailable(kind: WorkloadKind, body: &serde_json::Value, replicas: usize) -> usize {
    let (pointer, default) = if kind == WorkloadKind::DEPLOYMENT {
        if body.pointer("/spec/strategy/type").and_then(|t| t.as_str()) == Some("Recreate") {
            return replicas.max(1);
        }
        ("/spec/strategy/rollingUpdate/maxUnavailable", "25%")
    } else {
        ("/spec/updateStrategy/rollingUpdate/maxUnavailable", "1")
    };
    let value = body
        .pointer(pointer)
        .cloned()
        .unwrap_or_else(|| serde_json::json!(default));
    let n = match &value {
        serde_json::Value::Number(n) => n.as_u64().unwrap_or(1) as usize,
        serde_json::Value::String(s) => match s.strip_suffix('%').map(str::parse::<usize>) {
            Some(Ok(percent)) => replicas * percent.min(100) / 100,
            _ => s.parse().unwrap_or(1),
        },
        _ => 1,
    };
    n.max(1)
}

#[cfg(test)]
#[path = "inplace_tests.rs"]
mod tests;
