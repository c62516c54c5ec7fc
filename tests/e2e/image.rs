//! The release binary that goes into the image: statically linked, and it runs from an empty root
//! directory (no libraries, no shell, no writable file system) as uid 65532.
//!
//! Needs the static build: `make test` builds it (`make static`) and sets `WAVE_STATIC_BIN`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use testenv::{cluster, free_port, http_get, wait_for};

use crate::harness::TIMEOUT;

fn static_bin() -> Option<PathBuf> {
    match std::env::var_os("WAVE_STATIC_BIN") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("skipped: set WAVE_STATIC_BIN to the static release binary (make test does)");
            None
        }
    }
}

fn b64(path: &Path) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
}

#[tokio::test]
async fn the_static_binary_serves_livez_from_an_empty_root_as_a_non_root_user() {
    let Some(bin) = static_bin() else { return };
    let ldd = Command::new("ldd").arg(&bin).output().unwrap();
    let ldd = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    assert!(
        ldd.contains("statically linked") || ldd.contains("not a dynamic executable"),
        "{ldd}"
    );

    let client = cluster().client().await;
    let ns = testenv::namespace(&client, "image").await;
    // The root holds the binary and a kubeconfig with everything inline, nothing else.
    let root = std::env::temp_dir().join(format!("wave-root-{ns}"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(&bin, root.join("wave")).unwrap();
    let pki = cluster().dir().join("pki");
    let port = cluster().api_port();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: \"https://127.0.0.1:{}\", certificate-authority-data: {}}}\n\
         users:\n- name: u\n  user: {{client-certificate-data: {}, client-key-data: {}}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: u}}\ncurrent-context: t\n",
        port,
        b64(&pki.join("ca.crt")),
        b64(&pki.join("admin.crt")),
        b64(&pki.join("admin.key")),
    );
    std::fs::write(root.join("kubeconfig"), kubeconfig).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("kubeconfig"), std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o555)).unwrap();

    let health = free_port();
    let mut child = Command::new("/usr/sbin/chroot")
        .args(["--userspec=65532:65532", root.to_str().unwrap(), "/wave", "run"])
        .arg(format!("--namespaces={ns}"))
        .arg(format!("--health-bind-address=127.0.0.1:{health}"))
        .arg("--metrics-bind-address=0")
        .env_clear()
        .env("KUBECONFIG", "/kubeconfig")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chroot (the test runs as root, as CI does)");
    let live = wait_for("/livez from the chrooted binary", TIMEOUT, || async {
        http_get(health, "/livez")
            .filter(|(s, _)| *s == 200)
            .map(|(_, b)| b)
    })
    .await;
    assert_eq!(live, "ok");
    wait_for("/readyz from the chrooted binary", TIMEOUT, || async {
        http_get(health, "/readyz").filter(|(s, _)| *s == 200).map(|_| ())
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = std::fs::remove_dir_all(root);
}
