//! The room's shared helpers for the server a request names: its id read from the path, the 404
//! for an unknown one, why a server cannot be called yet, and an optional JSON body.

use std::sync::Arc;

use axum::http::StatusCode;

use crate::api::AppState;
use crate::api::error::{ApiError, ErrorCode};
use crate::serve::registry::MountError;
use crate::serve::server::Server;
use crate::states::Status;
use crate::toolset::ServerId;

/// A server id from a path, or the 404 that says which characters an id has.
pub(crate) fn parse_id(raw: &str) -> Result<ServerId, ApiError> {
    ServerId::parse(raw)
        .map_err(|_| ApiError::new(ErrorCode::ServerNotFound, format!("no server {raw:?} (ids use a-z, 0-9 and '-')")))
}

pub(crate) fn not_found(id: &ServerId) -> ApiError {
    ApiError::new(ErrorCode::ServerNotFound, format!("no server {id:?}; GET /admin/servers lists them"))
}

/// Why a server with no version to serve cannot be called, and what makes it servable.
pub(crate) fn not_served(id: &ServerId, status: Status) -> String {
    match status {
        Status::AwaitingApproval => format!(
            "server {id:?} has no approved version yet; an operator approves one with POST \
             /admin/servers/{id}/versions/{{n}}/approve (GET /admin/servers/{id}/versions lists them)"
        ),
        Status::Rejected => format!(
            "server {id:?} has no version to serve: its version was rejected; POST /admin/servers/{id}/regenerate"
        ),
        status => format!("server {id:?} is {status}; its tools are served once it is ready"),
    }
}

/// The built server of an id that is being served, or why it cannot be called.
pub(crate) async fn served(state: &AppState, id: &ServerId) -> Result<Arc<Server>, ApiError> {
    match state.registry.server(id).await {
        Ok(Some(server)) => Ok(server),
        Ok(None) | Err(MountError::Gone { .. }) => Err(match state.catalog.server_status(id).await? {
            Some(status) => ApiError::new(ErrorCode::ServerNotReady, not_served(id, status)),
            None => not_found(id),
        }),
        Err(failure) => Err(ApiError::new(ErrorCode::ServerUnavailable, failure.to_string())),
    }
}

/// A body that may be empty (the defaults), read without asking for a content type so
/// `curl -X POST .../regenerate` works; `shape` says what was expected.
pub(crate) fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let refused = |error: &dyn std::fmt::Display| {
        ApiError::with_status(StatusCode::BAD_REQUEST, ErrorCode::InvalidBody, format!("expected {shape}: {error}"))
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| refused(&e))?;
    deserializer.end().map_err(|e| refused(&e))?;
    Ok(parsed)
}
