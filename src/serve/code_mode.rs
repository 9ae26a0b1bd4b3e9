//! Code mode: an agent sends one script that calls several tools (`code_execution`), and gets
//! one JSON result back; the tool results stay inside the sandbox. See `docs/code-mode.md`. The
//! request and the result are the types of `script`, which the admin API and the client share.
//!
//! A script runs in an isolate like a handler (same pool, same CPU, memory and stack guards),
//! compiled as `Program::Script`: it has no `fetch`, and `call_tool` sends a request to
//! `tool:<server>/<tool>` through the host channel fetch would use. That host is a
//! `ScriptHost` (`code_mode/host.rs`), which has no network at all: it checks the request
//! against the script's allowed servers and budgets, then runs the tool with
//! [`Server::call`], which is the path an MCP `tools/call` takes, so the tool runs in an
//! isolate of its own with its own server's whitelist, credentials and limits, and is logged
//! (with the script as its parent). This module runs the script and writes its call-log entry.
//!
//! **No deadlock.** A script waiting on its tool calls is parked (it holds no worker thread),
//! scripts are admitted under a tenant of their own (`<server>#code`), so they never use the
//! per-server slots their tool calls need, and at most `[code_mode] max_concurrent_scripts`
//! run at once, at most half of the in-flight slots (checked at start-up). A tool call that
//! still finds no slot waits in the fair queue and fails with `BUSY` after
//! `[sandbox] queue_timeout_ms`: a script always ends, by its own deadline at the latest.
//!
//! **Fair script slots.** Scripts get their slots from an admission of their own, the
//! mechanism tool calls are admitted by (`isolate/admission.rs`): one server runs at most
//! [`CodeModeConfig::scripts_per_server`] scripts at once, its extra scripts wait in its own
//! share of the queue (`[sandbox] max_queued_per_server`), and when a slot frees up, waiting
//! servers are served round-robin. One server's clients therefore cannot hold every script slot
//! while another server's scripts get `BUSY`.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::catalog::{CallRecord, now_millis};
use crate::config::{CodeModeConfig, SandboxConfig};
use crate::oauth::Grant;
use crate::script::{ErrorKind, ScriptError, ScriptOptions, ScriptRequest, ScriptResult};
use crate::serve::call::{Caller, truncate};
use crate::serve::isolate::{
    self, Admission, AdmissionLimits, Blocked, Busy, Completion, Invocation, Outcome, PoolError, Program, Refused,
    SandboxLimits, ToolResult,
};
use crate::serve::server::{Server, ServerLookup};
use crate::states::{CallOutcome, Via};
use crate::toolset::{CodeModeSettings, ServerId};

pub mod declarations;
mod host;

use self::host::{ScriptHost, ToolCallLimits};

/// The tool's name on a mount.
pub const TOOL_NAME: &str = "code_execution";

impl From<ScriptResult> for ToolResult {
    /// The MCP result of a script run: the object as `structuredContent` and as JSON text,
    /// `isError` unless ok.
    fn from(result: ScriptResult) -> ToolResult {
        let structured = serde_json::to_value(&result).unwrap_or(Value::Null);
        let text = serde_json::to_string_pretty(&structured).unwrap_or_default();
        ToolResult {
            content: vec![json!({"type": "text", "text": text})],
            structured_content: Some(structured),
            is_error: !result.ok,
        }
    }
}

/// Runs scripts for every mount; one per daemon.
pub struct CodeMode {
    config: CodeModeConfig,
    sandbox: SandboxConfig,
    caller: Caller,
    /// Where scripts find the servers they call: the registry, which owns this runner.
    servers: Weak<dyn ServerLookup>,
    /// Script slots, shared fairly between servers (see the module doc).
    scripts: Arc<Admission>,
}

/// The limits one run gets, after the server's settings and the request's options.
#[derive(Debug, Clone)]
struct RunLimits {
    timeout: Duration,
    /// 0: no limit.
    max_tool_calls: u32,
    max_concurrent_tool_calls: u32,
    max_tool_result_bytes: u64,
    allowed: BTreeSet<ServerId>,
}

impl RunLimits {
    /// The part of the limits the script's host enforces on its tool calls.
    fn tool_calls(&self) -> ToolCallLimits {
        ToolCallLimits {
            allowed: self.allowed.clone(),
            max_tool_calls: self.max_tool_calls,
            max_tool_result_bytes: self.max_tool_result_bytes,
        }
    }
}

impl CodeMode {
    pub fn new(
        config: CodeModeConfig,
        sandbox: SandboxConfig,
        caller: Caller,
        servers: Weak<dyn ServerLookup>,
    ) -> CodeMode {
        let scripts = Admission::without_memory(AdmissionLimits {
            max_in_flight: config.max_concurrent_scripts,
            max_in_flight_per_tenant: config.scripts_per_server(),
            max_queued: sandbox.queue,
            max_queued_per_tenant: sandbox.max_queued_per_server,
            queue_timeout: Duration::from_millis(sandbox.queue_timeout_ms),
        });
        CodeMode { config, sandbox, caller, servers, scripts }
    }

    /// Whether `server` lists `code_execution`: on daemon-wide and in its settings.
    pub fn enabled_for(&self, server: &Server) -> bool {
        self.config.enabled && server.code_mode.as_ref().is_some_and(|settings| settings.enabled)
    }

    /// Why `code_execution` is refused on `server`, when it is.
    pub fn refusal(&self, server: &Server) -> Option<String> {
        if !self.config.enabled {
            return Some(format!(
                "code mode is off in this daemon, so server {:?} has no {TOOL_NAME} tool; an operator turns it on \
                 with [code_mode] enabled = true (MCPBOOTD_CODE_MODE__ENABLED=true)",
                server.id.as_str()
            ));
        }
        if !self.enabled_for(server) {
            return Some(format!(
                "code mode is off for server {:?}, so it has no {TOOL_NAME} tool; an operator turns it on with \
                 PUT /admin/servers/{}/code-mode {{\"enabled\": true}}",
                server.id.as_str(),
                server.id.as_str()
            ));
        }
        None
    }

    fn server_limits(&self, settings: &CodeModeSettings) -> RunLimits {
        RunLimits {
            timeout: Duration::from_millis(settings.timeout_ms.unwrap_or(self.config.timeout_ms)),
            max_tool_calls: settings.max_tool_calls.unwrap_or(self.config.max_tool_calls),
            max_concurrent_tool_calls: settings
                .max_concurrent_tool_calls
                .unwrap_or(self.config.max_concurrent_tool_calls)
                .max(1),
            max_tool_result_bytes: settings.max_tool_result_bytes.unwrap_or(self.config.max_tool_result_bytes),
            allowed: BTreeSet::new(),
        }
    }

    /// The servers `server`'s scripts may call: itself and its `allowed_servers`.
    fn allowed_servers(server: &Server) -> BTreeSet<ServerId> {
        let mut allowed: BTreeSet<ServerId> =
            server.code_mode.iter().flat_map(|settings| settings.allowed_servers.iter().cloned()).collect();
        allowed.insert(server.id.clone());
        allowed
    }

    /// The limits of one run: the server's, narrowed by the request's options.
    fn run_limits(&self, server: &Server, options: &ScriptOptions) -> RunLimits {
        let mut limits = self.server_limits(server.code_mode.as_ref().unwrap_or(&CodeModeSettings::default()));
        if let Some(ms) = options.timeout_ms {
            limits.timeout = limits.timeout.min(Duration::from_millis(ms.max(1)));
        }
        limits.max_tool_calls = match (limits.max_tool_calls, options.max_tool_calls.unwrap_or(0)) {
            (server, 0) => server,
            (0, request) => request,
            (server, request) => server.min(request),
        };
        let allowed = Self::allowed_servers(server);
        limits.allowed = match &options.allowed_servers {
            Some(names) => allowed.into_iter().filter(|id| names.iter().any(|n| n == id.as_str())).collect(),
            None => allowed,
        };
        limits
    }

    /// The `code_execution` tool's description for `server`, built from the tools its scripts
    /// can reach now.
    pub async fn tool_description(&self, server: &Server) -> String {
        let limits = self.server_limits(server.code_mode.as_ref().unwrap_or(&CodeModeSettings::default()));
        let reachable = self.reachable(&server.id, &Self::allowed_servers(server)).await;
        let listed: Vec<declarations::ReachableServer<'_>> = reachable
            .iter()
            .map(|other| declarations::ReachableServer {
                id: other.id.clone(),
                tools: other
                    .listing
                    .iter()
                    .map(|tool| declarations::Reachable {
                        name: &tool.name,
                        description: tool.description.as_deref().unwrap_or(""),
                        input_schema: &tool.input_schema,
                        output_schema: tool.output_schema.as_deref(),
                    })
                    .collect(),
                operations: other.discovery.is_some(),
            })
            .collect();
        let stated = declarations::StatedLimits {
            timeout_ms: limits.timeout.as_millis() as u64,
            max_tool_calls: limits.max_tool_calls,
            max_concurrent_tool_calls: limits.max_concurrent_tool_calls,
        };
        declarations::description(&server.id, &listed, &stated)
    }

    /// What [`Self::tool_description`] depends on: the generation each reachable server serves.
    pub fn listing_key(&self, server: &Server) -> Vec<(ServerId, i64)> {
        let Some(servers) = self.servers.upgrade() else { return Vec::new() };
        Self::allowed_servers(server)
            .into_iter()
            .filter_map(|id| servers.served_generation(&id).map(|generation_id| (id, generation_id)))
            .collect()
    }

    /// The mounted servers among `allowed` (`own` first), built on first use; servers that are
    /// gone or cannot be served are left out.
    async fn reachable(&self, own: &ServerId, allowed: &BTreeSet<ServerId>) -> Vec<Arc<Server>> {
        let Some(lookup) = self.servers.upgrade() else { return Vec::new() };
        let mut servers = Vec::with_capacity(allowed.len());
        let ordered = allowed.iter().filter(|id| *id == own).chain(allowed.iter().filter(|id| *id != own));
        for id in ordered {
            if let Some(server) = lookup.find_server(id).await {
                servers.push(server);
            }
        }
        servers
    }

    /// Runs one script on `server` (already checked to have code mode on, see [`Self::refusal`]).
    /// `grant`: the OAuth token the script came with; every tool call it makes is checked
    /// against it and logged under its subject.
    pub async fn run(
        &self,
        server: &Server,
        request: ScriptRequest,
        via: Via,
        grant: Option<Arc<Grant>>,
    ) -> ScriptResult {
        let execution_id = uuid::Uuid::now_v7().to_string();
        if let Some(refusal) = self.refusal(server) {
            return ScriptResult::failed(execution_id, ErrorKind::CodeModeDisabled, refusal);
        }
        let started_at = now_millis();
        let started = Instant::now();
        let mut entry = ScriptEntry {
            code_mode: self,
            server,
            via,
            grant: grant.clone(),
            execution_id: execution_id.clone(),
            code: truncate(&request.code, self.config.log_code_bytes),
            started_at,
            started,
            written: false,
        };
        if let Err(error) = isolate::check_script(&request.code) {
            let message = match error.line {
                Some(line) => format!("{} (script line {line})", error.message),
                None => error.message.clone(),
            };
            let mut result = ScriptResult::failed(execution_id, ErrorKind::SyntaxError, message);
            if let Some(detail) = result.error.as_mut() {
                detail.line = error.line;
            }
            entry.write(&result, CallOutcome::Error, 0, 0);
            return result;
        }
        let limits = self.run_limits(server, &request.options);
        let _slot = match self.scripts.acquire(server.id.as_str()).await {
            Ok(slot) => slot,
            Err(Refused::Closed) => {
                let result = ScriptResult::failed(execution_id, ErrorKind::ShuttingDown, "the daemon is shutting down");
                entry.write(&result, CallOutcome::ShuttingDown, 0, 0);
                return result;
            }
            Err(Refused::Busy(busy)) => {
                let result = ScriptResult::failed(execution_id, ErrorKind::Busy, script_busy(&busy));
                entry.write(&result, CallOutcome::Busy, 0, 0);
                return result;
            }
        };

        let reachable = self.reachable(&server.id, &limits.allowed).await;
        let stubs: Map<String, Value> = reachable
            .iter()
            .map(|s| {
                let names = Value::from(s.tool_names());
                // A discovery-mode server's stubs answer any name: each is one of its operations.
                let stubs = if s.discovery.is_some() { json!({"tools": names, "operations": true}) } else { names };
                (s.id.to_string(), stubs)
            })
            .collect();
        let host = Arc::new(ScriptHost::new(
            self.caller.clone(),
            reachable,
            Arc::from(execution_id.as_str()),
            grant,
            limits.tool_calls(),
        ));
        let sandbox = SandboxLimits::from(&self.sandbox);
        let invocation = Invocation {
            handler: Arc::from(request.code.as_str()),
            arguments: request.input,
            limits: SandboxLimits {
                wall: limits.timeout,
                cpu: Duration::from_millis(self.config.cpu_ms),
                memory_bytes: (self.config.memory_mb as usize).saturating_mul(1024 * 1024),
                // Budgets are counted by the host, which answers MAX_TOOL_CALLS instead.
                max_fetches: u32::MAX,
                max_concurrent_fetches: limits.max_concurrent_tool_calls,
                max_result_bytes: self.config.max_result_bytes,
                ..sandbox
            },
            fetch: ScriptHost::fetch_host(&host),
            program: Program::Script { tools: Value::Object(stubs).to_string().into() },
        };
        let tenant = format!("{}#code", server.id);
        let ran = self.caller.pool().run(&tenant, invocation).await;
        let calls = host.finish();
        let tool_result_bytes = host.result_bytes();
        let tool_calls = calls.len() as i64;
        let mut result = match ran {
            Ok(completion) => from_completion(execution_id, completion, &limits),
            Err(PoolError::Busy(busy)) => ScriptResult::failed(execution_id, ErrorKind::Busy, busy.to_string()),
            Err(PoolError::Closed) => {
                ScriptResult::failed(execution_id, ErrorKind::ShuttingDown, "the daemon is shutting down")
            }
        };
        result.calls = calls;
        let outcome = match result.error.as_ref().map(|e| e.code) {
            None => CallOutcome::Ok,
            Some(ErrorKind::Timeout) => CallOutcome::Timeout,
            Some(ErrorKind::Limit) => CallOutcome::Limit,
            Some(ErrorKind::Busy) => CallOutcome::Busy,
            Some(ErrorKind::ShuttingDown) => CallOutcome::ShuttingDown,
            Some(_) => CallOutcome::Error,
        };
        entry.write(&result, outcome, tool_calls, tool_result_bytes);
        result
    }
}

/// The script's line in the call log, written exactly once (like a tool call's entry): when it
/// ends, or as `cancelled` if the caller goes away first.
struct ScriptEntry<'a> {
    code_mode: &'a CodeMode,
    server: &'a Server,
    via: Via,
    grant: Option<Arc<Grant>>,
    execution_id: String,
    code: String,
    started_at: i64,
    started: Instant,
    written: bool,
}

impl ScriptEntry<'_> {
    fn write(&mut self, result: &ScriptResult, outcome: CallOutcome, tool_calls: i64, tool_result_bytes: u64) {
        let error = result.error.as_ref().map(|e| format!("{}: {}", e.code, e.message));
        let result_bytes = result.value.as_ref().map_or(0, |v| v.to_string().len() as u64);
        self.record(outcome, error, tool_calls, result.console.clone());
        self.code_mode.caller.metrics().record_script(outcome, tool_result_bytes, result_bytes);
    }

    fn record(&mut self, outcome: CallOutcome, error: Option<String>, tool_calls: i64, console: String) {
        self.written = true;
        let caller = &self.code_mode.caller;
        let elapsed = self.started.elapsed();
        if let Some(series) = &self.server.code_series {
            caller.metrics().record_call(series, outcome, elapsed);
        }
        caller.call_log().record(CallRecord {
            execution_id: self.execution_id.clone(),
            server_id: self.server.id.to_string(),
            generation_id: self.server.generation_id,
            tool: TOOL_NAME.to_string(),
            via: self.via,
            started_at: self.started_at,
            duration_us: elapsed.as_micros() as i64,
            is_error: error.is_some(),
            arguments: None,
            outcome,
            error,
            fetches: tool_calls,
            console,
            egress: Vec::new(),
            parent_execution_id: None,
            code: Some(std::mem::take(&mut self.code)),
            subject: self.grant.as_ref().map(|grant| grant.claims.sub.clone()),
            client_id: self.grant.as_ref().and_then(|grant| grant.claims.client_id.clone()),
            children: Vec::new(),
        });
    }
}

impl Drop for ScriptEntry<'_> {
    fn drop(&mut self) {
        if !self.written {
            let cancelled = "cancelled: the client went away before the script finished";
            self.record(CallOutcome::Cancelled, Some(cancelled.into()), 0, String::new());
            self.code_mode.caller.metrics().record_script(CallOutcome::Cancelled, 0, 0);
        }
    }
}

/// What the script's isolate returned (see `runScript` in the prelude), as a result.
fn from_completion(execution_id: String, completion: Completion, limits: &RunLimits) -> ScriptResult {
    let Completion { outcome, error, console, result, .. } = completion;
    let mut out = ScriptResult::failed(execution_id, ErrorKind::Internal, String::new());
    out.console = console;
    let message = error.unwrap_or_default();
    let failure = match outcome {
        Outcome::Ok => {
            let mut returned = match result.structured_content {
                Some(Value::Object(map)) => map,
                _ => Map::new(),
            };
            if let Some(Value::String(reason)) = returned.remove("unserialisable") {
                Some(ScriptError {
                    code: ErrorKind::NotSerializable,
                    message: format!("the script's result must be JSON-serializable: {reason}"),
                    stack: None,
                    line: None,
                })
            } else if let Some(thrown) = returned.remove("thrown") {
                let text = thrown.as_str().unwrap_or("uncaught exception").to_string();
                let stack =
                    returned.remove("stack").and_then(|s| s.as_str().map(str::to_owned)).filter(|s| !s.is_empty());
                let line = returned.remove("line").and_then(|l| l.as_u64()).and_then(|l| u32::try_from(l).ok());
                let message = match line {
                    Some(line) => format!("{text} (script line {line})"),
                    None => text,
                };
                Some(ScriptError { code: ErrorKind::RuntimeError, message, stack, line })
            } else {
                out.ok = true;
                out.value = Some(returned.remove("value").unwrap_or(Value::Null));
                out.error = None;
                None
            }
        }
        Outcome::Timeout => Some(ScriptError {
            code: ErrorKind::Timeout,
            message: format!(
                "the script did not finish within {} ms (timeout_ms: options, the server's code_mode or \
                 [code_mode]); the tool calls it made are listed in `calls`",
                limits.timeout.as_millis()
            ),
            stack: None,
            line: None,
        }),
        Outcome::Limit => {
            Some(ScriptError { code: ErrorKind::Limit, message: script_limit(&message), stack: None, line: None })
        }
        Outcome::Error => {
            // Errors the prelude did not catch: a compile error it could not see, an engine failure.
            let message = message.replace("(handler line ", "(script line ");
            Some(ScriptError { code: ErrorKind::RuntimeError, message, stack: None, line: None })
        }
    };
    if let Some(failure) = failure {
        out.error = Some(failure);
    }
    out
}

/// Why a script was not started, in terms of the settings that bound scripts.
fn script_busy(busy: &Busy) -> String {
    match busy {
        Busy::Queue { limit } => {
            format!("{limit} scripts are already waiting for a slot ([sandbox] queue); retry shortly")
        }
        Busy::TenantQueue { limit } => format!(
            "{limit} of this server's scripts are already waiting for a slot ([sandbox] max_queued_per_server); \
             retry shortly"
        ),
        Busy::Waited { waited, reason } => {
            let full = match reason {
                Blocked::Tenant { limit } => format!(
                    "this server already runs as many scripts as it may at once ({limit}, [code_mode] \
                     max_concurrent_scripts_per_server)"
                ),
                Blocked::Daemon { limit } => format!(
                    "the daemon already runs as many scripts as it may at once ({limit}, [code_mode] \
                     max_concurrent_scripts)"
                ),
                // Script admission does not look at memory; the script's isolate is admitted by
                // the pool, which words its own refusal.
                Blocked::Memory { .. } => reason.to_string(),
            };
            format!(
                "{full} and none finished within {} ms ([sandbox] queue_timeout_ms); retry shortly",
                waited.as_millis()
            )
        }
    }
}

/// An engine limit message in a script's terms: the settings that bound scripts are `[code_mode]`'s.
fn script_limit(message: &str) -> String {
    [
        ("the handler", "the script"),
        ("(limit `cpu`)", "([code_mode] cpu_ms)"),
        ("(limit `memory_bytes`)", "([code_mode] memory_mb)"),
        ("(limit `max_result_bytes`)", "([code_mode] max_result_bytes)"),
        ("(limit `stack_bytes`)", "([sandbox] stack_kb)"),
    ]
    .iter()
    .fold(message.to_string(), |text, (from, to)| text.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_code_is_cut_on_a_character_boundary() {
        assert_eq!(truncate("héllo", 2), "h\n/* … 5 more bytes */");
    }
}
