//! `[log]`: the log format and filter.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `auto` (human on a terminal, JSON lines otherwise), `json` or `pretty`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `mcpbootd=debug,tower_http=info`; `RUST_LOG` wins.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { format: LogFormat::Auto, level: "info,rmcp=warn".to_string() }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Auto,
    Json,
    Pretty,
}
