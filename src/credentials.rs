//! Credentials for upstream APIs: what the operator registers for a server, checked.
//!
//! A credential is a secret value bound to domains and to a way of adding it to a request (a
//! header with a format, a query parameter, or HTTP basic auth). Values are sealed at rest by
//! [`vault`]; the egress module adds them to requests whose host matches, after the policy check
//! and on every redirect hop (`serve::egress::inject`); handlers, agents, logs and exports only
//! ever see names. Every response the egress hands to a handler, and everything a handler returns
//! or logs, is scrubbed of the values in every form they take on the wire ([`redact`]).

pub mod per_user;
pub mod redact;
pub mod vault;

pub use self::per_user::PerUser;
pub use self::redact::Redactor;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::whitelist::{CanonicalHost, Whitelist, canonical_whitelist_domain, domain_covers};

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

impl TryFrom<InjectionShape> for Injection {
    type Error = String;

    fn try_from(shape: InjectionShape) -> Result<Injection, String> {
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
            _ => Err(format!("inject must be exactly one of {INJECTION_FORMS} (format only with header)")),
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

/// Checks a credential's name.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "credential name {name:?} must be 1-64 characters of a-z, A-Z, 0-9, '-' and '_', starting with a letter or digit"
        ))
    }
}

/// Checks a credential's value.
pub fn check_value(value: &str) -> Result<(), String> {
    if value.chars().count() < MIN_VALUE_CHARS || value.len() > MAX_VALUE_BYTES {
        return Err(format!("value must be {MIN_VALUE_CHARS} characters to {MAX_VALUE_BYTES} bytes long"));
    }
    if value.chars().any(char::is_control) {
        return Err("value must not contain control characters (a trailing newline from a file, say)".into());
    }
    Ok(())
}

impl Binding {
    /// Checks the injection rule and that every domain is one the server may reach. Domains are
    /// returned canonical.
    pub fn check(domains: &[String], inject: Injection, whitelist: &Whitelist) -> Result<Binding, String> {
        if domains.is_empty() {
            return Err("domains must name at least one domain the credential is sent to".into());
        }
        let mut canonical = Vec::with_capacity(domains.len());
        for domain in domains {
            let host = canonical_whitelist_domain(domain).map_err(|e| e.replace("allow_domains entry", "domain"))?;
            let parsed = match host.parse::<std::net::IpAddr>() {
                Ok(ip) => CanonicalHost::Ip(ip),
                Err(_) => CanonicalHost::Domain(host.clone()),
            };
            if !whitelist.allows(&parsed) {
                return Err(format!(
                    "domain {domain:?} is not on the server's whitelist ({}): a credential can only be sent where the handlers may fetch",
                    whitelist.domains().join(", ")
                ));
            }
            if !canonical.contains(&host) {
                canonical.push(host);
            }
        }
        match &inject {
            Injection::Header { header, format } => {
                reqwest::header::HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| format!("inject.header {header:?} is not a valid header name"))?;
                if format.matches("{value}").count() != 1 {
                    return Err(format!("inject.format {format:?} must contain {{value}} exactly once"));
                }
                if format.chars().any(char::is_control) {
                    return Err("inject.format must not contain control characters".into());
                }
            }
            Injection::Query { query } => {
                if query.is_empty()
                    || query.len() > 128
                    || query.chars().any(|c| c.is_control() || c == '&' || c == '=')
                {
                    return Err(format!(
                        "inject.query {query:?} must be a parameter name without '&', '=' or control characters"
                    ));
                }
            }
            Injection::Basic { basic } => {
                if basic.username.contains(':') || basic.username.chars().any(char::is_control) {
                    return Err("inject.basic.username must not contain ':' or control characters".into());
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

/// The credentials a generation may rely on, for the planner and the compiler: names, domains
/// and how each is sent, never a value. Empty when there are none.
pub fn prompt_section(credentials: &[(String, Binding)]) -> String {
    if credentials.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = credentials
        .iter()
        .map(|(name, binding)| {
            let how = match &binding.inject {
                Injection::Header { header, format } => {
                    format!("header `{header}: {}`", format.replace("{value}", "<secret>"))
                }
                Injection::Query { query } => format!("query parameter `{query}=<secret>`"),
                Injection::Basic { basic } => format!("HTTP basic authentication as user `{}`", basic.username),
            };
            let domains: Vec<String> = binding.domains.iter().map(|d| format!("{d} (and its subdomains)")).collect();
            format!("- `{name}`: the daemon adds {how} to every request to {}", domains.join(", "))
        })
        .collect();
    format!(
        "# Credentials the daemon adds

{}

Handlers never see these secrets and must not set these headers or \
         parameters themselves, nor ask for these keys as tool arguments: requests to those domains are \
         authenticated already.",
        lines.join("\n")
    )
}

/// Prefixes of well-known API key formats (OpenAI/Anthropic, GitHub, Slack, Stripe, AWS, Google).
const KEY_PREFIXES: &[&str] = &[
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "AKIA",
    "AIza",
];
/// Words after which a long opaque token is taken for a secret.
const KEY_WORDS: &[&str] = &["key", "token", "bearer", "secret", "password", "apikey", "api_key", "auth"];

/// Words that, as a part of an argument's name (`api_key`, `accessToken`, `X-Auth`), say its
/// value is a secret.
const SECRET_NAME_PARTS: &[&str] = &[
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pass",
    "passphrase",
    "auth",
    "authorization",
    "bearer",
    "cookie",
    "credential",
    "credentials",
    "private",
    "session",
    "signature",
];

/// Whether a tool argument is a secret that a log (and the repair context built from it) must
/// not keep: a part of its name says so, or its value has a well-known key format.
pub fn secret_argument(name: &str, value: &serde_json::Value) -> bool {
    // "accessToken" and "access_token" both split into "access", "token".
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && previous_lower) {
            parts.push(std::mem::take(&mut part));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        if c.is_ascii_alphanumeric() {
            part.push(c.to_ascii_lowercase());
        }
    }
    parts.push(part);
    let named = parts.iter().any(|part| SECRET_NAME_PARTS.contains(&part.as_str()));
    let shaped = value
        .as_str()
        .is_some_and(|text| KEY_PREFIXES.iter().any(|p| text.starts_with(p) && text.len() >= p.len() + 16));
    named || shaped
}

/// Something in a prompt that looks like a pasted secret (shown cut short), so the registration
/// can be refused before the prompt is stored and sent to an LLM.
pub fn pasted_secret(prompt: &str) -> Option<String> {
    // `=` separates (`api_key=...`); base64 padding is lost, which does not matter here.
    let is_token_char = |c: char| c.is_ascii_alphanumeric() || "-_+/.".contains(c);
    let mut previous_words: Vec<String> = Vec::new();
    for raw in prompt.split(|c: char| !is_token_char(c)).filter(|t| !t.is_empty()) {
        let token = raw.trim_end_matches('.');
        let long_opaque = token.len() >= 20
            && token.chars().any(|c| c.is_ascii_digit())
            && token.chars().any(|c| c.is_ascii_alphabetic())
            && !token.contains('.')
            && !token.contains('/');
        let known = KEY_PREFIXES.iter().any(|p| token.starts_with(p) && token.len() >= p.len() + 16);
        let after_word = previous_words.iter().any(|w| KEY_WORDS.iter().any(|k| w.to_ascii_lowercase().ends_with(k)));
        if known || (long_opaque && after_word) {
            return Some(format!("{}…", token.chars().take(6).collect::<String>()));
        }
        previous_words.push(token.to_string());
        if previous_words.len() > 3 {
            previous_words.remove(0);
        }
    }
    None
}

/// The first 8 hex digits of the value's sha256: enough to tell two values apart in a listing,
/// too little to recover or confirm a guess of a real key.
pub fn fingerprint(value: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(value.as_bytes())[..4])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_arguments_are_told_by_name_parts_and_key_formats() {
        use serde_json::json;
        for name in ["api_key", "apiKey", "X-Auth-Token", "accessToken", "password", "client_secret", "sessionId"] {
            assert!(secret_argument(name, &json!("x")), "{name}");
        }
        for name in ["keyword", "id", "query", "author", "passenger_count", "monkey"] {
            assert!(!secret_argument(name, &json!("x")), "{name}");
        }
        assert!(secret_argument("q", &json!("ghp_0123456789abcdef0123")));
        assert!(!secret_argument("q", &json!("ghp_short")));
    }

    #[test]
    fn pasted_secrets_are_found_and_ordinary_prompts_pass() {
        for pasted in [
            "Tools for GitHub, my token is ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "Use api_key=3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c for OpenWeather",
            "call it with Authorization: Bearer abcDEF1234567890ghiJKL",
            "OpenAI with sk-proj-abcdefghijklmnop1234",
            "slack bot xoxb-1234567890-abcdefghijkl",
        ] {
            assert!(pasted_secret(pasted).is_some(), "{pasted}");
        }
        for fine in [
            "Create MCP tools for the Hacker News API: https://github.com/HackerNews/API",
            "Weather tools, see https://api.example.com/v2/docs/0123456789abcdefghij/index.html",
            "Use the token endpoint to list items; ids look like 8863",
            "Tools for the task API (key features: search, sort-by-date-2024)",
        ] {
            assert_eq!(pasted_secret(fine), None, "{fine}");
        }
    }

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
        for (inject, said) in [
            (header("Authorization", "Bearer"), "{value} exactly once"),
            (header("bad header", "{value}"), "not a valid header name"),
            (Injection::Query { query: "a=b".into() }, "inject.query"),
        ] {
            let error = Binding::check(&domains, inject, &whitelist).unwrap_err();
            assert!(error.contains(said), "{error}");
        }
        let error = Binding::check(&["other.test".into()], header("x-key", "{value}"), &whitelist).unwrap_err();
        assert!(error.contains("not on the server's whitelist"), "{error}");
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
