//! What changed between two snapshots, for `wave history` and `wave diff`: the keys ([`changes`], names
//! only) and a readable diff ([`diff`]) that shows ConfigMap values line by line, hides Secret values,
//! and escapes control characters.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::Snapshot;
use crate::hash::Section;
use crate::refs::ConfigKind;

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
            // A snapshot holds what wave hashes: never one of these.
            ConfigKind::SecretProviderClass => Default::default(),
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

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
