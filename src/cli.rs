//! The command line: one clap `Args` tree, every flag also readable from a `WAVE_*` variable.
//!
//! ```text
//! Cli ─► Command ─┬─► run      ─► RunArgs (here: one flattened group per job) ─► Config ─► wave_runtime::run
//!                 └─► hash, explain, impact, resume, unpin, history, diff, status, completion
//!                       ─► commands::<name>::<Name>Args, beside the code that runs the command
//! ```
//!
//! A flag that several commands take is defined once here, as a small flattened struct
//! ([`ClusterArgs`], [`OutputArg`], [`CrossNamespaceArg`], [`HashKeySecretArg`], [`ReloaderCompatArg`]),
//! so its name, `WAVE_*` variable and default cannot drift apart between commands; where `wave run`
//! explains it at more length, its group replaces only the help text (`mut_arg`).
//!
//! `wave run` accepts Wave v0.11's flags with the same names, defaults and meanings, in Go `flag`
//! syntax (`-flag` and `--flag`, `--bool` or `--bool=true|false`, `--x=v` or `--x v`), so the Wave
//! chart's arguments work unchanged (`docs/operating.md`, "Flags"). Running `wave` with flags and no
//! subcommand means `wave run`, as Wave's binary has no subcommands.
//!
//! `wave run`'s arguments become one [`Config`] ([`RunArgs::into_config`], one field group per flag
//! group); the runtime never sees clap.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{ArgAction, Parser, Subcommand, ValueEnum};
use wave_core::duration::parse_go_duration;
use wave_core::flap::FlapPolicy;
use wave_core::inplace::Strategy;
use wave_core::names;
use wave_core::ratelimit;
use wave_core::refs::{ConfigKind, CrossNamespace};
use wave_core::workload::WorkloadKind;
use wave_runtime::config::{
    AlertConfig, BindAddress, BuildInfo, CertificateSource, Config, LeaderElection, LogFormat, SecretName,
    SinkUrl, WebhookConfig,
};

use crate::commands::agent::AgentArgs;
use crate::commands::completion::CompletionArgs;
use crate::commands::explain::ExplainArgs;
use crate::commands::hash::{self, HashArgs};
use crate::commands::history::{DiffArgs, HistoryArgs};
use crate::commands::impact::ImpactArgs;
use crate::commands::resume::ResumeArgs;
use crate::commands::status::StatusArgs;
use crate::commands::unpin::UnpinArgs;

/// What this binary is: its version, the commit it was built from and when (`build.rs`).
pub const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    commit: env!("WAVE_COMMIT"),
    date: env!("WAVE_BUILD_DATE"),
};

/// `wave --version`: `wave 0.1.0 (commit 1a2b3c…, built 2026-11-23T18:00:00Z)`.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WAVE_COMMIT"),
    ", built ",
    env!("WAVE_BUILD_DATE"),
    ")"
);

/// wave: rolls Deployments, StatefulSets and DaemonSets when their ConfigMaps and Secrets change.
#[derive(Debug, Parser)]
#[command(name = "wave", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller. A flag given twice takes its last value, as with Go's flag package, so a
    /// chart's `extraArgs` can override a flag the chart already sets.
    #[command(
        after_help = "Example:\n  wave run --namespaces=team-a,team-b --update-rate=5 --leader-election",
        args_override_self = true,
        // Every flag's help under its name, in every heading, as before the headings came.
        next_line_help = true
    )]
    Run(Box<RunArgs>),
    /// Print the config hash of each opted-in workload in rendered manifests (no cluster needed), or
    /// with --inject write the manifests back with the hash set (a Helm post-renderer).
    #[command(after_help = hash::EXAMPLES)]
    Hash(HashArgs),
    /// Show a workload's references, its hash, the hash wave would write, and why.
    #[command(
        after_help = "Example:\n  wave explain deployment/web -n shop\n  kubectl wave explain sts/db -o json"
    )]
    Explain(ExplainArgs),
    /// List the opted-in workloads that a change to a ConfigMap or Secret would roll.
    #[command(after_help = "Example:\n  wave impact secret/db-credentials -n shop --keys password")]
    Impact(ImpactArgs),
    /// Release a halt: let a config version whose rollout failed roll into the remaining workloads.
    #[command(after_help = "Example:\n  wave resume configmap/app-config -n shop")]
    Resume(ResumeArgs),
    /// Remove the pin wave set when a workload's template went back to an earlier config (an undo):
    /// wave then rolls it to the current config.
    #[command(after_help = "Example:\n  wave unpin deployment/web -n shop")]
    Unpin(UnpinArgs),
    /// List a workload's revisions with their config hash and the config keys each one changed (needs
    /// config history, docs/history.md). Secret values never appear: changed Secret keys are named.
    #[command(after_help = "Example:\n  wave history deployment/web -n shop")]
    History(HistoryArgs),
    /// Show the config a revision changed: ConfigMap values line by line, Secret keys by name only.
    #[command(after_help = "Example:\n  wave diff deployment/web -n shop --revision 3")]
    Diff(DiffArgs),
    /// Print a shell completion script: `source <(wave completion bash)`.
    #[command(
        after_help = "Examples:\n  source <(wave completion bash)\n  wave completion zsh > \"${fpath[1]}/_wave\"\n  wave completion fish > ~/.config/fish/completions/wave.fish"
    )]
    Completion(CompletionArgs),
    /// Run as the agent container of a pod that restarts in place: exit 42 when wave asks the pod to
    /// restart (wave adds this container; see docs/behaviour.md, "Restarting in place").
    #[command(hide = true)]
    Agent(AgentArgs),
    /// One line per opted-in workload: its hash, whether it is pinned after an undo, whether it keeps
    /// config history, and how its rollout is doing.
    #[command(after_help = "Example:\n  wave status -n shop\n  wave status deployment/web -n shop")]
    Status(StatusArgs),
}

/// How a client command reaches the cluster, with kubectl's meaning of each flag.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// The kubeconfig file (default: `$KUBECONFIG`, then `~/.kube/config`, then the in-cluster
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// The user to impersonate.
    #[arg(long = "as", value_name = "USER")]
    pub as_user: Option<String>,
    /// A group to impersonate; repeat for several.
    #[arg(long = "as-group", value_name = "GROUP")]
    pub as_group: Vec<String>,
}

/// Output format of the client commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Table,
    /// For scripts.
    Json,
    /// For scripts and people: the same document as `json`, as YAML.
    Yaml,
}

/// `-o/--output` of the client commands that print a report.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct OutputArg {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `--cross-namespace-references`: `wave run` and every command that hashes must apply the same policy,
/// or their hashes differ.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct CrossNamespaceArg {
    /// Whether `extra-configmaps` / `extra-secrets` may name config in another namespace: `deny` leaves
    /// such entries out of the hash, unread; `allow` hashes them as Wave does. Match `wave run`'s.
    #[arg(long, env = "WAVE_CROSS_NAMESPACE_REFERENCES", default_value_t, value_parser = CrossNamespace::parse)]
    pub cross_namespace_references: CrossNamespace,
}

/// `--hash-key-secret`: the Secret whose `hash-key` keys the config hash (`wave run`), or that the
/// controller runs with (the client commands that compute the hash it would write).
#[derive(Clone, Debug, clap::Args)]
pub struct HashKeySecretArg {
    /// The `--hash-key-secret` wave runs with, so that the desired hash matches the controller's.
    #[arg(long, env = "WAVE_HASH_KEY_SECRET", value_name = "NAMESPACE/NAME", value_parser = SecretName::parse)]
    pub hash_key_secret: Option<SecretName>,
}

/// `--reloader-compat`: whether workloads with only Stakater Reloader's annotations are handled
/// (`wave run`), or are assessed as the controller handles them (the client commands).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct ReloaderCompatArg {
    /// wave runs with `--reloader-compat`: a workload with only Reloader's annotations is explained as
    /// one wave reloads as Reloader does, not as one it leaves alone.
    #[arg(long, env = "WAVE_RELOADER_COMPAT", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub reloader_compat: bool,
}

/// An address that `0` disables. (An alias, so that clap parses `0` to `None` instead of treating the
/// flag as optional.)
pub type OptionalAddress = Option<BindAddress>;

/// Flags of `wave run`, one group per job; each group is listed under its own heading in
/// `wave run --help` and becomes its part of the [`Config`].
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// What to watch and manage.
    #[command(flatten)]
    pub watch: WatchArgs,
    /// How the config hash is computed.
    #[command(flatten)]
    pub hashing: HashingArgs,
    /// How fast wave writes.
    #[command(flatten)]
    pub rate: RateArgs,
    /// What keeps a config change from rolling too much at once.
    #[command(flatten)]
    pub rollout: RolloutSafetyArgs,
    /// Which replica writes.
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    /// The admission webhook.
    #[command(flatten)]
    pub webhook: WebhookArgs,
    /// Metrics, health and logs.
    #[command(flatten)]
    pub observability: ObservabilityArgs,
    /// The flags with which wave writes ConfigMaps and Secrets.
    #[command(flatten)]
    pub config_writes: ConfigWritesArgs,
    /// Stakater Reloader's annotations and flags.
    #[command(flatten)]
    pub reloader: ReloaderArgs,
}

/// `wave run`: which namespaces and kinds are watched, and how often everything is checked again.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Watching")]
pub struct WatchArgs {
    /// Comma-separated namespaces to watch; empty watches all. Not trimmed, as in Wave.
    #[arg(long, env = "WAVE_NAMESPACES", default_value = "")]
    pub namespaces: String,

    /// Comma-separated namespaces to leave alone: nothing in them is watched, hashed or written, and
    /// references into them are treated as absent and optional. Reloader's flag of the same name.
    #[arg(
        long,
        env = "WAVE_NAMESPACES_TO_IGNORE",
        value_delimiter = ',',
        value_name = "NAMESPACES"
    )]
    pub namespaces_to_ignore: Vec<String>,

    /// Act only on workloads in the namespaces whose labels this selector selects (`kubectl -l` syntax:
    /// `team=a,env in (prod,staging),!legacy`; Reloader's `key:value` too), watched live: labelling a
    /// namespace brings its workloads in. Needs `list, watch` on namespaces.
    #[arg(long, env = "WAVE_NAMESPACE_SELECTOR", value_name = "SELECTOR",
          value_parser = wave_core::selector::LabelSelector::parse)]
    pub namespace_selector: Option<wave_core::selector::LabelSelector>,

    /// Period of the full re-check of every opted-in workload (Go duration: 10h, 1h30m, 300ms).
    #[arg(long, env = "WAVE_SYNC_PERIOD", default_value = "10h", value_parser = parse_go_duration)]
    pub sync_period: Duration,

    /// Also manage CronJobs (`batch/v1`): the hash goes on the template of the Jobs they create, so the
    /// next Job runs with the new config. Needs `get, list, watch, patch` on cronjobs.
    #[arg(long, env = "WAVE_CRONJOBS")]
    pub cronjobs: bool,

    /// Also handle Jobs (`batch/v1`) opted in through Stakater Reloader's annotations (needs
    /// `--reloader-compat`): as Reloader does, a reload deletes the Job and creates it again with the
    /// mark, so it runs again with the new config. Needs `get, list, watch, create, delete` on jobs.
    #[arg(long, env = "WAVE_JOBS", requires = "reloader_compat")]
    pub jobs: bool,

    /// Also manage Argo Rollouts' Rollouts (`argoproj.io/v1alpha1`): the hash goes on `spec.template`.
    /// Needs their CustomResourceDefinition, and `get, list, watch, patch` on rollouts.
    #[arg(long, env = "WAVE_ARGO_ROLLOUTS")]
    pub argo_rollouts: bool,

    /// Reloader's spelling of `--argo-rollouts`, with its value (`--is-Argo-Rollouts=true`).
    #[arg(long = "is-Argo-Rollouts", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = ArgAction::Set)]
    pub is_argo_rollouts: Option<bool>,

    /// Also manage a resource with a pod template: `GROUP/VERSION/RESOURCE:JSON-POINTER` (repeatable, or
    /// comma-separated), e.g. `example.com/v1/runners:/spec/template`. Its kind is looked up at start-up;
    /// it needs `get, list, watch, patch` on the resource.
    #[arg(long, env = "WAVE_WORKLOAD_RESOURCE", value_delimiter = ',', value_name = "G/V/R:POINTER",
          value_parser = wave_core::kind::ResourceSpec::parse)]
    pub workload_resource: Vec<wave_core::kind::ResourceSpec>,
}

impl WatchArgs {
    /// The namespaces to watch, `None` for all. Entries are not trimmed (Wave); empty ones are dropped.
    pub fn namespace_set(&self) -> Option<BTreeSet<String>> {
        let set: BTreeSet<String> = self
            .namespaces
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        (!set.is_empty()).then_some(set)
    }

    /// `--namespaces-to-ignore`, trimmed, without empty entries.
    pub fn ignored_namespaces(&self) -> BTreeSet<String> {
        self.namespaces_to_ignore
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// The workload kinds to manage: the built-in ones, and CronJobs, Jobs and Rollouts when asked.
    pub fn kinds(&self) -> Vec<WorkloadKind> {
        WorkloadKind::BUILT_IN
            .into_iter()
            .chain(self.cronjobs.then_some(WorkloadKind::CRON_JOB))
            .chain(self.jobs.then_some(WorkloadKind::JOB))
            .chain(
                (self.argo_rollouts || self.is_argo_rollouts == Some(true)).then_some(WorkloadKind::ROLLOUT),
            )
            .collect()
    }
}

/// `wave run`: how the config hash is computed; `wave explain`, `wave status` and `wave hash` take the
/// same flags so that their hashes match the controller's.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Hashing")]
#[command(mut_arg("hash_key_secret", |a| a.help(
    "Key the config hash: HMAC-SHA256 under the `hash-key` of this Secret (NAMESPACE/NAME), so no pod \
     template carries a digest of a Secret that can be guessed offline. Changes every hash once",
)))]
#[command(mut_arg("cross_namespace_references", |a| a.help(
    "Whether `extra-configmaps` / `extra-secrets` may name config in another namespace \
     (`namespace/name`): `deny` leaves such entries out of every hash, unread, with a Warning Event; \
     `allow` hashes them as Wave does (docs/security.md, \"Cross-namespace references\")",
)))]
pub struct HashingArgs {
    /// `--hash-key-secret`, with `wave run`'s help text (`mut_arg` above).
    #[command(flatten)]
    pub hash_key: HashKeySecretArg,
    /// `--cross-namespace-references`, with `wave run`'s help text (`mut_arg` above).
    #[command(flatten)]
    pub cross_namespace: CrossNamespaceArg,
}

/// `wave run`: the write rate limit and how many reconciles run at once.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Rate")]
pub struct RateArgs {
    /// Workload writes per second across all kinds; `<= 0` means 1.0, `inf` disables the limit.
    // `ratelimit::DEFAULT_RATE` as a literal: `default_value_t` would print it as `1`, not Wave's
    // `1.0`; `run_defaults_are_the_constants_the_rest_of_wave_assumes` checks that the two agree.
    #[arg(long, env = "WAVE_UPDATE_RATE", default_value = "1.0", value_parser = parse_rate, allow_hyphen_values = true)]
    pub update_rate: f64,

    /// Burst of the write token bucket; `<= 0` means 100.
    #[arg(
        long,
        env = "WAVE_UPDATE_BURST",
        default_value_t = i64::from(ratelimit::DEFAULT_BURST),
        allow_hyphen_values = true
    )]
    pub update_burst: i64,

    /// Reconciles running at once. A config object used by many workloads wakes them all, and their
    /// writes go out this many at a time; an idle worker costs nothing (docs/benchmarks.md, S3).
    #[arg(long, env = "WAVE_CONCURRENCY", default_value_t = 64)]
    pub concurrency: usize,
}

impl RateArgs {
    /// The burst, with Wave's `<= 0` ⇒ default rule.
    pub fn burst(&self) -> u32 {
        u32::try_from(self.update_burst)
            .ok()
            .filter(|b| *b > 0)
            .unwrap_or(ratelimit::DEFAULT_BURST)
    }
}

/// `wave run`: what keeps a config change from rolling too much, too often, or on after a failure.
// The durations' defaults are Go-duration literals (clap prints `default_value_t` with `Display`,
// which `Duration` lacks); `run_defaults_are_the_constants_the_rest_of_wave_assumes` checks them.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Rollout safety")]
pub struct RolloutSafetyArgs {
    /// The least time between two config-triggered rollouts of one workload: the first change rolls at
    /// once, later ones within the interval are merged into one rollout at its end (Go duration; `0`
    /// turns this off). Annotation `wave.pusher.com/min-rollout-interval` overrides it per workload.
    #[arg(long, env = "WAVE_MIN_ROLLOUT_INTERVAL", default_value = "5s", value_parser = parse_go_duration)]
    pub min_rollout_interval: Duration,

    /// A ConfigMap or Secret that changes more than this many times within --flap-window is flapping:
    /// its changes roll nothing until it has been quiet for --flap-quiet. `0` turns this off.
    #[arg(long, env = "WAVE_FLAP_THRESHOLD", default_value_t = FlapPolicy::DEFAULT.threshold)]
    pub flap_threshold: usize,

    /// The window --flap-threshold counts changes in (Go duration).
    #[arg(long, env = "WAVE_FLAP_WINDOW", default_value = "10m", value_parser = parse_go_duration)]
    pub flap_window: Duration,

    /// How long a flapping object must stay unchanged before its final value rolls, once (Go duration).
    #[arg(long, env = "WAVE_FLAP_QUIET", default_value = "5m", value_parser = parse_go_duration)]
    pub flap_quiet: Duration,

    /// At most this many wave-triggered rollouts in progress at once, as the workloads' own status
    /// shows; the rest wait, highest `wave.pusher.com/rollout-priority` first, then first come. With it,
    /// a config version whose rollout fails rolls into no further workload. `0` turns this off.
    #[arg(long, env = "WAVE_MAX_CONCURRENT_ROLLOUTS", default_value_t = 0)]
    pub max_concurrent_rollouts: usize,

    /// With --max-concurrent-rollouts: how long a StatefulSet or DaemonSet rollout may take before it
    /// counts as failed (Go duration; Deployments use their progressDeadlineSeconds). Annotation
    /// `wave.pusher.com/rollout-deadline` overrides it per workload.
    #[arg(long, env = "WAVE_ROLLOUT_DEADLINE", default_value = "10m", value_parser = parse_go_duration)]
    pub rollout_deadline: Duration,

    /// How a Deployment, StatefulSet or DaemonSet without the annotation `wave.pusher.com/restart` gets
    /// new config: `rollout` (a new hash on its pod template: its controller replaces every pod) or
    /// `in-place` (the containers of its existing pods restart; Kubernetes 1.35 or later with
    /// RestartAllContainersOnContainerExits, and --agent-image). `docs/behaviour.md`, "Restarting in place".
    #[arg(
        long,
        env = "WAVE_RESTART_STRATEGY",
        default_value = "rollout",
        value_parser = Strategy::parse,
        requires_if("in-place", "agent_image")
    )]
    pub restart_strategy: Strategy,

    /// The image of the agent container that restarting in place adds to pod templates: wave's own
    /// image (the chart sets it). Without it, nothing restarts in place: every workload rolls out.
    #[arg(long, env = "WAVE_AGENT_IMAGE")]
    pub agent_image: Option<String>,
}

impl RolloutSafetyArgs {
    /// When a config object counts as flapping.
    pub fn flap(&self) -> FlapPolicy {
        FlapPolicy {
            threshold: self.flap_threshold,
            window: self.flap_window,
            quiet: self.flap_quiet,
        }
    }
}

/// `wave run`: leader election through a Lease.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Leader election")]
pub struct LeaderElectionArgs {
    /// Elect a leader through a Lease; only the leader writes. Losing the lease exits the process.
    /// (`--enable-ha` is Reloader's name for it.)
    #[arg(long, env = "WAVE_LEADER_ELECTION", num_args = 0..=1, require_equals = true, visible_alias = "enable-ha",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub leader_election: bool,

    /// Name of the Lease.
    #[arg(long, env = "WAVE_LEADER_ELECTION_ID", default_value = wave_core::names::DEFAULT_LEASE_NAME)]
    pub leader_election_id: String,

    /// Namespace of the Lease; defaults to POD_NAMESPACE, then the in-cluster namespace, then `default`.
    #[arg(long, env = "WAVE_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Lease duration in seconds (renewed well before it ends).
    #[arg(
        long,
        env = "WAVE_LEADER_ELECTION_LEASE_DURATION",
        default_value_t = 15,
        hide = true
    )]
    pub leader_election_lease_duration: u64,
}

impl LeaderElectionArgs {
    /// The runtime's leader election; `None` without `--leader-election`.
    pub fn into_config(self) -> Option<LeaderElection> {
        self.leader_election.then_some(LeaderElection {
            lease_name: self.leader_election_id,
            namespace: self.leader_election_namespace,
            duration_seconds: self.leader_election_lease_duration,
        })
    }
}

/// `wave run`: the mutating admission webhook and its scheduling gate.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Webhook")]
pub struct WebhookArgs {
    /// Serve the mutating admission webhook: the hash at creation, and pods held by a scheduling gate
    /// until their required config exists (`--enable-webhooks`, Wave's spelling, works too).
    #[arg(long, alias = "enable-webhooks", env = "WAVE_ENABLE_WEBHOOK", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub enable_webhook: bool,

    /// Address of the webhook's HTTPS server.
    #[arg(long, env = "WAVE_WEBHOOK_BIND_ADDRESS", default_value = ":9443", value_parser = parse_bind_address)]
    pub webhook_bind_address: BindAddress,

    /// The MutatingWebhookConfiguration whose `caBundle` and paths (with the path token) wave keeps
    /// current.
    #[arg(long, env = "WAVE_WEBHOOK_CONFIGURATION_NAME", default_value = "wave")]
    pub webhook_configuration_name: String,

    /// The Secret (in wave's namespace) that holds the webhook's CA and serving certificate.
    #[arg(long, env = "WAVE_WEBHOOK_SECRET_NAME", default_value = "wave-webhook-tls")]
    pub webhook_secret_name: String,

    /// Where the serving certificate comes from: `generate` (wave issues it from its own CA, renews it
    /// and keeps the `caBundle` current) or `secret` (cert-manager or you write the Secret).
    #[arg(long, env = "WAVE_WEBHOOK_CERTIFICATE", default_value = "generate",
          value_parser = PossibleValuesParser::new(CertificateSource::NAMES).try_map(|s| s.parse::<CertificateSource>()))]
    pub webhook_certificate: CertificateSource,

    /// The Secret (in wave's namespace) that holds the webhook's path token: the secret part of the
    /// paths wave writes into the configuration, so that only the apiserver calls the webhook. Created
    /// (or filled in, when it has no `token`) by wave; delete it to rotate the token.
    #[arg(
        long,
        env = "WAVE_WEBHOOK_TOKEN_SECRET_NAME",
        default_value = "wave-webhook-token"
    )]
    pub webhook_token_secret_name: String,

    /// Namespace of those Secrets; defaults like `--leader-election-namespace`.
    #[arg(long, env = "WAVE_WEBHOOK_SECRET_NAMESPACE")]
    pub webhook_secret_namespace: Option<String>,

    /// Lifetime of the serving certificate wave issues; renewed when a third is left. Hidden: for tests
    /// that force renewals, not for production.
    #[arg(long, hide = true, default_value = "2160h", value_parser = parse_go_duration)]
    pub webhook_certificate_lifetime: Duration,

    /// The Service in front of the webhook, named in the serving certificate (`NAME.NAMESPACE.svc`).
    #[arg(long, env = "WAVE_WEBHOOK_SERVICE_NAME", default_value = "wave-webhook")]
    pub webhook_service_name: String,

    /// How long the scheduling gate may hold a workload's pods before it is released with a Warning.
    // `commands::DEFAULT_MAX_GATE` is this default for `wave explain`;
    // `run_defaults_are_the_constants_the_rest_of_wave_assumes` checks that they agree.
    #[arg(long, env = "WAVE_MAX_GATE_DURATION", default_value = "10m", value_parser = parse_go_duration)]
    pub max_gate_duration: Duration,
}

impl WebhookArgs {
    /// The runtime's webhook settings; `None` without `--enable-webhook`. (`--max-gate-duration` is a
    /// field of its own in [`Config`].)
    pub fn config(&self) -> Option<WebhookConfig> {
        self.enable_webhook.then(|| WebhookConfig {
            address: self.webhook_bind_address,
            configuration_name: self.webhook_configuration_name.clone(),
            secret_name: self.webhook_secret_name.clone(),
            token_secret_name: self.webhook_token_secret_name.clone(),
            secret_namespace: self.webhook_secret_namespace.clone(),
            service_name: self.webhook_service_name.clone(),
            certificate: self.webhook_certificate,
            certificate_lifetime: self.webhook_certificate_lifetime,
        })
    }
}

/// `wave run`: where metrics, health and logs go, and where start-up warnings are published.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Observability")]
pub struct ObservabilityArgs {
    /// Address of `/metrics` (Prometheus text format); `:8080` listens on every interface, IPv6 and
    /// IPv4; `0` disables it.
    #[arg(long, env = "WAVE_METRICS_BIND_ADDRESS", default_value = ":8080", value_parser = BindAddress::parse_optional)]
    pub metrics_bind_address: OptionalAddress,

    /// Address of `/livez` and `/readyz`; `0` disables it.
    #[arg(long, env = "WAVE_HEALTH_BIND_ADDRESS", default_value = ":8081", value_parser = BindAddress::parse_optional)]
    pub health_bind_address: OptionalAddress,

    /// Log format: `text` or `json` (Reloader's empty value is `text`).
    #[arg(long, env = "WAVE_LOG_FORMAT", default_value = "text",
          value_parser = |s: &str| if s.is_empty() { Ok(LogFormat::Text) } else { s.parse::<LogFormat>() })]
    pub log_format: LogFormat,

    /// Log filter (tracing `EnvFilter` syntax, e.g. `info`, `wave=debug`; Reloader's `warning`,
    /// `fatal` and `panic` are `warn`, `error` and `error`).
    #[arg(long, env = "WAVE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// wave's own Deployment (NAMESPACE/NAME; the chart sets it): start-up warnings, such as a running
    /// Reloader competing with `--reloader-compat`, are also published there as Warning Events.
    #[arg(long, env = "WAVE_OWN_DEPLOYMENT", value_name = "NAMESPACE/NAME", value_parser = SecretName::parse)]
    pub own_deployment: Option<SecretName>,

    /// controller-runtime logging flags, accepted so Wave's arguments work; `--zap-encoder=json` selects
    /// JSON logs and `--zap-log-level` the level.
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub zap_devel: Option<String>,
    #[arg(long, hide = true)]
    #[doc(hidden)]
    pub zap_encoder: Option<String>,
    #[arg(long, hide = true)]
    #[doc(hidden)]
    pub zap_log_level: Option<String>,
    #[arg(long, hide = true)]
    #[doc(hidden)]
    pub zap_stacktrace_level: Option<String>,
    #[arg(long, hide = true)]
    #[doc(hidden)]
    pub zap_time_encoding: Option<String>,
}

impl ObservabilityArgs {
    /// The effective log format, honouring `--zap-encoder=json`.
    pub fn effective_log_format(&self) -> LogFormat {
        match self.zap_encoder.as_deref() {
            Some("json") => LogFormat::Json,
            Some(_) => LogFormat::Text,
            None => self.log_format,
        }
    }

    /// The effective log filter, honouring `--zap-log-level` (`debug`, `info`, `error`, or a number).
    pub fn effective_log_level(&self) -> String {
        match self.zap_log_level.as_deref() {
            Some(level) if level.parse::<i32>().is_ok_and(|n| n > 0) => "debug".into(),
            Some(level @ ("debug" | "info" | "warn" | "error")) => level.into(),
            _ => match self.log_level.to_ascii_lowercase().as_str() {
                "warning" => "warn".into(),
                "fatal" | "panic" => "error".into(),
                level @ ("trace" | "debug" | "info" | "warn" | "error") => level.into(),
                _ => self.log_level.clone(),
            },
        }
    }

    /// `--own-deployment` as a workload.
    pub fn own_deployment(&self) -> Option<wave_core::workload::WorkloadRef> {
        self.own_deployment
            .as_ref()
            .map(|d| wave_core::workload::WorkloadRef::new(WorkloadKind::DEPLOYMENT, &d.namespace, &d.name))
    }
}

/// `wave run`: the two flags with which wave writes ConfigMaps and Secrets (each needs RBAC on them).
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Writing config objects")]
pub struct ConfigWritesArgs {
    /// Keep a snapshot of the config behind each hash, for every workload that does not say
    /// `wave.pusher.com/config-history: "false"` (without it, only those that say `"true"`). Needs
    /// `create, patch` on configmaps and secrets and `list` on replicasets and controllerrevisions
    /// (`docs/history.md`).
    #[arg(long, env = "WAVE_CONFIG_HISTORY")]
    pub config_history: bool,

    /// Remove the owner references Wave ≤ v0.6 put on ConfigMaps and Secrets (and then its finalizer), so
    /// that deleting a workload never deletes its config. Needs `patch` on configmaps and secrets (chart
    /// value `rbac.legacyWaveCleanup=true`). Without it wave writes no config object: it removes a
    /// finalizer that owns nothing, and reports the owner references with a Warning
    /// (`docs/migrating-from-wave.md`).
    #[arg(long, env = "WAVE_LEGACY_WAVE_CLEANUP", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub legacy_wave_cleanup: bool,
}

/// `wave run`: Stakater Reloader compatibility; every flag but `--reloader-compat` needs it.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Reloader compatibility")]
#[command(mut_arg("reloader_compat", |a| a.help(
    "Handle workloads opted in through Stakater Reloader's annotations as Reloader v1.4.21 does, \
     writing exactly what it writes, so switching from Reloader rolls nothing \
     (`docs/migrating-from-reloader.md`). Off by default: workloads that carry only Reloader's \
     annotations are left alone. When on and a running Reloader is found at start-up, wave warns \
     (log, `wave_reloader_running`, an Event on `--own-deployment`)",
)))]
pub struct ReloaderArgs {
    /// `--reloader-compat`, with `wave run`'s help text (`mut_arg` above).
    #[command(flatten)]
    pub compat: ReloaderCompatArg,

    /// For Reloader-annotated workloads: how a reload is written, as Reloader's flag of the same name:
    /// `env-vars` (a `STAKATER_<NAME>_<KIND>` env var) or `annotations` (`last-reloaded-from`).
    #[arg(long, env = "WAVE_RELOAD_STRATEGY", default_value = "env-vars", requires = "reloader_compat",
          value_parser = PossibleValuesParser::new(["env-vars", "annotations"])
              .map(|s| s.parse::<wave_core::reloader::Strategy>().unwrap_or_default()))]
    pub reload_strategy: wave_core::reloader::Strategy,

    /// Reloader's `--auto-reload-all`: every workload not opted in to wave, whose Reloader `auto`
    /// annotations are unset, reloads on changes to the ConfigMaps and Secrets it references.
    #[arg(long, env = "WAVE_AUTO_RELOAD_ALL", num_args = 0..=1, require_equals = true, requires = "reloader_compat",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub auto_reload_all: bool,

    /// Reloader's `--resources-to-ignore`: `configmaps` or `secrets`, whose changes reload no
    /// Reloader-annotated workload (workloads opted in to wave are not affected).
    #[arg(long, env = "WAVE_RESOURCES_TO_IGNORE", value_delimiter = ',', value_name = "KIND", requires = "reloader_compat",
          value_parser = PossibleValuesParser::new(["configmaps", "secrets"]))]
    pub resources_to_ignore: Vec<String>,

    /// Reloader's `--reload-on-create`: a ConfigMap or Secret created while wave runs reloads the
    /// Reloader-annotated workloads it targets.
    #[arg(long, env = "WAVE_RELOAD_ON_CREATE", num_args = 0..=1, require_equals = true, requires = "reloader_compat",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub reload_on_create: bool,

    /// Reloader's `--resource-label-selector`: only ConfigMaps and Secrets whose labels this selector
    /// selects reload Reloader-annotated workloads (`kubectl -l` syntax, or Reloader's `key:value`).
    #[arg(long, env = "WAVE_RESOURCE_LABEL_SELECTOR", value_name = "SELECTOR", requires = "reloader_compat",
          value_parser = wave_core::selector::LabelSelector::parse)]
    pub resource_label_selector: Option<wave_core::selector::LabelSelector>,

    /// Reloader's `--reload-on-delete`: one deleted while wave runs reloads them too (its env var is
    /// removed, or `last-reloaded-from` names it with the SHA-1 of no data).
    #[arg(long, env = "WAVE_RELOAD_ON_DELETE", num_args = 0..=1, require_equals = true, requires = "reloader_compat",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub reload_on_delete: bool,

    /// Reloader's `--ignored-workload-types`: `cronjobs` makes Reloader-annotated CronJobs start no
    /// Job on a reload; `jobs` leaves Reloader-annotated Jobs alone (they are handled with `--jobs`).
    #[arg(long, env = "WAVE_IGNORED_WORKLOAD_TYPES", value_delimiter = ',', value_name = "TYPE", requires = "reloader_compat",
          value_parser = PossibleValuesParser::new(["jobs", "cronjobs"]))]
    pub ignored_workload_types: Vec<String>,

    /// Reloader's `--sync-after-restart`: accepted, and nothing to turn on. wave compares every
    /// Reloader-annotated workload with its config at start-up and each resync, so a change made while
    /// it was down is caught; unlike Reloader with it and `--reload-on-create`, it does not mark
    /// workloads whose config did not change (`docs/migrating-from-reloader.md`).
    #[arg(long, env = "WAVE_SYNC_AFTER_RESTART", num_args = 0..=1, require_equals = true, requires = "reloader_compat",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub sync_after_restart: bool,

    /// Reloader's `--enable-csi-integration`: a SecretProviderClass rotated by the Secrets Store CSI
    /// driver reloads the Reloader-annotated workloads that mount it and ask for it
    /// (`secretproviderclass.reloader.stakater.com/auto` or `/reload`, or `reloader.stakater.com/auto`).
    /// Needs list and watch on the driver's secretproviderclasspodstatuses and secretproviderclasses (read
    /// as metadata); without its CRDs or these rights, a warning, and wave runs without it.
    #[arg(long, env = "WAVE_ENABLE_CSI_INTEGRATION", num_args = 0..=1, require_equals = true, requires = "reloader_compat",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub enable_csi_integration: bool,

    /// Reloader's flags that rename its annotations.
    #[command(flatten)]
    pub annotation_names: ReloaderAnnotationNames,

    /// Reloader's alerts and `--webhook-url`.
    #[command(flatten)]
    pub posts: ReloaderPosts,

    /// Reloader's flags wave refuses, each with what to use instead.
    #[command(flatten)]
    pub refused: ReloaderRefused,
}

/// Reloader's alert on each reload (its `ALERT_*` variables, as `--alert-*` flags) and its
/// `--webhook-url` (docs/migrating-from-reloader.md, "Alerts and --webhook-url"). The URLs are checked
/// after parsing ([`ReloaderPosts::check`]): a parser's error would print them, and a chat webhook's URL
/// carries its token.
#[derive(Clone, clap::Args)]
pub struct ReloaderPosts {
    /// Reloader's `ALERT_ON_RELOAD`: after each reload of a Reloader-annotated workload, post Reloader's
    /// alert to `--alert-webhook-url`. Sent after the write and never in its way: tried 3 times, then
    /// counted in `wave_alerts_total{result="failed"}` and logged.
    #[arg(long, env = "WAVE_ALERT_ON_RELOAD", num_args = 0..=1, require_equals = true, requires = "reloader_compat",
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub alert_on_reload: bool,

    /// Reloader's `ALERT_SINK`: `slack`, `teams`, `gchat`, or `raw` (plain text; as in Reloader, any
    /// other value means raw).
    #[arg(long, env = "WAVE_ALERT_SINK", default_value = "raw", value_name = "SINK")]
    pub alert_sink: String,

    /// Reloader's `ALERT_WEBHOOK_URL`: where alerts go. A chat webhook's URL is its credential: give it
    /// as WAVE_ALERT_WEBHOOK_URL from a Secret (the chart's `reloader.alert.webhookUrlSecret`); wave
    /// never prints it.
    #[arg(
        long,
        env = "WAVE_ALERT_WEBHOOK_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    alert_webhook_url: Option<String>,

    /// Reloader's `ALERT_WEBHOOK_PROXY`: an HTTP proxy to reach `--alert-webhook-url` through (with
    /// `CONNECT`; `http://user:password@host:port` sends basic credentials).
    #[arg(
        long,
        env = "WAVE_ALERT_WEBHOOK_PROXY",
        hide_env_values = true,
        value_name = "URL"
    )]
    alert_webhook_proxy: Option<String>,

    /// Reloader's `ALERT_ADDITIONAL_INFO`: text put before each alert, as `TEXT : message` (a cluster's
    /// name, say).
    #[arg(long, env = "WAVE_ALERT_ADDITIONAL_INFO", value_name = "TEXT")]
    pub alert_additional_info: Option<String>,

    /// Reloader's `--webhook-url`: instead of reloading, post each change that would reload a
    /// Reloader-annotated workload to this URL, once per change of an object, with Reloader's body
    /// `{"webhook":"update successful"}`. Nothing is written to those workloads.
    #[arg(
        long,
        env = "WAVE_RELOADER_WEBHOOK_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    webhook_url: Option<String>,
}

/// The URLs are credentials: printed as whether they are set, never as they are.
impl std::fmt::Debug for ReloaderPosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |value: &Option<String>| value.as_ref().map(|_| "<set>");
        f.debug_struct("ReloaderPosts")
            .field("alert_on_reload", &self.alert_on_reload)
            .field("alert_sink", &self.alert_sink)
            .field("alert_webhook_url", &set(&self.alert_webhook_url))
            .field("alert_webhook_proxy", &set(&self.alert_webhook_proxy))
            .field("alert_additional_info", &self.alert_additional_info)
            .field("webhook_url", &set(&self.webhook_url))
            .finish()
    }
}

/// Reloader's own names of its alert settings: wave reads them with `WAVE_` in front, and says so at
/// start-up when it finds them set (never their values).
const RELOADER_ALERT_ENV: [&str; 5] = [
    "ALERT_ON_RELOAD",
    "ALERT_SINK",
    "ALERT_WEBHOOK_URL",
    "ALERT_WEBHOOK_PROXY",
    "ALERT_ADDITIONAL_INFO",
];

impl ReloaderPosts {
    /// Refuses a URL that can never be posted to, naming the flag and what is wrong, never the URL.
    pub fn check(&self, reloader_compat: bool) -> Result<(), String> {
        let given = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.trim().is_empty());
        for (flag, value) in [
            ("--alert-webhook-url", &self.alert_webhook_url),
            ("--alert-webhook-proxy", &self.alert_webhook_proxy),
            ("--webhook-url", &self.webhook_url),
        ] {
            if !given(value) {
                continue;
            }
            if !reloader_compat && flag != "--alert-webhook-proxy" {
                return Err(format!(
                    "{flag} is Stakater Reloader's and applies to Reloader-annotated workloads: it needs --reloader-compat"
                ));
            }
            if let Some(Err(why)) = value.as_deref().map(SinkUrl::parse) {
                return Err(format!("{flag}: {why}"));
            }
        }
        if self.alert_on_reload && !given(&self.alert_webhook_url) {
            return Err(
                "--alert-on-reload needs --alert-webhook-url (or WAVE_ALERT_WEBHOOK_URL): where to post the alerts"
                    .to_string(),
            );
        }
        Ok(())
    }

    fn url(value: Option<&str>) -> Option<SinkUrl> {
        value
            .filter(|v| !v.trim().is_empty())
            .and_then(|v| SinkUrl::parse(v).ok())
    }

    /// The alerts' settings; `None` when off (checked by [`ReloaderPosts::check`] first).
    pub fn alert(&self) -> Option<AlertConfig> {
        if !self.alert_on_reload {
            return None;
        }
        Some(AlertConfig {
            sink: wave_core::reloader::AlertSink::parse(&self.alert_sink),
            url: Self::url(self.alert_webhook_url.as_deref())?,
            proxy: Self::url(self.alert_webhook_proxy.as_deref()),
            additional_info: self
                .alert_additional_info
                .clone()
                .filter(|info| !info.trim().is_empty()),
        })
    }

    /// `--webhook-url`, if given.
    pub fn webhook_url(&self) -> Option<SinkUrl> {
        Self::url(self.webhook_url.as_deref())
    }
}

/// Reloader's flags that rename its annotations (`--auto-annotation` and the others): wave reads
/// Reloader's default names only, so each is accepted with its default value, and any other value is
/// refused at start-up with the name to use instead.
#[derive(Clone, Debug, clap::Args)]
pub struct ReloaderAnnotationNames {
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::CONFIGMAP_RELOAD))]
    configmap_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::SECRET_RELOAD))]
    secret_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::AUTO))]
    auto_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::IGNORE))]
    ignore_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::CONFIGMAP_AUTO))]
    configmap_auto_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::SECRET_AUTO))]
    secret_auto_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::SEARCH))]
    auto_search_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::MATCH))]
    search_match_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::PAUSE_PERIOD))]
    pause_deployment_annotation: Option<String>,
    #[arg(long, hide = true, requires = "reloader_compat", value_parser = default_name_only(names::reloader::PAUSED_AT))]
    pause_deployment_time_annotation: Option<String>,
}

/// A parser of a Reloader annotation-name flag: its default value only.
fn default_name_only(default: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync {
    move |value: &str| {
        if value == default {
            return Ok(value.to_string());
        }
        Err(format!(
            "wave reads Reloader's annotation under its default name only: rename {value:?} to {default:?} \
             on your workloads and ConfigMaps/Secrets (kubectl annotate), then drop this flag \
             (docs/migrating-from-reloader.md, \"Every Reloader flag\")"
        ))
    }
}

/// Reloader's flags that wave does not take: each is accepted only with the value that turns it off,
/// and any other value is refused at start-up with what to use instead.
#[derive(Clone, Debug, clap::Args)]
pub struct ReloaderRefused {
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = off_only("wave has no Go profiler; its memory and CPU are in /metrics \
              (process_resident_memory_bytes, process_cpu_seconds_total) and docs/benchmarks.md says how to profile it"))]
    enable_pprof: Option<String>,
    #[arg(long, hide = true, value_parser = off_only("wave has no Go profiler (see --enable-pprof); drop this flag"))]
    pprof_addr: Option<String>,
}

/// A parser of a refused flag: every value but the ones that turn it off (`false`, or empty) is an
/// error saying `why`.
fn off_only(why: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync {
    move |value: &str| match value {
        "" | "false" => Ok(value.to_string()),
        _ => Err(why.to_string()),
    }
}

impl ReloaderArgs {
    /// The Reloader options; `None` without `--reloader-compat`.
    pub fn into_config(self) -> Option<wave_core::reloader::Options> {
        self.compat.reloader_compat.then(|| wave_core::reloader::Options {
            strategy: self.reload_strategy,
            auto_reload_all: self.auto_reload_all,
            ignored_kinds: self
                .resources_to_ignore
                .iter()
                .map(|kind| match kind.as_str() {
                    "secrets" => ConfigKind::Secret,
                    _ => ConfigKind::ConfigMap,
                })
                .collect(),
            reload_on_create: self.reload_on_create,
            resource_selector: self.resource_label_selector,
            reload_on_delete: self.reload_on_delete,
            ignore_cron_jobs: self.ignored_workload_types.iter().any(|t| t == "cronjobs"),
            ignore_jobs: self.ignored_workload_types.iter().any(|t| t == "jobs"),
            notify_only: self.posts.webhook_url().is_some(),
            csi: self.enable_csi_integration,
        })
    }
}

impl RunArgs {
    /// The runtime's configuration, group by group.
    pub fn into_config(self) -> Config {
        let RunArgs {
            watch,
            hashing,
            rate,
            rollout,
            leader_election,
            webhook,
            observability,
            config_writes,
            reloader,
        } = self;
        Config {
            namespaces: watch.namespace_set(),
            namespaces_to_ignore: watch.ignored_namespaces(),
            namespace_selector: watch.namespace_selector.clone(),
            sync_period: watch.sync_period,
            kinds: watch.kinds(),
            workload_resources: watch.workload_resource,

            hash_key_secret: hashing.hash_key.hash_key_secret,
            cross_namespace: hashing.cross_namespace.cross_namespace_references,

            update_rate: rate.update_rate,
            update_burst: rate.burst(),
            concurrency: rate.concurrency,

            min_rollout_interval: rollout.min_rollout_interval,
            flap: rollout.flap(),
            max_concurrent_rollouts: rollout.max_concurrent_rollouts,
            rollout_deadline: rollout.rollout_deadline,
            restart_strategy: rollout.restart_strategy,
            agent_image: rollout.agent_image,

            leader_election: leader_election.into_config(),

            webhook: webhook.config(),
            max_gate_duration: webhook.max_gate_duration,

            metrics_address: observability.metrics_bind_address,
            health_address: observability.health_bind_address,
            log_format: observability.effective_log_format(),
            log_filter: observability.effective_log_level(),
            own_deployment: observability.own_deployment(),

            config_history: config_writes.config_history,
            legacy_wave_cleanup: config_writes.legacy_wave_cleanup,

            unread_reloader_env: RELOADER_ALERT_ENV
                .into_iter()
                .filter(|name| std::env::var_os(name).is_some())
                .collect(),
            alert: reloader.posts.alert().filter(|_| reloader.compat.reloader_compat),
            webhook_url: reloader
                .posts
                .webhook_url()
                .filter(|_| reloader.compat.reloader_compat),
            reloader: reloader.into_config(),

            build: BUILD,
        }
    }
}

impl Cli {
    /// Parses the process arguments (see [`normalize_args`]).
    pub fn parse_args() -> Self {
        let cli = Cli::parse_from(normalize_args(std::env::args_os().collect()));
        if let Command::Run(args) = &cli.command
            && let Err(why) = args.reloader.posts.check(args.reloader.compat.reloader_compat)
        {
            use clap::CommandFactory as _;
            Cli::command()
                .error(clap::error::ErrorKind::ValueValidation, why)
                .exit();
        }
        cli
    }
}

/// Makes Go `flag` syntax acceptable to clap: with no subcommand, flags mean `run`; for `run`, a
/// single-dash long flag (`-leader-election`) becomes `--leader-election`.
pub fn normalize_args(mut args: Vec<OsString>) -> Vec<OsString> {
    let first = args.get(1).and_then(|a| a.to_str()).map(str::to_string);
    if let Some(first) = &first {
        let top_level = ["-h", "--help", "-V", "--version", "-version"];
        if first.starts_with('-') && !top_level.contains(&first.as_str()) {
            args.insert(1, "run".into());
        }
        if first == "-version" {
            args[1] = "--version".into();
        }
    }
    if args.get(1).and_then(|a| a.to_str()) == Some("run") {
        for arg in args.iter_mut().skip(2) {
            if let Some(s) = arg.to_str()
                && s.len() > 2
                && s.starts_with('-')
                && !s.starts_with("--")
                && !s[1..].starts_with(|c: char| c.is_ascii_digit())
            {
                *arg = format!("-{s}").into();
            }
        }
    }
    args
}

/// Parses an address that cannot be disabled (the webhook's: `--enable-webhook` turns it off).
fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    BindAddress::parse_optional(s)?
        .ok_or_else(|| format!("{s:?} is not an address (use :9443 or 127.0.0.1:9443)"))
}

/// Parses `--update-rate`: a float, or `inf`/`+Inf`/`Inf` for no limit (Go's `ParseFloat` accepts these).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Ok(f64::INFINITY),
        _ => s
            .parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number (use e.g. 1.5, or inf for no limit)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> RunArgs {
        let args: Vec<OsString> = std::iter::once("wave")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect();
        match Cli::try_parse_from(normalize_args(args))
            .expect("valid arguments")
            .command
        {
            Command::Run(run) => *run,
            other => panic!("expected run, got {other:?}"),
        }
    }

    #[test]
    fn update_rate_accepts_go_infinity_spellings() {
        for s in ["+Inf", "Inf", "inf"] {
            assert_eq!(parse_rate(s), Ok(f64::INFINITY));
        }
        assert_eq!(parse_rate("2.5"), Ok(2.5));
        assert!(parse_rate("fast").unwrap_err().contains("not a number"));
    }

    #[test]
    fn reloader_flags_become_the_reloader_options_and_compatibility_is_off_by_default() {
        assert_eq!(parse(&["run"]).into_config().reloader, None);
        let config = parse(&["run", "--reloader-compat"]).into_config();
        assert_eq!(config.reloader, Some(wave_core::reloader::Options::default()));
        let config = parse(&[
            "run",
            "--reloader-compat=true",
            "--reload-strategy=annotations",
            "--auto-reload-all",
            "--resources-to-ignore=secrets",
        ])
        .into_config();
        let options = config.reloader.expect("on");
        assert_eq!(options.strategy, wave_core::reloader::Strategy::Annotations);
        assert!(options.auto_reload_all);
        assert_eq!(options.ignored_kinds, BTreeSet::from([ConfigKind::Secret]));
        assert_eq!(
            parse(&["run", "--reloader-compat=false"]).into_config().reloader,
            None
        );
        for flag in [
            "--auto-reload-all",
            "--reload-strategy=annotations",
            "--resources-to-ignore=secrets",
            "--reload-on-create",
            "--reload-on-delete",
            "--resource-label-selector=a=b",
        ] {
            let quiet = Cli::try_parse_from(["wave", "run", flag]);
            assert!(
                quiet.is_err_and(|e| e.to_string().contains("--reloader-compat")),
                "{flag} alone would do nothing: it asks for --reloader-compat"
            );
        }
        let bad = Cli::try_parse_from(["wave", "run", "--reloader-compat", "--reload-strategy=restart"]);
        assert!(
            bad.unwrap_err().to_string().contains("env-vars"),
            "names the accepted values"
        );
    }

    #[test]
    fn the_legacy_wave_cleanup_writes_config_only_when_asked() {
        assert!(!parse(&["run"]).into_config().legacy_wave_cleanup);
        assert!(
            parse(&["run", "--legacy-wave-cleanup"])
                .into_config()
                .legacy_wave_cleanup
        );
        assert!(
            parse(&["run", "--legacy-wave-cleanup=true"])
                .into_config()
                .legacy_wave_cleanup
        );
        assert!(
            !parse(&["run", "--legacy-wave-cleanup=false"])
                .into_config()
                .legacy_wave_cleanup
        );
    }

    #[test]
    fn wave_chart_arguments_parse_unchanged() {
        let run = parse(&[
            "--leader-election=true",
            "--leader-election-id=wave",
            "--leader-election-namespace=ops",
            "--sync-period=5m",
            "--update-rate=+Inf",
            "--update-burst=0",
            "--zap-encoder=json",
            "--zap-devel",
        ]);
        assert!(run.leader_election.leader_election);
        assert_eq!(
            run.leader_election.leader_election_namespace.as_deref(),
            Some("ops")
        );
        assert_eq!(run.watch.sync_period, Duration::from_secs(300));
        assert!(run.rate.update_rate.is_infinite());
        assert_eq!(run.rate.burst(), 100, "<= 0 means the default");
        assert_eq!(run.observability.effective_log_format(), LogFormat::Json);
    }

    #[test]
    fn single_dash_long_flags_and_bare_booleans_are_go_syntax() {
        let run = parse(&["run", "-leader-election", "-namespaces", "a,b", "-update-burst=5"]);
        assert!(run.leader_election.leader_election);
        assert_eq!(
            run.watch.namespace_set(),
            Some(["a".to_string(), "b".to_string()].into())
        );
        assert_eq!(run.rate.burst(), 5);
        let run = parse(&["run", "--leader-election=false"]);
        assert!(!run.leader_election.leader_election);
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value_as_in_go() {
        let run = parse(&[
            "run",
            "--log-level=debug",
            "--log-level=info",
            "--update-rate=2",
            "--update-rate=3",
        ]);
        assert_eq!(run.observability.log_level, "info");
        assert_eq!(run.rate.update_rate, 3.0);
        let run = parse(&["--leader-election=true", "--leader-election=false"]);
        assert!(!run.leader_election.leader_election);
    }

    #[test]
    fn namespaces_are_not_trimmed_and_empty_means_all() {
        assert_eq!(parse(&["run"]).watch.namespace_set(), None);
        let run = parse(&["run", "--namespaces=a, b"]);
        assert_eq!(
            run.watch.namespace_set(),
            Some(["a".to_string(), " b".to_string()].into())
        );
    }

    #[test]
    fn run_defaults_are_the_constants_the_rest_of_wave_assumes() {
        let config = parse(&["run"]).into_config();
        assert_eq!(config.update_rate, ratelimit::DEFAULT_RATE);
        assert_eq!(config.update_burst, ratelimit::DEFAULT_BURST);
        assert_eq!(config.min_rollout_interval, wave_core::coalesce::DEFAULT_INTERVAL);
        assert_eq!(config.flap, FlapPolicy::DEFAULT);
        assert_eq!(config.rollout_deadline, wave_core::pace::DEFAULT_ROLLOUT_DEADLINE);
        assert_eq!(
            config.max_gate_duration,
            crate::commands::DEFAULT_MAX_GATE,
            "wave explain assumes this gate timeout"
        );
        assert_eq!(config.cross_namespace, CrossNamespace::Deny);
    }

    #[test]
    fn the_command_tree_passes_clap_s_own_consistency_checks() {
        // Catches a `requires`, `conflicts_with` or `mut_arg` naming an argument that a regrouping
        // renamed or moved out of reach.
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
