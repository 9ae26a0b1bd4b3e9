//! Code mode on the admin API: a server's settings, and running a script without an MCP client
//! (`mcpbootd code exec` uses it).

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::{ServerIdPath, not_found, served};
use crate::api::model::{ErrorBody, ScriptRequest, ScriptResult};
use crate::api::state::AppState;
use crate::states::Via;
use crate::toolset::CodeModeSettings;

/// Set a server's code-mode settings
///
/// `{"enabled": true, "allowed_servers": [...]}` lists the `code_execution` tool on the
/// server's mount (when `[code_mode] enabled` is on too); its limits replace the daemon's
/// `[code_mode]` defaults for this server. Takes effect for the next request.
#[utoipa::path(
    put,
    path = "/admin/servers/{id}/code-mode",
    params(("id" = String, Path)),
    request_body = CodeModeSettings,
    responses(
        (status = 200, description = "the settings now in force", body = CodeModeSettings),
        (status = 400, description = "body is not JSON, or a limit out of range", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 422, description = "body of the wrong shape", body = ErrorBody),
    ),
)]
pub async fn put_code_mode(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<CodeModeSettings>, JsonRejection>,
) -> Result<Json<CodeModeSettings>, ApiError> {
    let Json(settings) = body?;
    check_code_mode(Some(&settings))?;
    let _change = state.registry.serialize(&id).await;
    if !state.catalog.set_code_mode(&id, Some(&settings)).await? {
        return Err(not_found(&id));
    }
    state.registry.remount(&id).await?;
    tracing::info!(server_id = %id, enabled = settings.enabled, "code-mode settings changed");
    Ok(Json(settings))
}

/// Run a code-mode script on a server
///
/// The body is what the `code_execution` tool takes. A script that fails is still a 200, with
/// `ok: false` and the error; the run is logged like an MCP one (`via: admin`).
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/code",
    params(("id" = String, Path)),
    request_body = ScriptRequest,
    responses(
        (status = 200, description = "the script ran (or failed, `ok: false`)", body = ScriptResult),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 409, description = "code mode is off for this server or daemon", body = ErrorBody),
        (status = 422, description = "body of the wrong shape", body = ErrorBody),
        (status = 503, description = "server not ready or not servable", body = ErrorBody),
    ),
)]
pub async fn run_code(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<ScriptRequest>, JsonRejection>,
) -> Result<Json<ScriptResult>, ApiError> {
    let Json(request) = body?;
    let server = served(&state, &id).await?;
    let code_mode = state.registry.code_mode();
    if let Some(refusal) = code_mode.refusal(&server) {
        return Err(ApiError::new(ErrorCode::CodeModeDisabled, refusal));
    }
    Ok(Json(code_mode.run(&server, request, Via::Admin, None).await))
}

/// Code-mode settings, checked before anything is stored: the body of `PUT .../code-mode`, and a
/// registration's `code_mode`.
pub fn check_code_mode(settings: Option<&CodeModeSettings>) -> Result<(), ApiError> {
    match settings.map(CodeModeSettings::check) {
        Some(Err(problem)) => Err(ApiError::new(ErrorCode::InvalidField, problem.to_string())),
        _ => Ok(()),
    }
}
