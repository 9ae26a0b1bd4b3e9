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
    pub fn from_operator_domains(domains: &[String]) -> Result<Whitelist, AllowDomainsError> {
        if domains.len() > MAX_OPERATOR_DOMAINS {
            return Err(AllowDomainsError::TooMany { count: domains.len() });
        }
        let mut whitelist = Whitelist::default();
        let mut seen = std::collections::HashSet::new();
        for raw in domains {
            let domain = judge(raw, Provenance::Operator)
                .map_err(|refusal| AllowDomainsError::Refused { raw: raw.clone(), refusal })?;
            if seen.insert(domain.clone()) {
                whitelist.entries.push(WhitelistEntry { domain, source: Provenance::Operator, detail: None });
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
    match judge(raw, source) {
        Ok(domain) => Ok(WhitelistEntry { domain, source, detail }),
        Err(refusal) => {
            Err(RefusedDomain { domain: raw.trim().to_ascii_lowercase(), source, detail, reason: refusal.to_string() })
        }
    }
}

/// Why a candidate was not admitted: its text is not a specific host, or it is one the whitelist
/// will not hold for where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitRefusal {
    #[error(transparent)]
    Malformed(#[from] DomainRefusal),
    #[error("IP addresses found in documents are not admitted; list it in allow_domains")]
    IpFromDocument,
    #[error("a public suffix would admit every site registered under it")]
    PublicSuffix,
}

/// Why an operator's `allow_domains` list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowDomainsError {
    TooMany { count: usize },
    Refused { raw: String, refusal: AdmitRefusal },
}

impl std::fmt::Display for AllowDomainsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowDomainsError::TooMany { count } => write!(
                f,
                "allow_domains has {count} entries; at most {MAX_OPERATOR_DOMAINS} are allowed (each entry also allows \
                 its subdomains, so list the parent domain once)"
            ),
            // A malformed entry's message names the entry already; the empty entry's does not.
            AllowDomainsError::Refused { refusal: AdmitRefusal::Malformed(refusal), .. }
                if !matches!(refusal, DomainRefusal::Empty) =>
            {
                write!(f, "{refusal}")
            }
            AllowDomainsError::Refused { raw, refusal } => {
                write!(f, "allow_domains entry {raw:?} is refused: {refusal}")
            }
        }
    }
}

impl std::error::Error for AllowDomainsError {}

/// Why a candidate is not a specific host. The message names the candidate as an `allow_domains`
/// entry; [`DomainRefusal::message`] names it otherwise for other fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRefusal {
    Empty,
    Wildcard { raw: String },
    Url { raw: String },
    Port { raw: String },
    Invalid { raw: String, cause: url::ParseError },
    Localhost { raw: String },
    SingleLabel { raw: String },
    NoHost { raw: String },
}

impl DomainRefusal {
    /// The message with the candidate called `what` (such as "domain") instead of
    /// "allow_domains entry".
    pub fn message(&self, what: &str) -> String {
        match self {
            DomainRefusal::Empty => "allow_domains entries must not be empty".into(),
            DomainRefusal::Wildcard { raw } => format!(
                "{what} {raw:?} is a wildcard; list the domain itself (\"example.com\" already allows its subdomains)"
            ),
            DomainRefusal::Url { raw } => {
                format!("{what} {raw:?} must be a bare domain such as \"api.example.com\", not a URL")
            }
            DomainRefusal::Port { raw } => format!("{what} {raw:?} must not carry a port"),
            DomainRefusal::Invalid { raw, cause } => format!("{what} {raw:?} is not a valid domain: {cause}"),
            DomainRefusal::Localhost { raw } => {
                format!("{what} {raw:?} names localhost; handlers may not reach the daemon's own machine by name")
            }
            DomainRefusal::SingleLabel { raw } => {
                format!("{what} {raw:?} is a single label; it would allow a whole top-level domain")
            }
            DomainRefusal::NoHost { raw } => format!("{what} {raw:?} has no host"),
        }
    }
}

impl std::fmt::Display for DomainRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message("allow_domains entry"))
    }
}

impl std::error::Error for DomainRefusal {}

/// The canonical domain of a candidate the whitelist may hold for its source.
fn judge(raw: &str, source: Provenance) -> Result<String, AdmitRefusal> {
    let domain = canonical_whitelist_domain(raw)?;
    if domain.parse::<IpAddr>().is_ok() {
        if matches!(source, Provenance::Discovered | Provenance::Openapi) {
            return Err(AdmitRefusal::IpFromDocument);
        }
    } else if psl::suffix_str(&domain) == Some(domain.as_str()) {
        return Err(AdmitRefusal::PublicSuffix);
    }
    Ok(domain)
}

/// Canonicalises one whitelist candidate (`Example.COM.`, `bücher.de`, `10.0.0.5`), refusing
/// anything that is not a specific host: wildcards, URLs with paths, single labels, `localhost`.
pub fn canonical_whitelist_domain(raw: &str) -> Result<String, DomainRefusal> {
    let trimmed = raw.trim();
    let raw = || raw.to_string();
    if trimmed.is_empty() {
        return Err(DomainRefusal::Empty);
    }
    if trimmed.contains('*') {
        return Err(DomainRefusal::Wildcard { raw: raw() });
    }
    if trimmed.contains("://") || trimmed.contains('/') || trimmed.contains('@') {
        return Err(DomainRefusal::Url { raw: raw() });
    }
    if let Ok(ip) = trimmed.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    if trimmed.contains(':') {
        return Err(DomainRefusal::Port { raw: raw() });
    }
    let url =
        url::Url::parse(&format!("http://{trimmed}/")).map_err(|cause| DomainRefusal::Invalid { raw: raw(), cause })?;
    if url.port().is_some() {
        return Err(DomainRefusal::Port { raw: raw() });
    }
    match CanonicalHost::of_url(&url) {
        Some(CanonicalHost::Ip(ip)) => Ok(ip.to_string()),
        Some(CanonicalHost::Domain(domain)) => {
            if domain == "localhost" || domain.ends_with(".localhost") {
                return Err(DomainRefusal::Localhost { raw: raw() });
            }
            if !domain.contains('.') {
                return Err(DomainRefusal::SingleLabel { raw: raw() });
            }
            Ok(domain)
        }
        None => Err(DomainRefusal::NoHost { raw: raw() }),
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
        assert!(Whitelist::from_operator_domains(&["co.uk".into()]).unwrap_err().to_string().contains("public suffix"));
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

    /// Admin API clients read these messages, so they are pinned word for word.
    #[test]
    fn operator_refusals_read_as_before() {
        let refusal = |raw: &str| Whitelist::from_operator_domains(&[raw.to_string()]).unwrap_err().to_string();
        let cases = [
            (
                "*.a.com",
                r#"allow_domains entry "*.a.com" is a wildcard; list the domain itself ("example.com" already allows its subdomains)"#,
            ),
            (
                "http://a.com",
                r#"allow_domains entry "http://a.com" must be a bare domain such as "api.example.com", not a URL"#,
            ),
            ("a.com:80", r#"allow_domains entry "a.com:80" must not carry a port"#),
            ("a b.com", r#"allow_domains entry "a b.com" is not a valid domain: invalid international domain name"#),
            (
                "localhost",
                r#"allow_domains entry "localhost" names localhost; handlers may not reach the daemon's own machine by name"#,
            ),
            ("com", r#"allow_domains entry "com" is a single label; it would allow a whole top-level domain"#),
            ("", r#"allow_domains entry "" is refused: allow_domains entries must not be empty"#),
            (
                "co.uk",
                r#"allow_domains entry "co.uk" is refused: a public suffix would admit every site registered under it"#,
            ),
        ];
        for (raw, message) in cases {
            assert_eq!(refusal(raw), message, "{raw:?}");
        }
        let many = vec!["a.com".to_string(); MAX_OPERATOR_DOMAINS + 1];
        assert_eq!(
            Whitelist::from_operator_domains(&many).unwrap_err(),
            AllowDomainsError::TooMany { count: MAX_OPERATOR_DOMAINS + 1 }
        );
        assert_eq!(
            canonical_whitelist_domain("a.com:80").unwrap_err().message("domain"),
            r#"domain "a.com:80" must not carry a port"#
        );
        assert_eq!(
            admit("10.0.0.1", Provenance::Discovered, None).unwrap_err().reason,
            AdmitRefusal::IpFromDocument.to_string()
        );
    }
}
