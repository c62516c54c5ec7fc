//! `get()` and `read()` against `Mutex<Arc<T>>` and `RwLock<Arc<T>>`, with 1, 2 and 8 reader threads.
//! Each iteration measures one read per thread, all threads reading at once; the figure is wall time
//! per read per thread, so with more threads than cores it also counts time spent descheduled.

use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use wave_reload::ConfigWatcher;

#[derive(Debug)]
struct Config {
    message: String,
}

/// Runs `read` on `threads` threads, `iters` times each; returns the mean time per read.
fn contended(threads: usize, iters: u64, read: Arc<dyn Fn() + Send + Sync>) -> Duration {
    per_thread(
        threads,
        iters,
        Arc::new(move || {
            let r = read.clone();
            Box::new(move || r()) as Box<dyn FnMut() + Send>
        }),
    )
}

/// Like `contended`, with per-thread state: each thread makes its own reader first.
fn per_thread(
    threads: usize,
    iters: u64,
    make: Arc<dyn Fn() -> Box<dyn FnMut() + Send> + Send + Sync>,
) -> Duration {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (b, make) = (barrier.clone(), make.clone());
            std::thread::spawn(move || {
                let mut r = make();
                b.wait();
                let t = Instant::now();
                for _ in 0..iters {
                    r();
                }
                t.elapsed()
            })
        })
        .collect();
    let total: Duration = handles.into_iter().map(|h| h.join().unwrap()).sum();
    total / threads as u32
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("wave-reload-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("message"), "hello").unwrap();
    let watcher = Arc::new(
        ConfigWatcher::new(&dir, |d: &std::path::Path| {
            std::fs::read_to_string(d.join("message")).map(|message| Config { message })
        })
        .unwrap(),
    );
    let mutex = Arc::new(Mutex::new(Arc::new(Config {
        message: "hello".into(),
    })));
    let rwlock = Arc::new(RwLock::new(Arc::new(Config {
        message: "hello".into(),
    })));

    for threads in [1usize, 2, 8] {
        let mut group = c.benchmark_group(format!("read/{threads}-threads"));
        // The harness itself (a dynamic call per read): subtract it to get the cost of a read.
        let noop: Arc<dyn Fn() + Send + Sync> = Arc::new(|| black_box(()));
        group.bench_function("harness_noop", |b| {
            b.iter_custom(|iters| contended(threads, iters, noop.clone()))
        });
        let w = watcher.clone();
        let get: Arc<dyn Fn() + Send + Sync> = Arc::new(move || drop(black_box(w.get())));
        group.bench_function("wave_reload_get", |b| {
            b.iter_custom(|iters| contended(threads, iters, get.clone()))
        });
        let w = watcher.clone();
        let read: Arc<dyn Fn() + Send + Sync> = Arc::new(move || drop(black_box(w.read())));
        group.bench_function("wave_reload_read", |b| {
            b.iter_custom(|iters| contended(threads, iters, read.clone()))
        });
        let w = watcher.clone();
        let reader: Arc<dyn Fn() -> Box<dyn FnMut() + Send> + Send + Sync> = Arc::new(move || {
            let mut reader = w.reader();
            Box::new(move || {
                black_box(reader.get().message.len());
            })
        });
        group.bench_function("wave_reload_reader", |b| {
            b.iter_custom(|iters| per_thread(threads, iters, reader.clone()))
        });
        let m = mutex.clone();
        let lock: Arc<dyn Fn() + Send + Sync> = Arc::new(move || drop(black_box(m.lock().unwrap().clone())));
        group.bench_function("mutex_arc", |b| {
            b.iter_custom(|iters| contended(threads, iters, lock.clone()))
        });
        let r = rwlock.clone();
        let rw: Arc<dyn Fn() + Send + Sync> = Arc::new(move || drop(black_box(r.read().unwrap().clone())));
        group.bench_function("rwlock_arc", |b| {
            b.iter_custom(|iters| contended(threads, iters, rw.clone()))
        });
        group.finish();
    }
    drop(watcher);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
