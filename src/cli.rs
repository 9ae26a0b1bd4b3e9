//! Command line: `mcpbootd serve` and `mcpbootd print-config`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{CliOverrides, Config, EXAMPLE_CONFIG};

#[derive(Parser)]
#[command(name = "mcpbootd", version, about = "Hosts MCP servers whose tools run in per-call JavaScript isolates")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon.
    Serve {
        /// TOML config file (see `mcpbootd print-config`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Listen address, overriding [server] listen.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// Print the documented example configuration (every key with its default).
    PrintConfig,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::PrintConfig => {
            print!("{EXAMPLE_CONFIG}");
            ExitCode::SUCCESS
        }
        Command::Serve { config, listen } => {
            let config = match Config::load(config.as_deref(), std::env::vars(), &CliOverrides { listen }) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("mcpbootd: {error}");
                    return ExitCode::from(2);
                }
            };
            crate::telemetry::init(&config.log);
            match serve(config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    eprintln!("mcpbootd: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn serve(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("mcpbootd-io").build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.server.listen).await.map_err(|e| {
            anyhow::anyhow!("cannot listen on {} ([server] listen or --listen): {e}", config.server.listen)
        })?;
        crate::app::run(config, listener, shutdown_signal()).await
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
