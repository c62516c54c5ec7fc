//! The controller, `wave run`: builds the one `Context`, starts every task, and waits for a signal or the
//! loss of the lease.
//!
//! ```text
//! watch::changes ─► read (stamped) ─► route (Tracker::apply) ─► WorkQueue ─► workers × --concurrency ─► reconcile
//!                                        ├─► evict content                     ▲
//!                                        ├─► pacing: the census takes in each workload that changed
//!                        ├─► once ready (and each resync): a running Reloader? (reloader::look_for_reloader)
//!                        └─► once ready: warm content, then every workload ──┤
//! resync every --sync-period ──────────────────────────────────┤
//! lease::campaign (leader gained) ─────────────────────────────┘
//! admin::serve (/livez /readyz /metrics)
//! ```

pub mod halting;
pub mod held_pods;
pub mod history;
pub mod holds;
pub mod in_place;
pub mod legacy;
pub mod outcome;
pub mod reconcile;
pub mod reloader;
pub mod watch;
pub mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use wave_core::flap::FlapDetector;
use wave_core::hash::Hashing;
use wave_core::pace::Pacer;
use wave_core::ratelimit::TokenBucket;
use wave_core::tracker::{Change, Event, Tracker};
use wave_core::workload::WorkloadRef;

use crate::config::Config;
use crate::error::{ReconcileError, RunError};
use crate::events::EventPublisher;
use crate::metrics::Metrics;
use crate::state::Context;
use crate::state::bookkeeping::{
    KeptSnapshots, KnownHashes, Liveness, MissingReports, Notes, PendingJobs, ReloaderSightings,
    RestoreFailures, Restores,
};
use crate::state::content::ContentCache;
use crate::state::workqueue::WorkQueue;
use crate::state::{memory, pacing};
use crate::{admin, api, lease, telemetry, webhook};
use watch::Arrival;

/// Runs the controller until SIGTERM/SIGINT (Ok) or until the lease is lost (Err).
pub async fn run(config: Config) -> Result<(), RunError> {
    telemetry::init(config.log_format, &config.log_filter);
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    crate::metrics::register_process(&mut registry, &config.build);
    let api_metrics = crate::apimetrics::ApiMetrics::new(&mut registry);
    let kube_config = kube::Config::infer()
        .await
        .map_err(|e| RunError::KubeConfig(Box::new(kube::Error::InferConfig(e))))?;
    let client = kube::client::ClientBuilder::try_from(kube_config)
        .map_err(|e| RunError::KubeConfig(Box::new(e)))?
        .with_layer(&crate::apimetrics::ApiMetricsLayer(api_metrics))
        .build();
    let mut kinds = config.kinds.clone();
    for resource in &config.workload_resources {
        let kind =
            api::resolve_kind(&client, resource)
                .await
                .map_err(|reason| RunError::WorkloadResource {
                    resource: resource.clone(),
                    reason,
                })?;
        tracing::info!(resource = %resource, kind = %kind, "managing a workload resource");
        kinds.push(kind);
    }
    let mut tracker = Tracker::new(&kinds, config.namespaces.as_ref())
        .ignoring(config.namespaces_to_ignore.clone())
        .with_cross_namespace(config.cross_namespace);
    if let Some(options) = &config.reloader {
        let mut options = options.clone();
        if options.csi {
            // As Reloader, without the CSI driver's CRDs there is nothing to follow: a warning, and on.
            // Without the right to list the statuses, their watch would never list, and wave, which
            // waits for every watch before it decides anything, would never start: a warning too.
            let served = api::serves_provider_statuses(&client)
                .await
                .map_err(RunError::CsiDiscovery)?;
            let refused = match served {
                true => api::provider_statuses_refused(&client, config.namespaces.as_ref()).await,
                false => Some(format!(
                    "the apiserver serves no {}/{} {} (the Secrets Store CSI driver's CRDs are not installed)",
                    wave_core::names::csi::GROUP,
                    wave_core::names::csi::VERSION,
                    wave_core::names::csi::POD_STATUS_PLURAL,
                )),
            };
            match refused {
                None => tracker = tracker.with_provider_statuses(),
                Some(why) => {
                    tracing::warn!(
                        "--enable-csi-integration: {why}; SecretProviderClass rotations are not followed"
                    );
                    options.csi = false;
                }
            }
        }
        tracker = tracker.with_reloader(options);
    }
    if let Some(selector) = &config.namespace_selector {
        tracker = tracker.selecting_namespaces(selector.clone());
    }
    let scopes = tracker.scopes().to_vec();
    let hashing = match &config.hash_key_secret {
        Some(secret) => {
            let key = api::read_hash_key(&client, secret)
                .await
                .map_err(RunError::HashKey)?;
            tracing::info!(secret = %secret, "config hashes are keyed (HMAC-SHA256)");
            Hashing::Keyed(key)
        }
        None => Hashing::Plain,
    };
    let identity = lease::identity();
    let lease = config
        .leader_election
        .as_ref()
        .map(|election| lease::LeaseConfig {
            name: election.lease_name.clone(),
            namespace: lease::lease_namespace(election.namespace.as_deref()),
            identity: identity.clone(),
            duration_seconds: election.duration_seconds.max(2),
            owner: config.own_deployment.clone(),
        });
    let outbox = crate::alerts::Outbox::start(
        config.alert.as_ref(),
        config.webhook_url.as_ref(),
        metrics.alerts.clone(),
    )
    .map_err(RunError::Alerts)?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        tracker: RwLock::new(tracker),
        content: ContentCache::new(client.clone(), metrics.clone()),
        queue: WorkQueue::new(metrics.queue_depth.clone(), metrics.queue_wait.clone()),
        limiter: Mutex::new(TokenBucket::new(config.update_rate, config.update_burst)),
        events: EventPublisher::new(client.clone(), identity.clone(), metrics.events_dropped.clone()),
        metrics: metrics.clone(),
        watch_health: Arc::default(),
        leadership: lease::Leadership::new(lease.is_none(), metrics.leader.clone()),
        lease: lease.as_ref().map(|l| lease::LeaseCheck::new(client.clone(), l)),
        missing: MissingReports::new(
            metrics.waiting_for_config.clone(),
            metrics.webhook_reports_dropped.clone(),
        ),
        denied: Notes::counted(metrics.denied_references.clone()),
        max_gate: config.max_gate_duration,
        hashing,
        restart: config.restart_strategy,
        agent_image: config.agent_image.clone(),
        coalescer: Mutex::default(),
        min_rollout_interval: config.min_rollout_interval,
        flaps: Mutex::new(FlapDetector::new(config.flap)),
        settled: Mutex::default(),
        pacer: Mutex::new(Pacer::new(config.max_concurrent_rollouts)),
        rollout_deadline: config.rollout_deadline,
        known_hashes: KnownHashes::default(),
        config_history: config.config_history,
        legacy_wave_cleanup: config.legacy_wave_cleanup,
        legacy_reports: Notes::default(),
        write_failures: Notes::default(),
        kept_snapshots: KeptSnapshots::default(),
        restores: Restores::default(),
        restore_failures: RestoreFailures::default(),
        liveness: Liveness::default(),
        reloader_seen: Mutex::default(),
        reloader_sightings: ReloaderSightings::new(metrics.reloader_running.clone()),
        pending_jobs: PendingJobs::default(),
        outbox,
        own_deployment: config.own_deployment.clone(),
    });
    tracing::info!(
        version = config.build.version,
        commit = config.build.commit,
        namespaces = %config.namespaces.as_ref().map_or("all".to_string(), |n| n.iter().cloned().collect::<Vec<_>>().join(",")),
        update_rate = config.update_rate,
        update_burst = config.update_burst,
        legacy_wave_cleanup = config.legacy_wave_cleanup,
        "starting wave"
    );
    if config.webhook_url.is_some() {
        tracing::warn!(
            "--webhook-url is set: a change that would reload a Reloader-annotated workload is posted there, and nothing is written to it"
        );
        if config.alert.is_some() {
            tracing::warn!(
                "--alert-on-reload is set too: with --webhook-url nothing is reloaded, so no alert is sent"
            );
        }
    }
    for name in &config.unread_reloader_env {
        tracing::warn!(
            "Stakater Reloader's {name} is set, and wave does not read it: wave's setting is WAVE_{name}"
        );
    }

    let shutdown = CancellationToken::new();
    admin::serve(
        config.health_address,
        config.metrics_address,
        ctx.clone(),
        Arc::new(registry),
        shutdown.clone(),
    )
    .await?;
    if let Some(webhook) = &config.webhook {
        webhook::serve(
            ctx.clone(),
            webhook,
            config.own_deployment.clone(),
            shutdown.clone(),
        )
        .await
        .map_err(RunError::Webhook)?;
    }
    let referenced: watch::Referenced = {
        let ctx = ctx.clone();
        Arc::new(move |key| ctx.tracker().index().is_referenced(key))
    };
    let changes = watch::changes(&client, &scopes, ctx.watch_health.clone(), &metrics, referenced);
    let live = &ctx.liveness;
    let (arrived, backlog) = tokio::sync::mpsc::channel(ROUTER_BACKLOG);
    live.spawn_essential("the watch reader", read(changes, arrived));
    live.spawn_essential("the watch router", route(ctx.clone(), backlog));
    let timer = ctx.clone();
    live.spawn_essential(
        "the delayed-add timer",
        async move { timer.queue.run_timer().await },
    );
    let failures = Arc::new(Mutex::new(HashMap::new()));
    for _ in 0..config.concurrency.max(1) {
        live.spawn_essential("a reconcile worker", work(ctx.clone(), failures.clone()));
    }
    if !config.sync_period.is_zero() {
        live.spawn_essential("the periodic resync", resync(ctx.clone(), config.sync_period));
    }
    let lease_lost = async {
        match lease {
            Some(lease) => {
                let elected = || {
                    let all = ctx.tracker().all_to_reconcile();
                    tracing::info!(
                        workloads = all.len(),
                        "became the leader; checking every workload"
                    );
                    for id in all {
                        ctx.queue.add(id, None);
                    }
                };
                lease::campaign(client.clone(), lease, &ctx.leadership, elected).await
            }
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            Ok(())
        }
        e = lease_lost => Err(e),
    };
    shutdown.cancel();
    result
}

/// Watch events read ahead of the router: enough for its lag to show in
/// `wave_watch_router_lag_seconds` when it falls behind; beyond it, the watches wait (as they did when
/// the router read them itself).
const ROUTER_BACKLOG: usize = 1024;

/// Reads the watch events as they arrive and hands them to the router with the time each arrived.
/// Content a ConfigMap's event carries rides along only while the backlog is less than half full: a
/// router that falls behind never holds more than half the backlog in contents (each up to 1 MiB), and
/// the reconciles those events wake read their content with a GET instead.
async fn read(
    mut changes: BoxStream<'static, Arrival>,
    to_router: tokio::sync::mpsc::Sender<(Instant, Arrival)>,
) {
    while let Some(mut arrival) = changes.next().await {
        if to_router.capacity() < ROUTER_BACKLOG / 2 {
            arrival.content = None;
        }
        if to_router.send((Instant::now(), arrival)).await.is_err() {
            return;
        }
    }
}

/// Applies every watch event to the tracker and enqueues what it wakes. Content an event carried is
/// cached under the same lock, so that the reconciles it wakes find it at the version they see.
async fn route(ctx: Arc<Context>, mut changes: tokio::sync::mpsc::Receiver<(Instant, Arrival)>) {
    while let Some((arrived, Arrival { change, content })) = changes.recv().await {
        let carried = match (content, &change) {
            (Some(content), Change::Config(_, Event::Apply(meta))) => {
                Some((meta.key.clone(), meta.version.clone(), content))
            }
            _ => None,
        };
        let mut fx = {
            let mut tracker = ctx.tracker_mut();
            let fx = tracker.apply(change);
            if let Some((key, version, content)) = carried {
                ctx.content.keep_watched(key, version, content, &tracker);
            }
            ctx.metrics
                .tracked_workloads
                .set(tracker.index().workload_count() as i64);
            ctx.metrics
                .tracked_config_objects
                .set(tracker.index().config_count() as i64);
            ctx.metrics
                .watched_config_objects
                .set(tracker.config_object_count() as i64);
            ctx.metrics
                .selected_namespaces
                .set(tracker.selected_namespace_count() as i64);
            fx
        };
        for key in &fx.evict {
            ctx.content.evict(key);
        }
        let unreferenced: Vec<_> = if fx.evict.is_empty() {
            Vec::new()
        } else {
            let tracker = ctx.tracker();
            fx.evict
                .iter()
                .filter(|k| !tracker.index().is_referenced(k))
                .cloned()
                .collect()
        };
        for key in &unreferenced {
            // Nobody uses it any more: its flapping episode, if any, ends without a settle.
            ctx.flaps().forget(key);
        }
        for id in &fx.deleted {
            ctx.missing.forget(id);
            ctx.denied.forget(id);
            ctx.coalescer().forget(id);
            ctx.settled().remove(id);
            ctx.pacer().deleted(id);
            ctx.known_hashes.forget(id);
            ctx.kept_snapshots.forget(id);
            ctx.restore_failures.forget(id);
            ctx.legacy_reports.forget(id);
            ctx.reloader_seen().forget(id);
        }
        for key in &fx.changed_configs {
            memory::observe_change(&ctx, key, arrived);
        }
        if fx.became_ready {
            tracing::info!(
                workloads = fx.enqueue.len(),
                "every watch has listed; checking every opted-in workload"
            );
            reloader::look_for_reloader(&ctx);
            // The first look at the census (observed as the watches listed), before any decision reads
            // its halts (`Pacer::halts`).
            pacing::announce(&ctx, pacing::progressed(&ctx, &fx.observed));
            fx.observed.clear();
            // Their content is read in bulk first where that saves requests (`content`); the router
            // goes on meanwhile.
            let (ctx, all) = (ctx.clone(), std::mem::take(&mut fx.enqueue));
            tokio::spawn(async move {
                ctx.content.warm(&ctx.tracker).await;
                for id in all {
                    ctx.queue.add(id, None);
                }
            });
        }
        if fx.config_triggered {
            ctx.metrics.config_triggers.inc_by(fx.enqueue.len() as u64);
        }
        // From its arrival: the time it waited behind other events counts in the change's latency.
        let triggered = fx.config_triggered.then_some(arrived);
        for id in fx.enqueue {
            ctx.queue.add(id, triggered);
        }
        // A deleted (or opted-out) workload frees its slot without a progress event of its own.
        if !fx.progressed.is_empty() || !fx.deleted.is_empty() {
            let halts = pacing::progressed(&ctx, &fx.observed);
            if !halts.new.is_empty() {
                pacing::announce(&ctx, halts);
            }
        } else {
            pacing::observe(&ctx, &fx.observed);
        }
        ctx.metrics.router_lag.observe(arrived.elapsed().as_secs_f64());
    }
}

/// Consecutive failures per workload, shared by the workers, for exponential backoff.
type Failures = Arc<Mutex<HashMap<WorkloadRef, u32>>>;

/// One reconcile worker.
async fn work(ctx: Arc<Context>, failures: Failures) {
    loop {
        let (id, triggered) = ctx.queue.next().await;
        let started = Instant::now();
        let result = caught(&id, reconcile::reconcile(&ctx, &id, triggered)).await;
        ctx.metrics
            .reconcile_duration
            .get_or_create(&crate::metrics::KindLabel {
                kind: id.kind.as_str(),
            })
            .observe(started.elapsed().as_secs_f64());
        let count = {
            let mut f = failures.lock().unwrap_or_else(|e| e.into_inner());
            if result.is_err() {
                let n = f.entry(id.clone()).or_insert(0);
                *n += 1;
                *n
            } else {
                f.remove(&id);
                0
            }
        };
        let retry = outcome::record(&ctx, &id, &result, count.saturating_sub(1));
        ctx.queue.done(&id);
        if let Some(delay) = retry {
            ctx.queue.add_after(id, delay, triggered);
        }
    }
}

/// Runs one reconcile, turning a panic into an error: the worker lives on, the workload's key is
/// released from the queue (`done` below), and the workload is retried with backoff instead of being
/// stuck as "active" forever.
async fn caught(
    id: &WorkloadRef,
    reconcile: impl std::future::Future<Output = Result<outcome::Outcome, ReconcileError>>,
) -> Result<outcome::Outcome, ReconcileError> {
    use futures::FutureExt as _;
    std::panic::AssertUnwindSafe(reconcile)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            Err(ReconcileError::Panicked {
                workload: id.clone(),
                message,
            })
        })
}

/// Re-checks every workload each `period`: the safety net for missed events.
async fn resync(ctx: Arc<Context>, period: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tick.tick().await;
        let all = ctx.tracker().all_to_reconcile();
        tracing::debug!(workloads = all.len(), "periodic resync");
        reloader::look_for_reloader(&ctx);
        for id in all {
            ctx.queue.add(id, None);
        }
    }
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_reconcile_becomes_an_error_and_the_worker_goes_on() {
        let id = WorkloadRef::new(wave_core::workload::WorkloadKind::DEPLOYMENT, "ns", "w");
        let result = caught(&id, async { panic!("boom") }).await;
        let Err(e) = result else {
            panic!("expected an error, got {result:?}")
        };
        assert_eq!(e.kind(), "panic");
        assert!(e.to_string().contains("boom"), "{e}");
        let ok = caught(&id, async { Ok(outcome::Outcome::Noop) }).await;
        assert_eq!(ok.ok(), Some(outcome::Outcome::Noop));
    }
}
