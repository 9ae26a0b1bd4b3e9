//! A scripted LLM provider on loopback for generation tests: it speaks both the Anthropic
//! Messages API (`POST /v1/messages`) and OpenAI Chat Completions (`POST /chat/completions`,
//! `POST /v1/chat/completions`), answers from a FIFO script (or a routing function once the
//! script is empty) and records every request.
//!
//! Replies have the real providers' shapes, with token counts derived from text lengths (four
//! characters per token), so the daemon's parsing and usage accounting are exercised as they
//! would be against the real APIs. Nothing in here panics on unexpected input: a malformed
//! request gets a 400 and an exhausted script a 500, both in the provider's error shape, so a
//! test fails with a readable message from the daemon instead of a dead server.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::watch;

/// Largest request body read; generation requests carry up to ~200k characters of documents.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// One scripted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripted {
    /// A successful completion with this text, in the wire format of the path asked.
    Text(String),
    /// This status with this body (sent as given) and `retry-after: 0`, so retry tests do not
    /// wait; the backoff itself is unit-tested in `llm.rs`.
    Status(u16, String),
    /// Never answers (until the server is dropped); for timeout tests.
    Hang,
    /// A 200 whose body is not the provider's JSON.
    Garbage,
    /// The inner answer, after this long (without holding a thread); for tests that watch a
    /// stage while it runs.
    Delayed(std::time::Duration, Box<Scripted>),
    /// The inner answer, once the gate is opened; holds a stage until the test has seen it,
    /// without holding a thread.
    Gated(Gate, Box<Scripted>),
}

/// Opens a [`Scripted::Gated`] answer: `open` before the request arrives is kept for it.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<tokio::sync::Notify>);

impl Gate {
    pub fn open(&self) {
        self.0.notify_one();
    }
}

impl PartialEq for Gate {
    fn eq(&self, other: &Gate) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Gate {}

impl Scripted {
    pub fn text(text: impl Into<String>) -> Scripted {
        Scripted::Text(text.into())
    }
}

/// Which wire format a request used, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lower-cased; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON body; `Value::Null` when it was not JSON.
    pub body: Value,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// `None` for paths that are neither provider's.
    pub fn wire(&self) -> Option<Wire> {
        match self.path.as_str() {
            "/v1/messages" => Some(Wire::Anthropic),
            "/chat/completions" | "/v1/chat/completions" => Some(Wire::OpenAi),
            _ => None,
        }
    }

    /// The system prompt in either format (Anthropic `system` as a string or text blocks;
    /// OpenAI `system`/`developer` messages), or "" when there is none.
    pub fn system(&self) -> String {
        match self.wire() {
            Some(Wire::Anthropic) => text_of(self.body.get("system").unwrap_or(&Value::Null)),
            Some(Wire::OpenAi) => self
                .raw_messages()
                .iter()
                .filter(|m| matches!(m.get("role").and_then(Value::as_str), Some("system" | "developer")))
                .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
                .collect::<Vec<_>>()
                .join("\n"),
            None => String::new(),
        }
    }

    /// The conversation as `(role, text)` pairs, system messages excluded.
    pub fn messages(&self) -> Vec<(String, String)> {
        self.raw_messages()
            .iter()
            .filter_map(|m| {
                let role = m.get("role").and_then(Value::as_str)?;
                if matches!(role, "system" | "developer") {
                    return None;
                }
                Some((role.to_string(), text_of(m.get("content").unwrap_or(&Value::Null))))
            })
            .collect()
    }

    /// The text of the last user message, "" when there is none.
    pub fn last_user_message(&self) -> String {
        self.messages().into_iter().rev().find(|(role, _)| role == "user").map(|(_, text)| text).unwrap_or_default()
    }

    /// Whether any message (system included) contains `needle`; handy for routing.
    pub fn mentions(&self, needle: &str) -> bool {
        self.system().contains(needle) || self.messages().iter().any(|(_, text)| text.contains(needle))
    }

    fn raw_messages(&self) -> Vec<Value> {
        self.body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default()
    }
}

/// A string, or the concatenated `text` of content blocks/parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

type Responder = Arc<dyn Fn(&RecordedRequest) -> Scripted + Send + Sync>;

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Scripted>>,
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<RecordedRequest>>,
    counter: AtomicU64,
}

/// Locks without panicking: a panic elsewhere in a test must not turn into a second one here.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct ScriptedLlm {
    pub address: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
}

impl ScriptedLlm {
    pub async fn start() -> ScriptedLlm {
        let state = Arc::new(State::default());
        let (shutdown, stopped) = watch::channel(false);
        let shared = state.clone();
        let hang_until = stopped.clone();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let state = shared.clone();
            let stopped = hang_until.clone();
            async move { answer(state, stopped, request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the scripted LLM's port");
        let address = listener.local_addr().expect("the scripted LLM's address");
        let mut on_stop = stopped;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = on_stop.wait_for(|stop| *stop).await;
                })
                .await;
        });
        ScriptedLlm { address, state, shutdown }
    }

    /// Queues one answer; queued answers are used first, in order.
    pub fn push(&self, reply: Scripted) {
        lock(&self.state.script).push_back(reply);
    }

    /// Answers requests that arrive when the queue is empty.
    pub fn respond_with(&self, f: impl Fn(&RecordedRequest) -> Scripted + Send + Sync + 'static) {
        *lock(&self.state.responder) = Some(Arc::new(f));
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// For `[llm] provider = "anthropic"`: `http://127.0.0.1:PORT`.
    pub fn base_url_anthropic(&self) -> String {
        format!("http://{}", self.address)
    }

    /// For `[llm] provider = "openai"`: `http://127.0.0.1:PORT/v1`.
    pub fn base_url_openai(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// `MCPBOOTD_LLM__*` settings that point a daemon at this server, in either wire format.
    pub fn daemon_env(&self, openai: bool) -> Vec<(String, String)> {
        let (provider, base) =
            if openai { ("openai", self.base_url_openai()) } else { ("anthropic", self.base_url_anthropic()) };
        vec![
            ("MCPBOOTD_LLM__PROVIDER".to_string(), provider.to_string()),
            ("MCPBOOTD_LLM__MODEL".to_string(), "test-model".to_string()),
            ("MCPBOOTD_LLM__BASE_URL".to_string(), base),
            ("MCPBOOTD_LLM__API_KEY".to_string(), "test-key".to_string()),
        ]
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        // Ends the server and releases hanging requests.
        let _ = self.shutdown.send(true);
    }
}

async fn answer(state: Arc<State>, mut stopped: watch::Receiver<bool>, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await;
    let mut headers = BTreeMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|existing: &mut String| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let parsed = bytes.as_ref().ok().and_then(|b| serde_json::from_slice::<Value>(b).ok());
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        headers,
        body: parsed.clone().unwrap_or(Value::Null),
    };
    lock(&state.requests).push(recorded.clone());

    let Some(wire) = recorded.wire().filter(|_| recorded.method == "POST") else {
        return error(Wire::OpenAi, 404, &format!("scripted LLM: no route for {} {}", recorded.method, recorded.path));
    };
    if !parsed.as_ref().is_some_and(Value::is_object) {
        return error(wire, 400, "scripted LLM: the request body is not a JSON object");
    }
    let queued = lock(&state.script).pop_front();
    let scripted = match queued {
        Some(scripted) => scripted,
        None => {
            let responder = lock(&state.responder).clone();
            match responder {
                Some(respond) => respond(&recorded),
                None => return error(wire, 500, "scripted LLM: the script is exhausted and no responder is set"),
            }
        }
    };
    let n = state.counter.fetch_add(1, Ordering::Relaxed) + 1;
    let mut scripted = scripted;
    loop {
        let (wait, inner): (std::pin::Pin<Box<dyn Future<Output = ()> + Send>>, _) = match scripted {
            Scripted::Delayed(delay, inner) => (Box::pin(tokio::time::sleep(delay)), inner),
            Scripted::Gated(gate, inner) => (Box::pin(async move { gate.0.notified().await }), inner),
            other => {
                scripted = other;
                break;
            }
        };
        tokio::select! {
            () = wait => {}
            _ = stopped.wait_for(|stop| *stop) => return error(wire, 503, "scripted LLM: shutting down"),
        }
        scripted = *inner;
    }
    match scripted {
        Scripted::Text(text) => completion(wire, n, &recorded, &text),
        Scripted::Status(status, body) => {
            let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            };
            let mut response = raw(status, content_type, body);
            response.headers_mut().insert("retry-after", HeaderValue::from_static("0"));
            response
        }
        Scripted::Hang => {
            let _ = stopped.wait_for(|stop| *stop).await;
            error(wire, 503, "scripted LLM: shutting down")
        }
        Scripted::Garbage => raw(200, "text/html", "<html><body>Welcome to nginx!</body></html>".into()),
        Scripted::Delayed(..) | Scripted::Gated(..) => unreachable!("unwrapped above"),
    }
}

fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

fn completion(wire: Wire, n: u64, request: &RecordedRequest, text: &str) -> Response {
    let model = request.body.get("model").and_then(Value::as_str).unwrap_or("scripted-model");
    let input = tokens(&request.system()) + request.messages().iter().map(|(_, t)| tokens(t)).sum::<u64>();
    let output = tokens(text);
    let body = match wire {
        Wire::Anthropic => json!({
            "id": format!("msg_scripted_{n}"),
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "model": model,
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": output}
        }),
        Wire::OpenAi => json!({
            "id": format!("chatcmpl-scripted-{n}"),
            "object": "chat.completion",
            "created": 1_700_000_000u64 + n,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}
        }),
    };
    raw(200, "application/json", body.to_string())
}

fn error(wire: Wire, status: u16, message: &str) -> Response {
    let body = match wire {
        Wire::Anthropic => json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        Wire::OpenAi => json!({"error": {"message": message, "type": "server_error", "code": null}}),
    };
    raw(status, "application/json", body.to_string())
}

fn raw(status: u16, content_type: &'static str, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    response
}

// The server's own behaviour, with a plain HTTP client.

#[cfg(test)]
mod self_tests {
    use std::time::Duration;

    use super::*;

    async fn post(url: String, body: Value) -> (u16, Option<String>, Value) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let response = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("x-api-key", "k")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        let text = response.text().await.unwrap();
        (status, retry_after, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    fn anthropic_request(system: &str, user: &str) -> Value {
        json!({"model": "m", "max_tokens": 10, "system": system, "messages": [{"role": "user", "content": user}]})
    }

    fn openai_request(system: &str, user: &str) -> Value {
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
    }

    #[tokio::test]
    async fn speaks_both_wire_formats_and_records() {
        let llm = ScriptedLlm::start().await;
        llm.push(Scripted::text("from the queue"));
        llm.push(Scripted::text("second"));
        let anthropic = format!("{}/v1/messages", llm.base_url_anthropic());
        let (status, _, body) = post(anthropic, anthropic_request("sys", "hello")).await;
        assert_eq!(status, 200);
        assert_eq!(body["type"], "message");
        assert_eq!(body["content"][0], json!({"type": "text", "text": "from the queue"}));
        assert_eq!(body["usage"], json!({"input_tokens": 3, "output_tokens": 4}));
        let (status, _, body) =
            post(format!("{}/chat/completions", llm.base_url_openai()), openai_request("sys", "hi")).await;
        assert_eq!(status, 200);
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], "second");
        assert_eq!(body["usage"]["total_tokens"], json!(4));

        let requests = llm.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!((requests[0].path.as_str(), requests[0].wire()), ("/v1/messages", Some(Wire::Anthropic)));
        assert_eq!(requests[0].header("X-Api-Key"), Some("k"));
        assert_eq!(requests[0].system(), "sys");
        assert_eq!(requests[1].path, "/v1/chat/completions");
        assert_eq!(requests[1].system(), "sys");
        assert_eq!(requests[1].messages(), vec![("user".to_string(), "hi".to_string())]);
        assert_eq!(requests[1].last_user_message(), "hi");
        assert!(requests[1].mentions("sys") && !requests[1].mentions("nope"));
    }

    #[tokio::test]
    async fn routes_with_a_responder_once_the_queue_is_empty() {
        let llm = ScriptedLlm::start().await;
        llm.respond_with(|request| {
            if request.system().contains("planner") { Scripted::text("plan") } else { Scripted::text("code") }
        });
        let url = format!("http://{}/chat/completions", llm.address);
        assert_eq!(
            post(url.clone(), openai_request("the planner", "p")).await.2["choices"][0]["message"]["content"],
            "plan"
        );
        assert_eq!(post(url, openai_request("the compiler", "p")).await.2["choices"][0]["message"]["content"], "code");
    }

    #[tokio::test]
    async fn errors_garbage_and_bad_requests() {
        let llm = ScriptedLlm::start().await;
        let url = format!("{}/v1/messages", llm.base_url_anthropic());
        llm.push(Scripted::Status(429, "{\"type\":\"error\"}".into()));
        llm.push(Scripted::Garbage);
        let (status, retry_after, body) = post(url.clone(), anthropic_request("s", "u")).await;
        assert_eq!((status, retry_after.as_deref(), body), (429, Some("0"), json!({"type": "error"})));
        let (status, _, body) = post(url.clone(), anthropic_request("s", "u")).await;
        assert_eq!(status, 200);
        assert!(body.as_str().is_some_and(|b| b.contains("nginx")));
        // Exhausted script, non-JSON body, unknown path: provider-shaped errors, no panics.
        assert_eq!(post(url.clone(), anthropic_request("s", "u")).await.0, 500);
        assert_eq!(post(url, json!("just a string")).await.0, 400);
        let (status, _, body) = post(format!("http://{}/v2/other", llm.address), json!({})).await;
        assert_eq!(status, 404);
        assert!(body["error"]["message"].as_str().unwrap().contains("no route"));
        assert_eq!(llm.requests().len(), 5);
    }

    #[tokio::test]
    async fn delayed_answers_after_the_delay() {
        let llm = ScriptedLlm::start().await;
        llm.push(Scripted::Delayed(Duration::from_millis(300), Box::new(Scripted::text("late"))));
        let url = format!("{}/chat/completions", llm.base_url_openai());
        let started = std::time::Instant::now();
        let (status, _, body) = post(url, openai_request("s", "u")).await;
        assert_eq!(status, 200);
        assert_eq!(body["choices"][0]["message"]["content"], "late");
        assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn hang_holds_the_request_until_dropped() {
        let llm = ScriptedLlm::start().await;
        llm.push(Scripted::Hang);
        let url = format!("{}/chat/completions", llm.base_url_openai());
        let request = tokio::spawn(post(url, openai_request("s", "u")));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!request.is_finished());
        assert_eq!(llm.requests().len(), 1);
        drop(llm);
        let (status, _, _) = tokio::time::timeout(Duration::from_secs(5), request).await.unwrap().unwrap();
        assert_eq!(status, 503);
    }
}
