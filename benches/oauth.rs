//! What checking an OAuth access token costs per MCP request, once the issuer's keys are cached,
//! next to the static access-token check it stands beside. `cargo bench --bench oauth`.
//!
//! The issuer is a loopback server publishing RFC 8414 metadata and a JWKS; tokens are ES256 (a
//! fresh P-256 key) and RS256 (the test key under tests/support/oauth).

use std::hint::black_box;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcpbootd::oauth::{Validator, ValidatorConfig};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::json;

const RSA_PRIVATE_PEM: &str = include_str!("../tests/support/oauth/rsa-test-key.pem");
const RESOURCE: &str = "https://mcp.example.com/servers/bench/mcp";
const ROUNDS: u32 = 20_000;

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
    let rs256 = sign(Algorithm::RS256, "rsa", &EncodingKey::from_rsa_pem(RSA_PRIVATE_PEM.as_bytes())?)?;

    println!("mcpbootd OAuth token check, keys cached, {ROUNDS} checks each\n");
    let mut per_check = Vec::new();
    for (name, token) in [("ES256", &es256), ("RS256", &rs256)] {
        validator.validate(token, RESOURCE).await.map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        let started = Instant::now();
        for _ in 0..ROUNDS {
            black_box(validator.validate(black_box(token), RESOURCE).await.is_ok());
        }
        let micros = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        per_check.push(micros);
        println!("{:<44} {micros:>9.1} µs   target < 50 µs", format!("{name} access token"));
    }
    let digest = mcpbootd::access_token::digest("static-token-0123456789");
    let header = "Bearer static-token-0123456789";
    let started = Instant::now();
    for _ in 0..ROUNDS {
        black_box(mcpbootd::access_token::verify(black_box(Some(header)), &digest));
    }
    let micros = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
    println!("{:<44} {micros:>9.1} µs", "static access token (sha256, constant time)");
    Ok(())
}
