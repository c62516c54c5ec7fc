//! Stamps the binary with its git commit and build time, for `wave --version` and `wave_build_info`.
//!
//! `WAVE_COMMIT` (an image build has no `.git`: the Dockerfile passes it as a build argument) or else
//! `git rev-parse HEAD`, else `unknown`. The time is `SOURCE_DATE_EPOCH` when set (reproducible builds),
//! else now.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=WAVE_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit or branch moves HEAD or the ref it names.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("WAVE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = Command::new("git").args(["rev-parse", "HEAD"]).output().ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let date = match std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        Some(secs) => jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        None => jiff::Timestamp::now(),
    };
    println!("cargo:rustc-env=WAVE_COMMIT={commit}");
    println!(
        "cargo:rustc-env=WAVE_BUILD_DATE={}",
        date.strftime("%Y-%m-%dT%H:%M:%SZ")
    );
}
