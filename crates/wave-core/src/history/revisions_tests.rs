use serde_json::json;

use super::*;

#[test]
fn the_revision_carrying_a_hash_is_the_newest_one_the_workload_controls() {
    let rs = |name: &str, revision: &str, hash: &str, owner: &str| -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("{name}-uid"),
                "annotations": {"deployment.kubernetes.io/revision": revision},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": owner, "controller": true}]},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {"wave.pusher.com/config-hash": hash}}}}
        }))
        .unwrap()
    };
    let revisions: Vec<Revision> = [
        rs("a", "1", "h1", "d"),
        rs("b", "3", "h1", "d"),
        rs("c", "2", "h2", "d"),
        rs("x", "9", "h1", "other"),
    ]
    .iter()
    .filter_map(|r| Revision::of_replica_set(r, "d"))
    .collect();
    assert_eq!(revisions.len(), 3, "another Deployment's ReplicaSet is not ours");
    let found = revision_with(&revisions, "h1").unwrap();
    assert_eq!(
        (found.number, found.owner.name.as_str(), found.owner.kind.as_str()),
        (3, "b", "ReplicaSet")
    );
    assert!(revision_with(&revisions, "h3").is_none());
    let cr: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": "db-5d", "uid": "cr", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s", "controller": true}]},
        "revision": 4,
        "data": {"spec": {"template": {"metadata": {"annotations": {"wave.pusher.com/config-hash": "h9"}}, "$patch": "replace"}}}
    }))
    .unwrap();
    let r = Revision::of_controller_revision(&cr, "s").unwrap();
    assert_eq!(
        (r.number, r.hash.as_deref(), r.owner.kind.as_str()),
        (4, Some("h9"), "ControllerRevision")
    );
}
