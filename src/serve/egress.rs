//! The egress policy: the only way a handler reaches the network.
//!
//! Every `fetch` from an isolate arrives at [`CallEgress::fetch`], which applies this policy:
//!
//! 1. The URL is parsed once (WHATWG, the `url` crate) and exactly that parsed URL is sent. Only
//!    `http` and `https`; no userinfo; port 0 refused; longer than [`MAX_URL_BYTES`] refused.
//! 2. The canonical host (IDNA, lowercase, one trailing dot stripped) must equal a domain on the
//!    server's whitelist or end with `.` + that domain (see [`crate::whitelist`]). IP-literal hosts
//!    must be whitelisted as that exact IP.
//! 3. Host names are resolved by the daemon: `[egress.resolve]` first, DNS otherwise. If **any**
//!    resolved address (or an IP literal) is not globally routable — loopback, RFC 1918, CGNAT,
//!    link-local (cloud metadata), unspecified, multicast, broadcast, reserved, documentation,
//!    benchmarking, or their IPv6 equivalents including v4-mapped, NAT64 of those, ULA — the
//!    request is refused unless `[egress] allow_private_networks` is on. The connection is made
//!    only to the addresses that were vetted: the resolver that vets them is the one the HTTP
//!    client connects with, so there is no second lookup to rebind.
//! 4. Redirects are followed by this module, never by the HTTP client: at most
//!    `[egress] max_redirects`, each hop checked in full as in 1–3. A cross-origin hop drops
//!    `Authorization`, `Cookie` and `Proxy-Authorization`. `redirect: "manual"` returns the 3xx
//!    response; `redirect: "error"` fails on it.
//! 5. System proxies are ignored. Hop-by-hop and forbidden request headers (`Host`, `Connection`,
//!    `Content-Length`, `Transfer-Encoding`, `TE`, `Upgrade`, `Keep-Alive`, `Proxy-*`, `Trailer`,
//!    `Expect`) are refused; `CONNECT`, `TRACE` and `TRACK` are refused; the request body is
//!    capped at [`MAX_REQUEST_BODY_BYTES`].
//! 6. The response body is streamed and counted against `[sandbox] max_response_bytes`; the
//!    connect timeout, an idle-read timeout and the call's remaining wall time all apply.
//! 7. The handler sees only "not allowed by network policy: <host> …" or "network error …"; it
//!    never sees resolved addresses or why a connection failed. The operator sees the full reason
//!    in the call's egress log.
//!
//! The module fails closed: anything it cannot classify is refused.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::catalog::EgressRecord;
use crate::config::{Config, EgressConfig};
use crate::serve::isolate::{FetchError, FetchHost, FetchRequest, FetchResponse};
use crate::whitelist::{CanonicalHost, Whitelist};

/// Longest URL a handler may fetch.
pub const MAX_URL_BYTES: usize = 16 * 1024;
/// Largest request body a handler may send.
pub const MAX_REQUEST_BODY_BYTES: usize = 8 * 1024 * 1024;

const FORBIDDEN_HEADERS: &[&str] =
    &["host", "connection", "content-length", "transfer-encoding", "te", "upgrade", "keep-alive", "trailer", "expect"];
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

/// The daemon-wide egress engine: one HTTP client with the vetting resolver.
pub struct Egress {
    client: reqwest::Client,
    allow_private_networks: bool,
    max_redirects: u32,
    read_timeout: Duration,
}

/// What one server's handlers may do.
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    pub whitelist: Whitelist,
    pub max_response_bytes: u64,
    /// Skip the whitelist (every other rule still applies). Only for fetching documentation at
    /// generation time, where the operator's prompt names the hosts; never for handlers.
    pub any_host: bool,
}

/// The fetch host handed to one call's isolate; records every request it sees.
pub struct CallEgress {
    egress: Arc<Egress>,
    policy: Arc<ServerPolicy>,
    log: Arc<Mutex<Vec<EgressRecord>>>,
}

/// Why a request was not made or failed; `Denied` reasons are policy decisions.
#[derive(Debug)]
enum Failure {
    /// The host may not be reached (whitelist, address rules).
    Denied {
        host: String,
        reason: String,
    },
    /// The request's shape is not allowed (scheme, credentials, method, headers).
    Refused(String),
    Network(String),
    Limit(String),
}

/// Raised by [`VettingResolver`] so the policy decision survives reqwest's error wrapping.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct AddressRefused(String);

impl Egress {
    pub fn new(config: &Config) -> anyhow::Result<Egress> {
        let settings: &EgressConfig = &config.egress;
        let resolve = Arc::new(
            settings.resolve.iter().map(|(host, ip)| (host.to_ascii_lowercase(), *ip)).collect::<BTreeMap<_, _>>(),
        );
        let resolver = VettingResolver { resolve, allow_private_networks: settings.allow_private_networks };
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .user_agent(settings.user_agent.clone())
            .dns_resolver(Arc::new(resolver))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Egress {
            client,
            allow_private_networks: settings.allow_private_networks,
            max_redirects: settings.max_redirects,
            read_timeout: Duration::from_millis(settings.read_timeout_ms),
        })
    }

    /// A fetch host for one call of a server.
    pub fn for_call(self: &Arc<Self>, policy: Arc<ServerPolicy>) -> CallEgress {
        CallEgress { egress: self.clone(), policy, log: Arc::new(Mutex::new(Vec::new())) }
    }

    /// Fetches a documentation page for generation: any host, under every other rule of this
    /// policy (address vetting, `[egress.resolve]`, redirects re-checked, size cap, deadline).
    /// The error is the operator-facing reason.
    pub async fn fetch_document(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        max_bytes: u64,
        deadline: Instant,
    ) -> Result<FetchResponse, String> {
        let policy = ServerPolicy { whitelist: Whitelist::default(), max_response_bytes: max_bytes, any_host: true };
        let request = FetchRequest {
            url: url.to_string(),
            method: "GET".to_string(),
            headers,
            body: None,
            redirect: "follow".to_string(),
        };
        let log = Mutex::new(Vec::new());
        self.fetch(&policy, request, deadline, &log).await.map_err(|failure| match failure {
            Failure::Denied { host, reason } => format!("{host}: {reason}"),
            Failure::Refused(reason) | Failure::Network(reason) | Failure::Limit(reason) => reason,
        })
    }

    /// Runs one fetch under the policy, following redirects hop by hop.
    async fn fetch(
        &self,
        policy: &ServerPolicy,
        request: FetchRequest,
        deadline: Instant,
        log: &Mutex<Vec<EgressRecord>>,
    ) -> Result<FetchResponse, Failure> {
        let prepared = prepare(&request);
        let (mut method, mut headers, mut url) = match prepared {
            Ok(prepared) => prepared,
            Err(failure) => {
                let (host, path) = url::Url::parse(&request.url)
                    .map(|u| (u.host_str().unwrap_or("").to_string(), u.path().to_string()))
                    .unwrap_or_default();
                record(log, &request.method, &host, &path, Instant::now(), None, 0, Some(&failure));
                return Err(failure);
            }
        };
        let mut body = request.body;
        let mut redirected = false;
        let mut hops = 0u32;
        loop {
            let started = Instant::now();
            let host = self.check_url(policy, &url).inspect_err(|failure| {
                record(log, method.as_str(), url.host_str().unwrap_or(""), url.path(), started, None, 0, Some(failure));
            })?;
            let outcome = self.send_once(policy, &method, &url, &headers, body.clone(), deadline).await;
            let response = match outcome {
                Ok(response) => response,
                Err(failure) => {
                    let failure = match failure {
                        // The resolver refuses a name whose addresses are not allowed.
                        Failure::Denied { reason, .. } => Failure::Denied { host: host.to_string(), reason },
                        other => other,
                    };
                    record(
                        log,
                        method.as_str(),
                        url.host_str().unwrap_or(""),
                        url.path(),
                        started,
                        None,
                        0,
                        Some(&failure),
                    );
                    return Err(failure);
                }
            };
            let status = response.status;
            let location = response.location.clone();
            record(
                log,
                method.as_str(),
                url.host_str().unwrap_or(""),
                url.path(),
                started,
                Some(status),
                response.body.len(),
                None,
            );

            let is_redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
            if !is_redirect || request.redirect == "manual" || location.is_none() {
                return Ok(response.into_fetch_response(url.as_str(), redirected));
            }
            if request.redirect == "error" {
                return Err(Failure::Network(format!("redirect ({status}) refused because redirect is \"error\"")));
            }
            hops += 1;
            if hops > self.max_redirects {
                return Err(Failure::Network(format!("more than {} redirects", self.max_redirects)));
            }
            let next = url
                .join(location.as_deref().unwrap_or_default())
                .map_err(|e| Failure::Network(format!("invalid redirect location: {e}")))?;
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

    /// Checks one hop's URL against everything that can be decided before connecting.
    fn check_url(&self, policy: &ServerPolicy, url: &url::Url) -> Result<CanonicalHost, Failure> {
        let host = CanonicalHost::of_url(url).ok_or_else(|| {
            Failure::Refused(format!("only http and https URLs can be fetched, not {}:", url.scheme()))
        })?;
        let deny = |reason: String| Failure::Denied { host: host.to_string(), reason };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Failure::Refused(format!("only http and https URLs can be fetched, not {}:", url.scheme())));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Failure::Refused(
                "URLs with credentials (user:password@) cannot be fetched; send an Authorization header".into(),
            ));
        }
        if url.port() == Some(0) {
            return Err(Failure::Refused("port 0 cannot be fetched".into()));
        }
        if !policy.any_host && !policy.whitelist.allows(&host) {
            return Err(deny("host is not on the server's whitelist".into()));
        }
        if let CanonicalHost::Ip(ip) = &host {
            // The HTTP client does not consult the resolver for IP literals, so vet them here.
            if !self.allow_private_networks && !is_global(*ip) {
                return Err(deny(format!("{ip} is not a public address")));
            }
        }
        // Names (mapped or not) are vetted by `VettingResolver`, the one resolver the client uses.
        Ok(host)
    }

    async fn send_once(
        &self,
        policy: &ServerPolicy,
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
        let limit = policy.max_response_bytes;
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

struct RawResponse {
    status: u16,
    status_text: String,
    location: Option<String>,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl RawResponse {
    fn into_fetch_response(self, url: &str, redirected: bool) -> FetchResponse {
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

impl CallEgress {
    /// The outbound requests this call made so far, for the call log.
    pub fn take_log(&self) -> Vec<EgressRecord> {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl FetchHost for CallEgress {
    fn fetch(&self, request: FetchRequest, deadline: Instant) -> BoxFuture<'static, Result<FetchResponse, FetchError>> {
        let egress = self.egress.clone();
        let policy = self.policy.clone();
        let log = self.log.clone();
        Box::pin(async move {
            egress.fetch(&policy, request, deadline, &log).await.map_err(|failure| match failure {
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

/// Checks everything about a request that does not depend on the hop: method, headers, body size, URL syntax.
fn prepare(request: &FetchRequest) -> Result<(reqwest::Method, HeaderMap, url::Url), Failure> {
    let method = check_method(&request.method)?;
    let headers = check_headers(&request.headers)?;
    if request.body.as_ref().is_some_and(|b| b.len() > MAX_REQUEST_BODY_BYTES) {
        return Err(Failure::Limit(format!("request body is larger than {MAX_REQUEST_BODY_BYTES} bytes")));
    }
    Ok((method, headers, parse_url(&request.url)?))
}

fn parse_url(raw: &str) -> Result<url::Url, Failure> {
    if raw.len() > MAX_URL_BYTES {
        return Err(Failure::Limit(format!("URL is longer than {MAX_URL_BYTES} bytes")));
    }
    url::Url::parse(raw).map_err(|e| Failure::Refused(format!("not an absolute http(s) URL: {e}")))
}

fn check_method(raw: &str) -> Result<reqwest::Method, Failure> {
    let upper = raw.to_ascii_uppercase();
    if matches!(upper.as_str(), "CONNECT" | "TRACE" | "TRACK") {
        return Err(Failure::Refused(format!("method {upper} is not allowed")));
    }
    reqwest::Method::from_bytes(upper.as_bytes()).map_err(|_| Failure::Network(format!("invalid HTTP method {raw:?}")))
}

fn check_headers(raw: &[(String, String)]) -> Result<HeaderMap, Failure> {
    let mut headers = HeaderMap::new();
    for (name, value) in raw {
        let lower = name.to_ascii_lowercase();
        if FORBIDDEN_HEADERS.contains(&lower.as_str()) || lower.starts_with("proxy-") && lower != "proxy-authorization"
        {
            return Err(Failure::Refused(format!("request header {name:?} is set by the daemon, not by handlers")));
        }
        let name = HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| Failure::Network(format!("invalid header name {name:?}")))?;
        let value =
            HeaderValue::from_str(value).map_err(|_| Failure::Network(format!("invalid value for header {name}")))?;
        headers.append(name, value);
    }
    if headers.contains_key("proxy-authorization") {
        return Err(Failure::Refused(
            "request header \"Proxy-Authorization\" is set by the daemon, not by handlers".into(),
        ));
    }
    Ok(headers)
}

/// Maps a reqwest error to a failure, recognising the resolver's policy refusals.
fn classify(error: &reqwest::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<AddressRefused>() {
            return Failure::Denied { host: String::new(), reason: refused.0.clone() };
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

#[allow(clippy::too_many_arguments)]
fn record(
    log: &Mutex<Vec<EgressRecord>>,
    method: &str,
    host: &str,
    path: &str,
    started: Instant,
    status: Option<u16>,
    bytes: usize,
    failure: Option<&Failure>,
) {
    let (allowed, reason) = match failure {
        None => (true, None),
        Some(Failure::Denied { reason, .. }) | Some(Failure::Refused(reason)) => (false, Some(reason.clone())),
        Some(Failure::Network(reason)) | Some(Failure::Limit(reason)) => (true, Some(reason.clone())),
    };
    let entry = EgressRecord {
        method: method.chars().take(16).collect(),
        host: host.chars().take(255).collect(),
        // The query string is left out: it often carries API keys.
        path: path.chars().take(512).collect(),
        allowed,
        status: status.map(i64::from),
        bytes: bytes as i64,
        duration_us: started.elapsed().as_micros() as i64,
        reason,
    };
    log.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
}

/// The only resolver the egress client uses: `[egress.resolve]` first, then DNS, and every
/// resulting address vetted before the client may connect to it.
struct VettingResolver {
    resolve: Arc<BTreeMap<String, IpAddr>>,
    allow_private_networks: bool,
}

impl reqwest::dns::Resolve for VettingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let mapped = self.resolve.get(&name).copied();
        let allow_private = self.allow_private_networks;
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = match mapped {
                // Port 0 tells the connector to use the URL's port.
                Some(ip) => vec![SocketAddr::new(ip, 0)],
                None => tokio::net::lookup_host((name.as_str(), 0)).await?.collect(),
            };
            if addresses.is_empty() {
                return Err(Box::new(AddressRefused(format!("{name} has no addresses"))) as _);
            }
            if !allow_private && let Some(bad) = addresses.iter().find(|a| !is_global(a.ip())) {
                return Err(Box::new(AddressRefused(format!(
                    "{name} resolves to {}, which is not a public address",
                    bad.ip()
                ))) as _);
            }
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether an address is globally routable (the complement of every special-purpose range that
/// could reach the daemon's own machine, its network or its cloud's metadata service).
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                   // "this network", includes 0.0.0.0
        || a == 10                             // RFC 1918
        || a == 127                            // loopback
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254)              // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b)) // RFC 1918
        || (a == 192 && b == 0 && c == 0)      // IETF protocol assignments 192.0.0/24
        || (a == 192 && b == 0 && c == 2)      // TEST-NET-1
        || (a == 192 && b == 88 && c == 99)    // 6to4 relay anycast
        || (a == 192 && b == 168)              // RFC 1918
        || (a == 198 && (b == 18 || b == 19))  // benchmarking 198.18/15
        || (a == 198 && b == 51 && c == 100)   // TEST-NET-2
        || (a == 203 && b == 0 && c == 113)    // TEST-NET-3
        || a >= 224) // multicast 224/4, reserved 240/4, broadcast
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_global_v4(v4);
    }
    let segments = ip.segments();
    // NAT64 (64:ff9b::/96) embeds an IPv4 address; judge the embedded one.
    if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2..6] == [0, 0, 0, 0] {
        let v4 =
            Ipv4Addr::new((segments[6] >> 8) as u8, segments[6] as u8, (segments[7] >> 8) as u8, segments[7] as u8);
        return is_global_v4(v4);
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || segments[0..6] == [0, 0, 0, 0, 0, 0]       // IPv4-compatible (deprecated) ::/96
        || segments[0] == 0x64 && segments[1] == 0xff9b && segments[2] == 1 // local NAT64 64:ff9b:1::/48
        || segments[0] == 0x100 && segments[1..4] == [0, 0, 0] // discard-only 100::/64
        || (segments[0] == 0x2001 && segments[1] < 0x200) // IETF protocol assignments 2001::/23 (incl. Teredo)
        || (segments[0] == 0x2001 && segments[1] == 0xdb8) // documentation
        || segments[0] == 0x2002                    // 6to4 (embeds arbitrary IPv4)
        || segments[0] == 0x3fff && segments[1] < 0x1000 // documentation 3fff::/20
        || (segments[0] & 0xfe00) == 0xfc00         // unique local fc00::/7 (incl. fd00:ec2::254)
        || (segments[0] & 0xffc0) == 0xfe80         // link-local fe80::/10
        || (segments[0] & 0xffc0) == 0xfec0         // site-local (deprecated) fec0::/10
        || (segments[0] & 0xff00) == 0xff00) // multicast
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_global_addresses() {
        for ip in [
            "0.0.0.0",
            "10.0.0.1",
            "127.0.0.1",
            "127.1.2.3",
            "100.64.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "fec0::1",
            "100::1",
            "2001::1",
        ] {
            assert!(!is_global(ip.parse().unwrap()), "{ip} must not be global");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_global(ip.parse().unwrap()), "{ip} must be global");
        }
    }

    fn resolver(allow_private_networks: bool) -> VettingResolver {
        let mut map = BTreeMap::new();
        map.insert("mapped.test".to_string(), "10.0.0.7".parse().unwrap());
        map.insert("public.test".to_string(), "93.184.216.34".parse().unwrap());
        VettingResolver { resolve: Arc::new(map), allow_private_networks }
    }

    async fn lookup(resolver: &VettingResolver, name: &str) -> Result<Vec<SocketAddr>, String> {
        use reqwest::dns::Resolve;
        let name: reqwest::dns::Name = name.parse().unwrap();
        resolver.resolve(name).await.map(|addrs| addrs.collect()).map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn the_resolver_vets_real_dns_answers_and_mappings() {
        // `localhost` goes through the system resolver (hosts file, no network) and answers loopback.
        let strict = resolver(false);
        let refused = lookup(&strict, "localhost").await.unwrap_err();
        assert!(refused.contains("not a public address"), "{refused}");
        assert!(lookup(&strict, "mapped.test").await.is_err());
        assert!(lookup(&strict, "MAPPED.test.").await.is_err(), "names are canonicalised before the lookup");
        let public = lookup(&strict, "public.test").await.unwrap();
        assert_eq!(public, vec!["93.184.216.34:0".parse().unwrap()], "port 0 keeps the URL's port");

        let open = resolver(true);
        assert!(lookup(&open, "localhost").await.unwrap().iter().all(|a| a.ip().is_loopback()));
        assert_eq!(lookup(&open, "mapped.test").await.unwrap()[0].ip().to_string(), "10.0.0.7");
    }
}
