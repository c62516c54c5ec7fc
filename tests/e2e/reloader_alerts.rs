//! Stakater Reloader's alerts (`--alert-on-reload`, its `ALERT_*` settings) and `--webhook-url`, against
//! local HTTP receivers that record every request: each sink gets Reloader's payload after the reload, a
//! failing sink is retried, then counted, and never stops a later reload; the proxy is reached with
//! CONNECT; `--webhook-url` posts once per change and writes nothing. The expected bodies are written
//! out here as Reloader v1.4.21 sends them (Go's encoding of the map gorequest builds), not with wave's
//! code. No URL, which for a chat webhook is its token, appears in wave's output.

use std::sync::{Arc, Mutex};

use serde_json::json;
use testenv::wait_for;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wave_core::workload::WorkloadKind;

use crate::harness::*;
use crate::reloader::{env_of, reloader_sha};

/// What a receiver was sent.
#[derive(Clone, Debug)]
struct Received {
    /// `POST /path HTTP/1.1`.
    request_line: String,
    content_type: String,
    body: String,
}

/// An HTTP server on 127.0.0.1 that records each request and answers the given statuses in turn (the
/// last one for ever after). One request per connection (`Connection: close`).
struct Receiver {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

/// The head of an HTTP message, read byte by byte up to its blank line (nothing past it is consumed).
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

impl Receiver {
    async fn start(statuses: &[u16]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a receiver");
        let port = listener.local_addr().unwrap().port();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let (log, statuses) = (received.clone(), statuses.to_vec());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let Some(head) = read_head(&mut stream).await else {
                    continue;
                };
                let length: usize = header(&head, "content-length")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                if stream.read_exact(&mut body).await.is_err() {
                    continue;
                }
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(Received {
                        request_line: head.lines().next().unwrap_or_default().to_string(),
                        content_type: header(&head, "content-type").unwrap_or_default().to_string(),
                        body: String::from_utf8_lossy(&body).into_owned(),
                    });
                    log.len()
                };
                let status = statuses.get(n - 1).or(statuses.last()).copied().unwrap_or(200);
                let answer =
                    format!("HTTP/1.1 {status} Answer\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        Receiver { port, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    async fn wait_for_requests(&self, n: usize) -> Vec<Received> {
        wait_for(&format!("{n} requests at the receiver"), TIMEOUT, || async {
            let got = self.received();
            (got.len() >= n).then_some(got)
        })
        .await
    }
}

/// One `CONNECT` a proxy took: its target and its `Proxy-Authorization`.
type Connect = (String, Option<String>);

/// An HTTP proxy on 127.0.0.1 that takes `CONNECT host:port` and records each one.
struct Proxy {
    port: u16,
    connects: Arc<Mutex<Vec<Connect>>>,
}

impl Proxy {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a proxy");
        let port = listener.local_addr().unwrap().port();
        let connects: Arc<Mutex<Vec<Connect>>> = Arc::default();
        let log = connects.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let Some(head) = read_head(&mut client).await else {
                        return;
                    };
                    let target = head
                        .lines()
                        .next()
                        .and_then(|l| l.strip_prefix("CONNECT "))
                        .and_then(|l| l.split_whitespace().next())
                        .unwrap_or_default()
                        .to_string();
                    let auth = header(&head, "proxy-authorization").map(str::to_string);
                    log.lock().unwrap().push((target.clone(), auth));
                    // Only this machine's loopback is ever dialled.
                    if !target.starts_with("127.0.0.1:") {
                        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
                        return;
                    }
                    let Ok(mut upstream) = TcpStream::connect(&target).await else {
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .is_ok()
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Proxy { port, connects }
    }
}

/// The part of each URL that a chat webhook keeps secret: it must never reach wave's output.
const TOKEN: &str = "T0KEN-7d1c";

/// A namespace with ConfigMap `cfg` and Deployment `web` reloading on it (`reloader.stakater.com/auto`),
/// and wave started with `flags`, having checked `web` once.
async fn reloading_web(prefix: &str, flags: &[&str]) -> (kube::Client, String, Wave) {
    let (client, ns) = setup(prefix).await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    crate::reloader_parity::create_auto(&client, &ns, WorkloadKind::DEPLOYMENT, "web", "cfg").await;
    let mut all = vec!["--reloader-compat", "--min-rollout-interval=0s"];
    all.extend(flags);
    let wave = Wave::start(&[&ns], &all).await;
    wait_for("wave to check web", TIMEOUT, || async {
        (wave.noops() >= 1).then_some(())
    })
    .await;
    (client, ns, wave)
}

async fn wait_reloaded(client: &kube::Client, ns: &str, version: &str) {
    let sha = reloader_sha(&[("k", version)]);
    wait_for(&format!("web reloaded for {version}"), TIMEOUT, || async {
        let env = env_of(client, ns, WorkloadKind::DEPLOYMENT, "web", "app").await;
        (env == [("STAKATER_CFG_CONFIGMAP".to_string(), sha.clone())]).then_some(())
    })
    .await;
}

/// Reloader's message for `web` reloaded by ConfigMap `cfg` in `ns`.
fn message(ns: &str) -> String {
    format!(
        "Reloader detected changes in *cfg* of type *CONFIGMAP* in namespace *{ns}*. Hence reloaded *web* of type *Deployment* in namespace *{ns}*"
    )
}

#[tokio::test]
async fn each_alert_sink_gets_reloader_s_payload_once_the_reload_is_written() {
    for (sink, content_type) in [
        ("slack", "application/json"),
        ("teams", "application/json"),
        ("gchat", "application/json"),
        ("raw", "text/plain"),
    ] {
        let receiver = Receiver::start(&[200]).await;
        let url = format!(
            "--alert-webhook-url={}",
            receiver.url(&format!("/services/{TOKEN}"))
        );
        let sink_flag = format!("--alert-sink={sink}");
        let (client, ns, wave) = reloading_web(
            &format!("alert-{sink}"),
            &[
                "--alert-on-reload",
                &sink_flag,
                &url,
                "--alert-additional-info=cluster <eu> & co",
            ],
        )
        .await;
        assert!(
            receiver.received().is_empty(),
            "{sink}: nothing is posted before a reload"
        );
        patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
        wait_reloaded(&client, &ns, "v2").await;
        let got = receiver.wait_for_requests(1).await;
        let text = format!("cluster \\u003ceu\\u003e \\u0026 co : {}", message(&ns));
        let expected = match sink {
            "slack" => {
                format!(r#"{{"attachments":[{{"author_name":"Reloader","color":"good","text":"{text}"}}]}}"#)
            }
            "teams" | "gchat" => format!(r#"{{"text":"{text}"}}"#),
            _ => format!("cluster <eu> & co : {}", message(&ns)).replace('*', ""),
        };
        assert_eq!(
            got[0].request_line,
            format!("POST /services/{TOKEN} HTTP/1.1"),
            "{sink}"
        );
        assert_eq!(got[0].content_type, content_type, "{sink}");
        assert_eq!(got[0].body, expected, "{sink}: Reloader's payload, byte for byte");
        wait_for(&format!("{sink}: the alert counted as sent"), TIMEOUT, || async {
            (wave.metric(
                "wave_alerts_total",
                &[&format!("sink=\"{sink}\""), "result=\"sent\""],
            ) == 1.0)
                .then_some(())
        })
        .await;
        assert_eq!(receiver.received().len(), 1, "{sink}: one reload, one alert");
        assert!(
            !wave.output().contains(TOKEN),
            "{sink}: the URL never reaches the log"
        );
    }
}

#[tokio::test]
async fn a_refused_alert_is_retried_and_a_sink_that_keeps_failing_is_counted_and_stops_no_reload() {
    // Answers 500, then 200: the second attempt delivers it.
    let flaky = Receiver::start(&[500, 200]).await;
    let url = format!("--alert-webhook-url={}", flaky.url(&format!("/{TOKEN}")));
    let (client, ns, wave) = reloading_web("alert-retry", &["--alert-on-reload", &url]).await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    wait_reloaded(&client, &ns, "v2").await;
    let got = flaky.wait_for_requests(2).await;
    assert_eq!(got[0].body, got[1].body, "the same alert, tried again");
    wait_for("the retried alert counted as sent", TIMEOUT, || async {
        (wave.metric("wave_alerts_total", &["result=\"sent\""]) == 1.0).then_some(())
    })
    .await;

    // Always 503: three attempts, then counted as failed; reloads go on meanwhile and after.
    let down = Receiver::start(&[503]).await;
    let url = format!("--alert-webhook-url={}", down.url(&format!("/{TOKEN}")));
    let (client, ns, wave) =
        reloading_web("alert-down", &["--alert-on-reload", "--alert-sink=teams", &url]).await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    wait_reloaded(&client, &ns, "v2").await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v3"}})).await;
    wait_reloaded(&client, &ns, "v3").await;
    wave.expect_writes(2, "both reloads written, whatever the sink does")
        .await;
    wait_for("both alerts counted as failed", TIMEOUT, || async {
        (wave.metric("wave_alerts_total", &["sink=\"teams\"", "result=\"failed\""]) == 2.0).then_some(())
    })
    .await;
    assert_eq!(down.received().len(), 6, "three attempts per alert, no more");
    let output = wave.output();
    assert!(output.contains("answered 503"), "the log says why: {output}");
    assert!(!output.contains(TOKEN), "the URL never reaches the log");
}

#[tokio::test]
async fn alerts_go_through_the_proxy_with_connect_and_its_credentials() {
    let receiver = Receiver::start(&[200]).await;
    let proxy = Proxy::start().await;
    let url = format!("--alert-webhook-url={}", receiver.url("/hook"));
    let proxy_flag = format!("--alert-webhook-proxy=http://me:s3cret@127.0.0.1:{}", proxy.port);
    let (client, ns, wave) = reloading_web(
        "alert-proxy",
        &["--alert-on-reload", "--alert-sink=gchat", &url, &proxy_flag],
    )
    .await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    wait_reloaded(&client, &ns, "v2").await;
    let got = receiver.wait_for_requests(1).await;
    assert_eq!(got[0].body, format!(r#"{{"text":"{}"}}"#, message(&ns)));
    let connects = proxy.connects.lock().unwrap().clone();
    assert_eq!(
        connects,
        vec![(
            format!("127.0.0.1:{}", receiver.port),
            Some("Basic bWU6czNjcmV0".to_string())
        )],
        "one tunnel to the receiver, with base64(me:s3cret)"
    );
    assert!(
        !wave.output().contains("s3cret"),
        "the proxy's password never reaches the log"
    );
}

#[tokio::test]
async fn with_webhook_url_each_change_is_posted_once_and_nothing_is_written() {
    let receiver = Receiver::start(&[200]).await;
    let (client, ns) = setup("reloader-webhook-url").await;
    create_configmap(&client, &ns, "cfg", json!({"k": "v1"})).await;
    for name in ["web", "api"] {
        crate::reloader_parity::create_auto(&client, &ns, WorkloadKind::DEPLOYMENT, name, "cfg").await;
    }
    let url = format!("--webhook-url={}", receiver.url(&format!("/{TOKEN}")));
    let wave = Wave::start(&[&ns], &["--reloader-compat", "--min-rollout-interval=0s", &url]).await;
    wait_for("wave to check both", TIMEOUT, || async {
        (wave.noops() >= 2).then_some(())
    })
    .await;

    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v2"}})).await;
    let got = receiver.wait_for_requests(1).await;
    assert_eq!(got[0].request_line, format!("POST /{TOKEN} HTTP/1.1"));
    assert_eq!(got[0].content_type, "application/json");
    assert_eq!(
        got[0].body, r#"{"webhook":"update successful"}"#,
        "Reloader's body"
    );
    // The next change is the sentinel: once it is posted, both workloads' turns for v2 have passed.
    wait_for("both workloads to have seen v2", TIMEOUT, || async {
        (wave.noops() >= 4).then_some(())
    })
    .await;
    patch_configmap(&client, &ns, "cfg", json!({"data": {"k": "v3"}})).await;
    receiver.wait_for_requests(2).await;
    wait_for("both workloads to have seen v3", TIMEOUT, || async {
        (wave.noops() >= 6).then_some(())
    })
    .await;
    assert_eq!(
        receiver.received().len(),
        2,
        "one post per change, not one per workload"
    );
    assert_eq!(wave.writes(), 0, "nothing written under --webhook-url");
    for name in ["web", "api"] {
        assert!(
            env_of(&client, &ns, WorkloadKind::DEPLOYMENT, name, "app")
                .await
                .is_empty(),
            "{name} carries no mark"
        );
    }
    assert!(!wave.output().contains(TOKEN), "the URL never reaches the log");
}

#[tokio::test]
async fn a_url_wave_cannot_post_to_is_refused_at_start_up_without_printing_it() {
    for (args, says) in [
        (
            vec![
                "run",
                "--reloader-compat",
                "--webhook-url=ftp://hooks.example/T0KEN-7d1c",
            ],
            "http:// or https://",
        ),
        (
            vec!["run", "--reloader-compat", "--alert-on-reload"],
            "needs --alert-webhook-url",
        ),
        (
            vec![
                "run",
                "--reloader-compat",
                "--alert-on-reload",
                "--alert-webhook-url=hooks.example/T0KEN-7d1c",
            ],
            "--alert-webhook-url",
        ),
        (
            vec!["run", "--webhook-url=https://hooks.example/T0KEN-7d1c"],
            "needs --reloader-compat",
        ),
    ] {
        let (code, _, err) = run_wave(&args, None);
        assert_eq!(code, 2, "{args:?} is a usage error: {err}");
        assert!(err.contains(says), "{args:?}: the refusal says {says:?}: {err}");
        assert!(
            !err.contains(TOKEN),
            "{args:?}: the refusal does not print the URL: {err}"
        );
    }
}
