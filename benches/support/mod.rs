//! What the benchmarks share: the daemon the integration tests start (`tests/support/daemon.rs`),
//! with a temp catalog and quiet logs, ready to be measured; and, in `load`, the clients that load
//! it and the upstream its handlers call; in `process`, the daemon binary as a child process.

// Every bench with `mod support;` compiles all of it and uses a part: the daemon in this process
// (serving, replicas, oauth), `load` (serving, replicas, density), `process` (catalog_scale, density).
#![allow(dead_code)]

#[path = "../../tests/support/daemon.rs"]
mod daemon;

pub mod load;
pub mod process;

pub struct Daemon {
    inner: daemon::RunningDaemon,
    pub address: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

/// Starts the daemon with a temp catalog plus `env` (as `MCPBOOTD_*` variables), and waits for `/readyz`.
/// A `MCPBOOTD_CATALOG__URL` in `env` puts the catalog elsewhere (PostgreSQL); the temp file is then unused.
pub async fn start_daemon(env: Vec<(&str, String)>) -> anyhow::Result<Daemon> {
    let dir = tempfile::tempdir()?;
    let mut vars = vec![
        ("MCPBOOTD_CATALOG__PATH".to_string(), dir.path().join("bench.db").display().to_string()),
        ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".to_string(), "true".to_string()),
        ("MCPBOOTD_LOG__LEVEL".to_string(), "warn".to_string()),
    ];
    vars.extend(env.into_iter().map(|(k, v)| (k.to_string(), v)));
    let inner = daemon::start(vars).await?;
    Ok(Daemon { address: inner.address, inner, _dir: dir })
}

impl Daemon {
    pub async fn stop(self) -> anyhow::Result<()> {
        self.inner.stop().await
    }
}
