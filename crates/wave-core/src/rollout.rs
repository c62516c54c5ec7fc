//! Whether a workload's rollout is complete, still progressing, or failed, read from its own status.
//!
//! The watch keeps a few status fields of each workload ([`Progress`]); [`state`] reads them the way
//! `kubectl rollout status` does, so what wave counts as "in progress" is what an operator sees
//! (`docs/behaviour.md`, "Pacing rollouts"). A Deployment fails by its own `progressDeadlineSeconds`
//! (its `Progressing` condition turns False with `ProgressDeadlineExceeded`); StatefulSets and
//! DaemonSets have no such condition, so they fail when they have not completed within the rollout
//! deadline counted from when wave started the rollout.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::kind::WorkloadKind;

/// The status fields that say how far a rollout got (absent fields read as `None` or zero).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `spec.replicas` (Deployment, StatefulSet).
    pub spec_replicas: Option<i64>,
    /// Whether `spec.strategy.type` / `spec.updateStrategy.type` is a rolling update (the default);
    /// `Recreate` counts as rolling too, `OnDelete` does not.
    pub rolls_by_itself: bool,
    /// `status.replicas`.
    pub replicas: i64,
    /// `status.updatedReplicas`.
    pub updated: i64,
    /// `status.readyReplicas`.
    pub ready: i64,
    /// `status.availableReplicas`.
    pub available: i64,
    /// Deployment: the `Progressing` condition is False with reason `ProgressDeadlineExceeded`.
    pub deadline_exceeded: bool,
    /// StatefulSet: `spec.updateStrategy.rollingUpdate.partition`.
    pub partition: i64,
    /// StatefulSet: `status.currentRevision` and `status.updateRevision` differ.
    pub revisions_differ: bool,
    /// DaemonSet: `status.desiredNumberScheduled`.
    pub desired_scheduled: i64,
    /// DaemonSet: `status.updatedNumberScheduled`.
    pub updated_scheduled: i64,
    /// DaemonSet: `status.numberAvailable`.
    pub number_available: i64,
    /// Deployment: `spec.paused`.
    pub paused: bool,
}

impl Progress {
    /// The progress fields of an object of `kind` (`body` is the object, or the object without its
    /// metadata).
    pub fn read(kind: WorkloadKind, body: &Value) -> Self {
        let int = |pointer: &str| body.pointer(pointer).and_then(Value::as_i64);
        let str = |pointer: &str| body.pointer(pointer).and_then(Value::as_str);
        let strategy = if kind == WorkloadKind::DEPLOYMENT {
            str("/spec/strategy/type")
        } else {
            str("/spec/updateStrategy/type")
        };
        let deadline_exceeded = body
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Progressing"
                    && c["status"] == "False"
                    && c["reason"] == "ProgressDeadlineExceeded"
            });
        Self {
            observed_generation: int("/status/observedGeneration"),
            spec_replicas: int("/spec/replicas"),
            rolls_by_itself: strategy != Some("OnDelete"),
            replicas: int("/status/replicas").unwrap_or(0),
            updated: int("/status/updatedReplicas").unwrap_or(0),
            ready: int("/status/readyReplicas").unwrap_or(0),
            available: int("/status/availableReplicas").unwrap_or(0),
            deadline_exceeded,
            partition: int("/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0),
            revisions_differ: str("/status/currentRevision") != str("/status/updateRevision"),
            desired_scheduled: int("/status/desiredNumberScheduled").unwrap_or(0),
            updated_scheduled: int("/status/updatedNumberScheduled").unwrap_or(0),
            number_available: int("/status/numberAvailable").unwrap_or(0),
            paused: body.pointer("/spec/paused").and_then(Value::as_bool) == Some(true),
        }
    }
}

/// Where a rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Every replica runs the current template and is available (or the kind cannot tell: `OnDelete`).
    Complete,
    /// Still rolling.
    Progressing,
    /// A paused Deployment: it does not roll until someone resumes it, and Kubernetes does not count
    /// its progress deadline meanwhile. It holds no pacing slot, or a pause would stop the line for good.
    Paused,
    /// Failed: why, in words.
    Failed(String),
}

/// The state of a rollout of a workload of `kind` at `generation`, started at `started` (when known),
/// with `deadline` for kinds that have no deadline of their own.
pub fn state(
    kind: WorkloadKind,
    generation: i64,
    p: &Progress,
    started: Option<Timestamp>,
    deadline: Duration,
    now: Timestamp,
) -> State {
    if !kind.info().rolls_out {
        return State::Complete;
    }
    let progressing = if p.observed_generation.is_none_or(|g| g < generation) {
        true
    } else if kind == WorkloadKind::DEPLOYMENT {
        if p.deadline_exceeded {
            return State::Failed("ProgressDeadlineExceeded: its progressDeadlineSeconds passed".into());
        }
        p.spec_replicas.is_some_and(|r| p.updated < r) || p.replicas > p.updated || p.available < p.updated
    } else if !p.rolls_by_itself {
        false
    } else if kind == WorkloadKind::STATEFUL_SET {
        let replicas = p.spec_replicas.unwrap_or(1);
        p.ready < replicas
            || if p.partition > 0 {
                p.updated < replicas - p.partition
            } else {
                p.revisions_differ
            }
    } else {
        p.updated_scheduled < p.desired_scheduled || p.number_available < p.desired_scheduled
    };
    if !progressing {
        return State::Complete;
    }
    if p.paused {
        return State::Paused;
    }
    let overdue = kind != WorkloadKind::DEPLOYMENT
        && started.is_some_and(|at| now.duration_since(at).as_secs_f64() > deadline.as_secs_f64());
    if overdue {
        State::Failed(format!(
            "it did not complete within the rollout deadline of {deadline:?}"
        ))
    } else {
        State::Progressing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-11-23T12:00:00Z";

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn deployment(status: Value) -> State {
        let p = Progress::read(
            WorkloadKind::DEPLOYMENT,
            &json!({"spec": {"replicas": 2}, "status": status}),
        );
        state(
            WorkloadKind::DEPLOYMENT,
            3,
            &p,
            None,
            Duration::from_secs(60),
            at(NOW),
        )
    }

    #[test]
    fn a_deployment_is_complete_only_when_every_replica_is_updated_and_available() {
        let done = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2});
        assert_eq!(deployment(done.clone()), State::Complete);
        let mut unobserved = done.clone();
        unobserved["observedGeneration"] = json!(2);
        assert_eq!(
            deployment(unobserved),
            State::Progressing,
            "the new spec is not yet observed"
        );
        let mut surge = done.clone();
        surge["replicas"] = json!(3);
        assert_eq!(
            deployment(surge),
            State::Progressing,
            "an old replica is still terminating"
        );
        let mut unavailable = done;
        unavailable["availableReplicas"] = json!(1);
        assert_eq!(deployment(unavailable), State::Progressing);
    }

    #[test]
    fn a_cron_job_has_no_rollout_to_wait_for() {
        let cj = WorkloadKind::CRON_JOB;
        let p = Progress::read(cj, &json!({"status": {}}));
        assert_eq!(
            state(cj, 7, &p, None, Duration::from_secs(1), at(NOW)),
            State::Complete
        );
    }

    #[test]
    fn a_deployment_fails_when_its_progress_deadline_is_exceeded() {
        let failed = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]});
        assert!(matches!(deployment(failed), State::Failed(why) if why.contains("ProgressDeadlineExceeded")));
    }

    #[test]
    fn a_statefulset_rolls_until_its_revisions_agree_and_fails_after_the_deadline() {
        let body = |current: &str| {
            json!({"spec": {"replicas": 1}, "status": {"observedGeneration": 1, "readyReplicas": 1,
                "currentRevision": current, "updateRevision": "b"}})
        };
        let sts = WorkloadKind::STATEFUL_SET;
        let deadline = Duration::from_secs(600);
        let rolling = Progress::read(sts, &body("a"));
        let started = at("2026-11-23T11:55:00Z");
        assert_eq!(
            state(sts, 1, &rolling, Some(started), deadline, at(NOW)),
            State::Progressing
        );
        let late = at("2026-11-23T11:49:00Z");
        assert!(matches!(
            state(sts, 1, &rolling, Some(late), deadline, at(NOW)),
            State::Failed(_)
        ));
        assert_eq!(
            state(sts, 1, &rolling, None, deadline, at(NOW)),
            State::Progressing,
            "no start time: no deadline"
        );
        let done = Progress::read(sts, &body("b"));
        assert_eq!(
            state(sts, 1, &done, Some(late), deadline, at(NOW)),
            State::Complete
        );
    }

    #[test]
    fn a_daemonset_rolls_until_every_scheduled_pod_is_updated_and_available_and_on_delete_never_rolls() {
        let ds = WorkloadKind::DAEMON_SET;
        let body = json!({"status": {"observedGeneration": 1, "desiredNumberScheduled": 3,
            "updatedNumberScheduled": 3, "numberAvailable": 2}});
        let d = Duration::from_secs(600);
        assert_eq!(
            state(ds, 1, &Progress::read(ds, &body), None, d, at(NOW)),
            State::Progressing
        );
        let mut on_delete = body.clone();
        on_delete["spec"] = json!({"updateStrategy": {"type": "OnDelete"}});
        assert_eq!(
            state(ds, 1, &Progress::read(ds, &on_delete), None, d, at(NOW)),
            State::Complete
        );
        let mut done = body;
        done["status"]["numberAvailable"] = json!(3);
        assert_eq!(
            state(ds, 1, &Progress::read(ds, &done), None, d, at(NOW)),
            State::Complete
        );
    }
}
