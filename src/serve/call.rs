//! One tool call, start to finish: argument checks, the isolate run, the call log entry.
//!
//! MCP `tools/call` and the admin API's call route both come through [`Caller::call`], so a tool
//! behaves the same whichever door the call used.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tracing::Instrument;

use crate::catalog::{CallLog, CallRecord, now_millis};
use crate::config::SandboxConfig;
use crate::credentials::Redactor;
use crate::oauth::Grant;
use crate::serve::egress::{Egress, ServerPolicy};
use crate::serve::health::{Health, HealthRule, ToolHealth};
use crate::serve::isolate::{
    Completion, Invocation, IsolatePool, Outcome, PoolError, Program, SandboxLimits, ToolResult,
};
use crate::states::{CallOutcome, Via};
use crate::telemetry::metrics::{EgressOutcome, Metrics, ToolSeries};
use crate::telemetry::traces::{TraceParent, Traces};
use crate::toolset::{ServerId, ToolSpec};

/// A tool ready to be called: its name, handler and compiled validators. (Its description and
/// schemas live in the MCP tool definition; nothing is kept twice.)
pub struct CallableTool {
    pub name: String,
    pub handler: Arc<str>,
    validator: jsonschema::Validator,
    /// The output schema's validator: a result must be an object that matches it.
    output_validator: Option<jsonschema::Validator>,
    /// Annotated `readOnlyHint: true`: its requests are limited to GET, HEAD and OPTIONS.
    read_only: bool,
    /// The labels its calls are counted under.
    series: ToolSeries,
    /// Its last calls, and whether they make it degraded.
    health: ToolHealth,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    /// `call_operation` or `describe_operation` named an operation the server does not have;
    /// the text says how to find one.
    #[error("{0}")]
    UnknownOperation(String),
    /// What the call needs could not be read or built now (a discovery-mode server's stored
    /// operations); the text says whether to retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("invalid arguments: {0}")]
    InvalidArguments(ArgumentsRefused),
    /// Admission refused the call; the text says which limit and which setting.
    #[error("busy: {0}")]
    Busy(String),
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// The caller's OAuth token does not carry the scope this tool needs.
    #[error("{0}")]
    Forbidden(crate::oauth::MissingScope),
    /// The server sends each caller's own credential, and this caller has not connected it (or
    /// it cannot be used now).
    #[error("{}", not_connected_text(.0))]
    NotConnected(crate::accounts::NotConnected),
    /// A traffic limit at the door refused the call (docs/traffic.md).
    #[error("{0}")]
    Limited(crate::serve::quota::QuotaRefusal),
}

fn not_connected_text(reason: &crate::accounts::NotConnected) -> String {
    match reason {
        crate::accounts::NotConnected::Connect(link) => link.message.clone(),
        crate::accounts::NotConnected::Unavailable(text) => text.clone(),
    }
}

/// Who asked for a call, as its call-log entry records it.
#[derive(Debug, Clone)]
pub struct Origin {
    pub via: Via,
    /// The code-mode script making the call.
    pub parent_execution_id: Option<Arc<str>>,
    /// The id the call is logged under; a fresh one when `None`.
    pub execution_id: Option<String>,
    /// The OAuth token the request came with: every call is checked against its scopes and
    /// logged with its subject and client.
    pub grant: Option<Arc<Grant>>,
    /// Who the call counts against at the door (`None`: the grant's subject, else unknown).
    pub caller: Option<crate::serve::quota::CallerKey>,
    /// The trace the request named (W3C `traceparent`); the call's trace continues it.
    pub trace_parent: Option<TraceParent>,
}

impl From<Via> for Origin {
    fn from(via: Via) -> Origin {
        Origin { via, parent_execution_id: None, execution_id: None, grant: None, caller: None, trace_parent: None }
    }
}

pub struct CallOutput {
    pub execution_id: String,
    pub outcome: Outcome,
    pub result: ToolResult,
}

/// Runs calls for every mounted server; cheap to clone.
#[derive(Clone)]
pub struct Caller {
    pool: Arc<IsolatePool>,
    egress: Arc<Egress>,
    call_log: CallLog,
    limits: Arc<SandboxConfig>,
    metrics: Arc<Metrics>,
    traces: Traces,
}

/// Why a call's arguments were refused before anything ran.
#[derive(Debug, thiserror::Error)]
pub enum ArgumentsRefused {
    #[error("arguments are {bytes} bytes; the limit is {limit} ([sandbox] max_argument_bytes)")]
    TooLarge { bytes: usize, limit: usize },
    #[error("arguments must be a JSON object")]
    NotAnObject,
    /// The tool's input schema does not accept them.
    #[error("{0}")]
    Schema(SchemaMismatch),
    /// A discovery tool's text argument (`query`, `operation`) is missing.
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{0} must not be empty")]
    Empty(&'static str),
    #[error("{0} must be a string")]
    NotAString(&'static str),
    /// `search_operations`' `limit` is out of range.
    #[error("limit must be an integer from 1 to {0}")]
    HitLimit(usize),
    /// `call_operation` was routed to the tools that answer without a call.
    #[error("call_operation is called, not answered")]
    CalledNotAnswered,
}

/// What a schema finds wrong with a value: the first few problems, each with its path
/// (`items.0.id: "x" is not of type "integer"`), joined by `; `.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct SchemaMismatch(Vec<String>);

/// A stored tool whose schema cannot be compiled: the catalog holds only checked schemas, so
/// the mount is unusable until the server is regenerated.
#[derive(Debug, thiserror::Error)]
#[error("{which} schema of tool {tool:?} cannot be used: {error}")]
pub struct UnusableSchema {
    tool: String,
    /// `input` or `output`.
    which: &'static str,
    error: crate::toolset::SchemaError,
}

/// A successful result that its tool's output schema does not accept.
#[derive(Debug, thiserror::Error)]
#[error("the result of tool {tool:?} does not match its output_schema: {problem}")]
struct OutputMismatch {
    tool: String,
    problem: OutputProblem,
}

#[derive(Debug, thiserror::Error)]
enum OutputProblem {
    #[error("it is not a JSON object")]
    NotAnObject,
    #[error("{0}")]
    Schema(SchemaMismatch),
}

impl CallableTool {
    /// A tool from its spec, counted under `series` (see [`Metrics::tool_series`]), its health
    /// judged from `health` on.
    pub fn new(spec: &ToolSpec, series: ToolSeries, health: ToolHealth) -> Result<CallableTool, UnusableSchema> {
        let unusable = |which, error| UnusableSchema { tool: spec.name.clone(), which, error };
        let validator =
            crate::toolset::validator(&Value::Object(spec.input_schema.clone())).map_err(|e| unusable("input", e))?;
        let output_validator = spec
            .output_schema
            .as_ref()
            .map(|schema| crate::toolset::validator(&Value::Object(schema.clone())))
            .transpose()
            .map_err(|e| unusable("output", e))?;
        let read_only = spec.annotations.as_ref().and_then(|a| a.get("readOnlyHint")) == Some(&Value::Bool(true));
        Ok(CallableTool {
            name: spec.name.clone(),
            handler: Arc::from(spec.handler.as_str()),
            validator,
            output_validator,
            read_only,
            series,
            health,
        })
    }

    pub fn health(&self) -> Health {
        self.health.health()
    }

    /// The labels its calls are counted under.
    pub fn series(&self) -> &ToolSeries {
        &self.series
    }

    /// Annotated `readOnlyHint: true` (what the scope model's read scope may call).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Checks arguments against the input schema; the message names the offending field.
    pub fn check_arguments(&self, arguments: &Value) -> Result<(), ArgumentsRefused> {
        if !arguments.is_object() {
            return Err(ArgumentsRefused::NotAnObject);
        }
        schema_errors(&self.validator, arguments).map_err(ArgumentsRefused::Schema)
    }

    /// Checks a successful result against the output schema, if the tool has one, and says what
    /// does not match.
    fn check_result(&self, result: &ToolResult) -> Result<(), OutputMismatch> {
        let Some(validator) = &self.output_validator else { return Ok(()) };
        if result.is_error {
            return Ok(());
        }
        let problem = match &result.structured_content {
            Some(structured @ Value::Object(_)) => match schema_errors(validator, structured) {
                Ok(()) => return Ok(()),
                Err(mismatch) => OutputProblem::Schema(mismatch),
            },
            _ => OutputProblem::NotAnObject,
        };
        Err(OutputMismatch { tool: self.name.clone(), problem })
    }
}

/// A result that does not match the tool's output schema, as the host gets it: its text content
/// (the data, which the agent can still use) without `structuredContent`, behind a line that says
/// why. MCP clients validate `structuredContent` against the listed schema and fail the call
/// when it does not match, and the official SDKs (Python, TypeScript) also fail a successful
/// result that has an output schema but no `structuredContent`; only an error result is passed
/// to the host unchecked. So the result is marked `isError`, and the call log keeps the mismatch
/// as a warning: the call itself worked.
fn unchecked_result(result: &ToolResult, problem: &OutputMismatch) -> ToolResult {
    let text = result_text_full(result);
    let note =
        format!("The API's answer does not match this tool's output schema ({problem}), so it is given as text only:");
    ToolResult::text(format!("{note}\n{text}"), true)
}

/// All the text a result carries, or its structured content as JSON when it has no text.
fn result_text_full(result: &ToolResult) -> String {
    let text: Vec<&str> = result.content.iter().filter_map(|item| item.get("text").and_then(Value::as_str)).collect();
    match (&result.structured_content, text.is_empty()) {
        (Some(structured), true) => structured.to_string(),
        _ => text.join("\n"),
    }
}

/// What `validator` finds wrong with `value`, the first few problems each with its path.
fn schema_errors(validator: &jsonschema::Validator, value: &Value) -> Result<(), SchemaMismatch> {
    let messages: Vec<String> = validator
        .iter_errors(value)
        .take(5)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                error.to_string()
            } else {
                format!("{}: {error}", path.trim_start_matches('/').replace('/', "."))
            }
        })
        .collect();
    if messages.is_empty() { Ok(()) } else { Err(SchemaMismatch(messages)) }
}

impl Caller {
    pub fn new(
        pool: Arc<IsolatePool>,
        egress: Arc<Egress>,
        call_log: CallLog,
        limits: SandboxConfig,
        metrics: Arc<Metrics>,
        traces: Traces,
    ) -> Caller {
        Caller { pool, egress, call_log, limits: Arc::new(limits), metrics, traces }
    }

    pub fn traces(&self) -> &Traces {
        &self.traces
    }

    pub fn egress(&self) -> &Arc<Egress> {
        &self.egress
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn pool(&self) -> &IsolatePool {
        &self.pool
    }

    pub fn call_log(&self) -> &CallLog {
        &self.call_log
    }

    pub fn sandbox_limits(&self) -> SandboxLimits {
        SandboxLimits::from(&*self.limits)
    }

    pub fn max_response_bytes(&self) -> u64 {
        self.limits.max_response_bytes
    }

    /// Runs `tool` with `arguments` in a fresh isolate and records the call.
    pub async fn call(
        &self,
        server: &ServerId,
        generation_id: i64,
        policy: &Arc<ServerPolicy>,
        tool: &CallableTool,
        arguments: Value,
        origin: Origin,
    ) -> Result<CallOutput, CallError> {
        if let Some(grant) = &origin.grant
            && let Err(missing) = grant.check_tool(&tool.name, tool.read_only)
        {
            self.metrics.record_oauth_refusal("insufficient_scope");
            return Err(CallError::Forbidden(missing));
        }
        let encoded_len = encoded_len(&arguments);
        if encoded_len > self.limits.max_argument_bytes {
            return Err(CallError::InvalidArguments(ArgumentsRefused::TooLarge {
                bytes: encoded_len,
                limit: self.limits.max_argument_bytes,
            }));
        }
        tool.check_arguments(&arguments).map_err(CallError::InvalidArguments)?;
        // Kept for the log in case the call fails: repairing a tool starts from its failures.
        let logged_arguments = arguments.clone();

        let Origin { via, parent_execution_id, execution_id, grant, caller: _, trace_parent } = origin;
        let execution_id = execution_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let started_at = now_millis();
        let started = Instant::now();
        let egress = Arc::new(self.egress.for_call(policy.clone(), tool.read_only));
        let invocation = Invocation {
            handler: tool.handler.clone(),
            arguments,
            limits: self.sandbox_limits(),
            fetch: egress.clone(),
            program: Program::Handler,
        };
        let span = tracing::info_span!(
            "call",
            server_id = %server,
            tool = %tool.name,
            execution_id = %execution_id,
            outcome = tracing::field::Empty,
        );
        self.traces.start_trace(&span, trace_parent.as_ref());
        // Written exactly once: below, or by its drop if the caller goes away mid-call (this
        // future is then dropped, and with it the isolate).
        let mut entry = CallEntry {
            caller: self,
            server,
            generation_id,
            tool,
            via,
            parent_execution_id,
            execution_id,
            grant,
            started_at,
            started,
            egress: Arc::clone(&egress),
            arguments: Some(logged_arguments),
            redactor: &policy.redactor,
            error_result: false,
            written: false,
            span: span.clone(),
        };
        let mut completion = match self.pool.run(server.as_str(), invocation).instrument(span.clone()).await {
            Ok(completion) => completion,
            Err(error) => {
                let (outcome, call_error) = match error {
                    PoolError::Busy(busy) => (CallOutcome::Busy, CallError::Busy(busy.to_string())),
                    PoolError::Closed => (CallOutcome::ShuttingDown, CallError::ShuttingDown),
                };
                entry.write(outcome, Some(call_error.to_string()), 0, String::new());
                return Err(call_error);
            }
        };
        scrub(&policy.redactor, &mut completion);
        if completion.outcome == Outcome::Ok
            && let Err(problem) = tool.check_result(&completion.result)
        {
            completion.result = unchecked_result(&completion.result, &problem);
            // The warning goes to the call log with the handler's own console lines.
            if !completion.console.is_empty() && !completion.console.ends_with('\n') {
                completion.console.push('\n');
            }
            completion.console.push_str(&format!("[warn] {problem}; structuredContent was left out\n"));
            tracing::warn!(parent: &span, %problem, "result does not match the output schema; sent without structuredContent");
        }
        let outcome = match completion.outcome {
            Outcome::Ok => CallOutcome::Ok,
            Outcome::Error if completion.fetch_denied => CallOutcome::Denied,
            Outcome::Error => CallOutcome::Error,
            Outcome::Timeout => CallOutcome::Timeout,
            Outcome::Limit => CallOutcome::Limit,
        };
        tracing::debug!(parent: &span, %outcome, elapsed_us = started.elapsed().as_micros() as u64, "call finished");
        let error = match completion.error {
            // A handler's own error result: the log keeps what the agent was told.
            None if completion.result.is_error => Some(result_text(&completion.result)),
            error => error,
        };
        entry.error_result = completion.result.is_error;
        entry.write(outcome, error, i64::from(completion.fetches), completion.console);
        let execution_id = std::mem::take(&mut entry.execution_id);
        Ok(CallOutput { execution_id, outcome: completion.outcome, result: completion.result })
    }
}

/// A call the daemon answered itself, without an isolate (a discovery-mode server's
/// `search_operations` and `describe_operation`), as [`Caller::record_answered`] logs it.
pub struct AnsweredCall<'a> {
    pub server: &'a ServerId,
    pub generation_id: i64,
    pub tool: &'a str,
    pub series: &'a ToolSeries,
    pub started_at: i64,
    pub started: Instant,
    /// What the caller was told when the answer is an error.
    pub error: Option<String>,
}

impl Caller {
    /// Logs and counts a call answered without an isolate, as a tool call's entry would be:
    /// its own execution id, its origin, its outcome and duration. Returns the execution id.
    pub fn record_answered(&self, call: AnsweredCall<'_>, origin: Origin) -> String {
        let Origin { via, parent_execution_id, execution_id, grant, caller: _, trace_parent: _ } = origin;
        let execution_id = execution_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let outcome = if call.error.is_some() { CallOutcome::Error } else { CallOutcome::Ok };
        let elapsed = call.started.elapsed();
        self.metrics.record_call(call.series, outcome, elapsed);
        self.call_log.record(CallRecord {
            execution_id: execution_id.clone(),
            server_id: call.server.to_string(),
            generation_id: call.generation_id,
            tool: call.tool.to_string(),
            via,
            started_at: call.started_at,
            duration_us: elapsed.as_micros() as i64,
            outcome,
            is_error: call.error.is_some(),
            error: call.error,
            arguments: None,
            fetches: 0,
            console: String::new(),
            egress: Vec::new(),
            parent_execution_id: parent_execution_id.as_deref().map(str::to_owned),
            code: None,
            subject: grant.as_ref().map(|grant| grant.claims.sub.clone()),
            client_id: grant.as_ref().and_then(|grant| grant.claims.client_id.clone()),
            children: Vec::new(),
        });
        execution_id
    }
}

/// One call's line in the call log (and its metrics), written exactly once: by
/// [`CallEntry::write`] when the call ends, or by the drop of an entry whose call never did
/// because the caller went away.
struct CallEntry<'a> {
    caller: &'a Caller,
    server: &'a ServerId,
    generation_id: i64,
    tool: &'a CallableTool,
    via: Via,
    parent_execution_id: Option<Arc<str>>,
    execution_id: String,
    grant: Option<Arc<Grant>>,
    started_at: i64,
    started: Instant,
    egress: Arc<crate::serve::egress::CallEgress>,
    /// The call's arguments, logged only when it fails.
    arguments: Option<Value>,
    redactor: &'a Redactor,
    /// The handler returned an error result (`isError`); set before a run that ended is written.
    error_result: bool,
    written: bool,
    /// The call's span, which gets the outcome.
    span: tracing::Span,
}

impl CallEntry<'_> {
    fn write(&mut self, outcome: CallOutcome, error: Option<String>, fetches: i64, console: String) {
        self.written = true;
        let metrics = &self.caller.metrics;
        let egress = self.egress.take_log();
        for request in &egress {
            metrics.record_egress(match (request.allowed, &request.reason) {
                (false, _) => EgressOutcome::Denied,
                (true, None) => EgressOutcome::Allowed,
                (true, Some(_)) => EgressOutcome::Error,
            });
            metrics.record_egress_protection(request.decision, request.cache);
        }
        let scrubs: i64 = egress.iter().map(|request| request.scrubs).sum();
        if scrubs > 0 {
            metrics.record_credential_scrubs(&self.tool.series, scrubs as u64);
        }
        let elapsed = self.started.elapsed();
        metrics.record_call(&self.tool.series, outcome, elapsed);
        let failed = self.error_result || outcome != CallOutcome::Ok;
        if HealthRule::counts(outcome)
            && let Some(degraded) = self.tool.health.record(failed)
        {
            metrics.record_tool_health(&self.tool.series, degraded);
            if degraded {
                tracing::warn!(server_id = %self.server, tool = %self.tool.name, "tool degraded: too many of its recent calls failed");
            }
        }
        // A failed call that ran keeps its arguments (repair context); one that never ran does not.
        let (arguments, error) = match self.arguments.take().filter(|_| failed && HealthRule::counts(outcome)) {
            Some(arguments) => {
                let (arguments, error) = for_the_log(arguments, error, self.redactor);
                (Some(arguments), error)
            }
            None => (None, error),
        };
        if self.caller.traces.enabled() {
            // Only for the trace: the log has the outcome in its own line, and recording a field
            // makes the log layer format it on every call.
            self.span.record("outcome", outcome.as_str());
        }
        // The log is written in batches by its own task: this span is the hand-over.
        let _enqueue = tracing::debug_span!(parent: &self.span, "call-log enqueue").entered();
        self.caller.call_log.record(CallRecord {
            execution_id: self.execution_id.clone(),
            server_id: self.server.to_string(),
            generation_id: self.generation_id,
            tool: self.tool.name.clone(),
            via: self.via,
            started_at: self.started_at,
            duration_us: elapsed.as_micros() as i64,
            outcome,
            error,
            is_error: failed,
            arguments,
            fetches,
            console,
            egress,
            parent_execution_id: self.parent_execution_id.as_deref().map(str::to_owned),
            code: None,
            subject: self.grant.as_ref().map(|grant| grant.claims.sub.clone()),
            client_id: self.grant.as_ref().and_then(|grant| grant.claims.client_id.clone()),
            children: Vec::new(),
        });
    }
}

impl Drop for CallEntry<'_> {
    fn drop(&mut self) {
        if !self.written {
            // Dropped unfinished: a script's tool call when the script ended without awaiting it
            // (or was stopped), any other call when its client went away or its server was
            // deleted, which stops the calls in flight on it.
            let cancelled = if self.parent_execution_id.is_some() {
                "cancelled: the script that made this call ended before the call finished"
            } else {
                "cancelled: the call was stopped before it finished (its client went away, or its server was deleted)"
            };
            self.write(CallOutcome::Cancelled, Some(cancelled.into()), 0, String::new());
        }
    }
}

/// The text a result shows the agent, cut to what a log line needs.
fn result_text(result: &ToolResult) -> String {
    let text: Vec<&str> = result.content.iter().filter_map(|item| item.get("text").and_then(Value::as_str)).collect();
    if text.is_empty() {
        "the tool returned an error result".to_string()
    } else {
        truncate(&text.join("\n"), MAX_LOGGED_TEXT)
    }
}

/// Text kept per logged error result and per logged argument value.
const MAX_LOGGED_TEXT: usize = 2000;
/// A failed call's logged arguments, in all.
const MAX_LOGGED_ARGUMENTS: usize = 8 * 1024;

/// A failed call's arguments and error as the log keeps them. The server's credential values
/// and every argument that is a secret (`credentials::secret_argument`: by its name or its key
/// format) are replaced by `[redacted]`, in the arguments and wherever their values appear in
/// the error (a handler that throws `bad password: …` echoes one); long strings are cut.
fn for_the_log(mut arguments: Value, error: Option<String>, redactor: &Redactor) -> (Value, Option<String>) {
    fn walk(value: &mut Value, secrets: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (name, value) in map.iter_mut() {
                    if crate::credentials::secret_argument(name, value) {
                        collect(value, secrets);
                        *value = Value::String("[redacted]".into());
                    } else {
                        walk(value, secrets);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| walk(item, secrets)),
            Value::String(text) if text.len() > MAX_LOGGED_TEXT => *text = truncate(text, MAX_LOGGED_TEXT),
            _ => {}
        }
    }
    /// Every scalar under a secret argument, as text (a secret object's fields too).
    fn collect(value: &Value, secrets: &mut Vec<String>) {
        match value {
            Value::String(text) => secrets.push(text.clone()),
            Value::Number(number) => secrets.push(number.to_string()),
            Value::Array(items) => items.iter().for_each(|item| collect(item, secrets)),
            Value::Object(map) => map.values().for_each(|item| collect(item, secrets)),
            _ => {}
        }
    }
    redactor.json(&mut arguments);
    let mut secrets = Vec::new();
    walk(&mut arguments, &mut secrets);
    let error = error.map(|mut error| {
        // Longest first, so a secret that contains another is replaced whole. Very short values
        // ("1", "ab") would turn every error into confetti and say little; they stay.
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        for secret in secrets.iter().filter(|secret| secret.len() >= 4) {
            error = error.replace(secret.as_str(), "[redacted]");
        }
        error
    });
    let encoded = arguments.to_string();
    if encoded.len() > MAX_LOGGED_ARGUMENTS {
        return (Value::String(truncate(&encoded, MAX_LOGGED_ARGUMENTS)), error);
    }
    (arguments, error)
}

/// The first `max` bytes of `text`, cut at a character boundary, with a marker when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n/* … {} more bytes */", &text[..cut], text.len() - cut)
}

/// Takes the server's credential values out of everything the call hands back or logs. The
/// egress already took them out of every response before the handler saw one, so a handler has
/// none to hand back; this is the second layer, in case a value reaches a handler some other way.
fn scrub(redactor: &Redactor, completion: &mut Completion) {
    if redactor.is_empty() {
        return;
    }
    completion.result.content.iter_mut().for_each(|item| redactor.json(item));
    if let Some(structured) = completion.result.structured_content.as_mut() {
        redactor.json(structured);
    }
    let texts: [Option<&mut String>; 2] = [completion.error.as_mut(), Some(&mut completion.console)];
    for text in texts.into_iter().flatten() {
        if let std::borrow::Cow::Owned(scrubbed) = redactor.text(text) {
            *text = scrubbed;
        }
    }
}

/// The JSON size of a value, counted without building the text (this runs on every call).
fn encoded_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn failed_calls_are_logged_without_their_secrets() {
        let redactor = crate::credentials::Redactor::new(&[]);
        let arguments = json!({
            "id": 7,
            "accessToken": "hunter2-token",
            "nested": {"password": {"old": "swordfish", "new": 12345}},
            "q": "ghp_0123456789abcdef0123",
            "long": "x".repeat(5000),
        });
        let error = Some("login failed for hunter2-token (old swordfish, new 12345), id 7".to_string());
        let (logged, error) = super::for_the_log(arguments, error, &redactor);
        let text = logged.to_string();
        for secret in ["hunter2", "swordfish", "12345", "ghp_"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(logged["id"], 7);
        assert!(logged["long"].as_str().unwrap().len() < 2100);
        assert_eq!(error.unwrap(), "login failed for [redacted] (old [redacted], new [redacted]), id 7");
    }

    #[test]
    fn secrets_hidden_in_nesting_or_under_plain_names_are_redacted_too() {
        use crate::credentials::{Binding, Credential, Injection, Redactor};
        let credential = Credential {
            name: "upstream".into(),
            binding: Binding {
                domains: vec!["api.example.test".into()],
                inject: Injection::Query { query: "k".into() },
                per_user: None,
            },
            value: "live-credential-value-123".into(),
        };
        let redactor = Redactor::new(&[credential]);
        let arguments = json!({
            "headers": {"Authorization": "Bearer abc.def.ghi"},
            "accounts": [{"name": "a", "apiKey": "first-key-value"}, {"name": "b", "x-api-key": "second-key-value"}],
            "q": "search for live-credential-value-123 please",
            "keyword": "rust",
        });
        let (logged, _) = super::for_the_log(arguments, None, &redactor);
        let text = logged.to_string();
        for secret in ["abc.def.ghi", "first-key-value", "second-key-value", "live-credential-value-123"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(logged["keyword"], "rust", "an ordinary argument is kept");
        assert_eq!(logged["accounts"][1]["name"], "b");
        assert!(logged["q"].as_str().unwrap().contains("[redacted:upstream]"), "{text}");
    }

    #[test]
    fn encoded_len_matches_the_serialised_size() {
        for value in [json!({}), json!({"a": [1, 2, "ü"], "b": null}), json!("x".repeat(1000))] {
            assert_eq!(super::encoded_len(&value), serde_json::to_vec(&value).unwrap().len());
        }
    }
}
