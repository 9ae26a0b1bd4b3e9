//! The one HTTP error type: a status plus `{"error": {"code", "message"}}`.
//!
//! 4xx messages are written for the person who sent the request and say how to fix it. 5xx
//! responses log the cause and tell the client little.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::catalog::CatalogError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }
    /// 401 with `WWW-Authenticate: Bearer`, as RFC 6750 asks of a bearer-token endpoint.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }
    /// An unexpected failure: logged in full, reported to the client without internals.
    pub fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "internal error");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; see the daemon log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<CatalogError> for ApiError {
    fn from(error: CatalogError) -> ApiError {
        match error {
            CatalogError::Conflict(id) => ApiError::conflict(
                "server_exists",
                format!(
                    "a server with id {id:?} already exists; choose another id or DELETE /admin/servers/{id} first"
                ),
            ),
            other => ApiError::internal(other),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "request body is larger than [server] max_body_bytes",
            ),
            JsonRejection::JsonDataError(e) => ApiError::unprocessable("invalid_body", e.body_text()),
            other => ApiError::bad_request("malformed_json", other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::bad_request("invalid_query", rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::bad_request("invalid_path", rejection.body_text())
    }
}

/// Fallback for unknown routes, so even a 404 has the error shape.
pub async fn route_not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found("route_not_found", format!("no route for {}", uri.path()))
}
