//! The tool for one operation: its name, title and description, its input schema (the path,
//! query, header and cookie parameters plus the body), annotations from the method, an output
//! schema from an object response, and its handler: the shared executor behind the plan of the
//! request. Also the example arguments a self-test calls it with, from the description's
//! examples, defaults and enums.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::body::{self, BodyArgument};
use super::schema::{output_schema, sanitize};
use super::spec::Operation;
use crate::toolset::ToolSpec;

/// The code every derived handler ends with, after its `const plan = …;` line.
pub const EXECUTOR: &str = include_str!("executor.js");

/// Longest tool description taken from a summary or description.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

/// Why a tool has no example arguments: a required argument the description gives no example,
/// default or enum for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the description gives no example for {arg}")]
pub struct NoExample {
    pub arg: String,
}

/// The tool for one operation, and example arguments for its self-test.
pub fn from_operation(
    op: &Operation,
    name: &str,
    base: &url::Url,
    needs: &[String],
    warnings: &mut Vec<String>,
) -> (ToolSpec, Result<Value, NoExample>) {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut params = Vec::new();
    let mut example = Ok(Map::new());
    let mut add_example = |arg: &str, value: Option<&Value>, needed: bool| {
        if let Ok(args) = &mut example {
            match value {
                Some(value) if needed => {
                    args.insert(arg.to_string(), value.clone());
                }
                None if needed => example = Err(NoExample { arg: arg.to_string() }),
                _ => {}
            }
        }
    };
    for parameter in &op.parameters {
        let mut arg = parameter.name.clone();
        if properties.contains_key(&arg) {
            arg = format!("{}_{}", parameter.name, parameter.location);
        }
        let mut schema = parameter.schema.clone();
        if !schema.is_object() {
            schema = json!({});
        }
        if let Some(text) = &parameter.description {
            schema["description"] = Value::String(trim(text, 300));
        }
        properties.insert(arg.clone(), schema);
        if parameter.required {
            required.push(Value::String(arg.clone()));
        }
        add_example(&arg, parameter.example.as_ref(), parameter.required);
        params.push(json!({
            "arg": arg, "name": parameter.name, "in": parameter.location,
            "style": parameter.style, "explode": parameter.explode,
        }));
    }
    let mut body = Value::Null;
    if let Some(request_body) = &op.body {
        let arg = if properties.contains_key("body") { "request_body".to_string() } else { "body".to_string() };
        let BodyArgument { mut schema, example, kind, files, encoding } = body::argument(request_body);
        if let Some(text) = &request_body.description {
            schema["description"] = Value::String(trim(text, 300));
        }
        properties.insert(arg.clone(), schema);
        if request_body.required {
            required.push(Value::String(arg.clone()));
        }
        add_example(&arg, example.as_ref(), request_body.required);
        body = json!({
            "arg": arg, "type": request_body.content_type, "kind": kind.as_str(), "files": files,
            "encoding": encoding,
        });
    }
    let output_schema = op.response.as_ref().and_then(output_schema);
    let plan = json!({
        "method": op.method,
        "base": base.as_str(),
        "path": op.path,
        "params": params,
        "body": body,
        "accept": op.accept,
        "object": output_schema.is_some(),
        "auth": needs.iter().map(|s| format!("the credential {s:?}")).collect::<Vec<_>>(),
    });
    let description = description(op);
    let mut annotations = Map::new();
    annotations.insert("readOnlyHint".into(), Value::Bool(matches!(op.method.as_str(), "GET" | "HEAD" | "OPTIONS")));
    if op.method == "DELETE" {
        annotations.insert("destructiveHint".into(), Value::Bool(true));
    }
    if matches!(op.method.as_str(), "PUT" | "DELETE") {
        annotations.insert("idempotentHint".into(), Value::Bool(true));
    }
    annotations.insert("openWorldHint".into(), Value::Bool(true));
    let mut input_schema = Map::new();
    input_schema.insert("type".into(), "object".into());
    input_schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        input_schema.insert("required".into(), Value::Array(required));
    }
    if op.response.is_some() && output_schema.is_none() {
        warnings.push(format!("{}: its response is not a JSON object, so it is returned as text", describe(op)));
    }
    let spec = ToolSpec {
        name: name.to_string(),
        title: op.summary.as_deref().filter(|s| !s.trim().is_empty()).map(|s| trim(s, 200)),
        description,
        input_schema: sanitize(input_schema),
        output_schema,
        handler: format!("const plan = {plan};\n{EXECUTOR}"),
        annotations: Some(annotations),
    };
    (spec, example.map(Value::Object))
}

pub fn describe(op: &Operation) -> String {
    match &op.operation_id {
        Some(id) => format!("{id} ({} {})", op.method, op.path),
        None => format!("{} {}", op.method, op.path),
    }
}

/// A tool name from the operationId (`listPets` → `list_pets`) or the method and path, unique
/// among `taken`.
pub fn unique_name(op: &Operation, taken: &mut HashSet<String>) -> String {
    let source = op.operation_id.clone().unwrap_or_else(|| format!("{} {}", op.method.to_lowercase(), op.path));
    let mut name = String::new();
    let mut previous_lower = false;
    for c in source.chars() {
        if c.is_ascii_uppercase() && previous_lower {
            name.push('_');
        }
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.ends_with('_') {
            name.push('_');
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
    }
    let mut name = name.trim_matches('_').to_string();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = format!("op_{name}");
    }
    name.truncate(60);
    let name = name.trim_end_matches('_').to_string();
    let mut candidate = name.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{name}_{n}");
        n += 1;
    }
    candidate
}

/// A tool description: the summary, what the description adds, and the fields the response
/// has, so an agent can tell what the call gives back without calling it.
fn description(op: &Operation) -> String {
    let summary = op.summary.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let detail = op.description.as_deref().map(str::trim).filter(|d| !d.is_empty() && Some(*d) != summary);
    let mut text = match (summary, detail) {
        (Some(summary), Some(detail)) => {
            let summary = trim(summary, 200);
            let end = if summary.ends_with(['.', '!', '?']) { "" } else { "." };
            format!("{summary}{end} {}", trim(detail, MAX_DESCRIPTION_CHARS - summary.len().min(400)))
        }
        (Some(only), None) | (None, Some(only)) => trim(only, MAX_DESCRIPTION_CHARS),
        (None, None) => format!("{} {}", op.method, op.path),
    };
    if let Some(fields) = op.response.as_ref().and_then(response_fields) {
        let end = if text.ends_with(['.', '!', '?']) { "" } else { "." };
        text.push_str(&format!("{end} Returns {fields}."));
    }
    if op.deprecated { format!("(Deprecated) {text}") } else { text }
}

/// "an object with id, name, …" / "a list of objects with …" from a response schema.
fn response_fields(schema: &Value) -> Option<String> {
    let (what, object) = match schema.get("items") {
        Some(items) if schema.get("type").is_some_and(|t| t == "array") => ("a list of objects", items),
        _ => ("an object", schema),
    };
    let names: Vec<&String> = object.get("properties")?.as_object()?.keys().collect();
    if names.is_empty() {
        return None;
    }
    let shown: Vec<&str> = names.iter().take(8).map(|n| n.as_str()).collect();
    let more = if names.len() > 8 { format!(" and {} more fields", names.len() - 8) } else { String::new() };
    Some(format!("{what} with {}{more}", shown.join(", ")))
}

/// Whitespace and control characters collapsed to single spaces, and cut at `max` characters.
/// A description's text is shown to models on one line, and a NUL in it is refused by the
/// toolset check (the catalog cannot store one), which would fail the whole server over it.
pub fn trim(text: &str, max: usize) -> String {
    let collapsed = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if collapsed.chars().count() <= max {
        return collapsed;
    }
    let cut: String = collapsed.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_lose_control_characters_and_nul() {
        assert_eq!(trim("List\u{0}the\tpets.\r\n Fast\u{7}.", 100), "List the pets. Fast .");
        assert_eq!(trim("abcdef", 4), "abc…");
    }

    #[test]
    fn names_are_valid_and_unique() {
        let mut taken = HashSet::new();
        let op = |id: Option<&str>, method: &str, path: &str| Operation {
            operation_id: id.map(str::to_owned),
            ..Operation::bare(method, path)
        };
        assert_eq!(unique_name(&op(Some("repos/get-content"), "GET", "/"), &mut taken), "repos_get_content");
        assert_eq!(unique_name(&op(Some("getHTTPStatus"), "GET", "/"), &mut taken), "get_httpstatus");
        assert_eq!(unique_name(&op(None, "GET", "/users/{id}/repos"), &mut taken), "get_users_id_repos");
        assert_eq!(unique_name(&op(Some("2fa"), "GET", "/"), &mut taken), "op_2fa");
        assert_eq!(unique_name(&op(Some("repos/get-content"), "GET", "/"), &mut taken), "repos_get_content_2");
        let long = "a".repeat(200);
        assert!(unique_name(&op(Some(&long), "GET", "/"), &mut taken).len() <= 64);
        for name in &taken {
            let valid = name.len() <= 64
                && name.starts_with(|c: char| c.is_ascii_lowercase())
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            assert!(valid, "{name}");
        }
    }
}
