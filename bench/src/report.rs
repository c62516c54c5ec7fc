//! The results: JSON (`<UTC date>-<commit>.json` and `latest.json`), a Markdown table per scenario with
//! the ratio of wave to each peer, and a PNG chart (S1 latency CDF, S2 memory).

use std::path::{Path, PathBuf};
use std::process::Command;

use plotters::prelude::*;
use serde_json::{Value, json};

use crate::Args;
use crate::chaos::ChaosResult;
use crate::scenarios::ControllerResult;

/// One run of every controller.
pub struct Report {
    commit: String,
    machine: String,
    date: String,
    sizes: Value,
    results: Vec<(&'static str, ControllerResult)>,
    chaos: Option<ChaosResult>,
    /// `--safety-only`: only S6–S8 were run.
    safety_only: bool,
}

/// One row of a table: a metric of one scenario for each controller, in run order.
struct Row {
    scenario: &'static str,
    metric: String,
    values: Vec<f64>,
}

impl Report {
    pub fn new(
        args: &Args,
        results: Vec<(&'static str, ControllerResult)>,
        chaos: Option<ChaosResult>,
    ) -> Self {
        Self {
            commit: commit(),
            machine: machine(),
            date: k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%d")
                .to_string(),
            sizes: json!({
                "namespaces": args.namespaces, "deployments": args.deployments, "updates": args.updates,
                "unreferenced_secrets": args.unreferenced, "payload_kib": args.payload_kib,
                "fanout": args.fanout, "storm_deployments": args.storm_deployments,
                "storm_changes": args.storm_changes, "idle_seconds": args.idle_seconds,
                "flap_deployments": args.flap_deployments, "flap_seconds": args.flap_seconds,
                "chaos_seconds": args.chaos_seconds, "chaos_workloads": args.chaos_workloads,
                "chaos_fault_every": args.chaos_fault_every,
                "bad_deployments": args.bad_deployments, "bad_pacing": args.bad_pacing,
                "safety_only": args.safety_only,
            }),
            results,
            chaos,
            safety_only: args.safety_only,
        }
    }

    /// Every controller produced every figure (`make bench-smoke` checks only this).
    pub fn check_complete(&self) -> Result<(), String> {
        for (name, r) in &self.results {
            let missing = [
                (
                    "S1 latencies",
                    r.s1_samples_ms.is_empty() || !r.s1.p99_ms.is_finite(),
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
            ];
            let missing = missing.iter().filter(|(what, _)| {
                !self.safety_only
                    || what.starts_with("S6")
                    || what.starts_with("S7")
                    || what.starts_with("S8")
            });
            if let Some((what, _)) = missing.clone().find(|(_, m)| *m) {
                return Err(format!("{name}: no {what}"));
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

    fn json(&self) -> Value {
        let mut scenarios = json!({});
        for (name, r) in &self.results {
            let v = serde_json::to_value(r).unwrap_or_default();
            let skipped = if self.safety_only { 5 } else { 0 };
            for s in ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"]
                .into_iter()
                .skip(skipped)
            {
                scenarios[s.to_uppercase()][*name] = v[s].clone();
            }
        }
        if let Some(c) = &self.chaos {
            scenarios["S9"]["wave"] = serde_json::to_value(c).unwrap_or_default();
        }
        json!({"commit": self.commit, "machine": self.machine, "date": self.date,
               "sizes": self.sizes, "scenarios": scenarios})
    }

    /// Writes the dated JSON; and, for a full run with both peers, `latest.json` and the chart (a run
    /// of wave alone, or of some scenarios, never replaces the published figures). Returns the dated path.
    pub fn write(&self, args: &Args) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&args.out)?;
        let text = serde_json::to_string_pretty(&self.json())? + "\n";
        let dated = args.out.join(format!("{}-{}.json", self.date, self.commit));
        std::fs::write(&dated, &text)?;
        if self.results.len() < 3 || self.safety_only {
            eprintln!("latest.json and latest.png kept: not a full run with both peers");
            return Ok(dated);
        }
        std::fs::write(args.out.join("latest.json"), &text)?;
        match self.chart(&args.out.join("latest.png")) {
            Ok(()) => {}
            Err(e) => eprintln!("no chart: {e}"),
        }
        Ok(dated)
    }

    /// The figures whose wait gave up, as `controller: scenario`.
    fn timed_out(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, r) in &self.results {
            for (scenario, timed_out) in [
                ("S3", r.s3.timed_out),
                ("S6", r.s6.timed_out),
                ("S7", r.s7.timed_out),
                ("S8", r.s8.timed_out),
            ] {
                if timed_out {
                    out.push(format!("{name}: {scenario}"));
                }
            }
        }
        out
    }

    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut add = |scenario, metric: String, f: &dyn Fn(&ControllerResult) -> f64| {
            rows.push(Row {
                scenario,
                metric,
                values: self.results.iter().map(|(_, r)| f(r)).collect(),
            })
        };
        add("S1", "p50_ms".into(), &|r| r.s1.p50_ms);
        add("S1", "p90_ms".into(), &|r| r.s1.p90_ms);
        add("S1", "p99_ms".into(), &|r| r.s1.p99_ms);
        add("S1", "max_ms".into(), &|r| r.s1.max_ms);
        add("S1", "missed".into(), &|r| r.s1.missed as f64);
        let payloads: Vec<usize> = self
            .results
            .first()
            .map(|(_, r)| r.s2.iter().map(|m| m.payload_kib).collect())
            .unwrap_or_default();
        for (i, kib) in payloads.iter().enumerate() {
            let m = move |r: &ControllerResult| r.s2.get(i).cloned().unwrap_or_default();
            add("S2", format!("peak_rss_mib ({kib} KiB)"), &|r| m(r).peak_rss_mib);
            add("S2", format!("steady_rss_mib ({kib} KiB)"), &|r| {
                m(r).steady_rss_mib
            });
            add("S2", format!("idle_cpu_seconds ({kib} KiB)"), &|r| {
                m(r).idle_cpu_seconds
            });
        }
        add("S3", "all_changed_ms".into(), &|r| r.s3.all_changed_ms);
        add("S3", "changed".into(), &|r| r.s3.changed as f64);
        add("S3", "workload_writes".into(), &|r| r.s3.workload_writes as f64);
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
        add("S7", "replicasets_per_deployment_mean".into(), &|r| {
            r.s7.replicasets_per_deployment_mean
        });
        add("S7", "replicasets_per_deployment_max".into(), &|r| {
            r.s7.replicasets_per_deployment_max as f64
        });
        add("S7", "workload_writes".into(), &|r| r.s7.workload_writes as f64);
        add("S8", "deployments_rolled".into(), &|r| r.s8.rolled as f64);
        add("S8", "deployments_left_broken".into(), &|r| r.s8.broken as f64);
        if self.safety_only {
            rows.retain(|r| ["S6", "S7", "S8"].contains(&r.scenario));
        }
        rows
    }

    /// One table per scenario: each controller's figure and wave ÷ each peer.
    pub fn markdown(&self) -> String {
        let names: Vec<&str> = self.results.iter().map(|(n, _)| *n).collect();
        let peers = &names[1.min(names.len())..];
        let mut out = format!(
            "Commit `{}`, {}, on {}. Sizes: `{}`.\n",
            self.commit, self.date, self.machine, self.sizes
        );
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
                out += &format!(" {} |", figure(*v));
            }
            for i in 1..row.values.len() {
                let ratio = row.values[0] / row.values[i];
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
        let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
            .map_err(|e| format!("no DejaVuSans font for the labels: {e}"))?;
        plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            Box::leak(font.into_boxed_slice()),
        )
        .map_err(|_| "the font cannot be read".to_string())?;
        let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (left, right) = root.split_horizontally(640);
        let colors = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(44, 160, 44),
        ];

        let max_ms = self
            .results
            .iter()
            .map(|(_, r)| r.s1.max_ms)
            .filter(|v| v.is_finite())
            .fold(1.0, f64::max);
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
        for (i, (name, r)) in self.results.iter().enumerate() {
            let mut s = r.s1_samples_ms.clone();
            s.sort_by(f64::total_cmp);
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

        // S2: steady RSS, one group per payload size, one bar per controller.
        let payloads: Vec<usize> = self
            .results
            .first()
            .map(|(_, r)| r.s2.iter().map(|m| m.payload_kib).collect())
            .unwrap_or_default();
        let max_mib = self
            .results
            .iter()
            .flat_map(|(_, r)| r.s2.iter().map(|m| m.peak_rss_mib))
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
        for (i, (name, r)) in self.results.iter().enumerate() {
            let color = colors[i % colors.len()];
            let x = |g: usize| g as f64 + 0.1 + 0.8 * i as f64 / per;
            let w = 0.8 / per * 0.9;
            bars.draw_series(
                r.s2.iter().enumerate().map(|(g, m)| {
                    Rectangle::new([(x(g), 0.0), (x(g) + w, m.steady_rss_mib)], color.filled())
                }),
            )
            .map_err(|e| e.to_string())?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
            bars.draw_series(r.s2.iter().enumerate().map(|(g, m)| {
                Rectangle::new([(x(g), 0.0), (x(g) + w, m.peak_rss_mib)], color.stroke_width(1))
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
