//! No JavaScript input holds an isolate worker past its limits: a call inside any built-in ends
//! at its limit like any other, and its neighbours on the same worker never notice.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

/// Native steps QuickJS's interpreter never polls its interrupt handler in: BigInt to decimal
/// (about 2.5 s at QuickJS's size cap), string search, a walk over a huge array-like, a regular
/// expression that backtracks exponentially.
const NATIVE_STEPS: [&str; 4] = [
    "return String(2n ** 1000000n).length;",
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
        // 0.6 s wall limit, with room for a loaded machine.
        assert!(elapsed < Duration::from_secs(3), "step {index} ended after {elapsed:?}");
        for (_, body) in neighbours {
            assert_eq!(body["outcome"], "ok", "step {index}: a neighbour failed: {body}");
        }
    }
    // No turn outlasted its call's wall limit: the pool's watchdog never saw one.
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "mcpbootd_isolate_overruns_total 0"), "{metrics}");
}
