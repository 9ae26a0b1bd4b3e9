//! Per-server MCP access tokens: required when set, rotatable, never forwarded upstream.

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::model::ClientConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use crate::helpers::*;

const TOKEN: &str = "first-token-0123456789";
const ROTATED: &str = "second-token-9876543210";

async fn client_with_token(url: &str, token: &str) -> anyhow::Result<McpClient> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(token.to_string());
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    Ok(ClientConfig::default().serve(transport).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_protected_mounts() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "guarded",
        "access_token": TOKEN,
        "allow_domains": [WEATHER_HOST],
        "tools": [tool("echo", &format!("const r = await fetch('{base}/echo'); return await r.json();"))],
    }))
    .await;
    let url = app.mcp_url("guarded");

    // No token, or a wrong one: 401 with a Bearer challenge.
    for header in [None, Some("Bearer wrong-token-000000000"), Some(TOKEN)] {
        let mut request = app
            .http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        if let Some(value) = header {
            request = request.header("authorization", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{header:?}");
        // RFC 6750's challenge with the reason, and a JSON-RPC error body that hosts show.
        let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_string();
        assert!(challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""), "{challenge}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["jsonrpc"], "2.0", "{body}");
        assert_eq!(body["id"], 1, "answers the request it refuses: {body}");
        assert_eq!(body["error"]["code"], -32001, "{body}");
        assert_eq!(body["error"]["data"]["code"], "unauthorized", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"headers\": {\"Authorization\": \"Bearer <token>\"}"), "{message}");
        let sent = if header.is_some() { "the access token sent is not the one" } else { "no access token was sent" };
        assert!(message.starts_with(sent), "{message}");
    }
    assert!(mcp_client(&url).await.is_err());

    // The right token works, and the MCP client's Authorization never reaches the upstream API.
    let client = client_with_token(&url, TOKEN).await.unwrap();
    let echoed = mcp_call(&client, "echo", json!({})).await.structured_content.unwrap();
    assert!(echoed["headers"].get("authorization").is_none(), "the host's token leaked upstream: {echoed}");
    assert!(!echoed.to_string().contains(TOKEN));
    client.cancel().await.unwrap();

    let (_, view) = app.get("/admin/servers/guarded").await;
    assert_eq!(view["access_token_set"], true);
    assert!(!view.to_string().contains(TOKEN), "the token is never shown");

    // Rotation: the old token stops working at once.
    let response = app
        .http
        .put(app.url("/admin/servers/guarded/access-token"))
        .json(&json!({"access_token": ROTATED}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(client_with_token(&url, TOKEN).await.is_err());
    let client = client_with_token(&url, ROTATED).await.unwrap();
    assert_eq!(client.list_tools(None).await.unwrap().tools.len(), 1);
    client.cancel().await.unwrap();

    // Removing it opens the mount.
    let response = app.http.delete(app.url("/admin/servers/guarded/access-token")).send().await.unwrap();
    assert_eq!(response.status(), 204);
    mcp_client(&url).await.unwrap().cancel().await.unwrap();

    // Bad tokens are refused with the error shape.
    let response = app
        .http
        .put(app.url("/admin/servers/guarded/access-token"))
        .json(&json!({"access_token": "short"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    error_message(&response.json().await.unwrap());
    let (status, body) = app
        .post("/admin/servers", &json!({"access_token": "has spaces in it, no", "tools": [tool("a", "return 1;")]}))
        .await;
    assert_eq!(status, 422, "{body}");
    let response = app
        .http
        .put(app.url("/admin/servers/missing/access-token"))
        .json(&json!({"access_token": ROTATED}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

/// A raw `tools/call` of `tool` with `token`: the status and the JSON body.
async fn raw_call(app: &TestApp, id: &str, tool: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let mut request =
        app.http.post(app.mcp_url(id)).header("accept", "application/json, text/event-stream").json(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": tool, "arguments": {}}}),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} not JSON ({e}): {text}")))
}

/// Calls admitted before a token change finish on the mount they started on (attack run D7:
/// rotating a token aborted every in-flight call with a 500); deleting a server mid-call answers
/// with a JSON-RPC error, not a bare 500 (D8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_calls_survive_a_token_change_and_see_a_clean_error_on_delete() {
    let app = Arc::new(spawn_app().await);
    let sleeper = tool("slow", "await new Promise(r => setTimeout(r, 600)); return 'done';");
    app.register(json!({"id": "rotating", "access_token": TOKEN, "tools": [sleeper.clone()]})).await;
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { raw_call(&app, "rotating", "slow", Some(TOKEN)).await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let rotated = app
        .http
        .put(app.url("/admin/servers/rotating/access-token"))
        .json(&json!({"access_token": ROTATED}))
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status(), 200);
    for call in calls {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["content"][0]["text"], "done", "{body}");
    }
    assert_eq!(raw_call(&app, "rotating", "slow", Some(TOKEN)).await.0, 401, "the old token is refused from then on");

    app.register(json!({"id": "doomed", "tools": [sleeper]})).await;
    let call = {
        let app = app.clone();
        tokio::spawn(async move { raw_call(&app, "doomed", "slow", None).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(app.delete("/admin/servers/doomed").await.0, 204);
    let (status, body) = call.await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{status}: {body}");
    assert_eq!(body["id"], 9, "{status}: {body}");
    assert!(body["error"]["message"].is_string() || body["result"].is_object(), "{status}: {body}");
}
