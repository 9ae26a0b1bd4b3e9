//! mcpbootd: a daemon that hosts MCP servers whose tools are JavaScript handlers run in per-call
//! isolates. See ARCHITECTURE.md for the map.

pub mod access_token;
pub mod api;
pub mod app;
pub mod catalog;
pub mod cli;
pub mod client;
pub mod config;
pub mod generate;
pub mod llm;
pub mod serve;
pub mod telemetry;
pub mod toolset;
pub mod whitelist;
