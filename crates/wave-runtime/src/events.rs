//! Kubernetes Events (events.k8s.io/v1) about workloads and the config objects they use.
//!
//! NOTE: kube's `Recorder` aggregates repeats into an EventSeries keyed by reason and object but not by
//! note (kube-runtime `events.rs`, `get_event_key`), so a second `ConfigChanged` would only bump the
//! first Event's count and hide the new hash. Wave's users read the hash from the Event, so each Event is
//! created on its own here; the one Event that can repeat (`ConfigMissing`) is de-duplicated by the
//! reconcile, per distinct missing set.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use wave_core::names;
use wave_core::refs::ConfigKey;
use wave_core::workload::Workload;

use crate::api::describe;

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something needs attention.
    Warning,
}

/// Publishes Events as `reportingController: wave`, `reportingInstance: <identity>`.
#[derive(Clone)]
pub struct EventPublisher {
    client: Client,
    instance: String,
}

impl EventPublisher {
    /// A publisher reporting as `instance`.
    pub fn new(client: Client, instance: String) -> Self {
        Self { client, instance }
    }

    /// Creates one Event about `workload`. A failure is logged, not returned: an Event that cannot be
    /// created never stops a reconcile or an admission.
    pub async fn publish(
        &self,
        workload: &Workload,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let id = &workload.id;
        let regarding = ObjectReference {
            api_version: Some(id.kind.info().api_version.into()),
            kind: Some(id.kind.as_str().into()),
            namespace: Some(id.namespace.clone()),
            name: Some(id.name.clone()),
            uid: Some(workload.uid.clone()),
            ..Default::default()
        };
        self.create(regarding, type_, reason, action, note).await;
    }

    /// Creates one Event about a ConfigMap or Secret (logged, not returned, on failure).
    pub async fn publish_config(
        &self,
        key: &ConfigKey,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(key.kind.kind().into()),
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            ..Default::default()
        };
        self.create(regarding, type_, reason, action, note).await;
    }

    async fn create(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let now = Timestamp::now();
        let (namespace, name) = (
            regarding.namespace.clone().unwrap_or_default(),
            regarding.name.clone().unwrap_or_default(),
        );
        let event = Event {
            metadata: ObjectMeta {
                // Unique per publish: the object name plus the time in nanoseconds, as kubectl does.
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(match type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(fit_note(note)),
            reporting_controller: Some(names::CONTROLLER_NAME.into()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(regarding),
            ..Default::default()
        };
        if let Err(e) = Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await
        {
            tracing::warn!(object = %format!("{namespace}/{name}"), reason, error = %describe(&e), "could not publish Event");
        }
    }
}

/// The longest `note` events.k8s.io/v1 accepts, in bytes; a longer one makes the apiserver refuse the
/// whole Event (kubernetes/kubernetes, `pkg/apis/events/validation`: `NoteLengthLimit`).
const NOTE_LIMIT: usize = 1024;

/// `note`, cut at a character boundary and marked with `…` when it is longer than the apiserver accepts,
/// so that a long message still reaches the user as an Event instead of being refused.
fn fit_note(mut note: String) -> String {
    if note.len() <= NOTE_LIMIT {
        return note;
    }
    let mut end = NOTE_LIMIT - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push('…');
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_within_the_limit_is_kept_whole() {
        let note = "x".repeat(NOTE_LIMIT);
        assert_eq!(fit_note(note.clone()), note);
    }

    #[test]
    fn a_long_note_is_cut_to_the_limit_at_a_character_boundary() {
        for long in [
            "x".repeat(5000),
            "é".repeat(3000),
            format!("a{}", "€".repeat(2000)),
        ] {
            let fitted = fit_note(long.clone());
            assert!(fitted.len() <= NOTE_LIMIT, "{} bytes", fitted.len());
            assert!(fitted.ends_with('…'));
            assert!(long.starts_with(fitted.trim_end_matches('…')));
        }
    }
}
