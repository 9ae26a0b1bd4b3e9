//! Prompt → hosted server, against scripted LLM servers speaking the real wire formats and docs
//! and API servers on loopback under `[egress.resolve]` names.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;
use crate::scripted_llm::{Gate, Scripted, ScriptedLlm};

pub(crate) const DOCS_HOST: &str = "docs.weather.test";

/// The daemon with an LLM pointed at `llm` (Anthropic wire format unless `openai`).
pub(crate) async fn spawn_with_llm(
    llm: &ScriptedLlm,
    openai: bool,
    extra: Vec<(String, String)>,
    upstream: Option<Upstream>,
) -> TestApp {
    let mut env = llm.daemon_env(openai);
    env.extend([
        ("MCPBOOTD_LLM__TIMEOUT_MS".to_string(), "2000".to_string()),
        ("MCPBOOTD_LLM__MAX_RETRIES".to_string(), "2".to_string()),
        (format!("MCPBOOTD_EGRESS__RESOLVE__{DOCS_HOST}"), "127.0.0.1".to_string()),
    ]);
    env.extend(extra);
    spawn_app_with(AppOptions { env, upstream, ..AppOptions::default() }).await
}

/// Documentation that links the API host (used) and another host (not used by the plan).
pub(crate) fn docs_html(port: u16) -> String {
    format!(
        "<html><head><script>var tracking = 1;</script><style>p {{}}</style></head><body>\
         <nav>Home | About</nav><h1>Items API</h1>\
         <p>Fetch an item: <code>GET http://{WEATHER_HOST}:{port}/items/{{id}}</code> returns JSON with \
         id, title, by, score and kids.</p>\
         <p>See also <a href=\"http://{OTHER_HOST}:{port}/status\">the status page</a> &amp; more.</p>\
         <footer>Copyright</footer></body></html>"
    )
}

pub(crate) fn plan_json(port: u16) -> String {
    json!({
        "tools": [{
            "name": "get_item",
            "description": "Fetch one item by id",
            "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "endpoints_used": [format!("GET http://{WEATHER_HOST}:{port}/items/{{id}}")],
            "implementation_notes": "GET the item and return id, title and author",
            "needs_network": true,
            "example_args": {"id": 1}
        }, {
            "name": "add",
            "description": "Add two numbers",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
            "endpoints_used": [],
            "implementation_notes": "return a + b",
            "needs_network": false,
            "example_args": {"a": 1, "b": 2}
        }]
    })
    .to_string()
}

pub(crate) fn get_item_handler(port: u16) -> String {
    format!(
        "const res = await fetch(`http://{WEATHER_HOST}:{port}/items/${{args.id}}`);\n\
         if (!res.ok) throw new Error('upstream answered ' + res.status);\n\
         const item = await res.json();\n\
         return {{ id: item.id, title: item.title, author: item.by }};"
    )
}

/// Routes planner requests to `plan` and compiler requests to per-tool handlers.
pub(crate) fn script_happy_path(llm: &ScriptedLlm, port: u16) {
    let plan = plan_json(port);
    let get_item = get_item_handler(port);
    llm.respond_with(move |request| {
        if request.system().contains("You are the planner") {
            Scripted::text(format!("Here is the plan:\n```json\n{plan}\n```"))
        } else if request.last_user_message().contains("\"name\": \"get_item\"") {
            Scripted::text(format!("```javascript\n{get_item}\n```"))
        } else {
            Scripted::text("return args.a + args.b;")
        }
    });
}

pub(crate) async fn register_prompt(app: &TestApp, body: Value) -> String {
    let (status, response) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202, "{response}");
    assert_eq!(response["status"], "pending");
    response["id"].as_str().unwrap().to_string()
}

pub(crate) fn prompt(app: &TestApp) -> String {
    format!(
        "Create MCP tools for the items API documented at http://{DOCS_HOST}:{}/docs/page.",
        app.upstream.address.port()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_becomes_a_working_server() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_happy_path(&llm, port);

    let id = register_prompt(&app, json!({"id": "items", "prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &id, &["ready", "failed"]).await;
    assert_eq!(view["status"], "ready", "{view:#}");
    let generation = &view["generation"];
    assert_eq!(generation["cache_hit"], false);
    assert_eq!(generation["model"], "test-model");
    assert!(generation["tokens"]["input"].as_u64().unwrap() > 0);
    assert_eq!(generation["tokens"]["requests"], 3, "one plan + one compile per tool");
    for stage in ["fetching_ms", "planning_ms", "compiling_ms", "testing_ms", "total_ms"] {
        assert!(generation["timings"][stage].is_u64(), "{stage} missing: {}", generation["timings"]);
    }
    // The document: fetched, stripped of script/nav/footer, hashed, with its links recorded.
    let document = &generation["documents"][0];
    assert_eq!(document["content_type"].as_str().unwrap().split(';').next().unwrap(), "text/html");
    assert_eq!(document["sha256"].as_str().unwrap().len(), 64);
    assert!(document["discovered_urls"].as_array().unwrap().iter().any(|u| u.as_str().unwrap().contains(OTHER_HOST)));
    // The whitelist: the prompt's host, the API host the plan uses, and not the unused link.
    let whitelist = generation["whitelist"].as_array().unwrap();
    let entry = |domain: &str| whitelist.iter().find(|e| e["domain"] == domain).cloned();
    assert_eq!(entry(DOCS_HOST).unwrap()["source"], "prompt");
    let api = entry(WEATHER_HOST).expect("the API host the plan uses is whitelisted");
    assert_eq!(api["source"], "discovered");
    assert!(api["detail"].as_str().unwrap().contains("get_item"), "{api}");
    assert!(entry(OTHER_HOST).is_none(), "a discovered domain no tool uses stays off the whitelist");
    let refused = generation["refused_domains"].as_array().unwrap();
    assert!(
        refused.iter().any(|r| r["domain"] == OTHER_HOST && r["reason"].as_str().unwrap().contains("no planned tool")),
        "{refused:?}"
    );
    // Self-tests ran for both read-only tools.
    let tools = view["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    for tool in tools {
        assert_eq!(tool["self_test"]["status"], "passed", "{tool}");
    }
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
    assert_eq!(tools[0]["annotations"]["openWorldHint"], true);

    // The LLM saw the real wire format, the user's prompt and the stripped docs.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.header("x-api-key"), Some("test-key"));
        assert!(request.header("anthropic-version").is_some());
        assert_eq!(request.body["model"], "test-model");
        assert!(request.mentions(&prompt(&app)), "the user's prompt reaches planner and compiler");
    }
    assert!(
        requests[0].mentions("Items API") && !requests[0].mentions("var tracking"),
        "docs were stripped of scripts"
    );

    // Served over MCP: the planned tools, with annotations, and a call reaches the API through the whitelist.
    let client = app.mcp(&id).await;
    let listed = client.list_tools(None).await.unwrap().tools;
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["get_item", "add"]);
    let result = mcp_call(&client, "get_item", json!({"id": 42})).await;
    assert_eq!(result.structured_content, Some(json!({"id": 42, "title": "Item 42", "author": "alice"})), "{result:?}");
    assert_eq!(text_of(&mcp_call(&client, "add", json!({"a": 2, "b": 40})).await), "42");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_wire_format_and_cache_hits_with_zero_llm_requests() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, true, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_happy_path(&llm, port);

    let first = register_prompt(&app, json!({"id": "first", "prompt": prompt(&app)})).await;
    assert_eq!(wait_for_status(&app, &first, &["ready", "failed"]).await["status"], "ready");
    let after_first = llm.requests();
    assert!(after_first.iter().all(|r| r.path == "/v1/chat/completions"));
    assert_eq!(after_first[0].header("authorization"), Some("Bearer test-key"));
    assert_eq!(after_first[0].body["messages"][0]["role"], "system");

    // Same prompt, same docs, same model: reused without asking the LLM.
    let started = std::time::Instant::now();
    let second = register_prompt(&app, json!({"id": "second", "prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &second, &["ready", "failed"]).await;
    println!("cached re-registration reached ready in {:?}", started.elapsed());
    assert_eq!(view["status"], "ready");
    assert_eq!(view["generation"]["cache_hit"], true);
    assert_eq!(llm.requests().len(), after_first.len(), "a cache hit makes zero LLM requests");
    let client = app.mcp(&second).await;
    assert_eq!(text_of(&mcp_call(&client, "add", json!({"a": 1, "b": 1})).await), "2");
    client.cancel().await.unwrap();

    // force bypasses the cache.
    let (status, body) = app.post(&format!("/admin/servers/{second}/regenerate"), &json!({"force": true})).await;
    assert_eq!(status, 202, "{body}");
    wait_for_generation(&app, &second, body["generation_id"].as_i64().unwrap()).await;
    assert_eq!(llm.requests().len(), after_first.len() * 2, "force regenerates with the LLM");

    // Changed documentation changes the content hash, so a plain regenerate asks the LLM again.
    app.upstream.set_docs(&docs_html(port).replace("Items API", "Items API v2"));
    let (status, body) = app.post(&format!("/admin/servers/{first}/regenerate"), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    let view = wait_for_generation(&app, &first, body["generation_id"].as_i64().unwrap()).await;
    assert_eq!(view["generation"]["cache_hit"], false);
    assert_eq!(llm.requests().len(), after_first.len() * 3);
}

/// Waits until generation `generation_id` of `id` finished; returns the server view.
pub(crate) async fn wait_for_generation(app: &TestApp, id: &str, generation_id: i64) -> Value {
    for _ in 0..1500 {
        let (_, view) = app.get(&format!("/admin/servers/{id}")).await;
        let finished = |g: &Value| g["id"] == generation_id && g["finished_at"].is_string();
        if finished(&view["generation"]) || finished(&view["latest_generation"]) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("generation {generation_id} of {id} never finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_plans_and_broken_handlers_are_repaired() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    let bad_plan = plan_json(port).replace("get_item", "Get-Item");
    llm.push(Scripted::Status(429, "{\"error\": \"rate limited\"}".into()));
    llm.push(Scripted::text(bad_plan));
    llm.push(Scripted::Status(529, "{\"type\": \"overloaded_error\"}".into()));
    llm.push(Scripted::text(plan_json(port)));
    let get_item = get_item_handler(port);
    llm.respond_with(move |request| {
        let user = request.last_user_message();
        if user.contains("\"name\": \"get_item\"") && !request.messages().iter().any(|(role, _)| role == "assistant") {
            Scripted::text("const x = (1 +;\nreturn x;")
        } else if request.messages().iter().any(|(role, _)| role == "assistant") && request.mentions("get_item") {
            Scripted::text(get_item.clone())
        } else {
            Scripted::text("return args.a + args.b;")
        }
    });
    let id = register_prompt(&app, json!({"prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &id, &["ready", "failed"]).await;
    assert_eq!(view["status"], "ready", "{view:#}");
    let requests = llm.requests();
    let repair = requests
        .iter()
        .find(|r| r.system().contains("You are the planner") && r.messages().len() == 3)
        .expect("a plan repair turn");
    assert!(
        repair.last_user_message().contains("Get-Item"),
        "the repair names the problem: {}",
        repair.last_user_message()
    );
    let compile_repair = requests
        .iter()
        .find(|r| !r.system().contains("You are the planner") && r.messages().len() == 3)
        .expect("a compile repair turn");
    assert!(compile_repair.last_user_message().contains("line"), "{}", compile_repair.last_user_message());
    let client = app.mcp(&id).await;
    let result = mcp_call(&client, "get_item", json!({"id": 3})).await;
    assert_eq!(result.structured_content.unwrap()["title"], "Item 3");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_that_hang_or_babble_fail_with_clear_errors() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(
        &llm,
        false,
        vec![("MCPBOOTD_LLM__TIMEOUT_MS".into(), "300".into()), ("MCPBOOTD_LLM__MAX_RETRIES".into(), "1".into())],
        None,
    )
    .await;
    llm.respond_with(|_| Scripted::Hang);
    let id =
        register_prompt(&app, json!({"id": "hangs", "prompt": "Tools for http://docs.weather.test/nothing"})).await;
    let view = wait_for_status(&app, &id, &["failed", "ready"]).await;
    let error = view["latest_generation"]["error"].as_str().unwrap();
    assert!(error.starts_with("planning failed") && error.contains("did not answer within"), "{error}");
    assert!(
        view["latest_generation"]["warnings"][0].as_str().unwrap().contains("docs.weather.test"),
        "a failed docs fetch is a warning: {view}"
    );

    llm.respond_with(|_| Scripted::Garbage);
    let id = register_prompt(&app, json!({"id": "babbles", "prompt": "Tools for nothing in particular"})).await;
    let view = wait_for_status(&app, &id, &["failed", "ready"]).await;
    let error = view["latest_generation"]["error"].as_str().unwrap();
    assert!(error.starts_with("planning failed"), "{error}");

    llm.respond_with(|_| Scripted::text("I would rather write a poem."));
    let id = register_prompt(&app, json!({"id": "poet", "prompt": "Tools for nothing in particular"})).await;
    let view = wait_for_status(&app, &id, &["failed", "ready"]).await;
    let error = view["latest_generation"]["error"].as_str().unwrap();
    assert!(error.starts_with("planning failed") && error.contains("3 attempts"), "{error}");
    // Failed servers are not mounted.
    let (status, _) =
        app.post(&format!("/servers/{id}/mcp"), &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_stops_after_planning() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_happy_path(&llm, port);
    let id = register_prompt(&app, json!({"id": "dry", "prompt": prompt(&app), "dry_run": true})).await;
    let view = wait_for_status(&app, &id, &["planned", "failed", "ready"]).await;
    assert_eq!(view["status"], "planned", "{view:#}");
    assert_eq!(view["serving"], false);
    let generation = &view["latest_generation"];
    assert_eq!(generation["plan"]["tools"][0]["name"], "get_item");
    assert!(generation["whitelist"].as_array().unwrap().iter().any(|e| e["domain"] == WEATHER_HOST));
    assert_eq!(llm.requests().len(), 1, "only the planner ran");
    let (status, body) =
        app.post(&format!("/servers/{id}/mcp"), &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(status, 503, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_llm_configured_refuses_prompts_but_not_toolsets() {
    let app = spawn_app().await;
    let (status, body) = app.post("/admin/servers", &json!({"prompt": "Tools for https://example.com/docs"})).await;
    assert_eq!(status, 422);
    let message = error_message(&body);
    assert!(
        message.contains("[llm]") && message.contains("ANTHROPIC_API_KEY") && message.contains("OPENAI_API_KEY"),
        "{message}"
    );
    let (_, list) = app.get("/admin/servers").await;
    assert!(list["servers"].as_array().unwrap().is_empty(), "nothing half-registered");
    app.register(json!({"tools": [tool("ok", "return 1;")]})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_generation_marks_it_failed_and_regenerate_recovers() {
    if crate::helpers::on_postgres() {
        return; // on a shared catalog an interrupted job is taken over instead (replicas.rs)
    }
    use futures_util::StreamExt;
    let llm = ScriptedLlm::start().await;
    // A grace period far longer than the test: an open event stream must not hold the drain.
    let env = vec![
        ("MCPBOOTD_LLM__TIMEOUT_MS".into(), "10000".into()),
        ("MCPBOOTD_SERVER__SHUTDOWN_GRACE_MS".into(), "60000".into()),
    ];
    let app = spawn_with_llm(&llm, false, env, None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    llm.respond_with(|_| Scripted::Hang);
    let id = register_prompt(&app, json!({"id": "interrupted", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["planning"]).await;
    let events = app.http.get(app.url(&format!("/admin/servers/{id}/events"))).send().await.unwrap();
    assert_eq!(events.status(), 200);
    let (data_dir, upstream) = (app.data_dir.clone(), app.upstream.clone());
    tokio::time::timeout(Duration::from_secs(20), app.stop())
        .await
        .expect("shutdown ends open event streams instead of waiting out the grace period");
    let mut stream = events.bytes_stream();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("stream ended") {
        if chunk.is_err() {
            break;
        }
    }

    let mut env = llm.daemon_env(false);
    env.push((format!("MCPBOOTD_EGRESS__RESOLVE__{DOCS_HOST}"), "127.0.0.1".to_string()));
    let app = spawn_app_with(AppOptions { env, data_dir: Some(data_dir), upstream: Some(upstream) }).await;
    let view = wait_for_status(&app, &id, &["failed"]).await;
    let error = view["latest_generation"]["error"].as_str().unwrap();
    assert!(error.contains("interrupted") && error.contains("regenerate"), "{error}");

    script_happy_path(&llm, port);
    let (status, body) = app.post(&format!("/admin/servers/{id}/regenerate"), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    let view = wait_for_status(&app, &id, &["ready"]).await;
    assert_eq!(view["serving"], true);
    let (status, body) = app.post(&format!("/admin/servers/{id}/regenerate"), &json!({"force": "yes"})).await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_tests_get_one_repair_and_failures_stay_visible() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    let plan = plan_json(port);
    let good = get_item_handler(port);
    llm.respond_with(move |request| {
        let first_turn = request.messages().len() == 1;
        if request.system().contains("You are the planner") {
            Scripted::text(plan.clone())
        } else if request.last_user_message().contains("\"name\": \"get_item\"") && first_turn {
            Scripted::text("throw new Error('broken on purpose');")
        } else if request.mentions("broken on purpose") {
            Scripted::text(good.clone())
        } else {
            Scripted::text("throw new Error('add is broken');")
        }
    });
    let id = register_prompt(&app, json!({"id": "selftest", "prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &id, &["ready", "failed"]).await;
    assert_eq!(view["status"], "ready", "a tool that fails its self-test is kept: {view:#}");
    let tools = view["tools"].as_array().unwrap();
    let get_item = &tools[0]["self_test"];
    assert_eq!(get_item["status"], "passed", "{get_item}");
    assert_eq!(get_item["attempts"], 2);
    assert!(get_item["first_error"].as_str().unwrap().contains("broken on purpose"));
    let add = &tools[1]["self_test"];
    assert_eq!(add["status"], "failed", "{add}");
    assert!(add["error"].as_str().unwrap().contains("add is broken"), "{add}");
    let repair =
        llm.requests().into_iter().find(|r| r.mentions("broken on purpose") && r.messages().len() == 3).unwrap();
    assert!(
        repair.last_user_message().contains("\"id\":1") || repair.last_user_message().contains("\"id\": 1"),
        "the repair shows the arguments: {}",
        repair.last_user_message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_streams_as_server_sent_events() {
    use futures_util::StreamExt;
    let llm = ScriptedLlm::start().await;
    // The planner is held below until the stream has sent the current status: the daemon must not
    // give up on it (and retry) meanwhile, however loaded the machine is.
    let patient = vec![("MCPBOOTD_LLM__TIMEOUT_MS".to_string(), "30000".to_string())];
    let app = spawn_with_llm(&llm, false, patient, None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    // Hold the planner until the event stream is open, so every stage is observed.
    let gate = Gate::default();
    let held = std::sync::Mutex::new(Some(gate.clone()));
    let plan = plan_json(port);
    let good = get_item_handler(port);
    llm.respond_with(move |request| {
        if request.system().contains("You are the planner") {
            match held.lock().unwrap().take() {
                Some(gate) => Scripted::Gated(gate, Box::new(Scripted::text(plan.clone()))),
                None => Scripted::text(plan.clone()),
            }
        } else if request.last_user_message().contains("\"name\": \"get_item\"") {
            Scripted::text(good.clone())
        } else {
            Scripted::text("return args.a + args.b;")
        }
    });
    let id = register_prompt(&app, json!({"id": "streamed", "prompt": prompt(&app)})).await;
    wait_for_status(&app, &id, &["planning"]).await;
    let response = app.http.get(app.url(&format!("/admin/servers/{id}/events"))).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    // The current status comes at once, while the planner is still held (not with the next change).
    let mut stream = response.bytes_stream();
    let mut body = String::new();
    while !body.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        let chunk = chunk.expect("the current status is sent before anything changes").unwrap().unwrap();
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(body.starts_with("event: status") && body.contains("\"status\":\"planning\""), "{body}");
    gate.open();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let events: Vec<(String, Value)> = body
        .split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_string(), serde_json::from_str(data).unwrap()))
        })
        .collect();
    let statuses: Vec<&str> = events.iter().map(|(_, data)| data["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["planning", "compiling", "testing", "ready", "ready"]);
    let (last_name, last) = events.last().unwrap();
    assert_eq!(last_name, "done");
    assert_eq!(last["id"], "streamed");
    // A finished server answers with its status and `done` at once.
    let body =
        app.http.get(app.url(&format!("/admin/servers/{id}/events"))).send().await.unwrap().text().await.unwrap();
    assert!(body.contains("event: status") && body.contains("event: done") && body.contains("\"ready\""), "{body}");
    let (status, body) = app.get("/admin/servers/nope/events").await;
    assert_eq!(status, 404, "{body}");
}

/// Credentials given with a prompt: the planner and compiler learn their names, domains and how
/// they are sent (never the value), the self-test and the served tool call the API with them,
/// and a prompt that pastes a key is refused before anything reaches the LLM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_knows_credentials_by_name_and_never_sees_their_values() {
    const KEY: &str = "items-api-key-0123456789abcdef";
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm, false, vec![], None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_happy_path(&llm, port);

    let pasted = format!("{} Use the api_key=abcdef0123456789abcdef0123456789 for it.", prompt(&app));
    let (status, body) = app.post("/admin/servers", &json!({"id": "pasted", "prompt": pasted})).await;
    assert_eq!(status, 422, "{body}");
    assert!(error_message(&body).contains("credential"), "{body}");
    assert!(llm.requests().is_empty(), "nothing reached the LLM");

    let credentials = json!({"items": {"value": KEY, "domains": [WEATHER_HOST], "inject": {"header": "X-Api-Key"}}});
    let id = register_prompt(&app, json!({"id": "keyed", "prompt": prompt(&app), "credentials": credentials})).await;
    let view = wait_for_status(&app, &id, &["ready", "failed"]).await;
    assert_eq!(view["status"], "ready", "{view:#}");
    assert_eq!(view["tools"][0]["self_test"]["status"], "passed", "{view:#}");
    assert!(!view.to_string().contains(KEY), "handlers and the view hold no key");

    let requests = llm.requests();
    assert!(requests.iter().all(|r| !r.body.to_string().contains(KEY)), "the LLM never sees the value");
    for request in &requests {
        assert!(request.mentions("Credentials the daemon adds"), "planner and compiler are told");
        assert!(request.mentions("`items`") && request.mentions("X-Api-Key: <secret>"));
    }
    let self_test = app.upstream.requests();
    assert!(self_test.iter().any(|r| r.headers.get("x-api-key").is_some_and(|v| v == KEY)), "the self-test sends it");

    let client = app.mcp(&id).await;
    let result = mcp_call(&client, "get_item", json!({"id": 7})).await;
    assert_eq!(result.structured_content, Some(json!({"id": 7, "title": "Item 7", "author": "alice"})), "{result:?}");
    assert_eq!(app.upstream.requests().last().unwrap().headers["x-api-key"], KEY);
    client.cancel().await.unwrap();

    // Credentials are part of the cache key: the same prompt without them is planned afresh.
    let id = register_prompt(&app, json!({"id": "plain", "prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &id, &["ready", "failed"]).await;
    assert_eq!(view["generation"]["cache_hit"], false, "{view:#}");
}
