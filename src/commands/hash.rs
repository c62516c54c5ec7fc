//! `wave hash`: the config hash of each opted-in workload in rendered manifests, or the manifests with
//! the hash injected (a Helm post-renderer).

use std::io::{Read, Write};
use std::process::ExitCode;

use super::CommandError;
use crate::cli::{HashArgs, Output};
use wave_core::hash::{HashKey, Hashing};
use wave_core::manifest;

/// Runs `wave hash`.
pub fn run(args: &HashArgs) -> Result<ExitCode, CommandError> {
    let text = if args.file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CommandError::Input(format!("reading stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|e| CommandError::Input(format!("reading {}: {e}", args.file)))?
    };
    let ns = args.namespace.as_deref().unwrap_or("default");
    let mut manifests = manifest::parse(&text).map_err(|e| CommandError::Input(e.to_string()))?;
    let hashing = match &args.hash_key_file {
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| CommandError::Input(format!("reading the hash key {}: {e}", path.display())))?;
            let key = HashKey::new(&bytes).ok_or_else(|| {
                CommandError::Input(format!("the hash key file {} is empty", path.display()))
            })?;
            Hashing::Keyed(key)
        }
        None => Hashing::Plain,
    };
    let hashed = match manifest::hash_all(
        &manifests,
        ns,
        args.allow_missing,
        &hashing,
        args.cross_namespace_references,
    )
    .map_err(|e| CommandError::Input(e.to_string()))?
    {
        Ok(h) => h,
        Err(unresolved) => {
            for u in &unresolved {
                eprintln!("wave: {u}");
            }
            eprintln!(
                "wave: required config is missing from the manifests; add it, or pass --allow-missing to treat it as absent"
            );
            return Ok(ExitCode::from(1));
        }
    };
    let mut out = std::io::stdout().lock();
    let written = if args.inject {
        manifest::inject(&mut manifests, &hashed, ns);
        out.write_all(manifest::render(&manifests).as_bytes())
    } else {
        match args.output {
            Output::Json => writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&hashed).unwrap_or_default()
            ),
            Output::Yaml => write!(out, "{}", serde_norway::to_string(&hashed).unwrap_or_default()),
            Output::Table => hashed
                .iter()
                .try_for_each(|h| writeln!(out, "{} {}/{} {}", h.kind, h.namespace, h.name, h.hash)),
        }
    };
    written.map_err(|e| CommandError::Input(format!("writing output: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
