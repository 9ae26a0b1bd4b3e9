//! Isolation under load: spinning handlers on every worker do not stall the daemon, calls past the
//! in-flight cap wait in the queue, calls past the queue bound fail fast with a clear "busy" error,
//! and one server's calls parked on a slow upstream do not hold up another server.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_spinning_leaves_admin_and_health_responsive() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "2".into()),
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT".into(), "2".into()),
            ("MCPBOOTD_SANDBOX__QUEUE".into(), "2".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "1500".into()),
            // The spinners must end on their CPU limit (CPU time) even on a loaded machine.
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "20000".into()),
            ("MCPBOOTD_SANDBOX__QUEUE_TIMEOUT_MS".into(), "20000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    app.register(json!({"id": "load", "tools": [tool("spin", "while (true) {}"), tool("pure", "return 'done';")]}))
        .await;

    let call = |tool: &'static str| {
        let http = app.http.clone();
        let url = app.url(&format!("/admin/servers/load/tools/{tool}/call"));
        tokio::spawn(async move {
            let response = http.post(url).json(&json!({"arguments": {}})).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        })
    };
    let spinners = [call("spin"), call("spin")];
    // Let both workers pick up a spinner before queueing more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let queued = [call("pure"), call("pure")];
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Past the queue bound: a clear, immediate "busy".
    let started = Instant::now();
    let (status, body) = app.admin_call("load", "pure", json!({})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "busy");
    assert!(error_message(&body).contains("busy"));
    assert!(error_message(&body).contains("[sandbox] queue"), "{body}");
    let busy_latency = started.elapsed();

    // The daemon itself keeps answering while every worker spins.
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(app.get("/healthz").await.0, 200);
        assert_eq!(app.get("/admin/servers").await.0, 200);
    }
    let health_latency = started.elapsed() / 40;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert!(spinners.iter().all(|s| !s.is_finished()), "spinners should still be running");
    println!(
        "busy error after {busy_latency:?}; health/admin answered in {health_latency:?} on average while all workers spun"
    );

    for spinner in spinners {
        let (status, body) = spinner.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body["outcome"], "limit", "{body}");
    }
    for queued in queued {
        let (status, body) = queued.await.unwrap();
        assert_eq!(status, 200, "a queued call waits for a slot instead of failing: {body}");
        assert_eq!(body["result"]["content"][0]["text"], "done");
    }
    let (_, calls) = app.get("/admin/servers/load/calls").await;
    let outcomes: Vec<&str> =
        calls["calls"].as_array().unwrap().iter().map(|c| c["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == "busy").count(), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == "limit").count(), 2, "{outcomes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_parked_on_a_slow_upstream_do_not_hold_up_another_server() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "1".into()),
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER".into(), "40".into()),
            ("MCPBOOTD_SANDBOX__MAX_QUEUED_PER_SERVER".into(), "2".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let slow_url = format!("{}/sleep/1500", app.upstream_url(WEATHER_HOST));
    app.register(json!({"id": "slow", "allow_domains": [WEATHER_HOST], "tools": [
        tool("wait", &format!("const r = await fetch('{slow_url}'); return await r.json();")),
    ]}))
    .await;
    app.register(json!({"id": "quick", "tools": [tool("pure", "return args.n * 2;")]})).await;

    // 40 calls park on the slow upstream (the server's cap), 2 more wait in its queue.
    let parked: Vec<_> = (0..42)
        .map(|_| {
            let http = app.http.clone();
            let url = app.url("/admin/servers/slow/tools/wait/call");
            tokio::spawn(async move {
                let response = http.post(url).json(&json!({"arguments": {}})).send().await.unwrap();
                (response.status().as_u16(), response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        if metrics.contains("mcpbootd_isolate_in_flight_calls 40") && metrics.contains("mcpbootd_isolate_queue_depth 2")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the slow server never reached its cap:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Its next call is refused at once, naming the setting...
    let (status, body) = app.admin_call("slow", "wait", json!({})).await;
    assert_eq!(status, 503, "{body}");
    assert!(error_message(&body).contains("max_queued_per_server"), "{body}");
    // ...and over MCP it is a tool error the model can read.
    let client = app.mcp("slow").await;
    let refused = mcp_call(&client, "wait", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(text_of(&refused).starts_with("busy: "), "{}", text_of(&refused));

    // The other server's calls run on the same single worker while all of that is parked.
    let quick = app.mcp("quick").await;
    for n in 0..20 {
        let result = mcp_call(&quick, "pure", json!({"n": n})).await;
        assert_eq!(text_of(&result), (n * 2).to_string());
    }
    assert!(parked.iter().all(|call| !call.is_finished()), "the quick calls finished while the slow ones were parked");

    for call in parked {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "ok", "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_frees_its_call() {
    let app = spawn_app().await;
    let slow_url = format!("{}/sleep/20000", app.upstream_url(WEATHER_HOST));
    app.register(json!({"id": "slow", "allow_domains": [WEATHER_HOST], "tools": [
        tool("wait", &format!("setTimeout(() => {{}}, 20000); const r = await fetch('{slow_url}'); return await r.json();")),
    ]}))
    .await;
    // A raw MCP request whose client gives up after 300 ms and closes the connection.
    let abandoned = app
        .http
        .post(app.mcp_url("slow"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .timeout(Duration::from_millis(300))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}))
        .send()
        .await;
    assert!(abandoned.is_err(), "the request should have timed out on the client side");

    // The call is dropped, with its fetch and timer, long before either would finish.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        if metrics.contains("mcpbootd_isolate_in_flight_calls 0") {
            break;
        }
        assert!(Instant::now() < deadline, "the abandoned call is still in flight:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, calls) = app.get("/admin/servers/slow/calls").await;
    let call = &calls["calls"][0];
    assert_eq!(call["outcome"], "cancelled", "{calls}");
    assert!(call["error"].as_str().unwrap().starts_with("cancelled"), "{calls}");
}
