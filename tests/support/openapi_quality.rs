//! The OpenAPI quality run: for each API description, register it with a running daemon, start
//! Prism (a mock that validates every request against the description) behind a recording
//! proxy, call a sample of the generated tools with schema-valid arguments, and count the
//! requests Prism accepts as valid for their operation.
//!
//! Used by `cargo bench --bench openapi_quality` (every sample, figures printed) and by the
//! integration test `openapi_quality` (a handful of small samples in CI).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// The host name tools call; the daemon's `[egress.resolve]` maps it to the recording proxy.
pub const API_HOST: &str = "quality.api.test";
/// A credential value Prism accepts (it checks only that credentials are present).
const DUMMY_SECRET: &str = "quality-run-credential";

/// The daemon settings a quality run needs, as `MCPBOOTD_*` pairs.
pub fn daemon_env() -> Vec<(String, String)> {
    [
        (format!("MCPBOOTD_EGRESS__RESOLVE__{API_HOST}"), "127.0.0.1"),
        ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".into(), "true"),
        // As many operations as a server may have tools become tools; the run samples from them.
        ("MCPBOOTD_GENERATION__MAX_TOOLS".into(), "128"),
        ("MCPBOOTD_GENERATION__SELF_TEST".into(), "false"),
        // Every description's mock sits behind the same proxy origin: Prism crashing on one
        // description must not open the breaker on the next description's calls.
        ("MCPBOOTD_EGRESS__BREAKER_FAILURES".into(), "0"),
        // Descriptions go inline; the largest samples are a few megabytes.
        ("MCPBOOTD_SERVER__MAX_BODY_BYTES".into(), "67108864"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect()
}

/// Where the Prism installed by `.ci/run` (`tests/prism`) is.
pub fn prism_binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/prism/node_modules/.bin/prism")
}

/// What happened to one description.
#[derive(Debug, Default, Clone)]
pub struct SpecReport {
    pub file: String,
    /// `Err` with the daemon's reason when the description was refused or failed to derive.
    pub registered: Option<Result<(), String>>,
    /// `Err` when Prism could not serve the description (not counted against the daemon).
    pub mock: Option<Result<(), String>>,
    pub operations: usize,
    pub tools: usize,
    pub warnings: usize,
    pub sampled: usize,
    pub accepted: usize,
    /// Tool, then Prism's violations.
    pub rejected: Vec<(String, String)>,
    /// Calls that never reached the API (the tool failed first), with the error.
    pub not_sent: Vec<(String, String)>,
    /// Calls whose generated arguments the daemon's schema check refused: a harness problem,
    /// listed but not counted as calls.
    pub bad_arguments: Vec<(String, String)>,
    /// Calls Prism failed to answer at all (it crashed or hung up): no verdict, not counted.
    pub mock_failed: Vec<(String, String)>,
    /// Operations the daemon left out (not turned into tools), with its reason.
    pub left_out: Vec<String>,
    /// The size of the server's `tools/list` result, in bytes of JSON.
    pub listing_bytes: usize,
    /// Successful results of tools with an output schema: checked as a host checks them.
    pub structured: usize,
    /// Those that do not match the schema, as the MCP Python SDK's client sees it: results the
    /// daemon sent without `structuredContent` because they did not match, and results whose
    /// `structuredContent` the SDK's check refuses.
    pub mismatched: Vec<(String, String)>,
    pub seconds: f64,
}

impl SpecReport {
    /// Calls that reached a verdict: accepted, rejected or not sent.
    pub fn calls(&self) -> usize {
        self.accepted + self.rejected.len() + self.not_sent.len()
    }
}

/// One request Prism answered, as the proxy saw it.
#[derive(Debug, Clone)]
struct Answered {
    method: String,
    path: String,
    status: u16,
    violations: Option<String>,
}

/// A proxy in front of Prism that records its verdict (`sl-violations`) on every request.
struct Proxy {
    port: u16,
    target: Arc<Mutex<u16>>,
    answered: Arc<Mutex<Vec<Answered>>>,
}

impl Proxy {
    async fn start() -> Proxy {
        let target: Arc<Mutex<u16>> = Arc::default();
        let answered: Arc<Mutex<Vec<Answered>>> = Arc::default();
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let (to, record) = (target.clone(), answered.clone());
        let router = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let (http, to, record) = (http.clone(), to.clone(), record.clone());
            async move {
                let port = *to.lock().unwrap();
                let url = format!("http://127.0.0.1:{port}{}", uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
                if std::env::var_os("MCPBOOTD_QUALITY_DEBUG").is_some() {
                    eprintln!("proxy: {method} {url} {headers:?}");
                }
                let mut request = http.request(method.clone(), url).body(body);
                for (name, value) in &headers {
                    if name != "host" {
                        request = request.header(name, value);
                    }
                }
                let response = match request.send().await {
                    Ok(response) => response,
                    Err(error) => {
                        // Prism itself failed (it crashes on some descriptions): not a verdict.
                        record.lock().unwrap().push(Answered {
                            method: method.to_string(),
                            path: uri.path().to_string(),
                            status: 0,
                            violations: None,
                        });
                        return (axum::http::StatusCode::BAD_GATEWAY, error.to_string()).into_response();
                    }
                };
                let status = response.status();
                let violations =
                    response.headers().get("sl-violations").and_then(|v| v.to_str().ok()).and_then(request_violations);
                record.lock().unwrap().push(Answered {
                    method: method.to_string(),
                    path: uri.path().to_string(),
                    status: status.as_u16(),
                    violations,
                });
                let mut out = Response::builder().status(status);
                for (name, value) in response.headers() {
                    if name != "transfer-encoding" && name != "connection" && name != "content-length" {
                        out = out.header(name, value);
                    }
                }
                let bytes = response.bytes().await.unwrap_or_default();
                out.body(axum::body::Body::from(bytes)).unwrap()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Proxy { port, target, answered }
    }
}

/// The violations Prism found in the request, from its `sl-violations` header (which also lists
/// what is wrong with its own mocked response: not the daemon's doing). `None` when there are none.
fn request_violations(header: &str) -> Option<String> {
    let all: Vec<Value> = serde_json::from_str(header).unwrap_or_default();
    // Warnings (a deprecated parameter, say) are not rejections.
    let request: Vec<&Value> =
        all.iter().filter(|v| v["location"][0] == "request" && v["severity"] == "Error").collect();
    (!request.is_empty()).then(|| serde_json::to_string(&request).unwrap())
}

/// Runs descriptions one after another against the daemon at `daemon` (its base URL).
pub struct QualityRun {
    daemon: String,
    http: reqwest::Client,
    proxy: Proxy,
    /// Tools called per description at most (spread evenly over its tools).
    pub sample: usize,
    /// How long Prism may take to load a description.
    pub mock_timeout: Duration,
}

impl QualityRun {
    pub async fn new(daemon: String, sample: usize) -> QualityRun {
        QualityRun {
            daemon,
            http: reqwest::Client::new(),
            proxy: Proxy::start().await,
            sample,
            mock_timeout: Duration::from_secs(90),
        }
    }

    /// Registers `spec`, mocks it, calls a sample of its tools and reports.
    pub async fn run(&self, spec: &Path) -> SpecReport {
        let started = Instant::now();
        let mut report =
            SpecReport { file: spec.file_name().unwrap().to_string_lossy().into_owned(), ..Default::default() };
        let id = server_id(&report.file);
        let text = std::fs::read_to_string(spec).unwrap();
        let base_url = format!("http://{API_HOST}:{}", self.proxy.port);
        let body = json!({"id": id, "openapi_spec": text, "base_url": base_url});
        let response = self.http.post(format!("{}/admin/servers", self.daemon)).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status != 202 {
            report.registered =
                Some(Err(format!("{status}: {}", answer["error"]["message"].as_str().unwrap_or_default())));
            report.seconds = started.elapsed().as_secs_f64();
            return report;
        }
        let view = self.wait_finished(&id).await;
        if view["status"] != "ready" {
            let error = view["latest_generation"]["error"].as_str().unwrap_or("no error recorded");
            report.registered = Some(Err(error.to_string()));
            report.seconds = started.elapsed().as_secs_f64();
            return report;
        }
        report.registered = Some(Ok(()));
        let generation = &view["generation"];
        report.operations = generation["plan"]["openapi"]["operations"].as_u64().unwrap_or(0) as usize;
        report.warnings = generation["warnings"].as_array().map_or(0, Vec::len);
        report.left_out = generation["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|w| w.contains(" is left out: "))
            .map(str::to_owned)
            .collect();
        report.listing_bytes = self.listing_bytes(&id).await;
        self.add_credentials(&id, &generation["plan"]["openapi"]["auth"]).await;
        let tools = view["tools"].as_array().cloned().unwrap_or_default();
        report.tools = tools.len();

        let mock_dir = tempfile::tempdir().unwrap();
        let mut prism = match self.start_mock(&mock_description(spec, mock_dir.path())).await {
            Ok(child) => child,
            Err(error) => {
                report.mock = Some(Err(error));
                report.seconds = started.elapsed().as_secs_f64();
                self.delete(&id).await;
                return report;
            }
        };
        report.mock = Some(Ok(()));
        let mut to_check = Vec::new();
        for tool in sample(&tools, self.sample) {
            let name = tool["name"].as_str().unwrap_or_default().to_string();
            let schema = self.described_input_schema(&id, &name).await.unwrap_or_else(|| tool["input_schema"].clone());
            let arguments = example(&schema, 0, true);
            self.proxy.answered.lock().unwrap().clear();
            let call = self
                .http
                .post(format!("{}/admin/servers/{id}/tools/{name}/call", self.daemon))
                .json(&json!({"arguments": arguments}))
                .send()
                .await
                .unwrap();
            let call_status = call.status().as_u16();
            let outcome: Value = call.json().await.unwrap_or(Value::Null);
            if call_status == 422 {
                report.bad_arguments.push((name, outcome["error"]["message"].as_str().unwrap_or_default().to_string()));
                continue;
            }
            report.sampled += 1;
            let answered = self.proxy.answered.lock().unwrap().clone();
            match answered.last() {
                None => {
                    let error = outcome["result"]["content"][0]["text"].as_str().unwrap_or_default();
                    let error = if error.is_empty() { outcome.to_string() } else { error.to_string() };
                    report.not_sent.push((name, error));
                }
                Some(last) if last.status == 0 => {
                    report.sampled -= 1;
                    report.mock_failed.push((name, format!("{} {}: Prism did not answer", last.method, last.path)));
                }
                Some(last) => match &last.violations {
                    None => {
                        report.accepted += 1;
                        let schema = &tool["output_schema"];
                        if schema.is_object() && (200..300).contains(&last.status) {
                            report.structured += 1;
                            let result = &outcome["result"];
                            match result.get("structuredContent") {
                                Some(structured) => to_check.push((name, schema.clone(), structured.clone())),
                                None => {
                                    let text = result["content"][0]["text"].as_str().unwrap_or_default();
                                    let why = text.lines().next().unwrap_or_default().to_string();
                                    report.mismatched.push((name, format!("sent as text: {why}")));
                                }
                            }
                        }
                    }
                    Some(violations) => report.rejected.push((
                        name,
                        format!(
                            "{} {} → {}: {violations} (arguments {arguments})",
                            last.method, last.path, last.status
                        ),
                    )),
                },
            }
        }
        let _ = prism.kill().await;
        report.mismatched.extend(check_results(to_check).await);
        self.delete(&id).await;
        report.seconds = started.elapsed().as_secs_f64();
        report
    }

    async fn wait_finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let view: Value = self
                .http
                .get(format!("{}/admin/servers/{id}", self.daemon))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap_or(Value::Null);
            if ["ready", "failed", "planned"].contains(&view["status"].as_str().unwrap_or(""))
                || Instant::now() > deadline
            {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The input schema `describe_operation` gives for a listed tool, when the server is in
    /// discovery mode. A listing kept within its size trims the deep levels of large schemas (a
    /// request body's required fields among them), and a host that needs them asks for the
    /// operation's own schema, which keeps more: so does the run. `None` without discovery mode.
    async fn described_input_schema(&self, id: &str, tool: &str) -> Option<Value> {
        let call = self
            .http
            .post(format!("{}/admin/servers/{id}/tools/describe_operation/call", self.daemon))
            .json(&json!({"arguments": {"operation": tool}}))
            .send()
            .await
            .ok()?;
        if !call.status().is_success() {
            return None;
        }
        let outcome: Value = call.json().await.ok()?;
        let result = &outcome["result"];
        let described = match result.get("structuredContent") {
            Some(structured) => structured.clone(),
            None => serde_json::from_str(result["content"][0]["text"].as_str()?).ok()?,
        };
        described.get("input_schema").filter(|schema| schema.is_object()).cloned()
    }

    /// A dummy credential for every security scheme the tools need, injected as the plan says.
    async fn add_credentials(&self, id: &str, auth: &Value) {
        for need in auth.as_array().into_iter().flatten() {
            let mut inject = need["inject"].clone();
            if inject.get("basic").is_some() {
                inject = json!({"basic": {"username": "quality"}});
            }
            let credential = json!({"value": DUMMY_SECRET, "domains": [API_HOST], "inject": inject});
            let name = need["credential"].as_str().unwrap_or_default();
            let url = format!("{}/admin/servers/{id}/credentials/{name}", self.daemon);
            let response = self.http.put(url).json(&credential).send().await.unwrap();
            assert!(response.status().is_success(), "credential {name} for {id}: {}", response.text().await.unwrap());
        }
    }

    /// The size of the server's `tools/list` answer, as an MCP host receives it.
    async fn listing_bytes(&self, id: &str) -> usize {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        let response = self
            .http
            .post(format!("{}/servers/{id}/mcp", self.daemon))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&request)
            .send()
            .await
            .unwrap();
        response.bytes().await.map_or(0, |body| body.len())
    }

    async fn delete(&self, id: &str) {
        let _ = self.http.delete(format!("{}/admin/servers/{id}", self.daemon)).send().await;
    }

    /// Starts Prism on a free port and points the proxy at it once it answers.
    async fn start_mock(&self, spec: &Path) -> Result<tokio::process::Child, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = tokio::process::Command::new(prism_binary())
            .args(["mock", "-h", "127.0.0.1", "-p", &port.to_string()])
            .arg(spec)
            .stdout(std::process::Stdio::null())
            .stderr(if std::env::var_os("MCPBOOTD_QUALITY_DEBUG").is_some() {
                std::process::Stdio::inherit()
            } else {
                std::process::Stdio::null()
            })
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("prism did not start ({}): {e}; run .ci/run once", prism_binary().display()))?;
        let deadline = Instant::now() + self.mock_timeout;
        loop {
            // Ready once it answers HTTP (its port opens before the description is loaded).
            if self.http.get(format!("http://127.0.0.1:{port}/")).send().await.is_ok() {
                *self.proxy.target.lock().unwrap() = port;
                return Ok(child);
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("prism exited ({status}) while loading the description"));
            }
            if Instant::now() > deadline {
                let _ = child.kill().await;
                return Err(format!("prism did not load the description within {:?}", self.mock_timeout));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The description Prism mocks: `spec`, or a JSON copy of it in `dir` with Swagger 2.0's
/// `consumes` made explicit. Swagger 2.0 gives `consumes` no default; the daemon, like Swagger's
/// own tools, sends a body parameter as JSON when neither the operation nor the document lists
/// media types, while Prism reads the absence as "no body accepted" and refuses every body with
/// 415. Listing `application/json` at the root says what the daemon assumes, so Prism judges
/// the body itself.
fn mock_description(spec: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(spec).unwrap();
    let Ok(mut root) = mcpbootd::generate::openapi::document::parse(&text) else { return spec.to_path_buf() };
    if root.get("swagger").is_none() || root.get("consumes").is_some() {
        return spec.to_path_buf();
    }
    root["consumes"] = json!(["application/json"]);
    let copy = dir.join(spec.with_extension("json").file_name().unwrap());
    std::fs::write(&copy, serde_json::to_vec(&root).unwrap()).unwrap();
    copy
}

/// Where the Python MCP SDK installed by `.ci/run` (`tests/sdk/python/.venv`) is, and the script
/// that checks results with the `jsonschema` package its client uses.
fn python_sdk() -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/python");
    (dir.join(".venv/bin/python"), dir.join("validate_results.py"))
}

/// The results (tool, output schema, structured content) the Python SDK's check refuses, with
/// its error. Without the SDK installed, every result is reported as unchecked.
async fn check_results(results: Vec<(String, Value, Value)>) -> Vec<(String, String)> {
    if results.is_empty() {
        return Vec::new();
    }
    let (python, script) = python_sdk();
    let input: Vec<Value> =
        results.iter().map(|(_, schema, result)| json!({"schema": schema, "result": result})).collect();
    let run = async {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{} did not start: {e}; run .ci/run once", python.display()))?;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&serde_json::to_vec(&input).unwrap()).await.map_err(|e| e.to_string())?;
        drop(stdin);
        let output = child.wait_with_output().await.map_err(|e| e.to_string())?;
        serde_json::from_slice::<Vec<Option<String>>>(&output.stdout).map_err(|e| format!("unreadable answer: {e}"))
    };
    match run.await {
        Ok(verdicts) => results
            .into_iter()
            .zip(verdicts)
            .filter_map(|((tool, _, _), verdict)| verdict.map(|error| (tool, format!("refused by the SDK: {error}"))))
            .collect(),
        Err(error) => results.into_iter().map(|(tool, _, _)| (tool, format!("not checked: {error}"))).collect(),
    }
}

/// A server id from a file name: `swagger-petstore-v3.yaml` → `q-swagger-petstore-v3`.
fn server_id(file: &str) -> String {
    let stem = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
    let clean: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("q-{}", clean.trim_matches('-')).chars().take(60).collect()
}

/// Up to `n` tools, spread evenly over the list (the same ones on every run).
fn sample(tools: &[Value], n: usize) -> Vec<Value> {
    if tools.len() <= n {
        return tools.to_vec();
    }
    (0..n).map(|i| tools[i * tools.len() / n].clone()).collect()
}

/// A value valid for `schema`: its example, default, const or first enum value; otherwise one
/// built from its type and constraints. Objects get their required properties (and, at the top
/// level, the optional scalar arguments too, so query and header serialisation is exercised).
pub fn example(schema: &Value, depth: usize, top: bool) -> Value {
    let Some(object) = schema.as_object() else { return json!("example") };
    for key in ["const", "example", "default"] {
        if let Some(value) = object.get(key) {
            return value.clone();
        }
    }
    if let Some(Value::Array(values)) = object.get("examples")
        && let Some(first) = values.first()
    {
        return first.clone();
    }
    if let Some(first) = object.get("enum").and_then(Value::as_array).and_then(|v| v.first()) {
        return first.clone();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = object.get(key).and_then(Value::as_array).filter(|v| !v.is_empty()) {
            // Branches that are not `null` first; the first whose example the whole schema accepts
            // (a `oneOf` refuses a value that two branches match), else the first.
            let mut ordered: Vec<&Value> =
                branches.iter().filter(|s| s.get("type").is_none_or(|t| t != "null")).collect();
            ordered.extend(branches.iter().filter(|s| s.get("type").is_some_and(|t| t == "null")));
            let whole = mcpbootd::toolset::validator(schema).ok();
            let candidates: Vec<Value> = ordered.iter().map(|branch| example(branch, depth + 1, false)).collect();
            let valid = candidates.iter().find(|value| whole.as_ref().is_some_and(|w| w.is_valid(value)));
            return valid.unwrap_or(&candidates[0]).clone();
        }
    }
    if let Some(parts) = object.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for part in parts {
            if let Value::Object(fields) = example(part, depth + 1, false) {
                merged.extend(fields);
            }
        }
        return Value::Object(merged);
    }
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => {
            kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null").to_string()
        }
        _ if object.contains_key("properties") => "object".into(),
        _ if object.contains_key("items") => "array".into(),
        _ => "string".into(),
    };
    match kind.as_str() {
        "integer" => json!(number_in(object, 1.0) as i64),
        "number" => json!(number_in(object, 1.5)),
        "boolean" => json!(true),
        "null" => Value::Null,
        "array" => {
            let count = object.get("minItems").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
            if depth > 8 {
                return json!([]);
            }
            let item = example(object.get("items").unwrap_or(&json!({})), depth + 1, false);
            let mut items = vec![item; count];
            if object.get("uniqueItems") == Some(&Value::Bool(true)) && count > 1 {
                items.truncate(1);
            }
            Value::Array(items)
        }
        "object" => {
            let mut built = Map::new();
            if depth > 8 {
                return Value::Object(built);
            }
            let required: Vec<&str> = object
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for (name, property) in object.get("properties").and_then(Value::as_object).into_iter().flatten() {
                let scalar = property
                    .get("type")
                    .is_some_and(|t| ["string", "integer", "number", "boolean"].iter().any(|k| t == k));
                // An optional `Accept` or `Content-Type` argument is left to the tool: any string
                // is schema-valid there, but not every string is a media type.
                let negotiation = ["accept", "content-type"].contains(&name.to_ascii_lowercase().as_str());
                // A property with one possible value is usually what tells a `oneOf`'s branches
                // apart (a message's `role`), so it is given even when optional.
                let fixed = property.get("const").is_some()
                    || property.get("enum").and_then(Value::as_array).is_some_and(|values| values.len() == 1);
                if required.contains(&name.as_str()) || fixed || (top && scalar && !negotiation) {
                    built.insert(name.clone(), example(property, depth + 1, false));
                }
            }
            // Some descriptions require a field they never define; any value will do for it.
            for name in required {
                if !built.contains_key(name) {
                    built.insert(name.to_string(), example(&json!({}), depth + 1, false));
                }
            }
            Value::Object(built)
        }
        _ => json!(string_for(object)),
    }
}

fn number_in(schema: &Map<String, Value>, fallback: f64) -> f64 {
    let minimum = schema.get("minimum").and_then(Value::as_f64);
    let maximum = schema.get("maximum").and_then(Value::as_f64);
    let exclusive = schema.get("exclusiveMinimum").and_then(Value::as_f64);
    match (minimum, exclusive, maximum) {
        (Some(min), _, _) => min.max(0.0).min(maximum.unwrap_or(f64::MAX)).max(min),
        (None, Some(min), _) => min + 1.0,
        (None, None, Some(max)) => fallback.min(max),
        _ => fallback,
    }
}

fn string_for(schema: &Map<String, Value>) -> String {
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && let Some(text) = matching(pattern, schema)
    {
        return text;
    }
    let format = schema.get("format").and_then(Value::as_str).unwrap_or("");
    let text = match format {
        "date-time" => "2024-01-02T03:04:05Z".to_string(),
        "date" => "2024-01-02".to_string(),
        "time" => "03:04:05Z".to_string(),
        "email" => "someone@example.com".to_string(),
        "uuid" => "3fa85f64-5717-4562-b3fc-2c963f66afa6".to_string(),
        "uri" | "url" => "https://example.com/a".to_string(),
        "hostname" => "example.com".to_string(),
        "ipv4" => "192.0.2.1".to_string(),
        "ipv6" => "2001:db8::1".to_string(),
        "byte" => "ZXhhbXBsZQ==".to_string(),
        "int32" | "int64" => "1".to_string(),
        _ => "example".to_string(),
    };
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = schema.get("maxLength").and_then(Value::as_u64).map(|m| m as usize);
    let mut text = text;
    while text.chars().count() < min {
        text.push('x');
    }
    if let Some(max) = max {
        text = text.chars().take(max.max(min)).collect();
    }
    text
}

/// A string matching `pattern` within the schema's length limits, generated from the regex with
/// a fixed seed (the same one on every run); `None` when the pattern cannot be generated from.
fn matching(pattern: &str, schema: &Map<String, Value>) -> Option<String> {
    use rand::{RngExt, SeedableRng};
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = schema.get("maxLength").and_then(Value::as_u64).unwrap_or(u64::MAX) as usize;
    // The generator takes no anchors; the whole string is generated anyway.
    // Schema patterns are ECMA-262: `\d`, `\w` and `\s` are ASCII there, Unicode to the generator.
    let ascii = pattern.replace("\\d", "[0-9]").replace("\\w", "[A-Za-z0-9_]").replace("\\s", " ");
    let bare = ascii.strip_prefix('^').unwrap_or(&ascii);
    let bare = bare.strip_suffix('$').filter(|b| !b.ends_with('\\')).unwrap_or(bare);
    let generator = rand_regex::Regex::compile(bare, 8).ok()?;
    // Checked as the daemon checks arguments.
    let checker = mcpbootd::toolset::validator(&json!({"type": "string", "pattern": pattern})).ok()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    (0..200).map(|_| rng.sample::<String, _>(&generator)).find(|text| {
        let length = text.chars().count();
        (min..=max).contains(&length) && checker.is_valid(&json!(text))
    })
}

/// Prints one line per description and the totals; returns (accepted, calls).
pub fn print_reports(reports: &[SpecReport]) -> (usize, usize) {
    println!(
        "{:<34} {:>5} {:>5} {:>4} {:>8} {:>6} {:>8} {:>8} {:>8} {:>6} {:>9} {:>7}  note",
        "description",
        "ops",
        "tools",
        "left",
        "list KiB",
        "called",
        "accepted",
        "rejected",
        "not sent",
        "args",
        "mismatch",
        "seconds"
    );
    let (mut accepted, mut calls, mut registered) = (0, 0, 0);
    let (mut left_out, mut largest, mut structured, mut mismatched) = (0, (0, ""), 0, 0);
    for report in reports {
        let note = match (&report.registered, &report.mock) {
            (Some(Err(reason)), _) => format!("REFUSED: {}", reason.chars().take(160).collect::<String>()),
            (_, Some(Err(reason))) => format!("mock unavailable: {reason}"),
            _ if !report.mock_failed.is_empty() => format!("Prism failed on {} calls", report.mock_failed.len()),
            _ => String::new(),
        };
        if matches!(report.registered, Some(Ok(()))) {
            registered += 1;
        }
        accepted += report.accepted;
        calls += report.calls();
        left_out += report.left_out.len();
        if report.listing_bytes > largest.0 {
            largest = (report.listing_bytes, report.file.as_str());
        }
        structured += report.structured;
        mismatched += report.mismatched.len();
        println!(
            "{:<34} {:>5} {:>5} {:>4} {:>8.1} {:>6} {:>8} {:>8} {:>8} {:>6} {:>9} {:>7.1}  {note}",
            report.file,
            report.operations,
            report.tools,
            report.left_out.len(),
            report.listing_bytes as f64 / 1024.0,
            report.calls(),
            report.accepted,
            report.rejected.len(),
            report.not_sent.len(),
            report.bad_arguments.len(),
            format!("{}/{}", report.mismatched.len(), report.structured),
            report.seconds
        );
        for operation in &report.left_out {
            println!("    left out: {}", operation.chars().take(300).collect::<String>());
        }
        let listed = report
            .rejected
            .iter()
            .chain(&report.not_sent)
            .chain(&report.bad_arguments)
            .chain(&report.mock_failed)
            .chain(&report.mismatched);
        for (tool, why) in listed.take(5) {
            println!("    {tool}: {}", why.chars().take(400).collect::<String>());
        }
    }
    let ratio = if calls == 0 { 0.0 } else { 100.0 * accepted as f64 / calls as f64 };
    println!(
        "total: {registered}/{} descriptions registered; {accepted}/{calls} calls accepted by the mock ({ratio:.1}%)",
        reports.len()
    );
    let mismatch = if structured == 0 { 0.0 } else { 100.0 * mismatched as f64 / structured as f64 };
    println!(
        "operations left out: {left_out}; largest tools/list: {:.1} KiB ({}); results not matching their output \
         schema: {mismatched}/{structured} ({mismatch:.1}%)",
        largest.0 as f64 / 1024.0,
        largest.1
    );
    (accepted, calls)
}
