//! Config history: a snapshot of exactly the data behind each config hash, kept as long as the revision
//! that runs it (`docs/history.md`).
//!
//! ```text
//! template on hash H, config hashes to H ─► Snapshot::of (the hash source's two sections)
//!   ─► ConfigMap wave-<kind>-<name>-<H[..12]>  data["configMaps.json"]  immutable, owned by the revision
//!      Secret    (same name)                   data["secrets.json"]     (only when Secrets are hashed)
//!   revision = the ReplicaSet (Deployment) or ControllerRevision (StatefulSet, DaemonSet) carrying H:
//!   the garbage collector deletes the snapshot when revisionHistoryLimit drops the last such revision
//! undo to H with `undo: restore-config` ─► restore_plan ─► one restore_patch per config object
//! `wave history` / `wave diff` ─► Snapshot::read ─► changes() / diff()
//! ```
//!
//! A snapshot stores the hash source's sections as they are (`{entry: {key: base64}}`), so its data
//! hashes back to the hash it is named after (`Snapshot::hash`), and nothing is lost or reinterpreted.
//!
//! History never crosses a namespace (`docs/security.md`): no snapshot is kept of a hash that reads
//! config from another namespace ([`foreign_config`]), a snapshot naming an entry of another namespace is
//! never read back ([`Snapshot::read`]), a restore writes only objects in the workload's own namespace
//! ([`restore_plan`]), and a stored object is trusted as a snapshot only if wave made it: wave's labels
//! and annotations, immutable, owned by one of the workload's revisions ([`untrusted`]), with data that
//! hashes to the hash it is named after ([`restorable`]). An object found under a snapshot's name that
//! is not exactly the snapshot wave would write is never adopted ([`same_snapshot`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value, json};

use crate::hash::{self, Fetched, Hashing, Section};
use crate::names;
use crate::refs::{ConfigKey, ConfigKind, Keys, References};
use crate::tracker::{ObjectVersion, Tracker};
use crate::workload::{Workload, WorkloadKind, WorkloadRef};

/// The ConfigMap snapshot's one key: the hash source's `configMaps` section as JSON.
pub const CONFIG_MAPS_KEY: &str = "configMaps.json";
/// The Secret snapshot's one key: the hash source's `secrets` section as JSON.
pub const SECRETS_KEY: &str = "secrets.json";

/// Why a stored snapshot cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The object lacks the key a snapshot has.
    #[error("{object} has no {key} key: not a wave config snapshot")]
    NoData {
        /// The snapshot object.
        object: String,
        /// The key expected.
        key: &'static str,
    },
    /// An entry names an object of another namespace: wave never writes such a snapshot.
    #[error("{object} holds {entry:?}, an entry of another namespace: not a snapshot wave wrote")]
    Foreign {
        /// The snapshot object.
        object: String,
        /// The entry.
        entry: String,
    },
    /// The key does not hold a section.
    #[error("{object} key {key} is not a config snapshot section")]
    Malformed {
        /// The snapshot object.
        object: String,
        /// The key read.
        key: &'static str,
        /// The cause (names positions, never values).
        #[source]
        source: serde_json::Error,
    },
}

impl SnapshotError {
    /// Stable label for metrics and Event reasons.
    pub fn kind(&self) -> &'static str {
        match self {
            SnapshotError::NoData { .. } => "snapshot_no_data",
            SnapshotError::Foreign { .. } => "snapshot_foreign",
            SnapshotError::Malformed { .. } => "snapshot_malformed",
        }
    }
}

/// Exactly the data behind one config hash: the hash source's two sections (values base64).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// ConfigMap entry → key → base64 value.
    pub config_maps: Section,
    /// Secret entry → key → base64 value.
    pub secrets: Section,
}

// Values may be Secret data: never print them.
impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = |s: &Section| -> Vec<String> {
            s.iter()
                .flat_map(|(e, keys)| keys.keys().map(move |k| format!("{e}:{k}")))
                .collect()
        };
        f.debug_struct("Snapshot")
            .field("config_maps", &keys(&self.config_maps))
            .field("secrets", &keys(&self.secrets))
            .finish()
    }
}

impl Snapshot {
    /// The data that goes into the hash of a workload in `namespace` with these references and content.
    pub fn of(namespace: &str, refs: &References, fetched: &Fetched) -> Self {
        let (config_maps, secrets) = hash::sections(namespace, refs, fetched);
        Self { config_maps, secrets }
    }

    /// The config hash this data makes under `hashing`.
    pub fn hash(&self, hashing: &Hashing) -> String {
        hash::source_of(&self.config_maps, &self.secrets).hash_with(hashing)
    }

    /// The snapshot objects' name for `workload` at `hash` (the ConfigMap and the Secret share it):
    /// `wave-<kind>-<workload name>-<first 12 hex of the hash>`, the name cut so that it fits 253.
    pub fn name(workload: &WorkloadRef, hash: &str) -> String {
        let short = &hash[..hash.len().min(12)];
        let kind = workload.kind.info().short();
        let room = 253 - "wave---".len() - kind.len() - short.len();
        let name = workload.name.get(..room).unwrap_or(&workload.name);
        format!("wave-{kind}-{}-{short}", name.trim_end_matches(['.', '-']))
    }

    /// The labels of `workload`'s snapshots (`wave history` selects on them).
    pub fn labels(workload: &WorkloadRef) -> BTreeMap<String, String> {
        BTreeMap::from([
            (names::MANAGED_BY_LABEL.into(), names::CONTROLLER_NAME.into()),
            (names::SNAPSHOT_KIND.into(), workload.kind.info().short().into()),
            (names::SNAPSHOT_OF.into(), label_value(&workload.name)),
        ])
    }

    fn metadata(workload: &WorkloadRef, hash: &str, owner: OwnerReference) -> ObjectMeta {
        let mut labels = Self::labels(workload);
        labels.insert(names::SNAPSHOT_HASH.into(), hash[..hash.len().min(63)].into());
        ObjectMeta {
            name: Some(Self::name(workload, hash)),
            namespace: Some(workload.namespace.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (
                    names::SNAPSHOT_OF.into(),
                    format!("{}/{}", workload.kind.info().short(), workload.name),
                ),
                (names::SNAPSHOT_HASH.into(), hash.into()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        }
    }

    /// The immutable ConfigMap holding the ConfigMap data (always made: it is the snapshot's index).
    pub fn config_map(&self, workload: &WorkloadRef, hash: &str, owner: OwnerReference) -> ConfigMap {
        let json = serde_json::to_string(&self.config_maps).expect("maps of strings always serialise");
        ConfigMap {
            metadata: Self::metadata(workload, hash, owner),
            data: Some(BTreeMap::from([(CONFIG_MAPS_KEY.into(), json)])),
            immutable: Some(true),
            ..ConfigMap::default()
        }
    }

    /// The immutable Secret holding the Secret data, when any Secret is hashed (Secrets stay Secrets).
    pub fn secret(&self, workload: &WorkloadRef, hash: &str, owner: OwnerReference) -> Option<Secret> {
        if self.secrets.is_empty() {
            return None;
        }
        let json = serde_json::to_vec(&self.secrets).expect("maps of strings always serialise");
        Some(Secret {
            metadata: Self::metadata(workload, hash, owner),
            data: Some(BTreeMap::from([(SECRETS_KEY.into(), ByteString(json))])),
            immutable: Some(true),
            type_: Some("Opaque".into()),
            ..Secret::default()
        })
    }

    /// A stored snapshot: its ConfigMap, and its Secret if there is one.
    pub fn read(config_map: &ConfigMap, secret: Option<&Secret>) -> Result<Self, SnapshotError> {
        let name = |m: &ObjectMeta| m.name.clone().unwrap_or_default();
        let object = format!("configmap {}", name(&config_map.metadata));
        let text = config_map
            .data
            .as_ref()
            .and_then(|d| d.get(CONFIG_MAPS_KEY))
            .ok_or_else(|| SnapshotError::NoData {
                object: object.clone(),
                key: CONFIG_MAPS_KEY,
            })?;
        let config_maps = serde_json::from_str(text).map_err(|source| SnapshotError::Malformed {
            object,
            key: CONFIG_MAPS_KEY,
            source,
        })?;
        let secrets = match secret {
            None => Section::new(),
            Some(secret) => {
                let object = format!("secret {}", name(&secret.metadata));
                let bytes = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(SECRETS_KEY))
                    .ok_or_else(|| SnapshotError::NoData {
                        object: object.clone(),
                        key: SECRETS_KEY,
                    })?;
                serde_json::from_slice(&bytes.0).map_err(|source| SnapshotError::Malformed {
                    object,
                    key: SECRETS_KEY,
                    source,
                })?
            }
        };
        let snapshot = Self { config_maps, secrets };
        // Entries are named as the hash source names them: bare for the workload's namespace, and
        // `namespace/name` only for another namespace, which wave never snapshots.
        for (kind, section) in [
            ("configmap", &snapshot.config_maps),
            ("secret", &snapshot.secrets),
        ] {
            if let Some(entry) = section.keys().find(|e| e.contains('/')) {
                let meta = match kind {
                    "configmap" => Some(&config_map.metadata),
                    _ => secret.map(|s| &s.metadata),
                };
                return Err(SnapshotError::Foreign {
                    object: format!("{kind} {}", meta.map(name).unwrap_or_default()),
                    entry: entry.clone(),
                });
            }
        }
        Ok(snapshot)
    }
}

/// `workload`'s snapshot of `hash` from its stored ConfigMap (and Secret), when both pass [`untrusted`]
/// against the workload's `revisions` and read as a snapshot; `Err` says why it is not used. The
/// controller restores only from such a snapshot, and `wave history` / `wave diff` show only such.
pub fn read_trusted(
    config_map: &ConfigMap,
    secret: Option<&Secret>,
    workload: &WorkloadRef,
    hash: &str,
    revisions: &[Revision],
) -> Result<Snapshot, String> {
    let untrusted = untrusted(
        &config_map.metadata,
        config_map.immutable,
        workload,
        hash,
        revisions,
    )
    .or_else(|| {
        let s = secret?;
        untrusted(&s.metadata, s.immutable, workload, hash, revisions)
    });
    if let Some(why) = untrusted {
        return Err(format!("the config snapshot is not one wave wrote: {why}"));
    }
    Snapshot::read(config_map, secret).map_err(|e| e.to_string())
}

/// The first config object outside `namespace` that a workload there references, if any. History keeps
/// no snapshot of such a hash (it would copy another namespace's data into this one) and restores
/// nothing for it (it would write into another namespace): `docs/security.md`.
pub fn foreign_config<'a>(namespace: &str, refs: &'a References) -> Option<&'a ConfigKey> {
    refs.iter().map(|r| &r.key).find(|k| k.namespace != namespace)
}

/// Whether `stored`, an object found under a snapshot's name, is exactly `expected`, the snapshot wave
/// would write there (both as JSON): the same data, immutable, and wave's labels. Anything else was made
/// by someone else (or is a name clash) and is never adopted as a snapshot.
pub fn same_snapshot(stored: &Value, expected: &Value) -> bool {
    let same = |field: &str| stored.get(field) == expected.get(field);
    let labels = |v: &Value| v.pointer("/metadata/labels").cloned().unwrap_or(Value::Null);
    let wave_labels = match (labels(stored), labels(expected)) {
        (Value::Object(have), Value::Object(want)) => want.iter().all(|(k, v)| have.get(k) == Some(v)),
        _ => false,
    };
    same("data") && same("binaryData") && same("immutable") && same("type") && wave_labels
}

/// Why the stored snapshot object `meta` (immutable or not) cannot be trusted as `workload`'s snapshot
/// of `hash`, or `None` when it can: wave's labels and annotations, immutable, and owned by one of the
/// workload's `revisions` (wave adds a revision as owner only to a snapshot it wrote or checked with
/// [`same_snapshot`]). Whether its data hashes to `hash` is [`restorable`]'s check.
pub fn untrusted(
    meta: &ObjectMeta,
    immutable: Option<bool>,
    workload: &WorkloadRef,
    hash: &str,
    revisions: &[Revision],
) -> Option<String> {
    let object = meta.name.clone().unwrap_or_default();
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let expected = Snapshot::labels(workload);
    if expected.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return Some(format!(
            "{object} does not carry the labels of a snapshot wave wrote"
        ));
    }
    if !is_snapshot_of(meta, workload)
        || annotations.get(names::SNAPSHOT_HASH).map(String::as_str) != Some(hash)
    {
        return Some(format!(
            "{object} is not annotated as {workload}'s snapshot of hash {hash}"
        ));
    }
    if immutable != Some(true) {
        return Some(format!(
            "{object} is not immutable, so its data may have been changed since wave wrote it"
        ));
    }
    let owned = meta.owner_references.iter().flatten().any(|o| {
        revisions
            .iter()
            .any(|r| r.owner.uid == o.uid && r.owner.kind == o.kind)
    });
    if !owned {
        return Some(format!("{object} is owned by none of {workload}'s revisions"));
    }
    None
}

/// A label value naming `name`: the name itself when it fits 63 characters, else its first 50 and 12 hex
/// of its SHA-256 (stable across versions; the full name is in the `wave.pusher.com/snapshot-of`
/// annotation). Selects a workload's snapshots, e.g. `kubectl get cm -l wave.pusher.com/snapshot-of=web`.
fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(name.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}-{digest}", name[..50].trim_end_matches(['.', '-']))
}

/// Whether `meta` belongs to `workload`'s history.
pub fn is_snapshot_of(meta: &ObjectMeta, workload: &WorkloadRef) -> bool {
    let want = format!("{}/{}", workload.kind.info().short(), workload.name);
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(names::SNAPSHOT_OF))
        .is_some_and(|v| *v == want)
}

/// Whether history is on for `workload`: `wave.pusher.com/config-history: "true"`, or `--config-history`
/// unless the workload says `"false"`. CronJobs have no revisions to own a snapshot, so never.
pub fn enabled(workload: &Workload, all: bool) -> bool {
    if !workload.id.kind.info().rolls_out {
        return false;
    }
    match workload
        .annotations
        .get(names::CONFIG_HISTORY)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        _ => all,
    }
}

/// Whether an undo of `workload` restores its config (`wave.pusher.com/undo: restore-config`).
pub fn restores_config(workload: &Workload) -> bool {
    workload.annotations.get(names::UNDO).map(String::as_str) == Some(names::UNDO_RESTORE_CONFIG)
}

/// One revision of a workload: a ReplicaSet or a ControllerRevision it controls.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    /// The revision number (`deployment.kubernetes.io/revision`, or `.revision`).
    pub number: i64,
    /// The config hash on its pod template, if any.
    pub hash: Option<String>,
    /// The revision object (an owner reference to it, for the snapshot).
    pub owner: OwnerReference,
    /// When it was created.
    pub created: Option<k8s_openapi::jiff::Timestamp>,
}

fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn owner_of(meta: &ObjectMeta, kind: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

impl Revision {
    /// The revision a ReplicaSet is, if the Deployment with `uid` controls it.
    pub fn of_replica_set(rs: &ReplicaSet, uid: &str) -> Option<Self> {
        let meta = &rs.metadata;
        if !controlled_by(meta, uid) {
            return None;
        }
        let number = meta
            .annotations
            .as_ref()?
            .get(names::DEPLOYMENT_REVISION)?
            .parse()
            .ok()?;
        let hash = rs
            .spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(names::CONFIG_HASH))
            .cloned();
        Some(Self {
            number,
            hash,
            owner: owner_of(meta, "ReplicaSet"),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
        })
    }

    /// The revision a ControllerRevision is, if the StatefulSet or DaemonSet with `uid` controls it.
    pub fn of_controller_revision(cr: &ControllerRevision, uid: &str) -> Option<Self> {
        let meta = &cr.metadata;
        if !controlled_by(meta, uid) {
            return None;
        }
        // NOTE: the data is the patch the controller applies to roll back (`{"spec":{"template":…}}`),
        // see https://github.com/kubernetes/kubernetes/blob/v1.32.0/pkg/controller/statefulset/stateful_set_utils.go
        let hash = cr
            .data
            .as_ref()
            .and_then(|d| d.0.pointer("/spec/template/metadata/annotations"))
            .and_then(|a| a.get(names::CONFIG_HASH))
            .and_then(Value::as_str)
            .map(str::to_string);
        Some(Self {
            number: cr.revision,
            hash,
            owner: owner_of(meta, "ControllerRevision"),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

/// The revision that carries `hash`: the newest with it on its template.
pub fn revision_with<'a>(revisions: &'a [Revision], hash: &str) -> Option<&'a Revision> {
    revisions
        .iter()
        .filter(|r| r.hash.as_deref() == Some(hash))
        .max_by_key(|r| r.number)
}

/// The kind whose objects are a workload's revisions.
pub fn revision_kind(kind: WorkloadKind) -> &'static str {
    if kind == WorkloadKind::DEPLOYMENT {
        "ReplicaSet"
    } else {
        "ControllerRevision"
    }
}

/// What happened to one key between two snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    /// The key is new.
    Added,
    /// The key is gone.
    Removed,
    /// The key's value changed.
    Changed,
}

/// One changed key between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// The entry (object name, or `namespace/name`).
    pub object: String,
    /// The key.
    pub key: String,
    /// Added, removed or changed.
    pub what: ChangeKind,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = match self.what {
            ChangeKind::Added => "+",
            ChangeKind::Removed => "-",
            ChangeKind::Changed => "~",
        };
        write!(f, "{sign}{}/{}:{}", self.kind, self.object, self.key)
    }
}

/// Every key that differs from `old` to `new`, ConfigMaps first, sorted. Names only, never values.
pub fn changes(old: &Snapshot, new: &Snapshot) -> Vec<Change> {
    let mut out = Vec::new();
    for (kind, a, b) in [
        (ConfigKind::ConfigMap, &old.config_maps, &new.config_maps),
        (ConfigKind::Secret, &old.secrets, &new.secrets),
    ] {
        let empty = BTreeMap::new();
        let objects: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for object in objects {
            let (a, b) = (a.get(object).unwrap_or(&empty), b.get(object).unwrap_or(&empty));
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let what = match (a.get(key), b.get(key)) {
                    (None, Some(_)) => ChangeKind::Added,
                    (Some(_), None) => ChangeKind::Removed,
                    (Some(x), Some(y)) if x != y => ChangeKind::Changed,
                    _ => continue,
                };
                out.push(Change {
                    kind,
                    object: object.clone(),
                    key: key.clone(),
                    what,
                });
            }
        }
    }
    out
}

/// Past this many line pairs a value's diff is summarised instead of computed.
const DIFF_CELLS: usize = 4_000_000;

/// A readable diff from `old` to `new`: ConfigMap values line by line (`-`/`+`), Secret keys by name only
/// ("value hidden"). Empty when nothing differs.
pub fn diff(old: &Snapshot, new: &Snapshot) -> String {
    let mut out = String::new();
    for change in changes(old, new) {
        let section = |s: &Snapshot| match change.kind {
            ConfigKind::ConfigMap => s.config_maps.clone(),
            ConfigKind::Secret => s.secrets.clone(),
        };
        let value = |s: &Section| {
            s.get(&change.object)
                .and_then(|keys| keys.get(&change.key))
                .and_then(|v| STANDARD.decode(v).ok())
        };
        let (before, after) = (value(&section(old)), value(&section(new)));
        let what = match change.what {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Changed => "changed",
        };
        out.push_str(&format!(
            "{} {} key {}: {what}",
            change.kind,
            printable(&change.object),
            printable(&change.key)
        ));
        if change.kind == ConfigKind::Secret {
            out.push_str(" (value hidden)\n");
            continue;
        }
        let text = |v: &Option<Vec<u8>>| match v {
            None => Some(String::new()),
            Some(bytes) => String::from_utf8(bytes.clone()).ok(),
        };
        match (text(&before), text(&after)) {
            (Some(a), Some(b)) => {
                out.push('\n');
                out.push_str(&line_diff(&a, &b));
            }
            _ => {
                let len = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len);
                out.push_str(&format!(
                    " (binary, {} bytes → {} bytes)\n",
                    len(&before),
                    len(&after)
                ));
            }
        }
    }
    out
}

/// `text` with every control character but the tab written as a `\u{..}` escape: config values reach a
/// terminal through `wave diff`, and whoever can write the config must not drive that terminal.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            '\t' => c.to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// `-`/`+`/` ` lines from `a` to `b` (a longest-common-subsequence diff), unchanged runs longer than six
/// lines shortened to their ends.
fn line_diff(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if a.len().saturating_mul(b.len()) > DIFF_CELLS {
        return format!("  ({} lines → {} lines; too large to diff)\n", a.len(), b.len());
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', a[i]));
            i += 1;
        } else {
            lines.push(('+', b[j]));
            j += 1;
        }
    }
    let mut out = String::new();
    let mut k = 0;
    while k < lines.len() {
        let run = lines[k..].iter().take_while(|(c, _)| *c == ' ').count();
        if run > 6 {
            let shown: Vec<usize> = (k..k + 2).chain(k + run - 2..k + run).collect();
            for (n, &at) in shown.iter().enumerate() {
                if n == 2 {
                    out.push_str(&format!("  … {} unchanged lines\n", run - 4));
                }
                out.push_str(&format!("  {}\n", printable(lines[at].1)));
            }
            k += run;
            continue;
        }
        let (c, line) = lines[k];
        out.push_str(&format!("{c} {}\n", printable(line)));
        k += 1;
    }
    out
}

/// Whether restoring `snapshot` gives the config hash `hash` back, for a workload whose config is `now`
/// (its snapshot taken of the config as it is): `Err` says why not, and nothing should be written.
pub fn restorable(snapshot: &Snapshot, now: &Snapshot, hashing: &Hashing, hash: &str) -> Result<(), String> {
    if snapshot.config_maps.is_empty() && snapshot.secrets.is_empty() {
        return Err("the snapshot holds no config".into());
    }
    if snapshot.hash(hashing) != hash {
        return Err(format!(
            "the snapshot's data does not hash to {hash} (was the hash key changed since?)"
        ));
    }
    for (kind, then, now) in [
        (ConfigKind::ConfigMap, &snapshot.config_maps, &now.config_maps),
        (ConfigKind::Secret, &snapshot.secrets, &now.secrets),
    ] {
        if let Some(entry) = now.keys().find(|e| !then.contains_key(*e)) {
            return Err(format!(
                "{kind} {entry} is used now but was absent then, so no restore can bring the hash back"
            ));
        }
    }
    Ok(())
}

/// One config object to restore from a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restore<'a> {
    /// The object.
    pub key: ConfigKey,
    /// The workload uses every key of it: keys not in the snapshot are removed.
    pub whole: bool,
    /// The snapshot's keys (base64 values).
    pub values: &'a BTreeMap<String, String>,
}

/// What restoring `snapshot` writes, for a workload in `namespace` with `refs` (its template now: the one
/// an undo went back to). Objects the snapshot does not hold (absent or ignored then) are left alone.
pub fn restore_plan<'a>(namespace: &str, refs: &References, snapshot: &'a Snapshot) -> Vec<Restore<'a>> {
    let mut out: Vec<Restore<'a>> = Vec::new();
    // Only the workload's own namespace is ever written (`docs/security.md`); the caller refuses a
    // restore whose references leave it ([`foreign_config`]), and this keeps that true regardless.
    for r in refs.iter().filter(|r| r.key.namespace == namespace) {
        let section = match r.key.kind {
            ConfigKind::ConfigMap => &snapshot.config_maps,
            ConfigKind::Secret => &snapshot.secrets,
        };
        // Objects of the workload's namespace are always named bare in the hash source.
        let Some(values) = section.get(&r.key.name) else {
            continue;
        };
        let whole = r.keys == Keys::All;
        match out.iter_mut().find(|x| x.key == r.key) {
            Some(existing) => existing.whole |= whole,
            None => out.push(Restore {
                key: r.key.clone(),
                whole,
                values,
            }),
        }
    }
    out
}

/// The merge patch that puts `restore`'s values back into the object as it is now (`current`: its
/// metadata and key placement), guarded by its resourceVersion. A ConfigMap value that is UTF-8 goes to
/// `data`, any other to `binaryData` (the hash reads both the same way).
pub fn restore_patch(restore: &Restore<'_>, current: &CurrentObject) -> Value {
    let mut data = Map::new();
    let mut binary = Map::new();
    for (key, b64) in restore.values {
        let bytes = STANDARD.decode(b64).unwrap_or_default();
        match (restore.key.kind, String::from_utf8(bytes)) {
            (ConfigKind::ConfigMap, Ok(text)) => {
                data.insert(key.clone(), Value::String(text));
                if current.binary_keys.contains(key) {
                    binary.insert(key.clone(), Value::Null);
                }
            }
            (ConfigKind::ConfigMap, Err(_)) => {
                binary.insert(key.clone(), Value::String(b64.clone()));
                if current.data_keys.contains(key) {
                    data.insert(key.clone(), Value::Null);
                }
            }
            (ConfigKind::Secret, _) => {
                data.insert(key.clone(), Value::String(b64.clone()));
            }
        }
    }
    if restore.whole {
        for key in current
            .data_keys
            .iter()
            .filter(|k| !restore.values.contains_key(*k))
        {
            data.insert(key.clone(), Value::Null);
        }
        for key in current
            .binary_keys
            .iter()
            .filter(|k| !restore.values.contains_key(*k))
        {
            binary.insert(key.clone(), Value::Null);
        }
    }
    let mut patch = json!({"metadata": {"resourceVersion": current.resource_version}, "data": data});
    if !binary.is_empty() {
        patch["binaryData"] = Value::Object(binary);
    }
    patch
}

/// The parts of a config object as it is now that a restore needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CurrentObject {
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// Keys in `data`.
    pub data_keys: BTreeSet<String>,
    /// Keys in `binaryData` (ConfigMaps).
    pub binary_keys: BTreeSet<String>,
    /// Who manages it, if a tool does (`managed_by`).
    pub managed_by: Option<String>,
    /// `immutable: true`: it cannot be restored.
    pub immutable: bool,
}

impl CurrentObject {
    /// A ConfigMap as it is now.
    pub fn of_config_map(cm: &ConfigMap) -> Self {
        Self {
            resource_version: cm.metadata.resource_version.clone().unwrap_or_default(),
            data_keys: cm.data.iter().flatten().map(|(k, _)| k.clone()).collect(),
            binary_keys: cm.binary_data.iter().flatten().map(|(k, _)| k.clone()).collect(),
            managed_by: managed_by(&cm.metadata),
            immutable: cm.immutable == Some(true),
        }
    }

    /// A Secret as it is now.
    pub fn of_secret(secret: &Secret) -> Self {
        Self {
            resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
            data_keys: secret.data.iter().flatten().map(|(k, _)| k.clone()).collect(),
            binary_keys: BTreeSet::new(),
            managed_by: managed_by(&secret.metadata),
            immutable: secret.immutable == Some(true),
        }
    }
}

/// The tool that manages a config object, by the labels and annotations the common ones set: a restore
/// would fight it, so wave refuses (`docs/history.md`, "Restoring config").
pub fn managed_by(meta: &ObjectMeta) -> Option<String> {
    let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k));
    let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k));
    if annotation("meta.helm.sh/release-name").is_some()
        || label(names::MANAGED_BY_LABEL).is_some_and(|v| v == "Helm")
    {
        return Some("Helm".into());
    }
    if annotation("argocd.argoproj.io/tracking-id").is_some()
        || label("argocd.argoproj.io/instance").is_some()
    {
        return Some("Argo CD".into());
    }
    if label("kustomize.toolkit.fluxcd.io/name").is_some() || label("helm.toolkit.fluxcd.io/name").is_some() {
        return Some("Flux".into());
    }
    if let Some(owner) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        return Some(format!("its controller {} {}", owner.kind, owner.name));
    }
    // `app.kubernetes.io/instance` is Argo CD's default tracking label (and Helm's convention).
    if let Some(instance) = label("app.kubernetes.io/instance") {
        return Some(format!("Argo CD or Helm (app.kubernetes.io/instance={instance})"));
    }
    label(names::MANAGED_BY_LABEL)
        .filter(|v| *v != names::CONTROLLER_NAME)
        .map(|v| format!("{v} (app.kubernetes.io/managed-by)"))
}

/// A restore as the watches must show it before a workload using its objects is planned again.
///
/// A restore writes one object at a time, and each write reaches the watch on its own. A workload that
/// uses two of them, planned between the two events, would hash half the restored config and half the
/// undone one, roll to that mix, and roll again a moment later. So every workload using an object of a
/// restore waits until the tracker shows each object at the version the restore wrote (`seen`), or the
/// restore failed. Versions are compared for equality only: a `resourceVersion` is opaque, so a later
/// write by someone else is not "newer", and the shell bounds the wait instead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreInFlight {
    /// Each object the restore writes, with the version its write produced once it has.
    writes: Vec<(ConfigKey, Option<ObjectVersion>)>,
}

impl RestoreInFlight {
    /// A restore about to write `keys`.
    pub fn new(keys: impl IntoIterator<Item = ConfigKey>) -> Self {
        Self {
            writes: keys.into_iter().map(|k| (k, None)).collect(),
        }
    }

    /// Notes that writing `key` produced `version`.
    pub fn written(&mut self, key: &ConfigKey, version: ObjectVersion) {
        if let Some((_, v)) = self.writes.iter_mut().find(|(k, _)| k == key) {
            *v = Some(version);
        }
    }

    /// Whether a workload with `refs` uses an object this restore writes.
    pub fn touches(&self, refs: &References) -> bool {
        refs.iter().any(|r| self.writes.iter().any(|(k, _)| *k == r.key))
    }

    /// Whether every write is done and `tracker` shows each object at the version it wrote.
    pub fn seen(&self, tracker: &Tracker) -> bool {
        self.writes
            .iter()
            .all(|(key, written)| written.is_some() && tracker.config(key) == written.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::hash::Content;
    use crate::refs;

    fn content(pairs: &[(&str, &[u8])]) -> Arc<Content> {
        Arc::new(Content::new(
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect(),
        ))
    }

    fn template(spec: Value) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        serde_json::from_value(json!({"spec": spec})).unwrap()
    }

    fn app_refs() -> References {
        let t = template(json!({"containers": [{"name": "c",
            "envFrom": [{"configMapRef": {"name": "app"}}],
            "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]}));
        refs::discover("ns", &BTreeMap::new(), &t)
    }

    fn fetched(app: &[(&str, &[u8])], db: &[(&str, &[u8])]) -> Fetched {
        Fetched::from([
            (ConfigKey::new(ConfigKind::ConfigMap, "ns", "app"), content(app)),
            (ConfigKey::new(ConfigKind::Secret, "ns", "db"), content(db)),
        ])
    }

    fn workload() -> WorkloadRef {
        WorkloadRef::new(WorkloadKind::DEPLOYMENT, "ns", "web")
    }

    #[test]
    fn a_snapshot_holds_exactly_the_hashed_data_and_hashes_back_to_the_config_hash() {
        let refs = app_refs();
        let f = fetched(
            &[("level", b"info")],
            &[("password", b"s3cret"), ("unused", b"x")],
        );
        let snap = Snapshot::of("ns", &refs, &f);
        assert_eq!(
            snap.hash(&Hashing::Plain),
            hash::config_hash("ns", &refs, &f, &Hashing::Plain)
        );
        assert_eq!(
            snap.secrets["db"].keys().collect::<Vec<_>>(),
            ["password"],
            "only the key the workload uses"
        );
        let owner = OwnerReference {
            name: "web-1".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let cm = snap.config_map(&workload(), "abc", owner.clone());
        let secret = snap
            .secret(&workload(), "abc", owner)
            .expect("a Secret is hashed");
        assert_eq!(cm.immutable, Some(true));
        assert_eq!(secret.immutable, Some(true));
        assert!(
            !serde_json::to_string(&cm)
                .unwrap()
                .contains(&STANDARD.encode("s3cret")),
            "Secret data never goes into the ConfigMap"
        );
        assert_eq!(Snapshot::read(&cm, Some(&secret)).unwrap(), snap);
        assert!(is_snapshot_of(&cm.metadata, &workload()));
        assert!(!format!("{snap:?}").contains("s3cret"));
    }

    #[test]
    fn a_snapshot_without_secrets_is_a_config_map_alone() {
        let t =
            template(json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "app"}}]}]}));
        let refs = refs::discover("ns", &BTreeMap::new(), &t);
        let f = fetched(&[("level", b"info")], &[]);
        let snap = Snapshot::of("ns", &refs, &f);
        assert!(
            snap.secret(&workload(), "abc", OwnerReference::default())
                .is_none()
        );
    }

    #[test]
    fn a_snapshot_name_fits_253_characters_and_names_kind_workload_and_hash() {
        let hash = "0123456789abcdef".repeat(4);
        assert_eq!(Snapshot::name(&workload(), &hash), "wave-deploy-web-0123456789ab");
        let long = WorkloadRef::new(WorkloadKind::STATEFUL_SET, "ns", "a".repeat(253));
        let name = Snapshot::name(&long, &hash);
        assert_eq!(name.len(), 253);
        assert!(name.starts_with("wave-sts-aaa") && name.ends_with("-0123456789ab"));
        let labels = Snapshot::labels(&long);
        assert!(labels.values().all(|v| v.len() <= 63), "{labels:?}");
    }

    #[test]
    fn a_malformed_snapshot_is_an_error_that_names_the_object() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("wave-deploy-web-1".into());
        let err = Snapshot::read(&cm, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmap wave-deploy-web-1 has no configMaps.json key: not a wave config snapshot"
        );
        cm.data = Some(BTreeMap::from([(CONFIG_MAPS_KEY.into(), "[1".into())]));
        assert_eq!(
            Snapshot::read(&cm, None).unwrap_err().kind(),
            "snapshot_malformed"
        );
    }

    #[test]
    fn changes_name_keys_added_removed_and_changed_and_a_diff_hides_secret_values() {
        let refs = app_refs();
        let old = Snapshot::of(
            "ns",
            &refs,
            &fetched(
                &[("level", b"a\nb\nc"), ("gone", b"1")],
                &[("password", b"canary-old")],
            ),
        );
        let new = Snapshot::of(
            "ns",
            &refs,
            &fetched(
                &[("level", b"a\nB\nc"), ("new", b"2")],
                &[("password", b"canary-new")],
            ),
        );
        let listed: Vec<String> = changes(&old, &new).iter().map(ToString::to_string).collect();
        assert_eq!(
            listed,
            [
                "-configmap/app:gone",
                "~configmap/app:level",
                "+configmap/app:new",
                "~secret/db:password"
            ]
        );
        let text = diff(&old, &new);
        assert_eq!(
            text,
            "configmap app key gone: removed\n- 1\n\
             configmap app key level: changed\n  a\n- b\n+ B\n  c\n\
             configmap app key new: added\n+ 2\n\
             secret db key password: changed (value hidden)\n"
        );
        assert!(!text.contains("canary"));
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn a_long_unchanged_run_is_shortened_and_binary_values_are_summarised() {
        let a: String = (0..20).map(|n| format!("line {n}\n")).collect();
        let b = a.replace("line 19", "line nineteen");
        let text = line_diff(&a, &b);
        assert!(text.contains("… 15 unchanged lines"), "{text}");
        assert!(text.ends_with("- line 19\n+ line nineteen\n"), "{text}");
        let refs = app_refs();
        let old = Snapshot::of("ns", &refs, &fetched(&[("bin", &[0xff, 0])], &[]));
        let new = Snapshot::of("ns", &refs, &fetched(&[("bin", &[0xfe])], &[]));
        assert_eq!(
            diff(&old, &new),
            "configmap app key bin: changed (binary, 2 bytes → 1 bytes)\n"
        );
    }

    #[test]
    fn a_restore_replaces_a_whole_object_and_sets_only_the_used_keys_of_a_partial_one() {
        let refs = app_refs();
        let snap = Snapshot::of(
            "ns",
            &refs,
            &fetched(&[("level", b"info"), ("bin", &[0xff])], &[("password", b"old")]),
        );
        let plan = restore_plan("ns", &refs, &snap);
        assert_eq!(plan.len(), 2);
        let cm = &plan[0];
        assert!(cm.whole && cm.key.name == "app");
        let current = CurrentObject {
            resource_version: "7".into(),
            data_keys: BTreeSet::from(["level".into(), "added-later".into(), "bin".into()]),
            ..CurrentObject::default()
        };
        assert_eq!(
            restore_patch(cm, &current),
            json!({"metadata": {"resourceVersion": "7"},
                   "data": {"level": "info", "added-later": null, "bin": null},
                   "binaryData": {"bin": STANDARD.encode([0xff])}})
        );
        let secret = &plan[1];
        assert!(!secret.whole, "only `password` is used");
        let current = CurrentObject {
            resource_version: "8".into(),
            data_keys: BTreeSet::from(["password".into(), "other".into()]),
            ..CurrentObject::default()
        };
        assert_eq!(
            restore_patch(secret, &current),
            json!({"metadata": {"resourceVersion": "8"}, "data": {"password": STANDARD.encode("old")}}),
            "a key the workload does not use is left alone"
        );
    }

    #[test]
    fn a_restore_is_refused_when_it_could_not_bring_the_hash_back() {
        let refs = app_refs();
        let then = Snapshot::of(
            "ns",
            &refs,
            &fetched(&[("level", b"info")], &[("password", b"old")]),
        );
        let hash = then.hash(&Hashing::Plain);
        let now = Snapshot::of(
            "ns",
            &refs,
            &fetched(&[("level", b"debug")], &[("password", b"new")]),
        );
        assert_eq!(restorable(&then, &now, &Hashing::Plain, &hash), Ok(()));
        assert!(
            restorable(&then, &now, &Hashing::Plain, "other")
                .unwrap_err()
                .contains("does not hash")
        );
        let keyed = Hashing::Keyed(crate::hash::HashKey::new(b"k").unwrap());
        assert!(
            restorable(&then, &now, &keyed, &hash).is_err(),
            "a changed hash key"
        );
        let only_cm = Snapshot::of("ns", &refs, &fetched(&[("level", b"info")], &[]));
        let mut absent_secret = Fetched::new();
        absent_secret.insert(
            ConfigKey::new(ConfigKind::ConfigMap, "ns", "app"),
            content(&[("level", b"info")]),
        );
        let then = Snapshot::of("ns", &refs, &absent_secret);
        let hash = then.hash(&Hashing::Plain);
        assert_eq!(
            restorable(&then, &now, &Hashing::Plain, &hash).unwrap_err(),
            "secret db is used now but was absent then, so no restore can bring the hash back"
        );
        assert!(
            only_cm.secrets.contains_key("db"),
            "an empty Secret is still an entry"
        );
        assert!(restorable(&Snapshot::default(), &now, &Hashing::Plain, &hash).is_err());
    }

    #[test]
    fn objects_managed_by_helm_argo_cd_flux_or_a_controller_are_recognised() {
        let meta = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        };
        assert_eq!(
            managed_by(&meta(&[("app.kubernetes.io/managed-by", "Helm")], &[])).as_deref(),
            Some("Helm")
        );
        assert_eq!(
            managed_by(&meta(&[], &[("meta.helm.sh/release-name", "r")])).as_deref(),
            Some("Helm")
        );
        assert_eq!(
            managed_by(&meta(
                &[],
                &[("argocd.argoproj.io/tracking-id", "a:/ConfigMap:ns/x")]
            ))
            .as_deref(),
            Some("Argo CD")
        );
        assert_eq!(
            managed_by(&meta(&[("kustomize.toolkit.fluxcd.io/name", "apps")], &[])).as_deref(),
            Some("Flux")
        );
        assert!(managed_by(&meta(&[("app.kubernetes.io/instance", "x")], &[])).is_some());
        assert_eq!(managed_by(&meta(&[("app", "web")], &[])), None);
        assert_eq!(
            managed_by(&meta(&[("app.kubernetes.io/managed-by", "wave")], &[])),
            None
        );
    }

    #[test]
    fn the_revision_carrying_a_hash_is_the_newest_one_the_workload_controls() {
        let rs = |name: &str, revision: &str, hash: &str, owner: &str| -> ReplicaSet {
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": format!("{name}-uid"),
                    "annotations": {"deployment.kubernetes.io/revision": revision},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": owner, "controller": true}]},
                "spec": {"selector": {}, "template": {"metadata": {"annotations": {"wave.pusher.com/config-hash": hash}}}}
            }))
            .unwrap()
        };
        let revisions: Vec<Revision> = [
            rs("a", "1", "h1", "d"),
            rs("b", "3", "h1", "d"),
            rs("c", "2", "h2", "d"),
            rs("x", "9", "h1", "other"),
        ]
        .iter()
        .filter_map(|r| Revision::of_replica_set(r, "d"))
        .collect();
        assert_eq!(revisions.len(), 3, "another Deployment's ReplicaSet is not ours");
        let found = revision_with(&revisions, "h1").unwrap();
        assert_eq!(
            (found.number, found.owner.name.as_str(), found.owner.kind.as_str()),
            (3, "b", "ReplicaSet")
        );
        assert!(revision_with(&revisions, "h3").is_none());
        let cr: ControllerRevision = serde_json::from_value(json!({
            "metadata": {"name": "db-5d", "uid": "cr", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s", "controller": true}]},
            "revision": 4,
            "data": {"spec": {"template": {"metadata": {"annotations": {"wave.pusher.com/config-hash": "h9"}}, "$patch": "replace"}}}
        }))
        .unwrap();
        let r = Revision::of_controller_revision(&cr, "s").unwrap();
        assert_eq!(
            (r.number, r.hash.as_deref(), r.owner.kind.as_str()),
            (4, Some("h9"), "ControllerRevision")
        );
    }

    #[test]
    fn workloads_using_a_restored_object_wait_until_the_watch_shows_every_write_of_the_restore() {
        use crate::tracker::{ConfigMeta, Event, Resource, Scope};
        let app = ConfigKey::new(ConfigKind::ConfigMap, "ns", "app");
        let db = ConfigKey::new(ConfigKind::Secret, "ns", "db");
        let version = |rv: &str| ObjectVersion {
            uid: "u".into(),
            resource_version: rv.into(),
        };
        let watch = |tracker: &mut Tracker, key: &ConfigKey, rv: &str| {
            let scope = Scope {
                resource: Resource::Config(key.kind),
                namespace: None,
            };
            let meta = ConfigMeta {
                key: key.clone(),
                version: version(rv),
                owners: Vec::new(),
                ignored: false,
                reloader_match: false,
                labels: BTreeMap::new(),
            };
            tracker.apply(crate::tracker::Change::Config(scope, Event::Apply(meta)));
        };
        let mut tracker = Tracker::new(&[WorkloadKind::DEPLOYMENT], None);
        let mut restore = RestoreInFlight::new([app.clone(), db.clone()]);
        assert!(restore.touches(&app_refs()));
        let other = refs::discover(
            "ns",
            &BTreeMap::new(),
            &template(
                json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "other"}}]}]}),
            ),
        );
        assert!(
            !restore.touches(&other),
            "a workload using neither object does not wait"
        );

        watch(&mut tracker, &app, "10");
        watch(&mut tracker, &db, "11");
        restore.written(&app, version("20"));
        assert!(!restore.seen(&tracker), "the Secret is not written yet");
        watch(&mut tracker, &app, "20");
        assert!(
            !restore.seen(&tracker),
            "written, but the watch shows only the ConfigMap's write"
        );
        restore.written(&db, version("21"));
        assert!(!restore.seen(&tracker));
        watch(&mut tracker, &db, "21");
        assert!(restore.seen(&tracker));
        watch(&mut tracker, &db, "22");
        assert!(
            !restore.seen(&tracker),
            "a later write is not taken for the restore's: versions are only compared for equality"
        );
    }

    fn revision(uid: &str, kind: &str) -> Revision {
        Revision {
            number: 1,
            hash: Some("h".into()),
            owner: OwnerReference {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: "web-1".into(),
                uid: uid.into(),
                ..OwnerReference::default()
            },
            created: None,
        }
    }

    #[test]
    fn a_hash_that_reads_another_namespace_is_named_so_history_copies_nothing_across() {
        assert_eq!(foreign_config("ns", &app_refs()), None);
        let t = template(json!({"containers": [{"name": "c"}]}));
        let extra = BTreeMap::from([(names::EXTRA_SECRETS.to_string(), "own,victim/db".to_string())]);
        let refs = refs::discover("ns", &extra, &t);
        assert_eq!(
            foreign_config("ns", &refs),
            Some(&ConfigKey::new(ConfigKind::Secret, "victim", "db"))
        );
    }

    #[test]
    fn a_restore_never_writes_outside_the_workloads_namespace_even_for_a_matching_entry() {
        // The reproduction: a snapshot taken when `db` was the workload's own, and a template that now
        // names `victim/db` (no clash, so its entry would be bare `db` too).
        let t = template(json!({"containers": [{"name": "c"}]}));
        let extra = BTreeMap::from([(names::EXTRA_SECRETS.to_string(), "victim/db".to_string())]);
        let refs = refs::discover("ns", &extra, &t);
        let mut snap = Snapshot::default();
        snap.secrets.insert(
            "db".into(),
            BTreeMap::from([("password".into(), "cHduZWQ=".into())]),
        );
        assert_eq!(restore_plan("ns", &refs, &snap), []);
    }

    #[test]
    fn a_stored_snapshot_with_an_entry_of_another_namespace_is_not_read() {
        let id = workload();
        let mut forged = Snapshot::default();
        forged
            .config_maps
            .insert("victim/cfg".into(), BTreeMap::from([("k".into(), "eA==".into())]));
        let cm = forged.config_map(&id, "abc", revision("u", "ReplicaSet").owner);
        let err = Snapshot::read(&cm, None).unwrap_err();
        assert_eq!(err.kind(), "snapshot_foreign");
        assert!(err.to_string().contains("victim/cfg"), "{err}");
    }

    #[test]
    fn only_an_object_exactly_like_the_snapshot_wave_would_write_is_adopted() {
        let id = workload();
        let snap = Snapshot::of("ns", &app_refs(), &fetched(&[("a", b"1")], &[("password", b"p")]));
        let owner = revision("u", "ReplicaSet").owner;
        let want = serde_json::to_value(snap.config_map(&id, "abc", owner.clone())).unwrap();
        let mut same = want.clone();
        same["metadata"]["ownerReferences"] = json!([]);
        same["metadata"]["labels"]["extra"] = json!("kept");
        assert!(
            same_snapshot(&same, &want),
            "owners and extra labels do not matter"
        );
        for (field, value) in [
            ("/data", json!({"configMaps.json": "{}"})),
            ("/immutable", Value::Null),
            ("/metadata/labels", json!({})),
        ] {
            let mut other = want.clone();
            *other.pointer_mut(field).unwrap() = value;
            assert!(!same_snapshot(&other, &want), "{field} differs: not adopted");
        }
        let secret = serde_json::to_value(snap.secret(&id, "abc", owner).unwrap()).unwrap();
        assert!(same_snapshot(&secret, &secret));
        assert!(!same_snapshot(&want, &secret), "a ConfigMap is not the Secret");
    }

    #[test]
    fn a_snapshot_is_trusted_only_with_waves_marks_immutable_and_owned_by_a_revision_of_the_workload() {
        let id = workload();
        let revisions = [revision("rs-1", "ReplicaSet")];
        let snap = Snapshot::of("ns", &app_refs(), &fetched(&[("a", b"1")], &[]));
        let cm = snap.config_map(&id, "abc", revisions[0].owner.clone());
        assert_eq!(
            untrusted(&cm.metadata, cm.immutable, &id, "abc", &revisions),
            None
        );
        let why = |meta: &ObjectMeta, immutable: Option<bool>| {
            untrusted(meta, immutable, &id, "abc", &revisions).expect("untrusted")
        };
        assert!(why(&cm.metadata, None).contains("not immutable"));
        let mut unowned = cm.metadata.clone();
        unowned.owner_references = Some(vec![revision("rs-of-another", "ReplicaSet").owner]);
        assert!(why(&unowned, Some(true)).contains("owned by none"));
        let mut relabelled = cm.metadata.clone();
        relabelled.labels = None;
        assert!(why(&relabelled, Some(true)).contains("labels"));
        assert!(
            untrusted(&cm.metadata, Some(true), &id, "other-hash", &revisions)
                .unwrap()
                .contains("not annotated")
        );
    }

    #[test]
    fn a_diff_writes_control_characters_as_escapes_so_config_cannot_drive_a_terminal() {
        let b64 = |s: &str| STANDARD.encode(s);
        let mut old = Snapshot::default();
        old.config_maps
            .insert("app".into(), BTreeMap::from([("k".into(), b64("plain"))]));
        let mut new = Snapshot::default();
        new.config_maps.insert(
            "app".into(),
            BTreeMap::from([("k".into(), b64("\u{1b}]0;owned\u{7}\u{1b}[2Kx\tok"))]),
        );
        let text = diff(&old, &new);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "{text:?}");
        assert!(text.contains("\\u{1b}]0;owned\\u{7}"), "{text}");
        assert!(text.contains("x\tok"), "tabs stay: {text:?}");
    }
}
