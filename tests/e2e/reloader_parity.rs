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

/// Whether wave's debug log shows a reconcile of workload `ns/name` that wrote nothing.
fn reconciled_noop(log: &str, ns: &str, name: &str) -> bool {
    let workload = format!("{ns}/{name} ");
    log.lines()
        .any(|l| l.contains("reconciled") && l.contains(&workload) && l.contains("\"noop\""))
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
    for &(kind, ms) in &cases {
        let twin = format!("{}-still", case_name(kind, ms));
        wait_for(&format!("wave to check {twin}"), TIMEOUT, || async {
            reconciled_noop(&wave.output(), &ns, &twin).then_some(())
        })
        .await;
    }
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

/// Every flag of Reloader v1.4.21 (`ConfigureReloaderFlags`, `internal/pkg/util/util.go`) that wave
/// takes, as a Reloader Deployment carries it (Go's `--flag=value`). `--namespaces` is the harness's.
const ACCEPTED: [&str; 24] = [
    "--auto-reload-all=false",
    "--configmap-annotation=configmap.reloader.stakater.com/reload",
    "--secret-annotation=secret.reloader.stakater.com/reload",
    "--auto-annotation=reloader.stakater.com/auto",
    "--ignore-annotation=reloader.stakater.com/ignore",
    "--configmap-auto-annotation=configmap.reloader.stakater.com/auto",
    "--secret-auto-annotation=secret.reloader.stakater.com/auto",
    "--auto-search-annotation=reloader.stakater.com/search",
    "--search-match-annotation=reloader.stakater.com/match",
    "--pause-deployment-annotation=deployment.reloader.stakater.com/pause-period",
    "--pause-deployment-time-annotation=deployment.reloader.stakater.com/paused-at",
    "--log-format=",
    "--log-level=warning",
    "--webhook-url=",
    "--resources-to-ignore=secrets",
    "--ignored-workload-types=jobs,cronjobs",
    "--namespaces-to-ignore=kube-system",
    "--resource-label-selector=reload:yes",
    "--is-Argo-Rollouts=false",
    "--reload-strategy=annotations",
    "--reload-on-create=true",
    "--reload-on-delete=true",
    "--sync-after-restart",
    "--enable-csi-integration",
];

/// The flags of Reloader v1.4.21 that wave refuses, and what the refusal must name instead.
const REFUSED: [(&str, &str); 13] = [
    ("--enable-pprof", "/metrics"),
    ("--enable-pprof=true", "/metrics"),
    ("--pprof-addr=:6060", "no Go profiler"),
    (
        "--configmap-annotation=team.io/reload",
        "configmap.reloader.stakater.com/reload",
    ),
    (
        "--secret-annotation=team.io/reload",
        "secret.reloader.stakater.com/reload",
    ),
    ("--auto-annotation=team.io/auto", "reloader.stakater.com/auto"),
    (
        "--ignore-annotation=team.io/ignore",
        "reloader.stakater.com/ignore",
    ),
    (
        "--configmap-auto-annotation=team.io/auto",
        "configmap.reloader.stakater.com/auto",
    ),
    (
        "--secret-auto-annotation=team.io/auto",
        "secret.reloader.stakater.com/auto",
    ),
    (
        "--auto-search-annotation=team.io/search",
        "reloader.stakater.com/search",
    ),
    (
        "--search-match-annotation=team.io/match",
        "reloader.stakater.com/match",
    ),
    (
        "--pause-deployment-annotation=team.io/pause",
        "deployment.reloader.stakater.com/pause-period",
    ),
    (
        "--pause-deployment-time-annotation=team.io/at",
        "deployment.reloader.stakater.com/paused-at",
    ),
];

#[tokio::test]
async fn wave_run_takes_every_reloader_flag_or_exits_naming_what_to_use_instead() {
    let (client, ns) = setup("reloader-flags").await;
    // Those it takes, all at once, with --enable-ha (leader election): it starts, elects and gets ready.
    let lease = format!("--leader-election-namespace={ns}");
    let mut flags = vec!["--reloader-compat", "--enable-ha", &lease];
    flags.extend(ACCEPTED);
    let _wave = Wave::start(&[&ns], &flags).await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> = kube::Api::namespaced(client, &ns);
    wait_for("--enable-ha to elect through a Lease", TIMEOUT, || async {
        leases
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    // The others: wave exits at once, with a usage error naming what to use instead.
    for (flag, instead) in REFUSED {
        let (code, _, err) = run_wave(&["run", "--reloader-compat", flag], None);
        assert_eq!(code, 2, "{flag} is refused as a usage error: {err}");
        assert!(
            err.contains(instead),
            "{flag}: the refusal names {instead:?}: {err}"
        );
    }
    // The Reloader-only flags need --reloader-compat, as the others do.
    let (code, _, err) = run_wave(&["run", "--ignored-workload-types=jobs"], None);
    assert_eq!(code, 2);
    assert!(err.contains("--reloader-compat"), "{err}");
}

#[tokio::test]
async fn ignored_workload_types_cronjobs_starts_no_job_for_a_reloader_annotated_cron_job() {
    let (client, ns) = setup("reloader-ignore-cron").await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--reloader-compat",
            "--cronjobs",
            "--ignored-workload-types=cronjobs",
        ],
    )
    .await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    create_auto(&client, &ns, WorkloadKind::CRON_JOB, "nightly", "cfg").await;
    // A Deployment using the same ConfigMap is the sentinel: once it is reloaded, the CronJob's turn
    // has come and gone.
    create_auto(&client, &ns, WorkloadKind::DEPLOYMENT, "web", "cfg").await;
    wait_for("wave to check the Deployment", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    let v2 = reloader_sha(&[("k", "v2")]);
    wait_for("the Deployment to reload", TIMEOUT, || async {
        carried(&client, &ns, WorkloadKind::DEPLOYMENT, "web", "cfg", "env-vars")
            .await
            .filter(|sha| *sha == v2)
    })
    .await;
    wave.expect_writes(1, "the Deployment only").await;
    assert_eq!(
        carried(&client, &ns, WorkloadKind::CRON_JOB, "nightly", "cfg", "env-vars").await,
        None,
        "no Job started from the ignored CronJob"
    );
}

#[tokio::test]
async fn with_reload_on_delete_an_object_deleted_right_after_a_workload_s_creation_reloads_it() {
    let (client, ns) = setup("reloader-born-deleted").await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--reloader-compat",
            "--reload-strategy=annotations",
            "--reload-on-delete",
        ],
    )
    .await;
    create_configmap(&client, &ns, "gone", json!({"k": "v1"})).await;
    create_auto(&client, &ns, WorkloadKind::DEPLOYMENT, "web", "gone").await;
    // At once: before wave first reads it, as a rule.
    delete_configmap(&client, &ns, "gone").await;
    let no_data = reloader_sha(&[]);
    wait_for(
        "last-reloaded-from to name the deleted ConfigMap with no data",
        TIMEOUT,
        || async {
            carried(
                &client,
                &ns,
                WorkloadKind::DEPLOYMENT,
                "web",
                "gone",
                "annotations",
            )
            .await
            .filter(|sha| *sha == no_data)
        },
    )
    .await;
    wave.expect_writes(1, "one reload").await;
}
