//! Egress: the only way a handler reaches the network, and how generation fetches documentation.
//!
//! The rules are in [`policy`] (its module doc is the specification, its checks need no I/O);
//! [`resolver`] vets every address a name resolves to before the client may connect to it;
//! [`transport`] sends one request and reads the response under the limits; [`log`] records
//! every hop for the operator, entering each before it is sent, so every request that reaches
//! the network is in the call log, also one still in flight when its call ends; [`inject`] adds
//! the server's credentials to the hops they match. This module ties them together: it follows
//! redirects hop by hop, checking each in full, and turns failures into what a handler may see.
//! Between the policy and the network, each hop may be answered by [`cache`] (GETs, partitioned
//! by server and credentials), and otherwise passes [`upstream`]'s protection of the origin
//! (`Retry-After`, circuit breaker, the server's rate limit), which may hold or refuse it.
//! Each hop is an `outbound request` span (`telemetry::traces`), which names the URL without
//! query values and, with `[telemetry] propagate_traceparent`, is sent as `traceparent`.
//!
//! A credential's value never enters the isolate. Upstreams echo requests (in bodies, headers,
//! redirect URLs), and a handler holding the value could transform it past any later check and
//! send it to another host it may fetch. So every response of a server that has credentials is
//! scrubbed of all their values, in every wire form (`credentials::redact`), before it becomes a
//! `FetchResponse`: headers and `Location` as they arrive, the body chunk by chunk under
//! `max_response_bytes`, and the final URL. That is every response, not only those of hops that
//! carried a credential, since an upstream may keep a value and hand it back later or from another
//! of its hosts. Each hop's egress log entry counts the values taken out of its response.

pub mod cache;
pub mod inject;
pub mod log;
pub mod own_socket;
pub mod policy;
pub mod resolver;
pub mod transport;
pub mod upstream;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::HeaderMap;
use tracing::Instrument;

use self::cache::{CacheKey, CacheRequest, Lookup, ResponseCache};
use self::inject::{CREDENTIAL_HEADERS, CredentialIdentity};
use self::log::{EgressLog, Hop, Sent};
pub use self::policy::{
    Failure, HostRule, MAX_REQUEST_BODY_BYTES, MAX_URL_BYTES, ServerPolicy, is_forbidden_header, is_global,
};
use self::transport::{RawResponse, Transport};
use self::upstream::{Answer, Upstreams};
use crate::catalog::EgressRecord;
use crate::config::Config;
use crate::serve::isolate::{FetchError, FetchHost, FetchRequest, FetchResponse, RedirectMode};
use crate::states::CacheUse;
use crate::telemetry::traces;

/// The daemon-wide egress engine: one HTTP client with the vetting resolver, the upstreams'
/// protection state and the response cache.
pub struct Egress {
    transport: Transport,
    allow_private_networks: bool,
    max_redirects: u32,
    upstreams: Upstreams,
    /// `None` when `[egress.cache]` is off.
    cache: Option<ResponseCache>,
    /// `[telemetry] propagate_traceparent` with traces on: each hop carries its span's
    /// `traceparent`.
    propagate_traceparent: bool,
}

/// How a hop was answered: by the upstream (its log entry entered as sent) or by the cache.
enum Answered {
    Sent(Sent),
    FromCache,
}

/// A GET the cache takes part in: the cache, the entry's key and the request as it judges it.
type Cacheable<'a> = (&'a ResponseCache, CacheKey, CacheRequest);

/// The fetch host handed to one call's isolate; records every request it sees.
pub struct CallEgress {
    egress: Arc<Egress>,
    policy: Arc<ServerPolicy>,
    /// The tool is annotated read-only: only GET, HEAD and OPTIONS may leave.
    read_only: bool,
    log: Arc<EgressLog>,
}

impl Egress {
    /// The engine for `config`; `own` holds the daemon's listening addresses, which no request
    /// may connect to (see [`own_socket`]).
    pub fn new(config: &Config, own: own_socket::OwnAddresses) -> anyhow::Result<Egress> {
        Ok(Egress {
            transport: Transport::new(&config.egress, own)?,
            allow_private_networks: config.egress.allow_private_networks,
            max_redirects: config.egress.max_redirects,
            upstreams: Upstreams::new(&config.egress),
            cache: config.egress.cache.enabled.then(|| ResponseCache::new(config.egress.cache.max_bytes)),
            propagate_traceparent: config.telemetry.traces_enabled() && config.telemetry.propagate_traceparent,
        })
    }

    /// Bytes of responses the cache holds now.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, ResponseCache::bytes)
    }

    /// A fetch host for one call of a server's tool; `read_only` for a tool annotated
    /// `readOnlyHint: true`, whose requests may only read.
    pub fn for_call(self: &Arc<Self>, policy: Arc<ServerPolicy>, read_only: bool) -> CallEgress {
        CallEgress { egress: self.clone(), policy, read_only, log: Arc::default() }
    }

    /// Fetches a documentation page for generation: any host, under every other rule of the
    /// policy (address vetting, `[egress.resolve]`, redirects re-checked, size cap, deadline).
    /// The failure displays as the operator-facing reason.
    pub async fn fetch_document(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        max_bytes: u64,
        deadline: Instant,
    ) -> Result<FetchResponse, Failure> {
        let policy = ServerPolicy {
            hosts: HostRule::AnyHost,
            max_response_bytes: max_bytes,
            credentials: Vec::new(),
            redactor: Default::default(),
            server: None,
            cache: false,
            upstream_limits: None,
        };
        let request = FetchRequest {
            url: url.to_string(),
            method: "GET".to_string(),
            headers,
            body: None,
            redirect: RedirectMode::Follow,
        };
        self.fetch(&policy, request, false, deadline, &EgressLog::default()).await
    }

    /// Runs one fetch under the policy, following redirects hop by hop.
    async fn fetch(
        &self,
        policy: &ServerPolicy,
        request: FetchRequest,
        read_only: bool,
        deadline: Instant,
        log: &EgressLog,
    ) -> Result<FetchResponse, Failure> {
        let (mut method, mut headers, mut url) = policy::prepare(&request, read_only).inspect_err(|failure| {
            let url = url::Url::parse(&request.url).ok();
            let (host, path) = url.as_ref().map(|u| (u.host_str().unwrap_or(""), u.path())).unwrap_or_default();
            log.refused(&Hop::at(&request.method, host, path, Instant::now()), failure);
        })?;
        let mut body = request.body;
        let mut redirected = false;
        // Credentials go only to the request's own origin: once a redirect leaves it, no later
        // hop gets them, even one to another host they match (as browsers drop Authorization).
        let origin = url.origin();
        let mut left_origin = false;
        let mut hops = 0u32;
        loop {
            let mut hop = Hop::of(method.as_str(), &url, Instant::now());
            if let Err(failure) = policy::check_url(policy, self.allow_private_networks, &url) {
                log.refused(&hop, &failure);
                return Err(failure);
            }
            // Credentials go on this hop only, after the policy allowed it.
            left_origin |= url.origin() != origin;
            let credentials = if left_origin { &[][..] } else { &policy.credentials[..] };
            let (hop_url, mut hop_headers, applied) = inject::apply(credentials, &url, &headers);
            hop.credentials = &applied;
            let identity = CredentialIdentity::of_hop(credentials, &applied, &hop_headers);
            let cacheable = self.cacheable(policy, &method, &url, &hop_url, &hop_headers, body.as_ref(), identity);
            let lookup = match &cacheable {
                Some((cache, key, cache_request)) => cache.lookup(key, cache_request, policy.max_response_bytes),
                None => Lookup::Miss,
            };
            // Named from the handler's URL, before credentials were injected, and without query
            // values, which may be credentials or arguments.
            let hop_span = tracing::debug_span!(
                "outbound request",
                otel.kind = "client",
                "server.address" = url.host_str().unwrap_or(""),
                "url.full" = %traces::url_without_query_values(&url),
                "http.request.method" = %method,
                "http.response.status_code" = tracing::field::Empty,
                "error.type" = tracing::field::Empty,
            );
            if self.propagate_traceparent
                && let Some(traceparent) = traces::traceparent_of(&hop_span)
                && let Ok(value) = reqwest::header::HeaderValue::from_str(&traceparent)
            {
                // The hop's own span is the upstream's parent; a handler's trace context would
                // name a trace nobody records, so it is replaced, with its `tracestate`.
                let hop_headers = hop_headers.to_mut();
                hop_headers.remove(traces::TRACESTATE);
                hop_headers.insert(traces::TRACEPARENT, value);
            }
            let answering = async {
                Ok::<_, Failure>(match lookup {
                    Lookup::Fresh(response) => {
                        hop.cache = Some(CacheUse::Hit);
                        (response, Answered::FromCache)
                    }
                    Lookup::Stale { headers: revalidation, stored } => {
                        let (response, sent) = self
                            .send_upstream(
                                policy,
                                &mut hop,
                                log,
                                &identity,
                                &method,
                                &hop_url,
                                &revalidation,
                                &body,
                                deadline,
                            )
                            .await?;
                        let (cache, key, cache_request) = cacheable.expect("only a cacheable request is looked up");
                        let (response, used) = match cache.revalidated(&key, &cache_request, *stored, &response) {
                            Some(refreshed) => (refreshed, CacheUse::Revalidated),
                            None => {
                                let stored = store(cache, key, &cache_request, &response);
                                (response, stored)
                            }
                        };
                        log.cache_use(&sent, used);
                        (response, Answered::Sent(sent))
                    }
                    Lookup::Miss => {
                        let (response, sent) = self
                            .send_upstream(
                                policy,
                                &mut hop,
                                log,
                                &identity,
                                &method,
                                &hop_url,
                                &hop_headers,
                                &body,
                                deadline,
                            )
                            .await?;
                        if let Some((cache, key, cache_request)) = cacheable {
                            log.cache_use(&sent, store(cache, key, &cache_request, &response));
                        }
                        (response, Answered::Sent(sent))
                    }
                })
            }
            .instrument(hop_span.clone())
            .await;
            let (mut response, answered) = match answering {
                Ok(answered) => answered,
                Err(failure) => {
                    let kind = match &failure {
                        Failure::Limit(_) => "limit",
                        Failure::Network(_) | Failure::Unreachable(_) => "network",
                        Failure::Held(_) => "held",
                        Failure::Denied { .. } | Failure::Refused(_) => "denied",
                    };
                    hop_span.record("error.type", kind);
                    return Err(failure);
                }
            };
            let status = response.status;
            hop_span.record("http.response.status_code", status);
            let is_redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
            let location = match response.location.as_deref() {
                Some(location) if is_redirect && request.redirect != RedirectMode::Manual => location.to_string(),
                _ => {
                    // The URL is the handler's or built from scrubbed locations; scrubbed again
                    // because parsing may have re-encoded a value into a form found only now.
                    let (final_url, scrubs) = policy.redactor.counted_text(url.as_str());
                    response.scrubs += scrubs;
                    complete(log, &hop, answered, &response)?;
                    return Ok(response.into_fetch_response(final_url.into_owned(), redirected));
                }
            };
            complete(log, &hop, answered, &response)?;
            if request.redirect == RedirectMode::Error {
                return Err(Failure::Network(format!("redirect ({status}) refused because redirect is \"error\"")));
            }
            hops += 1;
            if hops > self.max_redirects {
                return Err(Failure::Network(format!("more than {} redirects", self.max_redirects)));
            }
            let next = url.join(&location).map_err(|e| Failure::Network(format!("invalid redirect location: {e}")))?;
            if next.origin() != url.origin() {
                for name in CREDENTIAL_HEADERS {
                    headers.remove(*name);
                }
            }
            // Browsers turn a redirected POST into a GET (and 303 always into a GET).
            if status == 303 || ((status == 301 || status == 302) && method == reqwest::Method::POST) {
                if method != reqwest::Method::HEAD {
                    method = reqwest::Method::GET;
                }
                body = None;
                headers.remove(reqwest::header::CONTENT_TYPE);
            }
            url = next;
            redirected = true;
        }
    }
}

impl Egress {
    /// Sends one hop the cache could not answer, after the upstream protection let it through
    /// (waiting if it must); the hop's log entry is entered as sent, and completed here if the
    /// hop fails.
    #[allow(clippy::too_many_arguments)]
    async fn send_upstream(
        &self,
        policy: &ServerPolicy,
        hop: &mut Hop<'_>,
        log: &EgressLog,
        identity: &CredentialIdentity,
        method: &reqwest::Method,
        url: &url::Url,
        headers: &HeaderMap,
        body: &Option<Bytes>,
        deadline: Instant,
    ) -> Result<(RawResponse, Sent), Failure> {
        let origin = url.origin().ascii_serialization();
        match self.upstreams.admit(&origin, identity, policy.upstream_limits.as_deref(), deadline).await {
            Ok(admitted) => {
                hop.decision = admitted.decision;
                hop.waited = admitted.decision.map(|_| admitted.waited);
            }
            Err(held) => {
                hop.decision = Some(held.decision);
                hop.waited = Some(held.waited);
                let failure = Failure::Held(held.reason);
                log.refused(hop, &failure);
                return Err(failure);
            }
        }
        // Logged before it leaves, so a call that ends while it is in flight still has it;
        // once the call's log is taken, nothing more is sent.
        let Some(sent) = log.sending(hop) else {
            return Err(Failure::Network("the call ended before the request was sent".to_string()));
        };
        let answered = self
            .transport
            .send(policy.max_response_bytes, &policy.redactor, method, url, headers, body.clone(), deadline)
            .await;
        let answer = match &answered {
            Ok(response) => Answer::Response { status: response.status, retry_after: response.header("retry-after") },
            Err(Failure::Unreachable(_)) => Answer::Unreachable,
            Err(_) => Answer::Inconclusive,
        };
        self.upstreams.answered(&origin, identity, answer);
        match answered {
            Ok(response) => Ok((response, sent)),
            Err(failure) => {
                log.finished(sent, Err(&failure));
                Err(failure)
            }
        }
    }

    /// The cache, key and request of a hop the cache may answer: a GET without a body, of a
    /// server whose policy allows caching, while `[egress.cache]` is on.
    #[allow(clippy::too_many_arguments)]
    fn cacheable(
        &self,
        policy: &ServerPolicy,
        method: &reqwest::Method,
        url: &url::Url,
        hop_url: &url::Url,
        hop_headers: &HeaderMap,
        body: Option<&Bytes>,
        identity: CredentialIdentity,
    ) -> Option<Cacheable<'_>> {
        let cache = self.cache.as_ref().filter(|_| policy.cache && body.is_none())?;
        let server = policy.server.as_ref()?;
        let request = CacheRequest::new(method, hop_url, hop_headers)?;
        // Keyed by the URL before credentials were added: the identity stands for them.
        let key = CacheKey { server: server.to_string(), identity, method: method.to_string(), url: url.to_string() };
        Some((cache, key, request))
    }
}

/// Stores a response if the cache may, and says which it did.
fn store(cache: &ResponseCache, key: CacheKey, request: &CacheRequest, response: &RawResponse) -> CacheUse {
    if cache.store(key, request, response) { CacheUse::Stored } else { CacheUse::Miss }
}

/// Completes a hop's log entry with its response. A response from the cache is logged only now,
/// and is not used if the call's log was taken meanwhile.
fn complete(log: &EgressLog, hop: &Hop<'_>, answered: Answered, response: &RawResponse) -> Result<(), Failure> {
    let answer = (response.status, response.body.len(), response.scrubs);
    match answered {
        Answered::Sent(sent) => log.finished(sent, Ok(answer)),
        Answered::FromCache => {
            if !log.answered_from_cache(hop, answer) {
                return Err(Failure::Network("the call ended before the cached response was used".to_string()));
            }
        }
    }
    Ok(())
}

impl CallEgress {
    /// The outbound requests this call made, for the call log once the call has ended. A request
    /// still in flight is logged as cut off by the end of the call, and none is sent after this
    /// (see [`log`]).
    pub fn take_log(&self) -> Vec<EgressRecord> {
        self.log.take()
    }
}

impl FetchHost for CallEgress {
    fn fetch(&self, request: FetchRequest, deadline: Instant) -> BoxFuture<'static, Result<FetchResponse, FetchError>> {
        let egress = self.egress.clone();
        let policy = self.policy.clone();
        let log = self.log.clone();
        let read_only = self.read_only;
        Box::pin(async move {
            egress.fetch(&policy, request, read_only, deadline, &log).await.map_err(|failure| match failure {
                Failure::Denied { host, .. } => FetchError::Denied(format!(
                    "not allowed by network policy: {host} (to allow it, add it to the prompt or to allow_domains)"
                )),
                Failure::Refused(reason) => FetchError::Denied(format!("not allowed by network policy: {reason}")),
                Failure::Limit(message) => FetchError::Limit(message),
                Failure::Held(message) => FetchError::Network(message),
                Failure::Network(_) | Failure::Unreachable(_) => {
                    FetchError::Network("network error: the request could not be completed".to_string())
                }
            })
        })
    }
}
