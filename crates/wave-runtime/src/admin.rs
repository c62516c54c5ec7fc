//! The admin server: `/livez`, `/readyz` and `/metrics`, on the addresses of `--health-bind-address`
//! and `--metrics-bind-address` (one listener when they are equal).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use tokio::net::TcpListener;

use crate::config::BindAddress;
use crate::error::RunError;

/// What `/livez` and `/readyz` ask. `Err` says why not, in words for the probe's body.
pub trait Probes: Send + Sync + 'static {
    /// Whether the process still works (an essential task ended: only a restart helps).
    fn live(&self) -> Result<(), String>;
    /// Whether it is ready to serve.
    fn ready(&self) -> Result<(), String>;
}

/// Binds a listener: every interface means `[::]` (both address families on a dual-stack host), and
/// `0.0.0.0` where the host has no IPv6, as Go's `:port` does.
pub async fn bind(address: BindAddress) -> std::io::Result<TcpListener> {
    match (TcpListener::bind(address.primary()).await, address.fallback()) {
        (Err(e), Some(fallback)) if is_family_unavailable(&e) => TcpListener::bind(fallback).await,
        (result, _) => result,
    }
}

fn is_family_unavailable(e: &std::io::Error) -> bool {
    // EAFNOSUPPORT (97) and EADDRNOTAVAIL (99) on Linux: IPv6 is disabled or absent.
    matches!(e.raw_os_error(), Some(97 | 99))
}

#[derive(Clone)]
struct AdminState {
    probes: Arc<dyn Probes>,
    registry: Arc<Registry>,
}

/// Fails once an essential task (the watch router, a worker, the resync) has ended: the process is alive
/// but no longer works, and only a restart helps.
async fn livez(State(s): State<AdminState>) -> impl IntoResponse {
    match s.probes.live() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    match s.probes.ready() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn serve_metrics(State(s): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "encoding failed".into(),
        ),
    }
}

/// Binds the admin listeners now (so a taken address fails start-up) and serves them until `shutdown`.
/// When both addresses are equal, one listener serves both.
pub async fn serve(
    health: Option<BindAddress>,
    metrics: Option<BindAddress>,
    probes: Arc<dyn Probes>,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let state = AdminState { probes, registry };
    let health_routes = Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(livez))
        .route("/readyz", get(readyz));
    let metrics_routes = Router::new().route("/metrics", get(serve_metrics));
    let mut servers: Vec<(&'static str, BindAddress, Router<AdminState>)> = Vec::new();
    match (health, metrics) {
        (Some(h), Some(m)) if h == m => servers.push(("health", h, health_routes.merge(metrics_routes))),
        (h, m) => {
            servers.extend(h.map(|h| ("health", h, health_routes)));
            servers.extend(m.map(|m| ("metrics", m, metrics_routes)));
        }
    }
    for (what, address, routes) in servers {
        let bind_err = |source| RunError::Bind {
            what,
            address: address.to_string(),
            source,
        };
        let listener = bind(address).await.map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        tracing::info!(%local, "serving {what}");
        let app = routes.with_state(state.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
            {
                tracing::error!(error = %e, "{what} server failed");
            }
        });
    }
    Ok(())
}
