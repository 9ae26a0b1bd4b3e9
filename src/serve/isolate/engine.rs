//! The boundary between the pool and a JavaScript engine.

use super::{CompileError, Completion, Invocation};

/// What the pool gives an engine for one call.
pub struct HostContext<'a> {
    /// Where `FetchHost` futures are spawned.
    pub runtime: &'a tokio::runtime::Handle,
    /// Returns true once nobody is waiting for the result any more (the caller's future was
    /// dropped); the engine may stop early. Polled between event-loop turns, not inside JS.
    pub cancelled: &'a (dyn Fn() -> bool + 'a),
}

/// A JavaScript engine able to run tool handlers.
///
/// Implementations must honour every field of [`super::SandboxLimits`], must not panic on
/// anything the handler does, and must run the whole call — including waiting for fetches —
/// on the calling thread (a pool worker), never on the tokio runtime.
pub trait Engine: Send + Sync + 'static {
    /// Short name for logs, e.g. `"quickjs"`.
    fn name(&self) -> &'static str;

    /// Syntax-check a handler body without running it.
    fn check(&self, source: &str) -> Result<(), CompileError>;

    /// Run one invocation to completion in a fresh isolate.
    fn execute(&self, invocation: Invocation, host: &HostContext<'_>) -> Completion;
}
