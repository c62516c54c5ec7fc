//! Which objects of the workload's namespace reload it ([`Target`]), and which container carries the
//! mark of each, as Reloader's `getContainerUsingResource` picks it.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::{Selection, SinceCreation};
use crate::refs::{ConfigKey, ConfigKind};
use crate::workload::Workload;

/// How wave has seen an object come and go (for `--reload-on-create` and `--reload-on-delete`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lifecycle {
    /// It exists, and was there when wave first listed, or wave does not track creations.
    #[default]
    Existing,
    /// It was created after wave's first list.
    Created,
    /// It was deleted after wave's first list.
    Deleted,
    /// A SecretProviderClass wave first learned of, after its first list, from a pod created then, and
    /// that has not rotated since: what a workload carries for it may predate a rotation that pod
    /// already mounts (a scale-up after wave restarted), so it is no starting point. Reloader ignores
    /// the creation of a pod's status, and reloads nothing for it either.
    Appeared,
}

fn env_references(container: &Container, kind: ConfigKind) -> impl Iterator<Item = &str> {
    let env = container.env.iter().flatten().filter_map(move |e| {
        let source = e.value_from.as_ref()?;
        match kind {
            ConfigKind::ConfigMap => source.config_map_key_ref.as_ref().map(|r| r.name.as_str()),
            ConfigKind::Secret => source.secret_key_ref.as_ref().map(|r| r.name.as_str()),
            // A CSI mount is a volume only.
            ConfigKind::SecretProviderClass => None,
        }
    });
    let env_from = container
        .env_from
        .iter()
        .flatten()
        .filter_map(move |e| match kind {
            ConfigKind::ConfigMap => e.config_map_ref.as_ref().map(|r| r.name.as_str()),
            ConfigKind::Secret => e.secret_ref.as_ref().map(|r| r.name.as_str()),
            ConfigKind::SecretProviderClass => None,
        });
    env.chain(env_from)
}

/// The container Reloader marks for object `name`: the first container mounting a volume of it; the
/// first container referencing it in its env; the first container, when only init containers use it;
/// the first container, when the workload named it (`auto` false); otherwise none (it is not used).
fn container_for(spec: &PodSpec, kind: ConfigKind, name: &str, auto: bool) -> Option<String> {
    let first = || spec.containers.first().map(|c| c.name.clone());
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let volume = spec.volumes.iter().flatten().find(|v| {
        let plain = match kind {
            ConfigKind::ConfigMap => v.config_map.as_ref().is_some_and(|c| c.name == name),
            ConfigKind::Secret => v
                .secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name)),
            ConfigKind::SecretProviderClass => v
                .csi
                .as_ref()
                .and_then(|c| {
                    c.volume_attributes
                        .as_ref()?
                        .get(crate::names::csi::VOLUME_ATTRIBUTE)
                })
                .is_some_and(|class| class == name),
        };
        plain
            || v.projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten())
                .any(|s| match kind {
                    ConfigKind::ConfigMap => s.config_map.as_ref().is_some_and(|c| c.name == name),
                    ConfigKind::Secret => s.secret.as_ref().is_some_and(|c| c.name == name),
                    ConfigKind::SecretProviderClass => false,
                })
    });
    if let Some(volume) = volume {
        let mounts = |c: &&Container| c.volume_mounts.iter().flatten().any(|m| m.name == volume.name);
        if let Some(c) = spec.containers.iter().find(mounts) {
            return Some(c.name.clone());
        }
        if init.iter().any(|c| mounts(&c)) {
            return first();
        }
    }
    let uses = |c: &&Container| env_references(c, kind).any(|n| n == name);
    if let Some(c) = spec.containers.iter().find(uses) {
        return Some(c.name.clone());
    }
    if init.iter().any(|c| uses(&c)) {
        return first();
    }
    if !auto {
        return first();
    }
    None
}

/// An object whose changes reload the workload, and the container that carries its mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The object.
    pub key: ConfigKey,
    /// The container whose env carries its SHA-1 (strategy `env-vars`), or that `containerRefs` names.
    pub container: String,
    /// Whether it was created or deleted while wave watched.
    pub lifecycle: Lifecycle,
    /// What it went through since the workload was created: [`SinceCreation::Unknown`] from
    /// [`targets`]; the reconcile sets it once it has read the data ([`super::since_creation`]).
    pub since_creation: SinceCreation,
}

/// An object that exists, or was deleted while wave watched, as the tracker knows it (its metadata only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The object.
    pub key: ConfigKey,
    /// It says (or, deleted, said) `reloader.stakater.com/match: "true"`.
    pub matched: bool,
    /// Whether it was created or deleted while wave watched.
    pub lifecycle: Lifecycle,
}

/// The objects among `candidates` (objects of the workload's namespace that exist) whose changes reload
/// the workload, sorted.
pub fn targets(workload: &Workload, selection: &Selection, candidates: &[Candidate]) -> Vec<Target> {
    let template = workload.template.typed();
    let Some(spec) = template.spec.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Target> = candidates
        .iter()
        .filter(|c| c.key.namespace == workload.id.namespace)
        .filter_map(|c| {
            let auto = selection.of(c.key.kind).reloads(&c.key.name, c.matched)?;
            let container = container_for(spec, c.key.kind, &c.key.name, auto)?;
            Some(Target {
                key: c.key.clone(),
                container,
                lifecycle: c.lifecycle,
                since_creation: SinceCreation::Unknown,
            })
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out.dedup();
    out
}

#[cfg(test)]
#[path = "targets_tests.rs"]
mod tests;
