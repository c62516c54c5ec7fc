//! The results: JSON (`<UTC date>-<commit>.json` and `latest.json`) with every round's raw figures, the
//! median, min and max of each figure across rounds, and the versions measured; a Markdown table per
//! scenario with the ratio of wave's median to each peer's; and a PNG chart (S1 latency CDF, S2 memory).

use std::path::{Path, PathBuf};
use std::process::Command;

use plotters::prelude::*;
use serde::Serialize;
use serde_json::{Value, json};

use crate::harness::controller::{self, Profile};
use crate::harness::stats::median;
use crate::scenarios::chaos::ChaosResult;
use crate::scenarios::{ControllerResult, Part};

/// S9's sizes: a combined report takes them from the one file that holds S9.
const CHAOS_SIZES: [&str; 3] = ["chaos_seconds", "chaos_workloads", "chaos_fault_every"];

/// Whether a size says what one run did besides its rounds, not how a round measures: how many rounds,
/// whether its first round had the defaults pass, and S9 (which runs once, after the rounds). Results
/// files that differ only in these may be combined.
fn is_per_run_size(key: &str) -> bool {
    matches!(key, "repeat" | "defaults_pass") || CHAOS_SIZES.contains(&key)
}

/// The scenarios that failed after the rounds in a results file. A file written before the driver
/// recorded them says so only by its sizes and figures: S9 asked for and no S9 figures.
fn failed_in(v: &Value) -> Vec<String> {
    match v["failed_after_rounds"].as_array() {
        Some(ids) => ids
            .iter()
            .map(|id| id.as_str().unwrap_or("unknown").to_string())
            .collect(),
        None if v["S9"].is_null() && v["sizes"]["chaos_seconds"].as_u64().is_some_and(|s| s > 0) => {
            vec!["S9".to_string()]
        }
        None => Vec::new(),
    }
}

/// Every round of every controller.
pub struct Report {
    commit: String,
    machine: String,
    date: String,
    sizes: Value,
    versions: Value,
    /// Per controller, in run order (wave first): one result per round.
    results: Vec<(&'static str, Vec<ControllerResult>)>,
    /// The limit each controller cannot turn off, if any.
    fixed_limits: Vec<(&'static str, String)>,
    /// `--combine`: the results files this report was made from (file name, commit, date, rounds).
    sources: Vec<Value>,
    chaos: Option<ChaosResult>,
    /// The scenarios run after the rounds (S9) that failed: recorded, so that the results file shows
    /// it tried and failed rather than reading as a run that never tried (`"S9": null` either way).
    failed_after_rounds: Vec<String>,
    /// `--safety-only` or `--latency-only`: only that part of the round was run.
    part: Option<Part>,
}

/// One figure over the rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Rounds that produced the figure.
    pub rounds: usize,
}

impl Spread {
    /// Over the finite values; NaN everywhere when there are none.
    fn of(values: &[f64]) -> Spread {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        Spread {
            median: median(&finite),
            min: finite.iter().copied().fold(f64::NAN, f64::min),
            max: finite.iter().copied().fold(f64::NAN, f64::max),
            rounds: finite.len(),
        }
    }

    /// `median` alone, or `median (min–max)` when the rounds differ.
    fn cell(&self) -> String {
        if self.rounds > 1 && self.min != self.max {
            format!(
                "{} ({}–{})",
                figure(self.median),
                figure(self.min),
                figure(self.max)
            )
        } else {
            figure(self.median)
        }
    }
}

/// One row of a table: a metric of one scenario for each controller, in run order.
struct Row {
    scenario: &'static str,
    metric: String,
    values: Vec<Spread>,
}

impl Report {
    /// A run's report: `sizes` are the run's sizes as the results file records them.
    pub fn new(
        sizes: serde_json::Value,
        part: Option<Part>,
        profiles: &[Profile],
        results: Vec<(&'static str, Vec<ControllerResult>)>,
        chaos: Option<ChaosResult>,
    ) -> Self {
        Self {
            commit: commit(),
            machine: machine(),
            date: k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%d")
                .to_string(),
            sizes,
            versions: versions(profiles),
            results,
            fixed_limits: profiles
                .iter()
                .filter_map(|p| Some((p.name, p.fixed_limit?.to_string())))
                .collect(),
            sources: Vec::new(),
            chaos,
            failed_after_rounds: Vec::new(),
            part,
        }
    }

    /// Records the scenarios that failed after the rounds: such a report is written, but never as
    /// `latest.json`, and a report combined from it carries them.
    pub fn with_failed_after_rounds(mut self, ids: &[&str]) -> Self {
        self.failed_after_rounds = ids.iter().map(|id| id.to_string()).collect();
        self
    }

    /// The scenarios that failed after the rounds, and have no figures from another part.
    pub fn failed_after_rounds(&self) -> &[String] {
        &self.failed_after_rounds
    }

    /// Every round of every controller produced every figure.
    pub fn check_complete(&self) -> Result<(), String> {
        for (name, runs) in &self.results {
            for (round, r) in runs.iter().enumerate() {
                let missing = [
                    (
                        "S1 latencies",
                        r.s1.samples.is_empty() || !r.s1.p99_ms.is_finite(),
                    ),
                    (
                        "S2 memory",
                        r.s2.is_empty() || r.s2.iter().any(|m| m.peak_rss_mib <= 0.0),
                    ),
                    ("S3 fan-out", r.s3.changed == 0),
                    ("S4 API cost", r.s4.startup_requests == 0),
                    ("S5 readiness", r.s5.ready_ms <= 0.0),
                    ("S6 storm", !r.s6.replicasets_per_deployment_mean.is_finite()),
                    ("S7 flapping", r.s7.changes == 0),
                    ("S8 bad config", r.s8.deployments == 0),
                    ("S8 within its wait", r.s8.timed_out),
                    (
                        "S11 apiserver restart",
                        r.s11.samples_ms.is_empty() && !r.s11.timed_out,
                    ),
                ];
                let missing = missing.iter().filter(|(what, _)| {
                    self.part
                        .is_none_or(|p| p.scenarios().iter().any(|s| what.split(' ').next() == Some(s)))
                });
                if let Some((what, _)) = missing.clone().find(|(_, m)| *m) {
                    return Err(format!("{name} (round {}): no {what}", round + 1));
                }
            }
        }
        if let Some(c) = &self.chaos {
            // S9's targets are failures, not figures: a lost or repeated rollout fails the run.
            let failed = [
                ("S9 settled within 120 s", c.timed_out),
                ("S9 injected at least one fault", c.faults.is_empty()),
                ("S9 lost no change", c.lost_changes > 0),
                ("S9 repeated no rollout", c.repeated_rollouts > 0),
            ];
            if let Some((what, _)) = failed.iter().find(|(_, f)| *f) {
                return Err(format!("wave: not {what}: {c:?}"));
            }
        }
        Ok(())
    }

    /// What `make bench-smoke` holds every run to, beyond a complete set of figures: no wait gave up,
    /// no S1 update was missed, S3 changed every Deployment; and for wave, no write on a restart with
    /// nothing changed and no more than one ReplicaSet per change in the storm.
    pub fn check_smoke(&self) -> Result<(), String> {
        let timed_out = self.timed_out();
        if !timed_out.is_empty() {
            return Err(format!("waits gave up: {}", timed_out.join(", ")));
        }
        for (name, runs) in &self.results {
            for (round, r) in runs.iter().enumerate() {
                let at = format!("{name} (round {})", round + 1);
                let passes = std::iter::once(("", &r.s1, &r.s3))
                    .chain(r.defaults.iter().map(|d| (" at defaults", &d.s1, &d.s3)));
                for (pass, s1, s3) in passes {
                    if s1.missed > 0 {
                        return Err(format!("{at}: S1{pass} missed {} updates", s1.missed));
                    }
                    if s3.changed < s3.deployments {
                        return Err(format!(
                            "{at}: S3{pass} changed {} of {} Deployments",
                            s3.changed, s3.deployments
                        ));
                    }
                }
                match &r.s1_under_load {
                    None => return Err(format!("{at}: no S1L")),
                    Some(l) if l.s1.missed > 0 => {
                        return Err(format!("{at}: S1L missed {} updates", l.s1.missed));
                    }
                    Some(l) if l.writes_done_per_s <= 0.0 || l.lists_done_per_s <= 0.0 => {
                        return Err(format!("{at}: S1L ran without its load"));
                    }
                    Some(_) => {}
                }
                if *name != "wave" {
                    continue;
                }
                let Some(own) = &r.s1.own else {
                    return Err(format!("{at}: S1 without wave's own steps"));
                };
                let histograms = [
                    ("router lag", &own.router_lag),
                    ("queue wait", &own.queue_wait),
                    ("reconcile", &own.reconcile),
                    ("Secret GET", &own.secret_get),
                    ("workload patch", &own.workload_patch),
                    ("change to patch", &own.change_to_patch),
                ];
                if let Some((step, _)) = histograms.iter().find(|(_, h)| h.count == 0) {
                    return Err(format!("{at}: wave's own {step} counted nothing over S1"));
                }
                if r.s5.workload_writes > 0 {
                    return Err(format!(
                        "{at}: {} workload writes on a restart with nothing changed",
                        r.s5.workload_writes
                    ));
                }
                if r.s6.replicasets_per_deployment_max > r.s6.changes as u64 {
                    return Err(format!(
                        "{at}: S6 made {} ReplicaSets for one Deployment from {} changes",
                        r.s6.replicasets_per_deployment_max, r.s6.changes
                    ));
                }
            }
        }
        Ok(())
    }

    fn json(&self) -> Value {
        let mut summary = json!({});
        for row in self.rows() {
            for ((name, _), spread) in self.results.iter().zip(&row.values) {
                summary[row.scenario][&row.metric][*name] = serde_json::to_value(spread).unwrap_or_default();
            }
        }
        let mut runs = json!({});
        for (name, rounds) in &self.results {
            runs[*name] = serde_json::to_value(rounds).unwrap_or_default();
        }
        let fixed_limits: serde_json::Map<String, Value> = self
            .fixed_limits
            .iter()
            .map(|(n, l)| (n.to_string(), json!(l)))
            .collect();
        let mut out = json!({"commit": self.commit, "machine": self.machine, "date": self.date,
               "sizes": self.sizes, "versions": self.versions, "fixed_limits": fixed_limits,
               "timed_out": self.timed_out(), "summary": summary, "runs": runs,
               "S9": self.chaos, "failed_after_rounds": self.failed_after_rounds});
        if !self.sources.is_empty() {
            out["sources"] = json!(self.sources);
        }
        out
    }

    /// `--combine`: one report from the rounds of several dated results files, so that a full run
    /// (three rounds of three controllers, over five hours) can be made a controller or a round at a
    /// time and still be read as one. The files must agree on what was measured and how: the same
    /// sizes (those of `is_per_run_size` aside), machine, Kubernetes, kwok and toolchains; and each
    /// controller's rounds must all come from one binary (its SHA-256), so that no median mixes two
    /// builds. A full run holds one defaults pass per controller and one S9, so the combined report
    /// has the defaults pass if any file has it, and the chaos sizes of the file that holds S9. A
    /// scenario that failed after the rounds in a file is carried, with the sizes of the first such
    /// file, unless another file holds its figures: two S9 figures are refused, a failed S9 and a
    /// passed one give the passed one's, and the failed one's file is named.
    pub fn combine(paths: &[PathBuf]) -> Result<Report, String> {
        let mut first: Option<(String, Value)> = None;
        let mut results: Vec<(&'static str, Vec<ControllerResult>)> = Vec::new();
        let mut binaries = serde_json::Map::new();
        let mut fixed_limits: Vec<(&'static str, String)> = Vec::new();
        let mut chaos = None;
        let mut sources = Vec::new();
        let mut commits: Vec<String> = Vec::new();
        let mut date = String::new();
        let mut defaults_pass = false;
        let mut chaos_run_sizes: Option<Value> = None;
        let mut failed_after_rounds: Vec<String> = Vec::new();
        for path in paths {
            let file = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("{file}: not JSON: {e}"))?;
            let same = |key: &str, v: &Value| {
                let mut v = v.pointer(key).cloned().unwrap_or(Value::Null);
                if let Some(sizes) = v.as_object_mut() {
                    sizes.retain(|k, _| !is_per_run_size(k));
                }
                v
            };
            match &first {
                None => first = Some((file.clone(), v.clone())),
                Some((first_file, f)) => {
                    for key in [
                        "/sizes",
                        "/machine",
                        "/versions/kubernetes",
                        "/versions/kwok",
                        "/versions/rustc",
                        "/versions/go",
                    ] {
                        if same(key, f) != same(key, &v) {
                            return Err(format!(
                                "{file} and {first_file} differ in {key} ({} and {}): their rounds \
                                 did not measure the same thing",
                                same(key, &v),
                                same(key, f)
                            ));
                        }
                    }
                }
            }
            let Some(runs) = v["runs"].as_object() else {
                return Err(format!("{file}: no \"runs\": not a results file of wave-bench"));
            };
            let mut rounds = json!({});
            for (name, rs) in runs {
                let Some(name) = controller::NAMES.iter().copied().find(|n| n == name) else {
                    return Err(format!("{file}: unknown controller {name:?}"));
                };
                let rs: Vec<ControllerResult> = serde_json::from_value(rs.clone())
                    .map_err(|e| format!("{file}: {name}'s rounds: {e}"))?;
                let binary = &v["versions"]["controllers"][name];
                one_build(&mut binaries, name, binary, &format!("{file}: {name}'s rounds"))?;
                if let Some(limit) = v["fixed_limits"][name].as_str()
                    && !fixed_limits.iter().any(|(n, _)| *n == name)
                {
                    fixed_limits.push((name, limit.to_string()));
                }
                rounds[name] = json!(rs.len());
                match results.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, all)) => all.extend(rs),
                    None => results.push((name, rs)),
                }
            }
            if !v["S9"].is_null() {
                // S9 runs wave: its binary must be the rounds' too.
                let wave = &v["versions"]["controllers"]["wave"];
                one_build(&mut binaries, "wave", wave, &format!("{file}: S9"))?;
                if chaos.is_some() {
                    return Err(format!("{file}: a second S9: combine at most one chaos soak"));
                }
                chaos =
                    Some(serde_json::from_value(v["S9"].clone()).map_err(|e| format!("{file}: S9: {e}"))?);
                chaos_run_sizes = Some(v["sizes"].clone());
            }
            let failed = failed_in(&v);
            for id in &failed {
                if id == "S9" && chaos_run_sizes.is_none() {
                    // The chaos sizes say what the failed soak tried, not 0 as if none was run.
                    chaos_run_sizes = Some(v["sizes"].clone());
                }
                if !failed_after_rounds.contains(id) {
                    failed_after_rounds.push(id.clone());
                }
            }
            defaults_pass |= v["sizes"]["defaults_pass"].as_bool().unwrap_or(false);
            let commit = v["commit"].as_str().unwrap_or("unknown").to_string();
            let file_date = v["date"].as_str().unwrap_or_default().to_string();
            date = date.max(file_date.clone());
            if !commits.contains(&commit) {
                commits.push(commit.clone());
            }
            let name = path.file_name().map(|n| n.to_string_lossy().to_string());
            let mut source = json!({"file": name, "commit": commit, "date": file_date, "rounds": rounds});
            if !failed.is_empty() {
                source["failed_after_rounds"] = json!(failed);
            }
            sources.push(source);
        }
        if chaos.is_some() {
            // A soak that failed in one part and passed in another (run again with `--chaos-only`)
            // has its figures; the failed attempt stays named in `sources` and in the printed report.
            failed_after_rounds.retain(|id| id != "S9");
        }
        let Some((_, first)) = first else {
            return Err("--combine: no results files given".into());
        };
        results.sort_by_key(|(name, _)| controller::NAMES.iter().position(|n| n == name));
        let order = |(n, _): &(&str, String)| controller::NAMES.iter().position(|m| m == n);
        fixed_limits.sort_by_key(order);
        let mut sizes = first["sizes"].clone();
        sizes["repeat"] = json!(results.iter().map(|(_, r)| r.len()).max().unwrap_or(0));
        sizes["defaults_pass"] = json!(defaults_pass);
        for key in CHAOS_SIZES {
            sizes[key] = chaos_run_sizes.as_ref().map_or(json!(0), |s| s[key].clone());
        }
        let mut versions = first["versions"].clone();
        versions["controllers"] = Value::Object(binaries);
        Ok(Report {
            commit: commits.join("+"),
            machine: first["machine"].as_str().unwrap_or("unknown").to_string(),
            date,
            part: Part::from_flags(
                sizes["safety_only"].as_bool().unwrap_or(false),
                sizes["latency_only"].as_bool().unwrap_or(false),
            ),
            sizes,
            versions,
            results,
            fixed_limits,
            sources,
            chaos,
            failed_after_rounds,
        })
    }

    /// Writes the dated JSON; and, for a full run with both peers in which nothing failed after the
    /// rounds, `latest.json` and the chart (a run of wave alone, or of some scenarios, never replaces
    /// the published figures). Returns the dated path.
    pub fn write(&self, out: &Path, smoke: bool) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(out)?;
        let text = serde_json::to_string_pretty(&self.json())? + "\n";
        let dated = out.join(format!("{}-{}.json", self.date, self.commit));
        std::fs::write(&dated, &text)?;
        if self.results.len() < 3 || self.part.is_some() || smoke {
            eprintln!("latest.json and latest.png kept: not a full run with both peers");
            return Ok(dated);
        }
        if !self.failed_after_rounds.is_empty() {
            eprintln!(
                "latest.json and latest.png kept: {} failed",
                self.failed_after_rounds.join(", ")
            );
            return Ok(dated);
        }
        std::fs::write(out.join("latest.json"), &text)?;
        match self.chart(&out.join("latest.png")) {
            Ok(()) => {}
            Err(e) => eprintln!("no chart: {e}"),
        }
        Ok(dated)
    }

    /// The figures whose wait gave up, as `controller (round N): scenario`.
    fn timed_out(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, runs) in &self.results {
            for (round, r) in runs.iter().enumerate() {
                let defaults_s3 = r.defaults.as_ref().is_some_and(|d| d.s3.timed_out);
                for (scenario, timed_out) in [
                    ("S3", r.s3.timed_out),
                    ("S6", r.s6.timed_out),
                    ("S7", r.s7.timed_out),
                    ("S8", r.s8.timed_out),
                    ("S11", r.s11.timed_out),
                    ("S3 at defaults", defaults_s3),
                ] {
                    if timed_out {
                        out.push(format!("{name} (round {}): {scenario}", round + 1));
                    }
                }
            }
        }
        if self.chaos.as_ref().is_some_and(|c| c.timed_out) {
            out.push("wave: S9".into());
        }
        out
    }

    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut add = |scenario, metric: String, f: &dyn Fn(&ControllerResult) -> f64| {
            rows.push(Row {
                scenario,
                metric,
                values: self
                    .results
                    .iter()
                    .map(|(_, runs)| Spread::of(&runs.iter().map(f).collect::<Vec<f64>>()))
                    .collect(),
            })
        };
        add("S1", "p50_ms".into(), &|r| r.s1.p50_ms);
        add("S1", "p90_ms".into(), &|r| r.s1.p90_ms);
        add("S1", "p99_ms".into(), &|r| r.s1.p99_ms);
        add("S1", "max_ms".into(), &|r| r.s1.max_ms);
        add("S1", "missed".into(), &|r| r.s1.missed as f64);
        add("S1", "not_sent".into(), &|r| r.s1.not_sent as f64);
        add("S1", "cpu_seconds".into(), &|r| {
            r.s1.cpu_seconds.unwrap_or(f64::NAN)
        });
        let loaded = |f: fn(&crate::scenarios::latency::UnderLoad) -> f64| {
            move |r: &ControllerResult| r.s1_under_load.as_ref().map_or(f64::NAN, f)
        };
        add("S1L", "p50_ms".into(), &loaded(|l| l.s1.p50_ms));
        add("S1L", "p99_ms".into(), &loaded(|l| l.s1.p99_ms));
        add("S1L", "missed".into(), &loaded(|l| l.s1.missed as f64));
        add("S1L", "not_sent".into(), &loaded(|l| l.s1.not_sent as f64));
        add(
            "S1L",
            "cpu_seconds".into(),
            &loaded(|l| l.s1.cpu_seconds.unwrap_or(f64::NAN)),
        );
        add(
            "S1L",
            "load_writes_per_s".into(),
            &loaded(|l| l.writes_done_per_s),
        );
        add("S1L", "load_lists_per_s".into(), &loaded(|l| l.lists_done_per_s));
        let payloads: Vec<usize> = self
            .results
            .iter()
            .flat_map(|(_, runs)| runs.first())
            .next()
            .map(|r| r.s2.iter().map(|m| m.payload_kib).collect())
            .unwrap_or_default();
        for (i, kib) in payloads.iter().enumerate() {
            let m = move |r: &ControllerResult| r.s2.get(i).cloned().unwrap_or_default();
            add("S2", format!("peak_rss_mib ({kib} KiB)"), &|r| m(r).peak_rss_mib);
            add("S2", format!("steady_rss_mib ({kib} KiB)"), &|r| {
                m(r).steady_rss_mib
            });
            add("S2", format!("go_heap_inuse_mib ({kib} KiB)"), &|r| {
                m(r).go_heap_inuse_mib.unwrap_or(f64::NAN)
            });
            add("S2", format!("idle_cpu_seconds ({kib} KiB)"), &|r| {
                m(r).idle_cpu_seconds
            });
        }
        add("S3", "all_changed_ms".into(), &|r| r.s3.all_changed_ms);
        add("S3", "changed".into(), &|r| r.s3.changed as f64);
        add("S3", "workload_writes".into(), &|r| r.s3.workload_writes as f64);
        add("S3", "refused_writes".into(), &|r| r.s3.refused_writes as f64);
        add("S3", "cpu_seconds".into(), &|r| {
            r.s3.cpu_seconds.unwrap_or(f64::NAN)
        });
        add("S4", "startup_requests".into(), &|r| r.s4.startup_requests as f64);
        add("S4", "per_change_requests".into(), &|r| r.s4.per_change_requests);
        add("S4", "per_change_workload_writes".into(), &|r| {
            r.s4.per_change_workload_writes
        });
        add("S4", "idle_requests_per_minute".into(), &|r| {
            r.s4.idle_requests_per_minute
        });
        add("S5", "workload_writes".into(), &|r| r.s5.workload_writes as f64);
        add("S5", "ready_ms".into(), &|r| r.s5.ready_ms);
        add("S6", "replicasets_per_deployment_mean".into(), &|r| {
            r.s6.replicasets_per_deployment_mean
        });
        add("S6", "replicasets_per_deployment_max".into(), &|r| {
            r.s6.replicasets_per_deployment_max as f64
        });
        add("S6", "workload_writes".into(), &|r| r.s6.workload_writes as f64);
        add("S6", "refused_writes".into(), &|r| r.s6.refused_writes as f64);
        add("S7", "replicasets_per_deployment_mean".into(), &|r| {
            r.s7.replicasets_per_deployment_mean
        });
        add("S7", "replicasets_per_deployment_max".into(), &|r| {
            r.s7.replicasets_per_deployment_max as f64
        });
        add("S7", "workload_writes".into(), &|r| r.s7.workload_writes as f64);
        add("S8", "deployments_rolled".into(), &|r| r.s8.rolled as f64);
        add("S8", "deployments_left_broken".into(), &|r| r.s8.broken as f64);
        add("S11", "after_readyz_median_ms".into(), &|r| r.s11.median_ms);
        add("S11", "after_readyz_max_ms".into(), &|r| r.s11.max_ms);
        let defaults = |f: fn(&crate::scenarios::DefaultsPass) -> f64| {
            move |r: &ControllerResult| r.defaults.as_ref().map_or(f64::NAN, f)
        };
        add("Defaults", "S1 p50_ms".into(), &defaults(|d| d.s1.p50_ms));
        add("Defaults", "S1 p99_ms".into(), &defaults(|d| d.s1.p99_ms));
        add("Defaults", "S1 missed".into(), &defaults(|d| d.s1.missed as f64));
        add(
            "Defaults",
            "S3 all_changed_ms".into(),
            &defaults(|d| d.s3.all_changed_ms),
        );
        add(
            "Defaults",
            "S3 changed".into(),
            &defaults(|d| d.s3.changed as f64),
        );
        if let Some(part) = self.part {
            rows.retain(|r| part.scenarios().contains(&r.scenario));
        }
        rows.retain(|r| r.values.iter().any(|v| v.rounds > 0));
        rows
    }

    /// One table per scenario: each controller's median (with min–max over the rounds) and wave's
    /// median ÷ each peer's.
    pub fn markdown(&self) -> String {
        let names: Vec<&str> = self.results.iter().map(|(n, _)| *n).collect();
        let peers = &names[1.min(names.len())..];
        let rounds: Vec<String> = self
            .results
            .iter()
            .map(|(n, r)| format!("{n} {}", r.len()))
            .collect();
        let mut out = format!(
            "Commit `{}`, {}, on {}. Sizes: `{}`.\nRounds: {}. Each figure is the median over the rounds, \
             with (min–max) where they differ.\n",
            self.commit,
            self.date,
            self.machine,
            self.sizes,
            rounds.join(", ")
        );
        for (name, limit) in &self.fixed_limits {
            out += &format!("{name} is limited by {limit}.\n");
        }
        let mut current = "";
        let rows = if names.is_empty() { Vec::new() } else { self.rows() };
        for row in rows {
            if row.scenario != current {
                current = row.scenario;
                out += &format!("\n**{current}**\n\n| metric | {} |", names.join(" | "));
                for p in peers {
                    out += &format!(" wave ÷ {p} |");
                }
                out += &format!("\n|---|{}\n", "---|".repeat(names.len() + peers.len()));
            }
            out += &format!("| {} |", row.metric);
            for v in &row.values {
                out += &format!(" {} |", v.cell());
            }
            for i in 1..row.values.len() {
                let ratio = row.values[0].median / row.values[i].median;
                out += &format!(
                    " {} |",
                    if ratio.is_finite() {
                        format!("{ratio:.2}")
                    } else {
                        "–".into()
                    }
                );
            }
            out += "\n";
        }
        let timed_out = self.timed_out();
        if !timed_out.is_empty() {
            out += &format!("\n**Timed out** (partial figures): {}\n", timed_out.join(", "));
        }
        if !self.failed_after_rounds.is_empty() {
            out += &format!(
                "\n**Failed after the rounds** (no figures): {}\n",
                self.failed_after_rounds.join(", ")
            );
        }
        for source in &self.sources {
            if let Some(failed) = source["failed_after_rounds"].as_array() {
                let failed: Vec<&str> = failed.iter().filter_map(Value::as_str).collect();
                let superseded = failed
                    .iter()
                    .all(|s| !self.failed_after_rounds.iter().any(|f| f == s));
                out += &format!(
                    "\n{} failed after the rounds in `{}`{}.\n",
                    failed.join(", "),
                    source["file"].as_str().unwrap_or("unknown"),
                    if superseded {
                        "; the figures below are from a part in which it passed"
                    } else {
                        ""
                    }
                );
            }
        }
        if let Some(c) = &self.chaos {
            out += &format!(
                "\n**S9** (wave alone, {} s, {} workloads)\n\n| metric | wave |\n|---|---|\n",
                c.seconds, c.workloads
            );
            for (fault, n) in &c.faults {
                out += &format!("| fault: {fault} | {n} |\n");
            }
            for (metric, v) in [
                ("faults survived", u64::from(c.faults_survived)),
                ("changes applied", c.changes_applied),
                ("workload writes", c.workload_writes),
                ("lost changes", c.lost_changes as u64),
                ("repeated rollouts", c.repeated_rollouts),
                ("replica restarts", u64::from(c.replica_restarts)),
            ] {
                out += &format!("| {metric} | {v} |\n");
            }
            if c.timed_out {
                out += "| timed out settling | yes |\n";
            }
        }
        out
    }

    fn chart(&self, path: &Path) -> Result<(), String> {
        register_font()?;
        let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (left, right) = root.split_horizontally(640);
        let colors = COLORS;

        // Every round's S1 samples, pooled.
        let pooled: Vec<Vec<f64>> = self
            .results
            .iter()
            .map(|(_, runs)| {
                let mut s: Vec<f64> = runs
                    .iter()
                    .flat_map(|r| r.s1.samples.iter().filter_map(|x| x.ms))
                    .collect();
                s.sort_by(f64::total_cmp);
                s
            })
            .collect();
        let max_ms = pooled.iter().flat_map(|s| s.last()).copied().fold(1.0, f64::max);
        let mut cdf = ChartBuilder::on(&left)
            .caption("S1: config change → template changed (CDF)", ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((0.5f64..max_ms * 1.5).log_scale(), 0f64..1f64)
            .map_err(|e| e.to_string())?;
        cdf.configure_mesh()
            .x_desc("latency (ms, log scale)")
            .y_desc("fraction of updates")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, ((name, _), s)) in self.results.iter().zip(&pooled).enumerate() {
            let n = s.len().max(1) as f64;
            let color = colors[i % colors.len()];
            cdf.draw_series(LineSeries::new(
                s.iter()
                    .enumerate()
                    .map(|(k, v)| (v.max(0.5), (k + 1) as f64 / n)),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        cdf.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| e.to_string())?;

        // S2: the median steady RSS over the rounds, one group per payload size, one bar per controller.
        let memory: Vec<Vec<(f64, f64)>> = self
            .results
            .iter()
            .map(|(_, runs)| {
                let sizes = runs.first().map_or(0, |r| r.s2.len());
                (0..sizes)
                    .map(|g| {
                        let of = |f: fn(&crate::scenarios::memory::Memory) -> f64| {
                            median(&runs.iter().filter_map(|r| r.s2.get(g).map(f)).collect::<Vec<_>>())
                        };
                        (of(|m| m.steady_rss_mib), of(|m| m.peak_rss_mib))
                    })
                    .collect()
            })
            .collect();
        let payloads: Vec<usize> = self
            .results
            .first()
            .and_then(|(_, runs)| runs.first())
            .map(|r| r.s2.iter().map(|m| m.payload_kib).collect())
            .unwrap_or_default();
        let max_mib = memory
            .iter()
            .flat_map(|m| m.iter().map(|(_, peak)| *peak))
            .fold(1.0, f64::max);
        let groups = payloads.len().max(1) as f64;
        let per = self.results.len().max(1) as f64;
        let mut bars = ChartBuilder::on(&right)
            .caption(
                "S2: resident memory with unreferenced Secrets",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..groups, 0f64..max_mib * 1.15)
            .map_err(|e| e.to_string())?;
        bars.configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("steady RSS (MiB); outline: peak")
            .draw()
            .map_err(|e| e.to_string())?;
        bars.draw_series(payloads.iter().enumerate().map(|(g, kib)| {
            Text::new(
                format!("{kib} KiB Secrets"),
                (g as f64 + 0.35, max_mib * 1.08),
                ("sans-serif", 16),
            )
        }))
        .map_err(|e| e.to_string())?;
        for (i, ((name, _), m)) in self.results.iter().zip(&memory).enumerate() {
            let color = colors[i % colors.len()];
            let x = |g: usize| g as f64 + 0.1 + 0.8 * i as f64 / per;
            let w = 0.8 / per * 0.9;
            bars.draw_series(
                m.iter().enumerate().map(|(g, (steady, _))| {
                    Rectangle::new([(x(g), 0.0), (x(g) + w, *steady)], color.filled())
                }),
            )
            .map_err(|e| e.to_string())?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
            bars.draw_series(m.iter().enumerate().map(|(g, (_, peak))| {
                Rectangle::new([(x(g), 0.0), (x(g) + w, *peak)], color.stroke_width(1))
            }))
            .map_err(|e| e.to_string())?;
        }
        bars.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    }
}

/// One color per controller, in run order (wave, Wave, Reloader), in every chart.
pub const COLORS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];

/// Makes the system's DejaVu Sans the charts' "sans-serif" (plotters draws text with ab_glyph).
pub fn register_font() -> Result<(), String> {
    static FONT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    FONT.get_or_init(|| {
        let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
            .map_err(|e| format!("no DejaVuSans font for the labels: {e}"))?;
        plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            Box::leak(font.into_boxed_slice()),
        )
        .map_err(|_| "the font cannot be read".to_string())
    })
    .clone()
}

fn figure(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let short = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{short}-dirty") } else { short }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{cores} cores ({model}), {mem_gib:.0} GiB")
}

/// Records `binary` as `name`'s in a join, or refuses it when another file of the join measured
/// another build of `name` (their SHA-256 differ), so that no median mixes two builds. A file
/// written before its part recorded the binary (`null`) has nothing to check. `what` names the
/// figures, for the error.
fn one_build(
    binaries: &mut serde_json::Map<String, Value>,
    name: &str,
    binary: &Value,
    what: &str,
) -> Result<(), String> {
    if binary.is_null() {
        return Ok(());
    }
    match binaries.get(name) {
        Some(seen) if seen["sha256"] != binary["sha256"] => Err(format!(
            "{what}: {name}'s binary ({}) is not the one of the other files ({}): combine only \
             one build of each controller",
            binary["sha256"], seen["sha256"]
        )),
        _ => {
            binaries.insert(name.to_string(), binary.clone());
            Ok(())
        }
    }
}

/// What was measured with what: Kubernetes and kwok (from the control plane's own binaries), the
/// toolchains, and each controller binary's file name and SHA-256 (never its path on this machine).
fn versions(profiles: &[Profile]) -> Value {
    let first_line = |cmd: &mut Command| {
        cmd.output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "unknown".into())
    };
    let bin_dir = first_line(Command::new(testenv::repo_root().join("hack/testenv")).arg("build"));
    let bin = |name: &str| Path::new(&bin_dir).join(name);
    let mut controllers = json!({});
    for p in profiles {
        controllers[p.name] = json!({
            "binary": p.bin.file_name().map(|n| n.to_string_lossy().to_string()),
            "sha256": controller::sha256_file(&p.bin).unwrap_or_else(|e| format!("unreadable: {e}")),
        });
    }
    json!({
        "kubernetes": first_line(Command::new(bin("kube-apiserver")).arg("--version")),
        "kwok": first_line(Command::new(bin("kwok")).arg("--version")),
        "rustc": first_line(Command::new("rustc").arg("--version")),
        "go": first_line(Command::new("go").arg("version")),
        "controllers": controllers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::metrics;
    use crate::scenarios::churn::Storm;
    use crate::scenarios::latency::{FanOut, Latency, LatencySample, OwnSteps, UnderLoad};

    /// A report of one wave round that passes every smoke check: S1 all seen with wave's own steps
    /// counted, S3 whole, no restart write, one ReplicaSet per change at most.
    fn healthy() -> Report {
        let counted = metrics::Quantiles {
            count: 2,
            ..Default::default()
        };
        let r = ControllerResult {
            s1: Latency {
                samples: vec![LatencySample {
                    kind: "configmap".into(),
                    ms: Some(10.0),
                    ..Default::default()
                }],
                own: Some(OwnSteps {
                    router_lag: counted.clone(),
                    queue_wait: counted.clone(),
                    reconcile: counted.clone(),
                    secret_get: counted.clone(),
                    workload_patch: counted.clone(),
                    change_to_patch: counted,
                }),
                ..Default::default()
            },
            s3: FanOut {
                deployments: 5,
                changed: 5,
                ..Default::default()
            },
            s6: Storm {
                changes: 3,
                replicasets_per_deployment_max: 2,
                ..Default::default()
            },
            s1_under_load: Some(UnderLoad {
                writes_done_per_s: 48.0,
                lists_done_per_s: 5.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        Report {
            commit: "c".into(),
            machine: "m".into(),
            date: "d".into(),
            sizes: json!({}),
            versions: json!({}),
            results: vec![("wave", vec![r])],
            fixed_limits: Vec::new(),
            sources: Vec::new(),
            failed_after_rounds: Vec::new(),
            chaos: None,
            part: None,
        }
    }

    #[test]
    fn a_spread_is_the_median_min_and_max_of_the_finite_rounds() {
        let s = Spread::of(&[3.0, f64::NAN, 1.0, 10.0]);
        assert_eq!((s.median, s.min, s.max, s.rounds), (3.0, 1.0, 10.0, 3));
        assert_eq!(Spread::of(&[2.0, 4.0]).median, 3.0);
        assert!(Spread::of(&[f64::NAN]).median.is_nan());
        assert_eq!(Spread::of(&[1.5, 2.5, 2.0]).cell(), "2 (1.50–2.50)");
        assert_eq!(Spread::of(&[7.0]).cell(), "7");
    }

    #[test]
    fn the_smoke_check_passes_a_healthy_round() {
        assert_eq!(healthy().check_smoke(), Ok(()));
    }

    #[test]
    fn the_smoke_check_fails_on_a_timeout_a_missed_update_or_own_step_a_partial_fan_out_a_restart_write_and_a_storm()
     {
        type Break = fn(&mut ControllerResult);
        let breaks: [(&str, Break); 10] = [
            ("waits gave up: wave (round 1): S11", |r| r.s11.timed_out = true),
            ("S1 without wave's own steps", |r| r.s1.own = None),
            ("wave's own Secret GET counted nothing", |r| {
                if let Some(own) = &mut r.s1.own {
                    own.secret_get.count = 0;
                }
            }),
            ("S1 missed 1 updates", |r| {
                r.s1.missed = 1;
            }),
            ("S3 changed 4 of 5", |r| r.s3.changed = 4),
            ("no S1L", |r| r.s1_under_load = None),
            ("S1L missed 2 updates", |r| {
                if let Some(l) = &mut r.s1_under_load {
                    l.s1.missed = 2;
                }
            }),
            ("S1L ran without its load", |r| {
                if let Some(l) = &mut r.s1_under_load {
                    l.lists_done_per_s = 0.0;
                }
            }),
            ("1 workload writes on a restart", |r| {
                r.s5.workload_writes = 1;
            }),
            ("S6 made 4 ReplicaSets for one Deployment from 3 changes", |r| {
                r.s6.replicasets_per_deployment_max = 4;
            }),
        ];
        for (expected, break_it) in breaks {
            let mut report = healthy();
            break_it(&mut report.results[0].1[0]);
            let err = report.check_smoke().expect_err(expected);
            assert!(err.contains(expected), "{err:?} does not say {expected:?}");
        }
    }

    #[test]
    fn a_peer_may_write_on_restart_without_failing_the_smoke() {
        let mut report = healthy();
        report.results[0].0 = "reloader";
        report.results[0].1[0].s5.workload_writes = 3;
        assert_eq!(report.check_smoke(), Ok(()));
    }

    /// Writes `report` as a results file of a run of `name` whose binary has `sha`, in `dir`.
    fn results_file(dir: &Path, file: &str, name: &'static str, sha: &str, sizes: Value) -> PathBuf {
        let mut report = healthy();
        report.results[0].0 = name;
        report.results[0].1[0].s1.p99_ms = f64::NAN;
        report.sizes = sizes;
        report.versions = json!({"kubernetes": "v1", "controllers": {name: {"sha256": sha}}});
        let path = dir.join(file);
        std::fs::write(&path, report.json().to_string()).unwrap();
        path
    }

    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wave-bench-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn combining_results_files_pools_each_controllers_rounds_wave_first() {
        let dir = scratch("combine");
        let sizes = |repeat: u32, defaults_pass: bool| json!({"deployments": 10, "repeat": repeat, "defaults_pass": defaults_pass, "chaos_seconds": 0});
        let files = [
            results_file(&dir, "a.json", "reloader", "r1", sizes(1, true)),
            results_file(&dir, "b.json", "wave", "w1", sizes(2, false)),
            results_file(&dir, "c.json", "wave", "w1", sizes(1, false)),
        ];
        let report = Report::combine(&files).unwrap();
        let rounds: Vec<(&str, usize)> = report.results.iter().map(|(n, r)| (*n, r.len())).collect();
        assert_eq!(rounds, [("wave", 2), ("reloader", 1)]);
        assert_eq!(report.sizes["repeat"], 2);
        assert_eq!(
            report.sizes["defaults_pass"], true,
            "a run whose first round had the defaults pass joins runs without it, as in one full run"
        );
        assert_eq!(report.sizes["deployments"], 10);
        assert_eq!(report.sizes["chaos_seconds"], 0, "no file held an S9");
        assert_eq!(report.sources.len(), 3);
        assert!(
            report.results[0].1[0].s1.p99_ms.is_nan(),
            "a figure not measured stays unmeasured"
        );
        assert_eq!(report.versions["controllers"]["reloader"]["sha256"], "r1");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn combining_refuses_two_builds_of_one_controller_and_rounds_of_different_sizes() {
        let dir = scratch("refuse");
        let sizes = json!({"deployments": 10});
        let one = results_file(&dir, "one.json", "wave", "w1", sizes.clone());
        let rebuilt = results_file(&dir, "rebuilt.json", "wave", "w2", sizes);
        let smaller = results_file(&dir, "smaller.json", "wave", "w1", json!({"deployments": 5}));
        let err = |files: &[PathBuf]| Report::combine(files).err().unwrap_or_default();
        assert!(err(&[one.clone(), rebuilt]).contains("combine only one build of each controller"));
        assert!(err(&[one, smaller]).contains("differ in /sizes"));
        assert!(err(&[]).contains("no results files"));
        assert!(err(&[dir.join("absent.json")]).contains("absent.json"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_failed_soak_is_recorded_carried_through_combine_and_never_published_as_latest() {
        let dir = scratch("failed-soak");
        let sizes = |chaos_seconds: u32| json!({"deployments": 10, "chaos_seconds": chaos_seconds});
        let rounds = results_file(&dir, "rounds.json", "wave", "w1", sizes(0));
        let mut failed = healthy().with_failed_after_rounds(&["S9"]);
        failed.sizes = sizes(600);
        failed.versions = json!({"kubernetes": "v1", "controllers": {"wave": {"sha256": "w1"}}});
        let failed_file = dir.join("failed.json");
        std::fs::write(&failed_file, failed.json().to_string()).unwrap();
        let text = std::fs::read_to_string(&failed_file).unwrap();
        assert!(text.contains(r#""failed_after_rounds":["S9"]"#), "{text}");

        let mut combined = Report::combine(&[rounds, failed_file]).unwrap();
        assert_eq!(combined.failed_after_rounds, ["S9"]);
        assert_eq!(
            combined.sizes["chaos_seconds"], 600,
            "the sizes say what the failed soak tried, not that none ran"
        );
        assert!(
            combined
                .markdown()
                .contains("**Failed after the rounds** (no figures): S9")
        );
        assert!(
            combined
                .markdown()
                .contains("S9 failed after the rounds in `failed.json`.\n"),
            "no other part gave its figures"
        );

        // Even a report with all three controllers keeps the published figures.
        let round = combined.results[0].1[0].clone();
        combined.results = vec![
            ("wave", vec![round.clone()]),
            ("wave-go", vec![round.clone()]),
            ("reloader", vec![round]),
        ];
        let out = dir.join("out");
        combined.write(&out, false).unwrap();
        assert!(!out.join("latest.json").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_soak_that_failed_in_one_part_and_passed_in_another_gives_the_passed_figures_and_names_the_failed_part()
     {
        let dir = scratch("soak-again");
        let versions = json!({"kubernetes": "v1", "controllers": {"wave": {"sha256": "w1"}}});
        let mut failed = healthy().with_failed_after_rounds(&["S9"]);
        failed.sizes = json!({"deployments": 10, "chaos_seconds": 600});
        failed.versions = versions.clone();
        let mut passed = healthy();
        passed.results = Vec::new();
        passed.sizes = json!({"deployments": 10, "chaos_seconds": 300});
        passed.versions = versions;
        passed.chaos = Some(ChaosResult {
            seconds: 300,
            ..Default::default()
        });
        let (failed_file, passed_file) = (dir.join("failed.json"), dir.join("passed.json"));
        std::fs::write(&failed_file, failed.json().to_string()).unwrap();
        std::fs::write(&passed_file, passed.json().to_string()).unwrap();

        for files in [[&failed_file, &passed_file], [&passed_file, &failed_file]] {
            let combined = Report::combine(&files.map(PathBuf::clone)).unwrap();
            assert!(combined.failed_after_rounds().is_empty());
            assert_eq!(combined.chaos.as_ref().map(|c| c.seconds), Some(300));
            assert_eq!(
                combined.sizes["chaos_seconds"], 300,
                "the sizes of the soak with figures"
            );
            let failed_source: Vec<&Value> = combined
                .sources
                .iter()
                .filter(|s| !s["failed_after_rounds"].is_null())
                .collect();
            assert_eq!(failed_source.len(), 1);
            assert_eq!(failed_source[0]["file"], "failed.json");
            assert!(
                combined
                    .markdown()
                    .contains("S9 failed after the rounds in `failed.json`; the figures below are from a part in which it passed")
            );
            assert!(!combined.markdown().contains("**Failed after the rounds**"));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_soak_part_from_another_wave_build_than_the_rounds_is_refused_in_either_order() {
        let dir = scratch("soak-other-build");
        let rounds = results_file(&dir, "rounds.json", "wave", "w1", json!({"deployments": 10}));
        let soak = |sha: Option<&str>| {
            let mut part = healthy();
            part.results = Vec::new();
            part.sizes = json!({"deployments": 10, "chaos_seconds": 300});
            part.versions = match sha {
                Some(sha) => json!({"kubernetes": "v1", "controllers": {"wave": {"sha256": sha}}}),
                None => json!({"kubernetes": "v1", "controllers": {}}),
            };
            part.chaos = Some(ChaosResult::default());
            let path = dir.join(format!("soak-{}.json", sha.unwrap_or("unrecorded")));
            std::fs::write(&path, part.json().to_string()).unwrap();
            path
        };
        let (other, same, unrecorded) = (soak(Some("w2")), soak(Some("w1")), soak(None));

        let err = Report::combine(&[rounds.clone(), other.clone()]).err().unwrap();
        assert!(err.contains("soak-w2.json: S9: wave's binary"), "{err}");
        let err = Report::combine(&[other, rounds.clone()]).err().unwrap();
        assert!(err.contains("rounds.json: wave's rounds: wave's binary"), "{err}");
        for soak in [same, unrecorded] {
            for files in [[&rounds, &soak], [&soak, &rounds]] {
                let combined = Report::combine(&files.map(PathBuf::clone)).unwrap();
                assert!(combined.chaos.is_some());
                assert_eq!(combined.versions["controllers"]["wave"]["sha256"], "w1");
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_results_file_from_before_the_record_reads_as_a_failed_soak_when_s9_was_asked_for_and_has_no_figures()
    {
        let asked = json!({"sizes": {"chaos_seconds": 600}, "S9": null});
        assert_eq!(failed_in(&asked), ["S9"]);
        let not_asked = json!({"sizes": {"chaos_seconds": 0}, "S9": null});
        assert!(failed_in(&not_asked).is_empty());
        let measured = json!({"sizes": {"chaos_seconds": 600}, "S9": {"seconds": 600}});
        assert!(failed_in(&measured).is_empty());
        let recorded = json!({"sizes": {"chaos_seconds": 600}, "S9": null, "failed_after_rounds": []});
        assert!(
            failed_in(&recorded).is_empty(),
            "the record, where there is one, is what counts"
        );
    }
}
