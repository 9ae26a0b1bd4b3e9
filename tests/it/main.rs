//! Integration tests: the real daemon over real HTTP, real MCP clients, real isolates and a real
//! SQLite catalog. External APIs are fake servers on loopback reached via `[egress.resolve]`.

// The crate denies `unwrap` in the daemon; tests may unwrap: a failed unwrap fails the test with
// its cause. clippy.toml allows it in `#[test]` functions only, and the helpers unwrap too.
#![allow(clippy::unwrap_used)]

mod helpers;

mod access_tokens;
mod admin_errors;
mod api_bodies;
mod api_descriptions;
mod backup;
mod cli;
mod code_mode;
mod connected_accounts;
mod connections;
mod console;
mod conventions;
mod credentials;
mod deploy;
mod disk_full;
mod egress;
mod egress_attacks;
mod generation;
mod lifecycle;
mod limits;
mod load;
mod mcp_transport;
mod oauth;
mod oauth_provider;
mod observability;
mod openapi;
mod openapi_quality;
mod overruns;
mod replicas;
mod sandbox_escapes;
mod scripted_llm;
mod sdk_clients;
mod search_quality;
mod shutdown;
mod tidy;
mod tidy_errors;
mod tidy_map;
mod toolsets;
mod traces;
mod unwritable_catalog;
mod upstream_protection;
mod versions;
