//! Checked types for what a server is made of: its id, its tools' names, schemas and handlers.
//!
//! Registration bodies are parsed into these types once, at the edge; everything after that
//! (catalog, mounts, calls) takes the checked types and never re-validates.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Largest handler source accepted, in bytes.
pub const MAX_HANDLER_BYTES: usize = 256 * 1024;
/// Most tools one server may expose.
pub const MAX_TOOLS: usize = 128;
const MAX_DESCRIPTION_CHARS: usize = 8 * 1024;
const ANNOTATION_BOOL_KEYS: &[&str] = &["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];

/// A server id: `[a-z0-9][a-z0-9-]{0,62}`, used in the mount path `/servers/<id>/mcp`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ServerId(String);

/// Debug-formats as the quoted id, so messages read `server "hn"`, not `ServerId("hn")`.
impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl ServerId {
    pub fn parse(raw: &str) -> Result<ServerId, String> {
        let valid = !raw.is_empty()
            && raw.len() <= 63
            && raw
                .bytes()
                .enumerate()
                .all(|(i, b)| b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && b == b'-'));
        if valid {
            Ok(ServerId(raw.to_string()))
        } else {
            Err(format!(
                "server id {raw:?} is invalid: use 1-63 characters from a-z, 0-9 and '-', starting with a letter or digit"
            ))
        }
    }

    /// A fresh id derived from a display name: its slug plus a short random suffix.
    pub fn generate(name: Option<&str>) -> ServerId {
        let mut slug = String::new();
        for c in name.unwrap_or("").chars() {
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
            if slug.len() >= 40 {
                break;
            }
        }
        let slug = slug.trim_end_matches('-');
        let slug = if slug.is_empty() { "server" } else { slug };
        let suffix = &uuid::Uuid::now_v7().simple().to_string()[26..];
        ServerId(format!("{slug}-{suffix}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn mcp_path(&self) -> String {
        format!("/servers/{}/mcp", self.0)
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One tool: a name matching `^[a-z][a-z0-9_]{0,63}$`, an object input schema and a handler body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Map<String, Value>,
    pub handler: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Map<String, Value>>,
}

/// A validated, non-empty list of tools with unique names.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Toolset {
    tools: Vec<ToolSpec>,
}

/// Why a toolset was refused; `field` points at the offending part of the request body.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsetError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ToolsetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl Toolset {
    /// Checks every tool's shape. Handler compilation is checked separately, by the engine.
    pub fn parse(raw: &[Value]) -> Result<Toolset, ToolsetError> {
        if raw.is_empty() {
            return Err(err("tools", "must contain at least one tool"));
        }
        if raw.len() > MAX_TOOLS {
            return Err(err("tools", &format!("has {} tools; at most {MAX_TOOLS} are allowed", raw.len())));
        }
        let mut tools: Vec<ToolSpec> = Vec::with_capacity(raw.len());
        for (index, value) in raw.iter().enumerate() {
            let at = format!("tools[{index}]");
            let tool = parse_tool(value, &at)?;
            if tools.iter().any(|t| t.name == tool.name) {
                return Err(err(&format!("{at}.name"), &format!("duplicate tool name {:?}", tool.name)));
            }
            tools.push(tool);
        }
        Ok(Toolset { tools })
    }

    /// Rebuilds a toolset from catalog rows, which were validated when they were written.
    pub fn from_trusted(tools: Vec<ToolSpec>) -> Toolset {
        Toolset { tools }
    }

    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }
}

fn err(field: &str, message: &str) -> ToolsetError {
    ToolsetError { field: field.to_string(), message: message.to_string() }
}

fn parse_tool(value: &Value, at: &str) -> Result<ToolSpec, ToolsetError> {
    let object = value.as_object().ok_or_else(|| err(at, "must be an object"))?;
    for key in object.keys() {
        if !["name", "description", "input_schema", "handler", "annotations"].contains(&key.as_str()) {
            return Err(err(
                &format!("{at}.{key}"),
                "unknown field; a tool has name, description, input_schema, handler and optional annotations",
            ));
        }
    }
    let string = |key: &str| -> Result<String, ToolsetError> {
        match object.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(err(&format!("{at}.{key}"), "must be a string")),
            None => Err(err(&format!("{at}.{key}"), "is required")),
        }
    };

    let name = string("name")?;
    check_tool_name(&name).map_err(|m| err(&format!("{at}.name"), &m))?;
    let description = string("description")?;
    if description.trim().is_empty() {
        return Err(err(&format!("{at}.description"), "must not be empty; MCP hosts show it to the model"));
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(err(&format!("{at}.description"), &format!("is longer than {MAX_DESCRIPTION_CHARS} characters")));
    }
    let handler = string("handler")?;
    if handler.trim().is_empty() {
        return Err(err(&format!("{at}.handler"), "must not be empty"));
    }
    if handler.len() > MAX_HANDLER_BYTES {
        return Err(err(&format!("{at}.handler"), &format!("is larger than {MAX_HANDLER_BYTES} bytes")));
    }
    let input_schema = match object.get("input_schema") {
        Some(Value::Object(schema)) => schema.clone(),
        Some(_) => {
            return Err(err(
                &format!("{at}.input_schema"),
                "must be a JSON Schema object such as {\"type\": \"object\", \"properties\": {}}",
            ));
        }
        None => return Err(err(&format!("{at}.input_schema"), "is required")),
    };
    check_input_schema(&input_schema).map_err(|m| err(&format!("{at}.input_schema"), &m))?;
    let annotations = match object.get("annotations") {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            check_annotations(a).map_err(|m| err(&format!("{at}.annotations"), &m))?;
            Some(a.clone())
        }
        Some(_) => return Err(err(&format!("{at}.annotations"), "must be an object")),
    };
    Ok(ToolSpec { name, description, input_schema, handler, annotations })
}

pub fn check_tool_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
    if valid {
        Ok(())
    } else {
        Err(format!("tool name {name:?} is invalid: use 1-64 characters from a-z, 0-9 and '_', starting with a letter"))
    }
}

/// An input schema must describe an object (MCP requires it) and be a valid JSON Schema.
pub fn check_input_schema(schema: &Map<String, Value>) -> Result<(), String> {
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!("must have \"type\": \"object\" (tool arguments are an object), found {other}"));
        }
        None => return Err("must have \"type\": \"object\" (tool arguments are an object)".into()),
    }
    let value = Value::Object(schema.clone());
    jsonschema::meta::validate(&value).map_err(|e| {
        let path = e.instance_path().to_string();
        let at = if path.is_empty() { String::new() } else { format!(" at {path}") };
        format!("is not a valid JSON Schema{at}: {e}")
    })?;
    jsonschema::validator_for(&value).map_err(|e| format!("cannot be used for validation: {e}"))?;
    Ok(())
}

fn check_annotations(annotations: &Map<String, Value>) -> Result<(), String> {
    for (key, value) in annotations {
        if ANNOTATION_BOOL_KEYS.contains(&key.as_str()) {
            if !value.is_boolean() {
                return Err(format!("{key} must be true or false"));
            }
        } else if key == "title" {
            if !value.is_string() {
                return Err("title must be a string".into());
            }
        } else {
            return Err(format!(
                "unknown annotation {key:?}; use title, readOnlyHint, destructiveHint, idempotentHint or openWorldHint"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "d", "input_schema": {"type": "object"}, "handler": "return 1;"})
    }

    #[test]
    fn server_ids() {
        for ok in ["a", "hn", "hacker-news-2", "0abc"] {
            assert!(ServerId::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "A", "a_b", "a/b", &"a".repeat(64), "ü"] {
            assert!(ServerId::parse(bad).is_err(), "{bad}");
        }
        let generated = ServerId::generate(Some("Hacker News API!"));
        assert!(generated.as_str().starts_with("hacker-news-api-"), "{generated}");
        assert!(ServerId::parse(generated.as_str()).is_ok());
        assert!(ServerId::parse(ServerId::generate(None).as_str()).is_ok());
    }

    #[test]
    fn tool_names() {
        for ok in ["a", "get_item", "x1", &"a".repeat(64)] {
            assert!(check_tool_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "_a", "Get", "get-item", "get item", &"a".repeat(65)] {
            assert!(check_tool_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn toolset_errors_name_the_field() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "tools"),
            (json!([tool("a"), tool("a")]), "tools[1].name"),
            (json!([tool("Bad")]), "tools[0].name"),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "string"}, "handler": "x"}]),
                "tools[0].input_schema",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object", "properties": 3}, "handler": "x"}]),
                "tools[0].input_schema",
            ),
            (json!([{"name": "a", "description": "d", "input_schema": [], "handler": "x"}]), "tools[0].input_schema"),
            (json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}}]), "tools[0].handler"),
            (
                json!([{"name": "a", "description": "", "input_schema": {"type": "object"}, "handler": "x"}]),
                "tools[0].description",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}, "handler": "x", "annotations": {"readOnly": true}}]),
                "tools[0].annotations",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}, "handler": "x", "extra": 1}]),
                "tools[0].extra",
            ),
        ];
        for (body, field) in cases {
            let error = Toolset::parse(body.as_array().unwrap()).unwrap_err();
            assert_eq!(error.field, field, "{body}: {error}");
        }
        assert_eq!(Toolset::parse(&[tool("a"), tool("b")]).unwrap().tools().len(), 2);
    }
}
