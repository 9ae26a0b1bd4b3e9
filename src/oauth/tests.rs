//! Against a fake authorization server on loopback that publishes metadata and a JWKS, with
//! tokens signed by test keys (a fresh P-256 key per test, and the committed RSA test key
//! under `tests/support/oauth/`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::{Value, json};

use super::discovery::{allowed_algorithms, metadata_urls};
use super::*;

const RSA_PRIVATE_PEM: &str = include_str!("../../tests/support/oauth/rsa-test-key.pem");
const RSA_PUBLIC_PEM: &str = include_str!("../../tests/support/oauth/rsa-test-key.pub.pem");
const RESOURCE: &str = "https://mcp.example/mcp/weather";
const OTHER_RESOURCE: &str = "https://mcp.example/mcp/billing";

#[derive(Clone, Copy)]
enum MetadataAt {
    Rfc8414,
    OpenIdOnly,
}

#[derive(Default)]
struct IssuerState {
    /// Path → document served there; anything else is a 404.
    documents: Mutex<HashMap<String, Value>>,
    jwks_requests: AtomicUsize,
    metadata_path: String,
    jwks_failing: AtomicBool,
}

/// An authorization server on 127.0.0.1 publishing metadata at one location and a JWKS at `/jwks`.
struct FakeIssuer {
    address: SocketAddr,
    issuer: String,
    state: Arc<IssuerState>,
}

impl FakeIssuer {
    async fn start(issuer_path: &str, at: MetadataAt, keys: &[&TestKey]) -> FakeIssuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let issuer = format!("http://{address}{issuer_path}");
        let trimmed = issuer_path.trim_end_matches('/');
        let metadata_path = match at {
            MetadataAt::Rfc8414 => format!("/.well-known/oauth-authorization-server{trimmed}"),
            MetadataAt::OpenIdOnly => format!("{trimmed}/.well-known/openid-configuration"),
        };
        let metadata = json!({
            "issuer": issuer,
            "jwks_uri": format!("http://{address}/jwks"),
            "introspection_endpoint": format!("http://{address}/introspect"),
            "jwt_access_token_signing_alg_values_supported": ["ES256", "RS256"],
            "scopes_supported": ["tools:read", "tools:call"],
        });
        let state = Arc::new(IssuerState { metadata_path: metadata_path.clone(), ..IssuerState::default() });
        state.documents.lock().unwrap().extend([(metadata_path, metadata), ("/jwks".to_string(), jwks(keys))]);
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let state = shared.clone();
            async move { answer(&state, request.uri().path()) }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeIssuer { address, issuer, state }
    }

    fn set_jwks(&self, keys: &[&TestKey]) {
        self.state.documents.lock().unwrap().insert("/jwks".into(), jwks(keys));
    }

    /// Overwrites top-level members of the metadata document.
    fn patch_metadata(&self, patch: Value) {
        let mut documents = self.state.documents.lock().unwrap();
        let metadata = documents.get_mut(&self.state.metadata_path).unwrap();
        for (name, value) in patch.as_object().unwrap() {
            metadata[name] = value.clone();
        }
    }

    fn jwks_requests(&self) -> usize {
        self.state.jwks_requests.load(Ordering::SeqCst)
    }

    fn validator(&self) -> Validator {
        Validator::new(http(), ValidatorConfig::new(&self.issuer))
    }

    fn claims(&self) -> Value {
        claims_for(&self.issuer)
    }
}

fn answer(state: &IssuerState, path: &str) -> Response {
    if path == "/jwks" {
        state.jwks_requests.fetch_add(1, Ordering::SeqCst);
        if state.jwks_failing.load(Ordering::SeqCst) {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    }
    match state.documents.lock().unwrap().get(path) {
        Some(document) => axum::Json(document.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn http() -> reqwest::Client {
    crate::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

struct TestKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl TestKey {
    /// A fresh P-256 key.
    fn ec(kid: &str) -> TestKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        // Uncompressed point: 0x04 || x || y.
        let point = pair.public_key().as_ref();
        assert_eq!(point.len(), 65);
        TestKey {
            kid: kid.into(),
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
        }
    }

    /// The committed RSA test key.
    fn rsa(kid: &str) -> TestKey {
        let body: String = RSA_PRIVATE_PEM.lines().filter(|line| !line.starts_with("-----")).collect();
        let pair = RsaKeyPair::from_pkcs8(&STANDARD.decode(body).unwrap()).unwrap();
        let public = RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
        TestKey {
            kid: kid.into(),
            alg: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_pem(RSA_PRIVATE_PEM.as_bytes()).unwrap(),
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": URL_SAFE_NO_PAD.encode(&public.n),
                "e": URL_SAFE_NO_PAD.encode(&public.e),
            }),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_as(Some(&self.kid), claims)
    }

    fn sign_as(&self, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

fn jwks(keys: &[&TestKey]) -> Value {
    json!({ "keys": keys.iter().map(|key| key.jwk.clone()).collect::<Vec<_>>() })
}

fn now() -> i64 {
    unix_now() as i64
}

fn claims_for(issuer: &str) -> Value {
    json!({
        "iss": issuer,
        "sub": "user-1",
        "aud": RESOURCE,
        "iat": now(),
        "exp": now() + 300,
        "scope": "tools:read tools:call",
        "client_id": "app-1",
    })
}

/// A token with a hand-made header and no signature check possible: `alg` as given.
fn unsigned_token(header: Value, claims: &Value, signature: &str) -> String {
    let encode = |value: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap());
    format!("{}.{}.{signature}", encode(&header), encode(claims))
}

fn reason(result: Result<Claims, Refusal>) -> &'static str {
    match result {
        Ok(claims) => panic!("token accepted: {claims:?}"),
        Err(refusal) => refusal.reason(),
    }
}

#[tokio::test]
async fn valid_es256_token_yields_claims() {
    let key = TestKey::ec("ec-1");
    // A path in the issuer exercises the RFC 8414 path-insertion form.
    let issuer = FakeIssuer::start("/tenant-a", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    let mut claims = issuer.claims();
    claims["aud"] = json!([OTHER_RESOURCE, RESOURCE]);
    let exp = claims["exp"].as_i64().unwrap();

    let got = validator.validate(&key.sign(&claims), RESOURCE).await.unwrap();
    assert_eq!(
        got,
        Claims {
            sub: "user-1".into(),
            client_id: Some("app-1".into()),
            scopes: ["tools:call".to_string(), "tools:read".to_string()].into(),
            expires_at: exp,
        }
    );
    let metadata = validator.metadata().unwrap();
    assert_eq!(metadata.issuer, issuer.issuer);
    assert!(metadata.metadata_url.ends_with("/.well-known/oauth-authorization-server/tenant-a"));
    assert_eq!(metadata.introspection_endpoint.as_deref(), Some(&*format!("http://{}/introspect", issuer.address)));
    assert_eq!(metadata.scopes_supported, Some(vec!["tools:read".into(), "tools:call".into()]));
    assert_eq!(metadata.algorithms, vec![Algorithm::ES256, Algorithm::RS256]);
    assert_eq!(issuer.jwks_requests(), 1);

    // The hot path does not go back to the issuer.
    validator.validate(&key.sign(&claims), RESOURCE).await.unwrap();
    assert_eq!(issuer.jwks_requests(), 1);
}

#[tokio::test]
async fn valid_rs256_token_yields_claims() {
    let key = TestKey::rsa("rsa-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&TestKey::ec("ec-1"), &key]).await;
    let mut claims = issuer.claims();
    claims.as_object_mut().unwrap().remove("scope");
    claims.as_object_mut().unwrap().remove("client_id");
    claims["scp"] = json!(["tools:read", "admin"]);
    claims["azp"] = json!("app-2");

    let got = issuer.validator().validate(&key.sign(&claims), RESOURCE).await.unwrap();
    assert_eq!(got.sub, "user-1");
    assert_eq!(got.client_id.as_deref(), Some("app-2"));
    assert_eq!(got.scopes, ["admin".to_string(), "tools:read".to_string()].into());

    // `scp` as a space separated string, and no scopes at all.
    claims["scp"] = json!("a b");
    let got = issuer.validator().validate(&key.sign(&claims), RESOURCE).await.unwrap();
    assert_eq!(got.scopes, ["a".to_string(), "b".to_string()].into());
    claims.as_object_mut().unwrap().remove("scp");
    let got = issuer.validator().validate(&key.sign(&claims), RESOURCE).await.unwrap();
    assert!(got.scopes.is_empty());
}

#[tokio::test]
async fn token_without_kid_uses_the_only_fitting_key() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key, &TestKey::rsa("rsa-1")]).await;
    let validator = issuer.validator();
    validator.validate(&key.sign_as(None, &issuer.claims()), RESOURCE).await.unwrap();

    // Two P-256 keys and no kid: ambiguous.
    let other = TestKey::ec("ec-2");
    issuer.set_jwks(&[&key, &other]);
    let validator = issuer.validator();
    let refusal = validator.validate(&key.sign_as(None, &issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "unknown_key", "{refusal}");
    assert!(refusal.message().contains("2 keys fit"), "{refusal}");
}

#[tokio::test]
async fn alg_none_is_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    for alg in ["none", "None", "NONE"] {
        let token = unsigned_token(json!({"alg": alg, "kid": "ec-1"}), &issuer.claims(), "");
        let refusal = validator.validate(&token, RESOURCE).await.unwrap_err();
        assert_eq!(refusal.reason(), "algorithm_not_allowed", "{refusal}");
        assert!(refusal.message().contains(alg), "{refusal}");
    }
    // Refused before the issuer was even asked.
    assert!(validator.metadata().is_none());
    assert_eq!(issuer.jwks_requests(), 0);
}

#[tokio::test]
async fn hs256_signed_with_the_rsa_public_key_is_refused() {
    let key = TestKey::rsa("rsa-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    // The classic confusion attack: the public key, which anyone can fetch, used as an HMAC secret.
    let forged = TestKey {
        kid: "rsa-1".into(),
        alg: Algorithm::HS256,
        encoding: EncodingKey::from_secret(RSA_PUBLIC_PEM.as_bytes()),
        jwk: Value::Null,
    };
    let refusal = validator.validate(&forged.sign(&issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "algorithm_not_allowed", "{refusal}");
    assert_eq!(issuer.jwks_requests(), 0);

    // Still refused once the issuer's keys are loaded.
    validator.validate(&key.sign(&issuer.claims()), RESOURCE).await.unwrap();
    assert_eq!(reason(validator.validate(&forged.sign(&issuer.claims()), RESOURCE).await), "algorithm_not_allowed");
}

#[tokio::test]
async fn metadata_advertising_none_and_hs256_is_ignored() {
    let ec = TestKey::ec("ec-1");
    let rsa = TestKey::rsa("rsa-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&ec, &rsa]).await;
    issuer.patch_metadata(json!({
        "jwt_access_token_signing_alg_values_supported": ["none", "HS256", "ES256", "ES512"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }));
    let validator = issuer.validator();
    assert_eq!(validator.prepare().await.unwrap().algorithms, vec![Algorithm::ES256]);
    validator.validate(&ec.sign(&issuer.claims()), RESOURCE).await.unwrap();
    // RS256 is only in the ID token list, which the access token list overrides.
    let refusal = validator.validate(&rsa.sign(&issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "algorithm_not_allowed", "{refusal}");
    let hs =
        TestKey { kid: "x".into(), alg: Algorithm::HS256, encoding: EncodingKey::from_secret(b"s"), jwk: Value::Null };
    assert_eq!(reason(validator.validate(&hs.sign(&issuer.claims()), RESOURCE).await), "algorithm_not_allowed");
}

#[test]
fn allowed_algorithm_defaults() {
    let names = |list: &[&str]| list.iter().map(|name| name.to_string()).collect::<Vec<_>>();
    assert_eq!(allowed_algorithms(None), vec![Algorithm::RS256]);
    assert_eq!(allowed_algorithms(Some(&names(&["none", "HS256", "HS512"]))), vec![Algorithm::RS256]);
    assert_eq!(
        allowed_algorithms(Some(&names(&["PS256", "EdDSA", "PS256", "ES384"]))),
        vec![Algorithm::PS256, Algorithm::EdDSA, Algorithm::ES384]
    );
}

#[tokio::test]
async fn id_token_algorithms_are_used_when_no_access_token_list() {
    let rsa = TestKey::rsa("rsa-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&rsa]).await;
    issuer.patch_metadata(json!({
        "jwt_access_token_signing_alg_values_supported": null,
        "id_token_signing_alg_values_supported": ["PS256", "HS256"],
    }));
    let validator = issuer.validator();
    assert_eq!(validator.prepare().await.unwrap().algorithms, vec![Algorithm::PS256]);
    assert_eq!(reason(validator.validate(&rsa.sign(&issuer.claims()), RESOURCE).await), "algorithm_not_allowed");
}

#[tokio::test]
async fn wrong_issuer_is_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    for iss in [json!("https://evil.example"), json!(format!("{}/", issuer.issuer)), json!(["https://evil.example"])] {
        let mut claims = issuer.claims();
        claims["iss"] = iss;
        let refusal = validator.validate(&key.sign(&claims), RESOURCE).await.unwrap_err();
        assert_eq!(refusal.reason(), "wrong_issuer", "{refusal}");
    }
    let mut claims = issuer.claims();
    claims.as_object_mut().unwrap().remove("iss");
    assert_eq!(reason(validator.validate(&key.sign(&claims), RESOURCE).await), "wrong_issuer");
}

#[tokio::test]
async fn audience_of_another_mount_is_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    let mut claims = issuer.claims();
    claims["aud"] = json!(OTHER_RESOURCE);
    let refusal = validator.validate(&key.sign(&claims), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "wrong_audience", "{refusal}");
    assert!(refusal.message().contains(OTHER_RESOURCE) && refusal.message().contains(RESOURCE), "{refusal}");

    // Exact strings: no trailing-slash or prefix leniency.
    for aud in [json!([OTHER_RESOURCE]), json!(format!("{RESOURCE}/")), json!("https://mcp.example/mcp")] {
        claims["aud"] = aud;
        assert_eq!(reason(validator.validate(&key.sign(&claims), RESOURCE).await), "wrong_audience");
    }
    claims.as_object_mut().unwrap().remove("aud");
    assert_eq!(reason(validator.validate(&key.sign(&claims), RESOURCE).await), "wrong_audience");
}

#[tokio::test]
async fn expired_token_is_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    let mut claims = issuer.claims();
    claims["exp"] = json!(now() - 120);
    let refusal = validator.validate(&key.sign(&claims), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "expired", "{refusal}");

    // Within the leeway.
    claims["exp"] = json!(now() - 20);
    validator.validate(&key.sign(&claims), RESOURCE).await.unwrap();

    // A smaller configured leeway.
    let mut config = ValidatorConfig::new(&issuer.issuer);
    config.leeway = Duration::from_secs(5);
    let strict = Validator::new(http(), config);
    assert_eq!(reason(strict.validate(&key.sign(&claims), RESOURCE).await), "expired");

    // `exp` is required.
    claims.as_object_mut().unwrap().remove("exp");
    assert_eq!(reason(validator.validate(&key.sign(&claims), RESOURCE).await), "malformed");
}

#[tokio::test]
async fn token_not_yet_valid_is_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    let mut claims = issuer.claims();
    claims["nbf"] = json!(now() + 600);
    let refusal = validator.validate(&key.sign(&claims), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "not_yet_valid", "{refusal}");
    claims["nbf"] = json!(now() + 20);
    validator.validate(&key.sign(&claims), RESOURCE).await.unwrap();
}

#[tokio::test]
async fn bad_signatures_are_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    // Another key claiming to be ec-1.
    let impostor = TestKey::ec("ec-1");
    assert_eq!(reason(validator.validate(&impostor.sign(&issuer.claims()), RESOURCE).await), "bad_signature");

    // A genuine token with its payload swapped.
    let token = key.sign(&issuer.claims());
    let mut claims = issuer.claims();
    claims["sub"] = json!("admin");
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
    let parts: Vec<&str> = token.split('.').collect();
    let tampered = format!("{}.{payload}.{}", parts[0], parts[2]);
    assert_eq!(reason(validator.validate(&tampered, RESOURCE).await), "bad_signature");
}

#[tokio::test]
async fn malformed_tokens_are_refused() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    let claims = issuer.claims();
    for token in [
        "".to_string(),
        "not-a-jwt".to_string(),
        "a.b.c.d.e".to_string(),
        "!!!.e30.sig".to_string(),
        unsigned_token(json!({"kid": "ec-1"}), &claims, "sig"),
        unsigned_token(json!({"alg": "ES256", "kid": "ec-1", "crit": ["exp"]}), &claims, "sig"),
        "x".repeat(MAX_TOKEN_BYTES + 1),
    ] {
        let refusal = validator.validate(&token, RESOURCE).await.unwrap_err();
        assert_eq!(refusal.reason(), "malformed", "{token:.40}: {refusal}");
    }
    let mut claims = issuer.claims();
    claims.as_object_mut().unwrap().remove("sub");
    assert_eq!(reason(validator.validate(&key.sign(&claims), RESOURCE).await), "malformed");
}

#[tokio::test]
async fn unknown_kid_refetches_once_then_rate_limits() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    validator.prepare().await.unwrap();
    assert_eq!(issuer.jwks_requests(), 1);

    let stranger = TestKey::ec("ec-unknown");
    let refusal = validator.validate(&stranger.sign(&issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "unknown_key", "{refusal}");
    assert!(refusal.message().contains("ec-unknown"), "{refusal}");
    assert_eq!(issuer.jwks_requests(), 2);

    // Another unknown kid within the window: refused without asking the issuer.
    let another = TestKey::ec("ec-unknown-2");
    let refusal = validator.validate(&another.sign(&issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "unknown_key", "{refusal}");
    assert!(refusal.message().contains("not refetched"), "{refusal}");
    assert_eq!(issuer.jwks_requests(), 2);

    // Known keys keep working meanwhile.
    validator.validate(&key.sign(&issuer.claims()), RESOURCE).await.unwrap();
    assert_eq!(issuer.jwks_requests(), 2);
}

#[tokio::test]
async fn keys_not_for_signing_or_of_the_wrong_type_are_skipped() {
    let good = TestKey::ec("ec-good");
    let encryption = TestKey::ec("ec-enc");
    let mut encryption_jwk = encryption.jwk.clone();
    encryption_jwk["use"] = json!("enc");
    let wrap_only = TestKey::ec("ec-wrap");
    let mut wrap_jwk = wrap_only.jwk.clone();
    wrap_jwk.as_object_mut().unwrap().remove("use");
    wrap_jwk["key_ops"] = json!(["wrapKey"]);
    let rsa = TestKey::rsa("shared-kid");
    let ec_with_rsa_kid = TestKey::ec("shared-kid");

    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[]).await;
    let document = json!({ "keys": [
        encryption_jwk,
        wrap_jwk,
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AA", "y": "AA"},
        {"kty": "RSA", "kid": "no-modulus", "e": "AQAB"},
        {"kty": "RSA", "kid": "oaep", "alg": "RSA-OAEP", "n": rsa.jwk["n"], "e": "AQAB"},
        "not even an object",
        rsa.jwk.clone(),
        good.jwk.clone(),
    ]});
    issuer.state.documents.lock().unwrap().insert("/jwks".into(), document);
    let mut config = ValidatorConfig::new(&issuer.issuer);
    config.key_refetch_interval = Duration::ZERO;
    let validator = Validator::new(http(), config);

    validator.validate(&good.sign(&issuer.claims()), RESOURCE).await.unwrap();
    validator.validate(&rsa.sign(&issuer.claims()), RESOURCE).await.unwrap();
    for refused in [&encryption, &wrap_only, &ec_with_rsa_kid] {
        let refusal = validator.validate(&refused.sign(&issuer.claims()), RESOURCE).await.unwrap_err();
        assert_eq!(refusal.reason(), "unknown_key", "{}: {refusal}", refused.kid);
    }
}

#[tokio::test]
async fn rotated_keys_are_picked_up_after_refetch() {
    let old = TestKey::ec("2024-key");
    let new = TestKey::rsa("2025-key");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&old]).await;
    let mut config = ValidatorConfig::new(&issuer.issuer);
    config.key_refetch_interval = Duration::ZERO;
    let validator = Validator::new(http(), config);
    validator.validate(&old.sign(&issuer.claims()), RESOURCE).await.unwrap();
    assert_eq!(issuer.jwks_requests(), 1);

    issuer.set_jwks(&[&new]);
    validator.validate(&new.sign(&issuer.claims()), RESOURCE).await.unwrap();
    assert_eq!(issuer.jwks_requests(), 2);
    validator.validate(&new.sign(&issuer.claims()), RESOURCE).await.unwrap();
    assert_eq!(issuer.jwks_requests(), 2);

    // The refetched set replaced the old one: the retired key no longer verifies.
    assert_eq!(reason(validator.validate(&old.sign(&issuer.claims()), RESOURCE).await), "unknown_key");
}

#[tokio::test]
async fn issuer_down_is_issuer_unavailable() {
    let address = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let key = TestKey::ec("ec-1");
    let issuer = format!("http://{address}");
    let validator = Validator::new(http(), ValidatorConfig::new(&issuer));
    let refusal = validator.validate(&key.sign(&claims_for(&issuer)), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "issuer_unavailable", "{refusal}");
    assert!(refusal.message().contains(&format!("{issuer}/.well-known/oauth-authorization-server")), "{refusal}");
    assert!(refusal.message().contains(&format!("{issuer}/.well-known/openid-configuration")), "{refusal}");
    // Within the retry interval the last failure is repeated rather than refetched.
    assert_eq!(reason(validator.validate(&key.sign(&claims_for(&issuer)), RESOURCE).await), "issuer_unavailable");
    assert!(validator.prepare().await.is_err());
}

#[tokio::test]
async fn jwks_down_during_refetch_is_issuer_unavailable() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    validator.prepare().await.unwrap();
    issuer.state.jwks_failing.store(true, Ordering::SeqCst);
    let refusal = validator.validate(&TestKey::ec("ec-2").sign(&issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "issuer_unavailable", "{refusal}");
    assert!(refusal.message().contains("503"), "{refusal}");
    // Cached keys keep working.
    validator.validate(&key.sign(&issuer.claims()), RESOURCE).await.unwrap();
}

#[tokio::test]
async fn openid_only_issuer_is_discovered() {
    let key = TestKey::rsa("rsa-1");
    let issuer = FakeIssuer::start("/realms/test", MetadataAt::OpenIdOnly, &[&key]).await;
    let metadata = discover(&http(), &issuer.issuer).await.unwrap();
    assert_eq!(metadata.metadata_url, format!("{}/.well-known/openid-configuration", issuer.issuer));
    assert_eq!(metadata.jwks_uri, format!("http://{}/jwks", issuer.address));
    issuer.validator().validate(&key.sign(&issuer.claims()), RESOURCE).await.unwrap();
}

#[tokio::test]
async fn issuer_mismatch_is_refused_with_a_clear_message() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let advertised = format!("{}/", issuer.issuer);
    issuer.patch_metadata(json!({ "issuer": advertised }));

    let error = discover(&http(), &issuer.issuer).await.unwrap_err();
    assert!(matches!(error, OAuthError::IssuerMismatch { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("{advertised:?}")) && message.contains(&format!("{:?}", issuer.issuer)),
        "{message}"
    );

    let refusal = issuer.validator().validate(&key.sign(&issuer.claims()), RESOURCE).await.unwrap_err();
    assert_eq!(refusal.reason(), "issuer_unavailable", "{refusal}");
    assert!(refusal.message().contains("issuer mismatch"), "{refusal}");
    assert_eq!(issuer.jwks_requests(), 0);
}

#[tokio::test]
async fn metadata_without_jwks_uri_or_insecure_jwks_uri_is_refused() {
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[]).await;
    issuer.patch_metadata(json!({ "jwks_uri": null }));
    let error = discover(&http(), &issuer.issuer).await.unwrap_err().to_string();
    assert!(error.contains("no jwks_uri"), "{error}");
    issuer.patch_metadata(json!({ "jwks_uri": "http://keys.example/jwks" }));
    let error = discover(&http(), &issuer.issuer).await.unwrap_err().to_string();
    assert!(error.contains("only accepted for loopback"), "{error}");
}

#[test]
fn metadata_locations() {
    let urls = |issuer: &str| metadata_urls(issuer).unwrap();
    assert_eq!(
        urls("https://auth.example"),
        [
            "https://auth.example/.well-known/oauth-authorization-server".to_string(),
            "https://auth.example/.well-known/openid-configuration".to_string(),
        ]
    );
    assert_eq!(urls("https://auth.example/")[0], "https://auth.example/.well-known/oauth-authorization-server");
    assert_eq!(
        urls("https://auth.example:8443/tenant/a/"),
        [
            "https://auth.example:8443/.well-known/oauth-authorization-server/tenant/a".to_string(),
            "https://auth.example:8443/tenant/a/.well-known/openid-configuration".to_string(),
        ]
    );
    assert!(metadata_urls("http://localhost:9000").is_ok());
    for bad in
        ["http://auth.example", "ftp://auth.example", "https://auth.example?x=1", "https://u@auth.example", "auth"]
    {
        assert!(matches!(metadata_urls(bad), Err(OAuthError::InvalidIssuer { .. })), "{bad}");
    }
}

/// Operators read these reasons in start-up and refusal messages, so they are pinned word for word.
#[test]
fn insecure_urls_are_refused_as_before() {
    let refusal = |url: &str| super::discovery::check_secure(&url::Url::parse(url).unwrap()).unwrap_err().to_string();
    assert_eq!(refusal("http://auth.example/"), "plain http is only accepted for loopback hosts; use https");
    assert_eq!(refusal("ftp://auth.example/"), r#"unsupported scheme "ftp"; use https"#);
    assert_eq!(refusal("data:text/plain,x"), "the URL has no host");
    for fine in ["https://auth.example/", "http://127.0.0.1:9/", "http://[::1]/", "http://LOCALHOST/"] {
        assert!(super::discovery::check_secure(&url::Url::parse(fine).unwrap()).is_ok(), "{fine}");
    }
}

#[test]
fn refusal_reasons_are_the_listed_labels() {
    let all = [
        Refusal::Malformed(String::new()),
        Refusal::UnknownKey(String::new()),
        Refusal::BadSignature(String::new()),
        Refusal::AlgorithmNotAllowed(String::new()),
        Refusal::WrongIssuer(String::new()),
        Refusal::WrongAudience(String::new()),
        Refusal::Expired(String::new()),
        Refusal::Inactive(String::new()),
        Refusal::NotYetValid(String::new()),
        Refusal::IssuerUnavailable("why".into()),
    ];
    assert_eq!(all.iter().map(Refusal::reason).collect::<Vec<_>>(), Refusal::REASONS);
    assert_eq!(all[9].to_string(), "issuer_unavailable: why");
}

#[tokio::test]
async fn a_verified_token_is_reused_for_its_resource_only() {
    let key = TestKey::ec("ec-1");
    let issuer = FakeIssuer::start("", MetadataAt::Rfc8414, &[&key]).await;
    let validator = issuer.validator();
    let token = key.sign(&issuer.claims());
    let first = validator.validate(&token, RESOURCE).await.unwrap();
    // Withdrawn keys still refetch on demand; the verdict on a token already checked is kept
    // for VERIFIED_FOR, so the second check needs neither the key nor the signature.
    issuer.set_jwks(&[]);
    assert_eq!(validator.validate(&token, RESOURCE).await.unwrap(), first);
    // The same token for another resource is checked on its own, and refused.
    assert_eq!(reason(validator.validate(&token, OTHER_RESOURCE).await), "wrong_audience");
    // An expired token is never kept: the next check refuses it again.
    let mut claims = issuer.claims();
    claims["exp"] = json!(now() - 3600);
    let expired = key.sign(&claims);
    assert_eq!(reason(validator.validate(&expired, RESOURCE).await), "expired");
}
