//! One call in a fresh instance of the image: the store that holds it, the imports it sees and
//! its event loop.
//!
//! JavaScript runs in turns, and between them the call parks on its inbox (fetch results) or
//! its next timer, holding no thread. A turn is stopped by the instance's epoch deadline, which
//! fires every few milliseconds of a running turn, checks the call's CPU and wall limits, and
//! either ends the call with a trap or yields to the worker's other calls. The CPU a turn used
//! is measured per poll of its future (`Metered`), so time the worker spends on other calls
//! between polls is not charged to it.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::{Caller, Engine as Wasmtime, InstancePre, Linker, Result, Store, Trap, UpdateDeadline};

use super::super::engine::HostContext;
use super::super::invocation::{Completion, FetchError, Invocation, Program};
use super::guest::{self, EVAL_COMPILE_ONLY, EVAL_GLOBAL, Guest, JobRan, JsValue, OutOfMemory, is_exception};
use super::host::Host;
use super::image::Image;
use super::memory::Budget;
use super::source::{SCRIPT_WRAPPER_HEAD, WRAPPER_HEAD, handler_line, wrap};
use super::state::{CallState, CpuMeter, FetchDone, FetchInbox, LimitHit, RunEnd};
use super::web::wtf8_lossy;
use super::{bytecode, natives};
use crate::toolset::MAX_HANDLER_BYTES;

/// Epoch ticks between two checks of a running turn; also the longest it runs before yielding.
const SLICE_TICKS: u64 = 5;
/// Flags for compile-only evaluation.
const COMPILE_ONLY: i32 = EVAL_GLOBAL | EVAL_COMPILE_ONLY;
/// Pending promise jobs run between two explicit limit checks (the epoch deadline also stops a
/// long job; this only bounds how late a limit latched by a native is noticed).
const JOBS_PER_CHECK: u32 = 256;
/// The smallest `maxElements` whatever the memory limit (lengths this small are walked in
/// milliseconds).
const MIN_WALKABLE_ELEMENTS: usize = 1 << 20;
/// How long a syntax check may take before it is given up.
const CHECK_TIME: Duration = Duration::from_secs(2);
/// Smallest stack a call gets, whatever its limit says.
const MIN_STACK: usize = 64 * 1024;

/// A future whose polls are charged to a call's CPU time.
struct Metered<F> {
    meter: Arc<CpuMeter>,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.meter.poll_started();
        let result = self.inner.as_mut().poll(cx);
        self.meter.poll_ended();
        result
    }
}

fn metered<F: Future>(meter: &Arc<CpuMeter>, future: F) -> Metered<F> {
    Metered { meter: Arc::clone(meter), inner: Box::pin(future) }
}

/// The imports: the natives, and what the C library asks the host for.
pub fn linker(engine: &Wasmtime) -> Result<Linker<Host>> {
    let mut linker = Linker::new(engine);
    natives::define(&mut linker)?;
    // The C library's view of the world: a clock, a random source, and output that goes
    // nowhere (QuickJS prints nothing a call needs). No file descriptor exists.
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "clock_time_get",
        |mut caller: Caller<'_, Host>, clock: i32, _precision: i64, out: i32| -> i32 {
            let now = match clock {
                0 => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
                _ => process_start().elapsed(),
            };
            let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else { return EINVAL };
            let bytes = (now.as_nanos() as u64).to_le_bytes();
            match memory.write(&mut caller, out as u32 as usize, &bytes) {
                Ok(()) => 0,
                Err(_) => EFAULT,
            }
        },
    )?;
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "random_get",
        |mut caller: Caller<'_, Host>, buf: i32, len: i32| -> i32 {
            let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else { return EINVAL };
            // Written in place: a length the guest chose must not size an allocation here.
            let Some(slot) = guest_slice(memory.data_mut(&mut caller), buf, len) else { return EFAULT };
            for chunk in slot.chunks_mut(8) {
                let word = RandomState::new().build_hasher().finish().to_le_bytes();
                chunk.copy_from_slice(&word[..chunk.len()]);
            }
            0
        },
    )?;
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "fd_write",
        |mut caller: Caller<'_, Host>, _fd: i32, iovs: i32, count: i32, written: i32| -> i32 {
            let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else { return EINVAL };
            // The vectors must lie in memory, which bounds the loop by the guest's own size.
            let Some(vectors) =
                count.checked_mul(8).and_then(|bytes| guest_slice(memory.data_mut(&mut caller), iovs, bytes))
            else {
                return EFAULT;
            };
            let total = vectors
                .chunks_exact(8)
                .map(|vector| u32::from_le_bytes(vector[4..].try_into().expect("four bytes")))
                .fold(0u32, u32::wrapping_add);
            match memory.write(&mut caller, written as u32 as usize, &total.to_le_bytes()) {
                Ok(()) => 0,
                Err(_) => EFAULT,
            }
        },
    )?;
    // There are no files.
    linker.func_wrap("wasi_snapshot_preview1", "fd_close", |_: i32| -> i32 { EBADF })?;
    linker.func_wrap("wasi_snapshot_preview1", "fd_fdstat_get", |_: i32, _: i32| -> i32 { EBADF })?;
    linker.func_wrap("wasi_snapshot_preview1", "fd_seek", |_: i32, _: i64, _: i32, _: i32| -> i32 { ESPIPE })?;
    // Local time is UTC; QuickJS's own interrupt handler is never installed (epochs replace it);
    // there is no module loader, so `import()` rejects; unhandled rejections are not tracked.
    linker.func_wrap("env", "host_get_timezone_offset", |_: i32, _: i32| -> i32 { 0 })?;
    linker.func_wrap("env", "host_interrupt", || -> i32 { 0 })?;
    linker.func_wrap("env", "host_module_normalize", |_: i32, _: i32| -> i32 { 0 })?;
    linker.func_wrap("env", "host_module_load", |_: i32, _: i32| -> i32 { 0 })?;
    linker.func_wrap("env", "host_promise_rejection", |_: i32, _: i32, _: i32| {})?;
    Ok(linker)
}

/// WASI error numbers the shims answer with.
const EBADF: i32 = 8;
const EFAULT: i32 = 21;
const EINVAL: i32 = 28;
const ESPIPE: i32 = 70;

/// `len` bytes of guest memory at `ptr`, if they are all inside it. Pointers and lengths from the
/// guest are unsigned 32-bit values; a negative `len` is a huge one.
fn guest_slice(memory: &mut [u8], ptr: i32, len: i32) -> Option<&mut [u8]> {
    let start = ptr as u32 as usize;
    memory.get_mut(start..start.checked_add(len as u32 as usize)?)
}

fn process_start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// The handler's function: from the bytecode an earlier call left, else compiled here (and its
/// bytecode kept for the next call). An exception value when it does not compile.
async fn compiled_handler(store: &mut Store<Host>, guest: &Guest, image: &Image, source: &str) -> Result<JsValue> {
    if let Some(bytecode) = bytecode::get(source) {
        let compiled = guest.read_compiled(&mut *store, &bytecode).await?;
        if is_exception(compiled) {
            return Ok(compiled);
        }
        return guest.run_compiled(&mut *store, compiled).await;
    }
    let (compiled, bytecode) = guest.compile(&mut *store, source, image.handler_file, image.loop_scratch).await?;
    if is_exception(compiled) {
        return Ok(compiled);
    }
    if let Some(bytecode) = bytecode {
        bytecode::insert(source, bytecode);
    }
    guest.run_compiled(&mut *store, compiled).await
}

/// What a turn decided.
enum Next {
    Done(RunEnd),
    /// Park until a fetch completes or this instant (a timer, the deadline) passes.
    Wait(Instant),
}

/// Runs one invocation in a fresh instance, parking at every await.
///
/// Dropping the returned future (the caller went away) drops the instance and aborts the
/// call's fetches; its timers go with it.
pub async fn execute(
    pre: InstancePre<Host>,
    image: Arc<Image>,
    invocation: Invocation,
    host: HostContext,
) -> Completion {
    let limits = invocation.limits.clone();
    let memory = Budget::new(limits.memory_bytes, image.memory_bytes, host.memory);
    let (call, mut inbox) = CallState::new(limits, Arc::clone(&invocation.fetch), host.runtime);
    let cpu = Arc::clone(&call.cpu);
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
    let memory_refused = host.memory.refusal();
    let call = host.call.as_mut().expect("the call's state lives as long as its store");
    if let Some(limit) = memory_refused {
        call.hit(limit);
    }
    let aborted = call.abort_fetches();
    let completion = call.completion(end);
    drop(store);
    // The answer goes out only once no fetch of the call is running any more (an abort takes
    // effect when the task next yields): a host that counts on the call being over when it
    // has its answer, like a script whose left-over tool calls must be logged by then, can.
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
    inbox: &mut FetchInbox,
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
    let source = wrap(head, body);
    let handler = match &invocation.program {
        Program::Handler => compiled_handler(store, &guest, image, &source).await?,
        Program::Script { .. } => guest.eval(&mut *store, &source, image.handler_file, 0).await?,
    };
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
    event: Option<Box<FetchDone>>,
    inbox: &mut FetchInbox,
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
        if !state.fetching() {
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
async fn deliver(store: &mut Store<Host>, guest: &Guest, image: &Image, done: Box<FetchDone>) -> Result<bool> {
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

/// Compiles `source` without running it: `Ok(None)` if it compiles, else the error's text and
/// stack. A fresh instance with no call: nothing it compiles can run.
pub async fn check(
    wasmtime: &Wasmtime,
    pre: &InstancePre<Host>,
    image: &Image,
    source: &str,
) -> Result<Option<(String, String)>> {
    let mut store = Store::new(wasmtime, Host::for_image());
    store.set_epoch_deadline(SLICE_TICKS);
    let deadline = Instant::now() + CHECK_TIME;
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Continue(SLICE_TICKS))
        }
    });
    let instance = pre.instantiate_async(&mut store).await?;
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

/// The host seen from a compromised QuickJS: modules that call the imports with whatever
/// arguments they like, or ask for imports the daemon does not give.
#[cfg(test)]
mod tests {
    use wasm_encoder::{
        CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection, ImportSection, MemorySection,
        MemoryType, Module as Encoded, TypeSection, ValType,
    };
    use wasmtime::{Engine as Wasmtime, Module, Store};

    use super::{EFAULT, Host, linker};
    use crate::serve::isolate::wasm::engine_config::config;

    /// A module with one page of memory whose `attack` export calls `module.name`, of type
    /// `params -> i32`, with `args` (each an i32, or an i64 where the parameter is one).
    fn hostile(module: &str, name: &str, params: &[ValType], args: &[i64]) -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function(params.iter().copied(), [ValType::I32]);
        types.ty().function([], [ValType::I32]);
        let mut imports = ImportSection::new();
        imports.import(module, name, EntityType::Function(0));
        let mut functions = FunctionSection::new();
        functions.function(1);
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: 1,
            maximum: Some(1),
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        exports.export("attack", ExportKind::Func, 1);
        let mut body = Function::new([]);
        let mut sink = body.instructions();
        for (ty, arg) in params.iter().zip(args) {
            match ty {
                ValType::I64 => sink.i64_const(*arg),
                _ => sink.i32_const(*arg as i32),
            };
        }
        sink.call(0).end();
        let mut code = CodeSection::new();
        code.function(&body);
        let mut encoded = Encoded::new();
        encoded
            .section(&types)
            .section(&imports)
            .section(&functions)
            .section(&memories)
            .section(&exports)
            .section(&code);
        encoded.finish()
    }

    fn engine() -> Wasmtime {
        Wasmtime::new(&config(4)).expect("engine")
    }

    /// Runs `attack` of a module made by [`hostile`] in a store outside any call.
    fn attack(engine: &Wasmtime, wasm: &[u8]) -> wasmtime::Result<i32> {
        let module = Module::new(engine, wasm)?;
        let linker = linker(engine)?;
        let mut store = Store::new(engine, Host::for_image());
        store.set_epoch_deadline(u64::MAX / 2);
        futures_util::FutureExt::now_or_never(async {
            let instance = linker.instantiate_async(&mut store, &module).await?;
            instance.get_typed_func::<(), i32>(&mut store, "attack")?.call_async(&mut store, ()).await
        })
        .expect("nothing here waits")
    }

    #[test]
    fn no_import_opens_a_file_or_socket_or_starts_a_process() {
        let engine = engine();
        use ValType::{I32, I64};
        // What WASI offers beyond the six functions QuickJS uses: none is there to link.
        for (name, params) in [
            ("path_open", &[I32, I32, I32, I32, I32, I64, I64, I32, I32][..]),
            ("sock_accept", &[I32, I32, I32][..]),
            ("sock_send", &[I32, I32, I32, I32, I32][..]),
            ("fd_read", &[I32, I32, I32, I32][..]),
            ("fd_prestat_get", &[I32, I32][..]),
            ("environ_get", &[I32, I32][..]),
            ("proc_raise", &[I32][..]),
        ] {
            let error = attack(&engine, &hostile("wasi_snapshot_preview1", name, params, &[0; 9])).unwrap_err();
            assert!(format!("{error:#}").contains("unknown import"), "{name}: {error:#}");
        }
        // The descriptors QuickJS's C library asks about do not exist.
        assert_eq!(
            attack(&engine, &hostile("wasi_snapshot_preview1", "fd_close", &[I32], &[3])).unwrap(),
            super::EBADF
        );
        assert_eq!(
            attack(&engine, &hostile("wasi_snapshot_preview1", "fd_fdstat_get", &[I32, I32], &[0, 0])).unwrap(),
            super::EBADF
        );
    }

    #[test]
    fn lengths_and_counts_from_the_guest_never_size_host_memory_or_work() {
        let engine = engine();
        use ValType::I32;
        // 2^31 bytes of randomness, or ~2^32 I/O vectors: refused for lying outside the guest's
        // one page, at once, not allocated or walked.
        for (name, params, args) in [
            ("random_get", &[I32, I32][..], &[0, i32::MAX as i64][..]),
            ("random_get", &[I32, I32][..], &[-8, 16][..]),
            ("fd_write", &[I32, I32, I32, I32][..], &[1, 0, -1, 0][..]),
            ("fd_write", &[I32, I32, I32, I32][..], &[1, 0, i32::MAX as i64, 0][..]),
            ("clock_time_get", &[I32, ValType::I64, I32][..], &[0, 0, 65_532][..]),
        ] {
            let started = std::time::Instant::now();
            assert_eq!(
                attack(&engine, &hostile("wasi_snapshot_preview1", name, params, args)).unwrap(),
                EFAULT,
                "{name}"
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(1), "{name} took {:?}", started.elapsed());
        }
        // In bounds, they work.
        assert_eq!(
            attack(&engine, &hostile("wasi_snapshot_preview1", "random_get", &[I32, I32], &[0, 4096])).unwrap(),
            0
        );
        assert_eq!(
            attack(&engine, &hostile("wasi_snapshot_preview1", "fd_write", &[I32, I32, I32, I32], &[1, 0, 2, 64]))
                .unwrap(),
            0
        );
        // The natives are for calls only; outside one (at image build or a syntax check) they trap.
        let error =
            attack(&engine, &hostile("env", "host_call", &[I32; 5], &[0, 4, 0, i32::MAX as i64, 0])).unwrap_err();
        assert!(format!("{error:#}").contains("outside a call"), "{error:#}");
    }
}
