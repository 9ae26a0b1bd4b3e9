//! Bad admin requests get a 4xx with the error shape, a message that says what to fix, and leave
//! nothing behind.

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_registrations_are_refused_precisely() {
    let app = spawn_app().await;
    app.register(json!({"id": "taken", "tools": [tool("a", "return 1;")]})).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"id": "taken", "tools": [tool("a", "return 1;")]}), 409, "already exists"),
        (json!({"id": "Bad_Id", "tools": [tool("a", "return 1;")]}), 422, "server id"),
        (json!({"tools": [tool("Bad-Name", "return 1;")]}), 422, "tools[0].name"),
        (json!({"tools": [tool("a", "return 1;"), tool("a", "return 2;")]}), 422, "duplicate tool name"),
        (
            json!({"tools": [{"name": "a", "description": "d", "input_schema": {"type": "array"}, "handler": "return 1;"}]}),
            422,
            "input_schema",
        ),
        (
            json!({"tools": [{"name": "a", "description": "d", "input_schema": {"type": "object", "required": "x"}, "handler": "return 1;"}]}),
            422,
            "input_schema",
        ),
        (json!({"tools": [tool("a", "const x = 1;\nreturn x +;")]}), 422, "line 2"),
        (json!({"tools": [tool("a", "const fs = require('fs'); return 1;")]}), 422, "require"),
        (json!({"tools": []}), 422, "at least one tool"),
        (json!({"tools": "nope"}), 400, "tools: invalid type: string"),
        (json!({"name": "x"}), 400, "\"prompt\""),
        (json!({"prompt": "p", "tools": []}), 400, "not both"),
        (json!({"tools": [tool("a", "return 1;")], "allow_domains": ["*.example.com"]}), 422, "wildcard"),
        (json!({"tools": [tool("a", "return 1;")], "allow_domains": ["localhost"]}), 422, "localhost"),
        (
            json!({"tools": [tool("a", "return 1;")], "allow_domains": "example.com"}),
            400,
            "allow_domains: invalid type",
        ),
        (json!({"tools": [tool("a", "return 1;")], "surprise": 1}), 400, "unknown field"),
        (
            json!({"tools": [tool("a", "return 1;"), tool("b", "return 2;"), {"name": "c", "description": "d", "input_schema": 5, "handler": "return 3;"}]}),
            422,
            "tools[2].input_schema: invalid type",
        ),
        (json!({"tools": [{"name": "a"}]}), 422, "tools[0]: missing field `description`"),
        // NUL, which PostgreSQL's TEXT cannot hold (a 500 there before), is refused on both backends.
        (
            json!({"tools": [{"name": "a", "description": "d\u{0}", "input_schema": {"type": "object"}, "handler": "return 1;"}]}),
            422,
            "tools[0].description: contains a NUL character",
        ),
        (
            json!({"tools": [{"name": "a", "title": "t\u{0}", "description": "d", "input_schema": {"type": "object"}, "handler": "return 1;"}]}),
            422,
            "tools[0].title: contains a NUL character",
        ),
        (json!({"tools": [tool("a", "return '\u{0}';")]}), 422, "tools[0].handler: contains a NUL character"),
        (
            json!({"tools": [tool("a", "return 1;")], "description": "nul\u{0}"}),
            400,
            "description contains a NUL character",
        ),
        (json!({"prompt": "the API at https://api.example.com\u{0}"}), 400, "prompt contains a NUL character"),
        (json!([1, 2]), 400, "JSON object"),
    ];
    for (body, status, needle) in cases {
        let (got, response) = app.post("/admin/servers", &body).await;
        assert_eq!(got, status, "{body} -> {response}");
        let message = error_message(&response);
        assert!(message.contains(needle), "{body}: expected {needle:?} in {message:?}");
    }
    let (_, list) = app.get("/admin/servers").await;
    assert_eq!(list["servers"].as_array().unwrap().len(), 1, "refused registrations leave nothing behind");

    // Bodies that are not JSON at all.
    let response = app
        .http
        .post(app.url("/admin/servers"))
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    error_message(&response.json().await.unwrap());
    let response = app.http.post(app.url("/admin/servers")).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 415);
    error_message(&response.json().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_admin_routes_answer_4xx_with_the_error_shape() {
    let app = spawn_app().await;
    app.register(json!({"id": "s", "tools": [tool("a", "return 1;")]})).await;
    let checks: Vec<(&str, &str, Option<Value>, u16)> = vec![
        ("GET", "/admin/servers/missing", None, 404),
        ("GET", "/admin/servers/NOT_VALID", None, 404),
        ("DELETE", "/admin/servers/missing", None, 404),
        ("GET", "/admin/servers/missing/export", None, 404),
        ("GET", "/admin/servers/missing/calls", None, 404),
        ("GET", "/admin/servers/s/calls?limit=0", None, 400),
        ("GET", "/admin/servers/s/calls?limit=abc", None, 400),
        ("POST", "/admin/servers/s/tools/nope/call", Some(json!({"arguments": {}})), 404),
        ("POST", "/admin/servers/missing/tools/a/call", Some(json!({"arguments": {}})), 404),
        ("POST", "/admin/servers/s/tools/a/call", Some(json!({"arguments": 5})), 422),
        ("POST", "/admin/servers/s/tools/a/call", Some(json!({"args": {}})), 422),
        ("GET", "/no/such/route", None, 404),
    ];
    for (method, path, body, status) in checks {
        let mut request = app.http.request(method.parse().unwrap(), app.url(path));
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        error_message(&body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_token_is_required_when_configured() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_ADMIN_TOKEN".into(), "s3cret-token-0123456789".into())],
        ..AppOptions::default()
    })
    .await;
    let url = app.url("/admin/servers");
    let response = app.http.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert!(error_message(&response.json().await.unwrap()).contains("Bearer"));
    for wrong in [
        "Bearer wrong",
        "Bearer s3cret-toke",
        "Bearer s3cret-token-longer",
        "Basic s3cret-token",
        "s3cret-token-0123456789",
    ] {
        let response = app.http.get(&url).header("authorization", wrong).send().await.unwrap();
        assert!(matches!(response.status().as_u16(), 401 | 403), "{wrong}");
    }
    let response = app.http.get(&url).bearer_auth("s3cret-token-0123456789").send().await.unwrap();
    assert_eq!(response.status(), 200);
    // Health probes stay open.
    assert_eq!(app.http.get(app.url("/healthz")).send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_registrations_say_which_llm_setting_is_missing() {
    let prompt = json!({"prompt": "Create tools for https://api.weather.test/docs"});
    let app = spawn_app().await;
    let (status, body) = app.post("/admin/servers", &prompt).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("llm_not_configured")), "{body}");
    assert!(error_message(&body).contains("set [llm] provider"), "{body}");
    app.stop().await;

    // A provider without its key would only fail at planning: refused now, with the key to set.
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_LLM__PROVIDER".into(), "anthropic".into()),
            ("MCPBOOTD_LLM__MODEL".into(), "claude-test".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let (status, body) = app.post("/admin/servers", &prompt).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("llm_not_configured")), "{body}");
    let message = error_message(&body);
    assert!(
        message.contains("[llm] provider is \"anthropic\" but no API key is set")
            && message.contains("ANTHROPIC_API_KEY"),
        "{message}"
    );
    let (_, servers) = app.get("/admin/servers").await;
    assert_eq!(servers["servers"], json!([]), "nothing was stored");
    // Toolsets still work.
    app.register(json!({"tools": [tool("hi", "return 'hi';")]})).await;
    app.stop().await;
}

/// Answers axum or rmcp would write in plain text or with an empty body come in the error shape;
/// requests the HTTP rules forbid are refused. (Found by an outside attack run: D12-D15.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_on_the_wire_is_json() {
    let app = spawn_app().await;
    app.register(json!({"id": "wired", "tools": [tool("hi", "return 1;")]})).await;
    for (method, path, status, code) in [
        ("PUT", "/admin/servers", 405, "method_not_allowed"),
        ("PATCH", "/admin/servers/wired", 405, "method_not_allowed"),
        ("GET", "/admin/servers/%ff", 400, "invalid_path"),
        ("GET", "/admin/servers/%ff/calls", 400, "invalid_path"),
    ] {
        let response = app.http.request(method.parse().unwrap(), app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        if status == 405 {
            assert!(response.headers().get("allow").is_some(), "{method} {path} says what is allowed");
        }
        let body: Value = response.json().await.unwrap_or_else(|e| panic!("{method} {path}: not JSON: {e}"));
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
    }
    let response = app.http.post(app.url("/servers/%ff/mcp")).json(&json!({})).send().await.unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["data"]["code"], "invalid_path", "JSON-RPC on the MCP endpoint: {body}");

    // Two Host headers (RFC 9112 §3.2): refused before any route sees them.
    let mut stream = tokio::net::TcpStream::connect(app.address).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(
            b"GET /admin/servers HTTP/1.1\r\nHost: localhost\r\nHost: rebound.example\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("\"invalid_header\""), "{answer}");

    // The admin API checks the Host like the mounts do.
    let response = app.http.get(app.url("/admin/servers")).header("host", "rebound.example").send().await.unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");

    // Bounded inputs: domains, names.
    let domains: Vec<String> = (0..300).map(|i| format!("d{i}.example.com")).collect();
    let (status, body) =
        app.post("/admin/servers", &json!({"allow_domains": domains, "tools": [tool("hi", "return 1;")]})).await;
    assert_eq!(status, 422, "{body}");
    assert!(error_message(&body).contains("at most 256"), "{body}");
    let many_same: Vec<&str> = vec!["api.example.com"; 256];
    let (status, body) = app
        .post("/admin/servers", &json!({"id": "same", "allow_domains": many_same, "tools": [tool("hi", "return 1;")]}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (_, view) = app.get("/admin/servers/same").await;
    assert_eq!(view["allow_domains"].as_array().unwrap().len(), 256, "stored as given");
    assert_eq!(view["whitelist"].as_array().unwrap().len(), 1, "deduplicated: {view}");
    for (name, problem) in
        [("a\nb", "control characters"), ("  ", "must not be empty"), (&"n".repeat(201)[..], "longer than 200")]
    {
        let (status, body) =
            app.post("/admin/servers", &json!({"name": name, "tools": [tool("hi", "return 1;")]})).await;
        assert_eq!(status, 400, "{name:?}: {body}");
        assert!(error_message(&body).contains(problem), "{name:?}: {body}");
    }
}

/// A backtracking pattern held a runtime thread for seconds per call (attack run D4): patterns
/// run on a linear-time engine, and what it cannot run is refused at registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backtracking_patterns_are_refused_and_nested_quantifiers_are_cheap() {
    let app = spawn_app().await;
    let with_pattern = |id: &str, pattern: &str| {
        json!({"id": id, "tools": [{
            "name": "t", "description": "d", "handler": "return 1;",
            "input_schema": {"type": "object", "properties": {"xs": {"type": "array", "items": {"anyOf": [{"type": "string", "pattern": pattern}]}}}}
        }]})
    };
    let (status, body) = app.post("/admin/servers", &with_pattern("backref", r"^(a*)*\1b$")).await;
    assert_eq!(status, 422, "{body}");
    assert!(error_message(&body).contains("linear-time regex engine"), "{body}");

    app.register(with_pattern("nested", r"^(a*)*b$")).await;
    let attack: Vec<String> = (0..100).map(|_| format!("{}c", "a".repeat(25))).collect();
    let (status, body) = app.admin_call("nested", "t", json!({"xs": attack})).await;
    assert_eq!(status, 422, "the arguments do not match, and that is decided at once: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_server_id_gets_the_same_404_on_every_server_route() {
    let app = spawn_app().await;
    let expected =
        r#"{"error":{"code":"server_not_found","message":"no server \"NOT_VALID\" (ids use a-z, 0-9 and '-')"}}"#;
    let credential = json!({"value": "v", "domains": ["api.example.test"], "inject": {"header": "Authorization"}});
    let checks: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/admin/servers/NOT_VALID", None),
        ("DELETE", "/admin/servers/NOT_VALID", None),
        ("POST", "/admin/servers/NOT_VALID/regenerate", None),
        ("GET", "/admin/servers/NOT_VALID/calls", None),
        ("GET", "/admin/servers/NOT_VALID/export", None),
        ("PUT", "/admin/servers/NOT_VALID/auth", Some(json!({"mode": "open"}))),
        ("POST", "/admin/servers/NOT_VALID/tools/a/call", Some(json!({"arguments": {}}))),
        ("PUT", "/admin/servers/NOT_VALID/credentials/key", Some(credential)),
        ("DELETE", "/admin/servers/NOT_VALID/credentials/key", None),
        ("DELETE", "/admin/servers/NOT_VALID/connections/c", None),
        ("GET", "/admin/servers/NOT_VALID/versions/1", None),
        ("GET", "/admin/servers/NOT_VALID/versions/1/diff/2", None),
        ("POST", "/admin/servers/NOT_VALID/versions/1/reject", None),
        ("GET", "/admin/servers/NOT_VALID/limits", None),
        ("PUT", "/admin/servers/NOT_VALID/code-mode", Some(json!({"enabled": true}))),
    ];
    for (method, path, body) in checks {
        let mut request = app.http.request(method.parse().unwrap(), app.url(path));
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 404, "{method} {path}");
        assert_eq!(response.text().await.unwrap(), expected, "{method} {path}");
    }
}
