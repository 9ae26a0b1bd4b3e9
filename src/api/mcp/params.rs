//! The shape of a JSON-RPC request's `params`, checked before rmcp sees the request.
//!
//! rmcp reads a request whose `params` do not fit its method (`tools/call` with array
//! `arguments`, or without a `name`) as a request for a method it does not know, and answers
//! -32601 "method not found", which sends a client looking for the wrong mistake. JSON-RPC's
//! answer is -32602 "invalid params"; this finds those requests and says what to change.
//!
//! The body is read once more for this, but nothing is built: values are skipped and only
//! their JSON kinds are kept, so a call's arguments are not copied.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::Kind;

/// The error for a request whose `params` do not fit its method; `None` when they fit, or
/// when the body is not a single request (other checks answer those).
pub fn misfit(body: &[u8]) -> Option<ApiError> {
    let request: Request = serde_json::from_slice(body).ok()?;
    request.id?;
    let method = request.method?;
    let problem = match (method.as_ref(), request.params) {
        (_, None) if method != "tools/call" => return None,
        (_, Some(Params::Other(kind))) => {
            format!("params must be an object (MCP passes parameters by name), not {kind}")
        }
        ("tools/call", None) => {
            "params must be an object with the tool's name: {\"name\": \"...\", \"arguments\": {...}}".to_string()
        }
        ("tools/call", Some(Params::Object { name, arguments })) => match (name, arguments) {
            (Some(Kind::String), None | Some(Kind::Null | Kind::Object)) => return None,
            (None, _) => "params.name is missing: name the tool to call (tools/list shows them)".to_string(),
            (Some(kind), _) if kind != Kind::String => {
                format!("params.name must be the tool's name as a string, not {kind}")
            }
            (_, Some(kind)) => format!(
                "params.arguments must be an object of named arguments (or left out), not {kind}: {{\"arguments\": {{\"city\": \"Oslo\"}}}}"
            ),
            (_, None) => return None,
        },
        _ => return None,
    };
    Some(ApiError::new(ErrorCode::InvalidParams, format!("{method}: {problem}")))
}

/// The tool a single `tools/call` request names; `None` for anything else.
pub fn called_tool(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
        params: Option<CallParams<'a>>,
    }
    #[derive(Deserialize)]
    struct CallParams<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
    }
    match serde_json::from_slice::<Call>(body) {
        Ok(call) => {
            (call.method.as_deref() == Some("tools/call")).then_some(())?;
            call.params?.name.map(Cow::into_owned)
        }
        // Duplicate keys (which the derived reader refuses) are read as rmcp reads them: the last
        // one counts.
        Err(_) => {
            let message: Value = serde_json::from_slice(body).ok()?;
            (message.get("method")? == "tools/call").then_some(())?;
            Some(message.get("params")?.get("name")?.as_str()?.to_string())
        }
    }
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(default)]
    id: Option<IgnoredAny>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    params: Option<Params>,
}

/// `params` as far as the check needs it.
enum Params {
    Object { name: Option<Kind>, arguments: Option<Kind> },
    Other(Kind),
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Params, D::Error> {
        deserializer.deserialize_any(ParamsVisitor)
    }
}

struct ParamsVisitor;

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = Params;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Params, E> {
        Ok(Params::Other(Kind::Null))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Params, E> {
        Ok(Params::Other(Kind::Bool))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Params, E> {
        Ok(Params::Other(Kind::Number))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Params, E> {
        Ok(Params::Other(Kind::Number))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Params, E> {
        Ok(Params::Other(Kind::Number))
    }
    fn visit_str<E>(self, _: &str) -> Result<Params, E> {
        Ok(Params::Other(Kind::String))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Params, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Params::Other(Kind::Array))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
        let (mut name, mut arguments) = (None, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "name" => name = Some(map.next_value::<Kind>()?),
                "arguments" => arguments = Some(map.next_value::<Kind>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Params::Object { name, arguments })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &str) -> Option<String> {
        misfit(body.as_bytes()).map(|error| {
            assert_eq!(error.code, ErrorCode::InvalidParams);
            error.message
        })
    }

    #[test]
    fn tools_call_params_that_do_not_fit_are_named() {
        let call = |params: &str| format!(r#"{{"jsonrpc": "2.0", "id": 1, "method": "tools/call"{params}}}"#);
        for fits in [
            r#", "params": {"name": "hi"}"#,
            r#", "params": {"name": "hi", "arguments": {"a": [1, {"b": 2}]}}"#,
            r#", "params": {"name": "hi", "arguments": null, "_meta": {"progressToken": 1}}"#,
        ] {
            assert_eq!(check(&call(fits)), None, "{fits}");
        }
        for (misfit, said) in [
            (r#", "params": {"name": "hi", "arguments": [1, 2]}"#, "params.arguments must be an object"),
            (r#", "params": {"name": "hi", "arguments": "city=Oslo"}"#, "not a string"),
            (r#", "params": {"arguments": {}}"#, "params.name is missing"),
            (r#", "params": {"name": 7}"#, "params.name must be the tool's name as a string, not a number"),
            (r#", "params": ["hi", {}]"#, "params must be an object (MCP passes parameters by name), not an array"),
            (r#", "params": "hi""#, "not a string"),
            ("", "params must be an object with the tool's name"),
        ] {
            let message = check(&call(misfit)).unwrap_or_else(|| panic!("{misfit} was let through"));
            assert!(message.starts_with("tools/call: ") && message.contains(said), "{misfit}: {message}");
        }
    }

    #[test]
    fn other_methods_and_other_mistakes_are_left_to_their_own_checks() {
        for body in [
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "x"}}"#,
            r#"{"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hi"}"#,
            r#"[{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}]"#,
            "null",
        ] {
            assert_eq!(check(body), None, "{body}");
        }
        let message = check(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}"#).unwrap();
        assert!(message.starts_with("tools/list: params must be an object"), "{message}");
    }
}
