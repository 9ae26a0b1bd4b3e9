//! The issuer's signing keys (JWKS), cached and refetched when a token names a key we lack:
//! that is how key rotation reaches a running daemon.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::claims::quoted;
use super::fetch::{OAuthError, fetch_json};

/// A JWKS cache. Cheap to clone (shared state).
///
/// Lookups take a read lock and a map lookup. A miss refetches the whole set, at most once per
/// refetch interval, and the new set replaces the old one, so removed keys stop verifying.
#[derive(Clone)]
pub struct Keys {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    jwks_uri: String,
    refetch_interval: Duration,
    set: RwLock<KeySet>,
    /// When the last miss-prompted refetch started; held during the refetch so that concurrent
    /// misses wait for it instead of fetching again.
    last_refetch: Mutex<Option<Instant>>,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = self.inner.set.read().unwrap_or_else(PoisonError::into_inner);
        let kids: Vec<_> = set.keys.iter().map(|key| key.kid.as_deref()).collect();
        f.debug_struct("Keys").field("jwks_uri", &self.inner.jwks_uri).field("kids", &kids).finish()
    }
}

/// The usable keys of one JWKS document.
#[derive(Default)]
struct KeySet {
    keys: Vec<Key>,
    /// Indices into `keys` by `kid`; a kid may (rarely) name keys of several types.
    by_kid: HashMap<String, Vec<usize>>,
}

struct Key {
    kid: Option<String>,
    kind: KeyKind,
    /// The JWK's `alg`, when it pins the key to one algorithm.
    alg: Option<Algorithm>,
    decoding: DecodingKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl KeyKind {
    /// Whether a key of this type can verify `alg`: jsonwebtoken only checks the family, which
    /// would let an ES384 token be tried against a P-256 key.
    fn fits(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            KeyKind::Rsa => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            KeyKind::P256 => alg == ES256,
            KeyKind::P384 => alg == ES384,
            KeyKind::Ed25519 => alg == EdDSA,
        }
    }
}

impl Key {
    fn fits(&self, alg: Algorithm) -> bool {
        self.kind.fits(alg) && self.alg.is_none_or(|pinned| pinned == alg)
    }
}

/// Why a lookup found nothing; becomes the note of [`OAuthError::UnknownKey`].
enum Miss {
    None,
    /// No kid in the token, and more than one key could verify it.
    Ambiguous(usize),
}

impl KeySet {
    fn lookup(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, Miss> {
        match kid {
            Some(kid) => self
                .by_kid
                .get(kid)
                .and_then(|indices| indices.iter().map(|&index| &self.keys[index]).find(|key| key.fits(alg)))
                .map(|key| key.decoding.clone())
                .ok_or(Miss::None),
            None => {
                let mut fitting = self.keys.iter().filter(|key| key.fits(alg));
                match (fitting.next(), fitting.count()) {
                    (Some(key), 0) => Ok(key.decoding.clone()),
                    (Some(_), others) => Err(Miss::Ambiguous(others + 1)),
                    (None, _) => Err(Miss::None),
                }
            }
        }
    }
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

/// The JWK members we look at (RFC 7517, RFC 7518 §6, RFC 8037).
#[derive(Deserialize)]
struct RawKey {
    kty: String,
    #[serde(rename = "use")]
    use_: Option<String>,
    key_ops: Option<Vec<String>>,
    alg: Option<String>,
    kid: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl Keys {
    /// Fetches the JWKS at `jwks_uri`. The first fetch does not count against the refetch
    /// interval: a token signed with a key rotated in just after startup is still accepted.
    pub async fn fetch(http: reqwest::Client, jwks_uri: &str, refetch_interval: Duration) -> Result<Keys, OAuthError> {
        let set = fetch_set(&http, jwks_uri).await?;
        Ok(Keys {
            inner: Arc::new(Inner {
                http,
                jwks_uri: jwks_uri.to_string(),
                refetch_interval,
                set: RwLock::new(set),
                last_refetch: Mutex::new(None),
            }),
        })
    }

    pub fn jwks_uri(&self) -> &str {
        &self.inner.jwks_uri
    }

    /// The key to verify a token with this `kid` (if it has one) and algorithm.
    ///
    /// Keys with a `use` other than `sig`, `key_ops` without `verify`, a type that cannot
    /// produce `alg`, or an `alg` of their own that differs, are never returned. Without a kid,
    /// the only fitting key is returned; several are ambiguous and refused.
    ///
    /// A miss refetches the set once, unless a refetch started less than the refetch interval
    /// ago. A failed refetch is an [`OAuthError::Fetch`] (the issuer is unavailable); a miss
    /// after it, or a rate-limited miss, is [`OAuthError::UnknownKey`].
    pub async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, OAuthError> {
        if let Ok(key) = self.lookup(kid, alg) {
            return Ok(key);
        }
        let mut last_refetch = self.inner.last_refetch.lock().await;
        // Another task may have refetched while this one waited for the lock.
        if let Ok(key) = self.lookup(kid, alg) {
            return Ok(key);
        }
        if let Some(at) = *last_refetch
            && at.elapsed() < self.inner.refetch_interval
        {
            let note = format!(
                " (not refetched: the last refetch was {} s ago, the minimum interval is {} s)",
                at.elapsed().as_secs(),
                self.inner.refetch_interval.as_secs()
            );
            return Err(self.unknown(kid, alg, self.lookup(kid, alg).err(), note));
        }
        *last_refetch = Some(Instant::now());
        tracing::info!(jwks_uri = %self.inner.jwks_uri, kid = kid.unwrap_or("(none)"), "refetching the issuer's keys for an unknown key id");
        let set = fetch_set(&self.inner.http, &self.inner.jwks_uri).await?;
        *self.inner.set.write().unwrap_or_else(PoisonError::into_inner) = set;
        self.lookup(kid, alg).map_err(|miss| self.unknown(kid, alg, Some(miss), " (after refetching)".into()))
    }

    fn lookup(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, Miss> {
        self.inner.set.read().unwrap_or_else(PoisonError::into_inner).lookup(kid, alg)
    }

    fn unknown(&self, kid: Option<&str>, alg: Algorithm, miss: Option<Miss>, note: String) -> OAuthError {
        let note = match miss {
            Some(Miss::Ambiguous(count)) => {
                format!(" that is unambiguous: {count} keys fit and the token names none{note}")
            }
            _ => note,
        };
        OAuthError::UnknownKey { jwks_uri: self.inner.jwks_uri.clone(), kid: kid.map(str::to_string), alg, note }
    }
}

async fn fetch_set(http: &reqwest::Client, jwks_uri: &str) -> Result<KeySet, OAuthError> {
    let raw: RawSet = fetch_json(http, jwks_uri).await?;
    let mut set = KeySet::default();
    // One bad key (an encryption key, a type we do not support) must not disable the others.
    for (position, value) in raw.keys.into_iter().enumerate() {
        match parse_key(value) {
            Ok(key) => {
                if let Some(kid) = &key.kid {
                    set.by_kid.entry(kid.clone()).or_default().push(set.keys.len());
                }
                set.keys.push(key);
            }
            Err(reason) => tracing::debug!(jwks_uri, position, %reason, "skipping a key of the issuer's JWKS"),
        }
    }
    if set.keys.is_empty() {
        tracing::warn!(jwks_uri, "the issuer's JWKS has no usable signing key");
    }
    Ok(set)
}

/// Why one key of a JWKS is skipped.
#[derive(Debug, thiserror::Error)]
enum UnusableKey {
    #[error("not a JWK: {0}")]
    NotJwk(serde_json::Error),
    #[error("use is {}, not \"sig\"", quoted(.use_))]
    NotForSignatures { use_: String },
    #[error("key_ops does not include \"verify\"")]
    NotForVerifying,
    #[error("alg {} is not an accepted signature algorithm", quoted(.alg))]
    Algorithm { alg: String },
    #[error("{kty} key without {member}")]
    MissingMember { kty: String, member: &'static str },
    #[error("unsupported key type {} (crv {crv:?})", quoted(.kty))]
    UnsupportedType { kty: String, crv: Option<String> },
    #[error("invalid {kty} key: {cause}")]
    Invalid { kty: String, cause: jsonwebtoken::errors::Error },
    #[error("a {kind:?} key cannot verify {alg:?}")]
    AlgorithmMismatch { kind: KeyKind, alg: Algorithm },
}

fn parse_key(value: serde_json::Value) -> Result<Key, UnusableKey> {
    let raw: RawKey = serde_json::from_value(value).map_err(UnusableKey::NotJwk)?;
    if let Some(use_) = raw.use_.as_deref()
        && use_ != "sig"
    {
        return Err(UnusableKey::NotForSignatures { use_: use_.to_string() });
    }
    if let Some(ops) = &raw.key_ops
        && !ops.iter().any(|op| op == "verify")
    {
        return Err(UnusableKey::NotForVerifying);
    }
    let alg = match raw.alg.as_deref() {
        None => None,
        Some(name) => match name.parse::<Algorithm>() {
            Ok(alg) if is_asymmetric(alg) => Some(alg),
            _ => return Err(UnusableKey::Algorithm { alg: name.to_string() }),
        },
    };
    let member = |value: Option<String>, member: &'static str| {
        value.ok_or_else(|| UnusableKey::MissingMember { kty: raw.kty.clone(), member })
    };
    let (kind, decoding) = match (raw.kty.as_str(), raw.crv.as_deref()) {
        ("RSA", _) => {
            let (n, e) = (member(raw.n, "n")?, member(raw.e, "e")?);
            (KeyKind::Rsa, DecodingKey::from_rsa_components(&n, &e))
        }
        ("EC", Some(curve @ ("P-256" | "P-384"))) => {
            let (x, y) = (member(raw.x, "x")?, member(raw.y, "y")?);
            let kind = if curve == "P-256" { KeyKind::P256 } else { KeyKind::P384 };
            (kind, DecodingKey::from_ec_components(&x, &y))
        }
        ("OKP", Some("Ed25519")) => (KeyKind::Ed25519, DecodingKey::from_ed_components(&member(raw.x, "x")?)),
        (kty, crv) => {
            return Err(UnusableKey::UnsupportedType { kty: kty.to_string(), crv: crv.map(str::to_string) });
        }
    };
    let decoding = decoding.map_err(|cause| UnusableKey::Invalid { kty: raw.kty.clone(), cause })?;
    if let Some(alg) = alg
        && !kind.fits(alg)
    {
        return Err(UnusableKey::AlgorithmMismatch { kind, alg });
    }
    Ok(Key { kid: raw.kid, kind, alg, decoding })
}

/// The only algorithms ever accepted, whatever an issuer advertises: asymmetric signatures.
pub fn is_asymmetric(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}
