//! The LLM used at generation time: Anthropic Messages and OpenAI Chat Completions behind one
//! trait.
//!
//! Only generation (planning and compiling handlers) talks to an LLM; serving never does. A
//! provider is a thin wire format (`llm/anthropic.rs`, `llm/openai.rs`) over the shared
//! [`Http`] sender here, which owns what both need and what is easy to get wrong:
//!
//! * **One reqwest client per [`LlmClient`]**, built once. Unlike the handlers' egress client
//!   it keeps reqwest's defaults, system proxy included: reaching a provider through a proxy is
//!   an operator's business, and nothing an LLM writes ever travels through this client.
//! * **A deadline per attempt** (`timeout`) covering connect, headers and the whole body: a
//!   provider that streams a reply slowly must not hold a generation job forever.
//! * **Retries** on 429, any 5xx (Anthropic's 529 "overloaded" included), timeouts and
//!   connection errors, at most `max_retries` extra attempts, with exponential backoff and
//!   jitter. A `retry-after` (or OpenAI's `retry-after-ms`) header is honoured but capped, so
//!   a provider cannot park a job for an hour. Other 4xx are the request's fault and repeat
//!   identically, so they are returned at once.
//! * **Capped bodies**: a reply larger than [`MAX_REPLY_BYTES`] is refused rather than
//!   buffered, and error bodies are cut short before they reach an error message.
//! * **Secrets**: the API key lives in a sensitive header value and is never logged; `Debug`
//!   of [`LlmSettings`] redacts it.
//!
//! [`Usage`] counts tokens and successful requests; failed attempts cost nothing here (the
//! providers do not bill them). [`MeteredLlm`] totals the usage of every request made through
//! it, which lets a caller record what a failed generation spent as well.

mod anthropic;
mod openai;

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::ops::{Add, AddAssign};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};

/// Back-off unit when the configuration does not say: 1 s, 2 s, 4 s, ... (plus jitter).
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(1);
/// Longest wait between two attempts, whatever `retry-after` or the backoff say.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// Largest successful reply body accepted; real replies are a few hundred KiB at most.
pub const MAX_REPLY_BYTES: usize = 32 * 1024 * 1024;
/// Error bodies are read up to this size ...
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// ... and quoted in error messages up to this many characters.
const MAX_ERROR_BODY_CHARS: usize = 2_000;

/// Everything needed to talk to one provider.
#[derive(Clone)]
pub struct LlmSettings {
    pub provider: Provider,
    pub model: String,
    /// `None` (or empty): the provider's public endpoint ([`Provider::default_base_url`]).
    pub base_url: Option<String>,
    /// May be empty for local OpenAI-compatible servers, which need none.
    pub api_key: String,
    pub max_tokens: u32,
    /// Per attempt, including the time the provider takes to write the reply.
    pub timeout: Duration,
    /// Extra attempts after a retryable failure.
    pub max_retries: u32,
    /// First backoff step; doubles on every retry.
    pub retry_base: Duration,
}

impl fmt::Debug for LlmSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmSettings")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &if self.api_key.is_empty() { "" } else { "<redacted>" })
            .field("max_tokens", &self.max_tokens)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .finish()
    }
}

impl LlmSettings {
    /// Settings from the `[llm]` section; `Ok(None)` when no provider is configured (prompt
    /// registrations are then refused, toolsets keep working).
    pub fn from_config(config: &crate::config::LlmConfig) -> Result<Option<LlmSettings>, String> {
        let Some(provider) = config.provider else { return Ok(None) };
        let base_url = config.base_url.trim();
        Ok(Some(LlmSettings {
            provider,
            model: config.model.trim().to_string(),
            base_url: (!base_url.is_empty()).then(|| base_url.to_string()),
            api_key: config.api_key.expose().to_string(),
            max_tokens: config.max_tokens,
            timeout: Duration::from_millis(config.timeout_ms),
            max_retries: config.max_retries,
            retry_base: DEFAULT_RETRY_BASE,
        }))
    }
}

pub use crate::config::Provider;

/// Tokens spent and successful requests made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub requests: u32,
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.requests = self.requests.saturating_add(other.requests);
    }
}

impl Add for Usage {
    type Output = Usage;
    fn add(mut self, other: Usage) -> Usage {
        self += other;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One turn of a conversation. Conversations start with a user turn and alternate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Message {
        Message { role: Role::User, content: content.into() }
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message { role: Role::Assistant, content: content.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    pub usage: Usage,
}

/// A chat model. Implementations must be cheap to share between concurrent requests.
pub trait LlmClient: Send + Sync {
    fn model(&self) -> &str;
    fn complete<'a>(&'a self, system: &'a str, messages: &'a [Message]) -> BoxFuture<'a, Result<Reply, LlmError>>;
}

/// Why a request failed, after any retries. `endpoint` names the provider and URL, e.g.
/// `Anthropic at https://api.anthropic.com/v1/messages`.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("{endpoint} answered HTTP {status}: {body}")]
    Status { endpoint: String, status: u16, body: String },
    #[error("{endpoint} did not answer within {after:?} (raise [llm] timeout_ms for slow models)")]
    Timeout { endpoint: String, after: Duration },
    #[error("cannot reach {endpoint}: {message}")]
    Transport { endpoint: String, message: String },
    #[error("{endpoint} sent an unusable reply: {message}")]
    BadResponse { endpoint: String, message: String },
}

impl LlmError {
    /// Whether another attempt might succeed.
    fn is_retryable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => *status == 429 || (500..=599).contains(status),
            LlmError::Timeout { .. } | LlmError::Transport { .. } => true,
            LlmError::BadResponse { .. } => false,
        }
    }
}

/// Builds the client for `settings`; fails on a malformed base URL or API key.
pub fn build_client(settings: LlmSettings) -> Result<Arc<dyn LlmClient>, String> {
    if settings.model.trim().is_empty() {
        return Err(format!("the {} LLM needs a model name", settings.provider));
    }
    if settings.max_tokens == 0 {
        return Err("the LLM's max_tokens must be at least 1".into());
    }
    if settings.timeout.is_zero() {
        return Err("the LLM's timeout must be longer than zero".into());
    }
    Ok(match settings.provider {
        Provider::Anthropic => Arc::new(anthropic::Anthropic::new(settings)?),
        Provider::OpenAi => Arc::new(openai::OpenAi::new(settings)?),
    })
}

/// Totals the usage of every successful request made through it, including those of
/// generations that fail later, so a job can record what it spent either way.
pub struct MeteredLlm {
    inner: Arc<dyn LlmClient>,
    usage: Mutex<Usage>,
}

impl MeteredLlm {
    pub fn new(inner: Arc<dyn LlmClient>) -> MeteredLlm {
        MeteredLlm { inner, usage: Mutex::new(Usage::default()) }
    }

    pub fn usage(&self) -> Usage {
        *self.usage.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl LlmClient for MeteredLlm {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn complete<'a>(&'a self, system: &'a str, messages: &'a [Message]) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(async move {
            let reply = self.inner.complete(system, messages).await?;
            *self.usage.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) += reply.usage;
            Ok(reply)
        })
    }
}

/// The base URL with `path` appended, without doubling slashes. Refuses anything but an
/// absolute http(s) URL without a query, since the path is appended to it verbatim.
fn endpoint_url(provider: Provider, base_url: Option<&str>, path: &str) -> Result<url::Url, String> {
    let base = base_url.map(str::trim).filter(|b| !b.is_empty()).unwrap_or(provider.default_base_url());
    let joined = format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'));
    let url =
        url::Url::parse(&joined).map_err(|e| format!("the {provider} base_url {base:?} is not a valid URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("the {provider} base_url {base:?} must be an http:// or https:// URL"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("the {provider} base_url {base:?} must not have a query or fragment"));
    }
    Ok(url)
}

/// `value` as a header value the client never prints.
fn secret_header(value: &str, what: &str) -> Result<HeaderValue, String> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| format!("the {what} contains characters that cannot be sent in an HTTP header"))?;
    header.set_sensitive(true);
    Ok(header)
}

/// The retrying JSON-over-HTTP sender both providers use.
struct Http {
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
    fn new(settings: &LlmSettings, url: url::Url) -> Result<Http, String> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("mcpbootd/", env!("CARGO_PKG_VERSION")))
            // The per-attempt deadline is enforced around the whole exchange in `attempt`;
            // a short connect timeout only makes an unreachable host fail (and retry) sooner.
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| format!("cannot build the HTTP client for the LLM: {}", crate::error_chain(&e)))?;
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

    fn bad_response(&self, message: impl Into<String>) -> LlmError {
        LlmError::BadResponse { endpoint: self.endpoint.clone(), message: message.into() }
    }

    /// POSTs `body` (JSON) with retries and returns the successful reply's body.
    async fn post(&self, headers: &HeaderMap, body: Bytes) -> Result<Bytes, LlmError> {
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
                        (self.bad_response(format!("the reply is larger than {MAX_REPLY_BYTES} bytes")), None)
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

/// A rough token count for tests and fakes: four characters per token.
#[cfg(test)]
fn approx_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// An in-process [`LlmClient`] for the planner's and compiler's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::future::BoxFuture;

    use super::{LlmClient, LlmError, Message, Reply, Usage, approx_tokens};

    type Responder = Box<dyn Fn(&str, &[Message]) -> Result<String, LlmError> + Send + Sync>;

    #[derive(Debug, Clone)]
    pub(crate) struct Call {
        pub system: String,
        pub messages: Vec<Message>,
    }

    pub(crate) struct FakeLlm {
        respond: Responder,
        delay: Duration,
        calls: Mutex<Vec<Call>>,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
    }

    impl FakeLlm {
        pub(crate) fn new(
            respond: impl Fn(&str, &[Message]) -> Result<String, LlmError> + Send + Sync + 'static,
        ) -> FakeLlm {
            FakeLlm {
                respond: Box::new(respond),
                delay: Duration::ZERO,
                calls: Mutex::new(Vec::new()),
                in_flight: AtomicUsize::new(0),
                max_in_flight: AtomicUsize::new(0),
            }
        }

        /// Answers with `replies` in order; an error once they run out.
        pub(crate) fn scripted<S: Into<String>>(replies: impl IntoIterator<Item = S>) -> FakeLlm {
            let queue = Mutex::new(replies.into_iter().map(Into::into).collect::<VecDeque<String>>());
            FakeLlm::new(move |_, _| {
                queue.lock().unwrap().pop_front().ok_or_else(|| LlmError::Status {
                    endpoint: "fake".into(),
                    status: 500,
                    body: "script exhausted".into(),
                })
            })
        }

        pub(crate) fn with_delay(mut self, delay: Duration) -> FakeLlm {
            self.delay = delay;
            self
        }

        pub(crate) fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }

        pub(crate) fn max_in_flight(&self) -> usize {
            self.max_in_flight.load(Ordering::SeqCst)
        }
    }

    impl LlmClient for FakeLlm {
        fn model(&self) -> &str {
            "fake-model"
        }

        fn complete<'a>(&'a self, system: &'a str, messages: &'a [Message]) -> BoxFuture<'a, Result<Reply, LlmError>> {
            Box::pin(async move {
                self.calls.lock().unwrap().push(Call { system: system.to_string(), messages: messages.to_vec() });
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                if !self.delay.is_zero() {
                    tokio::time::sleep(self.delay).await;
                }
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                let text = (self.respond)(system, messages)?;
                let input = approx_tokens(system) + messages.iter().map(|m| approx_tokens(&m.content)).sum::<u64>();
                Ok(Reply {
                    usage: Usage { input_tokens: input, output_tokens: approx_tokens(&text), requests: 1 },
                    text,
                })
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::response::Response;
    use serde_json::{Value, json};

    use super::*;

    /// What the test server answers next.
    enum Step {
        Json(u16, Value, Vec<(&'static str, &'static str)>),
        Raw(u16, &'static str),
        Hang,
    }

    #[derive(Debug, Clone)]
    struct Seen {
        path: String,
        headers: HeaderMap,
        body: Value,
    }

    #[derive(Default)]
    struct State {
        script: Mutex<VecDeque<Step>>,
        seen: Mutex<Vec<Seen>>,
    }

    /// A loopback server answering every POST from a script and recording what it got.
    struct Server {
        address: SocketAddr,
        state: Arc<State>,
    }

    impl Server {
        async fn start(script: Vec<Step>) -> Server {
            let state = Arc::new(State { script: Mutex::new(script.into()), seen: Mutex::default() });
            let shared = state.clone();
            let app = axum::Router::new().fallback(move |request: Request<Body>| {
                let state = shared.clone();
                async move { answer(state, request).await }
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
            Server { address, state }
        }

        fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.address)
        }

        fn seen(&self) -> Vec<Seen> {
            self.state.seen.lock().unwrap().clone()
        }
    }

    async fn answer(state: Arc<State>, request: Request<Body>) -> Response {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        state.seen.lock().unwrap().push(Seen {
            path: parts.uri.path().to_string(),
            headers: parts.headers.clone(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        });
        let step = state.script.lock().unwrap().pop_front();
        let (status, body, headers) = match step {
            Some(Step::Json(status, value, headers)) => (status, value.to_string(), headers),
            Some(Step::Raw(status, text)) => (status, text.to_string(), Vec::new()),
            Some(Step::Hang) => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                (500, String::new(), Vec::new())
            }
            None => (500, "script exhausted".into(), Vec::new()),
        };
        let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
        for (name, value) in headers {
            response = response.header(name, value);
        }
        response.header("content-type", "application/json").body(Body::from(body)).unwrap()
    }

    fn anthropic_reply(text: &str) -> Value {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": text}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 11, "output_tokens": 7}
        })
    }

    fn openai_reply(text: &str) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        })
    }

    fn settings(provider: Provider, base_url: String) -> LlmSettings {
        LlmSettings {
            provider,
            model: "test-model".into(),
            base_url: Some(base_url),
            api_key: "sk-test-key".into(),
            max_tokens: 1234,
            timeout: Duration::from_secs(5),
            max_retries: 2,
            retry_base: Duration::from_millis(1),
        }
    }

    fn init() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }

    fn header<'a>(seen: &'a Seen, name: &str) -> Option<&'a str> {
        seen.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn anthropic_request_and_reply() {
        init();
        let server = Server::start(vec![Step::Json(200, anthropic_reply("hello"), vec![])]).await;
        // A trailing slash on the base URL must not double up.
        let client = build_client(settings(Provider::Anthropic, server.url("/"))).unwrap();
        assert_eq!(client.model(), "test-model");
        let reply = client.complete("be brief", &[Message::user("hi")]).await.unwrap();
        assert_eq!(reply.text, "hello");
        assert_eq!(reply.usage, Usage { input_tokens: 11, output_tokens: 7, requests: 1 });
        let seen = server.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/v1/messages");
        assert_eq!(header(&seen[0], "x-api-key"), Some("sk-test-key"));
        assert_eq!(header(&seen[0], "anthropic-version"), Some("2023-06-01"));
        assert_eq!(header(&seen[0], "content-type"), Some("application/json"));
        assert!(header(&seen[0], "authorization").is_none());
        assert_eq!(
            seen[0].body,
            json!({"model": "test-model", "max_tokens": 1234, "system": "be brief", "messages": [{"role": "user", "content": "hi"}]})
        );
    }

    #[tokio::test]
    async fn anthropic_base_url_ending_in_v1() {
        init();
        let server = Server::start(vec![Step::Json(200, anthropic_reply("ok"), vec![])]).await;
        let client = build_client(settings(Provider::Anthropic, server.url("/v1/"))).unwrap();
        client.complete("s", &[Message::user("q")]).await.unwrap();
        assert_eq!(server.seen()[0].path, "/v1/messages");
    }

    #[tokio::test]
    async fn openai_request_and_reply() {
        init();
        let server = Server::start(vec![Step::Json(200, openai_reply("hi there"), vec![])]).await;
        let client = build_client(settings(Provider::OpenAi, server.url("/v1/"))).unwrap();
        let messages = [Message::user("q"), Message::assistant("a"), Message::user("q2")];
        let reply = client.complete("sys", &messages).await.unwrap();
        assert_eq!(reply.text, "hi there");
        assert_eq!(reply.usage, Usage { input_tokens: 5, output_tokens: 3, requests: 1 });
        let seen = server.seen();
        assert_eq!(seen[0].path, "/v1/chat/completions");
        assert_eq!(header(&seen[0], "authorization"), Some("Bearer sk-test-key"));
        assert_eq!(header(&seen[0], "content-type"), Some("application/json"));
        assert!(header(&seen[0], "x-api-key").is_none());
        assert_eq!(
            seen[0].body,
            json!({"model": "test-model", "max_tokens": 1234, "messages": [
                {"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]})
        );
    }

    #[tokio::test]
    async fn openai_without_key_or_usage() {
        init();
        let reply = json!({"choices": [{"message": {"role": "assistant", "content": "ok"}}]});
        let server = Server::start(vec![Step::Json(200, reply, vec![])]).await;
        let mut settings = settings(Provider::OpenAi, server.url(""));
        settings.api_key = String::new();
        let reply = build_client(settings).unwrap().complete("", &[Message::user("q")]).await.unwrap();
        assert_eq!(reply.usage, Usage { input_tokens: 0, output_tokens: 0, requests: 1 });
        let seen = server.seen();
        assert_eq!(seen[0].path, "/chat/completions");
        assert!(header(&seen[0], "authorization").is_none(), "no key, no Authorization header");
        // An empty system prompt is left out rather than sent as an empty message.
        assert_eq!(seen[0].body["messages"], json!([{"role": "user", "content": "q"}]));
    }

    #[tokio::test]
    async fn retries_429_honouring_retry_after() {
        init();
        let server = Server::start(vec![
            Step::Json(429, json!({"error": {"message": "slow down"}}), vec![("retry-after", "0")]),
            Step::Json(200, openai_reply("done"), vec![]),
        ])
        .await;
        let mut settings = settings(Provider::OpenAi, server.url("/v1"));
        // A long base backoff proves the retry-after header was used instead.
        settings.retry_base = Duration::from_secs(20);
        let started = Instant::now();
        let reply = build_client(settings).unwrap().complete("s", &[Message::user("q")]).await.unwrap();
        assert_eq!(reply.text, "done");
        assert_eq!(reply.usage.requests, 1, "only successful requests count");
        assert_eq!(server.seen().len(), 2);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn retries_529_overloaded() {
        init();
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let server =
            Server::start(vec![Step::Json(529, overloaded, vec![]), Step::Json(200, anthropic_reply("fine"), vec![])])
                .await;
        let reply = build_client(settings(Provider::Anthropic, server.url("")))
            .unwrap()
            .complete("s", &[Message::user("q")])
            .await;
        assert_eq!(reply.unwrap().text, "fine");
        assert_eq!(server.seen().len(), 2);
    }

    #[tokio::test]
    async fn gives_up_after_max_retries() {
        init();
        let server = Server::start((0..3).map(|_| Step::Raw(500, "{\"error\":\"boom\"}")).collect()).await;
        let error = build_client(settings(Provider::Anthropic, server.url("")))
            .unwrap()
            .complete("s", &[Message::user("q")])
            .await;
        let error = error.unwrap_err();
        assert!(matches!(error, LlmError::Status { status: 500, .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("Anthropic at http://127.0.0.1") && message.contains("/v1/messages"), "{message}");
        assert!(message.contains("boom"), "{message}");
        assert_eq!(server.seen().len(), 3, "1 attempt + max_retries (2)");
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        init();
        let body =
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}});
        let server =
            Server::start(vec![Step::Json(400, body, vec![]), Step::Json(200, anthropic_reply("x"), vec![])]).await;
        let error = build_client(settings(Provider::Anthropic, server.url("")))
            .unwrap()
            .complete("s", &[Message::user("q")])
            .await;
        let error = error.unwrap_err();
        assert!(matches!(error, LlmError::Status { status: 400, .. }), "{error:?}");
        assert!(error.to_string().contains("max_tokens: too large"), "{error}");
        assert!(!error.to_string().contains("sk-test-key"));
        assert_eq!(server.seen().len(), 1);
    }

    #[tokio::test]
    async fn a_hanging_provider_times_out() {
        init();
        let server = Server::start(vec![Step::Hang]).await;
        let mut settings = settings(Provider::OpenAi, server.url("/v1"));
        settings.timeout = Duration::from_millis(200);
        settings.max_retries = 0;
        let started = Instant::now();
        let error = build_client(settings).unwrap().complete("s", &[Message::user("q")]).await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(error, LlmError::Timeout { after, .. } if after == Duration::from_millis(200)), "{error:?}");
        assert!(elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(2), "{elapsed:?}");
        assert!(error.to_string().contains("timeout_ms"), "{error}");
    }

    #[tokio::test]
    async fn a_timeout_is_retried() {
        init();
        let server = Server::start(vec![Step::Hang, Step::Json(200, openai_reply("late"), vec![])]).await;
        let mut settings = settings(Provider::OpenAi, server.url("/v1"));
        settings.timeout = Duration::from_millis(200);
        let reply = build_client(settings).unwrap().complete("s", &[Message::user("q")]).await.unwrap();
        assert_eq!(reply.text, "late");
        assert_eq!(server.seen().len(), 2);
    }

    #[tokio::test]
    async fn garbage_is_a_bad_response() {
        init();
        for provider in [Provider::Anthropic, Provider::OpenAi] {
            let server =
                Server::start(vec![Step::Raw(200, "<html>not an API</html>"), Step::Raw(200, "{\"ok\":true}")]).await;
            let client = build_client(settings(provider, server.url(""))).unwrap();
            let error = client.complete("s", &[Message::user("q")]).await.unwrap_err();
            assert!(matches!(error, LlmError::BadResponse { .. }), "{error:?}");
            assert_eq!(server.seen().len(), 1, "a malformed reply is not retried");
            let error = client.complete("s", &[Message::user("q")]).await.unwrap_err();
            assert!(matches!(error, LlmError::BadResponse { .. }), "{error:?}");
        }
    }

    #[tokio::test]
    async fn connection_errors_are_retried_then_reported() {
        init();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let mut settings = settings(Provider::OpenAi, format!("http://{address}/v1"));
        settings.max_retries = 1;
        let error = build_client(settings).unwrap().complete("s", &[Message::user("q")]).await.unwrap_err();
        assert!(matches!(error, LlmError::Transport { .. }), "{error:?}");
        assert!(error.to_string().contains(&address.to_string()), "{error}");
    }

    #[tokio::test]
    async fn openai_falls_back_to_max_completion_tokens() {
        init();
        let refusal = json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error", "param": "max_tokens"}});
        let server = Server::start(vec![
            Step::Json(400, refusal, vec![]),
            Step::Json(200, openai_reply("one"), vec![]),
            Step::Json(200, openai_reply("two"), vec![]),
        ])
        .await;
        let client = build_client(settings(Provider::OpenAi, server.url("/v1"))).unwrap();
        assert_eq!(client.complete("s", &[Message::user("q")]).await.unwrap().text, "one");
        assert_eq!(client.complete("s", &[Message::user("q")]).await.unwrap().text, "two");
        let seen = server.seen();
        assert_eq!(seen[0].body["max_tokens"], json!(1234));
        for later in &seen[1..] {
            assert_eq!(later.body["max_completion_tokens"], json!(1234));
            assert!(later.body.get("max_tokens").is_none());
        }
    }

    #[tokio::test]
    async fn metered_totals_every_request() {
        let fake = Arc::new(testing::FakeLlm::scripted(["a", "bb"]));
        let metered = MeteredLlm::new(fake);
        metered.complete("s", &[Message::user("q")]).await.unwrap();
        metered.complete("s", &[Message::user("q")]).await.unwrap();
        assert!(metered.complete("s", &[Message::user("q")]).await.is_err());
        assert_eq!(metered.usage().requests, 2);
    }

    #[test]
    fn settings_never_show_the_key() {
        let settings = settings(Provider::Anthropic, "https://example.com".into());
        let shown = format!("{settings:?}");
        assert!(!shown.contains("sk-test-key") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn provider_names() {
        assert_eq!("anthropic".parse::<Provider>(), Ok(Provider::Anthropic));
        assert_eq!(" OpenAI ".parse::<Provider>(), Ok(Provider::OpenAi));
        assert!("gemini".parse::<Provider>().unwrap_err().contains("\"openai\""));
    }

    #[test]
    fn endpoint_urls() {
        let cases = [
            (Provider::Anthropic, None, "https://api.anthropic.com/v1/messages"),
            (Provider::Anthropic, Some("https://proxy.example.com/"), "https://proxy.example.com/v1/messages"),
            (Provider::Anthropic, Some("  "), "https://api.anthropic.com/v1/messages"),
            (Provider::OpenAi, None, "https://api.openai.com/v1/chat/completions"),
            (Provider::OpenAi, Some("http://localhost:11434/v1//"), "http://localhost:11434/v1/chat/completions"),
        ];
        for (provider, base, expected) in cases {
            let path = match provider {
                Provider::Anthropic => anthropic::PATH,
                Provider::OpenAi => openai::PATH,
            };
            assert_eq!(endpoint_url(provider, base, path).unwrap().as_str(), expected, "{base:?}");
        }
        assert!(endpoint_url(Provider::OpenAi, Some("localhost:11434"), openai::PATH).is_err());
        assert!(endpoint_url(Provider::OpenAi, Some("ftp://x.example/"), openai::PATH).is_err());
        assert!(endpoint_url(Provider::OpenAi, Some("https://x.example/v1?key=1"), openai::PATH).is_err());
        let mut bad = settings(Provider::OpenAi, "not a url".into());
        assert!(build_client(bad.clone()).err().unwrap().contains("base_url"));
        bad.base_url = None;
        bad.api_key = "line\nbreak".into();
        assert!(build_client(bad).err().unwrap().contains("API key"));
    }

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
