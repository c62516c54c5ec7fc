//! Whether Stakater Reloader itself runs beside wave (both would act on the same change: two rollouts,
//! two Jobs), known by its image or its chart's env var in wave's view of the workloads alone
//! (`docs/migrating-from-reloader.md`, "Stop Reloader first").

use crate::kind::WorkloadKind;
use crate::names::reloader as names;
use crate::workload::{Workload, WorkloadRef};

/// Whether `workload` runs Stakater Reloader: a Deployment scaled above zero whose pod template has a
/// container with Reloader's image (`stakater/reloader`, from any registry or mirror, any tag or
/// digest) or the env var `RELOADER_DEPLOYMENT_NAME` that Reloader's chart and manifests set (v1.4.21,
/// `deployments/kubernetes/chart/reloader/templates/deployment.yaml` and
/// `deployments/kubernetes/manifests/deployment.yaml` of <https://github.com/stakater/Reloader>).
///
/// Neither its name nor its labels say it reliably (the chart's `fullnameOverride`, `nameOverride`
/// and the plain manifests' bare `app` label), and its lease exists only with `--enable-ha`; the pod
/// template is already in wave's view of every workload, so this costs no request and no right.
pub fn runs_reloader(workload: &Workload) -> bool {
    if workload.id.kind != WorkloadKind::DEPLOYMENT || workload.progress.spec_replicas == Some(0) {
        return false;
    }
    let template = &workload.template;
    if !template.mentions(names::IMAGE) && !template.mentions(names::DEPLOYMENT_NAME_ENV) {
        return false;
    }
    let spec = template.typed().spec.unwrap_or_default();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.image.as_deref().is_some_and(is_reloader_image)
                || c.env
                    .iter()
                    .flatten()
                    .any(|e| e.name == names::DEPLOYMENT_NAME_ENV)
        })
}

/// Whether image reference `image` names Reloader's repository (`names::IMAGE`).
fn is_reloader_image(image: &str) -> bool {
    let repository = image.split('@').next().unwrap_or_default();
    // A tag follows the last `:` after the last `/` (an earlier `:` is a registry's port).
    let repository = match repository.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => repository,
    };
    repository == names::IMAGE
        || repository
            .strip_suffix(names::IMAGE)
            .is_some_and(|registry| registry.ends_with('/'))
}

/// The workloads among `workloads` that run Reloader ([`runs_reloader`]), sorted.
pub fn running_reloaders<'a>(workloads: impl IntoIterator<Item = &'a Workload>) -> Vec<WorkloadRef> {
    let mut found: Vec<WorkloadRef> = workloads
        .into_iter()
        .filter(|w| runs_reloader(w))
        .map(|w| w.id.clone())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
#[path = "running_tests.rs"]
mod tests;
