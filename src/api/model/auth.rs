//! Who may use a mount: its static access token (`PUT /admin/servers/{id}/access-token`), its
//! auth setting as it applies now (`PUT /admin/servers/{id}/auth`), and the RFC 9728 metadata an
//! OAuth mount publishes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::door::{self, Door};
use crate::states::text_enum;
use crate::toolset::{AuthSetting, ServerId};

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessTokenRequest {
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AccessTokenSet {
    pub id: ServerId,
    /// Always `true`.
    pub access_token_set: bool,
    /// The server had an auth setting (open or OAuth), which the token replaced.
    #[serde(default)]
    pub auth_setting_removed: bool,
}

/// How a mount lets requests in: `GET /admin/servers/{id}` (`auth`), `PUT /admin/servers/{id}/auth`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct AuthView {
    pub mode: AuthMode,
    /// Scopes an OAuth token needs on this mount besides the daemon's scope model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// `server` when the server sets its mode (an access token or an auth setting), `default`
    /// when `[auth.oauth] required` decides.
    pub source: String,
}

text_enum! {
    /// Who may use a mount, as it applies now.
    #[derive(Default)]
    pub enum AuthMode ("auth mode") {
        /// Any client that reaches the daemon.
        #[default]
        Open = "open",
        /// Clients that send the server's static access token.
        AccessToken = "access_token",
        /// Clients with an OAuth token from the daemon's identity provider.
        OAuth = "oauth",
    }
}

impl AuthView {
    /// The mode in force for a server with (or without) a token and this setting, on a daemon with
    /// `[auth.oauth] required` = `required` (the same rule as the mount's door).
    pub fn of(access_token: bool, setting: Option<&AuthSetting>, required: bool) -> AuthView {
        let source = if !access_token && setting.is_none() { "default" } else { "server" };
        let (mode, scopes) = match door::door(access_token.then_some(()), setting, required) {
            Door::Open => (AuthMode::Open, Vec::new()),
            Door::AccessToken(_) => (AuthMode::AccessToken, Vec::new()),
            Door::OAuth(scopes) => (AuthMode::OAuth, scopes.to_vec()),
        };
        AuthView { mode, scopes, source: source.into() }
    }
}

/// `PUT /admin/servers/{id}/auth`: the setting now in force.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthSet {
    pub id: ServerId,
    pub auth: AuthView,
    /// The server had a static access token, which the setting replaced.
    pub access_token_removed: bool,
}

/// RFC 9728 Protected Resource Metadata.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProtectedResource {
    /// The mount's canonical URL: the audience its tokens must carry (RFC 8707).
    pub resource: String,
    /// The issuer, exactly as configured.
    pub authorization_servers: Vec<String>,
    /// Tokens are accepted in the `Authorization` header only.
    pub bearer_methods_supported: Vec<String>,
    /// The scopes this resource may ask for (the daemon's scope model and the server's own
    /// scopes); left out when it asks for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
}

impl ProtectedResource {
    pub fn new(oauth: &crate::config::OAuthConfig, resource: String, scopes: Vec<String>) -> ProtectedResource {
        ProtectedResource {
            resource,
            authorization_servers: vec![oauth.issuer.clone()],
            bearer_methods_supported: vec!["header".into()],
            scopes_supported: scopes,
        }
    }
}
