//! What a valid token says about its bearer ([`Claims`]), why a token is refused ([`Refusal`]),
//! and the helpers both JWTs and introspection answers are read with.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// Token-supplied strings quoted in refusal messages are cut to this many characters.
const MAX_QUOTED_CHARS: usize = 120;

/// A token-supplied string as it appears in a message: escaped and bounded, since it is
/// attacker-controlled and ends up in logs.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
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

#[derive(Deserialize)]
#[serde(untagged)]
pub enum StringOrList {
    String(String),
    List(Vec<String>),
}

/// A NumericDate claim (`exp`, `nbf`) in whole seconds; RFC 7519 allows fractions, and a value too
/// large for an i64 saturates.
pub fn seconds(number: &serde_json::Number) -> i64 {
    number.as_i64().unwrap_or_else(|| number.as_f64().map_or(i64::MAX, |f| f as i64))
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or_default()
}
