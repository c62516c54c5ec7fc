//! Label selectors in Kubernetes' text form (`kubectl get -l`), for `--namespace-selector`.
//!
//! ```text
//! "team=a,env in (prod,staging),!legacy"  ─parse─►  LabelSelector [Requirement…]  ─matches(labels)─► bool
//! ```
//!
//! Every requirement must hold. The forms are those of apimachinery's `labels.Parse`: `key`, `!key`,
//! `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`. Reloader's legacy forms are
//! accepted too, as its `--namespace-selector` accepts them: `key:value`, and `key:*` or `key=*` for "has
//! the key" (Reloader v1.4.21, `GetNamespaceLabelSelector` in `pkg/common/common.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What one requirement asks of a label.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Operator {
    Exists,
    DoesNotExist,
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
}

/// One requirement on one label key.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.operator {
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::In(values) => value.is_some_and(|v| values.contains(v)),
            // As in Kubernetes: a missing label is "not in" any set.
            Operator::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
        }
    }
}

/// A parsed label selector. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector {
    text: String,
    requirements: Vec<Requirement>,
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl LabelSelector {
    /// Parses `text`; an error names the part that is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("label selector {text:?} has an empty requirement"));
            }
            requirements.push(requirement(part).map_err(|e| format!("label selector {text:?}: {e}"))?);
        }
        if requirements.is_empty() {
            return Err("the label selector is empty".to_string());
        }
        Ok(Self {
            text: text.to_string(),
            requirements,
        })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// Splits at commas outside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn requirement(part: &str) -> Result<Requirement, String> {
    let set = |key: &str, rest: &str, keyword: &str| -> Result<BTreeSet<String>, String> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| format!("{part:?}: expected `{key} {keyword} (a,b)`"))?;
        let values: BTreeSet<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
        for v in &values {
            value(v).map_err(|e| format!("{part:?}: {e}"))?;
        }
        Ok(values)
    };
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement {
            key: label_key(key.trim())?,
            operator: Operator::DoesNotExist,
        });
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let first = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if let Some(values) = rest.strip_prefix("notin") {
        let key = label_key(first)?;
        let values = set(&key, values, "notin")?;
        return Ok(Requirement {
            key,
            operator: Operator::NotIn(values),
        });
    }
    if let Some(values) = rest.strip_prefix("in") {
        let key = label_key(first)?;
        let values = set(&key, values, "in")?;
        return Ok(Requirement {
            key,
            operator: Operator::In(values),
        });
    }
    let (key, operator, v) = if let Some((k, v)) = part.split_once("!=") {
        (k, "!=", v)
    } else if let Some((k, v)) = part.split_once("==") {
        (k, "=", v)
    } else if let Some((k, v)) = part.split_once('=') {
        (k, "=", v)
    } else if let Some((k, v)) = part.split_once(':') {
        (k, "=", v)
    } else {
        return Ok(Requirement {
            key: label_key(part)?,
            operator: Operator::Exists,
        });
    };
    let (key, v) = (label_key(key.trim())?, v.trim());
    if v == "*" && operator == "=" {
        return Ok(Requirement {
            key,
            operator: Operator::Exists,
        });
    }
    let values = BTreeSet::from([value(v).map_err(|e| format!("{part:?}: {e}"))?]);
    Ok(Requirement {
        key,
        operator: if operator == "!=" {
            Operator::NotIn(values)
        } else {
            Operator::In(values)
        },
    })
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
fn label_key(key: &str) -> Result<String, String> {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    if name.is_empty() || name.len() > 63 || !name.chars().all(label_char) {
        return Err(format!("{key:?} is not a label key"));
    }
    Ok(key.to_string())
}

/// A label value: empty, or at most 63 characters of `A-Za-z0-9-_.`.
fn value(v: &str) -> Result<String, String> {
    if v.len() > 63 || !v.chars().all(label_char) {
        return Err(format!("{v:?} is not a label value"));
    }
    Ok(v.to_string())
}

fn label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_kubernetes_form_matches_as_kubectl_does() {
        let s = LabelSelector::parse("team=a, env in (prod, staging),!legacy,tier!=db,zone notin (x),owner")
            .unwrap();
        let ok = labels(&[("team", "a"), ("env", "prod"), ("tier", "web"), ("owner", "")]);
        assert!(s.matches(&ok));
        for (k, v) in [("team", "b"), ("env", "dev"), ("tier", "db"), ("zone", "x")] {
            let mut bad = ok.clone();
            bad.insert(k.into(), v.into());
            assert!(!s.matches(&bad), "{k}={v}");
        }
        let mut legacy = ok.clone();
        legacy.insert("legacy".into(), "true".into());
        assert!(!s.matches(&legacy));
        let mut no_owner = ok;
        no_owner.remove("owner");
        assert!(!s.matches(&no_owner));
    }

    #[test]
    fn reloader_s_legacy_forms_are_accepted() {
        let s = LabelSelector::parse("team:a,reloader:*").unwrap();
        assert!(s.matches(&labels(&[("team", "a"), ("reloader", "any")])));
        assert!(!s.matches(&labels(&[("team", "a")])));
        assert!(
            LabelSelector::parse("watched=*")
                .unwrap()
                .matches(&labels(&[("watched", "x")]))
        );
    }

    #[test]
    fn a_malformed_selector_is_refused_with_the_part_that_is_wrong() {
        for (text, part) in [
            ("", "empty"),
            ("team=a,", "empty requirement"),
            ("env in prod", "expected `env in (a,b)`"),
            ("bad key=a", "\"bad key\""),
            ("team=a b", "\"a b\""),
        ] {
            let e = LabelSelector::parse(text).unwrap_err();
            assert!(e.contains(part), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_prefixed_key_is_a_key() {
        let s = LabelSelector::parse("kubernetes.io/metadata.name=team-a").unwrap();
        assert!(s.matches(&labels(&[("kubernetes.io/metadata.name", "team-a")])));
        assert_eq!(s.to_string(), "kubernetes.io/metadata.name=team-a");
    }
}
