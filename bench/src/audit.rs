//! Requests per user, verb and resource, from the apiserver's audit log (`hack/testenv up --audit`,
//! Metadata level). `apiserver_request_total` has no user label; the audit log does.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

/// `verb resource` → requests.
pub type Counts = BTreeMap<String, u64>;

/// The requests `user` made between `from` and `to` (by the time the apiserver received them),
/// except those in namespace `skip`. A watch counts once, when it starts; every other request when it
/// completes.
pub fn count(log: &Path, user: &str, skip: &str, from: Timestamp, to: Timestamp) -> Counts {
    let mut counts = Counts::new();
    let Ok(text) = std::fs::read_to_string(log) else {
        return counts;
    };
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if entry["user"]["username"].as_str() != Some(user)
            || entry["objectRef"]["namespace"].as_str() == Some(skip)
        {
            continue;
        }
        let verb = entry["verb"].as_str().unwrap_or_default();
        let stage = entry["stage"].as_str().unwrap_or_default();
        let counted = match verb {
            "watch" => stage == "ResponseStarted",
            _ => stage == "ResponseComplete",
        };
        let at = entry["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok());
        if !counted || !at.is_some_and(|t| t >= from && t < to) {
            continue;
        }
        let resource = entry["objectRef"]["resource"].as_str().unwrap_or("-");
        *counts.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    counts
}

/// Writes to workloads among `counts`.
pub fn workload_writes(counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| {
            let (verb, resource) = k.split_once(' ').unwrap_or_default();
            matches!(verb, "patch" | "update")
                && matches!(resource, "deployments" | "statefulsets" | "daemonsets")
        })
        .map(|(_, n)| n)
        .sum()
}

/// Every request among `counts`, minus the watches that stay open.
pub fn total(counts: &Counts) -> u64 {
    counts.values().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_users_requests_in_the_window_are_counted_and_watches_once() {
        let dir = std::env::temp_dir().join(format!("wave-bench-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("audit.log");
        let line = |user: &str, verb: &str, res: &str, stage: &str, at: &str| {
            serde_json::json!({"user": {"username": user}, "verb": verb, "objectRef": {"resource": res},
                               "stage": stage, "requestReceivedTimestamp": at})
            .to_string()
        };
        let lines = [
            line(
                "a",
                "patch",
                "deployments",
                "ResponseComplete",
                "2026-11-23T10:00:01.5Z",
            ),
            line("a", "watch", "secrets", "ResponseStarted", "2026-11-23T10:00:02Z"),
            line(
                "a",
                "watch",
                "secrets",
                "ResponseComplete",
                "2026-11-23T10:00:02Z",
            ),
            line(
                "b",
                "patch",
                "deployments",
                "ResponseComplete",
                "2026-11-23T10:00:03Z",
            ),
            line("a", "get", "secrets", "ResponseComplete", "2026-11-23T10:00:09Z"),
            serde_json::json!({"user": {"username": "a"}, "verb": "get", "stage": "ResponseComplete",
                               "objectRef": {"resource": "configmaps", "namespace": "probe"},
                               "requestReceivedTimestamp": "2026-11-23T10:00:01Z"})
            .to_string(),
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        let c = count(
            &log,
            "a",
            "probe",
            "2026-11-23T10:00:00Z".parse().unwrap(),
            "2026-11-23T10:00:05Z".parse().unwrap(),
        );
        assert_eq!(
            c,
            Counts::from([("patch deployments".into(), 1), ("watch secrets".into(), 1)])
        );
        assert_eq!((workload_writes(&c), total(&c)), (1, 2));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
