//! Waiting for conditions, never for a fixed time: every change of a workload's pod template as the
//! watch sees it ([`TemplateChanges`]), the readiness probe (a canary change rolled), and waits for the
//! Deployment controller to catch up. Every wait has a limit ([`Limits`]) and says what it waited for
//! when it gives up.
//!
//! ```text
//! watch (Deployments, StatefulSets, DaemonSets) ─► template fingerprint changed? ─► (namespace/name, when)
//!   ─► TemplateChanges: wait_for one, collect many, quiet for a while, last change of each
//! probe_ready: canary ConfigMap changed until rolled, then canary Secret ─► the controller is ready
//! wait_settled / wait_observed / wait_all_hashed: list until no Deployment is behind, or the limit
//! ```

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret};
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::controller::Running;
use super::population::{BAD_NS, CANARIES, CANARY_NS, Population, hashed, patch};
use super::{Error, Limits};

/// How long the Deployment controller may take per Deployment to finish rollouts, past 5 minutes: at
/// 20,000 Deployments it finished about 64 rollouts a second and was 773 behind after 300 s; 50 ms
/// each is three times that pace.
const SETTLE_PER_DEPLOYMENT: Duration = Duration::from_millis(50);

/// Readiness probes so far in this process (the next canary pair to use).
static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Changes a fresh canary ConfigMap until the controller rolls its Deployment, then a fresh canary
/// Secret the same way; returns when the second was rolled. Both kinds, because a controller may list
/// and watch them separately (Reloader does): ready for one is not ready for the other. A controller
/// that misses changes made before it listed is caught by a later one; the retries back off from
/// 250 ms to 8 s, so a slow start changes a canary only a few times.
pub(crate) async fn probe_ready(
    client: &Client,
    changes: &mut TemplateChanges,
    running: &mut Running,
    limits: Limits,
) -> Result<Instant, Error> {
    let limit = limits.limit(Duration::from_secs(600));
    let deadline = Instant::now() + limit;
    let pair = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % CANARIES;
    let object = format!("canary-{pair}");
    let mut seen = None;
    for kind in ["configmap", "secret"] {
        let deployment = format!(
            "{CANARY_NS}/canary-{}-{pair}",
            if kind == "configmap" { "cm" } else { "secret" }
        );
        let mut wait = Duration::from_millis(250);
        let mut n = 0;
        seen = loop {
            if !running.is_alive() {
                return Err("the controller exited; see its log".into());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the controller never rolled the canary for a {kind} change within {limit:?}"
                ));
            }
            changes.drain();
            n += 1;
            let value = format!("probe-{}-{n}", PROBES.load(std::sync::atomic::Ordering::Relaxed));
            if kind == "configmap" {
                patch::<ConfigMap>(client, CANARY_NS, &object, json!({"data": {"n": value}})).await?;
            } else {
                let body = json!({"stringData": {"password": value}});
                patch::<Secret>(client, CANARY_NS, &object, body).await?;
            }
            if let Some(at) = changes.wait_for(&deployment, wait).await {
                break Some(at);
            }
            wait = (wait * 2).min(Duration::from_secs(8));
        };
    }
    seen.ok_or_else(|| "no canary was probed".to_string())
}

/// Waits until every Deployment of `population` carries a config hash (a hashing controller's start-up).
pub(crate) async fn wait_all_hashed(
    client: &Client,
    population: &Population,
    limits: Limits,
) -> Result<(), Error> {
    let expected = population.opted_in();
    let api: Api<Deployment> = Api::all(client.clone());
    let limit = limits.limit(Duration::from_secs(900));
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if hashed(&list.items) >= expected {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("not every workload was hashed within {limit:?}"))
}

/// Waits until the Deployment controller has seen the last template of every Deployment in `ns`, so
/// that every ReplicaSet it will create exists.
pub(crate) async fn wait_observed(client: &Client, ns: &str, limits: Limits) -> Result<(), Error> {
    wait_deployments(client, Some(ns), limits, "seen every template", |d| {
        let observed = d.status.as_ref().and_then(|s| s.observed_generation);
        observed < d.metadata.generation
    })
    .await
}

/// Waits until every Deployment in `ns` (all namespaces: `None`) has finished its rollout, so that
/// what follows is not measured inside the Deployment controller's backlog. S8's Deployments are left
/// out: after S8 some of them never finish, by design.
pub(crate) async fn wait_settled(client: &Client, ns: Option<&str>, limits: Limits) -> Result<(), Error> {
    wait_deployments(client, ns, limits, "finished every rollout", |d| {
        d.namespace().as_deref() != Some(BAD_NS) && is_rolling(d)
    })
    .await
}

/// Waits until no Deployment in `ns` is `behind`: within 5 minutes, or [`SETTLE_PER_DEPLOYMENT`] for
/// each Deployment listed when there are more (the Deployment controller works through rollouts at its
/// own request rate, so a wait that does not grow with the count fails the large S10 sizes by design).
async fn wait_deployments(
    client: &Client,
    ns: Option<&str>,
    limits: Limits,
    what: &str,
    behind: impl Fn(&Deployment) -> bool,
) -> Result<(), Error> {
    let api: Api<Deployment> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let started = Instant::now();
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let limit =
            limits.limit(Duration::from_secs(300).max(SETTLE_PER_DEPLOYMENT * list.items.len() as u32));
        let deadline = started + limit;
        let late: Vec<String> = list
            .items
            .iter()
            .filter(|d| behind(d))
            .map(|d| d.name_any())
            .collect();
        if late.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the Deployment controller had not {what} in {} within {limit:?}: {} behind, e.g. {}",
                ns.unwrap_or("any namespace"),
                late.len(),
                late[0]
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether a Deployment is still rolling, as `kubectl rollout status` decides it (a rollout past its
/// progress deadline is not complete either).
pub(crate) fn is_rolling(d: &Deployment) -> bool {
    let Some(status) = &d.status else { return true };
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    status.observed_generation < d.metadata.generation
        || updated < replicas
        || status.replicas.unwrap_or(0) > updated
        || status.available_replicas.unwrap_or(0) < updated
}

/// A workload kind with a pod template.
pub(crate) trait HasTemplate:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn template(&self) -> Option<&PodTemplateSpec>;
}

impl HasTemplate for Deployment {
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

impl HasTemplate for StatefulSet {
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

impl HasTemplate for DaemonSet {
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

/// Sends `namespace/name` and the time for every change of a `K`'s pod template; the receiver fires
/// once the first list is in.
fn watch_templates<K: HasTemplate>(
    client: &Client,
    tx: mpsc::UnboundedSender<(String, Instant)>,
) -> tokio::sync::oneshot::Receiver<()> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut last: HashMap<String, u64> = HashMap::new();
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let (w, initial) = match event {
                Ok(Event::Apply(w)) => (w, false),
                Ok(Event::InitApply(w)) => (w, true),
                Ok(Event::InitDone) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                    continue;
                }
                Ok(_) => continue,
                // The apiserver is away (S11): retry without spinning on the two cores measured.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let key = format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any());
            let fp = template_fingerprint(&w);
            if last.insert(key.clone(), fp).is_some_and(|old| old != fp) && !initial {
                let _ = tx.send((key, Instant::now()));
            }
        }
    });
    ready_rx
}

/// Every change of a workload's pod template, as `namespace/name` and when it was seen. Whatever reads
/// the changes, the last change of every workload stays known ([`TemplateChanges::last`]).
pub(crate) struct TemplateChanges {
    rx: mpsc::UnboundedReceiver<(String, Instant)>,
    last: HashMap<String, Instant>,
}

impl TemplateChanges {
    /// Watches every Deployment, StatefulSet and DaemonSet; returns once all three have listed.
    pub(crate) async fn start(client: &Client) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let ready = [
            watch_templates::<Deployment>(client, tx.clone()),
            watch_templates::<StatefulSet>(client, tx.clone()),
            watch_templates::<DaemonSet>(client, tx),
        ];
        for r in ready {
            tokio::time::timeout(Duration::from_secs(60), r)
                .await
                .map_err(|_| "a workload watch did not list within 60 s".to_string())?
                .map_err(|_| "a workload watch ended".to_string())?;
        }
        Ok(Self {
            rx,
            last: HashMap::new(),
        })
    }

    /// When each workload's template last changed, as far as seen now.
    pub(crate) fn last(&mut self) -> &HashMap<String, Instant> {
        self.drain();
        &self.last
    }

    /// The next change, within `deadline`.
    pub(crate) async fn next(&mut self, deadline: tokio::time::Instant) -> Option<(String, Instant)> {
        let (k, at) = tokio::time::timeout_at(deadline, self.rx.recv()).await.ok()??;
        self.last.insert(k.clone(), at);
        Some((k, at))
    }

    /// Forgets the changes not yet read (their times stay in [`TemplateChanges::last`]).
    pub(crate) fn drain(&mut self) {
        while let Ok((k, at)) = self.rx.try_recv() {
            self.last.insert(k, at);
        }
    }

    /// When `key` next changes, if within `timeout`.
    pub(crate) async fn wait_for(&mut self, key: &str, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.next(deadline).await {
                Some((k, at)) if k == key => return Some(at),
                Some(_) => continue,
                None => return None,
            }
        }
    }

    /// The first change of each of `keys`, until all changed or `timeout` passed.
    pub(crate) async fn collect(
        &mut self,
        keys: &HashSet<String>,
        timeout: Duration,
    ) -> HashMap<String, Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = HashMap::new();
        while seen.len() < keys.len() {
            match self.next(deadline).await {
                Some((k, at)) if keys.contains(&k) => {
                    seen.entry(k).or_insert(at);
                }
                Some(_) => continue,
                None => break,
            }
        }
        seen
    }

    /// Returns once no template changed for `quiet` (true), or after `limit` (false).
    pub(crate) async fn quiet(&mut self, quiet: Duration, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < end {
            if self.next(tokio::time::Instant::now() + quiet).await.is_none() {
                return true;
            }
        }
        false
    }
}

/// A digest of a workload's pod template: any change of it is a rollout.
pub(crate) fn template_fingerprint<K: HasTemplate>(w: &K) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&w.template())
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}
