//! Requests per user, verb and resource, from the apiserver's audit log (`hack/testenv up --audit`,
//! Metadata level). `apiserver_request_total` has no user label; the audit log does.
//!
//! A request the apiserver refused (a 409 Conflict on a patch that carries a resourceVersion, a 404, a
//! 429) is counted under its own key, `verb resource code`, so that it adds to the API cost but is
//! never taken for a write that happened.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

/// `verb resource` → successful requests; `verb resource code` → requests refused with that HTTP code.
pub type Counts = BTreeMap<String, u64>;

/// The requests `user` made between `from` and `to` (by the time the apiserver received them),
/// except those in namespace `skip`. A watch counts once, when it starts; every other request when it
/// completes.
pub fn count(log: &Path, user: &str, skip: &str, from: Timestamp, to: Timestamp) -> Counts {
    count_where(log, user, from, to, |ns| ns != Some(skip))
}

/// The requests `user` made between `from` and `to` in namespace `ns`, or in a namespace named
/// `ns-<anything>` (a scenario that spreads over several).
pub fn count_in(log: &Path, user: &str, ns: &str, from: Timestamp, to: Timestamp) -> Counts {
    count_where(log, user, from, to, |n| {
        n.is_some_and(|n| n == ns || n.strip_prefix(ns).is_some_and(|rest| rest.starts_with('-')))
    })
}

fn count_where(
    log: &Path,
    user: &str,
    from: Timestamp,
    to: Timestamp,
    namespace: impl Fn(Option<&str>) -> bool,
) -> Counts {
    let mut counts = Counts::new();
    let Ok(text) = std::fs::read_to_string(log) else {
        return counts;
    };
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if entry["user"]["username"].as_str() != Some(user)
            || !namespace(entry["objectRef"]["namespace"].as_str())
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
        let key = match entry["responseStatus"]["code"].as_u64() {
            Some(code) if code >= 400 => format!("{verb} {resource} {code}"),
            _ => format!("{verb} {resource}"),
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
}

/// One completed request, as the audit log shows it: who, what, and when the apiserver received and
/// completed it (microseconds, the log's precision).
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub received: Timestamp,
    pub completed: Timestamp,
}

/// Every request the apiserver completed with a 2xx answer, received at `from` or later, in the log's
/// order. Watches are left out: they complete when they end, not when they deliver.
pub fn completed(log: &Path, from: Timestamp) -> Vec<Request> {
    let Ok(text) = std::fs::read_to_string(log) else {
        return Vec::new();
    };
    let string = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let time = |v: &serde_json::Value| v.as_str().and_then(|t| t.parse::<Timestamp>().ok());
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["verb"] != "watch")
        .filter(|e| e["responseStatus"]["code"].as_u64().is_none_or(|c| c < 300))
        .filter_map(|e| {
            Some(Request {
                user: string(&e["user"]["username"]),
                verb: string(&e["verb"]),
                resource: string(&e["objectRef"]["resource"]),
                namespace: string(&e["objectRef"]["namespace"]),
                name: string(&e["objectRef"]["name"]),
                received: time(&e["requestReceivedTimestamp"]).filter(|t| *t >= from)?,
                completed: time(&e["stageTimestamp"])?,
            })
        })
        .collect()
}

/// Successful writes to workloads among `counts`.
pub fn workload_writes(counts: &Counts) -> u64 {
    writes(counts, |code| code.is_none())
}

/// Deletes and creates of Jobs among `counts` that the apiserver took: a Job's reload (it is deleted
/// and created again).
pub fn job_writes(counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| {
            let mut parts = k.split(' ');
            let (verb, resource) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
            matches!(verb, "create" | "delete") && resource == "jobs" && parts.next().is_none()
        })
        .map(|(_, n)| n)
        .sum()
}

/// Writes to workloads among `counts` that the apiserver refused (409 Conflict, mostly).
pub fn refused_workload_writes(counts: &Counts) -> u64 {
    writes(counts, |code| code.is_some())
}

fn writes(counts: &Counts, code: impl Fn(Option<&str>) -> bool) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| {
            let mut parts = k.split(' ');
            let (verb, resource) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
            matches!(verb, "patch" | "update")
                && matches!(resource, "deployments" | "statefulsets" | "daemonsets")
                && code(parts.next())
        })
        .map(|(_, n)| n)
        .sum()
}

/// Every request among `counts`, refused ones included (each cost the apiserver a round trip).
pub fn total(counts: &Counts) -> u64 {
    counts.values().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_users_requests_in_the_window_are_counted_watches_once_and_refused_writes_apart() {
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
            serde_json::json!({"user": {"username": "a"}, "verb": "patch", "stage": "ResponseComplete",
                               "objectRef": {"resource": "deployments"}, "responseStatus": {"code": 409},
                               "requestReceivedTimestamp": "2026-11-23T10:00:04Z"})
            .to_string(),
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
            Counts::from([
                ("patch deployments".into(), 1),
                ("patch deployments 409".into(), 1),
                ("watch secrets".into(), 1)
            ])
        );
        assert_eq!(
            (workload_writes(&c), refused_workload_writes(&c), total(&c)),
            (1, 1, 3)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
