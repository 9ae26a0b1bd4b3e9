//! One call: per-call state, the natives that need it, and the event loop.
//!
//! The call is an `async fn` polled on one pool worker thread. JavaScript runs only in
//! *turns*: short synchronous stretches inside `Context::with` (start the handler, deliver a
//! fetch result, fire a timer, run the promise jobs that follow). Between turns the call is
//! parked at an `.await` on its inbox or its next timer, holding no thread, and the worker
//! runs other calls' turns. Every turn re-establishes what QuickJS and the guards assume
//! about the native stack (its stack top, the canary strip) because another call's turn may
//! have run on the same stack in between; CPU time is the sum of the turns.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rquickjs::{
    Array, ArrayBuffer, Context, Ctx, Error, Exception, Function, Object, Persistent, Promise, Runtime, Value, qjs,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::engine::HostContext;
use super::super::stack_guard::{self, StackCanary};
use super::super::wasm::call::{JOBS_PER_CHECK, MIN_WALKABLE_ELEMENTS};
use super::super::wasm::source::handler_line;
use super::super::wasm::state::{Console, Ended, FetchDone, Fetches, LimitHit, Reply, RunEnd, Timers, completion};
use super::super::wasm::web::{is_token, wtf8_lossy};
use super::super::{
    Completion, FetchError, FetchHost, FetchRequest, Invocation, MAX_HANDLER_BYTES, Program, SandboxLimits,
    thread_cpu_time,
};
use super::memory::Charge;
use super::memory::{BudgetAllocator, MemoryBudget};
use super::natives::{self, Copies, value_to_string};
use super::{compile_handler, load_prelude, new_context};

/// QuickJS stack limit on threads whose native stack size we do not know (not pool
/// workers): QuickJS's own default, which any ordinary thread can hold.
const UNKNOWN_THREAD_STACK: usize = 256 * 1024;
/// Smallest usable QuickJS stack; below this even the prelude cannot run.
const MIN_STACK: usize = 64 * 1024;
/// How far above the budget QuickJS's own memory limit (the backstop) is set.
const BACKSTOP_SLACK: usize = 4 * 1024 * 1024;

/// State shared by the event loop, the natives and the interrupt handler of one call.
struct CallState {
    limits: SandboxLimits,
    started: Instant,
    deadline: Instant,
    /// CPU time of the turns that have ended.
    cpu: Cell<Duration>,
    /// The worker thread's CPU clock when the current turn started, while one is running.
    turn_started: Cell<Option<Duration>>,
    limit: Cell<Option<LimitHit>>,
    memory: Rc<MemoryBudget>,
    /// Natives' copies outside the JS heap, charged to `memory`.
    copies: Copies,
    canary: Cell<Option<StackCanary>>,
    console: RefCell<Console>,
    fetches: RefCell<Fetches<Charge>>,
    fetch_denied: Cell<bool>,
    timers: RefCell<Timers>,
    events: mpsc::UnboundedSender<FetchDone>,
    fetch_host: Arc<dyn FetchHost>,
    runtime: tokio::runtime::Handle,
}

impl CallState {
    fn hit(&self, limit: LimitHit) {
        if self.limit.get().is_none() {
            self.limit.set(Some(limit));
        }
    }

    fn cpu_used(&self) -> Duration {
        let running =
            self.turn_started.get().map_or(Duration::ZERO, |started| thread_cpu_time().saturating_sub(started));
        self.cpu.get() + running
    }

    fn memory_hit(&self) -> LimitHit {
        if self.memory.daemon_exhausted() {
            LimitHit::DaemonMemory(self.memory.daemon_limit())
        } else {
            LimitHit::Memory
        }
    }

    /// Checks (and latches) every limit that is not counted at its source. This is the
    /// interrupt handler: once it returns true it keeps returning true, so QuickJS keeps
    /// throwing its uncatchable "interrupted" error at anything that still tries to run.
    fn check_limits(&self) -> bool {
        if self.limit.get().is_some() {
            return true;
        }
        let hit = if self.memory.exhausted() {
            Some(self.memory_hit())
        } else if self.canary.get().is_some_and(|canary| canary.tripped()) {
            Some(LimitHit::Stack)
        } else {
            let now = Instant::now();
            if now >= self.deadline {
                Some(LimitHit::Wall)
            } else if self.cpu_used() > self.limits.cpu {
                Some(LimitHit::Cpu)
            } else {
                None
            }
        };
        match hit {
            Some(hit) => {
                self.limit.set(Some(hit));
                true
            }
            None => false,
        }
    }

    fn spawn_fetch(&self, id: u32, request: FetchRequest) -> JoinHandle<()> {
        let host = Arc::clone(&self.fetch_host);
        let deadline = self.deadline;
        let reply = Reply { id, events: Some(self.events.clone()) };
        self.runtime.spawn(async move {
            let mut reply = reply;
            let result = host.fetch(request, deadline).await;
            reply.send(result);
        })
    }

    /// A fetch finished: free its slot and start queued ones.
    fn fetch_finished(&self, id: u32) {
        let mut fetches = self.fetches.borrow_mut();
        fetches.running.remove(&id);
        fetches.charges.remove(&id);
        while fetches.running.len() < self.limits.max_concurrent_fetches as usize {
            let Some((next, request)) = fetches.queued.pop_front() else {
                break;
            };
            let handle = self.spawn_fetch(next, request);
            fetches.running.insert(next, handle);
        }
    }

    /// Drops the queued fetches and aborts the running ones, returning their tasks to wait for.
    fn abort_fetches(&self) -> Vec<JoinHandle<()>> {
        let mut fetches = self.fetches.borrow_mut();
        fetches.queued.clear();
        fetches
            .running
            .drain()
            .map(|(_, handle)| {
                handle.abort();
                handle
            })
            .collect()
    }

    fn fetch_start<'js>(&self, ctx: &Ctx<'js>, args: &FetchArgs<'js>) -> rquickjs::Result<u32> {
        if self.fetches.borrow().accepted >= self.limits.max_fetches {
            self.hit(LimitHit::Fetches);
            return Err(Exception::throw_range(ctx, &LimitHit::Fetches.message(&self.limits)));
        }
        let (request, charges) = build_request(ctx, &self.copies, args)?;
        let mut fetches = self.fetches.borrow_mut();
        fetches.accepted += 1;
        let id = fetches.next_id;
        fetches.next_id += 1;
        fetches.charges.insert(id, charges);
        if fetches.running.len() < self.limits.max_concurrent_fetches as usize {
            let handle = self.spawn_fetch(id, request);
            fetches.running.insert(id, handle);
        } else {
            fetches.queued.push_back((id, request));
        }
        Ok(id)
    }

    fn timer_set(&self, ctx: &Ctx<'_>, delay_ms: f64) -> rquickjs::Result<u32> {
        let mut timers = self.timers.borrow_mut();
        if timers.created >= self.limits.max_timers {
            self.hit(LimitHit::Timers);
            return Err(Exception::throw_range(ctx, &LimitHit::Timers.message(&self.limits)));
        }
        let delay = Timers::delay(delay_ms);
        Ok(timers.add(delay))
    }
}

/// What the prelude passes to `fetchStart`, unchecked.
struct FetchArgs<'js> {
    url: Value<'js>,
    method: Value<'js>,
    headers: Value<'js>,
    body: Value<'js>,
    redirect: Value<'js>,
}

/// Validates what the prelude passed to `fetchStart`. The prelude already checks all of
/// this; the checks are repeated here because the request leaves the sandbox.
/// The copies the request holds (URL, header values, body) are charged to the call first.
fn build_request<'js>(
    ctx: &Ctx<'js>,
    copies: &Copies,
    args: &FetchArgs<'js>,
) -> rquickjs::Result<(FetchRequest, Vec<Charge>)> {
    let FetchArgs { url, method, headers, body, redirect } = args;
    let type_error = |message: String| Exception::throw_type(ctx, &message);
    let mut charges = Vec::new();
    let (url, charge) = copies.string(ctx, url)?.ok_or_else(|| type_error("fetch: the URL must be a string".into()))?;
    charges.push(charge);
    // Passed on as the handler wrote it: the host (the egress policy) parses it once and sends
    // exactly that, and it must see the raw text to refuse what parsing would resolve away (a
    // `..` segment an argument put into a path) and to log what it refuses.
    let method = value_to_string(ctx, method)
        .filter(|m| is_token(m))
        .ok_or_else(|| type_error("fetch: invalid method".into()))?;
    let redirect = value_to_string(ctx, redirect)
        .filter(|r| matches!(r.as_str(), "follow" | "manual" | "error"))
        .ok_or_else(|| type_error("fetch: invalid redirect mode".into()))?;
    let Some(list) = headers.as_array() else {
        return Err(type_error("fetch: invalid headers".into()));
    };
    let mut flat = Vec::with_capacity(list.len());
    for item in list.iter::<Value<'js>>() {
        let (text, charge) = copies.text(ctx, &item?)?;
        charges.extend(charge);
        flat.push(text);
    }
    let mut header_pairs = Vec::with_capacity(flat.len() / 2);
    for pair in flat.chunks_exact(2) {
        let (name, value) = (&pair[0], &pair[1]);
        if !is_token(name) || value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(type_error(format!("fetch: invalid header '{name}'")));
        }
        header_pairs.push((name.to_ascii_lowercase(), value.clone()));
    }
    let body = if body.is_undefined() || body.is_null() {
        None
    } else {
        // Charged, then copied, in one look at the array.
        let copied = copies.bytes(ctx, body).ok_or_else(|| type_error("fetch: invalid body".into()))?;
        let (bytes, charge) = copied?;
        charges.push(charge);
        Some(Bytes::from(bytes))
    };
    Ok((FetchRequest { url, method, headers: header_pairs, body, redirect }, charges))
}

/// The prelude's hooks.
struct Hooks<'js> {
    fetch_done: Function<'js>,
    fetch_fail: Function<'js>,
    timer_fire: Function<'js>,
    describe: Function<'js>,
    fetch: Function<'js>,
    script: Function<'js>,
}

impl<'js> Hooks<'js> {
    /// The prelude returns its hooks as `[fetchDone, fetchFail, timerFire, describe, fetch, runScript]`.
    fn from_list(list: &Array<'js>) -> rquickjs::Result<Hooks<'js>> {
        Ok(Hooks {
            fetch_done: list.get(0)?,
            fetch_fail: list.get(1)?,
            timer_fire: list.get(2)?,
            describe: list.get(3)?,
            fetch: list.get(4)?,
            script: list.get(5)?,
        })
    }
}

/// Installs the natives and runs the prelude, returning its list of hooks.
fn install<'js>(ctx: &Ctx<'js>, state: &Rc<CallState>, prelude: Option<&[u8]>) -> rquickjs::Result<Array<'js>> {
    let bindings = Object::new(ctx.clone())?;
    natives::install(ctx, &bindings, &state.copies)?;

    let st = Rc::clone(state);
    bindings.set(
        "fetchStart",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>,
                  url: Value<'js>,
                  method: Value<'js>,
                  headers: Value<'js>,
                  body: Value<'js>,
                  redirect: Value<'js>| {
                st.fetch_start(&ctx, &FetchArgs { url, method, headers, body, redirect })
            },
        )?,
    )?;
    let st = Rc::clone(state);
    bindings.set(
        "timerSet",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, delay: Value<'js>| {
            st.timer_set(&ctx, delay.as_number().unwrap_or(0.0))
        })?,
    )?;
    let st = Rc::clone(state);
    bindings.set(
        "timerClear",
        Function::new(ctx.clone(), move |id: Value<'js>| {
            if let Some(id) = id.as_int().and_then(|id| u32::try_from(id).ok()) {
                st.timers.borrow_mut().clear(id);
            }
        })?,
    )?;
    let st = Rc::clone(state);
    bindings.set(
        "console",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, level: Value<'js>, line: Value<'js>| {
            let level = match value_to_string(&ctx, &level).as_deref() {
                Some(level @ ("log" | "info" | "warn" | "error" | "debug")) => level.to_owned(),
                _ => "log".to_owned(),
            };
            let (line, _copy) = st.copies.text(&ctx, &line)?;
            Ok::<_, rquickjs::Error>(st.console.borrow_mut().push(&level, &line))
        })?,
    )?;

    // No array this call can hold has more elements than its memory allows (a JS value takes 16
    // bytes); longer array-likes are refused before a built-in walks them (see the prelude).
    let max_elements = (state.limits.memory_bytes / 16).max(MIN_WALKABLE_ELEMENTS);
    bindings.set("maxElements", max_elements as f64)?;

    load_prelude(ctx, prelude)?.call((bindings,))
}

/// Runs one invocation in a fresh runtime, parking at every await (see the module doc).
///
/// Dropping the returned future (the caller went away) drops the isolate and aborts the
/// call's fetches; its timers go with it.
pub(super) async fn execute(prelude: Option<&'static [u8]>, invocation: Invocation, host: HostContext) -> Completion {
    let started = Instant::now();
    let mut limits = invocation.limits.clone();
    let native_max = stack_guard::max_js_stack().unwrap_or(UNKNOWN_THREAD_STACK);
    limits.stack_bytes = limits.stack_bytes.min(native_max).max(MIN_STACK);
    limits.max_concurrent_fetches = limits.max_concurrent_fetches.max(1);

    let (events, mut inbox) = mpsc::unbounded_channel();
    let memory = MemoryBudget::new(limits.memory_bytes, host.memory);
    let state = Rc::new(CallState {
        started,
        deadline: started + limits.wall,
        cpu: Cell::new(Duration::ZERO),
        turn_started: Cell::new(None),
        limit: Cell::new(None),
        copies: Copies(Rc::clone(&memory)),
        memory,
        canary: Cell::new(None),
        console: RefCell::new(Console::new(limits.max_console_bytes)),
        fetches: RefCell::new(Fetches::default()),
        fetch_denied: Cell::new(false),
        timers: RefCell::new(Timers::default()),
        events,
        fetch_host: Arc::clone(&invocation.fetch),
        runtime: host.runtime,
        limits,
    });

    let end = if invocation.handler.len() > MAX_HANDLER_BYTES {
        RunEnd::Threw(format!(
            "the handler is too large ({} bytes, the maximum is {MAX_HANDLER_BYTES})",
            invocation.handler.len()
        ))
    } else {
        match Isolate::new(&state) {
            // The isolate is dropped at the end of this arm, before the completion is built.
            Ok(mut isolate) => drive(&mut isolate, &state, &invocation, &mut inbox, prelude).await,
            Err(end) => end,
        }
    };
    let completion = finish(&state, end);
    // The answer goes out only once no fetch of the call is running any more (an abort takes
    // effect when the task next yields): a host that counts on the call being over when it
    // has its answer, like a script whose left-over tool calls must be logged by then, can.
    for aborted in state.abort_fetches() {
        let _ = aborted.await;
    }
    completion
}

/// One call's runtime and context. Fields drop in declaration order: the values kept across
/// turns before the context (and with it the runtime), as QuickJS requires.
struct Isolate {
    kept: Option<Kept>,
    context: Context,
}

/// What a parked call needs again when its next turn starts.
struct Kept {
    hooks: Persistent<Array<'static>>,
    promise: Persistent<Promise<'static>>,
}

impl Isolate {
    fn new(state: &Rc<CallState>) -> Result<Isolate, RunEnd> {
        let runtime = Runtime::new_with_alloc(BudgetAllocator(Rc::clone(&state.memory)))
            .map_err(|e| RunEnd::Internal(format!("could not create a JS runtime: {e}")))?;
        runtime.set_memory_limit(state.limits.memory_bytes.saturating_add(BACKSTOP_SLACK));
        runtime.set_max_stack_size(state.limits.stack_bytes);
        let guard = Rc::clone(state);
        runtime.set_interrupt_handler(Some(Box::new(move || guard.check_limits())));
        let context =
            new_context(&runtime).map_err(|e| RunEnd::Internal(format!("could not create a JS context: {e}")))?;
        Ok(Isolate { kept: None, context })
    }

    fn raw_runtime(&self) -> *mut qjs::JSRuntime {
        // SAFETY: the context is live for as long as `self`.
        unsafe { qjs::JS_GetRuntime(self.context.as_raw().as_ptr()) }
    }

    /// Runs one turn of JavaScript on the current thread.
    fn turn<R>(&self, state: &CallState, f: impl FnOnce(&Ctx<'_>) -> R) -> R {
        self.context.with(|ctx| {
            // Measure QuickJS's stack from this frame and paint the guard strip just beyond
            // its limit: everything JS does in this turn happens below this frame, and other
            // calls' turns have used this stack since the last one.
            // SAFETY: only sets QuickJS's stack reference point.
            unsafe { qjs::JS_UpdateStackTop(self.raw_runtime()) };
            state.canary.set(StackCanary::arm(state.limits.stack_bytes));
            state.turn_started.set(Some(thread_cpu_time()));
            let result = f(&ctx);
            // The strip is only meaningful while this frame is live.
            if state.canary.get().is_some_and(|canary| canary.tripped()) {
                state.hit(LimitHit::Stack);
            }
            state.canary.set(None);
            if let Some(started) = state.turn_started.take() {
                state.cpu.set(state.cpu.get() + thread_cpu_time().saturating_sub(started));
            }
            result
        })
    }
}

impl Drop for Isolate {
    fn drop(&mut self) {
        // Freeing runs finalizers, which measure the stack from the stack top an earlier
        // turn set at whatever depth it ran: set it from here first.
        // SAFETY: only sets QuickJS's stack reference point.
        unsafe { qjs::JS_UpdateStackTop(self.raw_runtime()) };
        self.kept = None;
    }
}

/// What a turn decided.
enum Next {
    Done(RunEnd),
    /// Park until a fetch completes or this instant (a timer, the deadline) passes.
    Wait(Instant),
}

async fn drive(
    isolate: &mut Isolate,
    state: &Rc<CallState>,
    invocation: &Invocation,
    inbox: &mut mpsc::UnboundedReceiver<FetchDone>,
    prelude: Option<&[u8]>,
) -> RunEnd {
    let body: &str = &invocation.handler;
    let mut next = match isolate.turn(state, |ctx| start(ctx, state, invocation, prelude)) {
        Started::Finished(end) => return end,
        Started::Running(kept, next) => {
            isolate.kept = Some(kept);
            next
        }
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
        let Some(kept) = isolate.kept.as_ref() else {
            return RunEnd::Internal("a parked call lost its state".to_owned());
        };
        next = isolate.turn(state, |ctx| resume(ctx, state, kept, event, inbox, body));
    }
}

enum Started {
    /// The call ended in its first turn (most pure handlers do).
    Finished(RunEnd),
    Running(Kept, Next),
}

/// The first turn: prelude, arguments, compile, call, and everything runnable after it.
fn start<'js>(ctx: &Ctx<'js>, state: &Rc<CallState>, invocation: &Invocation, prelude: Option<&[u8]>) -> Started {
    let body: &str = &invocation.handler;
    let hook_list = match install(ctx, state, prelude) {
        Ok(hook_list) => hook_list,
        Err(e) => {
            return Started::Finished(match exception_end(ctx, state, None, e, body) {
                RunEnd::Threw(text) => RunEnd::Internal(format!("the isolate prelude failed: {text}")),
                end => end,
            });
        }
    };
    let hooks = match Hooks::from_list(&hook_list) {
        Ok(hooks) => hooks,
        Err(e) => {
            return Started::Finished(RunEnd::Internal(format!("the isolate prelude returned unusable hooks: {e}")));
        }
    };
    let args = match serde_json::to_string(&invocation.arguments) {
        Ok(json) => match ctx.json_parse(json) {
            Ok(args) => args,
            Err(e) => return Started::Finished(exception_end(ctx, state, Some(&hooks), e, body)),
        },
        Err(e) => {
            return Started::Finished(RunEnd::Internal(format!("could not encode the arguments: {e}")));
        }
    };
    let handler = match compile_handler(ctx, body, &invocation.program) {
        Ok(handler) => handler,
        Err(e) => return Started::Finished(exception_end(ctx, state, Some(&hooks), e, body)),
    };
    let called = match &invocation.program {
        Program::Handler => handler.call((args, hooks.fetch.clone())),
        // The prelude builds `call_tool` and the stubs on the fetch hook, runs the script and
        // checks that its value can be sent back as JSON.
        Program::Script { tools } => hooks.script.call((handler, args, hooks.fetch.clone(), tools.to_string())),
    };
    let returned: Value<'js> = match called {
        Ok(value) => value,
        Err(e) => return Started::Finished(exception_end(ctx, state, Some(&hooks), e, body)),
    };
    // An async function always returns a promise; anything else means the body closed the
    // wrapper early and returned a plain value, which is taken as the result.
    let Some(promise) = returned.as_promise().cloned() else {
        return Started::Finished(serialise(ctx, state, &hooks, returned, body));
    };
    match advance(ctx, state, &hooks, &promise, body) {
        Next::Done(end) => Started::Finished(end),
        next => Started::Running(
            Kept { hooks: Persistent::save(ctx, hook_list), promise: Persistent::save(ctx, promise) },
            next,
        ),
    }
}

/// A later turn: hand over what arrived, then run everything that became runnable.
fn resume<'js>(
    ctx: &Ctx<'js>,
    state: &CallState,
    kept: &Kept,
    event: Option<FetchDone>,
    inbox: &mut mpsc::UnboundedReceiver<FetchDone>,
    body: &str,
) -> Next {
    let restored = kept.hooks.clone().restore(ctx).and_then(|list| {
        let hooks = Hooks::from_list(&list)?;
        Ok((hooks, kept.promise.clone().restore(ctx)?))
    });
    let (hooks, promise) = match restored {
        Ok(restored) => restored,
        Err(e) => return Next::Done(RunEnd::Internal(format!("could not resume the call: {e}"))),
    };
    let mut event = event;
    while let Some(done) = event.take().or_else(|| inbox.try_recv().ok()) {
        if let Err(e) = deliver(ctx, state, &hooks, done) {
            return Next::Done(exception_end(ctx, state, Some(&hooks), e, body));
        }
    }
    advance(ctx, state, &hooks, &promise, body)
}

/// Runs promise jobs and due timers until the handler's promise settles (the call is done)
/// or nothing is runnable (park until the next timer, a fetch, or the deadline).
fn advance<'js>(ctx: &Ctx<'js>, state: &CallState, hooks: &Hooks<'js>, promise: &Promise<'js>, body: &str) -> Next {
    loop {
        let mut jobs = 0u32;
        while ctx.execute_pending_job() {
            jobs += 1;
            if jobs.is_multiple_of(JOBS_PER_CHECK) && state.check_limits() {
                return Next::Done(RunEnd::Limit);
            }
        }
        if state.check_limits() {
            return Next::Done(RunEnd::Limit);
        }
        if !matches!(promise.state(), rquickjs::promise::PromiseState::Pending) {
            return Next::Done(match promise.result::<Value<'js>>() {
                Some(Ok(value)) => serialise(ctx, state, hooks, value, body),
                Some(Err(e)) => exception_end(ctx, state, Some(hooks), e, body),
                None => RunEnd::Internal("the handler's promise is still pending".to_owned()),
            });
        }

        let due = state.timers.borrow_mut().pop_due(Instant::now());
        if let Some(id) = due {
            if let Err(e) = hooks.timer_fire.call::<_, ()>((id,)) {
                return Next::Done(match exception_end(ctx, state, Some(hooks), e, body) {
                    RunEnd::Threw(text) => RunEnd::Threw(format!("uncaught error in a setTimeout callback: {text}")),
                    end => end,
                });
            }
            continue;
        }
        let next_timer = state.timers.borrow().next_due();
        let fetching = {
            let fetches = state.fetches.borrow();
            !fetches.running.is_empty() || !fetches.queued.is_empty()
        };
        if !fetching {
            match next_timer {
                None => return Next::Done(RunEnd::Stalled),
                Some(due) if due > state.deadline => return Next::Done(RunEnd::TimerAfterDeadline),
                Some(_) => {}
            }
        }
        return Next::Wait(next_timer.map_or(state.deadline, |due| due.min(state.deadline)));
    }
}

/// Turns a failed JS operation into how the call ends.
fn exception_end<'js>(
    ctx: &Ctx<'js>,
    state: &CallState,
    hooks: Option<&Hooks<'js>>,
    error: Error,
    body: &str,
) -> RunEnd {
    if state.check_limits() {
        return RunEnd::Limit;
    }
    match error {
        Error::Exception => {
            let thrown = ctx.catch();
            let text = describe(ctx, state, hooks, thrown, body);
            if state.limit.get().is_some() { RunEnd::Limit } else { RunEnd::Threw(text) }
        }
        Error::Allocation => {
            state.hit(state.memory_hit());
            RunEnd::Limit
        }
        other => RunEnd::Internal(other.to_string()),
    }
}

/// "message (handler line N)" for a thrown value. Recognises QuickJS's stack-overflow and
/// out-of-memory errors when they escape (the guards normally latch them first).
fn describe<'js>(
    ctx: &Ctx<'js>,
    state: &CallState,
    hooks: Option<&Hooks<'js>>,
    thrown: Value<'js>,
    body: &str,
) -> String {
    let (text, stack) = match hooks.map(|h| h.describe.call::<_, Array<'js>>((thrown.clone(),))) {
        Some(Ok(parts)) => {
            let get =
                |i: usize| parts.get::<Value<'js>>(i).ok().and_then(|v| value_to_string(ctx, &v)).unwrap_or_default();
            (get(0), get(1))
        }
        // Before the prelude is installed (or if describing failed): QuickJS's own view.
        _ => {
            let _ = ctx.catch();
            match thrown.as_exception() {
                Some(e) => {
                    let name = e.get::<_, String>("name").unwrap_or_else(|_| "Error".to_owned());
                    (format!("{name}: {}", e.message().unwrap_or_default()), e.stack().unwrap_or_default())
                }
                None if thrown.is_null() && state.memory.exhausted() => ("out of memory".to_owned(), String::new()),
                None => ("uncaught exception".to_owned(), String::new()),
            }
        }
    };
    match text.as_str() {
        "RangeError: Maximum call stack size exceeded" | "InternalError: stack overflow" => state.hit(LimitHit::Stack),
        "InternalError: out of memory" => state.hit(state.memory_hit()),
        _ => {}
    }
    match handler_line(&stack, body) {
        Some(line) => format!("{text} (handler line {line})"),
        None => text,
    }
}

/// Hands a fetch result to the prelude, which settles the fetch() promise.
fn deliver<'js>(ctx: &Ctx<'js>, state: &CallState, hooks: &Hooks<'js>, done: FetchDone) -> rquickjs::Result<()> {
    state.fetch_finished(done.id);
    match done.result {
        Ok(response) => {
            let flat: Vec<String> = response.headers.into_iter().flat_map(|(name, value)| [name, value]).collect();
            let parts = Array::new(ctx.clone())?;
            parts.set(0, response.status)?;
            parts.set(1, response.status_text)?;
            parts.set(2, response.url)?;
            parts.set(3, response.redirected)?;
            parts.set(4, flat)?;
            parts.set(5, ArrayBuffer::new_copy(ctx.clone(), &response.body[..])?)?;
            hooks.fetch_done.call((done.id, parts))
        }
        Err(error) => {
            if matches!(error, FetchError::Denied(_)) {
                state.fetch_denied.set(true);
            }
            hooks.fetch_fail.call((done.id, error.message()))
        }
    }
}

/// `JSON.stringify`s the handler's value, enforcing `max_result_bytes`.
fn serialise<'js>(ctx: &Ctx<'js>, state: &CallState, hooks: &Hooks<'js>, value: Value<'js>, body: &str) -> RunEnd {
    match ctx.json_stringify(value) {
        Ok(None) => RunEnd::Returned(None),
        // Measured before it is copied: the copy is the result, at most `max_result_bytes`.
        Ok(Some(json)) => natives::with_wtf8(ctx, &json, |bytes| {
            if bytes.len() > state.limits.max_result_bytes {
                state.hit(LimitHit::Result(bytes.len()));
                RunEnd::Limit
            } else {
                RunEnd::Returned(Some(wtf8_lossy(bytes)))
            }
        }),
        Err(e) => match exception_end(ctx, state, Some(hooks), e, body) {
            RunEnd::Threw(text) => RunEnd::Unserialisable(text),
            end => end,
        },
    }
}

fn finish(state: &CallState, end: RunEnd) -> Completion {
    if state.memory.exhausted() {
        state.hit(state.memory_hit());
    }
    let fetches = state.fetches.borrow();
    let ended = Ended {
        limit: state.limit.get(),
        limits: &state.limits,
        console: std::mem::take(&mut state.console.borrow_mut().text),
        fetches: fetches.accepted,
        fetch_denied: state.fetch_denied.get(),
        cpu_time: state.cpu.get(),
        wall_time: state.started.elapsed(),
    };
    completion(ended, end)
}
