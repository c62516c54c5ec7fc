use crate::tracker::testing::*;
use crate::tracker::*;

#[test]
fn config_objects_are_found_by_the_uid_of_their_owner_until_the_owner_reference_goes() {
    let (mut t, _) = synced(vec![uses_cm("a", "x")], vec![]);
    let mut owned = cm_meta("x", "2");
    owned.owners = vec!["uid-a".into(), "uid-other".into()];
    t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(owned.clone())));
    assert_eq!(t.owned_by("uid-a"), [owned.key.clone()]);
    assert_eq!(t.owned_by("uid-other"), [owned.key.clone()]);
    owned.owners = vec!["uid-other".into()];
    owned.version.resource_version = "3".into();
    t.apply(Change::Config(scope(CONFIGMAPS), Event::Apply(owned.clone())));
    assert!(t.owned_by("uid-a").is_empty());
    t.apply(Change::Config(scope(CONFIGMAPS), Event::Delete(owned)));
    assert!(
        t.owned_by("uid-other").is_empty(),
        "a deleted object is forgotten"
    );
}
