//! `wave impact`: would a change to one config object roll a workload?

use std::collections::BTreeSet;

use super::refs::{ConfigKey, Keys, References};

/// How a change to one object affects one workload.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "impact", content = "keys")]
pub enum Impact {
    /// The workload does not reference the object.
    NotReferenced,
    /// A change (to the given keys, or to any key) would change the hash.
    Rolls,
    /// The workload only uses these other keys of the object.
    Unaffected(BTreeSet<String>),
}

/// The impact on a workload with `refs` of a change to `key`, restricted to `changed` keys if given.
pub fn impact(refs: &References, key: &ConfigKey, changed: Option<&BTreeSet<String>>) -> Impact {
    let mut used = BTreeSet::new();
    let mut referenced = false;
    for r in refs.iter().filter(|r| &r.key == key) {
        referenced = true;
        match (&r.keys, changed) {
            (_, None) | (Keys::All, _) => return Impact::Rolls,
            (Keys::Only(keys), Some(changed)) => {
                if keys.iter().any(|k| changed.contains(k)) {
                    return Impact::Rolls;
                }
                used.extend(keys.iter().cloned());
            }
        }
    }
    if referenced {
        Impact::Unaffected(used)
    } else {
        Impact::NotReferenced
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::{ConfigKind, Reference};

    fn refs(keys: Keys) -> References {
        let key = ConfigKey::new(ConfigKind::Secret, "ns", "s");
        References {
            secrets: vec![Reference {
                key,
                required: true,
                keys,
                origin: "test".into(),
            }],
            ..Default::default()
        }
    }

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn keyed_references_roll_only_for_their_keys() {
        let key = ConfigKey::new(ConfigKind::Secret, "ns", "s");
        let r = refs(Keys::Only(set(&["a"])));
        assert_eq!(impact(&r, &key, None), Impact::Rolls);
        assert_eq!(impact(&r, &key, Some(&set(&["a", "b"]))), Impact::Rolls);
        assert_eq!(
            impact(&r, &key, Some(&set(&["b"]))),
            Impact::Unaffected(set(&["a"]))
        );
    }

    #[test]
    fn all_key_references_always_roll_and_other_objects_do_not() {
        let key = ConfigKey::new(ConfigKind::Secret, "ns", "s");
        assert_eq!(impact(&refs(Keys::All), &key, Some(&set(&["z"]))), Impact::Rolls);
        let other = ConfigKey::new(ConfigKind::Secret, "ns", "other");
        assert_eq!(impact(&refs(Keys::All), &other, None), Impact::NotReferenced);
    }
}
