// Temporary compile stub for the isolate API (replaced by the real module).
#![allow(dead_code, unused)]
use std::sync::Arc;
use std::time::{Duration, Instant};
pub struct SandboxLimits { pub wall: Duration, pub cpu: Duration, pub memory_bytes: usize, pub stack_bytes: usize, pub max_fetches: u32, pub max_concurrent_fetches: u32, pub max_result_bytes: usize, pub max_console_bytes: usize, pub max_timers: u32 }
impl Default for SandboxLimits { fn default() -> Self { todo!() } }
pub struct FetchRequest { pub url: String, pub method: String, pub headers: Vec<(String, String)>, pub body: Option<bytes::Bytes>, pub redirect: String }
pub struct FetchResponse { pub status: u16, pub status_text: String, pub url: String, pub redirected: bool, pub headers: Vec<(String, String)>, pub body: bytes::Bytes }
pub enum FetchError { Denied(String), Network(String), Limit(String) }
pub trait FetchHost: Send + Sync + 'static {
    fn fetch(&self, request: FetchRequest, deadline: Instant) -> futures_util::future::BoxFuture<'static, Result<FetchResponse, FetchError>>;
}
pub struct Invocation { pub handler: Arc<str>, pub arguments: serde_json::Value, pub limits: SandboxLimits, pub fetch: Arc<dyn FetchHost> }
pub enum Outcome { Ok, Error, Timeout, Limit }
impl Outcome { pub fn as_str(&self) -> &'static str { "ok" } }
pub struct ToolResult { pub content: Vec<serde_json::Value>, pub structured_content: Option<serde_json::Value>, pub is_error: bool }
pub struct Completion { pub result: ToolResult, pub outcome: Outcome, pub error: Option<String>, pub console: String, pub fetches: u32, pub fetch_denied: bool, pub cpu_time: Duration, pub wall_time: Duration }
pub struct CompileError { pub line: Option<u32>, pub message: String }
pub fn check_handler(source: &str) -> Result<(), CompileError> { todo!() }
pub struct IsolatePool;
pub enum PoolError { Busy, Closed }
pub struct PoolStats { pub workers: usize, pub busy: usize, pub queued: usize }
impl IsolatePool {
    pub fn new(workers: usize, queue_capacity: usize, runtime: tokio::runtime::Handle) -> Self { todo!() }
    pub async fn run(&self, invocation: Invocation) -> Result<Completion, PoolError> { todo!() }
    pub fn stats(&self) -> PoolStats { todo!() }
    pub fn close(&self) {}
}
