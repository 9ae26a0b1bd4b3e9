//! What crosses between the pool and an engine for one call: the [`Invocation`] that goes in
//! (a handler or a script, its arguments, its limits and the [`FetchHost`] its requests go
//! to), the [`Completion`] that comes out, and the [`CompileError`] of code that does not
//! compile. The rest of the daemon names these through the parent module.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::config::SandboxConfig;
use crate::states::text_enum;

/// Per-call resource limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Wall-clock time per call, from the moment a worker starts it.
    pub wall: Duration,
    /// JavaScript execution time per call (time not spent waiting for fetches or timers).
    pub cpu: Duration,
    /// Memory the runtime may allocate, including the built-ins (~0.2 MiB).
    pub memory_bytes: usize,
    /// The call's share of the QuickJS module's shadow stack, counted down from its top;
    /// clamped between 64 KiB and the whole of it (1 MiB).
    pub stack_bytes: usize,
    /// `fetch()` calls per invocation; one more ends the call as [`Outcome::Limit`].
    pub max_fetches: u32,
    /// Fetches in flight at once; further calls wait in a queue until one completes.
    pub max_concurrent_fetches: u32,
    /// Size of the JSON-serialised handler result.
    pub max_result_bytes: usize,
    /// Captured console output; later output is dropped and a marker line appended.
    pub max_console_bytes: usize,
    /// `setTimeout()` calls per invocation; one more ends the call as [`Outcome::Limit`].
    pub max_timers: u32,
}

/// `setTimeout()` calls per invocation (not configurable: a handler that needs more is broken).
const MAX_TIMERS: u32 = 256;

impl From<&SandboxConfig> for SandboxLimits {
    fn from(config: &SandboxConfig) -> SandboxLimits {
        SandboxLimits {
            wall: Duration::from_millis(config.timeout_ms),
            cpu: Duration::from_millis(config.cpu_ms),
            memory_bytes: (config.memory_mb as usize).saturating_mul(1024 * 1024),
            stack_bytes: (config.stack_kb as usize).saturating_mul(1024),
            max_fetches: config.max_fetches,
            max_concurrent_fetches: config.max_concurrent_fetches,
            max_result_bytes: config.max_result_bytes,
            max_console_bytes: config.max_console_bytes,
            max_timers: MAX_TIMERS,
        }
    }
}

/// The `[sandbox]` defaults.
impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits::from(&SandboxConfig::default())
    }
}

/// An HTTP request made by a handler through `fetch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The URL the handler asked for, WHATWG-normalised when it parses as an absolute URL and
    /// passed on verbatim otherwise (e.g. a relative URL): the host must validate it.
    pub url: String,
    /// Upper-cased for the standard methods, otherwise as given (always an HTTP token).
    pub method: String,
    /// Lower-cased names, in insertion order; values contain no CR, LF or NUL.
    pub headers: Vec<(String, String)>,
    pub body: Option<Bytes>,
    pub redirect: RedirectMode,
}

text_enum! {
    /// What `fetch` does with a 3xx answer: `init.redirect` of the Fetch standard.
    pub enum RedirectMode ("redirect mode") {
        /// Follow it (the default), with the policy checked again on every hop.
        Follow = "follow",
        /// Return the 3xx response to the handler.
        Manual = "manual",
        /// Fail the request.
        Error = "error",
    }
}

/// The host's answer to a [`FetchRequest`]; the body is handed to JS fully buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    pub status: u16,
    pub status_text: String,
    /// Final URL after redirects.
    pub url: String,
    pub redirected: bool,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// Why a fetch failed. The message is what JS sees, as the message of a `TypeError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Refused by policy; also sets [`Completion::fetch_denied`].
    Denied(String),
    Network(String),
    /// A host-side limit (response too large, ...).
    Limit(String),
}

impl FetchError {
    pub fn message(&self) -> &str {
        match self {
            FetchError::Denied(m) | FetchError::Network(m) | FetchError::Limit(m) => m,
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for FetchError {}

/// Performs the fetches of one or more invocations.
pub trait FetchHost: Send + Sync + 'static {
    /// Called inside a task spawned on the tokio runtime handle given to the pool (so tokio
    /// APIs work here), which then awaits the returned future; never on the isolate worker.
    /// `deadline` is the call's wall deadline: the isolate stops waiting when it passes, and
    /// aborts the task when the call ends (and answers once it has stopped). A request the
    /// host sent may be cut off that way; the host logs it as such (`serve::egress::log`).
    fn fetch(&self, request: FetchRequest, deadline: Instant) -> BoxFuture<'static, Result<FetchResponse, FetchError>>;
}

/// One tool call, or one code-mode script.
#[derive(Clone)]
pub struct Invocation {
    /// Handler body (see the module docs), or a script's code; compiled on every call.
    pub handler: Arc<str>,
    /// Passed to the handler as `args`, or to a script as `input` (round-tripped through JSON).
    pub arguments: serde_json::Value,
    pub limits: SandboxLimits,
    pub fetch: Arc<dyn FetchHost>,
    pub program: Program,
}

/// What [`Invocation::handler`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A tool handler: the body of `async function (args, fetch)`.
    Handler,
    /// A code-mode script: the body of `async function (input, call_tool, tools)`, with no
    /// `fetch`. `call_tool(server, tool, args)` sends a [`FetchRequest`] to
    /// `tool:<server>/<tool>` (the only request a script can make) through the same host
    /// channel a handler's fetch uses, so a script's host decides what a tool call does and a
    /// script's requests travel, queue, count and are cancelled exactly like fetches.
    /// `tools` is JSON `{"<server>": ["<tool>", ...]}`: the typed stubs `tools.<server>.<tool>`;
    /// a server given as `{"tools": [...], "operations": true}` has a stub for any name too (a
    /// discovery-mode server's operations).
    Script { tools: Arc<str> },
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("handler_bytes", &self.handler.len())
            .field("arguments", &self.arguments)
            .field("limits", &self.limits)
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

text_enum! {
    /// How a handler run ended. (The call log tells a run that failed after the egress policy
    /// refused a request apart as `denied`.)
    pub enum Outcome ("run outcome") {
        /// The handler returned a valid result.
        Ok = "ok",
        /// The handler threw, returned something unusable, or returned `isError: true`.
        Error = "error",
        /// The wall-clock limit passed, or the handler could never finish.
        Timeout = "timeout",
        /// A resource limit (cpu, memory, stack, fetches, timers, result size) was hit.
        Limit = "limit",
    }
}

/// An MCP `CallToolResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// MCP content items, e.g. `{"type":"text","text":"..."}`.
    pub content: Vec<serde_json::Value>,
    pub structured_content: Option<serde_json::Value>,
    pub is_error: bool,
}

impl ToolResult {
    /// A result holding one text item.
    pub fn text(text: impl Into<String>, is_error: bool) -> Self {
        Self {
            content: vec![serde_json::json!({ "type": "text", "text": text.into() })],
            structured_content: None,
            is_error,
        }
    }
}

/// Everything known about a finished call.
#[derive(Debug, Clone)]
pub struct Completion {
    pub result: ToolResult,
    pub outcome: Outcome,
    /// Message for the call log when `outcome != Ok`.
    pub error: Option<String>,
    /// Captured console output (`"[log] ..."` lines), capped at `max_console_bytes`.
    pub console: String,
    /// `fetch()` calls accepted (started or queued).
    pub fetches: u32,
    /// At least one fetch was refused by the [`FetchHost`] with [`FetchError::Denied`].
    pub fetch_denied: bool,
    pub cpu_time: Duration,
    pub wall_time: Duration,
}

impl Completion {
    /// A completion for a call that failed before or outside JS (engine failure, panic).
    pub fn failed(outcome: Outcome, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            result: ToolResult::text(message.clone(), true),
            outcome,
            error: Some(message),
            console: String::new(),
            fetches: 0,
            fetch_denied: false,
            cpu_time: Duration::ZERO,
            wall_time: Duration::ZERO,
        }
    }
}

/// A handler that does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// 1-based line within the handler body, when known.
    pub line: Option<u32>,
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CompileError {}
