//! Answers to OAuth probes. After a 401, MCP hosts that speak OAuth (mcp-remote, Claude Code,
//! the MCP Inspector, the TypeScript SDK) look for OAuth metadata beside and under the server's
//! URL and then try dynamic client registration at `/register`. Without an answer, the user
//! sees "Dynamic Client Registration rejected (HTTP 404) … no route for /register". The mounts
//! here take static bearer tokens, so every such probe gets an OAuth error (RFC 6749 §5.2, whose
//! `error_description` these hosts show) that says how to configure the token instead.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderValue;

use crate::api::door::{Door, mount_door};
use crate::api::error::{ApiError, ErrorCode, header_quotable};
use crate::api::model::{OAuthError, ProtectedResource};
use crate::api::state::AppState;
use crate::config::OAuthConfig;
use crate::oauth::MissingScope;
use crate::toolset::ServerId;

/// The well-known documents OAuth clients fetch (RFC 8414, RFC 9728, OpenID discovery), found
/// anywhere in a path because clients look both at the root and under the server's path.
const METADATA: [&str; 3] = [
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
];
/// The endpoints a client falls back to when it finds no metadata (MCP 2025-03-26 defaults).
const ENDPOINTS: [&str; 3] = ["register", "authorize", "token"];

/// The refusal for `path` if it is an OAuth probe; `None` for any other path. With `[auth.oauth]`
/// the daemon is only the resource server, so a probe is sent to the identity provider (which
/// issues tokens and registers clients) unless it names a server that takes a static token or is
/// open, whose hosts are told how it is used instead.
pub fn refusal_for(path: &str, state: &AppState) -> Option<ApiError> {
    let probe = refusal(path)?;
    let oauth = &state.config.auth.oauth;
    let server = server_of(path);
    let mount = server.and_then(|id| ServerId::parse(id).ok()).and_then(|id| state.registry.get(&id));
    let behind_oauth = mount.is_none_or(|mount| matches!(mount_door(&mount, oauth), Door::OAuth(_)));
    if !oauth.enabled() || !behind_oauth {
        return Some(probe);
    }
    let url = server.map_or_else(|| "/servers/<id>/mcp".to_string(), |id| format!("/servers/{id}/mcp"));
    Some(
        ApiError::new(
            ErrorCode::OauthNotSupported,
            format!(
                "this daemon does not issue tokens or register clients: its identity provider {} does (see its \
                 metadata); a mount's resource metadata is at {}",
                oauth.issuer,
                oauth.metadata_url(&url)
            ),
        )
        .as_oauth(),
    )
}

/// The refusal for `path` if it is an OAuth probe; `None` for any other path.
pub fn refusal(path: &str) -> Option<ApiError> {
    let is_metadata = METADATA.iter().any(|document| path.contains(document));
    let server = server_of(path);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let is_endpoint = match segments.as_slice() {
        [endpoint] => ENDPOINTS.contains(endpoint),
        ["servers", _, endpoint] | ["servers", _, "mcp", endpoint] => ENDPOINTS.contains(endpoint),
        _ => false,
    };
    if !is_metadata && !is_endpoint {
        return None;
    }
    let url = server.map_or_else(|| "/servers/<id>/mcp".to_string(), |id| format!("/servers/{id}/mcp"));
    Some(
        ApiError::new(
            ErrorCode::OauthNotSupported,
            format!(
                "this daemon's MCP servers do not use OAuth: each takes a static bearer token (the access_token \
                 it was registered with). Configure the host with it instead of signing in, e.g. in an mcpServers \
                 entry: {{\"url\": \"http(s)://<daemon>{url}\", \"headers\": {{\"Authorization\": \"Bearer <token>\"}}}}"
            ),
        )
        .as_oauth(),
    )
}

/// Protected Resource Metadata of a mount (RFC 9728)
///
/// Where an MCP host that got a 401 from `/servers/{id}/mcp` learns which authorization server
/// issues tokens for it and which audience (`resource`) to ask for. Without `[auth.oauth]`, an
/// OAuth error that says the mounts take static bearer tokens.
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource/servers/{id}/mcp",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "the mount's metadata", body = ProtectedResource),
        (status = 404, description = "no such server, or OAuth is not configured", body = OAuthError),
    ),
)]
pub async fn mount_metadata(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ProtectedResource>, ApiError> {
    let oauth = &state.config.auth.oauth;
    let path = format!("/.well-known/oauth-protected-resource/servers/{id}/mcp");
    if !oauth.enabled() {
        return Err(refusal(&path).expect("a metadata path is a probe"));
    }
    let mount = ServerId::parse(&id).ok().and_then(|id| state.registry.get(&id));
    let scopes = mount.as_deref().and_then(|mount| match mount_door(mount, oauth) {
        Door::OAuth(extra) => Some(oauth.scope_rule(extra).scopes()),
        Door::Open | Door::AccessToken(_) => None,
    });
    let (Some(mount), Some(scopes)) = (mount, scopes) else {
        return Err(ApiError::new(
            ErrorCode::ServerNotFound,
            format!("no server {id:?} behind OAuth is mounted here (a server that is open or takes a static token has no OAuth metadata)"),
        )
        .as_oauth());
    };
    Ok(Json(ProtectedResource::new(oauth, oauth.resource(&mount.id.mcp_path()), scopes)))
}

/// Protected Resource Metadata of the daemon (RFC 9728)
///
/// The same for the daemon's origin, for hosts that look there first.
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource",
    responses(
        (status = 200, description = "the daemon's metadata", body = ProtectedResource),
        (status = 404, description = "OAuth is not configured", body = OAuthError),
    ),
)]
pub async fn root_metadata(State(state): State<AppState>) -> Result<Json<ProtectedResource>, ApiError> {
    let oauth = &state.config.auth.oauth;
    if !oauth.enabled() {
        return Err(refusal("/.well-known/oauth-protected-resource").expect("a metadata path is a probe"));
    }
    let scopes = oauth.scope_rule(&[]).scopes();
    Ok(Json(ProtectedResource::new(oauth, oauth.public_url.trim_end_matches('/').to_string(), scopes)))
}

/// The 503 for a token that could not be checked because the provider cannot be reached (logged:
/// it is the operator's to fix); the client may retry.
pub fn provider_unavailable(oauth: &OAuthConfig, why: &str) -> ApiError {
    tracing::warn!(issuer = %oauth.issuer, %why, "an OAuth token could not be checked");
    ApiError::new(
        ErrorCode::ServerUnavailable,
        format!("the identity provider {} cannot be reached to check the token; try again shortly", oauth.issuer),
    )
}

/// `WWW-Authenticate` for a mount's 401 (RFC 9728 §5.1): where its metadata is, and with
/// `invalid_token` when a token was sent and refused.
pub fn challenge(oauth: &OAuthConfig, mcp_path: &str, refused: Option<&str>) -> HeaderValue {
    let metadata = oauth.metadata_url(mcp_path);
    let value = match refused {
        Some(reason) => format!(
            "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"{}\"",
            header_quotable(reason)
        ),
        None => format!("Bearer resource_metadata=\"{metadata}\""),
    };
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

/// `WWW-Authenticate` for a token without the scope a request needs (RFC 6750 §3.1, MCP's
/// step-up authorization): the scopes to ask for, so the host can sign the user in again with them.
pub fn scope_challenge(oauth: &OAuthConfig, mcp_path: &str, missing: &MissingScope) -> HeaderValue {
    let value = format!(
        "Bearer resource_metadata=\"{}\", error=\"insufficient_scope\", scope=\"{}\", error_description=\"{}\"",
        oauth.metadata_url(mcp_path),
        missing.needed.join(" "),
        header_quotable(&missing.to_string())
    );
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"insufficient_scope\""))
}

/// The server id in a path under `/servers/{id}/`, wherever a client put the probe.
fn server_of(path: &str) -> Option<&str> {
    let rest = &path[path.find("/servers/")? + "/servers/".len()..];
    let id = rest.split('/').next().filter(|id| !id.is_empty() && !id.starts_with('.'))?;
    crate::toolset::ServerId::parse(id).is_ok().then_some(id)
}

/// Fallback for unknown routes, so even a 404 has the error shape; OAuth probes are told where
/// to sign in, or that the mounts take static bearer tokens (see [`refusal_for`]).
pub async fn route_not_found(State(state): State<AppState>, uri: axum::http::Uri) -> ApiError {
    refusal_for(uri.path(), &state)
        .unwrap_or_else(|| ApiError::new(ErrorCode::RouteNotFound, format!("no route for {}", uri.path())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_beside_and_under_a_mount_are_answered() {
        for path in [
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/servers/hn/mcp",
            "/.well-known/oauth-authorization-server",
            "/.well-known/oauth-authorization-server/servers/hn/mcp",
            "/.well-known/openid-configuration",
            "/servers/hn/mcp/.well-known/oauth-protected-resource",
            "/servers/hn/.well-known/oauth-authorization-server",
            "/register",
            "/authorize",
            "/token",
            "/servers/hn/register",
            "/servers/hn/mcp/register",
        ] {
            let error = refusal(path).unwrap_or_else(|| panic!("{path} is a probe"));
            assert_eq!(error.code, ErrorCode::OauthNotSupported);
            assert!(
                error.message.contains("\"headers\": {\"Authorization\": \"Bearer <token>\"}"),
                "{}",
                error.message
            );
            if path.contains("/hn/") {
                assert!(error.message.contains("/servers/hn/mcp"), "{path}: {}", error.message);
            }
        }
        for path in ["/admin/servers", "/servers/hn/tools", "/registerx", "/a/b/register", "/.well-known/security.txt"]
        {
            assert!(refusal(path).is_none(), "{path}");
        }
    }
}
