//! Jobs opted in through Stakater Reloader's annotations (`--jobs`, with `--reloader-compat`): a change
//! deletes the Job and creates it again with Reloader's mark, as Reloader's `ReCreateJobFromjob` does;
//! a create the apiserver refuses after the delete is tried again until it lands, so no Job is lost;
//! `--ignored-workload-types=jobs` and wave's own annotation leave a Job alone.

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use testenv::wait_for;
use wave_core::workload::WorkloadKind;

use crate::harness::*;
use crate::reloader::reloader_sha;

/// Job `name` using ConfigMap `cfg` (envFrom), annotated `annotations`, with `labels` on it; with
/// `manual_selector`, its own selector and pod labels (`spec.manualSelector: true`).
async fn create_job(
    client: &kube::Client,
    ns: &str,
    name: &str,
    annotations: Value,
    labels: Value,
    manual_selector: bool,
) {
    let mut spec = json!({
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "app", "image": "busybox", "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}
    });
    if manual_selector {
        spec["manualSelector"] = json!(true);
        spec["selector"] = json!({"matchLabels": {"run": name}});
        spec["template"]["metadata"] = json!({"labels": {"run": name}});
    }
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": annotations, "labels": labels}, "spec": spec});
    Api::<Job>::namespaced(client.clone(), ns)
        .create(&Default::default(), &serde_json::from_value(job).unwrap())
        .await
        .unwrap();
}

/// Job `name` as stored: its uid and the value of its container's `STAKATER_CFG_CONFIGMAP`.
async fn job_state(client: &kube::Client, ns: &str, name: &str) -> Option<(String, Option<String>, Job)> {
    let job = Api::<Job>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    let mark = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find(|e| e.name == "STAKATER_CFG_CONFIGMAP"))
        .and_then(|e| e.value.clone());
    Some((job.metadata.uid.clone().unwrap_or_default(), mark, job))
}

/// Waits until Job `name` is a new object (not `old_uid`) carrying the SHA-1 of `version`; returns it.
async fn wait_recreated(client: &kube::Client, ns: &str, name: &str, old_uid: &str, version: &str) -> Job {
    let sha = reloader_sha(&[("k", version)]);
    wait_for(
        &format!("Job {name} created again carrying {version}"),
        TIMEOUT,
        || async {
            let (uid, mark, job) = job_state(client, ns, name).await?;
            (uid != old_uid && mark.as_deref() == Some(sha.as_str())).then_some(job)
        },
    )
    .await
}

const AUTO: (&str, &str) = ("reloader.stakater.com/auto", "true");

/// A namespace with ConfigMap `cfg` and Job `migrate` reloading on it (labelled for [`FailingWrites`]
/// when `failable`), and wave (`--reloader-compat --jobs`) having checked it: the client, the
/// namespace, wave, and the Job's uid.
async fn watched_job(prefix: &str, failable: bool) -> (kube::Client, String, Wave, String) {
    let (client, ns) = setup(prefix).await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    let labels = if failable {
        json!({FailingWrites::LABEL: ns.clone()})
    } else {
        json!({})
    };
    create_job(&client, &ns, "migrate", json!({AUTO.0: AUTO.1}), labels, false).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--jobs"]).await;
    wait_for("wave to check the Job", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    let (uid, _, _) = job_state(&client, &ns, "migrate").await.unwrap();
    (client, ns, wave, uid)
}

#[tokio::test]
async fn a_reloader_annotated_job_is_deleted_and_created_again_with_the_mark_as_reloader_does() {
    let (client, ns) = setup("reloader-jobs").await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    create_job(
        &client,
        &ns,
        "migrate",
        json!({AUTO.0: AUTO.1}),
        json!({"team": "a"}),
        false,
    )
    .await;
    create_job(&client, &ns, "pinned", json!({AUTO.0: AUTO.1}), json!({}), true).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--jobs"]).await;
    wait_for("wave to check both Jobs", TIMEOUT, || async {
        (wave.noops() >= 2).then_some(())
    })
    .await;
    assert_eq!(wave.writes(), 0, "nothing written at start-up");
    let (migrate_uid, mark, first) = job_state(&client, &ns, "migrate").await.unwrap();
    assert_eq!(mark, None);
    let (pinned_uid, _, pinned_before) = job_state(&client, &ns, "pinned").await.unwrap();

    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    let migrate = wait_recreated(&client, &ns, "migrate", &migrate_uid, "v2").await;
    let pinned = wait_recreated(&client, &ns, "pinned", &pinned_uid, "v2").await;
    wave.expect_writes(2, "one re-creation per Job").await;

    // Its own metadata and spec are kept; the selector is the apiserver's new one, for the new uid.
    assert_eq!(migrate.metadata.labels.as_ref().unwrap()["team"], "a");
    assert_eq!(migrate.metadata.annotations.as_ref().unwrap()[AUTO.0], AUTO.1);
    let selector = migrate.spec.as_ref().unwrap().selector.as_ref().unwrap();
    let old_selector = first.spec.as_ref().unwrap().selector.as_ref().unwrap();
    assert_ne!(selector, old_selector, "a selector of its own");
    assert_eq!(
        selector.match_labels.as_ref().unwrap()["batch.kubernetes.io/controller-uid"],
        migrate.metadata.uid.clone().unwrap()
    );
    // A Job with a manual selector keeps it (Reloader drops it and the create is refused).
    assert_eq!(
        pinned.spec.as_ref().unwrap().selector,
        pinned_before.spec.as_ref().unwrap().selector
    );
    wait_event(&client, &ns, "migrate", "the Reloaded Event", |(_, reason, _)| {
        reason == "Reloaded"
    })
    .await;

    // The Jobs it created carry the mark: the next change re-creates each once more, and no more.
    let (migrate_uid, _, _) = job_state(&client, &ns, "migrate").await.unwrap();
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v3"}})).await;
    wait_recreated(&client, &ns, "migrate", &migrate_uid, "v3").await;
    wave.expect_writes(4, "one more re-creation per Job").await;
}

#[tokio::test]
async fn a_job_whose_new_create_would_be_refused_is_not_deleted_and_is_created_again_once_it_would_not() {
    let (client, ns, wave, old_uid) = watched_job("reloader-job-refused", true).await;

    // Every create of it fails, dry runs included: wave finds out before it deletes anything.
    let failing = FailingWrites::start_for(&client, &ns, "batch", "jobs", "CREATE").await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    let (_, _, note) = wait_event(
        &client,
        &ns,
        "migrate",
        "a WriteFailed Warning",
        |(_, reason, _)| reason == "WriteFailed",
    )
    .await;
    assert!(
        note.contains("left as it is"),
        "the Warning says the Job was kept: {note}"
    );
    assert_eq!(
        job_state(&client, &ns, "migrate").await.unwrap().0,
        old_uid,
        "not deleted"
    );

    failing.stop(&client).await;
    wait_recreated(&client, &ns, "migrate", &old_uid, "v2").await;
    wave.expect_writes(1, "created once").await;
}

/// Refuses every create of a Job in `ns` but dry runs (a ValidatingAdmissionPolicy): what wave's dry run
/// cannot see coming, as a quota filled or a policy changed between the check and the create.
/// Returns the binding's name: deleting it ends the refusals.
async fn refuse_real_job_creates(client: &kube::Client, ns: &str) -> String {
    let policy = format!("wave-e2e-no-jobs-{ns}");
    let api = |kind: &str, plural: &str| {
        let gvk = kube::core::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        Api::<kube::api::DynamicObject>::all_with(
            client.clone(),
            &kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural),
        )
    };
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["jobs"]}]},
            "validations": [{"expression": "request.dryRun == true", "message": "no Job is created here for now"}]}});
    api("ValidatingAdmissionPolicy", "validatingadmissionpolicies")
        .create(&Default::default(), &serde_json::from_value(body).unwrap())
        .await
        .unwrap();
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}});
    api(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
    .create(&Default::default(), &serde_json::from_value(binding).unwrap())
    .await
    .unwrap();
    // The policy takes effect once the apiserver has loaded it: a probe Job is refused.
    wait_for("the policy to refuse a Job's create", TIMEOUT, || async {
        let probe = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "probe-"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}});
        let jobs = Api::<Job>::namespaced(client.clone(), ns);
        match jobs.create(&Default::default(), &serde_json::from_value(probe).unwrap()).await {
            Err(kube::Error::Api(status)) if status.message.contains("no Job is created here") => Some(()),
            Ok(job) => {
                let params = kube::api::DeleteParams::background();
                let _ = jobs.delete(&job.metadata.name.unwrap_or_default(), &params).await;
                None
            }
            Err(_) => None,
        }
    })
    .await;
    policy
}

#[tokio::test]
async fn a_job_whose_create_is_refused_after_its_delete_is_held_and_created_once_the_apiserver_takes_it() {
    let (client, ns, wave, old_uid) = watched_job("reloader-job-held", false).await;

    let binding = refuse_real_job_creates(&client, &ns).await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    wait_for("the Job deleted, and its create refused", TIMEOUT, || async {
        let refused = wave.metric("wave_reconcile_errors_total", &["error=\"recreate_job\""]) >= 1.0;
        (refused && job_state(&client, &ns, "migrate").await.is_none()).then_some(())
    })
    .await;
    let (_, _, note) = wait_event(
        &client,
        &ns,
        "migrate",
        "a WriteFailed Warning",
        |(_, reason, _)| reason == "WriteFailed",
    )
    .await;
    assert!(
        note.contains("keeps trying"),
        "the Warning says the Job is not lost: {note}"
    );

    let gvk = kube::core::GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
    );
    let bindings = Api::<kube::api::DynamicObject>::all_with(
        client.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(&gvk, "validatingadmissionpolicybindings"),
    );
    bindings.delete(&binding, &Default::default()).await.unwrap();
    wait_recreated(&client, &ns, "migrate", &old_uid, "v2").await;
    wave.expect_writes(1, "created once").await;
    wait_event(
        &client,
        &ns,
        "migrate",
        "the Reloaded Event, once created",
        |(_, reason, _)| reason == "Reloaded",
    )
    .await;
}

#[tokio::test]
async fn a_job_being_deleted_is_never_created_again() {
    let (client, ns) = setup("reloader-job-terminating").await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    create_job(&client, &ns, "migrate", json!({AUTO.0: AUTO.1}), json!({}), false).await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let hold = |finalizers: Value| Patch::Merge(json!({"metadata": {"finalizers": finalizers}}));
    jobs.patch(
        "migrate",
        &PatchParams::default(),
        &hold(json!(["wave-e2e/hold"])),
    )
    .await
    .unwrap();
    crate::reloader_parity::create_auto(&client, &ns, WorkloadKind::DEPLOYMENT, "web", "cfg").await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--jobs"]).await;
    wait_for("wave to check both", TIMEOUT, || async {
        (wave.noops() >= 2).then_some(())
    })
    .await;
    let (old_uid, _, _) = job_state(&client, &ns, "migrate").await.unwrap();
    // Its owner (a user, its TTL) deletes it; a finalizer holds it while the config changes.
    jobs.delete("migrate", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    // The Deployment is the sentinel: once it is reloaded, the Job's turn has come.
    wave.expect_writes(1, "the Deployment only").await;
    let (uid, _, job) = job_state(&client, &ns, "migrate").await.unwrap();
    assert_eq!(uid, old_uid);
    assert!(
        job.metadata.deletion_timestamp.is_some(),
        "still being deleted, as its owner asked"
    );
    jobs.patch("migrate", &PatchParams::default(), &hold(json!(null)))
        .await
        .unwrap();
    wait_for("the Job gone", TIMEOUT, || async {
        job_state(&client, &ns, "migrate").await.is_none().then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v3"}})).await;
    wave.expect_writes(2, "the Deployment again, and no Job").await;
    assert!(
        job_state(&client, &ns, "migrate").await.is_none(),
        "wave created no Job its owner deleted"
    );
}

#[tokio::test]
async fn wave_s_own_annotation_and_ignored_workload_types_jobs_leave_a_job_alone() {
    // wave's own annotation on a Job, under --auto-reload-all, which would select any Job.
    let (client, ns) = setup("reloader-job-wave").await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    let wave_only = json!({"wave.pusher.com/update-on-config-change": "true"});
    create_job(&client, &ns, "wave-annotated", wave_only, json!({}), false).await;
    create_job(&client, &ns, "unannotated", json!({}), json!({}), false).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--jobs", "--auto-reload-all"]).await;
    wait_for("wave to check the unannotated Job", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    let (wave_uid, _, _) = job_state(&client, &ns, "wave-annotated").await.unwrap();
    let (plain_uid, _, _) = job_state(&client, &ns, "unannotated").await.unwrap();
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    // The unannotated Job is reloaded under --auto-reload-all: it is the sentinel.
    wait_recreated(&client, &ns, "unannotated", &plain_uid, "v2").await;
    wave.expect_writes(1, "the unannotated Job only").await;
    assert_eq!(
        job_state(&client, &ns, "wave-annotated").await.unwrap().0,
        wave_uid,
        "not deleted"
    );

    // --ignored-workload-types=jobs.
    let (client, ns) = setup("reloader-job-ignored").await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    create_job(&client, &ns, "ignored", json!({AUTO.0: AUTO.1}), json!({}), false).await;
    crate::reloader_parity::create_auto(&client, &ns, WorkloadKind::DEPLOYMENT, "web", "cfg").await;
    let wave = Wave::start(
        &[&ns],
        &["--reloader-compat", "--jobs", "--ignored-workload-types=jobs"],
    )
    .await;
    wait_for("wave to check the Deployment", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    let (uid, _, _) = job_state(&client, &ns, "ignored").await.unwrap();
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    wave.expect_writes(1, "the Deployment only").await;
    assert_eq!(
        job_state(&client, &ns, "ignored").await.unwrap().0,
        uid,
        "not deleted"
    );

    let (code, _, err) = run_wave(&["run", "--jobs"], None);
    assert_eq!(code, 2, "--jobs alone is a usage error: {err}");
    assert!(err.contains("--reloader-compat"), "{err}");
}
