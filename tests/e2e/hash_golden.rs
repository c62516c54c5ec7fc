//! Golden-file tests of `wave hash` and `wave hash --inject` on `testdata/hash/`, plus the hashes that
//! can be checked independently (the test vectors of `docs/behaviour.md`). No cluster is needed.
//! `UPDATE_GOLDEN=1 cargo test --test e2e hash_golden` rewrites the golden files; review the diff.

use std::path::{Path, PathBuf};

use crate::harness::run_wave;

fn wave(args: &[&str]) -> (i32, String, String) {
    run_wave(args, None)
}

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hash");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "json")))
        .filter(|p| !p.to_string_lossy().contains(".inject."))
        .collect();
    cases.sort();
    assert!(cases.len() >= 3, "the golden cases are present");
    cases
}

pub(crate) fn check_golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|_| {
        panic!(
            "{} is missing; run with UPDATE_GOLDEN=1 and review it",
            path.display()
        )
    });
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

#[test]
fn hash_output_matches_the_golden_files() {
    for case in cases() {
        let (code, stdout, stderr) = wave(&["hash", "-f", case.to_str().unwrap()]);
        let actual = format!("exit: {code}\n--- stdout\n{stdout}--- stderr\n{stderr}");
        check_golden(&case.with_extension("out"), &actual);
    }
}

#[test]
fn inject_output_matches_the_golden_files() {
    for case in cases() {
        let (code, stdout, stderr) = wave(&["hash", "--inject", "-f", case.to_str().unwrap()]);
        if code != 0 {
            assert_eq!(code, 1, "{}: {stderr}", case.display());
            continue;
        }
        let ext = case.extension().unwrap().to_str().unwrap();
        check_golden(&case.with_extension(format!("inject.{ext}")), &stdout);
    }
}

#[test]
fn hashes_equal_the_spec_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hash");
    let (_, out, _) = wave(&["hash", "-f", dir.join("basic.yaml").to_str().unwrap()]);
    assert!(
        out.contains(
            "Deployment default/web c723035841cb99a64b7b37c2733cbf07045a0e31d539c67aff2bae20f55bff6b"
        ),
        "{out}"
    );
    assert!(
        out.contains("StatefulSet prod/db aeeffb69d9a05df58ea1b4a549c0bd990a5f01b67094131e2a02f8028eb07085"),
        "{out}"
    );
    assert!(!out.contains("not-opted-in"), "{out}");
    // The worked example of `docs/behaviour.md`, "The hash": {"configMaps":{"cfg":{"a":"MQ==","bin":"AP8="}},"secrets":{}}
    let (_, out, _) = wave(&["hash", "-f", dir.join("list.json").to_str().unwrap()]);
    assert_eq!(
        out,
        "DaemonSet ops/agent 8635dbeb752f17ba01e09316c5d14be9feef37e89d735ea16bcd60bf2b5c861a\n"
    );
}

#[test]
fn inject_is_idempotent_and_its_output_hashes_the_same() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hash");
    let basic = dir.join("basic.yaml");
    let (_, injected, _) = wave(&["hash", "--inject", "-f", basic.to_str().unwrap()]);
    let tmp = std::env::temp_dir().join(format!("wave-inject-{}.yaml", std::process::id()));
    std::fs::write(&tmp, &injected).unwrap();
    let (_, again, _) = wave(&["hash", "--inject", "-f", tmp.to_str().unwrap()]);
    assert_eq!(again, injected, "injecting twice changes nothing");
    let (_, a, _) = wave(&["hash", "-f", basic.to_str().unwrap()]);
    let (_, b, _) = wave(&["hash", "-f", tmp.to_str().unwrap()]);
    assert_eq!(
        a, b,
        "the hash ignores the workload's own template, including the hash annotation"
    );
    let _ = std::fs::remove_file(tmp);
}

#[test]
fn missing_config_exits_1_naming_each_missing_item_and_allow_missing_hashes_anyway() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hash");
    let missing = dir.join("missing.yaml");
    let (code, out, err) = wave(&["hash", "-f", missing.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains("Deployment shop/api: missing required secret shop/db"),
        "{err}"
    );
    let (code, out, _) = wave(&["hash", "--allow-missing", "-f", missing.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "Deployment shop/api 100444e91862dd77d7ebe29f050c1e9a7f357c771e1a7b7650aae27e6a3a031d\n"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_exit_2() {
    let tmp = std::env::temp_dir().join(format!("wave-bad-{}.yaml", std::process::id()));
    std::fs::write(
        &tmp,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nkind: x: y\n",
    )
    .unwrap();
    let (code, _, err) = wave(&["hash", "-f", tmp.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("wave: document 2 (line 5): mapping values are not allowed"),
        "{err}"
    );
    let (code, _, err) = wave(&["hash", "-f", "/nonexistent/manifests.yaml"]);
    assert_eq!(code, 2);
    assert!(err.contains("reading /nonexistent/manifests.yaml"), "{err}");
    let _ = std::fs::remove_file(tmp);
}
