//! Offline hashing of rendered manifests (`wave hash`): the same discovery and hash as the controller,
//! with the config objects taken from the manifests instead of the cluster.
//!
//! ```text
//! YAML documents / JSON List ─► parse() ─► [Document] ─► hash_all() ─► [Hashed] | [Unresolved]
//!                                              └──────────► inject() ─► same documents, hash on each
//!                                                                         opted-in pod template
//! ```
//!
//! Kept by `--inject`: every document, in order, and YAML key order. Not kept: comments and blank
//! documents; YAML styles (quoting, flow vs block) are normalised, and JSON input is written back
//! pretty-printed with keys sorted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Deserialize;
use serde_norway::Value;

use super::hash::{self, Content, Fetched, Missing};
use super::refs::{ConfigKey, ConfigKind, CrossNamespace};
use super::workload::{Workload, WorkloadKind};
use crate::names;

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A document is not valid YAML/JSON.
    #[error("document {index}{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Syntax {
        /// 1-based position of the document in the input.
        index: usize,
        /// 1-based line in the input, when known.
        line: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A document is valid YAML but not a valid object of its kind.
    #[error("document {index} ({kind} {name}): {message}")]
    Invalid {
        /// 1-based position of the document.
        index: usize,
        /// Its kind.
        kind: String,
        /// Its name, or `<no name>`.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// One input document.
#[derive(Clone, Debug)]
pub struct Document {
    /// 1-based position in the input (items of a `List` share their list's position).
    pub index: usize,
    /// The document as parsed (key order kept).
    pub value: Value,
}

/// The input format, kept for `--inject` output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `---`-separated YAML documents.
    Yaml,
    /// A JSON object (a `List` or a single object).
    Json,
}

/// Parsed manifests.
#[derive(Clone, Debug)]
pub struct Manifests {
    /// Input format.
    pub format: Format,
    /// Documents in input order; `List`s stay whole here.
    pub documents: Vec<Document>,
}

/// A workload's computed hash.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Hashed {
    /// Deployment, StatefulSet or DaemonSet.
    pub kind: String,
    /// Namespace (the object's, else the default).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The config hash.
    pub hash: String,
}

/// A workload whose required config is not in the manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    /// `Deployment ns/name`.
    pub workload: String,
    /// What is missing.
    pub missing: Vec<Missing>,
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.missing.iter().map(ToString::to_string).collect();
        write!(f, "{}: {}", self.workload, parts.join(", "))
    }
}

/// Parses YAML documents or a JSON object.
pub fn parse(text: &str) -> Result<Manifests, ManifestError> {
    let format = if text.trim_start().starts_with('{') {
        Format::Json
    } else {
        Format::Yaml
    };
    let mut documents = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value = Value::deserialize(de).map_err(|e| ManifestError::Syntax {
            index,
            line: e.location().map(|l| l.line()),
            message: e.to_string(),
        })?;
        if !value.is_null() {
            documents.push(Document { index, value });
        }
    }
    Ok(Manifests { format, documents })
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_str()
}

/// Every object of the manifests with its document index, `List` items expanded.
fn objects(m: &Manifests) -> Vec<(usize, &Value)> {
    let mut out = Vec::new();
    for d in &m.documents {
        let is_list = str_at(&d.value, &["kind"]).is_some_and(|k| k.ends_with("List"));
        match d.value.get("items").and_then(Value::as_sequence) {
            Some(items) if is_list => out.extend(items.iter().map(|i| (d.index, i))),
            _ => out.push((d.index, &d.value)),
        }
    }
    out
}

fn workload_kind(v: &Value) -> Option<WorkloadKind> {
    WorkloadKind::from_type(str_at(v, &["apiVersion"])?, str_at(v, &["kind"])?)
}

fn config_kind(v: &Value) -> Option<ConfigKind> {
    if str_at(v, &["apiVersion"]) != Some("v1") {
        return None;
    }
    match str_at(v, &["kind"])? {
        "ConfigMap" => Some(ConfigKind::ConfigMap),
        "Secret" => Some(ConfigKind::Secret),
        _ => None,
    }
}

fn typed<T: serde::de::DeserializeOwned>(index: usize, v: &Value) -> Result<T, ManifestError> {
    serde_norway::from_value(v.clone()).map_err(|e| invalid(index, v, e.to_string()))
}

/// A Secret, with errors that never quote its data: a parser's message can contain the offending value
/// (`invalid type: integer \`987654\``), and CI logs are not the place for a PIN.
fn secret(index: usize, v: &Value) -> Result<Secret, ManifestError> {
    for field in ["data", "stringData"] {
        let Some(map) = v.get(field).and_then(Value::as_mapping) else {
            continue;
        };
        for (key, value) in map {
            if !value.is_string() {
                let key = key.as_str().unwrap_or("<a key that is not a string>");
                let found = match value {
                    Value::Null => "nothing (null)",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::Sequence(_) => "a list",
                    Value::Mapping(_) => "a map",
                    _ => "a tagged value",
                };
                let message = format!("{field}.{key} must be a string (quote it in YAML); found {found}");
                return Err(invalid(index, v, message));
            }
        }
    }
    serde_norway::from_value(v.clone()).map_err(|_| {
        let message = "not a valid Secret (the parser's message is withheld: it may quote a value)";
        invalid(index, v, message.into())
    })
}

fn invalid(index: usize, v: &Value, message: String) -> ManifestError {
    ManifestError::Invalid {
        index,
        kind: str_at(v, &["kind"]).unwrap_or("<no kind>").to_string(),
        name: str_at(v, &["metadata", "name"])
            .unwrap_or("<no name>")
            .to_string(),
        message,
    }
}

fn name_of(index: usize, v: &Value) -> Result<String, ManifestError> {
    match str_at(v, &["metadata", "name"]) {
        Some(n) if !n.is_empty() => Ok(n.to_string()),
        _ => Err(invalid(index, v, "metadata.name is missing".into())),
    }
}

/// The hashes of every opted-in workload, as the controller would compute them for these objects under
/// `policy` for references to other namespaces. With `allow_missing`, missing required config is
/// treated as absent; otherwise it is returned.
pub fn hash_all(
    m: &Manifests,
    default_namespace: &str,
    allow_missing: bool,
    hashing: &hash::Hashing,
    policy: CrossNamespace,
) -> Result<Result<Vec<Hashed>, Vec<Unresolved>>, ManifestError> {
    let ns_of = |v: &Value| {
        str_at(v, &["metadata", "namespace"])
            .unwrap_or(default_namespace)
            .to_string()
    };
    let mut configs: BTreeMap<ConfigKey, Arc<Content>> = BTreeMap::new();
    let mut workloads: Vec<Workload> = Vec::new();
    for (index, v) in objects(m) {
        if let Some(kind) = config_kind(v) {
            let key = ConfigKey::new(kind, ns_of(v), name_of(index, v)?);
            let content = match kind {
                ConfigKind::ConfigMap => Content::from_config_map(&typed::<ConfigMap>(index, v)?),
                ConfigKind::Secret => Content::from_secret(&secret(index, v)?),
                // `config_kind` reads ConfigMaps and Secrets only.
                ConfigKind::SecretProviderClass => continue,
            };
            configs.insert(key, Arc::new(content));
        } else if let Some(kind) = workload_kind(v) {
            name_of(index, v)?;
            let object: serde_json::Value = typed(index, v)?;
            let meta = typed(index, v.get("metadata").unwrap_or(&Value::Null))?;
            let mut w =
                Workload::from_object(kind, meta, &object).map_err(|e| invalid(index, v, e.to_string()))?;
            w.id.namespace = ns_of(v);
            if w.is_opted_in() {
                workloads.push(w);
            }
        }
    }
    let mut hashed = Vec::new();
    let mut unresolved = Vec::new();
    for w in workloads {
        let refs = w.references(policy);
        let fetched: Fetched = refs
            .keys()
            .into_iter()
            .filter_map(|k| configs.get(&k).map(|c| (k, c.clone())))
            .collect();
        let missing = hash::missing(&refs, &fetched);
        if !missing.is_empty() && !allow_missing {
            unresolved.push(Unresolved {
                workload: w.id.to_string(),
                missing,
            });
            continue;
        }
        hashed.push(Hashed {
            kind: w.id.kind.as_str().to_string(),
            namespace: w.id.namespace.clone(),
            name: w.id.name.clone(),
            hash: hash::config_hash(&w.id.namespace, &refs, &fetched, hashing),
        });
    }
    Ok(if unresolved.is_empty() {
        Ok(hashed)
    } else {
        Err(unresolved)
    })
}

/// Sets the hash on each opted-in workload's pod template; every other document is unchanged.
pub fn inject(m: &mut Manifests, hashes: &[Hashed], default_namespace: &str) {
    let find = |v: &Value| {
        let kind = workload_kind(v)?;
        let ns = str_at(v, &["metadata", "namespace"]).unwrap_or(default_namespace);
        let name = str_at(v, &["metadata", "name"])?;
        hashes
            .iter()
            .find(|h| h.kind == kind.as_str() && h.namespace == ns && h.name == name)
            .map(|h| h.hash.clone())
    };
    let set = |v: &mut Value| {
        if let Some(hash) = find(v) {
            set_path(
                v,
                &["spec", "template", "metadata", "annotations", names::CONFIG_HASH],
                Value::String(hash),
            );
        }
    };
    for d in &mut m.documents {
        let is_list = str_at(&d.value, &["kind"]).is_some_and(|k| k.ends_with("List"));
        match d.value.get_mut("items").and_then(Value::as_sequence_mut) {
            Some(items) if is_list => items.iter_mut().for_each(set),
            _ => set(&mut d.value),
        }
    }
}

fn set_path(v: &mut Value, path: &[&str], leaf: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for key in parents {
        let map = match cur {
            Value::Mapping(map) => map,
            other => {
                *other = Value::Mapping(Default::default());
                let Value::Mapping(map) = other else {
                    unreachable!("just set")
                };
                map
            }
        };
        let entry = map
            .entry(Value::String((*key).to_string()))
            .or_insert(Value::Null);
        if !entry.is_mapping() {
            *entry = Value::Mapping(Default::default());
        }
        cur = entry;
    }
    if let Value::Mapping(map) = cur {
        map.insert(Value::String((*last).to_string()), leaf);
    }
}

/// Writes the documents back in their input format.
pub fn render(m: &Manifests) -> String {
    match m.format {
        Format::Json => {
            let values: Vec<serde_json::Value> = m
                .documents
                .iter()
                .filter_map(|d| serde_norway::from_value::<serde_json::Value>(d.value.clone()).ok())
                .collect();
            let out = if values.len() == 1 {
                values[0].clone()
            } else {
                serde_json::Value::Array(values)
            };
            let mut s = serde_json::to_string_pretty(&out).unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Yaml => m
            .documents
            .iter()
            .map(|d| serde_norway::to_string(&d.value).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {a: b}
---
# a comment
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations: {wave.pusher.com/update-on-config-change: "true"}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, envFrom: [{configMapRef: {name: app-config}}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
"#;

    #[test]
    fn hashes_match_the_controller_vectors() {
        let m = parse(APP).unwrap();
        let hashed = hash_all(&m, "default", false, &hash::Hashing::Plain, CrossNamespace::Deny)
            .unwrap()
            .unwrap();
        assert_eq!(hashed.len(), 1);
        assert_eq!(
            hashed[0].hash,
            "c723035841cb99a64b7b37c2733cbf07045a0e31d539c67aff2bae20f55bff6b"
        );
        assert_eq!(
            (hashed[0].namespace.as_str(), hashed[0].name.as_str()),
            ("default", "web")
        );
    }

    #[test]
    fn secret_string_data_is_merged_as_the_apiserver_would() {
        let text = r#"
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: prod}
stringData: {password: hunter2}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: prod, annotations: {wave.pusher.com/update-on-config-change: "true"}}
spec:
  selector: {}
  serviceName: db
  template: {spec: {containers: [{name: c}], volumes: [{name: s, secret: {secretName: creds}}]}}
"#;
        let hashed = hash_all(
            &parse(text).unwrap(),
            "default",
            false,
            &hash::Hashing::Plain,
            CrossNamespace::Deny,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            hashed[0].hash,
            "aeeffb69d9a05df58ea1b4a549c0bd990a5f01b67094131e2a02f8028eb07085"
        );
    }

    #[test]
    fn missing_required_config_is_reported_unless_allowed() {
        let text = APP.replacen("name: app-config}", "name: other}", 1);
        let m = parse(&text).unwrap();
        let unresolved = hash_all(&m, "default", false, &hash::Hashing::Plain, CrossNamespace::Deny)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            unresolved[0].to_string(),
            "Deployment default/web: missing required configmap default/app-config"
        );
        let hashed = hash_all(&m, "default", true, &hash::Hashing::Plain, CrossNamespace::Deny)
            .unwrap()
            .unwrap();
        assert_eq!(
            hashed[0].hash,
            "100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d"
        );
    }

    #[test]
    fn inject_sets_only_the_hash_and_keeps_other_documents() {
        let mut m = parse(APP).unwrap();
        let hashed = hash_all(&m, "default", false, &hash::Hashing::Plain, CrossNamespace::Deny)
            .unwrap()
            .unwrap();
        inject(&mut m, &hashed, "default");
        let out = render(&m);
        let again = parse(&out).unwrap();
        assert_eq!(again.documents.len(), 3);
        assert_eq!(
            str_at(
                &again.documents[1].value,
                &["spec", "template", "metadata", "annotations", names::CONFIG_HASH]
            ),
            Some(hashed[0].hash.as_str())
        );
        assert_eq!(
            again.documents[2].value,
            parse(APP).unwrap().documents[2].value,
            "non-workloads untouched"
        );
    }

    #[test]
    fn json_lists_are_expanded_and_written_back_as_json() {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": {"a": "b"}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent",
                "annotations": {(names::UPDATE_ON_CONFIG_CHANGE): "true"}},
             "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c",
                "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}}}
        ]});
        let mut m = parse(&list.to_string()).unwrap();
        assert_eq!(m.format, Format::Json);
        let hashed = hash_all(&m, "default", false, &hash::Hashing::Plain, CrossNamespace::Deny)
            .unwrap()
            .unwrap();
        assert_eq!(hashed[0].kind, "DaemonSet");
        inject(&mut m, &hashed, "default");
        let out: serde_json::Value = serde_json::from_str(&render(&m)).unwrap();
        assert_eq!(
            out["items"][1]["spec"]["template"]["metadata"]["annotations"][names::CONFIG_HASH],
            hashed[0].hash
        );
    }

    #[test]
    fn unparsable_yaml_names_the_document_and_line() {
        let err = parse("a: 1\n---\nkind: x: y\n").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("document 2 (line 3)"), "{text}");
    }

    #[test]
    fn an_object_without_a_name_is_a_clear_error() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\ndata: {a: b}\n";
        let err = hash_all(
            &parse(text).unwrap(),
            "default",
            false,
            &hash::Hashing::Plain,
            CrossNamespace::Deny,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "document 1 (ConfigMap <no name>): metadata.name is missing"
        );
    }

    #[test]
    fn an_invalid_object_is_a_clear_error() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: [1, 2]\n";
        let err = hash_all(
            &parse(text).unwrap(),
            "default",
            false,
            &hash::Hashing::Plain,
            CrossNamespace::Deny,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("document 1 (ConfigMap x): "), "{err}");
    }

    #[test]
    fn an_invalid_secret_is_reported_by_key_and_type_never_by_value() {
        for (doc, names) in [
            (
                "stringData: {pin: 987654}",
                "stringData.pin must be a string (quote it in YAML); found a number",
            ),
            (
                "data: {token: [987654]}",
                "data.token must be a string (quote it in YAML); found a list",
            ),
            ("data: {token: \"987654!\"}", "not a valid Secret"),
        ] {
            let input = format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\n{doc}\n");
            let m = parse(&input).unwrap();
            let err = hash_all(&m, "default", false, &hash::Hashing::Plain, CrossNamespace::Deny)
                .unwrap_err()
                .to_string();
            assert!(err.contains(names), "{err}");
            assert!(!err.contains("987654"), "the value leaked: {err}");
        }
    }
}
