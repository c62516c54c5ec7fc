//! The one module that reads and writes objects on the apiserver, shared by the controller, the webhook
//! and the CLI commands.
//!
//! ```text
//! WorkloadKind (data: group, version, plural, template pointer) ─► ApiResource ─► Api<DynamicObject>
//!     get_workload / list_workloads ─► Workload (wave_core)      patch_workload ─► merge patch as `wave`
//!     get_object (status and selector, for held pods)
//! ConfigKey ─► fetch_content ─► Content (wave_core) · namespace (or all) ─► list_config_maps (pages)
//! SecretName ─► read_hash_key ─► HashKey (wave_core; `--hash-key-secret`)
//! history: list_revisions ─► Revision · get_snapshot ─► Snapshot objects
//!          create_or_own ─► the snapshot exists, owned by the revision · current_config / patch_config
//! ```
//!
//! Workloads are read as dynamic objects and turned into the core's [`Workload`] view at once, so no code
//! here or above it matches on the workload kind: a new kind is data in `wave_core::kind`.

use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    ApiResource, DynamicObject, GetParams, ListParams, ObjectMeta, PartialObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client};
use wave_core::hash::{Content, HashKey};
use wave_core::history::{CurrentObject, Revision, Snapshot};
use wave_core::kind::ResourceSpec;
use wave_core::names;
use wave_core::refs::{ConfigKey, ConfigKind};
use wave_core::tracker::ObjectVersion;
use wave_core::workload::{Workload, WorkloadKind, WorkloadRef};

use crate::config::SecretName;

/// The API coordinates of a workload kind.
pub fn api_resource(kind: WorkloadKind) -> ApiResource {
    let info = kind.info();
    ApiResource {
        group: info.group.into(),
        version: info.version.into(),
        api_version: info.api_version.into(),
        kind: info.kind.into(),
        plural: info.plural.into(),
    }
}

/// The API of `kind` in `namespace`, or in every namespace.
pub fn workload_api(client: &Client, kind: WorkloadKind, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = api_resource(kind);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The Secrets Store CSI driver's SecretProviderClassPodStatuses (`--enable-csi-integration`).
pub fn provider_status_api(client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
    use wave_core::names::csi;
    csi_api(client, namespace, csi::POD_STATUS_KIND, csi::POD_STATUS_PLURAL)
}

/// The metadata of the Secrets Store CSI driver's SecretProviderClasses (never their spec).
pub fn provider_class_api(client: &Client, namespace: Option<&str>) -> Api<PartialObjectMeta<DynamicObject>> {
    use wave_core::names::csi;
    csi_api(client, namespace, csi::CLASS_KIND, csi::CLASS_PLURAL)
}

fn csi_api<K>(client: &Client, namespace: Option<&str>, kind: &str, plural: &str) -> Api<K>
where
    K: kube::Resource<DynamicType = kube::core::ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    use wave_core::names::csi;
    let gvk = kube::core::GroupVersionKind::gvk(csi::GROUP, csi::VERSION, kind);
    let resource = kube::core::ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Whether the apiserver serves SecretProviderClassPodStatuses (the CSI driver's CRDs are installed):
/// `Err` with what went wrong when discovery itself failed.
pub async fn serves_provider_statuses(client: &Client) -> Result<bool, String> {
    use wave_core::names::csi;
    let gv = kube::core::GroupVersion::gv(csi::GROUP, csi::VERSION);
    match kube::discovery::pinned_group(client, &gv).await {
        Ok(group) => Ok(group
            .versioned_resources(csi::VERSION)
            .iter()
            .any(|(r, _)| r.plural == csi::POD_STATUS_PLURAL)),
        Err(e) if status_code(&e) == Some(404) => Ok(false),
        Err(e) => Err(format!(
            "discovering {}/{}: {}",
            csi::GROUP,
            csi::VERSION,
            describe(&e)
        )),
    }
}

/// Why wave cannot list SecretProviderClassPodStatuses or SecretProviderClasses where it watches
/// (`None`: it can), read with LISTs of one object's metadata per namespace (or of the cluster).
pub async fn provider_statuses_refused(
    client: &Client,
    namespaces: Option<&std::collections::BTreeSet<String>>,
) -> Option<String> {
    let scopes: Vec<Option<&str>> = match namespaces {
        Some(list) => list.iter().map(|ns| Some(ns.as_str())).collect(),
        None => vec![None],
    };
    let one = ListParams::default().limit(1);
    for ns in scopes {
        let statuses = provider_status_api(client, ns).list_metadata(&one).await.err();
        let classes = provider_class_api(client, ns).list(&one).await.err();
        let failed = [
            (wave_core::names::csi::POD_STATUS_PLURAL, statuses),
            (wave_core::names::csi::CLASS_PLURAL, classes),
        ];
        if let Some((plural, Some(e))) = failed.into_iter().find(|(_, e)| e.is_some()) {
            let scope = ns.map_or("the cluster".to_string(), |ns| format!("namespace {ns}"));
            return Some(format!("cannot list {plural} in {scope}: {}", describe(&e)));
        }
    }
    None
}

/// The kind of a `--workload-resource`, from the apiserver's discovery of its group and version.
pub async fn resolve_kind(client: &Client, resource: &ResourceSpec) -> Result<WorkloadKind, String> {
    let gv = kube::core::GroupVersion::gv(&resource.group, &resource.version);
    let group = kube::discovery::pinned_group(client, &gv).await.map_err(|e| {
        if status_code(&e) == Some(404) {
            format!(
                "the apiserver serves no API {}: is its CustomResourceDefinition installed?",
                resource.api_version()
            )
        } else {
            format!("discovering {}: {}", resource.api_version(), describe(&e))
        }
    })?;
    let found = group
        .versioned_resources(&resource.version)
        .into_iter()
        .find(|(r, _)| r.plural == resource.plural);
    match found {
        None => Err(format!(
            "the apiserver serves no resource {:?} in {}: is its CustomResourceDefinition installed?",
            resource.plural,
            resource.api_version()
        )),
        Some((_, caps)) if caps.scope != kube::discovery::Scope::Namespaced => Err(format!(
            "{} is cluster-scoped; wave manages namespaced workloads",
            resource.plural
        )),
        Some((r, _)) => Ok(WorkloadKind::custom(resource, &r.kind)),
    }
}

/// What [`create_job`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStart {
    /// The Job was created.
    Created,
    /// A Job of that name exists already: an earlier create of the same reload landed (its name is
    /// derived from the CronJob and the config version, `wave_core::reloader::job_name`).
    Existed,
}

/// Creates a named Job: the Job a CronJob's reload starts, or a Job created again (both opted in
/// through Reloader's annotations). A 409 AlreadyExists is [`JobStart::Existed`], not an error: it is
/// what a retry of a create that landed gets. The Job is sent as the JSON it is (no typed round trip,
/// which would drop fields newer than wave's API types). With `dry_run`, the apiserver runs admission
/// and validation and stores nothing.
pub async fn create_job(
    client: &Client,
    namespace: &str,
    job: &serde_json::Value,
    dry_run: bool,
) -> Result<JobStart, kube::Error> {
    let job: DynamicObject = serde_json::from_value(job.clone()).map_err(kube::Error::SerdeError)?;
    let params = PostParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        dry_run,
    };
    match workload_api(client, WorkloadKind::JOB, Some(namespace))
        .create(&params, &job)
        .await
    {
        Ok(_) => Ok(JobStart::Created),
        Err(kube::Error::Api(status)) if status.code == 409 && status.reason == "AlreadyExists" => {
            Ok(JobStart::Existed)
        }
        Err(e) => Err(e),
    }
}

/// How deleting a Job to create it again ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobDelete {
    /// Deleted (its pods go in the background).
    Deleted,
    /// It was gone already.
    Gone,
    /// It is no longer the object read (another uid or resourceVersion): nothing was deleted.
    Changed,
}

/// Deletes Job `name` only if it is still the object `uid` at `resource_version` (the preconditions
/// make the apiserver check), with its pods deleted in the background, as Reloader deletes it: a Job
/// someone edited, re-created or opted out meanwhile is left alone.
pub async fn delete_job(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    resource_version: &str,
) -> Result<JobDelete, kube::Error> {
    let params = kube::api::DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version: Some(resource_version.to_string()),
        }),
        ..Default::default()
    };
    match Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), namespace)
        .delete(name, &params)
        .await
    {
        Ok(_) => Ok(JobDelete::Deleted),
        Err(e) if is_not_found(&e) => Ok(JobDelete::Gone),
        Err(e) if status_code(&e) == Some(409) => Ok(JobDelete::Changed),
        Err(e) => Err(e),
    }
}

/// A workload's `spec.selector.matchLabels` as a label selector (its `matchExpressions` are left out:
/// the caller keeps only the pods the workload controls).
pub fn match_labels(object: &DynamicObject) -> String {
    object
        .data
        .pointer("/spec/selector/matchLabels")
        .and_then(serde_json::Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Merge-patches the pod `namespace/name` as field manager `wave` (an in-place restart's request).
pub async fn patch_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    body: &serde_json::Value,
) -> Result<(), kube::Error> {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace)
        .patch(name, &as_wave(), &Patch::Merge(body))
        .await
        .map(drop)
}

/// Patch parameters naming wave as the field manager (every write wave makes).
fn as_wave() -> PatchParams {
    PatchParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The core's view of a dynamic object of `kind`.
pub fn to_workload(kind: WorkloadKind, object: DynamicObject) -> Result<Workload, serde_json::Error> {
    Workload::from_object(kind, object.metadata, &object.data)
}

/// Reads one workload; `None` if it does not exist.
pub async fn get_workload(client: &Client, id: &WorkloadRef) -> Result<Option<Workload>, kube::Error> {
    match get_object(client, id).await? {
        Some(object) => to_workload(id.kind, object)
            .map(Some)
            .map_err(kube::Error::SerdeError),
        None => Ok(None),
    }
}

/// Reads one workload as it is stored, status included; `None` if it does not exist.
pub async fn get_object(client: &Client, id: &WorkloadRef) -> Result<Option<DynamicObject>, kube::Error> {
    workload_api(client, id.kind, Some(&id.namespace))
        .get_opt(&id.name)
        .await
}

/// Every workload of `kind` in the cluster.
pub async fn list_workloads(client: &Client, kind: WorkloadKind) -> Result<Vec<Workload>, kube::Error> {
    let list = workload_api(client, kind, None)
        .list(&ListParams::default())
        .await?;
    list.items
        .into_iter()
        .map(|o| to_workload(kind, o).map_err(kube::Error::SerdeError))
        .collect()
}

/// A JSON merge patch of one workload, as field manager `wave`.
pub async fn patch_workload(
    client: &Client,
    id: &WorkloadRef,
    body: &serde_json::Value,
) -> Result<(), kube::Error> {
    patch_workload_as(client, id, body, PatchStyle::Merge).await
}

/// How a patch of a workload is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchStyle {
    /// JSON merge patch: wave's own writes (difference `merge-patch` in `docs/behaviour.md`).
    Merge,
    /// Strategic merge patch: what Reloader sends, so env vars merge into a container by name.
    Strategic,
}

/// Patches a workload with `body` applied as `style`, as field manager `wave`.
pub async fn patch_workload_as(
    client: &Client,
    id: &WorkloadRef,
    body: &serde_json::Value,
    style: PatchStyle,
) -> Result<(), kube::Error> {
    let params = as_wave();
    let patch = match style {
        PatchStyle::Merge => Patch::Merge(body),
        PatchStyle::Strategic => Patch::Strategic(body),
    };
    workload_api(client, id.kind, Some(&id.namespace))
        .patch(&id.name, &params, &patch)
        .await
        .map(drop)
}

/// Reads one config object; `None` if it does not exist. Without `at`, a consistent read (from etcd).
/// With `at`, a resourceVersion its watch has already delivered, the apiserver may answer from its watch
/// cache with any version at least as new (`NotOlderThan`), which spares etcd a quorum read per change:
/// <https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>.
pub async fn fetch_content(
    client: &Client,
    key: &ConfigKey,
    at: Option<&str>,
) -> Result<Option<(ObjectMeta, Content)>, kube::Error> {
    let params = match at {
        Some(version) if !version.is_empty() => GetParams::at(version),
        _ => GetParams::default(),
    };
    Ok(match key.kind {
        ConfigKind::ConfigMap => get_opt::<ConfigMap>(client, key, &params).await?.map(|cm| {
            let content = Content::from_config_map(&cm);
            (cm.metadata, content)
        }),
        ConfigKind::Secret => get_opt::<Secret>(client, key, &params).await?.map(|secret| {
            let content = Content::from_secret(&secret);
            (secret.metadata, content)
        }),
        ConfigKind::SecretProviderClass => return Err(provider_class(key)),
    })
}

/// wave never reads a SecretProviderClass's spec nor writes one: what it follows of one is what its
/// pods' statuses report and its annotations (`wave_core::reloader`), which the tracker holds from the
/// watches. Asked anyway, these functions answer with this error, not a request.
fn provider_class(key: &ConfigKey) -> kube::Error {
    let message = format!("wave does not read or write SecretProviderClass {key} itself");
    kube::Error::Api(
        kube::core::Status::failure(&message, "BadRequest")
            .with_code(400)
            .boxed(),
    )
}

/// `Api::get_opt` with parameters: `None` on NotFound.
async fn get_opt<K>(client: &Client, key: &ConfigKey, params: &GetParams) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match Api::<K>::namespaced(client.clone(), &key.namespace)
        .get_with(&key.name, params)
        .await
    {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Objects per page of [`list_config_maps`]: a page, not the namespace, bounds what is held at once.
pub const LIST_PAGE: u32 = 100;

/// Every ConfigMap in `namespace` (`None`: in every namespace) with its content, page by page, handed to
/// `each` and dropped. There is no Secret counterpart: a LIST of Secrets returns the data of every
/// Secret in its scope, and wave reads only the Secrets a workload references, one GET each
/// (docs/behaviour.md, "Secrets nobody references are never read").
pub async fn list_config_maps(
    client: &Client,
    namespace: Option<&str>,
    mut each: impl FnMut(ObjectMeta, Content),
) -> Result<(), kube::Error> {
    let mut params = ListParams::default().limit(LIST_PAGE);
    loop {
        let page = scoped::<ConfigMap>(client, namespace).list(&params).await?;
        for cm in page.items {
            let content = Content::from_config_map(&cm);
            each(cm.metadata, content);
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// The API of `K` in `namespace`, or in every namespace.
pub(crate) fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The metadata of a config object (never its data); `None` if it does not exist.
pub async fn config_metadata(client: &Client, key: &ConfigKey) -> Result<Option<ObjectMeta>, kube::Error> {
    Ok(match key.kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
            .get_metadata_opt(&key.name)
            .await?
            .map(|m| m.metadata),
        ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
            .get_metadata_opt(&key.name)
            .await?
            .map(|m| m.metadata),
        ConfigKind::SecretProviderClass => return Err(provider_class(key)),
    })
}

/// A JSON merge patch of a config object's metadata, as field manager `wave` (the response is
/// metadata only, so no Secret data is read).
pub async fn patch_config_metadata(
    client: &Client,
    key: &ConfigKey,
    body: &serde_json::Value,
) -> Result<(), kube::Error> {
    let params = as_wave();
    let patch = Patch::Merge(body);
    match key.kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
            .patch_metadata(&key.name, &params, &patch)
            .await
            .map(drop),
        ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
            .patch_metadata(&key.name, &params, &patch)
            .await
            .map(drop),
        ConfigKind::SecretProviderClass => Err(provider_class(key)),
    }
}

/// The revisions (ReplicaSets, or ControllerRevisions) the workload with `uid` controls, listed with
/// `selector` (a label selector; empty lists the namespace).
pub async fn list_revisions(
    client: &Client,
    id: &WorkloadRef,
    uid: &str,
    selector: &str,
) -> Result<Vec<Revision>, kube::Error> {
    let params = ListParams::default().labels(selector);
    Ok(if id.kind == WorkloadKind::DEPLOYMENT {
        Api::<ReplicaSet>::namespaced(client.clone(), &id.namespace)
            .list(&params)
            .await?
            .items
            .iter()
            .filter_map(|rs| Revision::of_replica_set(rs, uid))
            .collect()
    } else {
        Api::<ControllerRevision>::namespaced(client.clone(), &id.namespace)
            .list(&params)
            .await?
            .items
            .iter()
            .filter_map(|cr| Revision::of_controller_revision(cr, uid))
            .collect()
    })
}

/// The snapshot objects of `id` at `hash`: its ConfigMap and, if there is one, its Secret; `None` when
/// there is no such snapshot.
pub async fn get_snapshot(
    client: &Client,
    id: &WorkloadRef,
    hash: &str,
) -> Result<Option<(ConfigMap, Option<Secret>)>, kube::Error> {
    let name = Snapshot::name(id, hash);
    let Some(cm) = Api::<ConfigMap>::namespaced(client.clone(), &id.namespace)
        .get_opt(&name)
        .await?
        .filter(|cm| wave_core::history::is_snapshot_of(&cm.metadata, id))
    else {
        return Ok(None);
    };
    let secret = Api::<Secret>::namespaced(client.clone(), &id.namespace)
        .get_opt(&name)
        .await?
        .filter(|s| wave_core::history::is_snapshot_of(&s.metadata, id));
    Ok(Some((cm, secret)))
}

/// What [`create_or_own`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// The snapshot was created.
    Created,
    /// It existed; the revision was added to its owners.
    Owned,
    /// It existed, already owned by the revision.
    Unchanged,
    /// An object of that name exists that is not this snapshot (someone else made it, or changed it):
    /// left alone, never adopted.
    NotOurs,
}

/// Creates a snapshot object, or, when it exists and is exactly this snapshot
/// (`wave_core::history::same_snapshot`), makes `owner` one of its owners (so that it lives as long as
/// any revision running its hash).
pub async fn create_or_own<K>(
    client: &Client,
    object: &K,
    owner: &OwnerReference,
) -> Result<Kept, kube::Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let meta = object.meta();
    let api = Api::<K>::namespaced(client.clone(), meta.namespace.as_deref().unwrap_or_default());
    let name = meta.name.clone().unwrap_or_default();
    let params = PostParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, object).await {
        Ok(_) => return Ok(Kept::Created),
        Err(e) if status_code(&e) == Some(409) => {}
        Err(e) => return Err(e),
    }
    let stored = api.get(&name).await?;
    let as_json = |o: &K| serde_json::to_value(o).unwrap_or_default();
    if !wave_core::history::same_snapshot(&as_json(&stored), &as_json(object)) {
        return Ok(Kept::NotOurs);
    }
    let stored = stored.meta().clone();
    let mut owners = stored.owner_references.unwrap_or_default();
    if owners.iter().any(|o| o.uid == owner.uid) {
        return Ok(Kept::Unchanged);
    }
    owners.push(owner.clone());
    let body = serde_json::json!({"metadata": {
        "resourceVersion": stored.resource_version,
        "ownerReferences": owners,
    }});
    let patch_params = as_wave();
    api.patch_metadata(&name, &patch_params, &Patch::Merge(&body))
        .await
        .map(|_| Kept::Owned)
}

/// A config object as a restore needs it (key placement, owner, immutability; the values are not kept);
/// `None` if it does not exist.
pub async fn current_config(client: &Client, key: &ConfigKey) -> Result<Option<CurrentObject>, kube::Error> {
    Ok(match key.kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
            .get_opt(&key.name)
            .await?
            .map(|cm| CurrentObject::of_config_map(&cm)),
        ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
            .get_opt(&key.name)
            .await?
            .map(|s| CurrentObject::of_secret(&s)),
        ConfigKind::SecretProviderClass => return Err(provider_class(key)),
    })
}

/// A JSON merge patch of a config object's data, as field manager `wave`: the version it wrote (only
/// the response's metadata is read; its data, which may be a Secret's, is dropped).
pub async fn patch_config(
    client: &Client,
    key: &ConfigKey,
    body: &serde_json::Value,
) -> Result<ObjectVersion, kube::Error> {
    let params = as_wave();
    let patch = Patch::Merge(body);
    match key.kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
            .patch(&key.name, &params, &patch)
            .await
            .map(|cm| ObjectVersion::of(&cm.metadata)),
        ConfigKind::Secret => Api::<Secret>::namespaced(client.clone(), &key.namespace)
            .patch(&key.name, &params, &patch)
            .await
            .map(|secret| ObjectVersion::of(&secret.metadata)),
        ConfigKind::SecretProviderClass => Err(provider_class(key)),
    }
}

/// The metadata of a workload as stored; `None` if it does not exist.
pub async fn workload_metadata(client: &Client, id: &WorkloadRef) -> Result<Option<ObjectMeta>, kube::Error> {
    Ok(workload_api(client, id.kind, Some(&id.namespace))
        .get_metadata_opt(&id.name)
        .await?
        .map(|m| m.metadata))
}

/// The Events about a workload that wave reported with one of `reasons`, oldest first.
pub async fn wave_events(
    client: &Client,
    id: &WorkloadRef,
    reasons: &[&str],
) -> Result<Vec<k8s_openapi::api::events::v1::Event>, kube::Error> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &id.namespace);
    let mut events: Vec<_> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some(names::CONTROLLER_NAME))
        .filter(|e| e.reason.as_deref().is_some_and(|r| reasons.contains(&r)))
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.name.as_deref() == Some(id.name.as_str()) && r.kind.as_deref() == Some(id.kind.as_str())
            })
        })
        .collect();
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(events)
}

/// Why the key of the keyed hash could not be read. Never carries the key.
#[derive(Debug, thiserror::Error)]
pub enum HashKeyError {
    /// The Secret could not be read.
    #[error("reading the hash key Secret {secret} failed")]
    Read {
        /// `namespace/name`.
        secret: SecretName,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The Secret does not exist.
    #[error("the hash key Secret {secret} does not exist")]
    NotFound {
        /// `namespace/name`.
        secret: SecretName,
    },
    /// The Secret has no non-empty `hash-key`.
    #[error("the hash key Secret {secret} has no non-empty data key {key:?}")]
    NoKey {
        /// `namespace/name`.
        secret: SecretName,
        /// The data key looked for.
        key: &'static str,
    },
}

/// Reads the key of the keyed config hash from `secret` (`--hash-key-secret`).
pub async fn read_hash_key(client: &Client, secret: &SecretName) -> Result<HashKey, HashKeyError> {
    let found = Api::<Secret>::namespaced(client.clone(), &secret.namespace)
        .get_opt(&secret.name)
        .await
        .map_err(|e| HashKeyError::Read {
            secret: secret.clone(),
            source: Box::new(e),
        })?
        .ok_or_else(|| HashKeyError::NotFound {
            secret: secret.clone(),
        })?;
    found
        .data
        .as_ref()
        .and_then(|d| d.get(names::HASH_KEY))
        .and_then(|v| HashKey::new(&v.0))
        .ok_or_else(|| HashKeyError::NoKey {
            secret: secret.clone(),
            key: names::HASH_KEY,
        })
}

/// The HTTP status of an API error, if the server answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether the error is the apiserver's 409 Conflict.
pub fn is_conflict(e: &kube::Error) -> bool {
    status_code(e) == Some(409)
}

/// Whether the error is the apiserver's 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    status_code(e) == Some(404)
}

/// A short human description of an API error for logs, Events and `/readyz`: `forbidden: <message>`.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!("{}: {}", status.reason.to_lowercase(), status.message),
        other => other.to_string(),
    }
}

/// `error: cause: cause` in one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_kind_maps_to_its_api_coordinates() {
        let r = api_resource(WorkloadKind::STATEFUL_SET);
        assert_eq!(
            (
                r.group.as_str(),
                r.version.as_str(),
                r.api_version.as_str(),
                r.kind.as_str(),
                r.plural.as_str()
            ),
            ("apps", "v1", "apps/v1", "StatefulSet", "statefulsets")
        );
    }

    #[test]
    fn a_dynamic_object_becomes_the_core_view() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "ops", "resourceVersion": "7"},
            "spec": {"template": {"metadata": {"annotations": {(names::CONFIG_HASH): "h"}}}},
            "status": {"numberReady": 1}
        }))
        .unwrap();
        let w = to_workload(WorkloadKind::DAEMON_SET, object).unwrap();
        assert_eq!(w.id, WorkloadRef::new(WorkloadKind::DAEMON_SET, "ops", "agent"));
        assert_eq!((w.resource_version.as_str(), w.current_hash()), ("7", Some("h")));
    }

    #[test]
    fn an_error_chain_reads_as_one_line() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
