//! The room's shared helpers for the server a request names: its id read from the path (the
//! [`ServerIdPath`] and [`ServerItemPath`] extractors), the 404 for an unknown one, why a server
//! cannot be called yet, why a generation cannot start, an optional JSON body, and the kind of a
//! JSON value as error messages name it.

use std::fmt;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::state::AppState;
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

/// The server's catalog record, or the 404 that says how to find its id.
pub(crate) async fn find_server(state: &AppState, id: &ServerId) -> Result<crate::catalog::ServerRecord, ApiError> {
    state.catalog.get_server(id).await?.ok_or_else(|| not_found(id))
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

/// Why a prompt generation (a registration or a regeneration) cannot start: no LLM is configured,
/// or its key is missing; the message names the settings to add.
pub fn llm_not_configured(llm: &crate::config::LlmConfig) -> ApiError {
    let message = match llm.missing_key() {
        Some(problem) => format!(
            "prompt registrations need an LLM and {problem}; toolset registrations ({{\"tools\": [...]}}) work \
             without one"
        ),
        None => "prompt registrations need an LLM: set [llm] provider (\"anthropic\" or \"openai\") and model \
                 (MCPBOOTD_LLM__PROVIDER, MCPBOOTD_LLM__MODEL) and an API key ([llm] api_key, ANTHROPIC_API_KEY or \
                 OPENAI_API_KEY); toolset registrations ({\"tools\": [...]}) work without one"
            .to_string(),
    };
    ApiError::new(ErrorCode::LlmNotConfigured, message)
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

/// The kind of a JSON value, read without keeping the value; its `Display` is how error
/// messages name it ("an object").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl Kind {
    /// The kind of a value at hand.
    pub fn of(value: &Value) -> Kind {
        match value {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(_) => Kind::Number,
            Value::String(_) => Kind::String,
            Value::Array(_) => Kind::Array,
            Value::Object(_) => Kind::Object,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Null => "null",
            Kind::Bool => "a boolean",
            Kind::Number => "a number",
            Kind::String => "a string",
            Kind::Array => "an array",
            Kind::Object => "an object",
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Kind, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_none<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Bool)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }
    fn visit_str<E>(self, _: &str) -> Result<Kind, E> {
        Ok(Kind::String)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kind::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kind::Object)
    }
}
