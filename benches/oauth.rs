//! What checking an OAuth access token costs per MCP request, once the issuer's keys are cached,
//! next to the static access-token check it stands beside; then the throughput of pure tool calls
//! on a mount behind OAuth and on one with a static token, side by side in the same daemon.
//! `cargo bench --bench oauth` (`-- --quick` for shorter load rounds).
//!
//! The issuer is a loopback server publishing RFC 8414 metadata and a JWKS; tokens are ES256 (a
//! fresh P-256 key) and RS256 (the test key under tests/support/oauth).

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcpbootd::oauth::{Validator, ValidatorConfig};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::json;
use support::load;

const RSA_PRIVATE_PEM: &str = include_str!("../tests/support/oauth/rsa-test-key.pem");
const RESOURCE: &str = "https://mcp.example.com/servers/bench/mcp";
const ROUNDS: u32 = 20_000;
const PUBLIC_URL: &str = "https://mcp.example.com";
const STATIC_TOKEN: &str = "static-token-0123456789";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| anyhow::anyhow!("P-256 key"))?;
    let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| anyhow::anyhow!("P-256 key"))?;
    let point = ec.public_key().as_ref().to_vec();
    let der: String = RSA_PRIVATE_PEM.lines().filter(|line| !line.starts_with("-----")).collect();
    let rsa = RsaKeyPair::from_pkcs8(&STANDARD.decode(der)?).map_err(|_| anyhow::anyhow!("RSA test key"))?;
    let rsa_public = RsaPublicKeyComponents::<Vec<u8>>::from(rsa.public());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let issuer = format!("http://{}", listener.local_addr()?);
    let metadata = json!({
        "issuer": issuer, "jwks_uri": format!("{issuer}/jwks"),
        "jwt_access_token_signing_alg_values_supported": ["ES256", "RS256"],
    });
    let jwks = json!({"keys": [
        {"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "ec",
         "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])},
        {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "rsa",
         "n": URL_SAFE_NO_PAD.encode(&rsa_public.n), "e": URL_SAFE_NO_PAD.encode(&rsa_public.e)},
    ]});
    let app = axum::Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(move || async move { axum::Json(metadata) }),
        )
        .route("/jwks", axum::routing::get(move || async move { axum::Json(jwks) }));
    tokio::spawn(async move { axum::serve(listener, app).await });

    mcpbootd::install_crypto_provider();
    let validator = Validator::new(reqwest::Client::new(), ValidatorConfig::new(issuer.clone()));
    validator.prepare().await?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let claims = json!({"iss": issuer, "sub": "user-1", "aud": RESOURCE, "exp": now + 3600, "scope": "mcp:read"});
    let sign = |alg: Algorithm, kid: &str, key: &EncodingKey| {
        let mut header = Header::new(alg);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &claims, key)
    };
    let es256 = sign(Algorithm::ES256, "ec", &EncodingKey::from_ec_der(pkcs8.as_ref()))?;
    // A token for another audience (a mount of the daemon started below), same issuer and key.
    let es256_for = |audience: &str| -> anyhow::Result<String> {
        let mut claims = claims.clone();
        claims["aud"] = json!(audience);
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("ec".into());
        Ok(jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(pkcs8.as_ref()))?)
    };
    let rs256 = sign(Algorithm::RS256, "rsa", &EncodingKey::from_rsa_pem(RSA_PRIVATE_PEM.as_bytes())?)?;

    println!("mcpbootd OAuth token check, keys cached, {ROUNDS} checks each\n");
    // A host presents one token for many requests: the first check verifies the signature, the
    // next ones find the verdict (for this resource) in the validator's cache.
    for (name, alg, kid, key) in [
        ("ES256", Algorithm::ES256, "ec", EncodingKey::from_ec_der(pkcs8.as_ref())),
        ("RS256", Algorithm::RS256, "rsa", EncodingKey::from_rsa_pem(RSA_PRIVATE_PEM.as_bytes())?),
    ] {
        let fresh: Vec<String> = (0..ROUNDS / 10)
            .map(|n| {
                let mut header = Header::new(alg);
                header.kid = Some(kid.into());
                let mut claims = claims.clone();
                claims["jti"] = json!(n);
                jsonwebtoken::encode(&header, &claims, &key)
            })
            .collect::<Result<_, _>>()?;
        let started = Instant::now();
        for token in &fresh {
            black_box(validator.validate(black_box(token), RESOURCE).await.is_ok());
        }
        let micros = started.elapsed().as_secs_f64() * 1e6 / fresh.len() as f64;
        println!("{:<44} {micros:>9.1} µs", format!("{name} token, first check (signature)"));
    }
    for (name, token) in [("ES256", &es256), ("RS256", &rs256)] {
        validator.validate(token, RESOURCE).await.map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        let started = Instant::now();
        for _ in 0..ROUNDS {
            black_box(validator.validate(black_box(token), RESOURCE).await.is_ok());
        }
        let micros = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        println!("{:<44} {micros:>9.1} µs   target < 50 µs", format!("{name} token, checked before"));
    }
    let digest = mcpbootd::access_token::digest("static-token-0123456789");
    let header = "Bearer static-token-0123456789";
    let started = Instant::now();
    for _ in 0..ROUNDS {
        black_box(mcpbootd::access_token::verify(black_box(Some(header)), &digest));
    }
    let micros = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
    println!("{:<44} {micros:>9.1} µs", "static access token (sha256, constant time)");

    throughput(&issuer, &es256_for).await
}

/// Pure tool calls through the whole daemon, a mount with a static token against a mount behind
/// OAuth, in alternating rounds so the machine's noise hits both alike.
async fn throughput(issuer: &str, token_for: &dyn Fn(&str) -> anyhow::Result<String>) -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, length) = if quick { (2, Duration::from_secs(2)) } else { (4, Duration::from_secs(4)) };
    let clients = 8;
    let daemon = support::start_daemon(vec![
        ("MCPBOOTD_AUTH__OAUTH__ISSUER", issuer.to_string()),
        ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", PUBLIC_URL.to_string()),
    ])
    .await?;
    let address = daemon.address;
    let http = reqwest::Client::new();
    let pure = json!({"name": "pure", "description": "pure", "input_schema": {"type": "object"},
                      "handler": "return { sum: args.a + args.b };"});
    for registration in [
        json!({"id": "keyed", "access_token": STATIC_TOKEN, "tools": [pure]}),
        json!({"id": "signed", "auth": {"mode": "oauth"}, "tools": [pure]}),
    ] {
        let response = http.post(format!("http://{address}/admin/servers")).json(&registration).send().await?;
        anyhow::ensure!(response.status() == 201, "registration failed: {}", response.text().await?);
    }
    let oauth_token = token_for(&format!("{PUBLIC_URL}/servers/signed/mcp"))?;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "pure", "arguments": {"a": 1, "b": 2}}})
    .to_string();
    println!("\npure tool calls, {clients} clients, {rounds} alternating rounds of {} s each\n", length.as_secs());
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds * 2 {
        let (which, id, token) = match round % 2 {
            0 => (0, "keyed", STATIC_TOKEN.to_string()),
            _ => (1, "signed", oauth_token.clone()),
        };
        let url = format!("http://{address}/servers/{id}/mcp");
        let window = load::Window::after(Duration::from_millis(500), length);
        let tasks = (0..clients)
            .map(|_| {
                let (http, url, token, body) = (http.clone(), url.clone(), token.clone(), body.clone());
                tokio::spawn(load::client_loop(window, move || {
                    let request = http
                        .post(&url)
                        .bearer_auth(&token)
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-protocol-version", "2025-06-18")
                        .body(body.clone());
                    async move {
                        let response = request.send().await.map_err(|e| e.to_string())?;
                        let status = response.status();
                        let text = response.text().await.map_err(|e| e.to_string())?;
                        if status != 200 || !text.contains("\"sum\":3") {
                            return Err(format!("HTTP {status}: {}", text.chars().take(200).collect::<String>()));
                        }
                        Ok(())
                    }
                }))
            })
            .collect();
        let report = load::Report::collect(window, tasks).await?;
        anyhow::ensure!(report.failures().is_empty(), "{id}: failed calls: {:?}", report.failures());
        rates[which].push(report.rate());
    }
    let mean = |rates: &[f64]| rates.iter().sum::<f64>() / rates.len() as f64;
    let (keyed, signed) = (mean(&rates[0]), mean(&rates[1]));
    println!("{:<44} {keyed:>9.0} calls/s  (rounds: {:.0?})", "static access token", rates[0]);
    println!("{:<44} {signed:>9.0} calls/s  (rounds: {:.0?})", "OAuth (ES256 JWT)", rates[1]);
    println!("{:<44} {:>9.3}   target ≥ 0.95", "OAuth / static", signed / keyed);
    daemon.stop().await
}
