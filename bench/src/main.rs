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
//! then S9, wave alone: the chaos soak (bench/src/scenarios/chaos.rs); M1 (switching from Reloader,
//! bench/src/scenarios/from_reloader.rs) with --reloader-migration-only; M2 (switching from Wave) with
//! --migration-only; H1 (the cost of config history, bench/src/scenarios/history.rs) with --history-only;
//! S12 (pacing at scale, bench/src/scenarios/pacing.rs) with --pacing-scale-only; R1 (restarting in
//! place against a rolling update, on a real node, bench/src/scenarios/in_place.rs) with --in-place-only
//! then: bench/results/<date>-<commit>.json (every round's raw figures, the median/min/max of each, the
//! versions), latest.json and a PNG chart for a full run with both peers in which nothing failed, and
//! the table printed
//! ```
//!
//! The order is the registry's (bench/src/scenarios/mod.rs, `REGISTRY`); this file turns the command
//! line into each scenario's sizes ([`sizes`]) and is the only one that reads it. The harness every
//! scenario runs on is bench/src/harness/.
//!
//! Peers are optional: `WAVE_GO_BIN` and `RELOADER_BIN` name binaries built outside this repository
//! (docs/benchmarks.md says how). Without them, wave is measured alone and the skipped peers are named.

#![forbid(unsafe_code)]

mod harness;
mod report;
mod scenarios;

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;

use harness::Limits;
use harness::controller::{self, Binaries};
use harness::population::Population;
use scenarios::{Context, Figures, Part, REGISTRY, Run, When};

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
    /// Run only S12, pacing at scale (wave alone: one change to a ConfigMap each of --pacing-fanouts
    /// Deployments use, among --pacing-total); the figures are printed and written to
    /// `<out>/pacing-scale.json`.
    #[arg(long)]
    pub pacing_scale_only: bool,
    /// S12: Deployments in all, the fan-out among them.
    #[arg(long, default_value_t = 20_000)]
    pub pacing_total: usize,
    /// S12: the fan-outs, smallest first, each on a control plane of its own.
    #[arg(long, value_delimiter = ',', default_value = "500,2000,5000")]
    pub pacing_fanouts: Vec<usize>,
    /// S12: wave's --max-concurrent-rollouts.
    #[arg(long, default_value_t = 50)]
    pub pacing_limit: usize,
    /// Run only L1–L13, Stakater Reloader's load-test scenarios, for every controller; the figures are
    /// printed and written to `<out>/loadtest.json`.
    #[arg(long)]
    pub loadtest_only: bool,
    /// L1–L13: how long each scenario's changes go on, in seconds.
    #[arg(long, default_value_t = 30)]
    pub loadtest_seconds: u64,
    /// Run only R1, restarting in place against a rolling update, on a real node (wave alone; needs
    /// root on Linux); the figures are printed and written to `<out>/r1.json`.
    #[arg(long)]
    pub in_place_only: bool,
    /// R1: Deployments (and one StatefulSet), each of --in-place-replicas pods.
    #[arg(long, default_value_t = 10)]
    pub in_place_deployments: usize,
    /// R1: pods of each Deployment and of the StatefulSet.
    #[arg(long, default_value_t = 3)]
    pub in_place_replicas: usize,
    /// R1: config changes per strategy, one at a time.
    #[arg(long, default_value_t = 3)]
    pub in_place_changes: usize,
    /// R1: wave's static binary (`make static`), which the agent's image is made from.
    #[arg(
        long,
        env = "WAVE_STATIC_BIN",
        default_value = "target/x86_64-unknown-linux-gnu/release/wave"
    )]
    pub wave_static_bin: PathBuf,
    /// Run only S6, S7 and S8 (with `--out` elsewhere, so the published results stay whole).
    #[arg(long, conflicts_with = "latency_only")]
    pub safety_only: bool,
    /// Run only S1 and S3 (with `--out` elsewhere): to compare two wave binaries, say.
    #[arg(long)]
    pub latency_only: bool,
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
            self.pacing_total = 200;
            self.pacing_fanouts = vec![50];
            // Fewer slots than the fan-out, so that the line is used.
            self.pacing_limit = 10;
            self.loadtest_seconds = 1;
            self.in_place_deployments = 2;
            self.in_place_replicas = 2;
            self.in_place_changes = 1;
        }
        match self.part() {
            Some(Part::Safety) => {
                self.deployments = 0;
                self.updates = 0;
                self.fanout = 0;
                self.chaos_seconds = 0;
            }
            Some(Part::Latency) => self.chaos_seconds = 0,
            None => {}
        }
        self
    }

    /// The part of the round run alone, if one is.
    fn part(&self) -> Option<Part> {
        Part::from_flags(self.safety_only, self.latency_only)
    }
}

/// Every scenario's sizes, from the command line: the one place that reads `Args` for them.
fn sizes(args: &Args) -> scenarios::Sizes {
    let limits = Limits { smoke: args.smoke };
    let population = Population {
        namespaces: args.namespaces,
        deployments: args.deployments,
        fanout: args.fanout,
        storm_deployments: args.storm_deployments,
        flap_deployments: args.flap_deployments,
        bad_deployments: args.bad_deployments,
    };
    scenarios::Sizes {
        round: scenarios::round::Sizes {
            population,
            updates: args.updates,
            unreferenced: args.unreferenced,
            payload_kib: args.payload_kib.clone(),
            storm_changes: args.storm_changes,
            flap_seconds: args.flap_seconds,
            bad_pacing: args.bad_pacing,
            idle_seconds: args.idle_seconds,
            restart_trials: args.restart_trials,
            limits,
            out: args.out.clone(),
        },
        chaos: scenarios::chaos::Sizes {
            seconds: args.chaos_seconds,
            workloads: args.chaos_workloads,
            fault_every: args.chaos_fault_every,
            seed: args.chaos_seed,
            wave_bin: args.wave_bin.clone(),
        },
        scale: scenarios::scale::Sizes {
            sizes: args.scale_sizes.clone(),
            secret_kib: args.scale_secret_kib,
            memory_ceiling_gib: args.scale_memory_ceiling_gib,
            updates: args.scale_updates,
            idle_seconds: args.scale_idle_seconds,
            namespaces: args.namespaces,
            limits,
        },
        pacing: scenarios::pacing::Sizes {
            total: args.pacing_total,
            fanouts: args.pacing_fanouts.clone(),
            limit: args.pacing_limit,
            namespaces: args.namespaces,
            limits,
        },
        loadtest: scenarios::loadtest::Sizes {
            seconds: args.loadtest_seconds,
            namespaces: args.namespaces,
            limits,
            out: args.out.clone(),
        },
        history: scenarios::history::Sizes {
            population,
            updates: args.updates,
            idle_seconds: args.idle_seconds,
            limits,
        },
        in_place: scenarios::in_place::Sizes {
            deployments: args.in_place_deployments,
            replicas: args.in_place_replicas,
            changes: args.in_place_changes,
            agent_bin: args.wave_static_bin.clone(),
            limits,
            out: args.out.clone(),
        },
    }
}

/// The sizes as the results file records them (`latency_only` only when set, so that files written
/// before it existed still combine with a full run's).
fn recorded_sizes(args: &Args) -> serde_json::Value {
    let mut sizes = json!({
        "namespaces": args.namespaces, "deployments": args.deployments, "updates": args.updates,
        "unreferenced_secrets": args.unreferenced, "payload_kib": args.payload_kib,
        "fanout": args.fanout, "storm_deployments": args.storm_deployments,
        "storm_changes": args.storm_changes, "idle_seconds": args.idle_seconds,
        "flap_deployments": args.flap_deployments, "flap_seconds": args.flap_seconds,
        "chaos_seconds": args.chaos_seconds, "chaos_workloads": args.chaos_workloads,
        "chaos_fault_every": args.chaos_fault_every,
        "bad_deployments": args.bad_deployments, "bad_pacing": args.bad_pacing,
        "safety_only": args.safety_only, "repeat": args.repeat,
        "restart_trials": args.restart_trials,
        "defaults_pass": !args.skip_defaults_pass && !args.chaos_only,
    });
    if args.latency_only {
        sizes["latency_only"] = json!(true);
    }
    sizes
}

/// The scenarios that `--*-only` flags run alone, as the flag and the scenario's registry name.
fn alone(args: &Args) -> Vec<(&'static str, &'static str)> {
    [
        (args.migration_only, "--migration-only", "M2"),
        (args.reloader_migration_only, "--reloader-migration-only", "M1"),
        (args.history_only, "--history-only", "H1"),
        (args.scale_only, "--scale-only", "S10"),
        (args.pacing_scale_only, "--pacing-scale-only", "S12"),
        (args.loadtest_only, "--loadtest-only", "L1-L13"),
        (args.in_place_only, "--in-place-only", "R1"),
    ]
    .into_iter()
    .filter_map(|(given, flag, id)| given.then_some((flag, id)))
    .collect()
}

/// Runs `scenario` (one with control planes of its own) alone: its figures printed and written to
/// `<out>/<file>`, or its error; exits.
async fn run_alone(ctx: &Context, out: &std::path::Path, scenario: &scenarios::Scenario) -> ! {
    let Run::Own {
        run,
        when: When::Alone { file, .. },
        needs,
    } = scenario.run
    else {
        eprintln!("{} does not run alone", scenario.id);
        std::process::exit(2);
    };
    if let Some((names, hint)) = needs
        && !names.iter().all(|n| ctx.profiles.iter().any(|p| p.name == *n))
    {
        eprintln!("{} needs {hint}", scenario.id);
        std::process::exit(1);
    }
    eprintln!("== {} {}", scenario.id, scenario.measures);
    match run(ctx).await {
        Ok(figures) => {
            figures.write_beside(out);
            if let Some(table) = figures.markdown() {
                eprintln!("{table}");
            }
            let text = figures.json();
            let _ = std::fs::create_dir_all(out);
            if let Err(e) = std::fs::write(out.join(file), format!("{text}\n")) {
                eprintln!("writing {file}: {e}");
            }
            println!("{text}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{}: {e}", scenario.id);
            std::process::exit(1);
        }
    }
}

/// Checks that `report` is whole, writes it and prints its tables; exits non-zero when it is not whole,
/// cannot be written, or carries a scenario that failed after the rounds (a run's own, or a part's that
/// no other part measured): its rounds' results are written all the same, since they stand without it.
fn finish(args: &Args, report: &report::Report) {
    if let Err(e) = report.check_complete() {
        eprintln!("incomplete results: {e}");
        std::process::exit(1);
    }
    match report.write(&args.out, args.smoke) {
        Ok(path) => eprintln!("results: {}", path.display()),
        Err(e) => {
            eprintln!("writing the results: {e}");
            std::process::exit(1);
        }
    }
    println!("{}", report.markdown());
    if !report.failed_after_rounds().is_empty() {
        eprintln!(
            "failed after the rounds, and written without them: {}",
            report.failed_after_rounds().join(", ")
        );
        std::process::exit(1);
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse().sized();
    let bins = Binaries {
        wave: args.wave_bin.clone(),
        wave_go: args.wave_go_bin.clone(),
        reloader: args.reloader_bin.clone(),
    };
    let (mut profiles, mut skipped) = controller::profiles(&bins, args.bad_pacing);
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
    let mut ctx = Context {
        profiles,
        sizes: sizes(&args),
    };
    match alone(&args)[..] {
        [] => {}
        [(_, id)] => match scenarios::by_id(id) {
            Some(scenario) => run_alone(&ctx, &args.out, scenario).await,
            None => {
                eprintln!("{id} is not in the registry");
                std::process::exit(2);
            }
        },
        ref several => {
            let flags: Vec<&str> = several.iter().map(|(flag, _)| *flag).collect();
            eprintln!(
                "{}: each runs one scenario alone; give one of them",
                flags.join(", ")
            );
            std::process::exit(2);
        }
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
        // S9 runs wave alone; its binary is still recorded, so that --combine can check it is the
        // build of the rounds it joins.
        ctx.profiles.retain(|p| p.name == "wave");
        if ctx.profiles.is_empty() {
            eprintln!("--chaos-only runs S9, wave alone: set WAVE_BIN, and keep wave in --controllers");
            std::process::exit(2);
        }
    }
    for s in &skipped {
        eprintln!("skipping {s}");
    }
    let profiles: &[controller::Profile] = if args.chaos_only { &[] } else { &ctx.profiles };
    let steps = scenarios::round_steps(args.part());
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
            match scenarios::round::run(&ctx.sizes.round, profile, defaults_pass, &steps).await {
                Ok(r) => results[i].1.push(r),
                Err(e) => {
                    eprintln!("{}: {e}", profile.name);
                    std::process::exit(1);
                }
            }
        }
    }
    // A scenario that fails after the rounds (S9's fault injection, say) is reported and fails the run,
    // but the rounds' results are still written: they took most of the run and stand without it.
    let mut chaos = None;
    let mut failed_after_rounds = Vec::new();
    for scenario in REGISTRY {
        if let Run::Own {
            run,
            when: When::AfterRounds,
            ..
        } = scenario.run
        {
            match run(&ctx).await {
                Ok(Figures::Chaos(c)) => chaos = c,
                Ok(_) => {}
                Err(e) => {
                    eprintln!("{}: {e}", scenario.id);
                    failed_after_rounds.push(scenario.id);
                }
            }
        }
    }
    let report = report::Report::new(recorded_sizes(&args), args.part(), &ctx.profiles, results, chaos)
        .with_failed_after_rounds(&failed_after_rounds);
    finish(&args, &report);
    if args.smoke && !args.chaos_only {
        if let Err(e) = report.check_smoke() {
            eprintln!("smoke failed: {e}");
            std::process::exit(1);
        }
        // L1–L13 for a few seconds each (wave ends every workload current), S10, S12 and R1 at tiny
        // sizes, so that their code runs in CI too.
        for scenario in REGISTRY {
            let Run::Own {
                run,
                when: When::Alone { smoke: true, .. },
                ..
            } = scenario.run
            else {
                continue;
            };
            eprintln!("== {} {}", scenario.id, scenario.measures);
            match run(&ctx).await {
                Ok(figures) => {
                    if let Some(table) = figures.markdown() {
                        println!("{table}");
                    }
                    if let Err(e) = figures.smoke_check() {
                        eprintln!("smoke failed: {e}");
                        std::process::exit(1);
                    }
                }
                Err(e) => {
                    eprintln!("smoke failed: {}: {e}", scenario.id);
                    std::process::exit(1);
                }
            }
        }
    }
    // Do not wait for the runtime to wind down the Deployment watch: the work is done.
    std::process::exit(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chaos_only_part_records_no_defaults_pass_so_a_join_takes_it_from_the_rounds() {
        let sizes = |argv: &[&str]| recorded_sizes(&Args::parse_from(argv));
        assert_eq!(sizes(&["wave-bench"])["defaults_pass"], true);
        assert_eq!(sizes(&["wave-bench", "--chaos-only"])["defaults_pass"], false);
        assert_eq!(
            sizes(&["wave-bench", "--skip-defaults-pass"])["defaults_pass"],
            false
        );
    }
}
