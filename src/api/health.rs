//! Liveness and readiness probes, and the metrics scrape.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::api::AppState;

/// `GET /healthz`: the process is up and serving HTTP. Never touches the catalog or the isolates, so it
/// answers even when every worker is busy.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the catalog answers and every ready server has been mounted.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let mounted = state.ready.load(Ordering::Acquire);
    let catalog = state.catalog.ping().await;
    let status = if mounted && catalog { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "status": if status == StatusCode::OK { "ready" } else { "not_ready" },
        "catalog": if catalog { "ok" } else { "unavailable" },
        "servers_mounted": mounted,
        "mounted": state.registry.len(),
    });
    (status, Json(body))
}

/// `GET /metrics`: Prometheus text exposition.
pub async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let pool = state.caller.pool().stats();
    let gauges = crate::telemetry::metrics::Gauges {
        queue_depth: pool.queued,
        busy_workers: pool.busy,
        workers: pool.workers,
        in_flight_calls: pool.in_flight,
        memory_bytes: pool.memory_bytes,
        memory_budget_bytes: pool.memory_budget_bytes,
        mounted_servers: state.registry.len(),
    };
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render(&gauges))
}
