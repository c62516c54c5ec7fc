//! `hack/testenv down` leaves nothing of a real node behind: no process (a containerd shim lives in a
//! session of its own), no iptables chain or rule, no cgroup, no mount, no link, no path in the fixed
//! places the kubelet and containerd write to.
//!
//! A test binary of its own: it starts and stops a real node, and there is one per machine, so it
//! must not run beside the real-node tests (cargo runs test binaries one after another).

use std::process::Command;

use testenv::{Cluster, real_node_unsupported, repo_root};

/// What `hack/testenv leftovers` lists, one line each; `when_free`: once no real node runs.
fn leftovers(when_free: bool) -> Vec<String> {
    let out = Command::new(repo_root().join("hack/testenv"))
        .arg("leftovers")
        .args(when_free.then_some("--when-free"))
        .output()
        .expect("hack/testenv leftovers");
    assert!(
        out.status.success(),
        "hack/testenv leftovers failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn differences(before: &[String], after: &[String]) -> String {
    let gone = before.iter().filter(|l| !after.contains(l));
    let new = after.iter().filter(|l| !before.contains(l));
    gone.map(|l| format!("- {l}"))
        .chain(new.map(|l| format!("+ {l}")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_real_node_that_ran_a_pod_leaves_no_process_chain_cgroup_mount_link_or_path_behind() {
    if let Some(why) = real_node_unsupported() {
        eprintln!("skipped: no real node: {why}");
        return;
    }
    let before = leftovers(true);
    let dir = testenv::private_dir("wave-real-node-teardown");
    let cluster = Cluster::start_in(dir, &["--real-node", "--nodes", "0"]);
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox:testenv", "imagePullPolicy": "Never",
        "command": ["sleep", "3600"]}], "terminationGracePeriodSeconds": 1}}"#;
    let mut apply = cluster.kubectl();
    apply.args(["apply", "-f", "-"]);
    let applied = pipe(apply, pod);
    assert!(
        applied.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let ran = cluster
        .kubectl()
        .args([
            "wait",
            "-n",
            "default",
            "pod/sleeper",
            "--for=jsonpath={.status.phase}=Running",
            "--timeout=120s",
        ])
        .output()
        .expect("kubectl wait");
    assert!(
        ran.status.success(),
        "the pod never ran on the real node: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let during = leftovers(false);
    // The check can fail: while the node runs, it sees the bridge, the chains (its own and the
    // kubelet's), the cgroups, a kernel setting changed and the pod's shim.
    let seen = differences(&before, &during);
    for expected in [
        "link: wtenv0",
        "WAVE-TESTENV-NODE-IN",
        "KUBE-FIREWALL",
        "cgroup: ",
        "sysctl: net.ipv4.ip_forward",
        "containerd-shim-runc-v2",
    ] {
        assert!(
            seen.contains(expected),
            "leftovers did not see {expected:?} while the node ran:\n{seen}"
        );
    }
    cluster.stop();
    let after = leftovers(true);
    assert_eq!(
        before,
        after,
        "left behind by the real node:\n{}",
        differences(&before, &after)
    );
}

fn pipe(mut command: Command, input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}
