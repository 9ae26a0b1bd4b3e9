//! What the daemon and an isolate worker process say to each other over the child's stdin and
//! stdout: length-prefixed frames, each one postcard-encoded message.
//!
//! JSON values (arguments, results) travel as JSON text, because postcard is not
//! self-describing; fetch bodies travel as raw bytes.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::{Completion, FetchError, FetchRequest, FetchResponse, Outcome, SandboxLimits, ToolResult};

/// Largest frame either side accepts: a fetch body at the egress cap plus headers, or a result
/// at `max_result_bytes` plus console, fit well inside.
const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// Daemon → worker process.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToWorker {
    Run {
        call: u64,
        tenant: String,
        handler: String,
        arguments: String,
        limits: WireLimits,
        /// `Some(tools)` for a code-mode script (see `Program::Script`).
        script_tools: Option<String>,
    },
    /// The caller went away: drop the call (its fetches and timers with it).
    Cancel {
        call: u64,
    },
    Fetched {
        call: u64,
        fetch: u64,
        result: Result<WireResponse, WireFetchError>,
    },
}

/// Worker process → daemon.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToDaemon {
    Fetch {
        call: u64,
        fetch: u64,
        request: WireRequest,
        remaining: Duration,
    },
    Done {
        call: u64,
        completion: WireCompletion,
    },
    /// The call held its worker past its wall deadline plus grace; the process exits next.
    Overran {
        call: u64,
    },
    /// Sent several times a second, so the daemon can tell a live process from a wedged one.
    Heartbeat {
        memory_used: u64,
        busy: bool,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireLimits {
    wall: Duration,
    cpu: Duration,
    memory_bytes: u64,
    stack_bytes: u64,
    max_fetches: u32,
    max_concurrent_fetches: u32,
    max_result_bytes: u64,
    max_console_bytes: u64,
    max_timers: u32,
}

impl From<&SandboxLimits> for WireLimits {
    fn from(limits: &SandboxLimits) -> Self {
        WireLimits {
            wall: limits.wall,
            cpu: limits.cpu,
            memory_bytes: limits.memory_bytes as u64,
            stack_bytes: limits.stack_bytes as u64,
            max_fetches: limits.max_fetches,
            max_concurrent_fetches: limits.max_concurrent_fetches,
            max_result_bytes: limits.max_result_bytes as u64,
            max_console_bytes: limits.max_console_bytes as u64,
            max_timers: limits.max_timers,
        }
    }
}

impl From<WireLimits> for SandboxLimits {
    fn from(limits: WireLimits) -> Self {
        let size = |bytes: u64| usize::try_from(bytes).unwrap_or(usize::MAX);
        SandboxLimits {
            wall: limits.wall,
            cpu: limits.cpu,
            memory_bytes: size(limits.memory_bytes),
            stack_bytes: size(limits.stack_bytes),
            max_fetches: limits.max_fetches,
            max_concurrent_fetches: limits.max_concurrent_fetches,
            max_result_bytes: size(limits.max_result_bytes),
            max_console_bytes: size(limits.max_console_bytes),
            max_timers: limits.max_timers,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireRequest {
    url: String,
    method: String,
    headers: Vec<(String, String)>,
    body: Option<Bytes>,
    redirect: String,
}

impl From<FetchRequest> for WireRequest {
    fn from(r: FetchRequest) -> Self {
        WireRequest { url: r.url, method: r.method, headers: r.headers, body: r.body, redirect: r.redirect }
    }
}

impl From<WireRequest> for FetchRequest {
    fn from(r: WireRequest) -> Self {
        FetchRequest { url: r.url, method: r.method, headers: r.headers, body: r.body, redirect: r.redirect }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireResponse {
    status: u16,
    status_text: String,
    url: String,
    redirected: bool,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl From<FetchResponse> for WireResponse {
    fn from(r: FetchResponse) -> Self {
        WireResponse {
            status: r.status,
            status_text: r.status_text,
            url: r.url,
            redirected: r.redirected,
            headers: r.headers,
            body: r.body,
        }
    }
}

impl From<WireResponse> for FetchResponse {
    fn from(r: WireResponse) -> Self {
        FetchResponse {
            status: r.status,
            status_text: r.status_text,
            url: r.url,
            redirected: r.redirected,
            headers: r.headers,
            body: r.body,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub enum WireFetchError {
    Denied(String),
    Network(String),
    Limit(String),
}

impl From<FetchError> for WireFetchError {
    fn from(e: FetchError) -> Self {
        match e {
            FetchError::Denied(m) => WireFetchError::Denied(m),
            FetchError::Network(m) => WireFetchError::Network(m),
            FetchError::Limit(m) => WireFetchError::Limit(m),
        }
    }
}

impl From<WireFetchError> for FetchError {
    fn from(e: WireFetchError) -> Self {
        match e {
            WireFetchError::Denied(m) => FetchError::Denied(m),
            WireFetchError::Network(m) => FetchError::Network(m),
            WireFetchError::Limit(m) => FetchError::Limit(m),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireCompletion {
    /// JSON text of the MCP content items.
    content: String,
    structured_content: Option<String>,
    is_error: bool,
    outcome: String,
    error: Option<String>,
    console: String,
    fetches: u32,
    fetch_denied: bool,
    cpu_time: Duration,
    wall_time: Duration,
}

impl From<&Completion> for WireCompletion {
    fn from(c: &Completion) -> Self {
        WireCompletion {
            content: serde_json::Value::Array(c.result.content.clone()).to_string(),
            structured_content: c.result.structured_content.as_ref().map(ToString::to_string),
            is_error: c.result.is_error,
            outcome: c.outcome.as_str().to_string(),
            error: c.error.clone(),
            console: c.console.clone(),
            fetches: c.fetches,
            fetch_denied: c.fetch_denied,
            cpu_time: c.cpu_time,
            wall_time: c.wall_time,
        }
    }
}

impl From<WireCompletion> for Completion {
    fn from(c: WireCompletion) -> Self {
        // Both sides are this program, so these parse; a failure is reported, not trusted.
        let content = match serde_json::from_str(&c.content) {
            Ok(serde_json::Value::Array(items)) => items,
            _ => return Completion::failed(Outcome::Error, "internal isolate error: an unreadable result"),
        };
        let Ok(outcome) = c.outcome.parse::<Outcome>() else {
            return Completion::failed(Outcome::Error, "internal isolate error: an unknown outcome");
        };
        Completion {
            result: ToolResult {
                content,
                structured_content: c.structured_content.and_then(|text| serde_json::from_str(&text).ok()),
                is_error: c.is_error,
            },
            outcome,
            error: c.error,
            console: c.console,
            fetches: c.fetches,
            fetch_denied: c.fetch_denied,
            cpu_time: c.cpu_time,
            wall_time: c.wall_time,
        }
    }
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME_BYTES).new_codec()
}

/// Reads messages of type `M` from `io`.
pub struct Reader<R, M> {
    frames: FramedRead<R, LengthDelimitedCodec>,
    message: std::marker::PhantomData<M>,
}

impl<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>> Reader<R, M> {
    pub fn new(io: R) -> Self {
        Reader { frames: FramedRead::new(io, codec()), message: std::marker::PhantomData }
    }

    /// The next message; `None` at the end of the stream, an error for a broken or unreadable
    /// frame (either way the other side is gone or not to be trusted).
    pub async fn next(&mut self) -> Option<std::io::Result<M>> {
        let frame = self.frames.next().await?;
        Some(frame.and_then(|bytes| postcard::from_bytes(&bytes).map_err(std::io::Error::other)))
    }
}

/// Writes messages of type `M` to `io`.
pub struct Writer<W, M> {
    frames: FramedWrite<W, LengthDelimitedCodec>,
    message: std::marker::PhantomData<M>,
}

impl<W: AsyncWrite + Unpin, M: Serialize> Writer<W, M> {
    pub fn new(io: W) -> Self {
        Writer { frames: FramedWrite::new(io, codec()), message: std::marker::PhantomData }
    }

    pub async fn send(&mut self, message: &M) -> std::io::Result<()> {
        let bytes = postcard::to_stdvec(message).map_err(std::io::Error::other)?;
        self.frames.send(Bytes::from(bytes)).await
    }
}
