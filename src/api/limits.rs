//! Admin API for a server's traffic limits (docs/traffic.md): show them with the defaults they
//! override, and replace them. A change remounts the server, so the next call counts under it.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::{ServerIdPath, find_server, not_found};
use crate::api::model::{ErrorBody, LimitsView};
use crate::api::state::AppState;
use crate::serve::quota::EffectiveLimits;
use crate::toolset::{ServerId, ServerLimits};

/// Show a server's traffic limits
///
/// `limits` holds what the server sets; each key it leaves out is the daemon's `[limits]`
/// default, and `effective` is what applies (0: off).
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/limits",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "the server's limits, the defaults and what applies", body = LimitsView),
        (status = 404, description = "no such server", body = ErrorBody),
    ),
)]
pub async fn get_limits(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<LimitsView>, ApiError> {
    let record = find_server(&state, &id).await?;
    Ok(Json(view(&state, &id, record.limits.unwrap_or_default())))
}

/// Set a server's traffic limits
///
/// Replaces the server's limits with the body: keys left out inherit the daemon's defaults, 0
/// turns one off for this server. `upstream` limits requests per minute to an origin
/// (`scheme://host:port`), e.g. a paid API's quota.
#[utoipa::path(
    put,
    path = "/admin/servers/{id}/limits",
    params(("id" = String, Path)),
    request_body = ServerLimits,
    responses(
        (status = 200, description = "the server's limits now", body = LimitsView),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "a key or origin refused, or body of the wrong shape", body = ErrorBody),
    ),
)]
pub async fn put_limits(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<ServerLimits>, JsonRejection>,
) -> Result<Json<LimitsView>, ApiError> {
    let Json(limits) = body?;
    let limits = limits.checked().map_err(|m| {
        ApiError::with_status(axum::http::StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::InvalidField, m.to_string())
    })?;
    let _change = state.registry.serialize(&id).await;
    let stored = (limits != ServerLimits::default()).then_some(&limits);
    if !state.catalog.set_limits(&id, stored).await? {
        return Err(not_found(&id));
    }
    state.registry.remount(&id).await?;
    tracing::info!(server_id = %id, "traffic limits changed");
    Ok(Json(view(&state, &id, limits)))
}

fn view(state: &AppState, id: &ServerId, limits: ServerLimits) -> LimitsView {
    let defaults = &state.config.limits;
    LimitsView {
        id: id.to_string(),
        effective: EffectiveLimits::of(defaults, Some(&limits)).into(),
        defaults: EffectiveLimits::of(defaults, None).into(),
        limits,
    }
}
