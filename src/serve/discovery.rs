//! Discovery mode: a server whose API has more operations than it lists (docs/openapi.md).
//!
//! Such a server lists a few of its operations as tools plus three standard tools that reach
//! all of them: `search_operations` ranks the operations for a query, `describe_operation`
//! gives one operation's input and output schemas (and its TypeScript declaration, for code
//! mode), and `call_operation` calls any operation by its id. Every operation's tool and the
//! search index were derived with the version and are stored with it, one row per operation
//! (`catalog::discovery`). They are read as they are needed: the index with each operation's
//! name, request and summary on the first search, and kept with the mount (read once even under
//! concurrent first uses); one operation's row each time it is described (one keyed read), and
//! on its first call, after which its callable tool is kept. A large API's schemas and handlers
//! are thus read only for the operations in use.
//!
//! `call_operation` runs the operation as the tool it would be if it were listed: the same
//! argument checks against its input schema, the same handler, credentials and read-only
//! enforcement, the same OAuth scope rule by its own `readOnlyHint`, and the same call log and
//! metrics, under the operation's name. Searching and describing read only what the version
//! stores, so they run in the daemon, without an isolate; they are logged and counted under
//! their own names like any tool call.

pub mod search;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

use crate::catalog::{Catalog, CatalogError, DiscoveryIndex, OperationEntry, OperationRecord};
use crate::serve::call::{ArgumentsRefused, CallError, CallableTool};
use crate::serve::health::{HealthRule, ToolHealth};
use crate::serve::isolate::ToolResult;
use crate::serve::typescript;
use crate::telemetry::metrics::{Metrics, ToolSeries};
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

/// A discovery-mode mount's operations, read from the catalog as they are needed: the search
/// index on the first search (or the first mistaken id, whose error names the closest ones), one
/// operation when it is described or first called.
pub struct Discovery {
    catalog: Catalog,
    server: ServerId,
    generation_id: i64,
    metrics: Arc<Metrics>,
    health: HealthRule,
    /// The series `search_operations` and `describe_operation` are counted under.
    search_series: ToolSeries,
    describe_series: ToolSeries,
    directory: OnceCell<Arc<Directory>>,
    executor: OnceCell<Arc<str>>,
    /// Each operation's callable tool, built (its validators compiled) on its first call.
    callables: Mutex<HashMap<String, Arc<CallableTool>>>,
}

/// The search index as loaded, with each operation's entry: what search reads.
struct Directory {
    operations: Vec<OperationEntry>,
    searcher: Searcher,
}

impl Discovery {
    pub fn new(
        catalog: Catalog,
        server: ServerId,
        generation_id: i64,
        metrics: Arc<Metrics>,
        health: HealthRule,
    ) -> Discovery {
        let search_series = metrics.tool_series(server.as_str(), SEARCH_OPERATIONS);
        let describe_series = metrics.tool_series(server.as_str(), DESCRIBE_OPERATION);
        Discovery {
            catalog,
            server,
            generation_id,
            metrics,
            health,
            search_series,
            describe_series,
            directory: OnceCell::new(),
            executor: OnceCell::new(),
            callables: Mutex::new(HashMap::new()),
        }
    }

    /// The series an answered standard tool's calls are counted under (`call_operation` is
    /// counted under each operation's own).
    pub fn series(&self, tool: StandardTool) -> Option<&ToolSeries> {
        match tool {
            StandardTool::Search => Some(&self.search_series),
            StandardTool::Describe => Some(&self.describe_series),
            StandardTool::Call => None,
        }
    }

    /// Answers `search_operations` or `describe_operation`.
    pub async fn answer(&self, tool: StandardTool, arguments: &Value) -> Result<ToolResult, CallError> {
        match tool {
            StandardTool::Search => {
                let query = text_argument(arguments, "query")?;
                let limit = match arguments.get("limit") {
                    None | Some(Value::Null) => DEFAULT_HITS,
                    Some(value) => value
                        .as_u64()
                        .filter(|n| (1..=MAX_HITS as u64).contains(n))
                        .map(|n| n as usize)
                        .ok_or(CallError::InvalidArguments(ArgumentsRefused::HitLimit(MAX_HITS)))?,
                };
                let directory = self.directory().await?;
                let hits: Vec<Value> = directory
                    .searcher
                    .search(query, limit)
                    .into_iter()
                    .map(|(position, _)| signature(&directory.operations[position]))
                    .collect();
                let found = json!({"operations": hits, "total_operations": directory.operations.len()});
                Ok(structured(found))
            }
            StandardTool::Describe => {
                let record = self.operation(text_argument(arguments, "operation")?).await?;
                let tool = &record.tool;
                let declaration = typescript::method(
                    &tool.name,
                    tool.title.as_deref().unwrap_or(&tool.description),
                    &tool.input_schema,
                    tool.output_schema.as_ref(),
                );
                Ok(structured(json!({
                    "operation": tool.name,
                    "request": format!("{} {}", record.method, record.path),
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                    "output_schema": tool.output_schema,
                    "annotations": tool.annotations,
                    "declaration": declaration,
                })))
            }
            StandardTool::Call => Err(CallError::InvalidArguments(ArgumentsRefused::CalledNotAnswered)),
        }
    }

    /// The operation `call_operation`'s arguments name, as a callable tool, and the arguments
    /// to call it with.
    pub async fn target(&self, arguments: Value) -> Result<(Arc<CallableTool>, Value), CallError> {
        let name = text_argument(&arguments, "operation")?;
        let operation_arguments = match arguments.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(value @ Value::Object(_)) => value.clone(),
            Some(_) => return Err(CallError::InvalidArguments(ArgumentsRefused::NotAnObject)),
        };
        if let Some(callable) = self.callables().get(name) {
            return Ok((callable.clone(), operation_arguments));
        }
        let record = self.operation(name).await?;
        let executor = self.executor().await?;
        let spec = ToolSpec { handler: format!("{}{executor}", record.tool.handler), ..record.tool };
        let series = self.metrics.tool_series(self.server.as_str(), &spec.name);
        let callable =
            CallableTool::new(&spec, series, ToolHealth::new(self.health, &[])).map(Arc::new).map_err(|problem| {
                CallError::Unavailable(format!("operation {:?} cannot be called: {problem}", spec.name))
            })?;
        // A concurrent first call may have built it too; the first one kept is everyone's.
        let callable = self.callables().entry(spec.name).or_insert(callable).clone();
        Ok((callable, operation_arguments))
    }

    fn callables(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<CallableTool>>> {
        self.callables.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The operation named `id`, read from the catalog, or an error that says how to find the
    /// right id (with the closest matches by name).
    async fn operation(&self, id: &str) -> Result<OperationRecord, CallError> {
        let stored =
            self.catalog.discovery_operation(self.generation_id, id).await.map_err(|error| self.unreadable(error))?;
        if let Some(record) = stored {
            return Ok(record);
        }
        let directory = self.directory().await?;
        let near: Vec<&str> =
            directory.searcher.search(id, 3).into_iter().map(|(i, _)| directory.operations[i].name.as_str()).collect();
        let hint = if near.is_empty() { String::new() } else { format!(" Closest: {}.", near.join(", ")) };
        Err(CallError::UnknownOperation(format!(
            "this server has no operation {id:?}; search_operations finds operation ids.{hint}"
        )))
    }

    async fn directory(&self) -> Result<Arc<Directory>, CallError> {
        self.directory
            .get_or_try_init(|| async {
                let index = self.catalog.discovery_index(self.generation_id).await.map_err(|error| self.unreadable(error))?;
                let Some(index) = index else {
                    return Err(CallError::Unavailable("this server's version has no operations to reach".into()));
                };
                let _ = self.executor.set(Arc::from(index.executor.as_str()));
                Directory::new(index).map(Arc::new).map_err(|problem| {
                    tracing::error!(server_id = %self.server, %problem, "the server's stored operations cannot be used");
                    CallError::Unavailable(format!("this server's operations cannot be used: {problem}"))
                })
            })
            .await
            .cloned()
    }

    async fn executor(&self) -> Result<Arc<str>, CallError> {
        self.executor
            .get_or_try_init(|| async {
                let executor = self
                    .catalog
                    .discovery_executor(self.generation_id)
                    .await
                    .map_err(|error| self.unreadable(error))?;
                executor
                    .map(|text| Arc::from(text.as_str()))
                    .ok_or_else(|| CallError::Unavailable("this server's version has no operations to reach".into()))
            })
            .await
            .cloned()
    }

    fn unreadable(&self, error: CatalogError) -> CallError {
        tracing::error!(server_id = %self.server, %error, "cannot read the server's operations");
        CallError::Unavailable("this server's operations could not be read from the catalog; try again shortly".into())
    }
}

impl Directory {
    fn new(index: DiscoveryIndex) -> Result<Directory, String> {
        let search_index: SearchIndex =
            serde_json::from_value(index.search_index).map_err(|e| format!("the search index is damaged: {e}"))?;
        if search_index.len() != index.operations.len() {
            return Err("the search index does not match the operations".into());
        }
        Ok(Directory { operations: index.operations, searcher: search_index.searcher() })
    }
}

/// A non-empty string argument, or an error naming it.
fn text_argument<'a>(arguments: &'a Value, name: &'static str) -> Result<&'a str, CallError> {
    match arguments.get(name) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text),
        Some(Value::String(_)) => Err(CallError::InvalidArguments(ArgumentsRefused::Empty(name))),
        None | Some(Value::Null) => Err(CallError::InvalidArguments(ArgumentsRefused::Missing(name))),
        Some(_) => Err(CallError::InvalidArguments(ArgumentsRefused::NotAString(name))),
    }
}

/// An operation as a search hit: its id, request, summary and required arguments.
fn signature(entry: &OperationEntry) -> Value {
    json!({
        "operation": entry.name,
        "request": format!("{} {}", entry.method, entry.path),
        "summary": entry.summary,
        "required": entry.required,
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
