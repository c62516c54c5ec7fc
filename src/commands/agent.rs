//! `wave agent`: the container wave adds to the pods of a workload that restarts in place
//! (`wave_core::inplace`, `docs/behaviour.md`, "Restarting in place").
//!
//! ```text
//! start ─► read the pod's annotations file (downward API) ─► the restart request there: the baseline
//!   every --interval ─► read it again ─► the request differs ─► exit 42: the container's restart rule
//!                                                              restarts every container of the pod
//!   SIGTERM (the pod stops) ─► exit 0
//! ```
//!
//! It needs no API access and no RBAC: the kubelet writes the pod's annotations into the file when wave
//! patches them. Any other end (a file that cannot be read) restarts only the agent.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use wave_core::duration::parse_go_duration;
use wave_core::inplace::{self, RESTART_EXIT_CODE};

/// Flags of `wave agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// The pod's annotations, as a downward-API volume writes them.
    #[arg(long, default_value = "/etc/wave-agent/annotations")]
    pub annotations: PathBuf,
    /// How often to read it (Go duration).
    #[arg(long, default_value = "250ms", value_parser = parse_go_duration)]
    pub interval: Duration,
}

/// Runs the agent until its pod is asked to restart (exit 42) or stops (exit 0).
pub async fn run(args: &AgentArgs) -> ExitCode {
    let read = || -> Result<Option<String>, String> {
        let text = std::fs::read_to_string(&args.annotations)
            .map_err(|e| format!("cannot read {}: {e}", args.annotations.display()))?;
        Ok(inplace::requested_in(&text).map(str::to_string))
    };
    let baseline = match read() {
        Ok(request) => request,
        Err(why) => {
            eprintln!("wave agent: {why}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        eprintln!("wave agent: cannot handle SIGTERM");
        return ExitCode::FAILURE;
    };
    eprintln!(
        "wave agent: watching {} (restart request: {})",
        args.annotations.display(),
        baseline.as_deref().unwrap_or("none")
    );
    let mut tick = tokio::time::interval(args.interval);
    loop {
        tokio::select! {
            _ = terminate.recv() => return ExitCode::SUCCESS,
            _ = tick.tick() => match read() {
                Ok(request) if request != baseline => {
                    eprintln!(
                        "wave agent: restart requested ({}): exiting {RESTART_EXIT_CODE} to restart every container of this pod",
                        request.as_deref().unwrap_or("removed")
                    );
                    return ExitCode::from(RESTART_EXIT_CODE as u8);
                }
                Ok(_) => {}
                // The kubelet swaps the file atomically; a read that fails is tried again.
                Err(why) => eprintln!("wave agent: {why}"),
            },
        }
    }
}
