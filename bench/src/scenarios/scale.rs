//! S10, the scale curve: each controller at growing sizes, each size on a fresh control plane, until
//! the size it does not survive within the memory ceiling (16 GiB by default).
//!
//! ```text
//! for each controller, for each size (Deployments : unreferenced 4 KiB Secrets), smallest first:
//!   testenv up --audit ─► populate (S1's objects at that size, replicas 0) + unreferenced Secrets
//!   ─► start (a watchdog SIGKILLs it past the ceiling) ─► ready ─► every workload checked
//!   ─► S1 (50 updates) ─► idle window: RSS ─► testenv down
//!   a size it did not survive ends its curve: larger sizes are not tried
//! then: <out>/scale.json and <out>/scale.png (memory and start-up time against size, one line each)
//! ```
//!
//! Deployments have `replicas: 0` here: 20,000 pods would measure kwok and the scheduler on 2 cores,
//! not the controller. "Checked" is every workload hashed for the controllers that hash at start (wave,
//! Wave), and ready (a ConfigMap and a Secret change handled) for Reloader, which writes nothing at start.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use plotters::prelude::*;
use serde::Serialize;

use futures::future::LocalBoxFuture;

use super::latency::{self, spread_and_fan_out};
use super::memory::{self, idle_window};
use super::{Context, Figures};
use crate::harness::Limits;
use crate::harness::audit;
use crate::harness::controller::{self, Profile, Running};
use crate::harness::population::{Population, S1Pods, fill_unreferenced, populate};
use crate::harness::session::{Session, cluster_dir};
use crate::harness::wait::{TemplateChanges, probe_ready, wait_all_hashed, wait_settled};

/// What S10 runs.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// As DEPLOYMENTS:UNREFERENCED_SECRETS, smallest first (`--scale-sizes`, checked by [`parse_sizes`]).
    pub sizes: Vec<String>,
    /// The unreferenced Secrets' payload, in KiB.
    pub secret_kib: usize,
    /// A controller whose RSS passes this is killed, and the size counts as not survived.
    pub memory_ceiling_gib: u64,
    /// S1 updates at each size.
    pub updates: usize,
    /// The idle window for steady RSS at each size, in seconds.
    pub idle_seconds: u64,
    /// The namespaces S1's Deployments are spread over.
    pub namespaces: usize,
    pub limits: Limits,
}

/// S10 as [`super::REGISTRY`] runs it: every controller of `ctx`.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move { run(&ctx.sizes.scale, &ctx.profiles).await.map(Figures::Scale) })
}

/// `--scale-sizes`, parsed and checked to grow.
pub fn parse_sizes(sizes: &[String]) -> Result<Vec<(usize, usize)>, String> {
    let sizes = sizes
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

/// One controller at one size.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScalePoint {
    pub deployments: usize,
    pub unreferenced_secrets: usize,
    /// It ran through every step within the memory ceiling and every limit.
    pub survived: bool,
    /// Why it did not.
    pub failure: Option<String>,
    pub peak_rss_mib: f64,
    pub steady_rss_mib: f64,
    pub go_heap_inuse_mib: Option<f64>,
    /// From its start until every workload was checked.
    pub checked_ms: f64,
    /// Requests from its start until every workload was checked.
    pub startup_requests: u64,
    pub s1_p99_ms: f64,
    pub s1_missed: usize,
}

/// Every controller's curve.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScaleResult {
    pub secret_kib: usize,
    pub memory_ceiling_gib: u64,
    pub curves: Vec<(String, Vec<ScalePoint>)>,
}

/// Runs the curve for every profile.
pub async fn run(sizes: &Sizes, profiles: &[Profile]) -> Result<ScaleResult, String> {
    let points = parse_sizes(&sizes.sizes)?;
    let mut result = ScaleResult {
        secret_kib: sizes.secret_kib,
        memory_ceiling_gib: sizes.memory_ceiling_gib,
        curves: Vec::new(),
    };
    for profile in profiles {
        let mut curve = Vec::new();
        for &(deployments, unreferenced) in &points {
            eprintln!(
                "== S10 {}: {deployments} Deployments, {unreferenced} unreferenced Secrets",
                profile.name
            );
            let point = at_size(sizes, profile, deployments, unreferenced).await?;
            eprintln!(
                "  {}: peak {:.0} MiB, checked in {:.1} s, {} requests, S1 p99 {:.0} ms",
                if point.survived {
                    "survived"
                } else {
                    "did not survive"
                },
                point.peak_rss_mib,
                point.checked_ms / 1000.0,
                point.startup_requests,
                point.s1_p99_ms
            );
            let survived = point.survived;
            curve.push(point);
            if !survived {
                break;
            }
        }
        result.curves.push((profile.name.to_string(), curve));
    }
    Ok(result)
}

/// One size for one controller, on a control plane of its own. An error of the benchmark itself (the
/// control plane, populating) is an `Err`; anything the controller did wrong is a point that did not
/// survive.
async fn at_size(
    sizes: &Sizes,
    profile: &Profile,
    deployments: usize,
    unreferenced: usize,
) -> Result<ScalePoint, String> {
    let dir = cluster_dir(&format!("s10-{}-{deployments}", profile.name));
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit", "--nodes", "1"]);
    let at = At {
        population: Population {
            namespaces: sizes.namespaces,
            deployments,
            ..Population::default()
        },
        spread: latency::Sizes {
            namespaces: sizes.namespaces,
            deployments,
            updates: sizes.updates.min(deployments),
            fanout: 0,
            limits: sizes.limits,
        },
        idle: memory::Idle {
            seconds: sizes.idle_seconds,
            unreferenced,
        },
    };
    let result = measure(sizes, &at, profile, &cluster).await;
    cluster.stop();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// One size: the objects, S1 at it, and the idle window.
struct At {
    population: Population,
    spread: latency::Sizes,
    idle: memory::Idle,
}

async fn measure(
    sizes: &Sizes,
    at: &At,
    profile: &Profile,
    cluster: &testenv::Cluster,
) -> Result<ScalePoint, String> {
    let session = Session::new(cluster, profile).await;
    let (client, kubeconfig, log) = (&session.client, &session.kubeconfig, &session.log);
    let t = Instant::now();
    populate(client, &at.population, profile, S1Pods::None).await?;
    fill_unreferenced(client, at.idle.unreferenced, sizes.secret_kib).await?;
    wait_settled(client, None, sizes.limits).await?;
    eprintln!("  populated in {:.0?}", t.elapsed());
    let mut changes = TemplateChanges::start(client).await?;
    let mut point = ScalePoint {
        deployments: at.population.deployments,
        unreferenced_secrets: at.idle.unreferenced,
        s1_p99_ms: f64::NAN,
        checked_ms: f64::NAN,
        ..Default::default()
    };

    let started = Timestamp::now();
    let t0 = Instant::now();
    let mut running = Running::start(profile, kubeconfig, log).map_err(|e| format!("starting: {e}"))?;
    let over = watchdog(running.pid(), sizes.memory_ceiling_gib << 30);
    let steps = async {
        probe_ready(client, &mut changes, &mut running, sizes.limits).await?;
        if profile.hashes_at_start {
            wait_all_hashed(client, &at.population, sizes.limits).await?;
        }
        point.checked_ms = t0.elapsed().as_secs_f64() * 1000.0;
        point.startup_requests = audit::total(&session.cost(started, Timestamp::now()));
        wait_settled(client, None, sizes.limits).await?;
        let cost = |from, to| session.cost(from, to);
        let spread = spread_and_fan_out(
            &at.spread,
            client,
            &mut changes,
            &cost,
            "v",
            latency::Probe::default(),
        )
        .await?;
        point.s1_p99_ms = spread.s1.p99_ms;
        point.s1_missed = spread.s1.missed;
        let memory = idle_window(&mut running, profile, at.idle, sizes.secret_kib).await?;
        point.peak_rss_mib = memory.peak_rss_mib;
        point.steady_rss_mib = memory.steady_rss_mib;
        point.go_heap_inuse_mib = memory.go_heap_inuse_mib;
        Ok::<(), String>(())
    };
    match steps.await {
        Ok(()) => point.survived = point.s1_missed == 0,
        Err(e) if over.load(Ordering::Relaxed) => {
            point.failure = Some(format!(
                "RSS passed {} GiB and it was killed ({e})",
                sizes.memory_ceiling_gib
            ));
            point.peak_rss_mib = (sizes.memory_ceiling_gib << 10) as f64;
        }
        Err(e) => point.failure = Some(e),
    }
    if point.s1_missed > 0 && point.failure.is_none() {
        point.failure = Some(format!("S1 missed {} updates", point.s1_missed));
    }
    if let Some((_, hwm)) = controller::rss(running.pid()).filter(|_| point.peak_rss_mib == 0.0) {
        point.peak_rss_mib = hwm as f64 / (1024.0 * 1024.0);
    }
    running.stop();
    Ok(point)
}

/// SIGKILLs `pid` once its RSS passes `ceiling` bytes; the flag says it did. Ends with the process.
fn watchdog(pid: u32, ceiling: u64) -> Arc<AtomicBool> {
    let over = Arc::new(AtomicBool::new(false));
    let flag = over.clone();
    std::thread::spawn(move || {
        while let Some((rss, _)) = controller::rss(pid) {
            if rss > ceiling {
                flag.store(true, Ordering::Relaxed);
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    over
}

impl ScaleResult {
    /// Under `--smoke`: every controller survived every size.
    pub fn smoke_check(&self) -> Result<(), String> {
        match self
            .curves
            .iter()
            .flat_map(|(n, c)| c.iter().map(move |p| (n, p)))
            .find(|(_, p)| !p.survived)
        {
            Some((name, p)) => Err(format!(
                "S10 {name} at {} Deployments: {:?}",
                p.deployments, p.failure
            )),
            None => Ok(()),
        }
    }

    /// One table: a row per controller and size.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "| controller | Deployments | unreferenced {} KiB Secrets | survived | peak RSS MiB | steady RSS MiB | Go heap MiB | checked s | start-up requests | S1 p99 ms |\n|---|---|---|---|---|---|---|---|---|---|\n",
            self.secret_kib
        );
        for (name, curve) in &self.curves {
            for p in curve {
                out += &format!(
                    "| {name} | {} | {} | {} | {:.0} | {:.0} | {} | {:.1} | {} | {:.0} |\n",
                    p.deployments,
                    p.unreferenced_secrets,
                    match &p.failure {
                        None => "yes".to_string(),
                        Some(why) => format!("no: {why}"),
                    },
                    p.peak_rss_mib,
                    p.steady_rss_mib,
                    p.go_heap_inuse_mib.map_or("–".into(), |h| format!("{h:.0}")),
                    p.checked_ms / 1000.0,
                    p.startup_requests,
                    p.s1_p99_ms
                );
            }
        }
        out
    }

    /// `scale.png`: peak RSS and the time until every workload was checked, against the number of
    /// Deployments, one line per controller (log scales: the controllers differ by orders of magnitude).
    pub fn chart(&self, path: &Path) -> Result<(), String> {
        crate::report::register_font()?;
        let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (left, right) = root.split_horizontally(600);
        let max_d = self
            .curves
            .iter()
            .flat_map(|(_, c)| c.iter().map(|p| p.deployments as f64))
            .fold(10.0, f64::max);
        type Value = fn(&ScalePoint) -> f64;
        let panels: [(&DrawingArea<_, _>, &str, &str, Value); 2] = [
            (&left, "S10: peak memory", "peak RSS (MiB, log)", |p| {
                p.peak_rss_mib
            }),
            (
                &right,
                "S10: start until every workload checked",
                "seconds (log)",
                |p| p.checked_ms / 1000.0,
            ),
        ];
        for (area, caption, y_desc, value) in panels {
            let ys: Vec<f64> = self
                .curves
                .iter()
                .flat_map(|(_, c)| c.iter().map(value))
                .filter(|v| v.is_finite() && *v > 0.0)
                .collect();
            let y_max = ys.iter().copied().fold(1.0, f64::max) * 2.0;
            let y_min = ys.iter().copied().fold(f64::INFINITY, f64::min).min(y_max / 4.0) / 2.0;
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 20))
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(
                    (max_d / 50.0..max_d * 1.5).log_scale(),
                    (y_min.max(0.01)..y_max).log_scale(),
                )
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_desc("opted-in Deployments (log)")
                .y_desc(y_desc)
                .x_labels(6)
                .y_labels(6)
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| format!("{v:.0}"))
                .light_line_style(WHITE)
                .draw()
                .map_err(|e| e.to_string())?;
            for (i, (name, curve)) in self.curves.iter().enumerate() {
                let color = crate::report::COLORS[i % crate::report::COLORS.len()];
                let points: Vec<(f64, f64)> = curve
                    .iter()
                    .map(|p| (p.deployments as f64, value(p)))
                    .filter(|(_, v)| v.is_finite() && *v > 0.0)
                    .collect();
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(|e| e.to_string())?;
                // Each point's value beside it: a log axis within one decade has hardly any labels.
                chart
                    .draw_series(points.iter().map(|&(x, y)| {
                        let label = if y < 10.0 {
                            format!("{y:.1}")
                        } else {
                            format!("{y:.0}")
                        };
                        Text::new(label, (x * 1.08, y), ("sans-serif", 14).into_font().color(&color))
                    }))
                    .map_err(|e| e.to_string())?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(s: &str) -> Result<Vec<(usize, usize)>, String> {
        parse_sizes(&s.split(',').map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn scale_sizes_are_deployments_colon_secrets_smallest_first() {
        assert_eq!(
            sizes("1000:10000,20000:100000"),
            Ok(vec![(1000, 10_000), (20_000, 100_000)])
        );
        let err = |s: &str| sizes(s).unwrap_err();
        assert!(err("1000").contains("expected DEPLOYMENTS:UNREFERENCED_SECRETS"));
        assert!(err("1000:many").contains("\"many\" is not a count"));
        assert!(err("5000:1,1000:1").contains("smallest first"));
    }
}
