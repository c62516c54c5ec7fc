//! Behaviour of ConfigWatcher against a real directory, including an exact simulation of the
//! kubelet's atomic writer. Every wait has a timeout; nothing sleeps to let time pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wave_reload::{ConfigWatcher, Reload};

const TIMEOUT: Duration = Duration::from_secs(10);
const DEBOUNCE: Duration = Duration::from_millis(40);

/// Two values written together: a reader that sees them differ saw a torn config.
#[derive(Debug, PartialEq, Eq)]
struct Pair {
    a: u64,
    b: u64,
}

fn parse(dir: &Path) -> Result<Pair, String> {
    let text = std::fs::read_to_string(dir.join("config")).map_err(|e| format!("reading config: {e}"))?;
    let mut a = None;
    let mut b = None;
    for line in text.lines() {
        match line.split_once('=') {
            Some(("a", v)) => a = v.parse().ok(),
            Some(("b", v)) => b = v.parse().ok(),
            _ => return Err(format!("bad line {line:?}")),
        }
    }
    Ok(Pair {
        a: a.ok_or("no a")?,
        b: b.ok_or("no b")?,
    })
}

fn pair(n: u64) -> String {
    format!("a={n}\nb={n}\n")
}

fn scratch(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let root = std::env::temp_dir().join(format!(
        "wave-reload-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("config-dir")).unwrap();
    root.join("config-dir")
}

/// Exactly what the kubelet's atomic writer does: write a new timestamped directory, point `..data_tmp`
/// at it, rename it over `..data`, create the user-visible symlinks once, delete the old directory.
fn atomic_write(dir: &Path, seq: u64, content: &str) {
    let ts = format!("..2026_11_22_{seq:06}.{:09}", seq * 7);
    std::fs::create_dir(dir.join(&ts)).unwrap();
    std::fs::write(dir.join(&ts).join("config"), content).unwrap();
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::os::unix::fs::symlink(&ts, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    if !dir.join("config").exists() {
        std::os::unix::fs::symlink("..data/config", dir.join("config")).unwrap();
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

/// A watcher on `dir` with the test debounce, and a subscription taken before anything changes.
fn watch(dir: &Path) -> (ConfigWatcher<Pair>, std::sync::mpsc::Receiver<Reload<Pair>>) {
    let watcher = ConfigWatcher::builder(dir, parse)
        .debounce(DEBOUNCE)
        .build()
        .unwrap();
    let rx = watcher.subscribe();
    (watcher, rx)
}

fn next_applied(rx: &std::sync::mpsc::Receiver<Reload<Pair>>) -> (u64, Arc<Pair>) {
    match rx.recv_timeout(TIMEOUT).expect("a reload within the timeout") {
        Reload::Applied { generation, config } => (generation, config),
        other => panic!("expected a reload, got {other:?}"),
    }
}

#[test]
fn every_atomic_swap_is_exactly_one_reload_and_readers_never_see_a_torn_config() {
    let dir = scratch("swap");
    atomic_write(&dir, 0, &pair(0));
    let watcher = Arc::new(
        ConfigWatcher::builder(&dir, parse)
            .debounce(DEBOUNCE)
            .build()
            .unwrap(),
    );
    let rx = watcher.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (w, stop) = (watcher.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let c = w.get();
                    assert_eq!(c.a, c.b, "torn config");
                    assert!(c.a >= last, "went backwards");
                    last = c.a;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    const SWAPS: u64 = 25;
    for n in 1..=SWAPS {
        atomic_write(&dir, n, &pair(n));
        let (generation, config) = next_applied(&rx);
        assert_eq!(
            (generation, config.a),
            (n, n),
            "one reload per swap, with the swapped content"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("no reader saw a torn config") > 0);
    }
    assert_eq!(*watcher.get(), Pair { a: SWAPS, b: SWAPS });
}

#[test]
fn plain_file_edits_reload() {
    let dir = scratch("plain");
    std::fs::write(dir.join("config"), pair(1)).unwrap();
    let (watcher, rx) = watch(&dir);
    std::fs::write(dir.join("config"), pair(22)).unwrap();
    let (generation, config) = next_applied(&rx);
    assert_eq!((generation, config.a), (1, 22));
    assert_eq!(watcher.get().b, 22);
}

#[test]
fn a_parse_failure_keeps_the_last_good_config_and_is_reported() {
    let dir = scratch("bad");
    atomic_write(&dir, 0, &pair(5));
    let (watcher, rx) = watch(&dir);
    atomic_write(&dir, 1, "this is not a config");
    match rx.recv_timeout(TIMEOUT).unwrap() {
        Reload::Failed { error } => assert!(error.contains("bad line"), "{error}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(*watcher.get(), Pair { a: 5, b: 5 }, "the last good config stays");
    atomic_write(&dir, 2, &pair(6));
    assert_eq!(next_applied(&rx).1.a, 6);
}

#[test]
fn the_initial_parse_error_is_returned() {
    let dir = scratch("initial");
    std::fs::write(dir.join("config"), "nonsense").unwrap();
    let err = ConfigWatcher::new(&dir, parse).err().expect("an error");
    assert!(
        err.to_string().contains("cannot load the initial config"),
        "{err}"
    );
}

#[test]
fn a_removed_directory_is_reported_and_its_return_reloads() {
    let dir = scratch("gone");
    atomic_write(&dir, 0, &pair(1));
    let (watcher, rx) = watch(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(rx.recv_timeout(TIMEOUT).unwrap(), Reload::DirectoryGone));
    assert_eq!(
        watcher.get().a,
        1,
        "the last config stays while the directory is gone"
    );
    std::fs::create_dir(&dir).unwrap();
    atomic_write(&dir, 1, &pair(2));
    assert_eq!(next_applied(&rx).1.a, 2);
}

#[test]
fn a_rename_storm_coalesces_and_ends_on_the_last_config() {
    let dir = scratch("storm");
    atomic_write(&dir, 0, &pair(0));
    let (watcher, rx) = watch(&dir);
    for n in 1..=100 {
        atomic_write(&dir, n, &pair(n));
    }
    let mut reloads = 0;
    loop {
        let (_, config) = next_applied(&rx);
        reloads += 1;
        if config.a == 100 {
            break;
        }
    }
    assert!(reloads < 100, "{reloads} reloads for 100 swaps: not coalesced");
    assert_eq!(*watcher.get(), Pair { a: 100, b: 100 });
}

#[test]
fn a_per_thread_reader_sees_every_reload() {
    let dir = scratch("reader");
    atomic_write(&dir, 0, &pair(0));
    let (watcher, rx) = watch(&dir);
    let mut reader = watcher.reader();
    assert_eq!(reader.get().a, 0);
    atomic_write(&dir, 1, &pair(1));
    next_applied(&rx);
    assert_eq!(**reader.get(), Pair { a: 1, b: 1 });
}
