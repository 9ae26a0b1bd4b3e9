//! The `mcpbootd` client commands, run as the real binary against a spawned daemon: output, `--json`
//! and the exit codes scripts rely on (0 ok, 1 API error, 2 usage/local error, 3 unreachable).

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::scripted_llm::{Scripted, ScriptedLlm};

const DOCS_HOST: &str = "docs.weather.test";

pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    pub fn assert_ok(&self) -> &Run {
        assert_eq!(self.code, 0, "expected success\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    pub fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "expected exit {code}\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

/// Runs `mcpbootd <args>` with a clean client environment plus `env`.
pub(crate) async fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpbootd"));
    command.args(args).env_remove("MCPBOOTD_URL").env_remove("MCPBOOTD_ADMIN_TOKEN").stdin(std::process::Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("mcpbootd {args:?} did not finish"))
        .expect("the binary runs");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// Runs a client command against `app` (`--url` from `MCPBOOTD_URL`, as scripts would set it).
pub(crate) async fn cli(app: &TestApp, args: &[&str]) -> Run {
    let url = app.url("");
    run(args, &[("MCPBOOTD_URL", url.as_str())]).await
}

fn calculator() -> Value {
    json!({
        "id": "calc",
        "name": "Calculator",
        "tools": [
            {
                "name": "add",
                "description": "Add two numbers",
                "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
                "handler": "return { sum: args.a + args.b };",
            },
            tool("broken", "throw new Error('broken on purpose');"),
        ],
    })
}

fn write_json(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolset_registered_from_a_file_is_listed_shown_and_called() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write_json(dir.path(), "calc.json", &calculator());

    let registered = cli(&app, &["register", "--toolset", &file]).await;
    registered.assert_ok();
    let mcp_url = app.mcp_url("calc");
    assert!(registered.stdout.contains(&format!("MCP URL: {mcp_url}")), "{}", registered.stdout);
    let snippet_start = registered.stdout.find('{').expect("a config snippet");
    let snippet: Value = serde_json::from_str(&registered.stdout[snippet_start..]).expect("the snippet is JSON");
    assert_eq!(snippet, json!({"mcpServers": {"calc": {"url": mcp_url}}}));

    let list = cli(&app, &["list"]).await;
    list.assert_ok();
    let mut lines = list.stdout.lines();
    let header = lines.next().unwrap();
    for column in ["ID", "NAME", "STATUS", "TOOLS", "CALLS 1H", "MCP PATH", "CREATED"] {
        assert!(header.contains(column), "{header}");
    }
    let row = lines.find(|l| l.starts_with("calc ")).expect("calc is listed");
    assert!(row.contains("Calculator") && row.contains("ready") && row.contains("/servers/calc/mcp"), "{row}");
    // Columns line up: each header starts where its cells start.
    assert_eq!(header.find("STATUS"), row.find("ready"), "\n{header}\n{row}");

    let listed = cli(&app, &["list", "--json"]).await;
    listed.assert_ok();
    let servers = listed.json()["servers"].as_array().unwrap().clone();
    assert!(servers.iter().any(|s| s["id"] == "calc" && s["tool_count"] == 2), "{servers:?}");

    let shown = cli(&app, &["show", "calc"]).await;
    shown.assert_ok();
    for needle in ["Calculator", "ready", "add", "Add two numbers", "broken", &mcp_url] {
        assert!(shown.stdout.contains(needle), "{needle:?} missing in\n{}", shown.stdout);
    }
    assert_eq!(cli(&app, &["show", "calc", "--json"]).await.json()["tools"][0]["name"], "add");

    let called = cli(&app, &["call", "calc", "add", "--args", r#"{"a": 2, "b": 40}"#]).await;
    called.assert_ok();
    assert!(called.stdout.contains("\"sum\": 42"), "{}", called.stdout);
    let called = cli(&app, &["call", "calc", "add", "--args", r#"{"a": 1, "b": 1}"#, "--json"]).await;
    called.assert_ok();
    let body = called.json();
    assert_eq!(body["result"]["structuredContent"], json!({"sum": 2}));
    assert!(body["execution_id"].is_string());

    let thrown = cli(&app, &["call", "calc", "broken"]).await;
    thrown.assert_code(1);
    assert!(thrown.stdout.contains("broken on purpose"), "the result text is printed: {}", thrown.stdout);
    assert!(
        thrown.stderr.starts_with("error: the call of tool \"broken\" failed (outcome error, execution ")
            && thrown.stderr.contains("`mcpbootd calls calc` shows the call log"),
        "{}",
        thrown.stderr
    );
    let unknown = cli(&app, &["call", "calc", "nope"]).await;
    unknown.assert_code(1);
    assert!(unknown.stderr.contains("`mcpbootd show calc` lists its tools"), "names the command: {}", unknown.stderr);

    // Local mistakes never reach the daemon and exit 2.
    let invalid = cli(&app, &["call", "calc", "add", "--args", "{nope"]).await;
    invalid.assert_code(2);
    assert!(invalid.stderr.contains("--args is not valid JSON"), "{}", invalid.stderr);
    cli(&app, &["call", "calc", "add", "--args", "[1, 2]"]).await.assert_code(2);
    cli(&app, &["register", "--toolset", "/nonexistent/toolset.json"]).await.assert_code(2);
    cli(&app, &["list", "--bogus"]).await.assert_code(2);

    let calls = cli(&app, &["calls", "calc", "--json"]).await;
    calls.assert_ok();
    let log = calls.json()["calls"].as_array().unwrap().clone();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0]["tool"], "broken");
    assert_eq!(log[0]["outcome"], "error");
    let table = cli(&app, &["calls", "calc", "--limit", "2"]).await;
    table.assert_ok();
    assert_eq!(table.stdout.lines().count(), 3, "header + 2 calls:\n{}", table.stdout);
    assert!(table.stdout.starts_with("TIME") && table.stdout.contains("broken on purpose"), "{}", table.stdout);
    let failed = cli(&app, &["calls", "calc", "--json", "--outcome", "error", "--since", "1h"]).await;
    failed.assert_ok();
    let failed = failed.json()["calls"].as_array().unwrap().clone();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["tool"], "broken");
    let none = cli(&app, &["calls", "calc", "--json", "--tool", "broken", "--since", "2999-01-01T00:00:00Z"]).await;
    none.assert_ok();
    assert_eq!(none.json()["calls"], serde_json::json!([]));
    let bad_time = cli(&app, &["calls", "calc", "--since", "last tuesday"]).await;
    bad_time.assert_code(1);
    assert!(bad_time.stderr.contains("is not a time"), "{}", bad_time.stderr);

    // The API's own refusals exit 1 with its message and code.
    let bad_args = cli(&app, &["call", "calc", "add", "--args", r#"{"a": "two"}"#]).await;
    bad_args.assert_code(1);
    assert!(bad_args.stderr.contains("(invalid_arguments, HTTP 422)"), "{}", bad_args.stderr);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_register_round_trips_and_delete_removes() {
    let app = spawn_app().await;
    app.register(calculator()).await;
    let dir = tempfile::tempdir().unwrap();

    let exported = cli(&app, &["export", "calc"]).await;
    exported.assert_ok();
    let file = dir.path().join("export.json");
    std::fs::write(&file, &exported.stdout).unwrap();
    let file = file.display().to_string();

    // The same id is taken: the API's conflict comes through with exit 1.
    let conflict = cli(&app, &["register", "--toolset", &file]).await;
    conflict.assert_code(1);
    assert!(
        conflict.stderr.contains("already exists") && conflict.stderr.contains("(server_exists, HTTP 409)"),
        "{}",
        conflict.stderr
    );
    assert!(conflict.stderr.contains("`mcpbootd delete calc` first"), "{}", conflict.stderr);

    let copy = cli(&app, &["register", "--toolset", &file, "--id", "calc2", "--json"]).await;
    copy.assert_ok();
    assert_eq!(copy.json()["id"], "calc2");
    let (_, original) = app.get("/admin/servers/calc/export").await;
    let (_, copied) = app.get("/admin/servers/calc2/export").await;
    assert_eq!(original["tools"], copied["tools"]);
    let called = cli(&app, &["call", "calc2", "add", "--args", r#"{"a": 20, "b": 22}"#]).await;
    called.assert_ok();
    assert!(called.stdout.contains("42"), "{}", called.stdout);

    let deleted = cli(&app, &["delete", "calc2"]).await;
    deleted.assert_ok();
    assert!(deleted.stdout.contains("deleted calc2"), "{}", deleted.stdout);
    let gone = cli(&app, &["show", "calc2"]).await;
    gone.assert_code(1);
    assert!(gone.stderr.starts_with("error: no server ") && gone.stderr.contains("calc2"), "{}", gone.stderr);
    assert!(gone.stderr.contains("(server_not_found, HTTP 404)"), "{}", gone.stderr);
    assert!(gone.stderr.contains("`mcpbootd list` shows them") && !gone.stderr.contains("GET /"), "{}", gone.stderr);
    assert!(gone.stdout.is_empty());
    cli(&app, &["delete", "calc2"]).await.assert_code(1);
    assert_eq!(cli(&app, &["delete", "calc", "--json"]).await.json(), json!({"id": "calc", "deleted": true}));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_protected_server_is_shown_as_one_and_its_token_is_never_printed() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let token = "cli-access-token-0123456789";
    let mut body = calculator();
    body["access_token"] = json!(token);
    let file = write_json(dir.path(), "guarded.json", &body);
    let url = app.url("");

    // `--url` works before the command as well as after it.
    let registered = run(&["--url", &url, "register", "--toolset", &file], &[]).await;
    registered.assert_ok();
    let snippet_start = registered.stdout.find('{').expect("a config snippet");
    let snippet_end = registered.stdout.rfind('}').unwrap() + 1;
    let snippet: Value = serde_json::from_str(&registered.stdout[snippet_start..snippet_end]).expect("JSON snippet");
    assert_eq!(
        snippet,
        json!({"mcpServers": {"calc": {"url": app.mcp_url("calc"), "headers": {"Authorization": "Bearer <access_token>"}}}})
    );
    assert!(registered.stdout.contains("replace <access_token> with the access_token"), "{}", registered.stdout);

    let shown = run(&["--url", &url, "show", "calc"], &[]).await;
    shown.assert_ok();
    assert!(shown.stdout.contains("auth:        static token: MCP hosts send Authorization"), "{}", shown.stdout);

    let exported = cli(&app, &["export", "calc"]).await;
    exported.assert_ok();
    assert!(exported.json().get("access_token").is_none());
    assert!(
        exported.stderr.contains("requires an access token, which is not exported")
            && exported.stderr.contains("add \"access_token\""),
        "{}",
        exported.stderr
    );
    for output in [&registered, &shown, &exported] {
        assert!(!output.stdout.contains(token) && !output.stderr.contains(token), "the token is never printed");
    }

    // Without a token, `show` says so and the export has nothing to warn about.
    app.register(json!({"id": "open", "tools": [tool("hi", "return 'hi';")]})).await;
    let shown = cli(&app, &["show", "open"]).await;
    assert!(shown.stdout.contains("auth:        open: any client"), "{}", shown.stdout);
    assert!(cli(&app, &["export", "open"]).await.stderr.is_empty());
    app.stop().await;
}

#[tokio::test]
async fn help_describes_every_argument_and_usage_shows_options_as_optional() {
    let commands = [
        "register",
        "list",
        "show",
        "call",
        "calls",
        "delete",
        "export",
        "regenerate",
        "serve",
        "approve",
        "reject",
        "rollback",
        "check-drift",
        "versions",
        "diff",
    ];
    for command in commands {
        let help = run(&[command, "--help"], &[]).await;
        help.assert_ok();
        let usage = help.stdout.lines().find(|l| l.starts_with("Usage:")).unwrap_or_default();
        assert!(!usage.contains("--url"), "{command}: --url is optional, not in the usage line: {usage}");
        // Every argument line has a description after its name.
        let arguments = help.stdout.split("Arguments:\n").nth(1).unwrap_or_default();
        for line in arguments.lines().take_while(|l| l.starts_with("  ")) {
            let described = line.trim().split_once("  ").is_some_and(|(_, text)| !text.trim().is_empty());
            assert!(described, "{command}: undescribed argument {line:?}\n{}", help.stdout);
        }
    }
    let listen = run(&["serve", "--listen", "example.com:8092"], &[]).await;
    listen.assert_code(2);
    assert!(
        listen.stderr.contains("must be an IP address") && listen.stderr.contains("127.0.0.1:8092"),
        "{}",
        listen.stderr
    );
}

#[tokio::test]
async fn an_unreachable_daemon_exits_3_and_names_the_url() {
    let down = run(&["list", "--url", "http://127.0.0.1:1"], &[]).await;
    down.assert_code(3);
    assert!(down.stderr.contains("http://127.0.0.1:1/") && down.stderr.contains("from --url"), "{}", down.stderr);
    assert!(down.stderr.contains("MCPBOOTD_URL"), "{}", down.stderr);

    let down = run(&["show", "x"], &[("MCPBOOTD_URL", "http://127.0.0.1:1")]).await;
    down.assert_code(3);
    assert!(down.stderr.contains("from MCPBOOTD_URL"), "{}", down.stderr);

    run(&["list", "--url", "ftp://127.0.0.1:1"], &[]).await.assert_code(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_comes_from_the_environment() {
    let secret = "s3cret-token-value";
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_ADMIN_TOKEN".into(), secret.into())],
        ..AppOptions::default()
    })
    .await;
    let url = app.url("");

    let wrong = run(&["list"], &[("MCPBOOTD_URL", url.as_str()), ("MCPBOOTD_ADMIN_TOKEN", "wrong")]).await;
    wrong.assert_code(1);
    assert!(wrong.stderr.contains("token") && wrong.stderr.contains("(forbidden, HTTP 403)"), "{}", wrong.stderr);

    assert!(wrong.stderr.contains("MCPBOOTD_ADMIN_TOKEN is not the daemon's admin token"), "{}", wrong.stderr);

    let missing = run(&["list"], &[("MCPBOOTD_URL", url.as_str())]).await;
    missing.assert_code(1);
    assert!(missing.stderr.contains("(unauthorized, HTTP 401)"), "{}", missing.stderr);
    assert!(
        missing.stderr.contains("set MCPBOOTD_ADMIN_TOKEN") && !missing.stderr.contains("send Authorization"),
        "tells a CLI user what to set: {}",
        missing.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let file = write_json(dir.path(), "calc.json", &calculator());
    let env = [("MCPBOOTD_URL", url.as_str()), ("MCPBOOTD_ADMIN_TOKEN", secret)];
    let registered = run(&["register", "--toolset", &file], &env).await;
    registered.assert_ok();
    let listed = run(&["list", "--json"], &env).await;
    listed.assert_ok();
    assert_eq!(listed.json()["servers"][0]["id"], "calc");
    for output in [&wrong, &missing, &registered, &listed] {
        assert!(!output.stdout.contains(secret) && !output.stderr.contains(secret), "the token is never printed");
    }
    app.stop().await;
}

/// The daemon with a scripted LLM (as in generation.rs) and docs served by the fake upstream.
async fn spawn_with_llm(llm: &ScriptedLlm) -> TestApp {
    let mut env = llm.daemon_env(false);
    env.extend([
        ("MCPBOOTD_LLM__TIMEOUT_MS".to_string(), "2000".to_string()),
        ("MCPBOOTD_LLM__MAX_RETRIES".to_string(), "0".to_string()),
        (format!("MCPBOOTD_EGRESS__RESOLVE__{DOCS_HOST}"), "127.0.0.1".to_string()),
    ]);
    let app = spawn_app_with(AppOptions { env, ..AppOptions::default() }).await;
    app.upstream.set_docs("<html><body><h1>Calculator</h1><p>Adds numbers.</p></body></html>");
    app
}

fn prompt(app: &TestApp) -> String {
    format!(
        "Create MCP tools for the calculator documented at http://{DOCS_HOST}:{}/docs/page.",
        app.upstream.address.port()
    )
}

const STAGES: [&str; 8] = ["pending", "fetching", "planning", "compiling", "testing", "ready", "failed", "planned"];

/// The `stage: <status>` lines of non-TTY progress output, checked to be known statuses in order.
fn stage_lines(stderr: &str) -> Vec<String> {
    let stages: Vec<String> = stderr.lines().filter_map(|l| l.strip_prefix("stage: ")).map(str::to_string).collect();
    let positions: Vec<usize> = stages
        .iter()
        .map(|s| STAGES.iter().position(|known| known == s).unwrap_or_else(|| panic!("unknown stage {s:?}")))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "stages out of order or repeated: {stages:?}");
    stages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_wait_follows_a_generation_to_ready() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm).await;
    let plan = json!({"tools": [{
        "name": "add",
        "description": "Add two numbers",
        "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
        "endpoints_used": [],
        "implementation_notes": "return a + b",
        "needs_network": false,
        "example_args": {"a": 1, "b": 2}
    }]})
    .to_string();
    llm.respond_with(move |request| {
        if request.system().contains("You are the planner") {
            Scripted::text(format!("```json\n{plan}\n```"))
        } else {
            Scripted::text("return args.a + args.b;")
        }
    });

    let prompt = prompt(&app);
    let done = cli(&app, &["register", &prompt, "--id", "adder", "--name", "Adder", "--wait"]).await;
    done.assert_ok();
    let stages = stage_lines(&done.stderr);
    assert_eq!(stages.last().map(String::as_str), Some("ready"), "{}", done.stderr);
    let mcp_url = app.mcp_url("adder");
    assert!(done.stdout.contains("adder is ready: 1 tool (add)"), "{}", done.stdout);
    assert!(done.stdout.contains(&format!("MCP URL: {mcp_url}")), "{}", done.stdout);
    let snippet: Value = serde_json::from_str(&done.stdout[done.stdout.find('{').unwrap()..]).unwrap();
    assert_eq!(snippet["mcpServers"]["adder"]["url"], mcp_url);

    // The server works, and `show` has the generation's story.
    let called = cli(&app, &["call", "adder", "add", "--args", r#"{"a": 40, "b": 2}"#]).await;
    called.assert_ok();
    assert_eq!(called.stdout.trim(), "42");
    let shown = cli(&app, &["show", "adder"]).await;
    shown.assert_ok();
    for needle in [
        "status:      ready",
        "whitelist:",
        DOCS_HOST,
        "prompt",
        "self-test: passed",
        "model test-model",
        "cache miss",
        "timings: ",
    ] {
        assert!(shown.stdout.contains(needle), "{needle:?} missing in\n{}", shown.stdout);
    }

    // Regenerating over unchanged docs is a cache hit; --json prints the final server view.
    let again = cli(&app, &["regenerate", "adder", "--wait", "--json"]).await;
    again.assert_ok();
    let view = again.json();
    assert_eq!(view["status"], "ready");
    assert_eq!(view["generation"]["cache_hit"], true, "{view:#}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_wait_exits_1_when_the_generation_fails() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_with_llm(&llm).await;
    llm.respond_with(|_| Scripted::text("I would rather write a poem."));

    let prompt = prompt(&app);
    let failed = cli(&app, &["register", &prompt, "--id", "poet", "--wait"]).await;
    failed.assert_code(1);
    assert_eq!(stage_lines(&failed.stderr).last().map(String::as_str), Some("failed"), "{}", failed.stderr);
    assert!(failed.stderr.contains("error: generation 1 of poet failed: planning failed"), "{}", failed.stderr);
    assert!(!failed.stdout.contains("mcpServers"), "no snippet for a failed server: {}", failed.stdout);

    // A toolset server has no prompt to regenerate from: the API's conflict, exit 1.
    app.register(calculator()).await;
    let refused = cli(&app, &["regenerate", "calc"]).await;
    refused.assert_code(1);
    assert!(refused.stderr.contains("(not_generated, HTTP 409)"), "{}", refused.stderr);
    app.stop().await;
}

/// A daemon from before `/events`: the route answers 404 and `--wait` polls the server view.
#[tokio::test]
async fn register_wait_polls_a_daemon_without_the_events_route() {
    let statuses =
        Arc::new(Mutex::new(vec!["pending", "fetching", "planning", "planning", "compiling", "testing", "ready"]));
    let view = move || {
        let mut statuses = statuses.lock().unwrap();
        let status = if statuses.len() > 1 { statuses.remove(0) } else { statuses[0] };
        let tool =
            json!({"name": "add", "description": "Add", "input_schema": {"type": "object"}, "handler": "return 1;"});
        let at = "2025-01-02T03:04:05.678Z";
        json!({"id": "old", "name": "old", "kind": "prompt", "status": status, "serving": status == "ready",
               "access_token_set": false, "mcp_path": "/servers/old/mcp", "prompt": "make tools", "allow_domains": [],
               "whitelist": [], "tools": [tool], "created_at": at, "updated_at": at,
               "generation": {"id": 1, "source": "llm", "status": status, "stage": status, "error": null, "dry_run": false,
                              "force": false, "cache_hit": false, "cached_from": null, "prompt_hash": null,
                              "content_hash": null, "model": null, "generator_version": "v",
                              "tokens": {"input": 0, "output": 0, "requests": 0}, "timings": {}, "warnings": [],
                              "whitelist": [], "refused_domains": [], "documents": [], "plan": null, "tools": [tool],
                              "created_at": at, "finished_at": null}})
    };
    let router = axum::Router::new()
        .route(
            "/admin/servers",
            post(|| async {
                (
                    StatusCode::ACCEPTED,
                    Json(json!({"id": "old", "status": "pending", "mcp_path": "/servers/old/mcp", "generation_id": 1})),
                )
            }),
        )
        .route("/admin/servers/old", get(move || async move { Json(view()) }))
        .fallback(|| async {
            (StatusCode::NOT_FOUND, Json(json!({"error": {"code": "route_not_found", "message": "no route"}})))
                .into_response()
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });

    let done = run(&["register", "make tools", "--id", "old", "--wait", "--url", &url], &[]).await;
    done.assert_ok();
    assert_eq!(stage_lines(&done.stderr), ["pending", "fetching", "planning", "compiling", "testing", "ready"]);
    assert!(done.stdout.contains(&format!("{url}/servers/old/mcp")), "{}", done.stdout);
}

/// `auth` sets who may use a mount; `show` and `calls` say it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_switches_a_server_between_open_and_its_token() {
    let app = spawn_app().await;
    app.register(
        json!({"id": "gate", "access_token": "static-token-0123456789", "tools": [tool("hi", "return 'hi';")]}),
    )
    .await;
    let opened = cli(&app, &["auth", "gate", "open"]).await;
    opened.assert_ok();
    assert_eq!(
        opened.stdout.trim(),
        "gate: open to any client that reaches the daemon; its static access token was removed"
    );
    assert!(cli(&app, &["show", "gate"]).await.stdout.contains("auth:        open"));
    // OAuth needs an identity provider, which this daemon has not: the API's reason is shown.
    let refused = cli(&app, &["auth", "gate", "oauth", "--scope", "x"]).await;
    assert!(refused.stderr.contains("[auth.oauth] issuer"), "{}", refused.stderr);
    let wrong = cli(&app, &["auth", "gate", "sso"]).await;
    assert!(wrong.stderr.contains("use open, oauth or default"), "{}", wrong.stderr);
    let reset = cli(&app, &["--json", "auth", "gate", "default"]).await;
    reset.assert_ok();
    assert_eq!(reset.json()["auth"], json!({"mode": "open", "source": "default"}));
    app.stop().await;
}
