//! S12, pacing at scale: one change to a ConfigMap that a fan-out of F Deployments use, among a
//! population of S10's size, with wave pacing them (`--max-concurrent-rollouts`). It measures whether
//! what pacing costs per watch event and per decision, and the watch router's lag, stay flat as F grows.
//!
//! ```text
//! for each fan-out F, smallest first, on a fresh control plane:
//!   populate: TOTAL − F Deployments of S1's shape + F Deployments using ConfigMap bench-paced/paced
//!   (all replicas: 0) ─► start wave --max-concurrent-rollouts=N ─► ready ─► every workload hashed
//!   ─► settled ─► /metrics (before) ─► one change to the ConfigMap ─► every one of the F templates
//!   changed (a watch: the time of the last) ─► /metrics (after) ─► every rollout finished ─► RSS
//! then: <out>/pacing-scale.json, and a table
//! ```
//!
//! The histograms are wave's own (`wave_pacing_decision_seconds`, `wave_watch_router_lag_seconds`),
//! read as the difference between the two scrapes ([`crate::harness::metrics`]), so they cover the
//! change alone, not the start-up.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use serde::Serialize;
use serde_json::json;

use super::{Context, Figures};
use crate::harness::controller::{self, Profile, Running};
use crate::harness::metrics::{self, Quantiles};
use crate::harness::population::{Population, S1Pods, create, patch, populate};
use crate::harness::session::{Session, cluster_dir};
use crate::harness::wait::{TemplateChanges, probe_ready, wait_all_hashed, wait_settled};
use crate::harness::{Error, Limits};

/// The namespace of the fan-out.
const NS: &str = "bench-paced";

/// The ConfigMap the fan-out uses.
const CONFIG_MAP: &str = "paced";

/// Requests in flight while creating the fan-out.
const CREATE_CONCURRENCY: usize = 16;

/// What S12 runs.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Deployments in all (the fan-out among them), as S10's largest size.
    pub total: usize,
    /// The fan-outs, smallest first.
    pub fanouts: Vec<usize>,
    /// wave's `--max-concurrent-rollouts`.
    pub limit: usize,
    /// The namespaces the other Deployments are spread over.
    pub namespaces: usize,
    pub limits: Limits,
}

/// S12 as [`super::REGISTRY`] runs it: wave alone.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, Error>> {
    Box::pin(async move {
        let profile = ctx.profile("wave")?;
        run(&ctx.sizes.pacing, profile).await.map(Figures::PacingScale)
    })
}

/// One fan-out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PacingPoint {
    pub fanout: usize,
    pub total: usize,
    pub limit: usize,
    /// Whether every step completed and every one of the F rolled.
    pub completed: bool,
    pub failure: Option<String>,
    /// From the change until the last of the F templates changed (wave's last write).
    pub all_written_s: f64,
    /// From the change until every one of the F rollouts finished (polled every 0.5 s).
    pub all_rolled_s: f64,
    /// Pacing's share of a watch event (`at="event"`).
    pub decide_event: Quantiles,
    /// Pacing's decision for one rollout (`at="admission"`).
    pub decide_admission: Quantiles,
    /// `wave_watch_router_lag_seconds`.
    pub router_lag: Quantiles,
    pub peak_rss_mib: f64,
}

/// Every fan-out's point.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PacingScale {
    pub points: Vec<PacingPoint>,
}

/// Runs every fan-out, each on a control plane of its own.
pub async fn run(sizes: &Sizes, profile: &Profile) -> Result<PacingScale, Error> {
    if sizes.fanouts.is_empty() || sizes.fanouts.iter().any(|&f| f == 0 || f > sizes.total) {
        return Err(format!(
            "--pacing-fanouts {:?}: each must be between 1 and --pacing-total {}",
            sizes.fanouts, sizes.total
        ));
    }
    let mut result = PacingScale::default();
    for &fanout in &sizes.fanouts {
        eprintln!(
            "== S12: a fan-out of {fanout} among {} Deployments, --max-concurrent-rollouts={}",
            sizes.total, sizes.limit
        );
        let dir = cluster_dir(&format!("s12-{fanout}"));
        let cluster = testenv::Cluster::start_in(dir.clone(), &["--nodes", "1"]);
        let point = at_fanout(sizes, profile, fanout, &cluster).await;
        cluster.stop();
        let _ = std::fs::remove_dir_all(&dir);
        let point = point?;
        eprintln!(
            "  {}: all written in {:.1} s, rolled in {:.1} s; decide per event p99 {:.3} ms, router lag p99 {:.1} ms; peak {:.0} MiB",
            if point.completed {
                "completed"
            } else {
                "did not complete"
            },
            point.all_written_s,
            point.all_rolled_s,
            point.decide_event.p99_ms,
            point.router_lag.p99_ms,
            point.peak_rss_mib
        );
        result.points.push(point);
    }
    Ok(result)
}

/// One fan-out. An error of the benchmark itself (the control plane, populating) is an `Err`; anything
/// wave did wrong is a point that did not complete.
async fn at_fanout(
    sizes: &Sizes,
    profile: &Profile,
    fanout: usize,
    cluster: &testenv::Cluster,
) -> Result<PacingPoint, Error> {
    let session = Session::new(cluster, profile).await;
    let client = &session.client;
    let others = Population {
        namespaces: sizes.namespaces,
        deployments: sizes.total - fanout,
        ..Population::default()
    };
    let t = Instant::now();
    populate(client, &others, profile, S1Pods::None).await?;
    create_fanout(client, profile, fanout).await?;
    wait_settled(client, None, sizes.limits).await?;
    eprintln!("  populated in {:.0?}", t.elapsed());
    let mut point = PacingPoint {
        fanout,
        total: sizes.total,
        limit: sizes.limit,
        all_written_s: f64::NAN,
        all_rolled_s: f64::NAN,
        ..Default::default()
    };
    let port = metrics::port(profile).ok_or("wave's profile names no --metrics-bind-address")?;
    let mut changes = TemplateChanges::start(client).await?;
    let extra = [format!("--max-concurrent-rollouts={}", sizes.limit)];
    let mut running = Running::start_with(profile, &extra, &session.kubeconfig, &session.log)
        .map_err(|e| format!("starting wave: {e}"))?;
    let steps = async {
        probe_ready(client, &mut changes, &mut running, sizes.limits).await?;
        // Every Deployment, the fan-out's among them, is hashed once at start (a first hash is not
        // paced): counted as S1-shaped ones, which is all the count needs.
        let all = Population {
            deployments: sizes.total,
            ..others
        };
        wait_all_hashed(client, &all, sizes.limits).await?;
        wait_settled(client, None, sizes.limits).await?;
        let before = metrics::scrape(port)?;
        changes.drain();
        let keys: HashSet<String> = (0..fanout).map(|k| format!("{NS}/paced-{k}")).collect();
        let t0 = Instant::now();
        patch::<ConfigMap>(client, NS, CONFIG_MAP, json!({"data": {"app.conf": "v1"}})).await?;
        let limit = sizes
            .limits
            .limit(Duration::from_secs(1800).max(Duration::from_millis(500) * fanout as u32));
        let seen = changes.collect(&keys, limit).await;
        if seen.len() < keys.len() {
            return Err(format!(
                "{} of the {fanout} Deployments were not rolled within {limit:?}",
                keys.len() - seen.len()
            ));
        }
        point.all_written_s = seen
            .values()
            .map(|at| at.duration_since(t0).as_secs_f64())
            .fold(0.0, f64::max);
        let after = metrics::scrape(port)?;
        let of = |name: &str, labels: &[&str]| metrics::between(&before, &after, name, labels);
        point.decide_event = of("wave_pacing_decision_seconds", &["at=\"event\""]);
        point.decide_admission = of("wave_pacing_decision_seconds", &["at=\"admission\""]);
        point.router_lag = of("wave_watch_router_lag_seconds", &[]);
        wait_settled(client, Some(NS), sizes.limits).await?;
        point.all_rolled_s = t0.elapsed().as_secs_f64();
        Ok::<(), Error>(())
    };
    match steps.await {
        Ok(()) => point.completed = true,
        Err(e) => point.failure = Some(e),
    }
    if let Some((_, hwm)) = controller::rss(running.pid()) {
        point.peak_rss_mib = hwm as f64 / (1024.0 * 1024.0);
    }
    running.stop();
    Ok(point)
}

/// The fan-out: ConfigMap `paced` and `fanout` opted-in Deployments that mount it (`replicas: 0`, as
/// S10's: pods would measure kwok and the scheduler on 2 cores, not the controller).
async fn create_fanout(client: &kube::Client, profile: &Profile, fanout: usize) -> Result<(), Error> {
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": NS}}),
    )
    .await?;
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), NS),
        json!({"metadata": {"name": CONFIG_MAP}, "data": {"app.conf": "v0"}}),
    )
    .await?;
    let (key, value) = profile.opt_in;
    let api = Api::<Deployment>::namespaced(client.clone(), NS);
    futures::stream::iter(0..fanout)
        .map(|k| {
            let name = format!("paced-{k}");
            let body = json!({"metadata": {"name": name, "annotations": {key: value}},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {
                        "containers": [{"name": "app", "image": "registry.invalid/app:1",
                            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]}],
                        "volumes": [{"name": "cfg", "configMap": {"name": CONFIG_MAP}}]}}}});
            let api = api.clone();
            async move { create(&api, body).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

impl PacingScale {
    /// Under `--smoke`: every fan-out completed.
    pub fn smoke_check(&self) -> Result<(), String> {
        match self.points.iter().find(|p| !p.completed) {
            Some(p) => Err(format!("S12 at a fan-out of {}: {:?}", p.fanout, p.failure)),
            None if self.points.iter().any(|p| p.decide_event.count == 0) => {
                Err("S12: wave's pacing_decision_seconds counted no event".into())
            }
            None => Ok(()),
        }
    }

    /// One table: a row per fan-out.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| fan-out of Deployments | all written s | all rolled s | decide per event p50 / p99 / max ms | decide per admission p50 / p99 / max ms | router lag p50 / p99 / max ms | peak RSS MiB |\n|---|---|---|---|---|---|---|\n",
        );
        let cell = |s: &Quantiles| format!("{:.3} / {:.3} / {:.3}", s.p50_ms, s.p99_ms, s.max_ms);
        for p in &self.points {
            out += &format!(
                "| {} of {} (N={}){} | {:.1} | {:.1} | {} | {} | {} | {:.0} |\n",
                p.fanout,
                p.total,
                p.limit,
                p.failure
                    .as_ref()
                    .map_or(String::new(), |why| format!(": did not complete: {why}")),
                p.all_written_s,
                p.all_rolled_s,
                cell(&p.decide_event),
                cell(&p.decide_admission),
                cell(&p.router_lag),
                p.peak_rss_mib
            );
        }
        out
    }
}
