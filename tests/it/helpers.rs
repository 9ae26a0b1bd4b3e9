//! The test harness: a real daemon on a port-0 listener with a temp catalog, a fake upstream API on
//! loopback reached through `[egress.resolve]` names, and clients for both of its doors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::routing::{any, get};
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

/// Host names the fake upstream answers to; all map to 127.0.0.1.
pub const WEATHER_HOST: &str = "api.weather.test";
pub const OTHER_HOST: &str = "api.other.test";

#[path = "../support/daemon.rs"]
mod daemon;

pub struct TestApp {
    pub address: SocketAddr,
    pub http: reqwest::Client,
    pub upstream: Upstream,
    pub data_dir: Arc<tempfile::TempDir>,
    daemon: daemon::RunningDaemon,
}

/// Options for [`spawn_app_with`]; `env` pairs are applied as `MCPBOOTD_*` variables would be.
#[derive(Default, Clone)]
pub struct AppOptions {
    pub env: Vec<(String, String)>,
    pub data_dir: Option<Arc<tempfile::TempDir>>,
    pub upstream: Option<Upstream>,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(AppOptions::default()).await
}

pub async fn spawn_app_with(options: AppOptions) -> TestApp {
    let data_dir = options.data_dir.unwrap_or_else(|| Arc::new(tempfile::tempdir().unwrap()));
    let upstream = match options.upstream {
        Some(upstream) => upstream,
        None => Upstream::start().await,
    };
    let mut env = catalog_env(data_dir.path()).await;
    env.extend([
        (format!("MCPBOOTD_EGRESS__RESOLVE__{WEATHER_HOST}"), "127.0.0.1".to_string()),
        (format!("MCPBOOTD_EGRESS__RESOLVE__{OTHER_HOST}"), "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".to_string(), "true".to_string()),
        ("MCPBOOTD_SANDBOX__WORKERS".to_string(), "2".to_string()),
        ("MCPBOOTD_SANDBOX__CPU_MS".to_string(), "500".to_string()),
        // CPU limits count CPU time: on a loaded test machine a spinning handler needs several
        // seconds of wall time to use its 500 ms, so the wall limit leaves room for that.
        ("MCPBOOTD_SANDBOX__TIMEOUT_MS".to_string(), "10000".to_string()),
        ("MCPBOOTD_SANDBOX__MEMORY_MB".to_string(), "32".to_string()),
    ]);
    env.extend(options.env);
    let daemon = daemon::start(env).await.expect("the test daemon starts");
    TestApp { address: daemon.address, http: reqwest::Client::new(), upstream, data_dir, daemon }
}

pub fn catalog_path(dir: &Path) -> PathBuf {
    dir.join("catalog.db")
}

#[path = "../support/postgres.rs"]
pub mod postgres;

/// A data directory for a daemon on the PostgreSQL database `url` (a replica of others on it).
pub fn replica_data_dir(url: &str) -> Arc<tempfile::TempDir> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("postgres.url"), url).unwrap();
    std::fs::write(dir.path().join("catalog.key"), "11".repeat(32)).unwrap();
    Arc::new(dir)
}

/// Whether this run keeps the catalog in PostgreSQL (`MCPBOOTD_TEST_CATALOG=postgres`): `.ci/run`
/// runs the integration suite once on each backend.
pub fn on_postgres() -> bool {
    std::env::var("MCPBOOTD_TEST_CATALOG").is_ok_and(|backend| backend == "postgres")
}

/// The catalog settings for a daemon whose data lives in `dir`: a SQLite file there, or a fresh
/// PostgreSQL database whose URL is kept there, so a daemon restarted on the same `dir` finds the
/// same catalog (with a credentials key beside it, as the catalog file would have).
async fn catalog_env(dir: &Path) -> Vec<(String, String)> {
    let url_file = dir.join("postgres.url");
    if !on_postgres() && !url_file.exists() {
        return vec![("MCPBOOTD_CATALOG__PATH".to_string(), catalog_path(dir).display().to_string())];
    }
    let url = match std::fs::read_to_string(&url_file) {
        Ok(url) => url,
        Err(_) => {
            let url = postgres::fresh_database().await.expect("MCPBOOTD_TEST_CATALOG=postgres needs PostgreSQL");
            std::fs::write(&url_file, &url).unwrap();
            std::fs::write(dir.join("catalog.key"), "11".repeat(32)).unwrap();
            url
        }
    };
    vec![
        ("MCPBOOTD_CATALOG__URL".to_string(), url),
        ("MCPBOOTD_CREDENTIALS__KEY_FILE".to_string(), dir.join("catalog.key").display().to_string()),
    ]
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.address, path)
    }

    pub fn mcp_url(&self, id: &str) -> String {
        self.url(&format!("/servers/{id}/mcp"))
    }

    /// Stops the daemon the way a signal would, and waits for it to finish.
    pub async fn stop(self) {
        self.daemon.stop().await.unwrap();
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self.http.post(self.url(path)).json(body).send().await.unwrap();
        read(response).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        read(self.http.get(self.url(path)).send().await.unwrap()).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        read(self.http.delete(self.url(path)).send().await.unwrap()).await
    }

    /// Registers a toolset and asserts it was accepted.
    pub async fn register(&self, body: Value) -> String {
        let (status, response) = self.post("/admin/servers", &body).await;
        assert_eq!(status, 201, "registration failed: {response}");
        response["id"].as_str().unwrap().to_string()
    }

    pub async fn admin_call(&self, id: &str, tool: &str, arguments: Value) -> (u16, Value) {
        self.post(&format!("/admin/servers/{id}/tools/{tool}/call"), &json!({"arguments": arguments})).await
    }

    pub async fn mcp(&self, id: &str) -> McpClient {
        mcp_client(&self.mcp_url(id)).await.expect("MCP client connects")
    }

    /// A base URL for the fake upstream under a whitelisted-looking host name.
    pub fn upstream_url(&self, host: &str) -> String {
        format!("http://{host}:{}", self.upstream.address.port())
    }
}

pub type McpClient = RunningService<RoleClient, ClientConfig>;

pub async fn mcp_client(url: &str) -> anyhow::Result<McpClient> {
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url.to_string()),
    );
    Ok(ClientConfig::default().serve(transport).await?)
}

pub async fn mcp_call(client: &McpClient, tool: &str, arguments: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_string());
    if let Value::Object(map) = arguments {
        params = params.with_arguments(map);
    }
    client.call_tool(params).await.expect("tools/call answers")
}

/// The text of a result's first content item.
pub fn text_of(result: &CallToolResult) -> String {
    let value = serde_json::to_value(result).unwrap();
    value["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    (status, body)
}

/// Polls `check` until it holds, for at most `within`; returns how long it took.
pub async fn within<F, Fut>(within: std::time::Duration, what: &str, mut check: F) -> std::time::Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    loop {
        if check().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{what}: not seen within {within:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Asserts the admin error shape and returns the message.
pub fn error_message(body: &Value) -> String {
    let error = body.get("error").unwrap_or_else(|| panic!("no error object in {body}"));
    assert!(error["code"].is_string(), "error code missing in {body}");
    error["message"].as_str().unwrap_or_else(|| panic!("error message missing in {body}")).to_string()
}

/// Polls the server view until its status is one of `wanted`; returns the view.
pub async fn wait_for_status(app: &TestApp, id: &str, wanted: &[&str]) -> Value {
    for _ in 0..1500 {
        let (status, view) = app.get(&format!("/admin/servers/{id}")).await;
        assert_eq!(status, 200, "{view}");
        if wanted.contains(&view["status"].as_str().unwrap_or("")) {
            return view;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("server {id} never reached {wanted:?}");
}

/// A tool definition for a registration body.
pub fn tool(name: &str, handler: &str) -> Value {
    json!({
        "name": name,
        "description": format!("test tool {name}"),
        "input_schema": {"type": "object", "properties": {}},
        "handler": handler,
    })
}

/// A request the fake upstream received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub host: String,
    pub path: String,
    /// The query string as it arrived (still percent-encoded), empty without one.
    pub query: String,
    pub headers: HeaderMap,
    pub body: String,
}

impl SeenRequest {
    /// A request with `method` at `path` (its host read from `headers`), without query or body.
    fn at(method: &str, path: impl Into<String>, headers: &HeaderMap) -> SeenRequest {
        SeenRequest {
            method: method.to_string(),
            host: headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("").to_string(),
            path: path.into(),
            query: String::new(),
            headers: headers.clone(),
            body: String::new(),
        }
    }
}

/// A fake upstream API on loopback: JSON items, an echo endpoint, a redirect and slow answers.
#[derive(Clone)]
pub struct Upstream {
    pub address: SocketAddr,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
    /// The HTML served at `/docs/page`; tests change it to simulate updated documentation.
    pub docs: Arc<Mutex<String>>,
    /// How long `/docs/page` takes to answer, in milliseconds (0: at once).
    pub docs_delay_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
        let docs: Arc<Mutex<String>> = Arc::new(Mutex::new("<html><body>No docs yet</body></html>".into()));
        let docs_page = docs.clone();
        let docs_delay_ms: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let delay = docs_delay_ms.clone();
        let router = axum::Router::new()
            .route(
                "/docs/page",
                get(move || {
                    let docs = docs_page.clone();
                    let delay = delay.load(std::sync::atomic::Ordering::Relaxed);
                    async move {
                        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                        let html = docs.lock().unwrap().clone();
                        ([("content-type", "text/html; charset=utf-8")], html)
                    }
                }),
            )
            .route("/items/{id}", get(item))
            .route("/echo", any(echo))
            .route("/reflect", any(reflect))
            .route("/reflect/redirect", any(reflect_redirect))
            .route("/big", get(|| async { "x".repeat(64 * 1024) }))
            .route("/redirect", any(redirect))
            .route("/chain/{n}", get(chain))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(std::time::Duration::from_secs(20)).await;
                    "late"
                }),
            )
            .route(
                "/sleep/{ms}",
                get(|UrlPath(ms): UrlPath<u64>| async move {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    Json(json!({"slept_ms": ms}))
                }),
            )
            .route("/held/{ms}", any(held))
            .route("/drip", get(drip))
            .route("/concurrent", get(concurrent))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Upstream { address, seen, docs, docs_delay_ms }
    }

    pub fn set_docs(&self, html: &str) {
        *self.docs.lock().unwrap() = html.to_string();
    }

    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

async fn item(
    State(seen): State<Arc<Mutex<Vec<SeenRequest>>>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<u32>,
) -> Json<Value> {
    seen.lock().unwrap().push(SeenRequest::at("GET", format!("/items/{id}"), &headers));
    Json(json!({
        "id": id,
        "title": format!("Item {id}"),
        "by": "alice",
        "score": id * 10,
        "kids": [id + 1, id + 2],
        "internal": {"noise": true},
    }))
}

#[derive(serde::Deserialize)]
struct RedirectQuery {
    to: String,
    status: Option<u16>,
}

/// `/redirect?to=URL&status=302`
async fn redirect(axum::extract::Query(query): axum::extract::Query<RedirectQuery>) -> axum::response::Response {
    let status = axum::http::StatusCode::from_u16(query.status.unwrap_or(302)).unwrap();
    axum::response::Response::builder()
        .status(status)
        .header("location", query.to)
        .body(axum::body::Body::empty())
        .unwrap()
}

/// `/chain/N` redirects N times before answering.
async fn chain(UrlPath(n): UrlPath<u32>) -> axum::response::Response {
    if n == 0 {
        return axum::response::IntoResponse::into_response("end of chain");
    }
    axum::response::Response::builder()
        .status(302)
        .header("location", format!("/chain/{}", n - 1))
        .body(axum::body::Body::empty())
        .unwrap()
}

/// `/held/{ms}`: seen as soon as it arrives, answered `ms` milliseconds later (a request still in
/// flight when its call ends).
async fn held(
    State(seen): State<Arc<Mutex<Vec<SeenRequest>>>>,
    method: axum::http::Method,
    headers: HeaderMap,
    UrlPath(ms): UrlPath<u64>,
) -> Json<Value> {
    seen.lock().unwrap().push(SeenRequest::at(method.as_str(), format!("/held/{ms}"), &headers));
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    Json(json!({"held_ms": ms}))
}

/// Sends headers at once, then one byte every 3 seconds.
async fn drip() -> axum::response::Response {
    let stream = futures_util::stream::unfold(0u32, |n| async move {
        if n > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        }
        (n < 20).then(|| (Ok::<_, std::io::Error>(bytes::Bytes::from_static(b".")), n + 1))
    });
    axum::response::Response::new(axum::body::Body::from_stream(stream))
}

static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static MAX_IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Holds each request for 150 ms and reports the most requests it saw at once.
async fn concurrent() -> Json<Value> {
    use std::sync::atomic::Ordering;
    let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
    MAX_IN_FLIGHT.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    Json(json!({"max_in_flight": MAX_IN_FLIGHT.load(Ordering::SeqCst)}))
}

async fn echo(
    State(seen): State<Arc<Mutex<Vec<SeenRequest>>>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Json<Value> {
    let seen_request = SeenRequest {
        query: uri.query().unwrap_or("").to_string(),
        body: body.clone(),
        ..SeenRequest::at(method.as_str(), "/echo", &headers)
    };
    let host = seen_request.host.clone();
    seen.lock().unwrap().push(seen_request);
    let header_map: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), Value::String(v.to_str().unwrap_or("").to_string())))
        .collect();
    Json(json!({"method": method.as_str(), "host": host, "headers": header_map, "body": body}))
}

/// `/reflect`: hands back what the request carried the way careless APIs do, so credential
/// scrubbing can be tested on every part of a response. The `Authorization` header and the raw
/// query string come back in response headers and, in a body sent in 7-byte chunks (so values
/// straddle chunk boundaries), raw, JSON-escaped, decoded (query values, a basic password) and
/// percent-encoded.
async fn reflect(
    State(seen): State<Arc<Mutex<Vec<SeenRequest>>>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> axum::response::Response {
    use base64::Engine;
    let query = uri.query().unwrap_or("").to_string();
    seen.lock()
        .unwrap()
        .push(SeenRequest { query: query.clone(), ..SeenRequest::at(method.as_str(), "/reflect", &headers) });
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let basic_password = authorization
        .strip_prefix("Basic ")
        .and_then(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded).ok())
        .map(|pair| String::from_utf8_lossy(&pair).split_once(':').map(|(_, p)| p.to_string()).unwrap_or_default())
        .unwrap_or_default();
    let decoded: Vec<String> =
        url::form_urlencoded::parse(query.as_bytes()).map(|(name, value)| format!("{name}={value}")).collect();
    let encoded: String = url::form_urlencoded::byte_serialize(authorization.as_bytes()).collect();
    let json = json!({"authorization": authorization, "query": decoded, "basic_password": basic_password});
    let text = format!(
        "authorization: {authorization}\nquery: {query}\ndecoded: {}\nbasic password: {basic_password}\n\
         percent-encoded: {encoded}\njson: {json}\n",
        decoded.join("&")
    );
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> =
        text.into_bytes().chunks(7).map(|chunk| Ok(bytes::Bytes::copy_from_slice(chunk))).collect();
    axum::response::Response::builder()
        .header("x-echo-authorization", authorization.clone())
        .header("x-echo-query", query)
        .body(axum::body::Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap()
}

/// `/reflect/redirect`: redirects to `/reflect` with the request's `Authorization` header added
/// to the query string it came with, as APIs that keep state in redirect URLs do.
async fn reflect_redirect(uri: axum::http::Uri, headers: HeaderMap) -> axum::response::Response {
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    let echoed: String = url::form_urlencoded::byte_serialize(authorization.as_bytes()).collect();
    let location = match uri.query() {
        Some(query) => format!("/reflect?echo={echoed}&{query}"),
        None => format!("/reflect?echo={echoed}"),
    };
    axum::response::Response::builder()
        .status(302)
        .header("location", location)
        .body(axum::body::Body::empty())
        .unwrap()
}

/// Waits up to five seconds for a daemon started as a process to answer `/readyz` with 200.
pub async fn wait_for_ready(url: &str) -> bool {
    let http = reqwest::Client::new();
    for _ in 0..500 {
        if http.get(format!("{url}/readyz")).send().await.is_ok_and(|r| r.status() == 200) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

/// The daemon on a listener the test bound itself, for a configuration that names the daemon's
/// own address before it starts (`[auth.oauth] public_url`, see `oauth_provider.rs`).
pub use daemon::start_on;

/// A small OpenAPI description of the fake upstream under [`WEATHER_HOST`]: `get_item` (GET,
/// read-only), `send_echo` (POST) and `replace_echo` (PUT). Registered with `"discovery": true`
/// and `[generation] max_tools = 4` it lists one of them and reaches the others through
/// `call_operation`.
fn items_api(app: &TestApp) -> Value {
    let echo = |operation: &str, summary: &str| {
        json!({
            "operationId": operation, "summary": summary,
            "requestBody": {"required": true, "content": {"application/json": {"schema":
                {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}}},
            "responses": {"200": {"description": "the request as received"}}
        })
    };
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Items", "version": "1.0.0"},
        "servers": [{"url": app.upstream_url(WEATHER_HOST)}],
        "paths": {
            "/items/{id}": {"get": {
                "operationId": "get_item", "summary": "Get an item by id",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "the item"}}
            }},
            "/echo": {"post": echo("send_echo", "Send a text to echo"), "put": echo("replace_echo", "Replace the echoed text")}
        }
    })
}

/// Registers [`items_api`] as `id` in discovery mode and waits until it is served.
pub async fn register_items_api(app: &TestApp, id: &str, extra: Value) -> Value {
    let mut body = json!({"id": id, "openapi_spec": items_api(app), "discovery": true});
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    let (status, started) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202, "{started}");
    let view = wait_for_status(app, id, &["ready", "failed", "planned"]).await;
    assert_eq!(view["status"], "ready", "{view:#}");
    view
}
