//! The retrying JSON-over-HTTP sender both providers use, and the checks on what they send
//! (the endpoint's URL, the key's header): deadlines, retries, capped bodies (see the room's
//! `llm.rs`).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};

use super::chat::{LlmError, UnusableReply};
use super::settings::LlmSettings;
use crate::config::Provider;

/// Longest wait between two attempts, whatever `retry-after` or the backoff say.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// Largest successful reply body accepted; real replies are a few hundred KiB at most.
pub const MAX_REPLY_BYTES: usize = 32 * 1024 * 1024;
/// Error bodies are read up to this size ...
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// ... and quoted in error messages up to this many characters.
const MAX_ERROR_BODY_CHARS: usize = 2_000;

/// Why [`build_client`](super::build_client) could not build a client from the settings.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("the {provider} LLM needs a model name")]
    NoModel { provider: Provider },
    #[error("the LLM's max_tokens must be at least 1")]
    NoMaxTokens,
    #[error("the LLM's timeout must be longer than zero")]
    NoTimeout,
    #[error("the {provider} base_url {base:?} is not a valid URL: {cause}")]
    BaseUrlInvalid { provider: Provider, base: String, cause: url::ParseError },
    #[error("the {provider} base_url {base:?} must be an http:// or https:// URL")]
    BaseUrlNotHttp { provider: Provider, base: String },
    #[error("the {provider} base_url {base:?} must not have a query or fragment")]
    BaseUrlQueryOrFragment { provider: Provider, base: String },
    /// `what` names the secret, such as "Anthropic API key".
    #[error("the {what} contains characters that cannot be sent in an HTTP header")]
    SecretNotHeaderSafe { what: &'static str },
    #[error("cannot build the HTTP client for the LLM: {}", crate::error_chain(.0))]
    HttpClient(reqwest::Error),
}

/// The base URL with `path` appended, without doubling slashes. Refuses anything but an
/// absolute http(s) URL without a query, since the path is appended to it verbatim.
pub fn endpoint_url(provider: Provider, base_url: Option<&str>, path: &str) -> Result<url::Url, SetupError> {
    let base = base_url.map(str::trim).filter(|b| !b.is_empty()).unwrap_or(provider.default_base_url());
    let joined = format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'));
    let url = url::Url::parse(&joined).map_err(|cause| SetupError::BaseUrlInvalid {
        provider,
        base: base.to_string(),
        cause,
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(SetupError::BaseUrlNotHttp { provider, base: base.to_string() });
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(SetupError::BaseUrlQueryOrFragment { provider, base: base.to_string() });
    }
    Ok(url)
}

/// `value` as a header value the client never prints; `what` names it in the error.
pub fn secret_header(value: &str, what: &'static str) -> Result<HeaderValue, SetupError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| SetupError::SecretNotHeaderSafe { what })?;
    header.set_sensitive(true);
    Ok(header)
}

/// The retrying JSON-over-HTTP sender both providers use.
pub struct Http {
    client: reqwest::Client,
    url: url::Url,
    /// "Anthropic at https://…/v1/messages", for error messages and logs (no credentials).
    endpoint: String,
    provider: Provider,
    timeout: Duration,
    max_retries: u32,
    retry_base: Duration,
}

impl Http {
    pub fn new(settings: &LlmSettings, url: url::Url) -> Result<Http, SetupError> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("mcpbootd/", env!("CARGO_PKG_VERSION")))
            // The per-attempt deadline is enforced around the whole exchange in `attempt`;
            // a short connect timeout only makes an unreachable host fail (and retry) sooner.
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(SetupError::HttpClient)?;
        let mut shown = url.clone();
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        Ok(Http {
            client,
            endpoint: format!("{} at {shown}", settings.provider.display_name()),
            url,
            provider: settings.provider,
            timeout: settings.timeout,
            max_retries: settings.max_retries,
            retry_base: settings.retry_base,
        })
    }

    pub fn bad_response(&self, problem: UnusableReply) -> LlmError {
        LlmError::BadResponse { endpoint: self.endpoint.clone(), problem }
    }

    /// POSTs `body` (JSON) with retries and returns the successful reply's body.
    pub async fn post(&self, headers: &HeaderMap, body: Bytes) -> Result<Bytes, LlmError> {
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let (error, retry_after) = match self.attempt(headers, body.clone()).await {
                Ok(reply) => {
                    tracing::debug!(
                        provider = self.provider.as_str(),
                        url = %self.url,
                        attempt,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        bytes = reply.len(),
                        "LLM request succeeded"
                    );
                    return Ok(reply);
                }
                Err(failure) => failure,
            };
            if !error.is_retryable() || attempt > self.max_retries {
                return Err(error);
            }
            let wait = match retry_after {
                Some(wait) => wait.min(MAX_RETRY_WAIT),
                None => backoff(self.retry_base, attempt),
            };
            tracing::warn!(
                provider = self.provider.as_str(),
                url = %self.url,
                attempt,
                max_attempts = self.max_retries.saturating_add(1),
                wait_ms = wait.as_millis() as u64,
                error = %error,
                "LLM request failed; retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// One request under the per-attempt deadline; on failure also the server's retry hint.
    async fn attempt(&self, headers: &HeaderMap, body: Bytes) -> Result<Bytes, (LlmError, Option<Duration>)> {
        let request = self.client.post(self.url.clone()).headers(headers.clone()).body(body);
        let exchange = async {
            let mut response = request.send().await.map_err(|e| (self.transport(e), None))?;
            let status = response.status();
            if status.is_success() {
                return read_capped(&mut response, MAX_REPLY_BYTES, false).await.map_err(|e| match e {
                    ReadError::TooLarge => {
                        (self.bad_response(UnusableReply::TooLarge { limit: MAX_REPLY_BYTES }), None)
                    }
                    ReadError::Transport(e) => (self.transport(e), None),
                });
            }
            let retry_after = retry_after(response.headers());
            // A failure to read the error body still leaves a useful status.
            let body = match read_capped(&mut response, MAX_ERROR_BODY_BYTES, true).await {
                Ok(bytes) => quote_body(&bytes),
                Err(ReadError::TooLarge) => "(error body too large to show)".to_string(),
                Err(ReadError::Transport(e)) => format!("(error body unreadable: {})", crate::error_chain(&e)),
            };
            Err((LlmError::Status { endpoint: self.endpoint.clone(), status: status.as_u16(), body }, retry_after))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err((LlmError::Timeout { endpoint: self.endpoint.clone(), after: self.timeout }, None)),
        }
    }

    fn transport(&self, error: reqwest::Error) -> LlmError {
        if error.is_timeout() {
            return LlmError::Timeout { endpoint: self.endpoint.clone(), after: self.timeout };
        }
        LlmError::Transport { endpoint: self.endpoint.clone(), message: crate::error_chain(&error.without_url()) }
    }
}

enum ReadError {
    TooLarge,
    Transport(reqwest::Error),
}

/// Reads the body up to `limit` bytes without buffering more: beyond it the body is refused,
/// or cut at the limit when `truncate` (error bodies, which are only quoted).
async fn read_capped(response: &mut reqwest::Response, limit: usize, truncate: bool) -> Result<Bytes, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Transport)? {
        if body.len() + chunk.len() > limit {
            if truncate {
                body.extend_from_slice(&chunk[..limit - body.len()]);
                break;
            }
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// An error body as it appears in a message: lossy UTF-8, one line, bounded.
fn quote_body(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return "(empty body)".into();
    }
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The server's wait hint: `retry-after-ms` (OpenAI) or `retry-after` in seconds. The
/// HTTP-date form is ignored in favour of our own backoff.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(MAX_RETRY_WAIT.as_secs_f64())));
    }
    number("retry-after").map(|s| Duration::from_secs_f64(s.min(MAX_RETRY_WAIT.as_secs_f64())))
}

/// `base · 2^(attempt-1)`, capped, then drawn uniformly from its upper half so that jobs that
/// failed together do not retry in lockstep.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    let full = base.saturating_mul(factor).min(MAX_RETRY_WAIT);
    let half = full / 2;
    // RandomState is seeded randomly per instance: enough entropy for jitter without a crate.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    half + (full - half).mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after", HeaderValue::from_static("3600"));
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_WAIT));
        headers.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
    }

    #[test]
    fn backoff_grows_with_jitter_and_a_cap() {
        let base = Duration::from_millis(100);
        for attempt in 1..=4 {
            let full = base * 2u32.pow(attempt - 1);
            let wait = backoff(base, attempt);
            assert!(wait >= full / 2 && wait <= full, "attempt {attempt}: {wait:?}");
        }
        assert!(backoff(base, 40) <= MAX_RETRY_WAIT);
        assert!(backoff(Duration::from_secs(1), u32::MAX) <= MAX_RETRY_WAIT);
    }

    #[test]
    fn error_bodies_are_bounded_and_one_line() {
        assert_eq!(quote_body(b""), "(empty body)");
        assert_eq!(quote_body(b"a\n  b"), "a b");
        let long = "x".repeat(10_000);
        assert_eq!(quote_body(long.as_bytes()).chars().count(), MAX_ERROR_BODY_CHARS + 1);
    }
}
