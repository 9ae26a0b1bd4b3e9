//! The resource-server half of MCP authorization (OAuth 2.1, RFC 9728 / RFC 8707): checking the
//! bearer tokens an authorization server issued for one of our mounts.
//!
//! Tokens are JWTs verified locally against the issuer's published keys, so the hot path needs
//! no network round trip:
//!
//! - [`discover`] reads the issuer's metadata (RFC 8414, falling back to OpenID discovery);
//! - [`Keys`] caches its JWKS and refetches it, rate-limited, when a token names a key it lacks;
//! - [`Validator`] ties both to one configured issuer and answers "may this token be used on
//!   this resource?" with [`Claims`] or a [`Refusal`] whose reason is a metric label.
//!
//! Only asymmetric algorithms are ever accepted: with `none` there is no signature, and an HS*
//! "signature" made with a public key (which anyone can fetch) would verify against it.

mod cache;
mod claims;
mod discovery;
mod fetch;
mod introspection;
mod keys;
mod scopes;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;

pub use claims::{Claims, Refusal};
use claims::{StringOrList, quoted, seconds, unix_now};
pub use discovery::{IssuerMetadata, discover};
pub use fetch::OAuthError;
pub use introspection::IntrospectionClient;
pub use keys::Keys;
use keys::is_asymmetric;
pub use scopes::{Admission, Grant, MissingScope, ScopeRule, check_scope};

/// Clock skew tolerated on `exp` and `nbf`.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// Minimum time between two JWKS refetches prompted by unknown `kid`s: a stream of tokens with
/// made-up key ids must not turn into a stream of requests to the issuer.
pub const DEFAULT_KEY_REFETCH_INTERVAL: Duration = Duration::from_secs(30);
/// Minimum time between two discovery attempts prompted by requests while the issuer is
/// unreachable: short, because every request is refused until discovery succeeds.
pub const DEFAULT_DISCOVERY_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// How long a verified JWT is taken on trust for the same resource (never past its `exp`): a key
/// the issuer withdraws stops working for tokens already seen within this time.
pub const VERIFIED_FOR: Duration = Duration::from_secs(60);

/// Real access tokens are a few KiB at most; bigger ones are refused before any decoding.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// How a [`Validator`] checks tokens. Start from [`ValidatorConfig::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorConfig {
    /// The authorization server, exactly as it spells itself in metadata and in `iss`.
    pub issuer: String,
    /// Clock skew tolerated on `exp` and `nbf` (whole seconds).
    pub leeway: Duration,
    /// See [`DEFAULT_KEY_REFETCH_INTERVAL`].
    pub key_refetch_interval: Duration,
    /// See [`DEFAULT_DISCOVERY_RETRY_INTERVAL`].
    pub discovery_retry_interval: Duration,
    /// Opaque tokens (anything that is not a JWT) are checked at the issuer's introspection
    /// endpoint with these credentials; without them they are refused as malformed.
    pub introspection: Option<IntrospectionClient>,
}

impl ValidatorConfig {
    pub fn new(issuer: impl Into<String>) -> ValidatorConfig {
        ValidatorConfig {
            issuer: issuer.into(),
            leeway: DEFAULT_LEEWAY,
            key_refetch_interval: DEFAULT_KEY_REFETCH_INTERVAL,
            discovery_retry_interval: DEFAULT_DISCOVERY_RETRY_INTERVAL,
            introspection: None,
        }
    }
}

/// Checks access tokens from one issuer. Cheap to clone (shared state).
///
/// Discovery is lazy: a mount can start while its authorization server is down, and requests
/// are refused with `issuer_unavailable` until the issuer answers. [`Validator::prepare`] runs
/// discovery up front, e.g. to log a misconfiguration at startup.
#[derive(Clone)]
pub struct Validator {
    inner: std::sync::Arc<ValidatorInner>,
}

struct ValidatorInner {
    http: reqwest::Client,
    config: ValidatorConfig,
    ready: OnceCell<Ready>,
    /// Held while discovering, so concurrent first requests share one attempt; remembers the
    /// last failure so that, during an outage, requests are refused without a fetch each.
    last_failure: Mutex<Option<(Instant, OAuthError)>>,
    introspected: introspection::Caches,
    /// Tokens already verified for a resource, kept until [`VERIFIED_FOR`] or their `exp`.
    verified: cache::TokenCache<Claims>,
}

struct Ready {
    metadata: IssuerMetadata,
    keys: Keys,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator")
            .field("config", &self.inner.config)
            .field("discovered", &self.inner.ready.initialized())
            .finish()
    }
}

impl Validator {
    pub fn new(http: reqwest::Client, config: ValidatorConfig) -> Validator {
        Validator {
            inner: std::sync::Arc::new(ValidatorInner {
                http,
                config,
                ready: OnceCell::new(),
                last_failure: Mutex::new(None),
                introspected: introspection::Caches::default(),
                verified: cache::TokenCache::default(),
            }),
        }
    }

    pub fn issuer(&self) -> &str {
        &self.inner.config.issuer
    }

    /// The issuer's metadata, once discovered (e.g. `scopes_supported` for RFC 9728 metadata).
    pub fn metadata(&self) -> Option<&IssuerMetadata> {
        self.inner.ready.get().map(|ready| &ready.metadata)
    }

    /// Discovers the issuer and fetches its keys now, if not done yet, ignoring the retry
    /// interval.
    pub async fn prepare(&self) -> Result<&IssuerMetadata, OAuthError> {
        self.ready(true).await.map(|ready| &ready.metadata)
    }

    async fn ready(&self, force: bool) -> Result<&Ready, OAuthError> {
        if let Some(ready) = self.inner.ready.get() {
            return Ok(ready);
        }
        let mut last_failure = self.inner.last_failure.lock().await;
        if let Some(ready) = self.inner.ready.get() {
            return Ok(ready);
        }
        if !force
            && let Some((at, error)) = &*last_failure
            && at.elapsed() < self.inner.config.discovery_retry_interval
        {
            return Err(error.clone());
        }
        let config = &self.inner.config;
        let attempt = async {
            let metadata = discover(&self.inner.http, &config.issuer).await?;
            let keys = Keys::fetch(self.inner.http.clone(), &metadata.jwks_uri, config.key_refetch_interval).await?;
            Ok::<_, OAuthError>(Ready { metadata, keys })
        };
        match self.inner.ready.get_or_try_init(|| attempt).await {
            Ok(ready) => {
                *last_failure = None;
                tracing::debug!(issuer = %config.issuer, algorithms = ?ready.metadata.algorithms, "OAuth issuer discovered");
                Ok(ready)
            }
            Err(error) => {
                tracing::debug!(issuer = %config.issuer, %error, "OAuth issuer unavailable");
                *last_failure = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// Whether `token` was issued by our issuer for `resource` (the mount's canonical URL,
    /// RFC 8707), is currently valid, and is signed by one of the issuer's keys.
    ///
    /// The header's algorithm is checked before any key lookup, so `none` and HS* tokens never
    /// reach the key cache or the network.
    pub async fn validate(&self, token: &str, resource: &str) -> Result<Claims, Refusal> {
        if let Some(client) = &self.inner.config.introspection
            && token.split('.').count() != 3
        {
            return self.introspect(client, token, resource).await;
        }
        let key = cache::TokenCache::<Claims>::key(token, resource);
        if let Some(claims) = self.inner.verified.get(&key) {
            return Ok(claims);
        }
        let claims = self.verify(token, resource).await?;
        self.inner.verified.put(key, VERIFIED_FOR, Some(claims.expires_at), claims.clone());
        Ok(claims)
    }

    /// Whether `token` is an ID token our issuer signed for the client `client_id` (the connect
    /// pages' sign-in): the same checks as an access token's, with the client as the audience.
    pub async fn validate_id_token(&self, token: &str, client_id: &str) -> Result<Claims, Refusal> {
        self.verify(token, client_id).await
    }

    /// The full check of a JWT: header, issuer, key, signature, claims.
    async fn verify(&self, token: &str, resource: &str) -> Result<Claims, Refusal> {
        let header = parse_header(token)?;
        let ready = self.ready(false).await.map_err(|error| {
            Refusal::IssuerUnavailable(format!("issuer {:?} is unavailable: {error}", self.issuer()))
        })?;
        if !ready.metadata.algorithms.contains(&header.alg) {
            return Err(Refusal::AlgorithmNotAllowed(format!(
                "algorithm {:?} is not among the issuer's {:?}",
                header.alg, ready.metadata.algorithms
            )));
        }
        let peek = Peek::of(token);
        // An unverified look at `iss` first: a token from another issuer is refused for what it
        // is, and its unknown `kid` does not spend our rate-limited JWKS refetch.
        if let Some(iss) = peek.iss.as_deref()
            && iss != self.issuer()
        {
            return Err(self.wrong_issuer(iss));
        }
        let key = ready.keys.key_for(header.kid.as_deref(), header.alg).await.map_err(|error| match error {
            OAuthError::UnknownKey { .. } => Refusal::UnknownKey(error.to_string()),
            other => Refusal::IssuerUnavailable(format!("keys of issuer {:?} are unavailable: {other}", self.issuer())),
        })?;

        let config = &self.inner.config;
        let mut validation = Validation::new(header.alg);
        // Exactly the header's algorithm: jsonwebtoken also requires every listed algorithm to
        // fit the key's family, and the allowed set was checked above.
        validation.algorithms = vec![header.alg];
        validation.leeway = config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[config.issuer.as_str()]);
        validation.set_audience(&[resource]);
        let data = jsonwebtoken::decode::<RawClaims>(token, &key, &validation)
            .map_err(|error| self.refusal(error.into_kind(), &peek, resource))?;
        data.claims.into_claims()
    }

    /// An opaque token, checked at the issuer's introspection endpoint (RFC 7662).
    async fn introspect(&self, client: &IntrospectionClient, token: &str, resource: &str) -> Result<Claims, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Malformed(format!("token longer than {MAX_TOKEN_BYTES} bytes")));
        }
        let ready = self.ready(false).await.map_err(|error| {
            Refusal::IssuerUnavailable(format!("issuer {:?} is unavailable: {error}", self.issuer()))
        })?;
        let Some(endpoint) = &ready.metadata.introspection_endpoint else {
            return Err(Refusal::IssuerUnavailable(format!(
                "issuer {:?} publishes no introspection_endpoint, so opaque tokens cannot be checked",
                self.issuer()
            )));
        };
        let inner = &self.inner;
        let answer = introspection::answer(&inner.http, &inner.introspected, client, endpoint, token).await?;
        introspection::judge(answer, &inner.config.issuer, inner.config.leeway, resource)
    }

    fn wrong_issuer(&self, iss: &str) -> Refusal {
        Refusal::WrongIssuer(format!("token issued by {}, expected {:?}", quoted(iss), self.issuer()))
    }

    /// Maps jsonwebtoken's verdict to a refusal, using the unverified claims for the message.
    fn refusal(&self, kind: ErrorKind, peek: &Peek, resource: &str) -> Refusal {
        let leeway = self.inner.config.leeway.as_secs();
        match kind {
            ErrorKind::InvalidSignature => {
                Refusal::BadSignature("signature does not verify with the issuer's key".into())
            }
            ErrorKind::ExpiredSignature => Refusal::Expired(format!(
                "token expired at {} (now {}, leeway {leeway} s)",
                peek.exp.map_or_else(|| "?".into(), |exp| exp.to_string()),
                unix_now()
            )),
            ErrorKind::ImmatureSignature => Refusal::NotYetValid(format!(
                "token not valid before {} (now {}, leeway {leeway} s)",
                peek.nbf.map_or_else(|| "?".into(), |nbf| nbf.to_string()),
                unix_now()
            )),
            ErrorKind::InvalidIssuer => match &peek.iss {
                Some(iss) => self.wrong_issuer(iss),
                None => Refusal::WrongIssuer(format!("token iss is not {:?}", self.issuer())),
            },
            ErrorKind::InvalidAudience => Refusal::WrongAudience(format!(
                "token audience {} does not include this resource {resource:?}",
                peek.aud.as_deref().map_or_else(|| "(unreadable)".into(), quoted)
            )),
            ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => {
                Refusal::WrongAudience(format!("token has no aud claim; this resource is {resource:?}"))
            }
            ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => {
                Refusal::WrongIssuer(format!("token has no iss claim; expected {:?}", self.issuer()))
            }
            ErrorKind::MissingRequiredClaim(claim) => {
                Refusal::Malformed(format!("token lacks the required claim {claim:?} (or it is not a number)"))
            }
            ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
                Refusal::AlgorithmNotAllowed("algorithm does not fit the issuer's key".into())
            }
            ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidRsaKey(_)
            | ErrorKind::InvalidKeyFormat
            | ErrorKind::Crypto(_) => {
                Refusal::BadSignature(format!("signature could not be checked with the issuer's key: {kind:?}"))
            }
            other => Refusal::Malformed(format!("not a valid JWT: {}", jsonwebtoken::errors::Error::from(other))),
        }
    }
}

/// The parts of the JOSE header we act on, read before anything else.
struct TokenHeader {
    alg: Algorithm,
    kid: Option<String>,
}

fn parse_header(token: &str) -> Result<TokenHeader, Refusal> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Refusal::Malformed(format!("token longer than {MAX_TOKEN_BYTES} bytes")));
    }
    let parts = token.split('.').count();
    if parts == 5 {
        return Err(Refusal::Malformed("encrypted tokens (JWE) are not accepted".into()));
    }
    if parts != 3 {
        return Err(Refusal::Malformed(format!("a signed JWT has 3 dot-separated parts, this has {parts}")));
    }
    let encoded = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD.decode(encoded).map_err(|_| Refusal::Malformed("header is not base64url".into()))?;

    #[derive(Deserialize)]
    struct RawHeader {
        alg: Option<String>,
        kid: Option<String>,
        crit: Option<serde::de::IgnoredAny>,
    }
    let raw: RawHeader = serde_json::from_slice(&bytes)
        .map_err(|error| Refusal::Malformed(format!("header is not the expected JSON: {error}")))?;
    // RFC 7515 §4.1.11: extensions marked critical must be understood; we understand none.
    if raw.crit.is_some() {
        return Err(Refusal::Malformed("header has critical extensions (crit), none are supported".into()));
    }
    let Some(name) = raw.alg else {
        return Err(Refusal::Malformed("header has no alg".into()));
    };
    match name.parse::<Algorithm>() {
        Ok(alg) if is_asymmetric(alg) => Ok(TokenHeader { alg, kid: raw.kid }),
        _ => Err(Refusal::AlgorithmNotAllowed(format!(
            "algorithm {} is never accepted: only asymmetric signatures are",
            quoted(&name)
        ))),
    }
}

/// Unverified claims, read only to explain a refusal (and to spot a foreign `iss` early).
/// Anything unreadable is left out: jsonwebtoken's verdict is the one that counts.
#[derive(Default)]
struct Peek {
    iss: Option<String>,
    aud: Option<String>,
    exp: Option<i64>,
    nbf: Option<i64>,
}

impl Peek {
    fn of(token: &str) -> Peek {
        #[derive(Deserialize)]
        struct Raw {
            iss: Option<serde_json::Value>,
            aud: Option<serde_json::Value>,
            exp: Option<serde_json::Number>,
            nbf: Option<serde_json::Number>,
        }
        let Some(raw) = token
            .split('.')
            .nth(1)
            .and_then(|payload| URL_SAFE_NO_PAD.decode(payload).ok())
            .and_then(|bytes| serde_json::from_slice::<Raw>(&bytes).ok())
        else {
            return Peek::default();
        };
        Peek {
            iss: raw.iss.and_then(|iss| iss.as_str().map(str::to_string)),
            aud: raw.aud.map(|aud| aud.to_string()),
            exp: raw.exp.as_ref().map(seconds),
            nbf: raw.nbf.as_ref().map(seconds),
        }
    }
}

/// The claims we read from a verified token; validity claims are jsonwebtoken's business.
#[derive(Deserialize)]
struct RawClaims {
    sub: Option<String>,
    client_id: Option<String>,
    azp: Option<String>,
    scope: Option<String>,
    scp: Option<StringOrList>,
    exp: serde_json::Number,
}

impl RawClaims {
    fn into_claims(self) -> Result<Claims, Refusal> {
        let Some(sub) = self.sub.filter(|sub| !sub.is_empty()) else {
            return Err(Refusal::Malformed("token has no sub claim".into()));
        };
        let scopes = match (self.scope, self.scp) {
            (Some(scope), _) | (None, Some(StringOrList::String(scope))) => {
                scope.split_whitespace().map(str::to_string).collect()
            }
            (None, Some(StringOrList::List(list))) => list.into_iter().filter(|scope| !scope.is_empty()).collect(),
            (None, None) => BTreeSet::new(),
        };
        Ok(Claims { sub, client_id: self.client_id.or(self.azp), scopes, expires_at: seconds(&self.exp) })
    }
}
