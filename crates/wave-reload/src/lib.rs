//! Reload configuration from a mounted ConfigMap or Secret directory while the program runs.
//!
//! ```text
//! kubelet atomic writer                       ConfigWatcher thread                     readers
//! ..2026_11_22_xx/ (new files, complete)      inotify on DIR and its parent
//! ..data_tmp -> ..2026_11_22_xx               events ─► debounce window (quiet period)
//! rename ..data_tmp ..data   ─────────────►   version = readlink(..data)                get() -> Arc<T>
//! rm -r ..<old timestamp>                      (plain dirs: names, sizes, mtimes)        (lock-free load)
//!                                              changed? ─► parse(DIR) ─► ArcSwap::store
//!                                                                    └─► subscribers: Reload
//! ```
//!
//! The kubelet never edits mounted files in place: it writes a new timestamped directory, points
//! `..data_tmp` at it and renames that over `..data`, then deletes the old directory; the visible files
//! are symlinks through `..data`. So a config is complete exactly when `..data` points at a new
//! directory, and that target is the version: one swap is one reload, however many inotify events it
//! makes. Plain directories (development, non-Kubernetes use) are versioned by their files' names, sizes
//! and modification times, and a burst of edits within the debounce window is one reload.
//!
//! A parse failure keeps the last good config and is reported to subscribers and through `tracing`. A
//! directory that disappears is reported, and watched for through its parent until it returns.
//!
//! Limits, from Kubernetes: `subPath` mounts never update, and Secrets or ConfigMaps used as environment
//! variables never update. For those, roll the workload on change instead (`wave run`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};

/// The default quiet period that ends a burst of file events.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);

/// Why the watcher could not start.
#[derive(Debug)]
pub enum Error {
    /// The first parse failed; the message is the parser's.
    Parse(String),
    /// The directory or its parent cannot be watched.
    Watch {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: notify::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Parse(e) => write!(f, "cannot load the initial config: {e}"),
            Error::Watch { path, .. } => write!(f, "cannot watch {}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Parse(_) => None,
            Error::Watch { source, .. } => Some(source),
        }
    }
}

/// What happened to the watched directory.
#[derive(Debug)]
pub enum Reload<T> {
    /// A new config is in use. `generation` counts successful loads, the initial one being 0.
    Applied {
        /// Successful loads so far.
        generation: u64,
        /// The config now returned by `get()`.
        config: Arc<T>,
    },
    /// Parsing the changed directory failed; the previous config stays in use.
    Failed {
        /// The parser's message.
        error: String,
    },
    /// The directory disappeared; the previous config stays in use until it returns.
    DirectoryGone,
}

/// A config loaded from a directory and kept current. Dropping it stops the watch.
pub struct ConfigWatcher<T> {
    current: Arc<ArcSwap<T>>,
    subscribers: Arc<Mutex<Vec<Sender<Reload<T>>>>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Options for [`ConfigWatcher`].
pub struct Builder<T, F> {
    dir: PathBuf,
    parse: F,
    debounce: Duration,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T, E, F> Builder<T, F>
where
    T: Send + Sync + 'static,
    E: fmt::Display,
    F: Fn(&Path) -> Result<T, E> + Send + 'static,
{
    /// The quiet period after the last file event before the directory is read (default 100 ms).
    #[must_use]
    pub fn debounce(mut self, window: Duration) -> Self {
        self.debounce = window;
        self
    }

    /// Loads the config once (an error is returned) and starts watching.
    pub fn build(self) -> Result<ConfigWatcher<T>, Error> {
        let dir = self.dir;
        let initial = (self.parse)(&dir).map_err(|e| Error::Parse(e.to_string()))?;
        let current = Arc::new(ArcSwap::from_pointee(initial));
        let subscribers: Arc<Mutex<Vec<Sender<Reload<T>>>>> = Arc::default();
        let (events_tx, events_rx) = mpsc::channel::<()>();
        let tx = events_tx.clone();
        let mut watcher = notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
            let _ = tx.send(());
        })
        .map_err(|source| Error::Watch {
            path: dir.clone(),
            source,
        })?;
        let parent = dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        watcher
            .watch(&parent, RecursiveMode::NonRecursive)
            .map_err(|source| Error::Watch {
                path: parent.clone(),
                source,
            })?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|source| Error::Watch {
                path: dir.clone(),
                source,
            })?;
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let state = Loop {
            dir: dir.clone(),
            parse: self.parse,
            debounce: self.debounce,
            current: current.clone(),
            subscribers: subscribers.clone(),
            watcher,
            version: version_of(&dir),
            present: true,
            generation: 0,
        };
        let thread = std::thread::Builder::new()
            .name("wave-reload".into())
            .spawn(move || state.run(&events_rx, &stop_rx))
            .expect("spawning the watch thread");
        drop(events_tx);
        Ok(ConfigWatcher {
            current,
            subscribers,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl<T: Send + Sync + 'static> ConfigWatcher<T> {
    /// Loads `parse(dir)` once, returning its error, and keeps it current as the directory changes.
    pub fn new<E, F>(dir: impl Into<PathBuf>, parse: F) -> Result<Self, Error>
    where
        E: fmt::Display,
        F: Fn(&Path) -> Result<T, E> + Send + 'static,
    {
        Self::builder(dir, parse).build()
    }

    /// A builder, to set the debounce window.
    pub fn builder<E, F>(dir: impl Into<PathBuf>, parse: F) -> Builder<T, F>
    where
        E: fmt::Display,
        F: Fn(&Path) -> Result<T, E> + Send + 'static,
    {
        Builder {
            dir: dir.into(),
            parse,
            debounce: DEFAULT_DEBOUNCE,
            _t: std::marker::PhantomData,
        }
    }

    /// The current config. Lock-free: readers never wait for each other or for a reload.
    pub fn get(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// The current config without touching its reference count: the fastest read, for hot paths that
    /// do not keep the config beyond the guard's scope.
    pub fn read(&self) -> arc_swap::Guard<Arc<T>> {
        self.current.load()
    }

    /// A per-thread reader: the fastest way to read in a loop. It keeps the current `Arc` and only
    /// looks at the shared pointer to see whether a reload happened, so reads from many threads never
    /// touch a shared cache line.
    pub fn reader(&self) -> Reader<T> {
        Reader {
            cache: arc_swap::Cache::new(self.current.clone()),
        }
    }

    /// A stream of what happens from now on.
    pub fn subscribe(&self) -> Receiver<Reload<T>> {
        let (tx, rx) = mpsc::channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        rx
    }
}

/// A per-thread handle to the current config (see [`ConfigWatcher::reader`]).
pub struct Reader<T> {
    cache: arc_swap::Cache<Arc<ArcSwap<T>>, Arc<T>>,
}

impl<T> Reader<T> {
    /// The current config.
    pub fn get(&mut self) -> &Arc<T> {
        self.cache.load()
    }
}

impl<T> Drop for ConfigWatcher<T> {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What identifies the directory's content without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Version {
    /// Kubernetes atomic-writer layout: the target of `..data`.
    Swapped(PathBuf),
    /// A plain directory: every visible file's name, size and modification time.
    Files(Vec<(String, u64, Option<SystemTime>)>),
}

fn version_of(dir: &Path) -> Option<Version> {
    if let Ok(target) = std::fs::read_link(dir.join("..data")) {
        return Some(Version::Swapped(target));
    }
    let entries = std::fs::read_dir(dir).ok()?;
    let mut files: Vec<(String, u64, Option<SystemTime>)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                return None;
            }
            let meta = std::fs::metadata(e.path()).ok()?;
            meta.is_file().then(|| (name, meta.len(), meta.modified().ok()))
        })
        .collect();
    files.sort();
    Some(Version::Files(files))
}

struct Loop<T, F> {
    dir: PathBuf,
    parse: F,
    debounce: Duration,
    current: Arc<ArcSwap<T>>,
    subscribers: Arc<Mutex<Vec<Sender<Reload<T>>>>>,
    watcher: RecommendedWatcher,
    version: Option<Version>,
    present: bool,
    generation: u64,
}

impl<T, E, F> Loop<T, F>
where
    E: fmt::Display,
    F: Fn(&Path) -> Result<T, E>,
{
    fn run(mut self, events: &Receiver<()>, stop: &Receiver<()>) {
        loop {
            // Wait for the first event of a burst, checking for shutdown now and then.
            match events.recv_timeout(Duration::from_millis(200)) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if matches!(stop.try_recv(), Err(mpsc::TryRecvError::Disconnected) | Ok(())) {
                        return;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // The burst ends after a quiet window.
            loop {
                match events.recv_timeout(self.debounce) {
                    Ok(()) => continue,
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            if matches!(stop.try_recv(), Err(mpsc::TryRecvError::Disconnected) | Ok(())) {
                return;
            }
            self.settle();
        }
    }

    fn settle(&mut self) {
        if !self.dir.is_dir() {
            if self.present {
                self.present = false;
                tracing::warn!(dir = %self.dir.display(), "config directory disappeared; keeping the last config");
                self.notify(|| Reload::DirectoryGone);
            }
            return;
        }
        if !self.present {
            // The old inotify watch died with the directory; watch the new one.
            if let Err(e) = self.watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot watch the returned directory");
                return;
            }
            self.present = true;
            tracing::info!(dir = %self.dir.display(), "config directory is back");
        }
        let version = version_of(&self.dir);
        if version == self.version {
            return;
        }
        self.version = version;
        match (self.parse)(&self.dir) {
            Ok(config) => {
                let config = Arc::new(config);
                self.current.store(config.clone());
                self.generation += 1;
                let generation = self.generation;
                tracing::info!(dir = %self.dir.display(), generation, "config reloaded");
                self.notify(|| Reload::Applied {
                    generation,
                    config: config.clone(),
                });
            }
            Err(e) => {
                let error = e.to_string();
                tracing::warn!(dir = %self.dir.display(), %error, "config reload failed; keeping the last good config");
                self.notify(|| Reload::Failed { error: error.clone() });
            }
        }
    }

    fn notify(&self, event: impl Fn() -> Reload<T>) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|s| s.send(event()).is_ok());
    }
}
