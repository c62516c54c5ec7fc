//! `wave hash`: the config hash of each opted-in workload in rendered manifests, or the manifests with
//! the hash injected (a Helm post-renderer).

use std::io::{Read, Write};
use std::process::ExitCode;

use super::CommandError;
use crate::cli::{CrossNamespaceArg, Output, OutputArg};
use wave_core::hash::{HashKey, Hashing};
use wave_core::manifest;

/// Shown after `wave hash --help`.
pub const EXAMPLES: &str = "Examples:
  helm template my-app ./chart | wave hash
  kustomize build overlays/prod | wave hash --inject | kubectl apply -f -
  helm install my-app ./chart --post-renderer wave --post-renderer-args hash --post-renderer-args --inject   (Helm 3)
  helm install my-app ./chart --post-renderer wave                                                          (Helm 4, plugin in contrib/helm-plugin)

Exit codes: 0 ok, 1 required config missing from the manifests, 2 unreadable input";

/// Flags of `wave hash`.
#[derive(Clone, Debug, clap::Args)]
#[command(mut_arg("output", |a| a.help("Output format (without --inject)")))]
pub struct HashArgs {
    /// Manifests to read: multi-document YAML or a JSON List; `-` is stdin.
    #[arg(short = 'f', long = "filename", default_value = "-")]
    pub file: String,
    /// Namespace of objects that name none (default: `default`; Helm's `HELM_NAMESPACE` when run as a
    /// post-renderer plugin).
    #[arg(short = 'n', long, env = "HELM_NAMESPACE")]
    pub namespace: Option<String>,
    /// Treat missing required config as absent instead of failing.
    #[arg(long)]
    pub allow_missing: bool,
    /// Write the manifests back with the hash set on each opted-in pod template.
    #[arg(long)]
    pub inject: bool,
    /// A file holding the key wave runs with under `--hash-key-secret` (the Secret's `hash-key`, raw
    /// bytes), so that the hashes match the controller's.
    #[arg(long, value_name = "PATH")]
    pub hash_key_file: Option<std::path::PathBuf>,
    /// `--cross-namespace-references`, as `wave run` has it.
    #[command(flatten)]
    pub cross_namespace: CrossNamespaceArg,
    /// `-o/--output`, ignored with `--inject`.
    #[command(flatten)]
    pub output: OutputArg,
}

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
        args.cross_namespace.cross_namespace_references,
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
        match args.output.output {
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
