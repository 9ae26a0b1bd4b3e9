//! The OpenAPI document stays in step with the router.

use std::collections::BTreeSet;

use mcpbootd::api::openapi::ROUTES;
use serde_json::{Value, json};

use crate::helpers::*;

/// (method, path) pairs registered in src/api.rs, read from its `.route(...)` calls.
fn router_routes() -> BTreeSet<(String, String)> {
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/api.rs")).unwrap();
    let mut routes = BTreeSet::new();
    for call in source.split(".route(\"").skip(1) {
        let (path, rest) = call.split_once('"').unwrap();
        let chain: String =
            rest.lines().take_while(|l| !l.trim_start().starts_with(".route(")).collect::<Vec<_>>().join(" ");
        for method in ["get", "post", "put", "delete", "any"] {
            if chain.contains(&format!(" {method}("))
                || chain.contains(&format!(".{method}("))
                || chain.starts_with(&format!(", {method}("))
            {
                let method = if method == "any" { "post" } else { method };
                routes.insert((method.to_string(), path.to_string()));
            }
        }
    }
    routes
}

#[test]
fn every_route_is_described_and_every_description_is_routed() {
    let routed = router_routes();
    let documented: BTreeSet<(String, String)> =
        ROUTES.iter().map(|r| (r.method.to_string(), r.path.to_string())).collect();
    assert!(routed.len() >= 15, "parsed too few routes from api.rs: {routed:?}");
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(undocumented.is_empty(), "routes missing from the OpenAPI document: {undocumented:?}");
    assert!(unrouted.is_empty(), "documented routes the router does not serve: {unrouted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_valid_and_every_path_answers() {
    let app = spawn_app().await;
    app.register(json!({"id": "s", "tools": [tool("a", "return 1;")]})).await;
    let (status, document) = app.get("/admin/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(document["openapi"], "3.1.0");
    // Every $ref resolves.
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(document["components"]["schemas"][name].is_object(), "dangling $ref {name}");
    }
    // Every documented operation is served (not the unknown-route fallback, not 405).
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            assert!(operation["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}");
            let concrete = path.replace("{id}", "s").replace("{tool}", "a");
            let mut request = app.http.request(method.to_uppercase().parse().unwrap(), app.url(&concrete));
            if path.ends_with("/access-token") && method == "put" {
                request = request.json(&json!({"access_token": "a-long-enough-token-123"}));
            } else if method == "post" || method == "put" {
                request = request.header("accept", "application/json, text/event-stream").json(&json!({}));
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_ne!(status, 405, "{method} {path}");
            assert_ne!(body["error"]["code"], "route_not_found", "{method} {path} is documented but not routed");
        }
    }
}
