//! The Helm chart and kustomize manifests: they render, the apiserver accepts them (server-side
//! dry-run, our chosen validation: no schema download needed), the pod passes the restricted Pod
//! Security Standard, and the RBAC they grant is exactly enough for `wave run`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;
use serde_norway::Value;
use testenv::{cluster, helm_bin_dir, http_get, repo_root, wait_for};
use wave_core::workload::WorkloadKind;

use crate::harness::*;

fn helm_template(release: &str, namespace: &str, sets: &[&str]) -> String {
    let mut c = Command::new(helm_bin_dir().join("helm4"));
    c.args([
        "template",
        release,
        repo_root().join("charts/wave").to_str().unwrap(),
        "--namespace",
        namespace,
    ]);
    for s in sets {
        c.args(["--set", s]);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "helm template {sets:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_plain_helm_template_renders_with_the_defaults_of_helm_3_and_helm_4() {
    // Pipelines and GitOps tools render without --kube-version: Helm 3 then assumes Kubernetes v1.20.0,
    // which a `kubeVersion` constraint in Chart.yaml would refuse.
    for helm in ["helm3", "helm4"] {
        let out = Command::new(helm_bin_dir().join(helm))
            .args([
                "template",
                "wave",
                repo_root().join("charts/wave").to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{helm} template: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered = String::from_utf8_lossy(&out.stdout);
        assert!(
            rendered.contains("kind: Deployment"),
            "{helm} rendered the controller:\n{rendered}"
        );
    }
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn to_yaml(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_norway::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

fn kind(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or_default()
}

/// A schemaless stand-in for a CRD the chart can use (the Prometheus operator's, cert-manager's), so the
/// apiserver can dry-run the objects without the operator installed.
fn stub_crd(group: &str, kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.{group}}}
spec:
  group: {group}
  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#,
        singular = kind.to_lowercase()
    )
}

const STUB_CRDS: [(&str, &str); 5] = [
    ("monitoring.coreos.com", "ServiceMonitor"),
    ("monitoring.coreos.com", "PodMonitor"),
    ("monitoring.coreos.com", "PrometheusRule"),
    ("cert-manager.io", "Issuer"),
    ("cert-manager.io", "Certificate"),
];

#[tokio::test]
async fn the_chart_lints_and_every_value_set_is_accepted_by_the_apiserver() {
    let out = Command::new(helm_bin_dir().join("helm4"))
        .args(["lint", repo_root().join("charts/wave").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (client, ns) = setup("chart").await;
    let a = testenv::namespace(&client, "chart-a").await;
    let b = testenv::namespace(&client, "chart-b").await;
    for (group, kind) in STUB_CRDS {
        let (ok, text) = kubectl_stdin(&["apply", "-f", "-"], &stub_crd(group, kind));
        assert!(ok, "{text}");
        let resource = format!("{}s.{group}", kind.to_lowercase());
        wait_for(&format!("the {kind} CRD to be served"), TIMEOUT, || async {
            cluster()
                .kubectl()
                .args(["get", &resource, "-A"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| ())
        })
        .await;
    }
    let namespaces = format!("namespaces={{{a},{b}}}");
    let value_sets: Vec<Vec<&str>> = vec![
        vec![],
        vec![
            "replicas=3",
            "updateRate=0",
            "updateBurst=0",
            "syncPeriod=30m",
            "logFormat=text",
        ],
        vec!["rbac.namespaced=true", &namespaces],
        vec![
            "metrics.serviceMonitor.enabled=true",
            "nodeSelector.disktype=ssd",
            "tolerations[0].operator=Exists",
            "podAnnotations.team=platform",
            "podLabels.tier=control",
            "extraArgs[0]=--concurrency=16",
            "topologySpreadConstraints[0].maxSkew=1",
            "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "topologySpreadConstraints[0].labelSelector.matchLabels.app=wave",
        ],
        vec!["webhook.enabled=true", "replicas=2"],
        vec!["webhook.enabled=true", "rbac.namespaced=true", &namespaces],
        vec![
            "webhook.enabled=true",
            "webhook.certManager.enabled=true",
            "webhook.objectSelector.matchLabels.team=platform",
            "webhook.namespaceSelector.matchLabels.wave=enabled",
        ],
        vec![
            "webhook.enabled=true",
            "webhook.certManager.enabled=true",
            "webhook.certManager.issuerRef.name=cluster-ca",
            "webhook.certManager.issuerRef.kind=ClusterIssuer",
        ],
        vec![
            "webhook.enabled=true",
            "networkPolicy.enabled=true",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
            "hashKeySecret.name=wave-hash-key",
            "rbac.namespaced=true",
            &namespaces,
        ],
        vec!["rbac.legacyWaveCleanup=true", "cronJobs.enabled=true"],
        vec!["configHistory.enabled=true", "configHistory.allWorkloads=true"],
        vec![
            "reloader.compat=true",
            "reloader.reloadStrategy=annotations",
            "reloader.autoReloadAll=true",
            "reloader.resourcesToIgnore[0]=secrets",
            "reloader.reloadOnCreate=true",
            "reloader.reloadOnDelete=true",
        ],
        vec![
            "reloader.compat=true",
            "reloader.alert.enabled=true",
            "reloader.alert.sink=slack",
            "reloader.alert.webhookUrlSecret.name=slack-hook",
            "reloader.alert.proxy=http://proxy:3128",
            "reloader.alert.additionalInfo=prod",
            "reloader.webhookUrlSecret.name=pipeline-hook",
            "jobs.enabled=true",
            "reloader.enableCSIIntegration=true",
        ],
        vec!["reloader.compat=false", "namespaceSelector=team in (a\\,b)"],
        vec![
            "argoRollouts.enabled=true",
            "workloadResources[0].group=example.com",
            "workloadResources[0].version=v1",
            "workloadResources[0].resource=runners",
            "workloadResources[0].template=/spec/template",
        ],
        vec![
            "fullnameOverride=wave-ctl",
            "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "extraEnv[0].name=HTTPS_PROXY",
            "extraEnv[0].value=http://proxy:3128",
            "extraEnvFrom[0].configMapRef.name=proxy",
            "extraVolumes[0].name=tmp",
            "extraVolumes[0].emptyDir.medium=Memory",
            "extraVolumeMounts[0].name=tmp",
            "extraVolumeMounts[0].mountPath=/tmp",
            "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/wave",
            "serviceAccount.labels.team=platform",
            "deploymentAnnotations.team=platform",
            "pdb.enabled=true",
            "pdb.maxUnavailable=1",
            "metrics.podMonitor.enabled=true",
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.scrapeTimeout=10s",
            "metrics.serviceMonitor.relabelings[0].action=labeldrop",
            "metrics.serviceMonitor.relabelings[0].regex=pod",
            "healthPort=9090",
            "livenessProbe.periodSeconds=20",
            "revisionHistoryLimit=3",
        ],
        vec![
            "nameOverride=config-roller",
            "webhook.enabled=true",
            "global.rbac.enabled=true",
        ],
        vec!["configHistory.enabled=true", "rbac.namespaced=true", &namespaces],
        vec!["cronJobs.enabled=true", "rbac.namespaced=true", &namespaces],
        vec![
            "reloader.compat=true",
            "reloader.enableCSIIntegration=true",
            "rbac.namespaced=true",
            &namespaces,
        ],
    ];
    for (i, sets) in value_sets.iter().enumerate() {
        let rendered = helm_template(&format!("dry{i}"), &ns, sets);
        let (ok, text) = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &rendered);
        assert!(ok, "value set {sets:?} rejected by the apiserver:\n{text}");
    }
    let r = helm_template("rate", &ns, &["updateRate=0", "updateBurst=0"]);
    assert!(
        r.contains("--update-rate=inf") && r.contains("--update-burst=0"),
        "0 disables the rate, as documented"
    );
    let r = helm_template("hook", &ns, &["webhook.enabled=true", &namespaces]);
    assert!(
        r.contains("--webhook-certificate=generate") && r.contains(&format!("values: [\"{a}\",\"{b}\"]")),
        "the webhook sees only the watched namespaces:\n{r}"
    );
    let r = helm_template(
        "hook",
        &ns,
        &["webhook.enabled=true", "webhook.certManager.enabled=true"],
    );
    assert!(r.contains("--webhook-certificate=secret") && r.contains("cert-manager.io/inject-ca-from"));
    let r = helm_template(
        "alerts",
        &ns,
        &[
            "reloader.compat=true",
            "reloader.alert.enabled=true",
            "reloader.alert.webhookUrlSecret.name=slack-hook",
        ],
    );
    assert!(
        r.contains("name: WAVE_ALERT_WEBHOOK_URL\n          valueFrom: {secretKeyRef: {name: \"slack-hook\", key: \"url\"}}"),
        "the sink's URL comes from the Secret, never from a value:\n{r}"
    );
    let (ok, err) = {
        let out = Command::new(helm_bin_dir().join("helm4"))
            .args(["template", "x", repo_root().join("charts/wave").to_str().unwrap()])
            .args([
                "--set",
                "reloader.compat=true",
                "--set",
                "reloader.alert.enabled=true",
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(
        !ok && err.contains("webhookUrlSecret.name"),
        "alerts without a URL are refused: {err}"
    );
    let out = Command::new(helm_bin_dir().join("helm4"))
        .args(["template", "x", repo_root().join("charts/wave").to_str().unwrap()])
        .args(["--set", "reloader.enableCSIIntegration=true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("reloader.enableCSIIntegration needs reloader.compat"),
        "CSI rotations without Reloader compatibility are refused: {err}"
    );
    let r = helm_template(
        "csi",
        &ns,
        &["reloader.compat=true", "reloader.enableCSIIntegration=true"],
    );
    assert!(
        r.contains("- --enable-csi-integration")
            && r.contains(
                "resources: [secretproviderclasspodstatuses, secretproviderclasses]\n    verbs: [list, watch]"
            ),
        "the flag and its rule:\n{r}"
    );
    let r = helm_template("ha", &ns, &["replicas=2"]);
    assert!(r.contains("kind: PodDisruptionBudget") && r.contains("--leader-election=true"));
    let r = helm_template(
        "keyed",
        &ns,
        &[
            "hashKeySecret.name=k",
            "hashKeySecret.namespace=vault",
            "networkPolicy.enabled=true",
        ],
    );
    assert!(r.contains("--hash-key-secret=vault/k"), "{r}");
    assert!(
        r.contains("kind: NetworkPolicy") && !r.contains("port: webhook"),
        "{r}"
    );
    let r = helm_template("skip", &ns, &["namespacesToIgnore={a,b}"]);
    assert!(r.contains("- --namespaces-to-ignore=a,b"), "{r}");
    let r = helm_template("cron", &ns, &["cronJobs.enabled=true"]);
    assert!(
        r.contains("- --cronjobs") && r.contains("resources: [cronjobs]"),
        "{r}"
    );
}

/// One permission a render grants: where (`cluster`, or `namespace <ns>` for a Role), the API group, the
/// resource (`resource/name` under `resourceNames`) and the verb.
type Grant = (String, String, String, String);

/// Every permission the Roles and ClusterRoles of a render grant.
fn grants(rendered: &str) -> std::collections::BTreeSet<Grant> {
    let mut out = std::collections::BTreeSet::new();
    for d in docs(rendered) {
        let scope = match kind(&d) {
            "ClusterRole" => "cluster".to_string(),
            "Role" => format!(
                "namespace {}",
                d["metadata"]["namespace"].as_str().unwrap_or_default()
            ),
            _ => continue,
        };
        for rule in d["rules"].as_sequence().into_iter().flatten() {
            let list = |key: &str| -> Vec<String> {
                rule.get(key)
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .map(|v| v.as_str().expect("a string in a rule").to_string())
                    .collect()
            };
            let names = list("resourceNames");
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        let mut grant = |resource: String| {
                            out.insert((scope.clone(), group.clone(), resource, verb.clone()));
                        };
                        if names.is_empty() {
                            grant(resource.clone());
                        }
                        for name in &names {
                            grant(format!("{resource}/{name}"));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Whether `g` lets wave change or delete a ConfigMap or Secret.
fn writes_config((_, group, resource, verb): &Grant) -> bool {
    let core = group.is_empty() || group == "*";
    let config = ["configmaps", "secrets", "*"]
        .iter()
        .any(|r| resource == r || resource.starts_with(&format!("{r}/")));
    let writes = ["create", "patch", "update", "delete", "deletecollection", "*"].contains(&verb.as_str());
    core && config && writes
}

#[test]
fn the_default_chart_grants_no_write_on_any_configmap_or_secret_and_each_option_only_its_own_rule() {
    let ns = "wave-system";
    for sets in [
        vec![],
        vec!["replicas=2"],
        vec!["rbac.namespaced=true", "namespaces={a,b}"],
    ] {
        let writes: Vec<Grant> = grants(&helm_template("wave", ns, &sets))
            .into_iter()
            .filter(writes_config)
            .collect();
        assert!(
            writes.is_empty(),
            "the chart with {sets:?} lets wave write config: {writes:?}"
        );
    }
    let base = grants(&helm_template("wave", ns, &[]));
    let rule = |scope: &str, group: &str, resources: &[&str], verbs: &[&str]| {
        let mut out = std::collections::BTreeSet::new();
        for resource in resources {
            for verb in verbs {
                out.insert((scope.into(), group.into(), resource.to_string(), verb.to_string()));
            }
        }
        out
    };
    let config = ["configmaps", "secrets"];
    let history = rule("cluster", "", &config, &["create", "patch"])
        .union(&rule(
            "cluster",
            "apps",
            &["replicasets", "controllerrevisions"],
            &["list"],
        ))
        .cloned()
        .collect();
    let hash_key = rule(&format!("namespace {ns}"), "", &["secrets/k"], &["get"]);
    for (sets, own) in [
        (
            vec!["rbac.legacyWaveCleanup=true"],
            rule("cluster", "", &config, &["patch"]),
        ),
        (vec!["configHistory.enabled=true"], history),
        (vec!["hashKeySecret.name=k"], hash_key),
    ] {
        let with = grants(&helm_template("wave", ns, &sets));
        let added: std::collections::BTreeSet<Grant> = with.difference(&base).cloned().collect();
        assert_eq!(added, own, "{sets:?} adds its own rule and nothing else");
        let lost: Vec<&Grant> = base.difference(&with).collect();
        assert!(lost.is_empty(), "{sets:?} takes {lost:?} away");
    }
    // The value that grants the rule also turns on the flag that uses it.
    assert!(
        helm_template("wave", ns, &["rbac.legacyWaveCleanup=true"]).contains("- --legacy-wave-cleanup\n")
    );
    assert!(!helm_template("wave", ns, &[]).contains("--legacy-wave-cleanup"));
}

/// The permissions table of README.md, between these markers, is the chart's default ClusterRole.
const PERMISSIONS_BEGIN: &str = "<!-- The chart's default ClusterRole, generated by \
    `UPDATE_GOLDEN=1 cargo test --test e2e ship::the_readme_permissions`; edit the chart, not this. -->\n";
const PERMISSIONS_END: &str = "<!-- end of the generated permissions -->";

#[test]
fn the_readme_permissions_table_is_the_default_charts_cluster_role() {
    let rendered = docs(&helm_template("wave", "wave-system", &[]));
    let role = rendered
        .iter()
        .find(|d| kind(d) == "ClusterRole")
        .expect("the default chart renders a ClusterRole");
    let cell = |rule: &Value, key: &str, quote: bool| {
        rule[key]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| {
                let v = v.as_str().unwrap();
                match (quote, v) {
                    (true, "") => "`\"\"`".to_string(),
                    (true, group) => format!("`{group}`"),
                    (false, v) => v.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rows: Vec<String> = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|rule| {
            format!(
                "| {} | {} | {} |",
                cell(rule, "apiGroups", true),
                cell(rule, "resources", false),
                cell(rule, "verbs", false)
            )
        })
        .collect();
    let table = format!(
        "| API group | Resources | Verbs |\n|---|---|---|\n{}\n",
        rows.join("\n")
    );
    let path = repo_root().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let start = readme.find(PERMISSIONS_BEGIN).expect("the README's begin marker") + PERMISSIONS_BEGIN.len();
    let end = start
        + readme[start..]
            .find(PERMISSIONS_END)
            .expect("the README's end marker");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, format!("{}{table}{}", &readme[..start], &readme[end..])).unwrap();
        return;
    }
    assert_eq!(
        &readme[start..end],
        table,
        "README.md's permissions differ from the chart's default ClusterRole (UPDATE_GOLDEN=1 regenerates them)"
    );
}

#[tokio::test]
async fn kustomize_matches_the_chart_defaults_and_is_accepted() {
    let chart = docs(&helm_template("wave", "wave-system", &[]));
    let out = cluster()
        .kubectl()
        .args(["kustomize", repo_root().join("config/default").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kustomized = docs(&String::from_utf8_lossy(&out.stdout));
    // What kustomize ships is the chart's default output, without Helm's labels, and with the namespace.
    let strip = |mut v: Value| {
        if let Some(labels) = v
            .get_mut("metadata")
            .and_then(|m| m.get_mut("labels"))
            .and_then(Value::as_mapping_mut)
        {
            labels.remove("helm.sh/chart");
            labels.remove("app.kubernetes.io/managed-by");
        }
        v
    };
    let chart: Vec<Value> = chart.into_iter().map(strip).collect();
    let kustomized: Vec<Value> = kustomized
        .into_iter()
        .filter(|d| kind(d) != "Namespace")
        .map(strip)
        .collect();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        regenerate_kustomize(&chart);
        return;
    }
    let key = |v: &Value| {
        format!(
            "{}/{}",
            kind(v),
            v["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let mut a: Vec<(String, Value)> = chart.iter().map(|v| (key(v), v.clone())).collect();
    let mut b: Vec<(String, Value)> = kustomized.iter().map(|v| (key(v), v.clone())).collect();
    a.sort_by(|x, y| x.0.cmp(&y.0));
    b.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>(),
        "the same objects (UPDATE_GOLDEN=1 regenerates config/ from the chart)"
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(
            x, y,
            "{name} differs between the chart and config/ (UPDATE_GOLDEN=1 regenerates it)"
        );
    }
    // A dry-run does not create the namespace the other objects go into.
    let (ok, text) = kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: wave-system}\n",
    );
    assert!(ok, "{text}");
    let (ok, text) = kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        &String::from_utf8_lossy(&out.stdout),
    );
    assert!(ok, "{text}");
}

/// Writes config/rbac and config/manager from the chart's default output.
fn regenerate_kustomize(chart: &[Value]) {
    let header = "# Generated from charts/wave with its default values: UPDATE_GOLDEN=1 cargo test --test e2e ship::kustomize\n";
    let is_rbac = |v: &Value| {
        matches!(
            kind(v),
            "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
        )
    };
    for (dir, pick) in [("rbac", true), ("manager", false)] {
        let objs: Vec<Value> = chart.iter().filter(|v| is_rbac(v) == pick).cloned().collect();
        let path: PathBuf = repo_root().join(format!("config/{dir}/{dir}.yaml"));
        std::fs::write(path, format!("{header}{}", to_yaml(&objs))).unwrap();
    }
}

#[tokio::test]
async fn the_charts_pod_is_admitted_under_the_restricted_pod_security_standard() {
    let (client, ns) = setup("pss").await;
    cluster()
        .kubectl()
        .args([
            "label",
            "namespace",
            &ns,
            "pod-security.kubernetes.io/enforce=restricted",
        ])
        .output()
        .unwrap();
    let rendered = docs(&helm_template("pss", &ns, &[]));
    let deployment = rendered.iter().find(|d| kind(d) == "Deployment").unwrap();
    let template = &deployment["spec"]["template"];
    let pod = |spec: &Value| {
        let mut p = serde_norway::Mapping::new();
        p.insert("apiVersion".into(), "v1".into());
        p.insert("kind".into(), "Pod".into());
        p.insert(
            "metadata".into(),
            serde_norway::from_str(&format!("{{name: pss-check, namespace: {ns}}}")).unwrap(),
        );
        p.insert("spec".into(), spec.clone());
        serde_norway::to_string(&Value::Mapping(p)).unwrap()
    };
    let (ok, text) = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &pod(&template["spec"]));
    assert!(ok, "the chart's pod is rejected under restricted:\n{text}");
    // The check can fail: the same pod without its security context is rejected.
    let mut insecure = template["spec"].clone();
    insecure.as_mapping_mut().unwrap().remove("securityContext");
    insecure["containers"][0]
        .as_mapping_mut()
        .unwrap()
        .remove("securityContext");
    let (ok, text) = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &pod(&insecure));
    assert!(
        !ok && text.contains("restricted"),
        "expected a PodSecurity rejection: {text}"
    );
    drop(client);
}

/// Applies the ServiceAccount and RBAC the chart renders with `sets` in release namespace `release_ns`
/// (and the Secrets it renders: the webhook's empty path token Secret), and returns a kubeconfig that authenticates only with that ServiceAccount's token.
pub(crate) fn chart_identity(
    release: &str,
    release_ns: &str,
    sets: &[&str],
    edit: impl Fn(&mut Value),
) -> PathBuf {
    let mut rbac: Vec<Value> = docs(&helm_template(release, release_ns, sets))
        .into_iter()
        .filter(|d| {
            matches!(
                kind(d),
                "ServiceAccount"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "Role"
                    | "RoleBinding"
                    // The webhook's (empty) path token Secret, which wave fills in.
                    | "Secret"
            )
        })
        .collect();
    rbac.iter_mut().for_each(&edit);
    let (ok, text) = kubectl_stdin(&["apply", "-f", "-"], &to_yaml(&rbac));
    assert!(ok, "{text}");
    let sa = format!("{release}-wave");
    let out = cluster()
        .kubectl()
        .args(["create", "token", &sa, "-n", release_ns, "--duration=1h"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let port = cluster().api_port();
    let ca = cluster().dir().join("pki/ca.crt");
    // Only the token: a client certificate would win and the test would silently run as admin.
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: \"https://127.0.0.1:{}\", certificate-authority: \"{}\"}}\n\
         users:\n- name: sa\n  user: {{token: \"{token}\"}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: sa}}\ncurrent-context: t\n",
        port,
        ca.display()
    );
    let path = cluster().dir().join(format!("{release}.kubeconfig"));
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// A token kubeconfig for the chart's namespaced RBAC over `ns` alone, its Role changed by `edit`.
async fn namespaced_identity(
    client: &kube::Client,
    ns: &str,
    tag: &str,
    edit: impl Fn(&mut Value),
) -> PathBuf {
    let release_ns = testenv::namespace(client, &format!("{tag}-release")).await;
    let release = format!("{tag}-{}", std::process::id());
    let namespaces = format!("namespaces={{{ns}}}");
    chart_identity(
        &release,
        &release_ns,
        &["rbac.namespaced=true", &namespaces],
        |v| {
            if kind(v) == "Role" {
                edit(v)
            }
        },
    )
}

/// The core scenario: opting in sets the hash; a ConfigMap change rolls.
async fn core_scenario(client: &kube::Client, ns: &str) {
    create_configmap(client, ns, "cfg", json!({"a": "1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_workload(client, ns, WorkloadKind::DEPLOYMENT, "web", opted_in(&[]), spec).await;
    let first = wait_hash_change(client, ns, WorkloadKind::DEPLOYMENT, "web", None).await;
    patch_configmap(client, ns, "cfg", json!({"data": {"a": "2"}})).await;
    wait_hash_change(client, ns, WorkloadKind::DEPLOYMENT, "web", Some(&first)).await;
}

#[tokio::test]
async fn wave_runs_as_the_charts_service_account_with_its_cluster_role_and_lease_role() {
    let (client, ns) = setup("rbac-cluster").await;
    let release_ns = testenv::namespace(&client, "rbac-release").await;
    let release = format!("c{}", std::process::id());
    let kubeconfig = chart_identity(&release, &release_ns, &["replicas=2"], |_| {});
    // Scoped to this test's namespace so it leaves other tests' workloads alone; the ClusterRole allows it.
    let wave = Wave::start_as(
        &kubeconfig,
        &[&ns],
        &[
            "--update-rate=inf",
            "--leader-election",
            &format!("--leader-election-namespace={release_ns}"),
            &format!("--leader-election-id={release}-wave"),
        ],
    )
    .await;
    wait_for("leadership", TIMEOUT, || async {
        (wave.metric("wave_leader", &[]) == 1.0).then_some(())
    })
    .await;
    core_scenario(&client, &ns).await;
    assert_eq!(
        wave.metric("wave_watch_errors_total", &[]),
        0.0,
        "{}",
        wave.output()
    );
    // Events are allowed.
    wait_event(&client, &ns, "web", "a ConfigChanged Event", |(_, r, _)| {
        r == "ConfigChanged"
    })
    .await;
}

#[tokio::test]
async fn namespaced_rbac_is_enough_and_wave_never_lists_cluster_wide() {
    let (client, a) = setup("rbac-ns-a").await;
    let b = testenv::namespace(&client, "rbac-ns-b").await;
    let release_ns = testenv::namespace(&client, "rbac-ns-release").await;
    let release = format!("n{}", std::process::id());
    let namespaces = format!("namespaces={{{a},{b}}}");
    let kubeconfig = chart_identity(
        &release,
        &release_ns,
        &["rbac.namespaced=true", &namespaces],
        |_| {},
    );
    let wave = Wave::start_as(&kubeconfig, &[&a, &b], &["--update-rate=inf"]).await;
    core_scenario(&client, &a).await;
    core_scenario(&client, &b).await;
    // Any cluster-wide list or watch would have been forbidden and shown as a watch error.
    assert_eq!(
        wave.metric("wave_watch_errors_total", &[]),
        0.0,
        "{}",
        wave.output()
    );
}

#[tokio::test]
async fn a_missing_verb_is_named_in_the_log_and_makes_readyz_fail() {
    let (client, ns) = setup("rbac-missing").await;
    // Remove `list` on secrets from the Role (ConfigMaps keep theirs).
    let kubeconfig = namespaced_identity(&client, &ns, "rbac-missing", |role| {
        role["rules"][0] =
            serde_norway::from_str("{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, watch]}")
                .unwrap();
        role["rules"].as_sequence_mut().unwrap().push(
            serde_norway::from_str("{apiGroups: [\"\"], resources: [secrets], verbs: [get, watch]}").unwrap(),
        );
    })
    .await;
    let wave = Wave::spawn(&kubeconfig, &[&ns], &[]);
    let port = wave.health;
    let body = wait_for("/readyz to report the permission error", TIMEOUT, || async move {
        http_get(port, "/readyz")
            .filter(|(s, b)| *s == 503 && b.contains("forbidden"))
            .map(|(_, b)| b)
    })
    .await;
    assert!(body.contains("secrets") && body.contains("list"), "{body}");
    let log = wait_for("the log to name the resource and verb", TIMEOUT, || async {
        let out = wave.output();
        (out.contains("watch failing") && out.contains("cannot list resource \\\"secrets\\\"")
            || out.contains("cannot list resource \"secrets\""))
        .then_some(out)
    })
    .await;
    assert!(log.contains("forbidden"), "{log}");
}

#[tokio::test]
async fn a_denied_patch_is_an_event_a_metric_and_a_log_line_and_wave_stays_ready() {
    let (client, ns) = setup("rbac-nopatch").await;
    // Remove `patch` on workloads from the Role, as a policy engine refusing one object would.
    let kubeconfig = namespaced_identity(&client, &ns, "rbac-nopatch", |role| {
        let rules = role["rules"].as_sequence_mut().unwrap();
        let apps = rules
            .iter_mut()
            .find(|r| {
                r["resources"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .any(|x| x.as_str() == Some("deployments"))
            })
            .expect("the chart's rule for workloads");
        apps["verbs"] = serde_norway::from_str("[get, list, watch]").unwrap();
    })
    .await;
    let wave = Wave::start_as(&kubeconfig, &[&ns], &["--update-rate=inf"]).await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web", opted_in(&[]), spec).await;
    let events = wait_for("a WriteFailed Event", TIMEOUT, || async {
        let events = events_for(&client, &ns, "web").await;
        events
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "WriteFailed")
            .then_some(events)
    })
    .await;
    assert!(
        events
            .iter()
            .any(|(_, _, note)| note.contains("cannot patch resource")),
        "the Event names the verb and resource: {events:?}"
    );
    // The Event is published before the failed reconcile is logged: the log line is waited for.
    wait_for("the log to name the verb and resource", TIMEOUT, || async {
        wave.output().contains("cannot patch resource").then_some(())
    })
    .await;
    assert!(
        wave.metric(
            "wave_reconcile_errors_total",
            &["error=\"patch_workload_forbidden\""]
        ) >= 1.0,
        "the metric counts the refusal"
    );
    let (status, body) = http_get(wave.health, "/readyz").expect("/readyz answers");
    assert_eq!(
        (status, body.as_str()),
        (200, "ok"),
        "one refused object does not make wave unready"
    );
    assert_eq!(hash_of(&client, &ns, WorkloadKind::DEPLOYMENT, "web").await, None);
}

/// The values table of `charts/wave/README.md`, from `values.schema.json` (types, descriptions) and
/// `values.yaml` (defaults): the README is generated, so it cannot drift from the chart.
fn chart_values_table() -> String {
    let chart = repo_root().join("charts/wave");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart.join("values.schema.json")).unwrap()).unwrap();
    let values: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
    fn rows(
        schema: &serde_json::Value,
        values: Option<&serde_json::Value>,
        path: &str,
        out: &mut Vec<String>,
    ) {
        for (key, prop) in schema["properties"].as_object().into_iter().flatten() {
            let path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            let value = values.and_then(|v| v.get(key));
            if prop.get("properties").is_some() {
                rows(prop, value, &path, out);
                continue;
            }
            let kind = match &prop["type"] {
                serde_json::Value::Array(kinds) => kinds
                    .iter()
                    .filter_map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(" or "),
                k => k.as_str().unwrap_or_default().to_string(),
            };
            let default = value.map_or("—".to_string(), |v| {
                format!("`{}`", serde_json::to_string(v).unwrap())
            });
            let description = prop["description"].as_str().unwrap_or_default();
            out.push(format!("| `{path}` | {kind} | {default} | {description} |"));
        }
    }
    let mut out = Vec::new();
    rows(&schema, Some(&values), "", &mut out);
    out.join("\n")
}

#[test]
fn the_chart_readme_is_generated_from_its_schema_and_values() {
    let text = format!(
        "# The wave Helm chart\n\n\
         <!-- Generated from values.schema.json and values.yaml by \
         `UPDATE_GOLDEN=1 cargo test --test e2e ship::the_chart_readme`; edit those, not this. -->\n\n\
         wave rolls Deployments, StatefulSets and DaemonSets when the ConfigMaps and Secrets they use change\n\
         (a drop-in replacement for Wave). Install, upgrade and namespaced mode: \
         [docs/install.md](../../docs/install.md).\n\n\
         ```sh\nhelm install wave charts/wave --namespace wave-system --create-namespace \\\n  \
         --set image.repository=<registry>/wave\n```\n\n\
         A value the schema does not know fails the install. Wave's chart keys (`image.name`, \
         `webhooks.enabled`, `annotations`, `global.imagePullSecrets`, `global.rbac.enabled`) are read as \
         ours, with a deprecation line in the install notes \
         ([docs/migrating-from-wave.md](../../docs/migrating-from-wave.md)).\n\n\
         | Value | Type | Default | Meaning |\n|---|---|---|---|\n{}\n",
        chart_values_table()
    );
    crate::hash_golden::check_golden(&repo_root().join("charts/wave/README.md"), &text);
}

#[test]
fn a_typo_in_the_values_fails_the_install_and_wave_chart_keys_are_read_as_ours() {
    let render = |sets: &[&str]| {
        let mut c = Command::new(helm_bin_dir().join("helm4"));
        c.args(["template", "r", repo_root().join("charts/wave").to_str().unwrap()]);
        for s in sets {
            c.args(["--set", s]);
        }
        c.output().unwrap()
    };
    let out = render(&["replica=2"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("additional properties 'replica' not allowed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = render(&["logFormat=xml"]);
    assert!(!out.status.success(), "an unknown log format is refused");
    let out = render(&[
        "image.name=registry.example/wave",
        "webhooks.enabled=true",
        "annotations.team=platform",
        "global.imagePullSecrets[0].name=pull",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = docs(&String::from_utf8_lossy(&out.stdout));
    let deployment = docs.iter().find(|d| kind(d) == "Deployment").unwrap();
    let pod = &deployment["spec"]["template"];
    assert_eq!(
        pod["spec"]["containers"][0]["image"].as_str(),
        Some("registry.example/wave:0.1.0")
    );
    assert_eq!(pod["metadata"]["annotations"]["team"].as_str(), Some("platform"));
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"].as_str(), Some("pull"));
    assert!(
        docs.iter().any(|d| kind(d) == "MutatingWebhookConfiguration"),
        "webhooks.enabled is webhook.enabled"
    );
}

/// Every metric name `/metrics` can serve, from its `# TYPE` lines (a counter `x` is served as
/// `x_total`, a histogram as `x_bucket`, `x_sum` and `x_count`).
fn exported_metrics(body: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in body.lines() {
        let mut parts = line.split_whitespace();
        if parts.next() != Some("#") || parts.next() != Some("TYPE") {
            continue;
        }
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The metric names a PromQL expression uses (wave's and the process series).
fn metrics_in(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| t.starts_with("wave_") || t.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

/// `/metrics` as wave serves it once every labelled family has a series (a family without any is not
/// encoded at all): the registry `wave run` builds, with one series touched in each family.
fn every_metric_wave_serves() -> String {
    use wave_runtime::metrics::{self, KindError, KindLabel, KindResult, ResourceLabel, WebhookLabels};
    let mut registry = prometheus_client::registry::Registry::default();
    let m = metrics::Metrics::new(&mut registry);
    metrics::register_process(&mut registry, &wave::cli::BUILD);
    let (kind, resource) = ("Deployment", "configmaps");
    m.reconciles
        .get_or_create(&KindResult {
            kind,
            result: "written",
        })
        .inc();
    m.reconcile_errors
        .get_or_create(&KindError {
            kind,
            error: "patch_workload",
        })
        .inc();
    m.rollouts.get_or_create(&KindLabel { kind }).inc();
    m.content_fetches
        .get_or_create(&KindLabel { kind: "ConfigMap" })
        .inc();
    m.watch_events.get_or_create(&ResourceLabel { resource }).inc();
    m.watch_errors.get_or_create(&ResourceLabel { resource }).inc();
    m.webhook_requests
        .get_or_create(&WebhookLabels { result: "hashed" })
        .inc();
    m.reconcile_duration
        .get_or_create(&KindLabel { kind })
        .observe(0.01);
    wave_runtime::apimetrics::ApiMetrics::new(&mut registry).record("list", resource, "2xx", 0.01);
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, &registry).unwrap();
    body
}

#[tokio::test]
async fn the_alerts_pass_promtool_and_alerts_and_dashboard_use_only_metrics_wave_exports() {
    let rendered = helm_template(
        "obs",
        "wave-system",
        &["prometheusRule.enabled=true", "grafanaDashboard.enabled=true"],
    );
    let docs = docs(&rendered);
    let rule = docs
        .iter()
        .find(|d| kind(d) == "PrometheusRule")
        .expect("a PrometheusRule");
    let file = std::env::temp_dir().join(format!("wave-rules-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        to_yaml(&[serde_norway::from_str(&format!(
            "groups: {}",
            serde_json::to_string(&rule["spec"]["groups"]).unwrap()
        ))
        .unwrap()]),
    )
    .unwrap();
    let out = Command::new(testenv::promtool())
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(
        alerts,
        [
            "WaveWritesFailing",
            "WaveWatchesFailing",
            "WaveConfigMissing",
            "WaveGatesTimedOut",
            "WaveNoLeader",
            "WaveConfigFlapping",
            "WaveRolloutHalted"
        ]
    );
    let dashboard = docs
        .iter()
        .find(|d| {
            kind(d) == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"].as_str() == Some("1")
        })
        .expect("the dashboard ConfigMap, labelled for Grafana's sidecar");
    let dashboard: serde_json::Value = serde_json::from_str(dashboard["data"]["wave.json"].as_str().unwrap())
        .expect("the dashboard is JSON");
    let mut used: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .flat_map(|t| metrics_in(t["expr"].as_str().unwrap()))
        .collect();
    assert!(used.len() >= 10, "the dashboard queries wave's metrics: {used:?}");
    used.extend(
        alerts
            .iter()
            .enumerate()
            .flat_map(|(i, _)| metrics_in(rule["spec"]["groups"][0]["rules"][i]["expr"].as_str().unwrap())),
    );

    let exported = exported_metrics(&every_metric_wave_serves());
    let unknown: Vec<&String> = used.iter().filter(|m| !exported.contains(*m)).collect();
    assert!(
        unknown.is_empty(),
        "not exported by wave: {unknown:?}; exported: {exported:?}"
    );
}

#[test]
fn the_krew_manifest_filled_in_as_the_release_does_names_a_binary_per_platform() {
    let template = std::fs::read_to_string(repo_root().join("contrib/krew/wave.yaml")).unwrap();
    let filled = template
        .replace("VERSION", env!("CARGO_PKG_VERSION"))
        .replace("SHA256_LINUX_AMD64", &"a".repeat(64))
        .replace("SHA256_LINUX_ARM64", &"b".repeat(64));
    let manifest: Value = serde_norway::from_str(&filled).unwrap();
    assert_eq!(manifest["kind"].as_str(), Some("Plugin"));
    assert_eq!(manifest["metadata"]["name"].as_str(), Some("wave"));
    assert_eq!(
        manifest["spec"]["version"].as_str(),
        Some(format!("v{}", env!("CARGO_PKG_VERSION")).as_str())
    );
    let platforms = manifest["spec"]["platforms"].as_sequence().unwrap();
    for (platform, arch) in platforms.iter().zip(["amd64", "arm64"]) {
        assert_eq!(platform["selector"]["matchLabels"]["arch"].as_str(), Some(arch));
        let uri = platform["uri"].as_str().unwrap();
        assert!(
            uri.ends_with(&format!("/kubectl-wave_linux_{arch}.tar.gz")),
            "{uri}"
        );
        assert_eq!(platform["sha256"].as_str().map(str::len), Some(64));
        assert_eq!(platform["bin"].as_str(), Some("kubectl-wave"));
    }
    let workflow = std::fs::read_to_string(repo_root().join(".github/workflows/release.yaml")).unwrap();
    for placeholder in [
        "SHA256_LINUX_${arch^^}",
        "s/VERSION/",
        "kubectl-wave_linux_$arch.tar.gz",
    ] {
        assert!(
            workflow.contains(placeholder),
            "the release fills in the template: {placeholder}"
        );
    }
}

#[tokio::test]
async fn a_values_file_written_for_waves_chart_installs_and_its_pod_runs() {
    let (client, ns) = setup("wave-values").await;
    let release = format!("wv{}", std::process::id());
    let helm = |args: &[&str]| {
        let out = Command::new(helm_bin_dir().join("helm4"))
            .args(args)
            .env("KUBECONFIG", cluster().kubeconfig())
            .env(
                "HELM_CONFIG_HOME",
                std::env::temp_dir().join(format!("{release}-helm")),
            )
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let values = repo_root().join("testdata/wave-chart-values.yaml");
    let chart = repo_root().join("charts/wave");
    let (ok, notes) = helm(&[
        "install",
        &release,
        chart.to_str().unwrap(),
        "-n",
        &ns,
        "-f",
        values.to_str().unwrap(),
        "--wait",
        "--timeout",
        "120s",
    ]);
    assert!(ok, "helm install with Wave's chart values: {notes}");
    for key in [
        "image.name",
        "annotations",
        "global.imagePullSecrets",
        "global.rbac.enabled",
    ] {
        assert!(
            notes.contains(&format!("DEPRECATED: {key} is Wave's chart key")),
            "a deprecation line for {key}: {notes}"
        );
    }
    assert!(
        !notes.contains("DEPRECATED: webhooks.enabled"),
        "webhooks.enabled: false needs no line"
    );
    let name = format!("{release}-wave");
    let deployment = workloads(&client, &ns, WorkloadKind::DEPLOYMENT)
        .get(&name)
        .await
        .unwrap();
    let pod = &deployment.data["spec"]["template"];
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        "ghcr.io/wave-rs/wave:0.1.0"
    );
    assert_eq!(pod["metadata"]["annotations"]["team"], "platform");
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "registry-credentials");
    assert!(
        pod["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--sync-period=5m"))
    );
    assert_eq!(
        deployment.data["status"]["availableReplicas"], 1,
        "its pod runs (on a kwok node)"
    );
    // Cluster-scoped objects are the release's: remove them.
    let (ok, text) = helm(&["uninstall", &release, "-n", &ns, "--wait"]);
    assert!(ok, "{text}");
}
