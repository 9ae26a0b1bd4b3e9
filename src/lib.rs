//! mcpbootd: a daemon that hosts MCP servers whose tools are JavaScript handlers run in per-call
//! isolates. See ARCHITECTURE.md for the map.

pub mod access_token;
pub mod accounts;
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
pub mod script;
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

/// An error with its causes: reqwest's top-level message ("error sending request") hides where it
/// keeps "connection refused" and the like. Causes already quoted by the message are not repeated.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
