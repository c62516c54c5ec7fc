//! The `wave` binary: parse the arguments, run the command, turn an error into an exit code.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use wave::cli::{Cli, Command};
use wave_runtime::api::error_chain;

fn main() -> ExitCode {
    // NOTE: kube uses rustls with ring; install it as the process default so no other dependency's
    // choice can make rustls panic at the first TLS use (rustls/rustls#2070).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse_args();
    // One thread runs every task: wave waits on the apiserver, not its CPU, and glibc gives each thread
    // that allocates an arena of its own, which keeps what the start-up lists freed. At 1,000 workloads
    // a multi-thread runtime held 40 MiB and this one 31; 5,000 were checked as fast (29.6 s, 29.5 s).
    // docs/benchmarks.md, "The allocator, chosen on evidence".
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wave: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => runtime
            .block_on(wave_runtime::run(args.into_config()))
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| (error_chain(&e), ExitCode::FAILURE)),
        Command::Hash(args) => wave::commands::hash::run(&args).map_err(failure),
        Command::Explain(args) => runtime
            .block_on(wave::commands::explain::run(&args))
            .map_err(failure),
        Command::Impact(args) => runtime
            .block_on(wave::commands::impact::run(&args))
            .map_err(failure),
        Command::Resume(args) => runtime
            .block_on(wave::commands::resume::run(&args))
            .map_err(failure),
        Command::Unpin(args) => runtime
            .block_on(wave::commands::unpin::run(&args))
            .map_err(failure),
        Command::History(args) => runtime
            .block_on(wave::commands::history::run_history(&args))
            .map_err(failure),
        Command::Diff(args) => runtime
            .block_on(wave::commands::history::run_diff(&args))
            .map_err(failure),
        Command::Completion(args) => Ok(wave::commands::completion::run(&args)),
        Command::Agent(args) => Ok(runtime.block_on(wave::commands::agent::run(&args))),
        Command::Status(args) => runtime
            .block_on(wave::commands::status::run(&args))
            .map_err(failure),
    };
    result.unwrap_or_else(|(message, code)| {
        eprintln!("wave: {message}");
        code
    })
}

fn failure(e: wave::commands::CommandError) -> (String, ExitCode) {
    (error_chain(&e), e.exit_code())
}
