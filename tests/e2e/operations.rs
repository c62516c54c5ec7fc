//! Restarts, leader election, the global rate limit, and secrecy (issue: tests 11–14).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testenv::wait_for;
use wave_core::workload::WorkloadKind;

use crate::harness::*;

async fn hashed_workloads(client: &kube::Client, ns: &str) -> Vec<String> {
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    for kind in WorkloadKind::BUILT_IN {
        create_workload(client, ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    let mut hashes = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        hashes.push(wait_hash_change(client, ns, kind, &name(kind), None).await);
    }
    hashes
}

#[tokio::test]
async fn a_restart_with_nothing_changed_writes_nothing_and_a_change_made_while_down_rolls_once() {
    let (client, ns) = setup("restart").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let mut first = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let hashes = hashed_workloads(&client, &ns).await;
    first.kill();

    let second = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    wait_for("every workload checked after the restart", TIMEOUT, || async {
        (second.noops() >= 3).then_some(())
    })
    .await;
    assert_eq!(
        second.writes(),
        0,
        "a restart with nothing changed writes nothing"
    );
    drop(second);

    let mut revs = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        revs.push(settled_revisions(&client, &ns, kind, &name(kind)).await);
    }
    patch_configmap(&client, &ns, "cfg", json!({"data": {"a": "changed while down"}})).await;
    let third = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    for ((kind, old), rev) in WorkloadKind::BUILT_IN.into_iter().zip(&hashes).zip(revs) {
        wait_hash_change(&client, &ns, kind, &name(kind), Some(old)).await;
        wait_revisions(&client, &ns, kind, &name(kind), rev + 1).await;
    }
    third
        .expect_writes(3, "exactly one rollout per workload after the restart")
        .await;
}

#[tokio::test]
async fn only_the_leader_writes_and_a_killed_leader_is_replaced_without_losing_or_repeating_rollouts() {
    let (client, ns) = setup("leader").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "0"})).await;
    let lease = format!("wave-{ns}");
    let args = [
        "--update-rate=inf",
        "--leader-election",
        "--leader-election-lease-duration=4",
    ];
    let (id, lease_ns) = (
        format!("--leader-election-id={lease}"),
        format!("--leader-election-namespace={ns}"),
    );
    let election = [args.as_slice(), &[id.as_str(), lease_ns.as_str()]].concat();
    let mut a = Wave::start(&[&ns], &election).await;
    let mut b = Wave::start(&[&ns], &election).await;
    let mut hashes = hashed_workloads(&client, &ns).await;
    let leader_of = |a: &Wave, b: &Wave| (a.metric("wave_leader", &[]), b.metric("wave_leader", &[]));
    let (la, lb) = wait_for("exactly one leader", TIMEOUT, || async {
        let l = leader_of(&a, &b);
        (l.0 + l.1 == 1.0).then_some(l)
    })
    .await;
    let (leader, follower) = if la == 1.0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_eq!(lb + la, 1.0);
    leader
        .expect_writes(3, "the leader writes each first hash once")
        .await;
    assert_eq!(follower.writes(), 0, "the follower never writes");

    // A change, then the leader dies.
    patch_configmap(&client, &ns, "cfg", json!({"data": {"a": "1"}})).await;
    for (kind, h) in WorkloadKind::BUILT_IN.into_iter().zip(hashes.iter_mut()) {
        *h = wait_hash_change(&client, &ns, kind, &name(kind), Some(h)).await;
    }
    leader.kill();
    let killed = Instant::now();
    // Another change while there is no leader: it must not be lost.
    patch_configmap(&client, &ns, "cfg", json!({"data": {"a": "2"}})).await;
    wait_for("the follower to take over", Duration::from_secs(20), || async {
        (follower.metric("wave_leader", &[]) == 1.0).then_some(())
    })
    .await;
    let takeover = killed.elapsed();
    eprintln!("leader takeover after SIGKILL: {takeover:?} (lease 4 s)");
    assert!(
        takeover < Duration::from_secs(4 + 6),
        "took over in {takeover:?}; lease is 4 s"
    );
    for (kind, h) in WorkloadKind::BUILT_IN.into_iter().zip(hashes.iter_mut()) {
        *h = wait_hash_change(&client, &ns, kind, &name(kind), Some(h)).await;
    }
    follower
        .expect_writes(
            3,
            "one write per workload for the change made without a leader, none repeated",
        )
        .await;
    assert!(follower.is_running());
}

#[tokio::test]
async fn writes_never_exceed_the_global_token_bucket() {
    let (client, ns) = setup("ratelimit").await;
    for i in 0..4 {
        create_configmap(&client, &ns, &format!("cfg{i}"), json!({"v": "0"})).await;
    }
    // One Deployment and one StatefulSet, each using two ConfigMaps.
    for (kind, cms) in [
        (WorkloadKind::DEPLOYMENT, ["cfg0", "cfg1"]),
        (WorkloadKind::STATEFUL_SET, ["cfg2", "cfg3"]),
    ] {
        let env_from: Vec<_> = cms.iter().map(|c| json!({"configMapRef": {"name": c}})).collect();
        create_workload(
            &client,
            &ns,
            kind,
            &name(kind),
            opted_in(&[]),
            pod_spec(json!({"envFrom": env_from}), json!({})),
        )
        .await;
    }
    let started = Instant::now();
    // Coalescing off: this is about the bucket alone (coalescing would merge the rounds first).
    let wave = Wave::start(
        &[&ns],
        &["--update-rate=1", "--update-burst=2", "--min-rollout-interval=0"],
    )
    .await;
    for kind in [WorkloadKind::DEPLOYMENT, WorkloadKind::STATEFUL_SET] {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    }
    for round in 1..=5 {
        for i in 0..4 {
            patch_configmap(
                &client,
                &ns,
                &format!("cfg{i}"),
                json!({"data": {"v": round.to_string()}}),
            )
            .await;
        }
    }
    // Wait until both workloads carry the hash of the last values, whenever the bucket allows it.
    wait_for(
        "both workloads to reach the final hash",
        Duration::from_secs(90),
        || async {
            let done = at_final_hash(&client, &ns, WorkloadKind::DEPLOYMENT).await
                && at_final_hash(&client, &ns, WorkloadKind::STATEFUL_SET).await;
            done.then_some(())
        },
    )
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    let allowed = 2.0 + elapsed * 1.0;
    let writes = wave.writes() as f64;
    eprintln!("rate limit: {writes} writes in {elapsed:.1} s; rate 1/s burst 2 allows {allowed:.1}");
    assert!(
        writes <= allowed.floor(),
        "{writes} writes in {elapsed:.1}s; the bucket allows {allowed:.1}"
    );
    assert!(
        wave.metric("wave_reconciles_total", &["result=\"rate_limited\""]) > 0.0,
        "the bucket never held anything back"
    );
}

/// Whether the workload carries the hash of its ConfigMaps' current content (computed by the same
/// library code the CLI uses).
async fn at_final_hash(client: &kube::Client, ns: &str, kind: WorkloadKind) -> bool {
    let w = workload(client, ns, kind, &name(kind)).await;
    let refs = w.references(wave_core::refs::CrossNamespace::Deny);
    let mut fetched = wave_core::hash::Fetched::new();
    for key in refs.keys() {
        let cm: k8s_openapi::api::core::v1::ConfigMap = kube::Api::namespaced(client.clone(), &key.namespace)
            .get(&key.name)
            .await
            .unwrap();
        fetched.insert(
            key,
            std::sync::Arc::new(wave_core::hash::Content::from_config_map(&cm)),
        );
    }
    w.current_hash() == Some(wave_core::hash::config_hash(ns, &refs, &fetched, &Default::default()).as_str())
}

#[tokio::test]
async fn a_secret_value_never_appears_in_logs_events_or_metrics() {
    const CANARY: &str = "canary-7f3c9e1b-do-not-print";
    let (client, ns) = setup("canary").await;
    create_secret(&client, &ns, "creds", json!({"password": CANARY, "other": "x"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--log-level=trace"]).await;
    let spec = pod_spec(
        json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                       {"name": "M", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "missing"}}}]}),
        json!({"volumes": [{"name": "s", "secret": {"secretName": "creds"}}]}),
    );
    for kind in WorkloadKind::BUILT_IN {
        create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    for kind in WorkloadKind::BUILT_IN {
        wait_for("a ConfigMissing warning", TIMEOUT, || async {
            events_for(&client, &ns, &name(kind))
                .await
                .into_iter()
                .find(|(_, r, _)| r == "ConfigMissing")
        })
        .await;
    }
    patch_secret(&client, &ns, "creds", json!({"stringData": {"missing": CANARY}})).await;
    for kind in WorkloadKind::BUILT_IN {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    }
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(CANARY)
    };
    let output = wave.output();
    assert!(
        output.contains("config hash updated"),
        "the log is being captured"
    );
    let (_, metrics) = testenv::http_get(wave.metrics, "/metrics").unwrap();
    let mut events = String::new();
    for kind in WorkloadKind::BUILT_IN {
        for (t, r, n) in events_for(&client, &ns, &name(kind)).await {
            events.push_str(&format!("{t} {r} {n}\n"));
        }
    }
    assert!(events.contains("ConfigChanged"), "events are being read");
    for (what, text) in [("log", &output), ("metrics", &metrics), ("events", &events)] {
        assert!(
            !text.contains(CANARY) && !text.contains(&b64),
            "the Secret value leaked into the {what}"
        );
    }
}

#[tokio::test]
async fn with_a_hash_key_every_hash_is_keyed_and_the_cli_computes_the_same_one() {
    let (client, ns) = setup("hmac").await;
    create_secret(
        &client,
        &ns,
        "wave-hash-key",
        json!({"hash-key": "k3y-for-the-test"}),
    )
    .await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let key_flag = format!("--hash-key-secret={ns}/wave-hash-key");
    let wave = Wave::start(&[&ns], &["--update-rate=inf", &key_flag]).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    let keyed = wait_hash_change(&client, &ns, kind, &name(kind), None).await;

    // `wave hash` over the same objects, with and without the key.
    let manifests = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": ns}, "data": {"a": "1"}},
        body(kind, &name(kind), &opted_in(&[]), &spec).as_object().cloned().map(|mut o| {
            o["metadata"]["namespace"] = json!(ns);
            Value::Object(o)
        }).unwrap(),
    ]})
    .to_string();
    let key_file = std::env::temp_dir().join(format!("wave-hash-key-{ns}"));
    std::fs::write(&key_file, "k3y-for-the-test").unwrap();
    let cli_hash = |extra: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_wave"));
        c.args(["hash", "-o", "json"]).args(extra);
        let out = pipe(c, &manifests);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["hash"].as_str().unwrap().to_string()
    };
    let key_path = key_file.to_string_lossy().into_owned();
    assert_eq!(
        cli_hash(&["--hash-key-file", &key_path]),
        keyed,
        "the CLI and the controller agree"
    );
    assert_ne!(cli_hash(&[]), keyed, "a keyed hash is not the plain SHA-256");
    std::fs::remove_file(&key_file).unwrap();

    let (code, out, err) = run_wave(
        &[
            "explain",
            "deployment/deployment",
            "-n",
            &ns,
            "-o",
            "json",
            &key_flag,
        ],
        Some(&testenv::cluster().kubeconfig()),
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "up-to-date", "{out}");
    wave.expect_writes(1, "one keyed write").await;
}

#[tokio::test]
async fn a_hash_key_secret_that_is_missing_or_empty_stops_wave_at_startup_with_a_clear_error() {
    let (client, ns) = setup("hmac-bad").await;
    create_secret(&client, &ns, "no-key", json!({"other": "x"})).await;
    for (secret, expected) in [
        (
            "absent",
            format!("the hash key Secret {ns}/absent does not exist"),
        ),
        (
            "no-key",
            format!("the hash key Secret {ns}/no-key has no non-empty data key \"hash-key\""),
        ),
    ] {
        let flag = format!("--hash-key-secret={ns}/{secret}");
        let mut wave = Wave::spawn(&testenv::cluster().kubeconfig(), &[&ns], &[&flag]);
        wave.wait_exit("a hash key that cannot be read").await;
        let output = wave.output();
        assert!(output.contains(&expected), "{output}");
        assert!(!output.contains("panicked"), "{output}");
    }
    let (code, _, err) = run_wave(&["run", "--hash-key-secret=no-slash"], None);
    assert_eq!(code, 2);
    assert!(err.contains("\"no-slash\" is not NAMESPACE/NAME"), "{err}");
}

#[tokio::test]
async fn the_binary_names_its_version_and_commit_on_the_command_line_and_in_metrics() {
    let (code, out, err) = run_wave(&["--version"], None);
    assert_eq!(code, 0, "{err}");
    let commit = out
        .split("(commit ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("wave --version names its commit: {out}"));
    assert!(
        out.starts_with(&format!("wave {} (commit ", env!("CARGO_PKG_VERSION"))) && out.contains(", built "),
        "{out}"
    );
    let (_, ns) = setup("build-info").await;
    let wave = Wave::start(&[&ns], &[]).await;
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let commit_label = format!("commit=\"{commit}\"");
    assert_eq!(wave.metric("wave_build_info", &[&version, &commit_label]), 1.0);
    assert!(wave.metric("process_resident_memory_bytes", &[]) > 1.0e6);
    assert!(wave.metric("process_start_time_seconds", &[]) > 1.0e9);
    assert!(wave.metric("process_open_fds", &[]) > 0.0);
    // Every request to the apiserver is counted and timed: the start-up lists are.
    let lists = ["verb=\"list\"", "resource=\"configmaps\"", "code=\"2xx\""];
    assert!(wave.metric("wave_api_requests_total", &lists) >= 1.0);
    assert!(wave.metric("wave_api_request_duration_seconds_count", &lists[..2]) >= 1.0);
    let (_, livez) = testenv::http_get(wave.health, "/livez").unwrap();
    assert_eq!(livez, "ok");
}
