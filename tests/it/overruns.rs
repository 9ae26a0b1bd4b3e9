//! No JavaScript input holds an isolate worker past its wall limit plus about a second: a call
//! stuck inside a built-in QuickJS cannot interrupt is ended with a timeout, its worker process
//! is replaced, and every server's calls go on (attack run D1).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

/// Converting a BigInt at QuickJS's size cap to decimal is one native operation of about 2.5 s
/// that never polls the interrupt handler.
const UNINTERRUPTIBLE: &str = "return String(2n ** 1000000n).length;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stuck_in_a_builtin_ends_at_its_wall_limit_and_its_worker_is_replaced() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "500".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "60000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    app.register(json!({"id": "stuck", "tools": [tool("convert", UNINTERRUPTIBLE)]})).await;
    app.register(json!({"id": "other", "tools": [tool("hi", "return 'hi';")]})).await;
    assert_eq!(app.admin_call("other", "hi", json!({})).await.1["outcome"], "ok");

    // As many stuck calls as there are workers: before the supervisor, every worker was held.
    let started = Instant::now();
    let (first, second) =
        tokio::join!(app.admin_call("stuck", "convert", json!({})), app.admin_call("stuck", "convert", json!({})));
    let elapsed = started.elapsed();
    for (status, body) in [first, second] {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "timeout", "{body}");
        let text = body["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("past its wall limit") && text.contains("cannot be interrupted"), "{text}");
    }
    // 0.5 s wall limit + 1 s grace, with room for a loaded machine.
    assert!(elapsed < Duration::from_secs(5), "the stuck calls ended after {elapsed:?}");

    // The capacity is back: both servers' calls run.
    for _ in 0..4 {
        let (status, body) = app.admin_call("other", "hi", json!({})).await;
        assert_eq!((status, &body["outcome"]), (200, &json!("ok")), "{body}");
    }
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let counter = |name: &str| {
        metrics.lines().find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    assert_eq!(counter("mcpbootd_isolate_overruns_total "), 2.0, "{metrics}");
    assert!(counter("mcpbootd_isolate_process_restarts_total ") >= 2.0, "{metrics}");

    // The call log tells what happened to whoever looks at the server's calls.
    let (_, calls) = app.get("/admin/servers/stuck/calls").await;
    let logged = calls.to_string();
    assert!(logged.contains("timeout") && logged.contains("cannot be interrupted"), "{logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sharing_a_replaced_worker_are_told_why_and_later_calls_run() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "1".into()),
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "500".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "60000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    app.register(json!({"id": "stuck", "tools": [tool("convert", UNINTERRUPTIBLE)]})).await;
    app.register(
        json!({"id": "other", "tools": [tool("wait", "await new Promise(r => setTimeout(r, 100)); return 'done';")]}),
    )
    .await;

    let stuck = app.admin_call("stuck", "convert", json!({}));
    let waiting = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        app.admin_call("other", "wait", json!({})).await
    };
    let ((_, stuck), (_, waiting)) = tokio::join!(stuck, waiting);
    assert_eq!(stuck["outcome"], "timeout", "{stuck}");
    assert_eq!(waiting["outcome"], "error", "{waiting}");
    let text = waiting["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("restarted because another call on it overran") && text.contains("retry"), "{text}");

    let (_, again) = app.admin_call("other", "wait", json!({})).await;
    assert_eq!(again["outcome"], "ok", "{again}");
}
