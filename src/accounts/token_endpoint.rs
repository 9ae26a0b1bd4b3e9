//! Requests to an authorization server's token and revocation endpoints (RFC 6749 §4.1.3 and
//! §6, RFC 7009), as a confidential client authenticating with HTTP basic.

use serde::Deserialize;

/// Longest token answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What a token endpoint granted.
#[derive(Debug, Clone, Deserialize)]
pub struct Granted {
    pub access_token: String,
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// Seconds; some servers send it as a string.
    #[serde(default, deserialize_with = "seconds")]
    pub expires_in: Option<i64>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub id_token: Option<String>,
}

/// Why a token request gave nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// The server answered with an OAuth error (`invalid_grant`: the code or refresh token is
    /// spent, expired or revoked).
    #[error("the authorization server refused the request: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused { error: String, description: Option<String> },
    /// It could not be reached or answered something else.
    #[error("the authorization server's token endpoint could not be used: {0}")]
    Unavailable(String),
}

impl TokenError {
    pub fn is_invalid_grant(&self) -> bool {
        matches!(self, TokenError::Refused { error, .. } if error == "invalid_grant")
    }
}

#[derive(Deserialize)]
struct OAuthErrorBody {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

fn seconds<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Int(i64),
        Float(f64),
        Text(String),
    }
    Ok(match Option::<Number>::deserialize(deserializer)? {
        Some(Number::Int(n)) => Some(n),
        Some(Number::Float(n)) => Some(n as i64),
        Some(Number::Text(text)) => text.trim().parse().ok(),
        None => None,
    })
}

/// Posts `form` to `url` as client `client_id`, and reads the grant.
pub async fn request(
    http: &reqwest::Client,
    url: &str,
    client_id: &str,
    client_secret: &str,
    form: &[(&str, &str)],
) -> Result<Granted, TokenError> {
    let response = http
        .post(url)
        .basic_auth(form_encode(client_id), Some(form_encode(client_secret)))
        // GitHub answers form-encoded unless asked for JSON.
        .header(reqwest::header::ACCEPT, "application/json")
        .form(form)
        .send()
        .await
        .map_err(|e| TokenError::Unavailable(format!("{url}: {}", without_url(&e))))?;
    let status = response.status();
    let body = read_limited(response).await.map_err(|e| TokenError::Unavailable(format!("{url}: {e}")))?;
    // Some servers (GitHub) answer errors with 200 and an `error` member.
    if let Ok(error) = serde_json::from_slice::<OAuthErrorBody>(&body) {
        return Err(TokenError::Refused { error: error.error, description: error.error_description });
    }
    if !status.is_success() {
        return Err(TokenError::Unavailable(format!("{url} answered HTTP {status}")));
    }
    let granted: Granted = serde_json::from_slice(&body)
        .map_err(|e| TokenError::Unavailable(format!("{url} answered something other than a token response: {e}")))?;
    if granted.access_token.is_empty() {
        return Err(TokenError::Unavailable(format!("{url} answered an empty access_token")));
    }
    Ok(granted)
}

/// Revokes `token` at an RFC 7009 endpoint; failures are the caller's to log (the connection is
/// gone from the catalog either way).
pub async fn revoke(
    http: &reqwest::Client,
    url: &str,
    client_id: &str,
    client_secret: &str,
    token: &str,
    hint: &str,
) -> Result<(), RevokeError> {
    let response = http
        .post(url)
        .basic_auth(form_encode(client_id), Some(form_encode(client_secret)))
        .form(&[("token", token), ("token_type_hint", hint)])
        .send()
        .await
        .map_err(|cause| RevokeError::Unreachable { url: url.to_string(), cause })?;
    match response.status() {
        status if status.is_success() => Ok(()),
        status => Err(RevokeError::Status { url: url.to_string(), status }),
    }
}

/// Why a revocation request failed.
#[derive(Debug, thiserror::Error)]
pub enum RevokeError {
    #[error("{url}: {}", without_url(.cause))]
    Unreachable { url: String, cause: reqwest::Error },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: reqwest::StatusCode },
}

/// Why a token answer could not be read; the message follows the endpoint's URL.
#[derive(Debug, thiserror::Error)]
enum UnreadableAnswer {
    #[error("{}", without_url(.0))]
    Transport(reqwest::Error),
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before HTTP basic encodes them.
fn form_encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn without_url(error: &reqwest::Error) -> String {
    let text = error.to_string();
    match error.url() {
        Some(url) => text.replace(&format!(" for url ({url})"), ""),
        None => text,
    }
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, UnreadableAnswer> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(UnreadableAnswer::Transport)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(UnreadableAnswer::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
