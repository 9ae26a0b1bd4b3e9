//! One call's state outside its instance: its limits and the first one it hit, its CPU time,
//! console, fetches and timers, and how what it ended with becomes the [`Completion`] the pool
//! answers with. The store owns it (`Host::call`), so the natives, the epoch callback and the
//! event loop all reach the same state.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::cpu_time::thread_cpu_time;
use super::super::invocation::{
    Completion, FetchError, FetchHost, FetchRequest, FetchResponse, Outcome, SandboxLimits, ToolResult,
};
use super::super::normalize::{normalise, preview};

/// Largest `setTimeout` delay honoured (the web's 2^31-1 ms).
const MAX_TIMER_DELAY: Duration = Duration::from_millis(i32::MAX as u64);
/// The line that ends console output cut at `max_console_bytes`.
const CONSOLE_TRUNCATED: &str = "[console output truncated: max_console_bytes reached]\n";

/// The first limit a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    Wall,
    Cpu,
    Memory,
    /// The daemon-wide isolate memory budget (bytes) could not cover an allocation.
    DaemonMemory(usize),
    Stack,
    Fetches,
    Timers,
    Result(usize),
}

impl LimitHit {
    pub(super) fn outcome(self) -> Outcome {
        match self {
            LimitHit::Wall => Outcome::Timeout,
            _ => Outcome::Limit,
        }
    }

    pub(super) fn message(self, limits: &SandboxLimits) -> String {
        match self {
            LimitHit::Wall => format!(
                "wall-clock time limit exceeded: the call did not finish within {:?} (limit `wall`)",
                limits.wall
            ),
            LimitHit::Cpu => format!(
                "CPU time limit exceeded: the handler used more than {:?} of CPU time (limit `cpu`)",
                limits.cpu
            ),
            LimitHit::Memory => format!(
                "memory limit exceeded: the handler needed more than {} bytes (limit `memory_bytes`)",
                limits.memory_bytes
            ),
            LimitHit::DaemonMemory(budget) => format!(
                "the daemon's isolate memory is exhausted: all running calls together may use {} \
                 MiB (`[sandbox] memory_budget_mb`); retry when fewer calls are running",
                budget / (1024 * 1024)
            ),
            LimitHit::Stack => format!(
                "stack size limit exceeded: recursion too deep for the {} byte stack (limit `stack_bytes`)",
                limits.stack_bytes
            ),
            LimitHit::Fetches => {
                format!("too many fetch() calls: a call may make at most {} (limit `max_fetches`)", limits.max_fetches)
            }
            LimitHit::Timers => format!(
                "too many setTimeout() calls: a call may make at most {} (limit `max_timers`)",
                limits.max_timers
            ),
            LimitHit::Result(size) => format!(
                "result too large: {size} bytes of JSON, the maximum is {} (limit `max_result_bytes`)",
                limits.max_result_bytes
            ),
        }
    }
}

/// How the JS part of a call ended (limits are latched separately and take precedence).
pub enum RunEnd {
    /// The handler's promise fulfilled; `JSON.stringify` of the value (`None`: undefined).
    Returned(Option<String>),
    /// An exception escaped the handler (or a timer callback, or the compiler).
    Threw(String),
    /// The value could not be turned into JSON (cycle, BigInt, throwing getter...).
    Unserialisable(String),
    /// A limit was latched; see `CallState::limit`.
    Limit,
    /// The promise is pending and nothing that could settle it is outstanding.
    Stalled,
    /// Only timers are outstanding and the next one is due after the wall deadline.
    TimerAfterDeadline,
    /// A failure of the engine itself, not of the handler.
    Internal(String),
}

/// A fetch completion, sent from the tokio task to the worker's event loop.
///
/// It travels boxed ([`FetchEvents`]): tokio allocates a channel's first block of 32 slots when
/// the channel is made, so with the completion inline every call paid about 2.4 KB for its
/// channel, whether it fetched or not; with boxes the block is a quarter of a KB.
pub struct FetchDone {
    pub(super) id: u32,
    pub(super) result: Result<FetchResponse, FetchError>,
}

/// The sending end of a call's fetch completions.
pub type FetchEvents = mpsc::UnboundedSender<Box<FetchDone>>;
/// The receiving end, read by the worker's event loop.
pub type FetchInbox = mpsc::UnboundedReceiver<Box<FetchDone>>;

/// Captured console output.
pub struct Console {
    pub(super) text: String,
    cap: usize,
    full: bool,
}

impl Console {
    pub(super) fn new(cap: usize) -> Console {
        Console { text: String::new(), cap, full: false }
    }
}

impl Console {
    /// Appends one `[level] line`; returns whether further output is still wanted.
    pub(super) fn push(&mut self, level: &str, line: &str) -> bool {
        if self.full {
            return false;
        }
        let needed = level.len() + 3 + line.len() + 1;
        if self.text.len() + needed <= self.cap {
            self.text.push('[');
            self.text.push_str(level);
            self.text.push_str("] ");
            self.text.push_str(line);
            self.text.push('\n');
            return true;
        }
        // Keep as much of the overflowing entry as fits, then the marker.
        let entry = format!("[{level}] {line}");
        let mut cut = self.cap.saturating_sub(self.text.len()).min(entry.len());
        while !entry.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&entry[..cut]);
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
        self.text.push_str(CONSOLE_TRUNCATED);
        self.full = true;
        false
    }
}

/// The call's `fetch()`es: running, queued behind `max_concurrent_fetches`, and what each
/// unfinished one's request holds.
#[derive(Default)]
pub struct Fetches {
    /// fetch() calls accepted, started or queued.
    pub(super) accepted: u32,
    next_id: u32,
    running: HashMap<u32, JoinHandle<()>>,
    /// Waiting for a slot under `max_concurrent_fetches`.
    queued: VecDeque<(u32, FetchRequest)>,
    /// The bytes of the copies each unfinished fetch's request holds (URL, headers, body),
    /// charged to the call until the fetch finishes.
    charged: HashMap<u32, usize>,
}

impl Drop for Fetches {
    /// A call that ends, or whose future is dropped because the caller went away, leaves no
    /// request running on its behalf.
    fn drop(&mut self) {
        for (_, handle) in self.running.drain() {
            handle.abort();
        }
    }
}

#[derive(Default)]
pub struct Timers {
    pub(super) created: u32,
    next_id: u32,
    queue: BTreeSet<(Instant, u32)>,
    due: HashMap<u32, Instant>,
}

impl Timers {
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(due, _)| *due)
    }

    pub(super) fn pop_due(&mut self, now: Instant) -> Option<u32> {
        let &(due, id) = self.queue.first()?;
        if due > now {
            return None;
        }
        self.queue.remove(&(due, id));
        self.due.remove(&id);
        Some(id)
    }

    /// Schedules a timer `delay` from now (clamped by the caller), counting it as created.
    pub(super) fn add(&mut self, delay: Duration) -> u32 {
        self.created += 1;
        let id = self.next_id;
        self.next_id += 1;
        let due = Instant::now() + delay;
        self.queue.insert((due, id));
        self.due.insert(id, due);
        id
    }

    /// The delay `setTimeout` asked for, in milliseconds, as the timer's delay.
    pub(super) fn delay(delay_ms: f64) -> Duration {
        if delay_ms.is_finite() && delay_ms > 0.0 {
            Duration::try_from_secs_f64(delay_ms / 1000.0).unwrap_or(MAX_TIMER_DELAY).min(MAX_TIMER_DELAY)
        } else {
            Duration::ZERO
        }
    }

    pub(super) fn clear(&mut self, id: u32) {
        if let Some(due) = self.due.remove(&id) {
            self.queue.remove(&(due, id));
        }
    }
}

/// Delivers a fetch result to the worker, or a failure if the task is dropped first
/// (aborted, runtime shutting down, or the host's future panicked).
pub struct Reply {
    pub(super) id: u32,
    pub(super) events: Option<FetchEvents>,
}

impl Reply {
    pub(super) fn send(&mut self, result: Result<FetchResponse, FetchError>) {
        if let Some(events) = self.events.take() {
            // The worker may have finished the call already; then nobody needs this.
            let _ = events.send(Box::new(FetchDone { id: self.id, result }));
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.send(Err(FetchError::Network("the fetch was cancelled before it completed".to_owned())));
    }
}

/// CPU time of a call: the sum of its future's polls (see `Metered` in `call.rs`).
#[derive(Debug, Default)]
pub struct CpuMeter {
    total_ns: AtomicU64,
    /// The thread's CPU clock when the current poll started (0: not in a poll).
    poll_started_ns: AtomicU64,
}

impl CpuMeter {
    pub(super) fn used(&self) -> Duration {
        let started = self.poll_started_ns.load(Ordering::Relaxed);
        let running = if started == 0 { 0 } else { thread_cpu_nanos().saturating_sub(started) };
        Duration::from_nanos(self.total_ns.load(Ordering::Relaxed) + running)
    }

    /// A poll starts on this thread.
    pub(super) fn poll_started(&self) {
        self.poll_started_ns.store(thread_cpu_nanos().max(1), Ordering::Relaxed);
    }

    /// The poll [`CpuMeter::poll_started`] marked has ended: its CPU time is the call's.
    pub(super) fn poll_ended(&self) {
        let started = self.poll_started_ns.swap(0, Ordering::Relaxed);
        self.total_ns.fetch_add(thread_cpu_nanos().saturating_sub(started), Ordering::Relaxed);
    }
}

fn thread_cpu_nanos() -> u64 {
    u64::try_from(thread_cpu_time().as_nanos()).unwrap_or(u64::MAX)
}

/// One call's state.
pub struct CallState {
    pub(super) limits: SandboxLimits,
    started: Instant,
    pub(super) deadline: Instant,
    /// The first limit hit, latched: from then on the call only ends.
    pub(super) limit: Option<LimitHit>,
    pub(super) cpu: Arc<CpuMeter>,
    pub(super) console: Console,
    fetches: Fetches,
    /// The host refused a fetch by policy ([`FetchError::Denied`]).
    pub(super) fetch_denied: bool,
    pub(super) timers: Timers,
    events: FetchEvents,
    fetch_host: Arc<dyn FetchHost>,
    runtime: tokio::runtime::Handle,
    /// Math.random's generator (SplitMix64), seeded per call.
    random: u64,
}

impl CallState {
    /// A call starting now, whose fetches run on `runtime` and are answered on the receiver.
    pub(super) fn new(
        limits: SandboxLimits,
        fetch_host: Arc<dyn FetchHost>,
        runtime: tokio::runtime::Handle,
    ) -> (CallState, FetchInbox) {
        let started = Instant::now();
        let (events, inbox) = mpsc::unbounded_channel();
        let call = CallState {
            started,
            deadline: started + limits.wall,
            limit: None,
            cpu: Arc::default(),
            console: Console::new(limits.max_console_bytes),
            fetches: Fetches::default(),
            fetch_denied: false,
            timers: Timers::default(),
            events,
            fetch_host,
            runtime,
            random: RandomState::new().build_hasher().finish(),
            limits,
        };
        (call, inbox)
    }

    /// Latches `limit` unless another one was hit first.
    pub(super) fn hit(&mut self, limit: LimitHit) {
        if self.limit.is_none() {
            self.limit = Some(limit);
        }
    }

    /// Checks and latches the CPU and wall limits; true once any limit is latched.
    pub(super) fn check_limits(&mut self) -> bool {
        if self.limit.is_some() {
            return true;
        }
        if Instant::now() >= self.deadline {
            self.hit(LimitHit::Wall);
        } else if self.cpu.used() > self.limits.cpu {
            self.hit(LimitHit::Cpu);
        }
        self.limit.is_some()
    }

    /// The next `Math.random()`.
    pub(super) fn next_random(&mut self) -> f64 {
        self.random = self.random.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.random;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `setTimeout(…, delay_ms)`: the new timer's id, or the limit once the call has made
    /// `max_timers` (the limit is latched; its message is the guest's `RangeError`).
    pub(super) fn set_timer(&mut self, delay_ms: f64) -> Result<u32, LimitHit> {
        if self.timers.created >= self.limits.max_timers {
            self.hit(LimitHit::Timers);
            return Err(LimitHit::Timers);
        }
        Ok(self.timers.add(Timers::delay(delay_ms)))
    }

    /// Whether another `fetch()` may be made; the limit once the call has made `max_fetches`
    /// (the limit is latched; its message is the guest's `RangeError`).
    pub(super) fn may_fetch(&mut self) -> Result<(), LimitHit> {
        if self.fetches.accepted >= self.limits.max_fetches {
            self.hit(LimitHit::Fetches);
            return Err(LimitHit::Fetches);
        }
        Ok(())
    }

    /// Accepts a `fetch()` whose request holds `charged` bytes of the call's memory: starts it,
    /// or queues it behind `max_concurrent_fetches`. Returns its id.
    pub(super) fn start_fetch(&mut self, request: FetchRequest, charged: usize) -> u32 {
        let id = self.fetches.next_id;
        self.fetches.next_id += 1;
        self.fetches.accepted += 1;
        self.fetches.charged.insert(id, charged);
        if self.fetches.running.len() < self.max_concurrent_fetches() {
            let handle = self.spawn_fetch(id, request);
            self.fetches.running.insert(id, handle);
        } else {
            self.fetches.queued.push_back((id, request));
        }
        id
    }

    /// A fetch finished: frees its slot and starts queued ones. Returns the bytes its request
    /// had charged.
    pub(super) fn fetch_finished(&mut self, id: u32) -> usize {
        self.fetches.running.remove(&id);
        let charged = self.fetches.charged.remove(&id).unwrap_or(0);
        while self.fetches.running.len() < self.max_concurrent_fetches() {
            let Some((next, request)) = self.fetches.queued.pop_front() else {
                break;
            };
            let handle = self.spawn_fetch(next, request);
            self.fetches.running.insert(next, handle);
        }
        charged
    }

    /// Whether a fetch is running or queued: something that may still settle a promise.
    pub(super) fn fetching(&self) -> bool {
        !self.fetches.running.is_empty() || !self.fetches.queued.is_empty()
    }

    /// Drops the queued fetches and aborts the running ones, returning their tasks to wait for.
    pub(super) fn abort_fetches(&mut self) -> Vec<JoinHandle<()>> {
        self.fetches.queued.clear();
        self.fetches
            .running
            .drain()
            .map(|(_, handle)| {
                handle.abort();
                handle
            })
            .collect()
    }

    /// At least one fetch runs at a time, whatever the limits say.
    fn max_concurrent_fetches(&self) -> usize {
        self.limits.max_concurrent_fetches.max(1) as usize
    }

    fn spawn_fetch(&self, id: u32, request: FetchRequest) -> JoinHandle<()> {
        let host = Arc::clone(&self.fetch_host);
        let deadline = self.deadline;
        let reply = Reply { id, events: Some(self.events.clone()) };
        // In the span of the run making it, so that its trace holds the request's own span.
        self.runtime.spawn(tracing::Instrument::in_current_span(async move {
            let mut reply = reply;
            let result = host.fetch(request, deadline).await;
            reply.send(result);
        }))
    }

    /// The completion of the call: a latched limit wins over how the JavaScript ended.
    pub(super) fn completion(&mut self, end: RunEnd) -> Completion {
        let limits = &self.limits;
        let console = std::mem::take(&mut self.console.text);
        let (fetches, fetch_denied) = (self.fetches.accepted, self.fetch_denied);
        let (cpu_time, wall_time) = (self.cpu.used(), self.started.elapsed());
        let failure =
            |outcome: Outcome, message: String| (ToolResult::text(message.clone(), true), outcome, Some(message));
        let (result, outcome, error) = match (self.limit, end) {
            (Some(limit), _) => failure(limit.outcome(), limit.message(limits)),
            (None, RunEnd::Returned(json)) => {
                let normalised = normalise(json.as_deref(), limits.max_result_bytes);
                match normalised.problem {
                    Some(problem) => (normalised.result, Outcome::Error, Some(problem)),
                    None => (normalised.result, Outcome::Ok, None),
                }
            }
            (None, RunEnd::Threw(text)) => failure(Outcome::Error, text),
            (None, RunEnd::Unserialisable(text)) => {
                failure(Outcome::Error, format!("the handler's result could not be converted to JSON: {text}"))
            }
            (None, RunEnd::Stalled) => failure(
                Outcome::Timeout,
                "timed out: the handler's promise can never settle (it is pending with no fetch or \
                 timer left in flight)"
                    .to_owned(),
            ),
            (None, RunEnd::TimerAfterDeadline) => failure(
                Outcome::Timeout,
                format!(
                    "the handler is waiting for a timer that fires after the wall-clock limit ({:?}, limit `wall`)",
                    limits.wall
                ),
            ),
            (None, RunEnd::Internal(message)) => {
                failure(Outcome::Error, format!("internal isolate error: {}", preview(&message)))
            }
            (None, RunEnd::Limit) => failure(Outcome::Limit, "a sandbox limit was exceeded".to_owned()),
        };
        Completion { result, outcome, error, console, fetches, fetch_denied, cpu_time, wall_time }
    }
}
