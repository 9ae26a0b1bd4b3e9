//! What every route shares on the wire, around the handlers: a request with two `Host` headers is
//! refused (RFC 9112 §3.2), and **every error body is JSON**, whoever wrote it. Handlers answer
//! with `ApiError`; this layer rewrites the few answers axum and rmcp write themselves in plain
//! text or with an empty body (405 for a method a route does not have, 400 for a path segment
//! that is not UTF-8, …) into the same shape, so a client never has to parse anything else. The
//! MCP endpoint's errors are JSON-RPC errors, the others the admin API's.

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::http::header::{ALLOW, CONTENT_TYPE, HOST};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::error::{ApiError, ErrorCode};

/// Bytes of a plain-text error body kept as the message.
const TEXT_BYTES: usize = 4 * 1024;

pub async fn json_errors(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    if request.headers().get_all(HOST).iter().nth(1).is_some() {
        return shaped(
            &path,
            ApiError::new(ErrorCode::InvalidHeader, "a request may carry one Host header, not several"),
        );
    }
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    // The connect pages answer a browser, whose person reads the page.
    let is_page = path.starts_with("/connect")
        && response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_json || is_page {
        return response;
    }
    let allow = response.headers().get(ALLOW).cloned();
    let text = axum::body::to_bytes(response.into_body(), TEXT_BYTES).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let error = match status {
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("{method} is not answered on {path}; the Allow header lists the methods that are"),
        ),
        StatusCode::BAD_REQUEST => ApiError::new(ErrorCode::InvalidPath, non_empty(text, "the request is malformed")),
        StatusCode::NOT_FOUND => ApiError::new(ErrorCode::RouteNotFound, format!("no route for {path}")),
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(ErrorCode::BodyTooLarge, "the request body is larger than [server] max_body_bytes")
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::new(ErrorCode::UnsupportedMediaType, non_empty(text, "send the body as application/json"))
        }
        status if status.is_server_error() => ApiError::internal(format!("{status}: {text}")),
        status => ApiError::with_status(status, ErrorCode::InvalidMessage, non_empty(text, "the request was refused")),
    };
    let mut response = shaped(&path, error);
    if let Some(allow) = allow {
        response.headers_mut().insert(ALLOW, allow);
    }
    response
}

fn non_empty(text: String, otherwise: &str) -> String {
    if text.is_empty() { otherwise.to_string() } else { text }
}

/// The error in the shape the route's clients read: JSON-RPC on MCP endpoints.
fn shaped(path: &str, error: ApiError) -> Response<Body> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let is_mcp = matches!(segments.as_slice(), ["servers", _, "mcp", ..]);
    if is_mcp { error.as_jsonrpc().into_response() } else { error.into_response() }
}
