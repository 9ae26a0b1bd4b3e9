//! Code mode through real clients: the `code_execution` tool over MCP (rmcp's client), the
//! admin route and the CLI, against two servers on the fake upstream. Each error code, each
//! limit, partial results after a timeout, no fetch inside scripts, servers outside
//! `allowed_servers`, code mode off, and 32 concurrent scripts on a 2-worker pool.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

/// A daemon with code mode on, `news` (scripts may also call `geo`), `geo` (code mode off)
/// and `other` (not allowed to `news`'s scripts).
pub async fn code_mode_app(extra_env: &[(&str, &str)]) -> TestApp {
    let mut env: Vec<(String, String)> = vec![
        ("MCPBOOTD_CODE_MODE__ENABLED".into(), "true".into()),
        ("MCPBOOTD_CODE_MODE__CPU_MS".into(), "300".into()),
        // Tool calls time out well before the scripts that wait for them.
        ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "3000".into()),
    ];
    env.extend(extra_env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let app = spawn_app_with(AppOptions { env, ..AppOptions::default() }).await;
    let weather = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "news",
        "allow_domains": [WEATHER_HOST],
        "code_mode": {"enabled": true, "allowed_servers": ["geo"], "max_tool_result_bytes": 50000},
        "tools": [
            {
                "name": "get_item",
                "description": "One item by id: title, score and the ids of its kids.",
                "input_schema": {
                    "type": "object",
                    "properties": {"id": {"type": "integer", "description": "The item's id"}},
                    "required": ["id"]
                },
                "output_schema": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "title": {"type": "string"}, "score": {"type": "integer"}},
                    "required": ["id", "title", "score"]
                },
                "annotations": {"readOnlyHint": true},
                "handler": format!(
                    "const r = await fetch(`{weather}/items/${{args.id}}`);\n\
                     const item = await r.json();\n\
                     return {{id: item.id, title: item.title, score: item.score, kids: item.kids}};"
                )
            },
            {
                "name": "top_items",
                "description": "The top `count` stories: id, title and score each.",
                "input_schema": {"type": "object", "properties": {"count": {"type": "integer", "maximum": 500}}, "required": ["count"]},
                "handler": "return {items: Array.from({length: args.count}, (_, i) => ({id: i + 1, title: `Story ${i + 1}`, score: (i * 37) % 101}))};"
            },
            {
                "name": "slow",
                "description": "Answers after `ms` milliseconds.",
                "input_schema": {"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]},
                "handler": format!("const r = await fetch(`{weather}/sleep/${{args.ms}}`); return await r.json();")
            },
            {
                "name": "fail",
                "description": "Always throws.",
                "input_schema": {"type": "object", "properties": {}},
                "handler": "throw new Error('the upstream is down');"
            },
            {
                "name": "try_fetch",
                "description": "Fetches any URL (only whitelisted hosts get through).",
                "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
                "handler": "const r = await fetch(args.url); return {status: r.status};"
            }
        ]
    }))
    .await;
    app.register(json!({
        "id": "geo",
        "tools": [{
            "name": "country_of",
            "description": "The country of a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "handler": "const countries = {Oslo: 'NO', Lima: 'PE'}; return {city: args.city, country: countries[args.city] ?? null};"
        }]
    }))
    .await;
    app.register(json!({"id": "other", "tools": [tool("secret", "return 'not for weather';")]})).await;
    app
}

/// Runs a script through `POST /admin/servers/{id}/code`.
pub async fn run_code(app: &TestApp, id: &str, body: Value) -> Value {
    let (status, result) = app.post(&format!("/admin/servers/{id}/code"), &body).await;
    assert_eq!(status, 200, "{result}");
    result
}

fn error_code(result: &Value) -> &str {
    result["error"]["code"].as_str().unwrap_or_else(|| panic!("no error code in {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_mode_is_off_unless_the_daemon_and_the_server_turn_it_on() {
    let app = spawn_app().await;
    app.register(json!({
        "id": "on",
        "code_mode": {"enabled": true},
        "tools": [tool("ping", "return 'pong';")]
    }))
    .await;
    let client = app.mcp("on").await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.iter().all(|t| t.name != "code_execution"), "daemon switch off: not listed");
    let mut params = rmcp::model::CallToolRequestParams::new("code_execution");
    params = params.with_arguments(json!({"code": "return 1;"}).as_object().unwrap().clone());
    let refused = client.call_tool(params).await.unwrap_err().to_string();
    assert!(
        refused.contains("code mode is off in this daemon") && refused.contains("[code_mode] enabled"),
        "{refused}"
    );
    let (status, body) = app.post("/admin/servers/on/code", &json!({"code": "return 1;"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("code_mode_disabled")), "{body}");
    client.cancel().await.unwrap();
    app.stop().await;

    let app = code_mode_app(&[]).await;
    let client = app.mcp("geo").await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.iter().all(|t| t.name != "code_execution"), "server setting off: not listed");
    let mut params = rmcp::model::CallToolRequestParams::new("code_execution");
    params = params.with_arguments(json!({"code": "return 1;"}).as_object().unwrap().clone());
    let refused = client.call_tool(params).await.unwrap_err().to_string();
    assert!(refused.contains("code mode is off for server \"geo\"") && refused.contains("code-mode"), "{refused}");
    client.cancel().await.unwrap();

    // Turned on later through the admin API: listed on the next request.
    let response = app
        .http
        .put(app.url("/admin/servers/geo/code-mode"))
        .json(&json!({"enabled": true, "timeout_ms": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "a zero timeout is refused");
    let response =
        app.http.put(app.url("/admin/servers/geo/code-mode")).json(&json!({"enabled": true})).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let client = app.mcp("geo").await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.iter().any(|t| t.name == "code_execution"));
    let (_, view) = app.get("/admin/servers/geo").await;
    assert_eq!(view["code_mode"], json!({"enabled": true, "allowed_servers": []}));
    client.cancel().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_composes_two_servers_over_mcp_and_the_log_shows_the_tree() {
    let app = code_mode_app(&[]).await;
    let client = app.mcp("news").await;
    let listed = client.list_all_tools().await.unwrap();
    let code_tool = listed.iter().find(|t| t.name == "code_execution").expect("code_execution is listed");
    let description = code_tool.description.as_deref().unwrap();
    for expected in [
        "declare const tools: {",
        "  news: {",
        "    get_item(args: {\n      id: number; // The item's id\n    }): Promise<{ id: number; title: string; score: number }>;",
        "  geo: {",
        "country_of(args: { city: string }): Promise<any>;",
        "SERVER_NOT_ALLOWED",
        "For a single tool call, call that tool directly.",
    ] {
        assert!(description.contains(expected), "{expected:?} missing in the description:\n{description}");
    }
    assert!(!description.contains("other"), "servers not allowed are not declared");
    assert!(code_tool.output_schema.is_some());

    let code = "const item = await tools.news.get_item({id: input.id});\n\
                const place = await call_tool('geo', 'country_of', {city: input.city});\n\
                console.log('score', item.score);\n\
                return {title: item.title, country: place.value.country};";
    let result = mcp_call(&client, "code_execution", json!({"code": code, "input": {"id": 7, "city": "Oslo"}})).await;
    assert_eq!(result.is_error, Some(false), "{}", text_of(&result));
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(structured["value"], json!({"title": "Item 7", "country": "NO"}));
    assert_eq!(structured["console"], "[log] score 70\n");
    let calls = structured["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (&calls[0]["server"], &calls[0]["tool"], &calls[0]["ok"]),
        (&json!("news"), &json!("get_item"), &json!(true))
    );
    assert_eq!((&calls[1]["server"], &calls[1]["tool"]), (&json!("geo"), &json!("country_of")));
    assert_eq!(serde_json::from_str::<Value>(&text_of(&result)).unwrap(), structured, "text mirrors the structure");
    client.cancel().await.unwrap();

    // The log: the run, with its code, and its two tool calls nested under it (one on `geo`).
    let (_, log) = app.get("/admin/servers/news/calls").await;
    let entries = log["calls"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "tool calls are nested under their script: {log}");
    let run = &entries[0];
    assert_eq!((&run["tool"], &run["via"], &run["outcome"]), (&json!("code_execution"), &json!("mcp"), &json!("ok")));
    assert_eq!(run["execution_id"], structured["execution_id"]);
    assert_eq!(run["code"], code);
    assert_eq!(run["fetches"], 2, "a script run counts its tool calls");
    let children = run["children"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    for (child, trace) in children.iter().zip(calls) {
        assert_eq!(child["execution_id"], trace["execution_id"]);
        assert_eq!(child["parent_execution_id"], run["execution_id"]);
        assert_eq!(child["via"], "script");
    }
    assert_eq!(children[0]["egress"][0]["host"], WEATHER_HOST, "the tool's own egress is logged");
    let (_, geo_log) = app.get("/admin/servers/geo/calls").await;
    assert_eq!(geo_log["calls"][0]["parent_execution_id"], run["execution_id"], "logged under its own server too");

    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "mcpbootd_code_executions_total{outcome=\"ok\"} 1",
        "mcpbootd_code_tool_calls_total{result=\"ok\"} 2",
        "mcpbootd_tool_calls_total{server=\"news\",tool=\"code_execution\",outcome=\"ok\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    }
    let sandboxed = metrics.lines().find(|l| l.starts_with("mcpbootd_code_sandboxed_bytes_total")).unwrap();
    let bytes: u64 = sandboxed.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(bytes >= 40, "the item's kids and the geo result stayed in the sandbox: {sandboxed}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_tool_reports_every_error_code_and_the_script_goes_on() {
    let app = code_mode_app(&[]).await;
    let code = "const results = {};\n\
                const codes = async (name, p) => { const r = await p; results[name] = r.ok ? 'ok' : r.error.code; };\n\
                await codes('missing_tool', call_tool('news', 'nope', {}));\n\
                await codes('missing_server', call_tool('nowhere', 'x', {}));\n\
                await codes('not_allowed', call_tool('other', 'secret', {}));\n\
                await codes('bad_args', call_tool('news', 'get_item', {id: 'seven'}));\n\
                await codes('tool_error', call_tool('news', 'fail', {}));\n\
                await codes('timeout', call_tool('news', 'slow', {ms: 6000}));\n\
                await codes('ok', call_tool('news', 'get_item', {id: 1}));\n\
                return results;";
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(
        result["value"],
        json!({
            "missing_tool": "NOT_FOUND",
            "missing_server": "SERVER_NOT_ALLOWED",
            "not_allowed": "SERVER_NOT_ALLOWED",
            "bad_args": "INVALID_ARGUMENTS",
            "tool_error": "TOOL_ERROR",
            "timeout": "TIMEOUT",
            "ok": "ok",
        })
    );
    // The messages say what to do.
    let messages = "const r = [await call_tool('news', 'nope', {}), await call_tool('other', 'secret', {}),\n\
                    await call_tool('news', 'fail', {})];\n\
                    return r.map((x) => x.error.message);";
    let result = run_code(&app, "news", json!({"code": messages})).await;
    let texts: Vec<&str> = result["value"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(texts[0].contains("has no tool \"nope\"") && texts[0].contains("get_item"), "{}", texts[0]);
    assert!(texts[1].contains("not allowed") && texts[1].contains("geo") && texts[1].contains("news"), "{}", texts[1]);
    assert!(texts[2].contains("the upstream is down"), "{}", texts[2]);

    // MAX_TOOL_CALLS: the request narrows the budget; the call past it fails, the script goes on.
    let code = "const r = [];\nfor (let i = 1; i <= 3; i++) r.push(await call_tool('geo', 'country_of', {city: 'Oslo'}));\n\
                return r.map((x) => x.ok ? 'ok' : x.error.code);";
    let result = run_code(&app, "news", json!({"code": code, "options": {"max_tool_calls": 2}})).await;
    assert_eq!(result["value"], json!(["ok", "ok", "MAX_TOOL_CALLS"]));
    assert_eq!(result["calls"].as_array().unwrap().len(), 3);

    // RESULT_TOO_LARGE: the server allows 50,000 bytes of tool results per script (a page of 500
    // stories is about 20,000).
    let code = "const r = [];\nfor (let i = 1; i <= 4; i++) { const x = await call_tool('news', 'top_items', {count: 500}); r.push(x.ok ? 'ok' : x.error.code); }\n\
                return r;";
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(result["value"], json!(["ok", "ok", "RESULT_TOO_LARGE", "RESULT_TOO_LARGE"]), "{result}");

    // allowed_servers in the request narrows: [] allows none, not even the server itself.
    let code = "return (await call_tool('news', 'get_item', {id: 1})).error.code;";
    let result = run_code(&app, "news", json!({"code": code, "options": {"allowed_servers": []}})).await;
    assert_eq!(result["value"], "SERVER_NOT_ALLOWED");
    // ... and cannot widen.
    let code = "return (await call_tool('other', 'secret', {})).error.code;";
    let result = run_code(&app, "news", json!({"code": code, "options": {"allowed_servers": ["other"]}})).await;
    assert_eq!(result["value"], "SERVER_NOT_ALLOWED");

    // The typed stubs throw a ToolError carrying the code.
    let code = "try { await tools.news.fail({}); } catch (e) { return [e.name, e.code, e.message]; }";
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(
        result["value"],
        json!(["ToolError", "TOOL_ERROR", "news.fail: Error: the upstream is down (handler line 1)"])
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_errors_name_the_line_and_keep_partial_results() {
    let app = code_mode_app(&[]).await;
    let cases = [
        ("const a = 1;\nconst = 2;", "SYNTAX_ERROR", Some(2u64)),
        ("const a = 1;\nnull.boom();", "RUNTIME_ERROR", Some(2)),
        ("return () => 1;", "NOT_SERIALIZABLE", None),
        ("const o = {}; o.o = o; return o;", "NOT_SERIALIZABLE", None),
        ("return {n: 2n ** 64n};", "NOT_SERIALIZABLE", None),
        ("while (true) {}", "LIMIT", None),
        ("const big = []; while (true) big.push('x'.repeat(1000));", "LIMIT", None),
        ("require('fs');", "SYNTAX_ERROR", Some(1)),
    ];
    for (code, expected, line) in cases {
        let result = run_code(&app, "news", json!({"code": code})).await;
        assert_eq!(result["ok"], false, "{code}: {result}");
        assert_eq!(error_code(&result), expected, "{code}: {result}");
        assert_eq!(result["error"]["line"].as_u64(), line, "{code}: {result}");
        if expected == "SYNTAX_ERROR" {
            assert!(result["calls"].as_array().unwrap().is_empty());
        }
        if code.starts_with("while") {
            assert!(result["error"]["message"].as_str().unwrap().contains("[code_mode] cpu_ms"), "{result}");
        }
    }
    let result = run_code(
        &app,
        "news",
        json!({"code": "await tools.news.get_item({id: 1});\nthrow new Error('after one call');"}),
    )
    .await;
    assert_eq!(error_code(&result), "RUNTIME_ERROR");
    assert!(result["error"]["message"].as_str().unwrap().contains("after one call (script line 2)"), "{result}");
    assert!(result["error"]["stack"].as_str().unwrap().contains("script:2"), "{result}");
    assert_eq!(result["calls"].as_array().unwrap().len(), 1, "partial work survives: {result}");

    // A timeout: the first call finished, the second was in flight and is cancelled; the script
    // ends within 1 s of its deadline.
    let code = "await tools.news.get_item({id: 1});\nawait tools.news.slow({ms: 2500});\nreturn 'never';";
    let started = Instant::now();
    let result = run_code(&app, "news", json!({"code": code, "options": {"timeout_ms": 800}})).await;
    let elapsed = started.elapsed();
    assert_eq!(error_code(&result), "TIMEOUT", "{result}");
    assert!(result["error"]["message"].as_str().unwrap().contains("within 800 ms"), "{result}");
    assert!(elapsed < Duration::from_millis(1800), "ended {elapsed:?} after the start, deadline 800 ms");
    let calls = result["calls"].as_array().unwrap();
    assert_eq!(
        (calls.len(), &calls[0]["ok"], &calls[1]["error_code"]),
        (2, &json!(true), &json!("CANCELLED")),
        "{result}"
    );
    let (_, log) = app.get("/admin/servers/news/calls?limit=1").await;
    let run = &log["calls"][0];
    assert_eq!(run["outcome"], "timeout");
    let children = run["children"].as_array().unwrap();
    assert_eq!(children[1]["outcome"], "cancelled", "the in-flight call was stopped: {run}");

    // A bad request is an invalid-body error on the admin route, a tool error over MCP.
    let (status, body) = app.post("/admin/servers/news/code", &json!({"code": 1})).await;
    assert_eq!(status, 422, "{body}");
    let client = app.mcp("news").await;
    let result = mcp_call(&client, "code_execution", json!({"script": "return 1"})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(text_of(&result).contains("unknown field `script`"), "{}", text_of(&result));
    client.cancel().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limits_queue_tool_calls_and_refuse_scripts_with_busy() {
    let app = code_mode_app(&[
        ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", "2"),
        ("MCPBOOTD_SANDBOX__QUEUE_TIMEOUT_MS", "300"),
        ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS", "1"),
        ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_TOOL_CALLS", "2"),
    ])
    .await;
    // Four 250 ms calls, two at a time: at least two rounds, however fast the machine.
    let code = "const started = Date.now();\n\
                await Promise.all([1, 2, 3, 4].map(() => tools.news.slow({ms: 250})));\n\
                return Date.now() - started;";
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert!(result["value"].as_u64().unwrap() >= 500, "the calls ran more than two at a time: {result}");

    // One script at a time: a second one waits 300 ms for the first, then gets BUSY.
    let slow = run_code(&app, "news", json!({"code": "await tools.news.slow({ms: 1500}); return 'done';"}));
    let second = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        run_code(&app, "news", json!({"code": "return 1;"})).await
    };
    let (slow, second) = tokio::join!(slow, second);
    assert_eq!(slow["value"], "done", "{slow}");
    assert_eq!(error_code(&second), "BUSY", "{second}");
    assert!(second["error"]["message"].as_str().unwrap().contains("max_concurrent_scripts"), "{second}");

    // A tool call that finds no slot of its server waits in the queue, then returns BUSY to the
    // script, which goes on: two slots, four calls at once from one script.
    let code = "const r = await Promise.all([1, 2, 3].map(() => call_tool('news', 'slow', {ms: 1000})));\n\
                return r.map((x) => x.ok ? 'ok' : x.error.code);";
    let mut settings = json!({"enabled": true, "allowed_servers": ["geo"], "max_concurrent_tool_calls": 3});
    settings["max_tool_result_bytes"] = json!(50000);
    let response = app.http.put(app.url("/admin/servers/news/code-mode")).json(&settings).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let result = run_code(&app, "news", json!({"code": code})).await;
    let codes = result["value"].as_array().unwrap();
    assert_eq!(codes.iter().filter(|c| *c == "ok").count(), 2, "{result}");
    assert_eq!(codes.iter().filter(|c| *c == "BUSY").count(), 1, "{result}");
    app.stop().await;
}

/// One server's clients cannot take every script slot: with four slots, a server holds its
/// share (a quarter) and its other scripts wait in its share of the queue and get `BUSY`, while
/// another server's script starts at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_holds_its_share_of_script_slots_and_another_server_still_runs() {
    let app = code_mode_app(&[
        ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS", "4"),
        ("MCPBOOTD_SANDBOX__QUEUE_TIMEOUT_MS", "1500"),
        ("MCPBOOTD_SANDBOX__MAX_QUEUED_PER_SERVER", "3"),
    ])
    .await;
    app.register(json!({"id": "quiet", "code_mode": {"enabled": true}, "tools": [tool("ping", "return 'pong';")]}))
        .await;
    // Five scripts on `news`, each parked for 2.5 s on the upstream: more than every slot.
    let sleeper = json!({"code": "await tools.news.slow({ms: 2500}); return 'done';"});
    let sleepers: Vec<_> = (0..5)
        .map(|_| {
            let (http, url, body) = (app.http.clone(), app.url("/admin/servers/news/code"), sleeper.clone());
            tokio::spawn(async move { http.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap() })
        })
        .collect();
    // Wait until a sleeper runs (its script and its tool call are in flight), and give the
    // others as long again to be admitted or queued.
    let deadline = Instant::now() + Duration::from_secs(5);
    let gauge = "mcpbootd_isolate_in_flight_calls ";
    loop {
        let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let in_flight = metrics.lines().find_map(|l| l.strip_prefix(gauge)).and_then(|n| n.parse::<f64>().ok());
        if in_flight.is_some_and(|n| n >= 2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "no script of news started:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Another server's script starts at once, without waiting for one of news's to end.
    let started = Instant::now();
    let quiet = run_code(&app, "quiet", json!({"code": "return await tools.quiet.ping({});"})).await;
    let waited = started.elapsed();
    assert_eq!(quiet["value"], "pong", "{quiet}");
    assert!(waited < Duration::from_millis(1500), "quiet's script waited {waited:?} for a slot");

    // news ran its share (one script); three of its others waited, then were refused, and the
    // fifth found news's share of the queue full and was refused at once.
    let mut results = Vec::new();
    for sleeper in sleepers {
        results.push(sleeper.await.unwrap());
    }
    let done = results.iter().filter(|r| r["value"] == "done").count();
    let refusals: Vec<&str> = results
        .iter()
        .filter(|r| r["error"]["code"] == "BUSY")
        .map(|r| r["error"]["message"].as_str().unwrap())
        .collect();
    let waited = "this server already runs as many scripts as it may at once (1, [code_mode] \
                  max_concurrent_scripts_per_server) and none finished within 1500 ms";
    let queue_full = "3 of this server's scripts are already waiting for a slot ([sandbox] max_queued_per_server)";
    let count = |text: &str| refusals.iter().filter(|m| m.contains(text)).count();
    assert_eq!((done, count(waited), count(queue_full)), (1, 3, 1), "{results:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_have_no_way_out_but_their_tools() {
    let app = code_mode_app(&[]).await;
    let upstream = app.upstream_url(WEATHER_HOST);
    let probes = json!({
        "fetch": "typeof fetch",
        "global_fetch": "typeof globalThis.fetch",
        "require": "typeof require",
        "process": "typeof process",
        "deno": "typeof Deno",
        "xhr": "typeof XMLHttpRequest",
        "websocket": "typeof WebSocket",
    });
    let code = format!(
        "const seen = {{}};\nconst probes = {probes};\n\
         for (const [k, expr] of Object.entries(probes)) seen[k] = eval(expr);\n\
         try {{ new Response('x').constructor.prototype.fetch; seen.response = 'no fetch on Response'; }} catch (e) {{ seen.response = e.name; }}\n\
         const viaFunction = Function('return typeof fetch')();\n\
         seen.function_fetch = viaFunction;\n\
         // call_tool's own URL scheme cannot be pointed at the network.\n\
         seen.odd_server = (await call_tool('{upstream}', 'echo', {{}})).error.code;\n\
         seen.odd_tool = (await call_tool('news', '../../echo', {{}})).error.code;\n\
         return seen;"
    );
    let before = app.upstream.requests().len();
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(result["ok"], true, "{result}");
    let value = &result["value"];
    for key in ["fetch", "global_fetch", "require", "process", "deno", "xhr", "websocket", "function_fetch"] {
        assert_eq!(value[key], "undefined", "{key}: {value}");
    }
    assert_eq!((&value["odd_server"], &value["odd_tool"]), (&json!("SERVER_NOT_ALLOWED"), &json!("NOT_FOUND")));
    assert_eq!(app.upstream.requests().len(), before, "nothing reached the network");

    let code = format!("const m = await import('{upstream}/echo');\nreturn 'loaded';");
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(error_code(&result), "SYNTAX_ERROR", "{result}");
    let code = "const load = globalThis['imp' + 'ort'];\nreturn typeof load;";
    assert_eq!(run_code(&app, "news", json!({"code": code})).await["value"], "undefined");

    // A tool a script calls keeps its own server's whitelist: no detour through a tool.
    let code = "return await tools.news.try_fetch({url: 'http://api.other.test/echo'});";
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(error_code(&result), "RUNTIME_ERROR");
    assert!(result["error"]["message"].as_str().unwrap().contains("not allowed"), "{result}");
    assert_eq!(app.upstream.requests().len(), before, "the whitelist held");

    // Nothing a script does survives into the next run or a tool's isolate.
    let code = "Object.prototype.polluted = 'yes'; globalThis.leak = 1; Array.prototype.push = null; return 1;";
    run_code(&app, "news", json!({"code": code})).await;
    let code =
        "const item = await tools.news.get_item({id: 2});\nreturn [({}).polluted ?? null, typeof leak, item.title];";
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(result["value"], json!([null, "undefined", "Item 2"]));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_scripts_on_two_workers_all_finish() {
    let app = code_mode_app(&[
        ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", "16"),
        ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS", "8"),
    ])
    .await;
    let code = "const ids = [1, 2, 3, 4, 5].map((i) => i + input.n * 10);\n\
                const items = await Promise.all(ids.map((id) => tools.news.get_item({id})));\n\
                return items.reduce((sum, item) => sum + item.score, 0);";
    let started = Instant::now();
    let runs = (0..32).map(|n| {
        let app = &app;
        async move { run_code(app, "news", json!({"code": code, "input": {"n": n}})).await }
    });
    let results = tokio::time::timeout(Duration::from_secs(60), futures_util::future::join_all(runs))
        .await
        .expect("no script hangs");
    for (n, result) in results.iter().enumerate() {
        let expected: u64 = (1..=5).map(|i| (i + n as u64 * 10) * 10).sum();
        assert_eq!(result["value"], expected, "script {n}: {result}");
        assert_eq!(result["calls"].as_array().unwrap().len(), 5);
    }
    eprintln!("32 scripts x 5 tool calls on 2 workers: {:?}", started.elapsed());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_exec_prints_the_result_and_exits_non_zero_when_not_ok() {
    let app = code_mode_app(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.js");
    std::fs::write(&script, "const item = await tools.news.get_item({id: input.id});\nreturn item.title;").unwrap();
    let input = dir.path().join("input.json");
    std::fs::write(&input, r#"{"id": 3}"#).unwrap();
    let url = app.url("");
    let env = [("MCPBOOTD_URL", url.as_str())];

    let run = crate::cli::run(
        &[
            "code",
            "exec",
            "news",
            "--file",
            script.to_str().unwrap(),
            "--input-file",
            input.to_str().unwrap(),
            "--json",
        ],
        &env,
    )
    .await;
    run.assert_ok();
    assert_eq!(run.json()["value"], "Item 3");

    let run =
        crate::cli::run(&["code", "exec", "news", "--code", "return input.a + 1;", "--input", r#"{"a": 1}"#], &env)
            .await;
    run.assert_ok();
    assert!(run.stdout.starts_with("2\n") && run.stdout.contains("execution "), "{}", run.stdout);

    let run = crate::cli::run(&["code", "exec", "news", "--code", "await tools.news.fail({});"], &env).await;
    run.assert_code(1);
    assert!(run.stdout.contains("error RUNTIME_ERROR: ToolError: news.fail"), "{}", run.stdout);
    assert!(run.stdout.contains("news.fail  TOOL_ERROR"), "{}", run.stdout);
    assert!(run.stderr.contains("the script failed (RUNTIME_ERROR"), "{}", run.stderr);

    let code = "return (await call_tool('geo', 'country_of', {city: 'Lima'})).error.code;";
    let run =
        crate::cli::run(&["code", "exec", "news", "--code", code, "--allowed-servers", "news", "--json"], &env).await;
    run.assert_ok();
    assert_eq!(run.json()["value"], "SERVER_NOT_ALLOWED");
    let run = crate::cli::run(
        &["code", "exec", "news", "--code", "return 1;", "--timeout-ms", "5000", "--max-tool-calls", "1", "--json"],
        &env,
    )
    .await;
    run.assert_ok();

    let run = crate::cli::run(&["code", "exec", "news", "--code", "return 1;", "--input", "{oops"], &env).await;
    run.assert_code(2);
    assert!(run.stderr.contains("--input is not valid JSON"), "{}", run.stderr);
    let run = crate::cli::run(&["code", "exec", "geo", "--code", "return 1;"], &env).await;
    run.assert_code(1);
    assert!(run.stderr.contains("code mode is off for server \"geo\""), "{}", run.stderr);
    app.stop().await;
}

/// The examples of `docs/code-mode.md`: each ```` ```js example input=JSON ```` block, run on
/// the fixture servers, returns the value in the ```` ```json ```` block after it.
fn documented_examples() -> Vec<(String, Value, Value)> {
    let docs = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/code-mode.md"))
        .expect("docs/code-mode.md");
    let mut examples = Vec::new();
    let mut lines = docs.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```js example") else { continue };
        let input = info.trim().strip_prefix("input=").map_or(Value::Null, |raw| {
            serde_json::from_str(raw).unwrap_or_else(|e| panic!("example input {raw:?} is not JSON: {e}"))
        });
        let code: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        lines.by_ref().find(|l| *l == "```json").expect("a ```json block follows each example");
        let expected: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let expected = serde_json::from_str(&expected.join("\n")).expect("the expected value is JSON");
        examples.push((code.join("\n"), input, expected));
    }
    examples
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_examples_run_as_documented() {
    let examples = documented_examples();
    assert!(examples.len() >= 6, "docs/code-mode.md has {} runnable examples", examples.len());
    let app = code_mode_app(&[]).await;
    for (code, input, expected) in examples {
        let result = run_code(&app, "news", json!({"code": code, "input": input})).await;
        assert_eq!(result["ok"], true, "{code}\n{result}");
        assert_eq!(result["value"], expected, "{code}\n{result}");
    }
    app.stop().await;
}

/// A tool call a script starts and does not wait for is stopped when the script ends; the
/// request it had sent is in that call's egress log, like any request that reached the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_a_script_left_running_logs_the_request_it_sent() {
    let app = code_mode_app(&[]).await;
    let held = format!("{}/held/5300", app.upstream_url(WEATHER_HOST));
    let code = format!(
        "tools.news.try_fetch({{url: '{held}'}});\n\
         await new Promise(r => setTimeout(r, 300));\n\
         return 'left it';"
    );
    let result = run_code(&app, "news", json!({"code": code})).await;
    assert_eq!(result["value"], "left it", "{result}");
    assert_eq!(result["calls"][0]["error_code"], "CANCELLED", "{result}");
    let seen = app.upstream.requests().iter().filter(|r| r.path == "/held/5300").count();
    assert_eq!(seen, 1, "the tool call's request reached the upstream before the script ended");
    let (_, log) = app.get("/admin/servers/news/calls?limit=1").await;
    let child = &log["calls"][0]["children"][0];
    assert_eq!(child["outcome"], "cancelled", "{log}");
    let error = child["error"].as_str().unwrap_or_default();
    assert!(error.contains("the script that made this call ended"), "the log says why it was cancelled: {child}");
    let egress = child["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 1, "{child}");
    assert_eq!((&egress[0]["path"], &egress[0]["status"]), (&json!("/held/5300"), &json!(null)), "{child}");
    assert!(egress[0]["reason"].as_str().unwrap().contains("the call ended"), "{child}");
    app.stop().await;
}

/// A discovery-mode server's every operation is callable from a script by its id, listed or not,
/// as `tools.<server>.<operation>` and through `call_tool`; the description declares that in one
/// line instead of every operation, and `describe_operation` gives one operation's declaration.
/// Each call is logged under the operation's own name, with the script as its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_call_every_operation_of_a_discovery_server_by_its_id() {
    let env = vec![
        ("MCPBOOTD_CODE_MODE__ENABLED".to_string(), "true".to_string()),
        ("MCPBOOTD_GENERATION__MAX_TOOLS".to_string(), "4".to_string()),
    ];
    let app = spawn_app_with(AppOptions { env, ..AppOptions::default() }).await;
    register_items_api(&app, "items", json!({"code_mode": {"enabled": true}})).await;
    let client = app.mcp("items").await;
    let listed = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    assert!(!names.contains(&"send_echo"), "send_echo is reached through call_operation: {names:?}");
    let code_tool = listed.iter().find(|t| t.name == "code_execution").unwrap();
    let description = code_tool.description.as_deref().unwrap();
    for expected in
        ["[operation: string]: (args?: object) => Promise<any>;", "search_operations(args: {", "describe_operation"]
    {
        assert!(description.contains(expected), "{expected:?} missing in the description:\n{description}");
    }

    let described = mcp_call(&client, "describe_operation", json!({"operation": "send_echo"})).await;
    let declaration = described.structured_content.unwrap()["declaration"].as_str().unwrap().to_string();
    assert!(declaration.starts_with("/** Send a text to echo */\nsend_echo(args: {"), "{declaration}");
    assert!(declaration.contains("body: { text: string }"), "{declaration}");

    let code = "const echoed = await tools.items.send_echo({body: {text: input}});\n\
                const item = await call_tool('items', 'get_item', {id: 5});\n\
                const found = await tools.items.search_operations({query: 'replace the echo'});\n\
                const missing = await call_tool('items', 'send_echoes', {});\n\
                let thrown;\n\
                try { await tools.items.replace_echo({}); } catch (e) { thrown = e.code; }\n\
                return {echoed: echoed.body ?? echoed, title: item.value.title, first: found.operations[0].operation,\n\
                        missing: missing.error.code, hint: missing.error.message.includes('send_echo'), thrown};";
    let result = mcp_call(&client, "code_execution", json!({"code": code, "input": "hello"})).await;
    assert_eq!(result.is_error, Some(false), "{}", text_of(&result));
    let value = &result.structured_content.as_ref().unwrap()["value"];
    assert_eq!(value["title"], "Item 5", "{value}");
    assert!(value["echoed"].to_string().contains("hello"), "{value}");
    assert_eq!(value["first"], "replace_echo", "{value}");
    assert_eq!((&value["missing"], &value["hint"]), (&json!("NOT_FOUND"), &json!(true)), "{value}");
    assert_eq!(value["thrown"], "INVALID_ARGUMENTS", "{value}");
    client.cancel().await.unwrap();

    let (_, log) = app.get("/admin/servers/items/calls").await;
    let run = log["calls"].as_array().unwrap().iter().find(|c| c["tool"] == "code_execution").unwrap().clone();
    let children: Vec<&str> = run["children"].as_array().unwrap().iter().filter_map(|c| c["tool"].as_str()).collect();
    for tool in ["send_echo", "get_item", "search_operations"] {
        assert!(children.contains(&tool), "{tool} is logged under the script: {children:?}");
    }
}
