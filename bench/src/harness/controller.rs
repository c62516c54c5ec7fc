//! The controllers under test: how each is started and how a workload opts in to it, and the process
//! figures read from `/proc` (RSS, CPU time) and from a Go controller's own `/metrics` (its heap).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The controllers the benchmark knows, in report order (wave first, so each ratio is wave's to a peer's).
pub const NAMES: [&str; 3] = ["wave", "wave-go", "reloader"];

/// One controller binary and how to run it.
#[derive(Clone, Debug)]
pub struct Profile {
    /// One of [`NAMES`].
    pub name: &'static str,
    /// The binary.
    pub bin: PathBuf,
    /// Its arguments (all write limits off, so the figures measure the controller, not its throttle).
    pub args: Vec<String>,
    /// Its arguments at its shipped defaults (write limits as it ships them), for the defaults pass.
    pub defaults: Vec<String>,
    /// A limit the controller cannot turn off, which its figures reflect rather than its design.
    pub fixed_limit: Option<&'static str>,
    /// That limit as requests per second, where it is one: waits for its backlog are scaled by it.
    pub fixed_rate: Option<f64>,
    /// The port of the Go runtime's `/metrics` on 127.0.0.1 (the peers; it cannot be moved by a flag).
    pub go_metrics_port: Option<u16>,
    /// The workload annotation that opts in.
    pub opt_in: (&'static str, &'static str),
    /// Whether it writes a hash onto every opted-in workload at start-up (Wave's model).
    pub hashes_at_start: bool,
    /// What it adds for S8 to pace rollouts and halt a failing config (nothing when it cannot).
    pub pacing: Vec<String>,
}

/// The controller binaries given; the peers are optional.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub wave: PathBuf,
    /// Wave v0.11.0, built outside this repository.
    pub wave_go: Option<PathBuf>,
    /// Stakater Reloader v1.4.21, built outside this repository.
    pub reloader: Option<PathBuf>,
}

/// The profiles to run, and the peers skipped for want of a binary; `bad_pacing` is wave's
/// `--max-concurrent-rollouts` for S8.
pub fn profiles(bins: &Binaries, bad_pacing: usize) -> (Vec<Profile>, Vec<String>) {
    let wave_opt_in = ("wave.pusher.com/update-on-config-change", "true");
    let wave_admin = vec![
        format!("--metrics-bind-address=127.0.0.1:{}", testenv::free_port()),
        format!("--health-bind-address=127.0.0.1:{}", testenv::free_port()),
        "--log-level=warn".into(),
    ];
    let mut run = vec![Profile {
        name: "wave",
        bin: bins.wave.clone(),
        args: [vec!["run".into(), "--update-rate=inf".into()], wave_admin.clone()].concat(),
        // Shipped: 1 write per second, burst 100 (Wave's defaults).
        defaults: [vec!["run".into()], wave_admin].concat(),
        fixed_limit: None,
        fixed_rate: None,
        go_metrics_port: None,
        opt_in: wave_opt_in,
        hashes_at_start: true,
        pacing: vec![format!("--max-concurrent-rollouts={}", bad_pacing)],
    }];
    let mut skipped = Vec::new();
    match &bins.wave_go {
        // Wave's metrics server binds :8080 and cannot be moved by a flag.
        Some(bin) => run.push(Profile {
            name: "wave-go",
            bin: bin.clone(),
            args: vec!["-update-rate=+Inf".into(), "-zap-log-level=error".into()],
            // Shipped: 1 write per second, burst 100.
            defaults: vec!["-zap-log-level=error".into()],
            fixed_limit: None,
            fixed_rate: None,
            go_metrics_port: Some(8080),
            opt_in: wave_opt_in,
            hashes_at_start: true,
            pacing: Vec::new(),
        }),
        None => skipped.push("wave-go (Wave v0.11.0): set WAVE_GO_BIN".to_string()),
    }
    match &bins.reloader {
        // Reloader's HTTP server binds :9090 and cannot be moved by a flag.
        Some(bin) => run.push(Profile {
            name: "reloader",
            bin: bin.clone(),
            args: vec!["--reload-strategy=annotations".into(), "--log-level=error".into()],
            // Shipped: the env-vars strategy; no write limit of its own.
            defaults: vec!["--log-level=error".into()],
            // NOTE: Reloader builds its client with client-go's defaults (rest.Config QPS 5, burst 10)
            // and has no flag to change them, so every figure that needs many writes is bounded by
            // them. https://github.com/stakater/Reloader/blob/v1.4.21/pkg/kube/client.go (`getConfig`)
            fixed_limit: Some("client-go's default of 5 requests/s, burst 10 (no flag changes it)"),
            fixed_rate: Some(5.0),
            go_metrics_port: Some(9090),
            opt_in: ("reloader.stakater.com/auto", "true"),
            hashes_at_start: false,
            pacing: Vec::new(),
        }),
        None => skipped.push("reloader (Stakater Reloader v1.4.21): set RELOADER_BIN".to_string()),
    }
    (run, skipped)
}

impl Profile {
    /// How long a controller held to a request rate it cannot lift (Reloader: 5/s) needs for `reloads`
    /// reloads (an update and an Event each) past what the others need; zero for the others. Waits that
    /// end when the writes stop add it, so that such a figure shows the backlog drained, not a wait cut
    /// short.
    pub fn backlog(&self, reloads: u64) -> std::time::Duration {
        /// What one reload costs a rate-limited controller: the workload's update and its Event.
        const REQUESTS_PER_RELOAD: f64 = 2.0;
        self.fixed_rate.map_or(std::time::Duration::ZERO, |rate| {
            std::time::Duration::from_secs_f64(reloads as f64 * REQUESTS_PER_RELOAD / rate)
        })
    }

    /// The same controller at its shipped defaults.
    pub fn at_defaults(&self) -> Profile {
        Profile {
            args: self.defaults.clone(),
            ..self.clone()
        }
    }
}

/// A running controller, stopped (by PID) on drop.
pub struct Running {
    child: Child,
}

impl Running {
    /// Starts `profile` with `kubeconfig`, its output appended to `log`.
    pub fn start(profile: &Profile, kubeconfig: &Path, log: &Path) -> std::io::Result<Running> {
        Self::start_with(profile, &[], kubeconfig, log)
    }

    /// Starts `profile` with `extra` arguments.
    pub fn start_with(
        profile: &Profile,
        extra: &[String],
        kubeconfig: &Path,
        log: &Path,
    ) -> std::io::Result<Running> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let child = Command::new(&profile.bin)
            .args(&profile.args)
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(file.try_clone()?)
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()?;
        Ok(Running { child })
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it with SIGTERM (then SIGKILL after 10 s) and waits.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.is_alive() {
            self.terminate();
        }
    }
}

/// Resident memory now and at its peak, in bytes (`VmRSS`, `VmHWM`).
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    rss_of_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// `VmRSS` and `VmHWM` of a `/proc/PID/status` text, the peak never below the current figure: the
/// kernel folds each thread's cached RSS count into the process's lazily and raises the high-water mark
/// only at certain points, so `VmHWM` can trail `VmRSS` by a little (a Go peer's round read 548.0
/// against 548.2 MiB).
fn rss_of_status(status: &str) -> Option<(u64, u64)> {
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let rss = kib("VmRSS:")? * 1024;
    Some((rss, (kib("VmHWM:")? * 1024).max(rss)))
}

/// User plus system CPU time so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The Go heap a peer reports on its `/metrics`: `(go_memstats_heap_inuse_bytes,
/// go_memstats_heap_alloc_bytes)`, or `None` when it serves none.
pub fn go_heap(port: u16) -> Option<(u64, u64)> {
    let (status, body) = testenv::http_get(port, "/metrics")?;
    if status != 200 {
        return None;
    }
    let metric = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    };
    Some((
        metric("go_memstats_heap_inuse_bytes")?,
        metric("go_memstats_heap_alloc_bytes")?,
    ))
}

/// The lowercase hex SHA-256 of a file (a controller binary, recorded with the results).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(std::fs::read(path)?);
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_high_water_mark_that_trails_the_current_rss_reads_as_the_current_rss() {
        let status = |hwm: u64| format!("Name:\treloader\nVmHWM:\t {hwm} kB\nVmRSS:\t  561357 kB\n");
        assert_eq!(
            rss_of_status(&status(561152)),
            Some((561357 * 1024, 561357 * 1024))
        );
        assert_eq!(
            rss_of_status(&status(600000)),
            Some((561357 * 1024, 600000 * 1024))
        );
        assert_eq!(rss_of_status("Name:\twave\n"), None);
    }
}
