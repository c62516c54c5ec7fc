//! The mutating admission webhook: the hash at creation, and pods held by a scheduling gate until their
//! required config exists (`docs/webhook.md`).
//!
//! ```text
//! token   Secret (path token) ──────────────┐
//! certs   Secret (CA + serving certificate) ─┼─► registration: caBundle + paths with the token
//!            │                               │   re-read every CERT_CHECK_PERIOD, and soon after a
//!            ▼                               ▼   call on a stale path (at most every REREAD_GAP)
//! server  rustls config (swapped in place)   current token (swapped in place)
//!           └─► POST /mutate-apps-v1-{deployment,statefulset,daemonset}/<token>; anything else: 404
//! admission AdmissionReview ─► wave_core::admission ─► AdmissionResponse (always allowed)
//! ```
//!
//! Only the apiserver knows the token (it reads it from the registration, which only cluster admins
//! may read), so nobody else can make wave hash, gate, publish an Event or even parse a request body
//! (`wave_core::webhook`). The check happens before the body is parsed.

pub mod admission;
pub mod certs;
pub mod registration;
pub mod server;
pub mod token;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum_server::tls_rustls::RustlsConfig;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use wave_core::webhook::{self as paths, PathToken};
use wave_core::workload::WorkloadRef;

use self::certs::{CertificateConfig, ServingCert};
use crate::config::WebhookConfig;
use crate::error::WebhookError;
use crate::state::Context;

/// How often the Secret is read again, at most, to renew the certificate or pick up cert-manager's
/// renewal (more often with a short `--webhook-certificate-lifetime`).
const CERT_CHECK_PERIOD: Duration = Duration::from_secs(300);

/// The soonest a call on a stale path makes wave re-read its Secrets after the last read. Anyone who
/// can reach the port can trigger it, so it is rare; the apiserver, after a `helm upgrade` put the
/// token-less path back or the token was rotated, is answered again within this much.
const REREAD_GAP: Duration = Duration::from_secs(10);

/// The largest AdmissionReview read (axum's default for JSON bodies, as before path tokens).
const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// How much of a refused request's body is read (and dropped), at most, and for how long.
const REFUSED_DRAIN: usize = 64 * 1024;
const REFUSED_DRAIN_TIME: Duration = Duration::from_secs(1);

/// Reads up to [`REFUSED_DRAIN`] bytes of `body` and drops them.
async fn discard(body: axum::body::Body) {
    use futures::StreamExt as _;
    let mut chunks = body.into_data_stream();
    let mut read = 0;
    while read < REFUSED_DRAIN {
        match chunks.next().await {
            Some(Ok(chunk)) => read += chunk.len(),
            _ => return,
        }
    }
}

/// What the server's one handler needs.
#[derive(Clone)]
struct Served {
    ctx: Arc<Context>,
    token: Arc<RwLock<PathToken>>,
    /// Woken by a call on a stale or token-less path of wave's.
    stale: Arc<Notify>,
}

/// Every request. Only a POST on a served path with the current token is parsed and decided; anything
/// else gets a bare 404, the same for every path and every namespace, its body never parsed.
async fn handle(State(served): State<Served>, request: Request) -> Response {
    let ctx = &served.ctx;
    let path = request.uri().path();
    let authorized = request.method() == Method::POST && {
        let token = served.token.read().unwrap_or_else(|e| e.into_inner());
        paths::authorized(path, &token)
    };
    if !authorized {
        if paths::is_wave_path(path) {
            served.stale.notify_one();
        }
        // Neither the path nor the caller is logged: the path may carry a token, right or wrong.
        admission::count(ctx, "unauthorized");
        // Read and dropped unparsed, so that the 404 reaches the caller over a connection that is not
        // cut in the middle of its upload; bounded in size and time, never kept.
        let _ = tokio::time::timeout(REFUSED_DRAIN_TIME, discard(request.into_body())).await;
        return StatusCode::NOT_FOUND.into_response();
    }
    let body = match axum::body::to_bytes(request.into_body(), BODY_LIMIT).await {
        Ok(body) => body,
        Err(e) => {
            admission::count(ctx, "error");
            tracing::warn!(error = %e, "cannot read the AdmissionReview; the apiserver admits the object");
            return StatusCode::BAD_REQUEST.into_response();
        }
    };
    match serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body) {
        Ok(review) => axum::Json(admission::mutate(ctx, review).await).into_response(),
        Err(e) => {
            admission::count(ctx, "error");
            tracing::warn!(error = %e, "malformed AdmissionReview; the apiserver admits the object");
            (StatusCode::BAD_REQUEST, "malformed AdmissionReview").into_response()
        }
    }
}

/// Where the webhook's state lives.
struct Sources {
    certs: CertificateConfig,
    token_namespace: String,
    token_secret: String,
    configuration: String,
}

/// Reads (creating when needed) the path token and the certificate, and brings the registration up to
/// date with both.
async fn refresh(client: &kube::Client, sources: &Sources) -> Result<(ServingCert, PathToken), WebhookError> {
    let token = token::ensure(client, &sources.token_namespace, &sources.token_secret).await?;
    let (serving, ca_pem) = certs::load(client, &sources.certs).await?;
    registration::sync(client, &sources.configuration, ca_pem.as_deref(), &token).await?;
    Ok((serving, token))
}

/// Prepares the certificate, the path token and the registration, binds the listener, and serves until
/// `shutdown`. Problems fail start-up; later ones are logged and retried.
pub async fn serve(
    ctx: Arc<Context>,
    config: &WebhookConfig,
    owner: Option<WorkloadRef>,
    shutdown: CancellationToken,
) -> Result<(), WebhookError> {
    let namespace = crate::lease::lease_namespace(config.secret_namespace.as_deref());
    let svc = &config.service_name;
    let sources = Sources {
        certs: CertificateConfig {
            dns_names: vec![
                format!("{svc}.{namespace}.svc"),
                format!("{svc}.{namespace}.svc.cluster.local"),
                "localhost".into(),
            ],
            namespace: namespace.clone(),
            secret_name: config.secret_name.clone(),
            source: config.certificate,
            lifetime: config.certificate_lifetime,
            owner,
        },
        token_namespace: namespace,
        token_secret: config.token_secret_name.clone(),
        configuration: config.configuration_name.clone(),
    };
    // Often enough that every replica picks up a renewal well before a third of the lifetime is spent.
    let check_period = CERT_CHECK_PERIOD
        .min(config.certificate_lifetime / 10)
        .max(Duration::from_secs(1));
    let (mut serving, current) = refresh(&ctx.client, &sources).await?;
    let tls = RustlsConfig::from_config(server::tls_config(&serving)?);
    let served = Served {
        ctx: ctx.clone(),
        token: Arc::new(RwLock::new(current)),
        stale: Arc::new(Notify::new()),
    };
    let app = Router::new().fallback(handle).with_state(served.clone());
    server::serve(config.address, tls.clone(), app, shutdown.clone()).await?;
    // The Secrets are the source of truth, so every replica converges on the same certificate and token.
    tokio::spawn(async move {
        let mut last_read = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(check_period) => {}
                () = served.stale.notified() => {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep_until(last_read + REREAD_GAP) => {}
                    }
                }
            }
            last_read = tokio::time::Instant::now();
            let (fresh, token) = match refresh(&ctx.client, &sources).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(error = %crate::api::error_chain(&e), "re-reading the webhook's certificate and path token failed; retrying later");
                    continue;
                }
            };
            {
                let mut current = served.token.write().unwrap_or_else(|e| e.into_inner());
                if *current != token {
                    *current = token;
                    tracing::info!("webhook path token replaced");
                }
            }
            if fresh == serving {
                continue;
            }
            match server::tls_config(&fresh) {
                Ok(config) => {
                    tls.reload_from_config(config);
                    serving = fresh;
                    tracing::info!("webhook serving certificate replaced");
                }
                Err(e) => {
                    tracing::warn!(error = %crate::api::error_chain(&e), "webhook certificate unusable; keeping the current one")
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wave_core::workload::WorkloadKind;

    #[test]
    fn each_kind_is_served_on_the_path_the_chart_configures() {
        let paths: Vec<String> = WorkloadKind::BUILT_IN.into_iter().map(paths::base_path).collect();
        assert_eq!(
            paths,
            [
                "/mutate-apps-v1-deployment",
                "/mutate-apps-v1-statefulset",
                "/mutate-apps-v1-daemonset"
            ]
        );
    }
}
