//! The config hash and the required-config check, byte-compatible with Wave v0.11.
//!
//! ```text
//! References ─┐
//!             ├─► missing()    ─► [Missing]   (empty ⇒ the hash may be written)
//! Fetched ────┤
//!             └─► config_hash() ─► HashSource (compact JSON) ─► SHA-256 lowercase hex
//!                                                                (HMAC-SHA256 with `--hash-key-secret`)
//! ```
//!
//! `Fetched` holds the content of the referenced objects that exist; an absent key means the object does
//! not exist. The hash source is `{"configMaps":{name:{key:base64}},"secrets":{…}}` with every map sorted
//! (`docs/behaviour.md`, "The hash"). Difference `namespace-clash`: when existing referenced objects of one
//! kind share a name across namespaces, the ones outside the workload's namespace are keyed `namespace/name`, so they no longer mask
//! each other; every workload without such a clash keeps Wave's exact hash.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use sha2::{Digest, Sha256};

use super::refs::{ConfigKey, ConfigKind, Keys, Reference, References};
use crate::names;

/// The values of one config object, as the hash and the required-key check see them: a ConfigMap's
/// `data` (UTF-8 bytes) overlaid with its `binaryData`, or a Secret's `data`. Nothing else is kept.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Content {
    /// Sorted by key. A sorted boxed slice, not a `BTreeMap`: a map allocates a node of eleven slots
    /// (about 540 bytes) even for the one key most objects have, and the content cache keeps one per
    /// referenced object (`docs/benchmarks.md`, "Where wave's memory goes").
    values: Box<[Value]>,
    /// The object says `wave.pusher.com/ignore: "true"`: it leaves every hash (as if absent) but still
    /// satisfies a required reference (`docs/behaviour.md`, "Scoping").
    pub ignored: bool,
    /// The keys of a ConfigMap that came from `binaryData`: Reloader's SHA-1 writes those in base64
    /// (`reloader::sha`). Usually empty.
    pub binary_keys: BTreeSet<String>,
    /// The object says `reloader.stakater.com/ignore: "true"`: it reloads no workload opted in through
    /// Reloader's annotations.
    pub reloader_ignored: bool,
}

/// One key of a [`Content`] and its value.
type Value = (Box<str>, Box<[u8]>);

// Values may be Secret data: never print them.
impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Content")
            .field("keys", &self.keys().collect::<Vec<_>>())
            .field("ignored", &self.ignored)
            .field("binary_keys", &self.binary_keys)
            .field("reloader_ignored", &self.reloader_ignored)
            .finish()
    }
}

impl Content {
    /// Content from explicit values.
    pub fn new(values: BTreeMap<String, Vec<u8>>) -> Self {
        Self {
            values: sorted(values),
            ..Self::default()
        }
    }

    /// A short digest (12 hex characters) of the values under `hashing`: names one version of the object
    /// in a rollout marker (`pace`). Keyed like the config hash, so it reveals no more than that does.
    pub fn digest(&self, hashing: &Hashing) -> String {
        let mut bytes = Vec::new();
        for (key, value) in self.values() {
            for part in [key.as_bytes(), value] {
                bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
                bytes.extend_from_slice(part);
            }
        }
        let mut digest = HashSource(bytes).hash_with(hashing);
        digest.truncate(12);
        digest
    }

    /// A ConfigMap's `data` then `binaryData` (the apiserver forbids a key in both).
    pub fn from_config_map(cm: &ConfigMap) -> Self {
        let mut values: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (k, v) in cm.data.iter().flatten() {
            values.insert(k.clone(), v.as_bytes().to_vec());
        }
        let mut binary_keys = BTreeSet::new();
        for (k, v) in cm.binary_data.iter().flatten() {
            values.insert(k.clone(), v.0.clone());
            binary_keys.insert(k.clone());
        }
        Self {
            values: sorted(values),
            ignored: is_ignored(&cm.metadata),
            binary_keys,
            reloader_ignored: is_reloader_ignored(&cm.metadata),
        }
    }

    /// A Secret's `data`, plus `stringData` as the apiserver would merge it (for offline manifests).
    pub fn from_secret(secret: &Secret) -> Self {
        let mut values: BTreeMap<String, Vec<u8>> = secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        for (k, v) in secret.string_data.iter().flatten() {
            values.insert(k.clone(), v.as_bytes().to_vec());
        }
        Self {
            values: sorted(values),
            ignored: is_ignored(&secret.metadata),
            binary_keys: BTreeSet::new(),
            reloader_ignored: is_reloader_ignored(&secret.metadata),
        }
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.value(key).is_some()
    }

    /// The value of `key`. It may be Secret data: never print it.
    pub fn value(&self, key: &str) -> Option<&[u8]> {
        self.values
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.values[i].1)
    }

    /// Every key and its value, sorted by key. Values may be Secret data: never print them.
    pub fn values(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.values.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The key names, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(|(k, _)| &**k)
    }
}

/// A map's entries as [`Content`] keeps them (the map's order is the key order).
fn sorted(values: BTreeMap<String, Vec<u8>>) -> Box<[Value]> {
    values
        .into_iter()
        .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_slice()))
        .collect()
}

/// Whether a ConfigMap's or Secret's metadata says `wave.pusher.com/ignore: "true"`.
pub fn is_ignored(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    annotation_is_true(meta, names::IGNORE)
}

/// Whether a ConfigMap's or Secret's metadata says `reloader.stakater.com/ignore: "true"`.
pub fn is_reloader_ignored(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    annotation_is_true(meta, names::reloader::IGNORE)
}

/// Whether a config object's metadata says `reloader.stakater.com/match: "true"` (what Reloader's
/// `search` annotation on a workload looks for).
pub fn is_reloader_match(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    annotation_is_true(meta, names::reloader::MATCH)
}

/// Whether the annotation `name` is exactly `"true"` (the only value Wave and Reloader honour).
fn annotation_is_true(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, name: &str) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(name))
        .is_some_and(|v| v == "true")
}

/// Content of the referenced objects that exist. A key that is not here names an absent object.
pub type Fetched = HashMap<ConfigKey, Arc<Content>>;

/// One reason the hash cannot be written: a required object or key is missing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Missing {
    /// A required object does not exist.
    Object(ConfigKey),
    /// A key selected by a required reference does not exist in the object.
    Key(ConfigKey, String),
}

impl fmt::Display for Missing {
    // Wave's exact words (`docs/behaviour.md`, "Missing config").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Object(k) => write!(f, "missing required {} {}/{}", k.kind, k.namespace, k.name),
            Missing::Key(k, key) => {
                write!(
                    f,
                    "missing required key {key} in {} {}/{}",
                    k.kind, k.namespace, k.name
                )
            }
        }
    }
}

/// Wave's error text for a failed required check: `not all required children exist: …`.
///
/// Wave's words; unlike Wave, a child referenced several times (say, by 40 `env` entries) is named once,
/// in the order of its first reference, so the message stays short enough for an Event.
pub fn missing_message(missing: &[Missing]) -> String {
    let mut seen = BTreeSet::new();
    let parts: Vec<String> = missing
        .iter()
        .filter(|m| seen.insert(*m))
        .map(ToString::to_string)
        .collect();
    format!("not all required children exist: {}", parts.join(", "))
}

/// Every required object or key that is missing, ConfigMaps first, each in reference order; the keys of
/// one reference sorted. A child referenced twice is reported twice, as Wave does.
pub fn missing(refs: &References, fetched: &Fetched) -> Vec<Missing> {
    let mut out = Vec::new();
    for r in refs.iter().filter(|r| r.required) {
        match fetched.get(&r.key) {
            None => out.push(Missing::Object(r.key.clone())),
            Some(content) if content.ignored => {}
            Some(content) => {
                if let Keys::Only(keys) = &r.keys {
                    for key in keys.iter().filter(|k| !content.contains(k)) {
                        out.push(Missing::Key(r.key.clone(), key.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The exact bytes that are hashed.
#[derive(Clone, PartialEq, Eq)]
pub struct HashSource(Vec<u8>);

impl HashSource {
    /// The compact JSON bytes. They may carry Secret values (base64): never log them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Lowercase hex SHA-256 of the source: the value of `wave.pusher.com/config-hash`.
    pub fn hash(&self) -> String {
        hex(&Sha256::digest(&self.0))
    }

    /// The config hash under `hashing`: [`HashSource::hash`], or HMAC-SHA256 under the key.
    pub fn hash_with(&self, hashing: &Hashing) -> String {
        match hashing {
            Hashing::Plain => self.hash(),
            Hashing::Keyed(key) => hex(&hmac_sha256(&key.0, &self.0)),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// How the hash source becomes the config hash.
#[derive(Clone, Debug, Default)]
pub enum Hashing {
    /// SHA-256, byte-identical to Wave's.
    #[default]
    Plain,
    /// HMAC-SHA256 under a secret key (`--hash-key-secret`): no pod template then carries a digest of a
    /// Secret's value that could be guessed offline.
    Keyed(HashKey),
}

/// A key for [`Hashing::Keyed`]. Its bytes are never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey(Arc<[u8]>);

impl HashKey {
    /// A key from its bytes; `None` when empty (an empty key would protect nothing).
    pub fn new(bytes: &[u8]) -> Option<Self> {
        (!bytes.is_empty()).then(|| Self(bytes.into()))
    }
}

impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HashKey({} bytes)", self.0.len())
    }
}

/// HMAC-SHA256 (RFC 2104 with SHA-256's 64-byte block).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// One kind's part of the hash source: entry name (the object's name, or `namespace/name` on a clash) →
/// key → base64 value. A config snapshot stores exactly these (`history`).
pub type Section = BTreeMap<String, BTreeMap<String, String>>;

#[derive(serde::Serialize)]
struct SourceJson<'a> {
    #[serde(rename = "configMaps")]
    config_maps: &'a Section,
    secrets: &'a Section,
}

/// Builds the hash source of a workload in `namespace` from its references and the fetched content.
/// Absent objects contribute nothing; several references to one object union their keys.
pub fn hash_source(namespace: &str, refs: &References, fetched: &Fetched) -> HashSource {
    let (config_maps, secrets) = sections(namespace, refs, fetched);
    source_of(&config_maps, &secrets)
}

/// The ConfigMap and Secret sections of the hash source: exactly the data that goes into the hash.
pub fn sections(namespace: &str, refs: &References, fetched: &Fetched) -> (Section, Section) {
    (
        section(namespace, ConfigKind::ConfigMap, refs, fetched),
        section(namespace, ConfigKind::Secret, refs, fetched),
    )
}

/// The hash source made of two sections (a snapshot's data hashes back to its config hash through this).
pub fn source_of(config_maps: &Section, secrets: &Section) -> HashSource {
    let json =
        serde_json::to_vec(&SourceJson { config_maps, secrets }).expect("maps of strings always serialise");
    HashSource(json)
}

/// The first 12 characters of a hash, as names and tables show it. A hash read from an object may be
/// anything a user wrote there, so this cuts at a character boundary, never inside one.
pub fn short(hash: &str) -> &str {
    hash.char_indices().nth(12).map_or(hash, |(end, _)| &hash[..end])
}

/// The config hash of a workload: `hash_source(...).hash_with(hashing)`.
pub fn config_hash(namespace: &str, refs: &References, fetched: &Fetched, hashing: &Hashing) -> String {
    hash_source(namespace, refs, fetched).hash_with(hashing)
}

/// Each hashed reference of `kind` (existing, not ignored) with the name of its entry in the hash source.
/// Several references to one object share an entry.
pub fn entries<'a>(
    namespace: &str,
    kind: ConfigKind,
    refs: &'a References,
    fetched: &'a Fetched,
) -> Vec<(&'a Reference, &'a Content, String)> {
    let list = match kind {
        ConfigKind::ConfigMap => &refs.config_maps,
        ConfigKind::Secret => &refs.secrets,
        // wave's hash never covers one (only Reloader compatibility follows them).
        ConfigKind::SecretProviderClass => return Vec::new(),
    };
    let hashed: Vec<(&Reference, &Content)> = list
        .iter()
        .filter_map(|r| Some((r, fetched.get(&r.key).filter(|c| !c.ignored)?.as_ref())))
        .collect();
    // Difference `namespace-clash`: bare names shared by existing objects from more than one namespace.
    let mut namespaces_by_name: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for (r, _) in &hashed {
        namespaces_by_name
            .entry(&r.key.name)
            .or_default()
            .insert(&r.key.namespace);
    }
    hashed
        .into_iter()
        .map(|(r, content)| {
            let clash = namespaces_by_name
                .get(r.key.name.as_str())
                .is_some_and(|n| n.len() > 1);
            let entry_name = if clash && r.key.namespace != namespace {
                format!("{}/{}", r.key.namespace, r.key.name)
            } else {
                r.key.name.clone()
            };
            (r, content, entry_name)
        })
        .collect()
}

fn section(namespace: &str, kind: ConfigKind, refs: &References, fetched: &Fetched) -> Section {
    let mut out = Section::new();
    for (r, content, entry_name) in entries(namespace, kind, refs, fetched) {
        let entry = out.entry(entry_name).or_default();
        for (k, v) in content.values() {
            if r.keys.uses(k) {
                entry.insert(k.to_string(), STANDARD.encode(v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_short_hash_is_its_first_twelve_characters_even_when_a_user_wrote_it() {
        assert_eq!(super::short("0123456789abcdef"), "0123456789ab");
        assert_eq!(super::short("abc"), "abc");
        assert_eq!(super::short("ééééééééééééé"), "éééééééééééé");
    }

    #[test]
    fn hmac_sha256_matches_the_rfc_4231_test_vectors() {
        // Test case 2 (a short key) and test case 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn an_ignored_object_leaves_the_hash_as_if_absent_but_satisfies_a_required_reference() {
        use crate::refs::{ConfigKey, ConfigKind, Keys, Reference, References};
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm");
        let refs = References {
            config_maps: vec![Reference {
                key: key.clone(),
                required: true,
                keys: Keys::Only(["k".to_string()].into()),
                origin: "test".into(),
            }],
            ..Default::default()
        };
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm", "annotations": {(names::IGNORE): "true"}}, "data": {"other": "v"}}))
        .unwrap();
        let ignored = Content::from_config_map(&cm);
        assert!(ignored.ignored);
        let fetched = Fetched::from([(key, Arc::new(ignored))]);
        assert!(
            missing(&refs, &fetched).is_empty(),
            "present, even without the key"
        );
        assert_eq!(
            config_hash("ns", &refs, &fetched, &Hashing::Plain),
            config_hash("ns", &refs, &Fetched::new(), &Hashing::Plain),
            "hashed as if absent"
        );
    }

    #[test]
    fn a_keyed_hash_differs_from_the_plain_one_and_depends_on_the_key() {
        let source = HashSource(b"{}".to_vec());
        let a = Hashing::Keyed(HashKey::new(b"a").unwrap());
        let b = Hashing::Keyed(HashKey::new(b"b").unwrap());
        assert_eq!(source.hash_with(&Hashing::Plain), source.hash());
        assert_ne!(source.hash_with(&a), source.hash());
        assert_ne!(source.hash_with(&a), source.hash_with(&b));
        assert_eq!(source.hash_with(&a).len(), 64);
        assert!(HashKey::new(b"").is_none(), "an empty key is refused");
        assert_eq!(
            format!("{a:?}"),
            "Keyed(HashKey(1 bytes))",
            "the key is never printed"
        );
    }

    use super::*;
    use crate::refs::{Reference, References};

    fn content(pairs: &[(&str, &[u8])]) -> Arc<Content> {
        Arc::new(Content::new(
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect(),
        ))
    }

    fn reference(kind: ConfigKind, ns: &str, name: &str, keys: Keys, required: bool) -> Reference {
        Reference {
            key: ConfigKey::new(kind, ns, name),
            required,
            keys,
            origin: "test".into(),
        }
    }

    fn refs(list: Vec<Reference>) -> References {
        let mut r = References::default();
        for x in list {
            match x.key.kind {
                ConfigKind::ConfigMap => r.config_maps.push(x),
                ConfigKind::Secret => r.secrets.push(x),
                ConfigKind::SecretProviderClass => unreachable!("not hashed"),
            }
        }
        r
    }

    fn only(keys: &[&str]) -> Keys {
        Keys::Only(keys.iter().map(|k| k.to_string()).collect())
    }

    fn source(ns: &str, r: &References, f: &Fetched) -> String {
        String::from_utf8(hash_source(ns, r, f).as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_child_missing_for_many_references_is_named_once_in_the_message() {
        let cm = ConfigKey::new(ConfigKind::ConfigMap, "ns", "cm");
        let secret = ConfigKey::new(ConfigKind::Secret, "ns", "db");
        let mut missing = vec![Missing::Object(cm.clone())];
        missing.extend((0..40).map(|_| Missing::Key(secret.clone(), "password".into())));
        missing.push(Missing::Object(cm));
        assert_eq!(
            missing_message(&missing),
            "not all required children exist: missing required configmap ns/cm, missing required key password in secret ns/db"
        );
    }

    // The four test vectors of `docs/behaviour.md`, "The hash".
    #[test]
    fn no_references_hash_to_wave_empty_vector() {
        let (r, f) = (References::default(), Fetched::new());
        assert_eq!(source("ns", &r, &f), r#"{"configMaps":{},"secrets":{}}"#);
        assert_eq!(
            config_hash("ns", &r, &f, &Hashing::Plain),
            "100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d"
        );
    }

    #[test]
    fn configmap_all_keys_matches_wave_vector() {
        let r = refs(vec![reference(
            ConfigKind::ConfigMap,
            "ns",
            "app-config",
            Keys::All,
            true,
        )]);
        let f = Fetched::from([(r.config_maps[0].key.clone(), content(&[("a", b"b")]))]);
        assert_eq!(
            source("ns", &r, &f),
            r#"{"configMaps":{"app-config":{"a":"Yg=="}},"secrets":{}}"#
        );
        assert_eq!(
            config_hash("ns", &r, &f, &Hashing::Plain),
            "c723035841cb99a64b7b37c2733cbf07045a0e31d539c67aff2bae20f55bff6b"
        );
    }

    #[test]
    fn secret_all_keys_matches_wave_vector() {
        let r = refs(vec![reference(
            ConfigKind::Secret,
            "ns",
            "creds",
            Keys::All,
            true,
        )]);
        let f = Fetched::from([(r.secrets[0].key.clone(), content(&[("password", b"hunter2")]))]);
        assert_eq!(
            config_hash("ns", &r, &f, &Hashing::Plain),
            "aeeffb69d9a05df58ea1b4a549c0bd990a5f01b67094131e2a02f8028eb07085"
        );
    }

    #[test]
    fn existing_object_without_selected_keys_appears_empty_matching_wave_vector() {
        let r = refs(vec![reference(
            ConfigKind::ConfigMap,
            "ns",
            "empty",
            only(&["nope"]),
            false,
        )]);
        let f = Fetched::from([(r.config_maps[0].key.clone(), content(&[("other", b"x")]))]);
        assert_eq!(
            source("ns", &r, &f),
            r#"{"configMaps":{"empty":{}},"secrets":{}}"#
        );
        assert_eq!(
            config_hash("ns", &r, &f, &Hashing::Plain),
            "17b86b9962b7c56a25dc449fa3eacce8aa03cb2d971bf407797f7d90782b22e3"
        );
    }

    #[test]
    fn several_references_to_one_object_union_their_keys() {
        let cfg = content(&[("a", b"1"), ("b", b"2"), ("bin", &[0x00, 0xff])]);
        let key_ref = reference(ConfigKind::ConfigMap, "ns", "cfg", only(&["a"]), true);
        let projected = reference(ConfigKind::ConfigMap, "ns", "cfg", only(&["bin"]), true);
        let r = refs(vec![key_ref.clone(), projected.clone()]);
        let f = Fetched::from([(key_ref.key.clone(), cfg)]);
        assert_eq!(
            source("ns", &r, &f),
            r#"{"configMaps":{"cfg":{"a":"MQ==","bin":"AP8="}},"secrets":{}}"#
        );
        let all = reference(ConfigKind::ConfigMap, "ns", "cfg", Keys::All, true);
        let r = refs(vec![key_ref, projected, all]);
        assert_eq!(
            source("ns", &r, &f),
            r#"{"configMaps":{"cfg":{"a":"MQ==","b":"Mg==","bin":"AP8="}},"secrets":{}}"#
        );
    }

    #[test]
    fn absent_optional_object_contributes_nothing() {
        let r = refs(vec![reference(
            ConfigKind::Secret,
            "ns",
            "gone",
            Keys::All,
            false,
        )]);
        assert_eq!(
            source("ns", &r, &Fetched::new()),
            r#"{"configMaps":{},"secrets":{}}"#
        );
    }

    #[test]
    fn cross_namespace_reference_without_clash_keeps_bare_name_like_wave() {
        let r = refs(vec![reference(
            ConfigKind::ConfigMap,
            "other",
            "shared",
            Keys::All,
            false,
        )]);
        let f = Fetched::from([(r.config_maps[0].key.clone(), content(&[("k", b"v")]))]);
        assert_eq!(
            source("ns", &r, &f),
            r#"{"configMaps":{"shared":{"k":"dg=="}},"secrets":{}}"#
        );
    }

    #[test]
    fn same_name_in_two_namespaces_is_keyed_by_namespace_outside_the_workloads_own() {
        let own = reference(ConfigKind::ConfigMap, "ns", "shared", Keys::All, true);
        let other = reference(ConfigKind::ConfigMap, "other", "shared", Keys::All, false);
        let r = refs(vec![own.clone(), other.clone()]);
        let f = Fetched::from([
            (own.key, content(&[("k", b"1")])),
            (other.key, content(&[("k", b"2")])),
        ]);
        assert_eq!(
            source("ns", &r, &f),
            r#"{"configMaps":{"other/shared":{"k":"Mg=="},"shared":{"k":"MQ=="}},"secrets":{}}"#
        );
        assert_eq!(
            config_hash("ns", &r, &f, &Hashing::Plain),
            "4b9c7c63357fc0069815510157f2775445960603e11174630944e1ce1150c493"
        );
    }

    #[test]
    fn missing_lists_configmaps_then_secrets_in_reference_order_with_sorted_keys() {
        let r = refs(vec![
            reference(ConfigKind::Secret, "ns", "s", only(&["z", "a"]), true),
            reference(ConfigKind::ConfigMap, "ns", "gone", Keys::All, true),
            reference(ConfigKind::ConfigMap, "ns", "opt", Keys::All, false),
            reference(ConfigKind::ConfigMap, "ns", "gone", only(&["x"]), true),
        ]);
        let f = Fetched::from([(
            ConfigKey::new(ConfigKind::Secret, "ns", "s"),
            content(&[("q", b"")]),
        )]);
        let missing = missing(&r, &f);
        assert_eq!(
            missing.len(),
            4,
            "Wave's list: the child referenced twice is there twice"
        );
        assert_eq!(
            missing_message(&missing),
            "not all required children exist: missing required configmap ns/gone, \
             missing required key a in secret ns/s, missing required key z in secret ns/s"
        );
    }

    #[test]
    fn optional_reference_keys_are_never_checked() {
        let r = refs(vec![reference(
            ConfigKind::Secret,
            "ns",
            "s",
            only(&["absent"]),
            false,
        )]);
        let f = Fetched::from([(r.secrets[0].key.clone(), content(&[]))]);
        assert!(missing(&r, &f).is_empty());
    }

    #[test]
    fn content_debug_never_shows_values() {
        let c = content(&[("password", b"hunter2")]);
        let shown = format!("{c:?}");
        assert!(
            shown.contains("password") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn configmap_content_overlays_binary_data_and_secret_merges_string_data() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"}, "data": {"a": "1"}, "binaryData": {"b": "AP8="}
        }))
        .unwrap();
        let c = Content::from_config_map(&cm);
        assert_eq!(c.keys().collect::<Vec<_>>(), ["a", "b"]);
        let s: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"}, "data": {"a": "MQ=="}, "stringData": {"a": "2", "b": "3"}
        }))
        .unwrap();
        let c = Content::from_secret(&s);
        assert_eq!(
            c.value("a"),
            Some(&b"2"[..]),
            "stringData wins, as the apiserver merges it"
        );
        assert_eq!(c.value("b"), Some(&b"3"[..]));
        assert_eq!(c.value("c"), None);
    }
}
