//! What the reconcilers and the webhook remember between reconciles, each behind its own small type.
//!
//! - [`MissingReports`]: the last missing-config message per workload, so that each distinct missing set
//!   is reported once (one `ConfigMissing` or `SchedulingDisabled` Event), and the
//!   `wave_workloads_waiting_for_config` gauge that counts them.
//! - [`PermissionDenials`]: API operations the apiserver refused with 403, until the same operation
//!   succeeds again; `/readyz` reports them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use prometheus_client::metrics::gauge::Gauge;
use wave_core::workload::WorkloadRef;

use super::reconcile::Outcome;
use crate::error::{Operation, ReconcileError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a few map operations that cannot panic half-way, so a poisoned lock
    // still holds a consistent map.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// See the module docs.
pub struct MissingReports {
    reported: Mutex<HashMap<WorkloadRef, String>>,
    gauge: Gauge,
}

impl MissingReports {
    /// No reports; `gauge` counts the workloads with one.
    pub fn new(gauge: Gauge) -> Self {
        Self {
            reported: Mutex::default(),
            gauge,
        }
    }

    /// Records that `workload` waits for the config `message` describes. True when this message was not
    /// the last one reported for it: the caller reports it.
    pub fn report(&self, workload: &WorkloadRef, message: &str) -> bool {
        let mut reported = lock(&self.reported);
        let is_new = reported.get(workload).map(String::as_str) != Some(message);
        if is_new {
            reported.insert(workload.clone(), message.to_string());
            self.gauge.set(reported.len() as i64);
        }
        is_new
    }

    /// Forgets `workload`: its config is complete, it opted out, or it was deleted.
    pub fn forget(&self, workload: &WorkloadRef) {
        let mut reported = lock(&self.reported);
        if reported.remove(workload).is_some() {
            self.gauge.set(reported.len() as i64);
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub struct PermissionDenials {
    denied: Mutex<BTreeMap<Operation, String>>,
}

impl PermissionDenials {
    /// Updates the denials from the result of one reconcile: a refusal is recorded, and the operations
    /// an outcome proves allowed are cleared.
    pub fn record(&self, result: &Result<Outcome, ReconcileError>) {
        let mut denied = lock(&self.denied);
        let allowed: &[Operation] = match result {
            Err(e) => {
                if let Some(op) = e.forbidden() {
                    denied.insert(op, crate::api::error_chain(e));
                }
                &[]
            }
            // Content was read.
            Ok(Outcome::Noop | Outcome::Blocked { .. }) => &[Operation::FetchConfig],
            Ok(Outcome::Written) => &[
                Operation::FetchConfig,
                Operation::PatchWorkload,
                Operation::GetWorkload,
            ],
            Ok(Outcome::HeldPodsDeleted) => &[Operation::DeleteHeldPods],
            Ok(_) => &[],
        };
        for op in allowed {
            denied.remove(op);
        }
    }

    /// The refusals in force, one line each.
    pub fn current(&self) -> Vec<String> {
        lock(&self.denied).values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wave_core::workload::WorkloadKind;

    fn id(name: &str) -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", name)
    }

    fn forbidden(op: Operation) -> ReconcileError {
        let status = kube::core::Status::failure("patches are not allowed", "Forbidden").with_code(403);
        let source = Box::new(kube::Error::Api(Box::new(status)));
        match op {
            Operation::PatchWorkload => ReconcileError::PatchWorkload {
                workload: id("w"),
                source,
            },
            Operation::DeleteHeldPods => ReconcileError::DeleteHeldPods {
                workload: id("w"),
                source,
            },
            _ => unreachable!("not used in these tests"),
        }
    }

    #[test]
    fn each_distinct_missing_set_is_reported_once_and_counted_until_forgotten() {
        let gauge = Gauge::default();
        let reports = MissingReports::new(gauge.clone());
        assert!(reports.report(&id("a"), "missing configmap x"));
        assert!(
            !reports.report(&id("a"), "missing configmap x"),
            "the same set again"
        );
        assert!(reports.report(&id("a"), "missing configmap y"), "a different set");
        assert!(reports.report(&id("b"), "missing configmap x"));
        assert_eq!(gauge.get(), 2);
        reports.forget(&id("a"));
        assert_eq!(gauge.get(), 1);
        assert!(
            reports.report(&id("a"), "missing configmap y"),
            "reported again after forgetting"
        );
    }

    #[test]
    fn a_refused_operation_stays_until_that_operation_succeeds() {
        let denials = PermissionDenials::default();
        denials.record(&Err(forbidden(Operation::PatchWorkload)));
        assert_eq!(denials.current().len(), 1);
        assert!(denials.current()[0].contains("patches are not allowed"));
        denials.record(&Ok(Outcome::Noop));
        assert_eq!(
            denials.current().len(),
            1,
            "a read does not prove a patch is allowed"
        );
        denials.record(&Ok(Outcome::Written));
        assert!(denials.current().is_empty());
    }

    #[test]
    fn a_refused_pod_deletion_is_cleared_only_by_a_deletion() {
        let denials = PermissionDenials::default();
        denials.record(&Err(forbidden(Operation::DeleteHeldPods)));
        denials.record(&Ok(Outcome::Written));
        assert_eq!(denials.current().len(), 1);
        denials.record(&Ok(Outcome::HeldPodsDeleted));
        assert!(denials.current().is_empty());
    }
}
