//! Every well-known name wave reads or writes: annotation keys, the field manager, the lease name and
//! Event reasons. The annotation keys and Wave's Event reasons and messages are byte-identical to Wave
//! v0.11 (`docs/behaviour.md`, "Opting in" and "Events"), so a workload moves between the two with no change.

/// The prefix of every annotation wave reads or writes.
pub const PREFIX: &str = "wave.pusher.com/";
/// Workload opt-in. Active only when the value is exactly `"true"`.
pub const UPDATE_ON_CONFIG_CHANGE: &str = "wave.pusher.com/update-on-config-change";
/// Pod-template annotation holding the 64-hex-character SHA-256 config hash.
pub const CONFIG_HASH: &str = "wave.pusher.com/config-hash";
/// Comma-separated `name` or `namespace/name` of extra ConfigMaps (optional, all keys).
pub const EXTRA_CONFIGMAPS: &str = "wave.pusher.com/extra-configmaps";
/// Comma-separated `name` or `namespace/name` of extra Secrets (optional, all keys).
pub const EXTRA_SECRETS: &str = "wave.pusher.com/extra-secrets";
/// ConfigMap or Secret annotation: `"true"` makes its changes trigger nothing, and leaves it out of
/// every hash (it still satisfies a required reference). Not in Wave.
pub const IGNORE: &str = "wave.pusher.com/ignore";
/// Workload annotation: comma-separated `name` or `namespace/name`; only these ConfigMaps count (the
/// workload's other ConfigMap references are left out of its hash). Not in Wave.
pub const ONLY_CONFIGMAPS: &str = "wave.pusher.com/only-configmaps";
/// Workload annotation: the same for Secrets.
pub const ONLY_SECRETS: &str = "wave.pusher.com/only-secrets";
/// Workload annotation: the least time between two config-triggered rollouts of it (Go duration; `0`
/// turns coalescing off). Overrides `--min-rollout-interval`.
pub const MIN_ROLLOUT_INTERVAL: &str = "wave.pusher.com/min-rollout-interval";
/// Workload annotation: an integer; higher rolls first when rollouts are paced (default 0).
pub const ROLLOUT_PRIORITY: &str = "wave.pusher.com/rollout-priority";
/// Workload annotation: how long a StatefulSet or DaemonSet rollout may take before it counts as failed
/// (Go duration). Overrides `--rollout-deadline`.
pub const ROLLOUT_DEADLINE: &str = "wave.pusher.com/rollout-deadline";
/// Workload metadata annotation wave writes with each paced rollout: the hash, when, and the version of
/// each config object in it (JSON; `docs/behaviour.md`, "Pacing rollouts").
pub const ROLLOUT: &str = "wave.pusher.com/rollout";
/// Workload metadata annotation wave writes once a paced rollout it made failed: its hash, why, and the
/// config versions it delivered (JSON; `docs/behaviour.md`, "Halting a bad config"). A key of its own,
/// not part of [`ROLLOUT`]: `kubectl rollout undo` copies the old ReplicaSet's annotations back onto a
/// Deployment, which brings back an old marker, but not a key that ReplicaSet never carried.
pub const ROLLOUT_FAILED: &str = "wave.pusher.com/rollout-failed";
/// Workload annotation written by `wave resume`: the hash of a failed rollout whose halt is released.
pub const HALT_RELEASED: &str = "wave.pusher.com/halt-released";
/// Workload annotation wave writes when someone took the template back to an earlier config hash
/// (`kubectl rollout undo`): that hash, which wave then leaves in place (`docs/behaviour.md`, "Undo").
pub const PINNED_HASH: &str = "wave.pusher.com/pinned-hash";
/// Workload annotation written with [`PINNED_HASH`]: the config's hash at that moment; a config change
/// since ends the pin.
pub const PINNED_CONFIG: &str = "wave.pusher.com/pinned-config";
/// Workload annotation: `"true"` keeps a snapshot of the config behind each hash wave writes, owned by
/// the revision that runs it; `"false"` opts out of `--config-history` (`docs/history.md`).
pub const CONFIG_HISTORY: &str = "wave.pusher.com/config-history";
/// Workload annotation: what an undo does. [`UNDO_RESTORE_CONFIG`] restores the config from the
/// revision's snapshot; anything else (or nothing) pins the template (`docs/history.md`).
pub const UNDO: &str = "wave.pusher.com/undo";
/// The value of [`UNDO`] that restores config.
pub const UNDO_RESTORE_CONFIG: &str = "restore-config";
/// Label and annotation on a config snapshot: the workload (`deploy/web`; the label is the name alone,
/// shortened past 63 characters).
pub const SNAPSHOT_OF: &str = "wave.pusher.com/snapshot-of";
/// Label on a config snapshot: the workload's kind (`deploy`, `sts`, `ds`).
pub const SNAPSHOT_KIND: &str = "wave.pusher.com/snapshot-kind";
/// Label (first 63 characters) and annotation (whole) on a config snapshot: the config hash it holds.
pub const SNAPSHOT_HASH: &str = "wave.pusher.com/snapshot-hash";
/// The recommended label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The Deployment controller's revision number of a Deployment (metadata annotation).
pub const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";
/// The finalizer Wave ≤ v0.6 put on workloads (it also made their config owned by them); wave removes
/// both, as Wave v0.7+ does, the owner references only with `--legacy-wave-cleanup`
/// (`docs/migrating-from-wave.md`).
pub const LEGACY_FINALIZER: &str = "wave.pusher.com/finalizer";
/// Written by Wave's webhook when it gated scheduling; the value is the original `schedulerName`.
pub const SCHEDULING_DISABLED: &str = "wave.pusher.com/scheduling-disabled";
/// The fake scheduler name Wave's webhook uses to hold pods.
pub const INVALID_SCHEDULER: &str = "wave.pusher.com/invalid";
/// The scheduler a template uses when `schedulerName` is unset.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// The restart strategy of a workload: `rollout` (the default) or `in-place` (`inplace`).
pub const RESTART: &str = "wave.pusher.com/restart";
/// An in-place restart of a workload, on its metadata (`inplace::Record`).
pub const IN_PLACE: &str = "wave.pusher.com/in-place";
/// wave's request that a pod restart in place, on the pod (`inplace::Request`).
pub const RESTART_REQUEST: &str = "wave.pusher.com/restart-request";

/// The pod scheduling gate wave's webhook adds while required config is missing.
pub const SCHEDULING_GATE: &str = "wave.pusher.com/config";
/// Workload annotation: when wave's webhook gated it (RFC 3339), for `--max-gate-duration`.
pub const GATED_AT: &str = "wave.pusher.com/gated-at";

/// The data key of the `--hash-key-secret` Secret that holds the key of the keyed config hash.
pub const HASH_KEY: &str = "hash-key";
/// The data key of the `--webhook-token-secret-name` Secret that holds the webhook's path token.
pub const WEBHOOK_TOKEN: &str = "token";

/// Field manager of every write wave makes, so `managedFields` attribute the hash to wave.
pub const FIELD_MANAGER: &str = "wave";
/// Controller name reported on Events.
pub const CONTROLLER_NAME: &str = "wave";
/// Default name of the leader-election Lease (Wave's `--leader-election-id` default).
pub const DEFAULT_LEASE_NAME: &str = "wave";

/// The Secrets Store CSI driver's API (<https://github.com/kubernetes-sigs/secrets-store-csi-driver>,
/// `apis/v1`), read for Reloader's `--enable-csi-integration`.
pub mod csi {
    /// The API group.
    pub const GROUP: &str = "secrets-store.csi.x-k8s.io";
    /// The version wave reads (Reloader v1.4.21 reads `v1`).
    pub const VERSION: &str = "v1";
    /// Both, as in a manifest's `apiVersion`.
    pub const API_VERSION: &str = "secrets-store.csi.x-k8s.io/v1";
    /// The kind the driver writes one of per pod and SecretProviderClass: which object versions it
    /// mounted (`status.objects`), for which class (`status.secretProviderClassName`).
    pub const POD_STATUS_KIND: &str = "SecretProviderClassPodStatus";
    /// Its plural, as in RBAC.
    pub const POD_STATUS_PLURAL: &str = "secretproviderclasspodstatuses";
    /// The class a workload's `csi` volume names; wave reads only its metadata (its annotations).
    pub const CLASS_KIND: &str = "SecretProviderClass";
    /// Its plural, as in RBAC.
    pub const CLASS_PLURAL: &str = "secretproviderclasses";
    /// The attribute of a pod's `csi` volume that names its SecretProviderClass.
    pub const VOLUME_ATTRIBUTE: &str = "secretProviderClass";
    /// The entry Reloader adds to the objects' `id=version` entries before hashing them.
    pub const CLASS_NAME_ENTRY: &str = "SecretProviderClassName";
}

/// Event reasons. Wave's are kept as they are; `ConfigMissing` and `WriteFailed` are ours (Warnings).
/// Stakater Reloader's annotations and marks, understood natively when `--reloader-compat` is on (off
/// by default), with the defaults of Reloader v1.4.21's flags (`docs/migrating-from-reloader.md`).
pub mod reloader {
    /// On a workload: reload on a change to any ConfigMap or Secret it references.
    pub const AUTO: &str = "reloader.stakater.com/auto";
    /// On a workload: reload on a change to any ConfigMap it references.
    pub const CONFIGMAP_AUTO: &str = "configmap.reloader.stakater.com/auto";
    /// On a workload: reload on a change to any Secret it references.
    pub const SECRET_AUTO: &str = "secret.reloader.stakater.com/auto";
    /// On a workload: the ConfigMaps (comma-separated names, each an anchored regular expression) whose
    /// changes reload it, referenced or not.
    pub const CONFIGMAP_RELOAD: &str = "configmap.reloader.stakater.com/reload";
    /// On a workload: the same for Secrets.
    pub const SECRET_RELOAD: &str = "secret.reloader.stakater.com/reload";
    /// On a workload: ConfigMaps never to reload it for (comma-separated names).
    pub const CONFIGMAP_EXCLUDE: &str = "configmaps.exclude.reloader.stakater.com/reload";
    /// On a workload: Secrets never to reload it for (comma-separated names).
    pub const SECRET_EXCLUDE: &str = "secrets.exclude.reloader.stakater.com/reload";
    /// On a workload (`--enable-csi-integration`): reload when a SecretProviderClass it mounts through
    /// the Secrets Store CSI driver is rotated.
    pub const SECRET_PROVIDER_CLASS_AUTO: &str = "secretproviderclass.reloader.stakater.com/auto";
    /// On a workload: the SecretProviderClasses (names, as for [`CONFIGMAP_RELOAD`]) whose rotations
    /// reload it.
    pub const SECRET_PROVIDER_CLASS_RELOAD: &str = "secretproviderclass.reloader.stakater.com/reload";
    /// On a workload: SecretProviderClasses never to reload it for (comma-separated names).
    pub const SECRET_PROVIDER_CLASS_EXCLUDE: &str =
        "secretproviderclasses.exclude.reloader.stakater.com/reload";
    /// On a workload: reload on a change to a referenced object marked with [`MATCH`].
    pub const SEARCH: &str = "reloader.stakater.com/search";
    /// On a ConfigMap or Secret: found by workloads that say [`SEARCH`].
    pub const MATCH: &str = "reloader.stakater.com/match";
    /// On a ConfigMap or Secret: its changes reload nothing.
    pub const IGNORE: &str = "reloader.stakater.com/ignore";
    /// On a pod template (strategy `annotations`): the object behind the last reload, as JSON.
    pub const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";
    /// The prefix of the env var that carries an object's SHA-1 (strategy `env-vars`).
    pub const ENV_PREFIX: &str = "STAKATER_";
    /// On a Deployment: after a reload, pause it for this long (a Go duration), so that further changes
    /// within the period roll out once, when it resumes.
    pub const PAUSE_PERIOD: &str = "deployment.reloader.stakater.com/pause-period";
    /// On a Deployment: when the reload paused it (RFC 3339), written with `spec.paused: true`.
    pub const PAUSED_AT: &str = "deployment.reloader.stakater.com/paused-at";
    /// The Event reason Reloader gives a reload, kept so that alerts on it keep working.
    pub const RELOADED: &str = "Reloaded";
    /// The Event reason of resuming a Deployment a reload paused.
    pub const RESUMED: &str = "Resumed";
    /// The image repository Stakater publishes Reloader under (`ghcr.io/stakater/reloader`, and
    /// `stakater/reloader` on Docker Hub); a mirror keeps it as the path's end.
    pub const IMAGE: &str = "stakater/reloader";
    /// The env var Reloader's chart and manifests set on its container (v1.4.21,
    /// `deployments/kubernetes/chart/reloader/templates/deployment.yaml`), naming its own Deployment.
    pub const DEPLOYMENT_NAME_ENV: &str = "RELOADER_DEPLOYMENT_NAME";
}

pub mod reason {
    /// Normal: the hash on the pod template was updated.
    pub const CONFIG_CHANGED: &str = "ConfigChanged";
    /// Warning (Normal in Wave): the webhook held the pods because required config is missing.
    pub const SCHEDULING_DISABLED: &str = "SchedulingDisabled";
    /// Normal: a Wave-gated workload's scheduler was restored, or wave's gate released.
    pub const SCHEDULING_ENABLED: &str = "SchedulingEnabled";
    /// Warning: required config is missing, so nothing was written.
    pub const CONFIG_MISSING: &str = "ConfigMissing";
    /// Warning: `extra-*` names config in another namespace, which `--cross-namespace-references=deny`
    /// leaves out of the hash, unread.
    pub const CROSS_NAMESPACE_REFERENCE_DENIED: &str = "CrossNamespaceReferenceDenied";
    /// Warning: the write of the hash failed.
    pub const WRITE_FAILED: &str = "WriteFailed";
    /// Normal: pods that wave's released gate held were deleted, for their controller to recreate.
    pub const HELD_PODS_DELETED: &str = "HeldPodsDeleted";
    /// Warning: the scheduling gate was held longer than `--max-gate-duration` and was released.
    pub const GATE_TIMED_OUT: &str = "GateTimedOut";
    /// Warning, on a config object and on each workload it holds back: it changes so often that its
    /// changes roll nothing until it is quiet.
    pub const CONFIG_FLAPPING: &str = "ConfigFlapping";
    /// Normal, on a config object and on each workload it held back: it has been quiet, and its final
    /// value rolled once.
    pub const CONFIG_SETTLED: &str = "ConfigSettled";
    /// Normal, on a workload: its rollout waits for a free slot (`--max-concurrent-rollouts`).
    pub const ROLLOUT_QUEUED: &str = "RolloutQueued";
    /// Warning, on a config object and on each workload it holds back: a rollout of this version of
    /// it failed, so it rolls into no further workload.
    pub const ROLLOUT_HALTED: &str = "RolloutHalted";
    /// Normal, on a workload: wave removed what Wave ≤ v0.6 left (its finalizer, its owner references
    /// on the workload's config).
    pub const LEGACY_WAVE_REMOVED: &str = "LegacyWaveRemoved";
    /// Warning, on a workload: what Wave ≤ v0.6 left could not be removed (refused, or failed).
    pub const LEGACY_WAVE_CLEANUP_FAILED: &str = "LegacyWaveCleanupFailed";
    /// Warning, on a workload: Wave ≤ v0.6 left owner references to it on config, which wave removes
    /// only with `--legacy-wave-cleanup`.
    pub const LEGACY_WAVE_LEFT: &str = "LegacyWaveLeft";
    /// Normal, on a workload: its template went back to an earlier config hash, and wave pinned it.
    pub const ROLLOUT_UNDO_DETECTED: &str = "RolloutUndoDetected";
    /// Warning, on a workload: the snapshot of the config behind its hash could not be kept.
    pub const CONFIG_SNAPSHOT_FAILED: &str = "ConfigSnapshotFailed";
    /// Normal, on a workload: an undo restored its config from the revision's snapshot.
    pub const CONFIG_RESTORED: &str = "ConfigRestored";
    /// Warning, on a workload: an undo asked for its config back, and wave would not restore it (a tool
    /// manages the object, or there is no snapshot); the template is pinned instead.
    pub const CONFIG_RESTORE_REFUSED: &str = "ConfigRestoreRefused";
    /// Warning, on wave's own Deployment (`--own-deployment`): with `--reloader-compat` on, a running
    /// Stakater Reloader was found, and both act on the same changes.
    pub const RELOADER_RUNNING: &str = "ReloaderRunning";
    /// Every pod of a workload restarted in place into a new config hash.
    pub const RESTARTED_IN_PLACE: &str = "RestartedInPlace";
    /// A pod was not Ready in time after its in-place restart: the restart halts.
    pub const IN_PLACE_RESTART_FAILED: &str = "InPlaceRestartFailed";
    /// Restarting in place could not work for a workload: it rolled out instead.
    pub const IN_PLACE_FALLBACK: &str = "InPlaceFallback";
}

/// Event `action` values (events.k8s.io/v1 requires one).
pub mod action {
    /// Writing the config hash (and restoring scheduling with it).
    pub const UPDATE_CONFIG_HASH: &str = "UpdateConfigHash";
    /// Checking that every required config object and key exists.
    pub const CHECK_CONFIG: &str = "CheckConfig";
    /// Holding or releasing pods with the scheduling gate.
    pub const GATE_SCHEDULING: &str = "GateScheduling";
    /// Holding a rollout back, or letting it go.
    pub const HOLD_ROLLOUT: &str = "HoldRollout";
    /// Pacing rollouts, halting a failed version, resuming it.
    pub const PACE_ROLLOUT: &str = "PaceRollout";
    /// Removing what Wave ≤ v0.6 left.
    pub const REMOVE_LEGACY: &str = "RemoveLegacy";
    /// Pinning a workload's hash after an undo.
    pub const PIN_HASH: &str = "PinHash";
    /// Keeping a snapshot of the config behind a hash.
    pub const KEEP_CONFIG_HISTORY: &str = "KeepConfigHistory";
    /// Restoring config from a snapshot after an undo.
    pub const RESTORE_CONFIG: &str = "RestoreConfig";
    /// Writing what Reloader writes for a workload opted in through its annotations.
    pub const RELOAD: &str = "Reload";
    /// Looking at the cluster as wave starts (a running Reloader).
    pub const START: &str = "Start";
    /// Restarting a workload's pods in place.
    pub const RESTART_IN_PLACE: &str = "RestartInPlace";
}
