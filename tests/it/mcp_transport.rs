//! The MCP endpoint's HTTP side as clients meet it: every refusal is a JSON-RPC error (which
//! MCP clients show) that says what was wrong and how to fix it, and requests clients mean
//! well (`Accept: */*`, a 2025-03-26 batch) are served.

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::helpers::*;

const LIST: &str = r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}"#;

/// Sends `body` to `path` with the headers given (and no others but reqwest's defaults); the
/// answer's status, headers and JSON body (every answer here must be JSON).
async fn send(
    app: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, HeaderMap, Value) {
    let mut request = app.http.request(method.parse().unwrap(), app.url(path)).body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    if status == 202 {
        return (status, headers, Value::Null);
    }
    let content_type = headers.get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    assert!(content_type.starts_with("application/json"), "{method} {path}: {status} {content_type:?} {text}");
    (status, headers, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text}: {e}")))
}

const JSON: (&str, &str) = ("content-type", "application/json");
const ACCEPT_BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");

/// A JSON-RPC error answering `id`, with the daemon's error code in `data`; its message.
fn jsonrpc_error(body: &Value, id: Value, jsonrpc_code: i64, code: &str) -> String {
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["id"], id, "{body}");
    assert_eq!(body["error"]["code"], jsonrpc_code, "{body}");
    assert_eq!(body["error"]["data"]["code"], code, "{body}");
    body["error"]["message"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_jsonrpc_errors_that_say_what_to_send() {
    let app = spawn_app().await;
    app.register(json!({"id": "wire", "tools": [tool("hi", "return 'hi';")]})).await;
    let mcp = "/servers/wire/mcp";

    let (status, _, body) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], r#"{"jsonrpc": "2.0", "id": 1,"#).await;
    assert_eq!(status, 400);
    assert!(jsonrpc_error(&body, Value::Null, -32700, "malformed_json").contains("not valid JSON"));

    let (status, _, body) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], r#"{"id": 3, "hello": "world"}"#).await;
    assert_eq!(status, 400);
    let message = jsonrpc_error(&body, json!(3), -32600, "invalid_message");
    assert!(message.contains("not a JSON-RPC 2.0 request"), "{message}");

    let (status, _, body) = send(&app, "POST", mcp, &[("content-type", "text/plain"), ACCEPT_BOTH], LIST).await;
    assert_eq!(status, 415);
    assert!(
        jsonrpc_error(&body, json!(7), -32600, "unsupported_media_type").contains("Content-Type: application/json")
    );

    let (status, _, body) = send(&app, "POST", mcp, &[JSON, ("accept", "text/html")], LIST).await;
    assert_eq!(status, 406);
    assert!(jsonrpc_error(&body, json!(7), -32600, "not_acceptable").contains("text/html"));

    // A stateless endpoint has no stream to GET and no session to DELETE.
    for method in ["GET", "DELETE", "PUT"] {
        let (status, headers, body) = send(&app, method, mcp, &[ACCEPT_BOTH], "").await;
        assert_eq!(status, 405, "{method}");
        assert!(headers.get("allow").is_some(), "{method}: {headers:?}");
        assert!(jsonrpc_error(&body, Value::Null, -32600, "method_not_allowed").contains("POST only"));
    }

    let too_big = format!(
        r#"{{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {{"pad": "{}"}}}}"#,
        "x".repeat(5 << 20)
    );
    let (status, _, body) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], &too_big).await;
    assert_eq!(status, 413);
    assert!(jsonrpc_error(&body, Value::Null, -32600, "body_too_large").contains("[server] max_body_bytes"));

    // A known method whose params do not fit is -32602 with the reason, not "method not found"
    // (attack run D16).
    for (params, said) in [
        (r#""params": {"name": "hi", "arguments": [1]}"#, "params.arguments must be an object"),
        (r#""params": {"name": "hi", "arguments": "x=1"}"#, "not a string"),
        (r#""params": {"arguments": {}}"#, "params.name is missing"),
        (r#""params": ["hi"]"#, "params must be an object"),
    ] {
        let call = format!(r#"{{"jsonrpc": "2.0", "id": 5, "method": "tools/call", {params}}}"#);
        let (status, _, body) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], &call).await;
        assert_eq!(status, 400, "{params}: {body}");
        let message = jsonrpc_error(&body, json!(5), -32602, "invalid_params");
        assert!(message.contains(said), "{params}: {message}");
    }

    // Unknown servers answer the request's id, so clients match the error to their request.
    let (status, _, body) = send(&app, "POST", "/servers/nobody/mcp", &[JSON, ACCEPT_BOTH], LIST).await;
    assert_eq!(status, 404);
    assert!(jsonrpc_error(&body, json!(7), -32600, "server_not_found").contains("\"nobody\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_accept_json_any_way_are_served() {
    let app = spawn_app().await;
    app.register(json!({"id": "lenient", "tools": [tool("hi", "return 'hi';")]})).await;
    for accept in [
        None,
        Some("*/*"),
        Some("application/*"),
        Some("application/json"),
        Some("application/json, text/event-stream"),
    ] {
        let mut headers = vec![JSON];
        headers.extend(accept.map(|value| ("accept", value)));
        let (status, _, body) = send(&app, "POST", "/servers/lenient/mcp", &headers, LIST).await;
        assert_eq!(status, 200, "{accept:?}: {body}");
        assert_eq!(body["id"], 7);
        assert_eq!(body["result"]["tools"][0]["name"], "hi", "{accept:?}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_under_2025_03_26_and_refused_with_the_reason_after() {
    let app = spawn_app().await;
    app.register(json!({"id": "batched", "tools": [tool("hi", "return 'hi ' + args.n;")]})).await;
    let mcp = "/servers/batched/mcp";
    let call = |id: u32| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "hi", "arguments": {"n": id}}});
    let batch = json!([
        call(1),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "list", "method": "tools/list"},
        call(2),
        {"jsonrpc": "2.0", "id": 9, "method": "no/such/method"},
        {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "hi", "arguments": [1]}},
    ])
    .to_string();
    for revision in [None, Some("2025-03-26")] {
        let mut headers = vec![JSON, ACCEPT_BOTH];
        headers.extend(revision.map(|r| ("mcp-protocol-version", r)));
        let (status, _, body) = send(&app, "POST", mcp, &headers, &batch).await;
        assert_eq!(status, 200, "{revision:?}: {body}");
        let answers = body.as_array().unwrap_or_else(|| panic!("an array: {body}"));
        assert_eq!(answers.len(), 5, "the notification gets no answer: {body}");
        let by_id = |id: Value| answers.iter().find(|a| a["id"] == id).unwrap_or_else(|| panic!("{id} in {body}"));
        assert_eq!(by_id(json!(1))["result"]["content"][0]["text"], "hi 1");
        assert_eq!(by_id(json!(2))["result"]["content"][0]["text"], "hi 2");
        assert_eq!(by_id(json!("list"))["result"]["tools"][0]["name"], "hi");
        assert_eq!(by_id(json!(9))["error"]["code"], -32601, "unknown method: {body}");
        assert_eq!(by_id(json!(10))["error"]["code"], -32602, "params that do not fit: {body}");
    }
    let notifications = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]).to_string();
    let (status, _, _) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], &notifications).await;
    assert_eq!(status, 202, "a batch of notifications is accepted like one");

    let (status, _, body) =
        send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH, ("mcp-protocol-version", "2025-06-18")], &batch).await;
    assert_eq!(status, 400);
    let message = jsonrpc_error(&body, Value::Null, -32600, "batch_not_supported");
    assert!(message.contains("2025-06-18") && message.contains("one JSON-RPC message per POST"), "{message}");

    let huge = Value::Array((0..65).map(call).collect()).to_string();
    let (status, _, body) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], &huge).await;
    assert_eq!(status, 400);
    assert!(jsonrpc_error(&body, Value::Null, -32600, "batch_not_supported").contains("1 to 64"));
    let (status, _, body) = send(&app, "POST", mcp, &[JSON, ACCEPT_BOTH], "[]").await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_refused_with_the_host_and_the_setting_named() {
    let app = spawn_app().await;
    app.register(json!({"id": "hosts", "tools": [tool("hi", "return 'hi';")]})).await;
    let (status, _, body) =
        send(&app, "POST", "/servers/hosts/mcp", &[JSON, ACCEPT_BOTH, ("host", "rebound.example:8092")], LIST).await;
    assert_eq!(status, 403);
    let message = jsonrpc_error(&body, json!(7), -32600, "host_not_allowed");
    assert!(message.contains("\"rebound.example:8092\"") && message.contains("[server] allowed_hosts"), "{message}");
    // Same answer for a server that does not exist: a rebinding page learns nothing.
    let (status, _, _) =
        send(&app, "POST", "/servers/nobody/mcp", &[JSON, ACCEPT_BOTH, ("host", "rebound.example")], LIST).await;
    assert_eq!(status, 403);

    let (status, _, body) =
        send(&app, "POST", "/servers/hosts/mcp", &[JSON, ACCEPT_BOTH, ("host", "localhost")], LIST).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_probes_say_the_servers_take_a_static_bearer_token() {
    let app = spawn_app().await;
    app.register(
        json!({"id": "guarded", "access_token": "a-long-enough-token-1234", "tools": [tool("hi", "return 'hi';")]}),
    )
    .await;
    // Where mcp-remote, Claude Code, the Inspector and the TypeScript SDK look after a 401.
    for (method, path) in [
        ("GET", "/.well-known/oauth-protected-resource/servers/guarded/mcp"),
        ("GET", "/.well-known/oauth-protected-resource"),
        ("GET", "/servers/guarded/mcp/.well-known/oauth-protected-resource"),
        ("GET", "/.well-known/oauth-authorization-server"),
        ("GET", "/.well-known/oauth-authorization-server/servers/guarded/mcp"),
        ("GET", "/.well-known/openid-configuration"),
        ("POST", "/register"),
        ("GET", "/authorize"),
        ("POST", "/token"),
        ("POST", "/servers/guarded/register"),
    ] {
        let (status, _, body) = send(&app, method, path, &[JSON], "{}").await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(body["error"], "invalid_request", "{method} {path}: {body}");
        let description = body["error_description"].as_str().unwrap();
        assert!(description.contains("static bearer token"), "{path}: {description}");
        assert!(description.contains(r#""headers": {"Authorization": "Bearer <token>"}"#), "{path}: {description}");
        if path.contains("guarded") {
            assert!(description.contains("/servers/guarded/mcp"), "names the mount: {description}");
        }
    }
    // Other unknown routes keep the admin API's error.
    let (status, _, body) = send(&app, "GET", "/no/such/route", &[], "").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "route_not_found", "{body}");
}

/// A single `tools/call` is answered by the mount without rmcp's per-request service (what
/// SDK clients send: `Accept` with both types in this order, a 2025 revision); the same request
/// with the two types the other way round goes through rmcp. Both answers must be the same
/// bytes, for results, tool errors and protocol errors alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_answered_directly_match_what_rmcp_answers() {
    let app = spawn_app().await;
    let greet = json!({
        "name": "greet",
        "description": "greets",
        "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        "handler": "return 'hi ' + args.n;",
    });
    let tools =
        json!([greet, tool("broken", "throw new Error('the API said no');"), tool("json", "return {a: [1, 'x']};")]);
    app.register(json!({"id": "direct", "tools": tools})).await;
    let mcp = "/servers/direct/mcp";
    let call = |id: u64, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let cases = [
        ("success", call(1, json!({"name": "greet", "arguments": {"n": 3}}))),
        ("structured", call(2, json!({"name": "json", "_meta": {"progressToken": "p1"}}))),
        ("tool error", call(3, json!({"name": "broken", "arguments": {}}))),
        ("unknown tool", call(4, json!({"name": "nope", "arguments": {}}))),
        ("invalid arguments", call(5, json!({"name": "greet", "arguments": {"n": "three"}}))),
        ("missing arguments", call(6, json!({"name": "greet"}))),
        ("misfit params", call(7, json!({"name": "greet", "arguments": [1]}))),
        (
            "string id",
            json!({"jsonrpc": "2.0", "id": "abc", "method": "tools/call", "params": {"name": "greet", "arguments": {"n": 1}}}),
        ),
    ];
    for revision in [None, Some("2025-03-26"), Some("2025-06-18"), Some("2025-11-25")] {
        for (case, body) in &cases {
            let body = body.to_string();
            let answer = |accept: &'static str| {
                let mut request =
                    app.http.post(app.url(mcp)).header("content-type", "application/json").header("accept", accept);
                if let Some(revision) = revision {
                    request = request.header("mcp-protocol-version", revision);
                }
                let request = request.body(body.clone());
                async move {
                    let response = request.send().await.unwrap();
                    let status = response.status().as_u16();
                    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
                    (status, content_type, response.text().await.unwrap())
                }
            };
            let direct = answer("application/json, text/event-stream").await;
            let through_rmcp = answer("text/event-stream, application/json").await;
            assert_eq!(direct, through_rmcp, "{case} under {revision:?}");
            assert_eq!(direct.0, if *case == "misfit params" { 400 } else { 200 }, "{case}: {}", direct.2);
            let answer: Value = serde_json::from_str(&direct.2).unwrap();
            match *case {
                "success" => assert_eq!(answer["result"]["content"][0]["text"], "hi 3", "{answer}"),
                "tool error" | "invalid arguments" | "missing arguments" => {
                    assert_eq!(answer["result"]["isError"], true, "{case}: {answer}")
                }
                "unknown tool" => assert_eq!(answer["error"]["code"], -32602, "{answer}"),
                "string id" => assert_eq!(answer["id"], "abc", "{answer}"),
                _ => {}
            }
        }
    }
}
