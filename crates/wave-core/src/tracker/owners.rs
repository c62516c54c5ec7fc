//! Owners: the config objects whose `ownerReferences` have the shape Wave ≤ v0.6 wrote, by the uid of
//! each owner they name, so that the controller can remove what Wave left behind (`legacy`, `docs/migrating-from-wave.md`).

use super::Tracker;
use crate::refs::ConfigKey;

impl Tracker {
    pub(super) fn set_owners(&mut self, key: &ConfigKey, owners: Vec<String>) {
        for uid in self.owners.remove(key).unwrap_or_default() {
            if let Some(keys) = self.owned.get_mut(&uid) {
                keys.remove(key);
                if keys.is_empty() {
                    self.owned.remove(&uid);
                }
            }
        }
        for uid in &owners {
            self.owned.entry(uid.clone()).or_default().insert(key.clone());
        }
        if !owners.is_empty() {
            self.owners.insert(key.clone(), owners);
        }
    }

    /// The config objects whose Wave-shaped `ownerReferences` name `uid` (see [`ConfigMeta::owners`]).
    pub fn owned_by(&self, uid: &str) -> Vec<ConfigKey> {
        self.owned
            .get(uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "owners_tests.rs"]
mod tests;
