//! Isolation under load: spinning handlers on every worker do not stall the daemon, queued calls
//! wait for a worker, and calls past the queue bound fail fast with a clear "busy" error.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_spinning_leaves_admin_and_health_responsive() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "2".into()),
            ("MCPBOOTD_SANDBOX__QUEUE".into(), "2".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "1500".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    app.register(json!({"id": "load", "tools": [tool("spin", "while (true) {}"), tool("pure", "return 'done';")]})).await;

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
    println!("busy error after {busy_latency:?}; health/admin answered in {health_latency:?} on average while all workers spun");

    for spinner in spinners {
        let (status, body) = spinner.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body["outcome"], "limit", "{body}");
    }
    for queued in queued {
        let (status, body) = queued.await.unwrap();
        assert_eq!(status, 200, "a queued call waits for a worker instead of failing: {body}");
        assert_eq!(body["result"]["content"][0]["text"], "done");
    }
    let (_, calls) = app.get("/admin/servers/load/calls").await;
    let outcomes: Vec<&str> = calls["calls"].as_array().unwrap().iter().map(|c| c["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == "busy").count(), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == "limit").count(), 2, "{outcomes:?}");
}
