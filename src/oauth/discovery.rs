//! Authorization server metadata: RFC 8414, with OpenID Connect discovery as the fallback that
//! the MCP authorization specification also allows.

use jsonwebtoken::Algorithm;
use serde::Deserialize;
use url::{Host, Url};

use super::fetch::{OAuthError, fetch_json};
use super::keys::is_asymmetric;

/// What we keep of an authorization server's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerMetadata {
    /// Identical to the configured issuer (checked).
    pub issuer: String,
    pub jwks_uri: String,
    /// For opaque tokens; not used by local JWT validation.
    pub introspection_endpoint: Option<String>,
    /// Signature algorithms accepted on access tokens: never empty, never `none` or HS*.
    pub algorithms: Vec<Algorithm>,
    pub scopes_supported: Option<Vec<String>>,
    /// Where the connect pages send a person to sign in, and trade the code for tokens.
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    /// Where the metadata was read from, for logs.
    pub metadata_url: String,
}

#[derive(Deserialize)]
struct RawMetadata {
    issuer: Option<String>,
    jwks_uri: Option<String>,
    introspection_endpoint: Option<String>,
    jwt_access_token_signing_alg_values_supported: Option<Vec<String>>,
    id_token_signing_alg_values_supported: Option<Vec<String>>,
    scopes_supported: Option<Vec<String>>,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
}

/// Fetches the metadata of `issuer`: first from the RFC 8414 location, then from the OpenID
/// Connect one. A document naming another issuer is an error at once: that is a
/// misconfiguration, not a reason to look elsewhere.
pub async fn discover(http: &reqwest::Client, issuer: &str) -> Result<IssuerMetadata, OAuthError> {
    let mut attempts = Vec::new();
    for url in metadata_urls(issuer)? {
        match fetch_metadata(http, issuer, &url).await {
            Ok(metadata) => return Ok(metadata),
            Err(error @ OAuthError::IssuerMismatch { .. }) => return Err(error),
            Err(error) => attempts.push(error),
        }
    }
    Err(OAuthError::Discovery { issuer: issuer.to_string(), attempts })
}

/// The RFC 8414 URL (`/.well-known/oauth-authorization-server` inserted between the origin and
/// the issuer's path, whose trailing `/` is dropped) and the OpenID Connect one (appended to
/// the issuer, whose trailing `/` is dropped).
pub fn metadata_urls(issuer: &str) -> Result<[String; 2], OAuthError> {
    let invalid = |reason: &str| OAuthError::InvalidIssuer { issuer: issuer.to_string(), reason: reason.into() };
    let url = Url::parse(issuer).map_err(|error| invalid(&format!("not a URL: {error}")))?;
    check_secure(&url).map_err(|reason| invalid(&reason.to_string()))?;
    // RFC 8414 §2: the issuer has no query or fragment components.
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("an issuer has no query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("an issuer has no user information"));
    }
    let origin = &url[..url::Position::BeforePath];
    let path = url.path().trim_end_matches('/');
    Ok([
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
    ])
}

/// Metadata and keys decide which tokens are trusted, so they come over TLS, except from this
/// machine (local issuers in development and tests).
pub fn check_secure(url: &Url) -> Result<(), InsecureUrl> {
    let loopback = match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => return Err(InsecureUrl::NoHost),
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(InsecureUrl::PlainHttp),
        other => Err(InsecureUrl::Scheme { scheme: other.to_string() }),
    }
}

/// Why [`check_secure`] refused a URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InsecureUrl {
    #[error("the URL has no host")]
    NoHost,
    #[error("plain http is only accepted for loopback hosts; use https")]
    PlainHttp,
    #[error("unsupported scheme {scheme:?}; use https")]
    Scheme { scheme: String },
}

async fn fetch_metadata(http: &reqwest::Client, issuer: &str, url: &str) -> Result<IssuerMetadata, OAuthError> {
    let raw: RawMetadata = fetch_json(http, url).await?;
    let invalid = |message: String| OAuthError::InvalidDocument { url: url.to_string(), message };
    let Some(advertised) = raw.issuer else {
        return Err(invalid("metadata has no issuer".into()));
    };
    if advertised != issuer {
        return Err(OAuthError::IssuerMismatch { configured: issuer.to_string(), advertised, url: url.to_string() });
    }
    let Some(jwks_uri) = raw.jwks_uri else {
        return Err(invalid("metadata has no jwks_uri, so tokens cannot be verified locally".into()));
    };
    let jwks_url = Url::parse(&jwks_uri).map_err(|error| invalid(format!("jwks_uri {jwks_uri:?}: {error}")))?;
    check_secure(&jwks_url).map_err(|reason| invalid(format!("jwks_uri {jwks_uri:?}: {reason}")))?;
    let advertised_algorithms =
        raw.jwt_access_token_signing_alg_values_supported.or(raw.id_token_signing_alg_values_supported);
    Ok(IssuerMetadata {
        issuer: advertised,
        jwks_uri,
        introspection_endpoint: raw.introspection_endpoint,
        algorithms: allowed_algorithms(advertised_algorithms.as_deref()),
        scopes_supported: raw.scopes_supported,
        authorization_endpoint: raw.authorization_endpoint,
        token_endpoint: raw.token_endpoint,
        metadata_url: url.to_string(),
    })
}

/// The advertised algorithms we can verify, minus `none` and HS* (which are never safe for a
/// resource server holding only public keys); RS256, the JOSE default, when nothing is left.
pub fn allowed_algorithms(advertised: Option<&[String]>) -> Vec<Algorithm> {
    let mut algorithms = Vec::new();
    for name in advertised.unwrap_or_default() {
        if let Ok(alg) = name.parse::<Algorithm>()
            && is_asymmetric(alg)
            && !algorithms.contains(&alg)
        {
            algorithms.push(alg);
        }
    }
    if algorithms.is_empty() {
        algorithms.push(Algorithm::RS256);
    }
    algorithms
}
