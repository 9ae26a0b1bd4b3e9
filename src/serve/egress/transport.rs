//! The HTTP transport under the policy: one reqwest client with no proxy, no automatic redirects
//! and the vetting resolver, and the reading of one response under the size and time limits,
//! taking the server's credential values out of it on the way (headers, `Location`, and the body
//! chunk by chunk as it arrives), so no response leaves this module with a value in it.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::header::HeaderMap;

use super::own_socket::{OwnAddressRefused, OwnAddresses, RefuseOwnAddressLayer};
use super::policy::Failure;
use super::resolver::{AddressRefused, VettingResolver};
use crate::config::EgressConfig;
use crate::credentials::Redactor;
use crate::serve::isolate::FetchResponse;

pub struct Transport {
    client: reqwest::Client,
    read_timeout: Duration,
}

impl Transport {
    pub fn new(settings: &EgressConfig, own: OwnAddresses) -> anyhow::Result<Transport> {
        let resolver = VettingResolver::new(&settings.resolve, settings.allow_private_networks);
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .user_agent(settings.user_agent.clone())
            .dns_resolver(std::sync::Arc::new(resolver))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .connector_layer(RefuseOwnAddressLayer::new(own))
            .build()?;
        Ok(Transport { client, read_timeout: Duration::from_millis(settings.read_timeout_ms) })
    }

    /// One request, no redirects followed; the body is read under the size cap, the idle-read
    /// timeout and the deadline. Every value `redactor` knows is replaced in the response's
    /// headers and body; `max_response_bytes` bounds both the body received and the body
    /// returned (a marker can be longer than the form it replaces).
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        max_response_bytes: u64,
        redactor: &Redactor,
        method: &reqwest::Method,
        url: &url::Url,
        headers: &HeaderMap,
        body: Option<Bytes>,
        deadline: Instant,
    ) -> Result<RawResponse, Failure> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let mut builder = self.client.request(method.clone(), url.clone()).headers(headers.clone());
        if let Some(body) = body {
            builder = builder.body(body);
        }
        let response = match tokio::time::timeout_at(deadline, builder.send()).await {
            Err(_) => return Err(Failure::Network("timed out before the response headers arrived".into())),
            // Without the URL: it carries a query credential, and the reason goes to the call log.
            Ok(Err(error)) => return Err(classify(&error.without_url())),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let status_text = status.canonical_reason().unwrap_or("").to_string();
        let mut scrubs = 0;
        let mut scrubbed = |text: &str| {
            let (text, count) = redactor.counted_text(text);
            scrubs += count;
            text.into_owned()
        };
        // The location is scrubbed before it is followed too: an upstream that copies a query
        // credential into a redirect to another host would otherwise have the egress send it there.
        let location =
            response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(&mut scrubbed);
        let response_headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str().to_string(), scrubbed(value.to_str().ok()?))))
            .collect();
        let limit = max_response_bytes;
        let too_large = || Failure::Limit(format!("response body is larger than max_response_bytes ({limit} bytes)"));
        if response.content_length().is_some_and(|len| len > limit) {
            return Err(too_large());
        }
        let mut stream = response.bytes_stream();
        let mut received = 0u64;
        let mut body = BytesMut::new();
        let mut redaction = redactor.body();
        loop {
            let idle = tokio::time::Instant::now() + self.read_timeout;
            let next = tokio::time::timeout_at(idle.min(deadline), stream.next()).await;
            match next {
                Err(_) => return Err(Failure::Network("timed out while reading the response body".into())),
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(classify(&error.without_url())),
                Ok(Some(Ok(chunk))) => {
                    received += chunk.len() as u64;
                    if received > limit {
                        return Err(too_large());
                    }
                    redaction.push(&chunk, &mut body);
                    if body.len() as u64 > limit {
                        return Err(too_large());
                    }
                }
            }
        }
        scrubs += redaction.finish(&mut body);
        if body.len() as u64 > limit {
            return Err(too_large());
        }
        Ok(RawResponse {
            status: status.as_u16(),
            status_text,
            location,
            headers: response_headers,
            body: body.freeze(),
            scrubs,
        })
    }
}

/// A response as received (with credential values taken out), before the redirect decision.
pub struct RawResponse {
    pub status: u16,
    pub status_text: String,
    pub location: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// How many credential values were replaced in the headers and the body.
    pub scrubs: usize,
}

impl RawResponse {
    /// The first value of the header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn into_fetch_response(self, url: String, redirected: bool) -> FetchResponse {
        FetchResponse {
            status: self.status,
            status_text: self.status_text,
            url,
            redirected,
            headers: self.headers,
            body: self.body,
        }
    }
}

/// Maps a reqwest error to a failure, recognising the resolver's policy refusals and telling
/// connection failures (which count against the origin's circuit breaker) from the others.
fn classify(error: &reqwest::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<AddressRefused>() {
            return Failure::Denied { host: refused.host.clone(), reason: refused.reason.clone() };
        }
        if let Some(refused) = current.downcast_ref::<OwnAddressRefused>() {
            return Failure::Refused(refused.to_string());
        }
        source = current.source();
    }
    let mut chain = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(current) = source {
        chain.push_str(": ");
        chain.push_str(&current.to_string());
        source = current.source();
    }
    if error.is_connect() { Failure::Unreachable(chain) } else { Failure::Network(chain) }
}
