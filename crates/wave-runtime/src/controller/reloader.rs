//! The reconcile of a workload opted in through Stakater Reloader's annotations (`--reloader-compat`):
//! the same shell as wave's own reconcile, around `wave_core::reloader` instead of the hash plan.
//!
//! ```text
//! selection and candidates (tracker, metadata only) ─► targets (core) ─► content cache (targets only)
//!   ─► for a workload wave saw created: what each target went through since (resourceVersions)
//!   ─► plan (core): marks to write, SHA-1s observed
//!   a pause period over (pause-period) ─► resume the Deployment ─► Event `Resumed`
//!   no marks ─► record what was seen ─► Noop (or Paused: look again when the pause ends)
//!   marks    ─► held while a target flaps, or coalesced (as wave's own rollouts)
//!            ─► token ─► lease ─► the write Reloader makes: a strategic merge PATCH (apps/v1, pausing a
//!               Deployment that asks), a merge PATCH (Argo Rollout), a Job started (CronJob,
//!               named after the CronJob and the config version: a retried create is a 409, done),
//!               or a Job deleted and created again (Job: held in memory until the create lands);
//!               patches guarded by resourceVersion
//!            ─► record what was seen ─► Event `Reloaded` (Reloader's reason) ─► its alert, if on
//!            (with --webhook-url: nothing written; the change is posted there instead, once per change)
//!            409 ⇒ re-read the workload and re-plan at once
//! ```
//!
//! Pacing, undo pins and config history work on wave's config hash, which these workloads do not carry;
//! they apply to workloads opted in with wave's own annotation (`docs/migrating-from-reloader.md`).
//!
//! [`look_for_reloader`], once every watch has listed and at each resync: with compatibility on, a
//! Deployment running Stakater Reloader (`wave_core::reloader::runs_reloader`, read from the workloads
//! wave already watches) is announced once, loudly: a warning, `wave_reloader_running`, and a Warning
//! Event on `--own-deployment`. With it off, the workloads wave leaves alone are counted in one line.

use std::sync::Arc;
use std::time::Instant;

use wave_core::decide::{self, Verdict};
use wave_core::names::{
    action, reason,
    reloader::{RELOADED, RESUMED},
};
use wave_core::pace;
use wave_core::refs::{ConfigKey, ConfigKind, Keys, Reference, References};
use wave_core::reloader::{self, Mark, Pause};
use wave_core::workload::{Workload, WorkloadKind, WorkloadRef};

use super::holds::held;
use super::outcome::Outcome;
use super::write::{self, Conflicts, Patched, What};
use crate::api::{self, PatchStyle};
use crate::error::ReconcileError;
use crate::events::EventType;
use crate::metrics::KindLabel;
use crate::state::bookkeeping::PendingJob;
use crate::state::{Context, memory};

/// Reconciles `workload`, which opted in through Reloader's annotations.
pub async fn reconcile(
    ctx: &Context,
    mut workload: Arc<Workload>,
    triggered: Option<Instant>,
) -> Result<Outcome, ReconcileError> {
    let id = workload.id.clone();
    let mut conflicts = Conflicts::new(&id);
    loop {
        let (options, mut targets) = {
            let tracker = ctx.tracker();
            let (Some(options), Some(selection)) =
                (tracker.reloader(), tracker.reloader_selection(&workload))
            else {
                return Ok(Outcome::Noop);
            };
            for problem in &selection.problems {
                tracing::warn!(workload = %id, "{problem}; ignored");
            }
            let candidates = tracker.reloader_candidates(&workload, &selection.needs(&workload));
            (
                options.clone(),
                reloader::targets(&workload, &selection, &candidates),
            )
        };
        let refs = references(&targets);
        let (mut fetched, versions) = ctx.content.resolve_versions(&refs, &ctx.tracker).await?;
        {
            // A SecretProviderClass is not read: the tracker holds what its pods' statuses reported.
            let tracker = ctx.tracker();
            for target in targets
                .iter()
                .filter(|t| t.key.kind == ConfigKind::SecretProviderClass)
            {
                if let Some(content) = tracker.provider_class(&target.key) {
                    fetched.insert(target.key.clone(), content);
                }
            }
        }
        {
            // A workload wave saw created starts from the data of its creation (`reloader::since`).
            let tracker = ctx.tracker();
            for target in &mut targets {
                let read_at = versions.get(&target.key).map(String::as_str);
                target.since_creation = tracker.reloader_since_creation(&id, &target.key, read_at);
            }
        }
        memory::observe_data_changes(ctx);
        let seen = ctx.reloader_seen().of(&id);
        let now = k8s_openapi::jiff::Timestamp::now();
        let decision = reloader::plan(&workload, &targets, &fetched, &options, &seen, now.as_second());
        let pause = reloader::pause(&workload, now);
        if pause == Pause::ResumeNow {
            match resume(ctx, &workload).await? {
                Some(outcome) => return Ok(outcome),
                None => {
                    let Some(fresh) = conflicts.reread(ctx).await? else {
                        return Ok(Outcome::Gone);
                    };
                    workload = fresh;
                    continue;
                }
            }
        }
        let paused = match pause {
            Pause::ResumeAfter(left) => Outcome::Paused(left),
            _ => Outcome::Noop,
        };
        let notify_only = ctx.outbox.as_ref().filter(|outbox| outbox.notifies_only());
        // Under --webhook-url a deletion is a change to post even with no env var to remove.
        let nothing_to_do = match notify_only {
            Some(_) => decision.changed.is_empty(),
            None => decision.marks.is_empty(),
        };
        if nothing_to_do {
            record_seen(ctx, &id, decision.observed, targets.len());
            return Ok(paused);
        }
        let changed: Vec<String> = decision.changed.iter().map(pace::object_name).collect();
        let mut delivers: Vec<pace::Version> = pace::versions(&refs, &fetched, &ctx.hashing)
            .into_iter()
            .filter(|(object, _)| changed.contains(object))
            .map(|(object, digest)| pace::Version { object, digest })
            .collect();
        // A class's version is its SHA-1 (ids and versions only, nothing secret), so that the flap
        // breaker, which counts its rotations, holds them as it holds a ConfigMap's changes.
        delivers.extend(
            decision
                .changed
                .iter()
                .filter(|key| key.kind == ConfigKind::SecretProviderClass)
                .filter_map(|key| {
                    let sha = decision.observed.get(key)?;
                    Some(pace::Version {
                        object: pace::object_name(key),
                        digest: sha.chars().take(12).collect(),
                    })
                }),
        );
        let verdict = memory::with_memory(ctx, &id, |memory| {
            decide::rollout_verdict(&workload, None, &delivers, memory)
        });
        // Reloader writes its marks on a paused Deployment (its own pause-period pauses it), so a
        // pause holds nothing here; the pause-period timer resumes it.
        if let Verdict::Hold(hold) = verdict
            && hold != decide::Hold::Paused
        {
            return Ok(held(ctx, &workload, hold));
        }
        if let Some(outbox) = notify_only {
            if !ctx.is_leader() {
                return Ok(Outcome::NotLeader);
            }
            notify(outbox, &workload, &decision);
            ctx.coalescer().record(&id, Instant::now());
            record_seen(ctx, &id, decision.observed, targets.len());
            return Ok(Outcome::Noop);
        }
        let result = if workload.id.kind == WorkloadKind::CRON_JOB {
            // Reloader does not patch a CronJob: it starts a Job from it, carrying the mark.
            start_job(ctx, &workload, &decision).await?
        } else if workload.id.kind == WorkloadKind::JOB {
            // A Job's template cannot change: Reloader deletes it and creates it again, with the mark.
            recreate_job(ctx, &workload, &decision).await?
        } else {
            let (mut body, kind) = reloader::reload_patch(&workload, &decision.marks, now);
            let style = match kind {
                reloader::PatchKind::StrategicMerge => PatchStyle::Strategic,
                reloader::PatchKind::Merge => PatchStyle::Merge,
            };
            match reloader::pause_period(&workload) {
                Some(Ok(_)) => reloader::add_pause(&mut body, &workload, now),
                Some(Err(why)) => tracing::warn!(workload = %id, "{why}"),
                None => {}
            }
            write::patch(ctx, &workload, &body, What::Reload(style)).await?
        };
        match result {
            Patched::Written => {
                ctx.coalescer().record(&id, Instant::now());
                after_write(ctx, &workload, &decision, triggered);
                record_seen(ctx, &id, decision.observed, targets.len());
                return Ok(Outcome::Written);
            }
            Patched::Not(outcome) => return Ok(outcome),
            Patched::Conflict => {
                let Some(fresh) = conflicts.reread(ctx).await? else {
                    return Ok(Outcome::Gone);
                };
                workload = fresh;
            }
        }
    }
}

/// Records what was seen of `id`'s targets. Once wave has read every one of them, what it read is the
/// starting point of each (`reloader::Seen`), so the date of the workload's creation is no longer
/// needed: a target it gains later (a template edit, a `match` mark) starts from wave's first read of
/// it, as for any workload. A target it could not read (gone before the read) keeps the date, so that
/// its deletion is still dated against the creation.
fn record_seen(
    ctx: &Context,
    id: &WorkloadRef,
    observed: std::collections::BTreeMap<ConfigKey, String>,
    targets: usize,
) {
    let read_all = observed.len() == targets;
    ctx.reloader_seen().record(id, observed);
    if read_all {
        ctx.tracker_mut().settle_reloader_birth(id);
    }
}

/// Resumes a Deployment whose reload pause is over (`reloader::pause`): `None` on a conflict (re-read
/// and look again).
async fn resume(ctx: &Context, workload: &Workload) -> Result<Option<Outcome>, ReconcileError> {
    let body = reloader::resume_patch(workload);
    let outcome = match write::patch(ctx, workload, &body, What::Resume).await? {
        Patched::Written => Some(Outcome::Written),
        Patched::Conflict => None,
        Patched::Not(outcome) => Some(outcome),
    };
    if outcome == Some(Outcome::Written) {
        tracing::info!(workload = %workload.id, "pause period over; resumed");
        let note = "The pause period after a reload is over: resumed the Deployment.".to_string();
        ctx.events
            .publish(workload, EventType::Normal, RESUMED, action::RELOAD, note);
        // Its watch event brings it back, to write whatever changed during the pause.
    }
    Ok(outcome)
}

/// A reload's pause on a workload that the Reloader path no longer handles (its annotations gone, its
/// namespace deselected, compatibility off): wave still resumes it when its period is over, so a pause
/// it made never outlives it. `None` when there is no such pause. A conflict is re-read and decided
/// again at once: the newer version may differ only in its status, whose watch event wakes nothing.
pub async fn release_pause(
    ctx: &Context,
    workload: &Arc<Workload>,
) -> Result<Option<Outcome>, ReconcileError> {
    let mut conflicts = Conflicts::new(&workload.id);
    let mut current = workload.clone();
    loop {
        match reloader::pause(&current, k8s_openapi::jiff::Timestamp::now()) {
            Pause::None => return Ok(None),
            Pause::ResumeAfter(left) => return Ok(Some(Outcome::Paused(left))),
            Pause::ResumeNow => match resume(ctx, &current).await? {
                Some(outcome) => return Ok(Some(outcome)),
                None => {
                    let Some(fresh) = conflicts.reread(ctx).await? else {
                        return Ok(Some(Outcome::Gone));
                    };
                    current = fresh;
                }
            },
        }
    }
}

/// Starts a Job from CronJob `workload` with the decision's marks (a token and the lease first, like
/// every write). The Job's name is derived from the CronJob and the config version
/// (`wave_core::reloader::job_name`), so when an earlier create of this same reload landed (a timeout
/// or a 5xx that hid its success, then a retry), the apiserver answers 409 and no second Job starts.
async fn start_job(
    ctx: &Context,
    workload: &Workload,
    decision: &reloader::Decision,
) -> Result<Patched, ReconcileError> {
    let id = &workload.id;
    if let Err(outcome) = write::ready(ctx, id, What::Reload(PatchStyle::Merge)).await {
        return Ok(Patched::Not(outcome));
    }
    let Some(cron_job) = read_workload(ctx, id).await? else {
        return Ok(Patched::Not(Outcome::Gone));
    };
    let versions = {
        let tracker = ctx.tracker();
        decision
            .changed
            .iter()
            .filter_map(|key| Some((key.clone(), tracker.config(key)?.clone())))
            .collect()
    };
    let name = reloader::job_name(workload, decision, &versions);
    let job = reloader::job_from_cron_job(&cron_job.data, workload, &decision.marks, &name);
    let started = api::create_job(&ctx.client, &id.namespace, &job, false)
        .await
        .map_err(|source| ReconcileError::PatchWorkload {
            workload: id.clone(),
            source: Box::new(source),
        })?;
    match started {
        api::JobStart::Created => tracing::debug!(workload = %id, job = name, "started a Job"),
        api::JobStart::Existed => tracing::info!(
            workload = %id,
            job = name,
            "the Job of this config version exists already (an earlier create landed); not starting another"
        ),
    }
    Ok(Patched::Written)
}

/// Creates Job `workload` again with the decision's marks, as Reloader's `ReCreateJobFromjob` does: the
/// Job is deleted (its pods in the background) and created under the same name
/// (`wave_core::reloader::job_recreated`). A token and the lease first, like every write. Before it
/// deletes anything:
/// - a Job being deleted already (by its owner, its TTL, a user, its namespace) is left to go;
/// - the new Job is created with `dryRun`: the apiserver's answer 409 AlreadyExists means admission and
///   validation took it, so a create that would be refused (a policy, a quota's rules, a field) is found
///   while the old Job still exists, and nothing is deleted;
/// - the Job to create is kept ([`PendingJobs`]), so that a delete whose answer is lost does not lose it.
///
/// The delete holds only if the Job is still the one read (its uid and resourceVersion as
/// preconditions), so a Job edited, opted out or re-created meanwhile is re-read and planned again,
/// never deleted. Then [`create_pending_job`] creates it; until that lands, the Job exists only in
/// wave's memory, and every reconcile of it tries again ([`finish_recreation`]).
///
/// [`PendingJobs`]: crate::state::bookkeeping::PendingJobs
async fn recreate_job(
    ctx: &Context,
    workload: &Arc<Workload>,
    decision: &reloader::Decision,
) -> Result<Patched, ReconcileError> {
    let id = &workload.id;
    if let Err(outcome) = write::ready(ctx, id, What::Reload(PatchStyle::Merge)).await {
        return Ok(Patched::Not(outcome));
    }
    let Some(job) = read_workload(ctx, id).await? else {
        return Ok(Patched::Not(Outcome::Gone));
    };
    if job.metadata.deletion_timestamp.is_some() {
        tracing::info!(workload = %id, "the Job is being deleted; it is not created again");
        return Ok(Patched::Not(Outcome::Noop));
    }
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let version = job.metadata.resource_version.clone().unwrap_or_default();
    if uid != workload.uid || version != workload.resource_version {
        // The plan was made on an older view: plan again on this one.
        return Ok(Patched::Conflict);
    }
    let stored = serde_json::to_value(&job).unwrap_or_default();
    let manifest = reloader::job_recreated(&stored, &decision.marks);
    let refused = |source: kube::Error, step: &'static str, words: &str| {
        write::failed(
            ctx,
            workload,
            words,
            &source,
            "The Job was left as it is. ",
            false,
        );
        ReconcileError::RecreateJob {
            workload: id.clone(),
            step,
            source: Box::new(source),
        }
    };
    match api::create_job(&ctx.client, &id.namespace, &manifest, true).await {
        Ok(api::JobStart::Existed) => {}
        // Created in a dry run: the old Job is gone since it was read. Plan again on what is there.
        Ok(api::JobStart::Created) => return Ok(Patched::Conflict),
        Err(source) => {
            return Err(refused(
                source,
                "checking (dry run) the create of",
                "Creating the Job again (dry run)",
            ));
        }
    }
    ctx.pending_jobs.hold(
        id,
        PendingJob {
            job: workload.clone(),
            old_uid: uid.clone(),
            manifest,
            decision: decision.clone(),
        },
    );
    match api::delete_job(&ctx.client, &id.namespace, &id.name, &uid, &version).await {
        Ok(api::JobDelete::Deleted) => {}
        Ok(api::JobDelete::Gone) => {
            ctx.pending_jobs.done(id);
            return Ok(Patched::Not(Outcome::Gone));
        }
        Ok(api::JobDelete::Changed) => {
            ctx.pending_jobs.done(id);
            return Ok(Patched::Conflict);
        }
        // Kept pending: the delete may have landed with its answer lost; the next look finds out.
        Err(source) => return Err(refused(source, "deleting", "Deleting the Job to create it again")),
    }
    Ok(match create_pending_job(ctx, id).await? {
        Created::Now => Patched::Written,
        Created::Not(outcome) => Patched::Not(outcome),
    })
}

/// How long a Job that is still being deleted (a finalizer holds it) is left before wave looks again.
const TERMINATING_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// What became of a pending Job.
enum Created {
    /// It was created now.
    Now,
    /// It was not: why, and when to look again.
    Not(Outcome),
}

/// One try at creating the Job deleted for `id` ([`recreate_job`]), if one is pending, without waiting
/// in the reconcile: the Job as it stands decides.
/// - The old one is there and not being deleted: the delete never landed. Nothing is pending; the Job
///   is planned again as it is.
/// - The old one is still being deleted (a finalizer): look again shortly.
/// - Another Job of that name is there (its owner's, a user's): it is kept, and nothing is created.
/// - None: create it. Refused, the worker tries again with backoff (a Warning Event says so, once);
///   refused because its namespace is gone or going, nothing is left to create it in.
async fn create_pending_job(ctx: &Context, id: &WorkloadRef) -> Result<Created, ReconcileError> {
    let Some(pending) = ctx.pending_jobs.get(id) else {
        return Ok(Created::Not(Outcome::Noop));
    };
    if let Some(existing) = read_workload(ctx, id).await? {
        let old = existing.metadata.uid.as_deref() == Some(pending.old_uid.as_str());
        if old && existing.metadata.deletion_timestamp.is_some() {
            return Ok(Created::Not(Outcome::Waiting(TERMINATING_RECHECK)));
        }
        ctx.pending_jobs.done(id);
        if !old {
            tracing::info!(workload = %id, "a Job of this name was created meanwhile; it is kept, and wave creates none");
        }
        return Ok(Created::Not(Outcome::Noop));
    }
    match api::create_job(&ctx.client, &id.namespace, &pending.manifest, false).await {
        Ok(api::JobStart::Created) => {
            ctx.pending_jobs.done(id);
            ctx.write_failures.forget(id);
            Ok(Created::Now)
        }
        // Created between the read and the create: the next look sees whose it is.
        Ok(api::JobStart::Existed) => Ok(Created::Not(Outcome::Waiting(TERMINATING_RECHECK))),
        Err(source) if namespace_gone(&source) => {
            tracing::warn!(workload = %id, "the Job's namespace is gone or being deleted; the Job is not created again");
            ctx.pending_jobs.done(id);
            Ok(Created::Not(Outcome::Gone))
        }
        Err(source) => {
            write::failed(
                ctx,
                &pending.job,
                "Creating the Job again after deleting it",
                &source,
                "wave holds the Job to create and keeps trying; ",
                false,
            );
            Err(ReconcileError::RecreateJob {
                workload: id.clone(),
                step: "creating again",
                source: Box::new(source),
            })
        }
    }
}

/// Whether a create was refused because the namespace is gone (404) or being deleted (403, whose
/// message the apiserver words this way since namespaces have had a lifecycle).
fn namespace_gone(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            status.code == 404 || (status.code == 403 && status.message.contains("is being terminated"))
        }
        _ => false,
    }
}

/// Workload `id` (a CronJob, a Job) as stored, if it exists.
async fn read_workload(
    ctx: &Context,
    id: &WorkloadRef,
) -> Result<Option<kube::api::DynamicObject>, ReconcileError> {
    api::workload_api(&ctx.client, id.kind, Some(&id.namespace))
        .get_opt(&id.name)
        .await
        .map_err(|source| ReconcileError::GetWorkload {
            workload: id.clone(),
            source: Box::new(source),
        })
}

/// For a Job deleted to be created again whose create has not landed yet: tries it now (see
/// [`create_pending_job`]), and once it lands says so as a reload does. `None` when none is pending for
/// `id`, or when its delete turned out not to have landed: then it is planned as usual. Called before
/// anything else for a Job, since the watches no longer show it.
pub async fn finish_recreation(ctx: &Context, id: &WorkloadRef) -> Result<Option<Outcome>, ReconcileError> {
    if id.kind != WorkloadKind::JOB {
        return Ok(None);
    }
    let Some(pending) = ctx.pending_jobs.get(id) else {
        return Ok(None);
    };
    match create_pending_job(ctx, id).await? {
        Created::Now => {
            ctx.coalescer().record(id, Instant::now());
            after_write(ctx, &pending.job, &pending.decision, None);
            record_seen(
                ctx,
                id,
                pending.decision.observed.clone(),
                pending.decision.observed.len(),
            );
            Ok(Some(Outcome::Written))
        }
        Created::Not(Outcome::Noop) => Ok(None),
        Created::Not(outcome) => Ok(Some(outcome)),
    }
}

/// The ConfigMap and Secret targets as optional references to every key: what the content cache and the
/// flap breaker take (SecretProviderClasses are the tracker's).
fn references(targets: &[reloader::Target]) -> References {
    let mut refs = References::default();
    for target in targets {
        let reference = Reference {
            key: target.key.clone(),
            required: false,
            keys: Keys::All,
            origin: format!("Reloader target (container {:?})", target.container),
        };
        match target.key.kind {
            ConfigKind::ConfigMap => refs.config_maps.push(reference),
            ConfigKind::Secret => refs.secrets.push(reference),
            ConfigKind::SecretProviderClass => {}
        }
    }
    refs
}

/// `--webhook-url`: the reload `decision` asks is posted there instead of written, once per change of
/// an object however many workloads it reloads (`alerts::Outbox::webhook`), as Reloader posts once per
/// changed object. The URL is never logged.
fn notify(outbox: &crate::alerts::Outbox, workload: &Workload, decision: &reloader::Decision) {
    for key in &decision.changed {
        let sha = decision.observed.get(key).map_or("", String::as_str);
        if outbox.webhook(key, sha) {
            tracing::info!(workload = %workload.id, changed = %key, "posted the change to --webhook-url; nothing written");
        }
    }
}

/// Metrics, a log line, Reloader's Event and alert, after the write succeeded.
fn after_write(
    ctx: &Context,
    workload: &Workload,
    decision: &reloader::Decision,
    triggered: Option<Instant>,
) {
    let kind = workload.id.kind.as_str();
    ctx.metrics.rollouts.get_or_create(&KindLabel { kind }).inc();
    if let Some(t) = triggered {
        ctx.metrics
            .change_to_patch_seconds
            .observe(t.elapsed().as_secs_f64());
    }
    let changed: Vec<String> = decision.changed.iter().map(ToString::to_string).collect();
    let restart = workload
        .annotations
        .get(reloader::ROLLOUT_STRATEGY)
        .map(String::as_str)
        == Some("restart");
    let what = match decision.marks.first() {
        _ if restart && workload.id.kind == WorkloadKind::ROLLOUT => "set spec.restartAt of",
        _ if workload.id.kind == WorkloadKind::CRON_JOB => "started a Job from",
        _ if workload.id.kind == WorkloadKind::JOB => "deleted and created again",
        Some(Mark::Annotation(_)) => {
            "updated the pod-template annotation reloader.stakater.com/last-reloaded-from of"
        }
        _ => "updated the STAKATER_* env vars of",
    };
    tracing::info!(workload = %workload.id, changed = ?changed, "reloaded (Reloader annotations)");
    let note = format!(
        "Changes detected in {}: {what} {}.",
        changed.join(", "),
        workload.id
    );
    ctx.events
        .publish(workload, EventType::Normal, RELOADED, action::RELOAD, note);
    if let Some(outbox) = &ctx.outbox {
        // One alert per object, as Reloader sends one per reload it makes for an object's change.
        for key in &decision.changed {
            outbox.alert(&reloader::reload_message(key, &workload.id));
        }
    }
}

/// Looks for a running Stakater Reloader (see the module docs). Called once every watch has listed (the
/// tracker then holds every workload of the watched namespaces) and at each resync.
pub fn look_for_reloader(ctx: &Context) {
    let (running, own_uid, reloader_only) = {
        let tracker = ctx.tracker();
        if tracker.reloader().is_none() {
            // Any of Reloader's annotations, its SecretProviderClass ones included.
            let defaults = reloader::Options {
                csi: true,
                ..reloader::Options::default()
            };
            let reloader_only = tracker
                .workloads()
                .filter(|w| !w.is_opted_in() && reloader::selection(w, &defaults).is_some())
                .count();
            (Vec::new(), None, reloader_only)
        } else {
            let own_uid = ctx
                .own_deployment
                .as_ref()
                .and_then(|id| tracker.workload_view(id))
                .map(|w| w.uid.clone());
            (reloader::running_reloaders(tracker.workloads()), own_uid, 0)
        }
    };
    if reloader_only > 0 && ctx.reloader_sightings.note_reloader_only(reloader_only) {
        // A warning: after an upgrade from a wave where compatibility was on, these stopped reloading.
        tracing::warn!(
            workloads = reloader_only,
            "workloads carry only Stakater Reloader's annotations; Reloader compatibility is off, so wave leaves them alone (--reloader-compat turns it on)"
        );
    }
    for found in ctx.reloader_sightings.update(running) {
        let note = format!(
            "Stakater Reloader runs in Deployment {found}, and wave runs with --reloader-compat: both act on \
             the same changes of Reloader-annotated workloads (two rollouts per change, two Jobs per CronJob \
             reload). Stop Reloader (scale it to 0) or turn --reloader-compat off (docs/migrating-from-reloader.md)."
        );
        tracing::warn!(reloader = %found, "{note}");
        if let Some(own) = &ctx.own_deployment {
            ctx.events.publish_about(
                own,
                own_uid.as_deref(),
                EventType::Warning,
                reason::RELOADER_RUNNING,
                action::START,
                note,
            );
        }
    }
}
