//! Mounts come and go while the daemon runs, and survive restarts.

use std::time::{Duration, Instant};

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
    assert!(err.contains("no server \"doomed\" is mounted here"), "{err}");
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

    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(ready["mounted"], 1);
    assert_eq!(ready["engine"], "quickjs-wasm", "{ready}");
    let client = app.mcp("durable").await;
    assert_eq!(text_of(&mcp_call(&client, "title", json!({})).await), "Item 5");
    let (_, calls) = app.get("/admin/servers/durable/calls").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 2, "the call log survived the restart");
    client.cancel().await.unwrap();
}

/// Mounts are built on first use after a restart; concurrent first requests share one build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_after_a_restart_are_all_served() {
    let app = spawn_app().await;
    for i in 0..3 {
        app.register(json!({"id": format!("lazy-{i}"), "tools": [tool("hi", &format!("return 'hi {i}';"))]})).await;
    }
    let data_dir = app.data_dir.clone();
    let upstream = app.upstream.clone();
    app.stop().await;

    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    assert_eq!(app.get("/readyz").await.1["mounted"], 3);
    let requests: Vec<_> = (0..12)
        .map(|n| {
            let request = app
                .http
                .post(app.mcp_url(&format!("lazy-{}", n % 3)))
                .header("accept", "application/json, text/event-stream")
                .json(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/list"}));
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap())
            })
        })
        .collect();
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["tools"][0]["name"], "hi", "{body}");
    }
    for i in 0..3 {
        let (status, body) = app.admin_call(&format!("lazy-{i}"), "hi", json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["content"][0]["text"], format!("hi {i}"));
    }
}

/// A stored server that can no longer be built (here: a schema the validator refuses) answers
/// with the reason on both doors, without taking other servers or the daemon down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_server_that_cannot_be_built_answers_with_the_reason() {
    if crate::helpers::on_postgres() {
        return; // works on the SQLite catalog file itself
    }
    let app = spawn_app().await;
    app.register(json!({"id": "broken", "tools": [tool("hi", "return 'hi';")]})).await;
    app.register(json!({"id": "fine", "tools": [tool("hi", "return 'fine';")]})).await;
    let data_dir = app.data_dir.clone();
    let upstream = app.upstream.clone();
    app.stop().await;
    let catalog =
        sqlx::SqlitePool::connect(&format!("sqlite://{}", catalog_path(data_dir.path()).display())).await.unwrap();
    sqlx::query(
        "UPDATE tools SET input_schema = ?
         WHERE generation_id = (SELECT active_generation_id FROM servers WHERE id = 'broken')",
    )
    .bind(r#"{"type": "object", "properties": {"q": {"type": "string", "pattern": "("}}}"#)
    .execute(&catalog)
    .await
    .unwrap();
    catalog.close().await;

    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["mounted"], 2);
    // The failure is kept: asking again gives the same answer.
    for _ in 0..2 {
        let (status, body) = app.admin_call("broken", "hi", json!({})).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "server_unavailable");
        assert!(error_message(&body).contains("input schema of tool \"hi\""), "{body}");
    }
    let response = app
        .http
        .post(app.mcp_url("broken"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["data"]["code"], "server_unavailable", "{body}");
    assert_eq!(body["id"], 1, "{body}");

    assert_eq!(text_of(&mcp_call(&app.mcp("fine").await, "hi", json!({})).await), "fine");
    assert_eq!(app.delete("/admin/servers/broken").await.0, 204);
    assert_eq!(app.admin_call("broken", "hi", json!({})).await.0, 404);
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

/// The status `/servers/{id}/mcp` answers a `tools/list` with (404: nothing mounted there).
async fn mount_status(app: &TestApp, id: &str) -> u16 {
    app.http
        .post(app.mcp_url(id))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Registration, token rotation, deletion and reads of one id, raced (attack run D5, D9): the
/// mount always ends up agreeing with the catalog, and no racer gets a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_changes_to_one_id_leave_the_mount_agreeing_with_the_catalog() {
    let app = spawn_app().await;
    let body = json!({"id": "raced", "tools": [tool("hi", "return 'hi';")]});
    let token = json!({"access_token": "raced-token-0123456789"});
    let mut deleted_but_served = 0;
    for round in 0..40 {
        let (status, _) = app.post("/admin/servers", &body).await;
        assert!(status == 201 || status == 409, "round {round}: register answered {status}");
        let put_token = async {
            let response =
                app.http.put(app.url("/admin/servers/raced/access-token")).json(&token).send().await.unwrap();
            ("PUT token", response.status().as_u16())
        };
        let register = async { ("POST", app.post("/admin/servers", &body).await.0) };
        let delete = async { ("DELETE", app.delete("/admin/servers/raced").await.0) };
        let get = async { ("GET", app.get("/admin/servers/raced").await.0) };
        let get_again = async {
            tokio::task::yield_now().await;
            ("GET", app.get("/admin/servers/raced").await.0)
        };
        let answers = tokio::join!(put_token, register, delete, get, get_again);
        for (what, status) in [answers.0, answers.1, answers.2, answers.3, answers.4] {
            assert!(matches!(status, 200 | 201 | 204 | 404 | 409), "round {round}: {what} answered {status}");
        }
        let in_catalog = app.get("/admin/servers/raced").await.0 == 200;
        let mounted = mount_status(&app, "raced").await != 404;
        if !in_catalog && mounted {
            deleted_but_served += 1;
        }
        assert_eq!(mounted, in_catalog, "round {round}: catalog says {in_catalog}, mount says {mounted}");
        app.delete("/admin/servers/raced").await;
    }
    assert_eq!(deleted_but_served, 0);
}

/// A delete the catalog refuses (attack run D10; here a trigger stands in for immutable files)
/// leaves the server whole and served; once the catalog allows it, the delete goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_fails_in_the_catalog_leaves_the_server_served() {
    if crate::helpers::on_postgres() {
        return; // works on the SQLite catalog file itself
    }
    let app = spawn_app().await;
    app.register(json!({"id": "kept", "tools": [tool("hi", "return 'still here';")]})).await;
    let catalog =
        sqlx::SqlitePool::connect(&format!("sqlite://{}", catalog_path(app.data_dir.path()).display())).await.unwrap();
    sqlx::query("CREATE TRIGGER refuse_deletes BEFORE DELETE ON servers BEGIN SELECT RAISE(ABORT, 'read-only'); END")
        .execute(&catalog)
        .await
        .unwrap();

    let (status, body) = app.delete("/admin/servers/kept").await;
    assert_eq!(status, 500, "{body}");
    error_message(&body);
    let (status, view) = app.get("/admin/servers/kept").await;
    assert_eq!((status, view["status"].as_str()), (200, Some("ready")), "{view}");
    assert_eq!(text_of(&mcp_call(&app.mcp("kept").await, "hi", json!({})).await), "still here");

    sqlx::query("DROP TRIGGER refuse_deletes").execute(&catalog).await.unwrap();
    catalog.close().await;
    assert_eq!(app.delete("/admin/servers/kept").await.0, 204);
    assert_eq!(mount_status(&app, "kept").await, 404);
}

/// A call in flight on a server that is deleted is stopped and answered at once with HTTP 200
/// and a JSON-RPC error saying the server was deleted during the call (hosts drop the body of a
/// 5xx answer, and the message is all they can show). A code-mode script is answered the same
/// way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_on_a_deleted_server_is_told_the_server_was_deleted() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_CODE_MODE__ENABLED".into(), "true".into())],
        ..AppOptions::default()
    })
    .await;
    let base = app.upstream_url(WEATHER_HOST);
    let script = json!({"code": "return await call_tool('scripted', 'wait', {});"});
    for (id, held, tool_name, arguments) in
        [("plain", "/held/8000", "wait", json!({})), ("scripted", "/held/8001", "code_execution", script)]
    {
        let handler = format!("const r = await fetch('{base}{held}'); return await r.json();");
        app.register(json!({"id": id, "allow_domains": [WEATHER_HOST], "code_mode": {"enabled": true},
            "tools": [tool("wait", &handler)]}))
            .await;
        let request = app
            .http
            .post(app.mcp_url(id))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool_name, "arguments": arguments}}))
            .send();
        let started = Instant::now();
        let call = tokio::spawn(request);
        // In flight: its request has reached the upstream, which holds the answer for 8 s.
        while !app.upstream.requests().iter().any(|r| r.path == held) {
            assert!(started.elapsed() < Duration::from_secs(5), "{id}: the call never fetched");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(app.delete(&format!("/admin/servers/{id}")).await.0, 204);
        let response = call.await.unwrap().unwrap();
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(6), "{id}: answered only when the call ended");
        assert_eq!(status, 200, "{id}: {body}");
        assert_eq!(body["id"], 7, "{id}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_else(|| panic!("{id}: {body}"));
        assert!(
            message.contains(&format!("server \"{id}\" was deleted while this call was running")),
            "{id}: {message}"
        );
    }
    app.stop().await;
}
