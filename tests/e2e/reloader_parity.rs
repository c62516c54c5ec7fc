//! What a Stakater Reloader user relies on beyond the annotations (`docs/migrating-from-reloader.md`):
//! a change that lands a moment after a workload was created reloads it, as Reloader's update handler
//! does.

use serde_json::{Value, json};
use testenv::wait_for;
use tokio::time::{Duration, Instant, sleep_until};
use wave_core::workload::WorkloadKind;

use crate::harness::*;
use crate::reloader::{env_of, last_reloaded_from, reloader_sha};

const AUTO: &str = "reloader.stakater.com/auto";

/// Every kind Reloader reloads by writing a mark (a CronJob's mark goes on the Job it starts).
const KINDS: [WorkloadKind; 5] = [
    WorkloadKind::DEPLOYMENT,
    WorkloadKind::STATEFUL_SET,
    WorkloadKind::DAEMON_SET,
    WorkloadKind::CRON_JOB,
    WorkloadKind::ROLLOUT,
];

/// Creates `kind` `name`, annotated `reloader.stakater.com/auto`, using ConfigMap `config` (envFrom).
pub(crate) async fn create_auto(
    client: &kube::Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
    config: &str,
) {
    let annotations = json!({AUTO: "true"});
    if kind == WorkloadKind::CRON_JOB {
        let spec = pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": config}}]}),
            json!({"restartPolicy": "Never"}),
        );
        let cron_job = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}});
        workloads(client, ns, kind)
            .create(&Default::default(), &serde_json::from_value(cron_job).unwrap())
            .await
            .unwrap();
        return;
    }
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": config}}]}),
        json!({}),
    );
    create_workload(client, ns, kind, name, annotations, spec).await;
}

/// The SHA-1 the workload carries for ConfigMap `config` under `strategy`: its env var, or the hash in
/// `last-reloaded-from`; for a CronJob, on a Job started from it.
pub(crate) async fn carried(
    client: &kube::Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
    config: &str,
    strategy: &str,
) -> Option<String> {
    if kind == WorkloadKind::CRON_JOB {
        let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(client.clone(), ns);
        let job = jobs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|j| {
                j.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "CronJob" && o.name == name)
            })?;
        let template = job.spec?.template;
        return match strategy {
            "annotations" => {
                let value = template
                    .metadata?
                    .annotations?
                    .remove("reloader.stakater.com/last-reloaded-from")?;
                let source: Value = serde_json::from_str(&value).ok()?;
                source["hash"].as_str().map(str::to_string)
            }
            _ => template.spec?.containers[0]
                .env
                .iter()
                .flatten()
                .find(|e| e.name == env_var(config))
                .and_then(|e| e.value.clone()),
        };
    }
    match strategy {
        "annotations" => last_reloaded_from(client, ns, kind, name)
            .await
            .and_then(|source| source["hash"].as_str().map(str::to_string)),
        _ => env_of(client, ns, kind, name, "app")
            .await
            .into_iter()
            .find(|(n, _)| *n == env_var(config))
            .map(|(_, v)| v),
    }
}

fn env_var(config: &str) -> String {
    format!("STAKATER_{}_CONFIGMAP", config.to_uppercase().replace('-', "_"))
}

/// For every kind and each delay: ConfigMap `<kind>-<ms>` is created with `v1`, then the workload
/// using it, then `ms` milliseconds after the create returned the ConfigMap gets `v2`. Every workload
/// must carry v2's SHA-1 (its pods started with v1), and a twin created without a change afterwards
/// must be written nothing. The cases run at once, so their timing does not add up.
async fn a_change_right_after_creation_reloads(strategy: &str) {
    let (client, ns) = setup(&format!("reloader-born-{strategy}")).await;
    install_crd(&client, "rollouts.yaml", "rollouts.argoproj.io").await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--reloader-compat",
            &format!("--reload-strategy={strategy}"),
            "--cronjobs",
            "--argo-rollouts",
        ],
    )
    .await;
    const DELAYS_MS: [u64; 3] = [0, 50, 200];
    let cases: Vec<(WorkloadKind, u64)> = KINDS
        .iter()
        .flat_map(|kind| DELAYS_MS.map(|ms| (*kind, ms)))
        .collect();
    let case_name = |kind: WorkloadKind, ms: u64| format!("{}-{ms}", name(kind));
    let mut started = tokio::task::JoinSet::new();
    for &(kind, ms) in &cases {
        let (client, ns, name) = (client.clone(), ns.clone(), case_name(kind, ms));
        started.spawn(async move {
            create_configmap(&client, &ns, &name, json!({"k": "v1"})).await;
            // The twin: created the same way, its config never changes.
            let twin = format!("{name}-still");
            create_configmap(&client, &ns, &twin, json!({"k": "v1"})).await;
            create_auto(&client, &ns, kind, &twin, &twin).await;
            create_auto(&client, &ns, kind, &name, &name).await;
            // The stimulus' timing is the case itself: the change lands `ms` after the create.
            sleep_until(Instant::now() + Duration::from_millis(ms)).await;
            patch_configmap(&client, &ns, &name, json!({"data": {"k": "v2"}})).await;
        });
    }
    while let Some(case) = started.join_next().await {
        case.expect("the case's objects are created and changed");
    }
    let v2 = reloader_sha(&[("k", "v2")]);
    for &(kind, ms) in &cases {
        let name = case_name(kind, ms);
        let found = wait_for(
            &format!("{name} ({strategy}) to reload for v2"),
            TIMEOUT,
            || async {
                carried(&client, &ns, kind, &name, &name, strategy)
                    .await
                    .filter(|sha| *sha == v2)
            },
        )
        .await;
        assert_eq!(found, v2, "{name}");
    }
    wait_for("wave to check every twin", TIMEOUT, || async {
        (wave.noops() >= cases.len() as u64).then_some(())
    })
    .await;
    // One write per changed workload, none for the twins: a workload created with its config as it is
    // is not written, as at start-up.
    wave.expect_writes(cases.len() as u64, "one reload per changed workload")
        .await;
    for &(kind, ms) in &cases {
        let twin = format!("{}-still", case_name(kind, ms));
        assert_eq!(
            carried(&client, &ns, kind, &twin, &twin, strategy).await,
            None,
            "{twin}: its config did not change after its creation"
        );
    }
}

#[tokio::test]
async fn a_change_landing_0_50_or_200_ms_after_a_workload_s_creation_reloads_every_kind_with_env_vars() {
    a_change_right_after_creation_reloads("env-vars").await;
}

#[tokio::test]
async fn a_change_landing_0_50_or_200_ms_after_a_workload_s_creation_reloads_every_kind_with_annotations() {
    a_change_right_after_creation_reloads("annotations").await;
}
