//! Per-user credentials: a credential whose value is each caller's own, connected by the caller
//! on the daemon's pages (`accounts`), instead of one value the operator stores.
//!
//! The binding (domains, injection rule) works as for a shared credential; what differs is where
//! the value comes from: the caller's OAuth tokens at the upstream's authorization server
//! (`oauth2`), or a key the caller typed in (`api_key`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How each user's value is obtained, as stored (the OAuth client secret is sealed apart, in
/// the credential's value column, never here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PerUser {
    /// The daemon is an OAuth client of the upstream's authorization server: each user signs
    /// in there once, and the daemon keeps (and refreshes) their tokens.
    Oauth2(OAuth2Client),
    /// Each user enters their own key on the daemon's page.
    ApiKey,
}

/// The daemon as an OAuth client of an upstream authorization server (authorization code with
/// PKCE, always).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Client {
    pub authorize_url: String,
    pub token_url: String,
    pub client_id: String,
    /// Scopes asked for at the authorization endpoint.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Extra parameters for the authorization request (`audience`, `resource`, `prompt`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub authorize_params: BTreeMap<String, String>,
    /// RFC 7009 revocation endpoint, called when a connection is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_url: Option<String>,
}

/// Parameters the daemon sets itself, which `authorize_params` may not replace.
const OWN_AUTHORIZE_PARAMS: &[&str] =
    &["client_id", "redirect_uri", "response_type", "scope", "state", "code_challenge", "code_challenge_method"];

impl PerUser {
    pub fn kind(&self) -> &'static str {
        match self {
            PerUser::Oauth2(_) => "oauth2",
            PerUser::ApiKey => "api_key",
        }
    }

    /// Checks URLs and parameters; `loopback_http` allows `http://` to loopback hosts (as for the
    /// issuer), everything else must be `https://`.
    pub fn check(&self) -> Result<(), InvalidPerUser> {
        let PerUser::Oauth2(client) = self else { return Ok(()) };
        for (field, url) in [("authorize_url", Some(&client.authorize_url)), ("token_url", Some(&client.token_url))]
            .into_iter()
            .chain([("revocation_url", client.revocation_url.as_ref())])
        {
            if let Some(url) = url {
                check_endpoint(url).map_err(|reason| InvalidPerUser::Endpoint { field, url: url.clone(), reason })?;
            }
        }
        if client.client_id.is_empty() || client.client_id.chars().any(char::is_control) {
            return Err(InvalidPerUser::ClientId);
        }
        for scope in &client.scopes {
            if scope.is_empty() || scope.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\') {
                return Err(InvalidPerUser::Scope { scope: scope.clone() });
            }
        }
        for (name, value) in &client.authorize_params {
            if OWN_AUTHORIZE_PARAMS.contains(&name.as_str()) {
                return Err(InvalidPerUser::OwnAuthorizeParam { name: name.clone() });
            }
            if name.is_empty() || name.chars().chain(value.chars()).any(char::is_control) {
                return Err(InvalidPerUser::AuthorizeParam { name: name.clone() });
            }
        }
        Ok(())
    }
}

/// Why [`PerUser::check`] refused a per-user binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPerUser {
    #[error("per_user.{field} {url:?} {reason}")]
    Endpoint { field: &'static str, url: String, reason: InvalidEndpoint },
    #[error("per_user.client_id must be the client id the upstream's authorization server issued")]
    ClientId,
    #[error("per_user.scopes: {scope:?} is not a scope token (RFC 6749 §3.3)")]
    Scope { scope: String },
    #[error("per_user.authorize_params.{name} is set by the daemon itself")]
    OwnAuthorizeParam { name: String },
    #[error("per_user.authorize_params.{name:?} must be a name and a value without control characters")]
    AuthorizeParam { name: String },
}

/// Why [`check_endpoint`] refused a URL; the message is written to follow the URL it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEndpoint {
    #[error("is not a URL: {0}")]
    NotUrl(url::ParseError),
    #[error("must not have a fragment or user information")]
    FragmentOrUserInfo,
    #[error("must use https:// (http:// only to a loopback address)")]
    PlainHttp,
    #[error("must be an https:// URL")]
    NotHttps,
}

/// An endpoint URL: `https://`, or `http://` to a loopback address (development and tests).
pub fn check_endpoint(url: &str) -> Result<url::Url, InvalidEndpoint> {
    let parsed = url::Url::parse(url).map_err(InvalidEndpoint::NotUrl)?;
    if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(InvalidEndpoint::FragmentOrUserInfo);
    }
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        "http" => Err(InvalidEndpoint::PlainHttp),
        _ => Err(InvalidEndpoint::NotHttps),
    }
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name == "localhost",
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_bodies_parse_and_are_checked() {
        let oauth2: PerUser = serde_json::from_value(serde_json::json!({
            "kind": "oauth2", "authorize_url": "https://github.com/login/oauth/authorize",
            "token_url": "https://github.com/login/oauth/access_token", "client_id": "Iv1.abc",
            "scopes": ["repo", "read:user"]
        }))
        .unwrap();
        assert!(oauth2.check().is_ok());
        assert_eq!(serde_json::from_value::<PerUser>(serde_json::json!({"kind": "api_key"})).unwrap(), PerUser::ApiKey);
        let bad = |body: serde_json::Value| serde_json::from_value::<PerUser>(body).unwrap().check().unwrap_err();
        let base = serde_json::json!({"kind": "oauth2", "authorize_url": "http://auth.example.com/a",
            "token_url": "https://auth.example.com/t", "client_id": "c"});
        assert_eq!(
            bad(base.clone()),
            InvalidPerUser::Endpoint {
                field: "authorize_url",
                url: "http://auth.example.com/a".into(),
                reason: InvalidEndpoint::PlainHttp
            }
        );
        let mut loopback = serde_json::json!({"kind": "oauth2", "authorize_url": "http://127.0.0.1:9/a",
            "token_url": "https://auth.example.com/t", "client_id": "c", "scopes": ["a b"]});
        assert_eq!(bad(loopback.clone()), InvalidPerUser::Scope { scope: "a b".into() });
        loopback["scopes"] = serde_json::json!(["a"]);
        loopback["authorize_params"] = serde_json::json!({"redirect_uri": "https://evil.example"});
        assert_eq!(bad(loopback), InvalidPerUser::OwnAuthorizeParam { name: "redirect_uri".into() });
        assert!(serde_json::from_value::<PerUser>(serde_json::json!({"kind": "saml"})).is_err());
    }

    /// Admin API clients read these messages, so they are pinned word for word.
    #[test]
    fn refusals_read_as_before() {
        let refusal = |change: serde_json::Value| {
            let mut body = serde_json::json!({"kind": "oauth2", "authorize_url": "https://a.example/a",
                "token_url": "https://a.example/t", "client_id": "c"});
            body.as_object_mut().unwrap().extend(change.as_object().unwrap().clone());
            serde_json::from_value::<PerUser>(body).unwrap().check().unwrap_err().to_string()
        };
        let cases = [
            (
                serde_json::json!({"authorize_url": "not a url"}),
                r#"per_user.authorize_url "not a url" is not a URL: relative URL without a base"#,
            ),
            (
                serde_json::json!({"token_url": "https://u:p@a.example/t"}),
                r#"per_user.token_url "https://u:p@a.example/t" must not have a fragment or user information"#,
            ),
            (
                serde_json::json!({"revocation_url": "http://a.example/r"}),
                r#"per_user.revocation_url "http://a.example/r" must use https:// (http:// only to a loopback address)"#,
            ),
            (
                serde_json::json!({"authorize_url": "ftp://a.example/a"}),
                r#"per_user.authorize_url "ftp://a.example/a" must be an https:// URL"#,
            ),
            (
                serde_json::json!({"client_id": ""}),
                "per_user.client_id must be the client id the upstream's authorization server issued",
            ),
            (serde_json::json!({"scopes": ["a b"]}), r#"per_user.scopes: "a b" is not a scope token (RFC 6749 §3.3)"#),
            (
                serde_json::json!({"authorize_params": {"state": "x"}}),
                "per_user.authorize_params.state is set by the daemon itself",
            ),
            (
                serde_json::json!({"authorize_params": {"audience": "a\u{1}"}}),
                r#"per_user.authorize_params."audience" must be a name and a value without control characters"#,
            ),
        ];
        for (change, expected) in cases {
            assert_eq!(refusal(change.clone()), expected, "{change}");
        }
    }
}
