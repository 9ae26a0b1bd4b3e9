//! The HTTP transport under the policy: one reqwest client with no proxy, no automatic redirects
//! and the vetting resolver, and the reading of one response under the size and time limits.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::header::HeaderMap;

use super::own_socket::{OwnAddressRefused, OwnAddresses, RefuseOwnAddressLayer};
use super::policy::Failure;
use super::resolver::{AddressRefused, VettingResolver};
use crate::config::EgressConfig;
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
    /// timeout and the deadline.
    pub async fn send(
        &self,
        max_response_bytes: u64,
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
            Ok(Err(error)) => return Err(classify(&error)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let status_text = status.canonical_reason().unwrap_or("").to_string();
        let location =
            response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
        let response_headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
            .collect();
        let limit = max_response_bytes;
        if response.content_length().is_some_and(|len| len > limit) {
            return Err(Failure::Limit(format!("response body is larger than max_response_bytes ({limit} bytes)")));
        }
        let mut stream = response.bytes_stream();
        let mut body = BytesMut::new();
        loop {
            let idle = tokio::time::Instant::now() + self.read_timeout;
            let next = tokio::time::timeout_at(idle.min(deadline), stream.next()).await;
            match next {
                Err(_) => return Err(Failure::Network("timed out while reading the response body".into())),
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(classify(&error)),
                Ok(Some(Ok(chunk))) => {
                    if body.len() as u64 + chunk.len() as u64 > limit {
                        return Err(Failure::Limit(format!(
                            "response body is larger than max_response_bytes ({limit} bytes)"
                        )));
                    }
                    body.extend_from_slice(&chunk);
                }
            }
        }
        Ok(RawResponse {
            status: status.as_u16(),
            status_text,
            location,
            headers: response_headers,
            body: body.freeze(),
        })
    }
}

/// A response as received, before the redirect decision.
pub struct RawResponse {
    pub status: u16,
    pub status_text: String,
    pub location: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl RawResponse {
    pub fn into_fetch_response(self, url: &str, redirected: bool) -> FetchResponse {
        FetchResponse {
            status: self.status,
            status_text: self.status_text,
            url: url.to_string(),
            redirected,
            headers: self.headers,
            body: self.body,
        }
    }
}

/// Maps a reqwest error to a failure, recognising the resolver's policy refusals.
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
    Failure::Network(chain)
}
