//! Discovery mode: a server whose API has more operations than it lists (docs/openapi.md).
//!
//! Such a server lists a few of its operations as tools plus three standard tools that reach
//! all of them: `search_operations` ranks the operations for a query, `describe_operation`
//! gives one operation's input and output schemas, and `call_operation` calls any operation by
//! its id. Every operation's tool and the search index were derived with the version and are
//! stored with it (`catalog::DiscoveryRecord`); they are read the first time one of the
//! standard tools is used, once even under concurrent first uses, and kept with the mount.
//!
//! `call_operation` runs the operation as the tool it would be if it were listed: the same
//! argument checks against its input schema, the same handler, credentials and read-only
//! enforcement, the same OAuth scope rule by its own `readOnlyHint`, and the same call log and
//! metrics, under the operation's name. Searching and describing read only what the version
//! stores, so they run in the daemon, without an isolate.

pub mod search;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

use crate::catalog::{Catalog, DiscoveryRecord, OperationRecord};
use crate::serve::call::{CallError, CallableTool};
use crate::serve::health::{HealthRule, ToolHealth};
use crate::serve::isolate::ToolResult;
use crate::telemetry::metrics::Metrics;
use crate::toolset::{ServerId, ToolSpec};
use search::{SearchIndex, Searcher};

pub const SEARCH_OPERATIONS: &str = "search_operations";
pub const DESCRIBE_OPERATION: &str = "describe_operation";
pub const CALL_OPERATION: &str = "call_operation";
/// The tools every discovery-mode server lists besides its own.
pub const STANDARD_TOOLS: [&str; 3] = [SEARCH_OPERATIONS, DESCRIBE_OPERATION, CALL_OPERATION];

/// Hits `search_operations` returns unless asked for another number, and the most it returns.
const DEFAULT_HITS: usize = 10;
const MAX_HITS: usize = 50;
/// Characters of an operation's summary in a search hit.
const HIT_SUMMARY_CHARS: usize = 160;

/// One of the standard tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandardTool {
    Search,
    Describe,
    Call,
}

impl StandardTool {
    pub fn named(name: &str) -> Option<StandardTool> {
        match name {
            SEARCH_OPERATIONS => Some(StandardTool::Search),
            DESCRIBE_OPERATION => Some(StandardTool::Describe),
            CALL_OPERATION => Some(StandardTool::Call),
            _ => None,
        }
    }
}

/// The standard tools as `tools/list` shows them (their handlers are never run: serving
/// answers them).
pub fn standard_tools() -> Vec<ToolSpec> {
    let spec = |name: &str, title: &str, description: &str, input: Value, read_only: bool| ToolSpec {
        name: name.to_string(),
        title: Some(title.to_string()),
        description: description.to_string(),
        input_schema: object(input),
        output_schema: None,
        handler: String::new(),
        annotations: Some(object(json!({
            "readOnlyHint": read_only,
            "destructiveHint": !read_only,
            "openWorldHint": !read_only,
        }))),
    };
    vec![
        spec(
            SEARCH_OPERATIONS,
            "Search operations",
            "Search this API's operations (more than the listed tools) by what they do. Returns the best matches, \
             each with its operation id, request, summary and required arguments; use describe_operation for its \
             schemas and call_operation to call it.",
            json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What you want to do, in plain words"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS, "description": "Most matches returned (10 if absent)"},
            }}),
            true,
        ),
        spec(
            DESCRIBE_OPERATION,
            "Describe an operation",
            "The input schema (the arguments call_operation takes for it) and output schema of one operation, by \
             the id search_operations returned.",
            json!({"type": "object", "required": ["operation"], "additionalProperties": false, "properties": {
                "operation": {"type": "string", "description": "The operation id"},
            }}),
            true,
        ),
        spec(
            CALL_OPERATION,
            "Call an operation",
            "Call any operation of this API by its id, with arguments matching its input schema \
             (describe_operation). Answers as the operation's own tool would.",
            json!({"type": "object", "required": ["operation"], "additionalProperties": false, "properties": {
                "operation": {"type": "string", "description": "The operation id"},
                "arguments": {"type": "object", "description": "The operation's arguments"},
            }}),
            false,
        ),
    ]
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A discovery-mode mount's operations: read from the catalog on first use.
pub struct Discovery {
    catalog: Catalog,
    server: ServerId,
    generation_id: i64,
    metrics: Arc<Metrics>,
    health: HealthRule,
    loaded: OnceCell<Arc<Operations>>,
}

/// The operations as loaded: what search, describe and call read.
struct Operations {
    operations: Vec<OperationRecord>,
    by_name: HashMap<String, usize>,
    searcher: Searcher,
    executor: String,
    /// Each operation's callable tool, built (its validators compiled) on its first call.
    callables: Mutex<HashMap<usize, Arc<CallableTool>>>,
}

impl Discovery {
    pub fn new(
        catalog: Catalog,
        server: ServerId,
        generation_id: i64,
        metrics: Arc<Metrics>,
        health: HealthRule,
    ) -> Discovery {
        Discovery { catalog, server, generation_id, metrics, health, loaded: OnceCell::new() }
    }

    /// Answers `search_operations` or `describe_operation`.
    pub async fn answer(&self, tool: StandardTool, arguments: &Value) -> Result<ToolResult, CallError> {
        let operations = self.operations().await?;
        match tool {
            StandardTool::Search => {
                let query = text_argument(arguments, "query")?;
                let limit = match arguments.get("limit") {
                    None | Some(Value::Null) => DEFAULT_HITS,
                    Some(value) => {
                        value.as_u64().filter(|n| (1..=MAX_HITS as u64).contains(n)).map(|n| n as usize).ok_or_else(
                            || CallError::InvalidArguments(format!("limit must be an integer from 1 to {MAX_HITS}")),
                        )?
                    }
                };
                let hits: Vec<Value> = operations
                    .searcher
                    .search(query, limit)
                    .into_iter()
                    .map(|(position, _)| signature(&operations.operations[position]))
                    .collect();
                let found = json!({"operations": hits, "total_operations": operations.operations.len()});
                Ok(structured(found))
            }
            StandardTool::Describe => {
                let index = operations.find(text_argument(arguments, "operation")?)?;
                let record = &operations.operations[index];
                let tool = &record.tool;
                Ok(structured(json!({
                    "operation": tool.name,
                    "request": format!("{} {}", record.method, record.path),
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                    "output_schema": tool.output_schema,
                    "annotations": tool.annotations,
                })))
            }
            StandardTool::Call => Err(CallError::InvalidArguments("call_operation is called, not answered".into())),
        }
    }

    /// The operation `call_operation`'s arguments name, as a callable tool, and the arguments
    /// to call it with.
    pub async fn target(&self, arguments: Value) -> Result<(Arc<CallableTool>, Value), CallError> {
        let operations = self.operations().await?;
        let index = operations.find(text_argument(&arguments, "operation")?)?;
        let arguments = match arguments.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(value @ Value::Object(_)) => value.clone(),
            Some(_) => return Err(CallError::InvalidArguments("arguments must be a JSON object".into())),
        };
        let mut callables = operations.callables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(callable) = callables.get(&index) {
            return Ok((callable.clone(), arguments));
        }
        let record = &operations.operations[index];
        let spec =
            ToolSpec { handler: format!("{}{}", record.tool.handler, operations.executor), ..record.tool.clone() };
        let series = self.metrics.tool_series(self.server.as_str(), &spec.name);
        let callable =
            CallableTool::new(&spec, series, ToolHealth::new(self.health, &[])).map(Arc::new).map_err(|problem| {
                CallError::Unavailable(format!("operation {:?} cannot be called: {problem}", spec.name))
            })?;
        callables.insert(index, callable.clone());
        Ok((callable, arguments))
    }

    async fn operations(&self) -> Result<Arc<Operations>, CallError> {
        self.loaded
            .get_or_try_init(|| async {
                let record = self.catalog.discovery(self.generation_id).await.map_err(|error| {
                    tracing::error!(server_id = %self.server, %error, "cannot read the server's operations");
                    CallError::Unavailable(
                        "this server's operations could not be read from the catalog; try again shortly".into(),
                    )
                })?;
                let Some(record) = record else {
                    return Err(CallError::Unavailable("this server's version has no operations to reach".into()));
                };
                Operations::new(record).map(Arc::new).map_err(|problem| {
                    tracing::error!(server_id = %self.server, %problem, "the server's stored operations cannot be used");
                    CallError::Unavailable(format!("this server's operations cannot be used: {problem}"))
                })
            })
            .await
            .cloned()
    }
}

impl Operations {
    fn new(record: DiscoveryRecord) -> Result<Operations, String> {
        let index: SearchIndex =
            serde_json::from_value(record.search_index).map_err(|e| format!("the search index is damaged: {e}"))?;
        if index.len() != record.operations.len() {
            return Err("the search index does not match the operations".into());
        }
        let by_name = record.operations.iter().enumerate().map(|(i, op)| (op.tool.name.clone(), i)).collect();
        Ok(Operations {
            operations: record.operations,
            by_name,
            searcher: index.searcher(),
            executor: record.executor,
            callables: Mutex::new(HashMap::new()),
        })
    }

    /// The position of the operation named `id`, or an error that says how to find the right
    /// id (with the closest matches by name).
    fn find(&self, id: &str) -> Result<usize, CallError> {
        if let Some(&index) = self.by_name.get(id) {
            return Ok(index);
        }
        let near: Vec<&str> =
            self.searcher.search(id, 3).into_iter().map(|(i, _)| self.operations[i].tool.name.as_str()).collect();
        let hint = if near.is_empty() { String::new() } else { format!(" Closest: {}.", near.join(", ")) };
        Err(CallError::UnknownOperation(format!(
            "this server has no operation {id:?}; search_operations finds operation ids.{hint}"
        )))
    }
}

/// A non-empty string argument, or an error naming it.
fn text_argument<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, CallError> {
    match arguments.get(name) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text),
        Some(Value::String(_)) => Err(CallError::InvalidArguments(format!("{name} must not be empty"))),
        None | Some(Value::Null) => Err(CallError::InvalidArguments(format!("{name} is required"))),
        Some(_) => Err(CallError::InvalidArguments(format!("{name} must be a string"))),
    }
}

/// An operation as a search hit: its id, request, summary and required arguments.
fn signature(record: &OperationRecord) -> Value {
    let summary: String =
        record.tool.title.as_deref().unwrap_or(&record.tool.description).chars().take(HIT_SUMMARY_CHARS).collect();
    let required = record.tool.input_schema.get("required").cloned().unwrap_or_else(|| json!([]));
    json!({
        "operation": record.tool.name,
        "request": format!("{} {}", record.method, record.path),
        "summary": summary,
        "required": required,
    })
}

/// A result with `value` as structured content and as its JSON text.
fn structured(value: Value) -> ToolResult {
    ToolResult {
        content: vec![json!({"type": "text", "text": value.to_string()})],
        structured_content: Some(value),
        is_error: false,
    }
}
