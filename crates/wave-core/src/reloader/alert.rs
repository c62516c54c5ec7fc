//! What wave posts about a reload, byte for byte as Stakater Reloader v1.4.21 posts it: the alert of
//! `ALERT_ON_RELOAD` to a Slack, Microsoft Teams, Google Chat or raw webhook (`SendWebhookAlert` in
//! `internal/pkg/alerts/alert.go`, its message in `upgradeResource`, `internal/pkg/handler/upgrade.go`),
//! and the notice `--webhook-url` posts instead of reloading (`sendWebhook`, same file).
//!
//! ```text
//! a reload written ─► reload_message(changed object, workload) ─► alert_post(sink, additional info)
//! a reload asked, --webhook-url set ─► webhook_post()        (nothing written to the workload)
//!   ─► Post { content type, body }: the runtime sends it after the write, never before
//! ```
//!
//! Reloader sends its bodies through gorequest, which turns a struct into a map before encoding it, so
//! its JSON keys come out sorted, with Go's escaping of `<`, `>` and `&`; [`go_json`] writes the same.
//! A message names objects and workloads only: no data, so no Secret value, ever reaches a sink.

use serde::Serialize;

use super::type_name;
use crate::refs::ConfigKey;
use crate::workload::WorkloadRef;

/// Where an alert goes (Reloader's `ALERT_SINK`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlertSink {
    /// A Slack incoming webhook: one attachment.
    Slack,
    /// A Microsoft Teams webhook: `{"text": …}`.
    Teams,
    /// A Google Chat webhook: `{"text": …}`.
    GoogleChat,
    /// Anything else: the message as plain text, without Slack's `*` emphasis.
    #[default]
    Raw,
}

impl AlertSink {
    /// Reads `ALERT_SINK` as Reloader does: trimmed, any case; a value it does not know is the raw sink.
    pub fn parse(value: &str) -> Self {
        match value.trim().to_lowercase().as_str() {
            "slack" => AlertSink::Slack,
            "teams" => AlertSink::Teams,
            "gchat" => AlertSink::GoogleChat,
            _ => AlertSink::Raw,
        }
    }

    /// The sink's name, as Reloader spells it: also the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertSink::Slack => "slack",
            AlertSink::Teams => "teams",
            AlertSink::GoogleChat => "gchat",
            AlertSink::Raw => "raw",
        }
    }

    /// Whether an answer with this status means the sink took the alert: any 2xx. (Reloader logs an
    /// error for a Teams or Google Chat answer other than 200, though Teams' Workflows webhooks answer
    /// 202; a retry would post the alert again.) A redirect is never followed (Reloader's
    /// `redirectPolicy`: a redirected webhook is taken for a wrong token), so a 3xx is a failure.
    pub fn accepts(self, status: u16) -> bool {
        (200..300).contains(&status)
    }
}

/// One request body, with its content type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Post {
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

/// The body `--webhook-url` posts for a change, instead of reloading: Reloader's, which names nothing.
pub const WEBHOOK_BODY: &str = r#"{"webhook":"update successful"}"#;

/// What `--webhook-url` posts.
pub fn webhook_post() -> Post {
    Post {
        content_type: JSON,
        body: WEBHOOK_BODY.as_bytes().to_vec(),
    }
}

const JSON: &str = "application/json";
const TEXT: &str = "text/plain";

/// Reloader's alert message for a reload of `workload` caused by `changed`.
pub fn reload_message(changed: &ConfigKey, workload: &WorkloadRef) -> String {
    format!(
        "Reloader detected changes in *{}* of type *{}* in namespace *{}*. Hence reloaded *{}* of type *{}* in namespace *{}*",
        changed.name,
        type_name(changed.kind),
        changed.namespace,
        workload.name,
        workload.kind.as_str(),
        workload.namespace,
    )
}

#[derive(Serialize)]
struct SlackAttachment<'a> {
    author_name: &'a str,
    color: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct Slack<'a> {
    attachments: [SlackAttachment<'a>; 1],
}

#[derive(Serialize)]
struct Text<'a> {
    text: &'a str,
}

/// The alert `sink` is sent for `message`, with `additional_info` (Reloader's `ALERT_ADDITIONAL_INFO`,
/// a cluster's name say) before it as `info : message`.
pub fn alert_post(sink: AlertSink, additional_info: Option<&str>, message: &str) -> Post {
    let message = match additional_info {
        Some(info) => format!("{} : {message}", info.trim()),
        None => message.to_string(),
    };
    match sink {
        AlertSink::Slack => Post {
            content_type: JSON,
            body: go_json(&Slack {
                attachments: [SlackAttachment {
                    author_name: "Reloader",
                    color: "good",
                    text: &message,
                }],
            }),
        },
        AlertSink::Teams | AlertSink::GoogleChat => Post {
            content_type: JSON,
            body: go_json(&Text { text: &message }),
        },
        AlertSink::Raw => Post {
            content_type: TEXT,
            body: message.replace('*', "").into_bytes(),
        },
    }
}

/// `value` as Go's `encoding/json` writes it: serde_json's bytes (the structs above keep their fields
/// in sorted order, as a Go map's keys are), with `<`, `>`, `&`, U+2028 and U+2029 escaped as Go
/// escapes them. Those characters can only stand inside strings in JSON, so replacing them is exact.
fn go_json(value: &impl Serialize) -> Vec<u8> {
    // Serializing these plain structs cannot fail; an empty body would only be a refused alert.
    let text = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

#[cfg(test)]
#[path = "alert_tests.rs"]
mod tests;
