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
pub mod hosts;
pub mod limits;
pub mod mcp;
pub mod model;
pub mod oauth;
pub mod openapi;
pub mod overview;
pub mod register;
pub mod state;
mod unread_body;
pub mod versions;
pub mod wire;

use std::sync::LazyLock;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::{Json, Router};
use tower_http::trace::TraceLayer;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use utoipa::openapi::OpenApi;

use crate::telemetry;

pub use state::AppState;

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
// `openapi_json` describes the same, so neither can have a route the other lacks. One
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
        .routes(routes!(openapi_json))
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

/// The description of both route tables, built once: `openapi` adds what the tables cannot say.
static DOCUMENT: LazyLock<OpenApi> =
    LazyLock::new(|| openapi::document(admin_routes().into_openapi(), open_routes().into_openapi()));

// Served from here, beside the route tables it describes, because it is one of their routes.
/// This document
#[utoipa::path(
    get,
    path = "/admin/openapi.json",
    operation_id = "openapi",
    responses((status = 200, description = "the OpenAPI 3.1 document", content_type = "application/json")),
)]
async fn openapi_json() -> Json<&'static OpenApi> {
    Json(&DOCUMENT)
}
