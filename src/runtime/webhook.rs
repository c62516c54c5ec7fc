//! The mutating admission webhook: HTTPS on `--webhook-bind-address`, with its own certificates.
//!
//! ```text
//! Secret <ns>/<webhook-secret-name> ◄─ ensure_certificate (create once; renew when a third of the
//!        (CA + serving cert)            lifetime is left; one CA per Secret, shared by every replica)
//!            │                       └─► MutatingWebhookConfiguration.webhooks[*].clientConfig.caBundle
//!            │   (--webhook-certificate=secret: cert-manager writes the Secret and the caBundle;
//!            │    wave only reads the Secret)
//!            ▼
//! rustls (certificate swapped in place) ─► /mutate-apps-v1-{deployment,statefulset,daemonset}
//!     AdmissionReview ─► workload view ─► refs + content cache (same code as the reconciler)
//!                      ─► core::admission::decide ─► JSON patch ─► AdmissionResponse (always allowed)
//! ```
//!
//! It never denies: any internal error admits the object unmodified, is logged and counted, and the
//! reconciler catches up. Before the watches have listed it admits unmodified too. No Events on dry-run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as AdmissionOp};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use super::content;
use super::context::Context;
use super::error::{self, RunError};
use super::events::EventType;
use crate::cli::WebhookCertificate;
use crate::core::admission::{self, Mutation, Operation};
use crate::core::hash::missing_message;
use crate::core::workload::Workload;
use crate::names::{self, action, reason};

/// How long a generated serving certificate is valid; it is renewed when a third is left.
const CERT_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// How often the Secret is read again, to renew the certificate or pick up cert-manager's renewal.
const CERT_CHECK_PERIOD: Duration = Duration::from_secs(300);
/// Secret annotation: when the serving certificate expires (RFC 3339).
const NOT_AFTER: &str = "wave.pusher.com/not-after";

/// Where the webhook's certificate lives and what it must name.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Listen address.
    pub bind: SocketAddr,
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret_name: String,
    /// Whether wave issues the certificate or only reads it.
    pub certificate: WebhookCertificate,
    /// The MutatingWebhookConfiguration to keep current.
    pub configuration_name: String,
    /// DNS names for the serving certificate.
    pub dns_names: Vec<String>,
}

/// The PEM-encoded serving certificate (with its chain) and key.
#[derive(PartialEq, Eq)]
struct ServingCert {
    cert_pem: String,
    key_pem: String,
}

/// What wave issues: its CA, the serving certificate, and when the latter expires.
struct Bundle {
    ca_pem: String,
    serving: ServingCert,
    not_after: k8s_openapi::jiff::Timestamp,
}

fn cert_error(e: impl std::fmt::Display) -> RunError {
    RunError::Webhook(format!("generating the webhook certificate: {e}"))
}

fn generate(dns_names: &[String]) -> Result<Bundle, RunError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
    };
    let now = time::OffsetDateTime::now_utc();
    let lifetime = time::Duration::seconds(CERT_LIFETIME.as_secs() as i64);
    let ca_key = KeyPair::generate().map_err(cert_error)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "wave webhook CA");
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + lifetime;
    let ca_cert = ca.self_signed(&ca_key).map_err(cert_error)?;
    let key = KeyPair::generate().map_err(cert_error)?;
    let mut leaf = CertificateParams::new(dns_names.to_vec()).map_err(cert_error)?;
    leaf.subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    leaf.distinguished_name
        .push(DnType::CommonName, dns_names.first().cloned().unwrap_or_default());
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now - time::Duration::hours(1);
    leaf.not_after = now + lifetime;
    let issuer = Issuer::new(ca, ca_key);
    let cert = leaf.signed_by(&key, &issuer).map_err(cert_error)?;
    let not_after =
        k8s_openapi::jiff::Timestamp::from_second((now + lifetime).unix_timestamp()).map_err(cert_error)?;
    Ok(Bundle {
        ca_pem: ca_cert.pem(),
        serving: ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
        not_after,
    })
}

/// `tls.crt` and `tls.key` of a TLS Secret.
fn serving_cert(secret: &Secret) -> Option<ServingCert> {
    let data = secret.data.as_ref()?;
    let text = |k: &str| data.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok());
    Some(ServingCert {
        cert_pem: text("tls.crt")?,
        key_pem: text("tls.key")?,
    })
}

fn from_secret(secret: &Secret) -> Option<Bundle> {
    let ca_pem = secret
        .data
        .as_ref()?
        .get("ca.crt")
        .and_then(|b| String::from_utf8(b.0.clone()).ok())?;
    let not_after = secret
        .metadata
        .annotations
        .as_ref()?
        .get(NOT_AFTER)?
        .parse()
        .ok()?;
    Some(Bundle {
        ca_pem,
        serving: serving_cert(secret)?,
        not_after,
    })
}

fn needs_renewal(bundle: &Bundle) -> bool {
    let left = bundle
        .not_after
        .duration_since(k8s_openapi::jiff::Timestamp::now());
    left.as_secs() < (CERT_LIFETIME.as_secs() / 3) as i64
}

/// Reads the certificate from its Secret, creating or renewing it when needed.
async fn ensure_certificate(client: &Client, cfg: &WebhookConfig) -> Result<Bundle, RunError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let secret_err = |e: kube::Error| {
        RunError::Webhook(format!(
            "reading or writing Secret {}/{}: {}",
            cfg.namespace,
            cfg.secret_name,
            error::describe(&e)
        ))
    };
    for _ in 0..3 {
        let existing = api.get_opt(&cfg.secret_name).await.map_err(secret_err)?;
        if let Some(bundle) = existing
            .as_ref()
            .and_then(from_secret)
            .filter(|b| !needs_renewal(b))
        {
            return Ok(bundle);
        }
        let bundle = generate(&cfg.dns_names)?;
        let data = [
            ("ca.crt", &bundle.ca_pem),
            ("tls.crt", &bundle.serving.cert_pem),
            ("tls.key", &bundle.serving.key_pem),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(cfg.secret_name.clone()),
                namespace: Some(cfg.namespace.clone()),
                annotations: Some([(NOT_AFTER.to_string(), bundle.not_after.to_string())].into()),
                resource_version: existing
                    .as_ref()
                    .and_then(|s| s.metadata.resource_version.clone()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Default::default()
        };
        // Create, or replace at the version read: another replica racing us makes this conflict, and the
        // loop then uses what it wrote.
        let written = match existing {
            None => api.create(&PostParams::default(), &secret).await,
            Some(_) => {
                api.replace(&cfg.secret_name, &PostParams::default(), &secret)
                    .await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = %format!("{}/{}", cfg.namespace, cfg.secret_name), not_after = %bundle.not_after, "webhook certificate issued");
                return Ok(bundle);
            }
            // 409: AlreadyExists on create, Conflict on replace.
            Err(e) if error::is_conflict(&e) => continue,
            Err(e) => return Err(secret_err(e)),
        }
    }
    Err(RunError::Webhook(format!(
        "Secret {}/{} kept changing",
        cfg.namespace, cfg.secret_name
    )))
}

/// The serving certificate wave uses now: issued (and the `caBundle` updated) or read, per
/// `--webhook-certificate`.
async fn load_certificate(client: &Client, cfg: &WebhookConfig) -> Result<ServingCert, RunError> {
    match cfg.certificate {
        WebhookCertificate::Generate => {
            let bundle = ensure_certificate(client, cfg).await?;
            sync_ca_bundle(client, cfg, &bundle.ca_pem).await?;
            Ok(bundle.serving)
        }
        WebhookCertificate::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
            let name = format!("{}/{}", cfg.namespace, cfg.secret_name);
            let secret = api
                .get_opt(&cfg.secret_name)
                .await
                .map_err(|e| RunError::Webhook(format!("reading Secret {name}: {}", error::describe(&e))))?;
            let secret = secret.ok_or_else(|| {
                RunError::Webhook(format!(
                    "Secret {name} not found: with --webhook-certificate=secret, cert-manager (or you) must write it"
                ))
            })?;
            serving_cert(&secret)
                .ok_or_else(|| RunError::Webhook(format!("Secret {name} has no tls.crt and tls.key")))
        }
    }
}

/// Writes `ca_pem` into every webhook of the configuration (JSON patch per entry).
async fn sync_ca_bundle(client: &Client, cfg: &WebhookConfig, ca_pem: &str) -> Result<(), RunError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let err = |e: kube::Error| {
        RunError::Webhook(format!(
            "updating the caBundle of MutatingWebhookConfiguration {}: {}",
            cfg.configuration_name,
            error::describe(&e)
        ))
    };
    let Some(mwc) = api.get_opt(&cfg.configuration_name).await.map_err(err)? else {
        tracing::warn!(name = %cfg.configuration_name, "MutatingWebhookConfiguration not found; the apiserver cannot call the webhook until it exists");
        return Ok(());
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let ops: Vec<serde_json::Value> = mwc
        .webhooks
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, w)| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes()))
        .map(|(i, _)| serde_json::json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}))
        .collect();
    if ops.is_empty() {
        return Ok(());
    }
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).expect("valid patch operations");
    let params = PatchParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&cfg.configuration_name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(err)?;
    tracing::info!(name = %cfg.configuration_name, "webhook caBundle updated");
    Ok(())
}

/// The serving certificate, swapped in place on renewal.
#[derive(Debug)]
struct CertResolver(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

fn certified_key(bundle: &ServingCert) -> Result<CertifiedKey, RunError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| RunError::Webhook(format!("reading the serving certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes())
        .map_err(|e| RunError::Webhook(format!("reading the serving key: {e}")))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| RunError::Webhook(format!("unsupported serving key: {e}")))?;
    Ok(CertifiedKey::new(certs, signer))
}

/// Prepares the certificate and the configuration's caBundle, binds the listener, and serves until
/// `shutdown`. Certificate problems fail start-up; later renewal problems are logged and retried.
pub async fn serve(
    ctx: Arc<Context>,
    cfg: WebhookConfig,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let mut serving = load_certificate(&ctx.client, &cfg).await?;
    let resolver = Arc::new(CertResolver(ArcSwap::from_pointee(certified_key(&serving)?)));
    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind(cfg.bind)
        .await
        .map_err(|source| RunError::Bind {
            what: "webhook",
            address: cfg.bind.to_string(),
            source,
        })?;
    tracing::info!(local = %cfg.bind, "serving the admission webhook");
    let app = Router::new()
        .route("/mutate-apps-v1-deployment", post(mutate))
        .route("/mutate-apps-v1-statefulset", post(mutate))
        .route("/mutate-apps-v1-daemonset", post(mutate))
        .with_state(ctx.clone());
    // Renewal: the Secret is the source of truth, so every replica converges on the same certificate.
    let (renew_ctx, renew_cfg, renew_stop) = (ctx.clone(), cfg.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = renew_stop.cancelled() => return,
                () = tokio::time::sleep(CERT_CHECK_PERIOD) => {}
            }
            match load_certificate(&renew_ctx.client, &renew_cfg).await {
                Ok(fresh) if fresh == serving => {}
                Ok(fresh) => match certified_key(&fresh) {
                    Ok(key) => {
                        resolver.0.store(Arc::new(key));
                        serving = fresh;
                        tracing::info!("webhook serving certificate replaced");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook certificate unusable; keeping the current one")
                    }
                },
                Err(e) => tracing::warn!(error = %e, "webhook certificate renewal failed; retrying later"),
            }
        }
    });
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((stream, _)) = accepted else { continue };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok(())
}

async fn mutate(
    State(ctx): State<Arc<Context>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            ctx.metrics
                .webhook_requests
                .get_or_create(&super::metrics::WebhookLabels { result: "error" })
                .inc();
            // Without a request uid the apiserver cannot match any reply, so it counts the call as
            // failed and `failurePolicy: Ignore` admits the object.
            tracing::warn!(error = %e, "malformed AdmissionReview; admitting");
            return Json(AdmissionResponse::invalid(e.to_string()).into_review());
        }
    };
    let response = AdmissionResponse::from(&request);
    let (result, response) = match admit(&ctx, &request).await {
        Ok(None) => ("unchanged", response),
        Ok(Some((label, patch))) => match response.clone().with_patch(patch) {
            Ok(r) => (label, r),
            Err(e) => {
                tracing::warn!(error = %e, "cannot serialise the patch; admitting unmodified");
                ("error", response)
            }
        },
        Err(why) => {
            // Never deny: the reconciler catches up.
            tracing::warn!(kind = %request.kind.kind, namespace = ?request.namespace, name = %request.name, error = %why, "webhook could not decide; admitting unmodified");
            ("error", response)
        }
    };
    ctx.metrics
        .webhook_requests
        .get_or_create(&super::metrics::WebhookLabels { result })
        .inc();
    Json(response.into_review())
}

/// The patch for one request, or `None` to admit it as it is. `Err` is an internal error.
async fn admit(
    ctx: &Context,
    req: &AdmissionRequest<DynamicObject>,
) -> Result<Option<(&'static str, json_patch::Patch)>, String> {
    let operation = match req.operation {
        AdmissionOp::Create => Operation::Create,
        AdmissionOp::Update => Operation::Update,
        _ => return Ok(None),
    };
    let Some(object) = &req.object else {
        return Ok(None);
    };
    let mut value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    // The object may not carry its namespace yet on CREATE.
    if let (Some(ns), Some(meta)) = (&req.namespace, value.get_mut("metadata")) {
        meta["namespace"] = serde_json::json!(ns);
    }
    let parse_err = |e: serde_json::Error| format!("decoding the {}: {e}", req.kind.kind);
    let workload: Workload = match req.kind.kind.as_str() {
        "Deployment" => serde_json::from_value::<Deployment>(value)
            .map_err(parse_err)?
            .into(),
        "StatefulSet" => serde_json::from_value::<StatefulSet>(value)
            .map_err(parse_err)?
            .into(),
        "DaemonSet" => serde_json::from_value::<DaemonSet>(value)
            .map_err(parse_err)?
            .into(),
        _ => return Ok(None),
    };
    if !workload.is_opted_in() {
        return Ok(None);
    }
    {
        let tracker = content::read(&ctx.tracker);
        if !tracker.is_ready() || !tracker.watches_namespace(&workload.id.namespace) {
            return Ok(None);
        }
    }
    let mut refs = workload.references();
    content::read(&ctx.tracker).restrict_to_watched(&mut refs);
    let fetched = ctx
        .content
        .resolve(&refs, &ctx.tracker)
        .await
        .map_err(|e| super::reconcile::error_chain(&e))?;
    let mutation = admission::decide(&workload, &refs, &fetched, operation);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ops = admission::patch_ops(&workload, &mutation, &now);
    let dry_run = req.dry_run;
    let label = match &mutation {
        Mutation::None => return Ok(None),
        Mutation::SetHash(hash) => {
            if !dry_run {
                let note = format!("Configuration hash updated to {hash}");
                publish(
                    ctx,
                    &workload,
                    EventType::Normal,
                    reason::CONFIG_CHANGED,
                    action::UPDATE_CONFIG_HASH,
                    note,
                )
                .await;
            }
            "hashed"
        }
        Mutation::Gate { missing } => {
            if !dry_run {
                let message = missing_message(missing);
                // The reconciler reports each distinct missing set once; this is that report.
                ctx.reported_missing
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(workload.id.clone(), message.clone());
                // Wave's reason and message, so alerts written for Wave keep working.
                let note = format!(
                    "Disabled scheduling due to missing children: {message}. The pods are held by the scheduling gate {} until it exists.",
                    names::SCHEDULING_GATE
                );
                publish(
                    ctx,
                    &workload,
                    EventType::Warning,
                    reason::SCHEDULING_DISABLED,
                    action::GATE_SCHEDULING,
                    note,
                )
                .await;
            }
            "gated"
        }
    };
    let patch = serde_json::from_value(serde_json::Value::Array(ops)).map_err(|e| e.to_string())?;
    Ok(Some((label, patch)))
}

async fn publish(ctx: &Context, w: &Workload, type_: EventType, reason: &str, action: &str, note: String) {
    if let Err(e) = ctx.events.publish(w, type_, reason, action, note).await {
        tracing::warn!(workload = %w.id, reason, error = %error::describe(&e), "could not publish Event");
    }
}
