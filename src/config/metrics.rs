//! `[metrics]`: how many servers get labels of their own.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Servers whose calls get `server` and `tool` labels of their own; the calls of servers
    /// mounted after these are counted under `server="other"`, `tool="other"`, so the number of
    /// series stays bounded however many servers are registered.
    pub max_labelled_servers: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { max_labelled_servers: 100 }
    }
}
