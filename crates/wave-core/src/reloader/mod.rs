//! Stakater Reloader compatibility: workloads opted in with Reloader's annotations are handled the way
//! Reloader v1.4.21 handles them, and wave writes exactly what Reloader writes, so switching from
//! Reloader to wave rolls nothing (`docs/migrating-from-reloader.md`).
//!
//! ```text
//! selection(workload, options) ─► Selection (per kind: auto, name patterns, search, exclusions)
//!   Selection::needs ─► the objects to index (referenced, named) and whether to scan the namespace
//! targets(workload, selection, objects) ─► [Target] (an object, and the container Reloader marks)
//! plan(workload, targets, fetched, options, seen, now) ─► Decision { marks, observed }
//!   patch_body(workload, marks) ─► strategic merge patch (env var or pod-template annotation)
//! ```
//!
//! Reloader is edge-triggered: it reloads when an update event shows an object's SHA-1 changed, and
//! writes nothing for objects that never changed (so it cannot see a change made while it was down,
//! Reloader#814). wave is level-triggered: for each target it compares the object's SHA-1 now with the
//! one the workload carries (the `STAKATER_<NAME>_<KIND>` env var, or the object named by
//! `last-reloaded-from`), and, where the workload carries none, with the SHA-1 wave first saw ([`Seen`]).
//! So a workload Reloader managed is not written at startup unless its config changed meanwhile.
//!
//! The rules below follow Reloader's `ShouldReload` (`pkg/common/common.go`), `getContainerUsingResource`
//! and `updateContainerEnvVars` / `updatePodAnnotations` (`internal/pkg/handler/upgrade.go`) and
//! `GetSHAfromConfigmap` / `GetSHAfromSecret` (`internal/pkg/util/util.go`) at tag v1.4.21 of
//! <https://github.com/stakater/Reloader>; `docs/migrating-from-reloader.md` states them in prose.
//!
//! Which file holds what (the tests of `x.rs` are in `x_tests.rs`, their shared fixtures in `testing.rs`):
//! - `options.rs`: the flags ([`Options`], [`Strategy`]);
//! - `sha.rs`: Reloader's SHA-1 of an object and the env var it is kept in;
//! - `selection.rs`: what a workload asked ([`selection`], [`Selection`], [`Needs`]);
//! - `targets.rs`: which objects reload it and through which container ([`targets`], [`Target`]);
//! - `since.rs`: what a target went through since a workload wave saw created was created
//!   ([`since_creation`]), its starting point;
//! - `plan.rs`: which marks to write ([`plan`], [`Decision`], [`Mark`]) and what wave saw ([`Seen`]);
//! - `patch.rs`: the patches writing the marks, and a CronJob's Job ([`reload_patch`], [`job_name`]);
//! - `pause.rs`: a reload's pause and its end ([`pause`], [`Pause`]);
//! - `running.rs`: whether Reloader itself runs ([`running_reloaders`]);
//! - `csi.rs`: what the Secrets Store CSI driver reports of a pod's mount ([`ProviderStatus`]) and what
//!   Reloader hashes of it (`--enable-csi-integration`);
//! - `alert.rs`: what is posted about a reload, Reloader's alerts and `--webhook-url` ([`alert_post`]).

mod alert;
mod csi;
mod options;
mod patch;
mod pause;
mod plan;
mod running;
mod selection;
mod sha;
mod since;
mod targets;
#[cfg(test)]
mod testing;

pub use alert::{AlertSink, Post, WEBHOOK_BODY, alert_post, reload_message, webhook_post};
pub use csi::{ClassMeta, ProviderStatus, StatusRef, provider_status};
pub use options::{Options, Strategy};
pub use patch::{
    CRONJOB_INSTANTIATE, JOB_NAME_MAX, PatchKind, ROLLOUT_STRATEGY, job_from_cron_job, job_name,
    job_recreated, patch_body, reload_patch,
};
pub use pause::{Pause, add_pause, pause, pause_period, resume_patch};
pub use plan::{Decision, Mark, ReloadSource, Seen, last_reloaded_from, plan};
pub use running::{running_reloaders, runs_reloader};
pub use selection::{KindSelection, Needs, Pattern, Selection, selection};
pub use sha::{EMPTY_SHA, env_var_name, sha, type_name};
pub use since::{History, SinceCreation, revision, since_creation};
pub use targets::{Candidate, Lifecycle, Target, targets};
