//! Every sandbox limit ends only its own call, with an error that names the limit.

use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_ends_the_call_with_a_named_error() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__MAX_FETCHES".into(), "3".into()),
            ("MCPBOOTD_SANDBOX__MAX_RESULT_BYTES".into(), "10000".into()),
            ("MCPBOOTD_SANDBOX__MAX_RESPONSE_BYTES".into(), "1000".into()),
            // No case here waits for the wall clock; a generous one lets the CPU limit (CPU
            // time, 500 ms) end the spinning cases first even on a heavily loaded machine.
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "20000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let base = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "limits",
        "allow_domains": [WEATHER_HOST],
        "tools": [
            tool("spin", "while (true) {}"),
            tool("spin_after_await", "await null; for (;;) {}"),
            // Megabyte pieces reach the 32 MB limit in a few dozen allocations, using little CPU
            // time, so a loaded machine cannot make the CPU limit fire first.
            tool("hoard", "const a = []; while (true) a.push('x'.repeat(1 << 20) + a.length);"),
            tool("recurse", "function f(n) { return f(n + 1) + 1; } return f(0);"),
            tool("catch_and_continue", "try { while (true) {} } catch (e) {} return 'escaped';"),
            tool("fetch_storm", &format!("for (let i = 0; i < 10; i++) {{ try {{ await fetch('{base}/items/1'); }} catch (e) {{}} }} return 'done';")),
            tool("huge_result", "return 'y'.repeat(20000);"),
            tool("huge_response", &format!("const r = await fetch('{base}/big'); return (await r.text()).length;")),
            tool("never", "await new Promise(() => {});"),
        ],
    }))
    .await;
    let client = app.mcp("limits").await;
    let cases = [
        ("spin", "cpu"),
        ("spin_after_await", "cpu"),
        ("hoard", "memory"),
        ("recurse", "stack"),
        ("catch_and_continue", "cpu"),
        ("fetch_storm", "max_fetches"),
        ("huge_result", "max_result_bytes"),
        ("huge_response", "max_response_bytes"),
        ("never", "time"),
    ];
    for (tool_name, limit) in cases {
        let result = mcp_call(&client, tool_name, json!({})).await;
        let message = text_of(&result).to_lowercase();
        assert_eq!(result.is_error, Some(true), "{tool_name}: {message}");
        assert!(message.contains(limit), "{tool_name}: expected the message to name {limit:?}: {message}");
    }
    let (_, calls) = app.get("/admin/servers/limits/calls?limit=20").await;
    for call in calls["calls"].as_array().unwrap() {
        let outcome = call["outcome"].as_str().unwrap();
        let tool = call["tool"].as_str().unwrap();
        let expected: &[&str] = if tool == "huge_response" { &["error", "limit"] } else { &["limit", "timeout"] };
        assert!(expected.contains(&outcome), "{tool} logged as {outcome}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_keeps_answering_while_handlers_spin() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_SANDBOX__CPU_MS".into(), "1500".into()), ("MCPBOOTD_SANDBOX__WORKERS".into(), "2".into())],
        ..AppOptions::default()
    })
    .await;
    app.register(json!({"id": "busy", "tools": [tool("spin", "while (true) {}"), tool("pure", "return 42;")]})).await;
    let spinner = {
        let http = app.http.clone();
        let url = app.url("/admin/servers/busy/tools/spin/call");
        tokio::spawn(async move { http.post(url).json(&json!({"arguments": {}})).send().await.unwrap().status() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // One worker spins; health checks, the admin API and other calls still answer.
    let started = std::time::Instant::now();
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200);
    let (status, _) = app.get("/admin/servers").await;
    assert_eq!(status, 200);
    let (status, body) = app.admin_call("busy", "pure", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["content"][0]["text"], "42");
    assert!(!spinner.is_finished(), "the spinning call should still be running while the others answered");
    eprintln!("answered beside a spinning handler in {:?}", started.elapsed());
    assert_eq!(spinner.await.unwrap(), 200);
}
