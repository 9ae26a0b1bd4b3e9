//! The host of a code-mode script's isolate: it answers the script's `call_tool` requests
//! (`tool:<server>/<tool>`) by running the tool with [`Server::call`], after checking the
//! request against the script's allowed servers and budgets, and keeps the trace of every call
//! the script made. There is no network behind it: any other request is refused.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::oauth::Grant;
use crate::script::{ErrorKind, ToolCallTrace};
use crate::serve::call::{CallError, Caller, Origin};
use crate::serve::discovery::CALL_OPERATION;
use crate::serve::isolate::{FetchError, FetchHost, FetchRequest, FetchResponse, Outcome, ToolResult};
use crate::serve::server::Server;
use crate::states::Via;
use crate::toolset::ServerId;

/// What a script's tool calls may reach and use up: the part of a run's limits the host
/// enforces.
#[derive(Debug, Clone)]
pub struct ToolCallLimits {
    /// The servers the script may call.
    pub allowed: BTreeSet<ServerId>,
    /// 0: no limit.
    pub max_tool_calls: u32,
    pub max_tool_result_bytes: u64,
}

/// The only host a script's isolate has: it answers `tool:<server>/<tool>` requests by
/// running the tool, and refuses everything else. There is no network behind it.
pub struct ScriptHost {
    caller: Caller,
    /// The servers the script may call, as they were served when it started: a script is one
    /// call in flight, so an activation, a token or credential change or a delete made while it
    /// runs applies to the next script, not to the rest of this one.
    servers: Vec<Arc<Server>>,
    parent: Arc<str>,
    /// The script's OAuth token, which its tool calls carry.
    grant: Option<Arc<Grant>>,
    limits: ToolCallLimits,
    calls: AtomicU32,
    /// Bytes of tool results handed to the script so far.
    result_bytes: AtomicU64,
    traces: Mutex<Vec<Trace>>,
}

struct Trace {
    server: String,
    tool: String,
    started: Instant,
    execution_id: Option<String>,
    /// `None` while the call runs.
    ended: Option<(Option<ErrorKind>, Duration)>,
}

/// What `call_tool` resolves with: `{ok: true, value}` or `{ok: false, error: {code, message}}`.
enum Answer {
    Value(Value),
    Failed(ErrorKind, String),
}

impl ScriptHost {
    /// A host for one script, which may call `servers` (as served when it started) within
    /// `limits`; `parent` is the script's execution id, under which its tool calls are logged.
    pub fn new(
        caller: Caller,
        servers: Vec<Arc<Server>>,
        parent: Arc<str>,
        grant: Option<Arc<Grant>>,
        limits: ToolCallLimits,
    ) -> ScriptHost {
        ScriptHost {
            caller,
            servers,
            parent,
            grant,
            limits,
            calls: AtomicU32::new(0),
            result_bytes: AtomicU64::new(0),
            traces: Mutex::new(Vec::new()),
        }
    }

    /// The [`FetchHost`] to hand the script's isolate: its requests are this host's tool calls.
    pub fn fetch_host(host: &Arc<ScriptHost>) -> Arc<dyn FetchHost> {
        Arc::new(HostHandle(Arc::clone(host)))
    }

    /// Bytes of tool results handed to the script so far.
    pub fn result_bytes(&self) -> u64 {
        self.result_bytes.load(Ordering::Relaxed)
    }

    fn traces(&self) -> std::sync::MutexGuard<'_, Vec<Trace>> {
        self.traces.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls made, in start order; those still running when the script ended were cancelled.
    pub fn finish(&self) -> Vec<ToolCallTrace> {
        self.traces()
            .iter()
            .map(|trace| {
                let (error_code, duration) =
                    trace.ended.unwrap_or((Some(ErrorKind::Cancelled), trace.started.elapsed()));
                ToolCallTrace {
                    server: trace.server.clone(),
                    tool: trace.tool.clone(),
                    ok: error_code.is_none(),
                    error_code,
                    duration_ms: duration.as_secs_f64() * 1000.0,
                    execution_id: trace.execution_id.clone(),
                }
            })
            .collect()
    }

    fn end(&self, index: usize, error: Option<ErrorKind>) {
        if let Some(trace) = self.traces().get_mut(index) {
            trace.ended = Some((error, trace.started.elapsed()));
        }
        self.caller.metrics().record_script_tool_call(error.is_none());
    }

    async fn call(self: Arc<Self>, request: FetchRequest) -> Result<Answer, FetchError> {
        let Some((server, tool)) = tool_target(&request.url) else {
            return Err(FetchError::Denied(format!("a script cannot make requests ({})", request.url)));
        };
        let index = {
            let mut traces = self.traces();
            traces.push(Trace {
                server: server.clone(),
                tool: tool.clone(),
                started: Instant::now(),
                execution_id: None,
                ended: None,
            });
            traces.len() - 1
        };
        let answer = self.dispatch(index, &server, &tool, request.body.as_deref()).await;
        self.end(
            index,
            match &answer {
                Answer::Value(_) => None,
                Answer::Failed(code, _) => Some(*code),
            },
        );
        Ok(answer)
    }

    async fn dispatch(&self, index: usize, server: &str, tool: &str, body: Option<&[u8]>) -> Answer {
        let made = self.calls.fetch_add(1, Ordering::Relaxed);
        if self.limits.max_tool_calls != 0 && made >= self.limits.max_tool_calls {
            return Answer::Failed(
                ErrorKind::MaxToolCalls,
                format!(
                    "max tool calls exceeded: this script may make {} tool calls (max_tool_calls)",
                    self.limits.max_tool_calls
                ),
            );
        }
        let allowed = ServerId::parse(server).ok().filter(|id| self.limits.allowed.contains(id));
        let Some(id) = allowed else {
            let names: Vec<&str> = self.limits.allowed.iter().map(ServerId::as_str).collect();
            return Answer::Failed(
                ErrorKind::ServerNotAllowed,
                format!("server {server:?} is not allowed in this script; allowed servers: {names:?}"),
            );
        };
        let Some(target) = self.servers.iter().find(|target| target.id == id) else {
            return Answer::Failed(ErrorKind::NotFound, format!("no server {server:?} is being served"));
        };
        let tools = target.tool_names();
        let listed = tools.iter().any(|name| name == tool);
        if !listed && target.discovery.is_none() {
            return Answer::Failed(
                ErrorKind::NotFound,
                format!("server {server:?} has no tool {tool:?}; its tools: {tools:?}"),
            );
        }
        let arguments: Value = match serde_json::from_slice(body.unwrap_or(b"{}")) {
            Ok(arguments) => arguments,
            Err(e) => return Answer::Failed(ErrorKind::InvalidArguments, format!("the arguments are not JSON: {e}")),
        };
        // Any other name on a discovery-mode server is one of its operations: called through
        // call_operation, so it runs, is checked and is logged as that operation's own tool.
        let (called, arguments) = if listed {
            (tool, arguments)
        } else {
            (CALL_OPERATION, json!({"operation": tool, "arguments": arguments}))
        };
        let execution_id = uuid::Uuid::now_v7().to_string();
        if let Some(trace) = self.traces().get_mut(index) {
            trace.execution_id = Some(execution_id.clone());
        }
        let origin = Origin {
            via: Via::Script,
            parent_execution_id: Some(self.parent.clone()),
            execution_id: Some(execution_id),
            grant: self.grant.clone(),
            caller: None,
            trace_parent: None,
        };
        let output = match target.call(&self.caller, called, arguments, origin).await {
            Ok(output) => output,
            Err(CallError::UnknownTool(name)) => {
                return Answer::Failed(ErrorKind::NotFound, format!("server {server:?} has no tool {name:?}"));
            }
            Err(CallError::InvalidArguments(problem)) => {
                return Answer::Failed(ErrorKind::InvalidArguments, format!("{server}.{tool}: {problem}"));
            }
            Err(CallError::UnknownOperation(problem)) => {
                return Answer::Failed(ErrorKind::NotFound, format!("{server}.{tool}: {problem}"));
            }
            Err(CallError::Unavailable(problem)) => {
                return Answer::Failed(ErrorKind::ToolError, format!("{server}.{tool}: {problem}"));
            }
            Err(CallError::Busy(why)) => return Answer::Failed(ErrorKind::Busy, why),
            Err(CallError::Forbidden(missing)) => {
                return Answer::Failed(ErrorKind::InsufficientScope, format!("{server}.{tool}: {missing}"));
            }
            Err(CallError::ShuttingDown) => {
                return Answer::Failed(ErrorKind::ShuttingDown, "the daemon is shutting down".into());
            }
            Err(CallError::Limited(refusal)) => {
                return Answer::Failed(ErrorKind::Busy, format!("{server}.{tool}: {refusal}"));
            }
            Err(error @ CallError::NotConnected(_)) => {
                return Answer::Failed(ErrorKind::NotConnected, format!("{server}.{tool}: {error}"));
            }
        };
        let kind = match output.outcome {
            Outcome::Ok => None,
            Outcome::Timeout => Some(ErrorKind::Timeout),
            Outcome::Limit => Some(ErrorKind::Limit),
            Outcome::Error => Some(ErrorKind::ToolError),
        };
        if let Some(kind) = kind {
            return Answer::Failed(kind, result_text(&output.result));
        }
        let value = tool_value(output.result);
        let bytes = value.to_string().len() as u64;
        let total = self.result_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.limits.max_tool_result_bytes {
            return Answer::Failed(
                ErrorKind::ResultTooLarge,
                format!(
                    "this result ({bytes} bytes) would take the tool results handed to this script past {} bytes \
                     (max_tool_result_bytes); ask the tools for less",
                    self.limits.max_tool_result_bytes
                ),
            );
        }
        Answer::Value(value)
    }
}

/// The [`FetchHost`] handed to the isolate: each request's future holds the host too.
struct HostHandle(Arc<ScriptHost>);

impl FetchHost for HostHandle {
    fn fetch(
        &self,
        request: FetchRequest,
        _deadline: Instant,
    ) -> BoxFuture<'static, Result<FetchResponse, FetchError>> {
        let host = Arc::clone(&self.0);
        Box::pin(async move {
            let answer = host.call(request).await?;
            let body = match answer {
                Answer::Value(value) => json!({"ok": true, "value": value}),
                Answer::Failed(code, message) => json!({"ok": false, "error": {"code": code, "message": message}}),
            };
            Ok(FetchResponse {
                status: 200,
                status_text: "OK".into(),
                url: String::new(),
                redirected: false,
                headers: Vec::new(),
                body: body.to_string().into(),
            })
        })
    }
}

/// `(server, tool)` of a `tool:<server>/<tool>` request, percent-decoded.
fn tool_target(url: &str) -> Option<(String, String)> {
    let (server, tool) = url.strip_prefix("tool:")?.split_once('/')?;
    let decode = |part: &str| percent_encoding::percent_decode_str(part).decode_utf8().ok().map(|s| s.into_owned());
    Some((decode(server)?, decode(tool)?))
}

/// A tool result as the script sees it: its structured content, else its text (parsed when it
/// is JSON), else its content items.
fn tool_value(result: ToolResult) -> Value {
    if let Some(structured) = result.structured_content {
        return structured;
    }
    let texts: Option<Vec<&str>> =
        result.content.iter().map(|item| (item["type"] == "text").then(|| item["text"].as_str()).flatten()).collect();
    match texts {
        Some(texts) if !texts.is_empty() => {
            let text = texts.concat();
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        }
        Some(_) => Value::Null,
        None => Value::Array(result.content),
    }
}

/// The text of an error result, for the script's `error.message`.
fn result_text(result: &ToolResult) -> String {
    let texts: Vec<&str> = result.content.iter().filter_map(|item| item["text"].as_str()).collect();
    if texts.is_empty() { "the tool failed without a message".into() } else { texts.join("\n") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_targets_and_values() {
        assert_eq!(tool_target("tool:my-server/do%20it"), Some(("my-server".into(), "do it".into())));
        assert_eq!(tool_target("https://example.com/"), None);
        let text = |t: &str| ToolResult::text(t, false);
        assert_eq!(tool_value(text("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(tool_value(text("plain")), json!("plain"));
        let structured = ToolResult { structured_content: Some(json!({"b": 2})), ..text("{}") };
        assert_eq!(tool_value(structured), json!({"b": 2}));
        let image = json!({"type": "image", "data": "aGk=", "mimeType": "image/png"});
        let images = ToolResult { content: vec![image.clone()], structured_content: None, is_error: false };
        assert_eq!(tool_value(images), json!([image]));
    }
}
