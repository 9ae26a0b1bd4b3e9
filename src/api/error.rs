//! The one HTTP error type: a status, an [`ErrorCode`] and a message, written in the shape the
//! client of the route reads (see [`ErrorShape`]).
//!
//! Every code is an [`ErrorCode`], spelled once, and carries the status it is sent with. 4xx
//! messages are written for the person who sent the request and say how to fix it. 5xx responses
//! log the cause and tell the client little. The bodies an error is written as ([`ErrorBody`],
//! [`JsonRpcError`], [`OAuthError`]) are defined here too, so this module needs nothing else of
//! the API.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

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
        /// An OAuth token without the scope the request needs (403 with a step-up challenge).
        InsufficientScope = "insufficient_scope",
        /// A server's auth setting that cannot be applied (OAuth without `[auth.oauth]`, a bad scope).
        InvalidAuth = "invalid_auth",
        /// The `Host` header is not in `[server] allowed_hosts` (DNS-rebinding protection).
        HostNotAllowed = "host_not_allowed",
        /// The `Origin` header is not in `[server] allowed_origins`.
        OriginNotAllowed = "origin_not_allowed",
        /// An OAuth discovery or registration request: MCP mounts take static bearer tokens.
        OauthNotSupported = "oauth_not_supported",
        /// A method the route does not answer (the MCP endpoint answers POST only).
        MethodNotAllowed = "method_not_allowed",
        /// A JSON-RPC method the protocol revision the request speaks does not have.
        MethodNotFound = "method_not_found",
        /// The `Accept` header excludes JSON.
        NotAcceptable = "not_acceptable",
        /// A header the request may not carry as sent (two `Host` headers, say).
        InvalidHeader = "invalid_header",
        /// JSON that is not a JSON-RPC message the MCP endpoint can take.
        InvalidMessage = "invalid_message",
        /// A JSON-RPC request whose `params` do not fit its method (`tools/call` without a name).
        InvalidParams = "invalid_params",
        /// A JSON-RPC batch under a protocol revision without batches, or one too large.
        BatchNotSupported = "batch_not_supported",
        RouteNotFound = "route_not_found",
        ServerNotFound = "server_not_found",
        ToolNotFound = "tool_not_found",
        ServerExists = "server_exists",
        NotGenerated = "not_generated",
        GenerationRunning = "generation_running",
        NothingToExport = "nothing_to_export",
        /// No version with that number (`GET .../versions` lists them).
        VersionNotFound = "version_not_found",
        /// The version is not in a status that allows the change (approve one that awaits
        /// approval, activate one that is ready).
        VersionConflict = "version_conflict",
        /// `GET /admin/backup` on a catalog in PostgreSQL, which its own tools back up.
        BackupNotSupported = "backup_not_supported",
        /// `POST .../code` on a server (or daemon) with code mode off.
        CodeModeDisabled = "code_mode_disabled",
        BodyTooLarge = "body_too_large",
        UnsupportedMediaType = "unsupported_media_type",
        InvalidId = "invalid_id",
        InvalidAccessToken = "invalid_access_token",
        /// A credential whose name, value, domains or injection rule is refused.
        InvalidCredential = "invalid_credential",
        CredentialNotFound = "credential_not_found",
        /// A call of a server with per-user credentials that needs the caller's own account: the
        /// admin API has no caller, and an MCP caller who has not connected gets a link.
        NotConnected = "not_connected",
        ConnectionNotFound = "connection_not_found",
        /// A traffic limit refused the call (`[limits]`, `PUT /admin/servers/{id}/limits`).
        RateLimited = "rate_limited",
        InvalidDomain = "invalid_domain",
        InvalidTool = "invalid_tool",
        HandlerCompileError = "handler_compile_error",
        /// An API description that cannot be read, or from which no tool can be derived.
        InvalidOpenapi = "invalid_openapi",
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
        /// The catalog refuses writes (a full disk, read-only files): the change was not made.
        CatalogUnwritable = "catalog_unwritable",
        /// The catalog's database cannot be reached: the change was not made.
        CatalogUnavailable = "catalog_unavailable",
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
            | InvalidPath
            | InvalidMessage
            | InvalidParams
            | InvalidHeader
            | BatchNotSupported => StatusCode::BAD_REQUEST,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden | InsufficientScope | HostNotAllowed | OriginNotAllowed => StatusCode::FORBIDDEN,
            RouteNotFound | ServerNotFound | ToolNotFound | CredentialNotFound | ConnectionNotFound
            | OauthNotSupported | MethodNotFound | VersionNotFound => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            ServerExists | NotGenerated | GenerationRunning | NothingToExport | CodeModeDisabled | VersionConflict
            | BackupNotSupported | NotConnected => StatusCode::CONFLICT,
            BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RateLimited => StatusCode::TOO_MANY_REQUESTS,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            InvalidBody | InvalidId | InvalidAccessToken | InvalidAuth | InvalidCredential | InvalidDomain
            | InvalidTool | HandlerCompileError | InvalidOpenapi | PromptTooLong | InvalidArguments
            | LlmNotConfigured => StatusCode::UNPROCESSABLE_ENTITY,
            Starting | ServerNotReady | ServerUnavailable | Busy | ShuttingDown | CatalogUnwritable
            | CatalogUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl ErrorCode {
    /// The JSON-RPC error code an MCP client sees for this error: the standard codes where one
    /// fits (parse error, invalid request, method not found, invalid params, internal error), and two from the range JSON-RPC
    /// leaves to servers for what it has no code for: -32001 for a missing or wrong access token,
    /// -32000 for a server that cannot answer now.
    pub const fn jsonrpc_code(self) -> i64 {
        use ErrorCode::*;
        match self {
            MalformedJson => -32700,
            MethodNotFound => -32601,
            InvalidParams => -32602,
            Unauthorized => -32001,
            Internal => -32603,
            Starting | ServerNotReady | ServerUnavailable | Busy | ShuttingDown | CatalogUnwritable
            | CatalogUnavailable | RateLimited => -32000,
            _ => -32600,
        }
    }
}

// The bodies errors are written as.

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// What kind of error; a client can act on it.
    pub code: ErrorCode,
    /// What went wrong and how to fix it.
    pub message: String,
}

/// An error from the MCP endpoint (`/servers/{id}/mcp`): a JSON-RPC error response, so MCP
/// clients show its message. `id` is null when the request was refused before its body was read.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JsonRpcError {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    #[schema(value_type = Option<Object>)]
    pub id: Value,
    pub error: JsonRpcErrorDetail,
}

impl JsonRpcError {
    /// An error that answers no particular request (`id: null`).
    pub fn new(error: JsonRpcErrorDetail) -> JsonRpcError {
        JsonRpcError { jsonrpc: "2.0".into(), id: Value::Null, error }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JsonRpcErrorDetail {
    /// The JSON-RPC error code: -32700 parse error, -32600 invalid request, -32603 internal
    /// error, -32001 missing or wrong access token, -32000 server not able to answer now.
    pub code: i64,
    /// What went wrong and how to fix it.
    pub message: String,
    pub data: JsonRpcErrorData,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JsonRpcErrorData {
    /// The same code an admin API error would carry.
    pub code: ErrorCode,
}

/// An OAuth error (RFC 6749 §5.2): the answer to OAuth discovery and registration probes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OAuthError {
    pub error: String,
    pub error_description: String,
}

/// How an error is written. One error type serves three kinds of client, each of which shows
/// its user only the message it knows where to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorShape {
    /// `{"error": {"code", "message"}}`: the admin API and the probes.
    #[default]
    Api,
    /// A JSON-RPC error response (`{"jsonrpc": "2.0", "id": null, "error": {"code", "message",
    /// "data": {"code"}}}`): the MCP endpoint. MCP clients read the message out of a non-2xx
    /// JSON-RPC body and show it; any other body they report as "Server returned an error".
    JsonRpc,
    /// `{"error", "error_description"}` (RFC 6749 §5.2): OAuth discovery and registration
    /// probes, whose clients show `error_description`.
    OAuth,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub shape: ErrorShape,
    /// The id of the JSON-RPC request answered (null when it is not known): only the
    /// JSON-RPC shape carries it, and clients match the error to their request by it.
    pub reply_to: Value,
    /// The `WWW-Authenticate` challenge, when not the plain bearer one a 401 gets.
    /// Boxed: errors travel in `Result`s on every handler, and most have none.
    pub challenge: Option<Box<HeaderValue>>,
    /// Seconds a refused client should wait (`Retry-After`), for a traffic limit's refusal.
    pub retry_after: Option<std::num::NonZeroU32>,
}

impl ApiError {
    /// An error sent with its code's status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError::with_status(code.status(), code, message)
    }

    /// An error sent with another status than its code's (see [`ErrorCode::status`]).
    pub fn with_status(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            shape: ErrorShape::Api,
            reply_to: Value::Null,
            challenge: None,
            retry_after: None,
        }
    }

    /// The same error with this `WWW-Authenticate` challenge (OAuth's, which names where the
    /// resource's metadata is).
    pub fn with_challenge(self, challenge: HeaderValue) -> ApiError {
        ApiError { challenge: Some(Box::new(challenge)), ..self }
    }

    /// The same error with a `Retry-After` of this many seconds.
    pub fn with_retry_after(self, seconds: u64) -> ApiError {
        let seconds =
            std::num::NonZeroU32::new(u32::try_from(seconds).unwrap_or(u32::MAX)).unwrap_or(std::num::NonZeroU32::MIN);
        ApiError { retry_after: Some(seconds), ..self }
    }

    /// The same error, written as a JSON-RPC error response (the MCP endpoint's form).
    pub fn as_jsonrpc(self) -> ApiError {
        ApiError { shape: ErrorShape::JsonRpc, ..self }
    }

    /// The same error, written as the JSON-RPC answer to the request with this id.
    pub fn in_reply_to(self, id: Value) -> ApiError {
        ApiError { shape: ErrorShape::JsonRpc, reply_to: id, ..self }
    }

    /// The same error, written as an OAuth error response.
    pub fn as_oauth(self) -> ApiError {
        ApiError { shape: ErrorShape::OAuth, ..self }
    }

    /// An unexpected failure: logged in full, reported to the client without internals.
    pub fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "internal error");
        ApiError::new(ErrorCode::Internal, "internal error; see the daemon log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // RFC 6750 asks a bearer-token endpoint to say so, with the reason for hosts that show it.
        let challenge = self
            .challenge
            .clone()
            .map(|challenge| *challenge)
            .or_else(|| (self.status == StatusCode::UNAUTHORIZED).then(|| bearer_challenge(&self.message)));
        let mut response = match self.shape {
            ErrorShape::Api => {
                let body = ErrorBody { error: ErrorDetail { code: self.code, message: self.message } };
                (self.status, Json(body)).into_response()
            }
            ErrorShape::JsonRpc => {
                let error = JsonRpcErrorDetail {
                    code: self.code.jsonrpc_code(),
                    message: self.message,
                    data: JsonRpcErrorData { code: self.code },
                };
                (self.status, Json(JsonRpcError { id: self.reply_to, ..JsonRpcError::new(error) })).into_response()
            }
            ErrorShape::OAuth => {
                let body = OAuthError { error: "invalid_request".into(), error_description: self.message };
                (self.status, Json(body)).into_response()
            }
        };
        if let Some(challenge) = challenge {
            response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
        }
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds.get()));
        }
        // For the layers above that count and log refusals by code (`api::mcp`).
        response.extensions_mut().insert(self.code);
        response
    }
}

/// `Bearer error="invalid_token", error_description="…"` (RFC 6750 §3), the description cut to
/// what a header can carry: printable ASCII without quotes or backslashes.
fn bearer_challenge(message: &str) -> HeaderValue {
    let description = header_quotable(message);
    HeaderValue::from_str(&format!("Bearer error=\"invalid_token\", error_description=\"{description}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"invalid_token\""))
}

/// `text` as a quoted header parameter can carry it: printable ASCII without quotes or backslashes.
pub fn header_quotable(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '\'' }).collect()
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
            CatalogError::Unwritable(cause) => {
                tracing::error!(%cause, "a catalog write failed");
                ApiError::new(
                    ErrorCode::CatalogUnwritable,
                    "the catalog cannot be written (its disk is full, or its files or file system are read-only), \
                     so nothing was changed; the daemon log has the cause. Retry once GET /readyz reports \
                     \"catalog\": \"ok\"",
                )
            }
            CatalogError::Unavailable(cause) => {
                tracing::error!(%cause, "the catalog could not be reached");
                ApiError::new(
                    ErrorCode::CatalogUnavailable,
                    "the catalog's database cannot be reached, so nothing was changed; the daemon log has the \
                     cause. Retry once GET /readyz reports \"catalog\": \"ok\"",
                )
            }
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
        // Parameters that do not fit their route's handler are the daemon's mistake, not the
        // client's: the same 500 the outermost layer makes of axum's own answer.
        if rejection.status().is_server_error() {
            return ApiError::internal(rejection.body_text());
        }
        ApiError::new(ErrorCode::InvalidPath, rejection.body_text())
    }
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
