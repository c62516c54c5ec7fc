//! The webhook's certificates: issued by wave into a Secret, or read from one that cert-manager writes.
//!
//! ```text
//! Secret <ns>/<webhook-secret-name> ◄─ ensure (create once; renew when a third of the lifetime is
//!        (ca.crt, tls.crt, tls.key)    left; one CA per Secret, shared by every replica)
//!            │                       └─► sync_ca_bundle: MutatingWebhookConfiguration caBundle
//!            ▼
//! load ─► ServingCert (PEM) ─► server.rs
//! ```
//!
//! With `--webhook-certificate=secret`, cert-manager (or you) writes the Secret and the `caBundle`, and
//! wave only reads the Secret.

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use wave_core::names;

use super::WebhookError;
use crate::api::is_conflict;
use crate::config::CertificateSource;

/// How long a generated serving certificate is valid; it is renewed when a third is left.
const CERT_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Secret annotation: when the serving certificate expires (RFC 3339).
const NOT_AFTER: &str = "wave.pusher.com/not-after";

/// Where the certificate lives and what it must name.
#[derive(Clone, Debug)]
pub struct CertificateConfig {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret_name: String,
    /// Whether wave issues the certificate or only reads it.
    pub source: CertificateSource,
    /// The MutatingWebhookConfiguration to keep current.
    pub configuration_name: String,
    /// DNS names for the serving certificate.
    pub dns_names: Vec<String>,
}

impl CertificateConfig {
    fn secret(&self) -> String {
        format!("{}/{}", self.namespace, self.secret_name)
    }
}

/// The PEM-encoded serving certificate (with its chain) and key.
#[derive(Debug, PartialEq, Eq)]
pub struct ServingCert {
    /// `tls.crt`.
    pub cert_pem: String,
    /// `tls.key`.
    pub key_pem: String,
}

/// What wave issues: its CA, the serving certificate, and when the latter expires.
struct Bundle {
    ca_pem: String,
    serving: ServingCert,
    not_after: Timestamp,
}

fn generate(dns_names: &[String]) -> Result<Bundle, WebhookError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
    };
    let now = time::OffsetDateTime::now_utc();
    let lifetime = time::Duration::seconds(CERT_LIFETIME.as_secs() as i64);
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "wave webhook CA");
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + lifetime;
    let ca_cert = ca.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    leaf.distinguished_name
        .push(DnType::CommonName, dns_names.first().cloned().unwrap_or_default());
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now - time::Duration::hours(1);
    leaf.not_after = now + lifetime;
    let issuer = Issuer::new(ca, ca_key);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca_pem: ca_cert.pem(),
        serving: ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
        not_after: Timestamp::from_second((now + lifetime).unix_timestamp()).unwrap_or(Timestamp::MAX),
    })
}

/// `tls.crt` and `tls.key` of a TLS Secret.
fn serving_cert(secret: &Secret) -> Option<ServingCert> {
    Some(ServingCert {
        cert_pem: text(secret, "tls.crt")?,
        key_pem: text(secret, "tls.key")?,
    })
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// The Secret that keeps `bundle` (without name and namespace).
fn to_secret(bundle: &Bundle) -> Secret {
    let data = [
        ("ca.crt", &bundle.ca_pem),
        ("tls.crt", &bundle.serving.cert_pem),
        ("tls.key", &bundle.serving.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            annotations: Some([(NOT_AFTER.to_string(), bundle.not_after.to_string())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

fn from_secret(secret: &Secret) -> Option<Bundle> {
    let not_after = secret
        .metadata
        .annotations
        .as_ref()?
        .get(NOT_AFTER)?
        .parse()
        .ok()?;
    Some(Bundle {
        ca_pem: text(secret, "ca.crt")?,
        serving: serving_cert(secret)?,
        not_after,
    })
}

/// Whether a certificate expiring at `not_after` is to be renewed at `now`: when less than a third of
/// its lifetime is left.
fn needs_renewal(not_after: Timestamp, now: Timestamp) -> bool {
    let left = not_after.duration_since(now);
    left.as_secs() < (CERT_LIFETIME.as_secs() / 3) as i64
}

/// Reads the certificate from its Secret, creating or renewing it when needed.
async fn ensure(client: &Client, cfg: &CertificateConfig) -> Result<Bundle, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let secret_err = |e: kube::Error| WebhookError::Secret {
        secret: cfg.secret(),
        source: Box::new(e),
    };
    for _ in 0..3 {
        let existing = api.get_opt(&cfg.secret_name).await.map_err(secret_err)?;
        if let Some(bundle) = existing
            .as_ref()
            .and_then(from_secret)
            .filter(|b| !needs_renewal(b.not_after, Timestamp::now()))
        {
            return Ok(bundle);
        }
        let bundle = generate(&cfg.dns_names)?;
        let mut secret = to_secret(&bundle);
        secret.metadata.name = Some(cfg.secret_name.clone());
        secret.metadata.namespace = Some(cfg.namespace.clone());
        secret.metadata.resource_version = existing
            .as_ref()
            .and_then(|s| s.metadata.resource_version.clone());
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
                tracing::info!(secret = %cfg.secret(), not_after = %bundle.not_after, "webhook certificate issued");
                return Ok(bundle);
            }
            // 409: AlreadyExists on create, Conflict on replace.
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(secret_err(e)),
        }
    }
    Err(WebhookError::SecretKeptChanging { secret: cfg.secret() })
}

/// The serving certificate wave uses now: issued (and the `caBundle` updated) or read, per
/// `--webhook-certificate`.
pub async fn load(client: &Client, cfg: &CertificateConfig) -> Result<ServingCert, WebhookError> {
    match cfg.source {
        CertificateSource::Generate => {
            let bundle = ensure(client, cfg).await?;
            sync_ca_bundle(client, &cfg.configuration_name, &bundle.ca_pem).await?;
            Ok(bundle.serving)
        }
        CertificateSource::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
            let secret = api
                .get_opt(&cfg.secret_name)
                .await
                .map_err(|e| WebhookError::Secret {
                    secret: cfg.secret(),
                    source: Box::new(e),
                })?
                .ok_or_else(|| WebhookError::SecretMissing { secret: cfg.secret() })?;
            serving_cert(&secret).ok_or_else(|| WebhookError::SecretIncomplete { secret: cfg.secret() })
        }
    }
}

/// Writes `ca_pem` into every webhook of the configuration (JSON patch per entry).
async fn sync_ca_bundle(client: &Client, configuration: &str, ca_pem: &str) -> Result<(), WebhookError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let err = |e: kube::Error| WebhookError::CaBundle {
        configuration: configuration.to_string(),
        source: Box::new(e),
    };
    let Some(mwc) = api.get_opt(configuration).await.map_err(err)? else {
        tracing::warn!(name = %configuration, "MutatingWebhookConfiguration not found; the apiserver cannot call the webhook until it exists");
        return Ok(());
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let ops: Vec<json_patch::PatchOperation> = mwc
        .webhooks
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, w)| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes())
        })
        .map(|(i, _)| {
            json_patch::PatchOperation::Add(json_patch::AddOperation {
                path: json_patch::jsonptr::PointerBuf::from_tokens([
                    "webhooks".to_string(),
                    i.to_string(),
                    "clientConfig".into(),
                    "caBundle".into(),
                ]),
                value: serde_json::Value::String(encoded.clone()),
            })
        })
        .collect();
    if ops.is_empty() {
        return Ok(());
    }
    let params = PatchParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(configuration, &params, &Patch::<()>::Json(json_patch::Patch(ops)))
        .await
        .map_err(err)?;
    tracing::info!(name = %configuration, "webhook caBundle updated");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    #[test]
    fn a_certificate_is_renewed_when_a_third_of_its_lifetime_is_left() {
        let not_after = at("2026-04-01T00:00:00Z");
        // 90 days of lifetime: renew with less than 30 days left.
        assert!(
            !needs_renewal(not_after, at("2026-03-01T00:00:00Z")),
            "31 days left"
        );
        assert!(
            needs_renewal(not_after, at("2026-03-03T00:00:00Z")),
            "29 days left"
        );
        assert!(needs_renewal(not_after, at("2026-05-01T00:00:00Z")), "expired");
    }

    #[test]
    fn a_generated_bundle_reads_back_from_its_secret() {
        let bundle = generate(&["wave-webhook.ops.svc".into()]).unwrap();
        let secret = to_secret(&bundle);
        let read = from_secret(&secret).expect("a complete Secret");
        assert_eq!(read.serving, bundle.serving);
        assert_eq!(read.not_after, bundle.not_after);
        let mut incomplete = secret;
        incomplete.data.as_mut().unwrap().remove("tls.key");
        assert!(from_secret(&incomplete).is_none());
        assert!(serving_cert(&incomplete).is_none());
    }
}
