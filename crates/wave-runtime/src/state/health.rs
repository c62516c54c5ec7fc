//! What `/readyz` reports about the watches: the last error of each scope, kept by the watch streams
//! (`controller::watch`) and read by [`super::Context::readiness`].

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use wave_core::tracker::Scope;

/// The last error of each watch scope, cleared by its next successful event.
#[derive(Default)]
pub struct WatchHealth {
    errors: Mutex<HashMap<Scope, String>>,
}

impl WatchHealth {
    fn errors(&self) -> MutexGuard<'_, HashMap<Scope, String>> {
        self.errors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `scope`'s watch delivered an event: true when it was failing until now.
    pub fn recovered(&self, scope: &Scope) -> bool {
        self.errors().remove(scope).is_some()
    }

    /// `scope`'s watch failed with `error`: true when that is not the error it last failed with.
    pub fn failed(&self, scope: &Scope, error: &str) -> bool {
        let previous = self.errors().insert(scope.clone(), error.to_string());
        previous.as_deref() != Some(error)
    }

    /// Scopes whose watch is currently failing, with the error, for `/readyz`.
    pub fn failing(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .errors()
            .iter()
            .map(|(s, e)| format!("{}: {e}", describe(s)))
            .collect();
        out.sort();
        out
    }
}

/// `secrets in namespace a` / `secrets in all namespaces`.
pub fn describe(scope: &Scope) -> String {
    match &scope.namespace {
        Some(ns) => format!("{} in namespace {ns}", scope.resource.as_str()),
        None => format!("{} in all namespaces", scope.resource.as_str()),
    }
}
