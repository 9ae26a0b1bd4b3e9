//! The one HTTP error type: a status plus `{"error": {"code", "message"}}`.
//!
//! Every code is an [`ErrorCode`], spelled once, and carries the status it is sent with. 4xx
//! messages are written for the person who sent the request and say how to fix it. 5xx responses
//! log the cause and tell the client little.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::model::{ErrorBody, ErrorDetail};
use crate::catalog::CatalogError;
use crate::states::text_enum;

text_enum! {
    /// What went wrong, as the `code` of an error response.
    pub enum ErrorCode ("error code") {
        /// The body is not JSON.
        MalformedJson = "malformed_json",
        /// The body is JSON of the wrong shape; see [`ErrorCode::status`].
        InvalidBody = "invalid_body",
        UnknownField = "unknown_field",
        MissingField = "missing_field",
        InvalidField = "invalid_field",
        AmbiguousRegistration = "ambiguous_registration",
        InvalidQuery = "invalid_query",
        InvalidPath = "invalid_path",
        Unauthorized = "unauthorized",
        Forbidden = "forbidden",
        RouteNotFound = "route_not_found",
        ServerNotFound = "server_not_found",
        ToolNotFound = "tool_not_found",
        ServerExists = "server_exists",
        NotGenerated = "not_generated",
        GenerationRunning = "generation_running",
        NothingToExport = "nothing_to_export",
        BodyTooLarge = "body_too_large",
        UnsupportedMediaType = "unsupported_media_type",
        InvalidId = "invalid_id",
        InvalidAccessToken = "invalid_access_token",
        InvalidDomain = "invalid_domain",
        InvalidTool = "invalid_tool",
        HandlerCompileError = "handler_compile_error",
        PromptTooLong = "prompt_too_long",
        InvalidArguments = "invalid_arguments",
        LlmNotConfigured = "llm_not_configured",
        /// The daemon is still mounting the servers from its catalog.
        Starting = "starting",
        ServerNotReady = "server_not_ready",
        /// A stored server that cannot be served (its mount cannot be built).
        ServerUnavailable = "server_unavailable",
        /// Admission refused a call: every slot taken and the queue full.
        Busy = "busy",
        ShuttingDown = "shutting_down",
        Internal = "internal",
    }
}

impl ErrorCode {
    /// The status an error with this code is sent with. `invalid_body` is the one code whose
    /// status depends on the route: 422 where a JSON body has the wrong content (the default),
    /// 400 where the route reads the body itself and it is not the kind of JSON value expected;
    /// those handlers give the status with [`ApiError::with_status`].
    pub const fn status(self) -> StatusCode {
        use ErrorCode::*;
        match self {
            MalformedJson
            | UnknownField
            | MissingField
            | InvalidField
            | AmbiguousRegistration
            | InvalidQuery
            | InvalidPath => StatusCode::BAD_REQUEST,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden => StatusCode::FORBIDDEN,
            RouteNotFound | ServerNotFound | ToolNotFound => StatusCode::NOT_FOUND,
            ServerExists | NotGenerated | GenerationRunning | NothingToExport => StatusCode::CONFLICT,
            BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            InvalidBody | InvalidId | InvalidAccessToken | InvalidDomain | InvalidTool | HandlerCompileError
            | PromptTooLong | InvalidArguments | LlmNotConfigured => StatusCode::UNPROCESSABLE_ENTITY,
            Starting | ServerNotReady | ServerUnavailable | Busy | ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    /// An error sent with its code's status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError::with_status(code.status(), code, message)
    }

    /// An error sent with another status than its code's (see [`ErrorCode::status`]).
    pub fn with_status(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }

    /// An unexpected failure: logged in full, reported to the client without internals.
    pub fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "internal error");
        ApiError::new(ErrorCode::Internal, "internal error; see the daemon log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code, message: self.message } };
        let mut response = (self.status, Json(body)).into_response();
        // RFC 6750 asks a bearer-token endpoint to say so.
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<CatalogError> for ApiError {
    fn from(error: CatalogError) -> ApiError {
        match error {
            CatalogError::Conflict(id) => ApiError::new(
                ErrorCode::ServerExists,
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
                ErrorCode::UnsupportedMediaType,
                "send the body as JSON with Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(ErrorCode::BodyTooLarge, "request body is larger than [server] max_body_bytes")
            }
            // axum reads the body with serde_path_to_error, so the message names the field.
            JsonRejection::JsonDataError(e) => ApiError::new(ErrorCode::InvalidBody, e.body_text()),
            other => ApiError::new(ErrorCode::MalformedJson, other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::new(ErrorCode::InvalidQuery, rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::new(ErrorCode::InvalidPath, rejection.body_text())
    }
}

/// Fallback for unknown routes, so even a 404 has the error shape.
pub async fn route_not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(ErrorCode::RouteNotFound, format!("no route for {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case_and_only_internal_is_a_5xx_other_than_503() {
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{text}");
            let status = code.status();
            assert!(status.is_client_error() || status.is_server_error(), "{text}: {status}");
            if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(*code, ErrorCode::Internal);
            }
        }
    }
}
