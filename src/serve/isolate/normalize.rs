//! Turning what a handler returned into an MCP tool result.
//!
//! Works on the JSON text produced by `JSON.stringify` inside the isolate, so it sees exactly
//! what a JSON client would, and nothing here can run handler code.
//!
//! * `{content: [...], isError?, structuredContent?, _meta?}` (and no other keys) is taken to
//!   be an MCP result and passed through after validation; an invalid one becomes an error
//!   result explaining what is wrong.
//! * A string becomes one text item.
//! * `undefined` (or anything `JSON.stringify` maps to `undefined`: functions, symbols)
//!   becomes one empty text item.
//! * Any other JSON value becomes its pretty-printed JSON as text (compact if pretty printing
//!   would exceed the result limit), plus `structuredContent` when it is an object.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::invocation::ToolResult;

/// Keys an MCP `CallToolResult` may have.
const MCP_KEYS: &[&str] = &["content", "isError", "structuredContent", "_meta"];

pub struct Normalised {
    pub result: ToolResult,
    /// Set when the handler's result was unusable or declared itself an error; the
    /// message for the call log.
    pub problem: Option<String>,
}

/// `json` is the output of `JSON.stringify(result)`, `None` for `undefined`.
pub fn normalise(json: Option<&str>, max_result_bytes: usize) -> Normalised {
    let Some(json) = json else {
        return ok(ToolResult::text("", false));
    };
    match serde_json::from_str::<Value>(&replace_lone_surrogates(json)) {
        Ok(value) => from_value(value, max_result_bytes),
        Err(e) => invalid(format!("the handler's result is not valid JSON: {e}")),
    }
}

/// `JSON.stringify` escapes lone surrogates as `\udXXX` (paired ones are emitted as UTF-8),
/// which serde_json rejects; they become U+FFFD, as `toWellFormed()` would make them.
fn replace_lone_surrogates(json: &str) -> Cow<'_, str> {
    if !json.contains("\\ud") {
        return Cow::Borrowed(json);
    }
    let bytes = json.as_bytes();
    let mut out = String::with_capacity(json.len());
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        let lone = i + 6 <= bytes.len()
            && bytes[i + 1] == b'u'
            && matches!(bytes[i + 2], b'd' | b'D')
            && matches!(bytes[i + 3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F');
        if lone {
            out.push_str(&json[copied..i]);
            out.push_str("\\ufffd");
            i += 6;
            copied = i;
        } else {
            // Skip the escaped character so `\\` followed by `ud800` is left alone.
            i += 2;
        }
    }
    out.push_str(&json[copied..]);
    Cow::Owned(out)
}

fn from_value(value: Value, max_result_bytes: usize) -> Normalised {
    match value {
        Value::String(text) => ok(ToolResult::text(text, false)),
        Value::Object(map) if looks_like_mcp(&map) => mcp_result(map),
        Value::Object(map) => {
            let value = Value::Object(map);
            let text = json_text(&value, max_result_bytes);
            ok(ToolResult { content: vec![text_item(text)], structured_content: Some(value), is_error: false })
        }
        other => ok(ToolResult::text(json_text(&other, max_result_bytes), false)),
    }
}

fn looks_like_mcp(map: &Map<String, Value>) -> bool {
    matches!(map.get("content"), Some(Value::Array(_))) && map.keys().all(|k| MCP_KEYS.contains(&k.as_str()))
}

fn mcp_result(mut map: Map<String, Value>) -> Normalised {
    let Some(Value::Array(content)) = map.remove("content") else {
        return invalid("'content' must be an array".to_owned());
    };
    for (index, item) in content.iter().enumerate() {
        if let Err(why) = validate_item(item) {
            return invalid(format!("content[{index}]: {why}"));
        }
    }
    let is_error = match map.get("isError") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return invalid("'isError' must be a boolean".to_owned()),
    };
    let structured_content = match map.remove("structuredContent") {
        None | Some(Value::Null) => None,
        Some(value @ Value::Object(_)) => Some(value),
        Some(_) => return invalid("'structuredContent' must be an object".to_owned()),
    };
    let problem = is_error.then(|| {
        let first_text = content.iter().find_map(|item| item.get("text").and_then(Value::as_str)).unwrap_or("");
        format!("handler returned isError: true: {}", preview(first_text))
    });
    Normalised { result: ToolResult { content, structured_content, is_error }, problem }
}

fn validate_item(item: &Value) -> Result<(), String> {
    let Value::Object(item) = item else {
        return Err("each content item must be an object".to_owned());
    };
    let Some(kind) = item.get("type").and_then(Value::as_str) else {
        return Err("each content item needs a string 'type'".to_owned());
    };
    let require_str = |field: &str| match item.get(field) {
        Some(Value::String(_)) => Ok(()),
        _ => Err(format!("a '{kind}' item needs a string '{field}'")),
    };
    match kind {
        "text" => require_str("text"),
        "image" | "audio" => require_str("data").and_then(|()| require_str("mimeType")),
        "resource_link" => require_str("uri").and_then(|()| require_str("name")),
        "resource" => match item.get("resource") {
            Some(Value::Object(resource))
                if resource.get("uri").is_some_and(Value::is_string)
                    && (resource.get("text").is_some_and(Value::is_string)
                        || resource.get("blob").is_some_and(Value::is_string)) =>
            {
                Ok(())
            }
            _ => Err("a 'resource' item needs a 'resource' object with a string 'uri' and a string 'text' or 'blob'"
                .to_owned()),
        },
        other => {
            Err(format!("unknown content type '{other}' (expected text, image, audio, resource or resource_link)"))
        }
    }
}

fn json_text(value: &Value, max_result_bytes: usize) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    if pretty.len() <= max_result_bytes { pretty } else { serde_json::to_string(value).unwrap_or_default() }
}

fn text_item(text: String) -> Value {
    serde_json::json!({ "type": "text", "text": text })
}

fn ok(result: ToolResult) -> Normalised {
    Normalised { result, problem: None }
}

fn invalid(why: String) -> Normalised {
    let message = format!("handler returned an invalid MCP tool result: {why}");
    Normalised { result: ToolResult::text(message.clone(), true), problem: Some(message) }
}

/// First line-ish of a message, for the call log.
pub fn preview(text: &str) -> String {
    const MAX: usize = 200;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
