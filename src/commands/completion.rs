//! `wave completion SHELL`: a shell completion script for the whole command tree, from clap.

use std::process::ExitCode;

use clap::CommandFactory as _;

use crate::cli::Cli;

/// Flags of `wave completion`.
#[derive(Clone, Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Runs `wave completion`: prints the script on stdout.
pub fn run(args: &CompletionArgs) -> ExitCode {
    clap_complete::generate(args.shell, &mut Cli::command(), "wave", &mut std::io::stdout());
    ExitCode::SUCCESS
}
