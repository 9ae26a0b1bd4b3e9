//! No JavaScript input holds an isolate worker past its limits: a call inside any built-in ends
//! at its limit like any other, and its neighbours on the same worker never notice.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

/// Native steps QuickJS's interpreter never polls its interrupt handler in: BigInt to decimal
/// (about 2.5 s at QuickJS's size cap), string search in its several forms, walks over a huge
/// array-like, a regular expression that backtracks exponentially, a typed-array sort.
const NATIVE_STEPS: [&str; 10] = [
    "return String(2n ** 1000000n).length;",
    "return 'a'.repeat(2 ** 24).indexOf('a'.repeat(2 ** 12) + 'b');",
    "return 'a'.repeat(2 ** 24).includes('a'.repeat(2 ** 12) + 'b');",
    "return 'a'.repeat(2 ** 24).split('a'.repeat(2 ** 12) + 'b').length;",
    "return 'a'.repeat(2 ** 24).replaceAll('a'.repeat(2 ** 12) + 'b', '').length;",
    "return Array.prototype.lastIndexOf.call({length: 2 ** 40}, 1);",
    "return 'a'.repeat(2 ** 24).lastIndexOf('a'.repeat(2 ** 12) + 'b');",
    "return Array.prototype.includes.call({length: 2 ** 40}, 1);",
    "return /^(a+)+$/.test('a'.repeat(40) + 'b');",
    "for (;;) { const a = new Float64Array(2 ** 20).map(Math.random); a.sort(); a.sort((x, y) => y - x); }",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webassembly_engine_a_call_in_any_builtin_ends_at_its_limit_and_fails_no_neighbour() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "1".into()),
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "600".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "60000".into()),
            ("MCPBOOTD_CODE_MODE__ENABLED".into(), "true".into()),
            ("MCPBOOTD_CODE_MODE__TIMEOUT_MS".into(), "1000".into()),
            ("MCPBOOTD_CODE_MODE__CPU_MS".into(), "60000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let tools: Vec<_> = NATIVE_STEPS.iter().enumerate().map(|(i, code)| tool(&format!("step{i}"), code)).collect();
    app.register(json!({"id": "stuck", "code_mode": {"enabled": true}, "tools": tools})).await;
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
    // The same steps from any MCP client through code mode (no admin rights): the script's
    // isolate ends at its own wall limit too.
    let client = app.mcp("stuck").await;
    for code in NATIVE_STEPS {
        let mut params = rmcp::model::CallToolRequestParams::new("code_execution");
        params = params.with_arguments(json!({"code": code}).as_object().unwrap().clone());
        let started = Instant::now();
        let result = client.call_tool(params).await.unwrap();
        let elapsed = started.elapsed();
        let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
        assert_eq!(result.is_error, Some(true), "{code}: {result:?}");
        assert!(text.contains("\"TIMEOUT\"") && text.contains("did not finish within 1000 ms"), "{code}: {text}");
        assert!(elapsed < Duration::from_secs(4), "{code} ended after {elapsed:?}");
    }
    client.cancel().await.unwrap();
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "mcpbootd_isolate_overruns_total 0"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_any_builtin_ends_at_its_cpu_limit() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__WORKERS".into(), "1".into()),
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "20000".into()),
            ("MCPBOOTD_SANDBOX__CPU_MS".into(), "300".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let tools: Vec<_> = NATIVE_STEPS.iter().enumerate().map(|(i, code)| tool(&format!("step{i}"), code)).collect();
    app.register(json!({"id": "stuck", "tools": tools})).await;
    for (index, code) in NATIVE_STEPS.iter().enumerate() {
        let started = Instant::now();
        let (_, body) = app.admin_call("stuck", &format!("step{index}"), json!({})).await;
        let elapsed = started.elapsed();
        let text = body["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("CPU time limit exceeded"), "{code}: {body}");
        // 0.3 s of CPU, far from the 20 s wall limit, with room for a loaded machine.
        assert!(elapsed < Duration::from_secs(5), "{code} ended after {elapsed:?}");
    }
}
