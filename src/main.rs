//! The `wave` binary: parse the arguments, run the command, turn an error into an exit code.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use wave::cli::{Cli, Command};

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
    let result = match cli.command {
        Command::Run(args) => runtime.block_on(wave::runtime::run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wave: {}", wave::runtime::reconcile::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
