//! `make bench`: wave beside Wave (Go) and Stakater Reloader, one at a time, each on a fresh control
//! plane of `hack/testenv` populated identically, each authenticated as its own client-certificate user
//! so that the apiserver's audit log attributes every request.
//!
//! ```text
//! for each of --repeat rounds, the controllers in alternating order (wave, Wave, Reloader; then reversed):
//!   testenv up --audit ─► populate ─► start ─► S4 startup, S1 latency, S3 fan-out, S6 storm, S7 flapping,
//!   S8 bad config (restarted with pacing), the defaults pass (first round only)
//!   ─► per payload size: unreferenced Secrets ─► restart: S5 ─► idle window: S2, S4 idle
//!   ─► S11 apiserver restarts, last ─► testenv down
//! then S9, wave alone: the chaos soak (bench/src/chaos.rs); M1 (switching from Reloader, bench/src/from_reloader.rs)
//! with --reloader-migration-only; M2 (switching from Wave) with --migration-only;
//! H1 (the cost of config history, bench/src/history.rs) with --history-only
//! then: bench/results/<date>-<commit>.json (every round's raw figures, the median/min/max of each, the
//! versions), latest.json and a PNG chart for a full run with both peers, and the table printed
//! ```
//!
//! Peers are optional: `WAVE_GO_BIN` and `RELOADER_BIN` name binaries built outside this repository
//! (docs/benchmarks.md says how). Without them, wave is measured alone and the skipped peers are named.

#![forbid(unsafe_code)]

mod audit;
mod chaos;
mod controller;
mod from_reloader;
mod history;
mod loadtest;
mod migration;
mod report;
mod scale;
mod scenarios;

use std::path::PathBuf;

use clap::Parser;

/// Sizes and where to write. The defaults are the published run; `--smoke` is a tiny one for CI.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "wave-bench",
    about = "wave beside Wave and Reloader (docs/benchmarks.md)"
)]
pub struct Args {
    /// Namespaces that hold the S1 workloads.
    #[arg(long, default_value_t = 50)]
    pub namespaces: usize,
    /// S1: opted-in Deployments, each referencing its own ConfigMap (volume) and Secret (env key).
    #[arg(long, default_value_t = 1000)]
    pub deployments: usize,
    /// S1: config objects updated, one at a time.
    #[arg(long, default_value_t = 200)]
    pub updates: usize,
    /// S2: Secrets that nothing references.
    #[arg(long, default_value_t = 10_000)]
    pub unreferenced: usize,
    /// S2: their payload sizes in KiB, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "32,64")]
    pub payload_kib: Vec<usize>,
    /// S3: Deployments referencing one Secret.
    #[arg(long, default_value_t = 500)]
    pub fanout: usize,
    /// S6: Deployments referencing the Secret that changes in a burst.
    #[arg(long, default_value_t = 100)]
    pub storm_deployments: usize,
    /// S6: changes in the burst (spread over 2 s).
    #[arg(long, default_value_t = 10)]
    pub storm_changes: usize,
    /// S7: Deployments referencing the Secret that flaps.
    #[arg(long, default_value_t = 50)]
    pub flap_deployments: usize,
    /// S7: how long the Secret changes once per second.
    #[arg(long, default_value_t = 180)]
    pub flap_seconds: u64,
    /// S8: Deployments (one replica each, on kwok) sharing the ConfigMap that turns bad.
    #[arg(long, default_value_t = 100)]
    pub bad_deployments: usize,
    /// S8: wave's --max-concurrent-rollouts (the peers cannot pace).
    #[arg(long, default_value_t = 5)]
    pub bad_pacing: usize,
    /// Run only M2, switching from Wave and back (needs WAVE_GO_BIN); the figures are printed and
    /// written to `<out>/m2.json`.
    #[arg(long)]
    pub migration_only: bool,
    /// Run only M1, switching from Stakater Reloader (needs RELOADER_BIN); the figures are printed and
    /// written to `<out>/m1.json`.
    #[arg(long)]
    pub reloader_migration_only: bool,
    /// Run only H1, the cost of config history at the S1 size (wave alone, without and with
    /// `--config-history`); the figures are printed and written to `<out>/h1.json`.
    #[arg(long)]
    pub history_only: bool,
    /// Run only S10, the scale curve (each controller at each of --scale-sizes, up to the first it
    /// does not survive); the figures are printed and written to `<out>/scale.json` and `scale.png`.
    #[arg(long)]
    pub scale_only: bool,
    /// S10: sizes as DEPLOYMENTS:UNREFERENCED_SECRETS, smallest first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000:10000,5000:50000,20000:100000"
    )]
    pub scale_sizes: Vec<String>,
    /// S10: the unreferenced Secrets' payload, in KiB.
    #[arg(long, default_value_t = 4)]
    pub scale_secret_kib: usize,
    /// S10: a controller whose RSS passes this is killed, and the size counts as not survived.
    #[arg(long, default_value_t = 16)]
    pub scale_memory_ceiling_gib: u64,
    /// S10: S1 updates at each size.
    #[arg(long, default_value_t = 50)]
    pub scale_updates: usize,
    /// S10: the idle window for steady RSS at each size, in seconds.
    #[arg(long, default_value_t = 120)]
    pub scale_idle_seconds: u64,
    /// Run only L1–L13, Stakater Reloader's load-test scenarios, for every controller; the figures are
    /// printed and written to `<out>/loadtest.json`.
    #[arg(long)]
    pub loadtest_only: bool,
    /// L1–L13: how long each scenario's changes go on, in seconds.
    #[arg(long, default_value_t = 30)]
    pub loadtest_seconds: u64,
    /// Run only S6, S7 and S8 (with `--out` elsewhere, so the published results stay whole).
    #[arg(long)]
    pub safety_only: bool,
    /// S2/S4: the idle window, in seconds; steady RSS is the median of its last 2 minutes.
    #[arg(long, default_value_t = 300)]
    pub idle_seconds: u64,
    /// Rounds of every controller, alternating their order; each figure is reported as the median of
    /// the rounds, with its min and max.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// S11: apiserver restarts per round (each: 20 s down, then one config change).
    #[arg(long, default_value_t = 3)]
    pub restart_trials: usize,
    /// Leave out the pass of S1 and S3 with each controller at its shipped defaults.
    #[arg(long)]
    pub skip_defaults_pass: bool,
    /// S9: how long the chaos soak runs, in seconds; 0 skips it.
    #[arg(long, default_value_t = 600)]
    pub chaos_seconds: u64,
    /// S9: opted-in Deployments (one ConfigMap per ten of them).
    #[arg(long, default_value_t = 200)]
    pub chaos_workloads: usize,
    /// S9: seconds between faults.
    #[arg(long, default_value_t = 30)]
    pub chaos_fault_every: u64,
    /// Run only S9 (with `--out` elsewhere, so the published results stay whole).
    #[arg(long)]
    pub chaos_only: bool,
    /// S9: the seed of the faults and changes, to repeat a run (each run prints its own); a new one
    /// from the clock when not given.
    #[arg(long)]
    pub chaos_seed: Option<u64>,
    /// Tiny sizes, for `make bench-smoke`: checks that every controller given produces every figure.
    #[arg(long)]
    pub smoke: bool,
    /// Run nothing: make one report from the rounds of these dated results files (say, one controller
    /// per run), written to `--out` like a run's; they must agree on sizes, machine and versions, and
    /// each controller's rounds must come from one binary.
    #[arg(long, num_args = 1.., value_name = "RESULTS_JSON")]
    pub combine: Vec<PathBuf>,
    /// Where the results go (`<UTC date>-<commit>.json` and `latest.json`).
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Only these controllers (`wave`, `wave-go`, `reloader`), of those whose binary is given.
    #[arg(long, value_delimiter = ',')]
    pub controllers: Vec<String>,
    /// The wave binary.
    #[arg(long, env = "WAVE_BIN", default_value = "target/release/wave")]
    pub wave_bin: PathBuf,
    /// Wave v0.11.0, built outside this repository.
    #[arg(long, env = "WAVE_GO_BIN")]
    pub wave_go_bin: Option<PathBuf>,
    /// Stakater Reloader v1.4.21, built outside this repository.
    #[arg(long, env = "RELOADER_BIN")]
    pub reloader_bin: Option<PathBuf>,
}

impl Args {
    /// How long a wait may take before it gives up: `full` in a real run, at most a minute under
    /// `--smoke`, so that a hung controller fails CI in a minute instead of fifteen.
    pub fn limit(&self, full: std::time::Duration) -> std::time::Duration {
        if self.smoke {
            full.min(std::time::Duration::from_secs(60))
        } else {
            full
        }
    }

    /// `--scale-sizes`, parsed and checked to grow.
    pub fn scale_sizes(&self) -> Result<Vec<(usize, usize)>, String> {
        let sizes = self
            .scale_sizes
            .iter()
            .map(|s| {
                let (d, u) = s.split_once(':').ok_or_else(|| {
                    format!("--scale-sizes {s:?}: expected DEPLOYMENTS:UNREFERENCED_SECRETS, e.g. 1000:10000")
                })?;
                let n = |v: &str| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|e| format!("--scale-sizes {s:?}: {v:?} is not a count: {e}"))
                };
                Ok((n(d)?, n(u)?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if sizes.is_empty() || sizes.windows(2).any(|w| w[1].0 < w[0].0) {
            return Err("--scale-sizes: give at least one size, smallest first".into());
        }
        Ok(sizes)
    }

    fn sized(mut self) -> Self {
        if self.smoke {
            self.namespaces = 2;
            self.deployments = 6;
            self.updates = 4;
            self.unreferenced = 20;
            self.payload_kib = vec![1, 2];
            self.fanout = 5;
            self.storm_deployments = 3;
            self.storm_changes = 3;
            self.flap_deployments = 3;
            self.flap_seconds = 15;
            self.bad_deployments = 4;
            self.bad_pacing = 1;
            self.idle_seconds = 4;
            self.repeat = 1;
            self.restart_trials = 1;
            self.chaos_seconds = 20;
            self.chaos_workloads = 10;
            self.chaos_fault_every = 4;
            self.scale_sizes = vec!["10:20".into(), "20:40".into()];
            self.scale_updates = 4;
            self.scale_idle_seconds = 4;
            self.loadtest_seconds = 1;
        }
        if self.safety_only {
            self.deployments = 0;
            self.updates = 0;
            self.fanout = 0;
            self.chaos_seconds = 0;
        }
        self
    }
}

/// Ends a partial run (`--migration-only`, `--history-only`): its figures printed and written to
/// `<out>/<file>`, or its error; exits.
fn finish_partial<T: serde::Serialize>(
    args: &Args,
    scenario: &str,
    file: &str,
    result: Result<T, String>,
) -> ! {
    match result {
        Ok(figures) => {
            let text = serde_json::to_string_pretty(&figures).unwrap_or_default();
            let _ = std::fs::create_dir_all(&args.out);
            if let Err(e) = std::fs::write(args.out.join(file), format!("{text}\n")) {
                eprintln!("writing {file}: {e}");
            }
            println!("{text}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{scenario}: {e}");
            std::process::exit(1);
        }
    }
}

/// L1–L13 for every profile, one after another.
async fn run_loadtest(
    args: &Args,
    profiles: &[controller::Profile],
) -> Result<Vec<(String, loadtest::LoadResult)>, String> {
    let mut results = Vec::new();
    for p in profiles {
        eprintln!("== L1-L13 {}", p.name);
        let r = loadtest::run(args, p)
            .await
            .map_err(|e| format!("{}: {e}", p.name))?;
        results.push((p.name.to_string(), r));
    }
    Ok(results)
}

/// Checks that `report` is whole, writes it and prints its tables; exits non-zero when it is not whole
/// or cannot be written.
fn finish(args: &Args, report: &report::Report) {
    if let Err(e) = report.check_complete() {
        eprintln!("incomplete results: {e}");
        std::process::exit(1);
    }
    match report.write(args) {
        Ok(path) => eprintln!("results: {}", path.display()),
        Err(e) => {
            eprintln!("writing the results: {e}");
            std::process::exit(1);
        }
    }
    println!("{}", report.markdown());
}

#[tokio::main]
async fn main() {
    let args = Args::parse().sized();
    let (mut profiles, mut skipped) = controller::profiles(&args);
    if !args.controllers.is_empty() {
        if let Some(unknown) = args
            .controllers
            .iter()
            .find(|c| !controller::NAMES.contains(&c.as_str()))
        {
            eprintln!("--controllers: {unknown:?} is not wave, wave-go or reloader");
            std::process::exit(2);
        }
        profiles.retain(|p| {
            let keep = args.controllers.iter().any(|c| c == p.name);
            if !keep {
                skipped.push(format!("{} (not in --controllers)", p.name));
            }
            keep
        });
    }
    if args.migration_only {
        let (Some(wave), Some(wave_go)) = (
            profiles.iter().find(|p| p.name == "wave"),
            profiles.iter().find(|p| p.name == "wave-go"),
        ) else {
            eprintln!("M2 needs Wave: set WAVE_GO_BIN");
            std::process::exit(1);
        };
        eprintln!("== M2 switching from Wave and back");
        finish_partial(&args, "M2", "m2.json", migration::run(wave, wave_go).await);
    }
    if args.reloader_migration_only {
        let (Some(wave), Some(reloader)) = (
            profiles.iter().find(|p| p.name == "wave"),
            profiles.iter().find(|p| p.name == "reloader"),
        ) else {
            eprintln!("M1 needs Reloader: set RELOADER_BIN");
            std::process::exit(1);
        };
        eprintln!("== M1 switching from Reloader");
        finish_partial(&args, "M1", "m1.json", from_reloader::run(wave, reloader).await);
    }
    if args.history_only {
        let Some(wave) = profiles.iter().find(|p| p.name == "wave") else {
            eprintln!("H1 needs wave's binary: set WAVE_BIN");
            std::process::exit(1);
        };
        eprintln!("== H1 config history at the S1 size");
        finish_partial(&args, "H1", "h1.json", history::run(&args, wave).await);
    }
    if args.scale_only {
        eprintln!("== S10 the scale curve");
        let scale = scale::run(&args, &profiles).await;
        if let Ok(s) = &scale {
            let _ = std::fs::create_dir_all(&args.out);
            if let Err(e) = s.chart(&args.out.join("scale.png")) {
                eprintln!("no chart: {e}");
            }
            eprintln!("{}", s.markdown());
        }
        finish_partial(&args, "S10", "scale.json", scale);
    }
    if args.loadtest_only {
        let suite = run_loadtest(&args, &profiles).await;
        if let Ok(results) = &suite {
            let named: Vec<(&str, loadtest::LoadResult)> =
                results.iter().map(|(n, r)| (n.as_str(), r.clone())).collect();
            eprintln!("{}", loadtest::LoadResult::markdown(&named));
        }
        finish_partial(&args, "L1-L13", "loadtest.json", suite);
    }
    if !args.combine.is_empty() {
        match report::Report::combine(&args.combine) {
            Ok(report) => finish(&args, &report),
            Err(e) => {
                eprintln!("--combine: {e}");
                std::process::exit(1);
            }
        }
        std::process::exit(0);
    }
    if args.chaos_only {
        profiles.clear();
    }
    for s in &skipped {
        eprintln!("skipping {s}");
    }
    let mut results: Vec<(&'static str, Vec<scenarios::ControllerResult>)> =
        profiles.iter().map(|p| (p.name, Vec::new())).collect();
    for round in 0..args.repeat {
        // Alternate the order, so that no controller always runs on a machine warmed by the others.
        let mut order: Vec<usize> = (0..profiles.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let profile = &profiles[i];
            eprintln!(
                "== round {} of {}: {} ({})",
                round + 1,
                args.repeat,
                profile.name,
                profile.bin.display()
            );
            let defaults_pass = round == 0 && !args.skip_defaults_pass;
            match scenarios::run(&args, profile, defaults_pass).await {
                Ok(r) => results[i].1.push(r),
                Err(e) => {
                    eprintln!("{}: {e}", profile.name);
                    std::process::exit(1);
                }
            }
        }
    }
    let chaos = if args.chaos_seconds > 0 {
        eprintln!("== S9 chaos soak (wave, {} s)", args.chaos_seconds);
        match chaos::run(&args).await {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("S9: {e}");
                std::process::exit(1);
            }
        }
    } else {
        None
    };
    let report = report::Report::new(&args, &profiles, results, chaos);
    finish(&args, &report);
    if args.smoke {
        if let Err(e) = report.check_smoke() {
            eprintln!("smoke failed: {e}");
            std::process::exit(1);
        }
        // L1–L13 for a few seconds each: wave ends every workload current.
        match run_loadtest(&args, &profiles).await {
            Ok(results) => {
                let named: Vec<(&str, loadtest::LoadResult)> =
                    results.iter().map(|(n, r)| (n.as_str(), r.clone())).collect();
                println!("{}", loadtest::LoadResult::markdown(&named));
                for (name, r) in results.iter().filter(|(n, _)| n == "wave") {
                    if let Some(s) = r.scenarios.iter().find(|s| s.stale > 0) {
                        eprintln!(
                            "smoke failed: {name} left {} workloads stale in {}",
                            s.stale, s.id
                        );
                        std::process::exit(1);
                    }
                    if r.timed_out {
                        eprintln!("smoke failed: {name}: L1-L13 did not converge");
                        std::process::exit(1);
                    }
                }
            }
            Err(e) => {
                eprintln!("smoke failed: L1-L13: {e}");
                std::process::exit(1);
            }
        }
        // S10 at tiny sizes, so that the scale curve's code runs in CI too.
        match scale::run(&args, &profiles).await {
            Ok(s) => {
                if let Some((name, p)) = s
                    .curves
                    .iter()
                    .flat_map(|(n, c)| c.iter().map(move |p| (n, p)))
                    .find(|(_, p)| !p.survived)
                {
                    eprintln!(
                        "smoke failed: S10 {name} at {} Deployments: {:?}",
                        p.deployments, p.failure
                    );
                    std::process::exit(1);
                }
                println!("{}", s.markdown());
            }
            Err(e) => {
                eprintln!("smoke failed: S10: {e}");
                std::process::exit(1);
            }
        }
    }
    // Do not wait for the runtime to wind down the Deployment watch: the work is done.
    std::process::exit(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_sizes(sizes: &str) -> Args {
        Args::parse_from(["wave-bench", "--scale-sizes", sizes])
    }

    #[test]
    fn scale_sizes_are_deployments_colon_secrets_smallest_first() {
        assert_eq!(
            with_sizes("1000:10000,20000:100000").scale_sizes(),
            Ok(vec![(1000, 10_000), (20_000, 100_000)])
        );
        let err = |s: &str| with_sizes(s).scale_sizes().unwrap_err();
        assert!(err("1000").contains("expected DEPLOYMENTS:UNREFERENCED_SECRETS"));
        assert!(err("1000:many").contains("\"many\" is not a count"));
        assert!(err("5000:1,1000:1").contains("smallest first"));
    }
}
