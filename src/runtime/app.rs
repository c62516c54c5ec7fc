//! Wiring of `wave run`: builds the one `Context`, starts every task, and waits for a signal or the
//! loss of the lease.
//!
//! ```text
//! watch::changes ─► route (Tracker::apply) ─► WorkQueue ─► workers × --concurrency ─► reconcile
//!                        └─► evict content                     ▲
//! resync every --sync-period ──────────────────────────────────┤
//! lease::campaign (leader gained) ─────────────────────────────┘
//! admin::serve (/livez /readyz /metrics)
//! ```

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::content::{self, ContentCache};
use super::context::Context;
use super::error::RunError;
use super::events::EventPublisher;
use super::metrics::Metrics;
use super::workqueue::WorkQueue;
use super::{admin, lease, reconcile, telemetry, watch, webhook};
use crate::cli::RunArgs;
use crate::core::ratelimit::TokenBucket;
use crate::core::tracker::{Change, Tracker};
use crate::core::workload::WorkloadRef;

/// Runs the controller until SIGTERM/SIGINT (Ok) or until the lease is lost (Err).
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    telemetry::init(args.effective_log_format(), &args.effective_log_level());
    let client = Client::try_default()
        .await
        .map_err(|e| RunError::KubeConfig(Box::new(e)))?;
    let namespaces = args.namespace_set();
    let tracker = Tracker::new(namespaces.as_ref());
    let scopes = tracker.scopes().to_vec();
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    let identity = lease::identity();
    let ctx = Arc::new(Context {
        client: client.clone(),
        tracker: RwLock::new(tracker),
        content: ContentCache::new(client.clone(), metrics.clone()),
        queue: WorkQueue::new(),
        limiter: Mutex::new(TokenBucket::new(args.update_rate, args.burst())),
        events: EventPublisher::new(client.clone(), identity.clone()),
        metrics: metrics.clone(),
        watch_health: Arc::default(),
        leader: AtomicBool::new(!args.leader_election),
        reported_missing: Mutex::new(HashMap::new()),
        permission_errors: Mutex::default(),
        max_gate: args.max_gate_duration,
    });
    if !args.leader_election {
        metrics.leader.set(1);
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        namespaces = %namespaces.as_ref().map_or("all".to_string(), |n| n.iter().cloned().collect::<Vec<_>>().join(",")),
        update_rate = args.update_rate,
        update_burst = args.burst(),
        "starting wave"
    );

    let shutdown = CancellationToken::new();
    admin::serve(
        &args.health_bind_address,
        &args.metrics_bind_address,
        ctx.clone(),
        Arc::new(registry),
        shutdown.clone(),
    )
    .await?;
    if args.enable_webhook {
        let bind = admin::parse_bind_address(&args.webhook_bind_address)
            .ok()
            .flatten()
            .ok_or_else(|| {
                RunError::Webhook(format!(
                    "{:?} is not a webhook address",
                    args.webhook_bind_address
                ))
            })?;
        let namespace = lease::lease_namespace(args.webhook_secret_namespace.as_deref());
        let svc = &args.webhook_service_name;
        let config = webhook::WebhookConfig {
            bind,
            dns_names: vec![
                format!("{svc}.{namespace}.svc"),
                format!("{svc}.{namespace}.svc.cluster.local"),
                "localhost".into(),
            ],
            namespace,
            secret_name: args.webhook_secret_name.clone(),
            certificate: args.webhook_certificate,
            configuration_name: args.webhook_configuration_name.clone(),
        };
        webhook::serve(ctx.clone(), config, shutdown.clone()).await?;
    }
    let changes = watch::changes(&client, &scopes, ctx.watch_health.clone(), &metrics);
    tokio::spawn(route(ctx.clone(), changes));
    let failures = Arc::new(Mutex::new(HashMap::new()));
    for _ in 0..args.concurrency.max(1) {
        tokio::spawn(work(ctx.clone(), failures.clone()));
    }
    if !args.sync_period.is_zero() {
        tokio::spawn(resync(ctx.clone(), args.sync_period));
    }
    let lease_lost = async {
        if args.leader_election {
            let config = lease::LeaseConfig {
                name: args.leader_election_id.clone(),
                namespace: lease::lease_namespace(args.leader_election_namespace.as_deref()),
                identity,
                duration_seconds: args.leader_election_lease_duration.max(2),
            };
            lease::campaign(client.clone(), config, ctx.clone()).await
        } else {
            std::future::pending().await
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

/// Applies every watch event to the tracker and enqueues what it wakes.
async fn route(ctx: Arc<Context>, mut changes: BoxStream<'static, Change>) {
    while let Some(change) = changes.next().await {
        let seen = Instant::now();
        let fx = {
            let mut tracker = content::write(&ctx.tracker);
            let fx = tracker.apply(change);
            ctx.metrics
                .tracked_workloads
                .set(tracker.index().workload_count() as i64);
            ctx.metrics
                .tracked_config_objects
                .set(tracker.index().config_count() as i64);
            ctx.metrics
                .watched_config_objects
                .set(tracker.config_object_count() as i64);
            fx
        };
        for key in &fx.evict {
            ctx.content.evict(key);
        }
        if fx.became_ready {
            tracing::info!(
                workloads = fx.enqueue.len(),
                "every watch has listed; checking every opted-in workload"
            );
        }
        if fx.config_triggered {
            ctx.metrics.config_triggers.inc_by(fx.enqueue.len() as u64);
        }
        let triggered = fx.config_triggered.then_some(seen);
        for id in fx.enqueue {
            ctx.queue.add(id, triggered);
        }
    }
}

/// Consecutive failures per workload, shared by the workers, for exponential backoff.
type Failures = Arc<Mutex<HashMap<WorkloadRef, u32>>>;

/// One reconcile worker.
async fn work(ctx: Arc<Context>, failures: Failures) {
    loop {
        let (id, triggered) = ctx.queue.next().await;
        let result = reconcile::reconcile(&ctx, &id, triggered).await;
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
        let retry = reconcile::record(&ctx, &id, &result, count.saturating_sub(1));
        ctx.queue.done(&id);
        if let Some(delay) = retry {
            ctx.queue.add_after(id, delay, triggered);
        }
    }
}

/// Re-checks every workload each `period`: the safety net for missed events.
async fn resync(ctx: Arc<Context>, period: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tick.tick().await;
        let all = content::read(&ctx.tracker).all_to_reconcile();
        tracing::debug!(workloads = all.len(), "periodic resync");
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
