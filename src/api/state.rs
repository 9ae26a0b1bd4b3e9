//! `AppState`: the shared state every request handler is given, and the isolate pool's and the
//! registry's gauges read from it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::api::hosts::AllowedHosts;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::credentials::vault::Vault;
use crate::generate::Generator;
use crate::serve::call::Caller;
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry::metrics::{Gauges, Metrics};
use crate::telemetry::overview::History;

/// Shared state handed to every request handler; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub catalog: Catalog,
    pub registry: Arc<Registry>,
    /// Seals credential values before they are stored.
    pub vault: Vault,
    pub caller: Caller,
    pub generator: Generator,
    pub metrics: Arc<Metrics>,
    /// Background tasks and the shutdown signal.
    pub tasks: Tasks,
    /// Set once every ready server from the catalog is mounted.
    pub ready: Arc<AtomicBool>,
    /// `[server] allowed_hosts` as the MCP endpoints check it.
    pub mcp_hosts: Arc<AllowedHosts>,
    /// The last minutes of calls and load (`overview::spawn_sampler` fills it).
    pub overview: Arc<History>,
    /// Checks OAuth access tokens on the mounts, when `[auth.oauth]` names an issuer.
    pub oauth: Option<crate::oauth::Validator>,
    /// Per-user credentials: the connect pages and each server's connections.
    pub accounts: Arc<crate::accounts::Accounts>,
}

impl AppState {
    /// The isolate pool's and the registry's values at this moment.
    pub fn gauges(&self) -> Gauges {
        let pool = self.caller.pool().stats();
        Gauges {
            queue_depth: pool.queued,
            busy_workers: pool.busy,
            workers: pool.workers,
            in_flight_calls: pool.in_flight,
            memory_bytes: pool.memory_bytes,
            memory_budget_bytes: pool.memory_budget_bytes,
            mounted_servers: self.registry.len(),
            isolate_overruns: pool.overruns,
            call_log_dropped: self.caller.call_log().dropped(),
            egress_cache_bytes: self.caller.egress().cache_bytes(),
        }
    }
}
