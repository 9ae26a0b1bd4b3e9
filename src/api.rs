//! The route table: every HTTP route the daemon serves, in one place.

pub mod admin;
pub mod auth;
pub mod error;
pub mod events;
pub mod health;
pub mod mcp;
pub mod model;
pub mod openapi;
pub mod register;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{any, get, post, put};

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tower_http::trace::TraceLayer;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::generate::Generator;
use crate::serve::call::Caller;
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry;
use crate::telemetry::metrics::Metrics;

/// Shared state handed to every request handler; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub catalog: Catalog,
    pub registry: Arc<Registry>,
    pub caller: Caller,
    pub generator: Generator,
    pub metrics: Arc<Metrics>,
    /// Background tasks and the shutdown signal.
    pub tasks: Tasks,
    /// Set once every ready server from the catalog is mounted.
    pub ready: Arc<AtomicBool>,
}

/// Every route, with its middleware.
pub fn router(state: AppState) -> Router {
    let admin = Router::new()
        .route("/admin/servers", post(register::create_server).get(admin::list_servers))
        .route("/admin/servers/{id}", get(admin::get_server).delete(admin::delete_server))
        .route("/admin/servers/{id}/regenerate", post(admin::regenerate_server))
        .route("/admin/servers/{id}/events", get(events::server_events))
        .route("/admin/servers/{id}/access-token", put(admin::put_access_token).delete(admin::delete_access_token))
        .route("/admin/servers/{id}/tools/{tool}/call", post(admin::call_tool))
        .route("/admin/servers/{id}/calls", get(admin::list_calls))
        .route("/admin/servers/{id}/export", get(admin::export_server))
        .route("/admin/openapi.json", get(openapi::openapi))
        // Metrics name servers and tools, so they sit behind the admin token too when one is set.
        .route("/metrics", get(health::metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_admin_token));

    Router::new()
        .merge(admin)
        .route("/servers/{id}/mcp", any(mcp::serve_mcp))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(error::route_not_found)
        .layer(DefaultBodyLimit::max(state.config.server.max_body_bytes))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(telemetry::http_span)
                .on_request(())
                .on_response(telemetry::http_on_response()),
        )
        .with_state(state)
}
