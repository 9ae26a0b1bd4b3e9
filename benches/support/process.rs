//! The daemon binary as a child process, for the benchmarks that measure the real binary's
//! start-up and memory (catalog_scale, density) rather than a daemon inside the benchmark.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon binary running as a child; killed on drop unless it was terminated cleanly.
pub struct DaemonProcess {
    child: Option<Child>,
    pub address: SocketAddr,
    log: std::path::PathBuf,
}

impl DaemonProcess {
    /// Starts `mcpbootd serve` on a free loopback port with the catalog and the compile cache in
    /// `dir`; its stderr goes to `dir/<name>.log`, shown if something fails.
    pub fn spawn(dir: &Path, name: &str) -> anyhow::Result<Self> {
        Self::spawn_with(dir, name, &[])
    }

    /// [`DaemonProcess::spawn`] with more settings, as `MCPBOOTD_*` pairs.
    pub fn spawn_with(dir: &Path, name: &str, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let address = free_port()?;
        let log = dir.join(format!("{name}.log"));
        let mut command = Command::new(daemon_binary());
        // Only the settings below, whatever the shell that runs the benchmark has exported.
        for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("MCPBOOTD_")) {
            command.env_remove(key);
        }
        command
            .args(["serve", "--listen", &address.to_string()])
            .env("MCPBOOTD_CATALOG__PATH", dir.join("catalog.db"))
            .env("MCPBOOTD_SANDBOX__COMPILE_CACHE", dir.join("cache"))
            .env("MCPBOOTD_LOG__LEVEL", "warn")
            .env("MCPBOOTD_LOG__FORMAT", "json");
        // The caller's settings last, so they replace the ones above.
        command.envs(env.iter().map(|(key, value)| (key, value)));
        let child = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log)?).spawn()?;
        Ok(DaemonProcess { child: Some(child), address, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// A `/proc/<pid>/status` memory field (`VmRSS`, `VmHWM`) in MB.
    pub fn rss_mb(&self, field: &str) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let kb: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/{}/status", self.pid()))?;
        Ok(kb / 1024.0)
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn terminate(mut self, limit: Duration) -> anyhow::Result<()> {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status()?;
        anyhow::ensure!(status.success(), "kill -TERM {} failed", self.pid());
        let mut child = self.child.take().expect("a running child");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                anyhow::ensure!(status.success(), "the daemon exited with {status} after SIGTERM: {}", self.log_tail());
                return Ok(());
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("the daemon did not exit within {limit:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Adds the end of the daemon's log to an error.
    pub fn explain(&self, error: anyhow::Error) -> anyhow::Error {
        error.context(format!("daemon log: {}", self.log_tail()))
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(10).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn daemon_binary() -> PathBuf {
    std::env::var_os("BENCH_DAEMON_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mcpbootd")), PathBuf::from)
}

/// A loopback address nobody listens on right now (the daemon binds it a moment later).
pub fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

/// Polls `/readyz` until it answers 200 and returns its body.
pub async fn wait_ready(
    http: &reqwest::Client,
    address: SocketAddr,
    limit: Duration,
) -> anyhow::Result<serde_json::Value> {
    let started = Instant::now();
    loop {
        if let Ok(response) = http.get(format!("http://{address}/readyz")).send().await
            && response.status() == 200
        {
            return Ok(response.json().await?);
        }
        anyhow::ensure!(started.elapsed() < limit, "/readyz did not answer 200 within {limit:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
