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
mod discovery;
mod introspection;
mod keys;
mod scopes;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;

pub use discovery::{IssuerMetadata, discover};
pub use introspection::IntrospectionClient;
pub use keys::Keys;
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

/// Metadata and JWKS documents are small; anything bigger is a misconfiguration or an attack.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// Covers connecting, the response and its body: a slow issuer must not hold requests for long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Real access tokens are a few KiB at most; bigger ones are refused before any decoding.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Token-supplied strings quoted in refusal messages are cut to this many characters.
const MAX_QUOTED_CHARS: usize = 120;

/// Why talking to the authorization server, or using what it published, failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    /// The configured issuer is not a URL we can discover from.
    #[error("issuer {issuer:?} is not usable: {reason}")]
    InvalidIssuer { issuer: String, reason: String },
    /// A document could not be fetched: transport error, timeout, non-2xx status, too large.
    #[error("GET {url}: {message}")]
    Fetch { url: String, message: String },
    /// A document was fetched but is not what the specification requires.
    #[error("{url}: {message}")]
    InvalidDocument { url: String, message: String },
    /// The metadata names another issuer. Compared as strings: `https://x` and `https://x/`
    /// differ, and tokens carry the metadata's spelling in `iss`, so a mismatch is fatal.
    #[error(
        "issuer mismatch: {url} declares issuer {advertised:?}, but the configured issuer is {configured:?} \
         (they must be identical strings; fix the configured issuer)"
    )]
    IssuerMismatch { configured: String, advertised: String, url: String },
    /// Neither discovery location produced usable metadata.
    #[error("discovering issuer {issuer:?} failed: {}", join(.attempts))]
    Discovery { issuer: String, attempts: Vec<OAuthError> },
    /// No key in the JWKS fits the token's `kid` and algorithm, even after any refetch allowed.
    #[error("{jwks_uri} has no key {} usable with {alg:?}{note}", kid_label(.kid.as_deref()))]
    UnknownKey { jwks_uri: String, kid: Option<String>, alg: Algorithm, note: String },
}

fn join(errors: &[OAuthError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; then ")
}

fn kid_label(kid: Option<&str>) -> String {
    match kid {
        Some(kid) => format!("with kid {}", quoted(kid)),
        None => "(the token names no kid)".into(),
    }
}

/// GETs a JSON document with the size and time bounds above; errors name the URL.
async fn fetch_json<T: DeserializeOwned>(http: &reqwest::Client, url: &str) -> Result<T, OAuthError> {
    let fetch_error = |message: String| OAuthError::Fetch { url: url.to_string(), message };
    let exchange = async {
        let mut response = http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| fetch_error(crate::error_chain(&error.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(fetch_error(format!("HTTP {status}")));
        }
        let too_large = || fetch_error(format!("response larger than {MAX_DOCUMENT_BYTES} bytes"));
        if response.content_length().is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|error| fetch_error(crate::error_chain(&error.without_url())))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|error| OAuthError::InvalidDocument {
            url: url.to_string(),
            message: format!("not the expected JSON document: {error}"),
        })
    };
    match tokio::time::timeout(FETCH_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(fetch_error(format!("no complete response within {} s", FETCH_TIMEOUT.as_secs()))),
    }
}

/// A token-supplied string as it appears in a message: escaped and bounded, since it is
/// attacker-controlled and ends up in logs.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// The only algorithms ever accepted, whatever an issuer advertises: asymmetric signatures.
fn is_asymmetric(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// Why a token was refused. [`Refusal::reason`] is a short stable label for metrics;
/// [`Refusal::message`] explains, for logs (it may quote token contents and issuer URLs).
///
/// All but `IssuerUnavailable` mean the token is not acceptable (401 `invalid_token`);
/// `IssuerUnavailable` means we could not check it and the client may retry (503).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a well-formed signed JWT, or a required claim (`exp`, `sub`) is missing or mistyped.
    Malformed(String),
    /// The issuer's JWKS has no key with the token's `kid` fit for its algorithm.
    UnknownKey(String),
    /// The signature does not verify with the issuer's key.
    BadSignature(String),
    /// The header's `alg` is `none`, symmetric, unknown, or not advertised by the issuer.
    AlgorithmNotAllowed(String),
    /// `iss` is missing or is not exactly the configured issuer.
    WrongIssuer(String),
    /// `aud` is missing or does not contain this resource.
    WrongAudience(String),
    /// `exp` is in the past (beyond the leeway).
    Expired(String),
    /// The introspection endpoint says the (opaque) token is not active.
    Inactive(String),
    /// `nbf` is in the future (beyond the leeway).
    NotYetValid(String),
    /// The issuer's metadata or keys could not be fetched, so the token could not be checked.
    IssuerUnavailable(String),
}

impl Refusal {
    /// Every value [`Refusal::reason`] can return, e.g. to pre-register metric label values.
    pub const REASONS: [&'static str; 10] = [
        "malformed",
        "unknown_key",
        "bad_signature",
        "algorithm_not_allowed",
        "wrong_issuer",
        "wrong_audience",
        "expired",
        "inactive",
        "not_yet_valid",
        "issuer_unavailable",
    ];

    /// A short stable label: one of [`Refusal::REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::UnknownKey(_) => "unknown_key",
            Refusal::BadSignature(_) => "bad_signature",
            Refusal::AlgorithmNotAllowed(_) => "algorithm_not_allowed",
            Refusal::WrongIssuer(_) => "wrong_issuer",
            Refusal::WrongAudience(_) => "wrong_audience",
            Refusal::Expired(_) => "expired",
            Refusal::Inactive(_) => "inactive",
            Refusal::NotYetValid(_) => "not_yet_valid",
            Refusal::IssuerUnavailable(_) => "issuer_unavailable",
        }
    }

    /// What exactly was wrong, for a human reading logs.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Malformed(message)
            | Refusal::UnknownKey(message)
            | Refusal::BadSignature(message)
            | Refusal::AlgorithmNotAllowed(message)
            | Refusal::WrongIssuer(message)
            | Refusal::WrongAudience(message)
            | Refusal::Expired(message)
            | Refusal::Inactive(message)
            | Refusal::NotYetValid(message)
            | Refusal::IssuerUnavailable(message) => message,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason(), self.message())
    }
}

impl std::error::Error for Refusal {}

/// What a valid token says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `sub`: the resource owner (or the client itself, for client-credentials tokens).
    pub sub: String,
    /// `client_id` (RFC 9068), else `azp` (OpenID Connect style issuers).
    pub client_id: Option<String>,
    /// `scope` (space separated), else `scp` (an array, or a space separated string).
    pub scopes: BTreeSet<String>,
    /// `exp`, in seconds since the Unix epoch.
    pub expires_at: i64,
}

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
        introspection::check(&inner.http, &inner.introspected, &inner.config, client, endpoint, token, resource).await
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

#[derive(Deserialize)]
#[serde(untagged)]
enum StringOrList {
    String(String),
    List(Vec<String>),
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

/// A NumericDate claim (`exp`, `nbf`) in whole seconds; RFC 7519 allows fractions, and a value too
/// large for an i64 saturates.
fn seconds(number: &serde_json::Number) -> i64 {
    number.as_i64().unwrap_or_else(|| number.as_f64().map_or(i64::MAX, |f| f as i64))
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or_default()
}
