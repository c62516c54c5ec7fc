//! The admission webhook against the real apiserver, which calls it at `https://127.0.0.1:<port>` through
//! a MutatingWebhookConfiguration scoped to the test's namespace (issue: tests 1–8, plus the gate timeout).

use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use testenv::{cluster, free_port, wait_for};
use wave_core::workload::{Workload, WorkloadKind};
use wave_runtime::api::to_workload;

use crate::harness::*;

const GATE: &str = "wave.pusher.com/config";
const EMPTY_HASH: &str = "100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d";

/// Where wave keeps its webhook's registration and certificate.
pub(crate) struct Names {
    /// The MutatingWebhookConfiguration.
    pub(crate) config: String,
    /// The certificate's Secret, the path token's, and their namespace.
    pub(crate) secret: String,
    pub(crate) token: String,
    pub(crate) secret_namespace: String,
}

impl Names {
    /// A configuration of the test's own, and the default Secret in the test's namespace.
    fn for_test(ns: &str) -> Names {
        Names {
            config: format!("wave-{ns}"),
            secret: "wave-webhook-tls".into(),
            token: "wave-webhook-token".into(),
            secret_namespace: ns.into(),
        }
    }
}

/// Registers the webhook for `ns` as `config` (no caBundle: wave fills it in) and returns its port.
async fn register(client: &kube::Client, ns: &str, config: &str) -> u16 {
    register_in(client, &[ns], config).await
}

/// Registers the webhook for `namespaces` as `config` and returns its port.
pub(crate) async fn register_in(client: &kube::Client, namespaces: &[&str], config: &str) -> u16 {
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
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}
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

/// Registers two replicas of the webhook for Deployment creates in `ns` as `config`, each under its own
/// URL, so the apiserver calls both on every create; returns their ports.
async fn register_replicas(client: &kube::Client, ns: &str, config: &str) -> [u16; 2] {
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
        serde_json::from_value(json!({"metadata": {"name": config}, "webhooks": hooks})).unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mwc)
        .await
        .unwrap();
    ports
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
    start_on(client, kubeconfig, ns, names, port, extra).await
}

/// Starts wave with the webhook on `port`, already registered as `names.config`, and waits until the
/// apiserver really calls it.
async fn start_on(
    client: &kube::Client,
    kubeconfig: &Path,
    ns: &str,
    names: &Names,
    port: u16,
    extra: &[&str],
) -> Wave {
    start_on_all(client, kubeconfig, &[ns], names, port, extra).await
}

/// The same for wave watching `namespaces`; the apiserver's calls are awaited in the first.
pub(crate) async fn start_on_all(
    client: &kube::Client,
    kubeconfig: &Path,
    namespaces: &[&str],
    names: &Names,
    port: u16,
    extra: &[&str],
) -> Wave {
    let ns = namespaces[0];
    let mut args = vec![
        "--enable-webhook".to_string(),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--webhook-configuration-name={}", names.config),
        format!("--webhook-secret-name={}", names.secret),
        format!("--webhook-token-secret-name={}", names.token),
        format!("--webhook-secret-namespace={}", names.secret_namespace),
        "--update-rate=inf".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let wave = Wave::start_as(kubeconfig, namespaces, &args).await;
    wait_called(client, ns).await;
    wave
}

/// Waits until a dry-run create in `ns` comes back hashed: the apiserver trusts the CA and calls the
/// webhook on the path with the current token.
async fn wait_called(client: &kube::Client, ns: &str) {
    wait_for("the apiserver to call the webhook", TIMEOUT, || async {
        dry_run_hashed(client, ns).await.then_some(())
    })
    .await;
}

/// Whether a dry-run create of an opted-in Deployment without references comes back hashed.
async fn dry_run_hashed(client: &kube::Client, ns: &str) -> bool {
    let probe = body(
        WorkloadKind::DEPLOYMENT,
        "probe",
        &opted_in(&[]),
        &pod_spec(json!({}), json!({})),
    );
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let api = workloads(client, ns, WorkloadKind::DEPLOYMENT);
    match api.create(&pp, &serde_json::from_value(probe).unwrap()).await {
        Ok(d) => to_workload(WorkloadKind::DEPLOYMENT, d).unwrap().current_hash() == Some(EMPTY_HASH),
        Err(_) => false,
    }
}

/// The path token wave keeps in the Secret `name` of `namespace`, once it is there.
pub(crate) async fn path_token(client: &kube::Client, namespace: &str, name: &str) -> String {
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    wait_for(
        &format!("the path token in {namespace}/{name}"),
        TIMEOUT,
        || async {
            let s = secrets.get_opt(name).await.ok()??;
            let t = s.data?.get("token")?.0.clone();
            String::from_utf8(t).ok()
        },
    )
    .await
}

/// The `clientConfig` URL (or service path) of every webhook in `config`.
async fn registered_paths(client: &kube::Client, config: &str) -> Vec<String> {
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(config)
        .await
        .unwrap();
    mwc.webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| {
            let cc = w.client_config;
            cc.url
                .or_else(|| cc.service.and_then(|s| s.path))
                .unwrap_or_default()
        })
        .collect()
}

/// POSTs `review` to the webhook on `port` at `path` as any pod on the network could; the status and
/// the body.
pub(crate) fn post_review(port: u16, path: &str, review: &Value) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sSk", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"])
        .args(["-H", "Content-Type: application/json", "--data-binary", "@-"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(review.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    assert!(
        out.status.success(),
        "curl {path}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (status.trim().parse().unwrap_or(0), body.to_string())
}

/// The AdmissionReview the apiserver would send for a CREATE of `object` in `ns`.
pub(crate) fn review_of(ns: &str, name: &str, object: &Value, dry_run: bool) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6f1c", "name": name, "namespace": ns, "operation": "CREATE",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
            "object": object, "dryRun": dry_run
        }
    })
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
    the_charts_rbac_is_enough("wh-chart", false).await;
}

#[tokio::test]
async fn with_cert_manager_the_charts_rbac_is_enough_to_keep_the_path_token() {
    the_charts_rbac_is_enough("wh-chart-cm", true).await;
}

/// wave runs as the chart's ServiceAccount with the chart's RBAC and its (empty) token Secret, in
/// either certificate mode: it fills in the token, writes the paths (with cert-manager too), and gates
/// and releases workloads without one refusal.
async fn the_charts_rbac_is_enough(tag: &str, cert_manager: bool) {
    let (client, ns) = setup(tag).await;
    let release_ns = testenv::namespace(&client, &format!("{tag}-release")).await;
    let release = format!("{}{}", if cert_manager { "wc" } else { "w" }, std::process::id());
    let namespaces = format!("namespaces={{{ns}}}");
    let mut sets = vec![
        "webhook.enabled=true",
        "rbac.namespaced=true",
        namespaces.as_str(),
    ];
    if cert_manager {
        sets.push("webhook.certManager.enabled=true");
    }
    let kubeconfig = crate::ship::chart_identity(&release, &release_ns, &sets, |_| {});
    let fullname = format!("{release}-wave");
    let names = Names {
        config: fullname.clone(),
        secret: format!("{fullname}-webhook-tls"),
        token: format!("{fullname}-webhook-token"),
        secret_namespace: release_ns.clone(),
    };
    let port = register(&client, &ns, &names.config).await;
    let mut extra = Vec::new();
    if cert_manager {
        // cert-manager's part, played by a wave with every right that issues the certificate and the
        // caBundle and is then stopped (its own token Secret is another one).
        let bootstrap = Names {
            config: names.config.clone(),
            secret: names.secret.clone(),
            token: "bootstrap-token".into(),
            secret_namespace: release_ns.clone(),
        };
        let mut issuer = start_on(&client, &cluster().kubeconfig(), &ns, &bootstrap, port, &[]).await;
        issuer.kill();
        extra.push("--webhook-certificate=secret");
    }
    let wave = start_on(&client, &kubeconfig, &ns, &names, port, &extra).await;
    let token = path_token(&client, &release_ns, &names.token).await;
    for path in registered_paths(&client, &names.config).await {
        assert!(
            path.ends_with(&format!("/{token}")),
            "the chart's token in {path}"
        );
    }
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
- {{apiGroups: [""], resources: [secrets], resourceNames: [wave-webhook-tls, wave-webhook-token], verbs: [get, update]}}
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
    let ports = register_replicas(&client, &ns, &names.config).await;
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

/// The webhook's port, read from the registration wave keeps (`https://127.0.0.1:<port>/…`).
async fn registered_port(client: &kube::Client, config: &str) -> u16 {
    let url = registered_paths(client, config).await.remove(0);
    let authority = url.trim_start_matches("https://").split('/').next().unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_review_posted_without_the_path_token_reveals_nothing_and_publishes_nothing() {
    let (client, ns) = setup("wh-forged").await;
    let names = Names::for_test(&ns);
    let wave = start(&client, &ns, &[]).await;
    let port = registered_port(&client, &names.config).await;
    let token = path_token(&client, &ns, &names.token).await;
    // What a pod on the cluster network would send to learn the hash of one key of the Secret `db` of
    // the namespace under attack, or whether it exists.
    let deployment = |name: &str| {
        body(
            WorkloadKind::DEPLOYMENT,
            name,
            &opted_in(&[]),
            &pod_spec(
                json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}),
                json!({}),
            ),
        )
    };
    let forged = review_of(&ns, "forged", &deployment("forged"), false);
    let wrong = "0".repeat(token.len());
    let paths = [
        "/mutate-apps-v1-deployment".to_string(),
        "/mutate-apps-v1-deployment/".to_string(),
        format!("/mutate-apps-v1-deployment/{wrong}"),
        format!("/mutate-apps-v1-deployment/{}", &token[..token.len() - 1]),
        format!("/mutate-apps-v1-statefulset/{token}/"),
        "/".to_string(),
    ];
    let decided = |w: &Wave| {
        ["hashed", "gated", "unchanged", "error", "timeout"]
            .iter()
            .map(|r| w.metric("wave_webhook_requests_total", &[&format!("result=\"{r}\"")]))
            .sum::<f64>()
    };
    let before = decided(&wave);
    let absent: Vec<(u16, String)> = paths.iter().map(|p| post_review(port, p, &forged)).collect();
    create_secret(&client, &ns, "db", json!({"password": "s3cret"})).await;
    let present: Vec<(u16, String)> = paths.iter().map(|p| post_review(port, p, &forged)).collect();
    for (path, answer) in paths.iter().zip(&absent) {
        assert_eq!(
            answer,
            &(404, String::new()),
            "{path}: a bare 404, no patch, no hash, no gate"
        );
    }
    assert_eq!(
        absent, present,
        "the same answer whether the Secret exists or not"
    );
    assert_eq!(
        decided(&wave),
        before,
        "nothing was decided for a request without the token"
    );
    assert_eq!(
        wave.metric("wave_webhook_requests_total", &["result=\"unauthorized\""]),
        (2 * paths.len()) as f64,
        "each one counted as refused"
    );

    // The same request with the token is answered (the check above can fail), and its Event is the
    // sentinel: none was published for the refused ones.
    let sentinel = review_of(&ns, "sentinel", &deployment("sentinel"), false);
    let (status, answer) = post_review(port, &format!("/mutate-apps-v1-deployment/{token}"), &sentinel);
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert!(
        !answer["response"]["patch"].is_null(),
        "hashed with the token: {answer}"
    );
    wait_event(
        &client,
        &ns,
        "sentinel",
        "the sentinel's ConfigChanged Event",
        |(_, r, _)| r == "ConfigChanged",
    )
    .await;
    assert!(
        events_for(&client, &ns, "forged").await.is_empty(),
        "no Event for a refused request"
    );
    assert!(
        !wave.output().contains(&token),
        "the token never appears in the log"
    );
}

#[tokio::test]
async fn the_registration_carries_the_path_token_and_a_reset_path_is_repaired() {
    let (client, ns) = setup("wh-path").await;
    let names = Names::for_test(&ns);
    let wave = start(&client, &ns, &[]).await;
    let token = path_token(&client, &ns, &names.token).await;
    let paths = registered_paths(&client, &names.config).await;
    assert_eq!(paths.len(), 3);
    for path in &paths {
        assert!(path.ends_with(&format!("/{token}")), "{path} carries the token");
    }
    // As `helm upgrade` without lookup (or `helm template | kubectl apply`) would write them again.
    let reset: Vec<Value> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let old = p.trim_end_matches(&format!("/{token}"));
            json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig/url"), "value": old})
        })
        .collect();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            &names.config,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::<()>::Json(serde_json::from_value(Value::Array(reset)).unwrap()),
        )
        .await
        .unwrap();
    // The apiserver's calls on the token-less path are refused (the object admitted unmodified), and
    // that makes wave repair the registration soon. The apiserver picks the reset up a moment after the
    // patch (it watches webhook configurations), so first wait for such a call: until then a dry run is
    // still hashed through the old path.
    wait_for("a call on the token-less path, refused", TIMEOUT, || async {
        let _ = dry_run_hashed(&client, &ns).await;
        (wave.metric("wave_webhook_requests_total", &["result=\"unauthorized\""]) >= 1.0).then_some(())
    })
    .await;
    wait_for("the registration repaired", TIMEOUT, || async {
        dry_run_hashed(&client, &ns).await.then_some(())
    })
    .await;
    assert_eq!(registered_paths(&client, &names.config).await, paths);
    // A real create through the apiserver gets its hash at creation.
    create_configmap(&client, &ns, "cfg", json!({"a": "b"})).await;
    let w = create_deployment(&client, &ns, "web", uses_cm("cfg"), false).await;
    assert!(w.current_hash().is_some(), "hashed at creation");
}

#[tokio::test]
async fn a_deleted_token_secret_rotates_the_token_and_every_replica_follows() {
    let (client, ns) = setup("wh-rotate").await;
    let names = Names::for_test(&ns);
    let ports = register_replicas(&client, &ns, &names.config).await;
    let mut replicas = Vec::new();
    for port in ports {
        let args = [
            "--enable-webhook".to_string(),
            format!("--webhook-bind-address=127.0.0.1:{port}"),
            format!("--webhook-configuration-name={}", names.config),
            format!("--webhook-secret-namespace={}", names.secret_namespace),
            // The Secrets are re-read every 2 s instead of every 5 minutes.
            "--webhook-certificate-lifetime=20s".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replicas.push(Wave::start(&[&ns], &args).await);
    }
    // The first webhook hashes the object, the second finds it hashed and leaves it unchanged.
    let answered = |w: &Wave| {
        w.metric("wave_webhook_requests_total", &["result=\"hashed\""])
            + w.metric("wave_webhook_requests_total", &["result=\"unchanged\""])
    };
    // Both replicas answer one dry-run create (each counts it before it answers the apiserver).
    let both_answer = || async {
        let before: Vec<f64> = replicas.iter().map(answered).collect();
        dry_run_hashed(&client, &ns).await;
        replicas
            .iter()
            .zip(&before)
            .all(|(w, b)| answered(w) > *b)
            .then_some(())
    };
    wait_for("both replicas to answer", TIMEOUT, both_answer).await;
    let first = path_token(&client, &ns, &names.token).await;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .delete(&names.token, &Default::default())
        .await
        .unwrap();
    let second = wait_for("a new token", TIMEOUT, || async {
        let t = path_token(&client, &ns, &names.token).await;
        (t != first).then_some(t)
    })
    .await;
    wait_for("both paths to carry the new token", TIMEOUT, || async {
        registered_paths(&client, &names.config)
            .await
            .iter()
            .all(|p| p.ends_with(&format!("/{second}")))
            .then_some(())
    })
    .await;
    // Each replica serves the new token once it has re-read the Secret: until then its admissions are
    // refused (and admitted unmodified), so this is waited for.
    wait_for("both replicas to answer on the new token", TIMEOUT, both_answer).await;
    for w in &replicas {
        assert!(!w.output().contains(&first) && !w.output().contains(&second));
    }
}

#[tokio::test]
async fn a_helm_upgrade_keeps_the_path_token_wave_wrote() {
    let (client, ns) = setup("wh-upgrade").await;
    let chart = testenv::repo_root().join("charts/wave");
    // The chart's webhook only for a namespace nobody writes to: its pods on kwok never answer.
    let selects = format!("namespaces={{{ns}-none}}");
    for helm in ["helm3", "helm4"] {
        let release_ns = testenv::namespace(&client, &format!("wh-{helm}")).await;
        let release = format!("{helm}-{}", std::process::id());
        let home = std::env::temp_dir().join(format!("{release}-home"));
        let run = |verb: &str| {
            let mut c = std::process::Command::new(testenv::helm_bin_dir().join(helm));
            c.args([verb, &release]);
            if verb != "uninstall" {
                c.arg(chart.to_str().unwrap());
                c.args(["--set", "webhook.enabled=true", "--set", &selects]);
            }
            let out = c
                .args(["-n", &release_ns])
                .env("KUBECONFIG", cluster().kubeconfig())
                .env("HELM_CONFIG_HOME", &home)
                .env("HELM_CACHE_HOME", &home)
                .env("HELM_DATA_HOME", &home)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{helm} {verb}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run("install");
        let fullname = format!("{release}-wave");
        let names = Names {
            config: fullname.clone(),
            secret: format!("{fullname}-webhook-tls"),
            token: format!("{fullname}-webhook-token"),
            secret_namespace: release_ns.clone(),
        };
        let args = [
            "--enable-webhook".to_string(),
            format!("--webhook-bind-address=127.0.0.1:{}", free_port()),
            format!("--webhook-configuration-name={}", names.config),
            format!("--webhook-secret-name={}", names.secret),
            format!("--webhook-token-secret-name={}", names.token),
            format!("--webhook-secret-namespace={}", names.secret_namespace),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let wave = Wave::start(&[&ns], &args).await;
        let token = path_token(&client, &release_ns, &names.token).await;
        let tokened = || async {
            registered_paths(&client, &names.config)
                .await
                .iter()
                .all(|p| p.ends_with(&format!("/{token}")))
        };
        wait_for("wave to write the paths", TIMEOUT, || async {
            tokened().await.then_some(())
        })
        .await;
        // Helm 4 applies server-side: a path it renders differently from the one wave wrote would be a
        // conflict that fails the upgrade.
        run("upgrade");
        assert!(tokened().await, "{helm} upgrade kept the token in every path");
        drop(wave);
        run("uninstall");
    }
}

#[tokio::test]
async fn an_update_that_drops_the_hash_of_a_held_workload_keeps_the_hash_it_had() {
    let (client, ns) = setup("wh-held").await;
    create_configmap(&client, &ns, "cfg", json!({"v": "1"})).await;
    let wave = start(&client, &ns, &["--min-rollout-interval=1h"]).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let w = create_deployment(&client, &ns, "app", uses_cm("cfg"), false).await;
    let first = w.current_hash().expect("hashed at creation").to_string();
    // The first change rolls at once; the next falls within the hour, and waits.
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "2"}})).await;
    let rolled = wait_hash_change(&client, &ns, kind, "app", Some(&first)).await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"v": "3"}})).await;
    wait_for("wave to hold the second change", TIMEOUT, || async {
        (wave.metric("wave_reconciles_total", &["result=\"coalesced\""]) > 0.0).then_some(())
    })
    .await;

    // A `helm upgrade` renders the template without wave's annotation (its three-way merge removes
    // it), with a new annotation of its own: the webhook must not roll the held change with it.
    let annotation = wave_core::names::CONFIG_HASH;
    let upgrade = json!({"spec": {"template": {"metadata": {"annotations": {
        annotation: null,
        "example.com/release": "2",
    }}}}});
    patch_workload(&client, &ns, kind, "app", upgrade).await;
    let after = workload(&client, &ns, kind, "app").await;
    assert_eq!(
        after.current_hash(),
        Some(rolled.as_str()),
        "the update keeps the hash the Deployment had; the held change rolls when it may"
    );
}

/// The certificate's Secret and its owner reference, once wave is up.
async fn certificate_secret(client: &kube::Client, names: &Names) -> Secret {
    Api::<Secret>::namespaced(client.clone(), &names.secret_namespace)
        .get(&names.secret)
        .await
        .expect("the certificate's Secret")
}

#[tokio::test]
async fn a_certificate_secret_from_before_owners_is_adopted_by_waves_deployment_keeping_its_certificate_and_labels()
 {
    let (client, ns) = setup("wh-owner").await;
    let names = Names::for_test(&ns);
    let port = register(&client, &ns, &names.config).await;
    let kubeconfig = cluster().kubeconfig();
    // As an older wave left it: issued, with no owner; someone labelled it since.
    let old = start_on(&client, &kubeconfig, &ns, &names, port, &[]).await;
    drop(old);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    secrets
        .patch(
            &names.secret,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"team": "platform"}}})),
        )
        .await
        .expect("label the Secret");
    let before = certificate_secret(&client, &names).await;
    assert!(before.metadata.owner_references.is_none());

    // wave's "own Deployment", in another namespace: never its owner there (the garbage collector
    // would look for it in the Secret's namespace, and delete the Secret).
    let elsewhere = testenv::namespace(&client, "wh-owner-elsewhere").await;
    let spec = pod_spec(json!({}), json!({}));
    create_workload(
        &client,
        &elsewhere,
        WorkloadKind::DEPLOYMENT,
        "wave",
        json!({}),
        spec.clone(),
    )
    .await;
    let own = format!("--own-deployment={elsewhere}/wave");
    let wave = start_on(&client, &kubeconfig, &ns, &names, port, &[&own]).await;
    drop(wave);
    assert_eq!(
        certificate_secret(&client, &names)
            .await
            .metadata
            .owner_references,
        None,
        "a Deployment in another namespace was made the Secret's owner"
    );

    // Its Deployment in the Secret's namespace adopts it, certificate and label unchanged.
    create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, "wave", json!({}), spec).await;
    let uid = workloads(&client, &ns, WorkloadKind::DEPLOYMENT)
        .get("wave")
        .await
        .expect("the Deployment")
        .metadata
        .uid
        .expect("a uid");
    let own = format!("--own-deployment={ns}/wave");
    let _wave = start_on(&client, &kubeconfig, &ns, &names, port, &[&own]).await;
    // The certificate is checked before the webhook serves, so the adoption is done by now.
    let after = certificate_secret(&client, &names).await;
    let owners = after.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(
        owners
            .iter()
            .map(|r| (r.kind.as_str(), r.name.as_str(), r.uid.as_str()))
            .collect::<Vec<_>>(),
        [("Deployment", "wave", uid.as_str())]
    );
    assert_eq!(after.data, before.data, "the certificate was issued again");
    assert_eq!(
        after
            .metadata
            .labels
            .and_then(|l| l.get("team").cloned())
            .as_deref(),
        Some("platform"),
        "the label someone put on it was lost"
    );
}

#[tokio::test]
async fn an_adoption_the_apiserver_refuses_only_warns_and_wave_serves_the_certificate_as_it_was() {
    let (client, ns) = setup("wh-owner-refused").await;
    let names = Names::for_test(&ns);
    let port = register(&client, &ns, &names.config).await;
    let kubeconfig = cluster().kubeconfig();
    drop(start_on(&client, &kubeconfig, &ns, &names, port, &[]).await);
    // Every update of the certificate's Secret now fails with a 500.
    Api::<Secret>::namespaced(client.clone(), &ns)
        .patch(
            &names.secret,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {(FailingWrites::LABEL): &ns}}})),
        )
        .await
        .expect("label the Secret");
    let failing = FailingWrites::start(&client, &ns, "", "secrets").await;
    let before = certificate_secret(&client, &names).await;
    create_workload(
        &client,
        &ns,
        WorkloadKind::DEPLOYMENT,
        "wave",
        json!({}),
        pod_spec(json!({}), json!({})),
    )
    .await;

    // It starts and serves all the same (the apiserver calls it), with the certificate it had.
    let own = format!("--own-deployment={ns}/wave");
    let wave = start_on(&client, &kubeconfig, &ns, &names, port, &[&own]).await;
    let after = certificate_secret(&client, &names).await;
    assert_eq!(after.metadata.owner_references, None);
    assert_eq!(after.data, before.data, "the certificate changed");
    let log = wave.output();
    assert!(
        log.contains("cannot make wave's Deployment the owner of the webhook certificate's Secret"),
        "{log}"
    );
    // The Secret's key is nowhere in what wave said about it.
    let key = String::from_utf8(before.data.expect("data")["tls.key"].0.clone()).expect("PEM");
    let body = key.lines().nth(1).expect("a line of the key");
    assert!(!log.contains(body), "wave logged the certificate's key");
    failing.stop(&client).await;
}
