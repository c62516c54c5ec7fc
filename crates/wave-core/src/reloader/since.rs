//! What a target went through since its workload was created ([`since_creation`] ─► [`SinceCreation`]):
//! the starting point of a workload wave saw created while it watched.
//!
//! Reloader compares an object's old and new data in its update handler, so a change that lands a
//! moment after a workload was created reloads it. wave is level-triggered: it compares the SHA-1 now
//! with the one the workload carries, or else with the one it first read ([`super::Seen`]). For a
//! workload created while wave watched, "the one it first read" may already be the changed data (the
//! change landed between the create and wave's first read), so the pods that started with the old data
//! would keep it. The apiserver records the order of writes: `resourceVersion`s are etcd revisions,
//! one counter for every object of the cluster's etcd. Kubernetes calls them opaque, and wave compares
//! them only when both are numbers (otherwise it falls back to its first read); KEP-5504, comparable
//! resource versions, is about making that comparison part of the API. The workload's creation has one (the first watch event of it carries
//! it), and so has the data wave read. Data written after the creation is not what the pods started
//! with; data written before is. (A write that left the data as it was, a label say, counts as a
//! change too: wave never read the data of the creation, so it cannot tell.)

/// What a target went through between its workload's creation and the data wave read of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SinceCreation {
    /// Not known: the workload was there before wave's first list, or a `resourceVersion` is not a
    /// number. wave's first read is the starting point, as for any workload.
    #[default]
    Unknown,
    /// Last written before the workload was created: this data is what its pods started with.
    Unchanged,
    /// Created after the workload and not written since: its pods started with this data, or waited
    /// for it (a change from no data only under `--reload-on-create`).
    Created,
    /// Written (updated, or deleted) after the workload was created: its pods started with other data.
    Changed,
}

/// What `history` says of one target, for a workload created at `born` (the `resourceVersion` of its
/// creation, when wave saw it created after its first list).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History<'a> {
    /// The `resourceVersion` of the data wave read; `None`: the object does not exist.
    pub read_at: Option<&'a str>,
    /// The `resourceVersion` at which wave saw it created after its first list.
    pub created_at: Option<u64>,
    /// The `resourceVersion` of its deletion, when wave saw it deleted.
    pub deleted_at: Option<u64>,
}

/// See the module docs.
pub fn since_creation(born: Option<u64>, history: History<'_>) -> SinceCreation {
    let Some(born) = born else {
        return SinceCreation::Unknown;
    };
    let written = match (history.read_at, history.deleted_at) {
        (Some(read), _) => revision(read),
        (None, deleted) => deleted,
    };
    match written {
        None => SinceCreation::Unknown,
        Some(at) if at <= born => SinceCreation::Unchanged,
        Some(at) if history.read_at.is_some() && history.created_at == Some(at) => SinceCreation::Created,
        Some(_) => SinceCreation::Changed,
    }
}

/// A `resourceVersion` as the number it is (etcd's revision); `None` for anything else.
pub fn revision(resource_version: &str) -> Option<u64> {
    resource_version.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(at: &str) -> History<'_> {
        History {
            read_at: Some(at),
            ..History::default()
        }
    }

    #[test]
    fn a_workload_wave_did_not_see_created_starts_from_wave_s_first_read() {
        assert_eq!(since_creation(None, read("7")), SinceCreation::Unknown);
    }

    #[test]
    fn data_written_before_the_workload_was_created_is_its_starting_point() {
        assert_eq!(since_creation(Some(10), read("9")), SinceCreation::Unchanged);
        assert_eq!(since_creation(Some(10), read("10")), SinceCreation::Unchanged);
    }

    #[test]
    fn data_written_after_the_workload_was_created_is_a_change() {
        assert_eq!(since_creation(Some(10), read("11")), SinceCreation::Changed);
        // Created before the workload, updated after it.
        let updated = History {
            created_at: Some(5),
            ..read("11")
        };
        assert_eq!(since_creation(Some(10), updated), SinceCreation::Changed);
    }

    #[test]
    fn an_object_created_after_the_workload_and_not_written_since_is_created_not_changed() {
        let created = History {
            created_at: Some(12),
            ..read("12")
        };
        assert_eq!(since_creation(Some(10), created), SinceCreation::Created);
        let then_updated = History {
            created_at: Some(12),
            ..read("13")
        };
        assert_eq!(since_creation(Some(10), then_updated), SinceCreation::Changed);
    }

    #[test]
    fn an_object_deleted_after_the_workload_was_created_is_a_change_and_before_it_is_not() {
        let deleted = |at| History {
            deleted_at: Some(at),
            ..History::default()
        };
        assert_eq!(since_creation(Some(10), deleted(11)), SinceCreation::Changed);
        assert_eq!(since_creation(Some(10), deleted(9)), SinceCreation::Unchanged);
        assert_eq!(
            since_creation(Some(10), History::default()),
            SinceCreation::Unknown
        );
    }

    #[test]
    fn a_resource_version_that_is_not_a_number_tells_nothing() {
        assert_eq!(since_creation(Some(10), read("abc")), SinceCreation::Unknown);
        assert_eq!(revision("abc"), None);
        assert_eq!(revision("42"), Some(42));
    }
}
