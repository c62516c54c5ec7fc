//! One controller's round: a fresh control plane, the same objects for every controller, and the
//! round's steps in the order of [`super::REGISTRY`]. Every wait has a limit ([`Limits`]), and a figure
//! whose wait gave up says so (`timed_out`).
//!
//! ```text
//! populate ─► (steps) start ─► ready (a ConfigMap and a Secret change handled) ─► hashed ─► settled: S4 startup
//! ─► S1 (raw samples) ─► S3 ─► settled ─► S1L (S1 under a background load) ─► S6 ─► S7 ─► restart with pacing: S8
//! ─► defaults pass: S1 + S3 at shipped settings (or, without it: restart, S8's held-back rollouts written)
//! ─► per payload size: unreferenced Secrets, restart, S5, idle window (RSS each second): S2, S4 idle
//!    (both read over the window's last 2 minutes)
//! ─► unreferenced Secrets deleted, restart: S11 (apiserver killed for 20 s, each trial), last
//! ```
//!
//! A step is a function of the round's state ([`Round`]): the control plane's session, the template
//! watch, the controller while one runs, and the figures so far.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::apiserver::{self, ApiserverRestart};
use super::bad_config::{self, BadConfig};
use super::churn::{Storm, churn};
use super::latency::{self, FanOut, Latency, StepFigure, UnderLoad, spread_and_fan_out};
use super::memory::{self, ApiCost, Memory, Restart, idle_window};
use crate::harness::controller::{Profile, Running};
use crate::harness::population::{FANOUT_NS, Population, S1Pods, fill_unreferenced, populate};
use crate::harness::session::{Session, cluster_dir, keep_logs};
use crate::harness::stats::steady_seconds;
use crate::harness::wait::{TemplateChanges, probe_ready, wait_all_hashed, wait_settled};
use crate::harness::{Error, Limits};
use crate::harness::{audit, metrics};

/// The defaults pass: the shipped burst of 100 writes refills in 100 s at 1 write per second (wave and
/// Wave); the pass starts after this long without a template change.
const DEFAULTS_REFILL: Duration = Duration::from_secs(100);

/// After S8: the controller has written what S8 held back once no template changed for this long.
const PENDING_QUIET: Duration = Duration::from_secs(15);

/// Under `--smoke`, the quiet period that stands for `DEFAULTS_REFILL` and `PENDING_QUIET`.
const SMOKE_QUIET: Duration = Duration::from_secs(5);

/// What a round creates and changes (`main.rs` makes it from the command line).
#[derive(Clone, Debug)]
pub struct Sizes {
    /// The objects, alike for every controller.
    pub population: Population,
    /// S1: config objects updated, one at a time.
    pub updates: usize,
    /// S2: Secrets that nothing references.
    pub unreferenced: usize,
    /// S2: their payload sizes in KiB, one measurement each.
    pub payload_kib: Vec<usize>,
    /// S6: changes in the burst (spread over 2 s).
    pub storm_changes: usize,
    /// S7: how long the Secret changes once per second.
    pub flap_seconds: u64,
    /// S8: wave's --max-concurrent-rollouts.
    pub bad_pacing: usize,
    /// S2/S4: the idle window, in seconds.
    pub idle_seconds: u64,
    /// S11: apiserver restarts.
    pub restart_trials: usize,
    pub limits: Limits,
    /// Where a failed round's logs are kept (`<out>/failed-<controller>/`).
    pub out: PathBuf,
}

impl Sizes {
    fn spread(&self) -> latency::Sizes {
        latency::Sizes {
            namespaces: self.population.namespaces,
            deployments: self.population.deployments,
            updates: self.updates,
            fanout: self.population.fanout,
            limits: self.limits,
        }
    }
}

/// Everything measured for one controller in one round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ControllerResult {
    pub s1: Latency,
    pub s2: Vec<Memory>,
    pub s3: FanOut,
    pub s4: ApiCost,
    pub s5: Restart,
    pub s6: Storm,
    pub s7: Storm,
    pub s8: BadConfig,
    pub s11: ApiserverRestart,
    /// S1 and S3 again with the controller at its shipped defaults (write limits on).
    pub defaults: Option<DefaultsPass>,
    /// S1L: S1 again under a background load on the apiserver (absent from results made before it).
    #[serde(default)]
    pub s1_under_load: Option<UnderLoad>,
}

/// S1 and S3 with the controller at its shipped defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DefaultsPass {
    pub s1: Latency,
    pub s3: FanOut,
}

/// A step of the round: runs on the round's state and adds its figures to it.
pub type Step = for<'r, 'a> fn(&'r mut Round<'a>) -> LocalBoxFuture<'r, Result<(), Error>>;

/// The state a round's steps share.
pub struct Round<'a> {
    sizes: &'a Sizes,
    profile: &'a Profile,
    cluster: &'a testenv::Cluster,
    session: Session,
    changes: TemplateChanges,
    /// The controller, while one runs (stopped on drop when a step fails).
    running: Option<Running>,
    /// S1 and S3 again at the controller's shipped settings.
    defaults_pass: bool,
    result: ControllerResult,
}

/// Runs every step of `steps` (the round's part of the registry, in order) for `profile` on a control
/// plane of its own; `defaults_pass` adds S1 and S3 at the controller's shipped settings.
pub async fn run(
    sizes: &Sizes,
    profile: &Profile,
    defaults_pass: bool,
    steps: &[Step],
) -> Result<ControllerResult, Error> {
    let dir = cluster_dir(profile.name);
    let cluster = testenv::Cluster::start_in(dir.clone(), &["--audit", "--nodes", "4"]);
    let result = run_on(sizes, profile, &cluster, defaults_pass, steps).await;
    let result = result.map_err(|e| {
        format!(
            "{e} (logs: {})",
            keep_logs(&cluster, &sizes.out, profile).display()
        )
    });
    cluster.stop();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_on(
    sizes: &Sizes,
    profile: &Profile,
    cluster: &testenv::Cluster,
    defaults_pass: bool,
    steps: &[Step],
) -> Result<ControllerResult, Error> {
    let session = Session::new(cluster, profile).await;
    let t = Instant::now();
    populate(&session.client, &sizes.population, profile, S1Pods::One).await?;
    wait_settled(&session.client, None, sizes.limits).await?;
    eprintln!("  populated in {:.0?}", t.elapsed());
    let changes = TemplateChanges::start(&session.client).await?;
    let mut round = Round {
        sizes,
        profile,
        cluster,
        session,
        changes,
        running: None,
        defaults_pass,
        result: ControllerResult::default(),
    };
    for step in steps {
        step(&mut round).await?;
    }
    round.stop();
    Ok(round.result)
}

impl Round<'_> {
    /// Starts the controller as `profile` says, with `extra` arguments, and returns when it is ready.
    async fn start(&mut self, profile: &Profile, extra: &[String], what: &str) -> Result<Instant, Error> {
        let running = Running::start_with(profile, extra, &self.session.kubeconfig, &self.session.log)
            .map_err(|e| format!("{what}: {e}"))?;
        let running = self.running.insert(running);
        probe_ready(
            &self.session.client,
            &mut self.changes,
            running,
            self.sizes.limits,
        )
        .await
    }

    /// Stops the controller, if one runs.
    fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop();
        }
    }

    /// What S1 and S3 read of the running controller: its CPU time, and wave's own histograms.
    fn probe(&self) -> latency::Probe {
        latency::Probe {
            pid: self.running.as_ref().map(Running::pid),
            wave_metrics: metrics::port(self.profile),
        }
    }

    /// S4 at startup: until the controller handles a change of each kind (and, for hashing
    /// controllers, has hashed every workload).
    async fn startup(&mut self) -> Result<(), Error> {
        let started = Timestamp::now();
        self.start(self.profile, &[], "starting").await?;
        let client = &self.session.client;
        if self.profile.hashes_at_start {
            wait_all_hashed(client, &self.sizes.population, self.sizes.limits).await?;
        }
        let settled = Timestamp::now();
        let r = &mut self.result;
        r.s4.startup = self.session.cost(started, settled);
        r.s4.startup_requests = audit::total(&r.s4.startup);
        // Every rollout the start-up caused is over before anything is timed.
        wait_settled(client, None, self.sizes.limits).await
    }

    /// S1 and S3, with S4's cost per change.
    async fn spread(&mut self) -> Result<(), Error> {
        let probe = self.probe();
        let session = &self.session;
        let cost = |from, to| session.cost(from, to);
        let from = Timestamp::now();
        let mut spread = spread_and_fan_out(
            &self.sizes.spread(),
            &session.client,
            &mut self.changes,
            &cost,
            "v",
            probe,
        )
        .await?;
        profile_steps(session, &mut spread.s1, from);
        let r = &mut self.result;
        r.s4.per_change_requests = spread.per_change_requests;
        r.s4.per_change_workload_writes = spread.per_change_workload_writes;
        (r.s1, r.s3) = (spread.s1, spread.s3);
        // S6 starts once the Deployment controller is done with S3's rollouts, not in their backlog.
        wait_settled(&session.client, Some(FANOUT_NS), self.sizes.limits).await
    }

    /// S1L: S1 again while a second client writes and LISTs at [`latency::LOAD`]'s rates.
    async fn under_load(&mut self) -> Result<(), Error> {
        let session = &self.session;
        latency::prepare_load(&session.client).await?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let load = tokio::spawn(latency::run_load(session.client.clone(), stopped));
        let sizes = latency::Sizes {
            fanout: 0,
            ..self.sizes.spread()
        };
        let cost = |from, to| session.cost(from, to);
        let (t0, from) = (Instant::now(), Timestamp::now());
        let probe = self.probe();
        let spread = spread_and_fan_out(&sizes, &session.client, &mut self.changes, &cost, "l", probe).await;
        let elapsed = t0.elapsed().as_secs_f64().max(f64::EPSILON);
        let _ = stop.send(true);
        let (written, listed, errors) = load.await.map_err(|e| format!("the load task: {e}"))?;
        latency::remove_load(&session.client).await?;
        let mut s1 = spread?.s1;
        profile_steps(session, &mut s1, from);
        let under_load = UnderLoad {
            s1,
            writes_per_s: latency::LOAD.writes_per_s,
            lists_per_s: latency::LOAD.lists_per_s,
            writes_done_per_s: written as f64 / elapsed,
            lists_done_per_s: listed as f64 / elapsed,
            load_errors: errors,
        };
        eprintln!(
            "  S1L load {:.0} writes/s, {:.1} LISTs/s, {} errors",
            under_load.writes_done_per_s, under_load.lists_done_per_s, errors
        );
        self.result.s1_under_load = Some(under_load);
        Ok(())
    }

    /// S6: 10 changes spread over 2 s.
    async fn storm(&mut self) -> Result<(), Error> {
        let (sizes, session) = (self.sizes, &self.session);
        let cost = |from, to| session.cost(from, to);
        let s6 = churn(
            &session.client,
            &mut self.changes,
            &cost,
            self.profile,
            ("bench-storm", "storm"),
            (sizes.population.storm_deployments, sizes.storm_changes),
            Duration::from_secs(2) / sizes.storm_changes.max(1) as u32,
            sizes.limits,
        )
        .await?;
        eprintln!(
            "  S6 {:.1} ReplicaSets per Deployment",
            s6.replicasets_per_deployment_mean
        );
        self.result.s6 = s6;
        Ok(())
    }

    /// S7: one change per second for `flap_seconds`.
    async fn flap(&mut self) -> Result<(), Error> {
        let (sizes, session) = (self.sizes, &self.session);
        let cost = |from, to| session.cost(from, to);
        let s7 = churn(
            &session.client,
            &mut self.changes,
            &cost,
            self.profile,
            ("bench-flap", "flap"),
            (sizes.population.flap_deployments, sizes.flap_seconds as usize),
            Duration::from_secs(1),
            sizes.limits,
        )
        .await?;
        eprintln!(
            "  S7 {:.1} ReplicaSets per Deployment",
            s7.replicasets_per_deployment_mean
        );
        self.result.s7 = s7;
        Ok(())
    }

    /// S8, with the controller restarted with whatever it has to pace rollouts.
    async fn bad_config(&mut self) -> Result<(), Error> {
        self.stop();
        self.start(self.profile, &self.profile.pacing, "restarting for S8")
            .await?;
        let sizes = bad_config::Sizes {
            deployments: self.sizes.population.bad_deployments,
            pacing: self.sizes.bad_pacing,
            limits: self.sizes.limits,
        };
        let s8 =
            bad_config::bad_config(&self.session.client, &mut self.changes, &sizes, self.profile).await?;
        eprintln!(
            "  S8 {} of {} Deployments rolled, {} left broken",
            s8.rolled, s8.deployments, s8.broken
        );
        self.result.s8 = s8;
        self.stop();
        Ok(())
    }

    /// The defaults pass (S1 and S3 at the shipped settings), or without it, what S8 held back written.
    async fn defaults(&mut self) -> Result<(), Error> {
        let limits = self.sizes.limits;
        if self.defaults_pass {
            // Timing starts with a full write limiter: the restarted controller first writes what the
            // scenarios before left pending, and those writes spend the burst.
            let running = start_and_write_pending(
                &self.session,
                &mut self.changes,
                &self.profile.at_defaults(),
                DEFAULTS_REFILL,
                limits,
            )
            .await
            .map_err(|e| format!("restarting at its defaults: {e}"))?;
            self.running = Some(running);
            let probe = self.probe();
            let session = &self.session;
            let cost = |from, to| session.cost(from, to);
            let spread = spread_and_fan_out(
                &self.sizes.spread(),
                &session.client,
                &mut self.changes,
                &cost,
                "d",
                probe,
            )
            .await?;
            self.result.defaults = Some(DefaultsPass {
                s1: spread.s1,
                s3: spread.s3,
            });
        } else {
            // S5 is a restart with nothing changed, so what is pending is written first, as the defaults
            // pass does at its start. Without this, S5 counted S8's 95 held-back writes in the rounds that
            // run no defaults pass.
            let running = start_and_write_pending(
                &self.session,
                &mut self.changes,
                self.profile,
                PENDING_QUIET,
                limits,
            )
            .await
            .map_err(|e| format!("restarting after S8: {e}"))?;
            self.running = Some(running);
        }
        wait_settled(&self.session.client, None, limits).await?;
        self.stop();
        Ok(())
    }

    /// S2 per payload size, with S5 (restart with nothing changed) and S4 idle on the first.
    async fn memory(&mut self) -> Result<(), Error> {
        let sizes = self.sizes;
        let idle = memory::Idle {
            seconds: sizes.idle_seconds,
            unreferenced: sizes.unreferenced,
        };
        for (i, &kib) in sizes.payload_kib.iter().enumerate() {
            fill_unreferenced(&self.session.client, sizes.unreferenced, kib).await?;
            let restarted = Timestamp::now();
            let t0 = Instant::now();
            let ready_at = self.start(self.profile, &[], "restarting").await?;
            let idle_from = Timestamp::now();
            let running = self.running.as_mut().ok_or("the controller is not running")?;
            let memory = idle_window(running, self.profile, idle, kib).await?;
            let idle_to = Timestamp::now();
            eprintln!(
                "  S2 {kib} KiB: peak {:.1} MiB, steady {:.1} MiB",
                memory.peak_rss_mib, memory.steady_rss_mib
            );
            let r = &mut self.result;
            r.s2.push(memory);
            if i == 0 {
                r.s5 = Restart {
                    workload_writes: audit::workload_writes(&self.session.cost(restarted, idle_to)),
                    ready_ms: ready_at.saturating_duration_since(t0).as_secs_f64() * 1000.0,
                };
                // S4's idle rate is read over the window's steady part, as S2's steady RSS is: the window
                // starts at readiness, and a controller may still be finishing its start-up then (wave's
                // reads of the restart's 10,000 Secrets fell inside the window in two of three rounds).
                let steady = steady_seconds(sizes.idle_seconds);
                let steady_from = idle_to
                    .checked_sub(SignedDuration::from_secs(steady as i64))
                    .map_or(idle_from, |at| at.max(idle_from));
                r.s4.idle = self.session.cost(steady_from, idle_to);
                r.s4.idle_requests_per_minute = audit::total(&r.s4.idle) as f64 * 60.0 / steady as f64;
            }
            self.stop();
        }
        Ok(())
    }

    /// S11 comes last, on S1's cluster state (the unreferenced Secrets gone): with the apiserver down,
    /// kwok's nodes stop renewing their leases and the node lifecycle controller marks them
    /// unreachable, so pods are left unavailable for a while, and nothing that waits for a settled
    /// cluster can follow.
    async fn apiserver_restart(&mut self) -> Result<(), Error> {
        fill_unreferenced(&self.session.client, 0, 1).await?;
        self.start(self.profile, &[], "restarting").await?;
        let sizes = apiserver::Sizes {
            trials: self.sizes.restart_trials,
            deployments: self.sizes.population.deployments,
            namespaces: self.sizes.population.namespaces,
            limits: self.sizes.limits,
        };
        let s11 = apiserver::apiserver_restart(self.cluster, &self.session.client, &sizes).await?;
        eprintln!(
            "  S11 median {:.0} ms, max {:.0} ms after /readyz",
            s11.median_ms, s11.max_ms
        );
        self.result.s11 = s11;
        self.stop();
        Ok(())
    }
}

/// The round's steps, for [`super::REGISTRY`].
pub fn startup<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.startup())
}
pub fn spread<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.spread())
}
pub fn under_load<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.under_load())
}
pub fn storm<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.storm())
}
pub fn flap<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.flap())
}
pub fn bad_config<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.bad_config())
}
pub fn defaults<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.defaults())
}
pub fn memory<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.memory())
}
pub fn apiserver_restart<'r>(r: &'r mut Round<'_>) -> LocalBoxFuture<'r, Result<(), Error>> {
    Box::pin(r.apiserver_restart())
}

/// Starts the controller as `profile` says and lets it write what the scenarios before left pending
/// (S8's held-back Deployments, which it writes once it runs without pacing, and S7's settling
/// rollout): returns once no template has changed for `quiet` (`SMOKE_QUIET` under `--smoke`).
async fn start_and_write_pending(
    session: &Session,
    changes: &mut TemplateChanges,
    profile: &Profile,
    quiet: Duration,
    limits: Limits,
) -> Result<Running, Error> {
    let mut running =
        Running::start(profile, &session.kubeconfig, &session.log).map_err(|e| format!("starting: {e}"))?;
    probe_ready(&session.client, changes, &mut running, limits).await?;
    wait_settled(&session.client, None, limits).await?;
    let quiet = if limits.smoke { SMOKE_QUIET } else { quiet };
    changes.drain();
    if !changes.quiet(quiet, limits.limit(Duration::from_secs(900))).await {
        return Err(format!(
            "the controller kept writing: no {quiet:?} without a template change"
        ));
    }
    Ok(running)
}

/// Fills `s1`'s steps from the audit log's requests since `from`, and prints them.
fn profile_steps(session: &Session, s1: &mut Latency, from: Timestamp) {
    latency::profile_steps(s1, &audit::completed(&session.audit_log, from), &session.user);
    if let Some(p) = &s1.steps {
        let f = |x: &StepFigure| format!("{:.1}/{:.1}/{:.1}", x.p50_ms, x.p99_ms, x.tail_mean_ms);
        eprintln!(
            "  steps (p50/p99/tail mean ms, {} of them read): to read {}, read {}, to write {}, write {}, to seen {}",
            p.read,
            f(&p.to_read),
            f(&p.read_step),
            f(&p.to_write),
            f(&p.write),
            f(&p.to_seen)
        );
    }
    if let Some(own) = &s1.own {
        let f =
            |x: &metrics::Quantiles| format!("{}× {:.1}/{:.1}/{:.0}", x.count, x.p50_ms, x.p99_ms, x.max_ms);
        eprintln!(
            "  wave's own (count, p50/p99/max ms): router {}, queue {}, reconcile {}, Secret GET {}, patch {}, change to patch {}",
            f(&own.router_lag),
            f(&own.queue_wait),
            f(&own.reconcile),
            f(&own.secret_get),
            f(&own.workload_patch),
            f(&own.change_to_patch)
        );
    }
}
