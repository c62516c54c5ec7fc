//! The mutating admission webhook: the hash at creation, and pods held by a scheduling gate until their
//! required config exists (`docs/webhook.md`).
//!
//! ```text
//! certs   Secret (CA + serving certificate) ─► ServingCert ─┐   renewal every CERT_CHECK_PERIOD
//! server  rustls config (swapped in place on renewal) ◄──────┘
//!           └─► /mutate-apps-v1-{deployment,statefulset,daemonset}
//! admission AdmissionReview ─► wave_core::admission ─► AdmissionResponse (always allowed)
//! ```

pub mod admission;
pub mod certs;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use tokio_util::sync::CancellationToken;
use wave_core::workload::WorkloadKind;

use self::certs::CertificateConfig;
use crate::config::WebhookConfig;
use crate::controller::context::Context;
use crate::error::ReconcileError;

/// How often the Secret is read again, at most, to renew the certificate or pick up cert-manager's
/// renewal (more often with a short `--webhook-certificate-lifetime`).
const CERT_CHECK_PERIOD: Duration = Duration::from_secs(300);

/// Why the webhook could not start, or could not decide one request.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Generating a certificate failed.
    #[error("generating the webhook certificate failed")]
    Generate(#[from] rcgen::Error),
    /// Reading or writing the certificate's Secret failed.
    #[error("reading or writing Secret {secret} failed")]
    Secret {
        /// `namespace/name`.
        secret: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// With `--webhook-certificate=secret`, the Secret does not exist.
    #[error(
        "Secret {secret} not found: with --webhook-certificate=secret, cert-manager (or you) must write it"
    )]
    SecretMissing {
        /// `namespace/name`.
        secret: String,
    },
    /// The Secret lacks `tls.crt` or `tls.key`.
    #[error("Secret {secret} has no tls.crt and tls.key")]
    SecretIncomplete {
        /// `namespace/name`.
        secret: String,
    },
    /// Other replicas kept rewriting the Secret.
    #[error("Secret {secret} kept changing while the certificate was issued")]
    SecretKeptChanging {
        /// `namespace/name`.
        secret: String,
    },
    /// Updating the configuration's `caBundle` failed.
    #[error("updating the caBundle of MutatingWebhookConfiguration {configuration} failed")]
    CaBundle {
        /// Its name.
        configuration: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The certificate or key is not PEM.
    #[error("reading the serving certificate or key failed")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// rustls refused the certificate or key.
    #[error("the serving certificate or key is unusable")]
    Key(#[source] rustls::Error),
    /// The listen address is taken or invalid.
    #[error("cannot serve the webhook on {address:?}")]
    Bind {
        /// The address given.
        address: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The admitted object is not a readable workload.
    #[error("decoding the admitted {kind} failed")]
    Decode {
        /// Its kind.
        kind: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Reading the referenced config failed.
    #[error("reading the referenced config failed")]
    Content(#[source] ReconcileError),
    /// The patch could not be encoded.
    #[error("encoding the patch failed")]
    Patch(#[source] serde_json::Error),
}

/// The path the apiserver calls for `kind`: `/mutate-<group>-<version>-<kind>`.
pub fn path(kind: WorkloadKind) -> String {
    let info = kind.info();
    format!(
        "/mutate-{}-{}-{}",
        info.group,
        info.version,
        info.kind.to_ascii_lowercase()
    )
}

/// Prepares the certificate and the configuration's caBundle, binds the listener, and serves until
/// `shutdown`. Certificate problems fail start-up; later renewal problems are logged and retried.
pub async fn serve(
    ctx: Arc<Context>,
    config: &WebhookConfig,
    shutdown: CancellationToken,
) -> Result<(), WebhookError> {
    let namespace = crate::lease::lease_namespace(config.secret_namespace.as_deref());
    let svc = &config.service_name;
    let certs = CertificateConfig {
        dns_names: vec![
            format!("{svc}.{namespace}.svc"),
            format!("{svc}.{namespace}.svc.cluster.local"),
            "localhost".into(),
        ],
        namespace,
        secret_name: config.secret_name.clone(),
        source: config.certificate,
        configuration_name: config.configuration_name.clone(),
        lifetime: config.certificate_lifetime,
    };
    // Often enough that every replica picks up a renewal well before a third of the lifetime is spent.
    let check_period = CERT_CHECK_PERIOD
        .min(config.certificate_lifetime / 10)
        .max(Duration::from_secs(1));
    let mut serving = certs::load(&ctx.client, &certs).await?;
    let tls = RustlsConfig::from_config(server::tls_config(&serving)?);
    let app = WorkloadKind::BUILT_IN
        .into_iter()
        .fold(Router::new(), |app, kind| {
            app.route(&path(kind), post(admission::mutate))
        })
        .with_state(ctx.clone());
    server::serve(config.address, tls.clone(), app, shutdown.clone()).await?;
    // Renewal: the Secret is the source of truth, so every replica converges on the same certificate.
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(check_period) => {}
            }
            match certs::load(&ctx.client, &certs).await {
                Ok(fresh) if fresh == serving => {}
                Ok(fresh) => match server::tls_config(&fresh) {
                    Ok(config) => {
                        tls.reload_from_config(config);
                        serving = fresh;
                        tracing::info!("webhook serving certificate replaced");
                    }
                    Err(e) => {
                        tracing::warn!(error = %crate::api::error_chain(&e), "webhook certificate unusable; keeping the current one")
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %crate::api::error_chain(&e), "webhook certificate renewal failed; retrying later")
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_served_on_the_path_the_chart_configures() {
        let paths: Vec<String> = WorkloadKind::BUILT_IN.into_iter().map(path).collect();
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
