//! Liveness and readiness probes.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::app::AppState;

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
