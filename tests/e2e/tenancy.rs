//! The tenant suite (`docs/security.md`): a tenant with rights only in their own namespace tries every
//! way to make wave reach another namespace, with wave running as the chart's ServiceAccount under the
//! chart's defaults and again with every optional feature on. After the attempts:
//!
//! - nothing from the victim's namespace was copied into the tenant's (every object there is scanned for
//!   the victim's canary values, plain and base64);
//! - nothing in the victim's namespace changed (every object's resourceVersion is compared);
//! - nothing revealed a hash of the victim's config or whether its objects exist (the tenant's hashes are
//!   those of their own config alone, and every Event about a victim object reads the same for an object
//!   that exists and one that does not).
//!
//! A failure names the attempt and what leaked.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testenv::{cluster, wait_for};
use wave_core::hash::{Content, Fetched, Hashing, config_hash};
use wave_core::history::Snapshot;
use wave_core::names::{self, reason, reloader};
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::workload::{WorkloadKind, WorkloadRef};

use crate::harness::*;
use crate::ship::chart_identity;
use crate::webhook;

/// The victim's Secret value and ConfigMap value: neither may ever appear in the tenant's namespace.
const SECRET_CANARY: &str = "victim-secret-7c1e55";
const CONFIG_CANARY: &str = "victim-config-90ab13";

/// The namespaces of one run: the tenant's, and the victim's.
struct Run {
    admin: Client,
    tenant: Client,
    tenant_config: PathBuf,
    evil: String,
    victim: String,
    /// Every object in the victim's namespace and its resourceVersion, before the attempts.
    victim_before: BTreeMap<String, String>,
}

/// The kinds scanned in both namespaces: everything the attempts could make wave write.
const SCANNED: [(&str, &str, &str); 9] = [
    ("", "v1", "configmaps"),
    ("", "v1", "secrets"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "daemonsets"),
    ("apps", "v1", "replicasets"),
    ("apps", "v1", "controllerrevisions"),
    ("batch", "v1", "cronjobs"),
    ("batch", "v1", "jobs"),
];

async fn objects(client: &Client, ns: &str) -> Vec<DynamicObject> {
    let mut out = Vec::new();
    for (group, version, plural) in SCANNED {
        let gvk = kube::core::GroupVersionKind::gvk(group, version, "");
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        out.extend(
            api.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|mut o| {
                    o.types = Some(kube::core::TypeMeta {
                        api_version: resource.api_version.clone(),
                        kind: plural.into(),
                    });
                    o
                }),
        );
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    for e in events.list(&ListParams::default()).await.unwrap().items {
        out.push(serde_json::from_value(serde_json::to_value(e).unwrap()).unwrap());
    }
    out
}

fn describe(o: &DynamicObject) -> String {
    let kind = o
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_else(|| "events".into());
    format!("{kind}/{}", o.name_any())
}

impl Run {
    /// A tenant namespace with a user bound to `admin` there only, and a victim namespace holding a
    /// Secret and a ConfigMap with the canaries (the ConfigMap marked for Reloader's `search`).
    async fn new(prefix: &str) -> Run {
        let (admin, evil) = setup(&format!("{prefix}-evil")).await;
        let victim = testenv::namespace(&admin, &format!("{prefix}-victim")).await;
        let user = format!("tenant-{evil}");
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "tenant", "namespace": evil},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
        let (ok, text) = kubectl_stdin(&["apply", "-f", "-"], &binding.to_string());
        assert!(ok, "{text}");
        for (verb, resource) in [
            ("create", "deployments"),
            ("patch", "deployments"),
            ("create", "secrets"),
        ] {
            wait_authorized(&evil, &user, verb, resource).await;
        }
        let tenant_config = cluster().user_kubeconfig(&user, None);
        let tenant = testenv::client_for(&tenant_config).await;
        // The tenant really has no rights in the victim's namespace.
        let denied = Api::<Secret>::namespaced(tenant.clone(), &victim)
            .get("victim-db")
            .await;
        assert!(
            matches!(&denied, Err(kube::Error::Api(e)) if e.code == 403),
            "the tenant must not read the victim's namespace: {denied:?}"
        );
        create_secret(&admin, &victim, "victim-db", json!({"password": SECRET_CANARY})).await;
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "victim-cfg",
            "annotations": {reloader::MATCH: "true"}}, "data": {"k": CONFIG_CANARY}}))
        .unwrap();
        Api::<ConfigMap>::namespaced(admin.clone(), &victim)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        // The victim's own opted-in workload: once it carries a new hash, wave has seen a victim change.
        let spec = pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": "victim-cfg"}}]}),
            json!({}),
        );
        // No history for it: every object that appears in the victim's namespace is then the tenant's doing.
        let annotations = opted_in(&[(names::CONFIG_HISTORY, "false")]);
        create_workload(&admin, &victim, WorkloadKind::DEPLOYMENT, "v", annotations, spec).await;
        Run {
            admin,
            tenant,
            tenant_config,
            evil,
            victim,
            victim_before: BTreeMap::new(),
        }
    }

    /// Once wave runs: waits for the victim's workload to carry its hash, then records the victim's
    /// namespace as it is before the attempts.
    async fn settle(&mut self) {
        wait_hash_change(&self.admin, &self.victim, WorkloadKind::DEPLOYMENT, "v", None).await;
        self.victim_before = self.victim_versions().await;
    }

    /// Starts wave as the ServiceAccount the chart renders with `sets` (in a release namespace of its
    /// own), watching both namespaces with `flags`, and settles.
    async fn start_wave(&mut self, tag: &str, sets: &[&str], flags: &[&str]) -> Wave {
        let release_ns = testenv::namespace(&self.admin, &format!("{tag}-release")).await;
        let release = format!("{tag}{}", std::process::id());
        let kubeconfig = chart_identity(&release, &release_ns, sets, |_| {});
        let args: Vec<&str> = std::iter::once("--update-rate=inf")
            .chain(flags.iter().copied())
            .collect();
        let wave = Wave::start_as(&kubeconfig, &[&self.evil, &self.victim], &args).await;
        self.settle().await;
        wave
    }

    /// Every object in the victim's namespace that wave could write, and its version: the
    /// resourceVersion of config objects and Jobs, the generation of workloads (spec changes only:
    /// their controllers keep writing status). ReplicaSets and ControllerRevisions are their
    /// controllers' to change.
    async fn victim_versions(&self) -> BTreeMap<String, String> {
        objects(&self.admin, &self.victim)
            .await
            .iter()
            .filter(|o| {
                let kind = o.types.as_ref().map(|t| t.kind.as_str());
                kind.is_some() && !matches!(kind, Some("replicasets" | "controllerrevisions" | "Event"))
            })
            .map(|o| {
                let is_config = matches!(
                    o.types.as_ref().map(|t| t.kind.as_str()),
                    Some("configmaps" | "secrets" | "jobs")
                );
                let version = if is_config {
                    o.resource_version().unwrap_or_default()
                } else {
                    format!("generation {}", o.metadata.generation.unwrap_or_default())
                };
                (describe(o), version)
            })
            .collect()
    }

    /// The tenant's own objects: a Secret and a ConfigMap of their own (never canaries).
    async fn own_config(&self) {
        create_secret(
            &self.tenant,
            &self.evil,
            "own-db",
            json!({"password": "tenant-own"}),
        )
        .await;
        create_configmap(&self.tenant, &self.evil, "own-cfg", json!({"k": "tenant-own"})).await;
    }

    /// Creates a workload as the tenant.
    async fn create(&self, kind: WorkloadKind, name: &str, annotations: Value, spec: Value) {
        let b = body(kind, name, &annotations, &spec);
        workloads(&self.tenant, &self.evil, kind)
            .create(&PostParams::default(), &serde_json::from_value(b).unwrap())
            .await
            .unwrap_or_else(|e| panic!("the tenant creates {kind} {name}: {e}"));
    }

    /// The invariant, checked after the attempts (`attempts` name them, for the failure message).
    async fn assert_isolated(&self, attempts: &str) {
        // In base64, only whole 3-byte groups encode the same whatever follows: the first 18 bytes of a
        // canary are found in the encoding of any value that starts with it (the changed `…-2` too).
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(&s.as_bytes()[..18]);
        let canaries = [
            SECRET_CANARY.to_string(),
            b64(SECRET_CANARY),
            CONFIG_CANARY.to_string(),
            b64(CONFIG_CANARY),
        ];
        for o in objects(&self.admin, &self.evil).await {
            let mut text = serde_json::to_string(&o).unwrap();
            // A Secret's values are base64: scan them decoded too (a snapshot's `secrets.json` holds the
            // victim's values base64 inside base64).
            for value in o.data["data"].as_object().into_iter().flat_map(|d| d.values()) {
                let decoded = value
                    .as_str()
                    .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok());
                text.push_str(&String::from_utf8_lossy(&decoded.unwrap_or_default()));
            }
            for canary in &canaries {
                assert!(
                    !text.contains(canary.as_str()),
                    "after {attempts}: {} in the tenant's namespace holds the victim's data ({canary:?})",
                    describe(&o)
                );
            }
            // Reloader's env var or annotation computed from a victim object would name it.
            assert!(
                !text.contains("STAKATER_VICTIM"),
                "after {attempts}: {} carries a Reloader value computed from a victim object",
                describe(&o)
            );
        }
        let after = self.victim_versions().await;
        for (object, version) in &self.victim_before {
            assert_eq!(
                after.get(object),
                Some(version),
                "after {attempts}: {object} in the victim's namespace changed"
            );
        }
        let appeared: Vec<&String> = after
            .keys()
            .filter(|o| !self.victim_before.contains_key(*o))
            .collect();
        assert!(
            appeared.is_empty(),
            "after {attempts}: {appeared:?} appeared in the victim's namespace"
        );
        // An Event naming a victim object may say that wave left it alone, never what state it is in:
        // the words are the same for one that exists (victim-db) and one that does not (victim-nope).
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.admin.clone(), &self.evil);
        for e in events.list(&ListParams::default()).await.unwrap().items {
            let note = e.note.clone().unwrap_or_default();
            // (The history test names the tenant's own Secret victim-db, as the reproduction did.)
            if [self.victim.as_str(), "victim-cfg", "victim-nope"]
                .iter()
                .any(|v| note.contains(v))
            {
                let reason = e.reason.clone().unwrap_or_default();
                assert!(
                    [
                        reason::CROSS_NAMESPACE_REFERENCE_DENIED,
                        reason::CONFIG_SNAPSHOT_FAILED,
                        reason::CONFIG_RESTORE_REFUSED
                    ]
                    .contains(&reason.as_str()),
                    "after {attempts}: a {reason} Event names a victim object: {note}"
                );
                assert!(
                    !note.contains("missing") && !note.contains("found") && !note.contains("does not exist"),
                    "after {attempts}: an Event reveals the state of a victim object: {note}"
                );
            }
        }
    }

    /// `wave.pusher.com/` annotations aimed at the victim: every `extra-*` and `only-*` form, with one
    /// object that exists and one that does not, plus history and restore-config.
    fn wave_attack(&self) -> Value {
        let v = &self.victim;
        opted_in(&[
            (
                names::EXTRA_SECRETS,
                &format!("own-db,{v}/victim-db,{v}/victim-nope"),
            ),
            (
                names::EXTRA_CONFIGMAPS,
                &format!("{v}/victim-cfg,{v}/victim-nope"),
            ),
            (names::ONLY_SECRETS, &format!("own-db,{v}/victim-db")),
            (names::CONFIG_HISTORY, "true"),
            (names::UNDO, names::UNDO_RESTORE_CONFIG),
        ])
    }

    /// Reloader's annotations aimed at the victim: names with a namespace, `search` (the victim's
    /// ConfigMap is marked `match`), and a pause period.
    fn reloader_attack(&self) -> Value {
        let v = &self.victim;
        json!({
            reloader::SEARCH: "true",
            reloader::SECRET_RELOAD: format!("{v}/victim-db,victim-db"),
            reloader::CONFIGMAP_RELOAD: format!("{v}/victim-cfg,victim-cfg,own-cfg"),
            reloader::PAUSE_PERIOD: "10s",
        })
    }

    /// The hash of the tenant's `extra-secrets: own-db` workload from their own config alone.
    fn own_hash(&self) -> String {
        let template = serde_json::from_value(json!({"spec": pod_spec(json!({}), json!({}))})).unwrap();
        let annotations = BTreeMap::from([(names::EXTRA_SECRETS.to_string(), "own-db".to_string())]);
        let refs = wave_core::refs::discover(&self.evil, &annotations, &template);
        let fetched: Fetched = Fetched::from([(
            ConfigKey::new(ConfigKind::Secret, &self.evil, "own-db"),
            Arc::new(Content::new(BTreeMap::from([(
                "password".to_string(),
                b"tenant-own".to_vec(),
            )]))),
        )]);
        config_hash(&self.evil, &refs, &fetched, &Hashing::Plain)
    }

    /// The admin changes the victim's objects, then the tenant changes their own ConfigMap: the tenant's
    /// Reloader workload `reloaded` must reload for the second only. Wave has processed the victim's
    /// change once the victim's own workload `v` carries its new hash.
    async fn change_both(&mut self, reloaded: &str) {
        let before = hash_of(&self.admin, &self.victim, WorkloadKind::DEPLOYMENT, "v").await;
        let secret = json!({"stringData": {"password": format!("{SECRET_CANARY}-2")}});
        patch_secret(&self.admin, &self.victim, "victim-db", secret).await;
        let config = json!({"data": {"k": format!("{CONFIG_CANARY}-2")}});
        patch_configmap(&self.admin, &self.victim, "victim-cfg", config).await;
        wait_hash_change(
            &self.admin,
            &self.victim,
            WorkloadKind::DEPLOYMENT,
            "v",
            before.as_deref(),
        )
        .await;
        // The admin's changes are not the tenant's doing.
        self.victim_before = self.victim_versions().await;
        let own = json!({"data": {"k": "tenant-own-2"}});
        patch_configmap(&self.tenant, &self.evil, "own-cfg", own).await;
        // The sentinel: the reload for the tenant's own change (Reloader's env var for own-cfg).
        wait_for(
            &format!("{reloaded} reloaded for the tenant's own ConfigMap"),
            TIMEOUT,
            || async {
                let d = workloads(&self.admin, &self.evil, WorkloadKind::DEPLOYMENT)
                    .get(reloaded)
                    .await
                    .ok()?;
                let template = serde_json::to_string(&d.data["spec"]["template"]).ok()?;
                template.contains("STAKATER_OWN_CFG_CONFIGMAP").then_some(())
            },
        )
        .await;
    }
}

/// The Deployment `x` carries the hash of the tenant's own config alone: nothing of the victim's
/// objects went into it (a hash of them would reveal their content and changes).
async fn assert_own_hash(run: &Run, name: &str) {
    let want = run.own_hash();
    let got = wait_for(&format!("{name}'s hash"), TIMEOUT, || async {
        hash_of(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT, name).await
    })
    .await;
    assert_eq!(
        got, want,
        "{name}: the hash is not that of the tenant's own config alone, so it covers a victim object"
    );
}

/// `kubectl rollout undo deployment/NAME` as the tenant.
fn tenant_undo(run: &Run, name: &str) {
    let out = std::process::Command::new(cluster().bin("kubectl"))
        .arg("--kubeconfig")
        .arg(&run.tenant_config)
        .args(["rollout", "undo", &format!("deployment/{name}"), "-n", &run.evil])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn at_the_charts_defaults_a_tenant_reaches_nothing_in_another_namespace() {
    let mut run = Run::new("tenancy-defaults").await;
    let wave = run.start_wave("td", &[], &[]).await;
    run.own_config().await;
    run.create(
        WorkloadKind::DEPLOYMENT,
        "x",
        run.wave_attack(),
        pod_spec(json!({}), json!({})),
    )
    .await;
    let mut reloader_only = run.reloader_attack();
    reloader_only[reloader::AUTO] = json!("true");
    run.create(
        WorkloadKind::DEPLOYMENT,
        "r",
        reloader_only,
        pod_spec(json!({}), json!({})),
    )
    .await;
    assert_own_hash(&run, "x").await;
    wait_event(
        &run.admin,
        &run.evil,
        "x",
        "the denied references reported",
        |(t, r, _)| t == "Warning" && r == reason::CROSS_NAMESPACE_REFERENCE_DENIED,
    )
    .await;
    run.assert_isolated("extra-*/only-* naming the victim at the chart's defaults")
        .await;
    drop(wave);
}

#[tokio::test]
async fn with_cross_namespace_references_allowed_history_copies_nothing_in_and_restore_writes_nothing_out() {
    // Item 1 of the tenant-isolation issue, as reproduced: with the admin's explicit allowance, a
    // tenant's workload may hash the victim's Secret (the documented exception), but its snapshot must
    // not copy it, and an undo with restore-config must not write into the victim's namespace.
    let mut run = Run::new("tenancy-history").await;
    let history = ["configHistory.enabled=true"];
    let flags = [
        "--min-rollout-interval=0",
        "--config-history",
        "--cross-namespace-references=allow",
    ];
    let wave = run.start_wave("th", &history, &flags).await;
    // The tenant's own Secret is named like the victim's, as in the reproduction.
    create_secret(&run.tenant, &run.evil, "victim-db", json!({"password": "pwned"})).await;
    let annotations = opted_in(&[
        (names::CONFIG_HISTORY, "true"),
        (names::UNDO, names::UNDO_RESTORE_CONFIG),
        (names::EXTRA_SECRETS, "victim-db"),
    ]);
    run.create(
        WorkloadKind::DEPLOYMENT,
        "x",
        annotations,
        pod_spec(json!({}), json!({})),
    )
    .await;
    let id = WorkloadRef::new(WorkloadKind::DEPLOYMENT, &run.evil, "x");
    let first = wait_hash_change(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT, "x", None).await;
    wait_for("the first snapshot", TIMEOUT, || async {
        wave_runtime::api::get_snapshot(&run.admin, &id, &first)
            .await
            .unwrap()
    })
    .await;
    let victim_ref = format!("{}/victim-db", run.victim);
    workloads(&run.tenant, &run.evil, WorkloadKind::DEPLOYMENT)
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {names::EXTRA_SECRETS: victim_ref}}})),
        )
        .await
        .unwrap();
    let second = wait_hash_change(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT, "x", Some(&first)).await;
    wait_event(
        &run.admin,
        &run.evil,
        "x",
        "no snapshot of a hash reading another namespace",
        |(_, r, n)| r == reason::CONFIG_SNAPSHOT_FAILED && n.contains("another namespace"),
    )
    .await;
    assert!(
        wave_runtime::api::get_snapshot(&run.admin, &id, &second)
            .await
            .unwrap()
            .is_none(),
        "a snapshot of a hash that reads the victim's Secret was kept in the tenant's namespace"
    );
    tenant_undo(&run, "x");
    wait_event(&run.admin, &run.evil, "x", "the restore refused", |(_, r, n)| {
        r == reason::CONFIG_RESTORE_REFUSED && n.contains("another namespace")
    })
    .await;
    run.assert_isolated("extra-secrets: victim/db with history, then undo with restore-config")
        .await;
    drop(wave);
}

#[tokio::test]
async fn a_snapshot_the_tenant_forged_is_never_adopted_nor_restored() {
    let mut run = Run::new("tenancy-forged").await;
    let history = ["configHistory.enabled=true"];
    let flags = ["--min-rollout-interval=0", "--config-history"];
    let wave = run.start_wave("tf", &history, &flags).await;
    run.own_config().await;
    // The tenant predicts the first hash of `x` (plain hashing is public) and puts a snapshot of their
    // own making under its name: entries aimed at the victim's objects, mutable, owned by nobody.
    let first = run.own_hash();
    let id = WorkloadRef::new(WorkloadKind::DEPLOYMENT, &run.evil, "x");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let v = &run.victim;
    let mut forged_cm = Snapshot::default();
    forged_cm.config_maps.insert(
        format!("{v}/victim-cfg"),
        BTreeMap::from([("k".into(), b64("pwned"))]),
    );
    forged_cm.secrets.insert(
        format!("{v}/victim-db"),
        BTreeMap::from([("password".into(), b64("pwned"))]),
    );
    forged_cm.secrets.insert(
        "own-db".into(),
        BTreeMap::from([("password".into(), b64("tenant-own"))]),
    );
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference::default();
    let mut cm = forged_cm.config_map(&id, &first, owner.clone());
    cm.immutable = None;
    cm.metadata.owner_references = None;
    let mut secret = forged_cm.secret(&id, &first, owner).unwrap();
    secret.immutable = None;
    secret.metadata.owner_references = None;
    Api::<ConfigMap>::namespaced(run.tenant.clone(), &run.evil)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    Api::<Secret>::namespaced(run.tenant.clone(), &run.evil)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let annotations = opted_in(&[
        (names::CONFIG_HISTORY, "true"),
        (names::UNDO, names::UNDO_RESTORE_CONFIG),
        (names::EXTRA_SECRETS, "own-db"),
    ]);
    run.create(
        WorkloadKind::DEPLOYMENT,
        "x",
        annotations,
        pod_spec(json!({}), json!({})),
    )
    .await;
    let got = wait_hash_change(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT, "x", None).await;
    assert_eq!(got, first, "the tenant predicted the first hash");
    wait_event(
        &run.admin,
        &run.evil,
        "x",
        "the forged snapshot left alone",
        |(_, r, n)| r == reason::CONFIG_SNAPSHOT_FAILED && n.contains("not the snapshot wave would write"),
    )
    .await;
    let stored = Api::<ConfigMap>::namespaced(run.admin.clone(), &run.evil)
        .get(&Snapshot::name(&id, &first))
        .await
        .unwrap();
    assert!(
        stored.metadata.owner_references.unwrap_or_default().is_empty(),
        "wave adopted the forged snapshot as its revision's"
    );
    patch_secret(
        &run.tenant,
        &run.evil,
        "own-db",
        json!({"stringData": {"password": "tenant-own-2"}}),
    )
    .await;
    wait_hash_change(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT, "x", Some(&first)).await;
    tenant_undo(&run, "x");
    wait_event(
        &run.admin,
        &run.evil,
        "x",
        "the restore from the forged snapshot refused",
        |(_, r, n)| r == reason::CONFIG_RESTORE_REFUSED && n.contains("not one wave wrote"),
    )
    .await;

    // The pin is written after the refusal; a config change before it would be pinned too.
    wait_for("x pinned to the first hash", TIMEOUT, || async {
        let x = workloads(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT)
            .get("x")
            .await
            .ok()?;
        (x.annotations().get(names::PINNED_HASH) == Some(&first)).then_some(())
    })
    .await;

    // Second try, with everything a tenant can make right: the forged snapshot replaced by an
    // immutable one with wave's marks, owned by the revision that carries the hash. Its entries for
    // the victim's objects still keep it from being restored.
    for kind in ["configmap", "secret"] {
        let (ok, text) = kubectl_stdin(
            &["delete", kind, &Snapshot::name(&id, &first), "-n", &run.evil],
            "",
        );
        assert!(ok, "{text}");
    }
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(run.tenant.clone(), &run.evil);
    let carrying_first = replica_sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|rs| {
            let template = rs.spec.as_ref().and_then(|s| s.template.as_ref());
            let annotations = template
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref());
            annotations.and_then(|a| a.get(names::CONFIG_HASH)) == Some(&first)
        })
        .expect("the ReplicaSet carrying the first hash");
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: carrying_first.name_any(),
        uid: carrying_first.uid().unwrap(),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(run.tenant.clone(), &run.evil)
        .create(
            &PostParams::default(),
            &forged_cm.config_map(&id, &first, owner.clone()),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(run.tenant.clone(), &run.evil)
        .create(
            &PostParams::default(),
            &forged_cm.secret(&id, &first, owner).unwrap(),
        )
        .await
        .unwrap();
    let pinned = hash_of(&run.admin, &run.evil, WorkloadKind::DEPLOYMENT, "x").await;
    let third = json!({"stringData": {"password": "tenant-own-3"}});
    patch_secret(&run.tenant, &run.evil, "own-db", third).await;
    wait_hash_change(
        &run.admin,
        &run.evil,
        WorkloadKind::DEPLOYMENT,
        "x",
        pinned.as_deref(),
    )
    .await;
    tenant_undo(&run, "x");
    wait_event(
        &run.admin,
        &run.evil,
        "x",
        "the restore from the well-formed forged snapshot refused",
        |(_, r, n)| r == reason::CONFIG_RESTORE_REFUSED && n.contains("an entry of another namespace"),
    )
    .await;
    run.assert_isolated("forged snapshots, each followed by an undo with restore-config")
        .await;
    drop(wave);
}

#[tokio::test]
async fn with_every_optional_feature_on_a_tenant_still_reaches_nothing_in_another_namespace() {
    let mut run = Run::new("tenancy-all").await;
    let release_ns = testenv::namespace(&run.admin, "tenancy-all-release").await;
    let release = format!("ta{}", std::process::id());
    let sets = [
        "configHistory.enabled=true",
        "cronJobs.enabled=true",
        "reloader.compat=true",
        "webhook.enabled=true",
    ];
    let kubeconfig = chart_identity(&release, &release_ns, &sets, |_| {});
    let fullname = format!("{release}-wave");
    let names = webhook::Names {
        config: fullname.clone(),
        secret: format!("{fullname}-webhook-tls"),
        token: format!("{fullname}-webhook-token"),
        secret_namespace: release_ns.clone(),
    };
    let both = [run.evil.as_str(), run.victim.as_str()];
    let port = webhook::register_in(&run.admin, &both, &names.config).await;
    let flags = [
        "--min-rollout-interval=0",
        "--config-history",
        "--cronjobs",
        "--reloader-compat",
    ];
    let wave = webhook::start_on_all(&run.admin, &kubeconfig, &both, &names, port, &flags).await;
    let token = webhook::path_token(&run.admin, &release_ns, &names.token).await;
    run.settle().await;
    run.own_config().await;
    // Created through the apiserver, so the webhook hashes it at creation.
    let no_refs = pod_spec(json!({}), json!({}));
    run.create(WorkloadKind::DEPLOYMENT, "x", run.wave_attack(), no_refs.clone())
        .await;
    let mut reloader_auto = run.reloader_attack();
    reloader_auto[reloader::AUTO] = json!("true");
    let uses_own = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "own-cfg"}}]}),
        json!({}),
    );
    run.create(
        WorkloadKind::DEPLOYMENT,
        "r",
        reloader_auto.clone(),
        uses_own.clone(),
    )
    .await;
    // Two CronJobs: one opted in to wave (its Job template hashed), one through Reloader's annotations
    // only (a Job started on a change).
    for (name, annotations) in [("c", run.wave_attack()), ("cr", reloader_auto.clone())] {
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": uses_own["containers"].clone(),
                "tolerations": uses_own["tolerations"].clone()}}}}}});
        workloads(&run.tenant, &run.evil, WorkloadKind::CRON_JOB)
            .create(&PostParams::default(), &serde_json::from_value(cron).unwrap())
            .await
            .unwrap();
    }
    assert_own_hash(&run, "x").await;

    // A pod on the network posts reviews for the victim's namespace without the webhook's token: the
    // same bare 404 whether the Secret they name exists or not.
    let wrong = format!("/mutate-apps-v1-deployment/{}", "0".repeat(token.len()));
    for secret in ["victim-db", "victim-nope"] {
        let env = json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}}]});
        let object = body(
            WorkloadKind::DEPLOYMENT,
            "forged",
            &opted_in(&[]),
            &pod_spec(env, json!({})),
        );
        let review = webhook::review_of(&run.victim, "forged", &object, false);
        for path in ["/mutate-apps-v1-deployment", wrong.as_str()] {
            assert_eq!(
                webhook::post_review(port, path, &review),
                (404, String::new()),
                "a review forged for the victim's namespace ({secret}, {path}) was answered"
            );
        }
    }
    // What the apiserver sends for the tenant's own create: the hash covers only their own config.
    let object = body(WorkloadKind::DEPLOYMENT, "y", &run.wave_attack(), &no_refs);
    let review = webhook::review_of(&run.evil, "y", &object, true);
    let (status, answer) =
        webhook::post_review(port, &format!("/mutate-apps-v1-deployment/{token}"), &review);
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    // kube serialises the patch as an array of bytes (Go's encoding/json reads that as well as base64).
    let bytes: Vec<u8> = serde_json::from_value(answer["response"]["patch"].clone())
        .unwrap_or_else(|e| panic!("a patch ({e}): {answer}"));
    let patch = String::from_utf8(bytes).unwrap();
    assert!(
        patch.contains(&run.own_hash()),
        "the webhook's hash for the tenant's own workload covers a victim object: {patch}"
    );

    run.change_both("r").await;
    // The Reloader-only CronJob's Job for the tenant's own change: that path ran, in the tenant's namespace.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(run.admin.clone(), &run.evil);
    wait_for(
        "the Reloader CronJob's Job in the tenant's namespace",
        TIMEOUT,
        || async {
            let list = jobs.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|j| j.name_any().starts_with("cr-"))
                .then_some(())
        },
    )
    .await;
    run.assert_isolated(
        "every wave.pusher.com/ and reloader.stakater.com/ annotation naming the victim, with history, \
         Reloader compatibility (search/match, pause-period), CronJobs and the webhook on, and reviews \
         forged for the victim's namespace",
    )
    .await;
    drop(wave);
}
