//! H1, the cost of config history (docs/history.md) at the S1 size: wave alone, twice, each time on a
//! fresh control plane: without history, then with `--config-history` for every workload.
//!
//! ```text
//! testenv up --audit ─► S1's objects (Deployments with their own ConfigMap and Secret)
//!   ─► wave ─► ready, every workload hashed ─► S1's updates, one at a time (S3 has no Deployments here)
//!   ─► every snapshot made ─► idle ─► requests by verb and resource (audit log), RSS, snapshot objects
//! ```

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use serde::Serialize;

use futures::future::LocalBoxFuture;

use super::latency::{self, spread_and_fan_out};
use super::{Context, Figures};
use crate::harness::Limits;
use crate::harness::audit::{self, Counts};
use crate::harness::controller::{self, Profile, Running};
use crate::harness::population::{CANARY_NS, Population, S1Pods, populate};
use crate::harness::session::{Session, cluster_dir};
use crate::harness::wait::{TemplateChanges, probe_ready, wait_all_hashed};

type Error = String;

/// What H1 runs: S1's objects and updates (the other scenarios' Deployments are not created).
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// S1's objects; the other scenarios' counts are ignored.
    pub population: Population,
    pub updates: usize,
    /// The idle window before RSS is read, in seconds.
    pub idle_seconds: u64,
    pub limits: Limits,
}

/// H1 as [`super::REGISTRY`] runs it, with wave's profile.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move {
        let wave = ctx.profile("wave")?;
        run(&ctx.sizes.history, wave).await.map(Figures::History)
    })
}

/// One H1 run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HistoryRun {
    pub config_history: bool,
    pub deployments: usize,
    /// S1 updates sent.
    pub updates: usize,
    /// S1's latency from a config change to the changed template.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// wave's requests from its start until every snapshot exists, by `verb resource`.
    pub requests: Counts,
    pub requests_total: u64,
    /// Requests per S1 update (the updates' window only).
    pub requests_per_update: f64,
    pub peak_rss_mib: f64,
    /// After the idle window.
    pub steady_rss_mib: f64,
    /// Snapshot ConfigMaps and Secrets, and the bytes of their data.
    pub snapshot_config_maps: usize,
    pub snapshot_secrets: usize,
    pub snapshot_bytes: usize,
    /// One per hash written: each Deployment's first, and one per update.
    pub expected_snapshots: usize,
    /// The wait for the snapshots gave up after 10 minutes: the counts are partial.
    pub timed_out: bool,
}

/// H1: without history, then with it.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryCost {
    pub without: HistoryRun,
    pub with: HistoryRun,
}

/// Runs H1 with `wave`'s profile.
pub async fn run(sizes: &Sizes, wave: &Profile) -> Result<HistoryCost, Error> {
    // Only S1's objects: the other scenarios' Deployments are not created.
    let sizes = Sizes {
        population: sizes.population.s1_only(),
        ..*sizes
    };
    let without = run_one(&sizes, wave, false).await?;
    let mut with_history = wave.clone();
    with_history.args.push("--config-history".into());
    let with = run_one(&sizes, &with_history, true).await?;
    Ok(HistoryCost { without, with })
}

async fn run_one(sizes: &Sizes, profile: &Profile, history: bool) -> Result<HistoryRun, Error> {
    let tag = if history { "h1-with" } else { "h1-without" };
    let dir = cluster_dir(tag);
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit"]);
    let result = run_on(sizes, profile, history, &cluster).await;
    if result.is_err() {
        let log = std::fs::read_to_string(cluster.dir().join("logs/h1.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        eprintln!(
            "wave's log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    cluster.stop();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_on(
    sizes: &Sizes,
    profile: &Profile,
    history: bool,
    cluster: &testenv::Cluster,
) -> Result<HistoryRun, Error> {
    let session = Session::new(cluster, profile).await;
    let (client, kubeconfig, log) = (&session.client, &session.kubeconfig, &session.log);
    // The readiness probe's canary is left out, as in the other scenarios.
    let cost = |from, to| session.cost(from, to);
    populate(client, &sizes.population, profile, S1Pods::None).await?;
    let mut changes = TemplateChanges::start(client).await?;
    let started = Timestamp::now();
    let mut running = Running::start(profile, kubeconfig, log).map_err(|e| format!("starting: {e}"))?;
    probe_ready(client, &mut changes, &mut running, sizes.limits).await?;
    wait_all_hashed(client, &sizes.population, sizes.limits).await?;
    let s1 = latency::Sizes {
        namespaces: sizes.population.namespaces,
        deployments: sizes.population.deployments,
        updates: sizes.updates,
        fanout: 0,
        limits: sizes.limits,
    };
    let spread = spread_and_fan_out(&s1, client, &mut changes, &cost, "v", latency::Probe::default()).await?;
    // At most one snapshot per hash each Deployment carried: its first, and one per update. A first hash
    // that an update replaced before wave kept its snapshot has none (docs/history.md, "When"), so the
    // wait ends when the count reaches that, or has not moved for 15 s.
    let updates = sizes.updates - spread.s1.not_sent;
    let expected = if history {
        sizes.population.deployments + updates
    } else {
        0
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut cms, mut secrets, mut bytes) = snapshots(client).await?;
    let mut moved = Instant::now();
    while history && cms < expected && moved.elapsed() < Duration::from_secs(15) && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = snapshots(client).await?;
        if now.0 != cms {
            moved = Instant::now();
        }
        (cms, secrets, bytes) = now;
    }
    let timed_out = Instant::now() >= deadline;
    let done = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(sizes.idle_seconds)).await;
    let (rss, hwm) = controller::rss(running.pid()).ok_or("wave exited")?;
    running.stop();
    let requests = cost(started, done);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let run = HistoryRun {
        config_history: history,
        deployments: sizes.population.deployments,
        updates,
        p50_ms: spread.s1.p50_ms,
        p99_ms: spread.s1.p99_ms,
        requests_total: audit::total(&requests),
        requests,
        requests_per_update: spread.per_change_requests,
        peak_rss_mib: mib(hwm),
        steady_rss_mib: mib(rss),
        snapshot_config_maps: cms,
        snapshot_secrets: secrets,
        snapshot_bytes: bytes,
        expected_snapshots: expected,
        timed_out,
    };
    eprintln!(
        "  H1 history {}: {} requests, {:.2} per update, peak {:.1} MiB, steady {:.1} MiB, {} snapshots",
        if history { "on" } else { "off" },
        run.requests_total,
        run.requests_per_update,
        run.peak_rss_mib,
        run.steady_rss_mib,
        run.snapshot_config_maps
    );
    Ok(run)
}

/// The snapshot ConfigMaps and Secrets of the S1 Deployments, and the bytes of their data.
async fn snapshots(client: &kube::Client) -> Result<(usize, usize, usize), Error> {
    let lp = ListParams::default().labels("wave.pusher.com/snapshot-kind");
    let err = |e: kube::Error| e.to_string();
    let ours = |ns: &Option<String>| ns.as_deref() != Some(CANARY_NS);
    let cms: Vec<ConfigMap> = Api::<ConfigMap>::all(client.clone())
        .list(&lp)
        .await
        .map_err(err)?
        .items
        .into_iter()
        .filter(|c| ours(&c.metadata.namespace))
        .collect();
    let secrets: Vec<Secret> = Api::<Secret>::all(client.clone())
        .list(&lp)
        .await
        .map_err(err)?
        .items
        .into_iter()
        .filter(|s| ours(&s.metadata.namespace))
        .collect();
    let bytes = cms
        .iter()
        .flat_map(|c| c.data.iter().flatten())
        .map(|(k, v)| k.len() + v.len())
        .chain(
            secrets
                .iter()
                .flat_map(|s| s.data.iter().flatten())
                .map(|(k, v)| k.len() + v.0.len()),
        )
        .sum();
    Ok((cms.len(), secrets.len(), bytes))
}
