//! The route table: every HTTP route the daemon serves, in one place, each registered with its
//! OpenAPI description.

pub mod admin;
pub mod auth;
pub mod backup;
pub mod code_mode;
pub mod connect;
pub mod connections;
pub mod console;
pub mod credentials;
pub mod door;
pub mod error;
pub mod events;
pub mod extract;
pub mod health;
pub mod limits;
pub mod mcp;
pub mod model;
pub mod oauth;
pub mod openapi;
pub mod overview;
pub mod register;
mod unread_body;
pub mod versions;
pub mod wire;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use tower_http::trace::TraceLayer;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::credentials::vault::Vault;
use crate::generate::Generator;
use crate::serve::call::Caller;
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry;
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
    pub mcp_hosts: Arc<mcp::transport::AllowedHosts>,
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

/// Every route, with its middleware.
pub fn router(state: AppState) -> Router {
    let admin = Router::from(admin_routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_admin_token));
    Router::new()
        .merge(admin)
        .merge(Router::from(open_routes()))
        // The console's static files are not part of the API, so not in its description.
        .merge(console::routes(&state))
        // The connect pages are HTML for a person's browser, not API either.
        .merge(connect::routes())
        .fallback(oauth::route_not_found)
        .layer(middleware::from_fn(wire::json_errors))
        .layer(middleware::from_fn(unread_body::drain_unread))
        .layer(DefaultBodyLimit::max(state.config.server.max_body_bytes))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(telemetry::http_span)
                .on_request(())
                .on_response(telemetry::http_on_response())
                .on_failure(telemetry::http_on_failure),
        )
        .with_state(state)
}

// The two route tables. A route is added with `routes!` only, which registers the handler and
// its `#[utoipa::path]` description together: `router` serves what these hold and
// `openapi::document` describes the same, so neither can have a route the other lacks. One
// `routes!` per path (a `routes!` with several paths would give every path every method).

/// The routes behind the admin token (when one is configured).
pub(crate) fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(register::create_server, admin::list_servers))
        .routes(routes!(admin::get_server, admin::delete_server))
        .routes(routes!(admin::regenerate_server))
        .routes(routes!(events::server_events))
        .routes(routes!(events::daemon_events))
        .routes(routes!(versions::list_versions))
        .routes(routes!(versions::get_version))
        .routes(routes!(versions::diff_versions))
        .routes(routes!(versions::approve_version))
        .routes(routes!(versions::reject_version))
        .routes(routes!(versions::activate_version))
        .routes(routes!(versions::put_approval))
        .routes(routes!(versions::check_drift))
        .routes(routes!(admin::put_access_token, admin::delete_access_token))
        .routes(routes!(admin::put_auth, admin::delete_auth))
        .routes(routes!(credentials::list_credentials))
        .routes(routes!(credentials::put_credential, credentials::delete_credential))
        .routes(routes!(limits::get_limits, limits::put_limits))
        .routes(routes!(credentials::list_connections))
        .routes(routes!(credentials::delete_connection))
        .routes(routes!(admin::call_tool))
        .routes(routes!(code_mode::put_code_mode))
        .routes(routes!(code_mode::run_code))
        .routes(routes!(admin::list_calls))
        .routes(routes!(admin::export_server))
        .routes(routes!(backup::backup))
        .routes(routes!(overview::overview))
        .routes(routes!(openapi::openapi))
        // Metrics name servers and tools, so they sit behind the admin token too.
        .routes(routes!(health::metrics))
}

/// The routes anyone may call: the probes and the MCP mounts (which check their own tokens).
pub(crate) fn open_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        // Every method goes to the MCP service, which answers those it does not serve itself.
        .routes(routes!(mcp::serve_mcp).map(|route| route.fallback(mcp::serve_mcp)))
        .routes(routes!(oauth::mount_metadata))
        .routes(routes!(oauth::root_metadata))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
}
