//! The scenarios of docs/benchmarks.md and their registry: one table ([`REGISTRY`]) of every scenario,
//! what it measures and the function that runs it. `main.rs` walks the table; nothing else keeps an
//! order of scenarios.
//!
//! ```text
//! REGISTRY, in order:
//!   steps of every controller's round, on the round's control plane (round.rs): S4 startup, S1 + S3,
//!     S6, S7, S8, the defaults pass, S2 + S5 + S4 idle, S11
//!   then on control planes of their own: S9 (after the rounds), L1-L13, S10, S12 and R1 (alone with
//!     their --*-only flag, and after the report under --smoke), H1, M1, M2 (alone with their flag)
//! ```
//!
//! Each scenario takes its own sizes (`Sizes` in its module), which `main.rs` makes from the command
//! line in one place.

pub mod apiserver;
pub mod bad_config;
pub mod chaos;
pub mod churn;
pub mod from_reloader;
pub mod history;
pub mod in_place;
pub mod latency;
pub mod loadtest;
pub mod memory;
pub mod migration;
pub mod pacing;
pub mod round;
pub mod scale;

use futures::future::LocalBoxFuture;

use crate::harness::controller::Profile;
use crate::harness::{Error, nan_if_null};

pub use round::{ControllerResult, DefaultsPass};

/// One scenario of the benchmark.
pub struct Scenario {
    /// Its name in docs/benchmarks.md and in the results (`S1` … `S12`, `L1-L13`, `H1`, `M1`, `M2`).
    pub id: &'static str,
    /// What it measures, in a few words (printed as it starts, when it runs on control planes of its
    /// own, except S9, which prints its own line with its length).
    pub measures: &'static str,
    pub run: Run,
}

/// Where and when a scenario runs.
pub enum Run {
    /// A step of every controller's round, on the round's control plane, in the table's order.
    /// `parts`: the parts of the round that run it alone (`--safety-only`, `--latency-only`).
    Round {
        step: round::Step,
        parts: &'static [Part],
    },
    /// On control planes of its own.
    Own {
        run: OwnRun,
        when: When,
        /// The controllers it cannot run without, and what to set when one is missing.
        needs: Option<(&'static [&'static str], &'static str)>,
    },
}

/// A part of the round run alone, with the start-up before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `--safety-only`: S6, S7 and S8.
    Safety,
    /// `--latency-only`: S1, S3 and S1L.
    Latency,
}

impl Part {
    /// The part the flags `--safety-only` and `--latency-only` (or a results file's sizes) name.
    pub fn from_flags(safety_only: bool, latency_only: bool) -> Option<Part> {
        if safety_only {
            Some(Part::Safety)
        } else if latency_only {
            Some(Part::Latency)
        } else {
            None
        }
    }

    /// The scenarios whose figures the part gives (as the report names them).
    pub fn scenarios(self) -> &'static [&'static str] {
        match self {
            Part::Safety => &["S6", "S7", "S8"],
            Part::Latency => &["S1", "S3", "S1L"],
        }
    }
}

/// When a scenario with control planes of its own runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// After the rounds, its figures part of the report (S9).
    AfterRounds,
    /// Alone with its `--*-only` flag, its figures written to `<out>/<file>`; also after the report
    /// under `--smoke` when `smoke` (it then checks its own figures).
    Alone { file: &'static str, smoke: bool },
}

/// Runs a scenario with control planes of its own.
pub type OwnRun = for<'c> fn(&'c Context) -> LocalBoxFuture<'c, Result<Figures, Error>>;

/// What a scenario with control planes of its own is given: the controllers to run and every
/// scenario's sizes.
pub struct Context {
    pub profiles: Vec<Profile>,
    pub sizes: Sizes,
}

impl Context {
    /// The profile named `name`.
    fn profile(&self, name: &str) -> Result<&Profile, Error> {
        self.profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("no {name} binary was given"))
    }
}

/// Every scenario's sizes, made by `main.rs` from the command line.
pub struct Sizes {
    pub round: round::Sizes,
    pub chaos: chaos::Sizes,
    pub scale: scale::Sizes,
    pub pacing: pacing::Sizes,
    pub loadtest: loadtest::Sizes,
    pub history: history::Sizes,
    pub in_place: in_place::Sizes,
}

/// The figures of a scenario with control planes of its own.
pub enum Figures {
    /// S9; `None` when `--chaos-seconds 0` skipped it.
    Chaos(Option<chaos::ChaosResult>),
    Scale(scale::ScaleResult),
    PacingScale(pacing::PacingScale),
    /// Per controller, in run order.
    Loadtest(Vec<(String, loadtest::LoadResult)>),
    History(history::HistoryCost),
    FromReloader(from_reloader::Migration),
    FromWave(migration::Migration),
    InPlace(in_place::Comparison),
}

impl Figures {
    /// The figures as pretty JSON (what `<out>/<file>` holds).
    pub fn json(&self) -> String {
        let text = match self {
            Figures::Chaos(c) => serde_json::to_string_pretty(c),
            Figures::Scale(s) => serde_json::to_string_pretty(s),
            Figures::PacingScale(p) => serde_json::to_string_pretty(p),
            Figures::Loadtest(l) => serde_json::to_string_pretty(l),
            Figures::History(h) => serde_json::to_string_pretty(h),
            Figures::FromReloader(m) => serde_json::to_string_pretty(m),
            Figures::FromWave(m) => serde_json::to_string_pretty(m),
            Figures::InPlace(r) => serde_json::to_string_pretty(r),
        };
        text.unwrap_or_default()
    }

    /// A table of the figures, where the scenario has one.
    pub fn markdown(&self) -> Option<String> {
        match self {
            Figures::Scale(s) => Some(s.markdown()),
            Figures::PacingScale(p) => Some(p.markdown()),
            Figures::InPlace(r) => Some(r.markdown()),
            Figures::Loadtest(l) => {
                let named: Vec<(&str, loadtest::LoadResult)> =
                    l.iter().map(|(n, r)| (n.as_str(), r.clone())).collect();
                Some(loadtest::LoadResult::markdown(&named))
            }
            _ => None,
        }
    }

    /// Writes what goes beside `<out>/<file>` (S10's chart).
    pub fn write_beside(&self, out: &std::path::Path) {
        if let Figures::Scale(s) = self {
            let _ = std::fs::create_dir_all(out);
            if let Err(e) = s.chart(&out.join("scale.png")) {
                eprintln!("no chart: {e}");
            }
        }
    }

    /// Under `--smoke`: what is wrong with the figures, if anything.
    pub fn smoke_check(&self) -> Result<(), String> {
        match self {
            Figures::Loadtest(l) => loadtest::smoke_check(l),
            Figures::Scale(s) => s.smoke_check(),
            Figures::PacingScale(p) => p.smoke_check(),
            Figures::InPlace(r) => r.smoke_check(),
            _ => Ok(()),
        }
    }
}

/// Every scenario, in the order they run.
pub static REGISTRY: &[Scenario] = &[
    Scenario {
        id: "S4",
        measures: "API cost at start-up: requests until ready and every workload hashed",
        run: Run::Round {
            step: round::startup,
            parts: &[Part::Safety, Part::Latency],
        },
    },
    Scenario {
        id: "S1, S3",
        measures: "latency of one change at a time (and S4's cost per change); fan-out of one Secret",
        run: Run::Round {
            step: round::spread,
            parts: &[Part::Latency],
        },
    },
    Scenario {
        id: "S1L",
        measures: "S1 again while a second client writes and LISTs at a fixed rate (latency under load)",
        run: Run::Round {
            step: round::under_load,
            parts: &[Part::Latency],
        },
    },
    Scenario {
        id: "S6",
        measures: "a storm: rollouts from changes in a burst",
        run: Run::Round {
            step: round::storm,
            parts: &[Part::Safety],
        },
    },
    Scenario {
        id: "S7",
        measures: "flapping: rollouts from a change every second",
        run: Run::Round {
            step: round::flap,
            parts: &[Part::Safety],
        },
    },
    Scenario {
        id: "S8",
        measures: "bad config: Deployments rolled onto it and left broken",
        run: Run::Round {
            step: round::bad_config,
            parts: &[Part::Safety],
        },
    },
    Scenario {
        id: "defaults",
        measures: "S1 and S3 at the shipped defaults (first round), or S8's held-back writes",
        run: Run::Round {
            step: round::defaults,
            parts: &[],
        },
    },
    Scenario {
        id: "S2, S5",
        measures: "memory with unreferenced Secrets per payload size; a restart; S4 idle",
        run: Run::Round {
            step: round::memory,
            parts: &[],
        },
    },
    Scenario {
        id: "S11",
        measures: "apiserver restarts: time from /readyz to a change handled",
        run: Run::Round {
            step: round::apiserver_restart,
            parts: &[],
        },
    },
    Scenario {
        id: "S9",
        measures: "chaos soak",
        run: Run::Own {
            run: chaos::run_registered,
            when: When::AfterRounds,
            needs: None,
        },
    },
    Scenario {
        id: "L1-L13",
        measures: "Stakater Reloader's load-test scenarios",
        run: Run::Own {
            run: loadtest::run_registered,
            when: When::Alone {
                file: "loadtest.json",
                smoke: true,
            },
            needs: None,
        },
    },
    Scenario {
        id: "S10",
        measures: "the scale curve",
        run: Run::Own {
            run: scale::run_registered,
            when: When::Alone {
                file: "scale.json",
                smoke: true,
            },
            needs: None,
        },
    },
    Scenario {
        id: "S12",
        measures: "pacing at scale: one change to a ConfigMap a fan-out of the S10 size uses, paced",
        run: Run::Own {
            run: pacing::run_registered,
            when: When::Alone {
                file: "pacing-scale.json",
                smoke: true,
            },
            needs: Some((&["wave"], "wave's binary: set WAVE_BIN")),
        },
    },
    Scenario {
        id: "R1",
        measures: "restarting in place against a rolling update, on the real node",
        run: Run::Own {
            run: in_place::run_registered,
            when: When::Alone {
                file: "r1.json",
                smoke: true,
            },
            needs: Some((&["wave"], "wave's binary: set WAVE_BIN")),
        },
    },
    Scenario {
        id: "H1",
        measures: "config history at the S1 size",
        run: Run::Own {
            run: history::run_registered,
            when: When::Alone {
                file: "h1.json",
                smoke: false,
            },
            needs: Some((&["wave"], "wave's binary: set WAVE_BIN")),
        },
    },
    Scenario {
        id: "M1",
        measures: "switching from Reloader",
        run: Run::Own {
            run: from_reloader::run_registered,
            when: When::Alone {
                file: "m1.json",
                smoke: false,
            },
            needs: Some((&["wave", "reloader"], "Reloader: set RELOADER_BIN")),
        },
    },
    Scenario {
        id: "M2",
        measures: "switching from Wave and back",
        run: Run::Own {
            run: migration::run_registered,
            when: When::Alone {
                file: "m2.json",
                smoke: false,
            },
            needs: Some((&["wave", "wave-go"], "Wave: set WAVE_GO_BIN")),
        },
    },
];

/// The round's steps, in the registry's order; of a part run alone, only those marked for it.
pub fn round_steps(part: Option<Part>) -> Vec<round::Step> {
    round_scenarios(part).map(|(_, step)| step).collect()
}

fn round_scenarios(part: Option<Part>) -> impl Iterator<Item = (&'static str, round::Step)> {
    REGISTRY.iter().filter_map(move |s| match s.run {
        Run::Round { step, parts } if part.is_none_or(|p| parts.contains(&p)) => Some((s.id, step)),
        _ => None,
    })
}

/// The scenario named `id`.
pub fn by_id(id: &str) -> Option<&'static Scenario> {
    REGISTRY.iter().find(|s| s.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_has_its_own_name() {
        let mut ids: Vec<&str> = REGISTRY.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), REGISTRY.len());
    }

    #[test]
    fn a_part_run_alone_runs_the_start_up_and_its_own_steps() {
        let ids = |part| round_scenarios(part).map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(Some(Part::Safety)), ["S4", "S6", "S7", "S8"]);
        assert_eq!(ids(Some(Part::Latency)), ["S4", "S1, S3", "S1L"]);
        assert_eq!(
            ids(None),
            [
                "S4", "S1, S3", "S1L", "S6", "S7", "S8", "defaults", "S2, S5", "S11"
            ]
        );
        assert_eq!(round_steps(Some(Part::Latency)).len(), 3);
    }

    #[test]
    fn each_alone_scenario_writes_a_file_of_its_own() {
        let mut files: Vec<&str> = REGISTRY
            .iter()
            .filter_map(|s| match s.run {
                Run::Own {
                    when: When::Alone { file, .. },
                    ..
                } => Some(file),
                _ => None,
            })
            .collect();
        let n = files.len();
        files.sort_unstable();
        files.dedup();
        assert_eq!((n, files.len()), (7, 7));
    }
}
