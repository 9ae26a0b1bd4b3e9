//! What a derived server needs to be called with: each security scheme its tools use, the
//! credential that satisfies it and how the daemon injects that credential.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A security scheme the selected tools need, and how the daemon's credential should inject it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AuthNeed {
    /// The scheme's name in the description.
    pub scheme: String,
    /// The name of the server credential that satisfies it: the scheme's name, with characters
    /// a credential name cannot have replaced by `_`.
    pub credential: String,
    /// How to add it: the `inject` of `PUT /admin/servers/{id}/credentials/{scheme}`.
    #[schema(value_type = Object)]
    pub inject: Value,
    /// Tools that need it (alone or with another scheme).
    pub tools: Vec<String>,
}

/// Records that the tool `tool` needs each scheme of `schemes`: a need for a scheme first met,
/// injected as its definition among the description's `defined` schemes says, or a warning when
/// the scheme is undefined or cannot be injected.
pub fn record_needs(
    auth: &mut Vec<AuthNeed>,
    defined: &[(String, Value)],
    schemes: &[String],
    tool: &str,
    warnings: &mut Vec<String>,
) {
    for scheme in schemes {
        match auth.iter_mut().find(|a| &a.scheme == scheme) {
            Some(need) => need.tools.push(tool.to_string()),
            None => match defined.iter().find(|(n, _)| n == scheme).map(|(_, s)| injection(s)) {
                Some(Ok(inject)) => auth.push(AuthNeed {
                    scheme: scheme.clone(),
                    credential: credential_name(scheme),
                    inject,
                    tools: vec![tool.to_string()],
                }),
                Some(Err(problem)) => warnings.push(format!("security scheme {scheme:?}: {problem}")),
                None => warnings.push(format!("security scheme {scheme:?} is used but not defined")),
            },
        }
    }
}

/// The credential name for a security scheme: its name where a credential name allows it.
pub fn credential_name(scheme: &str) -> String {
    let mut name: String = scheme
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(64)
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        name.replace_range(..name.chars().next().map_or(0, char::len_utf8), "k");
    }
    if name.is_empty() { "key".to_string() } else { name }
}

/// Why a security scheme cannot be satisfied by a credential the daemon injects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotInjectable {
    #[error("an apiKey scheme without a name")]
    ApiKeyWithoutName,
    /// `place` is the scheme's `in`, if it has one.
    #[error("an apiKey scheme in {place:?} cannot be injected")]
    ApiKeyIn { place: Option<String> },
    #[error("scheme type {kind:?} is not supported")]
    SchemeType { kind: String },
}

/// How a credential for this scheme is injected (the credentials API's `inject`).
fn injection(scheme: &Value) -> Result<Value, NotInjectable> {
    let kind = scheme.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "apiKey" => {
            let name = scheme.get("name").and_then(Value::as_str).ok_or(NotInjectable::ApiKeyWithoutName)?;
            match scheme.get("in").and_then(Value::as_str) {
                Some("header") => Ok(json!({"header": name, "format": "{value}"})),
                Some("query") => Ok(json!({"query": name})),
                Some("cookie") => Ok(json!({"header": "Cookie", "format": format!("{name}={{value}}")})),
                other => Err(NotInjectable::ApiKeyIn { place: other.map(str::to_owned) }),
            }
        }
        "http" => match scheme.get("scheme").and_then(Value::as_str).map(str::to_ascii_lowercase).as_deref() {
            Some("basic") => Ok(json!({"basic": {"username": "<username>"}})),
            _ => Ok(json!({"header": "Authorization", "format": "Bearer {value}"})),
        },
        // Swagger 2.0 `basic`; OAuth 2 and OpenID Connect as a bearer token the operator obtains.
        "basic" => Ok(json!({"basic": {"username": "<username>"}})),
        "oauth2" | "openIdConnect" => Ok(json!({"header": "Authorization", "format": "Bearer {value}"})),
        other => Err(NotInjectable::SchemeType { kind: other.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_scheme_names_a_credential_can_have() {
        assert_eq!(credential_name("petstore auth"), "petstore_auth");
        assert_eq!(credential_name("_x"), "kx");
    }

    #[test]
    fn injections_follow_the_scheme() {
        assert_eq!(
            injection(&json!({"type": "apiKey", "in": "query", "name": "appid"})).unwrap(),
            json!({"query": "appid"})
        );
        assert_eq!(
            injection(&json!({"type": "apiKey", "in": "cookie", "name": "sid"})).unwrap(),
            json!({"header": "Cookie", "format": "sid={value}"})
        );
        assert_eq!(
            injection(&json!({"type": "http", "scheme": "Basic"})).unwrap(),
            json!({"basic": {"username": "<username>"}})
        );
        assert_eq!(injection(&json!({"type": "oauth2"})).unwrap()["format"], "Bearer {value}");
        assert!(injection(&json!({"type": "mutualTLS"})).is_err());
    }

    #[test]
    fn schemes_that_cannot_be_injected_say_why_as_before() {
        let refusals = [
            (json!({"type": "apiKey", "in": "header"}), "an apiKey scheme without a name"),
            (
                json!({"type": "apiKey", "in": "body", "name": "k"}),
                "an apiKey scheme in Some(\"body\") cannot be injected",
            ),
            (json!({"type": "apiKey", "name": "k"}), "an apiKey scheme in None cannot be injected"),
            (json!({"type": "mutualTLS"}), "scheme type \"mutualTLS\" is not supported"),
            (json!({}), "scheme type \"\" is not supported"),
        ];
        for (scheme, message) in refusals {
            assert_eq!(injection(&scheme).unwrap_err().to_string(), message, "{scheme}");
        }
    }
}
