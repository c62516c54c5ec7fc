//! Counts and times every request the controller's client makes to the apiserver: a tower layer on
//! the kube client's service stack.
//!
//! ```text
//! kube::Client ─► ApiMetricsLayer ─► (kube's stack: auth, TLS, HTTP)
//!   request: method + path + query ─► classify ─► {verb, resource}
//!   response (headers; a watch's body streams on) ─► wave_api_requests_total{verb,resource,code}
//!                                                   wave_api_request_duration_seconds{verb,resource}
//! ```
//!
//! Labels are `&'static str` from fixed sets (an unknown resource is `other`), so no object name or
//! namespace becomes a label.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use kube::client::Body;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

/// Labels `{verb, resource, code}` of `wave_api_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `other`.
    pub verb: &'static str,
    /// The resource's plural (`configmaps`, `deployments`, …) or `other`.
    pub resource: &'static str,
    /// `2xx`, `3xx`, `4xx`, `5xx`, or `error` when no response came.
    pub code: &'static str,
}

/// Labels `{verb, resource}` of `wave_api_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbResource {
    /// As in [`RequestLabels`].
    pub verb: &'static str,
    /// As in [`RequestLabels`].
    pub resource: &'static str,
}

/// The two API request metrics (clones share the series).
#[derive(Clone)]
pub struct ApiMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<VerbResource, Histogram>,
}

impl ApiMetrics {
    /// Creates the metrics and registers them under the `wave_` prefix.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16))),
        };
        let r = registry.sub_registry_with_prefix("wave");
        r.register(
            "api_requests",
            "Requests to the apiserver by verb, resource and response class",
            m.requests.clone(),
        );
        r.register(
            "api_request_duration_seconds",
            "Time from a request to the apiserver's response headers, by verb and resource",
            m.duration.clone(),
        );
        m
    }

    /// Records one request.
    pub fn record(&self, verb: &'static str, resource: &'static str, code: &'static str, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels { verb, resource, code })
            .inc();
        self.duration
            .get_or_create(&VerbResource { verb, resource })
            .observe(seconds);
    }
}

/// The resources wave's requests can name.
const RESOURCES: &[&str] = &[
    "configmaps",
    "secrets",
    "deployments",
    "statefulsets",
    "daemonsets",
    "cronjobs",
    "replicasets",
    "controllerrevisions",
    "pods",
    "events",
    "leases",
    "mutatingwebhookconfigurations",
    "namespaces",
];

/// `(verb, resource)` of a request to the Kubernetes API, from its method, path and query.
pub fn classify(method: &http::Method, path: &str, query: Option<&str>) -> (&'static str, &'static str) {
    // /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] or /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME…]
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        Some(&"apis") => parts.get(3..).unwrap_or_default(),
        _ => &[],
    };
    // A namespaced path, except a request for the namespace object itself (`namespaces/NS`).
    let rest = match rest {
        ["namespaces", _, resource, tail @ ..] => {
            let mut v = vec![*resource];
            v.extend_from_slice(tail);
            v
        }
        other => other.to_vec(),
    };
    let resource = rest
        .first()
        .and_then(|r| RESOURCES.iter().find(|known| *known == r))
        .copied()
        .unwrap_or("other");
    let item = rest.len() >= 2;
    let watching = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if item => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    };
    (verb, resource)
}

fn class(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// The tower layer that records [`ApiMetrics`] for every request.
#[derive(Clone)]
pub struct ApiMetricsLayer(pub ApiMetrics);

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = ApiMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiMetricsService {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// See [`ApiMetricsLayer`].
#[derive(Clone)]
pub struct ApiMetricsService<S> {
    inner: S,
    metrics: ApiMetrics,
}

impl<S, B> Service<http::Request<Body>> for ApiMetricsService<S>
where
    S: Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (verb, resource) = classify(request.method(), request.uri().path(), request.uri().query());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = result.as_ref().map_or("error", |r| class(r.status()));
            metrics.record(verb, resource, code, started.elapsed().as_secs_f64());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn requests_are_classified_by_verb_and_resource_and_names_never_become_labels() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/shop/configmaps/app",
                None,
                ("get", "configmaps"),
            ),
            (
                Method::GET,
                "/api/v1/configmaps",
                Some("labelSelector=a%3Db"),
                ("list", "configmaps"),
            ),
            (
                Method::GET,
                "/api/v1/secrets",
                Some("resourceVersion=1&watch=true"),
                ("watch", "secrets"),
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/shop/deployments/web",
                None,
                ("patch", "deployments"),
            ),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/shop/events",
                None,
                ("create", "events"),
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/wave/leases/wave",
                None,
                ("update", "leases"),
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/shop/replicasets",
                None,
                ("list", "replicasets"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop",
                None,
                ("get", "namespaces"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/shop/pods/web-1",
                None,
                ("delete", "pods"),
            ),
            (
                Method::GET,
                "/apis/example.com/v1/namespaces/shop/widgets/w",
                None,
                ("get", "other"),
            ),
            (Method::GET, "/version", None, ("list", "other")),
        ];
        for (method, path, query, want) in cases {
            assert_eq!(classify(&method, path, query), want, "{method} {path}");
        }
    }
}
