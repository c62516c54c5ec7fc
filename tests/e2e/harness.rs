//! The e2e harness: runs the real `wave` binary against the shared control plane, one process per test
//! (scoped to the test's namespaces), plus builders for workloads of the three kinds.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testenv::{cluster, free_port, http_get, tolerate_kwok, wait_for};
pub use testenv::{create_configmap, patch_configmap};
use wave_core::workload::{Workload, WorkloadKind, WorkloadRef};

pub const TIMEOUT: Duration = Duration::from_secs(60);
pub const OPT_IN: &str = "wave.pusher.com/update-on-config-change";

/// A running `wave run` process. Killed on drop.
pub struct Wave {
    child: Child,
    pub health: u16,
    pub metrics: u16,
    pub log: PathBuf,
}

impl Wave {
    /// Starts `wave run --namespaces=<namespaces> <extra…>` as cluster-admin and waits for `/readyz`.
    pub async fn start(namespaces: &[&str], extra: &[&str]) -> Wave {
        Self::start_as(&cluster().kubeconfig(), namespaces, extra).await
    }

    /// Same, with another identity.
    pub async fn start_as(kubeconfig: &std::path::Path, namespaces: &[&str], extra: &[&str]) -> Wave {
        let wave = Self::spawn(kubeconfig, namespaces, extra);
        wave.wait_ready().await;
        wave
    }

    /// Starts without waiting for readiness.
    pub fn spawn(kubeconfig: &std::path::Path, namespaces: &[&str], extra: &[&str]) -> Wave {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = std::env::temp_dir().join(format!("wave-e2e-{}-{n}.log", std::process::id()));
        let (health, metrics) = (free_port(), free_port());
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_wave"))
            .arg("run")
            .arg(format!("--namespaces={}", namespaces.join(",")))
            .arg(format!("--health-bind-address=127.0.0.1:{health}"))
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
            .args(
                (!extra.iter().any(|a| a.starts_with("--log-level")))
                    .then_some("--log-level=wave=debug,info"),
            )
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn wave");
        Wave {
            child,
            health,
            metrics,
            log,
        }
    }

    pub async fn wait_ready(&self) {
        let port = self.health;
        wait_for("wave /readyz to answer 200", TIMEOUT, || async move {
            http_get(port, "/readyz").filter(|(s, _)| *s == 200).map(|_| ())
        })
        .await;
    }

    /// The sum of every sample of metric `name` whose labels contain all of `labels` (`k="v"`).
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = http_get(self.metrics, "/metrics").unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter(|l| labels.iter().all(|lab| l.contains(lab)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Writes made (patches that succeeded).
    pub fn writes(&self) -> u64 {
        self.metric("wave_reconciles_total", &["result=\"written\""]) as u64
    }

    /// Waits until wave has counted at least `n` writes, then asserts it counted exactly `n`. (The API
    /// shows a new hash a moment before wave's counter moves, so counts are never read on sight.)
    pub async fn expect_writes(&self, n: u64, why: &str) {
        wait_for(&format!("{n} writes"), TIMEOUT, || async {
            (self.writes() >= n).then_some(())
        })
        .await;
        assert_eq!(self.writes(), n, "{why}");
    }

    /// Reconciles that decided there was nothing to write.
    pub fn noops(&self) -> u64 {
        self.metric("wave_reconciles_total", &["result=\"noop\""]) as u64
    }

    /// Everything the process printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOPs the process (a frozen replica); [`Wave::resume`] sends SIGCONT.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONTs a paused process.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args([format!("-{sig}").as_str(), pid.as_str()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Waits (at most [`TIMEOUT`]) until the process has exited on its own.
    pub async fn wait_exit(&mut self, why: &str) {
        let deadline = std::time::Instant::now() + TIMEOUT;
        while self.is_running() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {TIMEOUT:?} waiting for wave to exit: {why}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Wave {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The admin client and a fresh namespace.
pub async fn setup(prefix: &str) -> (Client, String) {
    let client = cluster().client().await;
    let ns = testenv::namespace(&client, prefix).await;
    (client, ns)
}

pub async fn create_secret(client: &Client, ns: &str, name: &str, string_data: Value) {
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": string_data})).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// Merge-patches a Secret.
pub async fn patch_secret(client: &Client, ns: &str, name: &str, patch: Value) {
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

pub async fn delete_configmap(client: &Client, ns: &str, name: &str) {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A pod spec with one container, tolerating kwok's nodes. `container` is merged into the container.
pub fn pod_spec(container: Value, extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "nginx"});
    merge(&mut c, container);
    let mut spec = json!({"containers": [c]});
    merge(&mut spec, extra);
    let mut typed: PodSpec = serde_json::from_value(spec).unwrap();
    tolerate_kwok(&mut typed);
    serde_json::to_value(typed).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    if let (Value::Object(a), Value::Object(b)) = (a, b) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}

/// The name tests give their workload of `kind`: the kind in lowercase.
pub fn name(kind: WorkloadKind) -> String {
    kind.as_str().to_lowercase()
}

/// The body of a workload of `kind` with one replica, selected by `app: <name>`.
pub fn body(kind: WorkloadKind, name: &str, annotations: &Value, spec: &Value) -> Value {
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": spec});
    let mut spec = json!({"selector": {"matchLabels": {"app": name}}, "template": template});
    if kind != WorkloadKind::DAEMON_SET {
        spec["replicas"] = json!(1);
    }
    if kind == WorkloadKind::STATEFUL_SET {
        spec["serviceName"] = json!(name);
    }
    let info = kind.info();
    json!({"apiVersion": info.api_version, "kind": info.kind,
           "metadata": {"name": name, "annotations": annotations}, "spec": spec})
}

/// The API of `kind` in `ns` (the same dynamic access wave uses).
pub fn workloads(client: &Client, ns: &str, kind: WorkloadKind) -> Api<DynamicObject> {
    wave_runtime::api::workload_api(client, kind, Some(ns))
}

/// Creates a workload of `kind` named `name` with metadata `annotations` and pod `spec`.
pub async fn create_workload(
    client: &Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
    annotations: Value,
    spec: Value,
) {
    let object: DynamicObject = serde_json::from_value(body(kind, name, &annotations, &spec)).unwrap();
    workloads(client, ns, kind)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

/// Creates one workload of every kind, each named after its kind (see [`name`]).
pub async fn create_every_kind(client: &Client, ns: &str, annotations: Value, spec: Value) {
    for kind in WorkloadKind::BUILT_IN {
        create_workload(client, ns, kind, &name(kind), annotations.clone(), spec.clone()).await;
    }
}

/// Merge-patches a workload.
pub async fn patch_workload(client: &Client, ns: &str, kind: WorkloadKind, name: &str, patch: Value) {
    workloads(client, ns, kind)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Deletes a workload.
pub async fn delete_workload(client: &Client, ns: &str, kind: WorkloadKind, name: &str) {
    workloads(client, ns, kind)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// The workload as wave sees it.
pub async fn workload(client: &Client, ns: &str, kind: WorkloadKind, name: &str) -> Workload {
    wave_runtime::api::get_workload(client, &WorkloadRef::new(kind, ns, name))
        .await
        .unwrap()
        .expect("workload exists")
}

/// The hash on the workload's pod template.
pub async fn hash_of(client: &Client, ns: &str, kind: WorkloadKind, name: &str) -> Option<String> {
    workload(client, ns, kind, name)
        .await
        .current_hash()
        .map(str::to_string)
}

/// Waits until the workload's hash is set and differs from `old`; returns it.
pub async fn wait_hash_change(
    client: &Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
    old: Option<&str>,
) -> String {
    wait_for(&format!("a new hash on {kind} {ns}/{name}"), TIMEOUT, || async {
        hash_of(client, ns, kind, name)
            .await
            .filter(|h| Some(h.as_str()) != old)
    })
    .await
}

/// ReplicaSets of a Deployment, ControllerRevisions of a StatefulSet or DaemonSet.
pub async fn revisions(client: &Client, ns: &str, kind: WorkloadKind, name: &str) -> usize {
    let lp = ListParams::default().labels(&format!("app={name}"));
    if kind == WorkloadKind::DEPLOYMENT {
        let api = Api::<ReplicaSet>::namespaced(client.clone(), ns);
        api.list(&lp).await.unwrap().items.len()
    } else {
        let api = Api::<ControllerRevision>::namespaced(client.clone(), ns);
        api.list(&lp).await.unwrap().items.len()
    }
}

/// `(metadata.generation, status.observedGeneration)`.
async fn generations(client: &Client, ns: &str, kind: WorkloadKind, name: &str) -> (i64, Option<i64>) {
    let object = workloads(client, ns, kind).get(name).await.unwrap();
    (
        object.metadata.generation.unwrap_or_default(),
        object
            .data
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64),
    )
}

/// Waits until the workload's controller has acted on its current spec; returns its revision count.
/// (Whether the un-hashed first template got a revision of its own depends on whether its controller
/// synced before wave's write, so counts are taken from a settled state.)
pub async fn settled_revisions(client: &Client, ns: &str, kind: WorkloadKind, name: &str) -> usize {
    wait_for(
        &format!("{kind} {ns}/{name} to observe its generation"),
        TIMEOUT,
        || async {
            let (generation, observed) = generations(client, ns, kind, name).await;
            (observed == Some(generation)).then_some(())
        },
    )
    .await;
    revisions(client, ns, kind, name).await
}

/// Waits until the workload has `n` ReplicaSets or revisions.
pub async fn wait_revisions(client: &Client, ns: &str, kind: WorkloadKind, name: &str, n: usize) {
    wait_for(
        &format!("{n} revisions of {kind} {ns}/{name}"),
        TIMEOUT,
        || async { (revisions(client, ns, kind, name).await == n).then_some(()) },
    )
    .await;
}

/// Opt-in annotations plus `extra`.
pub fn opted_in(extra: &[(&str, &str)]) -> Value {
    let mut m = serde_json::Map::new();
    m.insert(OPT_IN.into(), "true".into());
    for (k, v) in extra {
        m.insert((*k).into(), (*v).into());
    }
    Value::Object(m)
}

/// Events about `name` in `ns` as `(type, reason, note)`.
pub async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// The first Event about `name` in `ns` that `matches` `(type, reason, note)`, waited for: an Event
/// follows the write it reports, so it is never read on sight.
pub async fn wait_event(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    matches: impl Fn(&(String, String, String)) -> bool,
) -> (String, String, String) {
    wait_for(what, TIMEOUT, || async {
        events_for(client, ns, name).await.into_iter().find(&matches)
    })
    .await
}

/// Runs the `wave` binary with `args` (without the caller's `HELM_NAMESPACE`), against the test cluster
/// when `kubeconfig` is given: `(exit code, stdout, stderr)`.
pub fn run_wave(args: &[&str], kubeconfig: Option<&std::path::Path>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wave"));
    cmd.args(args)
        .env_remove("HELM_NAMESPACE")
        .env_remove("KUBECONFIG");
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    let out = cmd.output().expect("run wave");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The hash `wave explain` computes from the workload's current config, on the cluster of `kubeconfig`.
pub fn desired_hash(kubeconfig: &std::path::Path, ns: &str, kind: WorkloadKind, name: &str) -> String {
    let target = format!("{}/{name}", kind.as_str().to_lowercase());
    let (code, out, err) = run_wave(&["explain", &target, "-n", ns, "-o", "json"], Some(kubeconfig));
    assert_eq!(code, 0, "wave explain {target}: {err}");
    let v: Value = serde_json::from_str(&out).expect("wave explain -o json prints JSON");
    v["desired_hash"]
        .as_str()
        .unwrap_or_else(|| panic!("wave explain {target} computed no hash: {out}"))
        .to_string()
}

/// Runs `cmd` with `input` on its stdin and returns its output (stdout and stderr captured).
pub fn pipe(mut cmd: Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::io::Write::write_all(&mut child.stdin.take().expect("piped stdin"), input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// Waits until the apiserver's RBAC authorizer allows `user` to `verb` `resource` in `ns`.
/// NOTE: the authorizer reads Roles and RoleBindings from an informer cache, so a request made
/// right after `kubectl apply` of them can still be refused for a moment
/// (the authorizer runs from a watch-fed cache: https://github.com/kubernetes/kubernetes/pull/34047).
pub async fn wait_authorized(ns: &str, user: &str, verb: &str, resource: &str) {
    let what = format!("RBAC to let {user} {verb} {resource} in {ns}");
    wait_for(&what, TIMEOUT, || async {
        let (allowed, _) = kubectl_stdin(&["auth", "can-i", verb, resource, "-n", ns, "--as", user], "");
        allowed.then_some(())
    })
    .await;
}

/// `kubectl <args>` as cluster-admin with `input` on stdin: whether it succeeded, and what it printed.
pub fn kubectl_stdin(args: &[&str], input: &str) -> (bool, String) {
    let mut c = cluster().kubectl();
    c.args(args);
    let out = pipe(c, input);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `kubectl rollout VERB KIND/NAME -n NS [EXTRA…]` as the cluster admin (a user's `undo`, `pause`,
/// `resume`).
pub fn kubectl_rollout(verb: &str, ns: &str, kind: WorkloadKind, name: &str, extra: &[&str]) {
    let target = format!("{}/{name}", kind.as_str().to_lowercase());
    let out = cluster()
        .kubectl()
        .args(["rollout", verb, &target, "-n", ns])
        .args(extra)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl rollout {verb} {target}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl rollout undo KIND/NAME -n NS`.
pub fn rollout_undo(ns: &str, kind: WorkloadKind, name: &str) {
    kubectl_rollout("undo", ns, kind, name, &[]);
}

/// Makes the apiserver fail (500, "failed calling webhook") every UPDATE (or another operation, with
/// [`FailingWrites::start_for`]) of `resource` (`configmaps`, `deployments`) labelled
/// `wave-e2e/fail-writes: <ns>`: a fail-closed validating webhook whose URL answers nothing (a closed
/// port on 127.0.0.1). A real 5xx, for what wave does when a write fails. Dropped by
/// [`FailingWrites::stop`].
pub struct FailingWrites {
    name: String,
}

impl FailingWrites {
    /// The label that selects the objects whose updates fail.
    pub const LABEL: &'static str = "wave-e2e/fail-writes";

    pub async fn start(client: &Client, ns: &str, group: &str, resource: &str) -> FailingWrites {
        Self::start_for(client, ns, group, resource, "UPDATE").await
    }

    /// The same for `operation` (`CREATE`, `UPDATE`, `DELETE`).
    pub async fn start_for(
        client: &Client,
        ns: &str,
        group: &str,
        resource: &str,
        operation: &str,
    ) -> FailingWrites {
        let name = format!("wave-e2e-fail-{ns}-{resource}-{}", operation.to_lowercase());
        let closed = free_port();
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "fail.wave-e2e.example.com",
                "clientConfig": {"url": format!("https://127.0.0.1:{closed}/fail")},
                "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": [operation],
                           "resources": [resource], "scope": "Namespaced"}],
                "objectSelector": {"matchLabels": {(Self::LABEL): ns}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 1,
            }],
        });
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &webhook_resource());
        api.create(&PostParams::default(), &serde_json::from_value(config).unwrap())
            .await
            .expect("creating the failing webhook");
        FailingWrites { name }
    }

    /// Ends the failures.
    pub async fn stop(self, client: &Client) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &webhook_resource());
        api.delete(&self.name, &DeleteParams::default())
            .await
            .expect("deleting the failing webhook");
    }
}

fn webhook_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ),
        "validatingwebhookconfigurations",
    )
}

/// Applies a CustomResourceDefinition from `testdata/crds` and waits until it is served.
pub async fn install_crd(client: &kube::Client, file: &str, plural_group: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/crds")
        .join(file);
    let yaml = std::fs::read_to_string(&path).unwrap();
    // Tests run at once: two first applies of one CRD would both create it, and one would fail.
    static APPLYING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let applying = APPLYING.lock().unwrap_or_else(|e| e.into_inner());
    let (ok, out) = kubectl_stdin(&["apply", "-f", "-"], &yaml);
    drop(applying);
    assert!(ok, "kubectl apply {file}: {out}");
    let api: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client.clone());
    wait_for(&format!("{plural_group} to be established"), TIMEOUT, || async {
        let crd = api.get(plural_group).await.ok()?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Applies the Secrets Store CSI driver's CustomResourceDefinitions (`testenv::Cluster::install_csi_crds`).
pub async fn install_csi_crds() {
    let installed = tokio::task::spawn_blocking(|| cluster().install_csi_crds())
        .await
        .unwrap();
    installed.unwrap_or_else(|e| panic!("{e}"));
}
