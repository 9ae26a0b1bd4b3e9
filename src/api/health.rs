//! Liveness and readiness probes, and the metrics scrape.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::model::{CatalogHealth, LiveStatus, Liveness, Readiness, ReadyStatus};
use crate::api::state::AppState;

/// Liveness
///
/// The process is up and serving HTTP. Never touches the catalog or the isolates, so it answers
/// even when every worker is busy.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "the daemon is alive", body = Liveness)))]
pub async fn healthz() -> Json<Liveness> {
    Json(Liveness { status: LiveStatus::Ok })
}

/// How long the readiness probe waits for the catalog's writer.
const WRITE_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Readiness: every ready server has been mounted, and the catalog answers and can be written
///
/// On a catalog shared by replicas (PostgreSQL), an unreachable catalog is reported in the body
/// but does not make a mounted replica unready: it is the same database for every replica, so
/// taking them all out of the load balancer would stop the tool calls they can still serve.
#[utoipa::path(
    get,
    path = "/readyz",
    responses((status = 200, description = "ready to serve", body = Readiness), (status = 503, description = "not ready (yet)", body = Readiness)),
)]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let mounted = state.ready.load(Ordering::Acquire);
    let catalog = if !state.catalog.ping().await {
        CatalogHealth::Unavailable
    } else if !state.catalog.writable(WRITE_PROBE_WAIT).await {
        CatalogHealth::Unwritable
    } else {
        CatalogHealth::Ok
    };
    let ready = mounted && (catalog == CatalogHealth::Ok || state.catalog.is_shared());
    let body = Readiness {
        status: if ready { ReadyStatus::Ready } else { ReadyStatus::NotReady },
        catalog,
        servers_mounted: mounted,
        mounted: state.registry.len(),
        engine: state.caller.pool().engine().to_owned(),
        oauth: state.oauth.as_ref().map(|validator| {
            if validator.metadata().is_some() { CatalogHealth::Ok } else { CatalogHealth::Unavailable }
        }),
    };
    (if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, Json(body))
}

/// Prometheus metrics (text exposition format)
///
/// Metrics name servers and tools, so they sit behind the admin token when one is set.
#[utoipa::path(
    get,
    path = "/metrics",
    responses((status = 200, description = "metrics", content_type = "text/plain; version=0.0.4", body = String)),
)]
pub async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let gauges = state.gauges();
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render(&gauges))
}
