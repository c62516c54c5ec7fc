//! The writes of a reload: the strategic merge patch of an `apps/v1` workload ([`patch_body`]), the merge
//! patch of an Argo Rollout ([`reload_patch`]), the Job a CronJob's reload starts
//! ([`job_from_cron_job`], named by [`job_name`]), and the Job created again in place of a Job
//! ([`job_recreated`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::pause::rfc3339;
use super::{Decision, Mark};
use crate::kind::WorkloadKind;
use crate::names::reloader as names;
use crate::refs::ConfigKey;
use crate::tracker::ObjectVersion;
use crate::workload::Workload;

/// How a reload's patch is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// Strategic merge patch: the `apps/v1` kinds.
    StrategicMerge,
    /// JSON merge patch: Argo Rollouts, whose API (a custom resource) takes no strategic merge patch.
    Merge,
}

/// With `reloader.stakater.com/rollout-strategy: restart`, a reload of an Argo Rollout sets
/// `spec.restartAt` (its pods restart, the template is left alone) instead of writing the mark.
pub const ROLLOUT_STRATEGY: &str = "reloader.stakater.com/rollout-strategy";

/// The patch writing `marks` to `workload`, as Reloader would leave it, guarded by the observed
/// `resourceVersion` like every wave write. For the `apps/v1` kinds a strategic merge patch: env vars
/// merge by name into their container's list (appended when new). For an Argo Rollout, which Reloader
/// updates whole: its containers with the marks applied, or, under `rollout-strategy: restart`,
/// `spec.restartAt` at `now`.
pub fn reload_patch(workload: &Workload, marks: &[Mark], now: Timestamp) -> (Value, PatchKind) {
    if workload.id.kind != WorkloadKind::ROLLOUT {
        return (patch_body(workload, marks), PatchKind::StrategicMerge);
    }
    let mut body = json!({ "metadata": { "resourceVersion": workload.resource_version } });
    if workload.annotations.get(ROLLOUT_STRATEGY).map(String::as_str) == Some("restart") {
        body["spec"]["restartAt"] = json!(rfc3339(now));
        return (body, PatchKind::Merge);
    }
    let template = marked_template(workload, marks);
    if let Some(source) = template
        .pointer(&format!(
            "/metadata/annotations/{}",
            names::LAST_RELOADED_FROM.replace('/', "~1")
        ))
        .filter(|_| marks.iter().any(|m| matches!(m, Mark::Annotation(_))))
    {
        body["spec"]["template"]["metadata"]["annotations"][names::LAST_RELOADED_FROM] = source.clone();
    }
    if marks.iter().any(|m| !matches!(m, Mark::Annotation(_))) {
        // A merge patch replaces a list whole.
        body["spec"]["template"]["spec"]["containers"] = template
            .pointer("/spec/containers")
            .cloned()
            .unwrap_or_else(|| json!([]));
    }
    (body, PatchKind::Merge)
}

/// The Job Reloader creates for a CronJob whose config changed, instead of patching it: the CronJob's
/// `jobTemplate` with the marks applied to its pod template, named after the CronJob, owned by it, and
/// marked as started by hand (`cronjob.kubernetes.io/instantiate: manual`), as `kubectl create job
/// --from=cronjob/…` does. `cron_job` is the CronJob object.
pub fn job_from_cron_job(cron_job: &Value, workload: &Workload, marks: &[Mark], name: &str) -> Value {
    let job_template = cron_job.pointer("/spec/jobTemplate").cloned().unwrap_or_default();
    let mut spec = job_template.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["template"] = marked_template(workload, marks);
    let mut annotations = json!({ CRONJOB_INSTANTIATE: "manual" });
    if let Some(Value::Object(more)) = job_template.pointer("/metadata/annotations") {
        for (k, v) in more {
            annotations[k] = v.clone();
        }
    }
    let labels = job_template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": workload.id.namespace,
            "annotations": annotations,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "CronJob", "name": workload.id.name, "uid": workload.uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    })
}

/// The labels the Job controller puts on a Job's pod template (and its selector) for the Job it made
/// them for: a Job created again with them would select the old Job's pods, so they go, as in
/// Reloader's `ReCreateJobFromjob`.
const JOB_CONTROLLER_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// The Job to create in place of `job` (the object as read) for a reload, as Reloader's
/// `ReCreateJobFromjob` (`internal/pkg/callbacks/rolling_upgrade.go`) makes it: the same object with the
/// marks applied to its pod template, without what the apiserver and the Job controller set
/// (`uid`, `resourceVersion`, `creationTimestamp`, `generation`, `managedFields`, `status`, the
/// controller's labels on the template) and without its selector, which the apiserver generates
/// again. One difference: a Job with `spec.manualSelector: true` keeps its selector and labels, which
/// its creator chose (Reloader drops them, and the create is refused after the delete).
pub fn job_recreated(job: &Value, marks: &[Mark]) -> Value {
    let mut new = job.clone();
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    if let Some(object) = new.as_object_mut() {
        object.remove("status");
    }
    let manual = job.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true);
    if !manual {
        if let Some(labels) = new
            .pointer_mut("/spec/template/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            labels.retain(|key, _| !JOB_CONTROLLER_LABELS.contains(&key.as_str()));
        }
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("selector");
        }
    }
    // The marks go into the object as read, not through typed structs, so that no field newer than
    // wave's API types is lost.
    if let Some(template) = new.pointer_mut("/spec/template") {
        apply_marks(template, marks);
    }
    new
}

/// `workload`'s pod template, as JSON, with `marks` applied.
fn marked_template(workload: &Workload, marks: &[Mark]) -> Value {
    let mut template = serde_json::to_value(workload.template.typed()).unwrap_or_default();
    apply_marks(&mut template, marks);
    template
}

/// Applies `marks` to a pod template (JSON) as Reloader does in memory before it updates an object
/// whole: an env var set (the whole entry, so no `valueFrom` of an old one is left beside the value)
/// or appended to its container, removed, or the `last-reloaded-from` annotation set.
fn apply_marks(template: &mut Value, marks: &[Mark]) {
    fn env_of<'a>(template: &'a mut Value, container: &str) -> Option<&'a mut Vec<Value>> {
        let c = template
            .pointer_mut("/spec/containers")?
            .as_array_mut()?
            .iter_mut()
            .find(|c| c.get("name").and_then(Value::as_str) == Some(container))?
            .as_object_mut()?;
        c.entry("env").or_insert_with(|| json!([])).as_array_mut()
    }
    for mark in marks {
        match mark {
            Mark::EnvVar {
                container,
                name,
                value,
            } => {
                if let Some(env) = env_of(template, container) {
                    match env
                        .iter_mut()
                        .find(|e| e.get("name").and_then(Value::as_str) == Some(name.as_str()))
                    {
                        Some(e) => *e = json!({"name": name, "value": value}),
                        None => env.push(json!({"name": name, "value": value})),
                    }
                }
            }
            Mark::RemoveEnvVar { container, name } => {
                if let Some(env) = env_of(template, container) {
                    env.retain(|e| e.get("name").and_then(Value::as_str) != Some(name.as_str()));
                }
            }
            Mark::Annotation(source) => {
                let value = serde_json::to_string(source).unwrap_or_default();
                let annotations = template
                    .as_object_mut()
                    .map(|t| t.entry("metadata").or_insert_with(|| json!({})))
                    .and_then(Value::as_object_mut)
                    .map(|m| m.entry("annotations").or_insert_with(|| json!({})))
                    .and_then(Value::as_object_mut);
                if let Some(annotations) = annotations {
                    annotations.insert(names::LAST_RELOADED_FROM.to_string(), json!(value));
                }
            }
        }
    }
}

/// The annotation of a Job started by hand from a CronJob.
pub const CRONJOB_INSTANTIATE: &str = "cronjob.kubernetes.io/instantiate";

/// The longest name wave gives a Job: the Job controller copies the name into a label of the Job's
/// pods (`batch.kubernetes.io/job-name`), and a label value holds at most 63 characters.
pub const JOB_NAME_MAX: usize = 63;

/// Hex digits of the version hash that ends a Job's name (40 bits).
const JOB_NAME_HASH: usize = 10;

/// The name of the Job that a reload of CronJob `cron_job` starts for the config `decision` reloads:
/// `<the CronJob's name>-<10 hex digits>`, the name cut (and stripped of a trailing `-` or `.`) so that
/// the whole fits [`JOB_NAME_MAX`]. The digits hash the CronJob's uid and, for each object whose
/// change the reload carries, its SHA-1 and the version its watch reported (`versions`: uid and
/// resourceVersion; none once deleted).
///
/// Reloader names the Job with `generateName`, so a create that timed out or failed with a 5xx after
/// it landed, retried, starts a second Job. With this name the retry is a 409 and nothing more, while a
/// later change, even back to earlier data (a new resourceVersion), names a new Job. A metadata-only
/// write to the object between a landed create and its retry also changes the name; that costs the
/// second Job Reloader would have started anyway. CronJob names have at most 52 characters, so the
/// cut is a guard, and the 10 digits never look like the CronJob controller's own `<name>-<minutes>`.
pub fn job_name(
    cron_job: &Workload,
    decision: &Decision,
    versions: &BTreeMap<ConfigKey, ObjectVersion>,
) -> String {
    let changed: BTreeSet<&ConfigKey> = decision.changed.iter().collect();
    let objects: Vec<Value> = changed
        .into_iter()
        .map(|key| {
            let version = versions.get(key);
            json!([
                key.kind.kind(),
                key.namespace,
                key.name,
                decision.observed.get(key),
                version.map(|v| &v.uid),
                version.map(|v| &v.resource_version),
            ])
        })
        .collect();
    // JSON arrays: no two inputs serialise alike.
    let input = json!([cron_job.uid, objects]).to_string();
    let digest = sha2::Sha256::digest(input.as_bytes());
    let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let keep = JOB_NAME_MAX - 1 - JOB_NAME_HASH;
    let mut prefix: &str = &cron_job.id.name;
    if prefix.len() > keep {
        // Names are ASCII; a non-ASCII one would be refused by the apiserver anyway.
        let mut end = keep;
        while !prefix.is_char_boundary(end) {
            end -= 1;
        }
        prefix = &prefix[..end];
    }
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{}", &hash[..JOB_NAME_HASH])
}

/// The strategic merge patch writing `marks` (what Reloader sends), guarded by the observed
/// `resourceVersion` like every wave write. Env vars merge by name into their container's list (appended
/// when new), so the template ends up exactly as Reloader would leave it.
pub fn patch_body(workload: &Workload, marks: &[Mark]) -> Value {
    let mut template = json!({});
    let mut containers: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for mark in marks {
        match mark {
            Mark::EnvVar {
                container,
                name,
                value,
            } => containers
                .entry(container)
                .or_default()
                .push(json!({ "name": name, "value": value })),
            // A strategic merge patch deletes a list item by its merge key.
            Mark::RemoveEnvVar { container, name } => containers
                .entry(container)
                .or_default()
                .push(json!({ "name": name, "$patch": "delete" })),
            Mark::Annotation(source) => {
                // Go's encoding/json writes the struct's fields in order, compactly, as serde_json does.
                let value = serde_json::to_string(source).unwrap_or_default();
                template["metadata"]["annotations"][names::LAST_RELOADED_FROM] = json!(value);
            }
        }
    }
    if !containers.is_empty() {
        template["spec"]["containers"] = containers
            .into_iter()
            .map(|(name, env)| json!({ "name": name, "env": env }))
            .collect();
    }
    let mut body = json!({ "metadata": { "resourceVersion": workload.resource_version } });
    let mut at = &mut body;
    for segment in workload.id.kind.info().template.split('/').skip(1) {
        at = &mut at[segment];
    }
    *at = template;
    body
}

#[cfg(test)]
#[path = "patch_tests.rs"]
mod tests;
