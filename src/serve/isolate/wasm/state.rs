//! One call's state apart from its isolate: the limit it hit first, its console, its fetches and
//! timers, and how what it ended with becomes the [`Completion`] the pool answers with.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::normalize::{normalise, preview};
use super::super::{Completion, FetchError, FetchRequest, FetchResponse, Outcome, SandboxLimits, ToolResult};

/// Largest `setTimeout` delay honoured (the web's 2^31-1 ms).
const MAX_TIMER_DELAY: Duration = Duration::from_millis(i32::MAX as u64);
/// The line that ends console output cut at `max_console_bytes`.
const CONSOLE_TRUNCATED: &str = "[console output truncated: max_console_bytes reached]\n";

/// The first limit a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::serve::isolate) enum LimitHit {
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
    pub(in crate::serve::isolate) fn outcome(self) -> Outcome {
        match self {
            LimitHit::Wall => Outcome::Timeout,
            _ => Outcome::Limit,
        }
    }

    pub(in crate::serve::isolate) fn message(self, limits: &SandboxLimits) -> String {
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
pub(in crate::serve::isolate) enum RunEnd {
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
pub(in crate::serve::isolate) struct FetchDone {
    pub(in crate::serve::isolate) id: u32,
    pub(in crate::serve::isolate) result: Result<FetchResponse, FetchError>,
}

/// Captured console output.
pub(in crate::serve::isolate) struct Console {
    pub(in crate::serve::isolate) text: String,
    cap: usize,
    full: bool,
}

impl Console {
    pub(in crate::serve::isolate) fn new(cap: usize) -> Console {
        Console { text: String::new(), cap, full: false }
    }
}

impl Console {
    /// Appends one `[level] line`; returns whether further output is still wanted.
    pub(in crate::serve::isolate) fn push(&mut self, level: &str, line: &str) -> bool {
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

pub(in crate::serve::isolate) struct Fetches<C> {
    /// fetch() calls accepted, started or queued.
    pub(in crate::serve::isolate) accepted: u32,
    pub(in crate::serve::isolate) next_id: u32,
    pub(in crate::serve::isolate) running: HashMap<u32, JoinHandle<()>>,
    /// Waiting for a slot under `max_concurrent_fetches`.
    pub(in crate::serve::isolate) queued: VecDeque<(u32, FetchRequest)>,
    /// The copies each unfinished fetch's request holds (URL, headers, body), charged to the
    /// call until the fetch finishes.
    pub(in crate::serve::isolate) charges: HashMap<u32, Vec<C>>,
}

impl<C> Default for Fetches<C> {
    fn default() -> Self {
        Fetches { accepted: 0, next_id: 0, running: HashMap::new(), queued: VecDeque::new(), charges: HashMap::new() }
    }
}

impl<C> Drop for Fetches<C> {
    /// A call that ends, or whose future is dropped because the caller went away, leaves no
    /// request running on its behalf.
    fn drop(&mut self) {
        for (_, handle) in self.running.drain() {
            handle.abort();
        }
    }
}

#[derive(Default)]
pub(in crate::serve::isolate) struct Timers {
    pub(in crate::serve::isolate) created: u32,
    next_id: u32,
    queue: BTreeSet<(Instant, u32)>,
    due: HashMap<u32, Instant>,
}

impl Timers {
    pub(in crate::serve::isolate) fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(due, _)| *due)
    }

    pub(in crate::serve::isolate) fn pop_due(&mut self, now: Instant) -> Option<u32> {
        let &(due, id) = self.queue.first()?;
        if due > now {
            return None;
        }
        self.queue.remove(&(due, id));
        self.due.remove(&id);
        Some(id)
    }

    /// Schedules a timer `delay` from now (clamped by the caller), counting it as created.
    pub(in crate::serve::isolate) fn add(&mut self, delay: Duration) -> u32 {
        self.created += 1;
        let id = self.next_id;
        self.next_id += 1;
        let due = Instant::now() + delay;
        self.queue.insert((due, id));
        self.due.insert(id, due);
        id
    }

    /// The delay `setTimeout` asked for, in milliseconds, as the timer's delay.
    pub(in crate::serve::isolate) fn delay(delay_ms: f64) -> Duration {
        if delay_ms.is_finite() && delay_ms > 0.0 {
            Duration::try_from_secs_f64(delay_ms / 1000.0).unwrap_or(MAX_TIMER_DELAY).min(MAX_TIMER_DELAY)
        } else {
            Duration::ZERO
        }
    }

    pub(in crate::serve::isolate) fn clear(&mut self, id: u32) {
        if let Some(due) = self.due.remove(&id) {
            self.queue.remove(&(due, id));
        }
    }
}

/// Delivers a fetch result to the worker, or a failure if the task is dropped first
/// (aborted, runtime shutting down, or the host's future panicked).
pub(in crate::serve::isolate) struct Reply {
    pub(in crate::serve::isolate) id: u32,
    pub(in crate::serve::isolate) events: Option<mpsc::UnboundedSender<FetchDone>>,
}

impl Reply {
    pub(in crate::serve::isolate) fn send(&mut self, result: Result<FetchResponse, FetchError>) {
        if let Some(events) = self.events.take() {
            // The worker may have finished the call already; then nobody needs this.
            let _ = events.send(FetchDone { id: self.id, result });
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.send(Err(FetchError::Network("the fetch was cancelled before it completed".to_owned())));
    }
}

/// What a finished call knows besides how its JavaScript ended.
pub(in crate::serve::isolate) struct Ended<'a> {
    pub limit: Option<LimitHit>,
    pub limits: &'a SandboxLimits,
    pub console: String,
    pub fetches: u32,
    pub fetch_denied: bool,
    pub cpu_time: Duration,
    pub wall_time: Duration,
}

/// The completion of a call: a latched limit wins over how the JavaScript ended.
pub(in crate::serve::isolate) fn completion(ended: Ended<'_>, end: RunEnd) -> Completion {
    let Ended { limit, limits, console, fetches, fetch_denied, cpu_time, wall_time } = ended;
    let failure = |outcome: Outcome, message: String| (ToolResult::text(message.clone(), true), outcome, Some(message));
    let (result, outcome, error) = match (limit, end) {
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
