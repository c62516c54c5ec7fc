//! `wave history KIND/NAME` and `wave diff KIND/NAME --revision N`: a workload's revisions with the
//! config snapshot wave kept for each (`docs/history.md`).
//!
//! ```text
//! workload ─► its revisions (ReplicaSets / ControllerRevisions it controls), oldest first
//!          ─► each revision's snapshot (by its hash) ─► changes() from the previous one that has one
//! ```
//! Secret values are never printed: a changed Secret key is named, its value is "hidden". A snapshot is
//! shown only if the controller would restore from it (`wave_core::history::untrusted`: wave's marks,
//! immutable, owned by one of the workload's revisions): an object anyone else put under that name is
//! named as not used, with why, and its contents are never shown.

use std::process::ExitCode;

use wave_core::history::{self, Change, Revision, Snapshot};
use wave_core::workload::Workload;
use wave_runtime::api;

use super::{CommandError, cluster_error, read_workload};
use crate::cli::{ClusterArgs, OutputArg};

/// Flags of `wave history`.
#[derive(Clone, Debug, clap::Args)]
pub struct HistoryArgs {
    /// `deployment/NAME`, `statefulset/NAME` or `daemonset/NAME`.
    pub target: String,
    /// Namespace of the workload; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// `-o/--output`.
    #[command(flatten)]
    pub output: OutputArg,
}

/// Flags of `wave diff`.
#[derive(Clone, Debug, clap::Args)]
pub struct DiffArgs {
    /// `deployment/NAME`, `statefulset/NAME` or `daemonset/NAME`.
    pub target: String,
    /// Namespace of the workload; defaults to the kubeconfig's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How to reach the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The revision whose change to show, from the revision before it (`wave history` lists them).
    #[arg(long)]
    pub revision: i64,
}

/// One revision with its snapshot, if wave kept one.
struct Entry {
    revision: Revision,
    snapshot: Option<(String, Snapshot)>,
    /// An object found under the snapshot's name that is not used, and why.
    not_used: Option<String>,
}

/// The workload's revisions, oldest first, each with its snapshot.
async fn entries(client: &kube::Client, workload: &Workload) -> Result<Vec<Entry>, CommandError> {
    let id = &workload.id;
    if !id.kind.info().rolls_out {
        return Err(CommandError::Input(format!(
            "{id} has no revisions to keep config history for"
        )));
    }
    let mut revisions = api::list_revisions(client, id, &workload.uid, "")
        .await
        .map_err(cluster_error(format!("listing the revisions of {id}")))?;
    revisions.sort_by_key(|r| r.number);
    let mut out = Vec::new();
    for revision in revisions.clone() {
        let (mut snapshot, mut not_used) = (None, None);
        if let Some(hash) = &revision.hash {
            let found = api::get_snapshot(client, id, hash)
                .await
                .map_err(cluster_error(format!(
                    "reading the config snapshot of {id} at {hash}"
                )))?;
            if let Some((cm, secret)) = found {
                match history::read_trusted(&cm, secret.as_ref(), id, hash, &revisions) {
                    Ok(read) => snapshot = Some((Snapshot::name(id, hash), read)),
                    Err(why) => not_used = Some(why),
                }
            }
        }
        out.push(Entry {
            revision,
            snapshot,
            not_used,
        });
    }
    Ok(out)
}

/// The changes of entry `at` from the closest earlier entry with a snapshot (from nothing, if none);
/// `None` when `at` has no snapshot.
fn changes_at(entries: &[Entry], at: usize) -> Option<Vec<Change>> {
    let (_, new) = entries[at].snapshot.as_ref()?;
    let empty = Snapshot::default();
    let old = entries[..at]
        .iter()
        .rev()
        .find_map(|e| e.snapshot.as_ref().map(|(_, s)| s))
        .unwrap_or(&empty);
    Some(history::changes(old, new))
}

#[derive(serde::Serialize)]
struct RevisionView {
    revision: i64,
    hash: Option<String>,
    created: Option<String>,
    snapshot: Option<String>,
    current: bool,
    /// `None` without a snapshot.
    changes: Option<Vec<String>>,
    /// An object under the snapshot's name that is not used, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_not_used: Option<String>,
}

/// Runs `wave history`.
pub async fn run_history(args: &HistoryArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let workload = read_workload(&client, &args.target, &ns).await?;
    let entries = entries(&client, &workload).await?;
    let current = workload.current_hash();
    let views: Vec<RevisionView> = (0..entries.len())
        .rev()
        .map(|at| {
            let e = &entries[at];
            RevisionView {
                revision: e.revision.number,
                hash: e.revision.hash.clone(),
                created: e.revision.created.map(|t| t.to_string()),
                snapshot: e.snapshot.as_ref().map(|(name, _)| name.clone()),
                current: e.revision.hash.is_some() && e.revision.hash.as_deref() == current,
                changes: changes_at(&entries, at).map(|c| c.iter().map(ToString::to_string).collect()),
                snapshot_not_used: e.not_used.clone(),
            }
        })
        .collect();
    if super::print_structured(args.output.output, &views) {
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} (newest first)", workload.id);
    println!();
    let rows: Vec<[String; 5]> = views
        .iter()
        .map(|v| {
            let changed = match &v.changes {
                None if v.hash.is_none() => "(no config hash)".to_string(),
                None if v.snapshot_not_used.is_some() => format!(
                    "(snapshot not used: {})",
                    v.snapshot_not_used.as_deref().unwrap_or_default()
                ),
                None => "(no snapshot: config history was off)".to_string(),
                Some(c) if c.is_empty() => "(config unchanged)".to_string(),
                Some(c) => c.join(" "),
            };
            [
                format!("{}{}", v.revision, if v.current { "*" } else { "" }),
                v.hash
                    .as_deref()
                    .map_or("(none)", wave_core::hash::short)
                    .to_string(),
                v.created.clone().unwrap_or_default(),
                v.snapshot.clone().unwrap_or_else(|| "-".into()),
                changed,
            ]
        })
        .collect();
    super::print_table(["REVISION", "HASH", "CREATED", "SNAPSHOT", "CHANGED"], &rows);
    println!();
    println!("* the revision whose config hash the template carries now. +added -removed ~changed key.");
    Ok(ExitCode::SUCCESS)
}

/// Runs `wave diff`.
pub async fn run_diff(args: &DiffArgs) -> Result<ExitCode, CommandError> {
    let (client, ns) = super::client_in(&args.cluster, args.namespace.as_deref()).await?;
    let workload = read_workload(&client, &args.target, &ns).await?;
    let entries = entries(&client, &workload).await?;
    let Some(at) = entries.iter().position(|e| e.revision.number == args.revision) else {
        let known: Vec<String> = entries.iter().map(|e| e.revision.number.to_string()).collect();
        return Err(CommandError::Input(format!(
            "{} has no revision {} (it has {})",
            workload.id,
            args.revision,
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        )));
    };
    if let Some(why) = &entries[at].not_used {
        return Err(CommandError::Input(format!(
            "revision {} of {}: the object under its snapshot's name is not used: {why}",
            args.revision, workload.id
        )));
    }
    let Some((name, new)) = &entries[at].snapshot else {
        return Err(CommandError::Input(format!(
            "revision {} of {} has no config snapshot (config history was off when it was written, docs/history.md)",
            args.revision, workload.id
        )));
    };
    let previous = entries[..at].iter().rev().find_map(|e| {
        e.snapshot
            .as_ref()
            .map(|(n, s)| (e.revision.number, n.as_str(), s))
    });
    let empty = Snapshot::default();
    let (from, old) = match previous {
        Some((number, snapshot, s)) => (format!("revision {number} ({snapshot})"), s),
        None => ("nothing (the oldest snapshot)".to_string(), &empty),
    };
    println!("{}: revision {} ({name}) from {from}", workload.id, args.revision);
    println!();
    let text = history::diff(old, new);
    if text.is_empty() {
        println!("No config change.");
    } else {
        print!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}
