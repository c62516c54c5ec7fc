//! Reloader's SHA-1 of an object, and the names Reloader writes it under (the `STAKATER_<NAME>_<KIND>`
//! env var, the `type` of `last-reloaded-from`).

use base64::Engine as _;
use sha1::{Digest as _, Sha1};

use crate::hash::Content;
use crate::names::reloader as names;
use crate::refs::ConfigKind;

/// The SHA-1 of an object with no data: what a deleted object counts as (Reloader's
/// `GetSHAfromEmptyData`).
pub const EMPTY_SHA: &str = "da39a3ee5e6b4b0d3255bfef95601890afd80709";

/// Reloader's name for a kind: the suffix of its env var and the `type` of `last-reloaded-from`.
pub fn type_name(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::ConfigMap => "CONFIGMAP",
        ConfigKind::Secret => "SECRET",
        ConfigKind::SecretProviderClass => "SECRETPROVIDERCLASS",
    }
}

/// Reloader's SHA-1 of an object: its entries as `key=value`, sorted as strings, joined with `;`. A
/// ConfigMap's `binaryData` values are written in standard base64; a Secret's values as raw bytes. A
/// SecretProviderClass's entries are its objects' ids and versions and its own name (`csi::content`).
pub fn sha(kind: ConfigKind, content: &Content) -> String {
    let mut entries: Vec<Vec<u8>> = content
        .values()
        .map(|(key, value)| {
            let mut entry = Vec::with_capacity(key.len() + 1 + value.len());
            entry.extend_from_slice(key.as_bytes());
            entry.push(b'=');
            if kind == ConfigKind::ConfigMap && content.binary_keys.contains(key) {
                entry.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(value).as_bytes());
            } else {
                entry.extend_from_slice(value);
            }
            entry
        })
        .collect();
    // Go sorts the strings bytewise, as `Vec<u8>` does.
    entries.sort();
    let mut hasher = Sha1::new();
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            hasher.update(b";");
        }
        hasher.update(entry);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The env var Reloader keeps an object's SHA-1 in: `STAKATER_` + the name upper-cased, each run of
/// characters other than `A-Z0-9` after a valid one becoming one `_`, + `_` and the [`type_name`].
pub fn env_var_name(kind: ConfigKind, name: &str) -> String {
    let mut out = String::from(names::ENV_PREFIX);
    let mut last_valid = false;
    for c in name.bytes().map(|b| b.to_ascii_uppercase()) {
        if c.is_ascii_uppercase() || c.is_ascii_digit() {
            out.push(char::from(c));
            last_valid = true;
        } else {
            if last_valid {
                out.push('_');
            }
            last_valid = false;
        }
    }
    out.push('_');
    out.push_str(type_name(kind));
    out
}

#[cfg(test)]
#[path = "sha_tests.rs"]
mod tests;
