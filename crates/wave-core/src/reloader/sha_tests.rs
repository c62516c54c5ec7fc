use super::*;
use crate::hash::Content;
use crate::refs::ConfigKind;
use crate::reloader::testing::*;

// The expected values are `printf '%s' 'a=1;b=2' | sha1sum` and so on: Reloader's input format,
// hashed by another implementation.
#[test]
fn the_sha_of_a_config_map_is_sha1_of_its_sorted_key_value_pairs() {
    let c = content(&[("b", "2"), ("a", "1")]);
    assert_eq!(
        sha(ConfigKind::ConfigMap, &c),
        "f83e99e324ba68ccc373a58ef1eb42f8ab88646a"
    );
}

#[test]
fn the_sha_sorts_whole_entries_so_a_dotted_key_comes_before_its_prefix() {
    // "a.b=x" < "a=y" because '.' sorts before '='.
    let c = content(&[("a", "y"), ("a.b", "x")]);
    assert_eq!(
        sha(ConfigKind::Secret, &c),
        "989b6369fc19f3c782f71c212178dafc1bdcaf7d"
    );
}

#[test]
fn binary_data_enters_the_sha_in_base64() {
    let mut c = content(&[("bin", "\u{1}\u{2}")]);
    c.binary_keys.insert("bin".into());
    // base64 of [1, 2] is "AQI=".
    assert_eq!(
        sha(ConfigKind::ConfigMap, &c),
        "eed8cd9e5bc2a37aea7d141bea4f0f57a9714095"
    );
    // A Secret's values are hashed as raw bytes.
    assert_ne!(sha(ConfigKind::Secret, &c), sha(ConfigKind::ConfigMap, &c));
}

#[test]
fn an_empty_object_hashes_the_empty_string() {
    assert_eq!(
        sha(ConfigKind::ConfigMap, &Content::default()),
        "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    );
}

#[test]
fn env_var_names_follow_reloader() {
    assert_eq!(
        env_var_name(ConfigKind::ConfigMap, "app-config"),
        "STAKATER_APP_CONFIG_CONFIGMAP"
    );
    assert_eq!(
        env_var_name(ConfigKind::Secret, "db.creds--v2"),
        "STAKATER_DB_CREDS_V2_SECRET"
    );
    // Leading separators vanish; a trailing one stays, as in Reloader.
    assert_eq!(env_var_name(ConfigKind::Secret, "-x-"), "STAKATER_X__SECRET");
}
