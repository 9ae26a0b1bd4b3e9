//! Credentials for upstream APIs: what the operator registers for a server, checked.
//!
//! A credential is a secret value bound to domains and to a way of adding it to a request (a
//! header with a format, a query parameter, or HTTP basic auth). Values are sealed at rest by
//! [`vault`]; the egress module adds them to requests whose host matches, after the policy check
//! and on every redirect hop (`serve::egress::inject`); handlers, agents, logs and exports only
//! ever see names. Every response the egress hands to a handler, and everything a handler returns
//! or logs, is scrubbed of the values in every form they take on the wire ([`redact`]).
//!
//! A credential's checks and binding are in [`credential`]; this file adds what generation and
//! the call log need to know about secrets (the prompt section, secret-looking arguments and
//! prompts, fingerprints).

pub mod credential;
pub mod per_user;
pub mod redact;
pub mod vault;

pub use self::credential::{
    BasicUser, Binding, Credential, Injection, MAX_PER_SERVER, MAX_VALUE_BYTES, MIN_VALUE_CHARS, check_name,
    check_value,
};
pub use self::per_user::PerUser;
pub use self::redact::Redactor;

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
}
