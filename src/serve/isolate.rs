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

use std::sync::Arc;

mod admission;
mod cpu_time;
mod engine;
mod invocation;
mod normalize;
mod pool;
mod scan;
#[cfg(test)]
mod tests;
mod wasm;

pub(in crate::serve) use admission::{Admission, Refused};
pub use admission::{AdmissionLimits, Blocked, Busy, IsolateMemory};
pub(crate) use cpu_time::thread_cpu_time;
pub use engine::{Engine, HostContext};
pub use invocation::{
    CompileError, Completion, FetchError, FetchHost, FetchRequest, FetchResponse, Invocation, Outcome, Program,
    RedirectMode, SandboxLimits, ToolResult,
};
pub use pool::{IsolatePool, OVERRUN_GRACE, PoolError, PoolSettings, PoolStats};
pub use wasm::{CacheUse, CompileCache, EngineUnavailable, WasmEngine};

// The largest handler source accepted by `check_handler` (and by the engine at run time) is the
// toolset limit, so a handler that registered always runs.
use crate::toolset::MAX_HANDLER_BYTES;

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
