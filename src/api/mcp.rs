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

use crate::api::door::{Door, mount_door};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::not_served;
use crate::api::model::JsonRpcError;
use crate::api::state::AppState;
use std::sync::Arc;

use crate::api::connections::ClientAddress;
use crate::oauth::{Admission, Grant, MissingScope};
use crate::serve::mount::McpEndpoint;
use crate::serve::quota::CallerKey;
use crate::serve::registry::MountError;
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
        (status = 401, description = "the server's access token (static or OAuth) is missing or refused", body = JsonRpcError),
        (status = 403, description = "Host not in [server] allowed_hosts, Origin not in [server] allowed_origins, or an OAuth token without the scope needed", body = JsonRpcError),
        (status = 404, description = "no such server", body = JsonRpcError),
        (status = 406, description = "Accept excludes application/json", body = JsonRpcError),
        (status = 413, description = "body larger than [server] max_body_bytes", body = JsonRpcError),
        (status = 415, description = "Content-Type is not application/json", body = JsonRpcError),
        (status = 503, description = "the daemon is starting, or the server is not ready or cannot be served", body = JsonRpcError),
    ),
)]
pub async fn serve_mcp(State(state): State<AppState>, Path(id): Path<String>, mut request: Request) -> Response {
    let max_body_bytes = state.config.server.max_body_bytes;
    // Boxed, like rmcp's answer in `McpEndpoint::handle`: building a mount (catalog reads) takes a
    // large future, which inline would stay part of this one while the call runs, so every call
    // parked on a slow API would hold its bytes.
    let found = Box::pin(find_mount(&state, &id, request.uri(), request.headers())).await;
    let response = match found {
        Ok((endpoint, None, token_door)) => {
            // Who the call counts against at the door: the static token's holder, else the
            // client's address (docs/traffic.md).
            let caller = match request.extensions().get::<ClientAddress>() {
                _ if token_door => CallerKey::token(),
                Some(ClientAddress(address)) => CallerKey::address(address.ip()),
                None => CallerKey::unknown(),
            };
            request.extensions_mut().insert(caller);
            request.extensions_mut().insert(Admission::Unscoped);
            transport::answer(&endpoint, request, max_body_bytes, None).await
        }
        Ok((endpoint, Some(grant), _)) => {
            request.extensions_mut().insert(CallerKey::subject(&grant.claims.sub));
            // The serving path checks every tool call against the grant and logs its caller;
            // `gate` refuses a `tools/call` the token cannot make before any work, with the 403 a
            // host can step up from.
            request.extensions_mut().insert(Admission::Granted(grant.clone()));
            let mcp_path = format!("/servers/{id}/mcp");
            let gate = |body: &[u8]| tool_gate(&state, &endpoint, &grant, &mcp_path, body);
            transport::answer(&endpoint, request, max_body_bytes, Some(&gate)).await
        }
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

/// A `tools/call` of a tool the token may not call: 403 `insufficient_scope` naming the scope
/// to ask for. `code_execution` passes (a script's every tool call is checked as it is made).
fn tool_gate(state: &AppState, endpoint: &McpEndpoint, grant: &Grant, mcp_path: &str, body: &[u8]) -> Option<ApiError> {
    if grant.rule.is_open() {
        return None;
    }
    let name = params::called_tool(body)?;
    let tool = endpoint.server().tool(&name)?;
    let missing = grant.check_tool(&name, tool.read_only()).err()?;
    state.metrics.record_oauth_refusal("insufficient_scope");
    Some(insufficient_scope(state, mcp_path, &missing))
}

fn insufficient_scope(state: &AppState, mcp_path: &str, missing: &MissingScope) -> ApiError {
    ApiError::new(ErrorCode::InsufficientScope, format!("{missing}; sign in again asking for it"))
        .with_challenge(super::oauth::scope_challenge(&state.config.auth.oauth, mcp_path, missing))
}

/// Counts a refusal, and logs a client's mistake at debug level: it is the client's to fix,
/// not the operator's (server-side failures are logged where they happen).
fn count_refusal(state: &AppState, id: &str, status: StatusCode, code: ErrorCode) {
    let mounted = ServerId::parse(id).ok().filter(|id| state.registry.get(id).is_some());
    let mounted = mounted.as_ref().map(ServerId::as_str);
    // Refused at the door: the token, the Host or Origin, a server that does not exist.
    if matches!(
        code,
        ErrorCode::Unauthorized
            | ErrorCode::InsufficientScope
            | ErrorCode::HostNotAllowed
            | ErrorCode::OriginNotAllowed
            | ErrorCode::ServerNotFound
    ) {
        state.metrics.record_mcp_rejection(mounted, status);
    }
    if status.is_client_error() {
        tracing::debug!(server_id = id, %status, code = code.as_str(), "MCP request refused");
        state.metrics.record_client_error(mounted, ClientMistake::Refused(code.as_str()));
    }
}

/// The mounted server a request may reach, judged from its head alone.
async fn find_mount(
    state: &AppState,
    id: &str,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(Arc<McpEndpoint>, Option<Arc<Grant>>, bool), ApiError> {
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
    let door = mount_door(&mount, &state.config.auth.oauth);
    let token_door = matches!(door, Door::AccessToken(_));
    let grant = match door {
        Door::Open => None,
        Door::AccessToken(expected) => {
            let presented = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
            if !crate::access_token::verify(presented, expected) {
                return Err(access_token_refusal(id, presented.is_some()));
            }
            None
        }
        Door::OAuth(extra) => Some(Arc::new(check_oauth(state, id, headers, extra).await?)),
    };
    match state.registry.build(&mount).await {
        Ok(endpoint) => Ok((endpoint, grant, token_door)),
        Err(MountError::Gone { .. }) => Err(not_found()),
        Err(failure) => Err(ApiError::new(ErrorCode::ServerUnavailable, failure.to_string())),
    }
}

/// A mount behind OAuth: the request needs an access token from the configured issuer whose
/// audience is this mount. Tokens are read from the `Authorization` header only (never from the
/// query), and go no further than this check: handlers and upstreams never see them.
async fn check_oauth(state: &AppState, id: &str, headers: &HeaderMap, extra: &[String]) -> Result<Grant, ApiError> {
    let oauth = &state.config.auth.oauth;
    let Some(validator) = &state.oauth else {
        // A server set to OAuth on a daemon since started without [auth.oauth]: closed, not open.
        tracing::warn!(server_id = id, "a server set to OAuth cannot be served: [auth.oauth] is not configured");
        return Err(ApiError::new(
            ErrorCode::ServerUnavailable,
            format!(
                "MCP server {id:?} requires OAuth, but this daemon has no [auth.oauth] issuer configured; the \
                 operator must configure it or change the server's auth (PUT /admin/servers/{id}/auth)"
            ),
        ));
    };
    let mcp_path = format!("/servers/{id}/mcp");
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::access_token::bearer);
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
        Ok(claims) => {
            let grant = Grant { claims, rule: oauth.scope_rule(extra) };
            if let Err(missing) = grant.rule.check_mount(&grant.claims.scopes) {
                state.metrics.record_oauth_refusal("insufficient_scope");
                return Err(insufficient_scope(state, &mcp_path, &missing));
            }
            Ok(grant)
        }
        Err(refusal) => {
            state.metrics.record_oauth_refusal(refusal.reason());
            if let crate::oauth::Refusal::IssuerUnavailable(why) = &refusal {
                return Err(super::oauth::provider_unavailable(oauth, why));
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
