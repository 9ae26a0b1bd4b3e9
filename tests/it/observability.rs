//! Metrics after a known sequence of calls.

use std::collections::HashMap;

use serde_json::json;

use crate::helpers::*;

fn parse(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_egress_and_mounts() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    let other = app.upstream_url(OTHER_HOST);
    app.register(json!({
        "id": "metered",
        "allow_domains": [WEATHER_HOST],
        "tools": [
            tool("ok", "return 1;"),
            tool("fails", "throw new Error('no');"),
            tool("fetches", &format!("await fetch('{base}/items/1'); return 'fetched';")),
            tool("denied", &format!("await fetch('{other}/items/1');")),
            tool("spins", "while (true) {}"),
        ],
    }))
    .await;
    for (tool, times) in [("ok", 2), ("fails", 1), ("fetches", 1), ("denied", 1), ("spins", 1)] {
        for _ in 0..times {
            app.admin_call("metered", tool, json!({})).await;
        }
    }
    let response = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = response.text().await.unwrap();
    let metrics = parse(&text);
    let calls = |tool: &str, outcome: &str| {
        metrics
            .get(&format!("mcpbootd_tool_calls_total{{server=\"metered\",tool=\"{tool}\",outcome=\"{outcome}\"}}"))
            .copied()
    };
    assert_eq!(calls("ok", "ok"), Some(2.0), "{text}");
    assert_eq!(calls("fails", "error"), Some(1.0));
    assert_eq!(calls("fetches", "ok"), Some(1.0));
    assert_eq!(calls("denied", "denied"), Some(1.0));
    assert_eq!(calls("spins", "limit"), Some(1.0));
    assert_eq!(metrics["mcpbootd_tool_call_duration_seconds_count{server=\"metered\",tool=\"ok\"}"], 2.0);
    assert_eq!(metrics["mcpbootd_tool_call_duration_seconds_count{server=\"metered\",tool=\"spins\"}"], 1.0);
    assert_eq!(metrics[&format!("mcpbootd_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))], 1.0);
    assert_eq!(metrics["mcpbootd_egress_requests_total{outcome=\"allowed\"}"], 1.0);
    assert_eq!(metrics["mcpbootd_egress_requests_total{outcome=\"denied\"}"], 1.0);
    assert_eq!(metrics["mcpbootd_mounted_servers"], 1.0);
    assert_eq!(metrics["mcpbootd_isolate_workers"], 2.0);
    assert_eq!(metrics["mcpbootd_isolate_busy_workers"], 0.0);
    assert!(metrics.contains_key("mcpbootd_generations_total{outcome=\"ready\"}"));
    assert_eq!(metrics["mcpbootd_call_log_dropped_records_total"], 0.0, "no call record was lost");
    assert_eq!(metrics["mcpbootd_drift_checks_total{result=\"drifted\"}"], 0.0);
    assert_eq!(metrics["mcpbootd_version_changes_total{result=\"approved\"}"], 0.0);
    assert!(!text.contains("execution_id") && !text.contains("http://"), "no unbounded labels");

    app.delete("/admin/servers/metered").await;
    let text = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(!text.contains("server=\"metered\""), "a deleted server's series are dropped");
    assert_eq!(parse(&text)["mcpbootd_mounted_servers"], 0.0);
}

async fn metrics_text(app: &TestApp) -> HashMap<String, f64> {
    parse(&app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_client_mistakes_are_counted_by_server_without_made_up_ids() {
    let app = spawn_app().await;
    app.register(
        json!({"id": "guarded", "access_token": "metrics-token-0123456789", "tools": [tool("hi", "return 1;")]}),
    )
    .await;
    app.register(json!({"id": "open", "tools": [tool("hi", "return 1;")]})).await;
    let post = |path: String, host: Option<&'static str>, body: &'static str| {
        let mut request = app.http.post(app.url(&path)).header("content-type", "application/json").body(body);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        request.send()
    };
    let list = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
    for _ in 0..2 {
        assert_eq!(post("/servers/guarded/mcp".into(), None, list).await.unwrap().status(), 401);
    }
    for id in ["made-up-1", "made-up-2", "made-up-3"] {
        assert_eq!(post(format!("/servers/{id}/mcp"), None, list).await.unwrap().status(), 404);
    }
    assert_eq!(post("/servers/open/mcp".into(), Some("rebound.example"), list).await.unwrap().status(), 403);
    assert_eq!(post("/servers/open/mcp".into(), None, "{not json").await.unwrap().status(), 400);
    let unknown_tool = r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope"}}"#;
    assert_eq!(post("/servers/open/mcp".into(), None, unknown_tool).await.unwrap().status(), 200);

    let metrics = metrics_text(&app).await;
    let value = |key: &str| metrics.get(key).copied().unwrap_or_else(|| panic!("{key} missing in {metrics:?}"));
    assert_eq!(value("mcpbootd_mcp_rejections_total{server=\"guarded\",status=\"401\"}"), 2.0);
    assert_eq!(value("mcpbootd_mcp_rejections_total{server=\"unknown\",status=\"404\"}"), 3.0);
    assert_eq!(value("mcpbootd_mcp_rejections_total{server=\"open\",status=\"403\"}"), 1.0);
    assert_eq!(value("mcpbootd_mcp_client_errors_total{server=\"open\",kind=\"malformed_json\"}"), 1.0);
    assert_eq!(value("mcpbootd_mcp_client_errors_total{server=\"open\",kind=\"unknown_tool\"}"), 1.0);
    assert_eq!(value("mcpbootd_mcp_client_errors_total{server=\"open\",kind=\"host_not_allowed\"}"), 1.0);
    assert!(!metrics.keys().any(|k| k.contains("made-up")), "ids a client made up create no series");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_past_the_configured_number_share_the_other_label() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_METRICS__MAX_LABELLED_SERVERS".into(), "1".into())],
        ..AppOptions::default()
    })
    .await;
    for id in ["first", "second", "third"] {
        app.register(json!({"id": id, "tools": [tool("hi", "return 1;")]})).await;
        app.admin_call(id, "hi", json!({})).await;
    }
    let metrics = metrics_text(&app).await;
    let labelled: Vec<&String> = metrics.keys().filter(|k| k.starts_with("mcpbootd_tool_calls_total{")).collect();
    assert_eq!(labelled.len(), 2, "one server of its own plus other: {labelled:?}");
    assert_eq!(metrics["mcpbootd_tool_call_duration_seconds_count{server=\"other\",tool=\"other\"}"], 2.0);
}

/// A short session full of client mistakes, against the real binary with its default log
/// settings: nothing at WARN, everything counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_mistakes_are_not_warnings() {
    use std::process::Stdio;
    mcpbootd::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpbootd"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("MCPBOOTD_CATALOG__PATH", dir.path().join("c.db"))
        .env("MCPBOOTD_LOG__FORMAT", "json")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    assert!(wait_for_ready(&url).await, "the daemon started");
    let registered = http
        .post(format!("{url}/admin/servers"))
        .json(&json!({"id": "s", "tools": [tool("hi", "return 1;")]}))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201);
    let mcp = format!("{url}/servers/s/mcp");
    let send = |revision: &'static str, method: &'static str, body: serde_json::Value| {
        let mut request = http
            .post(&mcp)
            .header("mcp-protocol-version", revision)
            .header("mcp-method", method)
            .header("accept", "application/json, text/event-stream");
        if let Some(name) = body["params"]["name"].as_str() {
            request = request.header("mcp-name", name);
        }
        request.json(&body).send()
    };
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    for _ in 0..3 {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nope"}});
        send("2025-11-25", "tools/call", call).await.unwrap();
        let set_level = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "info"}});
        send("2025-11-25", "logging/setLevel", set_level).await.unwrap();
        let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"_meta": meta}});
        send("2026-07-28", "ping", ping).await.unwrap();
        let call =
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope", "_meta": meta}});
        send("2026-07-28", "tools/call", call).await.unwrap();
        // rmcp's own refusal (2026-07-28 needs Mcp-Method), counted as an invalid message.
        let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": meta}});
        http.post(&mcp).header("mcp-protocol-version", "2026-07-28").json(&list).send().await.unwrap();
    }
    let metrics = parse(&http.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap());
    assert_eq!(metrics["mcpbootd_mcp_client_errors_total{server=\"s\",kind=\"unknown_tool\"}"], 6.0, "{metrics:?}");
    assert_eq!(metrics["mcpbootd_mcp_client_errors_total{server=\"s\",kind=\"unsupported_method\"}"], 3.0);
    assert_eq!(metrics["mcpbootd_mcp_client_errors_total{server=\"s\",kind=\"method_not_found\"}"], 3.0);
    assert_eq!(metrics["mcpbootd_mcp_client_errors_total{server=\"s\",kind=\"invalid_message\"}"], 3.0);
    assert!(!metrics.keys().any(|k| k.starts_with("mcpbootd_mcp_rejections_total")), "no rejections: {metrics:?}");

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let output =
        tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    let warnings: Vec<&str> =
        log.lines().filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\"")).collect();
    assert!(warnings.is_empty(), "client mistakes logged as warnings:\n{}", warnings.join("\n"));
    assert!(log.contains("mcpbootd listening"), "the log was captured: {log}");
}

/// What the console's servers list and overview read: calls in the last hour per server, and
/// this daemon's calls/s, errors/s, latency and pool load over the last minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_list_and_overview_report_recent_calls() {
    let app = spawn_app().await;
    app.register(json!({"id": "busy", "tools": [tool("ok", "return 1;"), tool("fails", "throw new Error('no');")]}))
        .await;
    app.register(json!({"id": "idle", "tools": [tool("ok", "return 1;")]})).await;
    for tool in ["ok", "ok", "ok", "fails"] {
        app.admin_call("busy", tool, json!({})).await;
    }
    let (status, list) = app.get("/admin/servers").await;
    assert_eq!(status, 200);
    let summary = |id: &str| list["servers"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap().clone();
    // The call log is written in batches: the list reflects it within moments.
    let mut busy = summary("busy");
    for _ in 0..50 {
        if busy["calls_last_hour"] == 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        busy = app.get("/admin/servers").await.1["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "busy")
            .unwrap()
            .clone();
    }
    assert_eq!((busy["calls_last_hour"].as_i64(), busy["errors_last_hour"].as_i64()), (Some(4), Some(1)), "{busy}");
    assert_eq!(summary("idle")["calls_last_hour"], 0);

    // A sample is taken at start and every 5 s: the first interval holds the four calls.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let overview = loop {
        let (status, overview) = app.get("/admin/overview").await;
        assert_eq!(status, 200, "{overview}");
        if overview["samples"].as_array().unwrap().iter().any(|p| p["calls_per_second"].as_f64().unwrap() > 0.0) {
            break overview;
        }
        assert!(std::time::Instant::now() < deadline, "no sample counted the calls: {overview}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert_eq!(overview["interval_seconds"], 5);
    assert_eq!(overview["mounted_servers"], 2);
    let point =
        overview["samples"].as_array().unwrap().iter().find(|p| p["calls_per_second"].as_f64().unwrap() > 0.0).unwrap();
    let seconds = overview["interval_seconds"].as_f64().unwrap();
    let calls = point["calls_per_second"].as_f64().unwrap() * seconds;
    let errors = point["errors_per_second"].as_f64().unwrap() * seconds;
    assert!((3.0..=5.0).contains(&calls) && (0.5..=1.5).contains(&errors), "about 4 calls and 1 error in 5 s: {point}");
    assert!(
        point["p50_ms"].as_f64().unwrap() > 0.0
            && point["p99_ms"].as_f64().unwrap() >= point["p50_ms"].as_f64().unwrap()
    );
    assert_eq!(point["workers"], 2);
    assert!(point["at"].as_str().unwrap().ends_with('Z'));
}

/// The call log's filters: tool, outcome, a time window and one execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_log_filters_by_tool_outcome_time_and_execution() {
    let app = spawn_app().await;
    app.register(
        json!({"id": "filtered", "tools": [tool("ok", "return 1;"), tool("fails", "throw new Error('no');")]}),
    )
    .await;
    let mut executions = Vec::new();
    for tool in ["ok", "fails", "ok"] {
        let (_, result) = app.admin_call("filtered", tool, json!({})).await;
        executions.push(result["execution_id"].as_str().unwrap().to_string());
    }
    let calls = |query: &'static str| {
        let app = &app;
        async move {
            let (status, body) = app.get(&format!("/admin/servers/filtered/calls{query}")).await;
            assert_eq!(status, 200, "{query}: {body}");
            body["calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["tool"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(calls("").await, ["ok", "fails", "ok"]);
    assert_eq!(calls("?tool=ok").await, ["ok", "ok"]);
    assert_eq!(calls("?outcome=error").await, ["fails"]);
    assert_eq!(calls("?tool=fails&outcome=ok").await, Vec::<String>::new());
    assert_eq!(calls("?since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00.000Z").await.len(), 3);
    assert_eq!(calls("?since=2999-01-01T00:00:00Z").await, Vec::<String>::new());
    assert_eq!(calls("?until=2000-01-01T00:00:00Z").await, Vec::<String>::new());
    assert_eq!(calls("?limit=1&tool=ok").await, ["ok"]);
    let (_, one) = app.get(&format!("/admin/servers/filtered/calls?execution_id={}", executions[1])).await;
    assert_eq!(one["calls"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["calls"][0]["execution_id"], executions[1].as_str());

    for (query, says) in
        [("?since=yesterday", "since \"yesterday\" is not a time"), ("?outcome=meh", "outcome"), ("?tools=ok", "tools")]
    {
        let (status, body) = app.get(&format!("/admin/servers/filtered/calls{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(error_message(&body).contains(says), "{query}: {body}");
    }
}

/// A handler's console and error may hold NUL characters, which PostgreSQL's TEXT cannot: the
/// call is logged all the same (each NUL shown as U+FFFD), on either catalog backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_console_and_error_hold_nul_is_logged() {
    let app = spawn_app().await;
    app.register(
        json!({"id": "nul", "tools": [tool("nul", "console.log('before\\0after'); throw new Error('bad\\0byte');")]}),
    )
    .await;
    let (status, result) = app.admin_call("nul", "nul", json!({})).await;
    assert_eq!(status, 200, "{result}");
    let execution = result["execution_id"].as_str().unwrap().to_string();
    let (status, body) = app.get(&format!("/admin/servers/nul/calls?execution_id={execution}")).await;
    assert_eq!(status, 200, "{body}");
    let call = &body["calls"][0];
    assert_eq!(call["outcome"], "error", "{body}");
    assert!(call["console"].as_str().unwrap().contains("before\u{FFFD}after"), "{body}");
    assert!(call["error"].as_str().unwrap().contains("bad\u{FFFD}byte"), "{body}");
    let metrics = metrics_text(&app).await;
    assert_eq!(metrics.get("mcpbootd_call_log_dropped_records_total").copied().unwrap_or(0.0), 0.0);
}
