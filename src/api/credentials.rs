//! Admin API for a server's upstream credentials: set or rotate, list (never the value),
//! delete. A change remounts the server, so the next call uses it; calls in flight keep the
//! value they started with.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::{ServerIdPath, ServerItemPath, find_server, not_found};
use crate::api::model::{ConnectionList, ConnectionView, CredentialList, CredentialRequest, CredentialView, ErrorBody};
use crate::api::state::AppState;
use crate::catalog::{NewCredential, PutCredential};
use crate::credentials::vault::Vault;
use crate::credentials::{self, Binding, Injection, MAX_PER_SERVER, PerUser};
use crate::serve::egress::is_forbidden_header;
use crate::toolset::AuthSetting;
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
    ServerItemPath(id, name): ServerItemPath<String>,
    body: Result<Json<CredentialRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<CredentialView>), ApiError> {
    let Json(body) = body?;
    let record = find_server(&state, &id).await?;
    let whitelist = match &record.generation {
        Some(generation) => generation.whitelist.clone(),
        None => Whitelist::from_operator_domains(&record.allow_domains).map_err(invalid)?,
    };
    let new = seal(&state.vault, &id, name, body, &whitelist)?;
    check_per_user_door(
        &state,
        std::slice::from_ref(&new),
        record.access_token_sha256.is_some(),
        record.auth.as_ref(),
    )?;
    let warnings = reach_warnings(&id, std::slice::from_ref(&new), &whitelist);
    let _change = state.registry.serialize(&id).await;
    let (created, record) = match state.catalog.put_credential(&id, &new, MAX_PER_SERVER).await? {
        PutCredential::Stored { created, record } => (created, *record),
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
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<CredentialList>, ApiError> {
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
    ServerItemPath(id, name): ServerItemPath<String>,
) -> Result<StatusCode, ApiError> {
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

/// List a server's connected accounts (never a token)
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/connections",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "each caller's connection to a per-user credential", body = ConnectionList),
        (status = 404, description = "no such server", body = ErrorBody),
    ),
)]
pub async fn list_connections(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<ConnectionList>, ApiError> {
    if state.catalog.server_status(&id).await?.is_none() {
        return Err(not_found(&id));
    }
    let connections = state.accounts.connections(&id).await?;
    Ok(Json(ConnectionList { connections: connections.into_iter().map(ConnectionView::from).collect() }))
}

/// Delete a connected account
///
/// The caller's next call that needs it asks them to connect again. Its token is revoked at
/// the upstream when the credential names a `revocation_url`.
#[utoipa::path(
    delete,
    path = "/admin/servers/{id}/connections/{connection}",
    params(("id" = String, Path), ("connection" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, description = "no such server or connection", body = ErrorBody),
    ),
)]
pub async fn delete_connection(
    State(state): State<AppState>,
    ServerItemPath(id, connection): ServerItemPath<String>,
) -> Result<StatusCode, ApiError> {
    if !state.accounts.delete_connection(Some(&id), &connection, None).await? {
        if state.catalog.server_status(&id).await?.is_none() {
            return Err(not_found(&id));
        }
        return Err(ApiError::new(
            ErrorCode::ConnectionNotFound,
            format!("server {id:?} has no connection {connection:?}; mcpbootd connections {id} lists them"),
        ));
    }
    Ok(StatusCode::NO_CONTENT)
}

fn invalid(message: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::InvalidCredential, message.to_string())
}

/// Checks a credential for server `id` (name, value, injection rule, domains within
/// `whitelist`) and seals its value: what is stored, at `PUT` or inline at registration.
pub fn seal(
    vault: &Vault,
    id: &ServerId,
    name: String,
    request: CredentialRequest,
    whitelist: &Whitelist,
) -> Result<NewCredential, ApiError> {
    credentials::check_name(&name).map_err(invalid)?;
    if let Injection::Header { header, .. } = &request.inject
        && is_forbidden_header(&header.to_ascii_lowercase())
    {
        return Err(invalid(format!(
            "credential {name:?}: inject.header {header:?} is a header the daemon sets itself"
        )));
    }
    let mut binding = Binding::check(&request.domains, request.inject, whitelist)
        .map_err(|m| invalid(format!("credential {name:?}: {m}")))?;
    // A per-user credential stores no value: its sealed column holds the OAuth client's secret
    // (empty for an API key), which only the connect flow and refreshes open.
    let (value, fingerprint_of) = match (request.value, request.per_user) {
        (Some(value), None) => {
            credentials::check_value(&value).map_err(|m| invalid(format!("credential {name:?}: {m}")))?;
            let fingerprint = credentials::fingerprint(&value);
            (value, fingerprint)
        }
        (None, Some(per_user)) => {
            let (kind, client_secret) = per_user.split();
            kind.check().map_err(|m| invalid(format!("credential {name:?}: {m}")))?;
            let secret = client_secret.unwrap_or_default();
            if matches!(kind, PerUser::Oauth2(_)) && (secret.is_empty() || secret.chars().any(char::is_control)) {
                return Err(invalid(format!(
                    "credential {name:?}: per_user.client_secret must be the secret the upstream's authorization \
                     server issued with client_id"
                )));
            }
            binding.per_user = Some(kind);
            let fingerprint =
                if secret.is_empty() { "per-user".to_string() } else { credentials::fingerprint(&secret) };
            (secret, fingerprint)
        }
        (Some(_), Some(_)) => {
            return Err(invalid(format!(
                "credential {name:?}: give either value (one value for every caller) or per_user (each caller's own), \
                 not both"
            )));
        }
        (None, None) => {
            return Err(invalid(format!(
                "credential {name:?}: value is missing (or give per_user for a credential each caller connects)"
            )));
        }
    };
    Ok(NewCredential { sealed: vault.seal(id.as_str(), &name, &value), fingerprint: fingerprint_of, name, binding })
}

/// Refuses per-user credentials on a server whose mount does not sign its callers in: the
/// caller's OAuth subject is whose value a call carries. `access_token` and `auth` are the
/// server's door settings.
pub fn check_per_user_door(
    state: &AppState,
    credentials: &[NewCredential],
    access_token: bool,
    auth: Option<&AuthSetting>,
) -> Result<(), ApiError> {
    let Some(per_user) = credentials.iter().find(|c| c.binding.per_user.is_some()) else { return Ok(()) };
    let name = &per_user.name;
    let oauth = &state.config.auth.oauth;
    if !oauth.connects() {
        return Err(invalid(format!(
            "credential {name:?} is per_user, which needs [auth.oauth] issuer, public_url, connect_client_id and \
             connect_client_secret: callers sign in at the issuer to connect their accounts \
             (docs/connected-accounts.md)"
        )));
    }
    if !matches!(
        crate::api::door::door(access_token.then_some(()), auth, oauth.required),
        crate::api::door::Door::OAuth(_)
    ) {
        return Err(invalid(format!(
            "credential {name:?} is per_user, so the server's mount must require OAuth (each call carries its \
             caller's own value): register it with \"auth\": {{\"mode\": \"oauth\"}} and no access_token, or set \
             [auth.oauth] required = true"
        )));
    }
    Ok(())
}

/// The warnings for credentials of server `id` that its handlers could carry, in a piece or a
/// form the scrubbing cannot know, to hosts the credentials are not sent to
/// ([`Binding::reach_warning`]); each is logged at warn level too.
pub fn reach_warnings(id: &ServerId, credentials: &[NewCredential], whitelist: &Whitelist) -> Vec<String> {
    let warnings: Vec<String> = credentials
        .iter()
        .filter_map(|credential| credential.binding.reach_warning(&credential.name, whitelist))
        .collect();
    for warning in &warnings {
        tracing::warn!(server_id = %id, "{warning}");
    }
    warnings
}
