//! Fault injection against a real control plane: an apiserver killed mid-change, a watch expired with
//! `410 Gone`, etcd restarted, a leader frozen past its lease, two replicas racing for a free lease.
//!
//! Each test gets a control plane of its own (a fault would hit every other test otherwise), with the
//! audit log on so that every write wave made can be read back: who made it, when, and which hash it
//! carried. Each test ends with [`Env::assert_invariants`]:
//! - every opted-in workload carries the hash of its current config (as `wave explain` computes it);
//! - no workload was written the same hash twice (no repeated rollout), and its last write is its
//!   current hash (no lost change);
//! - the tests with leader election also check that no replica wrote while another led.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use serde_json::{Value, json};
use testenv::{Cluster, WorkloadPatch, wait_for};
use wave_core::names::CONFIG_HASH;
use wave_core::workload::WorkloadKind;

use crate::harness::*;

/// How long a change made once the apiserver answers `/readyz` may take to reach the workloads.
const AFTER_RESTART: Duration = Duration::from_secs(10);

/// A control plane of the test's own, a client and a namespace on it.
struct Env {
    cluster: Cluster,
    client: Client,
    ns: String,
}

impl Env {
    async fn start(test: &str, apiserver_args: &[&str]) -> Env {
        let dir = std::env::temp_dir().join(format!("wave-fault-{test}-{}", std::process::id()));
        let mut args = vec!["--audit".to_string(), "--nodes=1".to_string()];
        args.extend(apiserver_args.iter().map(|a| format!("--apiserver-arg={a}")));
        let cluster = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Cluster::start_in(dir, &args)
        })
        .await
        .expect("starting the control plane");
        let client = cluster.client().await;
        let ns = testenv::namespace(&client, test).await;
        Env { cluster, client, ns }
    }

    /// A kubeconfig for a cluster-admin named `user`, so the audit log tells replicas apart.
    fn identity(&self, user: &str) -> PathBuf {
        self.cluster.user_kubeconfig(user, Some("system:masters"))
    }

    /// Starts `wave run` for the test's namespace as `user` and waits until it is ready.
    async fn wave(&self, user: &str, extra: &[&str]) -> Wave {
        Wave::start_as(&self.identity(user), &[&self.ns], extra).await
    }

    /// Starts a component again in a blocking task (it returns once the component is ready).
    async fn start_component(&self, component: &'static str) {
        let faults = self.cluster.faults();
        tokio::task::spawn_blocking(move || faults.start(component))
            .await
            .unwrap_or_else(|_| panic!("{component} did not start again"));
    }

    /// Every patch of a workload in the test's namespace by a `wave-*` user, in the order the apiserver
    /// completed them, with the hash each one carried.
    fn writes(&self) -> Vec<WorkloadPatch> {
        let mut writes = self.cluster.workload_patches(&self.ns, CONFIG_HASH);
        writes.retain(|w| w.user.starts_with("wave-"));
        writes
    }

    /// The hash `wave explain` computes from the workload's current config.
    fn desired_hash(&self, kind: WorkloadKind, name: &str) -> String {
        desired_hash(&self.cluster.kubeconfig(), &self.ns, kind, name)
    }

    /// Waits, for at most `timeout`, until every workload carries the hash of its current config.
    async fn wait_current(&self, workloads: &[(WorkloadKind, String)], timeout: Duration) {
        for (kind, name) in workloads {
            let desired = self.desired_hash(*kind, name);
            wait_for(&format!("{kind} {name} to carry {desired}"), timeout, || async {
                (hash_of(&self.client, &self.ns, *kind, name).await.as_deref() == Some(desired.as_str()))
                    .then_some(())
            })
            .await;
        }
    }

    /// The invariants every fault test ends with (module docs).
    async fn assert_invariants(&self, workloads: &[(WorkloadKind, String)]) {
        // The audit log records a write once its response is sent: wait until the current hash's
        // write is in the file before reading it.
        for (kind, name) in workloads {
            let desired = self.desired_hash(*kind, name);
            wait_for(
                &format!("{kind} {name}: its last write in the audit log"),
                TIMEOUT,
                || async {
                    self.writes()
                        .iter()
                        .any(|w| {
                            &w.name == name
                                && w.code == 200
                                && w.annotation.as_deref() == Some(desired.as_str())
                        })
                        .then_some(())
                },
            )
            .await;
        }
        let writes = self.writes();
        for (kind, name) in workloads {
            let desired = self.desired_hash(*kind, name);
            let current = hash_of(&self.client, &self.ns, *kind, name).await;
            assert_eq!(
                current.as_deref(),
                Some(desired.as_str()),
                "{kind} {name} carries the hash of its current config"
            );
            let hashes: Vec<&str> = writes
                .iter()
                .filter(|w| &w.name == name && w.code == 200)
                .filter_map(|w| w.annotation.as_deref())
                .collect();
            let mut distinct = hashes.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                hashes.len(),
                "{kind} {name}: no hash written twice (a repeated rollout); writes: {hashes:?}"
            );
            assert_eq!(
                hashes.last().copied(),
                Some(desired.as_str()),
                "{kind} {name}: the last write is the current hash"
            );
        }
    }
}

/// One workload of every kind reading ConfigMap `cfg` through `envFrom`, each hashed once.
async fn hashed_workloads(env: &Env) -> Vec<(WorkloadKind, String)> {
    create_configmap(&env.client, &env.ns, "cfg", json!({"v": "1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    let mut out = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        create_workload(
            &env.client,
            &env.ns,
            kind,
            &name(kind),
            opted_in(&[]),
            spec.clone(),
        )
        .await;
        out.push((kind, name(kind)));
    }
    for (kind, name) in &out {
        wait_hash_change(&env.client, &env.ns, *kind, name, None).await;
    }
    out
}

/// Sets `cfg`'s value, retrying while the control plane is still coming back.
async fn change_config(env: &Env, value: &str) {
    let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), &env.ns);
    let patch = kube::api::Patch::Merge(json!({"data": {"v": value}}));
    wait_for(&format!("cfg to take the value {value}"), TIMEOUT, || async {
        api.patch("cfg", &kube::api::PatchParams::default(), &patch)
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}

/// Waits until `wave` has counted `n` more watch errors than `before`: its watches are failing and
/// backing off, which is what the fault must have caused before it is lifted.
async fn wait_watch_errors(wave: &Wave, before: f64, n: f64) {
    wait_for("wave's watches to fail and back off", TIMEOUT, || async {
        (wave.metric("wave_watch_errors_total", &[]) >= before + n).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_apiserver_killed_mid_change_loses_nothing_and_a_change_after_it_returns_is_applied_within_seconds()
 {
    let env = Env::start("kill-apiserver", &[]).await;
    // Coalescing off: the figure is how soon the watches return, not the rollout interval.
    let wave = env
        .wave("wave-a", &["--update-rate=inf", "--min-rollout-interval=0"])
        .await;
    let workloads = hashed_workloads(&env).await;
    // The apiserver must get its port back: a port from the ephemeral range can become a retrying
    // client's source port while the apiserver is down, and it then cannot listen on it again.
    let port = env.cluster.api_port();
    assert!(
        port < testenv::ephemeral_range_start(),
        "hack/testenv gave the apiserver port {port}, inside the kernel's ephemeral range"
    );

    change_config(&env, "in flight").await;
    env.cluster.faults().kill("kube-apiserver");
    // `kill` returns only once the whole process is gone: a restart straight after it (S9 restarts so)
    // must find the port free, not held by a thread still tearing the apiserver down.
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "the apiserver's port {port} was still held when hack/testenv kill returned"
    );
    // Five scopes (three kinds, ConfigMaps, Secrets), each failing four times: the backoff has grown.
    let before = wave.metric("wave_watch_errors_total", &[]);
    wait_watch_errors(&wave, before, 20.0).await;
    env.start_component("kube-apiserver").await;
    let ready = Instant::now();
    change_config(&env, "after the restart").await;
    env.wait_current(&workloads, AFTER_RESTART.saturating_sub(ready.elapsed()))
        .await;
    eprintln!(
        "a change made once the apiserver answered /readyz reached every workload in {:?}",
        ready.elapsed()
    );
    env.assert_invariants(&workloads).await;
}

#[tokio::test]
async fn a_watch_expired_with_410_gone_relists_and_loses_no_change() {
    // Without the watch cache, a watch resumes from etcd itself, so a compaction past its
    // resourceVersion answers 410 Gone.
    let env = Env::start("gone", &["--watch-cache=false"]).await;
    let wave = env.wave("wave-a", &["--update-rate=inf"]).await;
    let workloads = hashed_workloads(&env).await;

    // Frozen, wave cannot follow the change; the compaction then removes the history its watches
    // would resume from, and the apiserver restart makes them resume.
    wave.pause();
    change_config(&env, "changed while wave was frozen").await;
    // Writes wave does not watch, so the compaction lands past the last revision wave saw.
    let filler = testenv::namespace(&env.client, "filler").await;
    for i in 0..3 {
        create_configmap(&env.client, &filler, &format!("filler-{i}"), json!({})).await;
    }
    env.cluster.faults().compact_etcd();
    env.cluster.faults().kill("kube-apiserver");
    env.start_component("kube-apiserver").await;
    wave.resume();

    env.wait_current(&workloads, TIMEOUT).await;
    env.assert_invariants(&workloads).await;
    let output = wave.output();
    assert!(
        output.contains("too old resource version") || output.contains("Expired"),
        "the watches resumed from a compacted resourceVersion and were answered 410 Gone:\n{output}"
    );
}

#[tokio::test]
async fn a_restarted_etcd_loses_no_change() {
    let env = Env::start("etcd", &[]).await;
    let wave = env.wave("wave-a", &["--update-rate=inf"]).await;
    let workloads = hashed_workloads(&env).await;

    change_config(&env, "in flight").await;
    env.cluster.faults().kill("etcd");
    env.start_component("etcd").await;
    change_config(&env, "after etcd returned").await;
    env.wait_current(&workloads, TIMEOUT).await;
    env.assert_invariants(&workloads).await;
    drop(wave);
}

/// `--leader-election` flags for a lease named `id` in the test's namespace, lasting 4 s.
fn election(env: &Env, id: &str) -> Vec<String> {
    vec![
        "--update-rate=inf".into(),
        "--leader-election".into(),
        "--leader-election-lease-duration=4".into(),
        format!("--leader-election-id={id}"),
        format!("--leader-election-namespace={}", env.ns),
    ]
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_makes_no_write_after_it_resumes_and_its_successor_writes_once() {
    let env = Env::start("freeze", &[]).await;
    let args = election(&env, "wave");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = env.wave("wave-a", &args).await;
    let mut b = env.wave("wave-b", &args).await;
    let workloads = hashed_workloads(&env).await;
    let a_leads = wait_for("exactly one leader", TIMEOUT, || async {
        let (la, lb) = (a.metric("wave_leader", &[]), b.metric("wave_leader", &[]));
        (la + lb == 1.0).then_some(la == 1.0)
    })
    .await;
    let (leader, standby, leader_user, standby_user) = if a_leads {
        (&mut a, &mut b, "wave-a", "wave-b")
    } else {
        (&mut b, &mut a, "wave-b", "wave-a")
    };

    leader.pause();
    change_config(&env, "changed while the leader was frozen").await;
    env.wait_current(&workloads, TIMEOUT).await;
    let resumed = Timestamp::now();
    leader.resume();
    leader.wait_exit("the old leader notices it lost the lease").await;

    let writes = env.writes();
    let late: Vec<&WorkloadPatch> = writes
        .iter()
        .filter(|w| w.user == leader_user && w.at >= resumed)
        .collect();
    assert!(
        late.is_empty(),
        "the old leader attempted no write after it resumed: {late:?}"
    );
    for (kind, name) in &workloads {
        let by_successor = writes
            .iter()
            .filter(|w| &w.name == name && w.user == standby_user && w.code == 200)
            .count();
        assert_eq!(
            by_successor, 1,
            "{kind} {name}: the new leader wrote the change once"
        );
    }
    assert!(standby.is_running());
    env.assert_invariants(&workloads).await;
}

#[tokio::test]
async fn two_replicas_started_together_on_a_free_lease_never_both_write_in_twenty_rounds() {
    let env = Env::start("race", &[]).await;
    create_configmap(&env.client, &env.ns, "cfg", json!({"v": "0"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(&env.client, &env.ns, kind, "race", opted_in(&[]), spec).await;
    let workloads = [(kind, "race".to_string())];
    for round in 0..20 {
        let args = election(&env, &format!("race-{round}"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let users = [format!("wave-{round}-a"), format!("wave-{round}-b")];
        let configs = [env.identity(&users[0]), env.identity(&users[1])];
        let replicas = [
            Wave::spawn(&configs[0], &[&env.ns], &args),
            Wave::spawn(&configs[1], &[&env.ns], &args),
        ];
        env.wait_current(&workloads, TIMEOUT).await;
        // The audit log records a request once its response is sent, so the write the watch already
        // shows may not be in the file yet: wait for it, never read it on sight.
        let writers = wait_for(
            &format!("round {round}: the write in the audit log"),
            TIMEOUT,
            || async {
                let writers: std::collections::BTreeSet<String> = env
                    .writes()
                    .into_iter()
                    .filter(|w| users.contains(&w.user))
                    .map(|w| w.user)
                    .collect();
                (!writers.is_empty()).then_some(writers)
            },
        )
        .await;
        assert_eq!(
            writers.len(),
            1,
            "round {round}: exactly one replica wrote: {writers:?}"
        );
        let leaders = replicas
            .iter()
            .filter(|r| r.output().contains("became the leader"))
            .count();
        assert_eq!(leaders, 1, "round {round}: exactly one replica led");
        drop(replicas);
        change_config(&env, &format!("round {round}")).await;
    }
    // The last change is applied by a fresh pair.
    let args = election(&env, "race-final");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _wave = env.wave("wave-final", &args).await;
    env.wait_current(&workloads, TIMEOUT).await;
    env.assert_invariants(&workloads).await;
}

#[tokio::test]
async fn a_webhook_whose_config_reads_hang_admits_unmodified_within_its_deadline() {
    let env = Env::start("slow-reads", &[]).await;
    create_configmap(&env.client, &env.ns, "cfg", json!({"v": "1"})).await;
    let port = testenv::free_port();
    let args = [
        "--enable-webhook".to_string(),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--webhook-secret-namespace={}", env.ns),
        "--webhook-configuration-name=unregistered".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let wave = env.wave("wave-a", &args).await;
    // The request the apiserver would send for an opted-in Deployment that reads `cfg`.
    let deployment = body(
        WorkloadKind::DEPLOYMENT,
        "slow",
        &opted_in(&[]),
        &pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({})),
    );
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0b1c", "name": "slow", "namespace": env.ns, "operation": "CREATE",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "userInfo": {"username": "test"}, "object": deployment, "dryRun": false
        }
    });
    // The path the apiserver would call: it carries the token wave keeps in its Secret.
    let secrets = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), &env.ns);
    let token = secrets
        .get("wave-webhook-token")
        .await
        .expect("the path token's Secret");
    let token = String::from_utf8(token.data.unwrap()["token"].0.clone()).unwrap();
    let url = format!("https://127.0.0.1:{port}/mutate-apps-v1-deployment/{token}");
    let call = move || {
        let out = std::process::Command::new("curl")
            .args([
                "-sk",
                "--max-time",
                "10",
                "-H",
                "Content-Type: application/json",
                "-d",
            ])
            .arg(review.to_string())
            .arg(&url)
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("no AdmissionReview back: {text:?}"))
    };

    // etcd frozen: wave reads `cfg` at the version its watch delivered, which the apiserver answers from
    // its watch cache without etcd (docs/behaviour.md, "When wave writes"), so the request is hashed.
    env.cluster.faults().pause("etcd");
    let answer = tokio::task::spawn_blocking(call.clone()).await.expect("join");
    env.cluster.faults().resume("etcd");
    assert!(
        !answer["response"]["patch"].is_null(),
        "hashed from the watch cache while etcd is frozen: {answer}"
    );

    // The apiserver frozen: every read of `cfg` hangs.
    env.cluster.faults().pause("kube-apiserver");
    let started = Instant::now();
    let answer = tokio::task::spawn_blocking(call.clone()).await.expect("join");
    let took = started.elapsed();
    env.cluster.faults().resume("kube-apiserver");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        answer["response"]["patch"].is_null(),
        "admitted unmodified: {answer}"
    );
    assert!(
        took < Duration::from_secs(2),
        "answered inside the apiserver's 2 s timeout, took {took:?}"
    );
    assert_eq!(
        wave.metric("wave_webhook_requests_total", &["result=\"timeout\""]),
        1.0
    );

    // With the apiserver back, the same request is hashed.
    let answer = tokio::task::spawn_blocking(call).await.expect("join");
    assert!(
        !answer["response"]["patch"].is_null(),
        "hashed once reads work: {answer}"
    );
}
