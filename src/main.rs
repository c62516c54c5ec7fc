//! The `wave` binary: parse the arguments, run the command, turn an error into an exit code.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use wave::cli::{Cli, Command};
use wave::runtime::reconcile::error_chain;

fn main() -> ExitCode {
    // NOTE: kube uses rustls with ring; install it as the process default so no other dependency's
    // choice can make rustls panic at the first TLS use (rustls/rustls#2070).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse_args();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wave: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Run(args) => match runtime.block_on(wave::runtime::run(*args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("wave: {}", error_chain(&e));
                ExitCode::FAILURE
            }
        },
        Command::Hash(args) => finish(wave::commands::hash::run(&args)),
        Command::Explain(args) => finish(runtime.block_on(wave::commands::explain::run(&args))),
        Command::Impact(args) => finish(runtime.block_on(wave::commands::impact::run(&args))),
    }
}

fn finish(result: Result<ExitCode, wave::commands::CommandError>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("wave: {}", error_chain(&e));
        e.exit_code()
    })
}
