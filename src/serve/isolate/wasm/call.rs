//! One call in a fresh instance of the image: its state, its limits and its event loop.
//!
//! The loop is the native engine's (`quickjs/call.rs`): JavaScript runs in turns, and between
//! them the call parks on its inbox (fetch results) or its next timer, holding no thread. What
//! differs is how a turn is stopped: the instance's epoch deadline fires every few
//! milliseconds of a running turn, checks the call's CPU and wall limits, and either ends the
//! call with a trap or yields to the worker's other calls. The CPU a turn used is measured
//! per poll of its future (`Metered`), so time the worker spends on other calls between
//! polls is not charged to it.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use wasmtime::{Engine as Wasmtime, InstancePre, Linker, ResourceLimiter, Result, Store, Trap, UpdateDeadline};

use super::super::engine::HostContext;
use super::super::{
    Completion, FetchError, FetchHost, FetchRequest, Invocation, IsolateMemory, MAX_HANDLER_BYTES, Program,
    SandboxLimits, thread_cpu_time,
};
use super::guest::{self, Guest, JobRan, JsValue, OutOfMemory, is_exception};
use super::natives;
use super::source::{SCRIPT_WRAPPER_HEAD, WRAPPER_HEAD, handler_line, wrap};
use super::state::{Console, Ended, FetchDone, Fetches, LimitHit, Reply, RunEnd, Timers, completion};
use super::web::wtf8_lossy;
use super::{COMPILE_ONLY, Image, SLICE_TICKS, WasmEngine};

/// Pending promise jobs run between two explicit limit checks (the epoch deadline also stops a
/// long job; this only bounds how late a limit latched by a native is noticed).
pub(in crate::serve::isolate) const JOBS_PER_CHECK: u32 = 256;
/// The smallest `maxElements` whatever the memory limit (lengths this small are walked in
/// milliseconds).
pub(in crate::serve::isolate) const MIN_WALKABLE_ELEMENTS: usize = 1 << 20;
/// How long a syntax check may take before it is given up.
pub(in crate::serve::isolate) const CHECK_TIME: Duration = Duration::from_secs(2);

/// The store's data: one call's state, reachable from the natives and the epoch callback.
pub(in crate::serve::isolate) struct Host {
    pub(super) guest: Option<Arc<Guest>>,
    pub(super) image: Option<Arc<Image>>,
    pub(super) call: Option<CallState>,
    pub(super) memory: Budget,
}

impl Host {
    /// The data of the one store the image is built in, and of syntax checks: no call.
    pub(super) fn for_image() -> Host {
        Host { guest: None, image: None, call: None, memory: Budget::unlimited() }
    }
}

/// Per-call state (the native engine's `CallState`, owned by the store instead of shared).
pub(super) struct CallState {
    pub limits: SandboxLimits,
    pub deadline: Instant,
    pub limit: Option<LimitHit>,
    pub cpu: Arc<CpuMeter>,
    pub console: Console,
    pub fetches: Fetches<usize>,
    pub fetch_denied: bool,
    pub timers: Timers,
    events: mpsc::UnboundedSender<FetchDone>,
    fetch_host: Arc<dyn FetchHost>,
    runtime: tokio::runtime::Handle,
    /// Math.random's generator (SplitMix64), seeded per call.
    random: u64,
}

impl CallState {
    pub fn hit(&mut self, limit: LimitHit) {
        if self.limit.is_none() {
            self.limit = Some(limit);
        }
    }

    /// Checks and latches the CPU and wall limits; true once any limit is latched.
    fn check_limits(&mut self) -> bool {
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

    pub fn next_random(&mut self) -> f64 {
        self.random = self.random.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.random;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn spawn_fetch(&self, id: u32, request: FetchRequest) -> tokio::task::JoinHandle<()> {
        let host = Arc::clone(&self.fetch_host);
        let deadline = self.deadline;
        let reply = Reply { id, events: Some(self.events.clone()) };
        self.runtime.spawn(async move {
            let mut reply = reply;
            let result = host.fetch(request, deadline).await;
            reply.send(result);
        })
    }

    /// Accepts a `fetch()`: starts it, or queues it behind `max_concurrent_fetches`.
    pub fn fetch_start(&mut self, request: FetchRequest, charged: usize) -> u32 {
        let id = self.fetches.next_id;
        self.fetches.next_id += 1;
        self.fetches.accepted += 1;
        self.fetches.charges.insert(id, vec![charged]);
        if self.fetches.running.len() < self.limits.max_concurrent_fetches as usize {
            let handle = self.spawn_fetch(id, request);
            self.fetches.running.insert(id, handle);
        } else {
            self.fetches.queued.push_back((id, request));
        }
        id
    }

    /// A fetch finished: free its slot and start queued ones. Returns the bytes its request
    /// had charged.
    fn fetch_finished(&mut self, id: u32) -> usize {
        self.fetches.running.remove(&id);
        let charged = self.fetches.charges.remove(&id).map_or(0, |c| c.iter().sum());
        while self.fetches.running.len() < self.limits.max_concurrent_fetches as usize {
            let Some((next, request)) = self.fetches.queued.pop_front() else {
                break;
            };
            let handle = self.spawn_fetch(next, request);
            self.fetches.running.insert(next, handle);
        }
        charged
    }

    fn abort_fetches(&mut self) -> Vec<tokio::task::JoinHandle<()>> {
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
}

/// A call's memory: the growth of its linear memory past the image, and the copies natives
/// hold outside it, both within the call's limit and drawn from the daemon-wide budget.
pub(in crate::serve::isolate) struct Budget {
    limit: usize,
    /// Linear memory the image starts with (not charged: the pages are shared copy-on-write).
    base: usize,
    used: usize,
    daemon: Option<Arc<IsolateMemory>>,
    /// A request was refused; `daemon` says whether the daemon-wide budget refused it.
    pub refused: Option<bool>,
}

impl Budget {
    fn unlimited() -> Budget {
        Budget { limit: usize::MAX, base: 0, used: 0, daemon: None, refused: None }
    }

    /// Takes `bytes` for the call, or refuses (latching why).
    pub fn take(&mut self, bytes: usize) -> bool {
        let total = match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => total,
            _ => {
                self.refused.get_or_insert(false);
                return false;
            }
        };
        if let Some(daemon) = &self.daemon
            && !daemon.take(bytes)
        {
            self.refused.get_or_insert(true);
            return false;
        }
        self.used = total;
        true
    }

    pub fn give_back(&mut self, bytes: usize) {
        let bytes = bytes.min(self.used);
        self.used -= bytes;
        if let Some(daemon) = &self.daemon {
            daemon.give_back(bytes);
        }
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        if let Some(daemon) = &self.daemon {
            daemon.give_back(self.used);
        }
    }
}

impl ResourceLimiter for Host {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        let base = self.memory.base;
        let grow = desired.saturating_sub(current.max(base));
        if grow == 0 || self.memory.take(grow) {
            return Ok(true);
        }
        if let Some(call) = &mut self.call {
            let daemon = self.memory.refused == Some(true);
            call.hit(memory_hit(daemon, self.memory.daemon.as_deref()));
        }
        Ok(false)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        Ok(desired <= 100_000)
    }
}

fn memory_hit(daemon: bool, memory: Option<&IsolateMemory>) -> LimitHit {
    match (daemon, memory) {
        (true, Some(memory)) => LimitHit::DaemonMemory(memory.limit()),
        _ => LimitHit::Memory,
    }
}

/// CPU time of a call: the sum of its futures' polls.
#[derive(Debug, Default)]
pub(super) struct CpuMeter {
    total_ns: AtomicU64,
    /// The thread's CPU clock when the current poll started (0: not in a poll).
    poll_started_ns: AtomicU64,
}

impl CpuMeter {
    pub fn used(&self) -> Duration {
        let started = self.poll_started_ns.load(Ordering::Relaxed);
        let running = if started == 0 { 0 } else { (thread_cpu_time().as_nanos() as u64).saturating_sub(started) };
        Duration::from_nanos(self.total_ns.load(Ordering::Relaxed) + running)
    }
}

/// A future whose polls are charged to a call's CPU time.
struct Metered<F> {
    meter: Arc<CpuMeter>,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let start = (thread_cpu_time().as_nanos() as u64).max(1);
        self.meter.poll_started_ns.store(start, Ordering::Relaxed);
        let result = self.inner.as_mut().poll(cx);
        let used = (thread_cpu_time().as_nanos() as u64).saturating_sub(start);
        self.meter.poll_started_ns.store(0, Ordering::Relaxed);
        self.meter.total_ns.fetch_add(used, Ordering::Relaxed);
        result
    }
}

fn metered<F: Future>(meter: &Arc<CpuMeter>, future: F) -> Metered<F> {
    Metered { meter: Arc::clone(meter), inner: Box::pin(future) }
}

/// The imports: the natives, and what the C library asks the host for.
pub(super) fn linker(engine: &Wasmtime) -> Result<Linker<Host>> {
    let mut linker = Linker::new(engine);
    natives::define(&mut linker)?;
    // The C library's view of the world: a clock, a random source, and output that goes
    // nowhere (QuickJS prints nothing a call needs). No file descriptor exists.
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "clock_time_get",
        |mut caller: wasmtime::Caller<'_, Host>, clock: i32, _precision: i64, out: i32| -> i32 {
            let now = match clock {
                0 => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
                _ => process_start().elapsed(),
            };
            let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else { return 28 };
            let bytes = (now.as_nanos() as u64).to_le_bytes();
            match memory.write(&mut caller, out as u32 as usize, &bytes) {
                Ok(()) => 0,
                Err(_) => 28,
            }
        },
    )?;
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "random_get",
        |mut caller: wasmtime::Caller<'_, Host>, buf: i32, len: i32| -> i32 {
            let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else { return 28 };
            let mut bytes = vec![0u8; len.max(0) as usize];
            for chunk in bytes.chunks_mut(8) {
                let word = RandomState::new().build_hasher().finish().to_le_bytes();
                chunk.copy_from_slice(&word[..chunk.len()]);
            }
            match memory.write(&mut caller, buf as u32 as usize, &bytes) {
                Ok(()) => 0,
                Err(_) => 28,
            }
        },
    )?;
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "fd_write",
        |mut caller: wasmtime::Caller<'_, Host>, _fd: i32, iovs: i32, count: i32, written: i32| -> i32 {
            let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else { return 28 };
            let data = memory.data(&caller);
            let mut total = 0u32;
            for i in 0..count.max(0) as usize {
                let at = iovs as u32 as usize + i * 8 + 4;
                if let Some(len) = data.get(at..at + 4) {
                    total = total.wrapping_add(u32::from_le_bytes(len.try_into().expect("four bytes")));
                }
            }
            match memory.write(&mut caller, written as u32 as usize, &total.to_le_bytes()) {
                Ok(()) => 0,
                Err(_) => 28,
            }
        },
    )?;
    // EBADF (8) and ESPIPE (70): there are no files.
    linker.func_wrap("wasi_snapshot_preview1", "fd_close", |_: i32| -> i32 { 8 })?;
    linker.func_wrap("wasi_snapshot_preview1", "fd_fdstat_get", |_: i32, _: i32| -> i32 { 8 })?;
    linker.func_wrap("wasi_snapshot_preview1", "fd_seek", |_: i32, _: i64, _: i32, _: i32| -> i32 { 70 })?;
    // Local time is UTC; QuickJS's own interrupt handler is never installed (epochs replace it);
    // there is no module loader, so `import()` rejects; unhandled rejections are not tracked.
    linker.func_wrap("env", "host_get_timezone_offset", |_: i32, _: i32| -> i32 { 0 })?;
    linker.func_wrap("env", "host_interrupt", || -> i32 { 0 })?;
    linker.func_wrap("env", "host_module_normalize", |_: i32, _: i32| -> i32 { 0 })?;
    linker.func_wrap("env", "host_module_load", |_: i32, _: i32| -> i32 { 0 })?;
    linker.func_wrap("env", "host_promise_rejection", |_: i32, _: i32, _: i32| {})?;
    Ok(linker)
}

fn process_start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// What a turn decided.
enum Next {
    Done(RunEnd),
    /// Park until a fetch completes or this instant (a timer, the deadline) passes.
    Wait(Instant),
}

/// Runs one invocation in a fresh instance, parking at every await.
pub(super) async fn execute(
    pre: InstancePre<Host>,
    image: Arc<Image>,
    _wasmtime: Wasmtime,
    invocation: Invocation,
    host: HostContext,
) -> Completion {
    let started = Instant::now();
    let mut limits = invocation.limits.clone();
    limits.max_concurrent_fetches = limits.max_concurrent_fetches.max(1);
    let (events, mut inbox) = mpsc::unbounded_channel();
    let cpu = Arc::new(CpuMeter::default());
    let call = CallState {
        deadline: started + limits.wall,
        limit: None,
        cpu: Arc::clone(&cpu),
        console: Console::new(limits.max_console_bytes),
        fetches: Fetches::default(),
        fetch_denied: false,
        timers: Timers::default(),
        events,
        fetch_host: Arc::clone(&invocation.fetch),
        runtime: host.runtime,
        random: RandomState::new().build_hasher().finish(),
        limits,
    };
    let memory = Budget {
        limit: call.limits.memory_bytes,
        base: image.memory_bytes,
        used: 0,
        daemon: Some(host.memory),
        refused: None,
    };
    let mut store = Store::new(
        pre.module().engine(),
        Host { guest: None, image: Some(Arc::clone(&image)), call: Some(call), memory },
    );
    store.limiter(|host| host);
    store.set_epoch_deadline(SLICE_TICKS);
    store.epoch_deadline_callback(|mut context| {
        let Some(call) = context.data_mut().call.as_mut() else { return Ok(UpdateDeadline::Continue(SLICE_TICKS)) };
        if call.check_limits() {
            return Ok(UpdateDeadline::Interrupt);
        }
        Ok(UpdateDeadline::Yield(SLICE_TICKS))
    });

    let end = if invocation.handler.len() > MAX_HANDLER_BYTES {
        RunEnd::Threw(format!(
            "the handler is too large ({} bytes, the maximum is {MAX_HANDLER_BYTES})",
            invocation.handler.len()
        ))
    } else {
        drive(&mut store, &pre, &image, &invocation, &mut inbox, &cpu).await
    };
    let host = store.data_mut();
    let memory_refused = host.memory.refused;
    let daemon_memory = host.memory.daemon.clone();
    let call = host.call.as_mut().expect("the call's state lives as long as its store");
    if let Some(daemon) = memory_refused {
        call.hit(memory_hit(daemon, daemon_memory.as_deref()));
    }
    let aborted = call.abort_fetches();
    let ended = Ended {
        limit: call.limit,
        limits: &call.limits,
        console: std::mem::take(&mut call.console.text),
        fetches: call.fetches.accepted,
        fetch_denied: call.fetch_denied,
        cpu_time: cpu.used(),
        wall_time: started.elapsed(),
    };
    let completion = completion(ended, end);
    drop(store);
    for aborted in aborted {
        let _ = aborted.await;
    }
    completion
}

async fn drive(
    store: &mut Store<Host>,
    pre: &InstancePre<Host>,
    image: &Arc<Image>,
    invocation: &Invocation,
    inbox: &mut mpsc::UnboundedReceiver<FetchDone>,
    cpu: &Arc<CpuMeter>,
) -> RunEnd {
    let body: &str = &invocation.handler;
    let started = metered(cpu, start(store, pre, image, invocation)).await;
    let (guest, promise, mut next) = match started {
        Ok(Started::Finished(end)) => return end,
        Ok(Started::Running(guest, promise, next)) => (guest, promise, next),
        Err(error) => return trap_end(store, error),
    };
    loop {
        let until = match next {
            Next::Done(end) => return end,
            Next::Wait(until) => until,
        };
        // Parked: no JavaScript runs and no thread is held until one of these is ready.
        let event = tokio::select! {
            biased;
            event = inbox.recv() => event,
            () = tokio::time::sleep_until(until.into()) => None,
        };
        store.set_epoch_deadline(SLICE_TICKS);
        let turn = metered(cpu, resume(store, &guest, image, promise, event, inbox, body)).await;
        next = match turn {
            Ok(next) => next,
            Err(error) => return trap_end(store, error),
        };
    }
}

/// How a call ends when the guest trapped: a limit the epoch callback or the memory limiter
/// latched, the stack, the guest running out of memory, or (a bug) anything else.
fn trap_end(store: &mut Store<Host>, error: wasmtime::Error) -> RunEnd {
    let call = store.data_mut().call.as_mut().expect("a call's store has its state");
    if call.limit.is_some() {
        return RunEnd::Limit;
    }
    if error.downcast_ref::<OutOfMemory>().is_some() {
        call.hit(LimitHit::Memory);
        return RunEnd::Limit;
    }
    match error.downcast_ref::<Trap>() {
        // The shadow stack runs into the bottom of memory, or the native stack into its limit.
        Some(Trap::StackOverflow | Trap::MemoryOutOfBounds) => {
            call.hit(LimitHit::Stack);
            RunEnd::Limit
        }
        Some(Trap::Interrupt) => {
            call.check_limits();
            RunEnd::Limit
        }
        _ => RunEnd::Internal(format!("{error:#}")),
    }
}

enum Started {
    Finished(RunEnd),
    Running(Arc<Guest>, JsValue, Next),
}

/// The first turn: instantiate, set the call's limits, compile and call the handler, and run
/// everything runnable after it.
async fn start(
    store: &mut Store<Host>,
    pre: &InstancePre<Host>,
    image: &Image,
    invocation: &Invocation,
) -> Result<Started> {
    let instance = pre.instantiate_async(&mut *store).await?;
    let guest = Arc::new(Guest::new(&mut *store, &instance, image.ctx)?);
    store.data_mut().guest = Some(Arc::clone(&guest));
    let limits = store.data().call.as_ref().expect("call state").limits.clone();
    // The shadow stack is the module's first MiB; a call gets at most its limit of it, counted
    // down from the top (below it, a store traps: the call is over its stack limit).
    let stack = limits.stack_bytes.clamp(MIN_STACK, image.stack_top as usize);
    if let Some(pointer) = instance.get_global(&mut *store, "__stack_pointer") {
        pointer.set(&mut *store, wasmtime::Val::I32(stack as i32))?;
    }
    guest.set_limits(&mut *store, 0, 0).await?;
    let max_elements = (limits.memory_bytes / 16).max(MIN_WALKABLE_ELEMENTS) as f64;
    let number = guest.new_number(&mut *store, max_elements).await?;
    guest.set_property(&mut *store, image.bindings, image.max_elements_name, number).await?;

    let body: &str = &invocation.handler;
    let args = match serde_json::to_string(&invocation.arguments) {
        Ok(json) => guest.parse_json(&mut *store, &json, image.arguments_file).await?,
        Err(e) => return Ok(Started::Finished(RunEnd::Internal(format!("could not encode the arguments: {e}")))),
    };
    if is_exception(args) {
        return Ok(Started::Finished(exception_end(store, &guest, image, body).await?));
    }
    let head = match &invocation.program {
        Program::Handler => WRAPPER_HEAD,
        Program::Script { .. } => SCRIPT_WRAPPER_HEAD,
    };
    let handler = guest.eval(&mut *store, &wrap(head, body), image.handler_file, 0).await?;
    if is_exception(handler) {
        return Ok(Started::Finished(exception_end(store, &guest, image, body).await?));
    }
    let [_, _, _, _, fetch, script] = image.hooks;
    let called = match &invocation.program {
        Program::Handler => {
            guest.call(&mut *store, handler, guest::UNDEFINED, &[args, fetch], image.loop_scratch).await?
        }
        Program::Script { tools } => {
            let tools = guest.new_string(&mut *store, tools).await?;
            guest
                .call(&mut *store, script, guest::UNDEFINED, &[handler, args, fetch, tools], image.loop_scratch)
                .await?
        }
    };
    if is_exception(called) {
        return Ok(Started::Finished(exception_end(store, &guest, image, body).await?));
    }
    // An async function always returns a promise; anything else means the body closed the
    // wrapper early and returned a plain value, which is taken as the result.
    if !guest.is_promise(&mut *store, called).await? {
        return Ok(Started::Finished(serialise(store, &guest, image, called, body).await?));
    }
    Ok(match advance(store, &guest, image, called, body).await? {
        Next::Done(end) => Started::Finished(end),
        next => Started::Running(guest, called, next),
    })
}

/// A later turn: hand over what arrived, then run everything that became runnable.
async fn resume(
    store: &mut Store<Host>,
    guest: &Guest,
    image: &Image,
    promise: JsValue,
    event: Option<FetchDone>,
    inbox: &mut mpsc::UnboundedReceiver<FetchDone>,
    body: &str,
) -> Result<Next> {
    let mut event = event;
    while let Some(done) = event.take().or_else(|| inbox.try_recv().ok()) {
        if !deliver(store, guest, image, done).await? {
            return Ok(Next::Done(exception_end(store, guest, image, body).await?));
        }
    }
    advance(store, guest, image, promise, body).await
}

/// Runs promise jobs and due timers until the handler's promise settles or nothing is runnable.
async fn advance(store: &mut Store<Host>, guest: &Guest, image: &Image, promise: JsValue, body: &str) -> Result<Next> {
    loop {
        let mut jobs = 0u32;
        loop {
            match guest.run_job(&mut *store).await? {
                JobRan::None => break,
                JobRan::Ran | JobRan::Threw => {}
            }
            jobs += 1;
            if jobs.is_multiple_of(JOBS_PER_CHECK) && call(store).check_limits() {
                return Ok(Next::Done(RunEnd::Limit));
            }
        }
        if call(store).check_limits() {
            return Ok(Next::Done(RunEnd::Limit));
        }
        let settled = guest.promise_state(&mut *store, promise).await?;
        if settled != guest::PROMISE_PENDING {
            let fulfilled = settled == guest::PROMISE_FULFILLED;
            let value = guest.promise_result(&mut *store, promise).await?;
            return Ok(Next::Done(if fulfilled {
                serialise(store, guest, image, value, body).await?
            } else {
                describe_end(store, guest, image, value, body).await?
            }));
        }
        let due = call(store).timers.pop_due(Instant::now());
        if let Some(id) = due {
            let timer_fire = image.hooks[2];
            let id = guest.new_number(&mut *store, f64::from(id)).await?;
            let fired = guest.call(&mut *store, timer_fire, guest::UNDEFINED, &[id], image.loop_scratch).await?;
            if is_exception(fired) {
                return Ok(Next::Done(match exception_end(store, guest, image, body).await? {
                    RunEnd::Threw(text) => RunEnd::Threw(format!("uncaught error in a setTimeout callback: {text}")),
                    end => end,
                }));
            }
            continue;
        }
        let state = call(store);
        let next_timer = state.timers.next_due();
        let fetching = !state.fetches.running.is_empty() || !state.fetches.queued.is_empty();
        if !fetching {
            match next_timer {
                None => return Ok(Next::Done(RunEnd::Stalled)),
                Some(due) if due > state.deadline => return Ok(Next::Done(RunEnd::TimerAfterDeadline)),
                Some(_) => {}
            }
        }
        return Ok(Next::Wait(next_timer.map_or(state.deadline, |due| due.min(state.deadline))));
    }
}

fn call(store: &mut Store<Host>) -> &mut CallState {
    store.data_mut().call.as_mut().expect("a call's store has its state")
}

/// Hands a fetch result to the prelude; false if that threw.
async fn deliver(store: &mut Store<Host>, guest: &Guest, image: &Image, done: FetchDone) -> Result<bool> {
    let charged = call(store).fetch_finished(done.id);
    store.data_mut().memory.give_back(charged);
    let id = guest.new_number(&mut *store, f64::from(done.id)).await?;
    let result = match done.result {
        Ok(response) => {
            let flat: Vec<&str> = response.headers.iter().flat_map(|(n, v)| [n.as_str(), v.as_str()]).collect();
            let head =
                serde_json::json!([response.status, response.status_text, response.url, response.redirected, flat]);
            let parts = guest.parse_json(&mut *store, &head.to_string(), image.arguments_file).await?;
            let body = guest.new_array_buffer(&mut *store, &response.body).await?;
            guest.set_index(&mut *store, parts, 5, body).await?;
            guest.call(&mut *store, image.hooks[0], guest::UNDEFINED, &[id, parts], image.loop_scratch).await?
        }
        Err(error) => {
            if matches!(error, FetchError::Denied(_)) {
                call(store).fetch_denied = true;
            }
            let message = guest.new_string(&mut *store, error.message()).await?;
            guest.call(&mut *store, image.hooks[1], guest::UNDEFINED, &[id, message], image.loop_scratch).await?
        }
    };
    Ok(!is_exception(result))
}

/// `JSON.stringify`s the handler's value, enforcing `max_result_bytes`.
async fn serialise(
    store: &mut Store<Host>,
    guest: &Guest,
    image: &Image,
    value: JsValue,
    body: &str,
) -> Result<RunEnd> {
    let json = guest.stringify(&mut *store, value).await?;
    if is_exception(json) {
        return Ok(match exception_end(store, guest, image, body).await? {
            RunEnd::Threw(text) => RunEnd::Unserialisable(text),
            end => end,
        });
    }
    if !guest::is_string(json) {
        return Ok(RunEnd::Returned(None));
    }
    let max = call(store).limits.max_result_bytes;
    let text = guest
        .with_string(&mut *store, json, image.loop_scratch, |bytes| {
            if bytes.len() > max { Err(bytes.len()) } else { Ok(wtf8_lossy(bytes)) }
        })
        .await?;
    Ok(match text {
        Some(Ok(text)) => RunEnd::Returned(Some(text)),
        Some(Err(size)) => {
            call(store).hit(LimitHit::Result(size));
            RunEnd::Limit
        }
        None => RunEnd::Internal("the result could not be read".to_owned()),
    })
}

/// Takes the pending exception and turns it into how the call ends.
async fn exception_end(store: &mut Store<Host>, guest: &Guest, image: &Image, body: &str) -> Result<RunEnd> {
    if call(store).check_limits() {
        return Ok(RunEnd::Limit);
    }
    let thrown = guest.exception(&mut *store).await?;
    describe_end(store, guest, image, thrown, body).await
}

/// "message (handler line N)" for a thrown value, through the prelude's `describe`.
async fn describe_end(
    store: &mut Store<Host>,
    guest: &Guest,
    image: &Image,
    thrown: JsValue,
    body: &str,
) -> Result<RunEnd> {
    if call(store).check_limits() {
        return Ok(RunEnd::Limit);
    }
    let (text, stack) = match describe(store, guest, image, thrown).await? {
        Some(parts) => parts,
        None => ("uncaught exception".to_owned(), String::new()),
    };
    if call(store).limit.is_some() {
        return Ok(RunEnd::Limit);
    }
    match text.as_str() {
        "RangeError: Maximum call stack size exceeded" | "InternalError: stack overflow" => {
            call(store).hit(LimitHit::Stack);
            return Ok(RunEnd::Limit);
        }
        "InternalError: out of memory" => {
            call(store).hit(LimitHit::Memory);
            return Ok(RunEnd::Limit);
        }
        _ => {}
    }
    Ok(RunEnd::Threw(match handler_line(&stack, body) {
        Some(line) => format!("{text} (handler line {line})"),
        None => text,
    }))
}

/// The prelude's `describe(thrown)`: the error's text and stack, `None` if describing threw.
async fn describe(
    store: &mut Store<Host>,
    guest: &Guest,
    image: &Image,
    thrown: JsValue,
) -> Result<Option<(String, String)>> {
    let parts = guest.call(&mut *store, image.hooks[3], guest::UNDEFINED, &[thrown], image.loop_scratch).await?;
    if is_exception(parts) {
        guest.exception(&mut *store).await?;
        return Ok(None);
    }
    let mut out = [String::new(), String::new()];
    for (index, slot) in out.iter_mut().enumerate() {
        let part = guest.get_index(&mut *store, parts, index as u32).await?;
        if guest::is_string(part) {
            *slot = guest.with_string(&mut *store, part, image.loop_scratch, wtf8_lossy).await?.unwrap_or_default();
        }
    }
    let [text, stack] = out;
    Ok(Some((text, stack)))
}

/// Smallest stack a call gets, whatever its limit says.
const MIN_STACK: usize = 64 * 1024;

/// Compiles `source` without running it: `Ok(None)` if it compiles, else the error's text and
/// stack. A fresh instance with no call: nothing it compiles can run.
pub(super) async fn check(engine: &WasmEngine, source: &str) -> Result<Option<(String, String)>> {
    let image = engine.image();
    let mut store = Store::new(engine.wasmtime(), Host::for_image());
    store.set_epoch_deadline(SLICE_TICKS);
    let deadline = Instant::now() + CHECK_TIME;
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Continue(SLICE_TICKS))
        }
    });
    let instance = engine.pre().instantiate_async(&mut store).await?;
    let guest = Guest::new(&mut store, &instance, image.ctx)?;
    let compiled = match guest.eval(&mut store, source, image.handler_file, COMPILE_ONLY).await {
        Ok(value) => value,
        Err(error) => {
            let message = match error.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => "the handler took too long to compile",
                Some(Trap::StackOverflow | Trap::MemoryOutOfBounds) => "the handler is nested too deeply to compile",
                _ if error.downcast_ref::<OutOfMemory>().is_some() => {
                    "the handler is too large or complex to compile (out of memory)"
                }
                _ => return Err(error),
            };
            return Ok(Some((message.to_owned(), String::new())));
        }
    };
    if !is_exception(compiled) {
        return Ok(None);
    }
    let thrown = guest.exception(&mut store).await?;
    let (text, stack) = describe(&mut store, &guest, image, thrown).await?.unwrap_or_default();
    Ok(Some((if text.is_empty() { "SyntaxError: the handler could not be compiled".to_owned() } else { text }, stack)))
}
