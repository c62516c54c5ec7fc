//! The admin server: `/livez`, `/readyz` and `/metrics`, on the addresses of `--health-bind-address`
//! and `--metrics-bind-address` (one listener when they are equal).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use super::error::RunError;

/// Parses a Go-style bind address: `:8080` means every interface, `0` disables the server.
pub fn parse_bind_address(address: &str) -> Result<Option<SocketAddr>, String> {
    if address == "0" || address.is_empty() {
        return Ok(None);
    }
    let full = if address.starts_with(':') {
        format!("0.0.0.0{address}")
    } else {
        address.to_string()
    };
    full.parse()
        .map(Some)
        .map_err(|_| format!("{address:?} is not an address (use :8080, 127.0.0.1:8080, or 0 to disable)"))
}

#[derive(Clone)]
struct AdminState {
    ctx: Arc<Context>,
    registry: Arc<Registry>,
}

async fn livez() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    match s.ctx.readiness() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
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

/// Binds the admin listeners now (so a bad or taken address fails start-up) and serves them until
/// `shutdown`.
pub async fn serve(
    health: &str,
    metrics_address: &str,
    ctx: Arc<Context>,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let bind_err = |what: &'static str, address: &str| {
        let address = address.to_string();
        move |source| RunError::Bind {
            what,
            address,
            source,
        }
    };
    let invalid = |what: &'static str, address: &str| {
        let address = address.to_string();
        move |msg: String| RunError::Bind {
            what,
            address,
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, msg),
        }
    };
    let health_addr = parse_bind_address(health).map_err(invalid("health", health))?;
    let metrics_addr = parse_bind_address(metrics_address).map_err(invalid("metrics", metrics_address))?;
    let state = AdminState { ctx, registry };
    let health_routes = Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(livez))
        .route("/readyz", get(readyz));
    let metrics_routes = Router::new().route("/metrics", get(metrics));
    let mut servers: Vec<(&'static str, String, SocketAddr, Router<AdminState>)> = Vec::new();
    match (health_addr, metrics_addr) {
        (Some(h), Some(m)) if h == m => {
            servers.push(("health", health.into(), h, health_routes.merge(metrics_routes)))
        }
        (h, m) => {
            if let Some(h) = h {
                servers.push(("health", health.into(), h, health_routes));
            }
            if let Some(m) = m {
                servers.push(("metrics", metrics_address.into(), m, metrics_routes));
            }
        }
    }
    for (what, given, addr, routes) in servers {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(bind_err(what, &given))?;
        let local = listener.local_addr().map_err(bind_err(what, &given))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_bind_addresses_parse() {
        assert_eq!(
            parse_bind_address(":8080"),
            Ok(Some("0.0.0.0:8080".parse().unwrap()))
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:9"),
            Ok(Some("127.0.0.1:9".parse().unwrap()))
        );
        assert_eq!(parse_bind_address("0"), Ok(None));
        assert!(
            parse_bind_address("localhost")
                .unwrap_err()
                .contains("not an address")
        );
    }
}
