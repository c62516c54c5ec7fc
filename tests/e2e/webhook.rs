//! The admission webhook against the real apiserver, which calls it at `https://127.0.0.1:<port>` through
//! a MutatingWebhookConfiguration scoped to the test's namespace (issue: tests 1–8, plus the gate timeout).

use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use testenv::{cluster, free_port, wait_for};
use wave_core::workload::{Workload, WorkloadKind};
use wave_runtime::api::to_workload;

use crate::harness::*;

const GATE: &str = "wave.pusher.com/config";
const EMPTY_HASH: &str = "100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d";

/// Where wave keeps its webhook's registration and certificate.
struct Names {
    /// The MutatingWebhookConfiguration.
    config: String,
    /// The certificate's Secret and its namespace.
    secret: String,
    secret_namespace: String,
}

impl Names {
    /// A configuration of the test's own, and the default Secret in the test's namespace.
    fn for_test(ns: &str) -> Names {
        Names {
            config: format!("wave-{ns}"),
            secret: "wave-webhook-tls".into(),
            secret_namespace: ns.into(),
        }
    }
}

/// Registers the webhook for `ns` as `config` (no caBundle: wave fills it in) and returns its port.
async fn register(client: &kube::Client, ns: &str, config: &str) -> u16 {
    let port = free_port();
    let hook = |kind: &str, resource: &str| {
        json!({
            "name": format!("{kind}.wave.pusher.com"),
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-apps-v1-{kind}")},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [resource]}],
            "failurePolicy": "Ignore",
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": 2,
            "admissionReviewVersions": ["v1"],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
        })
    };
    let mwc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": config},
        "webhooks": [hook("deployment", "deployments"), hook("statefulset", "statefulsets"), hook("daemonset", "daemonsets")]
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mwc)
        .await
        .unwrap();
    port
}

/// Starts wave with the webhook for `ns`, and waits until the apiserver really calls it.
async fn start(client: &kube::Client, ns: &str, extra: &[&str]) -> Wave {
    start_as(client, &cluster().kubeconfig(), ns, extra).await
}

async fn start_as(client: &kube::Client, kubeconfig: &Path, ns: &str, extra: &[&str]) -> Wave {
    start_named(client, kubeconfig, ns, &Names::for_test(ns), extra).await
}

async fn start_named(
    client: &kube::Client,
    kubeconfig: &Path,
    ns: &str,
    names: &Names,
    extra: &[&str],
) -> Wave {
    let port = register(client, ns, &names.config).await;
    let mut args = vec![
        "--enable-webhook".to_string(),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--webhook-configuration-name={}", names.config),
        format!("--webhook-secret-name={}", names.secret),
        format!("--webhook-secret-namespace={}", names.secret_namespace),
        "--update-rate=inf".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let wave = Wave::start_as(kubeconfig, &[ns], &args).await;
    // A dry-run create comes back hashed once the apiserver trusts the CA and calls the webhook.
    let probe = body(
        WorkloadKind::DEPLOYMENT,
        "probe",
        &opted_in(&[]),
        &pod_spec(json!({}), json!({})),
    );
    let api = workloads(client, ns, WorkloadKind::DEPLOYMENT);
    wait_for("the apiserver to call the webhook", TIMEOUT, || async {
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let d = api
            .create(&pp, &serde_json::from_value(probe.clone()).unwrap())
            .await
            .ok()?;
        let w = to_workload(WorkloadKind::DEPLOYMENT, d).unwrap();
        (w.current_hash() == Some(EMPTY_HASH)).then_some(())
    })
    .await;
    wave
}

/// Creates through the API (so the webhook runs) and returns what the apiserver stored (or, for a
/// dry run, would have stored).
async fn create(
    client: &kube::Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
    annotations: Value,
    spec: Value,
    dry_run: bool,
) -> Workload {
    if dry_run {
        let body = body(kind, name, &annotations, &spec);
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let created = workloads(client, ns, kind)
            .create(&pp, &serde_json::from_value(body).unwrap())
            .await
            .unwrap();
        return to_workload(kind, created).unwrap();
    }
    create_workload(client, ns, kind, name, annotations, spec).await;
    workload(client, ns, kind, name).await
}

/// Creates the opted-in Deployment `name` through the API (see [`create`]).
async fn create_deployment(
    client: &kube::Client,
    ns: &str,
    name: &str,
    spec: Value,
    dry_run: bool,
) -> Workload {
    create(
        client,
        ns,
        WorkloadKind::DEPLOYMENT,
        name,
        opted_in(&[]),
        spec,
        dry_run,
    )
    .await
}

fn uses_cm(cm: &str) -> Value {
    pod_spec(json!({"envFrom": [{"configMapRef": {"name": cm}}]}), json!({}))
}

async fn pods(client: &kube::Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

fn is_gated(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.reason.as_deref() == Some("SchedulingGated"))
}

async fn wait_running(client: &kube::Client, ns: &str, app: &str) {
    wait_for(&format!("{app}'s pods to run"), TIMEOUT, || async {
        pods(client, ns, app).await.iter().any(is_running).then_some(())
    })
    .await;
}

fn is_running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

#[tokio::test]
async fn a_workload_whose_config_exists_gets_its_hash_at_creation_and_one_revision() {
    let (client, ns) = setup("wh-hash").await;
    create_configmap(&client, &ns, "app-config", json!({"a": "b"})).await;
    let wave = start(&client, &ns, &[]).await;
    for kind in WorkloadKind::BUILT_IN {
        let w = create(
            &client,
            &ns,
            kind,
            &name(kind),
            opted_in(&[]),
            uses_cm("app-config"),
            false,
        )
        .await;
        assert_eq!(
            w.current_hash(),
            Some("c723035841cb99a64b7b37c2733cbf07045a0e31d539c67aff2bae20f55bff6b"),
            "{kind}: hash set at creation"
        );
    }
    for kind in WorkloadKind::BUILT_IN {
        assert_eq!(
            settled_revisions(&client, &ns, kind, &name(kind)).await,
            1,
            "{kind}: exactly one revision"
        );
    }
    wait_for("wave to check the three workloads", TIMEOUT, || async {
        (wave.noops() >= 3).then_some(())
    })
    .await;
    assert_eq!(wave.writes(), 0, "the reconciler finds nothing to write");
}

#[tokio::test]
async fn a_workload_created_before_its_configmap_is_held_then_released_without_crash_loops() {
    let (client, ns) = setup("wh-gate").await;
    let _wave = start(&client, &ns, &[]).await;
    held_until_their_configmap_exists(&client, &ns).await;
}

#[tokio::test]
async fn the_charts_rbac_is_enough_for_the_webhook_and_for_releasing_held_pods() {
    let (client, ns) = setup("wh-chart").await;
    let release_ns = testenv::namespace(&client, "wh-chart-release").await;
    let release = format!("w{}", std::process::id());
    let namespaces = format!("namespaces={{{ns}}}");
    let sets = [
        "webhook.enabled=true",
        "rbac.namespaced=true",
        namespaces.as_str(),
    ];
    let kubeconfig = crate::ship::chart_identity(&release, &release_ns, &sets, |_| {});
    let fullname = format!("{release}-wave");
    let names = Names {
        config: fullname.clone(),
        secret: format!("{fullname}-webhook-tls"),
        secret_namespace: release_ns,
    };
    let wave = start_named(&client, &kubeconfig, &ns, &names, &[]).await;
    held_until_their_configmap_exists(&client, &ns).await;
    assert_eq!(
        wave.metric("wave_watch_errors_total", &[]),
        0.0,
        "{}",
        wave.output()
    );
    assert!(!wave.output().contains("forbidden"), "{}", wave.output());
}

/// One workload of each kind, created before the ConfigMap it needs: held by the gate with one Event,
/// then released when the ConfigMap appears, its held pods replaced, and no pod ever restarted.
async fn held_until_their_configmap_exists(client: &kube::Client, ns: &str) {
    let (client, ns) = (client.clone(), ns.to_string());
    for kind in WorkloadKind::BUILT_IN {
        let w = create(
            &client,
            &ns,
            kind,
            &name(kind),
            opted_in(&[]),
            uses_cm("later"),
            false,
        )
        .await;
        assert!(w.has_scheduling_gate(), "{kind}: gated at creation");
        assert_eq!(w.current_hash(), None);
    }
    for kind in WorkloadKind::BUILT_IN {
        let n = name(kind);
        wait_for(
            &format!("{kind}'s pods to be SchedulingGated"),
            TIMEOUT,
            || async {
                let p = pods(&client, &ns, &n).await;
                (!p.is_empty() && p.iter().all(is_gated)).then_some(())
            },
        )
        .await;
    }
    create_configmap(&client, &ns, "later", json!({"k": "v"})).await;
    for kind in WorkloadKind::BUILT_IN {
        let n = name(kind);
        wait_for(&format!("{kind} released"), TIMEOUT, || async {
            let w = workload(&client, &ns, kind, &n).await;
            (!w.has_scheduling_gate() && w.current_hash().is_some()).then_some(())
        })
        .await;
        if kind != WorkloadKind::DEPLOYMENT {
            wait_for(
                &format!("{kind}'s held pods to be deleted and the gate's mark removed"),
                TIMEOUT,
                || async {
                    workload(&client, &ns, kind, &n)
                        .await
                        .gated_at()
                        .is_none()
                        .then_some(())
                },
            )
            .await;
        }
        if kind == WorkloadKind::STATEFUL_SET {
            // A DaemonSet's controller may delete its unavailable pods first; a StatefulSet's never does.
            wait_for("the HeldPodsDeleted Event", TIMEOUT, || async {
                events_for(&client, &ns, &n)
                    .await
                    .iter()
                    .any(|(_, r, _)| r == "HeldPodsDeleted")
                    .then_some(())
            })
            .await;
        }
        assert!(
            workload(&client, &ns, kind, &n).await.gated_at().is_none(),
            "the gate's mark is removed"
        );
        wait_for(&format!("{kind}'s pods to run"), TIMEOUT, || async {
            let p = pods(&client, &ns, &n).await;
            let running: Vec<&Pod> = p.iter().filter(|p| is_running(p)).collect();
            (!running.is_empty()
                && p.iter()
                    .all(|p| is_running(p) || p.metadata.deletion_timestamp.is_some()))
            .then_some(())
        })
        .await;
        for p in pods(&client, &ns, &n).await {
            let restarts: i32 = p
                .status
                .and_then(|s| s.container_statuses)
                .into_iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            assert_eq!(restarts, 0, "no pod ever restarted");
        }
        let missing = events_for(&client, &ns, &n)
            .await
            .into_iter()
            .filter(|(_, r, _)| r == "SchedulingDisabled" || r == "ConfigMissing")
            .count();
        assert_eq!(missing, 1, "{kind}: one Event saying what is missing");
        let what = format!("{kind}'s SchedulingEnabled Event naming the gate");
        wait_event(&client, &ns, &n, &what, |(_, r, n)| {
            r == "SchedulingEnabled" && n.contains(GATE)
        })
        .await;
    }
}

#[tokio::test]
async fn a_missing_required_projected_key_is_held_until_it_is_added() {
    let (client, ns) = setup("wh-key").await;
    create_configmap(&client, &ns, "cfg", json!({"other": "1"})).await;
    let _wave = start(&client, &ns, &[]).await;
    let spec = pod_spec(
        json!({}),
        json!({"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "needed", "path": "n"}]}}]}}]}),
    );
    let w = create_deployment(&client, &ns, "web", spec, false).await;
    assert!(w.has_scheduling_gate());
    let note = wait_for("the SchedulingDisabled Event", TIMEOUT, || async {
        events_for(&client, &ns, "web")
            .await
            .into_iter()
            .find(|(_, r, _)| r == "SchedulingDisabled")
            .map(|e| e.2)
    })
    .await;
    assert!(
        note.contains(&format!("missing required key needed in configmap {ns}/cfg")),
        "{note}"
    );
    patch_configmap(&client, &ns, "cfg", json!({"data": {"needed": "yes"}})).await;
    wait_for("the gate released with the hash", TIMEOUT, || async {
        let w = workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web").await;
        (!w.has_scheduling_gate() && w.current_hash().is_some()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn opting_out_while_gated_releases_the_gate() {
    let (client, ns) = setup("wh-optout").await;
    let _wave = start(&client, &ns, &[]).await;
    let w = create_deployment(&client, &ns, "web", uses_cm("never"), false).await;
    assert!(w.has_scheduling_gate());
    patch_workload(
        &client,
        &ns,
        WorkloadKind::DEPLOYMENT,
        "web",
        json!({"metadata": {"annotations": {OPT_IN: "false"}}}),
    )
    .await;
    let w = wait_for("the gate released", TIMEOUT, || async {
        let w = workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web").await;
        (!w.has_scheduling_gate()).then_some(w)
    })
    .await;
    assert_eq!(w.current_hash(), None, "opting out writes no hash");
    wait_running(&client, &ns, "web").await;
}

#[tokio::test]
async fn a_gate_held_longer_than_the_maximum_is_released_with_a_warning() {
    let (client, ns) = setup("wh-timeout").await;
    let wave = start(&client, &ns, &["--max-gate-duration=2s"]).await;
    create_deployment(&client, &ns, "web", uses_cm("never"), false).await;
    wait_for("the gate to time out", TIMEOUT, || async {
        let w = workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web").await;
        (!w.has_scheduling_gate()).then_some(())
    })
    .await;
    // The Event follows the write that released the gate, so it is waited for, not read on sight.
    wait_for("a GateTimedOut Warning", TIMEOUT, || async {
        events_for(&client, &ns, "web")
            .await
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "GateTimedOut")
            .then_some(())
    })
    .await;
    assert_eq!(
        wave.metric("wave_gates_timed_out_total", &[]),
        1.0,
        "the alert's metric counts it"
    );
}

#[tokio::test]
async fn a_workload_gated_by_wave_with_its_fake_scheduler_is_restored() {
    let (client, ns) = setup("wh-wavegate").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let _wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let mut spec = uses_cm("cfg");
    spec["schedulerName"] = json!("wave.pusher.com/invalid");
    let annotations = opted_in(&[("wave.pusher.com/scheduling-disabled", "default-scheduler")]);
    create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web", annotations, spec).await;
    let w = wait_for("the scheduler restored", TIMEOUT, || async {
        let w = workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web").await;
        let scheduler = w.template.typed().spec.and_then(|s| s.scheduler_name.clone());
        (scheduler.as_deref() == Some("default-scheduler")).then_some(w)
    })
    .await;
    assert!(
        w.wave_gate().is_none(),
        "the scheduling-disabled annotation is removed"
    );
    assert!(
        w.current_hash().is_some(),
        "and the hash is written in the same patch"
    );
    wait_running(&client, &ns, "web").await;
    wait_event(&client, &ns, "web", "a SchedulingEnabled Event", |(_, r, _)| {
        r == "SchedulingEnabled"
    })
    .await;
}

#[tokio::test]
async fn with_wave_stopped_creates_and_updates_still_succeed() {
    let (client, ns) = setup("wh-stopped").await;
    let mut wave = start(&client, &ns, &[]).await;
    wave.kill();
    for kind in WorkloadKind::BUILT_IN {
        let w = create(
            &client,
            &ns,
            kind,
            &name(kind),
            opted_in(&[]),
            uses_cm("absent"),
            false,
        )
        .await;
        assert!(
            !w.has_scheduling_gate(),
            "admitted unmodified while the webhook is down"
        );
        patch_workload(
            &client,
            &ns,
            kind,
            &name(kind),
            json!({"metadata": {"labels": {"updated": "yes"}}}),
        )
        .await;
    }
}

#[tokio::test]
async fn an_internal_error_still_admits_the_object_unmodified() {
    let (client, ns) = setup("wh-error").await;
    create_secret(&client, &ns, "creds", json!({"k": "v"})).await;
    // An identity that may list and watch Secrets but not read them (except its own certificate): the
    // webhook's read of the referenced Secret fails.
    let user = format!("wave-wh-error-{}", std::process::id());
    let config = format!("wave-{ns}");
    let rbac = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: wave, namespace: {ns}}}
rules:
- {{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}}
- {{apiGroups: [""], resources: [secrets], verbs: [list, watch, create]}}
- {{apiGroups: [""], resources: [secrets], resourceNames: [wave-webhook-tls], verbs: [get, update]}}
- {{apiGroups: [apps], resources: [deployments, statefulsets, daemonsets], verbs: [get, list, watch, patch]}}
- {{apiGroups: [events.k8s.io], resources: [events], verbs: [create]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: wave, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: wave}}
subjects: [{{kind: User, name: {user}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {user}}}
rules:
- {{apiGroups: [admissionregistration.k8s.io], resources: [mutatingwebhookconfigurations], resourceNames: [{config}], verbs: [get, patch]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {user}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {user}}}
subjects: [{{kind: User, name: {user}}}]
"#
    );
    let (ok, text) = kubectl_stdin(&["apply", "-f", "-"], &rbac);
    assert!(ok, "{text}");
    let kubeconfig = cluster().user_kubeconfig(&user, None);
    let wave = start_as(&client, &kubeconfig, &ns, &[]).await;
    let spec = pod_spec(json!({"envFrom": [{"secretRef": {"name": "creds"}}]}), json!({}));
    let w = create_deployment(&client, &ns, "web", spec, false).await;
    assert_eq!(w.current_hash(), None, "admitted unmodified");
    assert!(!w.has_scheduling_gate());
    wait_for("the error to be counted", TIMEOUT, || async {
        (wave.metric("wave_webhook_requests_total", &["result=\"error\""]) >= 1.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_dry_run_is_mutated_but_produces_no_event() {
    let (client, ns) = setup("wh-dryrun").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "b"})).await;
    let _wave = start(&client, &ns, &[]).await;
    let gated = create_deployment(&client, &ns, "dry-gated", uses_cm("absent"), true).await;
    assert!(
        gated.has_scheduling_gate(),
        "dry-run requests are mutated like real ones"
    );
    let hashed = create_deployment(&client, &ns, "dry-hashed", uses_cm("cfg"), true).await;
    assert!(hashed.current_hash().is_some());
    // The webhook publishes its Events before it answers, so any would exist by now.
    assert!(events_for(&client, &ns, "dry-gated").await.is_empty());
    assert!(events_for(&client, &ns, "dry-hashed").await.is_empty());
    // The same creates for real do produce them: the check can fail.
    create_deployment(&client, &ns, "real-gated", uses_cm("absent"), false).await;
    // Waited for, not read on sight: the Event's create may still be in flight on a busy apiserver.
    wait_for("the real create's SchedulingDisabled Event", TIMEOUT, || async {
        events_for(&client, &ns, "real-gated")
            .await
            .iter()
            .any(|(_, r, _)| r == "SchedulingDisabled")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn twenty_configmap_and_deployment_pairs_each_applied_at_once_are_never_gated_and_roll_once() {
    let (client, ns) = setup("wh-pairs").await;
    let wave = start(&client, &ns, &[]).await;
    let pairs = 20;
    for i in 0..pairs {
        let name = format!("app-{i}");
        let deployment = body(
            WorkloadKind::DEPLOYMENT,
            &name,
            &opted_in(&[]),
            &uses_cm(&format!("cfg-{i}")),
        );
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("cfg-{i}")}, "data": {"i": i.to_string()}});
        // One apply, the ConfigMap first: as `kubectl apply -f dir/` and `helm install` send them.
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [config_map, deployment]});
        let (ok, out) = kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &list.to_string());
        assert!(ok, "kubectl apply: {out}");
    }
    for i in 0..pairs {
        let name = format!("app-{i}");
        let w = workload(&client, &ns, WorkloadKind::DEPLOYMENT, &name).await;
        assert!(w.current_hash().is_some(), "{name} got its hash at creation");
        assert_eq!(
            settled_revisions(&client, &ns, WorkloadKind::DEPLOYMENT, &name).await,
            1,
            "{name}: one ReplicaSet"
        );
        let warnings: Vec<_> = events_for(&client, &ns, &name)
            .await
            .into_iter()
            .filter(|(t, _, _)| t == "Warning")
            .collect();
        assert!(warnings.is_empty(), "{name}: no Warning: {warnings:?}");
    }
    assert_eq!(
        wave.metric("wave_webhook_requests_total", &["result=\"gated\""]),
        0.0,
        "nothing was gated"
    );
    assert!(wave.metric("wave_webhook_requests_total", &["result=\"hashed\""]) >= pairs as f64);
}

#[tokio::test]
async fn two_replicas_renewing_a_short_lived_certificate_leave_no_admission_unmutated() {
    let (client, ns) = setup("wh-renew").await;
    let names = Names::for_test(&ns);
    // Both replicas are registered, each under its own URL, so the apiserver calls both on every create:
    // an admission that misses either shows as a missing count on that replica.
    let ports = [free_port(), free_port()];
    let hooks: Vec<Value> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            json!({
                "name": format!("deployment-{i}.wave.pusher.com"),
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-apps-v1-deployment")},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}],
                "failurePolicy": "Ignore",
                "sideEffects": "NoneOnDryRun",
                "timeoutSeconds": 2,
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
            })
        })
        .collect();
    let mwc: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": names.config}, "webhooks": hooks})).unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mwc)
        .await
        .unwrap();
    let lease = format!("--leader-election-namespace={ns}");
    let mut replicas = Vec::new();
    for port in ports {
        let args = [
            "--enable-webhook".to_string(),
            format!("--webhook-bind-address=127.0.0.1:{port}"),
            format!("--webhook-configuration-name={}", names.config),
            format!("--webhook-secret-name={}", names.secret),
            format!("--webhook-secret-namespace={}", names.secret_namespace),
            "--webhook-certificate-lifetime=15s".into(),
            "--leader-election".into(),
            lease.clone(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replicas.push(Wave::start(&[&ns], &args).await);
    }

    let api = workloads(&client, &ns, WorkloadKind::DEPLOYMENT);
    let probe = body(
        WorkloadKind::DEPLOYMENT,
        "probe",
        &opted_in(&[]),
        &pod_spec(json!({}), json!({})),
    );
    let dry_run = || async {
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        api.create(&pp, &serde_json::from_value(probe.clone()).unwrap())
            .await
            .expect("dry-run create");
    };
    let answered = |w: &Wave| w.metric("wave_webhook_requests_total", &[]);
    wait_for("the apiserver to call both replicas", TIMEOUT, || async {
        dry_run().await;
        replicas.iter().all(|w| answered(w) > 0.0).then_some(())
    })
    .await;

    let secrets =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &names.secret_namespace);
    let serving = || async {
        let s = secrets.get(&names.secret).await.unwrap();
        s.data.unwrap_or_default().get("tls.crt").map(|b| b.0.clone())
    };
    let before: Vec<f64> = replicas.iter().map(answered).collect();
    let mut seen = vec![serving().await];
    let mut creates = 0.0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    // Admissions go on across two renewals of the serving certificate.
    while seen.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the certificate was renewed {} times in 120 s",
            seen.len() - 1
        );
        dry_run().await;
        creates += 1.0;
        let now = serving().await;
        if seen.last() != Some(&now) {
            seen.push(now);
        }
    }
    // Every replica answered every one of them.
    for (i, (w, b)) in replicas.iter().zip(&before).enumerate() {
        wait_for(
            &format!("replica {i} to count {creates} admissions"),
            TIMEOUT,
            || async { (answered(w) - b >= creates).then_some(()) },
        )
        .await;
        assert_eq!(answered(w) - b, creates, "replica {i} answered every admission");
        assert_eq!(
            w.metric("wave_webhook_requests_total", &["result=\"error\""]),
            0.0
        );
    }
}

#[tokio::test]
async fn with_the_webhook_an_undo_sticks_and_a_later_update_keeps_the_pinned_hash() {
    let (client, ns) = setup("wh-undo").await;
    create_configmap(&client, &ns, "app-config", json!({"a": "1"})).await;
    let wave = start(&client, &ns, &["--min-rollout-interval=0"]).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let first = create_deployment(&client, &ns, "web", uses_cm("app-config"), false).await;
    let h1 = first.current_hash().expect("hashed at creation").to_string();
    wait_for("wave to check the Deployment", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    settled_revisions(&client, &ns, kind, "web").await;
    patch_configmap(&client, &ns, "app-config", json!({"data": {"a": "2"}})).await;
    let h2 = wait_hash_change(&client, &ns, kind, "web", Some(&h1)).await;
    settled_revisions(&client, &ns, kind, "web").await;

    let out = cluster()
        .kubectl()
        .args(["rollout", "undo", "deployment/web", "-n", &ns])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for("the undo pinned", TIMEOUT, || async {
        let w = workload(&client, &ns, kind, "web").await;
        (w.annotations.get("wave.pusher.com/pinned-hash") == Some(&h1)).then_some(())
    })
    .await;
    // Any later update goes through the webhook too: it must keep the pinned hash.
    patch_workload(&client, &ns, kind, "web", json!({"spec": {"replicas": 2}})).await;
    let w = workload(&client, &ns, kind, "web").await;
    assert_eq!(
        w.current_hash(),
        Some(h1.as_str()),
        "the webhook rolled the undo forward"
    );
    assert_ne!(h1, h2);
}
