//! Reloader compatibility's settings: the flags `--reloader-compat` brings, as [`Options`].

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::refs::ConfigKind;

/// How a reload is written (Reloader's `--reload-strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// An env var `STAKATER_<NAME>_<KIND>` holding the object's SHA-1, on the container that uses it.
    #[default]
    EnvVars,
    /// The pod-template annotation `reloader.stakater.com/last-reloaded-from`.
    Annotations,
}

impl Strategy {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::EnvVars => "env-vars",
            Strategy::Annotations => "annotations",
        }
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "env-vars" => Ok(Strategy::EnvVars),
            "annotations" => Ok(Strategy::Annotations),
            other => Err(format!(
                "unknown reload strategy {other:?}: expected \"env-vars\" or \"annotations\""
            )),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The settings of Reloader compatibility (`--reloader-compat` on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `--reload-strategy`.
    pub strategy: Strategy,
    /// `--auto-reload-all`: every workload whose `auto` annotations are unset behaves as `auto: "true"`.
    pub auto_reload_all: bool,
    /// `--resources-to-ignore`: the config kinds whose changes reload nothing.
    pub ignored_kinds: BTreeSet<ConfigKind>,
    /// `--resource-label-selector`: only ConfigMaps and Secrets whose labels it selects reload anything.
    pub resource_selector: Option<crate::selector::LabelSelector>,
    /// `--reload-on-create`: an object created while wave watched reloads the workloads it targets.
    pub reload_on_create: bool,
    /// `--reload-on-delete`: an object deleted while wave watched reloads them: its env var is removed,
    /// or `last-reloaded-from` names it with the SHA-1 of no data.
    pub reload_on_delete: bool,
    /// `--ignored-workload-types` names `cronjobs`: CronJobs start no Job on a reload.
    pub ignore_cron_jobs: bool,
    /// `--ignored-workload-types` names `jobs`: Jobs are not created again on a reload.
    pub ignore_jobs: bool,
    /// `--enable-csi-integration`, with the Secrets Store CSI driver's CRDs served: SecretProviderClass
    /// rotations reload the workloads that mount the class and ask for it (`csi`).
    pub csi: bool,
    /// `--webhook-url` is set: a change is posted there instead of reloading, so nothing is written and
    /// what a workload carries is no starting point (`plan`): a change counts from what wave saw.
    pub notify_only: bool,
}
