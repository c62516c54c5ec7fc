//! L1–L13: the thirteen scenarios of Stakater Reloader's own load-test suite (`test/loadtest` in its
//! repository at v1.4.21), written here from their descriptions and run for every controller, so that
//! wave is measured on the peer's own ground too.
//!
//! ```text
//! per controller: testenv up --audit ─► start ─► ready
//! ─► per scenario, in its own namespace: create its objects ─► settled ─► changes for --loadtest-seconds
//!    (the time of each object's last real change is kept)
//! ─► wait until every workload of every scenario changed its template after the last change of every
//!    object it uses (or the limit: wave's flap breaker holds a flapping object for 5 minutes)
//! ─► per scenario, from the audit log: writes (successful and refused); from the watch: stale workloads
//! ```
//!
//! "Expected reloads" is Reloader's own expectation: every change reloads every workload that uses the
//! object. wave and Wave write fewer on purpose (coalescing, the flap breaker, identical hashes); a
//! workload is correct when it ends current, which `stale` counts.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};

use futures::future::LocalBoxFuture;

use super::chaos::Rng;
use super::{Context, Figures};
use crate::harness::Limits;
use crate::harness::audit;
use crate::harness::controller::{Profile, Running};
use crate::harness::population::{self, Population, S1Pods, populate};
use crate::harness::session::{Session, cluster_dir, keep_logs};
use crate::harness::wait::{TemplateChanges, probe_ready, wait_settled};

type Error = String;

/// Reloader's opt-in and pause annotations (L12 uses them for every controller that reads them).
const RELOADER_AUTO: &str = "reloader.stakater.com/auto";
const PAUSE_PERIOD: &str = "deployment.reloader.stakater.com/pause-period";

/// What the suite runs.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// How long each scenario's changes go on, in seconds.
    pub seconds: u64,
    /// The namespaces of the readiness probe's population (empty of workloads here).
    pub namespaces: usize,
    pub limits: Limits,
    /// Where the logs of a run that did not converge are kept.
    pub out: std::path::PathBuf,
}

/// L1–L13 as [`super::REGISTRY`] runs them: for every controller of `ctx`, one after another.
pub fn run_registered(ctx: &Context) -> LocalBoxFuture<'_, Result<Figures, String>> {
    Box::pin(async move {
        let mut results = Vec::new();
        for p in &ctx.profiles {
            eprintln!("== L1-L13 {}", p.name);
            let r = run(&ctx.sizes.loadtest, p)
                .await
                .map_err(|e| format!("{}: {e}", p.name))?;
            results.push((p.name.to_string(), r));
        }
        Ok(Figures::Loadtest(results))
    })
}

/// Under `--smoke`: wave ends every workload current.
pub fn smoke_check(results: &[(String, LoadResult)]) -> Result<(), String> {
    for (name, r) in results.iter().filter(|(n, _)| n == "wave") {
        if let Some(s) = r.scenarios.iter().find(|s| s.stale > 0) {
            return Err(format!("{name} left {} workloads stale in {}", s.stale, s.id));
        }
        if r.timed_out {
            return Err(format!("{name}: L1-L13 did not converge"));
        }
    }
    Ok(())
}

/// One scenario's figures for one controller.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadScenario {
    pub id: &'static str,
    pub name: &'static str,
    /// Why the controller cannot take part (the row is kept, with this instead of figures).
    pub not_applicable: Option<String>,
    pub workloads: usize,
    /// Updates that changed an object's data.
    pub changes: u64,
    /// Updates that changed nothing a controller should act on (L4).
    pub noop_updates: u64,
    /// Every change reloads every workload using the object: Reloader's expectation.
    pub expected_reloads: u64,
    pub workload_writes: u64,
    pub refused_writes: u64,
    /// Workloads whose template never changed after the last change of an object they use.
    pub stale: usize,
    /// From the scenario's last change until its last workload was current.
    pub converged_ms: f64,
    /// L12: Deployments still paused at the end.
    pub left_paused: usize,
}

/// The suite for one controller.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadResult {
    pub seconds: u64,
    pub scenarios: Vec<LoadScenario>,
    /// The wait for every workload to be current gave up.
    pub timed_out: bool,
}

/// A workload of a scenario: its key (`namespace/name`), and the objects (`kind/name`) it uses.
struct Tracked {
    key: String,
    uses: Vec<String>,
    /// Deleted during the scenario (L5): not judged.
    gone: bool,
    /// Created after a change of what it uses runs that change without a write (L5).
    created: Instant,
}

/// What a scenario did, for judging it afterwards.
struct Run {
    result: LoadScenario,
    ns: String,
    from: Timestamp,
    workloads: Vec<Tracked>,
    /// `kind/name` → when its data last changed.
    last_change: HashMap<String, Instant>,
    ended: Instant,
}

/// Runs the suite for `profile` on a control plane of its own.
pub async fn run(sizes: &Sizes, profile: &Profile) -> Result<LoadResult, Error> {
    let dir = cluster_dir(&format!("l-{}", profile.name));
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit", "--nodes", "2"]);
    let result = run_on(sizes, profile, &cluster).await;
    cluster.stop();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The controller as the suite runs it: Reloader at its shipped strategy (env vars; it has no write
/// limit), the Waves with their write limit off as everywhere else, and wave with Reloader
/// compatibility on (off by default), which L12's annotations need. L11 restarts Reloader with
/// `--reload-strategy=annotations`.
fn base(profile: &Profile) -> Profile {
    match profile.name {
        "reloader" => profile.at_defaults(),
        "wave" => {
            let mut wave = profile.clone();
            wave.args.push("--reloader-compat".into());
            wave
        }
        _ => profile.clone(),
    }
}

async fn run_on(sizes: &Sizes, profile: &Profile, cluster: &testenv::Cluster) -> Result<LoadResult, Error> {
    let session = Session::new(cluster, profile).await;
    let (client, kubeconfig, log) = (&session.client, &session.kubeconfig, &session.log);
    // The readiness probe's objects, with no other scenario's.
    let probe = Population {
        namespaces: sizes.namespaces,
        ..Population::default()
    };
    populate(client, &probe, profile, S1Pods::None).await?;
    let mut changes = TemplateChanges::start(client).await?;
    let base = base(profile);
    let mut running = Running::start(&base, kubeconfig, log).map_err(|e| format!("starting: {e}"))?;
    probe_ready(client, &mut changes, &mut running, sizes.limits).await?;
    let seconds = Duration::from_secs(sizes.seconds);
    let mut runs: Vec<Run> = Vec::new();
    let mut rng = Rng::new(0x5eed_1a57);
    for id in IDS {
        let mut s = Scenario::new(client, profile, id, &mut rng);
        if let Some(why) = s.not_applicable() {
            eprintln!("  {id} {}: not run ({why})", s.result.name);
            s.result.not_applicable = Some(why);
            runs.push(s.into_run(Timestamp::now()));
            continue;
        }
        s.setup().await?;
        if profile.hashes_at_start {
            s.wait_first_writes(&mut changes, sizes.limits).await?;
        }
        wait_settled(client, Some(&s.ns), sizes.limits).await?;
        let from = Timestamp::now();
        match id {
            "L6" => {
                // The controller is stopped a third of the way in and started again at two thirds.
                let third = seconds / 3;
                s.random_updates(third, Duration::from_millis(200)).await?;
                running.stop();
                s.random_updates(third, Duration::from_millis(200)).await?;
                running = Running::start(&base, kubeconfig, log).map_err(|e| format!("restarting: {e}"))?;
                s.random_updates(third, Duration::from_millis(200)).await?;
            }
            "L11" if profile.name == "reloader" => {
                running.stop();
                running = Running::start(profile, kubeconfig, log).map_err(|e| format!("restarting: {e}"))?;
                probe_ready(client, &mut changes, &mut running, sizes.limits).await?;
                s.drive(seconds).await?;
                running.stop();
                running = Running::start(&base, kubeconfig, log).map_err(|e| format!("restarting: {e}"))?;
                probe_ready(client, &mut changes, &mut running, sizes.limits).await?;
            }
            _ => s.drive(seconds).await?,
        }
        eprintln!(
            "  {id} {}: {} changes, {} workloads",
            s.result.name,
            s.result.changes + s.result.noop_updates,
            s.workloads.len()
        );
        runs.push(s.into_run(from));
    }

    // Every workload current, or the limit: the flap breaker's 5 quiet minutes and one more. A
    // controller held to a request rate it cannot lift (Reloader: 5/s) also gets the time its expected
    // reloads take at that rate, so that its figures show its backlog drained, not a wait cut short.
    let backlog = profile.backlog(runs.iter().map(|r| r.result.expected_reloads).sum());
    let limit = sizes.limits.limit(Duration::from_secs(360) + backlog);
    let deadline = Instant::now() + limit;
    let timed_out = loop {
        let seen = changes.last();
        let mut all = true;
        for r in runs.iter_mut().filter(|r| r.result.not_applicable.is_none()) {
            r.result.stale = r.stale(seen);
            all &= r.result.stale == 0;
        }
        if all {
            break false;
        }
        if Instant::now() >= deadline {
            break true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    running.stop();
    if timed_out {
        let kept = keep_logs(cluster, &sizes.out, profile);
        let seen = changes.last();
        for r in runs.iter().filter(|r| r.result.stale > 0) {
            eprintln!(
                "  {} stale: {} ({})",
                r.result.id,
                r.result.stale,
                r.example(seen)
            );
        }
        eprintln!(
            "  L1-L13 did not converge within {limit:?}; logs: {}",
            kept.display()
        );
    }
    let to = Timestamp::now();
    let mut scenarios = Vec::new();
    for mut r in runs {
        if r.result.not_applicable.is_none() {
            let counts = audit::count_in(&session.audit_log, &session.user, &r.ns, r.from, to);
            r.result.workload_writes = audit::workload_writes(&counts);
            r.result.refused_writes = audit::refused_workload_writes(&counts);
            r.result.converged_ms = r.converged_ms(changes.last());
            r.result.left_paused = r.left_paused(client).await?;
        }
        scenarios.push(r.result);
    }
    Ok(LoadResult {
        seconds: sizes.seconds,
        scenarios,
        timed_out,
    })
}

impl Run {
    fn stale(&self, seen: &HashMap<String, Instant>) -> usize {
        self.workloads
            .iter()
            .filter(|w| !w.gone)
            .filter(|w| {
                let last_use = w.uses.iter().filter_map(|o| self.last_change.get(o)).max();
                last_use.is_some_and(|changed| {
                    *changed > w.created && seen.get(&w.key).is_none_or(|at| at < changed)
                })
            })
            .count()
    }

    /// With nothing stale: from the scenario's last change to the last template change that brought a
    /// workload up to date (0 when no workload had to change); NaN while something is stale.
    fn converged_ms(&self, seen: &HashMap<String, Instant>) -> f64 {
        if self.result.stale > 0 {
            return f64::NAN;
        }
        let Some(last) = self.last_change.values().max() else {
            return 0.0;
        };
        self.workloads
            .iter()
            .filter(|w| !w.gone)
            .filter_map(|w| {
                let changed = w.uses.iter().filter_map(|o| self.last_change.get(o)).max()?;
                (*changed > w.created).then(|| seen.get(&w.key)).flatten()
            })
            .max()
            .map_or(0.0, |at| {
                at.saturating_duration_since(*last).as_secs_f64() * 1000.0
            })
    }

    /// One stale workload, with when what it uses last changed and when its template last changed,
    /// relative to the end of the scenario's changes.
    fn example(&self, seen: &HashMap<String, Instant>) -> String {
        let at = |i: Instant| {
            let (later, d) = match i.checked_duration_since(self.ended) {
                Some(d) => ("+", d),
                None => ("-", self.ended.duration_since(i)),
            };
            format!("{later}{:.1} s", d.as_secs_f64())
        };
        self.workloads
            .iter()
            .filter(|w| !w.gone)
            .find_map(|w| {
                let changed = w.uses.iter().filter_map(|o| self.last_change.get(o)).max()?;
                let template = seen.get(&w.key);
                (*changed > w.created && template.is_none_or(|t| t < changed)).then(|| {
                    format!(
                        "e.g. {}: config last changed at {}, template at {}",
                        w.key,
                        at(*changed),
                        template.map_or("never".into(), |t| at(*t))
                    )
                })
            })
            .unwrap_or_default()
    }

    async fn left_paused(&self, client: &Client) -> Result<usize, Error> {
        let list = Api::<Deployment>::namespaced(client.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        Ok(list
            .items
            .iter()
            .filter(|d| d.spec.as_ref().and_then(|s| s.paused) == Some(true))
            .count())
    }
}

/// The scenarios, in order.
const IDS: [&str; 13] = [
    "L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9", "L10", "L11", "L12", "L13",
];

/// One scenario being run: its objects, and what it changed when.
struct Scenario<'a> {
    client: &'a Client,
    profile: &'a Profile,
    id: &'static str,
    ns: String,
    result: LoadScenario,
    /// `kind/name` of every object a change may pick, with the workloads that use it.
    objects: Vec<(String, Vec<String>)>,
    workloads: Vec<Tracked>,
    last_change: HashMap<String, Instant>,
    rng: &'a mut Rng,
    serial: u64,
}

impl<'a> Scenario<'a> {
    fn new(client: &'a Client, profile: &'a Profile, id: &'static str, rng: &'a mut Rng) -> Self {
        let name = match id {
            "L1" => "burst updates",
            "L2" => "fan-out",
            "L3" => "high cardinality",
            "L4" => "no-op updates",
            "L5" => "workload churn",
            "L6" => "controller restart",
            "L7" => "API pressure",
            "L8" => "large objects",
            "L9" => "multiple workload types",
            "L10" => "Secrets and mixed",
            "L11" => "annotation strategy",
            "L12" => "pause and resume",
            _ => "complex references",
        };
        Scenario {
            client,
            profile,
            id,
            ns: format!("load-{}", id.to_lowercase()),
            result: LoadScenario {
                id,
                name,
                ..Default::default()
            },
            objects: Vec::new(),
            workloads: Vec::new(),
            last_change: HashMap::new(),
            rng,
            serial: 0,
        }
    }

    fn not_applicable(&self) -> Option<String> {
        (self.id == "L12" && self.profile.name == "wave-go")
            .then(|| "Wave reads no Reloader annotations, and pause-period is one".into())
    }

    fn into_run(self, from: Timestamp) -> Run {
        let mut result = self.result;
        result.workloads = self.workloads.len();
        Run {
            result,
            ns: self.ns,
            from,
            workloads: self.workloads,
            last_change: self.last_change,
            ended: Instant::now(),
        }
    }

    /// Creates the scenario's namespace, config objects and workloads.
    async fn setup(&mut self) -> Result<(), Error> {
        create(
            self.client,
            "",
            "namespaces",
            json!({"metadata": {"name": self.ns}}),
        )
        .await?;
        match self.id {
            "L1" | "L6" | "L11" => {
                let n = if self.id == "L6" { 20 } else { 10 };
                self.one_to_one(n, "cfg", 1).await?;
            }
            "L2" => {
                self.config("configmap", "shared", 1).await?;
                for i in 0..50 {
                    self.deployment(&format!("fan-{i}"), &[("configmap", "shared", Use::Volume)])
                        .await?;
                }
            }
            "L3" => {
                // Ten namespaces of twenty ConfigMaps and Deployments each (this one and nine more).
                let base = self.ns.clone();
                for n in 0..10 {
                    let ns = format!("{base}-{n}");
                    create(self.client, "", "namespaces", json!({"metadata": {"name": ns}})).await?;
                    for i in 0..20 {
                        let name = format!("cfg-{i}");
                        self.config_in(&ns, "configmap", &name, 1).await?;
                        let uses = [("configmap", name.as_str(), Use::Volume)];
                        self.workload_in(&ns, "deployments", &format!("app-{i}"), &uses)
                            .await?;
                    }
                }
            }
            "L4" => {
                self.one_to_one(10, "cfg", 1).await?;
            }
            "L5" => self.config("configmap", "shared", 1).await?,
            "L7" => {
                self.one_to_one(50, "cfg", 1).await?;
            }
            "L8" => {
                self.one_to_one(10, "big", 100).await?;
            }
            "L9" => {
                let ns = self.ns.clone();
                self.config("configmap", "shared", 1).await?;
                let uses = [("configmap", "shared", Use::EnvFrom)];
                for i in 0..5 {
                    self.deployment(&format!("deploy-{i}"), &uses).await?;
                }
                for i in 0..3 {
                    self.workload_in(&ns, "statefulsets", &format!("sts-{i}"), &uses)
                        .await?;
                }
                for i in 0..2 {
                    self.workload_in(&ns, "daemonsets", &format!("ds-{i}"), &uses)
                        .await?;
                }
            }
            "L10" => {
                for i in 0..5 {
                    self.config("secret", &format!("sec-{i}"), 1).await?;
                    self.config("configmap", &format!("cfg-{i}"), 1).await?;
                }
                for i in 0..5 {
                    let s = format!("sec-{i}");
                    self.deployment(&format!("secret-only-{i}"), &[("secret", &s, Use::Env)])
                        .await?;
                }
                for i in 0..3 {
                    let c = format!("cfg-{i}");
                    self.deployment(&format!("cm-only-{i}"), &[("configmap", &c, Use::Volume)])
                        .await?;
                }
                for i in 0..5 {
                    let (s, c) = (format!("sec-{i}"), format!("cfg-{}", i % 5));
                    self.deployment(
                        &format!("mixed-{i}"),
                        &[("secret", &s, Use::EnvFrom), ("configmap", &c, Use::Volume)],
                    )
                    .await?;
                }
            }
            "L12" => {
                self.one_to_one(10, "cfg", 1).await?;
            }
            _ => {
                // L13: every way to reference config, one object each.
                self.config("configmap", "init-cfg", 1).await?;
                self.config("secret", "projected-sec", 1).await?;
                self.config("configmap", "projected-cfg", 1).await?;
                self.config("secret", "env-sec", 1).await?;
                self.config("configmap", "envfrom-cfg", 1).await?;
                self.deployment("init-env", &[("configmap", "init-cfg", Use::InitEnv)])
                    .await?;
                self.deployment(
                    "projected",
                    &[
                        ("secret", "projected-sec", Use::Projected),
                        ("configmap", "projected-cfg", Use::Projected),
                    ],
                )
                .await?;
                self.deployment("value-from", &[("secret", "env-sec", Use::Env)])
                    .await?;
                self.deployment("env-from", &[("configmap", "envfrom-cfg", Use::EnvFrom)])
                    .await?;
            }
        }
        Ok(())
    }

    /// The controllers that hash at start write every new workload once: wait for that write, so that
    /// it is not counted as the scenario's.
    async fn wait_first_writes(
        &mut self,
        changes: &mut TemplateChanges,
        limits: Limits,
    ) -> Result<(), Error> {
        if self.id == "L12" {
            // Reloader's annotations: nothing is written at creation.
            return Ok(());
        }
        let limit = limits.limit(Duration::from_secs(120));
        let deadline = Instant::now() + limit;
        loop {
            let seen = changes.last();
            let written = |w: &Tracked| seen.get(&w.key).is_some_and(|at| *at > w.created);
            if self.workloads.iter().all(written) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: not every workload got its first hash within {limit:?}",
                    self.id
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The change phase, for `seconds`, at the pace of Reloader's scenario of the same name.
    async fn drive(&mut self, seconds: Duration) -> Result<(), Error> {
        let every = |ms: u64| Duration::from_millis(ms);
        match self.id {
            "L1" => self.random_updates(seconds, every(100)).await,
            "L2" | "L9" => self.random_updates(seconds, every(5000)).await,
            "L3" => self.random_updates(seconds, every(200)).await,
            "L4" => self.noop_updates(seconds).await,
            "L5" => self.churn(seconds).await,
            "L7" => self.pressure(seconds).await,
            "L10" => self.random_updates(seconds, every(500)).await,
            // L8, L11, L12, L13.
            _ => self.random_updates(seconds, every(2000)).await,
        }
    }

    /// One object picked at random every `every`, its data changed.
    async fn random_updates(&mut self, seconds: Duration, every: Duration) -> Result<(), Error> {
        let end = Instant::now() + seconds;
        let mut tick = tokio::time::interval(every);
        while Instant::now() < end {
            tick.tick().await;
            let i = self.rng.below(self.objects.len());
            self.change(i).await?;
        }
        Ok(())
    }

    /// L7: ten writers at once, each changing a random object every 100 ms.
    async fn pressure(&mut self, seconds: Duration) -> Result<(), Error> {
        let end = Instant::now() + seconds;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while Instant::now() < end {
            tick.tick().await;
            let picks: Vec<usize> = (0..10).map(|_| self.rng.below(self.objects.len())).collect();
            let mut batch = Vec::new();
            for i in picks {
                self.serial += 1;
                batch.push((i, self.serial));
            }
            let sent = Instant::now();
            let writes = batch.iter().map(|&(i, serial)| {
                let (object, _) = &self.objects[i];
                update(self.client, &self.ns, object, serial)
            });
            for (r, (i, _)) in futures::future::join_all(writes).await.into_iter().zip(&batch) {
                r?;
                self.changed(*i, sent);
            }
        }
        Ok(())
    }

    /// L4: a label changes on each object; its data never does.
    async fn noop_updates(&mut self, seconds: Duration) -> Result<(), Error> {
        let end = Instant::now() + seconds;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while Instant::now() < end {
            tick.tick().await;
            let i = self.rng.below(self.objects.len());
            self.serial += 1;
            let (kind, name) = self.objects[i].0.split_once('/').unwrap_or_default();
            let body = json!({"metadata": {"labels": {"touched": self.serial.to_string()}}});
            patch_object(self.client, &self.ns, kind, name, body).await?;
            self.result.noop_updates += 1;
        }
        Ok(())
    }

    /// L5: a Deployment created every 500 ms and the one created five before deleted (about five alive
    /// at a time), while the ConfigMap they share changes every 2 s.
    async fn churn(&mut self, seconds: Duration) -> Result<(), Error> {
        let end = Instant::now() + seconds;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut n = 0usize;
        while Instant::now() < end {
            tick.tick().await;
            self.deployment(&format!("churn-{n}"), &[("configmap", "shared", Use::Volume)])
                .await?;
            if n >= 5 {
                let gone = format!("churn-{}", n - 5);
                Api::<Deployment>::namespaced(self.client.clone(), &self.ns)
                    .delete(&gone, &DeleteParams::default())
                    .await
                    .map_err(|e| format!("deleting {gone}: {e}"))?;
                let key = format!("{}/{gone}", self.ns);
                if let Some(w) = self.workloads.iter_mut().find(|w| w.key == key) {
                    w.gone = true;
                }
                if let Some((_, users)) = self.objects.first_mut() {
                    users.retain(|u| *u != key);
                }
            }
            if n % 4 == 3 {
                self.change(0).await?;
            }
            n += 1;
        }
        Ok(())
    }

    /// Changes object `i`'s data.
    async fn change(&mut self, i: usize) -> Result<(), Error> {
        self.serial += 1;
        let sent = Instant::now();
        update(self.client, &self.ns, &self.objects[i].0, self.serial).await?;
        self.changed(i, sent);
        Ok(())
    }

    /// Object `i` changed by a request `sent` then. The change is timed from the request, not its
    /// response: a controller can act on it, and the watch show its write, before the response is read.
    fn changed(&mut self, i: usize, sent: Instant) {
        let (object, users) = &self.objects[i];
        self.last_change.insert(object.clone(), sent);
        self.result.changes += 1;
        self.result.expected_reloads += users.len() as u64;
    }

    async fn config(&mut self, kind: &str, name: &str, kib: usize) -> Result<(), Error> {
        let ns = self.ns.clone();
        self.config_in(&ns, kind, name, kib).await
    }

    /// A ConfigMap or Secret of about `kib` KiB. Objects in other namespaces (L3) are named
    /// `namespace/kind/name` in the scenario.
    async fn config_in(&mut self, ns: &str, kind: &str, name: &str, kib: usize) -> Result<(), Error> {
        let value: String = "x".repeat(kib * 1024);
        let (resource, body) = if kind == "secret" {
            (
                "secrets",
                json!({"metadata": {"name": name}, "stringData": {"value": value, "serial": "0"}}),
            )
        } else {
            (
                "configmaps",
                json!({"metadata": {"name": name}, "data": {"value": value, "serial": "0"}}),
            )
        };
        create(self.client, ns, resource, body).await?;
        let object = if ns == self.ns {
            format!("{kind}/{name}")
        } else {
            format!("{ns}/{kind}/{name}")
        };
        self.objects.push((object, Vec::new()));
        Ok(())
    }

    /// `n` ConfigMaps `<prefix>-<i>` of `kib` KiB, each mounted by its own Deployment `app-<prefix>-<i>`.
    async fn one_to_one(&mut self, n: usize, prefix: &str, kib: usize) -> Result<(), Error> {
        for i in 0..n {
            let name = format!("{prefix}-{i}");
            self.config("configmap", &name, kib).await?;
            self.deployment(&format!("app-{name}"), &[("configmap", &name, Use::Volume)])
                .await?;
        }
        Ok(())
    }

    async fn deployment(&mut self, name: &str, uses: &[(&str, &str, Use)]) -> Result<(), Error> {
        let ns = self.ns.clone();
        self.workload_in(&ns, "deployments", name, uses).await
    }

    /// A workload of `resource` that uses each of `uses` (`kind`, object name, how), opted in to the
    /// controller (with Reloader's annotations and a pause period in L12).
    async fn workload_in(
        &mut self,
        ns: &str,
        resource: &str,
        name: &str,
        uses: &[(&str, &str, Use)],
    ) -> Result<(), Error> {
        let mut annotations = BTreeMap::new();
        if self.id == "L12" {
            annotations.insert(RELOADER_AUTO.to_string(), "true".to_string());
            annotations.insert(PAUSE_PERIOD.to_string(), "15s".to_string());
        } else {
            let (k, v) = self.profile.opt_in;
            annotations.insert(k.to_string(), v.to_string());
        }
        let body = workload_body(resource, name, &annotations, uses);
        // Stamped before the request: a controller may write the new workload (and the watch show it)
        // before this task runs again after the response.
        let created = Instant::now();
        create(self.client, ns, resource, body).await?;
        let key = format!("{ns}/{name}");
        let mut used = Vec::new();
        for (kind, object, _) in uses {
            let object = if ns == self.ns {
                format!("{kind}/{object}")
            } else {
                format!("{ns}/{kind}/{object}")
            };
            if let Some((_, users)) = self.objects.iter_mut().find(|(o, _)| *o == object) {
                users.push(key.clone());
            }
            used.push(object);
        }
        self.workloads.push(Tracked {
            key,
            uses: used,
            gone: false,
            created,
        });
        Ok(())
    }
}

/// How a workload uses a config object.
#[derive(Clone, Copy, Debug)]
enum Use {
    Volume,
    EnvFrom,
    Env,
    InitEnv,
    Projected,
}

/// The body of a Deployment, StatefulSet or DaemonSet (`replicas: 0` where there are replicas).
fn workload_body(
    resource: &str,
    name: &str,
    annotations: &BTreeMap<String, String>,
    uses: &[(&str, &str, Use)],
) -> Value {
    let mut container = json!({"name": "app", "image": "registry.invalid/app:1", "env": [], "envFrom": [], "volumeMounts": []});
    let mut init = json!({"name": "init", "image": "registry.invalid/init:1", "env": []});
    let mut volumes = Vec::new();
    let mut projected = Vec::new();
    for (i, (kind, object, how)) in uses.iter().enumerate() {
        let secret = *kind == "secret";
        let key_ref = if secret {
            json!({"secretKeyRef": {"name": object, "key": "serial"}})
        } else {
            json!({"configMapKeyRef": {"name": object, "key": "serial"}})
        };
        match how {
            Use::Volume => {
                let source = if secret {
                    json!({"name": format!("v{i}"), "secret": {"secretName": object}})
                } else {
                    json!({"name": format!("v{i}"), "configMap": {"name": object}})
                };
                volumes.push(source);
                push(
                    &mut container["volumeMounts"],
                    json!({"name": format!("v{i}"), "mountPath": format!("/etc/v{i}")}),
                );
            }
            Use::EnvFrom => {
                let source = if secret {
                    json!({"secretRef": {"name": object}})
                } else {
                    json!({"configMapRef": {"name": object}})
                };
                push(&mut container["envFrom"], source);
            }
            Use::Env => push(
                &mut container["env"],
                json!({"name": format!("V{i}"), "valueFrom": key_ref}),
            ),
            Use::InitEnv => push(
                &mut init["env"],
                json!({"name": format!("V{i}"), "valueFrom": key_ref}),
            ),
            Use::Projected => projected.push(if secret {
                json!({"secret": {"name": object}})
            } else {
                json!({"configMap": {"name": object}})
            }),
        }
    }
    if !projected.is_empty() {
        volumes.push(json!({"name": "projected", "projected": {"sources": projected}}));
        push(
            &mut container["volumeMounts"],
            json!({"name": "projected", "mountPath": "/etc/projected"}),
        );
    }
    let mut pod = json!({"containers": [container], "volumes": volumes});
    if init["env"].as_array().is_some_and(|e| !e.is_empty()) {
        pod["initContainers"] = json!([init]);
    }
    let mut spec = json!({"selector": {"matchLabels": {"app": name}},
                          "template": {"metadata": {"labels": {"app": name}}, "spec": pod}});
    if resource != "daemonsets" {
        spec["replicas"] = json!(0);
    }
    if resource == "statefulsets" {
        spec["serviceName"] = json!(name);
    }
    json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec})
}

fn push(list: &mut Value, item: Value) {
    if let Some(a) = list.as_array_mut() {
        a.push(item);
    }
}

/// Changes the data of `object` (`kind/name` in `ns`, or `namespace/kind/name`).
async fn update(client: &Client, ns: &str, object: &str, serial: u64) -> Result<(), Error> {
    let parts: Vec<&str> = object.split('/').collect();
    let (ns, kind, name) = match parts[..] {
        [kind, name] => (ns, kind, name),
        [ns, kind, name] => (ns, kind, name),
        _ => return Err(format!("not an object: {object}")),
    };
    let body = if kind == "secret" {
        json!({"stringData": {"serial": serial.to_string()}})
    } else {
        json!({"data": {"serial": serial.to_string()}})
    };
    patch_object(client, ns, kind, name, body).await
}

async fn patch_object(client: &Client, ns: &str, kind: &str, name: &str, body: Value) -> Result<(), Error> {
    let params = PatchParams::default();
    let result = if kind == "secret" {
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Merge(body))
            .await
            .map(drop)
    } else {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .patch(name, &params, &Patch::Merge(body))
            .await
            .map(drop)
    };
    result.map_err(|e| format!("patching {kind} {ns}/{name}: {e}"))
}

/// Creates an object of `resource` in `ns` (`""`: cluster-scoped); one that exists already is fine.
async fn create(client: &Client, ns: &str, resource: &str, body: Value) -> Result<(), Error> {
    let c = client.clone();
    match resource {
        "namespaces" => population::create(&Api::<Namespace>::all(c), body).await,
        "configmaps" => population::create(&Api::<ConfigMap>::namespaced(c, ns), body).await,
        "secrets" => population::create(&Api::<Secret>::namespaced(c, ns), body).await,
        "statefulsets" => population::create(&Api::<StatefulSet>::namespaced(c, ns), body).await,
        "daemonsets" => population::create(&Api::<DaemonSet>::namespaced(c, ns), body).await,
        _ => population::create(&Api::<Deployment>::namespaced(c, ns), body).await,
    }
}

impl LoadResult {
    /// One table per controller set: a row per scenario, a column per controller.
    pub fn markdown(results: &[(&str, LoadResult)]) -> String {
        let names: Vec<&str> = results.iter().map(|(n, _)| *n).collect();
        let mut out = format!(
            "| scenario | changes | expected reloads (Reloader's rule) | {} |\n|---|---|---|{}\n",
            names
                .iter()
                .map(|n| format!("{n}: writes / stale / converged s"))
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(names.len())
        );
        let Some((_, first)) = results.first() else {
            return out;
        };
        for (i, s) in first.scenarios.iter().enumerate() {
            out += &format!(
                "| {} {} | {} | {} |",
                s.id,
                s.name,
                s.changes + s.noop_updates,
                s.expected_reloads
            );
            for (_, r) in results {
                let Some(x) = r.scenarios.get(i) else { continue };
                out += &match &x.not_applicable {
                    Some(why) => format!(" not run: {why} |"),
                    None => format!(
                        " {} / {} / {} |",
                        x.workload_writes,
                        x.stale,
                        if x.converged_ms.is_finite() {
                            format!("{:.1}", x.converged_ms / 1000.0)
                        } else {
                            "–".into()
                        }
                    ),
                };
            }
            out += "\n";
        }
        out
    }
}
