//! What an agent reads about `code_execution`: its description (when to use it, the sandbox,
//! the error model, examples) with a TypeScript declaration of every tool a script can reach,
//! derived from the tools' JSON Schemas, and its input and output schemas.
//!
//! The description goes into a model's context on every `tools/list`, so it is kept compact
//! (`serve::typescript` says how each tool is rendered).

use std::fmt::Write;

use serde_json::{Map, Value, json};

use crate::serve::typescript::{self, key};
use crate::toolset::ServerId;

/// A tool a script can reach, as the declaration shows it.
pub struct Reachable<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub input_schema: &'a Map<String, Value>,
    pub output_schema: Option<&'a Map<String, Value>>,
}

/// A server a script can reach, as the declaration shows it.
pub struct ReachableServer<'a> {
    pub id: ServerId,
    /// The tools it lists.
    pub tools: Vec<Reachable<'a>>,
    /// In discovery mode: every operation of its API, listed or not, is callable by its id as
    /// `tools.<server>.<operation>`.
    pub operations: bool,
}

/// The limits a script runs under, as the description states them.
pub struct StatedLimits {
    pub timeout_ms: u64,
    /// 0: no limit.
    pub max_tool_calls: u32,
    pub max_concurrent_tool_calls: u32,
}

/// The `code_execution` tool's description for a script on `own` that can reach `servers`.
pub fn description(own: &ServerId, servers: &[ReachableServer<'_>], limits: &StatedLimits) -> String {
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
    if servers.iter().any(|server| server.operations) {
        text.push_str(
            "A server declared with `[operation: string]` reaches every operation of its API, listed or not, as \
             `tools.<server>.<operation>(args)`: its search_operations tool finds operation ids, and its \
             describe_operation tool gives an operation's schemas and `declaration`, the typed signature to call \
             it with (both can be called from the script too).\n",
        );
    }
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
fn example_tool<'a>(own: &'a ServerId, servers: &'a [ReachableServer<'_>]) -> (&'a ServerId, &'a str) {
    servers
        .iter()
        .find(|server| server.id == *own && !server.tools.is_empty())
        .or_else(|| servers.iter().find(|server| !server.tools.is_empty()))
        .map_or((own, "some_tool"), |server| (&server.id, server.tools[0].name))
}

/// `declare const tools: {...}` for `servers`, plus `call_tool` and `input`.
pub fn declarations(servers: &[ReachableServer<'_>]) -> String {
    let mut out = String::from("declare const input: any;\ndeclare const tools: {\n");
    for server in servers {
        let _ = writeln!(out, "  {}: {{", key(server.id.as_str()));
        for tool in &server.tools {
            out.push_str(&typescript::method_at(4, tool.name, tool.description, tool.input_schema, tool.output_schema));
        }
        if server.operations {
            // Every operation is one declaration away, so a large API's hundreds of operations
            // are not all in the description.
            out.push_str(
                "    /** Any operation of this API by its id: search_operations finds ids; describe_operation gives \
                 its declaration. */\n    [operation: string]: (args?: object) => Promise<any>;\n",
            );
        }
        out.push_str("  };\n");
    }
    out.push_str(
        "};\ndeclare function call_tool(server: string, tool: string, args?: object):\n  \
         Promise<{ ok: true; value: any } | { ok: false; error: { code: string; message: string } }>;\n",
    );
    out
}

/// `.name` or `["na-me"]`.
fn property_access(name: &str) -> String {
    let quoted = key(name);
    if quoted.starts_with('"') { format!("[{quoted}]") } else { format!(".{quoted}") }
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
        let servers = vec![ReachableServer {
            id: ServerId::parse("my-weather").unwrap(),
            tools: vec![Reachable {
                name: "forecast",
                description: "Forecast.\nMore.",
                input_schema: &input,
                output_schema: Some(&output),
            }],
            operations: false,
        }];
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
}
