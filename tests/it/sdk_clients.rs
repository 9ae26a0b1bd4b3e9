//! Real MCP hosts: the official Python and TypeScript SDK clients drive a hosted server over
//! Streamable HTTP (list tools, a call with structured content, a call that throws).
//!
//! The clients are scripts under `tests/sdk/`, run as subprocesses; each prints one JSON summary
//! line. `.ci/run` installs them (a Python venv and `npm ci`). Interpreters can be overridden with
//! `MCPBOOTD_SDK_PYTHON` and `MCPBOOTD_SDK_NODE`; `MCPBOOTD_SKIP_SDK_TESTS=1` skips these tests.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

/// Longest a client script may take, start-up included.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk")
}

/// What a client script needs: the interpreter, the script, and the arguments after the URL.
/// (`oauth_provider.rs` runs its OpenID provider and OAuth client through these too.)
pub(crate) struct Client {
    pub(crate) label: &'static str,
    pub(crate) program: PathBuf,
    pub(crate) script: PathBuf,
    pub(crate) extra_args: Vec<&'static str>,
}

pub(crate) const INSTALL_HINT: &str = "run .ci/run once (it installs the SDK clients and the OpenID provider), or by hand:\n  \
     python3 -m venv tests/sdk/python/.venv && tests/sdk/python/.venv/bin/pip install -r tests/sdk/python/requirements.txt\n  \
     (cd tests/sdk/typescript && npm ci --ignore-scripts) && (cd tests/sdk/oidc && npm ci --ignore-scripts)\n\
     or set MCPBOOTD_SKIP_SDK_TESTS=1 to skip the SDK client tests";

/// The client to run, `None` when the SDK tests are skipped; panics when the SDK is not installed.
/// `oidc` is the OpenID provider the OAuth end-to-end test signs in at (run by the same node).
pub(crate) fn client(label: &'static str) -> Option<Client> {
    if std::env::var("MCPBOOTD_SKIP_SDK_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: the {label} SDK client test (MCPBOOTD_SKIP_SDK_TESTS=1)");
        return None;
    }
    let (variable, default, script, needs) = match label {
        "python" => {
            ("MCPBOOTD_SDK_PYTHON", sdk_dir().join("python/.venv/bin/python"), sdk_dir().join("python/client.py"), None)
        }
        "typescript" => (
            "MCPBOOTD_SDK_NODE",
            sdk_dir().join("typescript/node_modules/.bin/node"),
            sdk_dir().join("typescript/client.mjs"),
            // The script imports the SDK from its own node_modules, whichever node runs it.
            Some(sdk_dir().join("typescript/node_modules/@modelcontextprotocol/sdk/package.json")),
        ),
        "oidc" => (
            "MCPBOOTD_SDK_NODE",
            sdk_dir().join("typescript/node_modules/.bin/node"),
            sdk_dir().join("oidc/provider.mjs"),
            Some(sdk_dir().join("oidc/node_modules/oidc-provider/package.json")),
        ),
        _ => unreachable!(),
    };
    let program = match std::env::var_os(variable) {
        Some(program) => PathBuf::from(program),
        None => {
            assert!(
                default.exists(),
                "the {label} MCP SDK client is not installed ({} is missing); {INSTALL_HINT}",
                default.display()
            );
            default
        }
    };
    if let Some(needs) = needs {
        assert!(
            needs.exists(),
            "the {label} MCP SDK is not installed ({} is missing); {INSTALL_HINT}",
            needs.display()
        );
    }
    Some(Client { label, program, script, extra_args: Vec::new() })
}

/// A server with a tool that returns structured content and one that throws.
async fn calculator(app: &TestApp) -> String {
    app.register(json!({
        "id": "calc",
        "name": "Calculator",
        "tools": [
            {
                "name": "add",
                "description": "Add two numbers",
                "input_schema": {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"]
                },
                "annotations": {"readOnlyHint": true},
                "handler": "return { sum: args.a + args.b, operands: [args.a, args.b] };"
            },
            {
                "name": "fail",
                "description": "Always throws",
                "input_schema": {"type": "object", "properties": {"reason": {"type": "string"}}},
                "handler": "throw new Error(`refused: ${args.reason ?? 'no reason'}`);"
            }
        ]
    }))
    .await
}

/// Runs the client against `url` and returns its summary line, failing with its output otherwise.
async fn run(client: &Client, url: &str) -> Value {
    run_or_explain(client, url).await.unwrap_or_else(|failure| panic!("{failure}"))
}

/// Runs the client against `url`: its summary line, or what it printed when it failed.
pub(crate) async fn run_or_explain(client: &Client, url: &str) -> Result<Value, String> {
    let mut command = tokio::process::Command::new(&client.program);
    command
        .arg(&client.script)
        .arg(url)
        .args(&client.extra_args)
        .current_dir(sdk_dir())
        // Loopback must never go through a proxy a CI machine may configure.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().unwrap_or_else(|e| {
        panic!("cannot start the {} SDK client {}: {e}; {INSTALL_HINT}", client.label, client.program.display())
    });
    let output = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the {} SDK client did not finish within {CLIENT_TIMEOUT:?}", client.label))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "the {} SDK client failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            client.label, output.status
        ));
    }
    let line = stdout.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or_default();
    serde_json::from_str(line).map_err(|e| {
        format!(
            "the {} SDK client printed no JSON summary ({e}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            client.label
        )
    })
}

/// What every client must have seen: the tools, the structured result, the tool error.
fn assert_summary(label: &str, summary: &Value, reason: &str) {
    eprintln!("{label}: {summary}");
    assert_eq!(summary["tools"], json!(["add", "fail"]), "{summary}");
    assert_eq!(summary["server"], "calc", "serverInfo.name is the id: {summary}");
    assert_eq!(summary["server_title"], "Calculator", "serverInfo.title is the name: {summary}");
    assert_eq!(summary["structured"], json!({"sum": 42, "operands": [2, 40]}), "{summary}");
    assert_eq!(summary["error_result"]["isError"], true, "{summary}");
    let text = summary["error_result"]["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("refused: {reason}")), "the error text names the thrown message: {summary}");
    assert!(text.contains("line"), "the error text names the handler line: {summary}");
}

/// The calls the clients made are in the call log, the failing one as an error.
async fn assert_logged(app: &TestApp, id: &str) {
    let (status, calls) = app.get(&format!("/admin/servers/{id}/calls?limit=10")).await;
    assert_eq!(status, 200, "{calls}");
    let seen: Vec<(&str, &str, &str)> = calls["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no call list in {calls}"))
        .iter()
        .map(|c| {
            (c["tool"].as_str().unwrap_or(""), c["via"].as_str().unwrap_or(""), c["outcome"].as_str().unwrap_or(""))
        })
        .collect();
    // Newest first.
    assert_eq!(seen, [("fail", "mcp", "error"), ("add", "mcp", "ok")], "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_with_its_default_connect_policy() {
    let Some(client) = client("python") else { return };
    let app = spawn_app().await;
    let id = calculator(&app).await;
    let summary = run(&client, &app.mcp_url(&id)).await;
    assert_summary("python", &summary, "python");
    // The SDK's default probes `server/discover`; rmcp answers it, so this is the 2026-07-28 protocol
    // (stateless, `resultType` on every result), which the legacy-handshake tests do not cover.
    assert_eq!(summary["protocol_version"], "2026-07-28", "{summary}");
    assert_logged(&app, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_with_the_initialize_handshake() {
    let Some(mut client) = client("python") else { return };
    client.extra_args = vec!["legacy"];
    let app = spawn_app().await;
    let id = calculator(&app).await;
    let summary = run(&client, &app.mcp_url(&id)).await;
    assert_summary("python", &summary, "python");
    assert_eq!(summary["protocol_version"], "2025-11-25", "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client() {
    let Some(client) = client("typescript") else { return };
    let app = spawn_app().await;
    let id = calculator(&app).await;
    let summary = run(&client, &app.mcp_url(&id)).await;
    assert_summary("typescript", &summary, "typescript");
    assert_eq!(summary["protocol_version"], "2025-11-25", "{summary}");
    assert_logged(&app, &id).await;
}

/// What a host built on each SDK shows when the access token is missing: the daemon's message,
/// which says how to configure the token, not "Server returned an error response".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_access_token_is_shown_with_the_fix() {
    let app = spawn_app().await;
    app.register(json!({
        "id": "guarded",
        "access_token": "sdk-test-token-0123456789",
        "tools": [tool("hi", "return 'hi';")]
    }))
    .await;
    for label in ["python", "typescript"] {
        let Some(mut client) = client(label) else { return };
        client.extra_args = vec!["unauthorized"];
        let summary = run(&client, &app.mcp_url("guarded")).await;
        eprintln!("{label}: {summary}");
        let shown = summary["shown"].as_str().unwrap_or_default();
        assert!(shown.contains("no access token was sent"), "{label} shows: {shown}");
        assert!(shown.contains("Authorization"), "{label} shows how to send it: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_runs_code_mode_scripts() {
    let Some(mut client) = client("python") else { return };
    client.script = sdk_dir().join("python/code_mode.py");
    let app = crate::code_mode::code_mode_app(&[]).await;
    let summary = run(&client, &app.mcp_url("news")).await;
    assert_eq!(summary["value"], json!({"title": "Item 5", "country": "PE"}), "{summary}");
    assert_eq!(summary["calls"], json!(["news.get_item", "geo.country_of"]), "{summary}");
    assert_eq!(summary["error"], json!({"code": "RUNTIME_ERROR", "line": 3, "calls": 1}), "{summary}");
    eprintln!("python SDK: code_execution description {} bytes", summary["description_bytes"]);
    app.stop().await;
}
