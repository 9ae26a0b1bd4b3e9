//! The boundary between the pool and a JavaScript engine.

use std::sync::Arc;

use futures_util::future::LocalBoxFuture;

use super::admission::IsolateMemory;
use super::invocation::{CompileError, Completion, Invocation};

/// What the pool gives an engine for one call.
pub struct HostContext {
    /// Where `FetchHost` futures are spawned (the daemon's multi-thread runtime).
    pub runtime: tokio::runtime::Handle,
    /// The daemon-wide isolate memory every call draws on.
    pub memory: Arc<IsolateMemory>,
}

/// A JavaScript engine able to run tool handlers.
///
/// Implementations must honour every field of [`SandboxLimits`](super::invocation::SandboxLimits) and must not panic on
/// anything the handler does. [`Engine::execute`] returns a future that the pool polls on
/// one worker thread, never moving it to another: JavaScript may run only inside its polls,
/// each poll must return within a few milliseconds (a computing call yields, and ends at its
/// CPU or wall limit), and while the handler waits for a fetch or a timer the future must be
/// pending without blocking the thread, so the worker can run other calls. Dropping the future abandons the call: the engine must then free
/// the isolate and stop its fetches.
pub trait Engine: Send + Sync + 'static {
    /// Short name for logs and `/readyz`, e.g. `"quickjs-wasm"`.
    fn name(&self) -> &'static str;

    /// Syntax-check a handler body without running it.
    fn check(&self, source: &str) -> Result<(), CompileError>;

    /// Run one invocation to completion in a fresh isolate.
    fn execute(&self, invocation: Invocation, host: HostContext) -> LocalBoxFuture<'static, Completion>;
}
