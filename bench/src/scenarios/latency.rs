//! S1, latency (one config change at a time, each until the template changed; its request cost is
//! S4's per-change figure) and S3, fan-out (one Secret shared by many Deployments). The round runs them
//! twice (with write limits off, then at the shipped defaults); H1 and S10 run S1 alone. S1L is S1 again
//! while a second client keeps the apiserver busy with unrelated writes and LISTs ([`Load`]).
//!
//! ```text
//! S1: for each update: ConfigMap or Secret of workload j patched ─► wait for app-j's template (30 s)
//!     ─► 1 s for late writes ─► requests in the window (audit log) ─► p50/p90/p99/max, missed
//! S3: `shared` patched ─► wait for every fan-k's template ─► 2 s for late writes ─► writes, refused
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::nan_if_null;
use crate::harness::audit::{self, Counts};
use crate::harness::population::{FANOUT_NS, patch};
use crate::harness::stats::quantile;
use crate::harness::wait::TemplateChanges;
use crate::harness::{Error, Limits};

/// What S1 and S3 change: S1's workloads (`app-j` in `bench-{j % namespaces}`), one update each in
/// turn, and S3's Deployments.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub namespaces: usize,
    pub deployments: usize,
    /// S1: config objects updated, one at a time.
    pub updates: usize,
    /// S3: Deployments referencing one Secret; 0 runs S1 alone.
    pub fanout: usize,
    pub limits: Limits,
}

/// S1's figures.

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p90_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Updates whose change never reached the template within 30 s.
    pub missed: usize,
    /// Every update, in order: what changed and how long until the template changed.
    pub samples: Vec<LatencySample>,
}

/// One S1 update.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencySample {
    /// `configmap` or `secret`.
    pub kind: String,
    /// From the update's response to the template change; `None` when it was missed.
    pub ms: Option<f64>,
}

/// S1L's background load: a second client that writes unrelated ConfigMaps and LISTs every ConfigMap
/// of the cluster at fixed rates while S1 runs, so that the apiserver (and etcd) are busy as in a
/// shared cluster. Nothing the controllers watch-for references what it writes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Load {
    /// ConfigMap patches per second, in turn over [`LOAD_OBJECTS`] objects of [`LOAD_NS`].
    pub writes_per_s: u32,
    /// LISTs of every ConfigMap in the cluster per second (paginated by 500, as client-go lists).
    pub lists_per_s: u32,
}

/// The namespace the load writes in.
pub const LOAD_NS: &str = "bench-load";
/// The ConfigMaps it writes, in turn.
pub const LOAD_OBJECTS: usize = 20;
/// The load S1L runs under.
pub const LOAD: Load = Load {
    writes_per_s: 50,
    lists_per_s: 5,
};

/// S1L's figures: S1 under [`LOAD`], and the load as it was delivered.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UnderLoad {
    pub s1: Latency,
    /// The load asked for.
    pub writes_per_s: u32,
    pub lists_per_s: u32,
    /// What the second client achieved over S1's duration (a busy apiserver may deliver less).
    pub writes_done_per_s: f64,
    pub lists_done_per_s: f64,
    /// Requests of the load that failed.
    pub load_errors: u64,
}

/// Creates [`LOAD_NS`] and its [`LOAD_OBJECTS`] ConfigMaps.
pub async fn prepare_load(client: &Client) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let pp = PostParams::default();
    let ns = serde_json::from_value(json!({"metadata": {"name": LOAD_NS}})).map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await
        .map_err(|e| format!("creating {LOAD_NS}: {e}"))?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), LOAD_NS);
    for k in 0..LOAD_OBJECTS {
        let cm =
            serde_json::from_value(json!({"metadata": {"name": format!("load-{k}")}, "data": {"n": "0"}}))
                .map_err(|e| e.to_string())?;
        api.create(&pp, &cm)
            .await
            .map_err(|e| format!("creating {LOAD_NS}/load-{k}: {e}"))?;
    }
    Ok(())
}

/// Deletes [`LOAD_NS`] (in the background: the namespace controller empties it), so that the steps
/// after S1L see the population as it was.
pub async fn remove_load(client: &Client) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, DeleteParams};
    Api::<Namespace>::all(client.clone())
        .delete(LOAD_NS, &DeleteParams::default())
        .await
        .map(drop)
        .map_err(|e| format!("deleting {LOAD_NS}: {e}"))
}

/// Runs [`LOAD`] until `stop` says so; returns (writes done, LISTs done, errors).
pub async fn run_load(client: Client, mut stop: tokio::sync::watch::Receiver<bool>) -> (u64, u64, u64) {
    use kube::api::{Api, ListParams};
    let mut writes = tokio::time::interval(Duration::from_secs(1) / LOAD.writes_per_s);
    let mut lists = tokio::time::interval(Duration::from_secs(1) / LOAD.lists_per_s);
    // A busy apiserver may answer late: the load does not catch up in bursts, it stays at its rate.
    writes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    lists.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let all: Api<ConfigMap> = Api::all(client.clone());
    let (mut written, mut listed, mut errors, mut n) = (0u64, 0u64, 0u64, 0usize);
    loop {
        tokio::select! {
            _ = stop.changed() => return (written, listed, errors),
            _ = writes.tick() => {
                n += 1;
                let body = json!({"data": {"n": n.to_string()}});
                match patch::<ConfigMap>(&client, LOAD_NS, &format!("load-{}", n % LOAD_OBJECTS), body).await {
                    Ok(()) => written += 1,
                    Err(_) => errors += 1,
                }
            }
            _ = lists.tick() => {
                let mut params = ListParams::default().limit(500);
                loop {
                    match all.list(&params).await {
                        Ok(page) => match page.metadata.continue_.filter(|t| !t.is_empty()) {
                            Some(token) => params = params.continue_token(&token),
                            None => {
                                listed += 1;
                                break;
                            }
                        },
                        Err(_) => {
                            errors += 1;
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// S3's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FanOut {
    pub deployments: usize,
    pub changed: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub all_changed_ms: f64,
    /// Successful workload writes.
    pub workload_writes: u64,
    /// Workload writes the apiserver refused (409 Conflict).
    pub refused_writes: u64,
    /// The wait ended before every Deployment changed: `changed` and `all_changed_ms` are partial.
    pub timed_out: bool,
}

/// S1 and S3 of one pass, with S4's per-change cost.
pub(crate) struct Spread {
    pub s1: Latency,
    pub s3: FanOut,
    pub per_change_requests: f64,
    pub per_change_workload_writes: f64,
}

/// S1 (one change at a time: latency and cost) and S3 (one Secret shared by `fanout` Deployments).
/// Values are prefixed with `pass` so that a second pass changes every object again.
pub(crate) async fn spread_and_fan_out(
    sizes: &Sizes,
    client: &Client,
    changes: &mut TemplateChanges,
    cost: &impl Fn(Timestamp, Timestamp) -> Counts,
    pass: &str,
) -> Result<Spread, Error> {
    // S1.
    let from = Timestamp::now();
    let mut samples = Vec::new();
    for k in 0..sizes.updates {
        let j = k % sizes.deployments.max(1);
        let ns = format!("bench-{}", j % sizes.namespaces);
        changes.drain();
        let kind = if k % 2 == 0 {
            let body = json!({"data": {"app.conf": format!("{pass}{}", k + 1)}});
            patch::<ConfigMap>(client, &ns, &format!("cfg-{j}"), body).await?;
            "configmap"
        } else {
            let body = json!({"stringData": {"password": format!("{pass}{}", k + 1)}});
            patch::<Secret>(client, &ns, &format!("sec-{j}"), body).await?;
            "secret"
        };
        let t0 = Instant::now();
        let seen = changes
            .wait_for(
                &format!("{ns}/app-{j}"),
                sizes.limits.limit(Duration::from_secs(30)),
            )
            .await;
        samples.push(LatencySample {
            kind: kind.to_string(),
            ms: seen.map(|at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
        });
    }
    // A late duplicate write still counts; this is the window the cost is read over, not a wait.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s1_cost = cost(from, Timestamp::now());
    let s1 = percentiles(samples);
    eprintln!(
        "  S1 ({pass}) p50 {:.1} ms p99 {:.1} ms, {} missed",
        s1.p50_ms, s1.p99_ms, s1.missed
    );

    let per_change_requests = audit::total(&s1_cost) as f64 / sizes.updates.max(1) as f64;
    let per_change_workload_writes = audit::workload_writes(&s1_cost) as f64 / sizes.updates.max(1) as f64;
    if sizes.fanout == 0 {
        // S10 and H1 measure S1 alone.
        return Ok(Spread {
            s1,
            s3: FanOut::default(),
            per_change_requests,
            per_change_workload_writes,
        });
    }

    // S3.
    changes.drain();
    let from = Timestamp::now();
    patch::<Secret>(
        client,
        FANOUT_NS,
        "shared",
        json!({"stringData": {"password": format!("{pass}-changed")}}),
    )
    .await?;
    let t0 = Instant::now();
    let keys: HashSet<String> = (0..sizes.fanout)
        .map(|k| format!("{FANOUT_NS}/fan-{k}"))
        .collect();
    let seen = changes
        .collect(&keys, sizes.limits.limit(Duration::from_secs(600)))
        .await;
    let mut s3 = FanOut {
        deployments: sizes.fanout,
        changed: seen.len(),
        all_changed_ms: seen
            .values()
            .max()
            .map_or(0.0, |at| at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
        workload_writes: 0,
        refused_writes: 0,
        timed_out: seen.len() < sizes.fanout,
    };
    // Writes that land after the last template change still count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s3_cost = cost(from, Timestamp::now());
    s3.workload_writes = audit::workload_writes(&s3_cost);
    s3.refused_writes = audit::refused_workload_writes(&s3_cost);
    eprintln!(
        "  S3 ({pass}) {} of {} in {:.0} ms",
        s3.changed, sizes.fanout, s3.all_changed_ms
    );
    Ok(Spread {
        s1,
        s3,
        per_change_requests,
        per_change_workload_writes,
    })
}

/// S1's percentiles of the updates seen; the missed ones are counted apart.
fn percentiles(samples: Vec<LatencySample>) -> Latency {
    let mut s: Vec<f64> = samples.iter().filter_map(|x| x.ms).collect();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| quantile(&s, q);
    Latency {
        p50_ms: at(0.50),
        p90_ms: at(0.90),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        missed: samples.len() - s.len(),
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_leave_missed_updates_out_and_count_them() {
        let samples: Vec<LatencySample> = (1..=100)
            .map(|ms| LatencySample {
                kind: "secret".into(),
                ms: Some(ms as f64),
            })
            .chain(std::iter::once(LatencySample {
                kind: "configmap".into(),
                ms: None,
            }))
            .collect();
        let l = percentiles(samples);
        assert_eq!(
            (l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!((l.missed, l.samples.len()), (1, 101));
    }
}
