//! `ANY /servers/{id}/mcp`: checks the `Host`, finds the mounted server, checks its access
//! token and hands the request to its MCP endpoint (`serve/mount.rs`) through `transport`,
//! which turns rmcp's plain-text refusals into JSON-RPC errors.
//!
//! Every error here is a JSON-RPC error response ([`ApiError::as_jsonrpc`]): MCP clients show
//! the message of such a body, where for any other they show only a status.

pub(super) mod params;
pub mod transport;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::api::admin::not_served;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::model::JsonRpcError;
use std::sync::Arc;

use crate::serve::registry::{MountError, Mounted};
use crate::telemetry::metrics::ClientMistake;
use crate::toolset::ServerId;

/// The MCP endpoint of one server (Streamable HTTP, stateless)
///
/// JSON-RPC requests (`tools/list`, `tools/call`, …) answered by the server's MCP service, one
/// message per POST (or a batch under protocol revision 2025-03-26). A server registered with an
/// access token needs `Authorization: Bearer <token>`. Other methods are answered 405. Every
/// error body is a JSON-RPC error.
#[utoipa::path(
    post,
    path = "/servers/{id}/mcp",
    params(("id" = String, Path)),
    request_body(content = Object, description = "a JSON-RPC request, or under 2025-03-26 a batch of them"),
    responses(
        (status = 200, description = "the JSON-RPC response"),
        (status = 202, description = "a notification was accepted"),
        (status = 400, description = "not JSON, not a JSON-RPC message, or a batch the revision does not allow", body = JsonRpcError),
        (status = 401, description = "the server's access token is missing or wrong", body = JsonRpcError),
        (status = 403, description = "Host not in [server] allowed_hosts, or Origin not in [server] allowed_origins", body = JsonRpcError),
        (status = 404, description = "no such server", body = JsonRpcError),
        (status = 406, description = "Accept excludes application/json", body = JsonRpcError),
        (status = 413, description = "body larger than [server] max_body_bytes", body = JsonRpcError),
        (status = 415, description = "Content-Type is not application/json", body = JsonRpcError),
        (status = 503, description = "the daemon is starting, or the server is not ready or cannot be served", body = JsonRpcError),
    ),
)]
pub async fn serve_mcp(State(state): State<AppState>, Path(id): Path<String>, request: Request) -> Response {
    let max_body_bytes = state.config.server.max_body_bytes;
    let response = match find_mount(&state, &id, request.uri(), request.headers()).await {
        Ok(mounted) => transport::answer(&mounted.mcp, request, max_body_bytes).await,
        Err(error) => {
            let id = transport::request_id(request, max_body_bytes).await;
            error.in_reply_to(id).into_response()
        }
    };
    if let Some(code) = response.extensions().get::<ErrorCode>() {
        count_refusal(&state, &id, response.status(), *code);
    }
    response
}

/// Counts a refusal, and logs a client's mistake at debug level: it is the client's to fix,
/// not the operator's (server-side failures are logged where they happen).
fn count_refusal(state: &AppState, id: &str, status: StatusCode, code: ErrorCode) {
    let mounted = ServerId::parse(id).ok().filter(|id| state.registry.get(id).is_some());
    let mounted = mounted.as_ref().map(ServerId::as_str);
    // Refused at the door: the token, the Host or Origin, a server that does not exist.
    if matches!(
        code,
        ErrorCode::Unauthorized | ErrorCode::HostNotAllowed | ErrorCode::OriginNotAllowed | ErrorCode::ServerNotFound
    ) {
        state.metrics.record_mcp_rejection(mounted, status);
    }
    if status.is_client_error() {
        tracing::debug!(server_id = id, %status, code = code.as_str(), "MCP request refused");
        state.metrics.record_client_error(mounted, ClientMistake::Refused(code.as_str()));
    }
}

/// The mounted server a request may reach, judged from its head alone.
async fn find_mount(state: &AppState, id: &str, uri: &Uri, headers: &HeaderMap) -> Result<Arc<Mounted>, ApiError> {
    // The Host is checked first, so a page reaching the daemon through DNS rebinding learns
    // nothing, not even which servers exist.
    state.mcp_hosts.check(uri, headers)?;
    let not_found = || ApiError::new(ErrorCode::ServerNotFound, format!("no server {id:?} is mounted here"));
    let server_id = ServerId::parse(id).ok();
    let Some(mount) = server_id.as_ref().and_then(|id| state.registry.get(id)) else {
        if !state.ready.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ApiError::new(ErrorCode::Starting, "the daemon is still mounting servers"));
        }
        if let Some(server_id) = &server_id
            && let Ok(Some(status)) = state.catalog.server_status(server_id).await
        {
            return Err(ApiError::new(ErrorCode::ServerNotReady, not_served(server_id, status)));
        }
        return Err(not_found());
    };
    // The token is checked before anything is built, so unauthenticated requests cost a lookup.
    if let Some(expected) = &mount.access_token_sha256 {
        let presented = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !crate::access_token::verify(presented, expected) {
            return Err(access_token_refusal(id, presented.is_some()));
        }
    }
    if mount.access_token_sha256.is_none() && state.config.auth.oauth.required {
        check_oauth(state, id, headers).await?;
    }
    match state.registry.build(&mount).await {
        Ok(mounted) => Ok(mounted),
        Err(MountError::Gone { .. }) => Err(not_found()),
        Err(failure) => Err(ApiError::new(ErrorCode::ServerUnavailable, failure.to_string())),
    }
}

/// A mount behind OAuth: the request needs an access token from the configured issuer whose
/// audience is this mount. Tokens are read from the `Authorization` header only (never from the
/// query), and go no further than this check: handlers and upstreams never see them.
async fn check_oauth(state: &AppState, id: &str, headers: &HeaderMap) -> Result<crate::oauth::Claims, ApiError> {
    let oauth = &state.config.auth.oauth;
    let Some(validator) = &state.oauth else {
        return Err(ApiError::internal("[auth.oauth] required without a validator"));
    };
    let mcp_path = format!("/servers/{id}/mcp");
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let Some(token) = presented.filter(|token| !token.is_empty()) else {
        state.metrics.record_oauth_refusal("missing_token");
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            format!(
                "MCP server {id:?} requires an OAuth access token from {}: sign in through the host \
                 (it finds how in {})",
                oauth.issuer,
                oauth.metadata_url(&mcp_path)
            ),
        )
        .with_challenge(super::oauth::challenge(oauth, &mcp_path, None)));
    };
    match validator.validate(token, &oauth.resource(&mcp_path)).await {
        Ok(claims) => Ok(claims),
        Err(refusal) => {
            state.metrics.record_oauth_refusal(refusal.reason());
            if let crate::oauth::Refusal::IssuerUnavailable(why) = &refusal {
                tracing::warn!(issuer = %oauth.issuer, %why, "an OAuth token could not be checked");
                return Err(ApiError::new(
                    ErrorCode::ServerUnavailable,
                    format!(
                        "the identity provider {} cannot be reached to check the token; try again shortly",
                        oauth.issuer
                    ),
                ));
            }
            tracing::debug!(
                server_id = id,
                reason = refusal.reason(),
                message = refusal.message(),
                "OAuth token refused"
            );
            let message =
                format!("the access token was refused ({}) by MCP server {id:?}", refusal.reason().replace('_', " "));
            Err(ApiError::new(ErrorCode::Unauthorized, message.clone()).with_challenge(super::oauth::challenge(
                oauth,
                &mcp_path,
                Some(&message),
            )))
        }
    }
}

/// The 401 for a missing or wrong token, saying where an MCP host takes the token: hosts show
/// this message (it is also the `error_description` of the `WWW-Authenticate` challenge).
fn access_token_refusal(id: &str, presented: bool) -> ApiError {
    let what = if presented { "the access token sent is not the one" } else { "no access token was sent; one is" };
    ApiError::new(
        ErrorCode::Unauthorized,
        format!(
            "{what} required by MCP server {id:?}. It takes a static bearer token, not OAuth: in the host's \
             mcpServers entry add \"headers\": {{\"Authorization\": \"Bearer <token>\"}} (the token is the \
             access_token it was registered with)"
        ),
    )
}
