//! Egress: the only way a handler reaches the network, and how generation fetches documentation.
//!
//! The rules are in [`policy`] (its module doc is the specification, its checks need no I/O);
//! [`resolver`] vets every address a name resolves to before the client may connect to it;
//! [`transport`] sends one request and reads the response under the limits; [`log`] records
//! every hop for the operator, entering each before it is sent, so every request that reaches
//! the network is in the call log, also one still in flight when its call ends; [`inject`] adds
//! the server's credentials to the hops they match. This module ties them together: it follows
//! redirects hop by hop, checking each in full, and turns failures into what a handler may see.
//! Each hop that leaves is an `outbound request` span (`telemetry::traces`), which names the URL
//! without query values and, with `[telemetry] propagate_traceparent`, is sent as `traceparent`.
//!
//! A credential's value never enters the isolate. Upstreams echo requests (in bodies, headers,
//! redirect URLs), and a handler holding the value could transform it past any later check and
//! send it to another host it may fetch. So every response of a server that has credentials is
//! scrubbed of all their values, in every wire form (`credentials::redact`), before it becomes a
//! `FetchResponse`: headers and `Location` as they arrive, the body chunk by chunk under
//! `max_response_bytes`, and the final URL. That is every response, not only those of hops that
//! carried a credential, since an upstream may keep a value and hand it back later or from another
//! of its hosts. Each hop's egress log entry counts the values taken out of its response.

pub mod inject;
pub mod log;
pub mod own_socket;
pub mod policy;
pub mod resolver;
pub mod transport;

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use tracing::Instrument;

use self::log::{EgressLog, Hop};
use self::policy::{CREDENTIAL_HEADERS, Failure};
pub use self::policy::{HostRule, MAX_REQUEST_BODY_BYTES, MAX_URL_BYTES, ServerPolicy, is_forbidden_header, is_global};
use self::transport::Transport;
use crate::catalog::EgressRecord;
use crate::config::Config;
use crate::serve::isolate::{FetchError, FetchHost, FetchRequest, FetchResponse};
use crate::telemetry::traces;

/// The daemon-wide egress engine: one HTTP client with the vetting resolver.
pub struct Egress {
    transport: Transport,
    allow_private_networks: bool,
    max_redirects: u32,
    /// `[telemetry] propagate_traceparent` with traces on: each hop carries its span's
    /// `traceparent`.
    propagate_traceparent: bool,
}

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
            propagate_traceparent: config.telemetry.traces_enabled() && config.telemetry.propagate_traceparent,
        })
    }

    /// A fetch host for one call of a server's tool; `read_only` for a tool annotated
    /// `readOnlyHint: true`, whose requests may only read.
    pub fn for_call(self: &Arc<Self>, policy: Arc<ServerPolicy>, read_only: bool) -> CallEgress {
        CallEgress { egress: self.clone(), policy, read_only, log: Arc::default() }
    }

    /// Fetches a documentation page for generation: any host, under every other rule of the
    /// policy (address vetting, `[egress.resolve]`, redirects re-checked, size cap, deadline).
    /// The error is the operator-facing reason.
    pub async fn fetch_document(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        max_bytes: u64,
        deadline: Instant,
    ) -> Result<FetchResponse, String> {
        let policy = ServerPolicy {
            hosts: HostRule::AnyHost,
            max_response_bytes: max_bytes,
            credentials: Vec::new(),
            redactor: Default::default(),
        };
        let request = FetchRequest {
            url: url.to_string(),
            method: "GET".to_string(),
            headers,
            body: None,
            redirect: "follow".to_string(),
        };
        self.fetch(&policy, request, false, deadline, &EgressLog::default()).await.map_err(|failure| match failure {
            Failure::Denied { host, reason } => format!("{host}: {reason}"),
            other => other.reason().to_string(),
        })
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
            log.refused(
                &Hop { method: &request.method, host, path, started: Instant::now(), credentials: &[] },
                failure,
            );
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
            // Logged before it leaves, so a call that ends while it is in flight still has it;
            // once the call's log is taken, nothing more is sent.
            let Some(sent) = log.sending(&hop) else {
                return Err(Failure::Network("the call ended before the request was sent".to_string()));
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
            let answered = self
                .transport
                .send(
                    policy.max_response_bytes,
                    &policy.redactor,
                    &method,
                    &hop_url,
                    &hop_headers,
                    body.clone(),
                    deadline,
                )
                .instrument(hop_span.clone())
                .await;
            let mut response = match answered {
                Ok(response) => response,
                Err(failure) => {
                    let kind = match &failure {
                        Failure::Limit(_) => "limit",
                        Failure::Network(_) => "network",
                        Failure::Denied { .. } | Failure::Refused(_) => "denied",
                    };
                    hop_span.record("error.type", kind);
                    log.finished(sent, Err(&failure));
                    return Err(failure);
                }
            };
            let status = response.status;
            hop_span.record("http.response.status_code", status);
            let is_redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
            let location = match response.location.as_deref() {
                Some(location) if is_redirect && request.redirect != "manual" => location.to_string(),
                _ => {
                    // The URL is the handler's or built from scrubbed locations; scrubbed again
                    // because parsing may have re-encoded a value into a form found only now.
                    let (final_url, scrubs) = policy.redactor.counted_text(url.as_str());
                    response.scrubs += scrubs;
                    log.finished(sent, Ok((status, response.body.len(), response.scrubs)));
                    return Ok(response.into_fetch_response(final_url.into_owned(), redirected));
                }
            };
            log.finished(sent, Ok((status, response.body.len(), response.scrubs)));
            if request.redirect == "error" {
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
                Failure::Network(_) => {
                    FetchError::Network("network error: the request could not be completed".to_string())
                }
            })
        })
    }
}
