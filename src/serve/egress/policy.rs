//! The egress policy, and the checks that decide it without any I/O.
//!
//! Every `fetch` from an isolate arrives at `CallEgress::fetch` (in the parent module), which applies this policy:
//!
//! 1. The URL is parsed once (WHATWG, the `url` crate) and exactly that parsed URL is sent. Only
//!    `http` and `https`; no userinfo; port 0 refused; longer than [`MAX_URL_BYTES`] refused. A
//!    URL whose path, as the handler wrote it, holds a `.` or `..` segment (also percent-encoded,
//!    in any case, or encoded more than once) is refused before it is parsed: parsing would
//!    resolve it, so an argument a handler put into a path could climb to another resource and
//!    reach it with the server's credentials (see `dot_segment`).
//! 2. The canonical host (IDNA, lowercase, one trailing dot stripped) must equal a domain on the
//!    server's whitelist or end with `.` + that domain (see [`crate::whitelist`]). IP-literal hosts
//!    must be whitelisted as that exact IP.
//! 3. Host names are resolved by the daemon: `[egress.resolve]` first, DNS otherwise. If **any**
//!    resolved address (or an IP literal) is not globally routable — loopback, RFC 1918, CGNAT,
//!    link-local (cloud metadata), unspecified, multicast, broadcast, reserved, documentation,
//!    benchmarking, or their IPv6 equivalents including v4-mapped, NAT64 of those, ULA — the
//!    request is refused unless `[egress] allow_private_networks` is on. The connection is made
//!    only to the addresses that were vetted: the resolver that vets them (`resolver`) is the one
//!    the HTTP client connects with, so there is no second lookup to rebind.
//! 4. Redirects are followed by the egress module, never by the HTTP client: at most
//!    `[egress] max_redirects`, each hop checked in full as in 1–3. A cross-origin hop drops
//!    `Authorization`, `Cookie` and `Proxy-Authorization`. `redirect: "manual"` returns the 3xx
//!    response; `redirect: "error"` fails on it.
//! 5. System proxies are ignored. Hop-by-hop and forbidden request headers (`Host`, `Connection`,
//!    `Content-Length`, `Transfer-Encoding`, `TE`, `Upgrade`, `Keep-Alive`, `Proxy-*`, `Trailer`,
//!    `Expect`) are refused; `CONNECT`, `TRACE` and `TRACK` are refused; the request body is
//!    capped at [`MAX_REQUEST_BODY_BYTES`].
//! 6. The response body is streamed and counted against `[sandbox] max_response_bytes`; the
//!    connect timeout, an idle-read timeout and the call's remaining wall time all apply.
//! 7. For a server with credentials, every response is scrubbed of their values in every wire
//!    form before the handler sees any of it: headers, `Location` (before it is followed), the
//!    body chunk by chunk, and the final URL (see `credentials::redact`).
//! 8. Before a hop the cache cannot answer is sent, the upstream protection may hold it (the
//!    origin's `Retry-After`, the server's rate limit for the origin) or refuse it (those, when
//!    the wait would end after the call's deadline, or the origin's open circuit breaker); see
//!    `upstream`. GET responses may be answered from the cache, partitioned by server and
//!    credentials; see `cache`.
//! 9. The handler sees only "not allowed by network policy: <host> …" or "network error …"; it
//!    never sees resolved addresses or why a connection failed; a request the upstream protection
//!    refused says why and when to try again. The operator sees the full reason in the call's
//!    egress log (`log`).
//!
//! The egress fails closed: anything it cannot classify is refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::upstream::{UpstreamLimitError, UpstreamLimits};
use crate::credentials::{Credential, Redactor};
use crate::serve::isolate::FetchRequest;
use crate::toolset::ServerId;
use crate::whitelist::{CanonicalHost, Whitelist};

/// Longest URL a handler may fetch.
pub const MAX_URL_BYTES: usize = 16 * 1024;
/// Largest request body a handler may send.
pub const MAX_REQUEST_BODY_BYTES: usize = 8 * 1024 * 1024;

const FORBIDDEN_HEADERS: &[&str] =
    &["host", "connection", "content-length", "transfer-encoding", "te", "upgrade", "keep-alive", "trailer", "expect"];

/// What one server's handlers may do.
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    pub hosts: HostRule,
    pub max_response_bytes: u64,
    /// Credentials added to the hops whose host they match (see `inject`).
    pub credentials: Vec<Credential>,
    /// Takes those credentials' values out of every response before the handler sees it, and
    /// out of what calls return and log.
    pub redactor: Redactor,
    /// The server whose handlers this policy is for. Responses are cached only under a server
    /// (partitioned by it), never for documentation fetches or generation self-tests.
    pub server: Option<ServerId>,
    /// Whether this server's GETs use the HTTP cache, when `[egress.cache]` is enabled; the
    /// server's settings may turn it off.
    pub cache: bool,
    /// The server's rate limits per upstream origin, if any (see `upstream`).
    pub upstream_limits: Option<Arc<UpstreamLimits>>,
}

/// Which hosts requests may go to (every other rule of the policy applies either way).
#[derive(Debug, Clone)]
pub enum HostRule {
    /// A server's whitelist: what its handlers may reach.
    Whitelist(Whitelist),
    /// Any host. Only for fetching documentation at generation time, where the operator's prompt
    /// names the hosts; never for handlers.
    AnyHost,
}

impl ServerPolicy {
    /// The policy for a server's handlers.
    /// The same policy with credentials to inject (and to scrub from output).
    pub fn with_credentials(mut self, credentials: Vec<Credential>) -> ServerPolicy {
        self.redactor = Redactor::new(&credentials);
        self.credentials = credentials;
        self
    }

    /// The hosts, limits and server of `policy`, without its credentials.
    pub fn whitelisted_as(policy: &ServerPolicy) -> ServerPolicy {
        ServerPolicy { credentials: Vec::new(), redactor: Redactor::default(), ..policy.clone() }
    }

    pub fn whitelisted(whitelist: Whitelist, max_response_bytes: u64) -> ServerPolicy {
        ServerPolicy {
            hosts: HostRule::Whitelist(whitelist),
            max_response_bytes,
            credentials: Vec::new(),
            redactor: Redactor::default(),
            server: None,
            cache: true,
            upstream_limits: None,
        }
    }

    /// The same policy for the handlers of `server` (which their cached responses are kept under).
    pub fn serving(mut self, server: ServerId) -> ServerPolicy {
        self.server = Some(server);
        self
    }

    /// The same policy with the server's rate limits per upstream origin, as the operator set
    /// them (origin → requests per minute); the error names the entry that is wrong.
    pub fn with_upstream_limits(
        mut self,
        per_minute: &std::collections::BTreeMap<String, u32>,
    ) -> Result<ServerPolicy, UpstreamLimitError> {
        let limits = UpstreamLimits::new(per_minute)?;
        self.upstream_limits = (!limits.is_empty()).then(|| Arc::new(limits));
        Ok(self)
    }
}

/// Why a request was not made or failed, with the operator-facing reason. Each is built whole
/// where the decision is made.
#[derive(Debug)]
pub enum Failure {
    /// The host may not be reached (whitelist, address rules).
    Denied {
        host: String,
        reason: String,
    },
    /// The request's shape is not allowed (scheme, credentials, method, headers).
    Refused(String),
    Network(String),
    /// No connection could be made to the upstream, or it broke before the response arrived.
    Unreachable(String),
    Limit(String),
    /// The upstream protection refused to send it now; the reason says when to try again and is
    /// shown to the handler.
    Held(String),
}

impl Failure {
    /// The operator-facing reason.
    pub fn reason(&self) -> &str {
        match self {
            Failure::Denied { reason, .. }
            | Failure::Refused(reason)
            | Failure::Network(reason)
            | Failure::Unreachable(reason)
            | Failure::Limit(reason)
            | Failure::Held(reason) => reason,
        }
    }

    /// Whether the policy refused the request (as opposed to it failing on the way).
    pub fn is_policy_decision(&self) -> bool {
        matches!(self, Failure::Denied { .. } | Failure::Refused(_))
    }
}

/// The reason, prefixed with the host when the host itself was denied, as operators read it
/// about a fetched document.
impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Denied { host, reason } => write!(f, "{host}: {reason}"),
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for Failure {}

/// Checks one hop's URL against everything that can be decided before connecting: scheme,
/// credentials, port, the host rule, and IP literals (names are vetted by the resolver).
pub fn check_url(
    policy: &ServerPolicy,
    allow_private_networks: bool,
    url: &url::Url,
) -> Result<CanonicalHost, Failure> {
    let host = CanonicalHost::of_url(url)
        .ok_or_else(|| Failure::Refused(format!("only http and https URLs can be fetched, not {}:", url.scheme())))?;
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
    if let HostRule::Whitelist(whitelist) = &policy.hosts
        && !whitelist.allows(&host)
    {
        return Err(deny("host is not on the server's whitelist".into()));
    }
    if let CanonicalHost::Ip(ip) = &host {
        // The HTTP client does not consult the resolver for IP literals, so vet them here.
        if !allow_private_networks && !is_global(*ip) {
            return Err(deny(format!("{ip} is not a public address")));
        }
    }
    Ok(host)
}

/// Checks everything about a request that does not depend on the hop: method, headers, body size, URL syntax.
pub fn prepare(request: &FetchRequest, read_only: bool) -> Result<(reqwest::Method, HeaderMap, url::Url), Failure> {
    let method = check_method(&request.method)?;
    if read_only && !matches!(method, reqwest::Method::GET | reqwest::Method::HEAD | reqwest::Method::OPTIONS) {
        return Err(Failure::Refused(format!(
            "method {method} is not allowed: the tool is annotated readOnlyHint: true, so it may only send GET, \
             HEAD and OPTIONS requests (register it without readOnlyHint: true if it writes)"
        )));
    }
    let headers = check_headers(&request.headers)?;
    if request.body.as_ref().is_some_and(|b| b.len() > MAX_REQUEST_BODY_BYTES) {
        return Err(Failure::Limit(format!("request body is larger than {MAX_REQUEST_BODY_BYTES} bytes")));
    }
    if let Some(segment) = dot_segment(&request.url) {
        return Err(Failure::Refused(format!(
            "the URL's path has a {segment:?} segment, which URL parsing would resolve away, sending the request \
             to another resource; put values into a path with pathSegment(value), or resolve a relative \
             reference first with new URL(reference, base)"
        )));
    }
    Ok((method, headers, parse_url(&request.url)?))
}

/// The first `.` or `..` segment in the path of `raw`, a URL as a handler wrote it, if any.
///
/// WHATWG parsing removes `.` segments and climbs on `..`, also spelled `%2e` in any case, and it
/// drops tabs and line breaks first and reads `\` as `/` in http(s) URLs; so does this check. A
/// segment encoded more than once (`%252e`) is refused too, since servers that decode a path twice
/// would resolve it themselves. The check reads the raw text because after parsing there is
/// nothing left to see; it over-approximates where the path starts (a URL without `//` is read
/// from its first slash), which can only refuse more.
fn dot_segment(raw: &str) -> Option<String> {
    let cleaned: String = raw.chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')).collect();
    let after_scheme = cleaned.split_once("://").map_or(cleaned.as_str(), |(_, rest)| rest);
    let end = after_scheme.find(['?', '#']).unwrap_or(after_scheme.len());
    let before_query = &after_scheme[..end];
    let path = &before_query[before_query.find(['/', '\\'])?..];
    path.split(['/', '\\']).skip(1).find_map(|segment| {
        let mut decoded = segment.to_ascii_lowercase();
        for _ in 0..4 {
            let next = decoded.replace("%25", "%");
            if next == decoded {
                break;
            }
            decoded = next;
        }
        let decoded = decoded.replace("%2e", ".");
        matches!(decoded.as_str(), "." | "..").then(|| segment.to_string())
    })
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

/// A request header only the daemon sets (`name` in lower case).
pub fn is_forbidden_header(name: &str) -> bool {
    FORBIDDEN_HEADERS.contains(&name) || name.starts_with("proxy-") && name != "proxy-authorization"
}

fn check_headers(raw: &[(String, String)]) -> Result<HeaderMap, Failure> {
    let mut headers = HeaderMap::new();
    for (name, value) in raw {
        let lower = name.to_ascii_lowercase();
        if is_forbidden_header(&lower) {
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
    use crate::whitelist::{Provenance, WhitelistEntry};

    fn decide(hosts: HostRule, allow_private_networks: bool, url: &str) -> Result<String, String> {
        let policy = ServerPolicy { hosts, ..ServerPolicy::whitelisted(Whitelist::from_entries(Vec::new()), 1) };
        let url = url::Url::parse(url).unwrap();
        check_url(&policy, allow_private_networks, &url).map(|host| host.to_string()).map_err(|failure| match failure {
            Failure::Denied { host, reason } => format!("denied {host}: {reason}"),
            other => format!("refused: {}", other.reason()),
        })
    }

    #[test]
    fn dot_segments_are_found_in_every_spelling_url_parsing_resolves() {
        for raw in [
            "https://api.example.com/orgs/acme/members/..",
            "https://api.example.com/orgs/acme/members/../x?q=1",
            "https://api.example.com/a/./b",
            "https://api.example.com/a/%2e%2E/b",
            "https://api.example.com/a/%2E/b",
            "https://api.example.com/a/.%2e",
            "https://api.example.com/a/%252e%252e/b",
            "https://api.example.com/a/.\t./b",
            "https://api.example.com/a\\..\\b",
            "https:api.example.com/a/../b",
        ] {
            assert!(dot_segment(raw).is_some(), "{raw}");
        }
        for raw in [
            "https://api.example.com/",
            "https://api.example.com",
            "https://api.example.com/a/...",
            "https://api.example.com/a/.b/c.",
            "https://api.example.com/v1.2/items/x..y",
            "https://api.example.com/search?q=../..&r=./x",
            "https://api.example.com/a#/../b",
            "https://1.2.3.4:8080/a/b",
        ] {
            assert_eq!(dot_segment(raw), None, "{raw}");
        }
    }

    #[test]
    fn hosts_are_decided_by_the_rule_and_addresses_by_their_range() {
        let entry = WhitelistEntry { domain: "example.com".into(), source: Provenance::Operator, detail: None };
        let whitelist = || HostRule::Whitelist(Whitelist::from_entries(vec![entry.clone()]));
        assert_eq!(decide(whitelist(), false, "https://API.Example.com./x"), Ok("api.example.com".into()));
        assert_eq!(
            decide(whitelist(), false, "https://evil.test/"),
            Err("denied evil.test: host is not on the server's whitelist".into())
        );
        assert_eq!(decide(HostRule::AnyHost, false, "https://evil.test/"), Ok("evil.test".into()));
        // IP literals are vetted here (the resolver never sees them), whatever the host rule.
        assert_eq!(
            decide(HostRule::AnyHost, false, "http://169.254.169.254/latest"),
            Err("denied 169.254.169.254: 169.254.169.254 is not a public address".into())
        );
        assert!(decide(HostRule::AnyHost, true, "http://127.0.0.1:8080/").is_ok());
        for (url, expected) in [
            ("https://user:pw@example.com/", "URLs with credentials"),
            ("https://example.com:0/", "port 0"),
            ("ftp://example.com/", "only http and https"),
        ] {
            let error = decide(HostRule::AnyHost, false, url).unwrap_err();
            assert!(error.starts_with("refused: ") && error.contains(expected), "{url}: {error}");
        }
    }

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
}
