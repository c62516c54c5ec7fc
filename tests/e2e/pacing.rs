//! Pacing and health-gated propagation, with pods that really run on kwok's nodes: at most N rollouts
//! at once (sampled from the Deployments' own status), a bad config halted after the first failures,
//! a fix that rolls everything, and a restart of wave in the middle that loses and repeats nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde_json::{Value, json};
use testenv::{cluster, wait_for};
use wave_core::workload::WorkloadKind;

use crate::harness::*;

const DEPLOY: WorkloadKind = WorkloadKind::DEPLOYMENT;
/// The template annotation kwok's `pod-unready-for-config-hash` stage compares with the config hash
/// (`hack/testenv`).
const UNREADY_HASH: &str = "testenv.wave/unready-config-hash";
/// Propagation across 20 Deployments, a few at a time, takes longer than one change.
const PROPAGATION: std::time::Duration = std::time::Duration::from_secs(240);

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("app-{i:02}")).collect()
}

/// `n` Deployments using ConfigMap `cfg`, each with `progressDeadlineSeconds` and, on its pod template,
/// the config hash kwok is to treat as bad.
async fn create_deployments(client: &kube::Client, ns: &str, n: usize, bad_hash: &str) {
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    for name in names(n) {
        let mut b = body(DEPLOY, &name, &opted_in(&[]), &spec);
        b["spec"]["progressDeadlineSeconds"] = json!(10);
        b["spec"]["template"]["metadata"]["annotations"] = json!({ UNREADY_HASH: bad_hash });
        let object: DynamicObject = serde_json::from_value(b).unwrap();
        workloads(client, ns, DEPLOY)
            .create(&Default::default(), &object)
            .await
            .unwrap();
    }
}

/// Whether a Deployment is still rolling, as `kubectl rollout status` decides it.
fn is_rolling(d: &DynamicObject) -> bool {
    let int = |p: &str| d.data.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let generation = d.metadata.generation.unwrap_or(0);
    int("/status/observedGeneration") < generation
        || int("/status/updatedReplicas") < int("/spec/replicas")
        || int("/status/replicas") > int("/status/updatedReplicas")
        || int("/status/availableReplicas") < int("/status/updatedReplicas")
}

fn hash(d: &DynamicObject) -> Option<&str> {
    d.data
        .pointer("/spec/template/metadata/annotations/wave.pusher.com~1config-hash")
        .and_then(Value::as_str)
}

async fn list(client: &kube::Client, ns: &str) -> Vec<DynamicObject> {
    workloads(client, ns, DEPLOY)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Waits until every Deployment carries `hash` and has finished rolling.
async fn wait_all_done(client: &kube::Client, ns: &str, n: usize, hash: &str) {
    wait_for(
        &format!("{n} Deployments done on {hash}"),
        PROPAGATION,
        || async {
            let all = list(client, ns).await;
            let done = all
                .iter()
                .filter(|d| self::hash(d) == Some(hash) && !is_rolling(d))
                .count();
            (done == n).then_some(())
        },
    )
    .await;
}

/// Waits until every Deployment has a hash and has finished rolling; returns that (shared) hash.
async fn wait_all_hashed(client: &kube::Client, ns: &str, n: usize) -> String {
    wait_for(
        &format!("{n} Deployments hashed and done"),
        PROPAGATION,
        || async {
            let all = list(client, ns).await;
            let first = hash(all.first()?)?.to_string();
            (all.len() == n
                && all
                    .iter()
                    .all(|d| hash(d) == Some(first.as_str()) && !is_rolling(d)))
            .then_some(first)
        },
    )
    .await
}

/// The config hash `wave hash` computes for the Deployments when `cfg` holds `data`.
fn hash_for(ns: &str, data: &str) -> String {
    let manifest = format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg, namespace: {ns}}}
data: {{v: "{data}"}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-00
  namespace: {ns}
  annotations: {{wave.pusher.com/update-on-config-change: "true"}}
spec:
  selector: {{matchLabels: {{app: app-00}}}}
  template:
    metadata: {{labels: {{app: app-00}}}}
    spec:
      containers: [{{name: app, image: nginx, envFrom: [{{configMapRef: {{name: cfg}}}}]}}]
"#
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wave"));
    cmd.args(["hash", "-f", "-"]);
    let out = pipe(cmd, &manifest);
    assert!(
        out.status.success(),
        "wave hash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("wave hash printed no hash: {stdout}"))
        .to_string()
}

/// Samples, from the Deployments' status, the most rolling at once until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    most: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: &kube::Client, ns: &str) -> Self {
        let (stop, most, samples) = (Arc::default(), Arc::default(), Arc::default());
        let (c, n) = (client.clone(), ns.to_string());
        let (s, m, k): (Arc<AtomicBool>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
            (Arc::clone(&stop), Arc::clone(&most), Arc::clone(&samples));
        let task = tokio::spawn(async move {
            // One consistent list per sample: a snapshot of every Deployment at one resourceVersion.
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            while !s.load(Ordering::Relaxed) {
                tick.tick().await;
                let rolling = list(&c, &n).await.iter().filter(|d| is_rolling(d)).count();
                m.fetch_max(rolling, Ordering::Relaxed);
                k.fetch_add(1, Ordering::Relaxed);
            }
        });
        Self {
            stop,
            most,
            samples,
            task,
        }
    }

    /// Stops; returns the most seen rolling at once, and how many samples were taken.
    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        (
            self.most.load(Ordering::Relaxed),
            self.samples.load(Ordering::Relaxed),
        )
    }
}

fn count_with_reason(events: &[(String, String, String)], reason: &str) -> usize {
    events.iter().filter(|(_, r, _)| r == reason).count()
}

#[tokio::test]
async fn twenty_deployments_sharing_a_config_map_roll_at_most_three_at_a_time_even_across_a_restart_of_wave()
{
    let (client, ns) = setup("pace").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "0"})).await;
    let args = [
        "--update-rate=inf",
        "--min-rollout-interval=0",
        "--max-concurrent-rollouts=3",
    ];
    let mut wave = Wave::start(&[&ns], &args).await;
    create_deployments(&client, &ns, 20, "none").await;
    let before = wait_all_hashed(&client, &ns, 20).await;
    let revisions_before: Vec<usize> = {
        let mut r = Vec::new();
        for name in names(20) {
            r.push(settled_revisions(&client, &ns, DEPLOY, &name).await);
        }
        r
    };

    let sampler = Sampler::start(&client, &ns);
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "1"}})).await;
    let after = hash_for(&ns, "1");
    assert_ne!(before, after);
    // Restart wave in the middle: the rollouts in progress are read back from the cluster.
    wait_for("a few Deployments to carry the new hash", PROPAGATION, || async {
        let rolled = list(&client, &ns)
            .await
            .iter()
            .filter(|d| hash(d) == Some(after.as_str()))
            .count();
        (3..20).contains(&rolled).then_some(())
    })
    .await;
    let queued = wave.metric("wave_reconciles_total", &["result=\"queued\""]);
    wave.kill();
    let wave = Wave::start(&[&ns], &args).await;
    wait_all_done(&client, &ns, 20, &after).await;
    let (most, samples) = sampler.finish().await;

    eprintln!("pacing: at most {most} of 20 rolling at once ({samples} samples of their status)");
    assert!(
        samples > 10,
        "the sampler must have watched the propagation ({samples} samples)"
    );
    assert!(
        most <= 3,
        "{most} Deployments rolled at once with --max-concurrent-rollouts=3"
    );
    assert!(
        most >= 2,
        "the propagation never rolled more than {most} at once: pacing was not exercised"
    );
    assert!(queued > 0.0, "some rollouts must have waited for a slot");
    for (name, before) in names(20).iter().zip(revisions_before) {
        let now = settled_revisions(&client, &ns, DEPLOY, name).await;
        assert_eq!(now, before + 1, "{name}: the change must roll it exactly once");
    }
    let queued_events: usize = {
        let mut n = 0;
        for name in names(20) {
            n += count_with_reason(&events_for(&client, &ns, &name).await, "RolloutQueued");
        }
        n
    };
    assert!(
        queued_events > 0,
        "a queued workload is told so with a RolloutQueued Event"
    );
    drop(wave);
}

#[tokio::test]
async fn a_bad_config_rolls_at_most_two_of_twenty_halts_with_events_survives_a_restart_and_a_fix_rolls_all_twenty()
 {
    let (client, ns) = setup("halt").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "good"})).await;
    let bad = hash_for(&ns, "bad");
    let args = [
        "--update-rate=inf",
        "--min-rollout-interval=0",
        "--max-concurrent-rollouts=2",
    ];
    let mut wave = Wave::start(&[&ns], &args).await;
    create_deployments(&client, &ns, 20, &bad).await;
    wait_all_hashed(&client, &ns, 20).await;

    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "bad"}})).await;
    wait_for("the halt on the ConfigMap", PROPAGATION, || async {
        let events = events_for(&client, &ns, "cfg").await;
        events
            .iter()
            .find(|(t, r, _)| t == "Warning" && r == "RolloutHalted")
            .cloned()
    })
    .await;
    wait_for("18 workloads held back", PROPAGATION, || async {
        (wave.metric("wave_rollouts_halted", &[]) == 18.0).then_some(())
    })
    .await;
    let broken: Vec<String> = list(&client, &ns)
        .await
        .iter()
        .filter(|d| hash(d) == Some(bad.as_str()))
        .filter_map(|d| d.metadata.name.clone())
        .collect();
    eprintln!("halt: the bad version reached {broken:?}; 18 held");
    assert!(
        (1..=2).contains(&broken.len()),
        "the bad version reached {broken:?}"
    );
    let held = names(20).into_iter().find(|n| !broken.contains(n)).unwrap();
    let what = format!("{held}'s RolloutHalted Event");
    let (kind, _, note) = wait_event(&client, &ns, &held, &what, |(_, r, _)| r == "RolloutHalted").await;
    assert_eq!(kind, "Warning");
    assert!(
        broken.iter().any(|b| note.contains(b.as_str())),
        "the Event names the failed workload: {note}"
    );
    let kubeconfig = cluster().kubeconfig();
    let (code, out, err) = run_wave(
        &["explain", &format!("deployment/{held}"), "-n", &ns],
        Some(&kubeconfig),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("halted"), "wave explain shows the halt: {out}");
    let (code, out, err) = run_wave(&["impact", "configmap/cfg", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("halted: ConfigMap/"),
        "wave impact shows the halt: {out}"
    );

    // A restarted wave reads the halt back from the cluster: the bad version still rolls nowhere.
    wave.kill();
    let wave = Wave::start(&[&ns], &args).await;
    wait_for("18 workloads held back again", PROPAGATION, || async {
        (wave.metric("wave_rollouts_halted", &[]) == 18.0).then_some(())
    })
    .await;
    assert_eq!(wave.writes(), 0, "nothing is written while the halt holds");

    let good = hash_for(&ns, "fixed");
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "fixed"}})).await;
    wait_all_done(&client, &ns, 20, &good).await;
    wave.expect_writes(20, "the fix rolls every Deployment exactly once")
        .await;
}

/// Three Deployments on ConfigMap `cfg`, pacing 1, then a bad version of `cfg`: one rollout fails,
/// and its halt holds the other two. Returns the client, the namespace, wave and the bad hash.
async fn three_halted(prefix: &str) -> (kube::Client, String, Wave, String) {
    let (client, ns) = setup(prefix).await;
    create_configmap(&client, &ns, "cfg", json!({"v": "good"})).await;
    let bad = hash_for(&ns, "bad");
    let args = [
        "--update-rate=inf",
        "--min-rollout-interval=0",
        "--max-concurrent-rollouts=1",
    ];
    let wave = Wave::start(&[&ns], &args).await;
    create_deployments(&client, &ns, 3, &bad).await;
    wait_all_hashed(&client, &ns, 3).await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "bad"}})).await;
    wait_for("2 workloads held back", PROPAGATION, || async {
        (wave.metric("wave_rollouts_halted", &[]) == 2.0).then_some(())
    })
    .await;
    (client, ns, wave, bad)
}

#[tokio::test]
async fn wave_resume_releases_a_halt_by_hand() {
    let (client, ns, _wave, bad) = three_halted("resume").await;

    let kubeconfig = cluster().kubeconfig();
    let (code, out, err) = run_wave(&["resume", "configmap/cfg", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Released: ConfigMap/"), "{out}");
    // Released, the version rolls on (and, being bad, fails again on the next one and halts again).
    wait_for(
        "the next workload to roll the released version",
        PROPAGATION,
        || async {
            let rolled = list(&client, &ns)
                .await
                .iter()
                .filter(|d| hash(d) == Some(bad.as_str()))
                .count();
            (rolled >= 2).then_some(())
        },
    )
    .await;
    let (code, out, _) = run_wave(&["resume", "secret/none", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0);
    assert!(out.contains("No halted rollout"), "{out}");
}

#[tokio::test]
async fn explain_status_and_impact_report_the_halt_the_controller_holds_a_workload_for_from_the_cluster_not_its_events()
 {
    let (client, ns, wave, bad) = three_halted("explain-halt").await;
    let all = list(&client, &ns).await;
    let failed = all
        .iter()
        .find(|d| hash(d) == Some(bad.as_str()))
        .and_then(|d| d.metadata.name.clone())
        .expect("the rollout that failed");
    let held: Vec<String> = names(3).into_iter().filter(|n| *n != failed).collect();
    // The controller's reason: each held workload is told which workload the version failed on.
    for name in &held {
        let what = format!("{name}'s RolloutHalted Event");
        let (_, _, note) = wait_event(&client, &ns, name, &what, |(_, r, _)| r == "RolloutHalted").await;
        assert!(note.contains(&failed), "the Event names {failed}: {note}");
    }
    // The commands read the halt from the cluster, as the controller does, not from those Events.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    events
        .delete_collection(&Default::default(), &Default::default())
        .await
        .unwrap();
    wait_for("the RolloutHalted Events gone", PROPAGATION, || async {
        for name in &held {
            let events = events_for(&client, &ns, name).await;
            if events.iter().any(|(_, r, _)| r == "RolloutHalted") {
                return None;
            }
        }
        Some(())
    })
    .await;

    let kubeconfig = cluster().kubeconfig();
    for name in &held {
        let target = format!("deployment/{name}");
        let (code, out, err) = run_wave(&["explain", &target, "-n", &ns, "-o", "json"], Some(&kubeconfig));
        assert_eq!(code, 0, "{err}");
        let e: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(e["status"], "halted", "{out}");
        let why = e["reason"].as_str().unwrap();
        assert!(
            why.contains(&format!("failed on Deployment {ns}/{failed}"))
                && why.contains(&format!("wave resume configmap/cfg -n {ns}")),
            "names the halt and how to release it: {why}"
        );
    }
    let (code, out, err) = run_wave(&["status", "-n", &ns, "-o", "json"], Some(&kubeconfig));
    assert_eq!(code, 0, "{err}");
    let states: Vec<Value> = serde_json::from_str(&out).unwrap();
    for s in &states {
        let name = s["workload"].as_str().unwrap().rsplit('/').next().unwrap();
        let halted = held.iter().any(|h| h == name);
        assert_eq!(s["state"] == "halted", halted, "{name}: {out}");
    }
    let (code, out, err) = run_wave(
        &["impact", "configmap/cfg", "-n", &ns, "-o", "json"],
        Some(&kubeconfig),
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    for r in &rows {
        let name = r["workload"].as_str().unwrap().rsplit('/').next().unwrap();
        let holds = r["halted"].as_str().is_some_and(|h| h.contains(&failed));
        assert_eq!(
            holds,
            *name != failed,
            "{name}: the halt holds every workload but the one it failed on: {out}"
        );
    }
    assert_eq!(
        wave.metric("wave_rollouts_halted", &[]),
        2.0,
        "the controller holds them still"
    );
}

/// Creates an opted-in Deployment `name` using ConfigMap `other` and waits for its hash: a sentinel that
/// wave has handled every event before it.
async fn sentinel(client: &kube::Client, ns: &str, name: &str) {
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "other"}}]}),
        json!({}),
    );
    create_workload(client, ns, DEPLOY, name, opted_in(&[]), spec).await;
    wait_hash_change(client, ns, DEPLOY, name, None).await;
}

#[tokio::test]
async fn a_halt_holds_when_the_failed_workload_is_undone_and_then_deleted_until_a_fix() {
    let (client, ns, wave, bad) = three_halted("halt-fixed").await;
    create_configmap(&client, &ns, "other", json!({"v": "1"})).await;
    let with_bad = |all: &[DynamicObject]| -> Vec<String> {
        all.iter()
            .filter(|d| hash(d) == Some(bad.as_str()))
            .filter_map(|d| d.metadata.name.clone())
            .collect()
    };
    let failed = with_bad(&list(&client, &ns).await);
    assert_eq!(failed.len(), 1, "{failed:?}");
    let failed = &failed[0];

    // The usual fix: undo the failed rollout. Its old pods serve again, and the bad version stays
    // halted for the others.
    rollout_undo(&ns, DEPLOY, failed);
    wait_for(
        "the undone Deployment to finish rolling back",
        PROPAGATION,
        || async {
            let all = list(&client, &ns).await;
            let d = all.iter().find(|d| d.metadata.name.as_deref() == Some(failed))?;
            (hash(d) != Some(bad.as_str()) && !is_rolling(d)).then_some(())
        },
    )
    .await;
    sentinel(&client, &ns, "after-undo").await;
    assert!(
        with_bad(&list(&client, &ns).await).is_empty(),
        "no workload rolled the halted version"
    );
    assert_eq!(wave.metric("wave_rollouts_halted", &[]), 2.0);

    delete_workload(&client, &ns, DEPLOY, failed).await;
    sentinel(&client, &ns, "after-delete").await;
    assert!(
        with_bad(&list(&client, &ns).await).is_empty(),
        "no workload rolled the halted version"
    );

    // A new change ends the halt: the fix rolls the two that were held.
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "fixed"}})).await;
    let good = hash_for(&ns, "fixed");
    wait_for("the fix to reach the held workloads", PROPAGATION, || async {
        let all = list(&client, &ns).await;
        let fixed = all
            .iter()
            .filter(|d| d.metadata.name.as_deref().is_some_and(|n| n.starts_with("app-")))
            .filter(|d| hash(d) == Some(good.as_str()))
            .count();
        (fixed == 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_failure_record_a_tenant_forges_for_another_namespace_s_config_halts_nothing_there() {
    let (client, evil) = setup("forged-failure").await;
    let victim = testenv::namespace(&client, "forged-failure-victim").await;
    create_configmap(&client, &victim, "cfg", json!({"level": "v1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_workload(&client, &victim, DEPLOY, "web", opted_in(&[]), spec).await;
    let _wave = Wave::start(
        &[&evil, &victim],
        &["--max-concurrent-rollouts=5", "--update-rate=inf"],
    )
    .await;
    let h1 = wait_hash_change(&client, &victim, DEPLOY, "web", None).await;

    // The tenant, on a workload of their own, records a "failed rollout" of exactly the version the
    // victim writes next (its digest, as wave computes it).
    let next = wave_core::hash::Content::new([("level".to_string(), b"v2".to_vec())].into());
    let key = wave_core::refs::ConfigKey::new(wave_core::refs::ConfigKind::ConfigMap, &victim, "cfg");
    let record = wave_core::pace::Failure {
        hash: "forged".into(),
        why: "forged by a tenant".into(),
        delivered: [(
            wave_core::pace::object_name(&key),
            next.digest(&wave_core::hash::Hashing::Plain),
        )]
        .into(),
    };
    let annotations = json!({(wave_core::names::ROLLOUT_FAILED): record.render()});
    create_workload(
        &client,
        &evil,
        DEPLOY,
        "decoy",
        annotations,
        pod_spec(json!({}), json!({})),
    )
    .await;

    patch_configmap(&client, &victim, "cfg", json!({"data": {"level": "v2"}})).await;
    let h2 = wait_hash_change(&client, &victim, DEPLOY, "web", Some(&h1)).await;
    assert_eq!(h2, desired_hash(&cluster().kubeconfig(), &victim, DEPLOY, "web"));
    let events = events_for(&client, &victim, "web").await;
    assert!(
        !events.iter().any(|(_, r, _)| r == "RolloutHalted"),
        "the victim's rollout was halted by another namespace's record: {events:?}"
    );
}
