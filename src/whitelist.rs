//! A server's domain whitelist: which hosts its handlers may fetch, and why each one is there.
//!
//! Matching is on canonical hosts (IDNA to ASCII, lowercase, one trailing dot stripped): a host is
//! allowed when it equals a whitelisted domain or ends with `.` + that domain. So `example.com`
//! allows `api.example.com`, but `api.example.com` does not allow `example.com`, and nothing allows
//! `evilexample.com` except itself. IP addresses are entries of their own and match only exactly.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Where a whitelist entry came from, shown to operators in the admin view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    /// Listed in the registration's `allow_domains`.
    Operator,
    /// The host of a URL in the prompt.
    Prompt,
    /// Found in a fetched document and referenced by the plan.
    Discovered,
    /// A server URL of the API description the tools were derived from.
    Openapi,
}

/// A whitelisted domain (it allows its subdomains too) and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhitelistEntry {
    pub domain: String,
    pub source: Provenance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Whitelist {
    entries: Vec<WhitelistEntry>,
}

/// A host as the egress policy compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanonicalHost {
    Domain(String),
    Ip(IpAddr),
}

/// Domains an operator may list for one server: plenty for real APIs (a domain allows its
/// subdomains), and a bound on the work a registration can ask for.
pub const MAX_OPERATOR_DOMAINS: usize = 256;

impl Whitelist {
    /// Builds a whitelist from operator-supplied domains, refusing entries that would allow too much.
    pub fn from_operator_domains(domains: &[String]) -> Result<Whitelist, String> {
        if domains.len() > MAX_OPERATOR_DOMAINS {
            return Err(format!(
                "allow_domains has {} entries; at most {MAX_OPERATOR_DOMAINS} are allowed (each entry also allows \
                 its subdomains, so list the parent domain once)",
                domains.len()
            ));
        }
        let mut whitelist = Whitelist::default();
        let mut seen = std::collections::HashSet::new();
        for raw in domains {
            let entry = admit(raw, Provenance::Operator, None).map_err(|refused| match refused.reason.as_str() {
                r if r.starts_with("allow_domains entry") => refused.reason,
                r => format!("allow_domains entry {raw:?} is refused: {r}"),
            })?;
            if seen.insert(entry.domain.clone()) {
                whitelist.entries.push(entry);
            }
        }
        Ok(whitelist)
    }

    /// A whitelist of entries that were admitted already.
    pub fn from_entries(entries: Vec<WhitelistEntry>) -> Whitelist {
        let mut whitelist = Whitelist::default();
        for entry in entries {
            whitelist.add(entry);
        }
        whitelist
    }

    /// Adds an entry unless the same domain is already present (the first provenance wins).
    pub fn add(&mut self, entry: WhitelistEntry) {
        if !self.entries.iter().any(|e| e.domain == entry.domain) {
            self.entries.push(entry);
        }
    }

    pub fn entries(&self) -> &[WhitelistEntry] {
        &self.entries
    }

    pub fn domains(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.domain.clone()).collect()
    }

    /// Whether a canonical host may be fetched.
    pub fn allows(&self, host: &CanonicalHost) -> bool {
        match host {
            CanonicalHost::Ip(ip) => {
                self.entries.iter().any(|e| e.domain.parse::<IpAddr>().is_ok_and(|allowed| allowed == *ip))
            }
            CanonicalHost::Domain(host) => self.entries.iter().any(|e| domain_covers(&e.domain, host)),
        }
    }
}

/// Whether `domain` covers `host` (both canonical): the domain itself or a subdomain of it,
/// never a parent or a look-alike (`badexample.com` is not under `example.com`).
pub fn domain_covers(domain: &str, host: &str) -> bool {
    host == domain
        || (host.len() > domain.len()
            && host.ends_with(domain)
            && host.as_bytes()[host.len() - domain.len() - 1] == b'.')
}

impl CanonicalHost {
    /// The canonical form of a parsed URL's host; `None` when the URL has no host.
    pub fn of_url(url: &url::Url) -> Option<CanonicalHost> {
        match url.host()? {
            url::Host::Domain(domain) => {
                let domain = domain.strip_suffix('.').unwrap_or(domain);
                if domain.is_empty() {
                    return None;
                }
                Some(CanonicalHost::Domain(domain.to_ascii_lowercase()))
            }
            url::Host::Ipv4(ip) => Some(CanonicalHost::Ip(IpAddr::V4(ip))),
            url::Host::Ipv6(ip) => Some(CanonicalHost::Ip(IpAddr::V6(ip))),
        }
    }
}

impl std::fmt::Display for CanonicalHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CanonicalHost::Domain(d) => f.write_str(d),
            CanonicalHost::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A whitelist candidate that was not admitted, with the reason, for the admin view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RefusedDomain {
    pub domain: String,
    pub source: Provenance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub reason: String,
}

/// Judges one candidate host from a prompt URL, a fetched document or the operator. Beyond
/// [`canonical_whitelist_domain`], public suffixes (`co.uk`, `github.io`) are refused since they
/// would admit every site under them, and documents may not contribute IP addresses.
pub fn admit(raw: &str, source: Provenance, detail: Option<String>) -> Result<WhitelistEntry, RefusedDomain> {
    let refuse = |reason: String| RefusedDomain {
        domain: raw.trim().to_ascii_lowercase(),
        source,
        detail: detail.clone(),
        reason,
    };
    let domain = canonical_whitelist_domain(raw).map_err(refuse)?;
    if domain.parse::<IpAddr>().is_ok() {
        if matches!(source, Provenance::Discovered | Provenance::Openapi) {
            return Err(refuse("IP addresses found in documents are not admitted; list it in allow_domains".into()));
        }
    } else if psl::suffix_str(&domain) == Some(domain.as_str()) {
        return Err(refuse("a public suffix would admit every site registered under it".into()));
    }
    Ok(WhitelistEntry { domain, source, detail })
}

/// Canonicalises one whitelist candidate (`Example.COM.`, `bücher.de`, `10.0.0.5`), refusing
/// anything that is not a specific host: wildcards, URLs with paths, single labels, `localhost`.
pub fn canonical_whitelist_domain(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err("allow_domains entries must not be empty".into());
    }
    if trimmed.contains('*') {
        return Err(format!(
            "allow_domains entry {raw:?} is a wildcard; list the domain itself (\"example.com\" already allows its subdomains)"
        ));
    }
    if trimmed.contains("://") || trimmed.contains('/') || trimmed.contains('@') {
        return Err(format!(
            "allow_domains entry {raw:?} must be a bare domain such as \"api.example.com\", not a URL"
        ));
    }
    if let Ok(ip) = trimmed.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    if trimmed.contains(':') {
        return Err(format!("allow_domains entry {raw:?} must not carry a port"));
    }
    let url = url::Url::parse(&format!("http://{trimmed}/"))
        .map_err(|e| format!("allow_domains entry {raw:?} is not a valid domain: {e}"))?;
    if url.port().is_some() {
        return Err(format!("allow_domains entry {raw:?} must not carry a port"));
    }
    match CanonicalHost::of_url(&url) {
        Some(CanonicalHost::Ip(ip)) => Ok(ip.to_string()),
        Some(CanonicalHost::Domain(domain)) => {
            if domain == "localhost" || domain.ends_with(".localhost") {
                return Err(format!(
                    "allow_domains entry {raw:?} names localhost; handlers may not reach the daemon's own machine by name"
                ));
            }
            if !domain.contains('.') {
                return Err(format!(
                    "allow_domains entry {raw:?} is a single label; it would allow a whole top-level domain"
                ));
            }
            Ok(domain)
        }
        None => Err(format!("allow_domains entry {raw:?} has no host")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(url: &str) -> CanonicalHost {
        CanonicalHost::of_url(&url::Url::parse(url).unwrap()).unwrap()
    }

    #[test]
    fn matching_table() {
        let list = Whitelist::from_operator_domains(&[
            "example.com".into(),
            "API.Weather.test.".into(),
            "10.1.2.3".into(),
            "[2001:db8::1]".into(),
            "bücher.de".into(),
        ])
        .unwrap();
        let cases = [
            ("http://example.com/", true),
            ("http://EXAMPLE.com./x", true),
            ("https://api.example.com/v1", true),
            ("https://a.b.example.com/", true),
            ("https://evilexample.com/", false),
            ("https://example.com.evil.com/", false),
            ("https://example.co/", false),
            ("https://com/", false),
            ("https://api.weather.test/", true),
            ("https://weather.test/", false),
            ("http://10.1.2.3/", true),
            ("http://10.1.2.4/", false),
            ("http://[2001:db8::1]:8080/", true),
            ("http://[2001:db8::2]/", false),
            ("http://xn--bcher-kva.de/", true),
            ("http://BÜCHER.de/", true),
            ("http://example。com/", true),
        ];
        for (url, expected) in cases {
            assert_eq!(list.allows(&host(url)), expected, "{url}");
        }
    }

    #[test]
    fn admission_rules() {
        use Provenance::*;
        let cases = [
            ("api.example.com", Prompt, true),
            ("co.uk", Prompt, false),
            ("github.io", Discovered, false),
            ("user.github.io", Discovered, true),
            ("com", Operator, false),
            ("10.0.0.1", Operator, true),
            ("10.0.0.1", Discovered, false),
            ("localhost", Discovered, false),
            ("*.example.com", Discovered, false),
        ];
        for (raw, source, admitted) in cases {
            assert_eq!(admit(raw, source, None).is_ok(), admitted, "{raw} from {source:?}");
        }
        let refused = admit("co.uk", Prompt, Some("x".into())).unwrap_err();
        assert!(refused.reason.contains("public suffix"));
        assert!(Whitelist::from_operator_domains(&["co.uk".into()]).unwrap_err().contains("public suffix"));
    }

    #[test]
    fn refuses_broad_or_malformed_entries() {
        for bad in [
            "*.example.com",
            "localhost",
            "com",
            "http://example.com",
            "example.com/x",
            "",
            "a.localhost",
            "example.com:80",
        ] {
            assert!(canonical_whitelist_domain(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(canonical_whitelist_domain(" Example.COM. ").unwrap(), "example.com");
    }
}
