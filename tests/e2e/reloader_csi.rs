//! Secrets Store CSI rotations (`--enable-csi-integration`, with `--reloader-compat`): a workload that
//! mounts a SecretProviderClass and asks Reloader for it reloads when the driver reports, by updating a
//! pod's SecretProviderClassPodStatus, that it mounted new versions, as Reloader v1.4.21 does. The
//! driver's CRDs come from its Go module (`hack/testenv csi-crds`); the driver itself needs a real node,
//! so the tests write the statuses as the driver would.

use serde_json::{Value, json};
use testenv::wait_for;
use wave_core::workload::WorkloadKind;

use crate::harness::*;
use crate::reloader::{env_of, reloader_sha};

const ENV_VAR: &str = "STAKATER_VAULT_SECRETPROVIDERCLASS";

/// Reloader's SHA-1 of a status of class `vault` that mounted `secret/db` at `version`, computed
/// outside wave (`sha1sum`).
fn sha_of(version: &str) -> String {
    reloader_sha(&[("secret/db", version), ("SecretProviderClassName", "vault")])
}

/// Writes the status of pod `pod`'s mount of class `class` as the driver would: created, or replaced.
async fn report(client: &kube::Client, ns: &str, pod: &str, class: &str, version: &str) {
    let name = format!("{pod}-{ns}-{class}");
    let body = json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
        "metadata": {"name": name, "labels": {"secrets-store.csi.k8s.io/pod.name": pod}},
        "status": {"podName": pod, "secretProviderClassName": class, "mounted": true,
            "targetPath": format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/secrets/mount"),
            "objects": [{"id": "secret/db", "version": version}]}});
    let api = wave_runtime::api::provider_status_api(client, Some(ns));
    let params = kube::api::PatchParams::apply("csi-driver-in-test").force();
    api.patch(&name, &params, &kube::api::Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("writing status {ns}/{name}: {e}"));
}

/// A pod spec whose container `app` (after a sidecar) mounts class `class` through the CSI driver.
fn mounting(class: &str) -> Value {
    json!({"containers": [
            {"name": "sidecar", "image": "busybox"},
            {"name": "app", "image": "busybox", "volumeMounts": [{"name": "secrets", "mountPath": "/mnt/secrets"}]}],
        "volumes": [{"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": true,
            "volumeAttributes": {"secretProviderClass": class}}}]})
}

async fn env_var(client: &kube::Client, ns: &str, name: &str, container: &str) -> Option<String> {
    env_of(client, ns, WorkloadKind::DEPLOYMENT, name, container)
        .await
        .into_iter()
        .find(|(n, _)| n == ENV_VAR)
        .map(|(_, v)| v)
}

/// A namespace (named after `prefix`) with the driver's CRDs, pod `web-0`'s status of class `vault` at
/// v1, and Deployment `web` mounting `vault` and saying `annotation`.
async fn web_mounting_vault(prefix: &str, annotation: &str) -> (kube::Client, String) {
    let (client, ns) = setup(prefix).await;
    install_csi_crds().await;
    report(&client, &ns, "web-0", "vault", "v1").await;
    let annotations = json!({ annotation: "true" });
    create_workload(
        &client,
        &ns,
        WorkloadKind::DEPLOYMENT,
        "web",
        annotations,
        mounting("vault"),
    )
    .await;
    (client, ns)
}

#[tokio::test]
async fn a_rotated_secret_provider_class_reloads_the_workloads_that_mount_it_and_ask_as_reloader_does() {
    let (client, ns) = setup("reloader-csi").await;
    let (_, tenant) = setup("reloader-csi-tenant").await;
    install_csi_crds().await;
    report(&client, &ns, "web-0", "vault", "v1").await;
    report(&client, &tenant, "evil-0", "vault", "v1").await;
    let deployment = WorkloadKind::DEPLOYMENT;
    let typed_auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    create_workload(
        &client,
        &ns,
        deployment,
        "web",
        typed_auto.clone(),
        mounting("vault"),
    )
    .await;
    let by_name = json!({"secretproviderclass.reloader.stakater.com/reload": "vault"});
    let first_only = json!({"containers": [{"name": "first", "image": "busybox"}]});
    create_workload(&client, &ns, deployment, "named", by_name, first_only).await;
    let excluded = json!({"reloader.stakater.com/auto": "true",
        "secretproviderclasses.exclude.reloader.stakater.com/reload": "vault"});
    create_workload(&client, &ns, deployment, "excluded", excluded, mounting("vault")).await;
    create_workload(
        &client,
        &ns,
        deployment,
        "elsewhere",
        typed_auto,
        mounting("other"),
    )
    .await;
    // Reloader's plain `auto` covers classes only under --enable-csi-integration; wave's ConfigMap
    // annotations never reach one.
    let wave = Wave::start(
        &[&ns, &tenant],
        &["--reloader-compat", "--enable-csi-integration"],
    )
    .await;
    wait_for("wave to check the four Deployments", TIMEOUT, || async {
        (wave.noops() >= 4).then_some(())
    })
    .await;
    assert_eq!(wave.writes(), 0, "nothing written at start-up");

    // A new pod's status is no rotation (Reloader ignores creations); a tenant's status naming a class
    // of the same name in its own namespace reloads nothing here.
    report(&client, &ns, "web-1", "vault", "v9").await;
    report(&client, &tenant, "evil-0", "vault", "v666").await;
    // The driver rotates what web-0 mounted: the class is now at v2.
    report(&client, &ns, "web-0", "vault", "v2").await;
    let v2 = sha_of("v2");
    wait_for("web and named to carry the rotation", TIMEOUT, || async {
        let web = env_var(&client, &ns, "web", "app").await?;
        let named = env_var(&client, &ns, "named", "first").await?;
        (web == v2 && named == v2).then_some(())
    })
    .await;
    wave.expect_writes(2, "web and named, once each").await;
    assert_eq!(
        env_var(&client, &ns, "web", "sidecar").await,
        None,
        "on the container that mounts it"
    );
    assert_eq!(env_var(&client, &ns, "excluded", "app").await, None);
    assert_eq!(env_var(&client, &ns, "elsewhere", "app").await, None);

    // web-1 catching up with the rotation changes nothing; the next rotation reloads again.
    report(&client, &ns, "web-1", "vault", "v2").await;
    report(&client, &ns, "web-1", "vault", "v3").await;
    let v3 = sha_of("v3");
    wait_for("web to carry the next rotation", TIMEOUT, || async {
        (env_var(&client, &ns, "web", "app").await? == v3).then_some(())
    })
    .await;
    wave.expect_writes(4, "web and named, once more each").await;
    let log = wave.output();
    assert!(
        !log.contains("v666"),
        "nothing of the tenant's status in wave's log"
    );
}

#[tokio::test]
async fn with_the_annotations_strategy_a_rotation_writes_last_reloaded_from_naming_the_class() {
    let (client, ns) = web_mounting_vault("reloader-csi-annotations", "reloader.stakater.com/auto").await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--reloader-compat",
            "--enable-csi-integration",
            "--reload-strategy=annotations",
        ],
    )
    .await;
    wait_for("wave to check the Deployment", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    report(&client, &ns, "web-0", "vault", "v2").await;
    let source: Value = wait_for("last-reloaded-from to name the class", TIMEOUT, || async {
        let w = workload(&client, &ns, WorkloadKind::DEPLOYMENT, "web").await;
        serde_json::from_str(
            w.template
                .annotation("reloader.stakater.com/last-reloaded-from")?,
        )
        .ok()
    })
    .await;
    assert_eq!(source["type"], "SECRETPROVIDERCLASS");
    assert_eq!(source["name"], "vault");
    assert_eq!(source["namespace"], ns.as_str());
    assert_eq!(source["hash"], sha_of("v2").as_str());
    assert_eq!(source["containerRefs"], json!(["app"]));
    wave.expect_writes(1, "one reload").await;
}

/// Creates SecretProviderClass `name` with `annotations` (its spec as a Vault one would be).
async fn create_class(ns: &str, name: &str, annotations: Value) {
    let class = json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClass",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"provider": "vault", "parameters": {"roleName": "app", "objects": "- objectName: db"}}});
    let (ok, out) = kubectl_stdin(&["apply", "-f", "-"], &class.to_string());
    assert!(ok, "creating SecretProviderClass {ns}/{name}: {out}");
}

#[tokio::test]
async fn a_class_that_says_ignore_reloads_nothing_and_one_that_says_match_is_found_by_search() {
    let (client, ns) = setup("reloader-csi-marks").await;
    install_csi_crds().await;
    create_class(&ns, "vault", json!({"reloader.stakater.com/ignore": "true"})).await;
    create_class(&ns, "other", json!({"reloader.stakater.com/match": "true"})).await;
    report(&client, &ns, "ignoring-0", "vault", "v1").await;
    report(&client, &ns, "searching-0", "other", "v1").await;
    let deployment = WorkloadKind::DEPLOYMENT;
    let auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    create_workload(&client, &ns, deployment, "ignoring", auto, mounting("vault")).await;
    let search = json!({"reloader.stakater.com/search": "true"});
    create_workload(&client, &ns, deployment, "searching", search, mounting("other")).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--enable-csi-integration"]).await;
    wait_for("wave to check both Deployments", TIMEOUT, || async {
        (wave.noops() >= 2).then_some(())
    })
    .await;
    report(&client, &ns, "ignoring-0", "vault", "v2").await;
    report(&client, &ns, "searching-0", "other", "v2").await;
    let other = reloader_sha(&[("secret/db", "v2"), ("SecretProviderClassName", "other")]);
    wait_for(
        "searching to carry the rotation of the class marked match",
        TIMEOUT,
        || async {
            let env = env_of(&client, &ns, deployment, "searching", "app").await;
            env.iter()
                .any(|(n, v)| n == "STAKATER_OTHER_SECRETPROVIDERCLASS" && *v == other)
                .then_some(())
        },
    )
    .await;
    wave.expect_writes(1, "only searching").await;
    assert_eq!(
        env_var(&client, &ns, "ignoring", "app").await,
        None,
        "vault says ignore"
    );

    // Without `ignore`, the class's next rotation reloads.
    let (ok, out) = kubectl_stdin(
        &[
            "annotate",
            "-n",
            &ns,
            "secretproviderclass",
            "vault",
            "reloader.stakater.com/ignore-",
        ],
        "",
    );
    assert!(ok, "{out}");
    report(&client, &ns, "ignoring-0", "vault", "v3").await;
    let v3 = sha_of("v3");
    wait_for(
        "ignoring to carry the rotation once vault no longer says ignore",
        TIMEOUT,
        || async { (env_var(&client, &ns, "ignoring", "app").await? == v3).then_some(()) },
    )
    .await;
    wave.expect_writes(2, "and then ignoring").await;
}

#[tokio::test]
async fn enable_csi_integration_needs_reloader_compat() {
    let (code, _, err) = run_wave(&["run", "--enable-csi-integration"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--reloader-compat"), "{err}");
}

#[tokio::test]
async fn with_the_charts_rights_rotations_are_followed_and_without_them_wave_warns_and_runs() {
    let auto = "secretproviderclass.reloader.stakater.com/auto";
    let (client, ns) = web_mounting_vault("reloader-csi-rbac", auto).await;
    let release_ns = testenv::namespace(&client, "reloader-csi-release").await;
    let flags = ["--reloader-compat", "--enable-csi-integration"];
    let pid = std::process::id();

    // The chart without reloader.enableCSIIntegration grants nothing on the statuses: wave says so,
    // gets ready, and runs without following rotations (its watch would never list otherwise).
    let without = crate::ship::chart_identity(
        &format!("csi-off-{pid}"),
        &release_ns,
        &["reloader.compat=true"],
        |_| {},
    );
    let wave = Wave::start_as(&without, &[&ns], &flags).await;
    wait_for("the warning that rotations are not followed", TIMEOUT, || async {
        let log = wave.output();
        (log.contains("cannot list secretproviderclasspodstatuses in namespace")
            && log.contains("SecretProviderClass rotations are not followed"))
        .then_some(())
    })
    .await;
    drop(wave);

    let sets = ["reloader.compat=true", "reloader.enableCSIIntegration=true"];
    let with = crate::ship::chart_identity(&format!("csi-on-{pid}"), &release_ns, &sets, |_| {});
    let wave = Wave::start_as(&with, &[&ns], &flags).await;
    wait_for("wave to check the Deployment", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    report(&client, &ns, "web-0", "vault", "v2").await;
    let v2 = sha_of("v2");
    wait_for("web to carry the rotation", TIMEOUT, || async {
        (env_var(&client, &ns, "web", "app").await? == v2).then_some(())
    })
    .await;
    assert!(!wave.output().contains("not followed"), "{}", wave.output());
}
