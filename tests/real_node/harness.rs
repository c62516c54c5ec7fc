//! What the real-node tests share: the node, wave's image, the chart, and reading what pods serve.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use testenv::{Cluster, helm_bin_dir, http_get_at, real_node_or_skip, repo_root};

/// Long enough for a cold image import and a few rollouts on two cores.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// The node and a turn on it; `None` (after saying why) where the machine has none.
pub struct Node {
    pub cluster: &'static Cluster,
    pub client: Client,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// Waits for this test's turn on the real node.
pub async fn turn(test: &str) -> Option<Node> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking({
        let test = test.to_string();
        move || real_node_or_skip(&test)
    })
    .await
    .expect("starting the real node")?;
    Some(Node {
        cluster,
        client: cluster.client().await,
        _turn: guard,
    })
}

/// A static binary `make test` builds and names in `var` (`make static`, `make reload-demo`).
fn static_bin(var: &str, target: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("set {var} to the static binary (`make {target}`; `make test` does)"))
}

/// `hack/oci-image KIND <the static binary in VAR> ARCHIVE --name NAME`, imported into the node once.
fn image(
    once: &'static OnceLock<()>,
    cluster: &Cluster,
    kind: &str,
    (var, target): (&str, &str),
    name: &'static str,
    extra: &[&str],
) -> &'static str {
    once.get_or_init(|| {
        let archive = cluster.dir().join(format!("{kind}-image.tar"));
        run(Command::new(repo_root().join("hack/oci-image"))
            .arg(kind)
            .arg(static_bin(var, target))
            .arg(&archive)
            .args(["--name", name])
            .args(extra));
        cluster.import_image(&archive);
    });
    name
}

/// wave's image (`hack/oci-image wave`, the Dockerfile's final stage).
pub fn wave_image(cluster: &Cluster) -> &'static str {
    static IMAGE: OnceLock<()> = OnceLock::new();
    let bin = ("WAVE_STATIC_BIN", "static");
    image(
        &IMAGE,
        cluster,
        "wave",
        bin,
        "wave:testenv",
        &["--commit", "test"],
    )
}

/// wave-reload's demo app (`hack/oci-image app`).
pub fn reload_demo_image(cluster: &Cluster) -> &'static str {
    static IMAGE: OnceLock<()> = OnceLock::new();
    let bin = ("WAVE_RELOAD_DEMO_BIN", "reload-demo");
    image(&IMAGE, cluster, "app", bin, "reload-demo:testenv", &[])
}

/// `helm3` against the node's cluster, with a Helm home of its own.
pub fn helm(cluster: &Cluster) -> Command {
    let home = cluster.dir().join("helm");
    let mut c = Command::new(helm_bin_dir().join("helm3"));
    c.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", cluster.kubeconfig());
    c
}

/// Installs the chart in `namespace`, watching only it, from wave's image, with `set` values added;
/// returns when helm's `--wait` says wave is ready. The release is named after the namespace, since
/// its ClusterRole is named after the release.
pub fn install_wave(cluster: &Cluster, namespace: &str, set: &[&str]) {
    helm_wave(cluster, "install", namespace, set);
}

/// `helm install` or `helm upgrade` (`verb`) of the chart, as [`install_wave`] describes.
pub fn helm_wave(cluster: &Cluster, verb: &str, namespace: &str, set: &[&str]) {
    let image = wave_image(cluster);
    let (repository, tag) = image.split_once(':').expect("name:tag");
    let mut c = helm(cluster);
    c.args([verb, &format!("wave-{namespace}")])
        .arg(repo_root().join("charts/wave"))
        .args([
            "--namespace",
            namespace,
            "--create-namespace",
            "--wait",
            "--timeout",
            "180s",
        ])
        .args(["--set", &format!("image.repository={repository}")])
        .args(["--set", &format!("image.tag={tag}")])
        .args(["--set", "image.pullPolicy=Never"])
        .args(["--set", &format!("namespaces={{{namespace}}}")]);
    for s in set {
        c.args(["--set", s]);
    }
    run(&mut c);
}

/// Runs `c`, panicking with its output when it fails; returns its stdout.
pub fn run(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pod as the tests look at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSeen {
    pub name: String,
    pub uid: String,
    pub ip: Option<String>,
    pub ready: bool,
    /// The names of its containers.
    pub containers: Vec<String>,
}

/// The pods of `selector` in `namespace` that have a status and are not being deleted.
pub async fn pods_seen(client: &Client, namespace: &str, selector: &str) -> Vec<PodSeen> {
    let list = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list pods");
    list.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let status = p.status?;
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let containers = p
                .spec
                .map(|s| s.containers.into_iter().map(|c| c.name).collect())
                .unwrap_or_default();
            Some(PodSeen {
                name: p.metadata.name?,
                uid: p.metadata.uid?,
                ip: status.pod_ip,
                ready,
                containers,
            })
        })
        .collect()
}

/// The pods of `selector` in `namespace`: `(name, IP, ready)` of each that has an IP and is not
/// being deleted.
pub async fn pods(client: &Client, namespace: &str, selector: &str) -> Vec<(String, String, bool)> {
    pods_seen(client, namespace, selector)
        .await
        .into_iter()
        .filter_map(|p| Some((p.name, p.ip?, p.ready)))
        .collect()
}

/// What the pod at `ip` serves on `port` at `path`, by HTTP over the pod network.
pub fn served(ip: &str, port: u16, path: &str) -> Option<String> {
    http_get_at(ip, port, path)
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
}

/// `kubectl exec POD -- env`, as `NAME=value` lines.
pub fn exec_env(cluster: &Cluster, namespace: &str, pod: &str) -> String {
    run(cluster
        .kubectl()
        .args(["exec", "-n", namespace, pod, "--", "env"]))
}

/// The config hash on a Deployment's pod template.
pub fn config_hash(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(wave_core::names::CONFIG_HASH)
        .cloned()
}
