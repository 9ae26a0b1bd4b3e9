//! The room's shared helpers for the server a request names: its id read from the path (the
//! [`ServerIdPath`] and [`ServerItemPath`] extractors), the 404 for an unknown one, why a server
//! cannot be called yet, and an optional JSON body.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::api::AppState;
use crate::api::error::{ApiError, ErrorCode};
use crate::serve::registry::MountError;
use crate::serve::server::Server;
use crate::states::Status;
use crate::toolset::ServerId;

/// The server a route's only parameter, `{id}`, names, checked before the handler runs: a
/// malformed id is answered with the 404 that says which characters an id has.
pub struct ServerIdPath(pub ServerId);

/// A route's `{id}`, checked like [`ServerIdPath`], and the segments after it: a `String` for
/// one (`{id}/credentials/{name}`), a `(String, String)` for two (`{id}/versions/{from}/diff/{to}`).
pub struct ServerItemPath<T>(pub ServerId, pub T);

/// The segments a route has after `{id}`. They are read with axum's `Path` together with the
/// id, as one tuple, so a path that does not fit is refused exactly as `Path` refuses it.
pub trait AfterId: Sized + Send {
    /// The whole path's segments, the id first.
    type Segments: DeserializeOwned + Send;
    fn split(segments: Self::Segments) -> (String, Self);
}

impl AfterId for String {
    type Segments = (String, String);
    fn split((id, item): (String, String)) -> (String, String) {
        (id, item)
    }
}

impl AfterId for (String, String) {
    type Segments = (String, String, String);
    fn split((id, first, second): (String, String, String)) -> (String, (String, String)) {
        (id, (first, second))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ServerIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ServerIdPath, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state).await?;
        parse_id(&raw).map(ServerIdPath)
    }
}

impl<S: Send + Sync, T: AfterId> FromRequestParts<S> for ServerItemPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ServerItemPath<T>, ApiError> {
        let Path(segments) = Path::<T::Segments>::from_request_parts(parts, state).await?;
        let (raw, item) = T::split(segments);
        Ok(ServerItemPath(parse_id(&raw)?, item))
    }
}

/// A server id from a path, or the 404 that says which characters an id has.
fn parse_id(raw: &str) -> Result<ServerId, ApiError> {
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
