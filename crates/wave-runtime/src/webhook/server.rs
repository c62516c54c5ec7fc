//! The webhook's HTTPS server: axum behind axum-server's rustls acceptor, whose configuration is swapped
//! in place when the certificate is renewed, so connections never see a restart.

use std::sync::Arc;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use super::certs::ServingCert;
use crate::config::BindAddress;
use crate::error::WebhookError;

/// The rustls server configuration for `cert`.
pub fn tls_config(cert: &ServingCert) -> Result<Arc<rustls::ServerConfig>, WebhookError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(WebhookError::Pem)?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(WebhookError::Pem)?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(WebhookError::Key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Binds `address` now (so a taken port fails start-up) and serves `app` over TLS until `shutdown`.
pub async fn serve(
    address: BindAddress,
    tls: RustlsConfig,
    app: Router,
    shutdown: CancellationToken,
) -> Result<(), WebhookError> {
    let bind_err = |source| WebhookError::Bind {
        address: address.to_string(),
        source,
    };
    let listener = crate::admin::bind(address).await.map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let server =
        axum_server::from_tcp_rustls(listener.into_std().map_err(bind_err)?, tls).map_err(bind_err)?;
    let handle = axum_server::Handle::new();
    tracing::info!(%local, "serving the admission webhook");
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stopper.shutdown();
    });
    tokio::spawn(async move {
        if let Err(e) = server.handle(handle).serve(app.into_make_service()).await {
            tracing::error!(error = %e, "webhook server failed");
        }
    });
    Ok(())
}
