//! Stakater Reloader's annotations, understood natively with `--reloader-compat` (off by default): the
//! right workloads reload, the others do not, and wave writes what Reloader v1.4.21 writes (its SHA-1 is
//! computed here with `sha1sum`, from Reloader's input format, not with wave's code). Without the flag
//! they are left alone, and a running Reloader is reported when it is on.

use std::process::Command;

use serde_json::{Value, json};
use testenv::wait_for;
use wave_core::workload::WorkloadKind;

use crate::harness::*;

const AUTO: &str = "reloader.stakater.com/auto";
const CONFIGMAP_AUTO: &str = "configmap.reloader.stakater.com/auto";
const SECRET_AUTO: &str = "secret.reloader.stakater.com/auto";
const CONFIGMAP_RELOAD: &str = "configmap.reloader.stakater.com/reload";
const SECRET_RELOAD: &str = "secret.reloader.stakater.com/reload";
const CONFIGMAP_EXCLUDE: &str = "configmaps.exclude.reloader.stakater.com/reload";
const SEARCH: &str = "reloader.stakater.com/search";
const MATCH: &str = "reloader.stakater.com/match";
const IGNORE: &str = "reloader.stakater.com/ignore";
const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";

/// Reloader's SHA-1 of an object whose values are all plain strings: `k=v` entries sorted, joined by `;`.
pub(crate) fn reloader_sha(data: &[(&str, &str)]) -> String {
    let mut entries: Vec<String> = data.iter().map(|(k, v)| format!("{k}={v}")).collect();
    entries.sort();
    let out = pipe(Command::new("sha1sum"), &entries.join(";"));
    assert!(out.status.success(), "sha1sum runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("sha1sum prints a digest")
        .to_string()
}

/// The env of container `container` of the workload, as `name → value`.
pub(crate) async fn env_of(
    client: &kube::Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
    container: &str,
) -> Vec<(String, String)> {
    let object = workloads(client, ns, kind).get(name).await.unwrap();
    let pointer = format!("{}/spec/containers", kind.info().template);
    object
        .data
        .pointer(&pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == container)
        .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The pod template's `last-reloaded-from`, parsed.
pub(crate) async fn last_reloaded_from(
    client: &kube::Client,
    ns: &str,
    kind: WorkloadKind,
    name: &str,
) -> Option<Value> {
    let object = workloads(client, ns, kind).get(name).await.unwrap();
    let pointer = format!("{}/metadata/annotations", kind.info().template);
    let value = object
        .data
        .pointer(&pointer)?
        .get(LAST_RELOADED_FROM)?
        .as_str()?
        .to_string();
    Some(serde_json::from_str(&value).expect("last-reloaded-from is JSON"))
}

async fn generation(client: &kube::Client, ns: &str, kind: WorkloadKind, name: &str) -> i64 {
    let object = workloads(client, ns, kind).get(name).await.unwrap();
    object.metadata.generation.unwrap_or_default()
}

/// Two containers; `app` uses ConfigMap `app` (envFrom) and Secret `matched` (a volume), `side` uses
/// Secret `creds` (an env var) and Secret `ignored` (a volume; the Secret says `ignore`).
fn spec() -> Value {
    let mut s = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "app"}}],
               "volumeMounts": [{"name": "m", "mountPath": "/m"}]}),
        json!({"volumes": [{"name": "m", "secret": {"secretName": "matched"}},
                           {"name": "i", "secret": {"secretName": "ignored"}}]}),
    );
    s["containers"].as_array_mut().unwrap().push(json!({
        "name": "side", "image": "nginx",
        "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pw"}}}],
        "volumeMounts": [{"name": "i", "mountPath": "/i"}]
    }));
    s
}

/// The workloads of one kind, named `<kind>-<case>`, and what each should reload for.
const CASES: [(&str, &[(&str, &str)]); 7] = [
    ("auto", &[(AUTO, "true")]),
    ("cm-auto", &[(CONFIGMAP_AUTO, "true")]),
    ("secret-auto", &[(SECRET_AUTO, "true")]),
    ("named", &[(CONFIGMAP_RELOAD, "flags"), (SECRET_RELOAD, "cr.*")]),
    ("search", &[(SEARCH, "true")]),
    ("excluded", &[(AUTO, "true"), (CONFIGMAP_EXCLUDE, "app")]),
    ("plain", &[]),
];

async fn create_cases(client: &kube::Client, ns: &str) {
    create_configmap(client, ns, "app", json!({"k": "v1"})).await;
    create_configmap(client, ns, "flags", json!({"f": "off"})).await;
    create_secret(client, ns, "creds", json!({"pw": "one"})).await;
    create_secret(client, ns, "matched", json!({"t": "a"})).await;
    create_secret(client, ns, "ignored", json!({"i": "1"})).await;
    patch_secret(
        client,
        ns,
        "matched",
        json!({"metadata": {"annotations": {MATCH: "true"}}}),
    )
    .await;
    patch_secret(
        client,
        ns,
        "ignored",
        json!({"metadata": {"annotations": {IGNORE: "true"}}}),
    )
    .await;
    for kind in WorkloadKind::BUILT_IN {
        for (case, annotations) in CASES {
            let annotations: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            let name = format!("{}-{case}", name(kind));
            create_workload(client, ns, kind, &name, Value::Object(annotations), spec()).await;
        }
    }
}

/// Changes every object once.
async fn change_everything(client: &kube::Client, ns: &str) {
    patch_configmap(client, ns, "app", json!({"data": {"k": "v2"}})).await;
    patch_configmap(client, ns, "flags", json!({"data": {"f": "on"}})).await;
    patch_secret(client, ns, "creds", json!({"stringData": {"pw": "two"}})).await;
    patch_secret(client, ns, "matched", json!({"stringData": {"t": "b"}})).await;
}

/// What each case reloads for, after [`change_everything`]: `(env var, container, SHA-1)`.
fn expected(case: &str) -> Vec<(&'static str, &'static str, String)> {
    let app = ("STAKATER_APP_CONFIGMAP", "app", reloader_sha(&[("k", "v2")]));
    let flags = ("STAKATER_FLAGS_CONFIGMAP", "app", reloader_sha(&[("f", "on")]));
    let creds = ("STAKATER_CREDS_SECRET", "side", reloader_sha(&[("pw", "two")]));
    let matched = ("STAKATER_MATCHED_SECRET", "app", reloader_sha(&[("t", "b")]));
    match case {
        "auto" => vec![app, creds, matched],
        "cm-auto" => vec![app],
        "secret-auto" => vec![creds, matched],
        // Named objects need no reference; `flags` is used by no container, so the first one carries it.
        "named" => vec![flags, creds],
        "search" => vec![matched],
        "excluded" => vec![creds, matched],
        _ => vec![],
    }
}

#[tokio::test]
async fn every_reloader_annotation_reloads_the_right_workloads_of_every_kind_with_reloader_s_env_vars() {
    let (client, ns) = setup("reloader-env").await;
    create_cases(&client, &ns).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat"]).await;
    // Nothing changed yet: Reloader writes nothing for config that has not changed, and neither does wave.
    wait_for("wave to check every workload", TIMEOUT, || async {
        (wave.noops() >= 18).then_some(())
    })
    .await;
    assert_eq!(wave.writes(), 0, "no write at startup");

    // An ignored object's change reloads nothing. Changed first, so the reconciles that write the other
    // changes see it too.
    patch_secret(&client, &ns, "ignored", json!({"stringData": {"i": "2"}})).await;
    change_everything(&client, &ns).await;
    for kind in WorkloadKind::BUILT_IN {
        for (case, _) in CASES {
            let name = format!("{}-{case}", name(kind));
            let want = expected(case);
            let found = wait_for(&format!("the reload of {name}"), TIMEOUT, || async {
                let mut found = Vec::new();
                for (var, container, _) in &want {
                    let env = env_of(&client, &ns, kind, &name, container).await;
                    found.extend(env.into_iter().filter(|(n, _)| n == var));
                }
                (found.len() == want.len()).then_some(found)
            })
            .await;
            for (var, _, sha) in &want {
                assert!(
                    found.contains(&(var.to_string(), sha.clone())),
                    "{name}: {var} should be Reloader's SHA-1 {sha}; found {found:?}"
                );
            }
        }
    }
    for kind in WorkloadKind::BUILT_IN {
        let plain = format!("{}-plain", name(kind));
        assert_eq!(
            generation(&client, &ns, kind, &plain).await,
            1,
            "{plain} has no Reloader annotation"
        );
        for container in ["app", "side"] {
            for case in ["auto", "secret-auto"] {
                let env = env_of(&client, &ns, kind, &format!("{}-{case}", name(kind)), container).await;
                assert!(
                    !env.iter()
                        .any(|(n, _)| n == "STAKATER_IGNORED_SECRET" || n == "STAKATER_FLAGS_CONFIGMAP"),
                    "{case} reloads for referenced, not ignored, objects only: {env:?}"
                );
            }
        }
    }
    // Reloader's Event reason; the Event follows the write, so it is waited for.
    wait_for("a Normal Reloaded Event", TIMEOUT, || async {
        let events = events_for(&client, &ns, "deployment-auto").await;
        events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "Reloaded")
            .then_some(())
    })
    .await;
    assert!(
        !wave.output().contains("\"two\"") && !wave.output().contains("=two"),
        "no Secret value in the log"
    );
}

#[tokio::test]
async fn under_the_annotations_strategy_the_pod_template_says_what_it_was_last_reloaded_from() {
    let (client, ns) = setup("reloader-ann").await;
    create_cases(&client, &ns).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--reload-strategy=annotations"]).await;
    wait_for("wave to check every workload", TIMEOUT, || async {
        (wave.noops() >= 18).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "app", json!({"data": {"k": "v2"}})).await;
    for kind in WorkloadKind::BUILT_IN {
        for (case, rolls) in [
            ("auto", true),
            ("cm-auto", true),
            ("excluded", false),
            ("plain", false),
            ("secret-auto", false),
        ] {
            let name = format!("{}-{case}", name(kind));
            if rolls {
                let source = wait_for(&format!("last-reloaded-from on {name}"), TIMEOUT, || async {
                    last_reloaded_from(&client, &ns, kind, &name).await
                })
                .await;
                assert_eq!(source["type"], "CONFIGMAP");
                assert_eq!(source["name"], "app");
                assert_eq!(source["namespace"], ns.as_str());
                assert_eq!(source["hash"], reloader_sha(&[("k", "v2")]));
                assert_eq!(source["containerRefs"], json!(["app"]));
                assert!(source["observedAt"].as_i64().is_some_and(|t| t > 1_700_000_000));
                let keys: Vec<&String> = source.as_object().unwrap().keys().collect();
                assert_eq!(keys.len(), 6, "Reloader's six fields: {source}");
                assert!(
                    env_of(&client, &ns, kind, &name, "app").await.is_empty(),
                    "no env var under the annotations strategy"
                );
            }
        }
    }
    // Six rolled; the rest were checked and left alone.
    wave.expect_writes(6, "auto and cm-auto of three kinds").await;
    for kind in WorkloadKind::BUILT_IN {
        for case in ["excluded", "plain", "secret-auto"] {
            let name = format!("{}-{case}", name(kind));
            assert_eq!(
                generation(&client, &ns, kind, &name).await,
                1,
                "{name} does not reload for app"
            );
        }
    }
    // Named objects and search/match, under this strategy too: each change names its object.
    for (object, kind_name, case, change) in [
        ("flags", "CONFIGMAP", "named", json!({"data": {"f": "on"}})),
        ("matched", "SECRET", "search", json!({"stringData": {"t": "b"}})),
    ] {
        if kind_name == "CONFIGMAP" {
            patch_configmap(&client, &ns, object, change).await;
        } else {
            patch_secret(&client, &ns, object, change).await;
        }
        for kind in WorkloadKind::BUILT_IN {
            let name = format!("{}-{case}", name(kind));
            wait_for(&format!("{name} reloaded for {object}"), TIMEOUT, || async {
                let source = last_reloaded_from(&client, &ns, kind, &name).await?;
                (source["name"] == object && source["type"] == kind_name).then_some(())
            })
            .await;
        }
    }
}

#[tokio::test]
async fn switching_from_reloader_writes_nothing_and_catches_a_change_made_while_nothing_watched() {
    let (client, ns) = setup("reloader-switch").await;
    create_configmap(&client, &ns, "app", json!({"k": "v3"})).await;
    let marked = |sha: String| {
        pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": "app"}}],
                   "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": sha}]}),
            json!({}),
        )
    };
    let annotations = json!({AUTO: "true"});
    // As Reloader left them: one carries the SHA-1 of the config now, one of an earlier version (the
    // config changed while no controller ran).
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(
        &client,
        &ns,
        kind,
        "current",
        annotations.clone(),
        marked(reloader_sha(&[("k", "v3")])),
    )
    .await;
    create_workload(
        &client,
        &ns,
        kind,
        "stale",
        annotations,
        marked(reloader_sha(&[("k", "v2")])),
    )
    .await;
    let wave = Wave::start(&[&ns], &["--reloader-compat"]).await;
    wave.expect_writes(1, "only the workload whose config changed while nothing watched")
        .await;
    let env = env_of(&client, &ns, kind, "stale", "app").await;
    assert_eq!(
        env,
        [("STAKATER_APP_CONFIGMAP".to_string(), reloader_sha(&[("k", "v3")]))],
        "updated in place, not added twice"
    );
    assert_eq!(
        generation(&client, &ns, kind, "current").await,
        1,
        "nothing written for an unchanged config"
    );
    let kubeconfig = testenv::cluster().kubeconfig();
    let (code, out, err) = run_wave(
        &["explain", "deployment/current", "-n", &ns, "--reloader-compat"],
        Some(&kubeconfig),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("opted in through Stakater Reloader's annotations"),
        "wave explain says how: {out}"
    );
}

#[tokio::test]
async fn by_default_a_workload_with_only_reloader_annotations_is_left_alone_and_explain_says_why() {
    let (client, ns) = setup("reloader-off").await;
    create_configmap(&client, &ns, "app", json!({"k": "v1"})).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    create_workload(&client, &ns, kind, "auto", json!({AUTO: "true"}), spec.clone()).await;
    // The sentinel: opted in to wave, using the same ConfigMap.
    create_workload(&client, &ns, kind, "wave", opted_in(&[]), spec).await;
    for explicit in [&[][..], &["--reloader-compat=false"][..]] {
        let wave = Wave::start(&[&ns], explicit).await;
        assert_eq!(
            wave.metric("wave_tracked_workloads", &[]),
            1.0,
            "{explicit:?}: only the sentinel is tracked; the Reloader-annotated one is not even indexed"
        );
        wait_for(
            "the start-up line on Reloader-annotated workloads",
            TIMEOUT,
            || async {
                wave.output()
                    .contains("workloads carry only Stakater Reloader's annotations")
                    .then_some(())
            },
        )
        .await;
        if explicit.is_empty() {
            wait_hash_change(&client, &ns, kind, "wave", None).await;
            wave.expect_writes(1, "the sentinel's first hash").await;
        }
        let (writes, before) = (wave.writes(), hash_of(&client, &ns, kind, "wave").await);
        patch_configmap(
            &client,
            &ns,
            "app",
            json!({"data": {"k": explicit.len().to_string()}}),
        )
        .await;
        wait_hash_change(&client, &ns, kind, "wave", before.as_deref()).await;
        wave.expect_writes(writes + 1, "a rollout of the sentinel only")
            .await;
    }
    assert_eq!(generation(&client, &ns, kind, "auto").await, 1, "never written");
    let (code, out, err) = run_wave(
        &["explain", "deployment/auto", "-n", &ns],
        Some(&testenv::cluster().kubeconfig()),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Reloader compatibility is off (the default): wave leaves it alone")
            && out.contains("--reloader-compat"),
        "wave explain says why, and how to turn it on: {out}"
    );
}

#[tokio::test]
async fn with_compatibility_on_a_running_reloader_is_reported_loudly_and_a_stopped_one_is_not() {
    let (client, ns) = setup("reloader-seen").await;
    let kind = WorkloadKind::DEPLOYMENT;
    // Stand-ins (on kwok's fake nodes): wave's own Deployment, a Reloader under a name of its own (only
    // its image can tell), and one scaled to zero (stopped, as the migration guide says).
    create_workload(
        &client,
        &ns,
        kind,
        "wave",
        json!({}),
        pod_spec(json!({}), json!({})),
    )
    .await;
    let annotated = pod_spec(json!({}), json!({}));
    create_workload(&client, &ns, kind, "annotated", json!({AUTO: "true"}), annotated).await;
    for (name, image, replicas) in [
        ("config-watcher", "ghcr.io/stakater/reloader:v1.4.21", 1),
        ("old-reloader", "stakater/reloader:v1.4.0", 0),
    ] {
        let mut b = body(
            kind,
            name,
            &json!({}),
            &pod_spec(json!({"image": image}), json!({})),
        );
        b["spec"]["replicas"] = json!(replicas);
        workloads(&client, &ns, kind)
            .create(&Default::default(), &serde_json::from_value(b).unwrap())
            .await
            .unwrap();
    }
    let own = format!("--own-deployment={ns}/wave");
    let wave = Wave::start(&[&ns], &["--reloader-compat", &own]).await;
    wait_for("wave to count the running Reloader", TIMEOUT, || async {
        (wave.metric("wave_reloader_running", &[]) == 1.0).then_some(())
    })
    .await;
    let (type_, _, note) = wait_event(
        &client,
        &ns,
        "wave",
        "a ReloaderRunning Event on wave's Deployment",
        |(_, reason, _)| reason == "ReloaderRunning",
    )
    .await;
    assert_eq!(type_, "Warning");
    assert!(
        note.contains(&format!("Deployment {ns}/config-watcher")),
        "{note}"
    );
    assert!(
        !note.contains("old-reloader"),
        "scaled to zero is stopped: {note}"
    );
    let output = wave.output();
    assert!(
        output.contains("WARN") && output.contains("Stakater Reloader runs in Deployment"),
        "a warning in the log: {output}"
    );

    // Without compatibility, a running Reloader competes with nothing: no warning. (The line on the
    // Reloader-annotated workload comes from the same look, after its decision.)
    drop(wave);
    let quiet = Wave::start(&[&ns], &[&own]).await;
    wait_for("the look for Reloader at start-up", TIMEOUT, || async {
        quiet
            .output()
            .contains("workloads carry only Stakater Reloader's annotations")
            .then_some(())
    })
    .await;
    assert_eq!(quiet.metric("wave_reloader_running", &[]), 0.0);
    assert!(!quiet.output().contains("Stakater Reloader runs in"));
}

#[tokio::test]
async fn a_deployment_with_a_pause_period_is_paused_by_its_reload_and_resumed_after_it() {
    let (client, ns) = setup("reloader-pause").await;
    create_configmap(&client, &ns, "app", json!({"k": "v1"})).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    let annotations = json!({AUTO: "true", "deployment.reloader.stakater.com/pause-period": "3s"});
    create_workload(&client, &ns, kind, "paused", annotations, spec).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat"]).await;
    wait_for("wave to check the workload", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "app", json!({"data": {"k": "v2"}})).await;
    let paused_at = wait_for("the reload to pause the Deployment", TIMEOUT, || async {
        let d = workloads(&client, &ns, kind).get("paused").await.unwrap();
        let at = d
            .metadata
            .annotations?
            .get("deployment.reloader.stakater.com/paused-at")?
            .clone();
        (d.data.pointer("/spec/paused") == Some(&json!(true))).then_some(at)
    })
    .await;
    assert!(
        paused_at.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "RFC 3339: {paused_at}"
    );
    let env = env_of(&client, &ns, kind, "paused", "app").await;
    assert_eq!(
        env,
        [("STAKATER_APP_CONFIGMAP".to_string(), reloader_sha(&[("k", "v2")]))]
    );
    wait_for(
        "the Deployment to resume after its pause period",
        TIMEOUT,
        || async {
            let d = workloads(&client, &ns, kind).get("paused").await.unwrap();
            // `paused: false` is the default, which the apiserver leaves out.
            let resumed = d.data.pointer("/spec/paused") != Some(&json!(true))
                && !d
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key("deployment.reloader.stakater.com/paused-at");
            resumed.then_some(())
        },
    )
    .await;
    // The Event follows the write: waited for, never read on sight.
    wait_for("the Resumed Event", TIMEOUT, || async {
        let events = events_for(&client, &ns, "paused").await;
        events.iter().any(|(_, r, _)| r == "Resumed").then_some(())
    })
    .await;
}

#[tokio::test]
async fn with_reload_on_create_and_delete_an_object_s_arrival_and_departure_reload_its_workloads() {
    let (client, ns) = setup("reloader-lifecycle").await;
    let kind = WorkloadKind::DEPLOYMENT;
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "late", "optional": true}}]}),
        json!({}),
    );
    create_workload(&client, &ns, kind, "auto", json!({AUTO: "true"}), spec.clone()).await;
    create_workload(
        &client,
        &ns,
        kind,
        "named",
        json!({CONFIGMAP_RELOAD: "late"}),
        spec,
    )
    .await;
    let wave = Wave::start(
        &[&ns],
        &["--reloader-compat", "--reload-on-create", "--reload-on-delete"],
    )
    .await;
    wait_for("wave to check both workloads", TIMEOUT, || async {
        (wave.noops() >= 2).then_some(())
    })
    .await;
    assert_eq!(wave.writes(), 0);

    create_configmap(&client, &ns, "late", json!({"k": "v1"})).await;
    let sha = reloader_sha(&[("k", "v1")]);
    for name in ["auto", "named"] {
        wait_for(
            &format!("{name} reloaded for the new object"),
            TIMEOUT,
            || async {
                let env = env_of(&client, &ns, kind, name, "app").await;
                (env == [("STAKATER_LATE_CONFIGMAP".to_string(), sha.clone())]).then_some(())
            },
        )
        .await;
    }
    wave.expect_writes(2, "one reload each on creation").await;

    delete_configmap(&client, &ns, "late").await;
    for name in ["auto", "named"] {
        wait_for(
            &format!("{name}'s env var removed with the object"),
            TIMEOUT,
            || async {
                env_of(&client, &ns, kind, name, "app")
                    .await
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
    }
    wave.expect_writes(4, "one reload each on deletion, and nothing after")
        .await;
}

/// The ConfigMap `app` and the CronJob `nightly` using it, opted in with `reloader.stakater.com/auto`;
/// its kind and its Job's pod spec.
async fn nightly_cron_job(client: &kube::Client, ns: &str) -> (WorkloadKind, Value) {
    create_configmap(client, ns, "app", json!({"k": "v1"})).await;
    let kind = WorkloadKind::CRON_JOB;
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "app"}}]}),
        json!({"restartPolicy": "Never"}),
    );
    let cron_job = json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "annotations": {AUTO: "true"}},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": spec.clone()}}}}});
    workloads(client, ns, kind)
        .create(&Default::default(), &serde_json::from_value(cron_job).unwrap())
        .await
        .unwrap();
    (kind, spec)
}

#[tokio::test]
async fn a_reloader_annotated_cron_job_starts_a_job_carrying_the_mark_as_reloader_does() {
    let (client, ns) = setup("reloader-cron").await;
    let (kind, _) = nightly_cron_job(&client, &ns).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--cronjobs"]).await;
    wait_for("wave to check the CronJob", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "app", json!({"data": {"k": "v2"}})).await;
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(client.clone(), &ns);
    let job = wait_for("a Job started from the CronJob", TIMEOUT, || async {
        jobs.list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
    })
    .await;
    let meta = &job.metadata;
    assert!(meta.name.as_deref().unwrap_or_default().starts_with("nightly-"));
    assert_eq!(
        meta.annotations
            .as_ref()
            .and_then(|a| a.get("cronjob.kubernetes.io/instantiate"))
            .map(String::as_str),
        Some("manual")
    );
    let owner = &meta.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("CronJob", "nightly", Some(true))
    );
    let env = job.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert_eq!(env.len(), 1);
    assert_eq!(
        (env[0].name.as_str(), env[0].value.as_deref()),
        (
            "STAKATER_APP_CONFIGMAP",
            Some(reloader_sha(&[("k", "v2")]).as_str())
        )
    );
    wave.expect_writes(1, "one Job").await;
    let cron = workloads(&client, &ns, kind).get("nightly").await.unwrap();
    assert_eq!(
        cron.metadata.generation,
        Some(1),
        "the CronJob itself is not changed"
    );
}

#[tokio::test]
async fn a_retried_job_start_whose_first_create_landed_starts_no_second_job() {
    let (client, ns) = setup("reloader-cron-retry").await;
    let (kind, spec) = nightly_cron_job(&client, &ns).await;
    // wave under a user that may not create Jobs yet: its first create is refused, and retried.
    let user = format!("wave-{ns}");
    let role = |name: &str, rules: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {name}, namespace: {ns}}}\n\
             rules:\n{rules}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: {name}, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}\n\
             subjects: [{{kind: User, name: {user}}}]\n"
        )
    };
    let watching = role(
        "wave",
        "- {apiGroups: [\"\"], resources: [configmaps, secrets], verbs: [get, list, watch]}\n\
         - {apiGroups: [apps], resources: [deployments, statefulsets, daemonsets], verbs: [get, list, watch, patch]}\n\
         - {apiGroups: [batch], resources: [cronjobs], verbs: [get, list, watch, patch]}\n\
         - {apiGroups: [events.k8s.io], resources: [events], verbs: [create]}",
    );
    let (ok, text) = kubectl_stdin(&["apply", "-f", "-"], &watching);
    assert!(ok, "{text}");
    wait_authorized(&ns, &user, "watch", "cronjobs").await;
    let kubeconfig = testenv::cluster().user_kubeconfig(&user, None);
    let wave = Wave::start_as(
        &kubeconfig,
        &[&ns],
        &["--cronjobs", "--reloader-compat", "--update-rate=inf"],
    )
    .await;
    wait_for("wave to check the CronJob", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "app", json!({"data": {"k": "v2"}})).await;
    wait_for("the refused create to be counted", TIMEOUT, || async {
        (wave.metric("wave_reconcile_errors_total", &[]) >= 1.0).then_some(())
    })
    .await;

    // As if that create had landed and only its answer was lost: the Job of this config version
    // exists. Its name is the CronJob's and a hash of the CronJob's uid and the ConfigMap's SHA-1 and
    // version (Reloader's SHA-1, from sha1sum).
    let cron = workload(&client, &ns, kind, "nightly").await;
    let cm: k8s_openapi::api::core::v1::ConfigMap = kube::Api::namespaced(client.clone(), &ns)
        .get("app")
        .await
        .unwrap();
    let key = wave_core::refs::ConfigKey::new(wave_core::refs::ConfigKind::ConfigMap, &ns, "app");
    let decision = wave_core::reloader::Decision {
        marks: Vec::new(),
        changed: vec![key.clone()],
        observed: [(key.clone(), reloader_sha(&[("k", "v2")]))].into(),
    };
    let versions = [(key, wave_core::tracker::ObjectVersion::of(&cm.metadata))].into();
    let name = wave_core::reloader::job_name(&cron, &decision, &versions);
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(client.clone(), &ns);
    let landed = json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "batch/v1",
            "kind": "CronJob", "name": "nightly", "uid": cron.uid, "controller": true}]},
        "spec": {"suspend": true, "template": {"spec": spec}}});
    jobs.create(&Default::default(), &serde_json::from_value(landed).unwrap())
        .await
        .unwrap();
    let (ok, text) = kubectl_stdin(
        &["apply", "-f", "-"],
        &role(
            "wave-jobs",
            "- {apiGroups: [batch], resources: [jobs], verbs: [create]}",
        ),
    );
    assert!(ok, "{text}");
    wait_authorized(&ns, &user, "create", "jobs").await;

    wave.expect_writes(1, "the retry's 409 counts as the reload done")
        .await;
    wait_event(&client, &ns, "nightly", "the Reloaded Event", |(_, reason, _)| {
        reason == "Reloaded"
    })
    .await;
    let names: Vec<String> = jobs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(names, [name], "one Job for one config version");
}

async fn is_paused(client: &kube::Client, ns: &str, name: &str) -> bool {
    let d = workloads(client, ns, WorkloadKind::DEPLOYMENT)
        .get(name)
        .await
        .unwrap();
    d.data.pointer("/spec/paused") == Some(&json!(true))
}

#[tokio::test]
async fn wave_never_resumes_a_pause_the_user_made_and_always_releases_its_own() {
    let (client, ns) = setup("reloader-pause-owner").await;
    create_configmap(&client, &ns, "app", json!({"k": "v1"})).await;
    let kind = WorkloadKind::DEPLOYMENT;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "app"}}]}), json!({}));
    let short = json!({AUTO: "true", "deployment.reloader.stakater.com/pause-period": "2s"});
    let long = json!({AUTO: "true", "deployment.reloader.stakater.com/pause-period": "1h"});
    create_workload(&client, &ns, kind, "short", short, spec.clone()).await;
    create_workload(&client, &ns, kind, "long", long, spec).await;
    let wave = Wave::start(&[&ns], &["--reloader-compat"]).await;
    wait_for("wave to check both", TIMEOUT, || async {
        (wave.noops() >= 2).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "app", json!({"data": {"k": "v2"}})).await;
    for name in ["short", "long"] {
        wait_for(&format!("the reload to pause {name}"), TIMEOUT, || async {
            is_paused(&client, &ns, name).await.then_some(())
        })
        .await;
    }

    // The user resumes "short" and pauses it again by hand; its paused-at stays, stale.
    kubectl_rollout("resume", &ns, kind, "short", &[]);
    kubectl_rollout("pause", &ns, kind, "short", &[]);
    let stale = k8s_openapi::jiff::Timestamp::now();
    wait_for("the old pause period to be over", TIMEOUT, || async {
        (k8s_openapi::jiff::Timestamp::now()
            .duration_since(stale)
            .as_secs_f64()
            > 2.0)
            .then_some(())
    })
    .await;
    // A reload after that period: its marks are written, and the user's pause is left alone.
    patch_configmap(&client, &ns, "app", json!({"data": {"k": "v3"}})).await;
    wait_for("the reload of v3", TIMEOUT, || async {
        let env = env_of(&client, &ns, kind, "short", "app").await;
        (env.first().map(|(_, v)| v.as_str()) == Some(reloader_sha(&[("k", "v3")]).as_str())).then_some(())
    })
    .await;
    assert!(is_paused(&client, &ns, "short").await, "the user's pause stays");

    // wave's own pause on "long" outlives nothing: with its annotation gone and compatibility off,
    // a restarted wave still resumes it.
    drop(wave);
    let gone = json!({"metadata": {"annotations": {"deployment.reloader.stakater.com/pause-period": null, AUTO: null}}});
    patch_workload(&client, &ns, kind, "long", gone).await;
    let _plain = Wave::start(&[&ns], &[]).await;
    wait_for("wave to release its own pause", TIMEOUT, || async {
        (!is_paused(&client, &ns, "long").await).then_some(())
    })
    .await;
    assert!(is_paused(&client, &ns, "short").await, "and still not the user's");
}
