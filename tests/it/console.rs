//! The web console at `/console`: its files and headers over plain HTTP, and end to end in a real
//! browser.
//!
//! The browser test runs `console/e2e/console.test.mjs` (playwright-core driving Debian's Chromium
//! at /usr/bin/chromium) against a daemon with an admin token and a scripted LLM, and fails with
//! the script's output when a flow fails. `.ci/run` installs Chromium and `console/node_modules`;
//! without them the test fails and says so, unless `MCPBOOTD_SKIP_BROWSER_TESTS=1` skips it. Node
//! is found as for the SDK clients (`MCPBOOTD_SDK_NODE`, else node 22 from tests/sdk/typescript).
//! Screenshots of every page visited land in `target/console-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION, X_CONTENT_TYPE_OPTIONS,
};
use serde_json::{Value, json};

use crate::generation::{docs_html, get_item_handler, plan_json, prompt, spawn_with_llm};
use crate::helpers::*;
use crate::scripted_llm::{Scripted, ScriptedLlm};

const TOKEN: &str = "console-e2e-token-0123456789";

/// Longest the browser script may take; its flows normally take seconds (each has its own limit).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the first plan is held, so the progress page shows a running stage as current.
const PLANNER_HOLD: Duration = Duration::from_millis(2000);

const CHROMIUM: &str = "/usr/bin/chromium";

const INSTALL_HINT: &str = "run .ci/run once (it installs Debian's chromium and console/node_modules), or by hand:\n  \
     apt-get install -y --no-install-recommends chromium\n  \
     (cd console && npm ci --ignore-scripts)\n  \
     (cd tests/sdk/typescript && npm ci --ignore-scripts)   # node 22, or set MCPBOOTD_SDK_NODE\n\
     or set MCPBOOTD_SKIP_BROWSER_TESTS=1 to skip the browser test";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn with_token(mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    env.push(("MCPBOOTD_ADMIN_TOKEN".to_string(), TOKEN.to_string()));
    env
}

/// The directives every console response must carry (src/api/console.rs has the whole policy).
const POLICY: [&str; 6] = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
];

fn assert_console_headers(response: &reqwest::Response, what: &str) {
    let headers = response.headers();
    let policy = headers.get(CONTENT_SECURITY_POLICY).map(|v| v.to_str().unwrap()).unwrap_or_default();
    for directive in POLICY {
        assert!(policy.split(';').any(|d| d.trim() == directive), "{what}: no {directive} in {policy:?}");
    }
    assert!(!policy.contains("unsafe"), "{what}: {policy}");
    assert_eq!(headers.get(X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff", "{what}");
    assert_eq!(headers.get(CACHE_CONTROL).unwrap(), "no-cache", "{what}");
    assert!(headers.get(ETAG).is_some(), "{what}");
}

/// Every file under `dir`, as names relative to it with forward slashes.
fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().to_str().unwrap());
        if entry.file_type().unwrap().is_dir() {
            files_under(&entry.path(), &format!("{name}/"), out);
        } else {
            out.push(name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_files_are_served_with_their_policy_and_without_a_token() {
    let app = spawn_app_with(AppOptions { env: with_token(vec![]), ..AppOptions::default() }).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    // The page, without the admin token (the console asks for it; the files hold no data).
    let response = http.get(app.url("/console")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_console_headers(&response, "/console");
    assert_eq!(response.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    assert_eq!(response.headers()["referrer-policy"], "no-referrer");
    let page = response.text().await.unwrap();
    assert!(page.contains(r#"<script type="module" src="/console/js/main.js">"#), "{page}");
    assert!(!page.contains("<script>"), "no inline script: the policy would refuse it");

    let response = http.get(app.url("/console/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(response.headers()[LOCATION], "/console");

    // Every file in console/assets, vendored ones included, is in the binary (build.rs lists them).
    let mut names = Vec::new();
    files_under(&root().join("console/assets"), "", &mut names);
    assert!(names.iter().any(|name| name == "vendor/highlight/core.min.js"), "run node console/vendor.mjs: {names:?}");
    for name in &names {
        let response = http.get(app.url(&format!("/console/{name}"))).send().await.unwrap();
        assert_eq!(response.status(), 200, "{name}");
        assert_console_headers(&response, name);
        let content_type = response.headers()[CONTENT_TYPE].to_str().unwrap().to_string();
        assert_ne!(content_type, "application/octet-stream", "{name}");
        if name.ends_with(".js") {
            assert_eq!(content_type, "text/javascript; charset=utf-8", "{name}: module scripts need a JavaScript type");
        }
    }

    // Unchanged: 304, with the same tag and policy.
    let response = http.get(app.url("/console/js/main.js")).send().await.unwrap();
    let etag = response.headers()[ETAG].clone();
    let response = http.get(app.url("/console/js/main.js")).header(IF_NONE_MATCH, etag.clone()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(response.headers()[ETAG], etag);
    assert_console_headers(&response, "a 304");
    assert!(response.bytes().await.unwrap().is_empty());
    let response = http.get(app.url("/console/js/main.js")).header(IF_NONE_MATCH, "\"other\"").send().await.unwrap();
    assert_eq!(response.status(), 200, "another tag gets the file");

    // An unknown file: the API's JSON error.
    let response = http.get(app.url("/console/js/no-such-file.js")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert!(error_message(&body).contains("no-such-file.js"), "{body}");

    // The API itself still wants the token.
    assert_eq!(http.get(app.url("/admin/servers")).send().await.unwrap().status(), 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_assets_dir_serves_the_files_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "<p>working copy</p>").unwrap();
    std::fs::create_dir(dir.path().join("js")).unwrap();
    std::fs::write(dir.path().join("js/new.js"), "export const added = true;").unwrap();
    std::fs::write(dir.path().join(".hidden.js"), "secret").unwrap();
    let env = vec![("MCPBOOTD_ADMIN__CONSOLE_ASSETS_DIR".to_string(), dir.path().display().to_string())];
    let app = spawn_app_with(AppOptions { env, ..AppOptions::default() }).await;

    let response = app.http.get(app.url("/console")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_console_headers(&response, "/console from the directory");
    assert_eq!(response.text().await.unwrap(), "<p>working copy</p>");
    // A file added since the build, and an edit seen at once.
    let response = app.http.get(app.url("/console/js/new.js")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()[CONTENT_TYPE], "text/javascript; charset=utf-8");
    let etag = response.headers()[ETAG].clone();
    std::fs::write(dir.path().join("js/new.js"), "export const added = 2;").unwrap();
    let response = app.http.get(app.url("/console/js/new.js")).header(IF_NONE_MATCH, etag).send().await.unwrap();
    assert_eq!(response.status(), 200, "an edited file has a new tag");
    assert_eq!(response.text().await.unwrap(), "export const added = 2;");

    for hidden in ["/console/.hidden.js", "/console/js/%2Fetc%2Fpasswd", "/console/missing.js"] {
        let response = app.http.get(app.url(hidden)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{hidden}");
        error_message(&response.json().await.unwrap());
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_false_serves_no_console() {
    let env = vec![("MCPBOOTD_ADMIN__CONSOLE".to_string(), "false".to_string())];
    let app = spawn_app_with(AppOptions { env, ..AppOptions::default() }).await;
    for path in ["/console", "/console/", "/console/js/main.js", "/console/index.html"] {
        let response = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        assert!(response.headers().get(CONTENT_SECURITY_POLICY).is_none(), "{path}");
    }
    let (status, _) = app.get("/admin/servers").await;
    assert_eq!(status, 200, "the API stays");
    app.stop().await;
}

/// node, or `None` when the browser test is skipped; panics when something it needs is missing.
fn browser_test_node() -> Option<PathBuf> {
    if std::env::var("MCPBOOTD_SKIP_BROWSER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: the console's browser test (MCPBOOTD_SKIP_BROWSER_TESTS=1)");
        return None;
    }
    assert!(Path::new(CHROMIUM).exists(), "the console's browser test needs Chromium at {CHROMIUM}; {INSTALL_HINT}");
    let playwright = root().join("console/node_modules/playwright-core/package.json");
    assert!(
        playwright.exists(),
        "the console's browser test needs playwright-core ({} is missing); {INSTALL_HINT}",
        playwright.display()
    );
    let node = match std::env::var_os("MCPBOOTD_SDK_NODE") {
        Some(node) => PathBuf::from(node),
        None => {
            let node = root().join("tests/sdk/typescript/node_modules/.bin/node");
            assert!(
                node.exists(),
                "the console's browser test needs node ({} is missing); {INSTALL_HINT}",
                node.display()
            );
            node
        }
    };
    Some(node)
}

/// The browser test's LLM: the prompt becomes a server with `get_item` and `add` (as in
/// generation.rs), the first plan comes after [`PLANNER_HOLD`], and every handler of `get_item`
/// after the first also returns the item's score, so a regeneration makes a version that differs.
fn script_console(llm: &ScriptedLlm, port: u16) {
    let plan = plan_json(port);
    let first = get_item_handler(port);
    let second = first.replace("author: item.by }", "author: item.by, score: item.score }");
    assert_ne!(first, second, "the second handler differs");
    let planned = AtomicBool::new(false);
    let compiled = AtomicBool::new(false);
    llm.respond_with(move |request| {
        if request.system().contains("You are the planner") {
            let answer = Scripted::text(format!("Here is the plan:\n```json\n{plan}\n```"));
            if planned.swap(true, Ordering::SeqCst) {
                answer
            } else {
                Scripted::Delayed(PLANNER_HOLD, Box::new(answer))
            }
        } else if request.last_user_message().contains("\"name\": \"get_item\"") {
            let handler = if compiled.swap(true, Ordering::SeqCst) { &second } else { &first };
            Scripted::text(format!("```javascript\n{handler}\n```"))
        } else {
            Scripted::text("return args.a + args.b;")
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_browser() {
    let Some(node) = browser_test_node() else { return };
    let llm = ScriptedLlm::start().await;
    // The LLM's timeout leaves room for the held plan.
    let env = with_token(vec![("MCPBOOTD_LLM__TIMEOUT_MS".to_string(), "10000".to_string())]);
    let app = spawn_with_llm(&llm, false, env, None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_console(&llm, port);

    // A toolset server to find in the lists; the flows register others through the pages.
    let body = json!({
        "id": "calc",
        "name": "Calculator",
        "description": "Adds numbers",
        "tools": [{
            "name": "add",
            "description": "Add two numbers",
            "input_schema": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]
            },
            "annotations": {"readOnlyHint": true},
            "handler": "return { sum: args.a + args.b };"
        }]
    });
    let response = app.http.post(app.url("/admin/servers")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());

    let screenshots = root().join("target/console-screenshots");
    if screenshots.exists() {
        std::fs::remove_dir_all(&screenshots).unwrap();
    }
    std::fs::create_dir_all(&screenshots).unwrap();
    let script = root().join("console/e2e/console.test.mjs");
    let mut command = tokio::process::Command::new(&node);
    command
        .arg(&script)
        .current_dir(root().join("console"))
        .env("CONSOLE_E2E_URL", app.url(""))
        .env("CONSOLE_E2E_TOKEN", TOKEN)
        .env("CONSOLE_E2E_SCREENSHOTS", &screenshots)
        .env("CONSOLE_E2E_PROMPT", prompt(&app))
        .env("CONSOLE_E2E_SERVER", "calc")
        .env("CONSOLE_E2E_CHROMIUM", CHROMIUM)
        // Loopback must never go through a proxy a CI machine may configure.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let started = Instant::now();
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {} {}: {e}; {INSTALL_HINT}", node.display(), script.display()));
    let output = tokio::time::timeout(BROWSER_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the console's browser test did not finish within {BROWSER_TIMEOUT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the console's browser test failed ({}); screenshots in {}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status,
        screenshots.display()
    );
    eprintln!("{stdout}(the browser test took {:?})", started.elapsed());
    app.stop().await;
}
