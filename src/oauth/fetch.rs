//! Fetching the authorization server's documents (metadata, JWKS) within size and time bounds,
//! and what goes wrong talking to it or using what it published.

use jsonwebtoken::Algorithm;
use serde::de::DeserializeOwned;
use std::time::Duration;

use super::claims::quoted;

/// Metadata and JWKS documents are small; anything bigger is a misconfiguration or an attack.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// Covers connecting, the response and its body: a slow issuer must not hold requests for long.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why talking to the authorization server, or using what it published, failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    /// The configured issuer is not a URL we can discover from.
    #[error("issuer {issuer:?} is not usable: {reason}")]
    InvalidIssuer { issuer: String, reason: String },
    /// A document could not be fetched: transport error, timeout, non-2xx status, too large.
    #[error("GET {url}: {message}")]
    Fetch { url: String, message: String },
    /// A document was fetched but is not what the specification requires.
    #[error("{url}: {message}")]
    InvalidDocument { url: String, message: String },
    /// The metadata names another issuer. Compared as strings: `https://x` and `https://x/`
    /// differ, and tokens carry the metadata's spelling in `iss`, so a mismatch is fatal.
    #[error(
        "issuer mismatch: {url} declares issuer {advertised:?}, but the configured issuer is {configured:?} \
         (they must be identical strings; fix the configured issuer)"
    )]
    IssuerMismatch { configured: String, advertised: String, url: String },
    /// Neither discovery location produced usable metadata.
    #[error("discovering issuer {issuer:?} failed: {}", join(.attempts))]
    Discovery { issuer: String, attempts: Vec<OAuthError> },
    /// No key in the JWKS fits the token's `kid` and algorithm, even after any refetch allowed.
    #[error("{jwks_uri} has no key {} usable with {alg:?}{note}", kid_label(.kid.as_deref()))]
    UnknownKey { jwks_uri: String, kid: Option<String>, alg: Algorithm, note: String },
}

fn join(errors: &[OAuthError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; then ")
}

fn kid_label(kid: Option<&str>) -> String {
    match kid {
        Some(kid) => format!("with kid {}", quoted(kid)),
        None => "(the token names no kid)".into(),
    }
}

/// GETs a JSON document with the size and time bounds above; errors name the URL.
pub async fn fetch_json<T: DeserializeOwned>(http: &reqwest::Client, url: &str) -> Result<T, OAuthError> {
    let fetch_error = |message: String| OAuthError::Fetch { url: url.to_string(), message };
    let exchange = async {
        let mut response = http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| fetch_error(crate::error_chain(&error.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(fetch_error(format!("HTTP {status}")));
        }
        let too_large = || fetch_error(format!("response larger than {MAX_DOCUMENT_BYTES} bytes"));
        if response.content_length().is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|error| fetch_error(crate::error_chain(&error.without_url())))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|error| OAuthError::InvalidDocument {
            url: url.to_string(),
            message: format!("not the expected JSON document: {error}"),
        })
    };
    match tokio::time::timeout(FETCH_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(fetch_error(format!("no complete response within {} s", FETCH_TIMEOUT.as_secs()))),
    }
}
