//! Argo Rollouts: a Deployment that an opted-in Rollout takes its pod template from
//! (`spec.workloadRef`) is acted on in the Rollout's place, with the Rollout's `wave.pusher.com/`
//! annotations (`docs/behaviour.md`, "Argo Rollouts"). The tracker keeps which Rollout adopts which
//! Deployment, and re-indexes and wakes a Deployment when its adopter comes, changes or goes.

use std::borrow::Cow;

use super::{Effects, Tracker};
use crate::workload::{Workload, WorkloadKind, WorkloadRef};

impl Tracker {
    /// Rollout `rollout` took its template from `before` and now from `after` (either may be none, or
    /// both the same Deployment with other annotations): those Deployments are indexed and checked again.
    pub(super) fn adopt(
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
}

/// The Deployment an opted-in Argo Rollout takes its pod template from.
pub(super) fn adoption(w: &Workload) -> Option<WorkloadRef> {
    let name = w.template_from.as_ref()?;
    crate::refs::is_opted_in(&w.annotations)
        .then(|| WorkloadRef::new(WorkloadKind::DEPLOYMENT, w.id.namespace.clone(), name.clone()))
}
#[cfg(test)]
#[path = "adoption_tests.rs"]
mod tests;
