//! Upstream credentials through the real fetch path (issue: credentials injected at egress):
//! the upstream sees the value; the handler, the agent, the call log, the egress log, the admin
//! API and the catalog file never do; a redirect off its domains drops it; another server
//! cannot use it; a catalog opened with another key refuses to start, naming the key.

use serde_json::{Value, json};

use crate::helpers::*;

const SECRET: &str = "ghp_TestSecretValue0123456789";

/// A handler that fetches `args.url` (with the headers it is given) and returns the upstream's
/// JSON, logging it too: the most a handler can do to leak what the upstream echoes.
fn echo_tool() -> Value {
    tool(
        "fetch",
        "const r = await fetch(args.url, {headers: args.headers || {}});\n\
         const body = await r.text();\n\
         console.log(body);\n\
         if (!r.ok) throw new Error('upstream said ' + r.status + ': ' + body);\n\
         return JSON.parse(body);",
    )
}

fn register_body(id: &str) -> Value {
    json!({"id": id, "allow_domains": [WEATHER_HOST, OTHER_HOST], "tools": [echo_tool()]})
}

async fn put(app: &TestApp, path: &str, body: &Value) -> (u16, Value) {
    let response = app.http.put(app.url(path)).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The Authorization headers the upstream saw, in order.
fn seen_authorization(app: &TestApp) -> Vec<String> {
    app.upstream
        .requests()
        .iter()
        .map(|r| r.headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_reach_the_upstream_and_nothing_else() {
    let app = spawn_app().await;
    app.register(register_body("gh")).await;
    app.register(register_body("neighbour")).await;
    let credential = json!({
        "value": SECRET,
        "domains": [WEATHER_HOST],
        "inject": {"header": "Authorization", "format": "Bearer {value}"},
    });

    // Refusals say what is wrong.
    let (status, body) = put(
        &app,
        "/admin/servers/gh/credentials/token",
        &json!({
            "value": SECRET, "domains": ["api.elsewhere.test"], "inject": {"header": "Authorization"}
        }),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(error_message(&body).contains("not on the server's whitelist"), "{body}");
    let (status, body) = put(&app, "/admin/servers/gh/credentials/bad%20name", &credential).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("invalid_credential")), "{body}");
    assert_eq!(put(&app, "/admin/servers/nobody/credentials/token", &credential).await.0, 404);
    let host = json!({"value": SECRET, "domains": [WEATHER_HOST], "inject": {"header": "Host"}});
    let (status, body) = put(&app, "/admin/servers/gh/credentials/token", &host).await;
    assert_eq!(status, 422, "{body}");
    assert!(error_message(&body).contains("a header the daemon sets itself"), "{body}");

    let (status, view) = put(&app, "/admin/servers/gh/credentials/token", &credential).await;
    assert_eq!(status, 201, "{view}");
    assert_eq!(view["domains"], json!([WEATHER_HOST]));
    assert_eq!(view["fingerprint"].as_str().map(str::len), Some(8));
    assert!(!view.to_string().contains(SECRET));
    let (status, _) = put(&app, "/admin/servers/gh/credentials/token", &credential).await;
    assert_eq!(status, 200, "setting it again rotates it");

    // The upstream gets the value, replacing the header the handler set; the handler gets the
    // echo back with the value taken out.
    let echo = format!("{}/echo", app.upstream_url(WEATHER_HOST));
    let (status, body) =
        app.admin_call("gh", "fetch", json!({"url": echo, "headers": {"Authorization": "Bearer handler-made"}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(seen_authorization(&app), [format!("Bearer {SECRET}")], "one header, replaced");
    let result = body["result"].to_string();
    assert!(!result.contains(SECRET), "{result}");
    assert!(result.contains("Bearer [redacted:token]"), "{result}");

    // Not to another host, not after a redirect to one, not for another server.
    let other_echo = format!("{}/echo", app.upstream_url(OTHER_HOST));
    app.admin_call("gh", "fetch", json!({"url": other_echo})).await;
    let redirect = format!("{}/redirect?to={}", app.upstream_url(WEATHER_HOST), other_echo);
    app.admin_call("gh", "fetch", json!({"url": redirect})).await;
    app.admin_call("neighbour", "fetch", json!({"url": echo})).await;
    assert_eq!(&seen_authorization(&app)[1..], ["", "", ""], "{:?}", app.upstream.requests());

    // Not in the call log (console, results), which names the credential on the hop it went on.
    let (_, calls) = app.get("/admin/servers/gh/calls").await;
    assert!(!calls.to_string().contains(SECRET));
    let first = calls["calls"].as_array().unwrap().last().unwrap();
    assert_eq!(first["egress"][0]["credentials"], json!(["token"]), "{first}");
    assert!(first["console"].as_str().unwrap().contains("[redacted:token]"), "{first}");

    // Not in the admin views or the export.
    for path in ["/admin/servers/gh", "/admin/servers/gh/credentials", "/admin/servers/gh/export"] {
        let (status, body) = app.get(path).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.to_string().contains(SECRET), "{path}: {body}");
    }
    let (_, list) = app.get("/admin/servers/gh/credentials").await;
    assert_eq!(list["credentials"][0]["name"], "token");
    let (_, view) = app.get("/admin/servers/gh").await;
    assert_eq!(view["credentials"], json!(["token"]), "the server view names its credentials");

    // Not in the catalog file, in any form.
    let mut raw = Vec::new();
    for entry in std::fs::read_dir(app.data_dir.path()).unwrap() {
        raw.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(!raw.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "the catalog holds the value in clear");

    // A credential for both hosts still stays behind on a redirect that leaves the origin.
    let both = json!({"value": SECRET, "domains": [WEATHER_HOST, OTHER_HOST], "inject": {"header": "Authorization"}});
    assert_eq!(put(&app, "/admin/servers/gh/credentials/token", &both).await.0, 200);
    app.admin_call("gh", "fetch", json!({"url": redirect})).await;
    assert_eq!(seen_authorization(&app).last().unwrap(), "", "dropped after leaving the origin");
    let same_origin = format!("{}/redirect?to=/echo", app.upstream_url(WEATHER_HOST));
    app.admin_call("gh", "fetch", json!({"url": same_origin})).await;
    assert_eq!(seen_authorization(&app).last().unwrap(), SECRET, "kept on a same-origin redirect");

    // Deleted: the next call goes without it.
    assert_eq!(app.delete("/admin/servers/gh/credentials/token").await.0, 204);
    assert_eq!(app.delete("/admin/servers/gh/credentials/token").await.0, 404);
    app.admin_call("gh", "fetch", json!({"url": echo})).await;
    assert_eq!(seen_authorization(&app).last().unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_survive_a_restart_and_a_wrong_key_refuses_to_start() {
    if crate::helpers::on_postgres() {
        return; // works on the SQLite catalog file itself
    }
    let app = spawn_app().await;
    app.register(register_body("keyed")).await;
    let credential = json!({"value": SECRET, "domains": [WEATHER_HOST], "inject": {"basic": {"username": "me"}}});
    assert_eq!(put(&app, "/admin/servers/keyed/credentials/basic", &credential).await.0, 201);
    let key_file = app.data_dir.path().join("catalog.db.key");
    assert!(key_file.exists(), "the key is created beside the catalog");
    let (data_dir, upstream) = (app.data_dir.clone(), app.upstream.clone());
    app.stop().await;

    let app = spawn_app_with(AppOptions {
        data_dir: Some(data_dir.clone()),
        upstream: Some(upstream),
        ..AppOptions::default()
    })
    .await;
    let echo = format!("{}/echo", app.upstream_url(WEATHER_HOST));
    let (status, body) = app.admin_call("keyed", "fetch", json!({"url": echo})).await;
    assert_eq!(status, 200, "{body}");
    assert!(seen_authorization(&app).last().unwrap().starts_with("Basic "), "basic auth added after a restart");
    assert!(body.to_string().contains("[redacted:basic]"), "{body}");
    app.stop().await;

    let env = vec![
        ("MCPBOOTD_CATALOG__PATH".to_string(), catalog_path(data_dir.path()).display().to_string()),
        ("MCPBOOTD_CREDENTIALS_KEY".to_string(), "11".repeat(32)),
    ];
    let config = mcpbootd::config::Config::load(None, env, &mcpbootd::config::CliOverrides::default()).unwrap();
    let error = match mcpbootd::app::build(config).await {
        Ok(_) => panic!("a catalog whose credentials the key cannot open must not start"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("[credentials] key") && error.contains("cannot be decrypted"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_given_at_registration_are_stored_with_the_server_or_not_at_all() {
    let app = spawn_app().await;
    let mut body = register_body("inline");
    body["credentials"] = json!({
        "weather": {"value": SECRET, "domains": [WEATHER_HOST], "inject": {"header": "X-Api-Key"}},
    });
    let mut refused = body.clone();
    refused["id"] = json!("refused");
    refused["credentials"]["elsewhere"] =
        json!({"value": SECRET, "domains": ["api.elsewhere.test"], "inject": {"query": "key"}});
    let (status, answer) = app.post("/admin/servers", &refused).await;
    assert_eq!(status, 422, "{answer}");
    assert!(error_message(&answer).contains("\"elsewhere\""), "{answer}");
    assert_eq!(app.get("/admin/servers/refused").await.0, 404, "nothing of a refused registration is stored");

    app.register(body).await;
    let (_, list) = app.get("/admin/servers/inline/credentials").await;
    assert_eq!(list["credentials"][0]["name"], "weather", "{list}");
    let echo = format!("{}/echo", app.upstream_url(WEATHER_HOST));
    let (status, result) = app.admin_call("inline", "fetch", json!({"url": echo})).await;
    assert_eq!(status, 200, "{result}");
    let seen = app.upstream.requests();
    assert_eq!(seen.last().unwrap().headers["x-api-key"], SECRET);
    assert!(result.to_string().contains("[redacted:weather]") && !result.to_string().contains(SECRET));
    let (_, exported) = app.get("/admin/servers/inline/export").await;
    assert!(exported.get("credentials").is_none() && !exported.to_string().contains(SECRET), "{exported}");
}

/// Runs `mcpbootd <args>` with `stdin` piped in; exit code, stdout, stderr.
async fn mcpbootd(args: &[&str], env: &[(&str, String)], stdin: &str) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpbootd"));
    command
        .args(args)
        .env_remove("MCPBOOTD_ADMIN_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let output = child.wait_with_output().await.unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status.code().unwrap(), text(output.stdout), text(output.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_lists_and_deletes_credentials_and_rekeys_the_catalog() {
    if crate::helpers::on_postgres() {
        return; // works on the SQLite catalog file itself
    }
    let app = spawn_app().await;
    app.register(register_body("cli")).await;
    let env = [("MCPBOOTD_URL", app.url(""))];
    let set = ["credentials", "set", "cli", "token", "--domain", WEATHER_HOST, "--header", "Authorization"];
    let (code, out, err) =
        mcpbootd(&[&set[..], &["--format", "Bearer {value}"]].concat(), &env, &format!("{SECRET}\n")).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("credential token of cli set") && !out.contains(SECRET), "{out}");
    let (code, out, _) = mcpbootd(&["credentials", "list", "cli"], &env, "").await;
    assert_eq!(code, 0);
    assert!(out.contains("token") && out.contains(WEATHER_HOST) && !out.contains(SECRET), "{out}");
    let (code, out, _) = mcpbootd(&["show", "cli"], &env, "").await;
    assert_eq!(code, 0);
    assert!(out.contains("credentials") && out.contains("token") && !out.contains(SECRET), "{out}");
    let (code, _, err) = mcpbootd(&set, &env, "").await;
    assert_eq!(code, 2, "an empty stdin is refused: {err}");
    let (code, _, err) =
        mcpbootd(&["credentials", "set", "cli", "x", "--domain", WEATHER_HOST, "--query", "k"], &env, "short\n").await;
    assert_eq!(code, 1, "the daemon's refusal is shown: {err}");
    assert!(err.contains("characters"), "{err}");

    // Rekey with the daemon stopped; the credential still works after a restart.
    let (data_dir, upstream) = (app.data_dir.clone(), app.upstream.clone());
    let key_file = data_dir.path().join("catalog.db.key");
    let old_key = std::fs::read_to_string(&key_file).unwrap();
    app.stop().await;
    let catalog = [("MCPBOOTD_CATALOG__PATH", catalog_path(data_dir.path()).display().to_string())];
    let (code, out, err) = mcpbootd(&["credentials", "rekey"], &catalog, "").await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("re-encrypted 1 credential"), "{out}");
    assert_ne!(std::fs::read_to_string(&key_file).unwrap(), old_key, "a new key");
    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    let echo = format!("{}/echo", app.upstream_url(WEATHER_HOST));
    assert_eq!(app.admin_call("cli", "fetch", json!({"url": echo})).await.0, 200);
    assert_eq!(seen_authorization(&app).last().unwrap(), &format!("Bearer {SECRET}"));

    let env = [("MCPBOOTD_URL", app.url(""))];
    let (code, out, _) = mcpbootd(&["credentials", "delete", "cli", "token"], &env, "").await;
    assert_eq!((code, out.trim()), (0, "deleted credential token of cli"));
    let (code, _, err) = mcpbootd(&["credentials", "delete", "cli", "token"], &env, "").await;
    assert_eq!(code, 1, "{err}");
}
