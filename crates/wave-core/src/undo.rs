//! Never fight an undo (`docs/behaviour.md`, "Undo").
//!
//! ```text
//! reconcile: current hash ≠ desired ─► detect(current, desired, hashes wave wrote) ─► Pin ─► pin_patch
//! plan: a Pin that holds (template still on the pinned hash, config unchanged since) ─► no hash write
//!       the config changed since ─► the new hash is written and the pin removed (`Write::unpin`)
//! ```
//!
//! `kubectl rollout undo`, a GitOps revert or a hand edit can put a workload's template back on a config
//! hash wave wrote earlier. The config has not changed, so the hash no longer matches it, and without a
//! pin wave would write the current hash again and undo the undo. The pin records the hash the template
//! went back to and the hash of the config at that moment: while both still hold, wave writes nothing.

use serde_json::{Value, json};

use super::workload::Workload;
use crate::names;

/// A pinned workload: its template stays on `hash` while the config hash stays `config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The hash the template went back to (`wave.pusher.com/pinned-hash`).
    pub hash: String,
    /// The config's hash when the pin was set (`wave.pusher.com/pinned-config`).
    pub config: String,
}

impl Pin {
    /// The workload's pin, if it has both annotations.
    pub fn read(workload: &Workload) -> Option<Self> {
        let get = |key: &str| workload.annotations.get(key).cloned();
        Some(Self {
            hash: get(names::PINNED_HASH)?,
            config: get(names::PINNED_CONFIG)?,
        })
    }

    /// Whether the pin still holds wave back: the template is on the pinned hash and the config has not
    /// changed since the pin was set.
    pub fn holds(&self, current: Option<&str>, desired: &str) -> bool {
        current == Some(self.hash.as_str()) && self.config == desired
    }
}

/// How a hash is remembered: 8 bytes instead of 64 characters (a collision would at worst pin one
/// workload, which `wave unpin` or the next config change undoes).
pub fn fingerprint(hash: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new()` has fixed keys: the same hash gives the same fingerprint within a process.
    let mut h = std::hash::DefaultHasher::new();
    hash.hash(&mut h);
    h.finish()
}

/// The pin to set when the template's hash `current` is not the config's `desired` hash, is not the last
/// hash wave wrote or saw current, but is an earlier one for this workload (`known`: fingerprints,
/// oldest first): someone took the template back to an earlier config.
pub fn detect(current: Option<&str>, desired: &str, known: &[u64]) -> Option<Pin> {
    let current = current?;
    let (last, earlier) = known.split_last()?;
    let at = fingerprint(current);
    let went_back = current != desired && *last != at;
    (went_back && earlier.contains(&at)).then(|| Pin {
        hash: current.to_string(),
        config: desired.to_string(),
    })
}

/// The merge patch that pins `workload` (metadata only: nothing rolls), guarded by its resourceVersion.
pub fn pin_patch(workload: &Workload, pin: &Pin) -> Value {
    json!({"metadata": {
        "resourceVersion": workload.resource_version,
        "annotations": {(names::PINNED_HASH): pin.hash, (names::PINNED_CONFIG): pin.config},
    }})
}

/// The merge patch that removes a pin (`wave unpin`).
pub fn unpin_patch() -> Value {
    json!({"metadata": {"annotations": {(names::PINNED_HASH): null, (names::PINNED_CONFIG): null}}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testing::deployment;

    fn wrote(hashes: &[&str]) -> Vec<u64> {
        hashes.iter().map(|h| fingerprint(h)).collect()
    }

    #[test]
    fn a_template_taken_back_to_an_earlier_hash_of_wave_is_an_undo() {
        let pin = detect(Some("h1"), "h2", &wrote(&["h1", "h2"])).expect("an undo");
        assert_eq!(
            pin,
            Pin {
                hash: "h1".into(),
                config: "h2".into()
            }
        );
    }

    #[test]
    fn a_config_change_or_a_hash_wave_never_wrote_is_no_undo() {
        assert_eq!(
            detect(Some("h2"), "h3", &wrote(&["h1", "h2"])),
            None,
            "the config changed: roll"
        );
        assert_eq!(
            detect(Some("x"), "h2", &wrote(&["h1", "h2"])),
            None,
            "not a hash wave wrote"
        );
        assert_eq!(
            detect(Some("h1"), "h1", &wrote(&["h1", "h2"])),
            None,
            "already current"
        );
        assert_eq!(
            detect(Some("h1"), "h2", &wrote(&[])),
            None,
            "nothing written by this process"
        );
        assert_eq!(detect(None, "h2", &wrote(&["h1", "h2"])), None);
    }

    #[test]
    fn a_pin_holds_until_the_config_or_the_template_moves() {
        let pin = Pin {
            hash: "h1".into(),
            config: "h2".into(),
        };
        assert!(pin.holds(Some("h1"), "h2"));
        assert!(!pin.holds(Some("h1"), "h3"), "a config change rolls");
        assert!(!pin.holds(Some("h4"), "h2"), "the template moved on");
    }

    #[test]
    fn a_pin_is_read_back_from_both_annotations_and_written_on_metadata_only() {
        let mut w = deployment("ns", "w", &[], serde_json::json!({"containers": []}));
        assert_eq!(Pin::read(&w), None);
        let pin = Pin {
            hash: "h1".into(),
            config: "h2".into(),
        };
        let patch = pin_patch(&w, &pin);
        assert_eq!(patch["metadata"]["resourceVersion"], "1");
        assert!(patch.get("spec").is_none(), "a pin rolls nothing");
        for (k, v) in patch["metadata"]["annotations"].as_object().unwrap() {
            w.annotations.insert(k.clone(), v.as_str().unwrap().into());
        }
        assert_eq!(Pin::read(&w), Some(pin));
        assert!(unpin_patch()["metadata"]["annotations"][names::PINNED_HASH].is_null());
    }
}
