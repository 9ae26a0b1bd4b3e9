//! One credential: the checks on its name and value, and its binding (the domains it is sent
//! to and how it is added to a request), which the egress matches and the redactor reads.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::per_user::PerUser;
use crate::whitelist::{CanonicalHost, DomainRefusal, Whitelist, canonical_whitelist_domain, domain_covers};

/// Longest credential value accepted.
pub const MAX_VALUE_BYTES: usize = 8 * 1024;
/// Credentials per server at most.
pub const MAX_PER_SERVER: usize = 32;
/// Values shorter than this are not scrubbed from output (too likely to match by chance); they
/// are also refused, so every stored value is scrubbed.
pub const MIN_VALUE_CHARS: usize = 8;

/// How a credential is added to a matching request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, untagged)]
#[serde(try_from = "InjectionShape")]
pub enum Injection {
    /// A header, its value written from `format` with `{value}` replaced (default `{value}`).
    Header {
        header: String,
        #[serde(default = "plain_format")]
        format: String,
    },
    /// A query parameter on the URL, replacing one of the same name.
    Query { query: String },
    /// HTTP basic authentication with this user name and the value as password.
    Basic { basic: BasicUser },
}

/// What `inject` is read as, so a body of the wrong shape gets an error that shows the three
/// accepted forms instead of serde's "did not match any variant".
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectionShape {
    header: Option<String>,
    format: Option<String>,
    query: Option<String>,
    basic: Option<BasicUser>,
}

const INJECTION_FORMS: &str = "{\"header\": \"Authorization\", \"format\": \"Bearer {value}\"}, {\"query\": \"api_key\"} or {\"basic\": {\"username\": \"...\"}}";

/// An `inject` object that is not one of the three accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inject must be exactly one of {INJECTION_FORMS} (format only with header)")]
pub struct InvalidInjection;

impl TryFrom<InjectionShape> for Injection {
    type Error = InvalidInjection;

    fn try_from(shape: InjectionShape) -> Result<Injection, InvalidInjection> {
        match shape {
            InjectionShape { header: Some(header), format, query: None, basic: None } => {
                Ok(Injection::Header { header, format: format.unwrap_or_else(plain_format) })
            }
            InjectionShape { header: None, format: None, query: Some(query), basic: None } => {
                Ok(Injection::Query { query })
            }
            InjectionShape { header: None, format: None, query: None, basic: Some(basic) } => {
                Ok(Injection::Basic { basic })
            }
            _ => Err(InvalidInjection),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicUser {
    pub username: String,
}

fn plain_format() -> String {
    "{value}".to_string()
}

/// A credential's binding as stored: everything but the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub domains: Vec<String>,
    pub inject: Injection,
    /// Each caller's own value instead of one stored value ([`per_user`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_user: Option<PerUser>,
}

/// A credential ready to be injected: its binding and its value, in memory only.
#[derive(Clone)]
pub struct Credential {
    pub name: String,
    pub binding: Binding,
    pub value: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("name", &self.name).field("binding", &self.binding).finish_non_exhaustive()
    }
}

/// A credential name that [`check_name`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "credential name {name:?} must be 1-64 characters of a-z, A-Z, 0-9, '-' and '_', starting with a letter or digit"
)]
pub struct InvalidName {
    pub name: String,
}

/// Why [`check_value`] refused a credential value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidValue {
    #[error("value must be {MIN_VALUE_CHARS} characters to {MAX_VALUE_BYTES} bytes long")]
    Length,
    #[error("value must not contain control characters (a trailing newline from a file, say)")]
    ControlCharacter,
}

/// Why [`Binding::check`] refused a credential's domains or injection rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBinding {
    #[error("domains must name at least one domain the credential is sent to")]
    NoDomains,
    #[error("{}", .0.message("domain"))]
    Domain(DomainRefusal),
    #[error(
        "domain {domain:?} is not on the server's whitelist ({}): a credential can only be sent where the handlers may fetch",
        .whitelist.join(", ")
    )]
    NotWhitelisted { domain: String, whitelist: Vec<String> },
    #[error("inject.header {header:?} is not a valid header name")]
    HeaderName { header: String },
    #[error("inject.format {format:?} must contain {{value}} exactly once")]
    FormatPlaceholder { format: String },
    #[error("inject.format must not contain control characters")]
    FormatControlCharacter,
    #[error("inject.query {query:?} must be a parameter name without '&', '=' or control characters")]
    QueryName { query: String },
    #[error("inject.basic.username must not contain ':' or control characters")]
    BasicUsername,
}

/// Checks a credential's name.
pub fn check_name(name: &str) -> Result<(), InvalidName> {
    let ok = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok { Ok(()) } else { Err(InvalidName { name: name.to_string() }) }
}

/// Checks a credential's value.
pub fn check_value(value: &str) -> Result<(), InvalidValue> {
    if value.chars().count() < MIN_VALUE_CHARS || value.len() > MAX_VALUE_BYTES {
        return Err(InvalidValue::Length);
    }
    if value.chars().any(char::is_control) {
        return Err(InvalidValue::ControlCharacter);
    }
    Ok(())
}

impl Binding {
    /// Checks the injection rule and that every domain is one the server may reach. Domains are
    /// returned canonical.
    pub fn check(domains: &[String], inject: Injection, whitelist: &Whitelist) -> Result<Binding, InvalidBinding> {
        if domains.is_empty() {
            return Err(InvalidBinding::NoDomains);
        }
        let mut canonical = Vec::with_capacity(domains.len());
        for domain in domains {
            let host = canonical_whitelist_domain(domain).map_err(InvalidBinding::Domain)?;
            let parsed = match host.parse::<std::net::IpAddr>() {
                Ok(ip) => CanonicalHost::Ip(ip),
                Err(_) => CanonicalHost::Domain(host.clone()),
            };
            if !whitelist.allows(&parsed) {
                return Err(InvalidBinding::NotWhitelisted { domain: domain.clone(), whitelist: whitelist.domains() });
            }
            if !canonical.contains(&host) {
                canonical.push(host);
            }
        }
        match &inject {
            Injection::Header { header, format } => {
                reqwest::header::HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| InvalidBinding::HeaderName { header: header.clone() })?;
                if format.matches("{value}").count() != 1 {
                    return Err(InvalidBinding::FormatPlaceholder { format: format.clone() });
                }
                if format.chars().any(char::is_control) {
                    return Err(InvalidBinding::FormatControlCharacter);
                }
            }
            Injection::Query { query } => {
                if query.is_empty()
                    || query.len() > 128
                    || query.chars().any(|c| c.is_control() || c == '&' || c == '=')
                {
                    return Err(InvalidBinding::QueryName { query: query.clone() });
                }
            }
            Injection::Basic { basic } => {
                if basic.username.contains(':') || basic.username.chars().any(char::is_control) {
                    return Err(InvalidBinding::BasicUsername);
                }
            }
        }
        Ok(Binding { domains: canonical, inject, per_user: None })
    }

    /// Whether a request to `host` gets this credential: the host is one of the domains or a
    /// subdomain of one, by the whitelist's rule.
    pub fn matches(&self, host: &str) -> bool {
        self.domains.iter().any(|domain| domain_covers(domain, host))
    }

    /// A warning when the server's handlers may fetch hosts this credential is not sent to.
    ///
    /// The egress takes the value out of every response before a handler sees it, so a handler
    /// has nothing to carry there; but an upstream that hands back a piece of the value (a byte
    /// range, a truncated echo) or a transformation the scrubbing does not know could still give
    /// a handler something worth sending. Refusing would break servers that combine several APIs,
    /// so the operator is told instead.
    pub fn reach_warning(&self, name: &str, whitelist: &Whitelist) -> Option<String> {
        let beyond: Vec<String> = whitelist.domains().into_iter().filter(|domain| !self.matches(domain)).collect();
        if beyond.is_empty() {
            return None;
        }
        Some(format!(
            "credential {name:?} is sent to {} only, but the server's handlers may also fetch {}: responses are \
             scrubbed of the value before handlers see them, yet an upstream that hands back part of it or a \
             transformation of it would let a handler send that there; keep a credential on a server whose \
             whitelist is its domains, or narrow allow_domains",
            self.domains.join(", "),
            beyond.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_rules_parse_in_three_forms_and_say_so_otherwise() {
        let parse = |v: serde_json::Value| serde_json::from_value::<Injection>(v).map_err(|e| e.to_string());
        assert_eq!(
            parse(serde_json::json!({"header": "X-Key"})).unwrap(),
            Injection::Header { header: "X-Key".into(), format: "{value}".into() }
        );
        assert_eq!(parse(serde_json::json!({"query": "k"})).unwrap(), Injection::Query { query: "k".into() });
        let basic = parse(serde_json::json!({"basic": {"username": "me"}})).unwrap();
        assert_eq!(basic, Injection::Basic { basic: BasicUser { username: "me".into() } });
        assert_eq!(parse(serde_json::to_value(&basic).unwrap()).unwrap(), basic, "stored form reads back");
        for wrong in [
            serde_json::json!({}),
            serde_json::json!({"query": "k", "header": "h"}),
            serde_json::json!({"format": "{value}"}),
        ] {
            let error = parse(wrong.clone()).unwrap_err();
            assert!(error.contains("inject must be exactly one of"), "{wrong}: {error}");
        }
        assert!(parse(serde_json::json!({"header": 5})).unwrap_err().contains("invalid type"));
    }

    #[test]
    fn bindings_match_their_domains_and_subdomains_only() {
        let binding = Binding {
            domains: vec!["example.test".into()],
            inject: Injection::Query { query: "k".into() },
            per_user: None,
        };
        for host in ["example.test", "api.example.test", "a.b.example.test"] {
            assert!(binding.matches(host), "{host}");
        }
        for host in ["badexample.test", "example.test.evil", "test", "xample.test"] {
            assert!(!binding.matches(host), "{host}");
        }
    }

    #[test]
    fn names_values_and_injections_are_checked() {
        assert!(check_name("github").is_ok() && check_name("GH_token-2").is_ok());
        for bad in ["", "-x", "a b", "x".repeat(65).as_str(), "é"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_value("short").is_err());
        assert!(check_value("long-enough\n").is_err());
        assert!(check_value("long-enough-value").is_ok());
        let whitelist = Whitelist::from_operator_domains(&["api.example.test".to_string()]).unwrap();
        let domains = vec!["API.example.test.".to_string()];
        let header = |header: &str, format: &str| Injection::Header { header: header.into(), format: format.into() };
        let binding = Binding::check(&domains, header("Authorization", "Bearer {value}"), &whitelist).unwrap();
        assert_eq!(binding.domains, ["api.example.test"]);
        for (inject, refused) in [
            (header("Authorization", "Bearer"), InvalidBinding::FormatPlaceholder { format: "Bearer".into() }),
            (header("bad header", "{value}"), InvalidBinding::HeaderName { header: "bad header".into() }),
            (Injection::Query { query: "a=b".into() }, InvalidBinding::QueryName { query: "a=b".into() }),
        ] {
            assert_eq!(Binding::check(&domains, inject, &whitelist).unwrap_err(), refused);
        }
        let error = Binding::check(&["other.test".into()], header("x-key", "{value}"), &whitelist).unwrap_err();
        assert!(matches!(error, InvalidBinding::NotWhitelisted { .. }), "{error}");
    }

    /// Admin API clients read these messages, so they are pinned word for word.
    #[test]
    fn refusals_read_as_before() {
        assert_eq!(
            check_name("a b").unwrap_err().to_string(),
            r#"credential name "a b" must be 1-64 characters of a-z, A-Z, 0-9, '-' and '_', starting with a letter or digit"#
        );
        assert_eq!(check_value("short").unwrap_err().to_string(), "value must be 8 characters to 8192 bytes long");
        assert_eq!(
            check_value("long-enough\n").unwrap_err().to_string(),
            "value must not contain control characters (a trailing newline from a file, say)"
        );
        assert_eq!(
            InvalidInjection.to_string(),
            r#"inject must be exactly one of {"header": "Authorization", "format": "Bearer {value}"}, {"query": "api_key"} or {"basic": {"username": "..."}} (format only with header)"#
        );
        let whitelist =
            Whitelist::from_operator_domains(&["api.example.test".to_string(), "b.example.test".to_string()]).unwrap();
        let refusal = |domains: &[&str], inject: Injection| {
            let domains: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
            Binding::check(&domains, inject, &whitelist).unwrap_err().to_string()
        };
        let header = |header: &str, format: &str| Injection::Header { header: header.into(), format: format.into() };
        let ok = ["api.example.test"];
        let cases = [
            (refusal(&[], header("x", "{value}")), "domains must name at least one domain the credential is sent to"),
            (refusal(&["a.test:80"], header("x", "{value}")), r#"domain "a.test:80" must not carry a port"#),
            (
                refusal(&["other.test"], header("x", "{value}")),
                r#"domain "other.test" is not on the server's whitelist (api.example.test, b.example.test): a credential can only be sent where the handlers may fetch"#,
            ),
            (refusal(&ok, header("bad header", "{value}")), r#"inject.header "bad header" is not a valid header name"#),
            (refusal(&ok, header("x", "Bearer")), r#"inject.format "Bearer" must contain {value} exactly once"#),
            (refusal(&ok, header("x", "{value}\n")), "inject.format must not contain control characters"),
            (
                refusal(&ok, Injection::Query { query: "a=b".into() }),
                r#"inject.query "a=b" must be a parameter name without '&', '=' or control characters"#,
            ),
            (
                refusal(&ok, Injection::Basic { basic: BasicUser { username: "a:b".into() } }),
                "inject.basic.username must not contain ':' or control characters",
            ),
        ];
        for (said, expected) in cases {
            assert_eq!(said, expected);
        }
    }

    #[test]
    fn credentials_are_warned_about_when_handlers_may_fetch_hosts_beyond_them() {
        let whitelist =
            Whitelist::from_operator_domains(&["api.example.test".into(), "example.test".into(), "other.test".into()])
                .unwrap();
        let binding = |domains: &[&str]| Binding {
            domains: domains.iter().map(|d| d.to_string()).collect(),
            inject: Injection::Query { query: "k".into() },
            per_user: None,
        };
        let warning = binding(&["api.example.test"]).reach_warning("key", &whitelist).unwrap();
        assert!(warning.contains("\"key\" is sent to api.example.test only"), "{warning}");
        assert!(warning.contains("may also fetch example.test, other.test"), "{warning}");
        assert_eq!(binding(&["example.test", "other.test"]).reach_warning("key", &whitelist), None);
    }
}
