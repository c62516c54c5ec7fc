//! A tiny HTTP service that answers `GET /` with `message` from `config.yaml` in a mounted directory,
//! and picks up changes without restarting.
//!
//! ```sh
//! mkdir -p /tmp/cfg && echo 'message: hello' > /tmp/cfg/config.yaml
//! CONFIG_DIR=/tmp/cfg cargo run -p wave-reload --example reload-demo &
//! curl localhost:3000           # hello
//! echo 'message: hi again' > /tmp/cfg/config.yaml
//! curl localhost:3000           # hi again
//! ```

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use wave_reload::{ConfigWatcher, Reload};

#[derive(serde::Deserialize)]
struct Config {
    message: String,
}

fn parse(dir: &Path) -> Result<Config, String> {
    let text =
        std::fs::read_to_string(dir.join("config.yaml")).map_err(|e| format!("reading config.yaml: {e}"))?;
    serde_norway::from_str(&text).map_err(|e| format!("config.yaml: {e}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::var("CONFIG_DIR").unwrap_or_else(|_| "/etc/reload-demo".into());
    let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let config = Arc::new(ConfigWatcher::new(&dir, parse)?);
    let events = config.subscribe();
    std::thread::spawn(move || {
        for event in events {
            match event {
                Reload::Applied { generation, config } => {
                    eprintln!("reloaded (#{generation}): {:?}", config.message)
                }
                Reload::Failed { error } => eprintln!("reload failed, keeping the last config: {error}"),
                Reload::DirectoryGone => eprintln!("{dir} disappeared; keeping the last config"),
            }
        }
    });
    let app =
        Router::new()
            .route(
                "/",
                get(|State(c): State<Arc<ConfigWatcher<Config>>>| async move {
                    format!("{}\n", c.read().message)
                }),
            )
            .with_state(config);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("listening on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}
