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
    assert_eq!(metrics["mcpbootd_tool_call_duration_seconds_count"], 6.0);
    assert_eq!(metrics["mcpbootd_egress_requests_total{outcome=\"allowed\"}"], 1.0);
    assert_eq!(metrics["mcpbootd_egress_requests_total{outcome=\"denied\"}"], 1.0);
    assert_eq!(metrics["mcpbootd_mounted_servers"], 1.0);
    assert_eq!(metrics["mcpbootd_isolate_workers"], 2.0);
    assert_eq!(metrics["mcpbootd_isolate_busy_workers"], 0.0);
    assert!(metrics.contains_key("mcpbootd_generations_total{outcome=\"ready\"}"));
    assert!(!text.contains("execution_id") && !text.contains("http://"), "no unbounded labels");

    app.delete("/admin/servers/metered").await;
    let text = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(!text.contains("server=\"metered\""), "a deleted server's series are dropped");
    assert_eq!(parse(&text)["mcpbootd_mounted_servers"], 0.0);
}
