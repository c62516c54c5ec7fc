use super::*;
use crate::refs::ConfigKind;
use crate::workload::WorkloadKind;

fn app_config() -> ConfigKey {
    ConfigKey {
        kind: ConfigKind::ConfigMap,
        namespace: "shop".into(),
        name: "app-config".into(),
    }
}

fn web() -> WorkloadRef {
    WorkloadRef::new(WorkloadKind::DEPLOYMENT, "shop", "web")
}

// The expected bodies below were printed by Go's encoding/json from the map gorequest builds of
// Reloader's payloads (docs/migrating-from-reloader.md, "Alerts"): another implementation's bytes.
const SLACK: &str = r#"{"attachments":[{"author_name":"Reloader","color":"good","text":"prod \u003ceu\u003e \u0026 co : Reloader detected changes in *app-config* of type *CONFIGMAP* in namespace *shop*. Hence reloaded *web* of type *Deployment* in namespace *shop*"}]}"#;
const TEXT_BODY: &str = r#"{"text":"prod \u003ceu\u003e \u0026 co : Reloader detected changes in *app-config* of type *CONFIGMAP* in namespace *shop*. Hence reloaded *web* of type *Deployment* in namespace *shop*"}"#;

#[test]
fn the_message_names_the_object_its_type_and_the_workload_as_reloader_writes_it() {
    assert_eq!(
        reload_message(&app_config(), &web()),
        "Reloader detected changes in *app-config* of type *CONFIGMAP* in namespace *shop*. Hence reloaded *web* of type *Deployment* in namespace *shop*"
    );
    let secret = ConfigKey {
        kind: ConfigKind::Secret,
        ..app_config()
    };
    let cron = WorkloadRef::new(WorkloadKind::CRON_JOB, "shop", "nightly");
    assert!(reload_message(&secret, &cron).contains("of type *SECRET*"));
    assert!(reload_message(&secret, &cron).contains("*nightly* of type *CronJob*"));
}

#[test]
fn a_slack_alert_is_one_attachment_with_sorted_keys_and_go_escaping() {
    let post = alert_post(
        AlertSink::Slack,
        Some(" prod <eu> & co "),
        &reload_message(&app_config(), &web()),
    );
    assert_eq!(post.content_type, "application/json");
    assert_eq!(String::from_utf8(post.body).unwrap(), SLACK);
}

#[test]
fn teams_and_google_chat_alerts_are_a_text_object() {
    for sink in [AlertSink::Teams, AlertSink::GoogleChat] {
        let post = alert_post(
            sink,
            Some("prod <eu> & co"),
            &reload_message(&app_config(), &web()),
        );
        assert_eq!(post.content_type, "application/json");
        assert_eq!(String::from_utf8(post.body).unwrap(), TEXT_BODY);
    }
}

#[test]
fn a_raw_alert_is_plain_text_without_the_emphasis_stars_even_in_the_additional_info() {
    let post = alert_post(
        AlertSink::Raw,
        Some("*prod*"),
        &reload_message(&app_config(), &web()),
    );
    assert_eq!(post.content_type, "text/plain");
    assert_eq!(
        String::from_utf8(post.body).unwrap(),
        "prod : Reloader detected changes in app-config of type CONFIGMAP in namespace shop. Hence reloaded web of type Deployment in namespace shop"
    );
}

#[test]
fn without_additional_info_the_message_is_sent_alone() {
    let post = alert_post(AlertSink::GoogleChat, None, "hello");
    assert_eq!(post.body, br#"{"text":"hello"}"#);
}

#[test]
fn the_sink_is_read_as_reloader_reads_it_and_anything_unknown_is_raw() {
    assert_eq!(AlertSink::parse(" Slack "), AlertSink::Slack);
    assert_eq!(AlertSink::parse("TEAMS"), AlertSink::Teams);
    assert_eq!(AlertSink::parse("gchat"), AlertSink::GoogleChat);
    assert_eq!(AlertSink::parse("webex"), AlertSink::Raw);
    assert_eq!(AlertSink::parse(""), AlertSink::Raw);
}

#[test]
fn every_sink_takes_any_2xx_so_a_202_from_teams_is_not_posted_again_and_none_takes_a_redirect() {
    for sink in [
        AlertSink::Slack,
        AlertSink::Teams,
        AlertSink::GoogleChat,
        AlertSink::Raw,
    ] {
        assert!(sink.accepts(200));
        assert!(sink.accepts(202), "Teams' Workflows webhooks answer 202");
        assert!(!sink.accepts(302));
        assert!(!sink.accepts(404));
        assert!(!sink.accepts(500));
    }
}

#[test]
fn the_webhook_url_post_is_json() {
    // The body itself is checked against Reloader's in the e2e test, as the receiver got it.
    assert_eq!(webhook_post().content_type, "application/json");
}
