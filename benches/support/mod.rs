//! What both benchmarks share: a daemon on a port-0 listener, ready to be measured.

use std::net::SocketAddr;
use std::time::Duration;

use mcpbootd::config::{CliOverrides, Config};

pub struct Daemon {
    pub address: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

/// Starts the daemon with a temp catalog plus `env` (as `MCPBOOTD_*` variables), and waits for `/readyz`.
pub async fn start_daemon(env: Vec<(&str, String)>) -> anyhow::Result<Daemon> {
    mcpbootd::install_crypto_provider();
    let dir = tempfile::tempdir()?;
    let mut vars = vec![
        ("MCPBOOTD_CATALOG__PATH".to_string(), dir.path().join("bench.db").display().to_string()),
        ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".to_string(), "true".to_string()),
        ("MCPBOOTD_LOG__LEVEL".to_string(), "warn".to_string()),
    ];
    vars.extend(env.into_iter().map(|(k, v)| (k.to_string(), v)));
    let config = Config::load(None, vars, &CliOverrides::default())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(mcpbootd::app::run(config, listener, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    while http.get(format!("http://{address}/readyz")).send().await.map(|r| r.status() != 200).unwrap_or(true) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(Daemon { address, stop, task, _dir: dir })
}

impl Daemon {
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await?
    }
}
