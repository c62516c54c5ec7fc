//! `wave explain KIND/NAME`: what wave sees for one workload, and what it would do.

use std::process::ExitCode;

use wave_core::hash::{Fetched, Hashing, config_hash, missing_message};
use wave_core::names::{self, reason};
use wave_core::plan::{self, Plan};
use wave_core::refs::{self, CrossNamespace, Keys};
use wave_core::undo::Pin;
use wave_core::workload::Workload;
use wave_runtime::api;
use wave_runtime::config::SecretName;

use super::{CommandError, cluster_error, workload_target};
use crate::cli::{ClusterArgs, CrossNamespaceArg, HashKeySecretArg, OutputArg, ReloaderCompatArg};

/// Flags of `wave explain`.
#[derive(Clone, Debug, clap::Args)]
pub struct ExplainArgs {
    /// `deployment/NAME`, `statefulset/NAME` or `daemonset/NAME` (also `deploy`, `sts`, `ds`).
    pub target: String,
    /// Namespace; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// `--hash-key-secret`, as `wave run` has it.
    #[command(flatten)]
    pub hash_key: HashKeySecretArg,
    /// `--cross-namespace-references`, as `wave run` has it.
    #[command(flatten)]
    pub cross_namespace: CrossNamespaceArg,
    /// `--reloader-compat`, as `wave run` has it.
    #[command(flatten)]
    pub reloader: ReloaderCompatArg,
    /// `-o/--output`.
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(serde::Serialize)]
struct ReferenceView {
    kind: &'static str,
    namespace: String,
    name: String,
    keys: Vec<String>,
    all_keys: bool,
    required: bool,
    found: bool,
    /// In another namespace, and `--cross-namespace-references=deny`: left out, unread.
    denied: bool,
    missing_keys: Vec<String>,
    origin: String,
}

#[derive(serde::Serialize)]
struct Explanation {
    workload: String,
    opted_in: bool,
    references: Vec<ReferenceView>,
    current_hash: Option<String>,
    desired_hash: Option<String>,
    status: &'static str,
    reason: String,
}

/// What wave sees for one workload and would do: its references, and the hashes and status.
pub(crate) struct Assessment {
    references: Vec<ReferenceView>,
    /// The hash on the template.
    pub current_hash: Option<String>,
    /// The hash wave would write.
    pub desired_hash: Option<String>,
    /// `up-to-date`, `rollout-pending`, `waiting`, `held`, `queued`, `halted`, `pinned` or `ignored`.
    pub status: &'static str,
    /// Why, in words.
    pub reason: String,
}

/// Runs `wave explain`.
pub async fn run(args: &ExplainArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let id = workload_target(&args.target, &ns)?;
    let workload = api::get_workload(&client, &id)
        .await
        .map_err(cluster_error(format!("reading {id}")))?
        .ok_or_else(|| CommandError::NotFound(id.to_string()))?;
    let hashing = hashing(&client, args.hash_key.hash_key_secret.as_ref()).await?;
    let a = assess(
        &client,
        &workload,
        &hashing,
        args.cross_namespace.cross_namespace_references,
        args.reloader.reloader_compat,
    )
    .await?;
    let e = Explanation {
        workload: id.to_string(),
        opted_in: workload.is_opted_in(),
        references: a.references,
        current_hash: a.current_hash,
        desired_hash: a.desired_hash,
        status: a.status,
        reason: a.reason,
    };
    if !super::print_structured(args.output.output, &e) {
        print_table(&e);
    }
    Ok(ExitCode::SUCCESS)
}

/// Assesses `workload` as `wave run` would (with its default `--max-gate-duration`), under `policy`
/// for references to other namespaces and with `--reloader-compat` as `reloader_compat` says.
pub(crate) async fn assess(
    client: &kube::Client,
    workload: &Workload,
    hashing: &Hashing,
    policy: CrossNamespace,
    reloader_compat: bool,
) -> Result<Assessment, CommandError> {
    // Show the references even when the workload is not opted in, so the opt-in can be checked.
    let refs = refs::discover(
        &workload.id.namespace,
        &workload.annotations,
        &workload.template.typed(),
    )
    .confine(&workload.id.namespace, policy);
    let mut fetched = Fetched::new();
    for key in refs.keys() {
        let found = api::fetch_content(client, &key, None)
            .await
            .map_err(cluster_error(format!("reading {key}")))?;
        if let Some((_, content)) = found {
            fetched.insert(key, std::sync::Arc::new(content));
        }
    }
    let references = refs
        .iter()
        .map(|r| {
            let content = fetched.get(&r.key);
            let (keys, all_keys) = match &r.keys {
                Keys::All => (Vec::new(), true),
                Keys::Only(k) => (k.iter().cloned().collect(), false),
            };
            let missing_keys = content
                .map(|c| keys.iter().filter(|k| !c.contains(k)).cloned().collect())
                .unwrap_or_default();
            ReferenceView {
                kind: r.key.kind.as_str(),
                namespace: r.key.namespace.clone(),
                name: r.key.name.clone(),
                keys,
                all_keys,
                required: r.required,
                found: content.is_some(),
                denied: false,
                missing_keys,
                origin: r.origin.clone(),
            }
        })
        .chain(refs.denied.iter().map(|key| ReferenceView {
            kind: key.kind.as_str(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            keys: Vec::new(),
            all_keys: true,
            required: false,
            found: false,
            denied: true,
            missing_keys: Vec::new(),
            origin: "an extra-* annotation (another namespace: --cross-namespace-references=deny)".into(),
        }))
        .collect();
    let desired = config_hash(&workload.id.namespace, &refs, &fetched, hashing);
    // Whether wave holds the rollout back: its last word on that is an Event (the controller's state is
    // in its memory; the Events are what it tells the cluster). A later ConfigChanged or ConfigSettled
    // ends what an earlier Event said.
    let reasons = [
        reason::CONFIG_FLAPPING,
        reason::CONFIG_SETTLED,
        reason::ROLLOUT_QUEUED,
        reason::ROLLOUT_HALTED,
        reason::CONFIG_CHANGED,
    ];
    let hold = api::wave_events(client, &workload.id, &reasons)
        .await
        .map_err(cluster_error(format!("reading the Events of {}", workload.id)))?
        .pop()
        .and_then(|e| {
            let since = e.event_time.map(|t| t.0.to_string()).unwrap_or_default();
            let note = e.note.unwrap_or_default();
            match e.reason.as_deref() {
                Some(reason::CONFIG_FLAPPING) => {
                    Some(("held", format!("held: config flapping since {since}: {note}")))
                }
                Some(reason::ROLLOUT_QUEUED) => Some(("queued", format!("queued since {since}: {note}"))),
                Some(reason::ROLLOUT_HALTED) => Some(("halted", format!("halted since {since}: {note}"))),
                _ => None,
            }
        });
    let reloader = wave_core::reloader::selection(workload, &wave_core::reloader::Options::default());
    let (status, reason, desired_hash) = if let Some(deployment) = &workload.template_from {
        (
            "elsewhere",
            format!(
                "its pod template is Deployment {deployment}'s (spec.workloadRef): wave acts on that Deployment"
            ),
            None,
        )
    } else if !workload.is_opted_in() && reloader.is_some() && reloader_compat {
        (
            "reloader",
            "opted in through Stakater Reloader's annotations: `wave run --reloader-compat` writes what \
             Reloader writes, not a config hash (docs/migrating-from-reloader.md)"
                .to_string(),
            None,
        )
    } else if !workload.is_opted_in() && reloader.is_some() {
        (
            "ignored",
            format!(
                "it carries only Stakater Reloader's annotations, and Reloader compatibility is off (the default): \
                 wave leaves it alone. `wave run --reloader-compat` (chart: reloader.compat=true) reloads it as \
                 Reloader does; {} opts it in to wave's config hash (docs/migrating-from-reloader.md)",
                names::UPDATE_ON_CONFIG_CHANGE
            ),
            None,
        )
    } else if !workload.is_opted_in() {
        (
            "ignored",
            format!("not opted in: {} is not \"true\"", names::UPDATE_ON_CONFIG_CHANGE),
            None,
        )
    } else {
        let policy = plan::Policy {
            now: k8s_openapi::jiff::Timestamp::now(),
            max_gate: super::DEFAULT_MAX_GATE,
            hashing: hashing.clone(),
        };
        let pin = Pin::read(workload).filter(|p| p.holds(workload.current_hash(), &desired));
        match plan::plan(workload, &refs, &fetched, &policy) {
            Plan::Noop if pin.is_some() => (
                "pinned",
                format!(
                    "the template went back to {} (an undo) and the config has not changed since; `wave unpin` rolls it to {desired}",
                    workload.current_hash().unwrap_or_default()
                ),
                Some(desired),
            ),
            Plan::Noop => (
                "up-to-date",
                "the hash on the template matches the config".into(),
                Some(desired),
            ),
            Plan::Blocked { missing, .. } => ("waiting", missing_message(&missing), None),
            Plan::Write(w) if w.hash.is_some() && workload.current_hash().is_some() && hold.is_some() => {
                let (status, why) = hold.unwrap_or_default();
                (status, why, Some(desired))
            }
            Plan::Write(w) if w.hash.is_some() => (
                "rollout-pending",
                match workload.current_hash() {
                    None => "the template has no hash yet".into(),
                    Some(_) => "the config changed since the hash was written".into(),
                },
                Some(desired),
            ),
            Plan::Write(w) if w.mark_gated_at.is_some() => (
                "waiting",
                format!(
                    "the scheduling gate {} has no start time; wave notes one, and releases the gate one --max-gate-duration later",
                    names::SCHEDULING_GATE
                ),
                None,
            ),
            Plan::Write(w) if w.release_gate.is_some() => (
                "rollout-pending",
                format!("the scheduling gate {} is to be released", names::SCHEDULING_GATE),
                Some(desired),
            ),
            Plan::Write(_) => (
                "rollout-pending",
                "scheduling gated by Wave is to be restored".into(),
                Some(desired),
            ),
            Plan::DeleteHeldPods => (
                "rollout-pending",
                "pods held by the released scheduling gate are to be deleted".into(),
                Some(desired),
            ),
        }
    };
    Ok(Assessment {
        references,
        current_hash: workload.current_hash().map(str::to_string),
        desired_hash,
        status,
        reason,
    })
}

/// The hashing `wave run --hash-key-secret` uses, so that desired hashes match the controller's.
pub(crate) async fn hashing(
    client: &kube::Client,
    secret: Option<&SecretName>,
) -> Result<Hashing, CommandError> {
    Ok(match secret {
        Some(secret) => Hashing::Keyed(api::read_hash_key(client, secret).await.map_err(|e| match e {
            api::HashKeyError::Read { secret, source } => CommandError::Cluster {
                what: format!("reading the hash key Secret {secret}"),
                source,
            },
            other => CommandError::Input(other.to_string()),
        })?),
        None => Hashing::Plain,
    })
}

fn print_table(e: &Explanation) {
    println!(
        "{}{}",
        e.workload,
        if e.opted_in { "" } else { " (not opted in)" }
    );
    println!();
    let rows: Vec<[String; 5]> = e
        .references
        .iter()
        .map(|r| {
            let keys = if r.all_keys {
                "all".to_string()
            } else {
                r.keys.join(",")
            };
            let found = match (r.found, r.missing_keys.is_empty()) {
                _ if r.denied => "denied, unread".to_string(),
                (false, _) => "missing".to_string(),
                (true, true) => "found".to_string(),
                (true, false) => format!("found, missing key {}", r.missing_keys.join(",")),
            };
            let required = if r.required { "required" } else { "optional" };
            [
                format!("{} {}/{}", r.kind, r.namespace, r.name),
                keys,
                required.into(),
                found,
                r.origin.clone(),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("No ConfigMap or Secret references.");
    } else {
        super::print_table(["REFERENCE", "KEYS", "NEEDED", "STATUS", "FROM"], &rows);
    }
    println!();
    println!(
        "Hash on the template:  {}",
        e.current_hash.as_deref().unwrap_or("(none)")
    );
    println!(
        "Hash wave would write: {}",
        e.desired_hash.as_deref().unwrap_or("(none)")
    );
    println!("Status: {}: {}", e.status, e.reason);
}
