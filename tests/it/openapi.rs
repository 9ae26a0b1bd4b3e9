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
    let concrete = path.replace("{id}", id).replace("{tool}", "a");
    let mut request = app.http.request(method.to_uppercase().parse().unwrap(), app.url(&concrete));
    if path.ends_with("/access-token") && method == "put" {
        request = request.json(&json!({"access_token": "a-long-enough-token-123"}));
    } else if method == "post" || method == "put" || method == "patch" {
        request = request.header("accept", "application/json, text/event-stream").json(&json!({}));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
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
        env: vec![("MCPBOOTD_ADMIN_TOKEN".into(), "s3cret-token".into())],
        ..AppOptions::default()
    })
    .await;
    let response = app.http.get(app.url("/admin/openapi.json")).bearer_auth("s3cret-token").send().await.unwrap();
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
            // the admin API's, or on the MCP endpoint a JSON-RPC error (which carries it in `data`).
            let error_shape = if path.ends_with("/mcp") { "JsonRpcError" } else { "ErrorBody" };
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
