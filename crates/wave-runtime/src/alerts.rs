//! Posts about reloads, for Reloader's users (`docs/migrating-from-reloader.md`, "Alerts and
//! --webhook-url"): the alert `--alert-on-reload` sends after each reload, and the notice `--webhook-url`
//! sends instead of one. What is posted, byte for byte, is `wave_core::reloader::alert`'s; this module
//! only carries it.
//!
//! ```text
//! reconcile (controller::reloader): a reload written ─► Outbox::alert(message)  ─┐ try_send: never waits;
//!                                   a change, --webhook-url ─► Outbox::webhook() ─┤ full ⇒ dropped (metric)
//!                                                                                 ▼
//!   the sender task, one letter at a time ─► POST (10 s timeout, no redirects, the proxy by CONNECT)
//!     ─► refused or no answer: again after 1 s, then 2 s (3 attempts; a 4xx but 408 and 429 is final)
//!     ─► wave_alerts_total{sink, result=sent|failed|dropped}; a warning naming the sink and the status
//! ```
//!
//! A reconcile never waits for a sink: a slow or failing one costs a metric and a log line, and the
//! queue's bound caps the memory it can hold. No URL is ever logged (a chat webhook's URL is its token:
//! `config::SinkUrl`), and no message holds config data.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, USER_AGENT};
use http::{HeaderValue, Request, Uri};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::TokioExecutor;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::mpsc;
use wave_core::refs::ConfigKey;
use wave_core::reloader::{AlertSink, Post, alert_post, webhook_post};

use crate::config::{AlertConfig, SinkUrl};
use crate::error::AlertError;
use crate::metrics::AlertLabels;

/// Letters waiting to be sent; past this, new ones are dropped (and counted).
const QUEUE: usize = 1024;
/// Tries per letter.
const ATTEMPTS: u32 = 3;
/// The wait before the second try; it doubles before each later one.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// How long one try may take, answer included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The `sink` label of `--webhook-url`'s posts.
const WEBHOOK_URL: &str = "webhook-url";
/// Objects whose last `--webhook-url` post is remembered, at most; past that the memory starts afresh
/// (the cost: one object's change may be posted once more, by another workload it reloads).
const POSTED_CAP: usize = 4096;

/// Where one letter goes.
#[derive(Clone, Copy, Debug)]
enum To {
    Alert(AlertSink),
    WebhookUrl,
}

impl To {
    fn label(self) -> &'static str {
        match self {
            To::Alert(sink) => sink.as_str(),
            To::WebhookUrl => WEBHOOK_URL,
        }
    }

    fn accepts(self, status: u16) -> bool {
        match self {
            To::Alert(sink) => sink.accepts(status),
            // Reloader reads no status here; wave takes what it takes from any sink.
            To::WebhookUrl => AlertSink::Raw.accepts(status),
        }
    }
}

struct Letter {
    to: To,
    post: Post,
}

/// The queue of posts, and what `--webhook-url` was last told of each object. Cheap to share.
#[derive(Clone)]
pub struct Outbox {
    alert: Option<(AlertSink, Option<String>)>,
    webhook_url: bool,
    tx: mpsc::Sender<Letter>,
    results: Family<AlertLabels, Counter>,
    /// Per object, the SHA-1 `--webhook-url` was last told about: one post per change of an object,
    /// however many workloads it reloads (Reloader posts once per changed object).
    posted: Arc<Mutex<HashMap<ConfigKey, String>>>,
}

impl Outbox {
    /// Starts the sender task, if alerts or `--webhook-url` are on. Fails on a setting that can never
    /// work (an `https` URL with no CA certificate to verify it), so that it is found at start-up.
    pub fn start(
        alert: Option<&AlertConfig>,
        webhook_url: Option<&SinkUrl>,
        results: Family<AlertLabels, Counter>,
    ) -> Result<Option<Self>, AlertError> {
        if alert.is_none() && webhook_url.is_none() {
            return Ok(None);
        }
        let alert_route = alert.map(|a| Route::new(&a.url, a.proxy.as_ref())).transpose()?;
        let webhook_route = webhook_url.map(|url| Route::new(url, None)).transpose()?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(send_all(rx, alert_route, webhook_route, results.clone()));
        Ok(Some(Self {
            alert: alert.map(|a| (a.sink, a.additional_info.clone())),
            webhook_url: webhook_url.is_some(),
            tx,
            results,
            posted: Arc::default(),
        }))
    }

    /// Queues Reloader's alert with `message`, if alerts are on.
    pub fn alert(&self, message: &str) {
        if let Some((sink, info)) = &self.alert {
            self.queue(To::Alert(*sink), alert_post(*sink, info.as_deref(), message));
        }
    }

    /// Whether `--webhook-url` is on: changes are posted there instead of reloading.
    pub fn notifies_only(&self) -> bool {
        self.webhook_url
    }

    /// Queues `--webhook-url`'s post for `changed` now at SHA-1 `sha`, unless it was posted already
    /// (another workload's reload of the same change). Returns whether it was queued.
    pub fn webhook(&self, changed: &ConfigKey, sha: &str) -> bool {
        if !self.webhook_url {
            return false;
        }
        {
            let mut posted = self.posted.lock().unwrap_or_else(|e| e.into_inner());
            if posted.get(changed).is_some_and(|last| last == sha) {
                return false;
            }
            if posted.len() >= POSTED_CAP {
                posted.clear();
            }
            posted.insert(changed.clone(), sha.to_string());
        }
        self.queue(To::WebhookUrl, webhook_post());
        true
    }

    fn queue(&self, to: To, post: Post) {
        if self.tx.try_send(Letter { to, post }).is_err() {
            tracing::warn!(
                sink = to.label(),
                "too many posts waiting to be sent; this one is dropped"
            );
            self.count(to, "dropped");
        }
    }

    fn count(&self, to: To, result: &'static str) {
        count(&self.results, to, result);
    }
}

fn count(results: &Family<AlertLabels, Counter>, to: To, result: &'static str) {
    results
        .get_or_create(&AlertLabels {
            sink: to.label(),
            result,
        })
        .inc();
}

/// One destination: its URL and the client that reaches it (through the proxy, if any).
struct Route {
    uri: Uri,
    host: HeaderValue,
    client: Sender,
}

enum Sender {
    Direct(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
    Proxied(Client<HttpsConnector<Tunnel<HttpConnector>>, Full<Bytes>>),
}

impl Route {
    fn new(url: &SinkUrl, proxy: Option<&SinkUrl>) -> Result<Self, AlertError> {
        let original = url.uri().clone();
        let tls = tls_config(original.scheme_str() == Some("https"))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(TIMEOUT));
        let builder = || {
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls.clone())
                .https_or_http()
                .enable_http1()
        };
        let authority = match original.port() {
            Some(port) => format!("{}:{port}", original.host().unwrap_or_default()),
            None => original.host().unwrap_or_default().to_string(),
        };
        let host = HeaderValue::from_str(&authority)
            .map_err(|_| AlertError::Url("the URL's host is not a valid Host header"))?;
        let (uri, client) = match proxy {
            None => (
                original,
                Sender::Direct(Client::builder(TokioExecutor::new()).build(builder().wrap_connector(http))),
            ),
            Some(proxy) if proxy.uri().scheme_str() != Some("http") => {
                return Err(AlertError::Url(
                    "the proxy must be an http:// address (wave reaches it with CONNECT, in plain HTTP)",
                ));
            }
            Some(proxy) => {
                let mut tunnel = Tunnel::new(without_userinfo(proxy.uri())?, http);
                if let Some(auth) = basic_auth(proxy.uri()) {
                    tunnel = tunnel.with_auth(auth);
                }
                (
                    // The tunnel is opened to the request's port, which must then be written out.
                    with_port(&original)?,
                    Sender::Proxied(
                        Client::builder(TokioExecutor::new()).build(builder().wrap_connector(tunnel)),
                    ),
                )
            }
        };
        Ok(Self { uri, host, client })
    }

    /// One try: `Ok` with the status of the answer, `Err` saying why there was none (never the URL).
    async fn post(&self, post: &Post) -> Result<u16, String> {
        let request = Request::post(self.uri.clone())
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, post.content_type)
            .header(USER_AGENT, concat!("wave/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(Bytes::from(post.body.clone())))
            .map_err(|_| "the request could not be built".to_string())?;
        let answer = match &self.client {
            Sender::Direct(client) => tokio::time::timeout(TIMEOUT, client.request(request)).await,
            Sender::Proxied(client) => tokio::time::timeout(TIMEOUT, client.request(request)).await,
        };
        match answer {
            Ok(Ok(response)) => Ok(response.status().as_u16()),
            Ok(Err(e)) => Err(describe(&e)),
            Err(_) => Err(format!("no answer within {} s", TIMEOUT.as_secs())),
        }
    }
}

/// The error and its causes, which name the failure (refused, reset, certificate) and never the URL:
/// hyper's errors do not carry it.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn tls_config(https: bool) -> Result<rustls::ClientConfig, AlertError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if https && roots.is_empty() {
        return Err(AlertError::NoCertificates);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(AlertError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn with_port(uri: &Uri) -> Result<Uri, AlertError> {
    if uri.port().is_some() {
        return Ok(uri.clone());
    }
    let port = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let host = uri.host().unwrap_or_default();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    format!("{}://{host}:{port}{path}", uri.scheme_str().unwrap_or("http"))
        .parse()
        .map_err(|_| AlertError::Url("the URL cannot be given an explicit port"))
}

fn without_userinfo(uri: &Uri) -> Result<Uri, AlertError> {
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{}://{host_port}", uri.scheme_str().unwrap_or("http"))
        .parse()
        .map_err(|_| AlertError::Url("the proxy URL is malformed"))
}

/// `Proxy-Authorization` from a proxy URL's `user:password@`, percent-decoded, as Go's HTTP client
/// sends it.
fn basic_auth(uri: &Uri) -> Option<HeaderValue> {
    use base64::Engine as _;
    let authority = uri.authority()?.as_str();
    let (userinfo, _) = authority.rsplit_once('@')?;
    let token = base64::engine::general_purpose::STANDARD.encode(percent_decoded(userinfo));
    let mut value = HeaderValue::from_str(&format!("Basic {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `%XX` escapes turned back into bytes (a password with `@` or `:` in a URL is written `%40`, `%3A`).
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// The sender task: one letter at a time, each tried up to [`ATTEMPTS`] times.
async fn send_all(
    mut letters: mpsc::Receiver<Letter>,
    alert: Option<Route>,
    webhook_url: Option<Route>,
    results: Family<AlertLabels, Counter>,
) {
    while let Some(letter) = letters.recv().await {
        let route = match letter.to {
            To::Alert(_) => alert.as_ref(),
            To::WebhookUrl => webhook_url.as_ref(),
        };
        let Some(route) = route else { continue };
        let result = match deliver(route, letter.to, &letter.post).await {
            Ok(()) => "sent",
            Err(why) => {
                tracing::warn!(
                    sink = letter.to.label(),
                    "a post about a reload was not delivered: {why}"
                );
                "failed"
            }
        };
        count(&results, letter.to, result);
    }
}

async fn deliver(route: &Route, to: To, post: &Post) -> Result<(), String> {
    let mut wait = FIRST_RETRY;
    let mut attempt = 1;
    loop {
        let why = match route.post(post).await {
            Ok(status) if to.accepts(status) => return Ok(()),
            // A client error other than a timeout or a rate limit will not change on its own.
            Ok(status @ 400..=499) if status != 408 && status != 429 => {
                return Err(format!("the sink answered {status}"));
            }
            Ok(status @ 300..=399) => format!("the sink answered {status} (redirects are not followed)"),
            Ok(status) => format!("the sink answered {status}"),
            Err(why) => why,
        };
        if attempt == ATTEMPTS {
            return Err(format!("{why} (after {ATTEMPTS} attempts)"));
        }
        tracing::debug!(
            sink = to.label(),
            attempt,
            "a post about a reload failed, retrying: {why}"
        );
        tokio::time::sleep(wait).await;
        wait *= 2;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> SinkUrl {
        SinkUrl::parse(s).unwrap()
    }

    #[test]
    fn a_url_without_a_port_gets_its_scheme_s_default_for_the_tunnel() {
        assert_eq!(
            with_port(url("https://hooks.example/services/T/B/x?a=1").uri()).unwrap(),
            "https://hooks.example:443/services/T/B/x?a=1"
        );
        assert_eq!(with_port(url("http://h/p").uri()).unwrap(), "http://h:80/p");
        assert_eq!(
            with_port(url("http://h:8080/p").uri()).unwrap(),
            "http://h:8080/p"
        );
    }

    #[test]
    fn a_proxy_s_credentials_become_basic_auth_and_leave_its_address() {
        let proxy = url("http://me:s3cret@proxy.example:3128");
        assert_eq!(
            without_userinfo(proxy.uri()).unwrap(),
            "http://proxy.example:3128/"
        );
        // base64("me:s3cret")
        assert_eq!(basic_auth(proxy.uri()).unwrap(), "Basic bWU6czNjcmV0");
        assert!(basic_auth(url("http://proxy.example:3128").uri()).is_none());
        // base64("me:p@ss:w")
        let escaped = url("http://me:p%40ss%3Aw@proxy.example:3128");
        assert_eq!(basic_auth(escaped.uri()).unwrap(), "Basic bWU6cEBzczp3");
    }

    #[tokio::test]
    async fn an_https_proxy_is_refused_at_start_up() {
        let refused = Route::new(
            &url("http://sink.example/x"),
            Some(&url("https://proxy.example:3128")),
        );
        assert!(matches!(refused, Err(AlertError::Url(why)) if why.contains("http://")));
    }

    #[test]
    fn a_sink_url_prints_its_host_only_and_refuses_what_is_not_http() {
        let slack = url("https://hooks.slack.com/services/T000/B000/XXXXSECRET");
        assert_eq!(slack.to_string(), "https://hooks.slack.com/…");
        assert!(!format!("{slack:?}").contains("SECRET"));
        let refused = SinkUrl::parse("ftp://x/SECRET").unwrap_err();
        assert!(!refused.contains("SECRET"), "{refused}");
        assert!(
            SinkUrl::parse("not a url SECRET")
                .unwrap_err()
                .contains("not a URL")
        );
        assert!(SinkUrl::parse("https:///path").is_err());
    }
}
