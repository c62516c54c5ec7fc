//! Keeping the MutatingWebhookConfiguration current: the `caBundle` (when wave issues the certificate)
//! and, in every mode, the path token in each webhook's `clientConfig`.
//!
//! ```text
//! GET configuration ─► per webhook: caBundle differs?           ─► add /webhooks/i/clientConfig/caBundle
//!                                   service.path (or url) is wave's
//!                                   but lacks the current token? ─► add …/service/path (or …/url)
//!                    ─► one JSON patch, or none
//! ```
//!
//! It runs at start-up and at every re-read of the Secrets, so a `helm upgrade` (or anyone) that put
//! the token-less path back is repaired; until then the apiserver's calls get a 404, and with
//! `failurePolicy: Ignore` the object is admitted unmodified and the controller catches up. Paths that
//! are not wave's are left alone. Log lines name what changed, never the path.

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use wave_core::names;
use wave_core::webhook::{PathToken, repaired_path, repaired_url};

use crate::error::WebhookError;

fn op(i: usize, tail: &[&str], value: String) -> json_patch::PatchOperation {
    let tokens = ["webhooks".to_string(), i.to_string(), "clientConfig".into()]
        .into_iter()
        .chain(tail.iter().map(|t| t.to_string()));
    json_patch::PatchOperation::Add(json_patch::AddOperation {
        path: json_patch::jsonptr::PointerBuf::from_tokens(tokens),
        value: serde_json::Value::String(value),
    })
}

/// The operations that bring `mwc` up to date: `(operations, caBundles changed, paths changed)`.
fn plan(
    mwc: &MutatingWebhookConfiguration,
    ca_pem: Option<&str>,
    token: &PathToken,
) -> (Vec<json_patch::PatchOperation>, usize, usize) {
    let (mut ops, mut cas, mut paths) = (Vec::new(), 0, 0);
    for (i, hook) in mwc.webhooks.iter().flatten().enumerate() {
        let cc = &hook.client_config;
        if let Some(ca) = ca_pem
            && cc.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca.as_bytes())
        {
            let encoded = base64::engine::general_purpose::STANDARD.encode(ca);
            ops.push(op(i, &["caBundle"], encoded));
            cas += 1;
        }
        let repaired = match (&cc.service, &cc.url) {
            (Some(service), _) => {
                let current = service.path.as_deref().unwrap_or("/");
                match repaired_path(current, token) {
                    Some(path) => Some(op(i, &["service", "path"], path)),
                    None if !wave_core::webhook::is_wave_path(current) => {
                        tracing::warn!(webhook = %hook.name, "this webhook calls a path wave does not serve; left as it is");
                        None
                    }
                    None => None,
                }
            }
            (None, Some(url)) => repaired_url(url, token).map(|url| op(i, &["url"], url)),
            (None, None) => None,
        };
        if let Some(repaired) = repaired {
            ops.push(repaired);
            paths += 1;
        }
    }
    (ops, cas, paths)
}

/// `message` with every occurrence of `token` replaced by `<token>`.
fn redact(message: &str, token: &PathToken) -> String {
    message.replace(token.expose(), "<token>")
}

/// Brings `configuration` up to date: `ca_pem` into every `caBundle` (`None`: someone else keeps it,
/// e.g. cert-manager's CA injector) and `token` into every path of wave's.
pub async fn sync(
    client: &Client,
    configuration: &str,
    ca_pem: Option<&str>,
    token: &PathToken,
) -> Result<(), WebhookError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let err = |e: kube::Error| WebhookError::Registration {
        configuration: configuration.to_string(),
        source: Box::new(e),
    };
    let Some(mwc) = api.get_opt(configuration).await.map_err(err)? else {
        tracing::warn!(name = %configuration, "MutatingWebhookConfiguration not found; the apiserver cannot call the webhook until it exists");
        return Ok(());
    };
    let (ops, cas, paths) = plan(&mwc, ca_pem, token);
    if ops.is_empty() {
        return Ok(());
    }
    let params = PatchParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(configuration, &params, &Patch::<()>::Json(json_patch::Patch(ops)))
        .await
        .map_err(|e| match e {
            // A refusal may quote the value it refused (a validation or policy message): never the token.
            kube::Error::Api(status) => WebhookError::RegistrationRefused {
                configuration: configuration.to_string(),
                reason: redact(&crate::api::describe(&kube::Error::Api(status)), token),
            },
            other => err(other),
        })?;
    tracing::info!(name = %configuration, ca_bundles = cas, paths, "webhook registration updated");
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wave_core::webhook::TOKEN_BYTES;

    use super::*;

    fn configuration(hooks: serde_json::Value) -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({"metadata": {"name": "wave"}, "webhooks": hooks})).unwrap()
    }

    fn hook(name: &str, client_config: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "clientConfig": client_config, "sideEffects": "None", "admissionReviewVersions": ["v1"]})
    }

    fn apply(
        mwc: &MutatingWebhookConfiguration,
        ops: Vec<json_patch::PatchOperation>,
    ) -> MutatingWebhookConfiguration {
        let mut doc = serde_json::to_value(mwc).unwrap();
        json_patch::patch(&mut doc, &json_patch::Patch(ops)).unwrap();
        serde_json::from_value(doc).unwrap()
    }

    #[test]
    fn every_path_of_wave_gets_the_token_and_a_second_sync_changes_nothing() {
        let token = PathToken::from_random(&[1; TOKEN_BYTES]);
        let t = token.expose();
        let mwc = configuration(json!([
            hook(
                "deployments.wave.pusher.com",
                json!({"service": {"name": "w", "namespace": "ops", "path": "/mutate-apps-v1-deployment"}})
            ),
            hook(
                "statefulsets.wave.pusher.com",
                json!({"url": "https://127.0.0.1:9443/mutate-apps-v1-statefulset/stale"})
            ),
            hook(
                "other.example.com",
                json!({"service": {"name": "o", "namespace": "ops", "path": "/validate"}})
            ),
        ]));
        let (ops, cas, paths) = plan(&mwc, Some("CA"), &token);
        assert_eq!((cas, paths), (3, 2));
        let synced = apply(&mwc, ops);
        let hooks = synced.webhooks.as_ref().unwrap();
        let cc = |i: usize| &hooks[i].client_config;
        assert_eq!(
            cc(0).service.as_ref().unwrap().path.as_deref(),
            Some(format!("/mutate-apps-v1-deployment/{t}").as_str())
        );
        assert_eq!(
            cc(1).url.as_deref(),
            Some(format!("https://127.0.0.1:9443/mutate-apps-v1-statefulset/{t}").as_str())
        );
        assert_eq!(cc(2).service.as_ref().unwrap().path.as_deref(), Some("/validate"));
        assert_eq!(plan(&synced, Some("CA"), &token).0.len(), 0, "nothing left to do");
    }

    #[test]
    fn a_refusal_quoting_the_path_never_carries_the_token() {
        let token = PathToken::from_random(&[3; TOKEN_BYTES]);
        let message = format!(
            "webhooks[0].clientConfig.service.path: Invalid value: \"/mutate-apps-v1-deployment/{}\"",
            token.expose()
        );
        let redacted = redact(&message, &token);
        assert!(!redacted.contains(token.expose()), "{redacted}");
        assert!(
            redacted.contains("/mutate-apps-v1-deployment/<token>"),
            "{redacted}"
        );
    }

    #[test]
    fn without_a_ca_only_the_paths_are_written() {
        let token = PathToken::from_random(&[2; TOKEN_BYTES]);
        let mwc = configuration(json!([hook(
            "deployments.wave.pusher.com",
            json!({"service": {"name": "w", "namespace": "ops", "path": "/mutate-apps-v1-deployment"}})
        )]));
        let (ops, cas, paths) = plan(&mwc, None, &token);
        assert_eq!((ops.len(), cas, paths), (1, 0, 1));
        let synced = apply(&mwc, ops);
        assert!(synced.webhooks.unwrap()[0].client_config.ca_bundle.is_none());
    }
}
