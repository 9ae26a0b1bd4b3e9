//! The whitelist as handlers meet it: allowed hosts, denied hosts, and servers kept apart; and
//! the egress log, which holds every request that reached the network.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_domain_throws_a_type_error_and_is_logged() {
    let app = spawn_app().await;
    let other = app.upstream_url(OTHER_HOST);
    app.register(json!({
        "id": "fenced",
        "allow_domains": [WEATHER_HOST],
        "tools": [
            tool("escape", &format!("await fetch('{other}/items/1'); return 'reached';")),
            tool("inspect", &format!("try {{ await fetch('{other}/items/1'); }} catch (e) {{ return {{ name: e.name, message: e.message }}; }}")),
        ],
    }))
    .await;
    let client = app.mcp("fenced").await;
    let result = mcp_call(&client, "escape", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    let message = text_of(&result);
    assert!(message.contains(OTHER_HOST) && message.contains("allow_domains"), "{message}");

    let caught = mcp_call(&client, "inspect", json!({})).await.structured_content.unwrap();
    assert_eq!(caught["name"], "TypeError");
    assert!(caught["message"].as_str().unwrap().contains("not allowed by network policy"), "{caught}");
    assert!(!caught["message"].as_str().unwrap().contains("127.0.0.1"), "no resolved addresses leak: {caught}");
    assert!(app.upstream.requests().is_empty(), "nothing reached the upstream");

    let (_, calls) = app.get("/admin/servers/fenced/calls").await;
    let escape = calls["calls"].as_array().unwrap().iter().find(|c| c["tool"] == "escape").unwrap().clone();
    assert_eq!(escape["outcome"], "denied");
    assert_eq!(escape["egress"][0]["allowed"], false);
    assert_eq!(escape["egress"][0]["host"], OTHER_HOST);
    assert!(escape["egress"][0]["reason"].as_str().unwrap().contains("whitelist"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subdomains_yes_parents_and_look_alikes_no() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_EGRESS__RESOLVE__v1.api.weather.test".into(), "127.0.0.1".into()),
            ("MCPBOOTD_EGRESS__RESOLVE__weather.test".into(), "127.0.0.1".into()),
            ("MCPBOOTD_EGRESS__RESOLVE__evilapi.weather.test".into(), "127.0.0.1".into()),
            ("MCPBOOTD_EGRESS__RESOLVE__api.weather.test.evil.test".into(), "127.0.0.1".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let port = app.upstream.address.port();
    let probe = "try { const r = await fetch(args.url); return r.status; } catch (e) { return e.message; }";
    app.register(json!({
        "id": "probe",
        "allow_domains": [WEATHER_HOST],
        "tools": [{"name": "probe", "description": "fetch a URL", "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}, "handler": probe}],
    }))
    .await;
    let cases = [
        (format!("http://{WEATHER_HOST}:{port}/items/1"), true),
        (format!("http://API.WEATHER.TEST.:{port}/items/1"), true),
        (format!("http://v1.api.weather.test:{port}/items/1"), true),
        (format!("http://weather.test:{port}/items/1"), false),
        (format!("http://evilapi.weather.test:{port}/items/1"), false),
        (format!("http://api.weather.test.evil.test:{port}/items/1"), false),
        (format!("http://127.0.0.1:{port}/items/1"), false),
        (format!("http://user:pw@{WEATHER_HOST}:{port}/items/1"), false),
        (format!("ftp://{WEATHER_HOST}/x"), false),
    ];
    for (url, allowed) in cases {
        let (status, body) = app.admin_call("probe", "probe", json!({"url": url})).await;
        assert_eq!(status, 200);
        let text = body["result"]["content"][0]["text"].as_str().unwrap().to_string();
        if allowed {
            assert_eq!(text, "200", "{url} should be allowed: {text}");
        } else {
            assert!(text.contains("not allowed by network policy"), "{url} should be denied: {text}");
        }
    }
    // A relative URL has no host to check; fetch refuses it before any policy decision.
    let (_, body) = app.admin_call("probe", "probe", json!({"url": "/relative"})).await;
    assert!(body["result"]["content"][0]["text"].as_str().unwrap().contains("not an absolute"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_called_concurrently_cannot_reach_each_others_domains() {
    let app = spawn_app().await;
    let port = app.upstream.address.port();
    let handler = "try { const r = await fetch(args.url); return 'reached ' + r.status; } catch (e) { return 'denied: ' + e.message; }";
    let schema = json!({"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]});
    for (id, domain) in [("weather", WEATHER_HOST), ("other", OTHER_HOST)] {
        app.register(json!({
            "id": id,
            "allow_domains": [domain],
            "tools": [{"name": "get", "description": "fetch", "input_schema": schema, "handler": handler}],
        }))
        .await;
    }
    let weather = app.mcp("weather").await;
    let other = app.mcp("other").await;
    let weather_url = format!("http://{WEATHER_HOST}:{port}/items/1");
    let other_url = format!("http://{OTHER_HOST}:{port}/items/1");
    let mut tasks = Vec::new();
    for round in 0..8 {
        let (own, foreign) = (weather_url.clone(), other_url.clone());
        let (own2, foreign2) = (other_url.clone(), weather_url.clone());
        let client = if round % 2 == 0 { &weather } else { &other };
        let (mine, theirs) = if round % 2 == 0 { (own, foreign) } else { (own2, foreign2) };
        tasks.push(async move {
            let (a, b) = tokio::join!(
                mcp_call(client, "get", json!({"url": mine})),
                mcp_call(client, "get", json!({"url": theirs}))
            );
            (text_of(&a), text_of(&b))
        });
    }
    for (own, foreign) in futures_util::future::join_all(tasks).await {
        assert_eq!(own, "reached 200");
        assert!(foreign.starts_with("denied:"), "{foreign}");
    }
    let hosts: Vec<String> = app.upstream.requests().iter().map(|r| r.host.clone()).collect();
    assert_eq!(hosts.len(), 8);
    weather.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_addresses_are_refused_unless_allowed() {
    // Same mapping as every test, but private networks are not allowed: the loopback target is refused
    // even though the host name is whitelisted.
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".into(), "false".into())],
        ..AppOptions::default()
    })
    .await;
    let base = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "private",
        "allow_domains": [WEATHER_HOST, "127.0.0.1"],
        "tools": [
            tool("by_name", &format!("try {{ await fetch('{base}/items/1'); return 'reached'; }} catch (e) {{ return e.message; }}")),
            tool("by_ip", &format!("try {{ await fetch('http://127.0.0.1:{}/items/1'); return 'reached'; }} catch (e) {{ return e.message; }}", app.upstream.address.port())),
        ],
    }))
    .await;
    for tool_name in ["by_name", "by_ip"] {
        let (_, body) = app.admin_call("private", tool_name, json!({})).await;
        let text = body["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("not allowed by network policy"), "{tool_name}: {text}");
    }
    assert!(app.upstream.requests().is_empty());
    let (_, calls) = app.get("/admin/servers/private/calls").await;
    let reasons: Vec<String> = calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["egress"][0]["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(reasons.iter().all(|r| r.contains("not a public address")), "{reasons:?}");
}

/// Every request that reaches the network is in its call's egress log, also one the handler
/// started and never awaited, still in flight when the call ended; a request the call never
/// got to send (queued behind `max_concurrent_fetches`) is neither sent nor logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_still_in_flight_when_a_call_ends_are_in_its_egress_log() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    // Long enough for a request the handler started to have left before the call ends.
    let linger = "await new Promise(r => setTimeout(r, 300));";
    app.register(json!({"id": "dangling", "allow_domains": [WEATHER_HOST], "tools": [
        tool("one", &format!("fetch('{base}/held/5000'); {linger} return 'done';")),
        tool("eight", &format!("for (let i = 0; i < 8; i++) fetch(`{base}/held/510${{i}}`); {linger} return 'done';")),
        tool("at_once", &format!("for (let i = 0; i < 3; i++) fetch(`{base}/held/520${{i}}`); return 'done';")),
    ]}))
    .await;
    let client = app.mcp("dangling").await;
    for name in ["one", "eight", "at_once"] {
        assert_eq!(text_of(&mcp_call(&client, name, json!({})).await), "done", "{name}");
    }
    // A request sent just as its call ended has arrived by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, calls) = app.get("/admin/servers/dangling/calls").await;
    for (name, prefix) in [("one", "/held/50"), ("eight", "/held/51"), ("at_once", "/held/52")] {
        let seen: BTreeSet<String> =
            app.upstream.requests().into_iter().map(|r| r.path).filter(|path| path.starts_with(prefix)).collect();
        let call = calls["calls"].as_array().unwrap().iter().find(|c| c["tool"] == name).unwrap();
        let rows = call["egress"].as_array().unwrap();
        let logged: BTreeSet<String> = rows.iter().map(|row| row["path"].as_str().unwrap().to_string()).collect();
        assert!(seen.is_subset(&logged), "{name}: the upstream saw {seen:?}, the log has {logged:?}");
        for row in rows {
            assert_eq!((&row["allowed"], &row["status"]), (&json!(true), &Value::Null), "{row}");
            let reason = row["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("the call ended"), "{name}: {row}");
        }
        if name != "at_once" {
            // These waited: what they started had left, and what they queued never did.
            assert!(!seen.is_empty(), "{name}: nothing reached the upstream within the wait");
            assert_eq!(seen, logged, "{name}");
        }
        if name == "eight" {
            assert!(seen.len() <= 6, "at most six are in flight at once: {seen:?}");
        }
    }
    client.cancel().await.unwrap();
    app.stop().await;
}
