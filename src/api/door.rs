//! A server's door: how its MCP requests are let in (open, its static access token, or OAuth),
//! decided from its access token and auth setting by one rule that the mount, the admin views and
//! the registration checks all use; and the check of an auth setting an operator gives.

use crate::api::error::{ApiError, ErrorCode};
use crate::config::OAuthConfig;
use crate::serve::registry::Mount;
use crate::toolset::AuthSetting;

/// How a mount's requests are let in.
pub enum Door<'a, Token = &'a str> {
    /// Anyone who reaches the daemon.
    Open,
    /// The static bearer token (its sha256, for a mount).
    AccessToken(Token),
    /// An OAuth access token for the mount, holding these scopes besides the daemon's model.
    OAuth(&'a [String]),
}

/// The door of a server with this access token and auth setting: a static token wins (a
/// server never has both it and a setting); then the server's own setting; then `[auth.oauth]
/// required`. The one rule, for the mount and for what the admin API shows.
pub fn door<Token>(access_token: Option<Token>, setting: Option<&AuthSetting>, required: bool) -> Door<'_, Token> {
    match (access_token, setting) {
        (Some(token), _) => Door::AccessToken(token),
        (None, Some(AuthSetting::Open {})) => Door::Open,
        (None, Some(AuthSetting::Oauth { scopes })) => Door::OAuth(scopes),
        (None, None) if required => Door::OAuth(&[]),
        (None, None) => Door::Open,
    }
}

/// A mounted server's door.
pub fn mount_door<'a>(mount: &'a Mount, oauth: &OAuthConfig) -> Door<'a> {
    door(mount.access_token_sha256.as_deref(), mount.auth.as_ref(), oauth.required)
}

/// A server's auth setting as given, checked against the daemon's configuration; the scopes are
/// de-duplicated in the order given.
pub fn check_auth(oauth: &OAuthConfig, setting: AuthSetting) -> Result<AuthSetting, ApiError> {
    let AuthSetting::Oauth { scopes } = setting else {
        return Ok(setting);
    };
    let invalid = |message: String| Err(ApiError::new(ErrorCode::InvalidAuth, message));
    if !oauth.enabled() {
        return invalid(
            "auth mode \"oauth\" needs an identity provider: configure [auth.oauth] issuer and public_url \
             (docs/oauth.md), or use \"open\" or an access_token"
                .into(),
        );
    }
    if scopes.len() > MAX_SERVER_SCOPES {
        return invalid(format!("{} scopes given; a server asks for at most {MAX_SERVER_SCOPES}", scopes.len()));
    }
    let mut unique: Vec<String> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        if let Err(problem) = crate::oauth::check_scope(&scope) {
            return invalid(format!("auth.scopes: {scope:?}: {problem}"));
        }
        if !unique.contains(&scope) {
            unique.push(scope);
        }
    }
    Ok(AuthSetting::Oauth { scopes: unique })
}

/// Scopes one server may add to the daemon's scope model.
const MAX_SERVER_SCOPES: usize = 16;
