//! The webhook's certificates: issued by wave into a Secret, or read from one that cert-manager writes.
//!
//! ```text
//! Secret <ns>/<webhook-secret-name> ◄─ ensure: create once; renew the serving certificate when a third
//!   ca.crt   published CAs                of its lifetime is left, signed by the same long-lived CA;
//!   ca.key   the CA's key                 renew the CA itself only when a third of *its* lifetime is
//!   tls.crt, tls.key  serving cert        left, publishing old and new CA together
//!            │                       └─► registration::sync: MutatingWebhookConfiguration caBundle = ca.crt
//!            ▼
//! load ─► ServingCert (PEM) ─► server.rs
//! ```
//!
//! Why the CA outlives the serving certificate: replicas re-read the Secret only every few minutes, so
//! after one replica renews, the others still serve the previous serving certificate for a while. It
//! must stay trusted, so renewing it never changes the `caBundle`. When the CA itself is renewed (every
//! few years), `ca.crt` holds the new CA and the previous one, so every serving certificate in use is
//! trusted throughout. A Secret written by an older wave (no `ca.key`) goes through that same rollover.
//!
//! With `--webhook-certificate=secret`, cert-manager (or you) writes the Secret and the `caBundle`, and
//! wave only reads the Secret.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::api::is_conflict;
use crate::config::CertificateSource;
use crate::error::WebhookError;
use crate::owner;
use wave_core::workload::WorkloadRef;

/// How long a generated serving certificate is valid by default; it is renewed when a third is left.
pub const CERT_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// How long the CA that signs it is valid, as a multiple of the serving certificate's lifetime
/// (10 × 90 days: about two and a half years).
const CA_LIFETIMES: u32 = 10;
/// Secret annotation: when the serving certificate expires (RFC 3339).
const NOT_AFTER: &str = "wave.pusher.com/not-after";
/// Secret annotation: when the CA expires (RFC 3339).
const CA_NOT_AFTER: &str = "wave.pusher.com/ca-not-after";
/// The CA's subject. Serving certificates name it as their issuer, so it never changes.
const CA_NAME: &str = "wave webhook CA";

/// Where the certificate lives and what it must name.
#[derive(Clone, Debug)]
pub struct CertificateConfig {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret_name: String,
    /// Whether wave issues the certificate or only reads it.
    pub source: CertificateSource,
    /// DNS names for the serving certificate.
    pub dns_names: Vec<String>,
    /// Lifetime of a serving certificate wave issues.
    pub lifetime: Duration,
    /// wave's own Deployment (`--own-deployment`): the Secret wave issues is owned by it, so an
    /// uninstall deletes it (`crate::owner`). Read when the Secret is written or names no Deployment
    /// of that name, never kept, so a Deployment deleted and made again (a new uid) owns it too.
    pub owner: Option<WorkloadRef>,
}

impl CertificateConfig {
    fn secret(&self) -> String {
        format!("{}/{}", self.namespace, self.secret_name)
    }
}

/// The PEM-encoded serving certificate (with its chain) and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingCert {
    /// `tls.crt`.
    pub cert_pem: String,
    /// `tls.key`.
    pub key_pem: String,
}

/// The CA wave signs serving certificates with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ca {
    cert_pem: String,
    key_pem: String,
    not_after: Timestamp,
}

/// What wave keeps in the Secret.
#[derive(Clone, Debug)]
struct Bundle {
    /// `ca.crt`: the current CA first, then during a rollover the previous one.
    published_pem: String,
    /// The current CA, with its key; `None` in a Secret written before wave kept the key.
    ca: Option<Ca>,
    serving: ServingCert,
    not_after: Timestamp,
}

fn ca_params() -> Result<rcgen::CertificateParams, rcgen::Error> {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, CA_NAME);
    Ok(ca)
}

fn after(now: time::OffsetDateTime, lifetime: Duration) -> time::OffsetDateTime {
    now + time::Duration::seconds(lifetime.as_secs().min(i64::MAX as u64) as i64)
}

fn timestamp(t: time::OffsetDateTime) -> Timestamp {
    Timestamp::from_second(t.unix_timestamp()).unwrap_or(Timestamp::MAX)
}

/// A new CA valid for `lifetime`.
fn generate_ca(lifetime: Duration) -> Result<Ca, WebhookError> {
    let now = time::OffsetDateTime::now_utc();
    let key = rcgen::KeyPair::generate()?;
    let mut params = ca_params()?;
    params.not_before = now - time::Duration::hours(1);
    params.not_after = after(now, lifetime);
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: timestamp(params.not_after),
    })
}

/// A serving certificate for `dns_names` (and 127.0.0.1) signed by `ca`, valid for `lifetime`.
// NOTE: the issuer is rebuilt from the CA's fixed subject and its key rather than parsed from its
// certificate (rcgen's `Issuer::from_ca_cert_pem` needs its `x509-parser` feature): the issuer name and
// the authority key identifier (derived from the public key) come out the same.
fn generate_serving(
    ca: &Ca,
    dns_names: &[String],
    lifetime: Duration,
) -> Result<(ServingCert, Timestamp), WebhookError> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};
    let now = time::OffsetDateTime::now_utc();
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::new(ca_params()?, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    leaf.distinguished_name
        .push(DnType::CommonName, dns_names.first().cloned().unwrap_or_default());
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now - time::Duration::hours(1);
    // Never past the CA: a serving certificate outliving its issuer would stop verifying early.
    let not_after = after(now, lifetime).min(
        time::OffsetDateTime::from_unix_timestamp(ca.not_after.as_second())
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
    );
    leaf.not_after = not_after;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok((
        ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
        timestamp(not_after),
    ))
}

/// What to write when `existing` (if any) needs renewing at `now`: the same CA while it has more than
/// a third of its lifetime left, else a new one published beside the previous.
fn renew(existing: Option<&Bundle>, cfg: &CertificateConfig, now: Timestamp) -> Result<Bundle, WebhookError> {
    let ca_lifetime = cfg.lifetime.saturating_mul(CA_LIFETIMES);
    let kept = existing
        .and_then(|b| b.ca.clone())
        .filter(|ca| !needs_renewal(ca.not_after, now, ca_lifetime));
    let (ca, published_pem) = match kept {
        Some(ca) => {
            let published = existing
                .map(|b| b.published_pem.clone())
                .unwrap_or_else(|| ca.cert_pem.clone());
            (ca, published)
        }
        None => {
            let ca = generate_ca(ca_lifetime)?;
            // The previous CA stays published: replicas still serve certificates it signed.
            let previous = existing.and_then(|b| first_pem(&b.published_pem));
            let published = match previous {
                Some(old) => format!("{}{old}", ca.cert_pem),
                None => ca.cert_pem.clone(),
            };
            (ca, published)
        }
    };
    let (serving, not_after) = generate_serving(&ca, &cfg.dns_names, cfg.lifetime)?;
    Ok(Bundle {
        published_pem,
        ca: Some(ca),
        serving,
        not_after,
    })
}

/// The first PEM block of `pem` (the current CA of a published `ca.crt`).
fn first_pem(pem: &str) -> Option<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let end = pem.find(END)? + END.len();
    Some(format!("{}\n", pem[..end].trim_start()))
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
    let mut data: std::collections::BTreeMap<String, ByteString> = [
        ("ca.crt", &bundle.published_pem),
        ("tls.crt", &bundle.serving.cert_pem),
        ("tls.key", &bundle.serving.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
    .collect();
    let mut annotations =
        std::collections::BTreeMap::from([(NOT_AFTER.to_string(), bundle.not_after.to_string())]);
    if let Some(ca) = &bundle.ca {
        data.insert("ca.key".into(), ByteString(ca.key_pem.as_bytes().to_vec()));
        annotations.insert(CA_NOT_AFTER.into(), ca.not_after.to_string());
    }
    Secret {
        metadata: ObjectMeta {
            annotations: Some(annotations),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

fn from_secret(secret: &Secret) -> Option<Bundle> {
    let annotations = secret.metadata.annotations.as_ref()?;
    let not_after = annotations.get(NOT_AFTER)?.parse().ok()?;
    let published_pem = text(secret, "ca.crt")?;
    let ca = (|| {
        Some(Ca {
            cert_pem: first_pem(&published_pem)?,
            key_pem: text(secret, "ca.key")?,
            not_after: annotations.get(CA_NOT_AFTER)?.parse().ok()?,
        })
    })();
    Some(Bundle {
        published_pem,
        ca,
        serving: serving_cert(secret)?,
        not_after,
    })
}

/// Whether something valid for `lifetime` and expiring at `not_after` is to be renewed at `now`: when
/// less than a third of its lifetime is left.
fn needs_renewal(not_after: Timestamp, now: Timestamp, lifetime: Duration) -> bool {
    let left = not_after.duration_since(now);
    left.as_secs() < (lifetime.as_secs() / 3) as i64
}

/// Whether `bundle` can be served as it is at `now`.
fn is_current(bundle: &Bundle, cfg: &CertificateConfig, now: Timestamp) -> bool {
    let ca_lifetime = cfg.lifetime.saturating_mul(CA_LIFETIMES);
    !needs_renewal(bundle.not_after, now, cfg.lifetime)
        && bundle
            .ca
            .as_ref()
            .is_some_and(|ca| !needs_renewal(ca.not_after, now, ca_lifetime))
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
        let now = Timestamp::now();
        let meta = existing.as_ref().map(|s| s.metadata.clone()).unwrap_or_default();
        let current = existing
            .as_ref()
            .and_then(from_secret)
            .filter(|b| is_current(b, cfg, now));
        // The Deployment is read only for a write: the certificate's, or the adoption of a Secret from
        // before wave gave it an owner (or from a wave run without one).
        let unowned = |id: &WorkloadRef| !owner::names(meta.owner_references.as_deref(), id);
        let owners = match &cfg.owner {
            Some(id) if current.is_none() || unowned(id) => owner::owner_in(client, id, &cfg.namespace)
                .await
                .and_then(|o| o.references_for(&cfg.namespace, meta.owner_references.as_deref())),
            _ => None,
        };
        let (bundle, issued) = match current {
            Some(current) if owners.is_none() => return Ok(current),
            Some(current) => (current, false),
            None => (
                renew(existing.as_ref().and_then(from_secret).as_ref(), cfg, now)?,
                true,
            ),
        };
        let mut secret = to_secret(&bundle);
        // What others put on it (labels, annotations: a GitOps tool's, Helm's) stays.
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.extend(secret.metadata.annotations.take().unwrap_or_default());
        secret.metadata = ObjectMeta {
            name: Some(cfg.secret_name.clone()),
            namespace: Some(cfg.namespace.clone()),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: owners.or(meta.owner_references),
            resource_version: meta.resource_version,
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
                if issued {
                    tracing::info!(secret = %cfg.secret(), not_after = %bundle.not_after, "webhook certificate issued");
                } else {
                    tracing::info!(secret = %cfg.secret(), "webhook certificate's Secret now owned by wave's Deployment");
                }
                return Ok(bundle);
            }
            // 409: AlreadyExists on create, Conflict on replace.
            Err(e) if is_conflict(&e) => continue,
            // Only the owner was to change: the certificate serves as it is, and the Secret is left
            // for an uninstall to leave behind.
            Err(e) if !issued => {
                // Only the status code: an apiserver's message about a Secret's write may quote it.
                tracing::warn!(secret = %cfg.secret(), status = ?crate::api::status_code(&e), "cannot make wave's Deployment the owner of the webhook certificate's Secret; an uninstall will leave it behind");
                return Ok(bundle);
            }
            Err(e) => return Err(secret_err(e)),
        }
    }
    Err(WebhookError::SecretKeptChanging { secret: cfg.secret() })
}

/// The serving certificate wave uses now, and the CAs the registration's `caBundle` must hold when
/// wave issued it (`None` when cert-manager or you keep the `caBundle`), per `--webhook-certificate`.
pub async fn load(
    client: &Client,
    cfg: &CertificateConfig,
) -> Result<(ServingCert, Option<String>), WebhookError> {
    match cfg.source {
        CertificateSource::Generate => {
            let bundle = ensure(client, cfg).await?;
            Ok((bundle.serving, Some(bundle.published_pem)))
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
            let serving = serving_cert(&secret)
                .ok_or_else(|| WebhookError::SecretIncomplete { secret: cfg.secret() })?;
            Ok((serving, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    fn config(lifetime: Duration) -> CertificateConfig {
        CertificateConfig {
            namespace: "ops".into(),
            secret_name: "wave-webhook-tls".into(),
            source: CertificateSource::Generate,
            dns_names: vec!["wave-webhook.ops.svc".into()],
            lifetime,
            owner: None,
        }
    }

    /// Whether `serving` verifies as `localhost` against the CAs in `published`.
    fn trusted(published: &str, serving: &ServingCert) -> bool {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(published.as_bytes()) {
            roots.add(ca.unwrap()).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .unwrap();
        let leaf = CertificateDer::from_pem_slice(serving.cert_pem.as_bytes()).unwrap();
        let name = ServerName::try_from("wave-webhook.ops.svc").unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn a_certificate_is_renewed_when_a_third_of_its_lifetime_is_left() {
        let not_after = at("2026-04-01T00:00:00Z");
        // 90 days of lifetime: renew with less than 30 days left.
        assert!(
            !needs_renewal(not_after, at("2026-03-01T00:00:00Z"), CERT_LIFETIME),
            "31 days left"
        );
        assert!(
            needs_renewal(not_after, at("2026-03-03T00:00:00Z"), CERT_LIFETIME),
            "29 days left"
        );
        assert!(
            needs_renewal(not_after, at("2026-05-01T00:00:00Z"), CERT_LIFETIME),
            "expired"
        );
    }

    #[test]
    fn a_generated_bundle_reads_back_from_its_secret() {
        let cfg = config(CERT_LIFETIME);
        let bundle = renew(None, &cfg, Timestamp::now()).unwrap();
        let secret = to_secret(&bundle);
        let read = from_secret(&secret).expect("a complete Secret");
        assert_eq!(read.serving, bundle.serving);
        assert_eq!(read.not_after, bundle.not_after);
        assert_eq!(read.ca, bundle.ca);
        assert!(is_current(&read, &cfg, Timestamp::now()));
        let mut incomplete = secret;
        incomplete.data.as_mut().unwrap().remove("tls.key");
        assert!(from_secret(&incomplete).is_none());
        assert!(serving_cert(&incomplete).is_none());
    }

    #[test]
    fn renewing_the_serving_certificate_keeps_the_ca_so_the_previous_one_stays_trusted() {
        let cfg = config(CERT_LIFETIME);
        let first = renew(None, &cfg, Timestamp::now()).unwrap();
        let second = renew(Some(&first), &cfg, Timestamp::now()).unwrap();
        assert_ne!(first.serving, second.serving, "a new serving certificate");
        assert_eq!(
            first.published_pem, second.published_pem,
            "the caBundle does not change"
        );
        assert!(
            trusted(&second.published_pem, &first.serving),
            "replicas not yet reloaded stay trusted"
        );
        assert!(trusted(&second.published_pem, &second.serving));
    }

    #[test]
    fn renewing_the_ca_publishes_the_old_and_the_new_together() {
        let cfg = config(CERT_LIFETIME);
        let first = renew(None, &cfg, Timestamp::now()).unwrap();
        // Far enough ahead that the CA itself has less than a third of its lifetime left.
        let later = first.ca.as_ref().unwrap().not_after - k8s_openapi::jiff::SignedDuration::from_hours(24);
        let second = renew(Some(&first), &cfg, later).unwrap();
        assert_ne!(second.ca, first.ca, "a new CA");
        assert!(
            trusted(&second.published_pem, &first.serving),
            "served by replicas not yet reloaded"
        );
        assert!(trusted(&second.published_pem, &second.serving));
        assert_eq!(second.published_pem.matches("BEGIN CERTIFICATE").count(), 2);
        // The next renewal keeps the new CA and drops nothing it still needs.
        let third = renew(Some(&second), &cfg, Timestamp::now()).unwrap();
        assert_eq!(third.ca, second.ca);
        assert!(trusted(&third.published_pem, &second.serving));
    }

    #[test]
    fn a_secret_from_before_wave_kept_the_ca_key_rolls_over_to_a_new_ca_without_breaking_trust() {
        let cfg = config(CERT_LIFETIME);
        let old = renew(None, &cfg, Timestamp::now()).unwrap();
        let mut secret = to_secret(&old);
        secret.data.as_mut().unwrap().remove("ca.key");
        let read = from_secret(&secret).unwrap();
        assert!(read.ca.is_none());
        assert!(!is_current(&read, &cfg, Timestamp::now()));
        let renewed = renew(Some(&read), &cfg, Timestamp::now()).unwrap();
        assert!(trusted(&renewed.published_pem, &old.serving));
        assert!(trusted(&renewed.published_pem, &renewed.serving));
    }

    #[test]
    fn a_serving_certificate_never_outlives_its_ca() {
        let cfg = config(CERT_LIFETIME);
        let first = renew(None, &cfg, Timestamp::now()).unwrap();
        let ca = first.ca.as_ref().unwrap();
        assert!(first.not_after <= ca.not_after);
    }
}
