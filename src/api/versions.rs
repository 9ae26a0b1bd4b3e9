//! The lifecycle of a server's versions (`docs/versions.md`): list and show them, diff two,
//! approve or reject one that awaits approval, activate any ready one (rollback), set whether a
//! server's versions need approval, and check its documentation for drift now.
//!
//! Whatever changes the version a server serves holds `Registry::serialize` across the catalog
//! write and the remount, like a registration: calls already routed finish on the version they
//! started on, the next request is served by the new one.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::{ServerIdPath, ServerItemPath, not_found, optional_body};
use crate::api::model::{
    ActivateRequest, ApprovalSetting, DriftReport, DriftView, ErrorBody, GenerationView, RejectRequest, VersionChanged,
    VersionDiff, VersionList, VersionSummary, VersionView,
};
use crate::api::state::AppState;
use crate::catalog::{GenerationRecord, Review, VersionRefusal};
use crate::generate::LifecycleEvent;
use crate::generate::drift::DriftError;
use crate::states::{Status, VersionChange};
use crate::toolset::ServerId;

pub mod diff;

/// A reason is for the record; a short paragraph is plenty.
const MAX_REASON_CHARS: usize = 2000;

/// List a server's versions
///
/// Every generation of the server, oldest first, with what started it, its status, tools,
/// self-test summary and review; `active_version` is the one being served.
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/versions",
    params(("id" = String, Path)),
    responses((status = 200, description = "the versions", body = VersionList), (status = 404, description = "no such server", body = ErrorBody)),
)]
pub async fn list_versions(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<VersionList>, ApiError> {
    let (active, versions) = state.catalog.list_versions(&id).await?.ok_or_else(|| not_found(&id))?;
    let versions: Vec<VersionSummary> = versions.into_iter().map(|row| VersionSummary::new(row, active)).collect();
    let active_version = versions.iter().find(|v| v.active).map(|v| v.version);
    Ok(Json(VersionList { id, active_version, versions }))
}

/// One version of a server
///
/// Everything about it, as the server view shows its generation; a version awaiting approval
/// also carries its diff against the active version.
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/versions/{version}",
    params(("id" = String, Path), ("version" = i64, Path)),
    responses(
        (status = 200, description = "the version", body = VersionView),
        (status = 404, description = "no such server or version", body = ErrorBody),
    ),
)]
pub async fn get_version(
    State(state): State<AppState>,
    ServerItemPath(id, version): ServerItemPath<String>,
) -> Result<Json<VersionView>, ApiError> {
    let (record, active) = version_of(&state, &id, &version).await?;
    let diff_from_active = match active {
        Some(active) if record.status == Status::AwaitingApproval => {
            let active = state.catalog.generation_record(active).await?;
            active.map(|active| diff::diff(&active, &record))
        }
        _ => None,
    };
    Ok(Json(VersionView {
        active: Some(record.id) == active,
        generation: GenerationView::from(&record),
        diff_from_active,
    }))
}

/// What changes between two versions
///
/// Tools added, removed and renamed; per changed tool its title, description, schemas and
/// annotations (structurally) and its handler (a unified diff); the whitelist; the credentials
/// the tools need.
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/versions/{from}/diff/{to}",
    params(("id" = String, Path), ("from" = i64, Path), ("to" = i64, Path)),
    responses(
        (status = 200, description = "the changes from `from` to `to`", body = VersionDiff),
        (status = 404, description = "no such server or version", body = ErrorBody),
    ),
)]
pub async fn diff_versions(
    State(state): State<AppState>,
    ServerItemPath(id, (from, to)): ServerItemPath<(String, String)>,
) -> Result<Json<VersionDiff>, ApiError> {
    let (from, _) = version_of(&state, &id, &from).await?;
    let (to, _) = version_of(&state, &id, &to).await?;
    Ok(Json(diff::diff(&from, &to)))
}

/// Approve a version that awaits approval
///
/// It becomes the active version at once; calls in flight finish on the version they started on.
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/versions/{version}/approve",
    params(("id" = String, Path), ("version" = i64, Path)),
    responses(
        (status = 200, description = "approved and served", body = VersionChanged),
        (status = 404, description = "no such server or version", body = ErrorBody),
        (status = 409, description = "the version does not await approval", body = ErrorBody),
    ),
)]
pub async fn approve_version(
    State(state): State<AppState>,
    ServerItemPath(id, version): ServerItemPath<String>,
) -> Result<Json<VersionChanged>, ApiError> {
    let number = version_number(&version)?;
    let _change = state.registry.serialize(&id).await;
    let result = state.catalog.review_version(&id, number, Review::Approve, None).await?;
    refused(&id, number, result, "approve", "only a version awaiting approval can be approved")?;
    remount(&state, &id).await?;
    changed(&state, &id, number, Status::Ready, VersionChange::Approved).await
}

/// Reject a version that awaits approval
///
/// It is kept with the reason and never served; the active version goes on serving.
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/versions/{version}/reject",
    params(("id" = String, Path), ("version" = i64, Path)),
    request_body(content = Option<RejectRequest>),
    responses(
        (status = 200, description = "rejected", body = VersionChanged),
        (status = 400, description = "body is not the expected JSON, or the reason is too long", body = ErrorBody),
        (status = 404, description = "no such server or version", body = ErrorBody),
        (status = 409, description = "the version does not await approval", body = ErrorBody),
    ),
)]
pub async fn reject_version(
    State(state): State<AppState>,
    ServerItemPath(id, version): ServerItemPath<String>,
    body: axum::body::Bytes,
) -> Result<Json<VersionChanged>, ApiError> {
    let number = version_number(&version)?;
    let body: RejectRequest = optional_body(&body, "{\"reason\"?: string}")?;
    let reason = body.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.chars().count() > MAX_REASON_CHARS) {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!("reason is longer than {MAX_REASON_CHARS} characters; shorten it"),
        ));
    }
    let _change = state.registry.serialize(&id).await;
    let result = state.catalog.review_version(&id, number, Review::Reject, reason).await?;
    refused(&id, number, result, "reject", "only a version awaiting approval can be rejected")?;
    changed(&state, &id, number, Status::Rejected, VersionChange::Rejected).await
}

/// Serve another ready version (rollback)
///
/// Switches the mount to version `version` at once; calls in flight finish on the version they
/// started on.
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/activate",
    params(("id" = String, Path)),
    request_body = ActivateRequest,
    responses(
        (status = 200, description = "the version is served", body = VersionChanged),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server or version", body = ErrorBody),
        (status = 409, description = "the version is not ready (failed, planned, rejected, awaiting approval or running)", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "body of the wrong shape", body = ErrorBody),
    ),
)]
pub async fn activate_version(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<ActivateRequest>, JsonRejection>,
) -> Result<Json<VersionChanged>, ApiError> {
    let Json(body) = body?;
    let _change = state.registry.serialize(&id).await;
    let result = state.catalog.activate_version(&id, body.version).await?;
    let hint = "only a ready version can be served; approve one that awaits approval, or regenerate";
    refused(&id, body.version, result, "activate", hint)?;
    remount(&state, &id).await?;
    tracing::info!(server_id = %id, version = body.version, "version activated");
    changed(&state, &id, body.version, Status::Ready, VersionChange::Activated).await
}

/// Set whether a server's new versions wait for approval
#[utoipa::path(
    put,
    path = "/admin/servers/{id}/approval",
    params(("id" = String, Path)),
    request_body = ApprovalSetting,
    responses(
        (status = 200, description = "the setting", body = ApprovalSetting),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "body of the wrong shape", body = ErrorBody),
    ),
)]
pub async fn put_approval(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<ApprovalSetting>, JsonRejection>,
) -> Result<Json<ApprovalSetting>, ApiError> {
    let Json(body) = body?;
    if !state.catalog.set_require_approval(&id, body.require_approval).await? {
        return Err(not_found(&id));
    }
    Ok(Json(body))
}

/// Check a server's documentation for drift now
///
/// Fetches the documents of its newest version again and compares them; a change is recorded
/// as a drift event and starts a candidate version (which goes through the review gate).
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/check-drift",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "what the check found", body = DriftReport),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 409, description = "not a prompt server, or a generation is running", body = ErrorBody),
    ),
)]
pub async fn check_drift(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<DriftReport>, ApiError> {
    let outcome = state.generator.check_drift(&id).await.map_err(|error| match error {
        DriftError::NoServer(id) => not_found(&id),
        DriftError::NoDocuments(_) => ApiError::new(ErrorCode::NotGenerated, error.to_string()),
        DriftError::Generating(_) | DriftError::CheckedElsewhere(_) => {
            ApiError::new(ErrorCode::GenerationRunning, error.to_string())
        }
        DriftError::Catalog(error) => error.into(),
    })?;
    Ok(Json(DriftReport {
        id,
        drift: DriftView::from(&outcome.state),
        changes: outcome.changes,
        event_id: outcome.event_id,
        generation_id: outcome.generation_id,
    }))
}

fn version_number(raw: &str) -> Result<i64, ApiError> {
    raw.parse::<i64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
        ApiError::new(
            ErrorCode::VersionNotFound,
            format!("no version {raw:?}: versions are numbered 1, 2, …; GET /admin/servers/{{id}}/versions lists them"),
        )
    })
}

async fn version_of(state: &AppState, id: &ServerId, raw: &str) -> Result<(GenerationRecord, Option<i64>), ApiError> {
    let number = version_number(raw)?;
    match state.catalog.version(id, number).await? {
        Ok(found) => Ok(found),
        Err(refusal) => Err(refusal_error(id, number, refusal, "", "")),
    }
}

fn refused(
    id: &ServerId,
    number: i64,
    result: Result<i64, VersionRefusal>,
    action: &str,
    hint: &str,
) -> Result<i64, ApiError> {
    result.map_err(|refusal| refusal_error(id, number, refusal, action, hint))
}

fn refusal_error(id: &ServerId, number: i64, refusal: VersionRefusal, action: &str, hint: &str) -> ApiError {
    match refusal {
        VersionRefusal::NoServer => not_found(id),
        VersionRefusal::NoVersion => ApiError::new(
            ErrorCode::VersionNotFound,
            format!("server {id:?} has no version {number}; GET /admin/servers/{id}/versions lists them"),
        ),
        VersionRefusal::Status(status) => ApiError::new(
            ErrorCode::VersionConflict,
            format!("cannot {action} version {number} of server {id:?}: it is {status}; {hint}"),
        ),
    }
}

/// Points the mount at the catalog's active version (held under `Registry::serialize`).
async fn remount(state: &AppState, id: &ServerId) -> Result<(), ApiError> {
    match state.catalog.mount_record(id).await? {
        Some(record) => state.registry.mount(record),
        None => tracing::warn!(server_id = %id, "no version to mount after a version change"),
    }
    Ok(())
}

async fn changed(
    state: &AppState,
    id: &ServerId,
    version: i64,
    status: Status,
    action: VersionChange,
) -> Result<Json<VersionChanged>, ApiError> {
    state.metrics.record_version_change(action);
    let active_version = state.catalog.active_version(id).await?;
    state.generator.announce(LifecycleEvent {
        kind: "version",
        id: id.clone(),
        status: Some(status),
        generation_id: None,
        version: Some(version),
        detail: Some(action.to_string()),
    });
    tracing::info!(server_id = %id, version, %action, "version changed");
    Ok(Json(VersionChanged { id: id.clone(), version, status, active_version }))
}
