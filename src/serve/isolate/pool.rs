//! Isolate worker threads, each driving many calls at once.
//!
//! Every worker is an OS thread (`mcpbootd-isolate-N`) running a single-threaded tokio runtime
//! and a `LocalSet`. Each call is one local task: it runs JavaScript in short turns and parks
//! between them while it waits for fetches (which run on the daemon's multi-thread runtime) or
//! timers, so one worker holds thousands of parked calls and keeps running the ones that have
//! work. A call's future stays on the worker that started it.
//!
//! A call reaches a worker through [`Admission`] (slots, memory and a fair queue, see
//! `admission.rs`), and is handed to the worker that is not running JavaScript right now
//! and has the fewest calls, so a worker busy with a computing call does not collect new work.
//! Each worker takes its new calls round-robin across servers ([`Inbox`]), so a burst of
//! hundreds of calls to one server delays another server's next call by at most one first turn
//! per busy server, not by the whole burst.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{Notify, oneshot};
use tracing::Instrument;

use super::admission::{Admission, AdmissionLimits, Busy, IsolateMemory, Permit, Refused};
use super::engine::{Engine, HostContext};
use super::invocation::{Completion, Invocation, Outcome};
use super::wasm::WasmEngine;

/// How often freed isolate memory is handed back to the operating system, and how much must
/// have been freed since the last time for it to be worth the walk over the heap.
const TRIM_INTERVAL: Duration = Duration::from_secs(2);
const TRIM_THRESHOLD: usize = 32 * 1024 * 1024;

/// How long past its wall deadline a call may keep its worker inside one turn before the
/// watchdog reports it, and how often the watchdog looks. The engine ends a call at its wall
/// limit wherever it is, so a report means an engine bug: a turn that stopped yielding.
pub const OVERRUN_GRACE: Duration = Duration::from_secs(1);
const WATCHDOG_INTERVAL: Duration = Duration::from_millis(100);

/// Why [`IsolatePool::run`] did not run the invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// The call was refused by admission control; the reason names the limit.
    Busy(Busy),
    /// The pool was closed (or its workers are gone).
    Closed,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Busy(busy) => busy.fmt(f),
            PoolError::Closed => f.write_str("the isolate pool is closed"),
        }
    }
}

impl std::error::Error for PoolError {}

/// How the pool is sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSettings {
    /// Worker threads (at least one).
    pub workers: usize,
    pub admission: AdmissionLimits,
    /// Daemon-wide isolate memory, shared by every call in flight.
    pub memory_budget_bytes: usize,
}

impl PoolSettings {
    /// `workers` threads with default admission limits and a 1 GiB memory budget.
    pub fn with_workers(workers: usize) -> Self {
        Self { workers, admission: AdmissionLimits::default(), memory_budget_bytes: 1024 * 1024 * 1024 }
    }
}

/// A snapshot of the pool's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub workers: usize,
    /// Workers running JavaScript right now.
    pub busy: usize,
    /// Calls admitted and not finished: running or parked on a fetch or timer.
    pub in_flight: usize,
    /// Calls waiting to be admitted.
    pub queued: usize,
    /// Isolate memory in use, daemon-wide, and the budget.
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
    /// Calls found still running past their wall deadline plus [`OVERRUN_GRACE`], since start.
    pub overruns: u64,
}

struct Job {
    invocation: Invocation,
    reply: oneshot::Sender<Completion>,
    permit: Permit,
    /// The run's span, opened under the call's span where the call was admitted.
    span: tracing::Span,
}

/// What the pool knows about one worker, to choose where a call goes.
#[derive(Default)]
struct WorkerLoad {
    /// Calls handed to this worker and not finished.
    calls: AtomicUsize,
    /// The worker is inside a call's turn (running JavaScript).
    running: AtomicBool,
    /// The wall deadline (nanoseconds after the pool's epoch) of the call in the turn.
    turn_deadline: AtomicU64,
}

struct Worker {
    inbox: Arc<Inbox>,
    load: Arc<WorkerLoad>,
}

/// A worker's new calls, taken round-robin across tenants.
#[derive(Default)]
struct Inbox {
    state: Mutex<InboxState>,
    ready: Notify,
}

#[derive(Default)]
struct InboxState {
    jobs: HashMap<Arc<str>, VecDeque<Job>>,
    /// Tenants with jobs, in the order they are served next.
    ring: VecDeque<Arc<str>>,
    closed: bool,
}

impl Inbox {
    /// Queues a job; false (and the job dropped, which fails its caller with `Closed`) once
    /// the inbox is closed.
    fn push(&self, job: Job) -> bool {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.closed {
                return false;
            }
            let tenant = Arc::clone(job.permit.tenant());
            let queue = state.jobs.entry(Arc::clone(&tenant)).or_default();
            queue.push_back(job);
            if queue.len() == 1 {
                state.ring.push_back(tenant);
            }
        }
        self.ready.notify_one();
        true
    }

    fn pop(&self) -> Result<Option<Job>, ()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        let Some(tenant) = state.ring.pop_front() else {
            return if state.closed { Err(()) } else { Ok(None) };
        };
        let Some(queue) = state.jobs.get_mut(&tenant) else {
            return Ok(None);
        };
        let job = queue.pop_front();
        if queue.is_empty() {
            state.jobs.remove(&tenant);
        } else {
            state.ring.push_back(tenant);
        }
        Ok(job)
    }

    /// The next job, or `None` once the inbox is closed and empty.
    async fn next(&self) -> Option<Job> {
        loop {
            match self.pop() {
                Ok(Some(job)) => return Some(job),
                Ok(None) => {}
                Err(()) => return None,
            }
            // A push between `pop` and here leaves a permit, so this cannot miss it.
            self.ready.notified().await;
        }
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
        self.ready.notify_one();
    }
}

/// Runs invocations on dedicated worker threads; see the module doc.
pub struct IsolatePool {
    /// Emptied on close: dropping the senders lets workers finish their calls and exit.
    workers: Mutex<Vec<Worker>>,
    loads: Vec<Arc<WorkerLoad>>,
    admission: Arc<Admission>,
    memory: Arc<IsolateMemory>,
    trimmer: tokio::task::JoinHandle<()>,
    watchdog: Arc<Watchdog>,
    engine_name: &'static str,
}

/// What the watchdog thread shares with the pool.
struct Watchdog {
    epoch: Instant,
    overruns: AtomicU64,
}

impl Watchdog {
    fn nanos_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

impl fmt::Debug for IsolatePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsolatePool").field("stats", &self.stats()).finish()
    }
}

impl IsolatePool {
    /// A pool running the process's engine ([`WasmEngine::process_wide`]); `runtime` is where
    /// fetches run.
    ///
    /// # Panics
    ///
    /// If the engine cannot be built (see [`WasmEngine::shared`]; the daemon itself builds the
    /// pool with [`IsolatePool::with_engine`] and reports that as a start-up error) or the
    /// operating system refuses to create a worker thread.
    pub fn new(settings: PoolSettings, runtime: tokio::runtime::Handle) -> Self {
        let engine = WasmEngine::process_wide().unwrap_or_else(|error| panic!("the WebAssembly engine: {error}"));
        Self::with_engine(engine, settings, runtime)
    }

    /// The name of the engine the workers run.
    pub fn engine(&self) -> &'static str {
        self.engine_name
    }

    /// A pool running a given engine.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to create a worker thread.
    pub fn with_engine(engine: Arc<dyn Engine>, settings: PoolSettings, runtime: tokio::runtime::Handle) -> Self {
        let memory = IsolateMemory::new(settings.memory_budget_bytes);
        let watchdog = Arc::new(Watchdog { epoch: Instant::now(), overruns: AtomicU64::new(0) });
        let mut workers = Vec::new();
        for index in 0..settings.workers.max(1) {
            let inbox = Arc::new(Inbox::default());
            let load = Arc::new(WorkerLoad::default());
            let host = WorkerHost {
                engine: Arc::clone(&engine),
                runtime: runtime.clone(),
                memory: Arc::clone(&memory),
                load: Arc::clone(&load),
                watchdog: Arc::clone(&watchdog),
            };
            // Detached: workers exit on their own once the pool is closed and drained.
            std::thread::Builder::new()
                .name(format!("mcpbootd-isolate-{index}"))
                .spawn({
                    let inbox = Arc::clone(&inbox);
                    move || worker(&inbox, host)
                })
                .expect("failed to spawn an isolate worker thread");
            workers.push(Worker { inbox, load });
        }
        let trimmer = runtime.spawn(trim_freed_memory(Arc::clone(&memory)));
        let loads: Vec<_> = workers.iter().map(|w| Arc::clone(&w.load)).collect();
        std::thread::Builder::new()
            .name("mcpbootd-isolate-watchdog".into())
            .spawn({
                let loads = loads.clone();
                let watchdog = Arc::downgrade(&watchdog);
                move || watch_turns(&loads, &watchdog)
            })
            .expect("failed to spawn the isolate watchdog thread");
        Self {
            engine_name: engine.name(),
            loads,
            workers: Mutex::new(workers),
            admission: Admission::new(settings.admission, Arc::clone(&memory)),
            memory,
            trimmer,
            watchdog,
        }
    }

    /// Runs an invocation for `tenant` (the server the tool belongs to). Waits in the fair
    /// queue when the daemon or the tenant is at capacity, and fails at once with
    /// [`PoolError::Busy`] when the queue is full too.
    ///
    /// Dropping the returned future abandons the call: a queued call leaves the queue, a
    /// running one is stopped at its next await with its fetches and timers dropped.
    pub async fn run(&self, tenant: &str, invocation: Invocation) -> Result<Completion, PoolError> {
        let permit =
            self.admission.acquire(tenant).instrument(tracing::debug_span!("admission")).await.map_err(|refused| {
                match refused {
                    Refused::Busy(busy) => PoolError::Busy(busy),
                    Refused::Closed => PoolError::Closed,
                }
            })?;
        let (reply, completion) = oneshot::channel();
        {
            let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
            let worker = least_loaded(&workers).ok_or(PoolError::Closed)?;
            worker.load.calls.fetch_add(1, Ordering::SeqCst);
            let span =
                tracing::debug_span!("isolate run", turns = tracing::field::Empty, outcome = tracing::field::Empty);
            let job = Job { invocation, reply, permit, span };
            if !worker.inbox.push(job) {
                worker.load.calls.fetch_sub(1, Ordering::SeqCst);
                return Err(PoolError::Closed);
            }
        }
        completion.await.map_err(|_| PoolError::Closed)
    }

    pub fn stats(&self) -> PoolStats {
        let (in_flight, queued) = self.admission.counts();
        PoolStats {
            workers: self.loads.len(),
            busy: self.loads.iter().filter(|load| load.running.load(Ordering::Relaxed)).count(),
            in_flight,
            queued,
            memory_bytes: self.memory.used(),
            memory_budget_bytes: self.memory.limit(),
            overruns: self.watchdog.overruns.load(Ordering::Relaxed),
        }
    }

    /// The admission limits the pool was built with.
    pub fn admission_limits(&self) -> &AdmissionLimits {
        self.admission.limits()
    }

    /// Stops accepting invocations and fails queued ones; running calls finish.
    pub fn close(&self) {
        self.admission.close();
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for worker in workers.drain(..) {
            worker.inbox.close();
        }
        self.trimmer.abort();
    }
}

impl Drop for IsolatePool {
    fn drop(&mut self) {
        self.close();
    }
}

/// The worker that is not inside a turn and has the fewest calls.
fn least_loaded(workers: &[Worker]) -> Option<&Worker> {
    workers
        .iter()
        .min_by_key(|worker| (worker.load.running.load(Ordering::Relaxed), worker.load.calls.load(Ordering::Relaxed)))
}

/// What a worker thread needs to run calls.
struct WorkerHost {
    engine: Arc<dyn Engine>,
    runtime: tokio::runtime::Handle,
    memory: Arc<IsolateMemory>,
    load: Arc<WorkerLoad>,
    watchdog: Arc<Watchdog>,
}

fn worker(inbox: &Inbox, host: WorkerHost) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_time().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start an isolate worker's event loop");
            return;
        }
    };
    let calls = tokio::task::LocalSet::new();
    let host = Arc::new(host);
    calls.block_on(&runtime, async {
        while let Some(job) = inbox.next().await {
            tokio::task::spawn_local(run_job(job, Arc::clone(&host)));
            // Let the new call run its first turn before taking the next job, so that a
            // burst of jobs is spread over the workers rather than collected by one.
            tokio::task::yield_now().await;
        }
    });
    // Closed: let the calls still in flight finish.
    runtime.block_on(calls);
}

async fn run_job(job: Job, host: Arc<WorkerHost>) {
    let Job { invocation, reply, permit, span } = job;
    let mut reply = reply;
    if !reply.is_closed() {
        let deadline = host.watchdog.nanos_since_epoch(Instant::now() + invocation.limits.wall);
        let context = HostContext { runtime: host.runtime.clone(), memory: Arc::clone(&host.memory) };
        let turns = Cell::new(0u32);
        let call = Turns { call: host.engine.execute(invocation, context), load: &host.load, deadline, turns: &turns };
        // An engine bug must cost one call, not the worker thread.
        let call = AssertUnwindSafe(call).catch_unwind().instrument(span.clone());
        let finished = tokio::select! {
            biased;
            completion = call => Some(completion),
            // The caller went away: dropping the call frees its isolate and stops its fetches.
            () = reply.closed() => None,
        };
        span.record("turns", turns.get());
        if let Some(completion) = finished {
            let completion = completion
                .unwrap_or_else(|_| Completion::failed(Outcome::Error, "internal isolate error: the engine panicked"));
            span.record("outcome", completion.outcome.as_str());
            let _ = reply.send(completion);
        }
    }
    host.load.calls.fetch_sub(1, Ordering::SeqCst);
    // Only now, with the isolate freed, may the next call take the slot and the memory.
    drop(permit);
}

/// Marks the worker as running JavaScript while the call's future is polled (a turn).
struct Turns<'a, F> {
    call: F,
    load: &'a WorkerLoad,
    deadline: u64,
    /// Turns taken so far, for the run's span.
    turns: &'a Cell<u32>,
}

impl<F: Future + Unpin> Future for Turns<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        /// Clears the flag however the poll ends, a panic included.
        struct Running<'a>(&'a AtomicBool);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        self.turns.set(self.turns.get().saturating_add(1));
        self.load.turn_deadline.store(self.deadline, Ordering::Relaxed);
        self.load.running.store(true, Ordering::Release);
        let _running = Running(&self.load.running);
        Pin::new(&mut self.call).poll(cx)
    }
}

/// The watchdog thread: reports each call found inside a turn past its wall deadline plus
/// [`OVERRUN_GRACE`], once. Runs until the pool is dropped.
fn watch_turns(loads: &[Arc<WorkerLoad>], watchdog: &Weak<Watchdog>) {
    let mut reported = vec![None; loads.len()];
    loop {
        std::thread::sleep(WATCHDOG_INTERVAL);
        let Some(watchdog) = watchdog.upgrade() else { return };
        let now = watchdog.nanos_since_epoch(Instant::now());
        for (worker, load) in loads.iter().enumerate() {
            if !load.running.load(Ordering::Acquire) {
                continue;
            }
            let deadline = load.turn_deadline.load(Ordering::Relaxed);
            let over_by = Duration::from_nanos(now.saturating_sub(deadline));
            if over_by <= OVERRUN_GRACE || reported[worker] == Some(deadline) {
                continue;
            }
            reported[worker] = Some(deadline);
            watchdog.overruns.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                worker,
                over_by_ms = over_by.as_millis() as u64,
                "a call is running past its wall limit without yielding, which the isolate engine should make \
                 impossible; its worker thread and the calls parked on it wait until it yields"
            );
        }
    }
}

/// What calls free on the heap (their stores, the natives' copies) stays in the allocator's
/// per-thread arenas; after a burst of parked calls that would keep the daemon's resident size
/// at its peak. Hand it back now and then, once the isolate memory's peak shows a burst passed.
async fn trim_freed_memory(memory: Arc<IsolateMemory>) {
    let mut interval = tokio::time::interval(TRIM_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let used = memory.used();
        let peak = memory.take_peak();
        if peak.saturating_sub(used) >= TRIM_THRESHOLD {
            let _ = tokio::task::spawn_blocking(release_free_memory).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heap structures, under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}
