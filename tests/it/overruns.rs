//! No JavaScript input holds an isolate worker past its wall limit plus about a second. With the
//! WebAssembly engine (the default) a call inside any built-in ends at its limit like any other
//! and its neighbours on the same worker never notice; with the native engine a call stuck
//! inside a built-in QuickJS cannot interrupt is ended with a timeout, its worker process is
//! replaced, and every server's calls go on (attack run D1).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

/// Converting a BigInt at QuickJS's size cap to decimal is one native operation of about 2.5 s
/// that never polls the interrupt handler.
const UNINTERRUPTIBLE: &str = "return String(2n ** 1000000n).length;";

/// Native steps the interpreter never polls in: BigInt to decimal, string search, a walk over
/// a huge array-like, a regular expression that backtracks exponentially.
const NATIVE_STEPS: [&str; 4] = [
    UNINTERRUPTIBLE,
    "return 'a'.repeat(2 ** 24).indexOf('a'.repeat(2 ** 12) + 'b');",
    "return Array.prototype.lastIndexOf.call({length: 2 ** 40}, 1);",
    "return /^(a+)+$/.test('a'.repeat(40) + 'b');",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webassembly_engine_a_call_in_any_builtin_ends_at_its_limit_and_fails_no_neighbour() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "1".into()),
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "600".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "60000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let tools: Vec<_> = NATIVE_STEPS.iter().enumerate().map(|(i, code)| tool(&format!("step{i}"), code)).collect();
    app.register(json!({"id": "stuck", "tools": tools})).await;
    app.register(
        json!({"id": "other", "tools": [tool("wait", "await new Promise(r => setTimeout(r, 200)); return 'done';")]}),
    )
    .await;
    for index in 0..NATIVE_STEPS.len() {
        // Another server's calls parked on the one worker while the step runs there.
        let neighbours = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            futures_util::future::join_all((0..8).map(|_| app.admin_call("other", "wait", json!({})))).await
        };
        let name = format!("step{index}");
        let started = Instant::now();
        let ((_, stuck), neighbours) = tokio::join!(app.admin_call("stuck", &name, json!({})), neighbours);
        let elapsed = started.elapsed();
        assert_eq!(stuck["outcome"], "timeout", "step {index}: {stuck}");
        let text = stuck["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("wall-clock time limit exceeded"), "step {index}: {text}");
        // 0.6 s wall limit, with room for a loaded machine; never the old limit + grace + restart.
        assert!(elapsed < Duration::from_secs(3), "step {index} ended after {elapsed:?}");
        for (_, body) in neighbours {
            assert_eq!(body["outcome"], "ok", "step {index}: a neighbour failed: {body}");
        }
    }
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        !metrics.lines().any(|l| l.starts_with("mcpbootd_isolate_process_restarts_total") && !l.ends_with(" 0")),
        "{metrics}"
    );
}

/// The native engine, in the worker processes these tests are about.
fn native_engine() -> (String, String) {
    ("MCPBOOTD_SANDBOX__ENGINE".into(), "native".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_native_engine_a_call_stuck_in_a_builtin_ends_at_its_wall_limit_and_its_worker_is_replaced() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            native_engine(),
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
async fn with_the_native_engine_calls_sharing_a_replaced_worker_are_told_why_and_later_calls_run() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            native_engine(),
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
