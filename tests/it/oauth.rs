//! Mounts behind OAuth (`[auth.oauth]`): a fake authorization server on loopback publishes RFC 8414
//! metadata and a JWKS, and tokens signed with its key are presented to a real daemon.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use crate::helpers::*;

const PUBLIC_URL: &str = "https://mcp.example.com";

/// An issuer on 127.0.0.1 publishing RFC 8414 metadata and a JWKS of P-256 keys, which a test
/// can rotate; it counts the JWKS fetches.
struct Issuer {
    issuer: String,
    state: Arc<IssuerState>,
}

#[derive(Default)]
struct IssuerState {
    /// Every key made so far, by kid: tokens can be signed with a key that is not published.
    keys: Mutex<Vec<(String, EncodingKey, Value)>>,
    /// The kids the JWKS lists.
    published: Mutex<Vec<String>>,
    jwks_fetches: AtomicUsize,
    /// Opaque tokens the introspection endpoint knows, with its answer for each.
    opaque: Mutex<std::collections::HashMap<String, Value>>,
    introspections: AtomicUsize,
}

impl Issuer {
    async fn start() -> Issuer {
        let state = Arc::new(IssuerState::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        let issuer = format!("http://{address}");
        let metadata = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks"),
            "introspection_endpoint": format!("{issuer}/introspect"),
            "jwt_access_token_signing_alg_values_supported": ["ES256"],
        });
        let jwks_state = state.clone();
        let introspection_state = state.clone();
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/introspect",
                axum::routing::post(move |headers: axum::http::HeaderMap, body: String| async move {
                    introspection_state.introspections.fetch_add(1, Ordering::SeqCst);
                    // RFC 7662 §2.1: the resource server authenticates (here: HTTP Basic).
                    let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("rs:rs-secret"));
                    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(basic.as_str()) {
                        return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "invalid_client"})));
                    }
                    let token = url::form_urlencoded::parse(body.as_bytes())
                        .find(|(name, _)| name == "token")
                        .map(|(_, value)| value.into_owned())
                        .unwrap_or_default();
                    let answer = introspection_state.opaque.lock().unwrap().get(&token).cloned();
                    (axum::http::StatusCode::OK, axum::Json(answer.unwrap_or(json!({"active": false}))))
                }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || async move {
                    jwks_state.jwks_fetches.fetch_add(1, Ordering::SeqCst);
                    let published = jwks_state.published.lock().unwrap().clone();
                    let keys = jwks_state.keys.lock().unwrap();
                    let keys: Vec<Value> =
                        keys.iter().filter(|(kid, ..)| published.contains(kid)).map(|(.., jwk)| jwk.clone()).collect();
                    axum::Json(json!({ "keys": keys }))
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let issuer = Issuer { issuer, state };
        issuer.make_key("k1");
        issuer.state.published.lock().unwrap().push("k1".into());
        issuer
    }

    /// A new P-256 key under `kid`, not yet published.
    fn make_key(&self, kid: &str) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        });
        self.state.keys.lock().unwrap().push((kid.into(), EncodingKey::from_ec_der(pkcs8.as_ref()), jwk));
    }

    /// The provider rotates: a new key is published and the old ones are withdrawn.
    fn rotate(&self, kid: &str) {
        self.make_key(kid);
        *self.state.published.lock().unwrap() = vec![kid.into()];
    }

    fn jwks_fetches(&self) -> usize {
        self.state.jwks_fetches.load(Ordering::SeqCst)
    }

    /// A token for `audience`, valid for `lifetime` seconds from now (negative: expired), with
    /// the scope `mcp:read`, signed with the newest key.
    fn token(&self, audience: &str, lifetime: i64) -> String {
        self.token_with(json!({"aud": audience, "exp": unix_now() + lifetime}))
    }

    /// A token with these claims over the defaults (`iss`, `sub`, `client_id`, `scope`), signed with
    /// the newest key.
    fn token_with(&self, claims: Value) -> String {
        let kid = self.state.keys.lock().unwrap().last().unwrap().0.clone();
        self.token_signed(&kid, claims)
    }

    fn token_signed(&self, kid: &str, overrides: Value) -> String {
        let now = unix_now();
        let mut claims = json!({
            "iss": self.issuer, "sub": "user-1", "client_id": "host-app", "iat": now, "exp": now + 300,
            "scope": "mcp:read",
        });
        for (name, value) in overrides.as_object().unwrap() {
            claims[name] = value.clone();
        }
        let keys = self.state.keys.lock().unwrap();
        let (_, key, _) = keys.iter().find(|(k, ..)| k == kid).unwrap();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn resource(id: &str) -> String {
    format!("{PUBLIC_URL}/servers/{id}/mcp")
}

async fn spawn_behind(issuer: &str) -> TestApp {
    spawn_behind_with(issuer, &[]).await
}

async fn spawn_behind_with(issuer: &str, extra: &[(&str, &str)]) -> TestApp {
    let mut env = vec![
        ("MCPBOOTD_AUTH__OAUTH__ISSUER".to_string(), issuer.to_string()),
        ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL".into(), PUBLIC_URL.into()),
        ("MCPBOOTD_AUTH__OAUTH__REQUIRED".into(), "true".into()),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    spawn_app_with(AppOptions { env, ..AppOptions::default() }).await
}

/// `tools/list` on a mount with this `Authorization` value (and optional query): status, the
/// `WWW-Authenticate` header, the body.
async fn list_tools(app: &TestApp, id: &str, authorization: Option<&str>, query: &str) -> (u16, String, Value) {
    rpc(app, id, authorization, query, json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await
}

/// `tools/call` of `tool` with a bearer token.
async fn call_tool(app: &TestApp, id: &str, token: &str, tool: &str, arguments: Value) -> (u16, String, Value) {
    let message =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    rpc(app, id, Some(&format!("Bearer {token}")), "", message).await
}

async fn rpc(
    app: &TestApp,
    id: &str,
    authorization: Option<&str>,
    query: &str,
    message: Value,
) -> (u16, String, Value) {
    let mut request = app
        .http
        .post(format!("{}{query}", app.mcp_url(id)))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(message.to_string());
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge =
        response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null")))
        .unwrap_or(Value::Null);
    (status, challenge, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_behind_oauth_takes_tokens_for_itself_only() {
    let issuer = Issuer::start().await;
    let app = spawn_behind(&issuer.issuer).await;
    app.register(json!({"id": "guarded", "tools": [tool("ok", "return 1;")]})).await;
    app.register(json!({"id": "other", "tools": [tool("ok", "return 1;")]})).await;
    app.register(
        json!({"id": "static", "access_token": "static-token-0123456789", "tools": [tool("ok", "return 1;")]}),
    )
    .await;
    // The provider is discovered in the background and `/readyz` says so.
    let mut ready = Value::Null;
    for _ in 0..100 {
        ready = app.get("/readyz").await.1;
        if ready["oauth"] == "ok" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ready["oauth"], "ok", "{ready}");
    let resource = format!("{PUBLIC_URL}/servers/guarded/mcp");
    let metadata_url = format!("{PUBLIC_URL}/.well-known/oauth-protected-resource/servers/guarded/mcp");

    // Discovery: the 401 names the metadata, which names the issuer and the audience to ask for.
    let (status, challenge, body) = list_tools(&app, "guarded", None, "").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata_url}\""));
    assert!(body["error"]["message"].as_str().unwrap().contains(&issuer.issuer), "{body}");
    let (status, metadata) = app.get("/.well-known/oauth-protected-resource/servers/guarded/mcp").await;
    assert_eq!(status, 200, "{metadata}");
    assert_eq!(metadata["resource"], resource.as_str());
    assert_eq!(metadata["authorization_servers"], json!([issuer.issuer]));
    assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    let (status, root) = app.get("/.well-known/oauth-protected-resource").await;
    assert_eq!((status, root["resource"].as_str()), (200, Some(PUBLIC_URL)));
    assert_eq!(app.get("/.well-known/oauth-protected-resource/servers/nope/mcp").await.0, 404);

    // A token for this mount works.
    let good = issuer.token(&resource, 300);
    let (status, _, body) = list_tools(&app, "guarded", Some(&format!("Bearer {good}")), "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["tools"][0]["name"], "ok");

    // Refusals: another mount's token, an expired one, `alg: none`, a token in the query only.
    let other = issuer.token(&format!("{PUBLIC_URL}/servers/other/mcp"), 300);
    let expired = issuer.token(&resource, -3600);
    let claims = URL_SAFE_NO_PAD
        .encode(json!({"iss": issuer.issuer, "sub": "x", "aud": resource, "exp": 4_000_000_000u64}).to_string());
    let none = format!("{}.{claims}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#));
    for (token, reason) in [(&other, "wrong audience"), (&expired, "expired"), (&none, "algorithm not allowed")] {
        let (status, challenge, body) = list_tools(&app, "guarded", Some(&format!("Bearer {token}")), "").await;
        assert_eq!(status, 401, "{reason}: {body}");
        assert!(
            challenge.starts_with(&format!("Bearer resource_metadata=\"{metadata_url}\", error=\"invalid_token\"")),
            "{challenge}"
        );
        assert!(body["error"]["message"].as_str().unwrap().contains(reason), "{body}");
    }
    let (status, challenge, _) = list_tools(&app, "guarded", None, &format!("?access_token={good}")).await;
    assert_eq!(status, 401, "a token in the query string is not read");
    assert!(!challenge.contains("invalid_token"));

    // A mount with a static access token keeps it; OAuth tokens are not it.
    assert_eq!(list_tools(&app, "static", Some("Bearer static-token-0123456789"), "").await.0, 200);
    assert_eq!(list_tools(&app, "static", Some(&format!("Bearer {good}")), "").await.0, 401);

    // Refusals are counted by reason, never by subject.
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "mcpbootd_oauth_refusals_total{reason=\"missing_token\"} 2",
        "mcpbootd_oauth_refusals_total{reason=\"wrong_audience\"} 1",
        "mcpbootd_oauth_refusals_total{reason=\"expired\"} 1",
        "mcpbootd_oauth_refusals_total{reason=\"algorithm_not_allowed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("user-1") && !metrics.contains("host-app"));
}

/// An identity provider that cannot be reached: the daemon starts, and the mount answers a clear
/// 503 at once instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_issuer_gives_a_prompt_503() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let issuer = format!("http://{closed}");
    let app = spawn_behind(&issuer).await;
    app.register(json!({"id": "guarded", "tools": [tool("ok", "return 1;")]})).await;
    // Ready (the other mounts serve), and saying that OAuth is not.
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(
        (status, ready["status"].as_str(), ready["oauth"].as_str()),
        (200, Some("ready"), Some("unavailable")),
        "{ready}"
    );
    let started = std::time::Instant::now();
    let (status, _, body) = list_tools(&app, "guarded", Some("Bearer a.b.c"), "").await;
    assert!(started.elapsed() < Duration::from_secs(10), "answered in {:?}", started.elapsed());
    // A malformed token is refused before the issuer is needed; a well-formed one needs it.
    assert_eq!(status, 401, "{body}");
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256","kid":"k1"}"#);
    let claims =
        URL_SAFE_NO_PAD.encode(json!({"iss": issuer, "sub": "x", "aud": "a", "exp": 4_000_000_000u64}).to_string());
    let token = format!("{header}.{claims}.{}", URL_SAFE_NO_PAD.encode([0u8; 64]));
    let (status, _, body) = list_tools(&app, "guarded", Some(&format!("Bearer {token}")), "").await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("cannot be reached"), "{body}");
}

/// Refusals that need the provider's keys: another issuer, HS256 "signed" with the public key,
/// a key the provider never published (one refetch, then refused without asking again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_from_elsewhere_or_with_unknown_keys_are_refused() {
    let issuer = Issuer::start().await;
    let app = spawn_behind(&issuer.issuer).await;
    app.register(json!({"id": "guarded", "tools": [tool("ok", "return 1;")]})).await;
    let good = issuer.token(&resource("guarded"), 300);
    assert_eq!(list_tools(&app, "guarded", Some(&format!("Bearer {good}")), "").await.0, 200);

    let foreign = issuer.token_with(json!({"aud": resource("guarded"), "iss": "https://evil.example.com"}));
    // HS256 with the provider's public key as the secret: whoever fetched the JWKS could sign it.
    let jwk = issuer.state.keys.lock().unwrap()[0].2.to_string();
    let claims = json!({"iss": issuer.issuer, "sub": "x", "aud": resource("guarded"), "exp": unix_now() + 300});
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let hmac = jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(jwk.as_bytes())).unwrap();
    for (token, reason) in [(&foreign, "wrong issuer"), (&hmac, "algorithm not allowed")] {
        let (status, challenge, body) = list_tools(&app, "guarded", Some(&format!("Bearer {token}")), "").await;
        assert_eq!(status, 401, "{reason}: {body}");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(rpc_error(&body).contains(reason), "{body}");
    }

    // A kid the provider does not publish: the daemon asks for the JWKS once more, then refuses;
    // a second such token within the refetch interval costs the provider nothing.
    issuer.make_key("ghost");
    let fetches = issuer.jwks_fetches();
    for _ in 0..2 {
        let ghost = issuer.token_signed("ghost", json!({"aud": resource("guarded")}));
        let (status, _, body) = list_tools(&app, "guarded", Some(&format!("Bearer {ghost}")), "").await;
        assert_eq!(status, 401, "{body}");
        assert!(rpc_error(&body).contains("unknown key"), "{body}");
    }
    assert_eq!(issuer.jwks_fetches(), fetches + 1, "one refetch for unknown kids, rate-limited");
    assert_eq!(list_tools(&app, "guarded", Some(&format!("Bearer {good}")), "").await.0, 200);
}

/// The provider rotates its keys: the first token signed with the new key makes the daemon
/// refetch the JWKS, and it is accepted without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotated_at_the_provider_are_accepted_without_restart() {
    let issuer = Issuer::start().await;
    let app = spawn_behind(&issuer.issuer).await;
    app.register(json!({"id": "guarded", "tools": [tool("ok", "return 1;")]})).await;
    let before = issuer.token(&resource("guarded"), 300);
    assert_eq!(list_tools(&app, "guarded", Some(&format!("Bearer {before}")), "").await.0, 200);
    issuer.rotate("k2");
    let after = issuer.token(&resource("guarded"), 300);
    assert!(after != before);
    let (status, _, body) = list_tools(&app, "guarded", Some(&format!("Bearer {after}")), "").await;
    assert_eq!(status, 200, "a token signed with the rotated key: {body}");
}

fn rpc_error(body: &Value) -> String {
    body["error"]["message"].as_str().unwrap_or_default().to_string()
}

fn read_only(mut tool: Value) -> Value {
    tool["annotations"] = json!({"readOnlyHint": true});
    tool
}

/// The scope model: `read_scope` calls read-only tools, `write_scope` every tool; a token
/// without the scope gets 403 `insufficient_scope` naming it; a server's own scopes guard the
/// whole mount; scripts' tool calls are checked too; the call log names the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_decide_which_tools_a_token_may_call() {
    let issuer = Issuer::start().await;
    let app = spawn_behind_with(
        &issuer.issuer,
        &[
            ("MCPBOOTD_AUTH__OAUTH__READ_SCOPE", "mcp:read"),
            ("MCPBOOTD_AUTH__OAUTH__WRITE_SCOPE", "mcp:write"),
            ("MCPBOOTD_CODE_MODE__ENABLED", "true"),
        ],
    )
    .await;
    app.register(json!({
        "id": "desk",
        "tools": [read_only(tool("look", "return 'looked';")), tool("change", "return 'changed';")],
        "code_mode": {"enabled": true},
    }))
    .await;
    let reader = issuer.token_with(json!({"aud": resource("desk"), "scope": "mcp:read"}));
    let writer = issuer.token_with(json!({"aud": resource("desk"), "scope": "mcp:write", "sub": "user-2"}));

    // Every tool is listed whatever the token holds: a host learns what a step-up would allow.
    let (status, _, body) = list_tools(&app, "desk", Some(&format!("Bearer {reader}")), "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 3, "look, change, code_execution: {body}");

    let (status, _, body) = call_tool(&app, "desk", &reader, "look", json!({})).await;
    assert_eq!((status, body["result"]["content"][0]["text"].as_str()), (200, Some("looked")), "{body}");
    let (status, challenge, body) = call_tool(&app, "desk", &reader, "change", json!({})).await;
    assert_eq!(status, 403, "{body}");
    let metadata = format!("{PUBLIC_URL}/.well-known/oauth-protected-resource/servers/desk/mcp");
    assert!(
        challenge.starts_with(&format!(
            "Bearer resource_metadata=\"{metadata}\", error=\"insufficient_scope\", scope=\"mcp:write\""
        )),
        "{challenge}"
    );
    assert!(rpc_error(&body).contains("needs mcp:write"), "{body}");
    for tool in ["look", "change"] {
        let (status, _, body) = call_tool(&app, "desk", &writer, tool, json!({})).await;
        assert_eq!(status, 200, "{tool}: {body}");
    }

    // A script may run with the read scope, but each of its tool calls is checked.
    let script = json!({"code": "const a = await tools.desk.look({}); \
        try { await tools.desk.change({}); return 'no'; } catch (e) { return a + ' / ' + e.code; }"});
    let (status, _, body) = call_tool(&app, "desk", &reader, "code_execution", script.clone()).await;
    assert_eq!(status, 200, "{body}");
    let value = &body["result"]["structuredContent"]["value"];
    assert_eq!(value, "looked / INSUFFICIENT_SCOPE", "{body}");

    // A batch (protocol 2025-03-26) carries the token to each of its messages: a script started
    // in one is checked the same way, and a direct call is refused.
    let batch = json!([
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "code_execution", "arguments": script}},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "change", "arguments": {}}},
    ]);
    let response = app
        .http
        .post(app.mcp_url("desk"))
        .bearer_auth(&reader)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-03-26")
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    let answers: Value = response.json().await.unwrap();
    let answer = |id: i64| answers.as_array().unwrap().iter().find(|a| a["id"] == id).unwrap().clone();
    assert_eq!(answer(7)["result"]["structuredContent"]["value"], "looked / INSUFFICIENT_SCOPE", "{answers}");
    assert!(rpc_error(&answer(8)).contains("needs mcp:write"), "{answers}");

    // The call log names the caller and its client.
    let (_, calls) = app.get("/admin/servers/desk/calls?tool=change").await;
    let logged = &calls["calls"][0];
    assert_eq!((logged["subject"].as_str(), logged["client_id"].as_str()), (Some("user-2"), Some("host-app")));
    let (_, calls) = app.get("/admin/servers/desk/calls?tool=code_execution").await;
    assert_eq!(calls["calls"][0]["subject"], "user-1", "{calls}");
    assert_eq!(calls["calls"][0]["children"][0]["subject"], "user-1", "{calls}");

    // A server's own scopes are needed for anything on its mount, and its metadata lists them.
    let (status, set) = put(&app, "/admin/servers/desk/auth", json!({"mode": "oauth", "scopes": ["billing"]})).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["auth"], json!({"mode": "oauth", "scopes": ["billing"], "source": "server"}));
    let (status, challenge, body) = list_tools(&app, "desk", Some(&format!("Bearer {writer}")), "").await;
    assert_eq!(status, 403, "{body}");
    assert!(challenge.contains("scope=\"mcp:read billing\""), "{challenge}");
    let billed = issuer.token_with(json!({"aud": resource("desk"), "scope": "mcp:write billing"}));
    assert_eq!(call_tool(&app, "desk", &billed, "change", json!({})).await.0, 200);
    let (_, metadata) = app.get("/.well-known/oauth-protected-resource/servers/desk/mcp").await;
    assert_eq!(metadata["scopes_supported"], json!(["mcp:read", "mcp:write", "billing"]));
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mcpbootd_oauth_refusals_total{reason=\"insufficient_scope\"} 5"), "{metrics}");
}

async fn put(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let response = app.http.put(app.url(path)).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Per-server modes: open, static token, OAuth (with scopes), or the daemon's default; setting
/// one replaces the other, and mistakes are refused with what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_chooses_open_static_token_or_oauth() {
    let issuer = Issuer::start().await;
    let app = spawn_behind(&issuer.issuer).await;
    app.register(json!({"id": "public", "auth": {"mode": "open"}, "tools": [tool("ok", "return 1;")]})).await;
    app.register(json!({"id": "default", "tools": [tool("ok", "return 1;")]})).await;
    app.register(json!({"id": "keyed", "access_token": "static-token-0123456789", "tools": [tool("ok", "return 1;")]}))
        .await;
    let mode = |view: &Value| (view["auth"]["mode"].as_str().map(str::to_string), view["auth"]["source"].clone());

    assert_eq!(list_tools(&app, "public", None, "").await.0, 200, "open, although [auth.oauth] required");
    assert_eq!(mode(&app.get("/admin/servers/public").await.1), (Some("open".into()), json!("server")));
    assert_eq!(list_tools(&app, "default", None, "").await.0, 401);
    assert_eq!(mode(&app.get("/admin/servers/default").await.1), (Some("oauth".into()), json!("default")));
    assert_eq!(mode(&app.get("/admin/servers/keyed").await.1), (Some("access_token".into()), json!("server")));
    // An open server has no OAuth metadata.
    assert_eq!(app.get("/.well-known/oauth-protected-resource/servers/public/mcp").await.0, 404);

    // OAuth replaces a static token (and says so); a token replaces the setting.
    let (status, set) = put(&app, "/admin/servers/keyed/auth", json!({"mode": "oauth"})).await;
    assert_eq!((status, set["access_token_removed"].as_bool()), (200, Some(true)), "{set}");
    assert_eq!(list_tools(&app, "keyed", Some("Bearer static-token-0123456789"), "").await.0, 401);
    let token = issuer.token(&resource("keyed"), 300);
    assert_eq!(list_tools(&app, "keyed", Some(&format!("Bearer {token}")), "").await.0, 200);
    let (status, set) =
        put(&app, "/admin/servers/keyed/access-token", json!({"access_token": "another-token-0123456789"})).await;
    assert_eq!((status, set["auth_setting_removed"].as_bool()), (200, Some(true)), "{set}");
    assert_eq!(mode(&app.get("/admin/servers/keyed").await.1), (Some("access_token".into()), json!("server")));
    assert_eq!(list_tools(&app, "keyed", Some("Bearer another-token-0123456789"), "").await.0, 200);

    // Open, then back to the default.
    assert_eq!(put(&app, "/admin/servers/default/auth", json!({"mode": "open"})).await.0, 200);
    assert_eq!(list_tools(&app, "default", None, "").await.0, 200);
    let (status, reset) = app.delete("/admin/servers/default/auth").await;
    assert_eq!((status, reset["auth"]["mode"].as_str()), (200, Some("oauth")), "{reset}");
    assert_eq!(list_tools(&app, "default", None, "").await.0, 401);

    // Mistakes: both a token and a setting, an unknown mode, a bad scope, scopes on an open mount.
    for (body, expected) in [
        (
            json!({"id": "both", "access_token": "static-token-0123456789", "auth": {"mode": "open"}, "tools": [tool("ok", "return 1;")]}),
            "either",
        ),
        (json!({"id": "odd", "auth": {"mode": "sso"}, "tools": [tool("ok", "return 1;")]}), "sso"),
        (
            json!({"id": "spaced", "auth": {"mode": "oauth", "scopes": ["a b"]}, "tools": [tool("ok", "return 1;")]}),
            "scope",
        ),
        (
            json!({"id": "opened", "auth": {"mode": "open", "scopes": ["a"]}, "tools": [tool("ok", "return 1;")]}),
            "scopes",
        ),
    ] {
        let (status, error) = app.post("/admin/servers", &body).await;
        assert!(status == 422 || status == 400, "{body}: {status} {error}");
        assert!(error_message(&error).contains(expected), "{body}: {error}");
        assert_eq!(app.get(&format!("/admin/servers/{}", body["id"].as_str().unwrap())).await.0, 404);
    }
    assert_eq!(put(&app, "/admin/servers/nope/auth", json!({"mode": "open"})).await.0, 404);
}

/// Without `[auth.oauth]` a server cannot be set to OAuth: the refusal says what to configure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_mode_needs_an_identity_provider() {
    let app = spawn_app().await;
    let body = json!({"id": "x", "auth": {"mode": "oauth"}, "tools": [tool("ok", "return 1;")]});
    let (status, error) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 422, "{error}");
    assert!(error_message(&error).contains("[auth.oauth] issuer"), "{error}");
    app.register(json!({"id": "y", "tools": [tool("ok", "return 1;")]})).await;
    let (status, error) = put(&app, "/admin/servers/y/auth", json!({"mode": "oauth"})).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(put(&app, "/admin/servers/y/auth", json!({"mode": "open"})).await.0, 200);
}

/// Opaque tokens are checked at the provider's introspection endpoint (RFC 7662), with the same
/// rules as JWTs; answers are reused for a while, so a busy host costs the provider little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_and_the_answers_cached() {
    let issuer = Issuer::start().await;
    let app = spawn_behind_with(
        &issuer.issuer,
        &[
            ("MCPBOOTD_AUTH__OAUTH__INTROSPECTION_CLIENT_ID", "rs"),
            ("MCPBOOTD_AUTH__OAUTH__INTROSPECTION_CLIENT_SECRET", "rs-secret"),
        ],
    )
    .await;
    app.register(json!({"id": "guarded", "tools": [tool("ok", "return 1;")]})).await;
    let exp = unix_now() + 300;
    let active = |aud: String| {
        json!({"active": true, "iss": issuer.issuer, "sub": "user-9", "client_id": "cli", "aud": [aud],
               "scope": "mcp:read", "exp": exp})
    };
    issuer.state.opaque.lock().unwrap().extend([
        ("opaque-good".to_string(), active(resource("guarded"))),
        ("opaque-elsewhere".to_string(), active(resource("other"))),
        ("opaque-revoked".to_string(), json!({"active": false})),
    ]);

    for _ in 0..3 {
        let (status, _, body) = call_tool(&app, "guarded", "opaque-good", "ok", json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(issuer.state.introspections.load(Ordering::SeqCst), 1, "answers are cached");
    let (_, calls) = app.get("/admin/servers/guarded/calls").await;
    assert_eq!(
        (calls["calls"][0]["subject"].as_str(), calls["calls"][0]["client_id"].as_str()),
        (Some("user-9"), Some("cli"))
    );

    for (token, reason) in
        [("opaque-elsewhere", "wrong audience"), ("opaque-revoked", "inactive"), ("made-up", "inactive")]
    {
        let (status, challenge, body) = list_tools(&app, "guarded", Some(&format!("Bearer {token}")), "").await;
        assert_eq!(status, 401, "{token}: {body}");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(rpc_error(&body).contains(reason), "{token}: {body}");
    }
}

/// `[auth.oauth] admin_scope`: the admin API takes the provider's tokens for `<public_url>/admin`
/// with that scope, next to the static admin token; a mount's token is not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_takes_oauth_tokens_with_the_admin_scope() {
    let issuer = Issuer::start().await;
    let app = spawn_behind_with(
        &issuer.issuer,
        &[
            ("MCPBOOTD_AUTH__OAUTH__ADMIN_SCOPE", "mcp:admin"),
            ("MCPBOOTD_ADMIN__TOKEN", "static-admin-token-0123456789"),
        ],
    )
    .await;
    let admin = format!("{PUBLIC_URL}/admin");
    let get = |token: String| {
        let request = app.http.get(app.url("/admin/servers")).bearer_auth(token);
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    assert_eq!(get("static-admin-token-0123456789".into()).await.0, 200);
    assert_eq!(get(issuer.token_with(json!({"aud": admin, "scope": "mcp:admin"}))).await.0, 200);
    for (token, expected) in [
        (issuer.token_with(json!({"aud": admin, "scope": "mcp:read"})), "scope \"mcp:admin\""),
        (issuer.token_with(json!({"aud": resource("x"), "scope": "mcp:admin"})), "wrong audience"),
        (issuer.token_with(json!({"aud": admin, "scope": "mcp:admin", "exp": unix_now() - 3600})), "expired"),
        ("not-a-token".to_string(), "malformed"),
    ] {
        let (status, body) = get(token).await;
        assert_eq!(status, 403, "{body}");
        assert!(error_message(&body).contains(expected), "{expected}: {body}");
    }
}

/// With OAuth on, a host probing the daemon for an authorization server is sent to the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_for_an_authorization_server_are_sent_to_the_provider() {
    let issuer = Issuer::start().await;
    let app = spawn_behind(&issuer.issuer).await;
    app.register(json!({"id": "keyed", "access_token": "static-token-0123456789", "tools": [tool("ok", "return 1;")]}))
        .await;
    for path in ["/register", "/.well-known/oauth-authorization-server", "/servers/x/mcp/token"] {
        let (status, body) = app.get(path).await;
        assert_eq!(status, 404, "{path}: {body}");
        let description = body["error_description"].as_str().unwrap_or_default();
        assert!(description.contains(&issuer.issuer), "{path}: {body}");
    }
    // A server that takes a static token is not behind the provider: its hosts learn how it is used.
    let (_, body) = app.get("/servers/keyed/mcp/register").await;
    let description = body["error_description"].as_str().unwrap_or_default();
    assert!(description.contains("static bearer token") && !description.contains(&issuer.issuer), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_over_their_quota_is_refused_with_the_retry_time_and_others_are_not() {
    let issuer = Issuer::start().await;
    let app = spawn_behind_with(&issuer.issuer, &[("MCPBOOTD_LIMITS__PER_CALLER_PER_MINUTE", "3")]).await;
    app.register(json!({"id": "shared", "tools": [tool("ok", "return 'done';")]})).await;
    let alice = issuer.token_with(json!({"aud": resource("shared"), "sub": "alice"}));
    let bob = issuer.token_with(json!({"aud": resource("shared"), "sub": "bob"}));

    // Alice's burst of three, then the door refuses her before any work, naming the limit and
    // when to retry; bob, on the same server, is not held up by her.
    for _ in 0..3 {
        let (status, _, body) = call_tool(&app, "shared", &alice, "ok", json!({})).await;
        assert_eq!((status, body["result"]["content"][0]["text"].as_str()), (200, Some("done")), "{body}");
    }
    let (status, _, body) = call_tool(&app, "shared", &alice, "ok", json!({})).await;
    assert_eq!(status, 200, "a JSON-RPC error in an HTTP 200, as for every MCP refusal after the door: {body}");
    let error = &body["error"];
    assert_eq!(error["data"]["code"], "rate_limited", "{body}");
    assert_eq!(error["data"]["limit"], "per_caller_per_minute", "{body}");
    let retry = error["data"]["retry_after_seconds"].as_u64().unwrap();
    assert!((1..=20).contains(&retry), "one call refills in 20 s: {body}");
    assert!(error["message"].as_str().unwrap().contains("per_caller_per_minute"), "{body}");
    for _ in 0..3 {
        let (status, _, body) = call_tool(&app, "shared", &bob, "ok", json!({})).await;
        assert_eq!((status, body["result"]["content"][0]["text"].as_str()), (200, Some("done")), "bob: {body}");
    }

    // The refusal ran nothing: the log has alice's three calls and bob's three only.
    let (_, calls) = app.get("/admin/servers/shared/calls").await;
    let subjects: Vec<&str> = calls["calls"].as_array().unwrap().iter().filter_map(|c| c["subject"].as_str()).collect();
    assert_eq!(subjects.iter().filter(|s| **s == "alice").count(), 3, "{calls}");
    assert_eq!(subjects.iter().filter(|s| **s == "bob").count(), 3, "{calls}");
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(r#"mcpbootd_quota_refusals_total{server="shared",limit="per_caller_per_minute"} 1"#),
        "{metrics}"
    );

    // The server's own limits replace the default key by key; the admin API shows both.
    let (status, view) =
        put(&app, "/admin/servers/shared/limits", json!({"per_caller_per_minute": 0, "per_server_per_minute": 1}))
            .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["effective"]["per_caller_per_minute"], 0, "{view}");
    assert_eq!(view["effective"]["per_server_per_minute"], 1, "{view}");
    assert_eq!(view["defaults"]["per_caller_per_minute"], 3, "{view}");
    let (status, shown) = app.get("/admin/servers/shared/limits").await;
    assert_eq!((status, &shown["limits"]), (200, &json!({"per_caller_per_minute": 0, "per_server_per_minute": 1})));
    let (status, _, body) = call_tool(&app, "shared", &alice, "ok", json!({})).await;
    assert_eq!((status, body["result"]["content"][0]["text"].as_str()), (200, Some("done")), "{body}");
    let (_, _, body) = call_tool(&app, "shared", &bob, "ok", json!({})).await;
    assert_eq!(body["error"]["data"]["limit"], "per_server_per_minute", "{body}");

    // The admin call route answers in HTTP: 429 with Retry-After.
    let response = app
        .http
        .post(app.url("/admin/servers/shared/tools/ok/call"))
        .json(&json!({"arguments": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");

    // Bad settings say what is wrong.
    let (status, body) =
        put(&app, "/admin/servers/shared/limits", json!({"upstream": {"api.example.com": {"per_minute": 5}}})).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("scheme://host:port"), "{body}");
    let (status, body) = put(&app, "/admin/servers/shared/limits", json!({"per_minute": 5})).await;
    assert_eq!(status, 422, "{body}");
}

/// The scope rule through `call_operation`: a discovery-mode server's unlisted operations are
/// judged by their own `readOnlyHint`, as listed tools are. A caller with only the read scope
/// may search, describe and call a read-only operation, and is refused a write one, directly and
/// from a script; the refusal names the scope to ask for and is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_operation_keeps_the_scope_rule_of_each_operation() {
    let issuer = Issuer::start().await;
    let app = spawn_behind_with(
        &issuer.issuer,
        &[
            ("MCPBOOTD_AUTH__OAUTH__READ_SCOPE", "mcp:read"),
            ("MCPBOOTD_AUTH__OAUTH__WRITE_SCOPE", "mcp:write"),
            ("MCPBOOTD_GENERATION__MAX_TOOLS", "4"),
            ("MCPBOOTD_CODE_MODE__ENABLED", "true"),
        ],
    )
    .await;
    register_items_api(&app, "items", json!({"code_mode": {"enabled": true}})).await;
    let reader = issuer.token_with(json!({"aud": resource("items"), "scope": "mcp:read"}));
    let writer = issuer.token_with(json!({"aud": resource("items"), "scope": "mcp:write", "sub": "user-2"}));

    let (status, _, body) = list_tools(&app, "items", Some(&format!("Bearer {reader}")), "").await;
    assert_eq!(status, 200, "{body}");
    let listed: Vec<&str> =
        body["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        !listed.contains(&"send_echo") && listed.contains(&"call_operation"),
        "send_echo is not listed: {listed:?}"
    );

    for (tool, arguments) in [
        ("search_operations", json!({"query": "echo"})),
        ("describe_operation", json!({"operation": "send_echo"})),
        ("call_operation", json!({"operation": "get_item", "arguments": {"id": 3}})),
    ] {
        let (status, _, body) = call_tool(&app, "items", &reader, tool, arguments).await;
        assert_eq!(status, 200, "{tool}: {body}");
        assert_ne!(body["result"]["isError"], true, "{tool} with the read scope: {body}");
    }
    let seen_before = app.upstream.seen.lock().unwrap().len();
    let write = json!({"operation": "send_echo", "arguments": {"body": {"text": "hi"}}});
    let (_, _, body) = call_tool(&app, "items", &reader, "call_operation", write.clone()).await;
    let refused = serde_json::to_string(&body).unwrap();
    assert!(refused.contains("needs mcp:write"), "a write operation needs the write scope: {body}");
    assert_eq!(app.upstream.seen.lock().unwrap().len(), seen_before, "the refused call reached nothing");

    let script = json!({"code": "const item = await tools.items.get_item({id: 4}); \
        try { await tools.items.send_echo({body: {text: 'hi'}}); return 'no'; } \
        catch (e) { return item.title + ' / ' + e.code; }"});
    let (status, _, body) = call_tool(&app, "items", &reader, "code_execution", script).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["structuredContent"]["value"], "Item 4 / INSUFFICIENT_SCOPE", "{body}");

    let (status, _, body) = call_tool(&app, "items", &writer, "call_operation", write).await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(body["result"]["isError"], true, "the write scope calls it: {body}");
    let (_, calls) = app.get("/admin/servers/items/calls?tool=send_echo").await;
    assert_eq!(calls["calls"][0]["subject"], "user-2", "{calls}");
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mcpbootd_oauth_refusals_total{reason=\"insufficient_scope\"} 2"), "{metrics}");
}
