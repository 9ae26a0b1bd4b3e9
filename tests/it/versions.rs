//! The lifecycle of a generated server's versions: the review gate, diffs, rollback under load,
//! documentation drift, failure-driven repair and retention, against the scripted LLM and the
//! fake upstream, across restarts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::cli;
use crate::generation::{docs_html, get_item_handler, plan_json, prompt, register_prompt, spawn_with_llm};
use crate::helpers::*;
use crate::scripted_llm::{Scripted, ScriptedLlm};

/// Plans `plan_json` and writes `get_item` and `add` with the handlers the test sets.
struct Handlers {
    get_item: Arc<Mutex<String>>,
    add: Arc<Mutex<String>>,
}

fn script(llm: &ScriptedLlm, port: u16) -> Handlers {
    let handlers = Handlers {
        get_item: Arc::new(Mutex::new(get_item_handler(port))),
        add: Arc::new(Mutex::new("return args.a + args.b;".to_string())),
    };
    let plan = plan_json(port);
    let (get_item, add) = (handlers.get_item.clone(), handlers.add.clone());
    llm.respond_with(move |request| {
        if request.system().contains("You are the planner") {
            Scripted::text(format!("```json\n{plan}\n```"))
        } else if request.messages()[0].1.contains("\"name\": \"get_item\"") {
            Scripted::text(format!("```javascript\n{}\n```", get_item.lock().unwrap()))
        } else {
            Scripted::text(format!("```javascript\n{}\n```", add.lock().unwrap()))
        }
    });
    handlers
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn add(app: &TestApp, id: &str) -> String {
    let (status, body) = app.admin_call(id, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(status, 200, "{body}");
    body["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

async fn regenerate(app: &TestApp, id: &str, body: Value) -> i64 {
    let (status, started) = app.post(&format!("/admin/servers/{id}/regenerate"), &body).await;
    assert_eq!(status, 202, "{started}");
    started["generation_id"].as_i64().unwrap()
}

async fn versions(app: &TestApp, id: &str) -> Value {
    let (status, list) = app.get(&format!("/admin/servers/{id}/versions")).await;
    assert_eq!(status, 200, "{list}");
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_gate_diffs_approves_rejects_and_rolls_back_under_load() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, env(&[("MCPBOOTD_GENERATION__REQUIRE_APPROVAL", "true")]), None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    let handlers = script(&llm, port);

    // Version 1 waits for approval; nothing unapproved is served.
    let id = register_prompt(&app, json!({"id": "gated", "prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &id, &["awaiting_approval", "failed"]).await;
    assert_eq!(view["status"], "awaiting_approval", "{view:#}");
    assert_eq!(view["serving"], false);
    let (status, body) = app.admin_call(&id, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(status, 503, "an unapproved version is not served");
    assert!(error_message(&body).contains("versions/{n}/approve"), "{body}");
    // An MCP host is told why, not just that the server answered with an error.
    let Err(refused) = mcp_client(&app.mcp_url(&id)).await else { panic!("no version is served yet") };
    let refused = refused.to_string();
    assert!(refused.contains("has no approved version yet"), "{refused}");
    let (status, approved) = app.post("/admin/servers/gated/versions/1/approve", &json!({})).await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["active_version"], 1);
    assert_eq!(add(&app, &id).await, "3");

    // Version 2 changes a handler: it waits, its diff shows the change, version 1 keeps serving.
    *handlers.add.lock().unwrap() = "return args.a + args.b + 100;".into();
    regenerate(&app, &id, json!({"force": true})).await;
    let view = wait_for_status(&app, &id, &["awaiting_approval", "failed"]).await;
    assert_eq!(view["status"], "awaiting_approval", "{view:#}");
    assert_eq!(view["latest_generation"]["version"], 2);
    assert_eq!(view["latest_generation"]["triggered_by"], "regenerate");
    assert_eq!(add(&app, &id).await, "3", "the active version serves while another awaits approval");
    let (status, pending) = app.get("/admin/servers/gated/versions/2").await;
    assert_eq!(status, 200, "{pending}");
    assert_eq!(pending["active"], false);
    let diff = &pending["diff_from_active"];
    assert_eq!(diff["from"], 1);
    assert_eq!(diff["to"], 2);
    assert_eq!(diff["changed"].as_array().unwrap().len(), 1, "{diff:#}");
    assert_eq!(diff["changed"][0]["name"], "add");
    let handler_diff = diff["changed"][0]["handler"].as_str().unwrap();
    assert!(handler_diff.contains("-return args.a + args.b;\n+return args.a + args.b + 100;"), "{handler_diff}");
    let (status, same) = app.get("/admin/servers/gated/versions/1/diff/2").await;
    assert_eq!(status, 200);
    assert_eq!(&same, diff);

    // Rejected: recorded with the reason, never served; it cannot be approved or activated after.
    let (status, rejected) =
        app.post("/admin/servers/gated/versions/2/reject", &json!({"reason": "adds 100 for no reason"})).await;
    assert_eq!(status, 200, "{rejected}");
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(add(&app, &id).await, "3");
    let (status, body) = app.post("/admin/servers/gated/versions/2/approve", &json!({})).await;
    assert_eq!(status, 409);
    assert!(error_message(&body).contains("it is rejected"), "{body}");
    let (status, body) = app.post("/admin/servers/gated/activate", &json!({"version": 2})).await;
    assert_eq!(status, 409, "{body}");
    let list = versions(&app, &id).await;
    assert_eq!(list["active_version"], 1);
    assert_eq!(list["versions"][1]["status"], "rejected");
    assert_eq!(list["versions"][1]["review"]["reason"], "adds 100 for no reason");
    assert_eq!(list["versions"][0]["tools"], json!(["get_item", "add"]));
    assert_eq!(list["versions"][0]["self_test"]["passed"], 2, "{list:#}");

    // Version 3 approved, then a rollback to version 1 while calls keep coming.
    regenerate(&app, &id, json!({"force": true})).await;
    wait_for_status(&app, &id, &["awaiting_approval"]).await;
    let (status, _) = app.post("/admin/servers/gated/versions/3/approve", &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(add(&app, &id).await, "103");
    let client = app.mcp(&id).await;
    let load = tokio::spawn(async move {
        let mut answers = Vec::new();
        for _ in 0..60 {
            let result = mcp_call(&client, "add", json!({"a": 1, "b": 2})).await;
            assert_ne!(result.is_error, Some(true), "{result:?}");
            answers.push(text_of(&result));
        }
        answers
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (status, body) = app.post("/admin/servers/gated/activate", &json!({"version": 1})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["active_version"], 1);
    let answers = load.await.unwrap();
    assert!(answers.iter().all(|a| a == "3" || a == "103"), "{answers:?}");
    assert_eq!(answers.last().unwrap(), "3", "calls after the rollback are served by version 1");
    assert_eq!(add(&app, &id).await, "3");
    let (status, body) = app.post("/admin/servers/gated/activate", &json!({"version": 9})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("version_not_found")));
    let (_, metrics) = app.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(metrics.contains("mcpbootd_version_changes_total{result=\"activated\"} 1"), "{metrics}");

    // The same from a terminal: versions, a diff (plain when piped), a rollback to the newest
    // ready version before the active one.
    let listed = cli(&app, &["versions", "gated"]).await;
    let listed = &listed.assert_ok().stdout;
    assert!(listed.contains("1 *") && listed.contains("rejected"), "{listed}");
    let diff = cli(&app, &["diff", "gated", "1", "3"]).await;
    let diff = &diff.assert_ok().stdout;
    assert!(diff.contains("~ tool add\n") && diff.contains("+return args.a + args.b + 100;"), "{diff}");
    assert!(!diff.contains('\x1b'), "no colour when piped: {diff}");
    cli(&app, &["rollback", "gated", "3"]).await.assert_ok();
    assert_eq!(add(&app, &id).await, "103");
    let rolled = cli(&app, &["rollback", "gated"]).await;
    assert!(rolled.assert_ok().stdout.contains("serving version 1"), "{}", rolled.stdout);
    cli(&app, &["approve", "gated", "2"]).await.assert_code(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_awaiting_approval_survives_a_restart() {
    let llm = ScriptedLlm::start().await;
    let extra = env(&[("MCPBOOTD_GENERATION__REQUIRE_APPROVAL", "true")]);
    let app = spawn_with_llm(&llm, false, extra.clone(), None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script(&llm, port);
    let id = register_prompt(&app, json!({"id": "waiting", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["awaiting_approval"]).await;
    let (data_dir, upstream) = (app.data_dir.clone(), app.upstream.clone());
    app.stop().await;

    let mut env = llm.daemon_env(false);
    env.extend(extra);
    let app = spawn_app_with(AppOptions { env, data_dir: Some(data_dir), upstream: Some(upstream) }).await;
    let view = wait_for_status(&app, &id, &["awaiting_approval"]).await;
    assert_eq!(view["serving"], false);
    let (status, _) = app.post("/admin/servers/waiting/versions/1/approve", &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(add(&app, &id).await, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_documentation_starts_a_candidate_version() {
    let llm = ScriptedLlm::start().await;
    // Every 2 s: a check on request moves the next periodic one 2 s on, so the two do not race.
    let app = spawn_with_llm(&llm, false, env(&[("MCPBOOTD_GENERATION__DRIFT_CHECK_INTERVAL", "2s")]), None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script(&llm, port);
    let id = register_prompt(&app, json!({"id": "drifty", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["ready"]).await;

    // Nothing changed: nothing happens.
    let (status, report) = app.post("/admin/servers/drifty/check-drift", &json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["drift"]["status"], "unchanged");
    assert_eq!(report["changes"], json!([]));

    // The page changes: a drift event and a candidate version, served once its self-test passes.
    let mut events = app.http.get(app.url("/admin/events")).send().await.unwrap();
    app.upstream.set_docs(&docs_html(port).replace("Items API", "Items API v2"));
    let (status, report) = app.post("/admin/servers/drifty/check-drift", &json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["drift"]["status"], "drifted", "{report:#}");
    let change = &report["changes"][0];
    assert!(change["url"].as_str().unwrap().ends_with("/docs/page"), "{change}");
    assert_ne!(change["before_sha256"], change["after_sha256"]);
    let generation_id = report["generation_id"].as_i64().expect("a candidate version started");
    let view = crate::generation::wait_for_generation(&app, &id, generation_id).await;
    assert_eq!(view["generation"]["version"], 2, "{view:#}");
    assert_eq!(view["generation"]["triggered_by"], "drift");
    assert!(view["generation"]["trigger_detail"].as_str().unwrap().contains("drift event"), "{view:#}");
    assert_eq!(view["drift"]["status"], "drifted");
    let mut seen = String::new();
    while !seen.contains("event: drift") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events.chunk()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("\"id\":\"drifty\""), "{seen}");

    // The periodic check finds the next change by itself.
    app.upstream.set_docs(&docs_html(port).replace("Items API", "Items API v3"));
    let mut found = false;
    for _ in 0..100 {
        let list = versions(&app, &id).await;
        if list["versions"].as_array().unwrap().len() == 3 {
            assert_eq!(list["versions"][2]["triggered_by"], "drift", "{list:#}");
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "the periodic drift check started no candidate");
    let (_, metrics) = app.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(metrics.contains("mcpbootd_drift_events_total 2"), "{metrics}");
    let (status, body) = app.post("/admin/servers/nope/check-drift", &json!({})).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_is_degraded_and_repaired_from_its_failures() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    let handlers = script(&llm, port);
    *handlers.get_item.lock().unwrap() =
        format!("if (args.id > 100) throw new Error('id out of range: ' + args.id);\n{}", get_item_handler(port));
    let id = register_prompt(&app, json!({"id": "flaky", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["ready"]).await;

    for _ in 0..5 {
        let (status, body) = app.admin_call(&id, "get_item", json!({"id": 500, "token": "hunter2-secret"})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["isError"], true, "{body}");
    }
    let (_, view) = app.get("/admin/servers/flaky").await;
    let tools = view["tools"].as_array().unwrap();
    let get_item = tools.iter().find(|t| t["name"] == "get_item").unwrap();
    assert_eq!(get_item["health"]["degraded"], true, "{get_item:#}");
    assert_eq!(get_item["health"]["failures"], 5);
    let (_, list) = app.get("/admin/servers").await;
    assert_eq!(list["servers"][0]["degraded_tools"], json!(["get_item"]), "{list:#}");
    let (_, metrics) = app.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(metrics.contains("mcpbootd_tool_degraded{server=\"flaky\",tool=\"get_item\"} 1"), "{metrics}");
    let shown = cli(&app, &["show", "flaky"]).await;
    let shown = &shown.assert_ok().stdout;
    assert!(shown.contains("DEGRADED: 5 of its last 5 calls failed"), "{shown}");
    assert!(shown.contains("version 1 (generation"), "{shown}");

    let (status, body) = app.post("/admin/servers/flaky/regenerate", &json!({"tools": ["nope"]})).await;
    assert_eq!(status, 400, "{body}");
    assert!(error_message(&body).contains("get_item, add"), "{body}");
    let before = llm.requests().len();
    *handlers.get_item.lock().unwrap() = get_item_handler(port);
    let generation_id = regenerate(&app, &id, json!({"tools": ["get_item"], "with_failures": true})).await;
    let view = crate::generation::wait_for_generation(&app, &id, generation_id).await;
    assert_eq!(view["generation"]["version"], 2, "{view:#}");
    assert_eq!(view["generation"]["triggered_by"], "repair");
    // One compiler request, for get_item only, with its handler and failures, secrets redacted.
    let requests = llm.requests();
    assert_eq!(requests.len() - before, 1, "only the named tool is compiled again");
    let repair = &requests[before];
    let conversation: String = repair.messages().iter().map(|(_, text)| text.as_str()).collect::<Vec<_>>().join("\n");
    assert!(conversation.contains("id out of range: 500"), "{conversation}");
    assert!(conversation.contains("\"id\":500"), "{conversation}");
    assert!(conversation.contains("[redacted]"), "{conversation}");
    assert!(!conversation.contains("hunter2"), "a secret-looking argument reached the LLM: {conversation}");
    assert!(conversation.contains("if (args.id > 100)"), "the failing handler is shown: {conversation}");
    // Only get_item changed; the repaired tool serves and starts with a clean record.
    let (_, diff) = app.get("/admin/servers/flaky/versions/1/diff/2").await;
    let changed: Vec<&str> = diff["changed"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(changed, ["get_item"], "{diff:#}");
    let (status, body) = app.admin_call(&id, "get_item", json!({"id": 500})).await;
    assert_eq!((status, &body["result"]["isError"]), (200, &json!(false)), "{body}");
    let (_, view) = app.get("/admin/servers/flaky").await;
    let get_item = view["tools"].as_array().unwrap().iter().find(|t| t["name"] == "get_item").unwrap().clone();
    assert_eq!(get_item["health"]["degraded"], false, "{get_item:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_versions_are_pruned_but_never_the_active_one() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, env(&[("MCPBOOTD_CATALOG__MAX_VERSIONS_PER_SERVER", "2")]), None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script(&llm, port);
    let id = register_prompt(&app, json!({"id": "pruned", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["ready"]).await;
    for _ in 0..3 {
        let generation_id = regenerate(&app, &id, json!({"force": true})).await;
        crate::generation::wait_for_generation(&app, &id, generation_id).await;
    }
    let list = versions(&app, &id).await;
    let numbers: Vec<i64> =
        list["versions"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(numbers, [3, 4], "{list:#}");
    assert_eq!(list["active_version"], 4);
    let (status, _) = app.post("/admin/servers/pruned/activate", &json!({"version": 1})).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_drift_check_leaves_it_failed_and_the_next_check_runs() {
    if crate::helpers::on_postgres() {
        return; // on a shared catalog an interrupted job is taken over instead (replicas.rs)
    }
    let llm = ScriptedLlm::start().await;
    let extra = env(&[("MCPBOOTD_GENERATION__DRIFT_CHECK_INTERVAL", "1s")]);
    let app = spawn_with_llm(&llm, false, extra, None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script(&llm, port);
    let id = register_prompt(&app, json!({"id": "restarted", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["ready"]).await;

    // The documentation host hangs: the periodic check starts and waits on it.
    app.upstream.docs_delay_ms.store(30_000, std::sync::atomic::Ordering::Relaxed);
    let mut checking = false;
    for _ in 0..100 {
        let (_, view) = app.get("/admin/servers/restarted").await;
        if view["drift"]["status"] == "checking" {
            checking = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checking, "the periodic check never started");
    let (data_dir, upstream) = (app.data_dir.clone(), app.upstream.clone());
    app.stop().await;

    let mut env = llm.daemon_env(false);
    env.push((format!("MCPBOOTD_EGRESS__RESOLVE__{}", "docs.weather.test"), "127.0.0.1".into()));
    let app = spawn_app_with(AppOptions { env, data_dir: Some(data_dir), upstream: Some(upstream) }).await;
    let (_, view) = app.get("/admin/servers/restarted").await;
    assert_eq!(view["drift"]["status"], "failed", "{view:#}");
    assert!(view["drift"]["error"].as_str().unwrap().contains("interrupted by a daemon restart"), "{view:#}");
    assert_eq!(view["status"], "ready", "the server keeps serving");
    app.upstream.docs_delay_ms.store(0, std::sync::atomic::Ordering::Relaxed);
    let (status, report) = app.post("/admin/servers/restarted/check-drift", &json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["drift"]["status"], "unchanged", "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_running_across_a_rollback_stays_on_the_version_it_started_with() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, env(&[("MCPBOOTD_CODE_MODE__ENABLED", "true")]), None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    let handlers = script(&llm, port);
    let body = json!({"id": "scripted", "prompt": prompt(&app), "code_mode": {"enabled": true}});
    let id = register_prompt(&app, body).await;
    wait_for_status(&app, &id, &["ready"]).await;
    *handlers.add.lock().unwrap() = "return args.a + args.b + 100;".into();
    let generation_id = regenerate(&app, &id, json!({"force": true})).await;
    crate::generation::wait_for_generation(&app, &id, generation_id).await;
    assert_eq!(add(&app, &id).await, "103");

    let code = "const first = await tools.scripted.add({a: 1, b: 2});\n\
                await new Promise((resolve) => setTimeout(resolve, 400));\n\
                const second = await tools.scripted.add({a: 1, b: 2});\n\
                return [first, second];";
    let running = {
        let (http, url) = (app.http.clone(), app.url("/admin/servers/scripted/code"));
        tokio::spawn(
            async move { http.post(url).json(&json!({"code": code})).send().await.unwrap().json::<Value>().await },
        )
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, body) = app.post("/admin/servers/scripted/activate", &json!({"version": 1})).await;
    assert_eq!(status, 200, "{body}");
    let result = running.await.unwrap().unwrap();
    assert_eq!(result["ok"], true, "{result:#}");
    assert_eq!(result["value"][0], result["value"][1], "one script, one version: {result:#}");
    assert!(result["value"][1].to_string().contains("103"), "the version it started with: {result:#}");
    assert_eq!(add(&app, &id).await, "3", "new calls are served by version 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_candidate_awaiting_approval_holds_further_checks() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, env(&[("MCPBOOTD_GENERATION__REQUIRE_APPROVAL", "true")]), None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script(&llm, port);
    let id = register_prompt(&app, json!({"id": "noisy", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["awaiting_approval"]).await;
    let (status, _) = app.post("/admin/servers/noisy/versions/1/approve", &json!({})).await;
    assert_eq!(status, 200);

    // A change: candidate version 2 awaits approval.
    app.upstream.set_docs(&docs_html(port).replace("Items API", "Items API, edition 2"));
    let (_, report) = app.post("/admin/servers/noisy/check-drift", &json!({})).await;
    let generation_id = report["generation_id"].as_i64().expect("a candidate started");
    crate::generation::wait_for_generation(&app, &id, generation_id).await;
    // More changes while it waits: nothing is fetched or started.
    let requests = llm.requests().len();
    app.upstream.set_docs(&docs_html(port).replace("Items API", "Items API, edition 3"));
    let (status, report) = app.post("/admin/servers/noisy/check-drift", &json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["drift"]["awaiting_version"], 2, "{report:#}");
    assert_eq!(report["changes"], json!([]));
    assert!(report.get("generation_id").is_none(), "{report:#}");
    assert_eq!(llm.requests().len(), requests, "no LLM request while a candidate awaits review");
    assert_eq!(versions(&app, &id).await["versions"].as_array().unwrap().len(), 2);

    // Rejected: the check compares with the rejected candidate's documents, sees edition 3, and
    // proposes again.
    let (status, _) = app.post("/admin/servers/noisy/versions/2/reject", &json!({"reason": "noise"})).await;
    assert_eq!(status, 200);
    let (_, report) = app.post("/admin/servers/noisy/check-drift", &json!({})).await;
    assert_eq!(report["drift"]["status"], "drifted", "{report:#}");
    assert!(report["drift"].get("awaiting_version").is_none(), "{report:#}");
    let generation_id = report["generation_id"].as_i64().expect("a new candidate started");
    let view = crate::generation::wait_for_generation(&app, &id, generation_id).await;
    assert_eq!(view["latest_generation"]["version"], 3, "{view:#}");
    assert_eq!(view["latest_generation"]["status"], "awaiting_approval");
}
