//! The configuration of `wave run`, as plain values.
//!
//! ```text
//! wave binary: clap arguments + WAVE_* variables ─► cli::RunArgs ─► Config ─► wave_runtime::run
//! ```
//!
//! The runtime depends on this type only, never on the argument parser, so tests and other front ends
//! can build a `Config` directly, and every flag's parsing and defaults live in one place (`cli.rs` of
//! the `wave` binary).

use std::collections::BTreeSet;
use std::fmt;
use std::net::{Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

/// Everything `wave run` needs to know.
#[derive(Clone, Debug)]
pub struct Config {
    /// Namespaces to watch; `None` watches all.
    pub namespaces: Option<BTreeSet<String>>,
    /// How often every workload is checked again; zero turns the resync off.
    pub sync_period: Duration,
    /// Leader election; `None` means this replica always writes.
    pub leader_election: Option<LeaderElection>,
    /// Writes per second across all kinds (`f64::INFINITY`: no limit).
    pub update_rate: f64,
    /// Burst of the write token bucket.
    pub update_burst: u32,
    /// Where `/metrics` is served; `None` disables it.
    pub metrics_address: Option<BindAddress>,
    /// Where `/livez` and `/readyz` are served; `None` disables them.
    pub health_address: Option<BindAddress>,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter (tracing `EnvFilter` syntax).
    pub log_filter: String,
    /// Reconciles running at once.
    pub concurrency: usize,
    /// The admission webhook; `None` disables it.
    pub webhook: Option<WebhookConfig>,
    /// How long the webhook's scheduling gate may hold a workload's pods.
    pub max_gate_duration: Duration,
    /// The Secret whose `hash-key` keys the config hash (HMAC-SHA256); `None` keeps Wave's SHA-256.
    pub hash_key_secret: Option<SecretName>,
    /// The least time between two config-triggered rollouts of one workload (zero: no coalescing).
    pub min_rollout_interval: Duration,
    /// When a config object counts as flapping.
    pub flap: wave_core::flap::FlapPolicy,
    /// Namespaces left alone (`--namespaces-to-ignore`).
    pub namespaces_to_ignore: BTreeSet<String>,
    /// `--namespace-selector`: act only on workloads in the namespaces whose labels it selects, as they
    /// are now (watched live); `None` for every namespace.
    pub namespace_selector: Option<wave_core::selector::LabelSelector>,
    /// The workload kinds to manage.
    pub kinds: Vec<wave_core::workload::WorkloadKind>,
    /// `--workload-resource`: more kinds, looked up by discovery at start-up and added to `kinds`.
    pub workload_resources: Vec<wave_core::kind::ResourceSpec>,
    /// At most this many wave-triggered rollouts in progress at once (zero: no pacing).
    pub max_concurrent_rollouts: usize,
    /// `--restart-strategy`: how a workload without `wave.pusher.com/restart` gets new config.
    pub restart_strategy: wave_core::inplace::Strategy,
    /// `--agent-image`: the in-place agent's image; none turns restarting in place off.
    pub agent_image: Option<String>,
    /// How long a paced StatefulSet or DaemonSet rollout may take before it counts as failed.
    pub rollout_deadline: Duration,
    /// Keep config history for every workload that does not say `config-history: "false"`.
    pub config_history: bool,
    /// `--legacy-wave-cleanup`: remove the owner references Wave ≤ v0.6 put on config (patches config
    /// objects); without it they are reported, and left.
    pub legacy_wave_cleanup: bool,
    /// `--reloader-compat` (off by default): workloads opted in through Stakater Reloader's annotations
    /// are handled as Reloader would (`docs/migrating-from-reloader.md`); `None` when off.
    pub reloader: Option<wave_core::reloader::Options>,
    /// With `--reloader-compat`: Reloader's alert on each reload (`--alert-on-reload` and the other
    /// `--alert-*` flags); `None` when off.
    pub alert: Option<AlertConfig>,
    /// With `--reloader-compat`: Reloader's `--webhook-url`, posted to instead of reloading.
    pub webhook_url: Option<SinkUrl>,
    /// Reloader's own alert variables (`ALERT_ON_RELOAD`, …) found set: wave reads `WAVE_ALERT_*`, and
    /// warns at start-up that these are not read.
    pub unread_reloader_env: Vec<&'static str>,
    /// `--own-deployment`: wave's own Deployment, where start-up warnings are published as Events.
    pub own_deployment: Option<wave_core::workload::WorkloadRef>,
    /// `--cross-namespace-references`: whether `extra-*` may name config in another namespace.
    pub cross_namespace: wave_core::refs::CrossNamespace,
    /// What the binary is (`wave_build_info`, the startup log line).
    pub build: BuildInfo,
}

/// What the binary is: stamped in at build time by the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// The crate version (`0.1.0`).
    pub version: &'static str,
    /// The git commit it was built from, or `unknown`.
    pub commit: &'static str,
    /// When it was built (RFC 3339, UTC).
    pub date: &'static str,
}

/// Where Reloader's alert goes (`ALERT_ON_RELOAD` and the other `ALERT_*` settings of Reloader).
#[derive(Clone, Debug)]
pub struct AlertConfig {
    /// `ALERT_SINK`: how the alert is written.
    pub sink: wave_core::reloader::AlertSink,
    /// `ALERT_WEBHOOK_URL`.
    pub url: SinkUrl,
    /// `ALERT_WEBHOOK_PROXY`: an HTTP proxy reached with `CONNECT`.
    pub proxy: Option<SinkUrl>,
    /// `ALERT_ADDITIONAL_INFO`: put before each message (a cluster's name, say).
    pub additional_info: Option<String>,
}

/// A URL wave posts to. A chat webhook's URL is its credential (Slack's and Teams' carry the token in
/// the path), so it is never printed: `Debug` and `Display` show the scheme and host only.
#[derive(Clone, PartialEq, Eq)]
pub struct SinkUrl(http::Uri);

impl SinkUrl {
    /// Parses an absolute `http` or `https` URL; the error names what is wrong, never the URL.
    pub fn parse(s: &str) -> Result<Self, String> {
        let uri: http::Uri = s
            .trim()
            .parse()
            .map_err(|_| "not a URL (expected http://HOST/... or https://HOST/...)".to_string())?;
        match (uri.scheme_str(), uri.host()) {
            (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(Self(uri)),
            (Some("http" | "https"), _) => Err("the URL has no host".to_string()),
            _ => Err("the URL must start with http:// or https://".to_string()),
        }
    }

    /// The URL itself, to send a request to; never to print.
    pub fn uri(&self) -> &http::Uri {
        &self.0
    }
}

impl fmt::Display for SinkUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = self.0.scheme_str().unwrap_or("?");
        let host = self.0.host().unwrap_or("?");
        write!(f, "{scheme}://{host}/…")
    }
}

impl fmt::Debug for SinkUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SinkUrl({self})")
    }
}

/// `NAMESPACE/NAME` of a Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl SecretName {
    /// Parses `NAMESPACE/NAME`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Ok(Self {
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
            _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
        }
    }
}

impl std::fmt::Display for SecretName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where the leader-election Lease lives and how long it lasts.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace; `None`: `POD_NAMESPACE`, then the in-cluster namespace, then `default`.
    pub namespace: Option<String>,
    /// Lease duration in seconds.
    pub duration_seconds: u64,
}

/// The admission webhook's settings.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Address of the HTTPS server.
    pub address: BindAddress,
    /// The MutatingWebhookConfiguration whose `caBundle` and paths wave keeps current.
    pub configuration_name: String,
    /// The Secret holding the CA and the serving certificate.
    pub secret_name: String,
    /// The Secret holding the path token only the apiserver may present (same namespace).
    pub token_secret_name: String,
    /// Their namespace; `None` defaults like the Lease's.
    pub secret_namespace: Option<String>,
    /// The Service in front of the webhook, named in the serving certificate.
    pub service_name: String,
    /// Where the serving certificate comes from.
    pub certificate: CertificateSource,
    /// Lifetime of a serving certificate wave issues (its CA lives ten times as long).
    pub certificate_lifetime: Duration,
}

/// A listen address: a port on every interface (Go's `:8080`), or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindAddress {
    /// Every interface, IPv6 and IPv4 alike, as Go's `:port` listens.
    AnyInterface(u16),
    /// Exactly this address.
    Exact(SocketAddr),
}

impl BindAddress {
    /// Parses a Go-style address: `:8080` (every interface), `127.0.0.1:8080`, `[::1]:8080`; `0` or an
    /// empty string means "disabled" (`None`).
    pub fn parse_optional(address: &str) -> Result<Option<Self>, String> {
        if address == "0" || address.is_empty() {
            return Ok(None);
        }
        if let Some(port) = address.strip_prefix(':') {
            return port
                .parse()
                .map(|p| Some(BindAddress::AnyInterface(p)))
                .map_err(|_| not_an_address(address));
        }
        address
            .parse()
            .map(|a| Some(BindAddress::Exact(a)))
            .map_err(|_| not_an_address(address))
    }

    /// The socket address to bind first: `[::]:port` for every interface (dual-stack on Linux).
    pub fn primary(self) -> SocketAddr {
        match self {
            BindAddress::AnyInterface(port) => (Ipv6Addr::UNSPECIFIED, port).into(),
            BindAddress::Exact(a) => a,
        }
    }

    /// Where to bind when the primary address's family is not available (a host without IPv6).
    pub fn fallback(self) -> Option<SocketAddr> {
        match self {
            BindAddress::AnyInterface(port) => Some((std::net::Ipv4Addr::UNSPECIFIED, port).into()),
            BindAddress::Exact(_) => None,
        }
    }
}

fn not_an_address(address: &str) -> String {
    format!("{address:?} is not an address (use :8080, 127.0.0.1:8080, [::1]:8080, or 0 to disable)")
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindAddress::AnyInterface(port) => write!(f, ":{port}"),
            BindAddress::Exact(a) => write!(f, "{a}"),
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The accepted spellings.
    pub const NAMES: [&'static str; 2] = ["text", "json"];
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?} is not a log format (text or json)")),
        }
    }
}

/// Where the webhook's serving certificate comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertificateSource {
    /// wave issues it from its own CA, keeps both in the Secret, renews the serving certificate, and
    /// keeps the configuration's `caBundle` current.
    Generate,
    /// Read it from the Secret (`tls.crt`, `tls.key`), written by cert-manager or by you, who also keep
    /// the `caBundle` current; re-read when it changes.
    Secret,
}

impl CertificateSource {
    /// The accepted spellings.
    pub const NAMES: [&'static str; 2] = ["generate", "secret"];
}

impl FromStr for CertificateSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "generate" => Ok(CertificateSource::Generate),
            "secret" => Ok(CertificateSource::Secret),
            other => Err(format!(
                "{other:?} is not a certificate source (generate or secret)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_bind_addresses_parse() {
        assert_eq!(
            BindAddress::parse_optional(":8080"),
            Ok(Some(BindAddress::AnyInterface(8080)))
        );
        assert_eq!(
            BindAddress::parse_optional("127.0.0.1:9"),
            Ok(Some(BindAddress::Exact("127.0.0.1:9".parse().unwrap())))
        );
        assert_eq!(
            BindAddress::parse_optional("[::1]:9"),
            Ok(Some(BindAddress::Exact("[::1]:9".parse().unwrap())))
        );
        assert_eq!(BindAddress::parse_optional("0"), Ok(None));
        for bad in ["localhost", ":http", ":99999"] {
            assert!(
                BindAddress::parse_optional(bad)
                    .unwrap_err()
                    .contains("not an address"),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_interface_means_both_address_families() {
        let any = BindAddress::AnyInterface(8080);
        assert_eq!(any.primary(), "[::]:8080".parse().unwrap());
        assert_eq!(any.fallback(), Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(
            BindAddress::Exact("127.0.0.1:1".parse().unwrap()).fallback(),
            None
        );
    }
}
