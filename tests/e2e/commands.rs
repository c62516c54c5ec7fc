//! `wave hash`, `wave explain`, `wave impact` and the Helm post-renderers against the live cluster.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use testenv::{cluster, helm_bin_dir, repo_root, wait_for};
use wave_core::workload::WorkloadKind;

use crate::harness::*;

fn wave_cli(args: &[&str]) -> (i32, String, String) {
    run_wave(args, Some(&cluster().kubeconfig()))
}

fn kubectl_apply(ns: &str, manifests: &str) {
    let (ok, text) = kubectl_stdin(&["apply", "-n", ns, "-f", "-"], manifests);
    assert!(ok, "kubectl apply failed: {text}");
}

/// Varied workloads: keyed env, projected items, Secret stringData, an init container, an optional
/// missing object, and an extra annotation.
const VARIED: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a: "1", b: "2", unused: "3"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: hunter2, user: admin}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: extra}
data: {x: "y"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keyed, annotations: {wave.pusher.com/update-on-config-change: "true", wave.pusher.com/extra-configmaps: extra}}
spec:
  selector: {matchLabels: {app: keyed}}
  template:
    metadata: {labels: {app: keyed}}
    spec:
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      containers:
      - name: c
        image: nginx
        env:
        - {name: A, valueFrom: {configMapKeyRef: {name: cfg, key: a}}}
        - {name: P, valueFrom: {secretKeyRef: {name: creds, key: password}}}
        - {name: O, valueFrom: {configMapKeyRef: {name: not-there, key: o, optional: true}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: projected, annotations: {wave.pusher.com/update-on-config-change: "true"}}
spec:
  serviceName: projected
  selector: {matchLabels: {app: projected}}
  template:
    metadata: {labels: {app: projected}}
    spec:
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      initContainers:
      - {name: init, image: busybox, envFrom: [{secretRef: {name: creds}}]}
      containers: [{name: c, image: nginx}]
      volumes:
      - name: p
        projected: {sources: [{configMap: {name: cfg, items: [{key: b, path: b}]}}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: everything, annotations: {wave.pusher.com/update-on-config-change: "true"}}
spec:
  selector: {matchLabels: {app: everything}}
  template:
    metadata: {labels: {app: everything}}
    spec:
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      containers: [{name: c, image: nginx, envFrom: [{configMapRef: {name: cfg}}, {secretRef: {name: creds}}]}]
"#;

#[tokio::test]
async fn every_hash_wave_hash_prints_equals_the_one_wave_run_writes() {
    let (client, ns) = setup("hash-eq").await;
    kubectl_apply(&ns, VARIED);
    let _wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let file = std::env::temp_dir().join(format!("wave-varied-{ns}.yaml"));
    std::fs::write(&file, VARIED).unwrap();
    let (code, out, err) = wave_cli(&["hash", "-n", &ns, "-f", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        let kind = WorkloadKind::parse(parts[0]).unwrap();
        let name = parts[1].split_once('/').unwrap().1;
        let live = wait_hash_change(&client, &ns, kind, name, None).await;
        assert_eq!(live, parts[2], "{kind} {name}: wave hash and wave run disagree");
    }
    let _ = std::fs::remove_file(file);
}

#[tokio::test]
async fn explain_shows_references_hashes_and_a_pending_rollout() {
    let (client, ns) = setup("explain").await;
    kubectl_apply(&ns, VARIED);
    let mut wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let hash = wait_hash_change(&client, &ns, WorkloadKind::DEPLOYMENT, "keyed", None).await;
    let (code, out, err) = wave_cli(&["explain", "deployment/keyed", "-n", &ns, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let e: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["status"], "up-to-date", "{out}");
    assert_eq!(e["current_hash"], hash);
    assert_eq!(e["desired_hash"], hash);
    let refs = e["references"].as_array().unwrap();
    assert_eq!(
        refs.len(),
        4,
        "extra, cfg key a, not-there (optional), creds key password: {out}"
    );
    let not_there = refs.iter().find(|r| r["name"] == "not-there").unwrap();
    assert_eq!(
        (not_there["found"].as_bool(), not_there["required"].as_bool()),
        (Some(false), Some(false))
    );
    assert!(
        !out.contains("hunter2") && !out.contains("aHVudGVyMg=="),
        "no Secret value is ever shown"
    );

    // With wave stopped, a change to a used key is a pending rollout.
    wave.kill();
    patch_configmap(&client, &ns, "cfg", json!({"data": {"a": "changed"}})).await;
    let (_, out, _) = wave_cli(&["explain", "deploy/keyed", "-n", &ns, "-o", "json"]);
    let e: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["status"], "rollout", "{out}");
    assert_ne!(e["desired_hash"], e["current_hash"]);
    let (code, table, _) = wave_cli(&["explain", "deployment/keyed", "-n", &ns]);
    assert_eq!(code, 0);
    assert!(
        table.contains(&format!("configmap {ns}/not-there")) && table.contains("optional"),
        "{table}"
    );
    assert!(table.contains("Status: rollout: "), "{table}");
    let (code, _, err) = wave_cli(&["explain", "deployment/absent", "-n", &ns]);
    assert_eq!(code, 3, "a missing workload exits 3");
    assert!(err.contains("not found"), "{err}");
}

#[tokio::test]
async fn impact_lists_the_workloads_a_change_would_roll() {
    let (_client, ns) = setup("impact").await;
    kubectl_apply(&ns, VARIED);
    let (code, out, err) = wave_cli(&["impact", "configmap/cfg", "-n", &ns, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    let impact_of = |rows: &[Value], name: &str| {
        rows.iter()
            .find(|r| r["workload"].as_str().unwrap().ends_with(&format!("/{name}")))
            .map(|r| r["impact"].clone())
    };
    for name in ["keyed", "projected", "everything"] {
        assert_eq!(impact_of(&rows, name), Some(json!("rolls")), "{name}: {out}");
    }
    // Only key `unused` changes: the keyed references are unaffected, envFrom still rolls.
    let (_, out, _) = wave_cli(&["impact", "cm/cfg", "-n", &ns, "--keys", "unused", "-o", "json"]);
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(impact_of(&rows, "keyed"), Some(json!("unaffected")), "{out}");
    assert_eq!(impact_of(&rows, "projected"), Some(json!("unaffected")), "{out}");
    assert_eq!(impact_of(&rows, "everything"), Some(json!("rolls")), "{out}");
    let (_, table, _) = wave_cli(&["impact", "secret/creds", "-n", &ns, "--keys", "user"]);
    assert!(
        table.contains(&format!("Deployment {ns}/keyed"))
            && table.contains("unaffected (uses only password)"),
        "{table}"
    );
}

#[tokio::test]
async fn wave_works_as_a_kubectl_plugin() {
    let (client, ns) = setup("kubectl-plugin").await;
    kubectl_apply(&ns, VARIED);
    let _wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    wait_hash_change(&client, &ns, WorkloadKind::DAEMON_SET, "everything", None).await;
    let dir = std::env::temp_dir().join(format!("wave-plugin-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl-wave");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_wave"), &link).unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(cluster().bin("kubectl"))
        .args(["wave", "explain", "ds/everything", "-n", &ns])
        .env("PATH", path)
        .env("KUBECONFIG", cluster().kubeconfig())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!("DaemonSet {ns}/everything")) && stdout.contains("Status: up-to-date"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An isolated Helm home, so tests never touch the user's Helm configuration or plugins.
fn helm(version: &str, home: &Path) -> Command {
    let mut c = Command::new(helm_bin_dir().join(version));
    c.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", cluster().kubeconfig())
        .env("WAVE_BIN", env!("CARGO_BIN_EXE_wave"));
    c
}

fn run(mut c: Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        c,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn chart() -> PathBuf {
    repo_root().join("testdata/chart")
}

#[tokio::test]
async fn helm_template_through_wave_hash_inject_sets_the_hash() {
    let home = std::env::temp_dir().join(format!("wave-helm-template-{}", std::process::id()));
    let mut c = helm("helm4", &home);
    c.args(["template", "demo", chart().to_str().unwrap()]);
    let rendered = run(c);
    let mut inject = Command::new(env!("CARGO_BIN_EXE_wave"));
    inject.args(["hash", "--inject"]);
    let out = pipe(inject, &rendered);
    assert!(out.status.success());
    let injected = String::from_utf8_lossy(&out.stdout);
    // ConfigMap demo-config {greeting: hello}: {"configMaps":{"demo-config":{"greeting":"aGVsbG8="}},"secrets":{}}
    assert!(
        injected.contains(
            "wave.pusher.com/config-hash: f9b60fae245103560625ccd16e2f0b5e292259bc4b9fa98b781c64884c34feeb"
        ),
        "{injected}"
    );
    let _ = std::fs::remove_dir_all(home);
}

/// Installs the chart with a post-renderer, then checks: one ReplicaSet, the hash set at creation, and
/// `wave run` finds nothing to write.
async fn assert_single_replicaset_install(helm_version: &str, install: impl FnOnce(&str, &Path) -> Command) {
    let (client, ns) = setup(&format!("{helm_version}-install")).await;
    let home = std::env::temp_dir().join(format!("wave-{ns}"));
    run(install(&ns, &home));
    let hash = hash_of(&client, &ns, WorkloadKind::DEPLOYMENT, "demo-web").await;
    assert!(hash.is_some(), "the post-renderer set the hash at install");
    assert_eq!(
        settled_revisions(&client, &ns, WorkloadKind::DEPLOYMENT, "demo-web").await,
        1,
        "exactly one ReplicaSet"
    );
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    wait_for("wave to check the release's Deployment", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    assert_eq!(
        wave.writes(),
        0,
        "wave run finds nothing to change after a post-rendered install"
    );
    assert_eq!(
        revisions(&client, &ns, WorkloadKind::DEPLOYMENT, "demo-web").await,
        1
    );
    let _ = std::fs::remove_dir_all(home);
}

#[tokio::test]
async fn helm4_install_with_the_post_renderer_plugin_creates_one_replicaset() {
    assert_single_replicaset_install("helm4", |ns, home| {
        let mut c = helm("helm4", home);
        c.args([
            "plugin",
            "install",
            repo_root().join("contrib/helm-plugin").to_str().unwrap(),
        ]);
        run(c);
        let mut c = helm("helm4", home);
        c.args([
            "install",
            "demo",
            chart().to_str().unwrap(),
            "--namespace",
            ns,
            "--post-renderer",
            "wave",
        ]);
        c
    })
    .await;
}

#[tokio::test]
async fn helm3_install_with_the_wave_executable_as_post_renderer_creates_one_replicaset() {
    assert_single_replicaset_install("helm3", |ns, home| {
        let mut c = helm("helm3", home);
        c.args(["install", "demo", chart().to_str().unwrap(), "--namespace", ns])
            .args(["--post-renderer", env!("CARGO_BIN_EXE_wave")])
            .args(["--post-renderer-args", "hash", "--post-renderer-args", "--inject"]);
        c
    })
    .await;
}

#[tokio::test]
async fn the_cluster_flags_mean_what_they_mean_to_kubectl_and_yaml_output_is_the_json_document() {
    let (client, ns) = setup("cli-flags").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web", opted_in(&[]), spec).await;
    let kubeconfig = cluster().kubeconfig();
    let kubeconfig = kubeconfig.to_str().unwrap();
    // No KUBECONFIG in the environment: only the flags say where the cluster is.
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "deployment/web", "-n", &ns, "--kubeconfig", kubeconfig];
        args.extend_from_slice(extra);
        run_wave(&args, None)
    };
    let (code, json_out, err) = explain(&["-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let (code, yaml_out, err) = explain(&["-o", "yaml", "--context", "testenv"]);
    assert_eq!(code, 0, "{err}");
    let from_json: Value = serde_json::from_str(&json_out).unwrap();
    let from_yaml: Value = serde_norway::from_str(&yaml_out).unwrap();
    assert_eq!(from_yaml, from_json, "-o yaml is the same document as -o json");

    let (code, out, err) = run_wave(&["status", "-A", "-o", "yaml", "--kubeconfig", kubeconfig], None);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<Value> = serde_norway::from_str(&out).unwrap();
    let web = listed
        .iter()
        .find(|v| v["workload"] == format!("Deployment {ns}/web"))
        .unwrap_or_else(|| panic!("wave status -A lists the workload of every namespace: {out}"));
    assert_eq!(
        web["desired_hash"], from_json["desired_hash"],
        "the same assessment as wave explain"
    );
    assert_eq!(web["state"], from_json["status"]);

    let (code, _, err) = explain(&["--context", "no-such-context"]);
    assert_eq!(code, 3, "an unknown context is a cluster error: {err}");
    assert!(
        err.contains("kubeconfig") && err.contains("no-such-context"),
        "{err}"
    );
    let (code, _, err) = run_wave(
        &[
            "explain",
            "deployment/web",
            "-n",
            &ns,
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        None,
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("/nonexistent/kubeconfig"),
        "the file is named: {err}"
    );

    // Impersonation: a user with no rights is refused; the same user in system:masters is not.
    let (code, _, err) = explain(&["--as", "wave-test-nobody"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("forbidden") && err.contains("wave-test-nobody"),
        "{err}"
    );
    let (code, _, err) = explain(&["--as", "wave-test-nobody", "--as-group", "system:masters"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn completion_scripts_are_printed_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _wave"),
        ("zsh", "#compdef wave"),
        ("fish", "complete -c wave"),
    ] {
        let (code, out, err) = run_wave(&["completion", shell], None);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}: {}", &out[..out.len().min(300)]);
        assert!(
            out.contains("history") && out.contains("unpin"),
            "{shell}: names the subcommands"
        );
    }
    let (code, _, err) = run_wave(&["completion", "tcsh"], None);
    assert_eq!(code, 2, "an unknown shell is a usage error: {err}");
}

#[tokio::test]
async fn impact_works_for_a_user_with_only_a_namespaces_role_and_lists_cluster_wide_only_with_all_namespaces()
{
    let (client, ns) = setup("impact-role").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web", opted_in(&[]), spec).await;
    let user = format!("impact-reader-{}", std::process::id());
    let role = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: reader}}\nrules:\n\
         - {{apiGroups: [\"\"], resources: [configmaps, secrets], verbs: [get]}}\n\
         - {{apiGroups: [apps], resources: [deployments, statefulsets, daemonsets], verbs: [list]}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: reader}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}\n\
         subjects: [{{kind: User, name: {user}}}]\n"
    );
    kubectl_apply(&ns, &role);
    wait_authorized(&ns, &user, "list", "deployments.apps").await;
    let kubeconfig = cluster().kubeconfig();
    let as_reader = |extra: &[&str]| {
        let mut args = vec!["impact", "configmap/cfg", "-n", &ns, "--as", &user];
        args.extend_from_slice(extra);
        run_wave(&args, Some(&kubeconfig))
    };
    let (code, out, err) = as_reader(&["-o", "json"]);
    assert_eq!(code, 0, "a namespace's Role is enough: {err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0]["workload"], format!("Deployment {ns}/web"));
    assert!(
        err.contains("cronjobs: forbidden"),
        "CronJobs it may not list are named and skipped: {err}"
    );
    let (code, _, err) = as_reader(&["-A"]);
    assert_eq!(
        code, 3,
        "-A lists cluster-wide, which the Role does not allow: {err}"
    );
    assert!(
        err.contains("all namespaces") && err.contains("forbidden"),
        "{err}"
    );
}
