//! References that go away, workloads that opt out or are deleted, config that is missing, and
//! references across namespaces (issue: tests 5–8).

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::json;
use testenv::{cluster, wait_for};
use wave_core::workload::WorkloadKind;

use crate::harness::*;

/// Each kind references `old` (envFrom) and `sentinel` (volume); a `witness` Deployment references
/// only `sentinel`, so a sentinel change always wakes at least one workload.
async fn two_references(prefix: &str) -> (kube::Client, String, Wave) {
    let (client, ns) = setup(prefix).await;
    create_configmap(&client, &ns, "old", json!({"a": "1"})).await;
    create_configmap(&client, &ns, "sentinel", json!({"s": "1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let sentinel_volume = json!({"volumes": [{"name": "s", "configMap": {"name": "sentinel"}}]});
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "old"}}]}),
        sentinel_volume.clone(),
    );
    for kind in WorkloadKind::BUILT_IN {
        create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    let witness = pod_spec(json!({}), sentinel_volume);
    create_workload(
        &client,
        &ns,
        WorkloadKind::DEPLOYMENT,
        "witness",
        opted_in(&[]),
        witness,
    )
    .await;
    for kind in WorkloadKind::BUILT_IN {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    }
    wait_hash_change(&client, &ns, WorkloadKind::DEPLOYMENT, "witness", None).await;
    (client, ns, wave)
}

/// Changes `old`, then `sentinel`, and returns how many workloads the two changes woke once the
/// sentinel's `expected` wake-ups are seen. One ConfigMap watch delivers both in order, so the change
/// to `old` was fully processed by then.
async fn wakeups_after_changes(client: &kube::Client, ns: &str, wave: &Wave, expected: u64) -> u64 {
    let triggers = || wave.metric("wave_config_triggers_total", &[]) as u64;
    let before = triggers();
    patch_configmap(client, ns, "old", json!({"data": {"a": "changed"}})).await;
    patch_configmap(client, ns, "sentinel", json!({"data": {"s": "changed"}})).await;
    wait_for("the sentinel's wake-ups", TIMEOUT, || async {
        (triggers() >= before + expected).then_some(())
    })
    .await;
    triggers() - before
}

#[tokio::test]
async fn at_start_up_a_namespace_of_many_referenced_configmaps_is_read_with_lists_and_secrets_one_get_each() {
    let (client, ns) = setup("bulk").await;
    let n = 2 * wave_core::tracker::BULK_READ_MIN;
    let names: Vec<String> = (0..n).map(|i| format!("app-{i}")).collect();
    for name in &names {
        create_configmap(&client, &ns, name, json!({"level": name})).await;
        create_secret(&client, &ns, name, json!({"password": name})).await;
        let spec = pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": name}}, {"secretRef": {"name": name}}]}),
            json!({}),
        );
        create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, name, opted_in(&[]), spec).await;
    }
    // A Helm release (up to 1 MiB, referenced by no pod) is never read.
    let release: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sh.helm.release.v1.app.v1"}, "type": "helm.sh/release.v1",
        "stringData": {"release": "H4sI"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &release)
        .await
        .unwrap();
    // The Deployment controller annotates each new Deployment with its revision: a change wave would
    // serve at once, with a GET, if it came while wave reads in bulk. Let it come first.
    for name in &names {
        settled_revisions(&client, &ns, WorkloadKind::DEPLOYMENT, name).await;
    }
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let kubeconfig = cluster().kubeconfig();
    for name in &names {
        let hash = wait_hash_change(&client, &ns, WorkloadKind::DEPLOYMENT, name, None).await;
        assert_eq!(
            hash,
            desired_hash(&kubeconfig, &ns, WorkloadKind::DEPLOYMENT, name),
            "{name}: the hash of what the LIST read"
        );
    }
    let gets = |kind: &str| wave.metric("wave_content_fetches_total", &[&format!("kind=\"{kind}\"")]);
    assert_eq!(gets("ConfigMap"), 0.0, "no ConfigMap was read on its own");
    assert_eq!(
        gets("Secret"),
        n as f64,
        "each referenced Secret is read on its own (a LIST would read the Helm release's data too)"
    );

    // After start-up, a ConfigMap's change comes with its watch event, and a Secret's is one GET. A
    // ConfigMap nobody references is not kept: its change comes first on the same watch, so it was
    // handled by the time the referenced one's hash changed.
    let cached = || wave.metric("wave_cached_config_objects", &[]);
    assert_eq!(cached(), 2.0 * n as f64, "every referenced ConfigMap and Secret");
    create_configmap(&client, &ns, "unreferenced", json!({"level": "a"})).await;
    patch_configmap(&client, &ns, "unreferenced", json!({"data": {"level": "b"}})).await;
    let before = hash_of(&client, &ns, WorkloadKind::DEPLOYMENT, "app-0").await;
    patch_configmap(&client, &ns, "app-0", json!({"data": {"level": "changed"}})).await;
    let after = wait_hash_change(&client, &ns, WorkloadKind::DEPLOYMENT, "app-0", before.as_deref()).await;
    assert_eq!(
        after,
        desired_hash(&kubeconfig, &ns, WorkloadKind::DEPLOYMENT, "app-0"),
        "the hash of the changed ConfigMap, as its watch event carried it"
    );
    assert_eq!(gets("ConfigMap"), 0.0, "no GET for the changed ConfigMap");
    assert_eq!(
        cached(),
        2.0 * n as f64,
        "the unreferenced ConfigMap's data was not kept"
    );
    patch_secret(
        &client,
        &ns,
        "app-0",
        json!({"stringData": {"password": "changed"}}),
    )
    .await;
    wait_hash_change(&client, &ns, WorkloadKind::DEPLOYMENT, "app-0", Some(&after)).await;
    assert_eq!(gets("Secret"), n as f64 + 1.0, "the changed Secret, with one GET");
}

#[tokio::test]
async fn watching_every_namespace_a_few_referenced_objects_in_each_are_read_with_one_list_of_the_cluster() {
    // A control plane of its own: this wave watches every namespace, and the shared one holds the
    // objects of every other test, which would make a cluster-wide read mostly of unreferenced ones.
    let dir = std::env::temp_dir().join(format!("wave-bulk-cluster-{}", std::process::id()));
    let cluster = tokio::task::spawn_blocking(move || testenv::Cluster::start_in(dir, &["--nodes=1"]))
        .await
        .expect("starting the control plane");
    let client = cluster.client().await;
    // Fewer than a namespace's LIST is worth in each (GETs, namespace by namespace), more than a page's
    // worth of GETs in all, and most of the cluster's ConfigMaps (each namespace also has
    // kube-root-ca.crt).
    let per_namespace = wave_core::tracker::BULK_READ_MIN / 2;
    let mut workloads = Vec::new();
    for n in 0..3 {
        let ns = testenv::namespace(&client, &format!("bulk-all-{n}")).await;
        for i in 0..per_namespace {
            let name = format!("app-{i}");
            create_configmap(&client, &ns, &name, json!({"level": name})).await;
            create_secret(&client, &ns, &name, json!({"password": name})).await;
            let spec = pod_spec(
                json!({"envFrom": [{"configMapRef": {"name": name}}, {"secretRef": {"name": name}}]}),
                json!({}),
            );
            create_workload(&client, &ns, WorkloadKind::DEPLOYMENT, &name, opted_in(&[]), spec).await;
            workloads.push((ns.clone(), name));
        }
    }
    for (ns, name) in &workloads {
        settled_revisions(&client, ns, WorkloadKind::DEPLOYMENT, name).await;
    }
    let wave = Wave::start_as(&cluster.kubeconfig(), &[], &["--update-rate=inf"]).await;
    for (ns, name) in &workloads {
        let hash = wait_hash_change(&client, ns, WorkloadKind::DEPLOYMENT, name, None).await;
        assert_eq!(
            hash,
            desired_hash(&cluster.kubeconfig(), ns, WorkloadKind::DEPLOYMENT, name),
            "{ns}/{name}: the hash of what the LIST read"
        );
    }
    let gets = |kind: &str| wave.metric("wave_content_fetches_total", &[&format!("kind=\"{kind}\"")]);
    assert_eq!(gets("ConfigMap"), 0.0, "no ConfigMap was read on its own");
    assert_eq!(
        gets("Secret"),
        workloads.len() as f64,
        "each referenced Secret, once"
    );
}

/// Secrets nobody references, in a namespace of their own.
const UNREFERENCED_SECRETS: usize = 1000;

#[tokio::test]
async fn at_start_up_wave_reads_the_data_of_no_secret_that_no_workload_references() {
    // A control plane of its own, whose audit log shows the kind of every Secret read's response: a
    // metadata-only read cannot be told from one returning data by its URI.
    let dir = std::env::temp_dir().join(format!("wave-secret-reads-{}", std::process::id()));
    let cluster = tokio::task::spawn_blocking(move || {
        testenv::Cluster::start_in(dir, &["--audit-secret-reads", "--nodes=1"])
    })
    .await
    .expect("starting the control plane");
    let client = cluster.client().await;
    // `mixed`: 12 Secrets and ConfigMaps referenced (4 Deployments, 3 of each) and 4 Secrets nobody
    // references: most of the namespace is referenced, which the old rule read with one LIST of the
    // namespace, the data of those 4 included. `idle`: a thousand Secrets nobody references.
    let mixed = testenv::namespace(&client, "reads-mixed").await;
    let idle = testenv::namespace(&client, "reads-idle").await;
    let mut referenced = std::collections::BTreeSet::new();
    for d in 0..4 {
        let mut env_from = Vec::new();
        for i in 0..3 {
            let name = format!("app-{d}-{i}");
            create_configmap(&client, &mixed, &name, json!({"level": name})).await;
            create_secret(&client, &mixed, &name, json!({"token": name})).await;
            env_from.push(json!({"configMapRef": {"name": name}}));
            env_from.push(json!({"secretRef": {"name": name}}));
            referenced.insert((mixed.clone(), name));
        }
        let spec = pod_spec(json!({"envFrom": env_from}), json!({}));
        create_workload(
            &client,
            &mixed,
            WorkloadKind::DEPLOYMENT,
            &format!("app-{d}"),
            opted_in(&[]),
            spec,
        )
        .await;
    }
    for i in 0..4 {
        create_secret(&client, &mixed, &format!("spare-{i}"), json!({"token": "unused"})).await;
    }
    let names: Vec<String> = (0..UNREFERENCED_SECRETS).map(|i| format!("idle-{i}")).collect();
    for batch in names.chunks(50) {
        let mut creates = tokio::task::JoinSet::new();
        for name in batch {
            let (client, ns, name) = (client.clone(), idle.clone(), name.clone());
            creates
                .spawn(async move { create_secret(&client, &ns, &name, json!({"token": "unused"})).await });
        }
        while let Some(done) = creates.join_next().await {
            done.expect("creating a Secret");
        }
    }
    for d in 0..4 {
        settled_revisions(&client, &mixed, WorkloadKind::DEPLOYMENT, &format!("app-{d}")).await;
    }

    // wave under a user of its own, so the audit log attributes its requests; every namespace watched.
    let user = "wave-secret-reads";
    let kubeconfig = cluster.user_kubeconfig(user, Some("system:masters"));
    let wave = Wave::start_as(&kubeconfig, &[], &["--update-rate=inf"]).await;
    for d in 0..4 {
        let name = format!("app-{d}");
        let hash = wait_hash_change(&client, &mixed, WorkloadKind::DEPLOYMENT, &name, None).await;
        assert_eq!(
            hash,
            desired_hash(&cluster.kubeconfig(), &mixed, WorkloadKind::DEPLOYMENT, &name),
            "{name}: the hash of its config"
        );
    }
    // Every read a hash needed completed before its write (the audit log is written as requests
    // complete, in blocking mode).
    let hashed = k8s_openapi::jiff::Timestamp::now();

    let log = std::fs::read_to_string(cluster.dir().join("logs/audit.log")).expect("the audit log");
    let reads = secret_reads(&log, user);
    let data_reads: Vec<&SecretRead> = reads
        .iter()
        .filter(|r| match r.verb.as_str() {
            // A LIST's data is every Secret in its scope; a GET's, the Secret it names.
            "list" => r.response_kind != "PartialObjectMetadataList",
            "get" => {
                r.response_kind == "Secret" && !referenced.contains(&(r.namespace.clone(), r.name.clone()))
            }
            _ => false,
        })
        .collect();
    let count = |verb: &str, kind: &str| {
        reads
            .iter()
            .filter(|r| r.verb == verb && (kind.is_empty() || r.response_kind == kind))
            .count()
    };
    let startup = requests_until(&log, user, hashed);
    eprintln!(
        "{UNREFERENCED_SECRETS} + 4 unreferenced Secrets, {} referenced: {} requests could return unreferenced \
         Secret data; Secret reads: {} GETs with data, {} metadata-only LISTs, {} watches (metadata-only \
         by construction; a watch's events are not in the audit log); wave's requests until every workload \
         was hashed: {} ({startup:?})",
        referenced.len(),
        data_reads.len(),
        count("get", "Secret"),
        count("list", "PartialObjectMetadataList"),
        count("watch", ""),
        startup.values().sum::<usize>(),
    );
    assert!(
        data_reads.is_empty(),
        "wave read the data of Secrets nobody references: {:?}",
        data_reads
            .iter()
            .map(|r| format!("{} {} ({})", r.verb, r.uri, r.response_kind))
            .collect::<Vec<_>>()
    );
    let read: std::collections::BTreeSet<(String, String)> = reads
        .iter()
        .filter(|r| r.verb == "get" && r.response_kind == "Secret")
        .map(|r| (r.namespace.clone(), r.name.clone()))
        .collect();
    assert_eq!(
        read, referenced,
        "every referenced Secret was read, with a GET of its own"
    );
    drop(wave);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stopping the control plane");
}

/// One read of Secrets in the audit log; never its data.
#[derive(Debug)]
struct SecretRead {
    verb: String,
    uri: String,
    namespace: String,
    name: String,
    /// The kind of the response object (`SecretList`, `PartialObjectMetadataList`, `Secret`, …); empty
    /// for a watch, whose events the audit log does not hold.
    response_kind: String,
}

/// Every get, list and watch of Secrets by `user` that the apiserver answered.
fn secret_reads(log: &str, user: &str) -> Vec<SecretRead> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| {
            e["user"]["username"] == user
                && e["objectRef"]["resource"] == "secrets"
                && matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
                && e["stage"]
                    == if e["verb"] == "watch" {
                        "ResponseStarted"
                    } else {
                        "ResponseComplete"
                    }
        })
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            SecretRead {
                verb: text(&e["verb"]),
                uri: text(&e["requestURI"]),
                namespace: text(&e["objectRef"]["namespace"]),
                name: text(&e["objectRef"]["name"]),
                response_kind: text(&e["responseObject"]["kind"]),
            }
        })
        .collect()
}

/// `user`'s requests received before `until`, by `verb resource` (a watch counts when it starts).
fn requests_until(
    log: &str,
    user: &str,
    until: k8s_openapi::jiff::Timestamp,
) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
    {
        let verb = e["verb"].as_str().unwrap_or_default();
        let counted = e["stage"]
            == if verb == "watch" {
                "ResponseStarted"
            } else {
                "ResponseComplete"
            };
        let at = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        if e["user"]["username"] != user || !counted || at.is_none_or(|t| t >= until) {
            continue;
        }
        let resource = e["objectRef"]["resource"].as_str().unwrap_or("-");
        *counts.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    counts
}

#[tokio::test]
async fn after_a_reference_is_removed_its_changes_trigger_nothing() {
    let (client, ns, wave) = two_references("unref").await;
    let spec = pod_spec(
        json!({}),
        json!({"volumes": [{"name": "s", "configMap": {"name": "sentinel"}}]}),
    );
    for kind in WorkloadKind::BUILT_IN {
        let old = hash_of(&client, &ns, kind, &name(kind)).await;
        let containers = spec["containers"].clone();
        patch_workload(
            &client,
            &ns,
            kind,
            &name(kind),
            json!({"spec": {"template": {"spec": {"containers": containers}}}}),
        )
        .await;
        // Dropping a referenced object changes the hash.
        wait_hash_change(&client, &ns, kind, &name(kind), old.as_deref()).await;
    }
    // The sentinel wakes the three workloads and the witness; `old` wakes nobody.
    assert_eq!(wakeups_after_changes(&client, &ns, &wave, 4).await, 4);
}

#[tokio::test]
async fn after_opt_out_changes_trigger_nothing_and_the_hash_stays() {
    let (client, ns, wave) = two_references("optout").await;
    wait_for("first writes", TIMEOUT, || async {
        (wave.writes() == 4).then_some(())
    })
    .await;
    let witness_hash = hash_of(&client, &ns, WorkloadKind::DEPLOYMENT, "witness")
        .await
        .unwrap();
    let mut hashes = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        hashes.push(hash_of(&client, &ns, kind, &name(kind)).await);
        patch_workload(
            &client,
            &ns,
            kind,
            &name(kind),
            json!({"metadata": {"annotations": {OPT_IN: "false"}}}),
        )
        .await;
    }
    wait_for("the index to drop every opted-out workload", TIMEOUT, || async {
        (wave.metric("wave_tracked_workloads", &[]) == 1.0).then_some(())
    })
    .await;
    // Only the witness wakes.
    assert_eq!(wakeups_after_changes(&client, &ns, &wave, 1).await, 1);
    for (kind, h) in WorkloadKind::BUILT_IN.into_iter().zip(hashes) {
        assert_eq!(
            hash_of(&client, &ns, kind, &name(kind)).await,
            h,
            "the hash stays on opt-out, as in Wave"
        );
    }
    wait_hash_change(
        &client,
        &ns,
        WorkloadKind::DEPLOYMENT,
        "witness",
        Some(&witness_hash),
    )
    .await;
    wave.expect_writes(
        5,
        "four first hashes and the witness's sentinel change; nothing for opted-out workloads",
    )
    .await;
}

#[tokio::test]
async fn after_deletion_the_index_is_cleaned() {
    let (client, ns, wave) = two_references("deleted").await;
    wait_for("an index of 4", TIMEOUT, || async {
        (wave.metric("wave_tracked_workloads", &[]) == 4.0).then_some(())
    })
    .await;
    for kind in WorkloadKind::BUILT_IN {
        delete_workload(&client, &ns, kind, &name(kind)).await;
    }
    wait_for(
        "the index to hold only the witness and its ConfigMap",
        TIMEOUT,
        || async {
            (wave.metric("wave_tracked_workloads", &[]) == 1.0
                && wave.metric("wave_tracked_config_objects", &[]) == 1.0)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        wave.metric("wave_cached_config_objects", &[]),
        1.0,
        "the content of `old` is dropped"
    );
    assert_eq!(wakeups_after_changes(&client, &ns, &wave, 1).await, 1);
}

#[tokio::test]
async fn missing_required_configmap_blocks_with_a_warning_until_it_exists() {
    let (client, ns) = setup("missing").await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "later"}}]}),
        json!({}),
    );
    for kind in WorkloadKind::BUILT_IN {
        create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    for kind in WorkloadKind::BUILT_IN {
        let n = name(kind);
        let events = wait_for("a ConfigMissing warning", TIMEOUT, || async {
            let e = events_for(&client, &ns, &n).await;
            e.iter()
                .any(|(t, r, _)| t == "Warning" && r == "ConfigMissing")
                .then_some(e)
        })
        .await;
        let note = &events.iter().find(|(_, r, _)| r == "ConfigMissing").unwrap().2;
        assert_eq!(
            note,
            &format!("not all required children exist: missing required configmap {ns}/later")
        );
        assert_eq!(
            hash_of(&client, &ns, kind, &n).await,
            None,
            "no hash while config is missing"
        );
    }
    assert_eq!(wave.metric("wave_workloads_waiting_for_config", &[]), 3.0);
    create_configmap(&client, &ns, "later", json!({"k": "v"})).await;
    for kind in WorkloadKind::BUILT_IN {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    }
    wait_for("nobody waiting", TIMEOUT, || async {
        (wave.metric("wave_workloads_waiting_for_config", &[]) == 0.0).then_some(())
    })
    .await;
    wave.expect_writes(3, "the hash is set exactly once per workload")
        .await;
    for kind in WorkloadKind::BUILT_IN {
        let warnings = events_for(&client, &ns, &name(kind))
            .await
            .into_iter()
            .filter(|(_, r, _)| r == "ConfigMissing")
            .count();
        assert_eq!(warnings, 1, "one Warning per distinct missing set");
    }
}

#[tokio::test]
async fn missing_required_projected_key_blocks_until_the_key_is_added() {
    let (client, ns) = setup("missing-key").await;
    create_configmap(&client, &ns, "cfg", json!({"other": "1"})).await;
    let wave = Wave::start(&[&ns], &["--update-rate=inf"]).await;
    let volumes = json!({"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "needed", "path": "n"}]}}]}}]});
    let spec = pod_spec(json!({}), volumes);
    for kind in WorkloadKind::BUILT_IN {
        create_workload(&client, &ns, kind, &name(kind), opted_in(&[]), spec.clone()).await;
    }
    for kind in WorkloadKind::BUILT_IN {
        let n = name(kind);
        let note = wait_for("a ConfigMissing warning", TIMEOUT, || async {
            events_for(&client, &ns, &n)
                .await
                .into_iter()
                .find(|(_, r, _)| r == "ConfigMissing")
                .map(|e| e.2)
        })
        .await;
        assert!(
            note.ends_with(&format!("missing required key needed in configmap {ns}/cfg")),
            "{note}"
        );
    }
    patch_configmap(&client, &ns, "cfg", json!({"data": {"needed": "yes"}})).await;
    for kind in WorkloadKind::BUILT_IN {
        wait_hash_change(&client, &ns, kind, &name(kind), None).await;
    }
    wave.expect_writes(3, "one write per workload once the key exists")
        .await;
}

#[tokio::test]
async fn extra_annotations_track_other_namespaces_and_same_names_do_not_mask_each_other() {
    let (client, ns) = setup("extra").await;
    let other = testenv::namespace(&client, "extra-other").await;
    create_configmap(&client, &ns, "shared", json!({"k": "here"})).await;
    create_configmap(&client, &other, "shared", json!({"k": "there"})).await;
    create_secret(&client, &other, "remote-secret", json!({"s": "1"})).await;
    // Naming another namespace is Wave's behaviour, which a cluster admin allows explicitly.
    let wave = Wave::start(
        &[&ns, &other],
        &["--update-rate=inf", "--cross-namespace-references=allow"],
    )
    .await;
    let extras = [
        (
            "wave.pusher.com/extra-configmaps",
            format!("shared,{other}/shared"),
        ),
        ("wave.pusher.com/extra-secrets", format!("{other}/remote-secret")),
    ];
    let annotations = opted_in(&[(extras[0].0, &extras[0].1), (extras[1].0, &extras[1].1)]);
    create_every_kind(&client, &ns, annotations.clone(), pod_spec(json!({}), json!({}))).await;
    let mut hashes = Vec::new();
    for kind in WorkloadKind::BUILT_IN {
        hashes.push(wait_hash_change(&client, &ns, kind, &name(kind), None).await);
    }
    // A change to either same-named ConfigMap rolls (Wave would mask one of them), and so does the
    // cross-namespace Secret.
    for (i, (namespace, change)) in [(&ns, "cm"), (&other, "cm"), (&other, "secret")]
        .into_iter()
        .enumerate()
    {
        match change {
            "cm" => {
                patch_configmap(
                    &client,
                    namespace,
                    "shared",
                    json!({"data": {"k": format!("v{i}")}}),
                )
                .await
            }
            _ => {
                patch_secret(
                    &client,
                    namespace,
                    "remote-secret",
                    json!({"stringData": {"s": format!("v{i}")}}),
                )
                .await
            }
        }
        for (kind, h) in WorkloadKind::BUILT_IN.into_iter().zip(hashes.iter_mut()) {
            *h = wait_hash_change(&client, &ns, kind, &name(kind), Some(h)).await;
        }
    }
    wave.expect_writes(
        12,
        "three first hashes and three changes, each rolling all three workloads",
    )
    .await;
}

#[tokio::test]
async fn an_ignored_config_object_wakes_nothing_and_leaves_the_hash_and_only_annotations_narrow_references() {
    let (client, ns) = setup("scoping").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    create_configmap(&client, &ns, "sentinel", json!({"s": "1"})).await;
    let cms = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let noise = json!({"metadata": {"name": "noise", "annotations": {"wave.pusher.com/ignore": "true"}},
        "data": {"n": "1"}});
    cms.create(&Default::default(), &serde_json::from_value(noise).unwrap())
        .await
        .unwrap();
    let wave = Wave::start(&[&ns], &["--update-rate=inf", "--min-rollout-interval=0"]).await;
    let uses = |names: &[&str]| {
        let env: Vec<_> = names
            .iter()
            .map(|n| json!({"configMapRef": {"name": n}}))
            .collect();
        pod_spec(json!({"envFrom": env}), json!({}))
    };
    let kind = WorkloadKind::DEPLOYMENT;
    create_workload(
        &client,
        &ns,
        kind,
        "noisy",
        opted_in(&[]),
        uses(&["cfg", "noise", "sentinel"]),
    )
    .await;
    create_workload(
        &client,
        &ns,
        kind,
        "quiet",
        opted_in(&[]),
        uses(&["cfg", "sentinel"]),
    )
    .await;
    let narrow = opted_in(&[("wave.pusher.com/only-configmaps", "sentinel")]);
    create_workload(&client, &ns, kind, "narrow", narrow, uses(&["cfg", "sentinel"])).await;
    let noisy = wait_hash_change(&client, &ns, kind, "noisy", None).await;
    let quiet = wait_hash_change(&client, &ns, kind, "quiet", None).await;
    let narrowed = wait_hash_change(&client, &ns, kind, "narrow", None).await;
    assert_eq!(noisy, quiet, "an ignored object leaves the hash");
    assert_ne!(narrowed, quiet, "only-configmaps leaves cfg out of the hash");

    // A change to the ignored object, then to the sentinel: one ConfigMap watch delivers both in order.
    let triggers = || wave.metric("wave_config_triggers_total", &[]) as u64;
    let before = triggers();
    patch_configmap(&client, &ns, "noise", json!({"data": {"n": "2"}})).await;
    patch_configmap(&client, &ns, "sentinel", json!({"data": {"s": "2"}})).await;
    wait_for("the sentinel's three wake-ups", TIMEOUT, || async {
        (triggers() >= before + 3).then_some(())
    })
    .await;
    assert_eq!(triggers() - before, 3, "the ignored object woke nobody");
    let noisy = wait_hash_change(&client, &ns, kind, "noisy", Some(&noisy)).await;
    let narrowed = wait_hash_change(&client, &ns, kind, "narrow", Some(&narrowed)).await;

    // cfg is outside the narrowed workload's references: it rolls the other two only.
    let before = triggers();
    patch_configmap(&client, &ns, "cfg", json!({"data": {"a": "2"}})).await;
    wait_for("cfg's two wake-ups", TIMEOUT, || async {
        (triggers() >= before + 2).then_some(())
    })
    .await;
    let noisy = wait_hash_change(&client, &ns, kind, "noisy", Some(&noisy)).await;
    assert_eq!(triggers() - before, 2);
    assert_eq!(
        hash_of(&client, &ns, kind, "narrow").await.as_deref(),
        Some(narrowed.as_str())
    );

    let kubeconfig = testenv::cluster().kubeconfig();
    let (code, out, err) = run_wave(&["impact", "configmap/noise", "-n", &ns], Some(&kubeconfig));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("rolls nothing"),
        "wave impact knows it is ignored: {out}"
    );

    // No longer ignored, the object enters the hash: one rollout.
    patch_configmap(
        &client,
        &ns,
        "noise",
        json!({"metadata": {"annotations": {"wave.pusher.com/ignore": null}}}),
    )
    .await;
    let entered = wait_hash_change(&client, &ns, kind, "noisy", Some(&noisy)).await;
    assert_ne!(entered, hash_of(&client, &ns, kind, "quiet").await.unwrap());
}

#[tokio::test]
async fn nothing_in_a_namespace_to_ignore_is_tracked_or_written() {
    let (client, watched) = setup("ns-watched").await;
    let (_, ignored) = setup("ns-ignored").await;
    let kind = WorkloadKind::DEPLOYMENT;
    for ns in [&watched, &ignored] {
        create_configmap(&client, ns, "cfg", json!({"a": "1"})).await;
        let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
        create_workload(&client, ns, kind, "app", opted_in(&[]), spec).await;
    }
    // Both exist before wave lists, so at readiness the tracker has seen both namespaces' lists.
    let wave = Wave::start(
        &[&watched, &ignored],
        &["--update-rate=inf", &format!("--namespaces-to-ignore={ignored}")],
    )
    .await;
    wait_hash_change(&client, &watched, kind, "app", None).await;
    assert_eq!(wave.metric("wave_tracked_workloads", &[]), 1.0);
    wave.expect_writes(1, "only the watched namespace's workload is written")
        .await;
    assert_eq!(hash_of(&client, &ignored, kind, "app").await, None);
}

#[tokio::test]
async fn the_namespace_selector_follows_namespace_labels_as_they_change() {
    let (client, chosen) = setup("ns-chosen").await;
    let (_, other) = setup("ns-other").await;
    // A label unique to this test, so other tests' namespaces never match.
    let label = format!("wave-test-{}", std::process::id());
    let set_label = |ns: String, value: Option<&'static str>| {
        let (client, label) = (client.clone(), label.clone());
        async move {
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
                .patch(
                    &ns,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"labels": {label: value}}})),
                )
                .await
                .unwrap();
        }
    };
    set_label(chosen.clone(), Some("yes")).await;
    let kind = WorkloadKind::DEPLOYMENT;
    for ns in [&chosen, &other] {
        create_configmap(&client, ns, "cfg", json!({"a": "1"})).await;
        let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
        create_workload(&client, ns, kind, "app", opted_in(&[]), spec).await;
    }
    let wave = Wave::start(
        &[],
        &["--update-rate=inf", &format!("--namespace-selector={label}=yes")],
    )
    .await;
    let first = wait_hash_change(&client, &chosen, kind, "app", None).await;
    wave.expect_writes(1, "only the selected namespace's workload")
        .await;
    assert_eq!(hash_of(&client, &other, kind, "app").await, None);

    // Labelling a namespace brings its workloads in, without a restart.
    set_label(other.clone(), Some("yes")).await;
    wait_hash_change(&client, &other, kind, "app", None).await;
    wave.expect_writes(2, "the newly selected namespace's workload")
        .await;

    // Unlabelling one leaves it alone: a config change there rolls nothing.
    set_label(chosen.clone(), None).await;
    wait_for(
        "wave to see the namespace leave the selector",
        TIMEOUT,
        || async { (wave.metric("wave_selected_namespaces", &[]) == 1.0).then_some(()) },
    )
    .await;
    patch_configmap(&client, &other, "cfg", json!({"data": {"a": "2"}})).await;
    wave.expect_writes(3, "the selected namespace still rolls").await;
    patch_configmap(&client, &chosen, "cfg", json!({"data": {"a": "2"}})).await;
    // The change to `chosen` is seen (its config watch is cluster-wide) but wakes nothing: wait for a
    // later change in `other` to be handled, then check `chosen` was not written.
    patch_configmap(&client, &other, "cfg", json!({"data": {"a": "3"}})).await;
    wave.expect_writes(4, "only the selected namespace rolls").await;
    assert_eq!(hash_of(&client, &chosen, kind, "app").await, Some(first));
}

/// The hash on Widget `w`'s pod template.
fn widget_hash(ns: &str) -> Option<String> {
    let (ok, out) = kubectl_stdin(
        &["get", "widgets.example.wave.test", "w", "-n", ns, "-o", "json"],
        "",
    );
    assert!(ok, "{out}");
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    w.pointer("/spec/runner/template/metadata/annotations/wave.pusher.com~1config-hash")
        .and_then(|h| h.as_str())
        .map(str::to_string)
}

#[tokio::test]
async fn argo_rollouts_and_a_custom_workload_resource_get_their_templates_hashed() {
    let (client, ns) = setup("custom-kinds").await;
    install_crd(&client, "rollouts.yaml", "rollouts.argoproj.io").await;
    install_crd(&client, "widgets.yaml", "widgets.example.wave.test").await;
    create_configmap(&client, &ns, "cfg", json!({"a": "1"})).await;
    let spec = pod_spec(json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}), json!({}));
    let rollout = WorkloadKind::ROLLOUT;
    create_workload(&client, &ns, rollout, "ro", opted_in(&[]), spec.clone()).await;
    // A Widget keeps its pod template at /spec/runner/template.
    let widget = json!({"apiVersion": "example.wave.test/v1", "kind": "Widget",
        "metadata": {"name": "w", "annotations": opted_in(&[])},
        "spec": {"runner": {"template": {"metadata": {"labels": {"app": "w"}}, "spec": spec}}}});
    let (ok, out) = kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &widget.to_string());
    assert!(ok, "{out}");
    // A Rollout that takes its template from a Deployment (`spec.workloadRef`): the Deployment, which
    // does not opt in itself, gets the hash; the Rollout gets no template.
    let deployment = WorkloadKind::DEPLOYMENT;
    create_workload(&client, &ns, deployment, "web", json!({}), spec.clone()).await;
    let by_ref = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "by-ref", "annotations": opted_in(&[])},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}});
    let (ok, out) = kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &by_ref.to_string());
    assert!(ok, "{out}");
    // Rollouts opted in through Reloader's annotations: the env var, or a restart.
    let reloaded = json!({"reloader.stakater.com/auto": "true"});
    create_workload(&client, &ns, rollout, "reloaded", reloaded, spec.clone()).await;
    let restarted =
        json!({"reloader.stakater.com/auto": "true", "reloader.stakater.com/rollout-strategy": "restart"});
    create_workload(&client, &ns, rollout, "restarted", restarted, spec.clone()).await;
    let wave = Wave::start(
        &[&ns],
        &[
            "--update-rate=inf",
            "--argo-rollouts",
            "--reloader-compat",
            "--workload-resource=example.wave.test/v1/widgets:/spec/runner/template",
        ],
    )
    .await;
    let first = wait_hash_change(&client, &ns, rollout, "ro", None).await;
    let widget_first = wait_for("the Widget's hash", TIMEOUT, || async { widget_hash(&ns) }).await;
    assert_eq!(first, widget_first, "the same config, the same hash");
    let web_first = wait_hash_change(&client, &ns, deployment, "web", None).await;
    assert_eq!(first, web_first);
    wave.expect_writes(3, "one hash each").await;
    let by_ref = workloads(&client, &ns, rollout).get("by-ref").await.unwrap();
    assert!(
        by_ref.data.pointer("/spec/template").is_none(),
        "the Rollout itself is not written"
    );

    patch_configmap(&client, &ns, "cfg", json!({"data": {"a": "2"}})).await;
    let second = wait_hash_change(&client, &ns, rollout, "ro", Some(&first)).await;
    wait_for("the Widget's new hash", TIMEOUT, || async {
        widget_hash(&ns).filter(|h| *h == second)
    })
    .await;
    wait_hash_change(&client, &ns, deployment, "web", Some(&web_first)).await;
    let api = workloads(&client, &ns, rollout);
    wait_for("the Reloader-annotated Rollout's env var", TIMEOUT, || async {
        let r = api.get("reloaded").await.unwrap();
        let env = r
            .data
            .pointer("/spec/template/spec/containers/0/env/0/name")?
            .clone();
        (env == "STAKATER_CFG_CONFIGMAP").then_some(())
    })
    .await;
    wait_for(
        "the restart of the Rollout with rollout-strategy restart",
        TIMEOUT,
        || async {
            let r = api.get("restarted").await.unwrap();
            r.data.pointer("/spec/restartAt").map(drop)
        },
    )
    .await;
    let restarted = api.get("restarted").await.unwrap();
    assert!(
        restarted
            .data
            .pointer("/spec/template/spec/containers/0/env")
            .is_none(),
        "a restart leaves the template alone"
    );
    wave.expect_writes(8, "one rollout each").await;
}

#[tokio::test]
async fn a_workload_resource_that_is_not_served_stops_wave_with_a_clear_error() {
    let (_, ns) = setup("custom-missing").await;
    let mut wave = Wave::spawn(
        &testenv::cluster().kubeconfig(),
        &[&ns],
        &["--workload-resource=nothing.wave.test/v1/gadgets:/spec/template"],
    );
    wave.wait_exit("wave to refuse a resource that is not served")
        .await;
    let log = wave.output();
    assert!(
        log.contains("--workload-resource nothing.wave.test/v1/gadgets:/spec/template")
            && log.contains("serves no API nothing.wave.test/v1"),
        "names the flag and the cause: {log}"
    );
}
