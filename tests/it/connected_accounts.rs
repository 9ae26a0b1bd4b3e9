//! Connected accounts end to end, with nothing faked: a credential whose value is each caller's
//! own, connected by the caller through the MCP URL elicitation the daemon answers with.
//!
//! Four processes besides the daemon, all real: the operator's OpenID provider (IdP1, panva's
//! oidc-provider, `tests/sdk/oidc/provider.mjs`) that MCP hosts sign in at and that the daemon signs
//! the person at a connect link in with; the upstream API's authorization server (IdP2, the same
//! script with `--upstream`) that the daemon is an OAuth client of; the upstream API
//! (`tests/sdk/oidc/upstream.mjs`) that checks the bearer JWTs IdP2 issues and says whose they are;
//! and the official MCP Python SDK as the host (`tests/sdk/python/connect_client.py`), with a
//! browser that fills in both providers' sign-in and consent pages
//! (`tests/sdk/python/connect_browser.py`). Logins are names: IdP1 and IdP2 accept any, and the
//! name is the subject, so "alice" at IdP1 connects "alice" at IdP2.
//!
//! Skipped like the other SDK tests (`MCPBOOTD_SKIP_SDK_TESTS=1`); `MCPBOOTD_SDK_PYTHON` and
//! `MCPBOOTD_SDK_NODE` override the interpreters.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::helpers::{on_postgres, postgres, start_on, tool};
use crate::sdk_clients::{Client, INSTALL_HINT, client, sdk_dir};

/// The API's host name, which the daemon's egress resolves to 127.0.0.1 (`[egress.resolve]`).
const API_HOST: &str = "api.notes.test";
/// The daemon as an OpenID client of IdP1 (`[auth.oauth] connect_client_id` and secret).
const CONNECT_CLIENT: (&str, &str) = ("mcpbootd-connect", "connect-secret-0123456789");
/// The daemon as an OAuth client of IdP2 (the credential's `client_id` and `client_secret`).
const UPSTREAM_CLIENT: (&str, &str) = ("mcpbootd-notes", "notes-secret-0123456789");
/// Longest a node process may take to print its first line.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a Python script may take: a host's sign-in and a connect flow are a few seconds each.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// The lifetime of IdP2's access tokens in the refresh test. The daemon may refresh a little before
/// the expiry, but not this long before it: the test's first call, right after connecting, must use
/// the token as it is, and the refreshed token must outlive the burst of calls that follows.
const ACCESS_TTL: Duration = Duration::from_secs(4);
/// `[auth.oauth] connect_link_seconds` in the expiry test: the shortest lifetime the daemon accepts.
const SHORT_LINK_SECONDS: u64 = 10;

/// A node script of `tests/sdk/oidc` (a provider or the API), killed when dropped; closing its
/// stdin stops it as well.
struct Node {
    /// The JSON line it printed once listening.
    started: Value,
    /// Its stderr, for the failure messages.
    log: PathBuf,
    stdin: tokio::process::ChildStdin,
    _process: tokio::process::Child,
}

impl Node {
    async fn start(node: &Client, script: &str, args: &[String], log: PathBuf) -> Node {
        let script = node.script.with_file_name(script);
        let mut process = tokio::process::Command::new(&node.program)
            .arg(&script)
            .args(args)
            .current_dir(script.parent().expect("the scripts are in tests/sdk/oidc"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL_HINT}", node.program.display()));
        let stdin = process.stdin.take().unwrap();
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let started = match tokio::time::timeout(START_TIMEOUT, lines.next_line()).await {
            Ok(Ok(Some(line))) => serde_json::from_str(&line).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        assert!(
            started.is_object(),
            "{} {args:?} did not start ({started}):\n{}",
            script.display(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Node { started, log, stdin, _process: process }
    }

    fn field(&self, name: &str) -> String {
        self.started[name].as_str().unwrap_or_else(|| panic!("no {name} in {}", self.started)).to_string()
    }
}

/// What a test needs besides the defaults.
#[derive(Clone, Copy)]
struct Setup {
    /// Daemons, each with its own public URL; with `shared_catalog` they are replicas.
    daemons: usize,
    shared_catalog: bool,
    access_ttl: Duration,
    /// `[auth.oauth] connect_link_seconds`; `None` leaves the default.
    link_seconds: Option<u64>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup { daemons: 1, shared_catalog: false, access_ttl: Duration::from_secs(3600), link_seconds: None }
    }
}

/// A daemon run as a task of its own: its handle's type is private to the helpers, and a task
/// that owns it is something a struct can hold. Dropping `stop` stops it too.
struct Daemon {
    url: String,
    stop: oneshot::Sender<()>,
    stopped: tokio::task::JoinHandle<anyhow::Result<()>>,
}

struct World {
    http: reqwest::Client,
    /// The Python that runs the host and the browser.
    interpreter: PathBuf,
    data: tempfile::TempDir,
    /// IdP1: the operator's provider, which MCP hosts and the connect pages sign people in at.
    idp: Node,
    idp_issuer: String,
    /// IdP2: the upstream API's authorization server.
    auth: Node,
    auth_issuer: String,
    /// The upstream API: `api_origin` as handlers reach it (through `API_HOST`), `api_local` as
    /// the test does.
    api: Node,
    api_origin: String,
    api_local: String,
    daemons: Vec<Daemon>,
}

impl World {
    /// Everything started and wired together, or `None` when the SDK tests (or, for a shared
    /// catalog, the PostgreSQL tests) are skipped.
    async fn start(setup: Setup) -> Option<World> {
        let (Some(python), Some(node)) = (client("python"), client("oidc")) else { return None };
        let shared = if setup.shared_catalog { Some(postgres::fresh_database().await?) } else { None };
        // reqwest needs the TLS crypto provider before its first client; the daemon would install it.
        mcpbootd::install_crypto_provider();
        let http = reqwest::Client::new();
        let data = tempfile::tempdir().unwrap();

        // Each daemon's address goes into its own configuration (public_url) and into both
        // providers' redirect URIs, so the listeners are bound first.
        let mut listeners = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..setup.daemons {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            urls.push(format!("http://{}", listener.local_addr().unwrap()));
            listeners.push(listener);
        }

        // The API must know IdP2 to check its tokens, and IdP2 must know the API's origin (the
        // audience of its tokens): the API starts first and is told the issuer on stdin.
        let mut api = Node::start(
            &node,
            "upstream.mjs",
            &["--host".to_string(), API_HOST.to_string()],
            data.path().join("api.log"),
        )
        .await;
        let (api_origin, api_local) = (api.field("origin"), api.field("local"));
        let mut auth_args = vec!["--upstream".to_string(), api_origin.clone()];
        auth_args.extend(["--access-ttl".to_string(), setup.access_ttl.as_secs().to_string()]);
        for url in &urls {
            let (id, secret) = UPSTREAM_CLIENT;
            auth_args.extend(["--client".to_string(), format!("{id}:{secret}:{url}/connect/callback")]);
        }
        let auth = Node::start(&node, "provider.mjs", &auth_args, data.path().join("auth.log")).await;
        let auth_issuer = auth.field("issuer");
        api.stdin.write_all(format!("{auth_issuer}\n").as_bytes()).await.unwrap();
        api.stdin.flush().await.unwrap();

        let mut idp_args = urls.clone();
        for url in &urls {
            let (id, secret) = CONNECT_CLIENT;
            idp_args.extend(["--connect-client".to_string(), format!("{id}:{secret}:{url}/connect/signin")]);
        }
        let idp = Node::start(&node, "provider.mjs", &idp_args, data.path().join("idp.log")).await;
        let idp_issuer = idp.field("issuer");

        let deadline = Instant::now() + START_TIMEOUT;
        while !http.get(format!("{api_local}/test/ready")).send().await.is_ok_and(|r| r.status() == 200) {
            assert!(Instant::now() < deadline, "the API never learnt its issuer:\n{}", read(&api.log));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let mut daemons = Vec::new();
        for (i, (listener, url)) in listeners.into_iter().zip(&urls).enumerate() {
            let mut env = catalog_env(&data.path().join(format!("daemon-{i}")), shared.as_deref()).await;
            if shared.is_some() {
                env.push(("MCPBOOTD_CATALOG__REPLICA_ID".into(), format!("replica-{i}")));
            }
            env.extend(
                [
                    ("MCPBOOTD_SANDBOX__WORKERS", "2".to_string()),
                    ("MCPBOOTD_SANDBOX__TIMEOUT_MS", "10000".to_string()),
                    ("MCPBOOTD_SANDBOX__MEMORY_MB", "32".to_string()),
                    ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS", "true".to_string()),
                    ("MCPBOOTD_AUTH__OAUTH__ISSUER", idp_issuer.clone()),
                    ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", url.clone()),
                    ("MCPBOOTD_AUTH__OAUTH__CONNECT_CLIENT_ID", CONNECT_CLIENT.0.to_string()),
                    ("MCPBOOTD_AUTH__OAUTH__CONNECT_CLIENT_SECRET", CONNECT_CLIENT.1.to_string()),
                ]
                .map(|(key, value)| (key.to_string(), value)),
            );
            env.push((format!("MCPBOOTD_EGRESS__RESOLVE__{API_HOST}"), "127.0.0.1".into()));
            if let Some(seconds) = setup.link_seconds {
                env.push(("MCPBOOTD_AUTH__OAUTH__CONNECT_LINK_SECONDS".into(), seconds.to_string()));
            }
            // Not `spawn_app_with`: that binds its own listener, after the configuration is needed.
            let daemon = start_on(listener, env).await.expect("the daemon starts");
            let (stop, stopping) = oneshot::channel::<()>();
            let stopped = tokio::spawn(async move {
                let _ = stopping.await;
                daemon.stop().await
            });
            // IdP1 is discovered in the background; it is up already, so this is quick.
            let mut ready = Value::Null;
            for _ in 0..200 {
                ready = http.get(format!("{url}/readyz")).send().await.unwrap().json().await.unwrap_or_default();
                if ready["oauth"] == "ok" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(ready["oauth"], "ok", "{ready}");
            daemons.push(Daemon { url: url.clone(), stop, stopped });
        }
        let interpreter = python.program;
        Some(World { http, interpreter, data, idp, idp_issuer, auth, auth_issuer, api, api_origin, api_local, daemons })
    }

    fn url(&self, daemon: usize, path: &str) -> String {
        format!("{}{path}", self.daemons[daemon].url)
    }

    fn mount(&self, daemon: usize, id: &str) -> String {
        self.url(daemon, &format!("/servers/{id}/mcp"))
    }

    async fn register(&self, daemon: usize, body: &Value) -> (u16, Value) {
        let response = self.http.post(self.url(daemon, "/admin/servers")).json(body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    }

    /// The credential body of an `oauth2` per-user credential at IdP2 (its token endpoint may be
    /// replaced by one that is down).
    fn oauth2_credential(&self, token_url: Option<&str>) -> Value {
        json!({
            "per_user": {
                "kind": "oauth2",
                "authorize_url": format!("{}/auth", self.auth_issuer),
                "token_url": token_url.map_or_else(|| format!("{}/token", self.auth_issuer), str::to_string),
                "client_id": UPSTREAM_CLIENT.0,
                "client_secret": UPSTREAM_CLIENT.1,
                "scopes": ["notes:read", "notes:write"],
                // IdP2 issues JWTs for the API only when the API is asked for (RFC 8707).
                "authorize_params": {"resource": self.api_origin},
                "revocation_url": format!("{}/token/revocation", self.auth_issuer),
            },
            "domains": [API_HOST],
            "inject": {"header": "Authorization", "format": "Bearer {value}"},
        })
    }

    /// A server behind OAuth whose tool `whoami` returns what the API says of the caller's
    /// credential (its body as text), under the credential name "notes".
    fn server(&self, id: &str, credential: Value) -> Value {
        let handler = format!(
            "const r = await fetch('{}/me');\n\
             const body = await r.text();\n\
             if (!r.ok) throw new Error('the API answered ' + r.status + ': ' + body);\n\
             return body;",
            self.api_origin
        );
        json!({
            "id": id,
            "auth": {"mode": "oauth"},
            "allow_domains": [API_HOST],
            "tools": [tool("whoami", &handler)],
            "credentials": {"notes": credential},
        })
    }

    /// Runs `tests/sdk/python/<script>` with `args`: its summary line, or a panic with its output
    /// and the providers' logs.
    async fn python(&self, script: &str, args: &[&str]) -> Value {
        let mut command = tokio::process::Command::new(&self.interpreter);
        command
            .arg(sdk_dir().join("python").join(script))
            .args(args)
            .current_dir(sdk_dir())
            // Loopback must never go through a proxy a CI machine may configure.
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL_HINT}", script));
        let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{script} {args:?} did not finish within {SCRIPT_TIMEOUT:?}\n{}", self.logs()))
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stdout.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or_default();
        match (output.status.success(), serde_json::from_str::<Value>(line)) {
            (true, Ok(summary)) => {
                eprintln!("{script} {args:?}:\n{stderr}");
                summary
            }
            _ => panic!(
                "{script} {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n{}",
                output.status,
                self.logs()
            ),
        }
    }

    /// The host: signs in to `mount` as `login` and calls `whoami` (see connect_client.py).
    async fn host(&self, mount: &str, login: &str, options: &[&str]) -> Value {
        let mut args = vec![mount, "whoami", login];
        args.extend(options);
        self.python("connect_client.py", &args).await
    }

    /// A browser of its own, signed in as `login`, opening `url` (see connect_browser.py).
    async fn browser(&self, url: &str, login: &str, options: &[&str]) -> Value {
        let mut args = vec![url, login];
        args.extend(options);
        self.python("connect_browser.py", &args).await
    }

    /// A raw `tools/call` of `tool` with the mount access token `token`: the JSON-RPC answer.
    async fn call(&self, mount: &str, token: &str, tool: &str) -> Value {
        // Stateless 2025-11-25 has no handshake to declare capabilities in; the request's `_meta`
        // says what a 2026 request would, in case the daemon looks there.
        let params = json!({
            "name": tool,
            "arguments": {},
            "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}},
        });
        let response = self
            .http
            .post(mount)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "tools/call {tool} at {mount}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("tools/call answered no JSON ({e}): {text}"))
    }

    /// `GET /test/stats` of IdP2: its token and revocation requests.
    async fn auth_stats(&self) -> Value {
        self.http.get(format!("{}/test/stats", self.auth_issuer)).send().await.unwrap().json().await.unwrap()
    }

    /// `GET /test/stats` of the API: whose credentials it saw.
    async fn api_stats(&self) -> Value {
        self.http.get(format!("{}/test/stats", self.api_local)).send().await.unwrap().json().await.unwrap()
    }

    /// The admin view of a server's connections.
    async fn connections(&self, daemon: usize, id: &str) -> Vec<Value> {
        let response =
            self.http.get(self.url(daemon, &format!("/admin/servers/{id}/connections"))).send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        assert_eq!(status, 200, "{body}");
        body["connections"].as_array().unwrap_or_else(|| panic!("no connection list in {body}")).clone()
    }

    /// The providers' and the API's stderr.
    fn logs(&self) -> String {
        [("IdP1", &self.idp.log), ("IdP2", &self.auth.log), ("the API", &self.api.log)]
            .iter()
            .map(|(name, log)| format!("--- {name}'s stderr\n{}", read(log)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn stop(self) {
        for daemon in self.daemons {
            let _ = daemon.stop.send(());
            daemon.stopped.await.unwrap().unwrap();
        }
        drop(self.data);
    }
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The catalog settings of one daemon: its own SQLite file (or, on the PostgreSQL pass, its own
/// fresh database), or the `shared` PostgreSQL database of replicas.
async fn catalog_env(dir: &Path, shared: Option<&str>) -> Vec<(String, String)> {
    std::fs::create_dir_all(dir).unwrap();
    let url = match shared {
        Some(url) => url.to_string(),
        None if on_postgres() => {
            postgres::fresh_database().await.expect("MCPBOOTD_TEST_CATALOG=postgres needs PostgreSQL")
        }
        None => return vec![("MCPBOOTD_CATALOG__PATH".into(), dir.join("catalog.db").display().to_string())],
    };
    // Replicas share the key the catalog's secrets (client secrets, users' tokens) are sealed with.
    let key = dir.join("catalog.key");
    std::fs::write(&key, "11".repeat(32)).unwrap();
    vec![("MCPBOOTD_CATALOG__URL".into(), url), ("MCPBOOTD_CREDENTIALS__KEY_FILE".into(), key.display().to_string())]
}

fn api_key_credential() -> Value {
    json!({"per_user": {"kind": "api_key"}, "domains": [API_HOST], "inject": {"header": "X-Api-Key"}})
}

/// The URL elicitation in a raw JSON-RPC answer (error -32042), if it is one.
fn elicitation_of(reply: &Value) -> Option<&Value> {
    (reply["error"]["code"] == -32042).then(|| &reply["error"]["data"]["elicitations"][0])
}

/// The connect link of a URL elicitation, after checking its shape against MCP 2025-11-25.
fn link_of(elicitation: &Value, public_url: &str) -> String {
    assert_eq!(elicitation["mode"], "url", "{elicitation}");
    assert!(elicitation["elicitationId"].as_str().is_some_and(|id| !id.is_empty()), "{elicitation}");
    assert!(elicitation["message"].as_str().is_some_and(|message| !message.is_empty()), "{elicitation}");
    let url = elicitation["url"].as_str().unwrap_or_else(|| panic!("no url in {elicitation}"));
    assert!(url.starts_with(&format!("{public_url}/connect/")), "a one-time link on the daemon: {url}");
    url.to_string()
}

/// What a host saw of its first call: the elicitation, as the SDK raised it; its connect link.
fn elicited(summary: &Value, public_url: &str) -> String {
    let first = &summary["first"];
    assert_eq!(first["outcome"], "elicitation", "{summary}");
    assert_eq!(first["error"]["code"], -32042, "{summary}");
    let elicitations = first["error"]["data"]["elicitations"].as_array().unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(elicitations.len(), 1, "{summary}");
    link_of(&elicitations[0], public_url)
}

/// The API's answer in a call result (the `whoami` tool returns the API's body).
fn answer_of(reply: &Value) -> Value {
    let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no result text: {reply}"));
    assert_ne!(reply["result"]["isError"], true, "{reply}");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not the API's JSON ({e}): {reply}"))
}

/// The API's answer in a host's summary of one call (`first` or `second`).
fn host_answer(summary: &Value, call: &str) -> Value {
    let outcome = &summary[call];
    assert_eq!(
        (outcome["outcome"].as_str(), outcome["is_error"].as_bool()),
        (Some("result"), Some(false)),
        "{summary}"
    );
    serde_json::from_str(outcome["text"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not the API's JSON ({e}): {summary}"))
}

fn page_text(page: &Value) -> String {
    page["text"].as_str().unwrap_or_default().to_string()
}

/// The host's mount access token (IdP1's, for the mount), for raw calls in its user's name.
fn token_of(summary: &Value) -> String {
    summary["access_token"].as_str().unwrap_or_else(|| panic!("no access token in the summary")).to_string()
}

/// That the host told the server it handles URL elicitations, and where.
fn assert_declares_url_elicitation(summary: &Value, place: &str) {
    let declared = &summary["declared"];
    assert_eq!(declared["in"], place, "{declared}");
    assert!(declared["capabilities"]["elicitation"]["url"].is_object(), "{declared}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_connected_through_the_url_elicitation_is_used_for_its_owner_only() {
    let Some(world) = World::start(Setup::default()).await else { return };
    let public_url = world.daemons[0].url.clone();

    // A per-user credential needs to know who calls: a mount without OAuth cannot have one.
    let mut open = world.server("open", world.oauth2_credential(None));
    open.as_object_mut().unwrap().remove("auth");
    let (status, body) = world.register(0, &open).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = world.register(0, &world.server("notes", world.oauth2_credential(None))).await;
    assert_eq!(status, 201, "{body}");
    let mount = world.mount(0, "notes");

    // Alice has not connected: her host is answered with the URL elicitation.
    let first = world.host(&mount, "alice", &["--mode", "legacy"]).await;
    assert_eq!(first["protocol_version"], "2025-11-25", "{first}");
    assert_eq!(first["claims"]["sub"], "alice", "{first}");
    assert_declares_url_elicitation(&first, "initialize");
    let link = elicited(&first, &public_url);

    // Forwarded to bob, who signs in at it: refused, and nothing reaches IdP2.
    let forwarded = world.browser(&link, "bob", &[]).await;
    assert_eq!(forwarded["status"], 403, "{forwarded}");
    assert!(page_text(&forwarded).contains("was made for another user"), "{forwarded}");
    assert!(
        !forwarded["steps"].to_string().contains(&format!("{}/", world.auth_issuer)),
        "bob was never sent to the upstream's authorization server: {forwarded}"
    );
    assert!(world.connections(0, "notes").await.is_empty());

    // Alice opens her own link: IdP1, then IdP2, then the call again.
    let connected = world.host(&mount, "alice", &["--mode", "legacy", "--retry-after-connect"]).await;
    elicited(&connected, &public_url);
    assert_eq!(connected["browser"]["status"], 200, "{connected}");
    assert!(page_text(&connected["browser"]).contains("Connected"), "{connected}");
    let answer = host_answer(&connected, "second");
    assert_eq!((answer["sub"].as_str(), answer["scope"].as_str()), (Some("alice"), Some("notes:read notes:write")));
    let alice = token_of(&connected);

    // One code exchange at IdP2, with PKCE and the client's secret.
    let stats = world.auth_stats().await;
    assert_eq!(stats["grants"], json!({"authorization_code": 1}), "{stats}");
    let exchange = &stats["token_requests"][0];
    assert_eq!((exchange["status"].as_u64(), exchange["code_verifier"].as_bool()), (Some(200), Some(true)), "{stats}");
    assert!(matches!(exchange["client_auth"].as_str(), Some("client_secret_basic" | "client_secret_post")), "{stats}");

    // The operator sees whose connection it is, from which provider, for which credential; never
    // a token (IdP2's tokens are JWTs, which all start with "eyJ").
    let connections = world.connections(0, "notes").await;
    assert_eq!(connections.len(), 1, "{connections:?}");
    let connection = &connections[0];
    assert_eq!(
        (connection["subject"].as_str(), connection["issuer"].as_str(), connection["credential"].as_str()),
        (Some("alice"), Some(world.idp_issuer.as_str()), Some("notes")),
        "{connection}"
    );
    let scopes = connection["scopes"].to_string();
    assert!(scopes.contains("notes:read") && scopes.contains("notes:write"), "{connection}");
    assert!(connection["id"].is_string(), "{connection}");
    // Milliseconds since the epoch; an OAuth connection expires (and is refreshed then).
    assert!(connection["connected_at"].is_i64() && connection["expires_at"].is_i64(), "{connection}");
    assert!(!connection.to_string().contains("eyJ"), "{connection}");
    let credentials = world.http.get(world.url(0, "/admin/servers/notes/credentials")).send().await.unwrap();
    let credentials = credentials.text().await.unwrap();
    assert!(!credentials.contains(UPSTREAM_CLIENT.1), "the client secret is never shown: {credentials}");

    // Bob has not connected: his call is answered with an elicitation of his own, and nothing
    // reaches the API in anyone's name.
    let bob_first = world.host(&mount, "bob", &["--mode", "legacy"]).await;
    assert_ne!(elicited(&bob_first, &public_url), link);
    let bob = token_of(&bob_first);
    let reply = world.call(&mount, &bob, "whoami").await;
    link_of(elicitation_of(&reply).unwrap_or_else(|| panic!("bob's call is not an elicitation: {reply}")), &public_url);
    assert_eq!(answer_of(&world.call(&mount, &alice, "whoami").await)["sub"], "alice");
    let api = world.api_stats().await;
    assert_eq!((&api["subjects"], &api["unauthorized"]), (&json!({"alice": 2}), &json!(0)), "{api}");

    // Bob connects his own account; from then on each call carries its caller's token.
    let bob_connected = world.host(&mount, "bob", &["--mode", "legacy", "--retry-after-connect"]).await;
    assert_eq!(host_answer(&bob_connected, "second")["sub"], "bob");
    for (token, login) in [(&alice, "alice"), (&bob, "bob"), (&alice, "alice")] {
        assert_eq!(answer_of(&world.call(&mount, token, "whoami").await)["sub"], login);
    }
    let api = world.api_stats().await;
    assert_eq!((&api["subjects"], &api["unauthorized"]), (&json!({"alice": 4, "bob": 2}), &json!(0)), "{api}");
    assert_eq!(world.connections(0, "notes").await.len(), 2);

    // Alice's own page (after signing in at IdP1) lists her connection, and only hers.
    let page = world.browser(&world.url(0, "/connect"), "alice", &[]).await;
    assert_eq!(page["status"], 200, "{page}");
    let text = page_text(&page);
    assert!(text.contains("alice") && text.contains("notes") && !text.contains("bob"), "{page}");

    // A host that declares no URL elicitation is not sent the error it cannot handle: the call is a
    // tool error whose text carries the link, for the model to relay.
    let plain = world.host(&mount, "carol", &["--no-elicitation"]).await;
    let first = &plain["first"];
    assert_eq!((first["outcome"].as_str(), first["is_error"].as_bool()), (Some("result"), Some(true)), "{plain}");
    assert!(first["text"].as_str().unwrap_or_default().contains(&format!("{public_url}/connect/")), "{plain}");
    assert!(plain["elicitation"].is_null(), "{plain}");

    // A host on the SDK's default policy speaks 2026-07-28, where capabilities travel in each
    // request's `_meta`: alice's connection serves it just the same.
    let modern = world.host(&mount, "alice", &[]).await;
    assert_eq!(modern["protocol_version"], "2026-07-28", "{modern}");
    assert_declares_url_elicitation(&modern, "tools/call _meta");
    assert_eq!(host_answer(&modern, "first")["sub"], "alice");

    // The operator deletes alice's connection: the daemon revokes the grant at IdP2 (its refresh
    // token: IdP2 refuses to revoke its JWT access tokens) and alice is asked to connect again.
    let id = connections[0]["id"].as_str().unwrap();
    let response = world.http.delete(world.url(0, &format!("/admin/servers/notes/connections/{id}"))).send().await;
    assert_eq!(response.unwrap().status(), 204);
    let left = world.connections(0, "notes").await;
    assert_eq!(left.iter().map(|c| c["subject"].as_str()).collect::<Vec<_>>(), [Some("bob")], "{left:?}");
    let reply = world.call(&mount, &alice, "whoami").await;
    link_of(elicitation_of(&reply).unwrap_or_else(|| panic!("alice's call after the deletion: {reply}")), &public_url);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = world.auth_stats().await;
        let revoked = stats["revocations"].as_array().unwrap().iter().any(|r| r["status"] == 200);
        if revoked {
            break;
        }
        assert!(Instant::now() < deadline, "no successful revocation at IdP2: {stats}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answer_of(&world.call(&mount, &bob, "whoami").await)["sub"], "bob", "bob's connection stays");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refreshed_once_for_concurrent_calls_and_a_refused_refresh_asks_again() {
    let Some(world) = World::start(Setup { access_ttl: ACCESS_TTL, ..Setup::default() }).await else { return };
    let (status, body) = world.register(0, &world.server("notes", world.oauth2_credential(None))).await;
    assert_eq!(status, 201, "{body}");
    let mount = world.mount(0, "notes");
    let connected = world.host(&mount, "alice", &["--mode", "legacy", "--retry-after-connect"]).await;
    assert_eq!(host_answer(&connected, "second")["sub"], "alice");
    let alice = token_of(&connected);
    let stats = world.auth_stats().await;
    assert_eq!(stats["grants"], json!({"authorization_code": 1}), "a fresh token is used as it is: {stats}");
    let expires_at = |connections: Vec<Value>| connections[0]["expires_at"].as_i64().expect("an expiry");
    let expired_at = expires_at(world.connections(0, "notes").await);

    // Past the access token's lifetime, twenty calls at once: one refresh, and every call waits
    // for it. (IdP2 rotates refresh tokens, so a second refresh with the same one would be taken
    // for a stolen token and end the grant.)
    tokio::time::sleep(ACCESS_TTL + Duration::from_secs(1)).await;
    let calls = (0..20).map(|_| world.call(&mount, &alice, "whoami"));
    for reply in futures_util::future::join_all(calls).await {
        assert_eq!(answer_of(&reply)["sub"], "alice");
    }
    let stats = world.auth_stats().await;
    assert_eq!(stats["grants"], json!({"authorization_code": 1, "refresh_token": 1}), "{stats}");
    let refresh = &stats["token_requests"][1];
    assert_eq!(refresh["status"], 200, "{stats}");
    let api = world.api_stats().await;
    assert_eq!(api["unauthorized"], 0, "no expired token was sent: {api}");
    assert_eq!(api["subjects"]["alice"], 21, "{api}");
    assert!(expires_at(world.connections(0, "notes").await) > expired_at, "the refreshed token's expiry is stored");

    // Alice revokes the daemon's access at IdP2: the next refresh is refused (invalid_grant), the
    // daemon forgets the connection and asks her to connect again.
    let forgotten: Value = world
        .http
        .post(format!("{}/test/forget-refresh-tokens", world.auth_issuer))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(forgotten["forgotten"].as_u64() >= Some(1), "{forgotten}");
    tokio::time::sleep(ACCESS_TTL + Duration::from_secs(1)).await;
    let reply = world.call(&mount, &alice, "whoami").await;
    let elicitation = elicitation_of(&reply).unwrap_or_else(|| panic!("a refused refresh must ask again: {reply}"));
    link_of(elicitation, &world.daemons[0].url);
    let stats = world.auth_stats().await;
    let last = stats["token_requests"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["grant_type"].as_str(), last["error"].as_str()), (Some("refresh_token"), Some("invalid_grant")));
    assert!(world.connections(0, "notes").await.is_empty());
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_made_through_one_replica_is_used_by_another() {
    if on_postgres() {
        return; // runs on PostgreSQL in either pass
    }
    let setup = Setup { daemons: 2, shared_catalog: true, ..Setup::default() };
    let Some(world) = World::start(setup).await else { return };
    let (status, body) = world.register(0, &world.server("notes", world.oauth2_credential(None))).await;
    assert_eq!(status, 201, "{body}");
    // B follows A's registration within a second (docs/replicas.md).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = world.http.get(world.url(1, "/admin/servers/notes")).send().await.unwrap();
        if response.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "B never served the server registered on A");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Connected through A's link...
    let connected = world.host(&world.mount(0, "notes"), "alice", &["--mode", "legacy", "--retry-after-connect"]).await;
    assert_eq!(host_answer(&connected, "second")["sub"], "alice");

    // ...and used by B (a host that signs in there, with B's own URL as the resource) at once.
    let on_b = world.host(&world.mount(1, "notes"), "alice", &["--mode", "legacy"]).await;
    assert_eq!(host_answer(&on_b, "first")["sub"], "alice", "no elicitation on B: {on_b}");
    let connections = world.connections(1, "notes").await;
    assert_eq!(connections.len(), 1, "{connections:?}");
    assert_eq!(connections[0]["subject"], "alice");
    let stats = world.auth_stats().await;
    assert_eq!(stats["grants"], json!({"authorization_code": 1}), "{stats}");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_typed_in_on_the_connect_page_is_sent_for_its_owner_only() {
    const KEY: &str = "alice-notes-key-0123456789";
    let Some(world) = World::start(Setup::default()).await else { return };
    let public_url = world.daemons[0].url.clone();
    let (status, body) = world.register(0, &world.server("keys", api_key_credential())).await;
    assert_eq!(status, 201, "{body}");
    let mount = world.mount(0, "keys");

    let connected = world.host(&mount, "alice", &["--mode", "legacy", "--retry-after-connect", "--api-key", KEY]).await;
    elicited(&connected, &public_url);
    assert_eq!(connected["browser"]["status"], 200, "{connected}");
    assert!(page_text(&connected["browser"]).contains("Connected"), "{connected}");
    let digest = hex::encode(ring::digest::digest(&ring::digest::SHA256, KEY.as_bytes()));
    assert_eq!(host_answer(&connected, "second")["api_key_sha256"], digest.as_str());
    let alice = token_of(&connected);
    assert_eq!(answer_of(&world.call(&mount, &alice, "whoami").await)["api_key_sha256"], digest.as_str());

    // Bob has no key: asked for one, and the API never sees alice's in his call.
    let bob = world.host(&mount, "bob", &["--mode", "legacy"]).await;
    elicited(&bob, &public_url);
    let api = world.api_stats().await;
    assert_eq!((&api["api_keys"], &api["bearer"]), (&json!({digest.clone(): 2}), &json!(0)), "{api}");

    // Nothing of the key in the admin views; IdP2 took no part.
    let connections = world.connections(0, "keys").await;
    assert_eq!(connections.len(), 1, "{connections:?}");
    assert_eq!(
        (connections[0]["subject"].as_str(), connections[0]["credential"].as_str()),
        (Some("alice"), Some("notes"))
    );
    for path in ["/admin/servers/keys/connections", "/admin/servers/keys", "/admin/servers/keys/credentials"] {
        let text = world.http.get(world.url(0, path)).send().await.unwrap().text().await.unwrap();
        assert!(!text.contains(KEY), "{path}: {text}");
    }
    assert_eq!(world.auth_stats().await["grants"], json!({}));
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_pages_refuse_a_forged_state_a_replayed_callback_a_used_link_and_a_failed_exchange() {
    let Some(world) = World::start(Setup::default()).await else { return };
    let public_url = world.daemons[0].url.clone();
    // A server whose credential's token endpoint is down: nothing listens on that port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let down = world.oauth2_credential(Some(&format!("http://{closed}/token")));
    for body in [world.server("notes", world.oauth2_credential(None)), world.server("down", down)] {
        let (status, body) = world.register(0, &body).await;
        assert_eq!(status, 201, "{body}");
    }
    let mount = world.mount(0, "notes");
    let first = world.host(&mount, "alice", &["--mode", "legacy"]).await;
    let alice = token_of(&first);

    // The redirect back from IdP2 with another state than the one the daemon sent: refused before
    // any token request.
    let forged = world.browser(&elicited(&first, &public_url), "alice", &["--tamper-state"]).await;
    assert_eq!(forged["status"], 400, "{forged}");
    assert_eq!(world.auth_stats().await["grants"], json!({}), "no code exchange for a forged state");
    assert!(world.connections(0, "notes").await.is_empty());

    // The callback replayed after it connected: refused, and the code is not exchanged again.
    let reply = world.call(&mount, &alice, "whoami").await;
    let link = link_of(elicitation_of(&reply).unwrap_or_else(|| panic!("{reply}")), &public_url);
    let replayed = world.browser(&link, "alice", &["--replay"]).await;
    assert_eq!(replayed["status"], 200, "{replayed}");
    assert!(page_text(&replayed).contains("Connected"), "{replayed}");
    assert_eq!(replayed["replay"]["status"], 400, "{replayed}");
    assert_eq!(world.auth_stats().await["grants"], json!({"authorization_code": 1}));
    assert_eq!(world.connections(0, "notes").await.len(), 1);

    // The link itself is one-time.
    let again = world.browser(&link, "alice", &[]).await;
    assert!(matches!(again["status"].as_u64(), Some(400 | 410)), "{again}");
    assert!(page_text(&again).to_lowercase().contains("already used"), "{again}");
    assert_eq!(again["steps"].as_array().map(Vec::len), Some(1), "not sent to sign in: {again}");

    // IdP2's token endpoint is down when the code comes back: an error page, nothing stored, and
    // the next call asks again. (Another mount: a host signs in for it, its tokens are its own.)
    let down_mount = world.mount(0, "down");
    let down = world.host(&down_mount, "alice", &["--mode", "legacy"]).await;
    let failed = world.browser(&elicited(&down, &public_url), "alice", &[]).await;
    let status = failed["status"].as_u64().unwrap_or_default();
    assert!((400..600).contains(&status), "{failed}");
    assert!(!page_text(&failed).contains("Connected"), "{failed}");
    assert!(world.connections(0, "down").await.is_empty());
    assert!(elicitation_of(&world.call(&down_mount, &token_of(&down), "whoami").await).is_some());
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_link_past_its_lifetime_is_refused() {
    let setup = Setup { link_seconds: Some(SHORT_LINK_SECONDS), ..Setup::default() };
    let Some(world) = World::start(setup).await else { return };
    let public_url = world.daemons[0].url.clone();
    let (status, body) = world.register(0, &world.server("notes", world.oauth2_credential(None))).await;
    assert_eq!(status, 201, "{body}");
    let first = world.host(&world.mount(0, "notes"), "alice", &["--mode", "legacy"]).await;
    let link = elicited(&first, &public_url);
    tokio::time::sleep(Duration::from_secs(SHORT_LINK_SECONDS + 1)).await;
    let late = world.browser(&link, "alice", &[]).await;
    assert!(matches!(late["status"].as_u64(), Some(400 | 410)), "{late}");
    assert!(page_text(&late).to_lowercase().contains("expired"), "{late}");
    assert_eq!(late["steps"].as_array().map(Vec::len), Some(1), "not sent to sign in: {late}");
    assert!(world.connections(0, "notes").await.is_empty());
    world.stop().await;
}
