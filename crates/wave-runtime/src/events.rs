//! Kubernetes Events (events.k8s.io/v1) about workloads and the config objects they use.
//!
//! ```text
//! reconcile / webhook ─► publish (builds the Event, never waits) ─► queue (bounded) ─► create_all
//!                                        full: dropped, counted in wave_events_dropped_total
//! ```
//!
//! Events leave the reconcile path: a rollout's latency is its PATCH, not the PATCH plus one POST per
//! Event, and a slow or refused Event never holds a worker. An Event is still published only after the
//! write it reports has succeeded, so it never claims what did not happen. Events still queued when
//! wave exits are not created.
//!
//! NOTE: kube's `Recorder` aggregates repeats into an EventSeries keyed by reason and object but not by
//! note (kube-runtime `events.rs`, `get_event_key`), so a second `ConfigChanged` would only bump the
//! first Event's count and hide the new hash. Wave's users read the hash from the Event, so each Event is
//! created on its own here; the one Event that can repeat (`ConfigMissing`) is de-duplicated by the
//! reconcile, per distinct missing set.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use wave_core::names;
use wave_core::refs::ConfigKey;
use wave_core::workload::{Workload, WorkloadRef};

use crate::api::describe;

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something needs attention.
    Warning,
}

/// Events waiting to be created. A fan-out of thousands of rollouts publishes one Event each; beyond
/// this many waiting, new ones are dropped (and counted) rather than held in memory.
const QUEUE_LENGTH: usize = 4096;

/// Events created at once: enough that the queue drains at the apiserver's pace, not one round trip's.
const CREATING_AT_ONCE: usize = 8;

/// Publishes Events as `reportingController: wave`, `reportingInstance: <identity>`.
#[derive(Clone)]
pub struct EventPublisher {
    queue: mpsc::Sender<Event>,
    instance: String,
    dropped: Counter,
    /// Dropping now: one warning per episode, not one per Event (a start-up of 20,000 workloads
    /// publishes 20,000 Events at once).
    overflowing: Arc<AtomicBool>,
}

impl EventPublisher {
    /// A publisher reporting as `instance`, and the task that creates what it publishes (so it must be
    /// called within a Tokio runtime). Events dropped because the queue was full count in `dropped`.
    pub fn new(client: Client, instance: String, dropped: Counter) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE_LENGTH);
        tokio::spawn(create_all(client, waiting));
        Self {
            queue,
            instance,
            dropped,
            overflowing: Arc::default(),
        }
    }

    /// Queues one Event about `workload`. It never waits and never fails: an Event never stops or
    /// slows a reconcile or an admission.
    pub fn publish(&self, workload: &Workload, type_: EventType, reason: &str, action: &str, note: String) {
        self.publish_about(&workload.id, Some(&workload.uid), type_, reason, action, note);
    }

    /// Queues one Event about workload `id` (see [`Self::publish`]). Without its `uid`, `kubectl
    /// describe` does not show it (it selects Events by uid), `kubectl get events` does.
    pub fn publish_about(
        &self,
        id: &WorkloadRef,
        uid: Option<&str>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let regarding = ObjectReference {
            api_version: Some(id.kind.info().api_version.into()),
            kind: Some(id.kind.as_str().into()),
            namespace: Some(id.namespace.clone()),
            name: Some(id.name.clone()),
            uid: uid.map(str::to_string),
            ..Default::default()
        };
        self.enqueue(regarding, type_, reason, action, note);
    }

    /// Queues one Event about a ConfigMap or Secret (see [`Self::publish`]).
    pub fn publish_config(
        &self,
        key: &ConfigKey,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let regarding = ObjectReference {
            api_version: Some(key.kind.api_version().into()),
            kind: Some(key.kind.kind().into()),
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            ..Default::default()
        };
        self.enqueue(regarding, type_, reason, action, note);
    }

    fn enqueue(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        // Stamped now, when it happened, not when the queue reaches it.
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
        if self.queue.try_send(event).is_ok() {
            if self.overflowing.swap(false, Ordering::Relaxed) {
                tracing::info!(dropped = self.dropped.get(), "Events are queued again");
            }
        } else {
            self.dropped.inc();
            if !self.overflowing.swap(true, Ordering::Relaxed) {
                tracing::warn!(object = %format!("{namespace}/{name}"), reason, "Events dropped until the queue has room: {QUEUE_LENGTH} are already waiting to be created (wave_events_dropped_total counts them)");
            }
        }
    }
}

/// Creates every queued Event, [`CREATING_AT_ONCE`] at a time, until every publisher is gone. A failure
/// is logged, not retried: Events are advice, and the state they report is on the objects themselves.
async fn create_all(client: Client, mut waiting: mpsc::Receiver<Event>) {
    futures::stream::poll_fn(move |cx| waiting.poll_recv(cx))
        .for_each_concurrent(CREATING_AT_ONCE, |event| {
            let client = client.clone();
            async move {
                let namespace = event.metadata.namespace.clone().unwrap_or_default();
                if let Err(e) = Api::<Event>::namespaced(client, &namespace)
                    .create(&PostParams::default(), &event)
                    .await
                {
                    let object = event.regarding.as_ref().and_then(|r| r.name.as_deref()).unwrap_or_default();
                    let reason = event.reason.as_deref().unwrap_or_default();
                    tracing::warn!(object = %format!("{namespace}/{object}"), reason, error = %describe(&e), "could not publish Event");
                }
            }
        })
        .await;
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

    #[tokio::test]
    async fn publishing_never_waits_and_beyond_the_queue_events_are_dropped_and_counted() {
        // Nothing listens on port 1: no Event could be created, and none needs to be for this test.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let dropped = Counter::default();
        let events = EventPublisher::new(client, "test".into(), dropped.clone());
        let key = ConfigKey::new(wave_core::refs::ConfigKind::ConfigMap, "ns", "cfg");
        // The test's runtime has one thread and this loop never yields: the creating task takes none.
        for _ in 0..QUEUE_LENGTH + 3 {
            events.publish_config(&key, EventType::Normal, "Reason", "Action", "note".into());
        }
        assert_eq!(dropped.get(), 3);
    }

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
