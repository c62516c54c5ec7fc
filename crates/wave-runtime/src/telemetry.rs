//! Logging: `tracing` to stderr, as text or JSON lines, filtered by `--log-level`.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. A bad filter falls back to `info` with a warning.
pub fn init(format: LogFormat, level: &str) {
    let (filter, bad) = match EnvFilter::try_new(level) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Some(e) = bad {
        tracing::warn!(level, error = %e, "invalid log filter; using info");
    }
}
