use std::collections::BTreeMap;

use super::*;
use crate::history::testing::*;
use crate::history::*;

#[test]
fn changes_name_keys_added_removed_and_changed_and_a_diff_hides_secret_values() {
    let refs = app_refs();
    let old = Snapshot::of(
        "ns",
        &refs,
        &fetched(
            &[("level", b"a\nb\nc"), ("gone", b"1")],
            &[("password", b"canary-old")],
        ),
    );
    let new = Snapshot::of(
        "ns",
        &refs,
        &fetched(
            &[("level", b"a\nB\nc"), ("new", b"2")],
            &[("password", b"canary-new")],
        ),
    );
    let listed: Vec<String> = changes(&old, &new).iter().map(ToString::to_string).collect();
    assert_eq!(
        listed,
        [
            "-configmap/app:gone",
            "~configmap/app:level",
            "+configmap/app:new",
            "~secret/db:password"
        ]
    );
    let text = diff(&old, &new);
    assert_eq!(
        text,
        "configmap app key gone: removed\n- 1\n\
         configmap app key level: changed\n  a\n- b\n+ B\n  c\n\
         configmap app key new: added\n+ 2\n\
         secret db key password: changed (value hidden)\n"
    );
    assert!(!text.contains("canary"));
    assert!(diff(&old, &old).is_empty());
}

#[test]
fn a_long_unchanged_run_is_shortened_and_binary_values_are_summarised() {
    let a: String = (0..20).map(|n| format!("line {n}\n")).collect();
    let b = a.replace("line 19", "line nineteen");
    let text = line_diff(&a, &b);
    assert!(text.contains("… 15 unchanged lines"), "{text}");
    assert!(text.ends_with("- line 19\n+ line nineteen\n"), "{text}");
    let refs = app_refs();
    let old = Snapshot::of("ns", &refs, &fetched(&[("bin", &[0xff, 0])], &[]));
    let new = Snapshot::of("ns", &refs, &fetched(&[("bin", &[0xfe])], &[]));
    assert_eq!(
        diff(&old, &new),
        "configmap app key bin: changed (binary, 2 bytes → 1 bytes)\n"
    );
}

#[test]
fn a_diff_writes_control_characters_as_escapes_so_config_cannot_drive_a_terminal() {
    let b64 = |s: &str| STANDARD.encode(s);
    let mut old = Snapshot::default();
    old.config_maps
        .insert("app".into(), BTreeMap::from([("k".into(), b64("plain"))]));
    let mut new = Snapshot::default();
    new.config_maps.insert(
        "app".into(),
        BTreeMap::from([("k".into(), b64("\u{1b}]0;owned\u{7}\u{1b}[2Kx\tok"))]),
    );
    let text = diff(&old, &new);
    assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "{text:?}");
    assert!(text.contains("\\u{1b}]0;owned\\u{7}"), "{text}");
    assert!(text.contains("x\tok"), "tabs stay: {text:?}");
}
