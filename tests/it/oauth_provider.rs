//! A mount behind OAuth end to end, with nothing faked: a real OpenID provider (panva's
//! oidc-provider, `tests/sdk/oidc/provider.mjs`) and a real MCP host (the Python SDK's OAuth client,
//! `tests/sdk/python/oauth_client.py`) that discovers everything from the daemon's 401, registers,
//! signs a user in with authorization code + PKCE for the mount's URL, and calls a tool with the
//! token it got. Then the provider rotates its signing key and a second host signs in: the daemon
//! must take the new key without a restart.
//!
//! Skipped like the other SDK tests (`MCPBOOTD_SKIP_SDK_TESTS=1`); `MCPBOOTD_SDK_PYTHON` and
//! `MCPBOOTD_SDK_NODE` override the interpreters. `.ci/run` installs all three directories.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{start_on, tool};
use crate::sdk_clients::{Client, INSTALL_HINT, client, run_or_explain};

/// Longest the provider may take to print its issuer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The provider's process; killed when dropped (its stdin closing stops it as well).
struct Provider {
    issuer: String,
    /// The `kid` of the signing key it started with.
    kid: String,
    /// Its stderr, for the failure messages.
    log: PathBuf,
    _process: tokio::process::Child,
}

impl Provider {
    /// Starts the provider (`client("oidc")`) for resources under `origin` (the daemon's public URL).
    async fn start(provider: &Client, origin: &str, log: &Path) -> Provider {
        let script = &provider.script;
        let mut process = tokio::process::Command::new(&provider.program)
            .arg(script)
            .arg(origin)
            .current_dir(script.parent().expect("the provider script is in tests/sdk/oidc"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL_HINT}", provider.program.display()));
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
        let started: Value = match line {
            Ok(Ok(Some(line))) => serde_json::from_str(&line).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let (Some(issuer), Some(kid)) = (started["issuer"].as_str(), started["kid"].as_str()) else {
            panic!(
                "the OpenID provider did not start ({started}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        };
        Provider { issuer: issuer.to_string(), kid: kid.to_string(), log: log.to_path_buf(), _process: process }
    }

    /// Replaces the provider's signing key; returns the new key's `kid`.
    async fn rotate(&self, http: &reqwest::Client) -> String {
        let response = http.post(format!("{}/test/rotate", self.issuer)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        body["kid"].as_str().unwrap().to_string()
    }
}

/// Runs the Python SDK's OAuth client (`oauth`) against `url` and returns its summary; a failure
/// shows the provider's log beside the client's output.
async fn sign_in_and_call(oauth: &Client, provider: &Provider, url: &str) -> Value {
    run_or_explain(oauth, url).await.unwrap_or_else(|failure| {
        panic!("{failure}\n--- the provider's stderr\n{}", std::fs::read_to_string(&provider.log).unwrap_or_default())
    })
}

/// `tools/list` with `token`: the status and the `WWW-Authenticate` header.
async fn list_tools(http: &reqwest::Client, url: &str, token: &str) -> (u16, String) {
    let response = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    let challenge =
        response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (response.status().as_u16(), challenge)
}

/// What a host that signed in for `resource` must have seen and been given.
fn assert_signed_in(summary: &Value, issuer: &str, resource: &str, kid: &str) {
    let mut shown = summary.clone();
    shown["access_token"] = json!("…");
    eprintln!("python OAuth client: {shown}");
    assert_eq!(summary["tools"], json!(["echo"]), "{summary}");
    assert_eq!(summary["result"], "hello from notes", "{summary}");
    // It found the mount's URL in the metadata and asked for it, with PKCE.
    let asked = &summary["authorization_request"];
    assert_eq!((asked["resource"].as_str(), asked["code_challenge_method"].as_str()), (Some(resource), Some("S256")));
    assert!(summary["unauthorized_responses"].as_u64() >= Some(1), "the flow starts from a 401: {summary}");
    let claims = &summary["claims"];
    assert_eq!(claims["iss"], issuer, "{summary}");
    assert_eq!(claims["aud"], resource, "the token is for this mount only: {summary}");
    assert_eq!(claims["sub"], "alice", "{summary}");
    assert_eq!(claims["client_id"], summary["client_id"], "the dynamically registered client: {summary}");
    assert_eq!(claims["scope"], "mcp:read mcp:write", "{summary}");
    assert_eq!(
        (summary["token_header"]["alg"].as_str(), summary["token_header"]["kid"].as_str()),
        (Some("ES256"), Some(kid))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_host_signs_in_at_a_real_provider_and_survives_a_key_rotation() {
    let (Some(mut oauth), Some(oidc)) = (client("python"), client("oidc")) else { return };
    oauth.script = oauth.script.with_file_name("oauth_client.py");
    oauth.extra_args = vec!["echo"];
    // reqwest needs the TLS crypto provider before its first client; the daemon would install it.
    mcpbootd::install_crypto_provider();
    let http = reqwest::Client::new();
    let data = tempfile::tempdir().unwrap();

    // The daemon's address goes into its configuration (public_url) and the provider's, so it is
    // bound first.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let public_url = format!("http://{}", listener.local_addr().unwrap());
    let provider = Provider::start(&oidc, &public_url, &data.path().join("provider.log")).await;
    let env = [
        // The catalog plays no part in token checks: SQLite on either catalog run.
        ("MCPBOOTD_CATALOG__PATH", data.path().join("catalog.db").display().to_string()),
        ("MCPBOOTD_SANDBOX__WORKERS", "1".into()),
        ("MCPBOOTD_AUTH__OAUTH__ISSUER", provider.issuer.clone()),
        ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", public_url.clone()),
        ("MCPBOOTD_AUTH__OAUTH__REQUIRED", "true".into()),
    ];
    // Not `spawn_app_with`: that binds its own listener, after the configuration is needed.
    let daemon = start_on(listener, env.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        .await
        .expect("the daemon starts");
    for (id, text) in [("notes", "hello from notes"), ("other", "hello from other")] {
        let body = json!({"id": id, "tools": [tool("echo", &format!("return {text:?};"))]});
        let response = http.post(format!("{public_url}/admin/servers")).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    }
    // The provider is discovered in the background; it is up already, so this is quick.
    let mut ready = Value::Null;
    for _ in 0..100 {
        ready = http.get(format!("{public_url}/readyz")).send().await.unwrap().json().await.unwrap();
        if ready["oauth"] == "ok" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ready["oauth"], "ok", "{ready}");

    let notes = format!("{public_url}/servers/notes/mcp");
    let other = format!("{public_url}/servers/other/mcp");
    let first = sign_in_and_call(&oauth, &provider, &notes).await;
    assert_signed_in(&first, &provider.issuer, &notes, &provider.kid);
    let first_token = first["access_token"].as_str().unwrap();
    assert_eq!(list_tools(&http, &notes, first_token).await.0, 200, "the token the host got works as it is");
    // Another mount of the same daemon refuses it: the audience is the mount, not the daemon.
    let (status, challenge) = list_tools(&http, &other, first_token).await;
    assert_eq!(status, 401, "{challenge}");
    assert!(challenge.contains("error=\"invalid_token\"") && challenge.contains("wrong audience"), "{challenge}");

    // A new signing key: the daemon has only the old one cached, and fetches the provider's JWKS
    // again when a token names a key it does not know.
    let new_kid = provider.rotate(&http).await;
    assert_ne!(new_kid, provider.kid);
    let second = sign_in_and_call(&oauth, &provider, &notes).await;
    assert_signed_in(&second, &provider.issuer, &notes, &new_kid);
    assert_ne!(second["client_id"], first["client_id"], "a second host registers a client of its own");
    // The call log names who called: the provider's subject and the host's registered client.
    let calls: Value =
        http.get(format!("{public_url}/admin/servers/notes/calls?limit=1")).send().await.unwrap().json().await.unwrap();
    let last = &calls["calls"][0];
    assert_eq!((&last["subject"], &last["client_id"]), (&json!("alice"), &second["client_id"]), "{calls}");
    let metrics = http.get(format!("{public_url}/metrics")).send().await.unwrap().text().await.unwrap();
    let line = "mcpbootd_oauth_refusals_total{reason=\"wrong_audience\"} 1";
    assert!(metrics.contains(line), "{line} in\n{metrics}");
    daemon.stop().await.unwrap();
}
