//! The webhook's path token (`wave_core::webhook`), kept in a Secret of wave's namespace so that every
//! replica serves the same one, whichever way the certificate is issued.
//!
//! ```text
//! Secret <ns>/<--webhook-token-secret-name>   data.token
//!   absent              ─► create it with a new token   (409: another replica did; use theirs)
//!   no usable token     ─► replace it at the version read with a new token   (409: read again)
//!                          (the chart creates it empty, so wave needs no `create` on Secrets for it)
//!   a usable token      ─► use it
//! ```
//!
//! Rotation: delete the Secret (or its `token` key). The next replica to re-read it writes a new token
//! and the new path into the registration; the others follow at their next re-read (`super::serve`).
//! The token's value never appears in a log line, an error or a metric: only the Secret's name does.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use wave_core::names;
use wave_core::webhook::{PathToken, TOKEN_BYTES};

use crate::api::is_conflict;
use crate::error::WebhookError;

/// A new token from the operating system's CSPRNG.
fn generate() -> Result<PathToken, WebhookError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| WebhookError::Random)?;
    Ok(PathToken::from_random(&bytes))
}

/// The token stored in `secret`, or why there is none to use.
fn stored(secret: &Secret) -> Result<PathToken, String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(names::WEBHOOK_TOKEN))
        .ok_or_else(|| format!("no data key {}", names::WEBHOOK_TOKEN))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| "the token is not text".to_string())?;
    PathToken::parse(text.trim()).map_err(|e| e.to_string())
}

/// Reads the token from `namespace/name`, creating the Secret or its token when needed.
pub async fn ensure(client: &Client, namespace: &str, name: &str) -> Result<PathToken, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = || format!("{namespace}/{name}");
    let secret_err = |e: kube::Error| WebhookError::Secret {
        secret: secret(),
        source: Box::new(e),
    };
    for _ in 0..3 {
        let existing = api.get_opt(name).await.map_err(secret_err)?;
        if let Some(s) = &existing {
            match stored(s) {
                Ok(token) => return Ok(token),
                // The chart's empty Secret says nothing; anything else is worth a line.
                Err(why) if s.data.as_ref().is_some_and(|d| !d.is_empty()) => {
                    tracing::warn!(secret = %secret(), why, "the webhook's path token is unusable; writing a new one")
                }
                Err(_) => {}
            }
        }
        let token = generate()?;
        let data = BTreeMap::from([(
            names::WEBHOOK_TOKEN.to_string(),
            ByteString(token.expose().as_bytes().to_vec()),
        )]);
        let written = match existing {
            None => {
                let new = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(namespace.to_string()),
                        ..Default::default()
                    },
                    type_: Some("Opaque".into()),
                    data: Some(data),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &new).await
            }
            // Replaced at the version read (its labels and annotations kept): a replica racing us makes
            // this conflict, and the loop then uses what it wrote.
            Some(mut s) => {
                s.data = Some(data);
                s.string_data = None;
                api.replace(name, &PostParams::default(), &s).await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = %secret(), "webhook path token written");
                return Ok(token);
            }
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(secret_err(e)),
        }
    }
    Err(WebhookError::SecretKeptChanging { secret: secret() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn two_generated_tokens_differ_and_read_back_from_a_secret() {
        let (a, b) = (generate().unwrap(), generate().unwrap());
        assert_ne!(a, b);
        let s = with(&[("token", a.expose().as_bytes())]);
        assert_eq!(stored(&s), Ok(a));
    }

    #[test]
    fn an_empty_or_unusable_secret_is_given_a_new_token_and_why_never_quotes_it() {
        assert!(stored(&Secret::default()).is_err());
        assert!(stored(&with(&[])).is_err());
        let why = stored(&with(&[("token", b"short-secret")])).unwrap_err();
        assert!(!why.contains("short-secret"), "{why}");
        assert!(stored(&with(&[("token", &[0xff; 50])])).is_err());
    }
}
