//! A test binary that dies — panicking, interrupted or SIGKILLed — leaves no control plane behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use testenv::{cluster, is_alive, wait_for};

/// Run only as the child of the test below: starts a cluster, reports it, then blocks until killed.
#[test]
#[ignore = "the child process of a_sigkilled_test_binary_leaves_no_processes_behind"]
fn child_holding_a_cluster() {
    let c = cluster();
    println!("DIR={}", c.dir().display());
    // Block on stdin, which the parent never closes before killing us.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[tokio::test]
async fn a_sigkilled_test_binary_leaves_no_processes_behind() {
    let me = std::env::current_exe().unwrap();
    let mut child = Command::new(me)
        .args(["--ignored", "--exact", "child_holding_a_cluster", "--nocapture"])
        .env_remove("TESTENV_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let dir = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("DIR=").map(std::path::PathBuf::from))
        .expect("the child reports its cluster");
    let pids: Vec<u32> = std::fs::read_to_string(dir.join("pids"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' ')?.1.parse().ok())
        .collect();
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler, kwok"
    );
    assert!(
        pids.iter().all(|p| is_alive(*p)),
        "every component runs while the child lives"
    );

    child.kill().unwrap(); // SIGKILL: no destructor, no panic hook, no atexit runs.
    child.wait().unwrap();
    wait_for(
        "every component to stop and the run directory to go",
        Duration::from_secs(30),
        || async { (pids.iter().all(|p| !is_alive(*p)) && !dir.exists()).then_some(()) },
    )
    .await;
    let out = Command::new("ps").args(["-eo", "pid="]).output().unwrap();
    let running: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    for pid in &pids {
        assert!(
            !running.contains(pid) || !is_alive(*pid),
            "pid {pid} still running according to ps"
        );
    }
}
