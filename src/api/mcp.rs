//! `ANY /servers/{id}/mcp`: finds the mounted server, checks its access token and hands the
//! request to its MCP endpoint (`serve/mount.rs`).

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::model::ErrorBody;
use crate::serve::registry::MountError;
use crate::toolset::ServerId;

/// The MCP endpoint of one server (Streamable HTTP, stateless)
///
/// JSON-RPC requests (`tools/list`, `tools/call`, …) answered by the server's MCP service. A
/// server registered with an access token needs `Authorization: Bearer <token>`. Every method
/// reaches the MCP service, which answers those it does not serve with 405.
#[utoipa::path(
    post,
    path = "/servers/{id}/mcp",
    params(("id" = String, Path)),
    request_body(content = Object, description = "a JSON-RPC request"),
    responses(
        (status = 200, description = "the JSON-RPC response"),
        (status = 401, description = "the server's access token is missing or wrong", body = ErrorBody),
        (status = 403, description = "Host header not in [server] allowed_hosts"),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 503, description = "the daemon is starting, or the server is not ready or cannot be served", body = ErrorBody),
    ),
)]
pub async fn serve_mcp(State(state): State<AppState>, Path(id): Path<String>, request: Request) -> Response {
    let not_found = || ApiError::new(ErrorCode::ServerNotFound, format!("no server {id:?} is mounted here"));
    let server_id = ServerId::parse(&id).ok();
    let Some(mount) = server_id.as_ref().and_then(|id| state.registry.get(id)) else {
        if !state.ready.load(std::sync::atomic::Ordering::Acquire) {
            return ApiError::new(ErrorCode::Starting, "the daemon is still mounting servers").into_response();
        }
        if let Some(server_id) = &server_id
            && let Ok(Some(status)) = state.catalog.server_status(server_id).await
        {
            return ApiError::new(
                ErrorCode::ServerNotReady,
                format!("server {id:?} is {status}; its tools are served once it is ready"),
            )
            .into_response();
        }
        return not_found().into_response();
    };
    // The token is checked before anything is built, so unauthenticated requests cost a lookup.
    if let Some(expected) = &mount.access_token_sha256 {
        let presented = request.headers().get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !crate::access_token::verify(presented, expected) {
            return ApiError::new(
                ErrorCode::Unauthorized,
                format!("server {id:?} requires its access token: send Authorization: Bearer <token>"),
            )
            .into_response();
        }
    }
    match state.registry.build(&mount).await {
        Ok(mounted) => mounted.mcp.handle(request).await,
        Err(MountError::Gone { .. }) => not_found().into_response(),
        Err(failure) => ApiError::new(ErrorCode::ServerUnavailable, failure.to_string()).into_response(),
    }
}
