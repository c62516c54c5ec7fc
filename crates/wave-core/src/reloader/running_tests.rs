use serde_json::{Value, json};

use super::*;
use crate::kind::WorkloadKind;
use crate::workload::Workload;

fn deployment_running(image: &str, env: Value, replicas: Option<i64>) -> Workload {
    let mut w = crate::workload::testing::deployment(
        "tools",
        "something",
        &[],
        json!({"containers": [{"name": "main", "image": image, "env": env}]}),
    );
    w.progress.spec_replicas = replicas;
    w
}

#[test]
fn a_running_reloader_is_known_by_its_image_or_its_chart_s_env_var_and_not_when_scaled_to_zero() {
    for image in [
        "ghcr.io/stakater/reloader:v1.4.21",
        "stakater/reloader:v1.4.21-ubi",
        "docker.io/stakater/reloader",
        "registry.example.com:5000/mirror/stakater/reloader@sha256:0123",
    ] {
        assert!(
            runs_reloader(&deployment_running(image, json!([]), Some(1))),
            "{image}"
        );
    }
    let by_env = deployment_running(
        "registry.example.com/tools/config-reloader:1",
        json!([{"name": "RELOADER_DEPLOYMENT_NAME", "value": "reloader-reloader"}]),
        None,
    );
    assert!(runs_reloader(&by_env), "renamed image, the chart's env var");
    for image in [
        "ghcr.io/stakater/reloader-operator:v1",
        "example.com/notstakater/reloader:v1",
        "stakater/reloader-helper",
        "nginx",
    ] {
        assert!(
            !runs_reloader(&deployment_running(image, json!([]), Some(1))),
            "{image}"
        );
    }
    assert!(
        !runs_reloader(&deployment_running(
            "ghcr.io/stakater/reloader:v1.4.21",
            json!([]),
            Some(0)
        )),
        "scaled to zero: stopped, as docs/migrating-from-reloader.md says to"
    );
    let mut daemon = deployment_running("ghcr.io/stakater/reloader:v1.4.21", json!([]), Some(1));
    daemon.id.kind = WorkloadKind::DAEMON_SET;
    assert!(!runs_reloader(&daemon), "Reloader is shipped as a Deployment");
    let mut other = deployment_running("nginx", json!([]), Some(2));
    other.id.name = "web".into();
    let reloader = deployment_running("ghcr.io/stakater/reloader:v1.4.21", json!([]), Some(1));
    assert_eq!(
        running_reloaders([&other, &reloader]),
        std::slice::from_ref(&reloader.id)
    );
}
