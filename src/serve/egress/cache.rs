//! The egress's HTTP cache of GET responses (RFC 9111, decided by `http-cache-semantics`),
//! bounded in bytes (`[egress.cache] max_bytes`, least recently used first out).
//!
//! It is a shared cache in the RFC's sense (`private` and `no-store` responses are not stored,
//! nor responses to requests with `Authorization` unless the upstream marks them `public`,
//! `s-maxage` or `must-revalidate`), and it is partitioned: an entry's key is the server, the
//! identity of the credentials the hop carried ([`CredentialIdentity`]), the method and the URL
//! as the handler wrote it, so a response fetched with one person's token is never served to
//! another, nor to another server. Responses that `Vary` are matched on the varying request
//! headers too (one variant per key: another variant replaces it).
//!
//! What is stored is the response as the handler would have got it: complete, under
//! `max_response_bytes`, and scrubbed of the server's credential values (the transport scrubs
//! before anything else sees a response). A stale entry with a validator is revalidated with
//! `If-None-Match` / `If-Modified-Since`; a 304 refreshes it. Requests the handler made
//! conditional or partial itself (`If-*`, `Range`) bypass the cache: their answers are for the
//! handler's own validators.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use http_cache_semantics::{AfterResponse, BeforeRequest, CacheOptions, CachePolicy};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::inject::CredentialIdentity;
use super::transport::RawResponse;

/// Bytes counted for an entry besides its body, headers and key.
const ENTRY_OVERHEAD: u64 = 512;

/// The daemon's response cache, shared by every server and partitioned by key.
pub struct ResponseCache {
    max_bytes: u64,
    state: Mutex<CacheState>,
}

/// What a GET's entry is filed under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub server: String,
    pub identity: CredentialIdentity,
    pub method: String,
    pub url: String,
}

/// The request a hop would send, as the cache judges it.
pub struct CacheRequest {
    parts: http::request::Parts,
}

/// What the cache can do for a request.
pub enum Lookup {
    /// A fresh response: send nothing.
    Fresh(RawResponse),
    /// A stored response that must be revalidated: send the request with these headers (they add
    /// the validators), and give the answer to [`ResponseCache::revalidated`].
    Stale { headers: HeaderMap, stored: Box<StoredEntry> },
    /// Nothing usable: send the request as it is.
    Miss,
}

/// A stored response with its policy, as a revalidation needs it.
pub struct StoredEntry {
    policy: CachePolicy,
    response: StoredResponse,
}

#[derive(Clone)]
struct StoredResponse {
    status: u16,
    status_text: String,
    location: Option<String>,
    body: Bytes,
    scrubs: usize,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<CacheKey, Entry>,
    /// Use order: the oldest use first.
    by_use: BTreeMap<u64, CacheKey>,
    uses: u64,
    bytes: u64,
}

struct Entry {
    policy: CachePolicy,
    response: StoredResponse,
    size: u64,
    last_use: u64,
}

impl ResponseCache {
    pub fn new(max_bytes: u64) -> ResponseCache {
        ResponseCache { max_bytes, state: Mutex::default() }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// What the cache can do for `request` under `key`.
    pub fn lookup(&self, key: &CacheKey, request: &CacheRequest, max_response_bytes: u64) -> Lookup {
        let mut state = self.lock();
        let Some(entry) = state.entries.get(key) else { return Lookup::Miss };
        if entry.response.body.len() as u64 > max_response_bytes {
            // Stored under a larger limit than the server has now.
            state.remove(key);
            return Lookup::Miss;
        }
        let now = SystemTime::now();
        match entry.policy.before_request(&request.parts, now) {
            BeforeRequest::Fresh(parts) => {
                let response = entry.response.clone();
                state.touch(key);
                Lookup::Fresh(response.with_headers(&parts.headers))
            }
            BeforeRequest::Stale { request: revalidation, matches: true } => {
                let stored = StoredEntry { policy: entry.policy.clone(), response: entry.response.clone() };
                Lookup::Stale { headers: revalidation.headers, stored: Box::new(stored) }
            }
            BeforeRequest::Stale { matches: false, .. } => Lookup::Miss,
        }
    }

    /// Stores `response` to `request` if the RFC and the bounds allow; whether it was stored.
    pub fn store(&self, key: CacheKey, request: &CacheRequest, response: &RawResponse) -> bool {
        let policy = CachePolicy::new_options(
            &request.parts,
            &response_parts(response.status, &response.headers),
            SystemTime::now(),
            CacheOptions { shared: true, ..Default::default() },
        );
        if !policy.is_storable() || policy.time_to_live(SystemTime::now()).is_zero() && !has_validator(response) {
            self.lock().remove(&key);
            return false;
        }
        let stored = StoredResponse {
            status: response.status,
            status_text: response.status_text.clone(),
            location: response.location.clone(),
            body: response.body.clone(),
            scrubs: response.scrubs,
        };
        let headers_len = response.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        self.insert(key, policy, stored, headers_len)
    }

    /// The answer to a revalidation of `stored`: the stored response refreshed when the upstream
    /// said it is unchanged (304), else `None` and the answer is a new response (to store).
    pub fn revalidated(
        &self,
        key: &CacheKey,
        request: &CacheRequest,
        stored: StoredEntry,
        answer: &RawResponse,
    ) -> Option<RawResponse> {
        if answer.status != 304 {
            return None;
        }
        let parts = response_parts(answer.status, &answer.headers);
        match stored.policy.after_response(&request.parts, &parts, SystemTime::now()) {
            AfterResponse::NotModified(policy, parts) => {
                let response = stored.response.clone().with_headers(&parts.headers);
                let headers_len = response.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
                self.insert(key.clone(), policy, stored.response, headers_len);
                Some(response)
            }
            AfterResponse::Modified(..) => {
                self.lock().remove(key);
                None
            }
        }
    }

    fn insert(&self, key: CacheKey, policy: CachePolicy, response: StoredResponse, headers_len: usize) -> bool {
        let size = ENTRY_OVERHEAD
            + (response.body.len() + headers_len + key.url.len() + key.server.len() + response.status_text.len())
                as u64;
        let mut state = self.lock();
        state.remove(&key);
        if size > self.max_bytes {
            return false;
        }
        while state.bytes + size > self.max_bytes {
            let Some((_, oldest)) = state.by_use.pop_first() else { break };
            state.remove(&oldest);
        }
        state.uses += 1;
        let last_use = state.uses;
        state.by_use.insert(last_use, key.clone());
        state.bytes += size;
        state.entries.insert(key, Entry { policy, response, size, last_use });
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CacheRequest {
    /// A GET or HEAD as it will be sent (credentials added), if the cache may take part in it.
    pub fn new(method: &reqwest::Method, url: &url::Url, headers: &HeaderMap) -> Option<CacheRequest> {
        if *method != reqwest::Method::GET {
            return None;
        }
        let handler_conditional = headers.keys().any(|name| {
            let name = name.as_str();
            name.starts_with("if-") || name == "range"
        });
        if handler_conditional {
            return None;
        }
        let mut request = http::Request::builder().method(http::Method::GET).uri(url.as_str()).body(()).ok()?;
        *request.headers_mut() = headers.clone();
        Some(CacheRequest { parts: request.into_parts().0 })
    }
}

impl CacheState {
    fn remove(&mut self, key: &CacheKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.by_use.remove(&entry.last_use);
            self.bytes -= entry.size;
        }
    }

    fn touch(&mut self, key: &CacheKey) {
        self.uses += 1;
        let uses = self.uses;
        if let Some(entry) = self.entries.get_mut(key) {
            self.by_use.remove(&entry.last_use);
            entry.last_use = uses;
            self.by_use.insert(uses, key.clone());
        }
    }
}

impl StoredResponse {
    fn with_headers(self, headers: &HeaderMap) -> RawResponse {
        RawResponse {
            status: self.status,
            status_text: self.status_text,
            location: self.location,
            headers: headers
                .iter()
                .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
                .collect(),
            body: self.body,
            scrubs: self.scrubs,
        }
    }
}

/// A response that can be revalidated instead of fetched again.
fn has_validator(response: &RawResponse) -> bool {
    response
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("etag") || name.eq_ignore_ascii_case("last-modified"))
}

fn response_parts(status: u16, headers: &[(String, String)]) -> http::response::Parts {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            map.append(name, value);
        }
    }
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    *response.headers_mut() = map;
    response.into_parts().0
}
