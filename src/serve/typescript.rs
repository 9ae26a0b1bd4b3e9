//! TypeScript declarations of tools, derived from their JSON Schemas: what code mode's
//! `code_execution` description declares for each reachable tool, and what `describe_operation`
//! gives for one operation of a discovery-mode server.
//!
//! Declarations go into a model's context, so they are kept compact: one line per tool
//! description (cut at [`DOC_CHARS`]), property descriptions only where short, nested schemas
//! past [`MAX_DEPTH`] as `any`.

use std::fmt::Write;

use serde_json::{Map, Value, json};

/// Longest tool description carried into the declaration.
const DOC_CHARS: usize = 160;
/// Longest property description carried into the declaration.
const PROPERTY_DOC_CHARS: usize = 80;
/// Schema nesting rendered as types; deeper parts are `any`.
const MAX_DEPTH: usize = 4;

/// One tool as a member of `tools.<server>`: its description as a doc comment, then
/// `name(args: {...}): Promise<...>;`, unindented.
pub fn method(
    name: &str,
    description: &str,
    input_schema: &Map<String, Value>,
    output_schema: Option<&Map<String, Value>>,
) -> String {
    method_at(0, name, description, input_schema, output_schema)
}

/// [`method`], each line indented by `indent` spaces.
pub fn method_at(
    indent: usize,
    name: &str,
    description: &str,
    input_schema: &Map<String, Value>,
    output_schema: Option<&Map<String, Value>>,
) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    let doc = one_line(description, DOC_CHARS);
    if !doc.is_empty() {
        let _ = writeln!(out, "{pad}/** {doc} */");
    }
    let args = object_type(input_schema, indent, true);
    let output = output_schema.map_or_else(|| "any".to_string(), |s| object_type(s, indent.saturating_sub(1), false));
    let _ = writeln!(out, "{pad}{}(args: {args}): Promise<{output}>;", key(name));
    out
}

/// The TypeScript type of a schema.
fn ts_type(schema: &Value, indent: usize) -> String {
    if indent / 2 > MAX_DEPTH + 1 {
        return "any".into();
    }
    let Some(schema) = schema.as_object() else {
        return "any".into();
    };
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return union(values.iter().map(|v| v.to_string()));
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    for (keyword, joiner) in [("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")] {
        if let Some(options) = schema.get(keyword).and_then(Value::as_array) {
            let parts: Vec<String> = options.iter().map(|s| ts_type(s, indent)).collect();
            return if parts.is_empty() { "any".into() } else { format!("({})", parts.join(joiner)) };
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) => typed(kind, schema, indent),
        Some(Value::Array(kinds)) => union(kinds.iter().filter_map(Value::as_str).map(|k| typed(k, schema, indent))),
        _ if schema.contains_key("properties") => object_type(schema, indent, false),
        _ => "any".into(),
    }
}

fn typed(kind: &str, schema: &Map<String, Value>, indent: usize) -> String {
    match kind {
        "string" => "string".into(),
        "integer" | "number" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => match schema.get("items") {
            Some(items) => {
                let item = ts_type(items, indent);
                if item.contains(' ') && !item.starts_with('{') { format!("({item})[]") } else { format!("{item}[]") }
            }
            None => "any[]".into(),
        },
        "object" => object_type(schema, indent, false),
        _ => "any".into(),
    }
}

/// `{ a: string; b?: number }` (one property per line when documented), or a record type.
fn object_type(schema: &Map<String, Value>, indent: usize, documented: bool) -> String {
    let properties = schema.get("properties").and_then(Value::as_object);
    let Some(properties) = properties.filter(|p| !p.is_empty()) else {
        return match schema.get("additionalProperties") {
            Some(Value::Object(values)) => {
                format!("Record<string, {}>", ts_type(&Value::Object(values.clone()), indent))
            }
            _ => "Record<string, any>".into(),
        };
    };
    if indent / 2 > MAX_DEPTH {
        return "Record<string, any>".into();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<(String, String)> = properties
        .iter()
        .map(|(name, property)| {
            let optional = if required.contains(&name.as_str()) { "" } else { "?" };
            let field = format!("{}{optional}: {}", key(name), ts_type(property, indent + 2));
            let doc = property.get("description").and_then(Value::as_str).map(|d| one_line(d, PROPERTY_DOC_CHARS));
            (field, doc.unwrap_or_default())
        })
        .collect();
    if documented && fields.iter().any(|(_, doc)| !doc.is_empty()) {
        let pad = " ".repeat(indent + 2);
        let mut out = String::from("{\n");
        for (field, doc) in &fields {
            if doc.is_empty() {
                let _ = writeln!(out, "{pad}{field};");
            } else {
                let _ = writeln!(out, "{pad}{field}; // {doc}");
            }
        }
        let _ = write!(out, "{}}}", " ".repeat(indent));
        return out;
    }
    let fields: Vec<String> = fields.into_iter().map(|(field, _)| field).collect();
    format!("{{ {} }}", fields.join("; "))
}

fn union(parts: impl Iterator<Item = String>) -> String {
    let parts: Vec<String> = parts.collect();
    if parts.is_empty() { "any".into() } else { parts.join(" | ") }
}

/// A property name as TypeScript writes it: bare when it is an identifier, quoted otherwise.
pub fn key(name: &str) -> String {
    let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if identifier { name.to_string() } else { json!(name).to_string() }
}

/// The first line of a description, cut at `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let line = line.replace("*/", "* /");
    if line.chars().count() <= max {
        return line;
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_and_odd_schemas_do_not_explode() {
        let mut deep = json!({"type": "string"});
        for _ in 0..50 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let text = ts_type(&deep, 0);
        assert!(text.len() < 200 && text.contains("Record<string, any>"), "{text}");
        assert_eq!(ts_type(&json!(true), 0), "any");
        assert_eq!(ts_type(&json!({"$ref": "#/x"}), 0), "any");
        assert_eq!(one_line(&"é".repeat(500), 10).chars().count(), 10);
        assert_eq!(one_line("a */ b", 80), "a * / b");
    }
}
