//! Mounts come and go while the daemon runs, and survive restarts.

use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_servers_answer_404_everywhere() {
    let app = spawn_app().await;
    app.register(json!({"id": "doomed", "tools": [tool("hi", "return 'hi';")]})).await;
    let client = app.mcp("doomed").await;
    assert_eq!(text_of(&mcp_call(&client, "hi", json!({})).await), "hi");

    let (status, _) = app.delete("/admin/servers/doomed").await;
    assert_eq!(status, 204);
    let (status, body) = app.get("/admin/servers/doomed").await;
    assert_eq!(status, 404);
    error_message(&body);
    let raw = app
        .http
        .post(app.mcp_url("doomed"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 404);
    let err = client.list_tools(None).await.unwrap_err().to_string();
    assert!(err.contains("404"), "{err}");
    assert!(mcp_client(&app.mcp_url("never-existed")).await.is_err());
    let (status, _) = app.delete("/admin/servers/doomed").await;
    assert_eq!(status, 404, "deleting twice is a 404, not a 500");
    // The id is free again.
    app.register(json!({"id": "doomed", "tools": [tool("hi", "return 'again';")]})).await;
    assert_eq!(text_of(&mcp_call(&app.mcp("doomed").await, "hi", json!({})).await), "again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_remounted_after_a_restart() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "durable",
        "allow_domains": [WEATHER_HOST],
        "tools": [tool("title", &format!("return (await (await fetch('{base}/items/5')).json()).title;"))],
    }))
    .await;
    let (status, _) = app.admin_call("durable", "title", json!({})).await;
    assert_eq!(status, 200);
    let data_dir = app.data_dir.clone();
    let upstream = app.upstream.clone();
    app.stop().await;

    let app = spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() }).await;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(ready["mounted"], 1);
    let client = app.mcp("durable").await;
    assert_eq!(text_of(&mcp_call(&client, "title", json!({})).await), "Item 5");
    let (_, calls) = app.get("/admin/servers/durable/calls").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 2, "the call log survived the restart");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_mounts_check_the_host_header() {
    let app = spawn_app().await;
    app.register(json!({"id": "hosts", "tools": [tool("hi", "return 'hi';")]})).await;
    let send = |host: &'static str| {
        app.http
            .post(app.mcp_url("hosts"))
            .header("host", host)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .send()
    };
    assert_eq!(send("evil.example").await.unwrap().status(), 403);
    assert_eq!(send("localhost").await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_log_keeps_the_newest_calls_per_server() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_CATALOG__MAX_CALLS_PER_SERVER".into(), "3".into())],
        ..AppOptions::default()
    })
    .await;
    app.register(json!({"id": "chatty", "tools": [{
        "name": "echo", "description": "echo", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "handler": "return args.n;"
    }]}))
    .await;
    for n in 0..5 {
        // One at a time, so each call lands in its own batch and the pruning runs in between.
        app.admin_call("chatty", "echo", json!({"n": n})).await;
        app.get("/admin/servers/chatty/calls?limit=1").await;
    }
    let (_, calls) = app.get("/admin/servers/chatty/calls?limit=100").await;
    let calls = calls["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{calls:?}");
}
