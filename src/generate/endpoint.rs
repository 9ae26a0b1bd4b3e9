//! An HTTP endpoint a planned tool uses, written `"METHOD URL"` (e.g.
//! `"GET https://api.example.com/items/{id}"`), parsed once when the plan is read.
//!
//! `{placeholders}` in the URL stand for path or query values; they are replaced by a dummy value
//! to check the URL and find its host. The text is kept as the model wrote it, so a stored plan
//! reads back unchanged.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::whitelist::CanonicalHost;

/// The methods an endpoint may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
}

const METHODS: [(Method, &str); 7] = [
    (Method::Get, "GET"),
    (Method::Head, "HEAD"),
    (Method::Post, "POST"),
    (Method::Put, "PUT"),
    (Method::Patch, "PATCH"),
    (Method::Delete, "DELETE"),
    (Method::Options, "OPTIONS"),
];

impl Method {
    /// Case-insensitive, as HTTP method names in documentation often are.
    fn parse(text: &str) -> Option<Method> {
        METHODS.iter().find(|(_, name)| name.eq_ignore_ascii_case(text)).map(|(method, _)| *method)
    }

    /// GET, HEAD and OPTIONS only read.
    pub fn is_read_only(self) -> bool {
        matches!(self, Method::Get | Method::Head | Method::Options)
    }

    /// Repeating the request has the same effect as making it once (RFC 9110, 9.2.2).
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Method::Post | Method::Patch)
    }
}

/// Why a text is not a `"METHOD URL"` a tool may use; `text` is the whole endpoint as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("endpoint {text:?} must be \"METHOD URL\", e.g. \"GET https://api.example.com/items/{{id}}\"")]
    Shape { text: String },
    #[error("endpoint {text:?} has an unknown HTTP method {method:?}; use one of {}", method_names())]
    UnknownMethod { text: String, method: String },
    #[error("endpoint {text:?} does not have an absolute URL ({cause}); write the full https:// URL")]
    NotAbsolute { text: String, cause: url::ParseError },
    #[error("endpoint {text:?} must use an http:// or https:// URL")]
    NotHttp { text: String },
    #[error("endpoint {text:?} has no host")]
    NoHost { text: String },
}

/// The methods an endpoint may name, for messages: `GET, HEAD, …`.
fn method_names() -> String {
    METHODS.iter().map(|(_, name)| *name).collect::<Vec<_>>().join(", ")
}

/// A checked `"METHOD URL"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Endpoint {
    text: String,
    method: Method,
    host: CanonicalHost,
}

impl Endpoint {
    /// Parses `"METHOD URL"`; the error says what is wrong in words meant for the planner's
    /// repair turn.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        let text_owned = || text.to_owned();
        let mut parts = text.split_whitespace();
        let (Some(method), Some(url), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(EndpointError::Shape { text: text_owned() });
        };
        let method = Method::parse(method)
            .ok_or_else(|| EndpointError::UnknownMethod { text: text_owned(), method: method.to_owned() })?;
        let parsed = url::Url::parse(&replace_placeholders(url))
            .map_err(|cause| EndpointError::NotAbsolute { text: text_owned(), cause })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(EndpointError::NotHttp { text: text_owned() });
        }
        let host = CanonicalHost::of_url(&parsed).ok_or_else(|| EndpointError::NoHost { text: text_owned() })?;
        Ok(Endpoint { text: text_owned(), method, host })
    }

    pub fn method(&self) -> Method {
        self.method
    }

    /// The host requests go to, canonical as the whitelist matches it.
    pub fn host(&self) -> &CanonicalHost {
        &self.host
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl TryFrom<String> for Endpoint {
    type Error = EndpointError;

    fn try_from(text: String) -> Result<Endpoint, EndpointError> {
        Endpoint::parse(&text)
    }
}

impl From<Endpoint> for String {
    fn from(endpoint: Endpoint) -> String {
        endpoint.text
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `{name}` → `x`, so templated URLs parse; an unclosed `{` is left for the parser to reject.
fn replace_placeholders(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        out.push_str(&rest[..open]);
        out.push('x');
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_keeps_its_text_and_knows_its_method_and_host() {
        let endpoint = Endpoint::parse("get https://API.example.com:8443/items/{id}?q={q}").unwrap();
        assert_eq!(endpoint.method(), Method::Get);
        assert_eq!(endpoint.host().to_string(), "api.example.com");
        assert_eq!(endpoint.to_string(), "get https://API.example.com:8443/items/{id}?q={q}");
        let json = serde_json::to_value(&endpoint).unwrap();
        assert_eq!(json, "get https://API.example.com:8443/items/{id}?q={q}");
        assert_eq!(serde_json::from_value::<Endpoint>(json).unwrap(), endpoint);
    }

    #[test]
    fn malformed_endpoints_say_what_is_wrong() {
        for (text, expected) in [
            (
                "https://api.example.com/x",
                r#"endpoint "https://api.example.com/x" must be "METHOD URL", e.g. "GET https://api.example.com/items/{id}""#,
            ),
            (
                "GET https://a.com/x extra",
                r#"endpoint "GET https://a.com/x extra" must be "METHOD URL", e.g. "GET https://api.example.com/items/{id}""#,
            ),
            (
                "FETCH https://api.example.com/x",
                r#"endpoint "FETCH https://api.example.com/x" has an unknown HTTP method "FETCH"; use one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"#,
            ),
            (
                "GET /items/{id}",
                r#"endpoint "GET /items/{id}" does not have an absolute URL (relative URL without a base); write the full https:// URL"#,
            ),
            ("GET ftp://example.com/x", r#"endpoint "GET ftp://example.com/x" must use an http:// or https:// URL"#),
            ("GET data:text/plain,x", r#"endpoint "GET data:text/plain,x" must use an http:// or https:// URL"#),
        ] {
            assert_eq!(Endpoint::parse(text).unwrap_err().to_string(), expected, "{text}");
        }
        let error = serde_json::from_value::<Endpoint>(serde_json::json!("GET nowhere")).unwrap_err();
        assert!(error.to_string().contains("does not have an absolute URL"), "{error}");
    }

    #[test]
    fn methods_that_read_and_repeat() {
        let read: Vec<Method> = METHODS.iter().map(|(m, _)| *m).filter(|m| m.is_read_only()).collect();
        assert_eq!(read, [Method::Get, Method::Head, Method::Options]);
        assert!(Method::Put.is_idempotent() && Method::Delete.is_idempotent() && !Method::Post.is_idempotent());
    }

    #[test]
    fn placeholders() {
        assert_eq!(replace_placeholders("https://a.com/{x}/b/{y}?q={q}"), "https://a.com/x/b/x?q=x");
        assert_eq!(replace_placeholders("https://{sub}.a.com/"), "https://x.a.com/");
        assert_eq!(replace_placeholders("https://a.com/{oops"), "https://a.com/{oops");
    }
}
