//! `wave explain KIND/NAME`: what wave sees for one workload, and what it would do.
//!
//! ```text
//! the workload, its references, their content ─┐
//! the halts: the census of the workloads of    ├─► decide::decision ─► Decision::reason() + a sentence
//!   the namespaces of its config (pace::census) │     a rollout ─► wave's last Event: held (flapping)
//! no memory of wave's (with_command_memory) ───┘                 or queued (pacing line), if it says so
//! ```
//!
//! It asks the same decision as the controller (`wave_core::decide`), from what a command can read:
//! the workload, its config, and the halts, which the cluster holds (failure records and rollout
//! markers). It cannot read wave's memory: the hashes a workload carried (an undo is told by the pin
//! wave set, not detected), what it last rolled (the rollout marker stands in), the flap breaker, the
//! coalescer, the pacing line, a halt kept only in memory (after the failed workload was undone or
//! deleted), and `wave run`'s flags (`--rollout-deadline` and `--max-gate-duration` are taken at their
//! defaults). So `held` (flapping) and `queued` come from wave's last
//! Event on the workload, and coalescing is not shown: a rollout inside its minimum interval reads as
//! `rollout`.

use std::process::ExitCode;

use wave_core::decide::{self, Decision, Hold, Situation, UndoAction};
use wave_core::hash::{Fetched, Hashing, config_hash, missing_message};
use wave_core::inplace;
use wave_core::names::{self, reason};
use wave_core::plan;
use wave_core::refs::{self, CrossNamespace, Keys};
use wave_core::workload::Workload;
use wave_runtime::api;
use wave_runtime::config::SecretName;
use wave_runtime::controller::in_place;

use super::{ClusterHalts, CommandError, cluster_error, with_command_memory};
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
    /// How its pods get new config: `rollout` or `in-place`, as its annotation says (`wave run`'s
    /// `--restart-strategy` is not known here).
    restart: &'static str,
    /// Its last in-place restart: `restarting`, `done`, or `failed: why`.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_place: Option<String>,
    /// Restarting in place: which config each pod runs, and why one would not be restarted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pods: Vec<PodLine>,
}

/// A [`PodLine`]'s config when the pod is asked to restart: this, then the hash it restarts to.
pub(crate) const RESTARTING_TO: &str = "restarting to ";
/// A [`PodLine`]'s config when the pod's own annotations do not say which it runs.
pub(crate) const UNKNOWN_CONFIG: &str = "unknown";

#[derive(serde::Serialize)]
pub(crate) struct PodLine {
    name: String,
    /// The config hash it runs, `restarting to HASH`, or `unknown`.
    pub config: String,
    ready: bool,
    /// Why wave would not restart it in place, if it would not.
    #[serde(skip_serializing_if = "Option::is_none")]
    not_restarted: Option<String>,
}

/// How a workload's pods get new config, as its annotations say, and, when it restarts in place (or
/// did), its last restart and its pods.
pub(crate) struct InPlace {
    pub restart: inplace::Strategy,
    pub record: Option<inplace::Record>,
    pub pods: Vec<PodLine>,
}

/// An in-place record's state as `explain` and `status` show it: `restarting`, `done` or `failed: why`.
pub(crate) fn restart_state(record: &inplace::Record) -> String {
    match (record.done, &record.failed) {
        (_, Some(why)) => format!("failed: {why}"),
        (true, None) => "done".to_string(),
        (false, None) => "restarting".to_string(),
    }
}

/// Reads [`InPlace`] for `workload`: its pods are listed only when it restarts in place or has a record.
pub(crate) async fn in_place_view(
    client: &kube::Client,
    workload: &Workload,
) -> Result<InPlace, CommandError> {
    let (restart, _) = inplace::Strategy::of(workload, inplace::Strategy::Rollout);
    let record = inplace::Record::read(workload);
    let pods = if restart == inplace::Strategy::InPlace || record.is_some() {
        pod_lines(client, workload, record.as_ref()).await?
    } else {
        Vec::new()
    };
    Ok(InPlace {
        restart,
        record,
        pods,
    })
}

/// The pods of a workload restarting in place (or with an in-place record), read as the controller
/// reads them (`in_place::read_pods`), each with the config it runs (`inplace::pod_config`).
async fn pod_lines(
    client: &kube::Client,
    workload: &Workload,
    record: Option<&inplace::Record>,
) -> Result<Vec<PodLine>, CommandError> {
    let Some((_, pods)) = in_place::read_pods(client, &workload.id)
        .await
        .map_err(cluster_error(format!("listing the pods of {}", workload.id)))?
    else {
        return Ok(Vec::new());
    };
    let mut lines: Vec<PodLine> = pods
        .iter()
        .map(inplace::PodView::of)
        .filter(|v| !v.deleting)
        .map(|v| {
            let config = match inplace::pod_config(&v, record) {
                inplace::PodConfig::Runs(hash) => hash,
                inplace::PodConfig::Restarting { to, .. } => format!("{RESTARTING_TO}{to}"),
                inplace::PodConfig::Unknown => UNKNOWN_CONFIG.to_string(),
            };
            let not_restarted = v.not_restartable().map(|cause| match cause {
                inplace::NotRestartable::AgentNotStarted => format!("it {}", cause.describe()),
                _ => format!("it {}: the next change rolls out", cause.describe()),
            });
            PodLine {
                name: v.name,
                config,
                ready: v.ready,
                not_restarted,
            }
        })
        .collect();
    lines.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(lines)
}

/// What wave sees for one workload and would do: its references, and the hashes and status.
pub(crate) struct Assessment {
    references: Vec<ReferenceView>,
    /// The hash on the template.
    pub current_hash: Option<String>,
    /// The hash wave would write.
    pub desired_hash: Option<String>,
    /// The decision's reason (`wave_core::decide::Decision::reason`: `up-to-date`, `blocked`,
    /// `rollout`, `write`, `halted`, `pinned`, ...), `restart-failed` after a halted in-place restart,
    /// `held` or `queued` from wave's Events, or, when wave
    /// decides nothing for it, `ignored`, `reloader` or `elsewhere`.
    pub status: &'static str,
    /// Why, in words.
    pub reason: String,
}

/// Runs `wave explain`.
pub async fn run(args: &ExplainArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let workload = super::read_workload(&client, &args.target, &ns).await?;
    let id = &workload.id;
    let hashing = hashing(&client, args.hash_key.hash_key_secret.as_ref()).await?;
    let a = assess(
        &client,
        &workload,
        &hashing,
        args.cross_namespace.cross_namespace_references,
        args.reloader.reloader_compat,
        &mut ClusterHalts::default(),
    )
    .await?;
    let InPlace {
        restart,
        record,
        pods,
    } = in_place_view(&client, &workload).await?;
    let e = Explanation {
        workload: id.to_string(),
        opted_in: workload.is_opted_in(),
        references: a.references,
        current_hash: a.current_hash,
        desired_hash: a.desired_hash,
        status: a.status,
        reason: a.reason,
        restart: restart.as_str(),
        in_place: record.as_ref().map(restart_state),
        pods,
    };
    if !super::print_structured(args.output.output, &e) {
        print_table(&e);
    }
    Ok(ExitCode::SUCCESS)
}

/// Assesses `workload` as `wave run` would (with its default `--max-gate-duration`), under `policy`
/// for references to other namespaces and with `--reloader-compat` as `reloader_compat` says, with the
/// halts on its config read through `halts` (see the module docs for what it cannot read).
pub(crate) async fn assess(
    client: &kube::Client,
    workload: &Workload,
    hashing: &Hashing,
    policy: CrossNamespace,
    reloader_compat: bool,
    halts: &mut ClusterHalts,
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
    // Whether it asks Reloader anything, its SecretProviderClass annotations included.
    let asks = wave_core::reloader::Options {
        csi: true,
        ..wave_core::reloader::Options::default()
    };
    let reloader = wave_core::reloader::selection(workload, &asks);
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
            // `wave run`'s --restart-strategy is not known here: the workload's annotation tells. A
            // command writes nothing, so the agent's image only has to be there for the decision.
            restart: wave_core::inplace::Strategy::Rollout,
            agent_image: Some(String::new()),
        };
        let namespaces = refs.keys().into_iter().map(|k| k.namespace);
        let halts = halts.of(client, namespaces).await?;
        let decision = with_command_memory(halts, |memory| {
            decide::decision(&Situation {
                workload,
                refs: &refs,
                fetched: &fetched,
                policy: &policy,
                memory: *memory,
            })
        });
        // What the decision cannot know here (wave's memory), wave's last Event on it tells.
        let told = match &decision {
            Decision::Write { rollout: true, .. } => last_hold_event(client, workload).await?,
            _ => None,
        };
        let (status, reason) = told.unwrap_or_else(|| explain(workload, &desired, &decision));
        let desired_hash = match &decision {
            Decision::Blocked { .. } => None,
            Decision::Write { write, .. } if write.mark_gated_at.is_some() => None,
            _ => Some(desired),
        };
        (status, reason, desired_hash)
    };
    Ok(Assessment {
        references,
        current_hash: workload.current_hash().map(str::to_string),
        desired_hash,
        status,
        reason,
    })
}

/// The decision's reason ([`Decision::reason`], or `pinned` for a pin that holds it where it is) and
/// what it means, in a sentence, with the command that changes it.
fn explain(workload: &Workload, desired: &str, decision: &Decision) -> (&'static str, String) {
    let id = &workload.id;
    let target = format!(
        "{}/{} -n {}",
        id.kind.as_str().to_lowercase(),
        id.name,
        id.namespace
    );
    let sentence = match decision {
        Decision::Nothing { .. } => match decide::pinned(workload) {
            Some(pin) => {
                return (
                    "pinned",
                    format!(
                        "the template went back to {} (an undo) and the config has not changed since; `wave unpin {target}` rolls it to {desired}",
                        pin.hash
                    ),
                );
            }
            // Restarting in place, the current hash is the in-place record's, not the template's.
            None => match inplace::Record::read(workload) {
                Some(inplace::Record {
                    failed: Some(why), ..
                }) => {
                    return (
                        "restart-failed",
                        format!(
                            "its in-place restart into {desired} halted ({why}); the pods not restarted keep their config until the next config change restarts them, or `{}: rollout` rolls it out",
                            names::RESTART
                        ),
                    );
                }
                Some(_) => "the hash its pods run or are restarting to matches the config".to_string(),
                None => "the hash on the template matches the config".to_string(),
            },
        },
        Decision::Blocked { missing, .. } => missing_message(missing),
        Decision::DeleteHeldPods => "pods held by the released scheduling gate are to be deleted".to_string(),
        Decision::Undo { pin, action } => {
            let what = match action {
                UndoAction::Restore => {
                    "wave restores the config it ran then (undo: restore-config)".to_string()
                }
                UndoAction::Pin { refused: None } => "wave pins it there".to_string(),
                UndoAction::Pin { refused: Some(why) } => {
                    format!("wave pins it there, without restoring: {why}")
                }
            };
            format!(
                "the template went back to {} (an undo): {what}; `wave unpin {target}` rolls it to {desired}",
                pin.hash
            )
        }
        Decision::Hold(Hold::Halted(halt)) => {
            let resume = halt.version.key().map_or_else(
                || "`wave resume`".to_string(),
                |k| format!("`wave resume {}/{} -n {}`", k.kind.as_str(), k.name, k.namespace),
            );
            format!(
                "{}: wave rolls that version into no further workload, until the object changes again or {resume} releases it",
                halt.describe()
            )
        }
        Decision::Hold(Hold::Flapping { object, .. }) => {
            format!("{object} is flapping: its final value rolls once it has been quiet long enough")
        }
        Decision::Hold(Hold::Coalesced(wait)) => {
            format!("it rolled less than its minimum interval ago: it rolls in {wait:?}")
        }
        Decision::Hold(Hold::Paused) => {
            "it is paused (`kubectl rollout pause`): it rolls when `kubectl rollout resume` resumes it"
                .to_string()
        }
        Decision::Write { write, .. } if write.in_place.is_some() => {
            "the config changed since its pods last restarted: wave restarts them in place (pending)"
                .to_string()
        }
        Decision::Write { write, rollout: true, .. } if write.add_agent.is_some() => {
            "the config changed since the hash was written: wave rolls it (pending), adding the agent that restarts its pods in place from then on".to_string()
        }
        Decision::Write { rollout: true, .. } => {
            "the config changed since the hash was written: wave rolls it (pending)".to_string()
        }
        Decision::Write { write, .. } => match write {
            w if w.mark_gated_at.is_some() => format!(
                "the scheduling gate {} has no start time; wave notes one, and releases the gate one --max-gate-duration later",
                names::SCHEDULING_GATE
            ),
            w if w.release_gate.is_some() => {
                format!("the scheduling gate {} is to be released", names::SCHEDULING_GATE)
            }
            w if w.restore_scheduler.is_some() => "scheduling gated by Wave is to be restored".to_string(),
            _ => "the template has no hash yet: wave writes the first one (not a rollout: nothing holds it)"
                .to_string(),
        },
    };
    (decision.reason(), sentence)
}

/// What wave's last Event on `workload` says holds its rollout, for what only the controller's memory
/// knows: `held` while a config object it uses flaps, `queued` while it waits for a slot under
/// `--max-concurrent-rollouts`. A later `ConfigChanged`, `ConfigSettled` or `RolloutHalted` ends what
/// an earlier one said (a halt is the census's to tell, not an Event's).
async fn last_hold_event(
    client: &kube::Client,
    workload: &Workload,
) -> Result<Option<(&'static str, String)>, CommandError> {
    let reasons = [
        reason::CONFIG_FLAPPING,
        reason::CONFIG_SETTLED,
        reason::ROLLOUT_QUEUED,
        reason::ROLLOUT_HALTED,
        reason::CONFIG_CHANGED,
    ];
    let last = api::wave_events(client, &workload.id, &reasons)
        .await
        .map_err(cluster_error(format!("reading the Events of {}", workload.id)))?
        .pop();
    Ok(last.and_then(|e| {
        let since = e.event_time.map(|t| t.0.to_string()).unwrap_or_default();
        let note = e.note.unwrap_or_default();
        match e.reason.as_deref() {
            Some(reason::CONFIG_FLAPPING) => Some((
                "held",
                format!("held: config flapping since {since} (wave's Event): {note}"),
            )),
            Some(reason::ROLLOUT_QUEUED) => {
                Some(("queued", format!("queued since {since} (wave's Event): {note}")))
            }
            _ => None,
        }
    }))
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
    // Restarting in place, the current hash is the in-place record's, not the template's.
    let current = if e.in_place.is_some() {
        "Hash its pods run:     "
    } else {
        "Hash on the template:  "
    };
    println!("{current}{}", e.current_hash.as_deref().unwrap_or("(none)"));
    println!(
        "Hash wave would write: {}",
        e.desired_hash.as_deref().unwrap_or("(none)")
    );
    println!("Status: {}: {}", e.status, e.reason);
    if e.restart != inplace::Strategy::Rollout.as_str() || e.in_place.is_some() {
        println!();
        let last = e.in_place.as_deref().map(|s| format!("; last restart {s}"));
        println!("Restart: {}{}", e.restart, last.unwrap_or_default());
        let rows: Vec<[String; 4]> = e
            .pods
            .iter()
            .map(|p| {
                let ready = if p.ready { "yes" } else { "no" };
                let note = p.not_restarted.clone().unwrap_or_default();
                [p.name.clone(), p.config.clone(), ready.into(), note]
            })
            .collect();
        if !rows.is_empty() {
            super::print_table(["POD", "CONFIG", "READY", "NOT RESTARTED BECAUSE"], &rows);
        }
    }
}
