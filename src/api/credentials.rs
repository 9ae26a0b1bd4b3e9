//! Admin API for a server's upstream credentials: set or rotate, list (never the value),
//! delete. A change remounts the server, so the next call uses it; calls in flight keep the
//! value they started with.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::AppState;
use crate::api::admin::{not_found, parse_id};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::model::{CredentialList, CredentialRequest, CredentialView, ErrorBody};
use crate::catalog::{NewCredential, PutCredential};
use crate::credentials::vault::Vault;
use crate::credentials::{self, Binding, Injection, MAX_PER_SERVER};
use crate::serve::egress::is_forbidden_header;
use crate::toolset::ServerId;
use crate::whitelist::Whitelist;

/// Set or rotate a credential
///
/// The value is encrypted at rest and added by the egress to requests whose host matches
/// `domains`, after the network policy allowed them; handlers never see it (it is taken out of
/// every response before they do). The answer's `warnings` name the hosts the server's handlers
/// may fetch that the credential is not sent to.
#[utoipa::path(
    put,
    path = "/admin/servers/{id}/credentials/{name}",
    params(("id" = String, Path), ("name" = String, Path)),
    request_body = CredentialRequest,
    responses(
        (status = 200, description = "rotated", body = CredentialView),
        (status = 201, description = "created", body = CredentialView),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "name, value, domains or injection rule refused, or body of the wrong shape", body = ErrorBody),
    ),
)]
pub async fn put_credential(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    body: Result<Json<CredentialRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<CredentialView>), ApiError> {
    let Json(body) = body?;
    let id = parse_id(&id)?;
    let record = state.catalog.get_server(&id).await?.ok_or_else(|| not_found(&id))?;
    let whitelist = match &record.generation {
        Some(generation) => generation.whitelist.clone(),
        None => Whitelist::from_operator_domains(&record.allow_domains).map_err(invalid)?,
    };
    let new = seal(&state.vault, &id, name, body, &whitelist)?;
    let warnings = reach_warnings(&id, std::slice::from_ref(&new), &whitelist);
    let _change = state.registry.serialize(&id).await;
    let (created, record) = match state.catalog.put_credential(&id, &new, MAX_PER_SERVER).await? {
        PutCredential::Stored { created, record } => (created, record),
        PutCredential::NoServer => return Err(not_found(&id)),
        PutCredential::Full => {
            return Err(invalid(format!("server {id:?} has {MAX_PER_SERVER} credentials already; delete one first")));
        }
    };
    state.registry.remount(&id).await?;
    tracing::info!(server_id = %id, credential = %record.name, created, "credential set");
    let view = CredentialView { warnings, ..CredentialView::from(record) };
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// List a server's credentials (never their values)
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/credentials",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "names, domains, injection rules, times and fingerprints", body = CredentialList),
        (status = 404, description = "no such server", body = ErrorBody),
    ),
)]
pub async fn list_credentials(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<CredentialList>, ApiError> {
    let id = parse_id(&id)?;
    if state.catalog.server_status(&id).await?.is_none() {
        return Err(not_found(&id));
    }
    let credentials = state.catalog.credentials(&id).await?;
    Ok(Json(CredentialList { credentials: credentials.into_iter().map(CredentialView::from).collect() }))
}

/// Delete a credential
#[utoipa::path(
    delete,
    path = "/admin/servers/{id}/credentials/{name}",
    params(("id" = String, Path), ("name" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, description = "no such server or credential", body = ErrorBody),
    ),
)]
pub async fn delete_credential(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    let _change = state.registry.serialize(&id).await;
    if !state.catalog.delete_credential(&id, &name).await? {
        if state.catalog.server_status(&id).await?.is_none() {
            return Err(not_found(&id));
        }
        return Err(ApiError::new(
            ErrorCode::CredentialNotFound,
            format!("server {id:?} has no credential {name:?}; mcpbootd credentials list {id} shows them"),
        ));
    }
    state.registry.remount(&id).await?;
    tracing::info!(server_id = %id, credential = %name, "credential deleted");
    Ok(StatusCode::NO_CONTENT)
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidCredential, message)
}

/// Checks a credential for server `id` (name, value, injection rule, domains within
/// `whitelist`) and seals its value: what is stored, at `PUT` or inline at registration.
pub(crate) fn seal(
    vault: &Vault,
    id: &ServerId,
    name: String,
    request: CredentialRequest,
    whitelist: &Whitelist,
) -> Result<NewCredential, ApiError> {
    credentials::check_name(&name).map_err(invalid)?;
    credentials::check_value(&request.value).map_err(|m| invalid(format!("credential {name:?}: {m}")))?;
    if let Injection::Header { header, .. } = &request.inject
        && is_forbidden_header(&header.to_ascii_lowercase())
    {
        return Err(invalid(format!(
            "credential {name:?}: inject.header {header:?} is a header the daemon sets itself"
        )));
    }
    let binding = Binding::check(&request.domains, request.inject, whitelist)
        .map_err(|m| invalid(format!("credential {name:?}: {m}")))?;
    Ok(NewCredential {
        sealed: vault.seal(id.as_str(), &name, &request.value),
        fingerprint: credentials::fingerprint(&request.value),
        name,
        binding,
    })
}

/// The warnings for credentials of server `id` that its handlers could carry, in a piece or a
/// form the scrubbing cannot know, to hosts the credentials are not sent to
/// ([`Binding::reach_warning`]); each is logged at warn level too.
pub(crate) fn reach_warnings(id: &ServerId, credentials: &[NewCredential], whitelist: &Whitelist) -> Vec<String> {
    let warnings: Vec<String> = credentials
        .iter()
        .filter_map(|credential| credential.binding.reach_warning(&credential.name, whitelist))
        .collect();
    for warning in &warnings {
        tracing::warn!(server_id = %id, "{warning}");
    }
    warnings
}
