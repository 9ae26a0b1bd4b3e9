//! `[auth]` and `[auth.oauth]`: how MCP hosts authenticate to the mounts besides static access tokens.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::secret::Secret;

/// How MCP hosts authenticate to the mounts, besides per-server static access tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub oauth: OAuthConfig,
}

/// The mounts as OAuth 2.1 resource servers that trust one identity provider (docs/oauth.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OAuthConfig {
    /// The authorization server's issuer, compared and published exactly as written (no `/` is
    /// added). Empty: OAuth is off.
    pub issuer: String,
    /// How MCP hosts reach this daemon (`https://mcp.example.com`): a mount's canonical URL, the
    /// audience its tokens must carry, is this + `/servers/<id>/mcp`.
    pub public_url: String,
    /// Every mount without a static access token requires an OAuth token.
    pub required: bool,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_seconds: u64,
    /// With `write_scope`, the scope model of docs/oauth.md: a token with this scope may call the
    /// tools marked `readOnlyHint: true`. Empty: no per-tool scopes.
    pub read_scope: String,
    /// A token with this scope may call every tool. Empty: no per-tool scopes.
    pub write_scope: String,
    /// A token from the issuer with this scope, whose audience is `<public_url>/admin`, is
    /// accepted on `/admin/*` next to the static admin token. Empty: it is not.
    pub admin_scope: String,
    /// Client credentials for the issuer's token introspection endpoint (RFC 7662), which checks
    /// tokens that are not JWTs (opaque tokens). Empty: only JWT access tokens are accepted.
    pub introspection_client_id: String,
    pub introspection_client_secret: Secret,
    /// How long an introspection answer is reused (never past the token's `exp`).
    pub introspection_cache_seconds: u64,
    /// The daemon as an OpenID client of `issuer`, for its connect pages (docs/connected-accounts.md):
    /// a person who opens a connect link signs in first, so a forwarded link is refused. Its
    /// redirect URI is `<public_url>/connect/signin`. Empty: per-user credentials are refused.
    pub connect_client_id: String,
    pub connect_client_secret: Secret,
    /// How long a connect link stays usable, in seconds.
    pub connect_link_seconds: u64,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuer: String::new(),
            public_url: String::new(),
            required: false,
            leeway_seconds: 60,
            read_scope: String::new(),
            write_scope: String::new(),
            admin_scope: String::new(),
            introspection_client_id: String::new(),
            introspection_client_secret: Secret::default(),
            introspection_cache_seconds: 30,
            connect_client_id: String::new(),
            connect_client_secret: Secret::default(),
            connect_link_seconds: 600,
        }
    }
}

impl OAuthConfig {
    pub fn enabled(&self) -> bool {
        !self.issuer.is_empty()
    }

    /// The canonical URL of a mount: the audience its tokens must name.
    pub fn resource(&self, mcp_path: &str) -> String {
        format!("{}{mcp_path}", self.public_url.trim_end_matches('/'))
    }

    /// Whether the connect pages are configured, which per-user credentials need.
    pub fn connects(&self) -> bool {
        self.enabled() && !self.connect_client_id.is_empty()
    }

    /// The daemon's URL for `path` (which starts with `/`).
    pub fn public(&self, path: &str) -> String {
        format!("{}{path}", self.public_url.trim_end_matches('/'))
    }

    /// The audience of tokens for the admin API (`admin_scope`).
    pub fn admin_resource(&self) -> String {
        self.resource("/admin")
    }

    /// The scope model: which scope calls which tools (none when both scopes are empty).
    pub fn scope_rule(&self, extra: &[String]) -> crate::oauth::ScopeRule {
        let scope = |s: &str| (!s.is_empty()).then(|| s.to_string());
        crate::oauth::ScopeRule::new(scope(&self.read_scope), scope(&self.write_scope), extra.to_vec())
    }

    /// Where a host finds a mount's Protected Resource Metadata (RFC 9728 §3.1: inserted after
    /// the host, before the path).
    pub fn metadata_url(&self, mcp_path: &str) -> String {
        format!("{}/.well-known/oauth-protected-resource{mcp_path}", self.public_url.trim_end_matches('/'))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if !self.enabled() {
            let set = [
                ("required", self.required),
                ("read_scope", !self.read_scope.is_empty()),
                ("write_scope", !self.write_scope.is_empty()),
                ("admin_scope", !self.admin_scope.is_empty()),
                ("introspection_client_id", !self.introspection_client_id.is_empty()),
                ("connect_client_id", !self.connect_client_id.is_empty()),
            ];
            if let Some((key, _)) = set.iter().find(|(_, set)| *set) {
                return invalid(format!(
                    "[auth.oauth] {key} needs [auth.oauth] issuer (MCPBOOTD_AUTH__OAUTH__ISSUER) and public_url"
                ));
            }
            return Ok(());
        }
        for (key, value) in [("issuer", &self.issuer), ("public_url", &self.public_url)] {
            let variable = format!("MCPBOOTD_AUTH__OAUTH__{}", key.to_uppercase());
            let Ok(url) = url::Url::parse(value) else {
                return invalid(format!("[auth.oauth] {key} ({variable}) = {value:?} is not a URL"));
            };
            let loopback = match url.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                Some(url::Host::Domain(name)) => name == "localhost",
                None => false,
            };
            if url.scheme() != "https" && !(url.scheme() == "http" && loopback) {
                return invalid(format!(
                    "[auth.oauth] {key} ({variable}) = {value:?} must be an https:// URL \
                     (http:// is accepted only on a loopback address, for tests and local development)"
                ));
            }
            if url.query().is_some() || url.fragment().is_some() {
                return invalid(format!(
                    "[auth.oauth] {key} ({variable}) = {value:?} must not have a query or fragment"
                ));
            }
        }
        for (key, value) in
            [("read_scope", &self.read_scope), ("write_scope", &self.write_scope), ("admin_scope", &self.admin_scope)]
        {
            if !value.is_empty()
                && let Err(problem) = crate::oauth::check_scope(value)
            {
                return invalid(format!("[auth.oauth] {key} = {value:?}: {problem}"));
            }
        }
        if self.introspection_cache_seconds > 3600 {
            return invalid(format!(
                "[auth.oauth] introspection_cache_seconds = {} is more than 3600: a revoked token would stay \
                 usable that long",
                self.introspection_cache_seconds
            ));
        }
        if self.read_scope.is_empty() != self.write_scope.is_empty() {
            return invalid(
                "[auth.oauth] read_scope and write_scope go together: set both (a read-only tool needs either, \
                 every other tool write_scope) or neither"
                    .into(),
            );
        }
        if self.introspection_client_id.is_empty() != self.introspection_client_secret.is_empty() {
            return invalid(
                "[auth.oauth] introspection_client_id and introspection_client_secret go together: the \
                 introspection endpoint needs both (MCPBOOTD_AUTH__OAUTH__INTROSPECTION_CLIENT_SECRET)"
                    .into(),
            );
        }
        if self.connect_client_id.is_empty() != self.connect_client_secret.is_empty() {
            return invalid(
                "[auth.oauth] connect_client_id and connect_client_secret go together: the connect pages sign \
                 people in as this client of the issuer (MCPBOOTD_AUTH__OAUTH__CONNECT_CLIENT_SECRET)"
                    .into(),
            );
        }
        if !(10..=86_400).contains(&self.connect_link_seconds) {
            return invalid(format!(
                "[auth.oauth] connect_link_seconds = {} must be between 10 and 86400: a connect link is short-lived",
                self.connect_link_seconds
            ));
        }
        if url::Url::parse(&self.public_url).is_ok_and(|url| url.path() != "/") {
            return invalid(format!(
                "[auth.oauth] public_url = {:?} must be the daemon's origin without a path \
                 (mounts are at <public_url>/servers/<id>/mcp)",
                self.public_url
            ));
        }
        Ok(())
    }
}
