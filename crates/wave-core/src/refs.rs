//! Reference discovery: which ConfigMaps and Secrets a workload uses, and how.
//!
//! ```text
//! workload annotations ─┐
//!                       ├─► discover() ─► References { config_maps: [Reference], secrets: [Reference] }
//! pod template ─────────┘
//! ```
//!
//! The walk order is Wave's (`docs/behaviour.md`, "What counts as a reference") because it fixes the order of the missing-config
//! messages: volumes (with projected sources), then the `extra-*` annotations, then `envFrom` of every
//! container, then `env[].valueFrom`. Difference `init-containers`: `initContainers` are walked too, after the regular
//! containers of the same step, so workloads without such references keep Wave's lists exactly.
//! Duplicates are kept; the hash unions their keys.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};

use crate::names;

/// The kinds of config object wave follows: the two it hashes, and what Reloader compatibility follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKind {
    /// `v1` ConfigMap: `data` and `binaryData`.
    ConfigMap,
    /// `v1` Secret: `data` (`stringData` is merged into it by the apiserver).
    Secret,
    /// A Secrets Store CSI driver SecretProviderClass, for Reloader compatibility only
    /// (`--enable-csi-integration`): its "data" is what the driver last mounted for it, the objects'
    /// ids and versions (`reloader::csi`). wave's own annotations never reference one.
    SecretProviderClass,
}

impl ConfigKind {
    /// Lowercase name as used in Wave's messages and in CLI arguments.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "configmap",
            ConfigKind::Secret => "secret",
            ConfigKind::SecretProviderClass => "secretproviderclass",
        }
    }

    /// The `apiVersion` of its kind.
    pub fn api_version(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap | ConfigKind::Secret => "v1",
            ConfigKind::SecretProviderClass => names::csi::API_VERSION,
        }
    }

    /// The Kubernetes kind.
    pub fn kind(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "ConfigMap",
            ConfigKind::Secret => "Secret",
            ConfigKind::SecretProviderClass => "SecretProviderClass",
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identity of a config object: kind, namespace and name. It may name an object that does not exist.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigKey {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

impl ConfigKey {
    /// A key for `kind` `namespace/name`.
    pub fn new(kind: ConfigKind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Which keys of the object a reference uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Every key (volumes, `envFrom`, `extra-*`, projected sources without `items`).
    All,
    /// Exactly these keys (`env[].valueFrom`, projected sources with `items`).
    Only(BTreeSet<String>),
}

impl Keys {
    fn only(keys: impl IntoIterator<Item = String>) -> Self {
        Keys::Only(keys.into_iter().collect())
    }

    /// Whether a change to `key` matters to this reference.
    pub fn uses(&self, key: &str) -> bool {
        match self {
            Keys::All => true,
            Keys::Only(keys) => keys.contains(key),
        }
    }
}

/// One occurrence of a config object in a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The object referenced.
    pub key: ConfigKey,
    /// `!(optional == true)`; `extra-*` entries are never required.
    pub required: bool,
    /// The keys used.
    pub keys: Keys,
    /// Where in the workload the reference was found, for people (`wave explain`, logs).
    pub origin: String,
}

/// All references of one workload, in Wave's order, one list per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    /// ConfigMap references in walk order.
    pub config_maps: Vec<Reference>,
    /// Secret references in walk order.
    pub secrets: Vec<Reference>,
    /// `extra-*` entries that cannot name an object and were skipped (hash-neutral), for warnings.
    pub skipped: Vec<String>,
    /// References to objects in another namespace that [`CrossNamespace::Deny`] took out: never read,
    /// never hashed, never indexed (`docs/security.md`, "Cross-namespace references").
    pub denied: Vec<ConfigKey>,
}

/// Whether a workload's `extra-*` annotations may name config in another namespace
/// (`--cross-namespace-references`). The controller, the webhook and every CLI command apply the same
/// rule through [`References::confine`], so they agree on the hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CrossNamespace {
    /// Only config in the workload's own namespace counts; `namespace/name` entries naming another
    /// namespace are left out, unread. The default: a tenant cannot make wave read, hash or reveal
    /// anything outside their namespace.
    #[default]
    Deny,
    /// `namespace/name` entries are hashed, as Wave does (the value for switching from Wave with
    /// such references at zero rollouts).
    Allow,
}

impl CrossNamespace {
    /// The flag's values.
    pub const VALUES: [&'static str; 2] = ["deny", "allow"];

    /// Parses a flag value: `deny` or `allow`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "deny" => Ok(CrossNamespace::Deny),
            "allow" => Ok(CrossNamespace::Allow),
            other => Err(format!(
                "{other:?} is not a cross-namespace reference policy: use deny or allow"
            )),
        }
    }

    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            CrossNamespace::Deny => "deny",
            CrossNamespace::Allow => "allow",
        }
    }
}

impl fmt::Display for CrossNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl References {
    /// Every reference, ConfigMaps first.
    pub fn iter(&self) -> impl Iterator<Item = &Reference> {
        self.config_maps.iter().chain(&self.secrets)
    }

    /// The distinct objects referenced, present or not.
    pub fn keys(&self) -> BTreeSet<ConfigKey> {
        self.iter().map(|r| r.key.clone()).collect()
    }

    /// Applies `policy` to the references of a workload in `namespace`: under [`CrossNamespace::Deny`],
    /// each reference to another namespace moves to [`References::denied`] (once per object).
    pub fn confine(mut self, namespace: &str, policy: CrossNamespace) -> Self {
        if policy == CrossNamespace::Allow {
            return self;
        }
        let mut denied = std::mem::take(&mut self.denied);
        for list in [&mut self.config_maps, &mut self.secrets] {
            list.retain(|r| {
                if r.key.namespace == namespace {
                    return true;
                }
                if !denied.contains(&r.key) {
                    denied.push(r.key.clone());
                }
                false
            });
        }
        self.denied = denied;
        self
    }

    /// The message for references [`References::confine`] took out, the same whether or not the
    /// objects exist (so it reveals nothing of another namespace), or `None` when there are none.
    pub fn denied_message(&self) -> Option<String> {
        if self.denied.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .denied
            .iter()
            .map(|k| format!("{} {}/{}", k.kind, k.namespace, k.name))
            .collect();
        Some(format!(
            "left out of the hash, unread: {} (config in another namespace; a cluster admin allows it with --cross-namespace-references=allow, see docs/security.md)",
            list.join(", ")
        ))
    }

    fn push(&mut self, reference: Reference) {
        match reference.key.kind {
            ConfigKind::ConfigMap => self.config_maps.push(reference),
            ConfigKind::Secret => self.secrets.push(reference),
            // wave's annotations and the pod template's ConfigMap and Secret references never name one.
            ConfigKind::SecretProviderClass => {}
        }
    }
}

/// Whether the annotations opt a workload in: the value must be exactly `"true"`.
pub fn is_opted_in(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(names::UPDATE_ON_CONFIG_CHANGE)
        .map(String::as_str)
        == Some("true")
}

/// Discovers every config reference of a workload in `namespace`, in Wave's order (plus `init-containers`).
pub fn discover(
    namespace: &str,
    annotations: &BTreeMap<String, String>,
    template: &PodTemplateSpec,
) -> References {
    let mut refs = References::default();
    let spec = template.spec.as_ref();
    let required = |optional: Option<bool>| optional != Some(true);
    let here = |kind, name: &str| ConfigKey::new(kind, namespace, name);

    // Step 1: volumes, in order; `items` of plain volumes is ignored (Wave hashes all keys).
    for volume in spec.and_then(|s| s.volumes.as_deref()).unwrap_or_default() {
        let origin = format!("volume {:?}", volume.name);
        if let Some(cm) = &volume.config_map {
            refs.push(Reference {
                key: here(ConfigKind::ConfigMap, &cm.name),
                required: required(cm.optional),
                keys: Keys::All,
                origin: origin.clone(),
            });
        }
        if let Some(secret) = &volume.secret {
            // NOTE: `secretName` is optional in the API; an unnamed secret volume names nothing.
            if let Some(name) = &secret.secret_name {
                refs.push(Reference {
                    key: here(ConfigKind::Secret, name),
                    required: required(secret.optional),
                    keys: Keys::All,
                    origin: origin.clone(),
                });
            }
        }
        for source in volume
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_deref())
            .unwrap_or_default()
        {
            // `items: []` never reaches Wave (omitempty), so an empty list means all keys too.
            let keys = |items: &Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>| match items {
                Some(items) if !items.is_empty() => Keys::only(items.iter().map(|i| i.key.clone())),
                _ => Keys::All,
            };
            if let Some(cm) = &source.config_map {
                refs.push(Reference {
                    key: here(ConfigKind::ConfigMap, &cm.name),
                    required: required(cm.optional),
                    keys: keys(&cm.items),
                    origin: format!("projected volume {:?}", volume.name),
                });
            }
            if let Some(secret) = &source.secret {
                refs.push(Reference {
                    key: here(ConfigKind::Secret, &secret.name),
                    required: required(secret.optional),
                    keys: keys(&secret.items),
                    origin: format!("projected volume {:?}", volume.name),
                });
            }
        }
    }

    // Step 2: the extra-* annotations: optional, all keys.
    for (annotation, kind) in [
        (names::EXTRA_CONFIGMAPS, ConfigKind::ConfigMap),
        (names::EXTRA_SECRETS, ConfigKind::Secret),
    ] {
        let Some(value) = annotations.get(annotation) else {
            continue;
        };
        for entry in value.split(',') {
            match parse_extra_entry(namespace, entry) {
                Some((ns, name)) => refs.push(Reference {
                    key: ConfigKey::new(kind, ns, name),
                    required: false,
                    keys: Keys::All,
                    origin: format!("annotation {annotation}"),
                }),
                None => refs
                    .skipped
                    .push(format!("{annotation}: entry {entry:?} names no object")),
            }
        }
    }

    // Steps 3 and 4: envFrom of every container, then env valueFrom; initContainers after (`init-containers`).
    let containers: Vec<(&str, &Container)> = spec
        .map(|s| {
            let regular = s.containers.iter().map(|c| ("container", c));
            let init = s.init_containers.iter().flatten().map(|c| ("initContainer", c));
            regular.chain(init).collect()
        })
        .unwrap_or_default();
    for (role, container) in &containers {
        for env_from in container.env_from.iter().flatten() {
            let origin = format!("envFrom of {role} {:?}", container.name);
            if let Some(cm) = &env_from.config_map_ref {
                refs.push(Reference {
                    key: here(ConfigKind::ConfigMap, &cm.name),
                    required: required(cm.optional),
                    keys: Keys::All,
                    origin: origin.clone(),
                });
            }
            if let Some(secret) = &env_from.secret_ref {
                refs.push(Reference {
                    key: here(ConfigKind::Secret, &secret.name),
                    required: required(secret.optional),
                    keys: Keys::All,
                    origin,
                });
            }
        }
    }
    for (role, container) in &containers {
        for env in container.env.iter().flatten() {
            let Some(value_from) = &env.value_from else {
                continue;
            };
            let origin = format!("env {} of {role} {:?}", env.name, container.name);
            if let Some(sel) = &value_from.config_map_key_ref {
                refs.push(Reference {
                    key: here(ConfigKind::ConfigMap, &sel.name),
                    required: required(sel.optional),
                    keys: Keys::only([sel.key.clone()]),
                    origin: origin.clone(),
                });
            }
            if let Some(sel) = &value_from.secret_key_ref {
                refs.push(Reference {
                    key: here(ConfigKind::Secret, &sel.name),
                    required: required(sel.optional),
                    keys: Keys::only([sel.key.clone()]),
                    origin,
                });
            }
        }
    }

    // Scoping (not in Wave): `only-configmaps` / `only-secrets` keep only the named objects of their
    // kind (`docs/behaviour.md`, "Scoping"). Entries are trimmed; unlike `extra-*`, they add nothing.
    for (annotation, list) in [
        (names::ONLY_CONFIGMAPS, &mut refs.config_maps),
        (names::ONLY_SECRETS, &mut refs.secrets),
    ] {
        let Some(value) = annotations.get(annotation) else {
            continue;
        };
        let allowed: BTreeSet<(&str, &str)> = value
            .split(',')
            .filter_map(|entry| parse_extra_entry(namespace, entry.trim()))
            .collect();
        list.retain(|r| allowed.contains(&(r.key.namespace.as_str(), r.key.name.as_str())));
    }
    refs
}

/// Parses one `extra-*` entry exactly as Wave does: no trimming; `name` or `namespace/name`; three or
/// more parts are skipped. Entries that cannot name an object (`""`, `" b"`, `"ns/"`) are skipped too,
/// which is hash-neutral because Wave treats them as absent optional references.
fn parse_extra_entry<'a>(namespace: &'a str, entry: &'a str) -> Option<(&'a str, &'a str)> {
    let parts: Vec<&str> = entry.split('/').collect();
    let (ns, name) = match parts.as_slice() {
        [name] => (namespace, *name),
        [ns, name] => (*ns, *name),
        _ => return None,
    };
    (is_dns_subdomain(ns) && is_dns_subdomain(name)).then_some((ns, name))
}

/// RFC 1123 subdomain, the rule for ConfigMap, Secret and namespace names.
fn is_dns_subdomain(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|c| alnum(c) || c == b'-' || c == b'.')
        && s.bytes().next().is_some_and(alnum)
        && s.bytes().last().is_some_and(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(spec: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(json!({ "spec": spec })).expect("valid pod template")
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn names(refs: &[Reference]) -> Vec<String> {
        refs.iter()
            .map(|r| format!("{}/{}", r.key.namespace, r.key.name))
            .collect()
    }

    #[test]
    fn only_annotations_keep_the_named_objects_of_their_kind() {
        let t = template(json!({"containers": [{"name": "c", "envFrom": [
            {"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}, {"secretRef": {"name": "s"}}]}]}));
        let refs = discover(
            "ns",
            &annotations(&[(names::ONLY_CONFIGMAPS, " b , other/x")]),
            &t,
        );
        let names: Vec<&str> = refs.iter().map(|r| r.key.name.as_str()).collect();
        assert_eq!(names, ["b", "s"], "secrets are not restricted by only-configmaps");
        let refs = discover("ns", &annotations(&[(names::ONLY_SECRETS, "")]), &t);
        assert!(refs.secrets.is_empty(), "an empty list keeps no Secret");
        assert_eq!(discover("ns", &annotations(&[]), &t).iter().count(), 3);
    }

    #[test]
    fn opt_in_requires_exactly_true() {
        for (value, expected) in [("true", true), ("True", false), ("yes", false), ("1", false)] {
            assert_eq!(
                is_opted_in(&annotations(&[(names::UPDATE_ON_CONFIG_CHANGE, value)])),
                expected
            );
        }
        assert!(!is_opted_in(&BTreeMap::new()));
    }

    #[test]
    fn walk_follows_wave_order_volumes_then_extras_then_envfrom_then_env() {
        let t = template(json!({
            "containers": [{
                "name": "app",
                "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "a"}}}],
                "envFrom": [{"configMapRef": {"name": "envfrom-cm"}}]
            }],
            "volumes": [{"name": "v", "configMap": {"name": "vol-cm"}}]
        }));
        let refs = discover("ns", &annotations(&[(names::EXTRA_CONFIGMAPS, "extra-cm")]), &t);
        assert_eq!(
            names(&refs.config_maps),
            ["ns/vol-cm", "ns/extra-cm", "ns/envfrom-cm", "ns/env-cm"]
        );
        assert_eq!(refs.config_maps[3].keys, Keys::only(["a".to_string()]));
    }

    #[test]
    fn optional_true_is_not_required_and_missing_optional_field_is_required() {
        let t = template(json!({
            "containers": [{"name": "c", "envFrom": [
                {"secretRef": {"name": "a", "optional": true}},
                {"secretRef": {"name": "b", "optional": false}},
                {"secretRef": {"name": "c"}}
            ]}]
        }));
        let refs = discover("ns", &BTreeMap::new(), &t);
        let required: Vec<bool> = refs.secrets.iter().map(|r| r.required).collect();
        assert_eq!(required, [false, true, true]);
    }

    #[test]
    fn plain_volume_items_are_ignored_but_projected_items_select_keys() {
        let t = template(json!({
            "containers": [{"name": "c"}],
            "volumes": [
                {"name": "plain", "configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}]}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": "cm", "items": [{"key": "b", "path": "b"}]}},
                    {"secret": {"name": "s", "items": []}},
                    {"serviceAccountToken": {"path": "token"}}
                ]}}
            ]
        }));
        let refs = discover("ns", &BTreeMap::new(), &t);
        assert_eq!(refs.config_maps[0].keys, Keys::All);
        assert_eq!(refs.config_maps[1].keys, Keys::only(["b".to_string()]));
        assert_eq!(
            refs.secrets[0].keys,
            Keys::All,
            "an empty items list means all keys"
        );
        assert_eq!(refs.iter().count(), 3, "other projected sources are ignored");
    }

    #[test]
    fn extra_entries_parse_without_trimming_and_skip_what_names_nothing() {
        let value = "a,other/b, c,x/y/z,,ns/";
        let refs = discover(
            "ns",
            &annotations(&[(names::EXTRA_SECRETS, value)]),
            &template(json!({})),
        );
        assert_eq!(names(&refs.secrets), ["ns/a", "other/b"]);
        assert!(refs.secrets.iter().all(|r| !r.required && r.keys == Keys::All));
        assert_eq!(refs.skipped.len(), 4, "{:?}", refs.skipped);
    }

    #[test]
    fn init_containers_are_walked_after_regular_containers_of_the_same_step() {
        let t = template(json!({
            "initContainers": [{"name": "init",
                "envFrom": [{"configMapRef": {"name": "init-from"}}],
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "init-env", "key": "x"}}}]}],
            "containers": [{"name": "app",
                "envFrom": [{"configMapRef": {"name": "app-from"}}],
                "env": [{"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "app-env", "key": "y"}}}]}]
        }));
        let refs = discover("ns", &BTreeMap::new(), &t);
        assert_eq!(
            names(&refs.config_maps),
            ["ns/app-from", "ns/init-from", "ns/app-env", "ns/init-env"]
        );
    }

    #[test]
    fn field_refs_and_image_pull_secrets_are_not_references() {
        let t = template(json!({
            "imagePullSecrets": [{"name": "pull"}],
            "containers": [{"name": "c", "env": [
                {"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "Q", "value": "plain"}
            ]}]
        }));
        assert_eq!(discover("ns", &BTreeMap::new(), &t), References::default());
    }

    #[test]
    fn denying_other_namespaces_takes_their_references_out_once_each_and_keeps_the_workloads_own() {
        let t = template(json!({"containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "own"}}]}]}));
        let extra = annotations(&[
            (names::EXTRA_SECRETS, "victim/db,victim/db,own,victim/nope"),
            (names::EXTRA_CONFIGMAPS, "victim/cfg"),
        ]);
        let allowed = discover("ns", &extra, &t).confine("ns", CrossNamespace::Allow);
        assert_eq!(allowed.denied, [] as [ConfigKey; 0]);
        assert_eq!(allowed.iter().count(), 6, "allow keeps Wave's references");
        let denied = discover("ns", &extra, &t).confine("ns", CrossNamespace::Deny);
        assert_eq!(names(&denied.secrets), ["ns/own", "ns/own"]);
        assert!(denied.config_maps.is_empty());
        let denied_keys: Vec<String> = denied
            .denied
            .iter()
            .map(|k| format!("{}/{}", k.namespace, k.name))
            .collect();
        assert_eq!(denied_keys, ["victim/cfg", "victim/db", "victim/nope"]);
    }

    #[test]
    fn the_denied_message_reads_the_same_for_an_object_that_exists_and_one_that_does_not() {
        let refs = |entry: &str| {
            discover(
                "ns",
                &annotations(&[(names::EXTRA_SECRETS, entry)]),
                &template(json!({})),
            )
            .confine("ns", CrossNamespace::Deny)
        };
        let (exists, absent) = (refs("victim/db"), refs("victim/nope"));
        assert_eq!(
            exists.denied_message().unwrap().replace("db", "X"),
            absent.denied_message().unwrap().replace("nope", "X")
        );
        assert!(
            exists
                .denied_message()
                .unwrap()
                .contains("--cross-namespace-references=allow")
        );
        assert_eq!(refs("db").denied_message(), None);
    }

    #[test]
    fn the_cross_namespace_policy_parses_deny_and_allow_only() {
        assert_eq!(CrossNamespace::parse("deny"), Ok(CrossNamespace::Deny));
        assert_eq!(CrossNamespace::parse("allow"), Ok(CrossNamespace::Allow));
        assert_eq!(CrossNamespace::default(), CrossNamespace::Deny);
        let err = CrossNamespace::parse("Allow").unwrap_err();
        assert!(err.contains("deny or allow"), "{err}");
        for v in CrossNamespace::VALUES {
            assert_eq!(CrossNamespace::parse(v).unwrap().as_str(), v);
        }
    }
}
