//! mcpbootd: a daemon that hosts MCP servers whose tools are JavaScript handlers run in per-call
//! isolates. See ARCHITECTURE.md for the map.

pub mod access_token;
pub mod api;
pub mod app;
pub mod catalog;
pub mod cli;
pub mod client;
pub mod config;
pub mod credentials;
pub mod generate;
pub mod llm;
pub mod oauth;
pub mod serve;
pub mod states;
pub mod tasks;
pub mod telemetry;
pub mod toolset;
pub mod whitelist;

/// reqwest is built without a bundled crypto provider; rustls needs one chosen once per process.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
