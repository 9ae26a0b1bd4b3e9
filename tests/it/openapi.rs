//! The OpenAPI document the daemon serves describes the router that serves it: every documented
//! operation is answered (not by the unknown-route fallback, not with 405), and on every
//! documented path the methods it does not document are refused with 405, so the router serves
//! nothing there that the document leaves out. (Routes and descriptions are registered together
//! in `api.rs`, so a route on a path of its own cannot be added without its description.)

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::helpers::*;

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// A request to `path` (a documented path with its parameters filled in) that the route accepts
/// far enough to show it is routed. MCP requests go to server `m`, admin requests to `s` (which
/// they may give a token or delete).
async fn send(app: &TestApp, method: &str, path: &str) -> (u16, Value) {
    let id = if path.starts_with("/servers/") { "m" } else { "s" };
    let concrete = path
        .replace("{id}", id)
        .replace("{tool}", "a")
        .replace("{version}", "1")
        .replace("{from}", "1")
        .replace("{to}", "1");
    let mut request = app.http.request(method.to_uppercase().parse().unwrap(), app.url(&concrete));
    if path.ends_with("/access-token") && method == "put" {
        request = request.json(&json!({"access_token": "a-long-enough-token-123"}));
    } else if method == "post" || method == "put" || method == "patch" {
        request = request.header("accept", "application/json, text/event-stream").json(&json!({}));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    // A stream of every server's events stays open: its answer is its status.
    let streaming =
        response.headers().get("content-type").is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if streaming && path == "/admin/events" {
        return (status, Value::Null);
    }
    let body = response.text().await.unwrap();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_describes_the_router() {
    let app = spawn_app().await;
    for id in ["s", "m"] {
        app.register(json!({"id": id, "tools": [tool("a", "return 1;")]})).await;
    }
    let (status, document) = app.get("/admin/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["info"]["title"], "mcpbootd admin API");
    // Every $ref resolves.
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(document["components"]["schemas"][name].is_object(), "dangling $ref {name}");
    }
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 12, "too few paths: {:?}", paths.keys());
    for (path, operations) in paths {
        let documented: BTreeSet<&str> = operations.as_object().unwrap().keys().map(String::as_str).collect();
        for method in METHODS {
            let (status, body) = send(&app, method, path).await;
            if documented.contains(method) {
                let operation = &operations[method];
                assert!(operation["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}");
                assert_ne!(status, 405, "{method} {path} is documented but refused");
                assert_ne!(body["error"]["code"], "route_not_found", "{method} {path} is documented but not routed");
            } else {
                assert_eq!(status, 405, "{method} {path} is served but not documented: {body}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_need_the_token_and_document_it_and_errors_list_every_code() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_ADMIN_TOKEN".into(), "s3cret-token-0123456789".into())],
        ..AppOptions::default()
    })
    .await;
    let response =
        app.http.get(app.url("/admin/openapi.json")).bearer_auth("s3cret-token-0123456789").send().await.unwrap();
    let document: Value = response.json().await.unwrap();
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let documented_as_guarded = operation["security"] == json!([{"adminToken": []}]);
            let responses = &operation["responses"];
            if documented_as_guarded {
                assert!(responses["401"].is_object() && responses["403"].is_object(), "{method} {path}");
            }
            // Without the token, exactly the guarded routes answer 401.
            let (status, body) = send(&app, method, path).await;
            assert_eq!(status == 401, documented_as_guarded, "{method} {path}: {status} {body}");
            // Every error response has the error shape, whose code is one of the documented ones:
            // the admin API's, on the MCP endpoint a JSON-RPC error (which carries it in `data`), on
            // the OAuth metadata an OAuth error (RFC 6749 §5.2, what OAuth clients show).
            let error_shape = if path.starts_with("/.well-known/") {
                "OAuthError"
            } else if path.ends_with("/mcp") {
                "JsonRpcError"
            } else {
                "ErrorBody"
            };
            for (status, response) in responses.as_object().unwrap() {
                let schema = &response["content"]["application/json"]["schema"]["$ref"];
                if status.starts_with('4') && !schema.is_null() {
                    assert_eq!(schema, &format!("#/components/schemas/{error_shape}"), "{method} {path} {status}");
                }
            }
        }
    }
    let codes = &document["components"]["schemas"]["ErrorCode"]["enum"];
    for code in ["invalid_body", "server_not_found", "busy", "shutting_down", "unauthorized", "route_not_found"] {
        assert!(codes.as_array().unwrap().iter().any(|c| c == code), "{code} missing from {codes}");
    }
}

/// Every response in the document says what it is (OpenAPI requires a description; generators
/// refuse the whole document without one), and schemas of arrays say what they hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_complete_enough_for_generators() {
    let app = spawn_app().await;
    let (_, document) = app.get("/admin/openapi.json").await;
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                assert!(response["description"].is_string(), "{method} {path} {status} has no description");
            }
        }
    }
    fn arrays_have_items(node: &Value, at: &str) {
        match node {
            Value::Object(map) => {
                let is_array = map.get("type") == Some(&json!("array"))
                    || map.get("type").and_then(Value::as_array).is_some_and(|t| t.contains(&json!("array")));
                assert!(!is_array || map.contains_key("items"), "{at} is an array without items");
                for (key, value) in map {
                    arrays_have_items(value, &format!("{at}/{key}"));
                }
            }
            Value::Array(values) => {
                values.iter().enumerate().for_each(|(i, v)| arrays_have_items(v, &format!("{at}[{i}]")))
            }
            _ => {}
        }
    }
    arrays_have_items(&document["components"], "#/components");
}

/// A client generated from the served document with a real generator (openapi-python-client)
/// lists, shows and calls through the documented models, with the documented token scheme; the
/// generator prints no warning, every object schema has a model with all its properties, and the
/// server's model keeps everything the daemon answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_lists_shows_and_calls() {
    if std::env::var("MCPBOOTD_SKIP_SDK_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: the generated OpenAPI client test (MCPBOOTD_SKIP_SDK_TESTS=1)");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi-client");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "openapi-python-client is not installed ({} is missing); run .ci/run once, or: python3 -m venv \
         tests/openapi-client/.venv && tests/openapi-client/.venv/bin/pip install -r tests/openapi-client/requirements.txt \
         (or set MCPBOOTD_SKIP_SDK_TESTS=1)",
        python.display()
    );
    let token = "generated-client-admin-token";
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_ADMIN_TOKEN".into(), token.into())],
        ..AppOptions::default()
    })
    .await;
    let registered = app
        .http
        .post(app.url("/admin/servers"))
        .bearer_auth(token)
        .json(&json!({
            "id": "calc",
            "name": "Calculator",
            "description": "Adds numbers.",
            "allow_domains": [WEATHER_HOST],
            "code_mode": {"enabled": true, "allowed_servers": [], "timeout_ms": 5000},
            "tools": [{
                "name": "add", "description": "Add two numbers",
                "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                "handler": "return { sum: args.a + args.b };"
            }]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201);
    // A credential, so that the server's view has every part a client reads.
    let credential = json!({"value": "secret-value-1", "domains": [WEATHER_HOST], "inject": {"header": "X-Key"}});
    let url = app.url("/admin/servers/calc/credentials/key");
    let stored = app.http.put(url).bearer_auth(token).json(&credential).send().await.unwrap();
    assert_eq!(stored.status(), 201);
    let work = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(&python)
        .arg(dir.join("drive.py"))
        .args([app.url("").trim_end_matches('/'), "calc", "add", r#"{"a": 2, "b": 40}"#])
        .arg(work.path())
        .env("MCPBOOTD_ADMIN_TOKEN", token)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), output).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the generated client failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON summary ({e}):\n{stdout}\n{stderr}"));
    assert_eq!(summary["warnings"], json!([]), "the generator skipped parts of the document: {summary}");
    assert_eq!(summary["model_gaps"], json!([]), "schemas without a complete model: {summary}");
    assert_eq!(summary["round_trip_losses"], json!([]), "the server's model does not keep its view: {summary}");
    assert_eq!(summary["servers"], json!(["calc"]));
    assert_eq!(
        summary["server"],
        json!({"id": "calc", "name": "Calculator", "status": "ready", "tools": ["add"], "whitelist": [WEATHER_HOST]})
    );
    assert_eq!(summary["call"]["outcome"], "ok");
    assert_eq!(summary["call"]["result"]["structuredContent"], json!({"sum": 42}));
    assert_eq!(summary["missing"]["code"], "server_not_found");
}

/// The registration schema in the document accepts exactly the bodies the daemon accepts, on
/// the edges the attack run found described wrongly: `prompt` and `tools` together, a blank
/// prompt, access tokens of the wrong length or with spaces, names with control characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registration_schema_accepts_what_the_daemon_accepts() {
    let app = spawn_app().await;
    let (_, mut document) = app.get("/admin/openapi.json").await;
    document["$ref"] = json!("#/components/schemas/Registration");
    let schema = jsonschema::validator_for(&document).expect("the document's schemas compile");
    let hi = tool("hi", "return 1;");
    let bodies = [
        json!({"prompt": "Create tools for the weather API"}),
        json!({"prompt": ""}),
        json!({"prompt": "  \n "}),
        json!({"prompt": "x", "tools": [hi]}),
        json!({"id": "t1", "tools": [hi], "access_token": "good-token-0123456789"}),
        json!({"id": "t2", "tools": [hi], "access_token": "too-short"}),
        json!({"id": "t3", "tools": [hi], "access_token": "has a space 0123456789"}),
        json!({"id": "t4", "tools": [hi], "access_token": "x".repeat(513)}),
        json!({"id": "t5", "tools": [hi], "name": "Weather"}),
        json!({"id": "t6", "tools": [hi], "name": "two\nlines"}),
        json!({"id": "t7", "tools": [hi], "name": "   "}),
        json!({"id": "t8", "tools": [hi], "name": "n".repeat(201)}),
        json!({"id": "o1", "openapi_spec": {"openapi": "3.0.0", "servers": [{"url": "https://api.pets.test"}], "paths": {"/a": {"get": {"responses": {}}}}}}),
        json!({"id": "o2", "openapi": "https://api.pets.test/openapi.json", "prompt": "pets", "operations": {"include": ["tag:pets"]}}),
        json!({"id": "o3", "openapi": "https://api.pets.test/openapi.json", "openapi_spec": {}}),
        json!({"id": "o4", "openapi": "https://api.pets.test/openapi.json", "tools": [hi]}),
    ];
    for body in bodies {
        let (status, answer) = app.post("/admin/servers", &body).await;
        // Without an LLM a valid prompt registration is refused for that reason alone.
        let accepted = (200..300).contains(&status) || answer["error"]["code"] == "llm_not_configured";
        assert!(status < 500, "{body}: {status} {answer}");
        assert_eq!(
            schema.is_valid(&body),
            accepted,
            "the document and the daemon disagree on {body}: {status} {answer}"
        );
    }
}
