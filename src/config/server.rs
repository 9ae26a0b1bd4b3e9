//! `[server]`: where the daemon listens and how it treats connections.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// `IP:PORT`; `localhost:PORT` means 127.0.0.1 (see [`parse_listen`]).
    #[serde(deserialize_with = "deserialize_listen")]
    pub listen: SocketAddr,
    /// `Host` header values accepted on MCP mounts (DNS-rebinding protection). Empty means the
    /// loopback names plus the listen address.
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted on MCP mounts; empty disables the Origin check.
    pub allowed_origins: Vec<String>,
    /// Largest accepted admin or MCP request body.
    pub max_body_bytes: usize,
    /// How long in-flight calls may run after a shutdown signal.
    pub shutdown_grace_ms: u64,
    /// How long a connection may take to send a request's headers, counted from when it is
    /// opened or its previous response was written: silent, dripping and idle keep-alive
    /// connections are closed after it.
    pub header_read_timeout_ms: u64,
    /// Connections open at once; at the cap a new one replaces the oldest connection that has not
    /// sent a byte, or is answered 503 and closed. Lowered at start-up to leave
    /// descriptors for the catalog and egress when the process's open-file limit is smaller.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            shutdown_grace_ms: 10_000,
            header_read_timeout_ms: 10_000,
            max_connections: 4096,
        }
    }
}

/// A listen address: `IP:PORT` (`[::1]:8080` for IPv6), or `localhost:PORT` for 127.0.0.1. Other
/// host names are refused rather than resolved: a daemon should not listen wherever DNS says at
/// start-up, and the message shows the form to use.
pub fn parse_listen(raw: &str) -> Result<SocketAddr, InvalidListen> {
    let raw = raw.trim();
    if let Ok(address) = raw.parse::<SocketAddr>() {
        return Ok(address);
    }
    let (host, port) = raw.rsplit_once(':').unwrap_or((raw, ""));
    let Ok(port) = port.parse::<u16>() else {
        return Err(InvalidListen::NoPort { raw: raw.to_string() });
    };
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(InvalidListen::HostName { raw: raw.to_string(), port })
}

/// Why [`parse_listen`] refused an address; `raw` is the address as given, trimmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidListen {
    #[error(
        "{raw:?} is not a listen address: give an IP address and a port, such as 127.0.0.1:8080 \
         (0.0.0.0:8080 for every interface, [::1]:8080 for IPv6)"
    )]
    NoPort { raw: String },
    #[error(
        "{raw:?} is not a listen address: the host must be an IP address (or localhost), such as 127.0.0.1:{port} \
         or 0.0.0.0:{port} for every interface; host names are not resolved"
    )]
    HostName { raw: String, port: u16 },
}

fn deserialize_listen<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let raw = String::deserialize(deserializer)?;
    parse_listen(&raw).map_err(serde::de::Error::custom)
}
