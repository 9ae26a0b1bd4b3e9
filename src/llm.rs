//! The LLM used at generation time: Anthropic Messages and OpenAI Chat Completions behind one
//! trait.
//!
//! Only generation (planning and compiling handlers) talks to an LLM; serving never does. A
//! provider is a thin wire format (`llm/anthropic.rs`, `llm/openai.rs`) over the shared
//! sender in `llm/http.rs`, which owns what both need and what is easy to get wrong:
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
mod chat;
mod http;
mod openai;
mod settings;

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

pub use self::chat::{LlmClient, LlmError, Message, Reply, Role, Usage};
pub use self::http::{MAX_REPLY_BYTES, MAX_RETRY_WAIT, SetupError};
pub use self::settings::{DEFAULT_RETRY_BASE, LlmSettings};
pub use crate::config::Provider;

/// Builds the client for `settings`; fails on a malformed base URL or API key.
pub fn build_client(settings: LlmSettings) -> Result<Arc<dyn LlmClient>, SetupError> {
    if settings.model.trim().is_empty() {
        return Err(SetupError::NoModel { provider: settings.provider });
    }
    if settings.max_tokens == 0 {
        return Err(SetupError::NoMaxTokens);
    }
    if settings.timeout.is_zero() {
        return Err(SetupError::NoTimeout);
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
    use std::time::{Duration, Instant};

    use reqwest::header::HeaderMap;
    use serde_json::{Value, json};

    use super::http::endpoint_url;
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
        assert_eq!(
            " Gemini".parse::<Provider>().unwrap_err().to_string(),
            r#"[llm] provider = "gemini" is not supported: use "anthropic" or "openai" (OpenAI-compatible servers such as Ollama or vLLM use "openai" with a base_url)"#
        );
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
        // Operators read these at start-up, so they are pinned word for word.
        let refusal = |base: &str| endpoint_url(Provider::OpenAi, Some(base), openai::PATH).unwrap_err().to_string();
        assert_eq!(
            refusal("localhost:11434"),
            r#"the openai base_url "localhost:11434" must be an http:// or https:// URL"#
        );
        assert_eq!(
            refusal("ftp://x.example/"),
            r#"the openai base_url "ftp://x.example/" must be an http:// or https:// URL"#
        );
        assert_eq!(
            refusal("https://x.example/v1?key=1"),
            r#"the openai base_url "https://x.example/v1?key=1" must not have a query or fragment"#
        );
        assert_eq!(
            refusal("http://[::1"),
            r#"the openai base_url "http://[::1" is not a valid URL: invalid IPv6 address"#
        );
        let mut bad = settings(Provider::OpenAi, "not a url".into());
        assert!(matches!(build_client(bad.clone()).err().unwrap(), SetupError::BaseUrlInvalid { .. }));
        bad.base_url = None;
        bad.api_key = "line\nbreak".into();
        assert_eq!(
            build_client(bad.clone()).err().unwrap().to_string(),
            "the OpenAI API key contains characters that cannot be sent in an HTTP header"
        );
        bad.api_key = String::new();
        bad.model = " ".into();
        assert_eq!(build_client(bad.clone()).err().unwrap().to_string(), "the openai LLM needs a model name");
        bad.model = "m".into();
        bad.max_tokens = 0;
        assert_eq!(build_client(bad.clone()).err().unwrap().to_string(), "the LLM's max_tokens must be at least 1");
        bad.max_tokens = 1;
        bad.timeout = Duration::ZERO;
        assert_eq!(build_client(bad).err().unwrap().to_string(), "the LLM's timeout must be longer than zero");
    }
}
