use std::collections::BTreeSet;

use serde_json::json;

use crate::refs::ConfigKind;
use crate::tracker::testing::*;
use crate::tracker::*;
use crate::workload::testing::deployment;
use crate::workload::{Workload, WorkloadKind};

/// The page size the bulk-read tests assume.
const PAGE: usize = 100;

fn in_namespace(ns: &str, mut meta: ConfigMeta) -> ConfigMeta {
    meta.key.namespace = ns.into();
    meta
}

fn uses_cm_in(ns: &str, name: &str, cm: &str) -> Workload {
    let mut w = uses_cm(name, cm);
    w.id.namespace = ns.into();
    w
}

/// `used` and `unused` ConfigMaps in each of `namespaces`, a workload per used one, in `tracker`.
fn spread(tracker: Tracker, namespaces: &[&str], used: usize, unused: usize) -> Tracker {
    let mut workloads = Vec::new();
    let mut configs = Vec::new();
    for ns in namespaces {
        for i in 0..used {
            workloads.push(uses_cm_in(ns, &format!("w{i}"), &format!("used{i}")));
            configs.push(in_namespace(ns, cm_meta(&format!("used{i}"), "1")));
        }
        for i in 0..unused {
            configs.push(in_namespace(ns, cm_meta(&format!("unused{i}"), "1")));
        }
    }
    synced_from(tracker, workloads, configs).0
}

fn namespace_reads(namespaces: &[&str]) -> Vec<BulkRead> {
    namespaces
        .iter()
        .map(|ns| BulkRead {
            namespace: Some(ns.to_string()),
        })
        .collect()
}

#[test]
fn a_watched_namespace_is_read_in_bulk_only_where_many_objects_are_referenced_and_they_are_most_of_it() {
    let watched = BTreeSet::from(["ns".to_string()]);
    let all = || Tracker::new(&WorkloadKind::BUILT_IN, Some(&watched));
    assert_eq!(
        spread(all(), &["ns"], BULK_READ_MIN, BULK_READ_MIN).bulk_reads(PAGE),
        namespace_reads(&["ns"]),
        "half of the namespace is referenced"
    );
    assert!(
        spread(all(), &["ns"], BULK_READ_MIN, BULK_READ_MIN + 1)
            .bulk_reads(PAGE)
            .is_empty(),
        "less than half is referenced"
    );
    assert!(
        spread(all(), &["ns"], BULK_READ_MIN - 1, 0)
            .bulk_reads(PAGE)
            .is_empty(),
        "too few for a LIST to save anything"
    );
}

#[test]
fn the_whole_cluster_is_read_in_one_list_when_that_takes_fewer_requests_and_wave_watches_every_namespace() {
    let namespaces = ["a", "b", "c"];
    let everything = vec![BulkRead { namespace: None }];
    let all = || Tracker::new(&WorkloadKind::BUILT_IN, None);
    assert_eq!(
        spread(all(), &namespaces, BULK_READ_MIN, 0).bulk_reads(PAGE),
        everything,
        "one page instead of three LISTs"
    );
    assert_eq!(
        spread(all(), &namespaces, 2, 0).bulk_reads(PAGE),
        everything,
        "one page instead of six GETs (no namespace holds enough for a LIST of its own)"
    );
    assert_eq!(
        spread(all(), &namespaces, BULK_READ_MIN, BULK_READ_MIN).bulk_reads(16),
        namespace_reads(&namespaces),
        "with 16 per page, the cluster takes as many pages as the namespaces: LISTs per namespace"
    );
    assert_eq!(
        spread(all(), &namespaces, 1, 2).bulk_reads(PAGE),
        [],
        "most of the cluster is unreferenced: three GETs"
    );

    let listed = BTreeSet::from(namespaces.map(String::from));
    let some = Tracker::new(&WorkloadKind::BUILT_IN, Some(&listed));
    assert_eq!(
        spread(some, &namespaces, BULK_READ_MIN, 0).bulk_reads(PAGE),
        namespace_reads(&namespaces),
        "watching some namespaces, wave may not list the others"
    );
    let ignoring = all().ignoring(BTreeSet::from(["quiet".to_string()]));
    assert_eq!(
        spread(ignoring, &namespaces, BULK_READ_MIN, 0).bulk_reads(PAGE),
        namespace_reads(&namespaces),
        "a cluster-wide LIST would read the ignored namespace too"
    );
}

/// `used` referenced and `unused` unreferenced Secrets in each of `namespaces`, and as many
/// ConfigMaps of each, all referenced by one workload per used pair.
fn spread_secrets(tracker: Tracker, namespaces: &[&str], used: usize, unused: usize) -> Tracker {
    let mut workloads = Vec::new();
    let mut configs = Vec::new();
    for ns in namespaces {
        for i in 0..used {
            let mut w = deployment(
                ns,
                &format!("w{i}"),
                &[],
                json!({"containers": [{"name": "c", "envFrom": [
                    {"configMapRef": {"name": format!("used{i}")}},
                    {"secretRef": {"name": format!("used{i}")}},
                ]}]}),
            );
            w.id.namespace = ns.to_string();
            workloads.push(w);
            configs.push(in_namespace(ns, cm_meta(&format!("used{i}"), "1")));
            configs.push(in_namespace(ns, secret_meta(&format!("used{i}"))));
        }
        for i in 0..unused {
            configs.push(in_namespace(ns, cm_meta(&format!("unused{i}"), "1")));
            configs.push(in_namespace(ns, secret_meta(&format!("unused{i}"))));
        }
    }
    synced_from(tracker, workloads, configs).0
}

fn secret_meta(name: &str) -> ConfigMeta {
    let mut meta = cm_meta(name, "1");
    meta.key.kind = ConfigKind::Secret;
    meta
}

#[test]
fn secrets_are_never_read_in_bulk_however_many_are_referenced_while_configmaps_still_are() {
    let namespaces = ["a", "b"];
    let watched = BTreeSet::from(namespaces.map(String::from));
    let cases = [
        // Every Secret of both namespaces referenced: a cluster-wide LIST would have read nothing
        // unreferenced, and still it is not made.
        (
            Tracker::new(&WorkloadKind::BUILT_IN, None),
            2 * BULK_READ_MIN,
            0,
            vec![BulkRead { namespace: None }],
        ),
        // Most referenced, a few not: the old rule listed each namespace, and with it the data of
        // the Secrets nobody references.
        (
            Tracker::new(&WorkloadKind::BUILT_IN, Some(&watched)),
            BULK_READ_MIN,
            BULK_READ_MIN / 2,
            namespace_reads(&namespaces),
        ),
    ];
    for (tracker, used, unused, configmap_reads) in cases {
        let t = spread_secrets(tracker, &namespaces, used, unused);
        let referenced_secrets = t
            .configs
            .keys()
            .filter(|k| k.kind == ConfigKind::Secret && t.index.is_referenced(k))
            .count();
        assert_eq!(
            referenced_secrets,
            namespaces.len() * used,
            "the Secrets are referenced"
        );
        // A BulkRead lists ConfigMaps: the type has no way to say Secrets.
        assert_eq!(
            t.bulk_reads(PAGE),
            configmap_reads,
            "{used} referenced and {unused} unreferenced of each kind per namespace: only ConfigMaps"
        );
    }
}
