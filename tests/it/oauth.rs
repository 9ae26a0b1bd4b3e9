//! Mounts behind OAuth (`[auth.oauth]`): a fake authorization server on loopback publishes RFC 8414
//! metadata and a JWKS, and tokens signed with its key are presented to a real daemon.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use crate::helpers::*;

const PUBLIC_URL: &str = "https://mcp.example.com";

/// An issuer on 127.0.0.1 with one P-256 key.
struct Issuer {
    issuer: String,
    key: EncodingKey,
}

impl Issuer {
    async fn start() -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        let issuer = format!("http://{address}");
        let metadata = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks"),
            "jwt_access_token_signing_alg_values_supported": ["ES256"],
        });
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "k1",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        }]});
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route("/jwks", axum::routing::get(move || async move { axum::Json(jwks) }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer { issuer, key: EncodingKey::from_ec_der(pkcs8.as_ref()) }
    }

    /// A token for `audience`, valid for `lifetime` seconds from now (negative: expired).
    fn token(&self, audience: &str, lifetime: i64) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let claims = json!({
            "iss": self.issuer, "sub": "user-1", "aud": audience, "client_id": "host-app",
            "iat": now, "exp": now + lifetime, "scope": "mcp:read",
        });
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(&header, &claims, &self.key).unwrap()
    }
}

async fn spawn_behind(issuer: &str) -> TestApp {
    spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_AUTH__OAUTH__ISSUER".into(), issuer.into()),
            ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL".into(), PUBLIC_URL.into()),
            ("MCPBOOTD_AUTH__OAUTH__REQUIRED".into(), "true".into()),
        ],
        ..AppOptions::default()
    })
    .await
}

/// `tools/list` on a mount with this `Authorization` value (and optional query): status, the
/// `WWW-Authenticate` header, the body.
async fn list_tools(app: &TestApp, id: &str, authorization: Option<&str>, query: &str) -> (u16, String, Value) {
    let mut request = app
        .http
        .post(format!("{}{query}", app.mcp_url(id)))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string());
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
