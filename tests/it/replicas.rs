//! Several daemons on one PostgreSQL catalog (docs/replicas.md): what one replica changes, the
//! others follow within a second; each generation job runs on exactly one replica, and another
//! takes it over when that one dies.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{
    AppOptions, OTHER_HOST, TestApp, WEATHER_HOST, on_postgres, postgres, replica_data_dir, spawn_app_with, tool,
    within,
};

/// How soon a change made through one replica must be seen through the others.
const FOLLOW_WITHIN: Duration = Duration::from_secs(1);

/// `count` daemons on one fresh PostgreSQL database, named `replica-0`, `replica-1`, …
async fn replicas(count: usize, env: &[(&str, &str)]) -> Option<Vec<TestApp>> {
    let url = postgres::fresh_database().await?;
    let upstream = crate::helpers::Upstream::start().await;
    let mut apps = Vec::with_capacity(count);
    for i in 0..count {
        let mut pairs: Vec<(String, String)> =
            env.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
        pairs.push(("MCPBOOTD_CATALOG__REPLICA_ID".into(), format!("replica-{i}")));
        let options =
            AppOptions { env: pairs, data_dir: Some(replica_data_dir(&url)), upstream: Some(upstream.clone()) };
        apps.push(spawn_app_with(options).await);
    }
    Some(apps)
}

async fn call_status(app: &TestApp, id: &str) -> (u16, Value) {
    app.admin_call(id, "hi", json!({})).await
}

async fn mcp_list_status(app: &TestApp, id: &str, token: Option<&str>) -> u16 {
    let mut request = app
        .http
        .post(app.mcp_url(id))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_follow_each_others_changes_within_a_second() {
    if on_postgres() {
        return; // runs on PostgreSQL in either pass
    }
    // An identity provider nobody answers for: a mount set to OAuth refuses requests without a
    // token (401) without needing it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let issuer = format!("http://{closed}");
    let oauth = [
        ("MCPBOOTD_AUTH__OAUTH__ISSUER", issuer.as_str()),
        ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", "https://mcp.example.com"),
    ];
    let Some(apps) = replicas(3, &oauth).await else { return };
    let [a, b, c] = &apps[..] else { unreachable!() };

    // Registered on A, called on B and C.
    a.register(json!({"id": "shared", "allow_domains": [WEATHER_HOST, OTHER_HOST],
        "tools": [tool("hi", "return 'hi from ' + (args.who || 'the shared catalog');")]}))
        .await;
    for (name, app) in [("B", b), ("C", c)] {
        let took = within(FOLLOW_WITHIN, &format!("registration on A, call on {name}"), || async {
            call_status(app, "shared").await.0 == 200
        })
        .await;
        println!("registration on A served by {name} after {took:?}");
        let (status, body) = call_status(app, "shared").await;
        assert_eq!((status, &body["result"]["content"][0]["text"]), (200, &json!("hi from the shared catalog")));
    }

    // An auth setting changed on B (no token involved) applies on A and C.
    let response =
        b.http.put(b.url("/admin/servers/shared/auth")).json(&json!({"mode": "oauth"})).send().await.unwrap();
    assert_eq!(response.status(), 200);
    for (name, app) in [("A", a), ("C", c)] {
        within(FOLLOW_WITHIN, &format!("OAuth set on B, required on {name}"), || async {
            mcp_list_status(app, "shared", None).await == 401
        })
        .await;
    }

    // An access token set on B guards the mount on A and C.
    let response = b
        .http
        .put(b.url("/admin/servers/shared/access-token"))
        .json(&json!({"access_token": "shared-token-0123456789"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for (name, app) in [("A", a), ("C", c)] {
        // Wait for the token to be accepted: a call without it was already refused under OAuth,
        // so a refusal alone does not show that the change has arrived.
        within(FOLLOW_WITHIN, &format!("token set on B, accepted on {name}"), || async {
            mcp_list_status(app, "shared", Some("shared-token-0123456789")).await == 200
        })
        .await;
        assert_eq!(mcp_list_status(app, "shared", None).await, 401, "no token on {name}");
    }

    // Deleted on C: 404 on A and B.
    assert_eq!(c.delete("/admin/servers/shared").await.0, 204);
    for (name, app) in [("A", a), ("B", b)] {
        let took = within(FOLLOW_WITHIN, &format!("deletion on C, 404 on {name}"), || async {
            call_status(app, "shared").await.0 == 404
        })
        .await;
        println!("deletion on C seen by {name} after {took:?}");
        assert_eq!(mcp_list_status(app, "shared", None).await, 404);
    }
    for app in apps {
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_set_on_one_replica_is_sent_by_the_others() {
    if on_postgres() {
        return;
    }
    let Some(apps) = replicas(2, &[]).await else { return };
    let [a, b] = &apps[..] else { unreachable!() };
    let fetch = tool("fetch", "const r = await fetch(args.url); return await r.text();");
    a.register(json!({"id": "keyed", "allow_domains": [WEATHER_HOST], "tools": [fetch]})).await;
    let echo = format!("{}/echo", a.upstream_url(WEATHER_HOST));
    within(FOLLOW_WITHIN, "registration on A, call on B", || async {
        b.admin_call("keyed", "fetch", json!({"url": echo})).await.0 == 200
    })
    .await;
    // B built its mount (without credentials) by calling it; now A sets one.
    let credential = json!({"value": "replicated-secret-1", "domains": [WEATHER_HOST],
        "inject": {"header": "Authorization", "format": "Bearer {value}"}});
    let response = a.http.put(a.url("/admin/servers/keyed/credentials/token")).json(&credential).send().await.unwrap();
    assert_eq!(response.status(), 201);
    within(FOLLOW_WITHIN, "credential set on A, sent by B", || async {
        b.admin_call("keyed", "fetch", json!({"url": echo})).await;
        b.upstream
            .requests()
            .last()
            .and_then(|r| r.headers.get("authorization").cloned())
            .is_some_and(|value| value.to_str().is_ok_and(|value| value == "Bearer replicated-secret-1"))
    })
    .await;
    for app in apps {
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_announcement_is_made_good_by_the_periodic_reconciliation() {
    use sqlx::Connection;
    if on_postgres() {
        return;
    }
    let Some(apps) = replicas(2, &[("MCPBOOTD_CATALOG__RECONCILE_INTERVAL", "1s")]).await else { return };
    let [a, b] = &apps[..] else { unreachable!() };
    // Nothing is announced from here on, as if B's listening connection were down.
    let url = std::fs::read_to_string(a.data_dir.path().join("postgres.url")).unwrap();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    for statement in [
        "ALTER TABLE servers DISABLE TRIGGER servers_announce",
        "ALTER TABLE credentials DISABLE TRIGGER credentials_announce",
    ] {
        sqlx::raw_sql(statement).execute(&mut admin).await.unwrap();
    }
    a.register(json!({"id": "quiet", "tools": [tool("hi", "return 'hi';")]})).await;
    let took = within(Duration::from_secs(5), "registration on A without announcement, served by B", || async {
        call_status(b, "quiet").await.0 == 200
    })
    .await;
    println!("unannounced registration reached B after {took:?}");
    assert_eq!(a.delete("/admin/servers/quiet").await.0, 204);
    within(Duration::from_secs(5), "unannounced deletion on A, 404 on B", || async {
        call_status(b, "quiet").await.0 == 404
    })
    .await;
    let metrics = b.http.get(b.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mcpbootd_reconciled_mounts_total 2"), "{metrics}");
    assert!(metrics.contains("mcpbootd_replica_info{replica=\"replica-1\",catalog=\"postgres\"} 1"), "{metrics}");
    for app in apps {
        app.stop().await;
    }
}

/// A daemon in a process of its own (so it can be killed with SIGKILL), on `url`.
struct ChildDaemon {
    process: std::process::Child,
    address: std::net::SocketAddr,
}

impl ChildDaemon {
    async fn start(data_dir: &std::path::Path, env: Vec<(String, String)>) -> ChildDaemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let url = std::fs::read_to_string(data_dir.join("postgres.url")).unwrap();
        let process = std::process::Command::new(env!("CARGO_BIN_EXE_mcpbootd"))
            .arg("serve")
            .env("MCPBOOTD_SERVER__LISTEN", address.to_string())
            .env("MCPBOOTD_CATALOG__URL", url)
            .env("MCPBOOTD_CREDENTIALS__KEY_FILE", data_dir.join("catalog.key"))
            .env("MCPBOOTD_SANDBOX__WORKERS", "1")
            .env("MCPBOOTD_LOG__LEVEL", "warn")
            .envs(env)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the daemon binary starts");
        // Held before the wait, so a child that never turns ready is killed when the wait fails
        // rather than left running with the test's output.
        let child = ChildDaemon { process, address };
        let http = reqwest::Client::new();
        // Generous: a loaded test machine (the suite runs beside it) can take many seconds to
        // start a process that builds the WebAssembly engine and opens a PostgreSQL catalog.
        within(Duration::from_secs(60), "the child daemon turns ready", || async {
            http.get(format!("http://{address}/readyz")).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await;
        child
    }

    fn kill(&mut self) {
        // SIGKILL: no shutdown, no lease released, nothing written.
        self.process.kill().unwrap();
        self.process.wait().unwrap();
    }
}

impl Drop for ChildDaemon {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_whose_replica_is_killed_is_finished_once_by_another() {
    use crate::generation::{DOCS_HOST, docs_html, plan_json, prompt, script_happy_path};
    use crate::scripted_llm::{Scripted, ScriptedLlm};
    if on_postgres() {
        return;
    }
    // The PostgreSQL client speaks TLS through rustls, which needs its provider chosen once per
    // process; run alone, no other test has chosen it.
    mcpbootd::install_crypto_provider();
    let Some(url) = postgres::fresh_database().await else { return };
    let llm = ScriptedLlm::start().await;
    let upstream = crate::helpers::Upstream::start().await;
    let port = upstream.address.port();
    upstream.set_docs(&docs_html(port));
    let mut env = llm.daemon_env(false);
    env.extend([
        ("MCPBOOTD_LLM__TIMEOUT_MS".to_string(), "60000".to_string()),
        ("MCPBOOTD_LLM__MAX_RETRIES".to_string(), "0".to_string()),
        ("MCPBOOTD_CATALOG__LEASE_TTL".to_string(), "2s".to_string()),
        (format!("MCPBOOTD_EGRESS__RESOLVE__{DOCS_HOST}"), "127.0.0.1".to_string()),
    ]);
    // A, the replica that will die, in a process of its own; B and C in this one.
    let a_dir = replica_data_dir(&url);
    let mut child_env = env.clone();
    child_env.extend([
        ("MCPBOOTD_CATALOG__REPLICA_ID".to_string(), "replica-a".to_string()),
        (format!("MCPBOOTD_EGRESS__RESOLVE__{WEATHER_HOST}"), "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".to_string(), "true".to_string()),
    ]);
    let mut a = ChildDaemon::start(a_dir.path(), child_env).await;
    let mut apps = Vec::new();
    for name in ["replica-b", "replica-c"] {
        let mut pairs = env.clone();
        pairs.push(("MCPBOOTD_CATALOG__REPLICA_ID".to_string(), name.to_string()));
        let options =
            AppOptions { env: pairs, data_dir: Some(replica_data_dir(&url)), upstream: Some(upstream.clone()) };
        apps.push(spawn_app_with(options).await);
    }
    let [b, c] = &apps[..] else { unreachable!() };

    // A's planning request never gets an answer; every later request gets the happy path.
    llm.push(Scripted::Hang);
    script_happy_path(&llm, port);
    let body = json!({"id": "orphan", "prompt": prompt(b)});
    let response =
        reqwest::Client::new().post(format!("http://{}/admin/servers", a.address)).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 202);
    within(Duration::from_secs(10), "A asks the LLM for a plan", || async { !llm.requests().is_empty() }).await;
    // C follows the generation as events, though A and then B run it.
    let events = c.http.get(c.url("/admin/servers/orphan/events")).send().await.unwrap();
    assert_eq!(events.status(), 200);
    a.kill();

    let started = Instant::now();
    let view = crate::helpers::wait_for_status(b, "orphan", &["ready", "failed"]).await;
    println!("a job whose replica was killed finished on another after {:?}", started.elapsed());
    assert_eq!(view["status"], "ready", "{view:#}");
    let stream = tokio::time::timeout(Duration::from_secs(10), events.text()).await.expect("C's event stream ends");
    let stream = stream.unwrap();
    assert!(stream.contains("event: done") && stream.contains("\"ready\""), "{stream}");

    // Finished once: one version, planned twice (A's request, then the taker's), compiled once.
    let (_, versions) = b.get("/admin/servers/orphan/versions").await;
    assert_eq!(versions["versions"].as_array().unwrap().len(), 1, "{versions:#}");
    let requests = llm.requests();
    let planned = requests.iter().filter(|r| r.system().contains("You are the planner")).count();
    assert_eq!((planned, requests.len()), (2, 4), "one plan each, then one compile per tool: {requests:?}");
    let plan: Value = serde_json::from_str(&plan_json(port)).unwrap();
    assert_eq!(view["generation"]["tools"].as_array().map(Vec::len), plan["tools"].as_array().map(Vec::len));
    let mut taken = 0;
    for app in [b, c] {
        let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        taken += usize::from(metrics.contains("mcpbootd_generation_jobs_taken_over_total 1"));
    }
    assert_eq!(taken, 1, "exactly one replica took the job over");
    // Both survivors serve it.
    for app in [b, c] {
        within(FOLLOW_WITHIN, "the finished server is served by every replica", || async {
            app.admin_call("orphan", "add", json!({"a": 1, "b": 2})).await.0 == 200
        })
        .await;
    }
    for app in apps {
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_keep_working_through_a_postgres_restart_and_the_call_log_catches_up() {
    if on_postgres() || postgres::skipping() {
        return;
    }
    let cluster = postgres::PrivateCluster::start().await;
    let data_dir = replica_data_dir(&cluster.url());
    let app = spawn_app_with(AppOptions { data_dir: Some(data_dir), ..AppOptions::default() }).await;
    app.register(json!({"id": "steady", "tools": [tool("hi", "return 'hi';")]})).await;
    let mut made = 0;
    assert_eq!(call_status(&app, "steady").await.0, 200);
    made += 1;

    // The database goes away; calls on the mounted server go on.
    cluster.stop();
    for _ in 0..20 {
        let (status, body) = call_status(&app, "steady").await;
        assert_eq!(status, 200, "a call while PostgreSQL is down: {body}");
        made += 1;
    }
    let health = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the daemon stays alive");
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(
        (status, &ready["catalog"]),
        (200, &json!("unavailable")),
        "still serving, and says why not all is well"
    );
    // Changes are refused with an answer that says why (clients drop a 500's body), once the
    // catalog's pool has given up finding a connection.
    let started = std::time::Instant::now();
    let (status, body) =
        app.post("/admin/servers", &json!({"id": "while-down", "tools": [tool("hi", "return 'hi';")]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("catalog_unavailable")), "{body}");
    assert!(crate::helpers::error_message(&body).contains("cannot be reached"), "{body}");
    println!("changes refused while PostgreSQL is down within {:?}", started.elapsed());

    // It comes back: the call log catches up, and changes work again.
    cluster.start_again();
    for _ in 0..5 {
        assert_eq!(call_status(&app, "steady").await.0, 200);
        made += 1;
    }
    within(Duration::from_secs(30), "the call log catches up after the restart", || async {
        let (status, log) = app.get("/admin/servers/steady/calls?limit=1000").await;
        status == 200 && log["calls"].as_array().map(Vec::len) == Some(made)
    })
    .await;
    within(Duration::from_secs(10), "a registration after the restart", || async {
        app.post("/admin/servers", &json!({"id": "after", "tools": [tool("hi", "return 'hi';")]})).await.0 == 201
    })
    .await;
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mcpbootd_call_log_dropped_records_total 0"), "{metrics}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_copies_a_sqlite_catalog_into_postgres_and_a_replica_serves_it() {
    use crate::generation::{DOCS_HOST, docs_html, prompt, script_happy_path};
    use crate::helpers::catalog_path;
    use crate::scripted_llm::ScriptedLlm;
    if on_postgres() {
        return;
    }
    let Some(url) = postgres::fresh_database().await else { return };
    // A daemon on a SQLite file, with a generated server, a toolset with a credential, calls.
    let llm = ScriptedLlm::start().await;
    let mut env = llm.daemon_env(false);
    env.push((format!("MCPBOOTD_EGRESS__RESOLVE__{DOCS_HOST}"), "127.0.0.1".to_string()));
    let app = spawn_app_with(AppOptions { env: env.clone(), ..AppOptions::default() }).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_happy_path(&llm, port);
    let body = json!({"id": "items", "prompt": prompt(&app)});
    assert_eq!(app.post("/admin/servers", &body).await.0, 202);
    assert_eq!(crate::helpers::wait_for_status(&app, "items", &["ready", "failed"]).await["status"], "ready");
    let fetch = tool("fetch", "const r = await fetch(args.url); return await r.text();");
    app.register(json!({"id": "keyed", "allow_domains": [WEATHER_HOST], "tools": [fetch]})).await;
    let credential = json!({"value": "migrated-secret-1", "domains": [WEATHER_HOST],
        "inject": {"header": "Authorization", "format": "Bearer {value}"}});
    let response = app.http.put(app.url("/admin/servers/keyed/credentials/token")).json(&credential).send().await;
    assert_eq!(response.unwrap().status(), 201);
    for (a, b) in [(1, 2), (3, 4), (5, 6)] {
        assert_eq!(app.admin_call("items", "add", json!({"a": a, "b": b})).await.0, 200);
    }
    let (data_dir, upstream) = (app.data_dir.clone(), app.upstream.clone());
    app.stop().await;

    let migrate = |to: String| {
        let from = format!("sqlite://{}", catalog_path(data_dir.path()).display());
        std::process::Command::new(env!("CARGO_BIN_EXE_mcpbootd"))
            .args(["migrate", "--from", &from, "--to", &to, "--with-calls"])
            .output()
            .unwrap()
    };
    let output = migrate(url.clone());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("every table has as many rows in the target as in the source"), "{stdout}");
    assert!(stdout.lines().any(|line| line.starts_with("calls") && line.contains(" 3 rows")), "{stdout}");

    // A replica on the database serves what the file held, credentials included (same key).
    let replica_dir = replica_data_dir(&url);
    let key = std::fs::read_to_string(data_dir.path().join("catalog.db.key")).unwrap();
    std::fs::write(replica_dir.path().join("catalog.key"), key).unwrap();
    let replica = spawn_app_with(AppOptions { env, data_dir: Some(replica_dir), upstream: Some(upstream) }).await;
    let (status, body) = replica.admin_call("items", "add", json!({"a": 20, "b": 22})).await;
    assert_eq!((status, &body["result"]["content"][0]["text"]), (200, &json!("42")), "{body}");
    let echo = format!("{}/echo", replica.upstream_url(WEATHER_HOST));
    assert_eq!(replica.admin_call("keyed", "fetch", json!({"url": echo})).await.0, 200);
    let authorization = replica.upstream.requests().last().unwrap().headers.get("authorization").cloned();
    assert_eq!(authorization.unwrap().to_str().unwrap(), "Bearer migrated-secret-1");
    let (_, calls) = replica.get("/admin/servers/items/calls").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 4, "three copied calls and one new: {calls:#}");
    let (_, versions) = replica.get("/admin/servers/items/versions").await;
    assert_eq!(versions["versions"][0]["status"], "ready", "{versions:#}");
    // New versions continue the numbering and the ids.
    let (status, _) = replica.post("/admin/servers/items/regenerate", &json!({"force": true})).await;
    assert_eq!(status, 202);
    let view = crate::helpers::wait_for_status(&replica, "items", &["ready", "failed"]).await;
    assert_eq!(view["generation"]["version"], 2, "{view:#}");
    replica.stop().await;

    // Into a database that already holds servers: refused, nothing written.
    let output = migrate(url);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("already holds 2 server(s); migrate into an empty database"), "{stderr}");
}
