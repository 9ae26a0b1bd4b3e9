//! What an agent reads about `code_execution`: its description (when to use it, the sandbox,
//! the error model, examples) with a TypeScript declaration of every tool a script can reach,
//! derived from the tools' JSON Schemas, and its input and output schemas.
//!
//! The description goes into a model's context on every `tools/list`, so it is kept compact:
//! one line per tool description (cut at [`DOC_CHARS`]), property descriptions only where
//! short, nested schemas past [`MAX_DEPTH`] as `any`.

use std::fmt::Write;

use serde_json::{Map, Value, json};

use crate::toolset::ServerId;

/// Longest tool description carried into the declaration.
const DOC_CHARS: usize = 160;
/// Longest property description carried into the declaration.
const PROPERTY_DOC_CHARS: usize = 80;
/// Schema nesting rendered as types; deeper parts are `any`.
const MAX_DEPTH: usize = 4;

/// A tool a script can reach, as the declaration shows it.
pub struct Reachable<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub input_schema: &'a Map<String, Value>,
    pub output_schema: Option<&'a Map<String, Value>>,
}

/// The limits a script runs under, as the description states them.
pub struct StatedLimits {
    pub timeout_ms: u64,
    /// 0: no limit.
    pub max_tool_calls: u32,
    pub max_concurrent_tool_calls: u32,
}

/// The `code_execution` tool's description for a script on `own` that can reach `servers`.
pub fn description(own: &ServerId, servers: &[(ServerId, Vec<Reachable<'_>>)], limits: &StatedLimits) -> String {
    let mut text = String::with_capacity(4096);
    text.push_str(
        "Run a JavaScript script that calls the tools below and returns one JSON result. Use it for multi-step \
         work: several tool calls, loops over a list, joining or comparing results, filtering a large result down \
         to what you need; the tool results stay inside the script instead of entering your context. For a single \
         tool call, call that tool directly.\n\n\
         The script is the body of an async function: use `await` and `return` a JSON value. In scope: `input` \
         (what you send as `input`); `tools.<server>.<tool>(args)`, which returns the tool's value or throws a \
         ToolError with `.code`; `call_tool(server, tool, args)`, which never throws and returns \
         `{ok: true, value}` or `{ok: false, error: {code, message}}`; `console.log` (returned as `console`); the \
         ECMAScript built-ins. No fetch, network, filesystem, require or import: tools are the only way out.\n\
         A tool's value is its structured result, else its text parsed as JSON, else its text.\n",
    );
    let calls = match limits.max_tool_calls {
        0 => "any number of tool calls".to_string(),
        n => format!("at most {n} tool calls"),
    };
    let _ = writeln!(
        text,
        "Limits: {} ms, {calls}, {} at a time (`options` may lower them).",
        limits.timeout_ms, limits.max_concurrent_tool_calls
    );
    text.push_str(
        "call_tool error codes: NOT_FOUND, SERVER_NOT_ALLOWED, MAX_TOOL_CALLS, INSUFFICIENT_SCOPE, INVALID_ARGUMENTS, TOOL_ERROR, \
         TIMEOUT, LIMIT, BUSY, RESULT_TOO_LARGE.\n\
         Result: {ok: true, value, calls} or {ok: false, error: {code, message, stack, line}, calls}; `calls` lists \
         every tool call made, so partial work is visible after a failure.\n\n",
    );
    text.push_str("```ts\n");
    text.push_str(&declarations(servers));
    text.push_str("```\n\nExamples:\n```js\n");
    let (server, tool) = example_tool(own, servers);
    let _ = write!(
        text,
        "// Chain calls; only what you return comes back.\n\
         const first = await tools{server}.{tool}({{ /* args */ }});\n\
         return {{ summary: first /* pick the fields you need */ }};\n\
         ```\n```js\n\
         const results = await Promise.all(input.ids.map((id) => call_tool({quoted}, {tool_quoted}, {{ id }})));\n\
         return results.map((r) => (r.ok ? r.value : r.error.code));\n\
         ```\n",
        server = property_access(server.as_str()),
        quoted = json!(server.as_str()),
        tool_quoted = json!(tool),
    );
    text
}

/// A tool to name in the examples: the script's own server's first tool, else any.
fn example_tool<'a>(own: &'a ServerId, servers: &'a [(ServerId, Vec<Reachable<'_>>)]) -> (&'a ServerId, &'a str) {
    servers
        .iter()
        .find(|(id, tools)| id == own && !tools.is_empty())
        .or_else(|| servers.iter().find(|(_, tools)| !tools.is_empty()))
        .map_or((own, "some_tool"), |(id, tools)| (id, tools[0].name))
}

/// `declare const tools: {...}` for `servers`, plus `call_tool` and `input`.
pub fn declarations(servers: &[(ServerId, Vec<Reachable<'_>>)]) -> String {
    let mut out = String::from("declare const input: any;\ndeclare const tools: {\n");
    for (server, tools) in servers {
        let _ = writeln!(out, "  {}: {{", key(server.as_str()));
        for tool in tools {
            let doc = one_line(tool.description, DOC_CHARS);
            if !doc.is_empty() {
                let _ = writeln!(out, "    /** {doc} */");
            }
            let args = object_type(tool.input_schema, 4, true);
            let output = tool.output_schema.map_or_else(|| "any".to_string(), |s| object_type(s, 3, false));
            let _ = writeln!(out, "    {}(args: {args}): Promise<{output}>;", key(tool.name));
        }
        out.push_str("  };\n");
    }
    out.push_str(
        "};\ndeclare function call_tool(server: string, tool: string, args?: object):\n  \
         Promise<{ ok: true; value: any } | { ok: false; error: { code: string; message: string } }>;\n",
    );
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
fn key(name: &str) -> String {
    let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if identifier { name.to_string() } else { json!(name).to_string() }
}

/// `.name` or `["na-me"]`.
fn property_access(name: &str) -> String {
    let quoted = key(name);
    if quoted.starts_with('"') { format!("[{quoted}]") } else { format!(".{quoted}") }
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

/// The `code_execution` tool's input schema.
pub fn input_schema() -> Map<String, Value> {
    let schema = json!({
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "JavaScript: the body of an async function. Use await; return a JSON value."
            },
            "input": {"description": "Any JSON value; the script reads it as `input`."},
            "options": {
                "type": "object",
                "description": "Lower the limits for this run (they cannot be raised).",
                "properties": {
                    "timeout_ms": {"type": "integer", "minimum": 1},
                    "max_tool_calls": {"type": "integer", "minimum": 0, "description": "0: no lower limit"},
                    "allowed_servers": {"type": "array", "items": {"type": "string"}}
                },
                "additionalProperties": false
            }
        },
        "required": ["code"],
        "additionalProperties": false
    });
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The `code_execution` tool's output schema: the shape of `structuredContent`.
pub fn output_schema() -> Map<String, Value> {
    let schema = json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "value": {},
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "stack": {"type": "string"},
                    "line": {"type": "integer"}
                },
                "required": ["code", "message"]
            },
            "calls": {"type": "array", "items": {"type": "object"}},
            "console": {"type": "string"},
            "execution_id": {"type": "string"}
        },
        "required": ["ok", "calls", "execution_id"]
    });
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn schemas_become_typescript() {
        let input = schema(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer"},
                "units": {"enum": ["metric", "imperial"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "when": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "filter": {"type": "object", "properties": {"min": {"type": "number"}}, "required": ["min"]},
                "extra": {"type": "object", "additionalProperties": {"type": "boolean"}},
                "odd-name": {"type": ["string", "number"]}
            },
            "required": ["city"]
        }));
        let output =
            schema(json!({"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]}));
        let servers = vec![(
            ServerId::parse("my-weather").unwrap(),
            vec![Reachable {
                name: "forecast",
                description: "Forecast.\nMore.",
                input_schema: &input,
                output_schema: Some(&output),
            }],
        )];
        let text = declarations(&servers);
        assert!(text.contains("  \"my-weather\": {\n    /** Forecast. */\n    forecast(args: {\n"), "{text}");
        for expected in [
            "city: string; // City name",
            "days?: number;",
            "units?: \"metric\" | \"imperial\";",
            "tags?: string[];",
            "when?: (string | null);",
            "filter?: { min: number };",
            "extra?: Record<string, boolean>;",
            "\"odd-name\"?: string | number;",
            "}): Promise<{ temp: number }>;",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in\n{text}");
        }
    }

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
