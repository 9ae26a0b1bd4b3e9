//! Load generation for the benchmarks that measure a daemon under concurrent clients (serving,
//! replicas): raw JSON-RPC `tools/call` clients that loop over a measured window, the report they
//! add up to, and the loopback upstream their handlers fetch from.
//!
//! A call counts only if it returns a result that is not `isError`; failures (busy, timeouts) are
//! counted by kind. Every call has a client-side timeout, so a daemon that cannot keep up makes
//! the figures bad, not the run endless.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::get;
use serde_json::json;

/// Longest a load-generating client waits for one call before counting it as a timeout. It also
/// bounds how long a section runs past its window, whatever state the daemon is in.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Requests that reached the upstream's 5 s route, to see whether calls are parked on it.
pub static SLOW5_ARRIVALS: AtomicU64 = AtomicU64::new(0);

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A fresh daemon for the loaded sections: the queue is raised so a pool that holds a worker per
/// waiting call queues instead of refusing outright, the wall limit covers the 5 s upstream, and
/// the shutdown grace is short so calls still parked at the end do not hold up the next section.
pub fn loaded_daemon_env() -> Vec<(&'static str, String)> {
    vec![
        ("MCPBOOTD_EGRESS__RESOLVE__api.bench.test", "127.0.0.1".to_string()),
        ("MCPBOOTD_SANDBOX__QUEUE", "4096".to_string()),
        ("MCPBOOTD_SANDBOX__TIMEOUT_MS", "60000".to_string()),
        ("MCPBOOTD_SERVER__SHUTDOWN_GRACE_MS", "1000".to_string()),
    ]
}

/// Prints how many calls still wait in the daemon's queue once every client has stopped (calls
/// whose clients gave up), when there are any and `/metrics` reports the queue depth.
pub async fn print_left_queued(http: &reqwest::Client, address: SocketAddr) {
    let queued = gauge(http, address, "mcpbootd_isolate_queue_depth").await.map(|n| n as u64);
    if let Some(queued) = queued.filter(|&n| n > 0) {
        println!("{:<44} {queued} calls still queued in the daemon after its clients stopped", "");
    }
}

/// The value of an unlabelled metric `name` on the daemon's `/metrics`, if it reports one.
pub async fn gauge(http: &reqwest::Client, address: SocketAddr, name: &str) -> Option<f64> {
    let response = http.get(format!("http://{address}/metrics")).send().await.ok()?;
    let text = response.text().await.ok()?;
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Registers a one-tool server `id` whose tool `call` runs `handler`.
pub async fn register(http: &reqwest::Client, address: SocketAddr, id: &str, handler: &str) -> anyhow::Result<()> {
    let registration = json!({
        "id": id,
        "allow_domains": ["api.bench.test"],
        "tools": [{"name": "call", "description": "benchmark tool", "input_schema": {"type": "object"}, "handler": handler}],
    });
    let response = http.post(format!("http://{address}/admin/servers")).json(&registration).send().await?;
    anyhow::ensure!(response.status() == 201, "registration of {id} failed: {}", response.text().await?);
    Ok(())
}

/// The measured part of a load run: calls finishing before `start` are warm-up.
#[derive(Clone, Copy)]
pub struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    pub fn after(warmup: Duration, length: Duration) -> Self {
        let start = Instant::now() + warmup;
        Window { start, end: start + length }
    }
}

/// One finished call: when, how long, and why it failed if it did.
pub struct Sample {
    finished: Instant,
    latency: Duration,
    failure: Option<String>,
}

/// One client: calls back to back until the window closes.
pub async fn client_loop<F, Fut>(window: Window, mut call: F) -> Vec<Sample>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut samples = Vec::new();
    while Instant::now() < window.end {
        let started = Instant::now();
        let failure = call().await.err();
        samples.push(Sample { finished: Instant::now(), latency: started.elapsed(), failure });
    }
    samples
}

/// What one load run measured. Rate and latencies count successful calls that finished inside
/// the window; failures count from the window's start, including calls that were still in
/// flight when it closed and then failed or timed out.
pub struct Report {
    window: Duration,
    latencies: Vec<Duration>,
    failures: BTreeMap<String, u64>,
}

impl Report {
    pub async fn collect(window: Window, tasks: Vec<tokio::task::JoinHandle<Vec<Sample>>>) -> anyhow::Result<Self> {
        let mut latencies = Vec::new();
        let mut failures = BTreeMap::new();
        for task in tasks {
            for sample in task.await? {
                match sample.failure {
                    None if sample.finished >= window.start && sample.finished <= window.end => {
                        latencies.push(sample.latency)
                    }
                    None => {}
                    Some(kind) if sample.finished >= window.start => *failures.entry(kind).or_insert(0) += 1,
                    Some(_) => {}
                }
            }
        }
        latencies.sort();
        Ok(Report { window: window.end - window.start, latencies, failures })
    }

    /// Failed calls by kind.
    pub fn failures(&self) -> &BTreeMap<String, u64> {
        &self.failures
    }

    pub fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.window.as_secs_f64()
    }

    /// The latency at `p` (0.5 for p50) of the successful calls; None when there were none.
    pub fn latency(&self, p: f64) -> Option<Duration> {
        (!self.latencies.is_empty()).then(|| percentile(&self.latencies, p))
    }

    pub fn p99(&self) -> Option<Duration> {
        self.latency(0.99)
    }

    pub fn print(&self, name: &str, extra: &str) {
        let latency = |p: f64| match self.latency(p) {
            None => format!("{:>9}", "-"),
            Some(latency) => format!("{:>9.1}", ms(latency)),
        };
        println!(
            "{name:<44} {:>9.0} calls/s   p50 {} ms   p99 {} ms   {extra}",
            self.rate(),
            latency(0.50),
            latency(0.99)
        );
        if !self.failures.is_empty() {
            let failures: Vec<String> = self.failures.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
            println!("{:<44} failed: {}", "", failures.join(", "));
        }
    }
}

/// A `tools/call` of a server's tool `call` as a plain JSON-RPC POST: what any MCP client sends to
/// a stateless Streamable HTTP server, without a full client per connection, so a thousand
/// concurrent callers cost the benchmark little.
#[derive(Clone)]
pub struct RawCall {
    http: reqwest::Client,
    url: String,
    body: bytes::Bytes,
}

impl RawCall {
    pub fn new(address: SocketAddr, server: &str) -> Self {
        Self::with_timeout(address, server, CALL_TIMEOUT)
    }

    pub fn with_timeout(address: SocketAddr, server: &str, timeout: Duration) -> Self {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "call", "arguments": {"a": 1, "b": 2}}});
        Self::request(address, server, timeout, body)
    }

    /// A `tools/list` on the same mount: the MCP path without an isolate.
    pub fn tools_list(address: SocketAddr, server: &str) -> Self {
        Self::request(address, server, CALL_TIMEOUT, json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    }

    fn request(address: SocketAddr, server: &str, timeout: Duration, body: serde_json::Value) -> Self {
        RawCall {
            // One pool for every client: reqwest opens a keep-alive connection per concurrent request.
            http: reqwest::Client::builder().timeout(timeout).build().expect("reqwest client"),
            url: format!("http://{address}/servers/{server}/mcp"),
            body: bytes::Bytes::from(body.to_string()),
        }
    }

    pub async fn call(&self) -> Result<(), String> {
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(self.body.clone())
            .send()
            .await
            .map_err(|e| transport_failure(&e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| transport_failure(&e))?;
        classify_reply(status, &body)
    }
}

/// What the reply to a JSON-RPC request says: `Ok` for a result that is not `isError`, else the
/// kind of failure the reports count.
pub fn classify_reply(status: reqwest::StatusCode, body: &[u8]) -> Result<(), String> {
    if status != 200 {
        return Err(format!("HTTP {status}"));
    }
    let reply: serde_json::Value = serde_json::from_slice(body).map_err(|_| "unparsable reply".to_string())?;
    if let Some(error) = reply.get("error") {
        return Err(format!("JSON-RPC error {}", error["code"]));
    }
    if reply["result"]["isError"] == true {
        return Err(classify_tool_error(reply["result"]["content"][0]["text"].as_str().unwrap_or("")));
    }
    if reply["result"].is_null() {
        return Err("reply without a result".into());
    }
    Ok(())
}

pub fn spawn_raw_clients(
    target: &RawCall,
    clients: usize,
    window: Window,
) -> Vec<tokio::task::JoinHandle<Vec<Sample>>> {
    (0..clients)
        .map(|_| {
            let target = target.clone();
            tokio::spawn(async move { client_loop(window, || target.call()).await })
        })
        .collect()
}

pub fn classify_tool_error(text: &str) -> String {
    if text.contains("busy") {
        "busy (isError)".into()
    } else if text.contains("timed out") {
        "tool timeout (isError)".into()
    } else {
        truncate(&format!("isError: {text}"))
    }
}

pub fn transport_failure(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "client timeout".into()
    } else if error.is_connect() {
        "connect error".into()
    } else {
        "connection error".into()
    }
}

pub fn truncate(text: &str) -> String {
    text.chars().take(72).collect()
}

/// The loopback upstream: `/item` answers at once, `/slow` after 100 ms and `/slow5` after 5 s.
/// The waits are timers on the runtime, so thousands of requests can wait at once.
pub async fn start_upstream() -> anyhow::Result<SocketAddr> {
    let router = axum::Router::new()
        .route("/item", get(|| async { Json(json!({"id": 1, "title": "An item", "score": 42, "kids": [2, 3, 4]})) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Json(json!({"id": 2, "title": "A slow item"}))
            }),
        )
        .route(
            "/slow5",
            get(|| async {
                SLOW5_ARRIVALS.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                Json(json!({"id": 3, "title": "A very slow item"}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}
