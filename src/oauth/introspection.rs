//! Opaque access tokens, checked at the issuer's introspection endpoint (RFC 7662). Answers are
//! kept for a short while (never past the token's `exp`), so a host sending many requests with
//! one token costs the provider one request per cache period. Inactive answers are kept apart, so
//! a stream of made-up tokens (each of which costs one introspection, at most
//! [`MAX_CONCURRENT`] at a time) can flush only other refusals, never the valid tokens' answers.

use std::time::Duration;

use serde::Deserialize;

use super::cache::TokenCache;
use super::claims::{Claims, Refusal, StringOrList, quoted, seconds, unix_now};
use super::discovery::check_secure;
use super::fetch::{FETCH_TIMEOUT, MAX_DOCUMENT_BYTES};

/// Introspections in flight at most: a flood of made-up tokens waits here instead of becoming a
/// flood of requests to the provider.
pub const MAX_CONCURRENT: usize = 16;

/// The answers kept, and the turns to ask for new ones.
pub(super) struct Caches {
    active: TokenCache<Answer>,
    inactive: TokenCache<Answer>,
    turns: tokio::sync::Semaphore,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            active: TokenCache::default(),
            inactive: TokenCache::default(),
            turns: tokio::sync::Semaphore::new(MAX_CONCURRENT),
        }
    }
}

/// The client credentials the daemon introspects with.
#[derive(Clone, PartialEq, Eq)]
pub struct IntrospectionClient {
    pub client_id: String,
    pub client_secret: String,
    /// How long an answer is reused.
    pub cache_for: Duration,
}

impl std::fmt::Debug for IntrospectionClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionClient")
            .field("client_id", &self.client_id)
            .field("cache_for", &self.cache_for)
            .finish_non_exhaustive()
    }
}

/// What the endpoint said about a token, as far as we act on it.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    active: bool,
    iss: Option<String>,
    aud: Vec<String>,
    exp: Option<i64>,
    nbf: Option<i64>,
    claims: Option<Claims>,
}

#[derive(Deserialize)]
struct RawAnswer {
    active: bool,
    iss: Option<String>,
    aud: Option<StringOrList>,
    exp: Option<serde_json::Number>,
    nbf: Option<serde_json::Number>,
    sub: Option<String>,
    client_id: Option<String>,
    azp: Option<String>,
    scope: Option<String>,
}

/// What `endpoint` says about an opaque `token`, through the cache; [`judge`] checks it.
pub(super) async fn answer(
    http: &reqwest::Client,
    caches: &Caches,
    client: &IntrospectionClient,
    endpoint: &str,
    token: &str,
) -> Result<Answer, Refusal> {
    let key = TokenCache::<Answer>::key(token, "");
    let cached = caches.active.get(&key).or_else(|| caches.inactive.get(&key));
    let answer = match cached {
        Some(answer) => answer,
        None => {
            let answer = {
                let _turn = caches
                    .turns
                    .acquire()
                    .await
                    .map_err(|_| Refusal::IssuerUnavailable("the daemon is shutting down".into()))?;
                introspect(http, client, endpoint, token).await?
            };
            let cache = if answer.active { &caches.active } else { &caches.inactive };
            cache.put(key, client.cache_for, answer.exp, answer.clone());
            answer
        }
    };
    Ok(answer)
}

/// The same checks a JWT gets, on the endpoint's answer.
pub(super) fn judge(answer: Answer, issuer: &str, leeway: Duration, resource: &str) -> Result<Claims, Refusal> {
    if !answer.active {
        return Err(Refusal::Inactive("the issuer says the token is not active (revoked, expired or unknown)".into()));
    }
    if let Some(iss) = &answer.iss
        && iss != issuer
    {
        return Err(Refusal::WrongIssuer(format!("token issued by {}, expected {issuer:?}", quoted(iss))));
    }
    if !answer.aud.iter().any(|aud| aud == resource) {
        return Err(Refusal::WrongAudience(format!(
            "token audience {} does not include this resource {resource:?}",
            quoted(&answer.aud.join(" "))
        )));
    }
    let now = unix_now() as i64;
    let leeway = i64::try_from(leeway.as_secs()).unwrap_or(i64::MAX);
    if let Some(exp) = answer.exp
        && exp.saturating_add(leeway) < now
    {
        return Err(Refusal::Expired(format!("token expired at {exp} (now {now}, leeway {leeway} s)")));
    }
    if let Some(nbf) = answer.nbf
        && nbf.saturating_sub(leeway) > now
    {
        return Err(Refusal::NotYetValid(format!("token not valid before {nbf} (now {now}, leeway {leeway} s)")));
    }
    answer.claims.ok_or_else(|| Refusal::Malformed("the introspection answer names no sub".into()))
}

async fn introspect(
    http: &reqwest::Client,
    client: &IntrospectionClient,
    endpoint: &str,
    token: &str,
) -> Result<Answer, Refusal> {
    let unavailable = |message: String| Refusal::IssuerUnavailable(format!("POST {endpoint}: {message}"));
    // The token and our client secret go there: https only (http on loopback), like the JWKS.
    let secure = match url::Url::parse(endpoint) {
        Ok(url) => check_secure(&url).map_err(|error| error.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(reason) = secure {
        return Err(unavailable(format!("the introspection endpoint is not usable: {reason}")));
    }
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("token", token)
        .append_pair("token_type_hint", "access_token")
        .finish();
    let exchange = async {
        let response = http
            .post(endpoint)
            .basic_auth(&client.client_id, Some(&client.client_secret))
            .header(reqwest::header::ACCEPT, "application/json")
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|error| unavailable(crate::error_chain(&error.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            // 401/403: our client credentials are wrong, which the operator must fix; either way
            // the token could not be checked.
            return Err(unavailable(format!("HTTP {status} (check introspection_client_id and _secret)")));
        }
        if response.content_length().is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64) {
            return Err(unavailable("answer too large".into()));
        }
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|error| unavailable(crate::error_chain(&error.without_url())))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(unavailable("answer too large".into()));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice::<RawAnswer>(&body)
            .map_err(|error| unavailable(format!("not an RFC 7662 answer: {error}")))
    };
    let raw = match tokio::time::timeout(FETCH_TIMEOUT, exchange).await {
        Ok(raw) => raw?,
        Err(_) => return Err(unavailable(format!("no answer within {} s", FETCH_TIMEOUT.as_secs()))),
    };
    let claims = raw.sub.filter(|sub| !sub.is_empty()).map(|sub| Claims {
        sub,
        client_id: raw.client_id.or(raw.azp),
        scopes: raw.scope.as_deref().unwrap_or_default().split_whitespace().map(str::to_string).collect(),
        expires_at: raw.exp.as_ref().map_or(i64::MAX, seconds),
    });
    Ok(Answer {
        active: raw.active,
        iss: raw.iss,
        aud: match raw.aud {
            Some(StringOrList::String(aud)) => vec![aud],
            Some(StringOrList::List(list)) => list,
            None => Vec::new(),
        },
        exp: raw.exp.as_ref().map(seconds),
        nbf: raw.nbf.as_ref().map(seconds),
        claims,
    })
}
