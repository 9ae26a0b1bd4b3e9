//! The daemon as a whole rather than one server: its recent load (`GET /admin/overview`), the
//! probes (`GET /healthz`, `GET /readyz`) and the catalog backup (`GET /admin/backup`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::states::text_enum;

/// `GET /admin/overview`: this daemon's calls and load over the last minutes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Overview {
    /// Seconds between two points.
    pub interval_seconds: u64,
    /// How far back the points go.
    pub window_seconds: u64,
    /// The daemon these figures are from (`[catalog] replica_id`).
    pub replica: String,
    pub mounted_servers: usize,
    /// Oldest first; empty until the second sample.
    pub samples: Vec<OverviewPoint>,
}

/// One sampling interval.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OverviewPoint {
    /// The end of the interval (RFC 3339, UTC).
    pub at: String,
    pub calls_per_second: f64,
    /// Calls per second whose outcome was not `ok`.
    pub errors_per_second: f64,
    /// Median latency of the calls that finished in the interval (absent without calls),
    /// interpolated within the buckets of `mcpbootd_call_duration_seconds`.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// At the end of the interval: calls running or parked, calls waiting for admission, isolate
    /// workers busy of all, isolate memory in use and its budget.
    pub in_flight_calls: usize,
    pub queue_depth: usize,
    pub busy_workers: usize,
    pub workers: usize,
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
}

text_enum! {
    pub enum LiveStatus ("liveness") {
        Ok = "ok",
    }
}

text_enum! {
    pub enum ReadyStatus ("readiness") {
        Ready = "ready",
        NotReady = "not_ready",
    }
}

text_enum! {
    pub enum CatalogHealth ("catalog health") {
        Ok = "ok",
        Unavailable = "unavailable",
        /// The catalog answers reads but refuses writes (a full disk, read-only files): servers
        /// are served, changes are refused.
        Unwritable = "unwritable",
    }
}

/// `GET /admin/backup`: the bytes of a SQLite database file. Only describes the response in the
/// OpenAPI document; the handler streams the file.
#[derive(Debug, Clone, ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct CatalogBackup(pub Vec<u8>);

/// `GET /healthz`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Liveness {
    pub status: LiveStatus,
}

/// `GET /readyz`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    pub status: ReadyStatus,
    pub catalog: CatalogHealth,
    /// Whether every ready server in the catalog has been mounted.
    pub servers_mounted: bool,
    /// How many servers are mounted.
    pub mounted: usize,
    /// What runs the handlers' JavaScript: `quickjs-wasm` (QuickJS in WebAssembly under Wasmtime).
    pub engine: String,
    /// With `[auth.oauth]`: whether the identity provider has been discovered (`ok`); until then
    /// (`unavailable`) the OAuth mounts answer 503 while the others serve, so the daemon stays ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<CatalogHealth>,
}
