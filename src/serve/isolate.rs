//! Sandboxed execution of tool handlers.
//!
//! Every MCP tool call runs an untrusted JavaScript handler — the *body* of
//! `async function (args, fetch) { ... }`, written by an LLM — inside an isolate. The only
//! way out of the isolate is `fetch`, which is forwarded to a [`FetchHost`] supplied by the
//! caller (the egress module decides what is allowed).
//!
//! # One engine: QuickJS compiled to WebAssembly
//!
//! JavaScript runs in QuickJS compiled to WebAssembly under Wasmtime ([`WasmEngine`],
//! `wasm.rs`). The engine ends a call at its CPU or wall limit wherever it is, inside any of
//! QuickJS's built-ins included (Wasmtime's epoch interruption checks a deadline at every loop
//! back-edge and function entry of the compiled module), so no JavaScript input can hold a
//! worker past its limits and no process ever has to be killed; and QuickJS can touch only its
//! own linear memory and the few imports the daemon gives it, so even a memory-safety bug in
//! it reaches no file, socket, process or other call. docs/sandbox.md has the measurements
//! behind the choice.
//!
//! # Why a fresh isolate per call
//!
//! Each call gets a brand-new instance of the engine's image (QuickJS's runtime and context
//! with the prelude already run), which is dropped when the call ends. Nothing a handler does —
//! monkey-patching built-ins, stashing data in globals, leaking memory, leaving timers or
//! promises behind — can be observed by the next call, and an instance that hit a limit
//! (half-built objects after an out-of-memory error, a stack that overflowed mid-update) is
//! never reused. Instantiating the image maps its memory copy-on-write, so a call pays only for
//! the pages it writes: about 28 µs and 0.2 M instructions for a pure call (release build).
//!
//! # Why dedicated worker threads, each driving many calls
//!
//! JavaScript is synchronous: a handler that computes holds the thread that runs it until it
//! yields at its next epoch deadline. Running that on tokio reactor threads would delay
//! unrelated I/O, so [`IsolatePool`] owns a small set of OS threads (`mcpbootd-isolate-N`, one
//! per core by default).
//!
//! Most handlers spend nearly all of their time waiting for an upstream API, not running
//! JavaScript, so a call must not hold a thread while it waits. Each worker runs a
//! single-threaded tokio runtime, and each call is a task on it: JavaScript runs in short
//! *turns*, and between turns — while `await fetch(...)` or a `setTimeout` is pending — the
//! call is parked and the worker runs other calls' turns. A turn that keeps computing yields
//! to them every few milliseconds too. Thousands of calls can be in flight on two threads;
//! what bounds them is memory (each parked instance keeps the pages it wrote), which is why
//! admission counts it (`admission.rs`). Network I/O for `fetch` happens on the daemon's
//! multi-thread runtime: the call spawns the [`FetchHost::fetch`] future there and is woken
//! when it completes.
//!
//! # The event loop
//!
//! A call's first turn compiles the handler, calls it and runs every promise job that
//! follows; most pure handlers finish there. Otherwise the call parks until a fetch
//! completes, the next timer is due or the wall deadline passes, and the next turn hands the
//! result to JS and runs jobs again, and so on. If the promise is pending while no fetch or
//! timer is outstanding, nothing can ever settle it and the call ends at once as
//! [`Outcome::Timeout`] rather than holding memory until the wall deadline. When the promise
//! settles the call is over: fetches still in flight are aborted and pending timers
//! dropped, and the call is answered once the aborted fetches have stopped; the same happens
//! when the caller goes away (the call's future is dropped), without the wait. An
//! exception escaping a `setTimeout` callback ends the call as [`Outcome::Error`] (as an
//! uncaught exception ends a Node process).
//!
//! # How limits are enforced
//!
//! * **CPU** — the worker thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) summed over the
//!   polls of the call's future, so neither time parked nor time the OS gives other processes
//!   or calls counts; checked at every epoch deadline of a running turn (every 10 ms), in
//!   whatever built-in the call is. It does not bound how long the other calls on a worker
//!   wait: a turn yields to them at each of those deadlines.
//! * **Wall** — a deadline from call start, parked time included; checked at the same
//!   deadlines and never parked past. Outcome [`Outcome::Timeout`].
//! * **Memory** — the instance's linear memory may grow past the image by
//!   [`SandboxLimits::memory_bytes`] at most, and only while the daemon-wide [`IsolateMemory`]
//!   has room; copies the natives make outside the instance (decoded text, URL parts, requests
//!   in flight) are charged to the same budget before they are made. Because the refusal
//!   happens in Rust, it is recorded even if JS catches the resulting error.
//! * **Stack** — the module's shadow stack, its top lowered to [`SandboxLimits::stack_bytes`]
//!   (a call that goes deeper traps), and Wasmtime's bound on native stack for wasm frames.
//! * **fetch / timers / result size / console** — counted in Rust.
//!
//! Every limit is latched in Rust state the moment it is hit. From then on every epoch
//! deadline traps, and the call ends as [`Outcome::Limit`] (or [`Outcome::Timeout`] for the
//! wall clock) whatever JS does next. The pool's watchdog reports a worker still inside one
//! turn past its call's wall deadline plus [`OVERRUN_GRACE`], which the engine makes
//! impossible; it is the alarm for an engine bug, not a part of the limits.
//!
//! # What handlers see
//!
//! The ECMAScript built-ins plus `fetch`, `Headers`, `Response`, `URL`, `URLSearchParams`,
//! `TextEncoder`, `TextDecoder`, `atob`, `btoa`, `console`, `structuredClone`,
//! `setTimeout`/`clearTimeout` and the daemon's `pathSegment` (QuickJS also keeps its
//! `InternalError` and the `DOMException` that `atob` throws). `pathSegment(value)`
//! percent-encodes a value as one URL path segment and throws for one that is empty, `.` or
//! `..` in any encoding, which URL normalisation would turn into another path. No `require`,
//! module loader (`import()` rejects), `process`, `Deno`, `queueMicrotask`, `performance`,
//! filesystem or sockets. `eval` and `Function` stay: they only reach the same sandbox.
//! Deliberate deviations from the web:
//! a plain object or array `fetch` body is sent as JSON with `content-type:
//! application/json` (instead of `"[object Object]"`); `PATCH` is upper-cased like the other
//! standard methods; bodies are fully buffered (`Response.body` is `null`); only UTF-8 is
//! supported by `TextDecoder`.
//!
//! # Results
//!
//! Normalised in Rust from the handler's `JSON.stringify`d return value (`normalize.rs`):
//! an MCP-shaped `{content: [...], isError?, structuredContent?}` passes through after
//! validation; a string becomes one text item; `undefined` becomes one *empty* text item;
//! any other value becomes pretty JSON text plus `structuredContent` when it is an object.
//! A throw becomes an error result `"<Name>: <message> (handler line N)"`, the line counted
//! within the handler body. Lone UTF-16 surrogates become U+FFFD everywhere.
//!
//! The pool reaches the engine through the [`Engine`] trait (`engine.rs`), the one boundary
//! between them; [`WasmEngine`] is its implementation, and the pool's tests drive the pool
//! with a stand-in.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::config::SandboxConfig;
use crate::states::text_enum;

mod admission;
mod engine;
mod normalize;
mod pool;
mod scan;
#[cfg(test)]
mod tests;
mod wasm;

pub(in crate::serve) use admission::{Admission, Refused};
pub use admission::{AdmissionLimits, Blocked, Busy, IsolateMemory};
pub use engine::{Engine, HostContext};
pub use pool::{IsolatePool, OVERRUN_GRACE, PoolError, PoolSettings, PoolStats};
pub use wasm::{CacheUse, CompileCache, WasmEngine};

/// Largest handler source accepted by [`check_handler`] (and by the engine at run time): the
/// toolset limit, so a handler that registered always runs.
pub use crate::toolset::MAX_HANDLER_BYTES;

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

/// Compile-only check used at registration time.
///
/// Syntax-checks `source` as the body of `async function (args, fetch) { ... }` in a fresh
/// instance of the engine with a time limit, without running any of it. Also rejects
/// `require(...)`, `import(...)` and `import` statements (there is no module system in the
/// isolate) and a body that closes the wrapper function early, with a clear message.
///
/// Runs on the calling thread and takes well under a millisecond for typical handlers.
pub fn check_handler(source: &str) -> Result<(), CompileError> {
    if source.len() > MAX_HANDLER_BYTES {
        return Err(CompileError {
            line: None,
            message: format!("handler is too large ({} bytes, the maximum is {MAX_HANDLER_BYTES})", source.len()),
        });
    }
    scan::check_source(source)?;
    let engine = checking_engine()?;
    // The likeliest first mistake: a whole function where its body belongs. It compiles (as a
    // declaration or an unused expression) and every call returns nothing, or, unnamed, fails
    // with "function name expected". It is that mistake when the whole body is one function
    // expression, which is what the parser accepts here.
    let trimmed = source.trim_end().trim_end_matches(';');
    if scan::starts_like_function(source) && engine.check(&format!("return (\n{trimmed}\n);")).is_ok() {
        return Err(CompileError { line: Some(1), message: WHOLE_FUNCTION.into() });
    }
    engine.check(source)
}

/// Compile-only check of a code-mode script (see [`Program::Script`]): the size limit, no
/// `require`/`import`, and the syntax, with the line of the first error.
pub fn check_script(source: &str) -> Result<(), CompileError> {
    if source.len() > MAX_HANDLER_BYTES {
        return Err(CompileError {
            line: None,
            message: format!("the script is too large ({} bytes, the maximum is {MAX_HANDLER_BYTES})", source.len()),
        });
    }
    scan::check_source(source)?;
    checking_engine()?.check(source)
}

/// The engine that compiles what the checks above compile: the one that will run it.
fn checking_engine() -> Result<Arc<WasmEngine>, CompileError> {
    WasmEngine::process_wide().map_err(|error| CompileError {
        line: None,
        message: format!("the JavaScript engine could not be started to check the code: {error}"),
    })
}

const WHOLE_FUNCTION: &str = "the handler is a whole function, but it must be the body of one: the daemon runs \
     it as `async function (args, fetch) { <handler> }`, so a function written here is only defined and every \
     call returns nothing. Send only what goes between the braces, e.g. \
     \"const res = await fetch(`https://api.example.com/items/${args.id}`); return await res.json();\"";

/// Problems worth telling the author that do not stop the handler from running.
pub fn handler_warnings(source: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    if !scan::has_return(source) {
        warnings.push(
            "the handler has no `return`, so every call returns an empty result; end it with `return <value>;`"
                .to_string(),
        );
    }
    warnings
}

/// CPU time the current thread has used. Every turn of a call runs on its worker thread,
/// so the difference across a turn is what the call itself used, however busy the machine
/// is (a wall-clock measure would charge a handler for time the OS gave other processes). It
/// budgets work on blocking threads too (the reading of an API description), which is why it
/// lives here rather than in an engine.
#[cfg(unix)]
pub(crate) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0))
}

/// Elsewhere, the monotonic clock since an arbitrary origin (wall time inside turns).
#[cfg(not(unix))]
pub(crate) fn thread_cpu_time() -> Duration {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed()
}
