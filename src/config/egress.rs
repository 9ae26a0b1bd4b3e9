//! `[egress]` and `[egress.cache]`: how handlers' requests leave the daemon.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Let handlers reach loopback, RFC 1918, link-local and other non-global addresses.
    pub allow_private_networks: bool,
    pub connect_timeout_ms: u64,
    /// Longest pause between two reads of a response body.
    pub read_timeout_ms: u64,
    pub max_redirects: u32,
    pub user_agent: String,
    /// Host name -> IP address, used instead of DNS. The URL's port is kept.
    pub resolve: BTreeMap<String, IpAddr>,
    /// Hold requests to an origin that answered 429 or 503 with `Retry-After` until then.
    pub respect_retry_after: bool,
    /// Consecutive connection failures or 502/503/504 answers that open an origin's circuit
    /// breaker; 0 turns breakers off.
    pub breaker_failures: u32,
    /// How long an open breaker refuses requests before it lets one probe through.
    pub breaker_open_ms: u64,
    pub cache: EgressCacheConfig,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            allow_private_networks: false,
            connect_timeout_ms: 5_000,
            read_timeout_ms: 15_000,
            max_redirects: 5,
            user_agent: concat!("mcpbootd/", env!("CARGO_PKG_VERSION")).to_string(),
            resolve: BTreeMap::new(),
            respect_retry_after: true,
            breaker_failures: 5,
            breaker_open_ms: 30_000,
            cache: EgressCacheConfig::default(),
        }
    }
}

impl EgressConfig {
    /// Checks the breakers, the cache and the resolve map.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.breaker_failures > 0 && !(100..=3_600_000).contains(&self.breaker_open_ms) {
            return Err(ConfigError::Invalid(
                "[egress] breaker_open_ms must be between 100 and 3600000 (one hour), e.g. 30000; to turn circuit \
                 breakers off, set breaker_failures = 0"
                    .into(),
            ));
        }
        if self.cache.enabled && self.cache.max_bytes < 1024 * 1024 {
            return Err(ConfigError::Invalid(
                "[egress.cache] max_bytes must be at least 1048576 (1 MiB), e.g. 67108864; to turn the cache off, \
                 set enabled = false"
                    .into(),
            ));
        }
        for host in self.resolve.keys() {
            if host.is_empty() || host.contains('/') || host.contains(':') {
                return Err(ConfigError::Invalid(format!(
                    "[egress.resolve] key {host:?} must be a bare host name such as \"api.example.test\""
                )));
            }
        }
        Ok(())
    }
}

/// `[egress.cache]`: the HTTP cache of handlers' GET responses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EgressCacheConfig {
    pub enabled: bool,
    /// Bytes of responses kept at most, least recently used out first.
    pub max_bytes: u64,
}

impl Default for EgressCacheConfig {
    fn default() -> Self {
        EgressCacheConfig { enabled: true, max_bytes: 64 * 1024 * 1024 }
    }
}
