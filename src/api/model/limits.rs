//! Traffic limits (`/admin/servers/{id}/limits`): a server's own, the daemon's defaults, and
//! what applies.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A server's traffic limits: its own, the daemon's defaults, and what applies.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LimitsView {
    pub id: String,
    /// What the server sets (keys left out inherit `defaults`).
    pub limits: crate::toolset::ServerLimits,
    /// The daemon's `[limits]`.
    pub defaults: EffectiveLimitsView,
    /// What applies to the server's calls (0: off).
    pub effective: EffectiveLimitsView,
}

/// One set of door limits (0: off).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EffectiveLimitsView {
    pub per_caller_per_minute: u32,
    pub per_server_per_minute: u32,
    pub per_tool_per_minute: u32,
    pub per_caller_concurrency: u32,
}

impl From<crate::serve::quota::EffectiveLimits> for EffectiveLimitsView {
    fn from(limits: crate::serve::quota::EffectiveLimits) -> EffectiveLimitsView {
        EffectiveLimitsView {
            per_caller_per_minute: limits.per_caller_per_minute,
            per_server_per_minute: limits.per_server_per_minute,
            per_tool_per_minute: limits.per_tool_per_minute,
            per_caller_concurrency: limits.per_caller_concurrency,
        }
    }
}
