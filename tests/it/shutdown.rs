//! The real binary under signals: SIGTERM drains in-flight calls and exits 0; a second signal
//! exits at once.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::tool;

struct Daemon {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

/// A test that fails half-way must not leave a daemon running (or a zombie behind).
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn start_daemon(grace_ms: u64) -> Daemon {
    mcpbootd::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpbootd"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("MCPBOOTD_CATALOG__PATH", dir.path().join("c.db"))
        .env("MCPBOOTD_SERVER__SHUTDOWN_GRACE_MS", grace_ms.to_string())
        .env("MCPBOOTD_LOG__LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..500 {
        if http.get(format!("{url}/readyz")).send().await.is_ok_and(|r| r.status() == 200) {
            return Daemon { child, url, _dir: dir };
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("daemon did not start");
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

async fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn register_sleeper(daemon: &Daemon, millis: u64) {
    let http = reqwest::Client::new();
    let handler = format!("await new Promise(r => setTimeout(r, {millis})); return 'slept';");
    let response = http
        .post(format!("{}/admin/servers", daemon.url))
        .json(&json!({"id": "sleepy", "tools": [tool("sleep", &handler)]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
}

fn start_call(daemon: &Daemon) -> tokio::task::JoinHandle<Result<(u16, serde_json::Value), String>> {
    let url = format!("{}/admin/servers/sleepy/tools/sleep/call", daemon.url);
    tokio::spawn(async move {
        let response =
            reqwest::Client::new().post(url).json(&json!({"arguments": {}})).send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.map_err(|e| e.to_string())?))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_in_flight_calls_finish_and_exits_zero() {
    let mut daemon = start_daemon(10_000).await;
    register_sleeper(&daemon, 1500).await;
    let call = start_call(&daemon);
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&daemon.child, "TERM");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // No new connections once draining.
    assert!(
        reqwest::Client::new().get(format!("{}/healthz", daemon.url)).send().await.is_err(),
        "still accepting after SIGTERM"
    );
    let (status, body) = call.await.unwrap().expect("the in-flight call completes");
    assert_eq!(status, 200);
    assert_eq!(body["result"]["content"][0]["text"], "slept");
    let exit = wait_exit(&mut daemon.child, Duration::from_secs(10)).await.expect("daemon exits");
    assert_eq!(exit.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_period_bounds_the_drain_and_a_second_signal_exits_at_once() {
    // Grace shorter than the call: the daemon still exits 0, soon after the grace period.
    let mut daemon = start_daemon(300).await;
    register_sleeper(&daemon, 10_000).await;
    let _call = start_call(&daemon);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    signal(&daemon.child, "TERM");
    let exit = wait_exit(&mut daemon.child, Duration::from_secs(8)).await.expect("exits after the grace period");
    assert_eq!(exit.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(8));

    // A second signal does not wait for anything.
    let mut daemon = start_daemon(60_000).await;
    register_sleeper(&daemon, 20_000).await;
    let _call = start_call(&daemon);
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&daemon.child, "TERM");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(daemon.child.try_wait().unwrap().is_none(), "first signal drains");
    signal(&daemon.child, "INT");
    let exit = wait_exit(&mut daemon.child, Duration::from_secs(3)).await.expect("the second signal exits at once");
    assert_ne!(exit.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_json_lines_with_request_context_and_no_secrets() {
    mcpbootd::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log_path = dir.path().join("stderr.log");
    let token = "admin-secret-token-1234567890";
    let llm_key = "sk-llm-secret-abcdef";
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpbootd"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("MCPBOOTD_CATALOG__PATH", dir.path().join("c.db"))
        .env("MCPBOOTD_ADMIN_TOKEN", token)
        .env("MCPBOOTD_LLM__PROVIDER", "anthropic")
        .env("MCPBOOTD_LLM__MODEL", "m")
        .env("ANTHROPIC_API_KEY", llm_key)
        .env("MCPBOOTD_LOG__LEVEL", "debug")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    assert!(crate::helpers::wait_for_ready(&url).await);
    let response = http
        .post(format!("{url}/admin/servers"))
        .bearer_auth(token)
        .json(&json!({"id": "logged", "allow_domains": ["api.example.com"], "tools": [tool("hi", "console.log('hello'); return 'hi';")]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let credential_value = "cred-secret-value-0123456789";
    let response = http
        .put(format!("{url}/admin/servers/logged/credentials/api"))
        .bearer_auth(token)
        .json(&json!({"value": credential_value, "domains": ["api.example.com"], "inject": {"query": "key"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let response = http
        .post(format!("{url}/admin/servers/logged/tools/hi/call"))
        .bearer_auth(token)
        .json(&json!({"arguments": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    signal(&child, "TERM");
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)).await.unwrap().code(), Some(0));

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains(token), "the admin token appeared in the log");
    assert!(!log.contains(llm_key), "the LLM key appeared in the log");
    assert!(!log.contains(credential_value), "a credential's value appeared in the log");
    assert!(log.contains("credential set"), "setting a credential is logged, by name");
    let lines: Vec<serde_json::Value> =
        log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}"))).collect();
    let registered = lines.iter().find(|l| l["message"] == "toolset server registered").expect("registration logged");
    assert_eq!(registered["span"]["route"], "/admin/servers");
    let call = lines.iter().find(|l| l["message"] == "call finished").expect("call logged at debug");
    let call_span = &call["span"];
    assert_eq!(call_span["server_id"], "logged");
    assert_eq!(call_span["tool"], "hi");
    assert!(call_span["execution_id"].as_str().is_some_and(|id| id.len() >= 32), "{call}");
    let spans = call["spans"].to_string();
    assert!(
        spans.contains("/admin/servers/{id}/tools/{tool}/call"),
        "the request span names the matched route: {spans}"
    );
}
