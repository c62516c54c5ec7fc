//! Test support: one real control plane (`hack/testenv`) per test binary, started lazily, and helpers
//! to use it (a client, a fresh namespace per test, condition waits with timeouts, kwok tolerations).
//!
//! ```text
//! test binary ──stdin pipe──► supervisor (own process group)
//!                               hack/testenv up DIR   → prints "up"
//!                               read stdin until EOF  ← the test binary exits, however it exits
//!                               hack/testenv down DIR → stops exactly the PIDs in DIR/pids
//! ```
//!
//! The supervisor is what makes teardown reliable: statics are never dropped, and a panicking,
//! interrupted or SIGKILLed test binary cannot run cleanup code, but its pipe always closes.
//! Set `TESTENV_DIR` to the directory of a cluster started with `make cluster` to reuse it instead.

use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PodSpec, Toleration};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A running control plane.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    /// Held open for the life of the process; its close tells the supervisor to tear down.
    _supervisor: Option<Mutex<(Child, ChildStdin)>>,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static REAL_NODE: OnceLock<Result<Cluster, NoNode>> = OnceLock::new();

/// Why a test binary has no real node: a reason to skip, or a start that failed (remembered, so that
/// every later test fails with it instead of starting another node in its place).
enum NoNode {
    Skip(String),
    Failed(String),
}

/// Why a machine has no real node that tests may skip for: anything else is a failure to fix.
const SKIPPABLE: [&str; 2] = ["not root", "not Linux"];

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testenv/ has a parent")
        .to_path_buf()
}

/// The control plane of this test binary, started on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| match std::env::var_os("TESTENV_DIR") {
        Some(dir) => Cluster::existing(PathBuf::from(dir)),
        None => Cluster::start(),
    })
}

/// A control plane of its own with a real node (`hack/testenv up --real-node --nodes 0`), started on
/// first use and shared by the test binary; or why this machine cannot have one.
///
/// Only "not root" and "not Linux" are reasons to skip: any other (a missing package, a failed
/// build, a node that never became Ready) panics, so that CI fails where the node should run.
fn real_node() -> Result<&'static Cluster, String> {
    let node = REAL_NODE.get_or_init(|| match real_node_unsupported() {
        Some(why) => Err(NoNode::Skip(why)),
        None => {
            let dir = private_dir("wave-real-node");
            std::panic::catch_unwind(|| Cluster::start_in(dir, &["--real-node", "--nodes", "0"])).map_err(
                |e| {
                    NoNode::Failed(
                        e.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default(),
                    )
                },
            )
        }
    });
    match node {
        Ok(cluster) => Ok(cluster),
        Err(NoNode::Skip(why)) => Err(why.clone()),
        Err(NoNode::Failed(why)) => panic!("the real node of this test binary did not start: {why}"),
    }
}

/// A new directory under the temporary directory that only this user may enter: `hack/testenv down`
/// acts as root on what a real node's DIR records, so it must not be one someone else made first.
pub fn private_dir(prefix: &str) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
    dir
}

/// Why this machine cannot run a real node (`hack/testenv node-unsupported`), if it cannot; panics
/// when the reason is not one to skip for.
pub fn real_node_unsupported() -> Option<String> {
    let out = Command::new(repo_root().join("hack/testenv"))
        .arg("node-unsupported")
        .output()
        .expect("hack/testenv node-unsupported");
    let why = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if why.is_empty() {
        return None;
    }
    assert!(
        SKIPPABLE.contains(&why.as_str()),
        "this machine should run a real node, but: {why}"
    );
    Some(why)
}

/// The real node, or `None` after printing "skipped: no real node: <why>" for the test `name`.
pub fn real_node_or_skip(name: &str) -> Option<&'static Cluster> {
    match real_node() {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            eprintln!("{name}: skipped: no real node: {why}");
            None
        }
    }
}

fn read_env(dir: &Path, key: &str) -> Option<String> {
    let env = std::fs::read_to_string(dir.join("env")).ok()?;
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
}

impl Cluster {
    fn existing(dir: PathBuf) -> Self {
        let bin = read_env(&dir, "TESTENV_BIN").unwrap_or_else(|| {
            panic!(
                "TESTENV_DIR={} holds no running cluster (no env file)",
                dir.display()
            )
        });
        Self {
            dir,
            bin: bin.into(),
            _supervisor: None,
        }
    }

    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("wave-testenv-{}", std::process::id()));
        Self::start_in(dir, &[])
    }

    /// Starts a control plane of its own in `dir` with extra `hack/testenv up` arguments (e.g.
    /// `--audit`). It is torn down by [`Cluster::stop`], or when this process exits.
    pub fn start_in(dir: PathBuf, up_args: &[&str]) -> Self {
        let script = repo_root().join("hack/testenv");
        let mut child = std::os::unix::process::CommandExt::process_group(
            Command::new("sh")
                .arg("-c")
                .arg(r#"d=$1; shift; "$0" up "$d" "$@" >&2 && echo up || echo failed; cat >/dev/null; exec "$0" down "$d""#)
                .arg(&script)
                .arg(&dir)
                .args(up_args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
            0,
        )
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("reading the supervisor's status");
        if line.trim() != "up" {
            // Its `down` runs once stdin closes: wait for it, so that nothing of the failed start is
            // left running when the panic below is caught.
            drop(stdin);
            let _ = child.wait();
            panic!("hack/testenv up {} failed; its output is above", dir.display());
        }
        let bin = read_env(&dir, "TESTENV_BIN").expect("the env file written by up");
        Self {
            dir,
            bin: bin.into(),
            _supervisor: Some(Mutex::new((child, stdin))),
        }
    }

    /// Tears the control plane down and waits until it is gone.
    pub fn stop(self) {
        if let Some(supervisor) = self._supervisor {
            let (mut child, stdin) = supervisor.into_inner().unwrap_or_else(|e| e.into_inner());
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// The run directory (logs in `logs/`, PIDs in `pids`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The apiserver's port on 127.0.0.1, as `hack/testenv up` wrote it to `api-port`.
    pub fn api_port(&self) -> u16 {
        let text = std::fs::read_to_string(self.dir.join("api-port"))
            .unwrap_or_else(|e| panic!("reading {}/api-port: {e}", self.dir.display()));
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{}/api-port holds {text:?}: {e}", self.dir.display()))
    }

    /// The cluster-admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Path of a testenv binary (`kubectl`, `kube-apiserver`, …).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// `kubectl` with the admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.bin("kubectl"));
        c.arg("--kubeconfig").arg(self.kubeconfig());
        c
    }

    /// Installs the Secrets Store CSI driver's CustomResourceDefinitions, from the driver's Go module at
    /// the version `hack/testenv csi-crds` pins, and waits until they are served.
    pub fn install_csi_crds(&self) -> Result<(), String> {
        let out = Command::new(repo_root().join("hack/testenv"))
            .arg("csi-crds")
            .output()
            .map_err(|e| format!("running hack/testenv csi-crds: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "hack/testenv csi-crds: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // Tests run at once: two first applies of one CRD would both create it, and one would fail.
        static APPLYING: Mutex<()> = Mutex::new(());
        let _applying = APPLYING.lock().unwrap_or_else(|e| e.into_inner());
        for args in [
            vec!["apply", "-f", &dir],
            vec!["wait", "--for=condition=Established", "--timeout=60s", "-f", &dir],
        ] {
            let out = self
                .kubectl()
                .args(&args)
                .output()
                .map_err(|e| format!("kubectl: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "kubectl {}: {}",
                    args[0],
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }

    /// A client authenticated as cluster-admin.
    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig()).await
    }

    /// Issues a client certificate for `user` (in `group`, if any) and returns its kubeconfig.
    pub fn user_kubeconfig(&self, user: &str, group: Option<&str>) -> PathBuf {
        let mut c = Command::new(repo_root().join("hack/testenv"));
        c.arg("user").arg(&self.dir).arg(user);
        if let Some(g) = group {
            c.arg(g);
        }
        let out = c.output().expect("hack/testenv user");
        assert!(
            out.status.success(),
            "hack/testenv user failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    }

    /// Imports an OCI archive (`hack/oci-image`) into the real node's runtime.
    pub fn import_image(&self, archive: &Path) {
        let out = Command::new(repo_root().join("hack/testenv"))
            .arg("import")
            .arg(&self.dir)
            .arg(archive)
            .output()
            .expect("hack/testenv import");
        assert!(
            out.status.success(),
            "hack/testenv import {} failed: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The recorded `(component, pid)` pairs.
    pub fn pids(&self) -> Vec<(String, u32)> {
        std::fs::read_to_string(self.dir.join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (name, pid) = l.split_once(' ')?;
                Some((name.to_string(), pid.parse().ok()?))
            })
            .collect()
    }

    /// The fault controls of this cluster: a handle that can be moved into a blocking task.
    pub fn faults(&self) -> Faults {
        Faults {
            dir: self.dir.clone(),
        }
    }

    /// Every patch of an apps/v1 workload in `namespace` that completed, from the audit log (clusters
    /// started with `--audit`, whose policy logs these request bodies), in the order the apiserver
    /// completed them. `annotation` is the pod-template annotation to read from each patch.
    pub fn workload_patches(&self, namespace: &str, annotation: &str) -> Vec<WorkloadPatch> {
        std::fs::read_to_string(self.dir.join("logs/audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete" && e["verb"] == "patch")
            .filter(|e| e["objectRef"]["apiGroup"] == "apps" && e["objectRef"]["namespace"] == namespace)
            .map(|e| WorkloadPatch {
                user: e["user"]["username"].as_str().unwrap_or_default().to_string(),
                name: e["objectRef"]["name"].as_str().unwrap_or_default().to_string(),
                code: e["responseStatus"]["code"].as_u64().unwrap_or_default() as u16,
                at: e["stageTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse().ok())
                    .expect("audit events carry a stageTimestamp"),
                annotation: e["requestObject"]
                    .pointer("/spec/template/metadata/annotations")
                    .and_then(|a| a.get(annotation))
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string),
            })
            .collect()
    }

    /// `Err` with the log tail of every component that is no longer running.
    pub fn health(&self) -> Result<(), String> {
        let dead: Vec<String> = self
            .pids()
            .into_iter()
            .filter(|(_, pid)| !is_alive(*pid))
            .map(|(name, _)| {
                let log = std::fs::read_to_string(self.dir.join("logs").join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                format!(
                    "{name} is not running; last lines of its log:\n{}",
                    tail.join("\n")
                )
            })
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(dead.join("\n\n"))
        }
    }
}

/// One patch of a workload, as the audit log shows it.
#[derive(Clone, Debug)]
pub struct WorkloadPatch {
    /// Who sent it.
    pub user: String,
    /// The workload's name.
    pub name: String,
    /// The response code.
    pub code: u16,
    /// When the apiserver completed it.
    pub at: k8s_openapi::jiff::Timestamp,
    /// The value it set for the annotation asked for, if it set one.
    pub annotation: Option<String>,
}

/// The fault controls of one cluster (`hack/testenv kill|start|pause|resume|compact`). Each call
/// returns once the command has finished, and panics with its error output when it fails.
#[derive(Clone, Debug)]
pub struct Faults {
    dir: PathBuf,
}

impl Faults {
    fn control(&self, verb: &str, args: &[&str]) -> String {
        let out = Command::new(repo_root().join("hack/testenv"))
            .arg(verb)
            .arg(&self.dir)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run hack/testenv {verb}: {e}"));
        assert!(
            out.status.success(),
            "hack/testenv {verb} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// SIGKILLs one component (`etcd`, `kube-apiserver`, …) and waits until every thread of it is
    /// gone, so that its ports are free again when this returns.
    pub fn kill(&self, component: &str) {
        self.control("kill", &[component]);
    }

    /// Starts a killed component again with its command line; returns once it is ready (for the
    /// apiserver: once `/readyz` answers `ok`).
    pub fn start(&self, component: &str) {
        self.control("start", &[component]);
    }

    /// SIGSTOPs one component; [`Faults::resume`] sends SIGCONT.
    pub fn pause(&self, component: &str) {
        self.control("pause", &[component]);
    }

    /// SIGCONTs a paused component.
    pub fn resume(&self, component: &str) {
        self.control("resume", &[component]);
    }

    /// Compacts etcd up to its current revision, which it returns: a watch that resumes from an older
    /// resourceVersion then gets `410 Gone` (with the apiserver's watch cache off).
    pub fn compact_etcd(&self) -> u64 {
        let rev = self.control("compact", &[]);
        rev.parse()
            .unwrap_or_else(|_| panic!("hack/testenv compact printed {rev:?}, not a revision"))
    }
}

/// The `promtool` binary, built from its pinned Go module on first use (`hack/testenv build-tool`).
pub fn promtool() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(repo_root().join("hack/testenv"))
            .args(["build-tool", "promtool"])
            .stderr(Stdio::inherit())
            .output()
            .expect("hack/testenv build-tool promtool");
        assert!(
            out.status.success(),
            "hack/testenv build-tool promtool failed; its output is above"
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .join("promtool")
}

/// The directory holding `helm3` and `helm4`, built from their pinned Go modules on first use.
pub fn helm_bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(repo_root().join("hack/testenv"))
            .arg("build-helm")
            .stderr(Stdio::inherit())
            .output()
            .expect("hack/testenv build-helm");
        assert!(
            out.status.success(),
            "hack/testenv build-helm failed; its output is above"
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// A client for a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("readable kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    Client::try_from(config).expect("client")
}

/// Whether `pid` runs (exists and is not a zombie; `kill -0` succeeds on zombies).
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Creates the ConfigMap `name` in `ns` with `data`.
pub async fn create_configmap(client: &Client, ns: &str, name: &str, data: serde_json::Value) {
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": data})).unwrap();
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

/// Merge-patches a ConfigMap (`{"data": …}`).
pub async fn patch_configmap(client: &Client, ns: &str, name: &str, patch: serde_json::Value) {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
}

/// Creates a namespace with a unique name starting with `prefix`.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("{prefix}-{}-{n}", std::process::id());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `timeout`. On timeout it panics with
/// `what`, and with the log tails of any control-plane component that died.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            let health = CLUSTER.get().map(Cluster::health).unwrap_or(Ok(()));
            match health {
                Ok(()) => panic!("timed out after {timeout:?} waiting for {what}"),
                Err(dead) => panic!("timed out after {timeout:?} waiting for {what}\n{dead}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Adds the toleration for kwok's fake nodes, without which test pods are never scheduled.
pub fn tolerate_kwok(spec: &mut PodSpec) {
    let t: Toleration = serde_json::from_value(serde_json::json!(
        {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}))
    .expect("toleration");
    spec.tolerations.get_or_insert_with(Vec::new).push(t);
}

/// A plain HTTP/1.0 GET on 127.0.0.1 (admin endpoints): `(status, body)`, or `None` if nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at("127.0.0.1", port, path)
}

/// The same at `host` (a pod's IP on the real node's bridge).
pub fn http_get_at(host: &str, port: u16, path: &str) -> Option<(u16, String)> {
    let addr: std::net::SocketAddr = format!("{host}:{port}").parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// A free TCP port on 127.0.0.1, never one this process has handed out before.
///
/// The port is released before returning, so another process may still take it. Two such races are
/// closed: the kernel hands a just-released port out again, and two tests (or the health and webhook
/// ports of one wave) were given the same one, so every port handed out is remembered; and a port from
/// the kernel's ephemeral range can become the source port of any outgoing connection (the
/// apiserver's to etcd, say) before the server binds it, which once failed `make bench-smoke` with
/// "Address already in use", so the port comes from below that range, where the kernel never picks
/// one by itself, starting at a place that differs between processes.
/// `hack/testenv` picks its components' ports from the same span, for the second reason: an apiserver
/// or etcd killed for a fault must be able to listen on its port again.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let ephemeral_low = ephemeral_range_start();
    let (low, high) = (ephemeral_low.saturating_sub(12_000).max(1024), ephemeral_low);
    let span = u32::from(high - low);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = (std::process::id().wrapping_mul(7919) ^ nanos) % span;
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for step in 0..span {
        let port = low + ((start + step) % span) as u16;
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {low}..{high}");
}

/// The first port of the kernel's ephemeral range, from which it picks outgoing connections' source ports.
pub fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let low = super::ephemeral_range_start();
        let ports: Vec<u16> = (0..50).map(|_| super::free_port()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!(port < low, "{port} is in the ephemeral range from {low}");
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("bindable");
        }
    }
}
