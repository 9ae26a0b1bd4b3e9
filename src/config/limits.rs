//! `[limits]`: the daemon-wide defaults of the traffic limits at the door.

use serde::{Deserialize, Serialize};

/// `[limits]`: the daemon-wide defaults of the traffic limits at the door (docs/traffic.md). A
/// server's own limits (`PUT /admin/servers/{id}/limits`) replace each key they name. 0 is off.
/// They are counted per replica: behind a balancer over R replicas a caller may get up to R
/// times each rate, so set them to the rate wanted divided by R.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Tool calls per minute by one caller on one server (a burst of N refilled over a minute).
    pub per_caller_per_minute: u32,
    /// Tool calls per minute on one server.
    pub per_server_per_minute: u32,
    /// Calls per minute of one tool.
    pub per_tool_per_minute: u32,
    /// Calls one caller may have running at once on one server.
    pub per_caller_concurrency: u32,
}
