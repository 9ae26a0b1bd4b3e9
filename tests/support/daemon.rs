//! The daemon in this process on a port-0 listener (or one the caller bound), configured from
//! `MCPBOOTD_*` pairs and stopped the way a signal stops it. The integration tests
//! (`tests/it/helpers.rs`, `tests/it/oauth_provider.rs`) and the benchmarks
//! (`benches/support/mod.rs`) all start it from here, so they measure and test the same start-up.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mcpbootd::config::{CliOverrides, Config};
use tokio::sync::oneshot;

/// How long start-up may take before `start` gives up.
const READY_WITHIN: Duration = Duration::from_secs(10);

pub struct RunningDaemon {
    pub address: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Loads the configuration from `env` (applied as environment variables would be) over the
/// embedded defaults, runs the daemon on `127.0.0.1:0` and returns once `/readyz` says ready.
pub async fn start(env: Vec<(String, String)>) -> anyhow::Result<RunningDaemon> {
    start_on(tokio::net::TcpListener::bind("127.0.0.1:0").await?, env).await
}

/// [`start`] on a listener the caller bound: for a configuration that has to name the daemon's
/// own address before it is loaded (`[auth.oauth] public_url`, which clients compare with the
/// URL they connect to).
pub async fn start_on(listener: tokio::net::TcpListener, env: Vec<(String, String)>) -> anyhow::Result<RunningDaemon> {
    mcpbootd::install_crypto_provider();
    let config = Config::load(None, env, &CliOverrides::default())?;
    let address = listener.local_addr()?;
    let (shutdown, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(mcpbootd::app::run(config, listener, async move {
        let _ = stopped.await;
    }));
    let daemon = RunningDaemon { address, shutdown: Some(shutdown), task: Some(task) };
    daemon.wait_until_ready().await?;
    Ok(daemon)
}

impl RunningDaemon {
    /// Polls `/readyz`: no sleeping on a guess, it returns as soon as the daemon says so.
    async fn wait_until_ready(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(response) = http.get(format!("http://{}/readyz", self.address)).send().await
                && response.status() == 200
            {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the daemon was not ready within {READY_WITHIN:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the daemon the way a signal would, and waits for it to finish.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }
}
