//! The QuickJS engine (quickjs-ng through `rquickjs`).
//!
//! A plain synchronous `rquickjs::Runtime` per call, driven by an `async fn` on the worker
//! thread: JavaScript runs in short turns inside `Context::with`, and the call parks between
//! them while it waits for fetches and timers (see `call.rs`). The prelude (`prelude.js`) is
//! compiled to bytecode once per process and loaded from bytecode into every fresh context.
//!
//! Cost of a pure call (`return {sum: args.a + args.b}`), counted with callgrind on a release
//! build: about 2.6 M instructions from runtime creation to teardown, of which creating the
//! context's built-ins is 30%, reading the prelude bytecode 21%, freeing the runtime 20% and
//! running the prelude 18% (the `profile_pure_calls` test is the harness). On the 2-core
//! development machine that is 0.2–0.5 ms depending on load; parsing the prelude source instead
//! (`PreludeLoad::Source`) costs about 1.5 ms.

use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Instant;

use futures_util::future::LocalBoxFuture;
use rquickjs::context::intrinsic;
use rquickjs::{Context, Ctx, Error, Function, Runtime, Value, qjs};

use super::engine::{Engine, HostContext};
use super::wasm::call::CHECK_TIME;
use super::wasm::source::{PRELUDE_SOURCE, SCRIPT_WRAPPER_HEAD, WRAPPER_HEAD, handler_line, wrap};
use super::{CompileError, Completion, Invocation, Program};

pub(super) mod call;
mod memory;
pub(super) mod natives;

const PRELUDE_FILE: &CStr = c"prelude";
const HANDLER_FILE: &CStr = c"handler";

/// Limits for the throwaway runtime `check` compiles in.
const CHECK_MEMORY_BYTES: usize = 64 * 1024 * 1024;
const CHECK_STACK_BYTES: usize = 256 * 1024;

/// ECMAScript built-ins. `atob`/`btoa` (and the `DOMException` they throw) are added
/// separately; QuickJS's `performance` global is deliberately left out.
type Intrinsics = (
    intrinsic::Date,
    intrinsic::Eval,
    intrinsic::RegExpCompiler,
    intrinsic::RegExp,
    intrinsic::Json,
    intrinsic::Proxy,
    intrinsic::MapSet,
    intrinsic::TypedArrays,
    intrinsic::Promise,
    intrinsic::WeakRef,
);

/// How the prelude gets into each new context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreludeLoad {
    /// Load bytecode compiled once per process (the default; faster).
    Bytecode,
    /// Parse the prelude source on every call (for comparison and as a fallback).
    Source,
}

/// The QuickJS [`Engine`].
#[derive(Debug, Clone)]
pub struct QuickJsEngine {
    /// `None` means: parse the source on every call.
    prelude_bytecode: Option<&'static [u8]>,
}

static PRELUDE_BYTECODE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
static SHARED: OnceLock<QuickJsEngine> = OnceLock::new();

impl Default for QuickJsEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl QuickJsEngine {
    /// An engine loading the bytecode prelude; the first call per process compiles it.
    pub fn new() -> Self {
        Self::with_prelude(PreludeLoad::Bytecode)
    }

    pub fn with_prelude(load: PreludeLoad) -> Self {
        let prelude_bytecode = match load {
            // If compiling failed (it cannot for the prelude we ship, which the tests load),
            // fall back to the source rather than refusing to run.
            PreludeLoad::Bytecode => PRELUDE_BYTECODE.get_or_init(compile_prelude).as_deref(),
            PreludeLoad::Source => None,
        };
        Self { prelude_bytecode }
    }

    /// How this engine loads the prelude.
    pub fn prelude_load(&self) -> PreludeLoad {
        if self.prelude_bytecode.is_some() { PreludeLoad::Bytecode } else { PreludeLoad::Source }
    }

    /// A process-wide instance, used by `check_handler`.
    pub(super) fn shared() -> &'static QuickJsEngine {
        SHARED.get_or_init(QuickJsEngine::new)
    }
}

impl Engine for QuickJsEngine {
    fn name(&self) -> &'static str {
        "quickjs"
    }

    fn check(&self, source: &str) -> Result<(), CompileError> {
        check_syntax(source)
    }

    fn execute(&self, invocation: Invocation, host: HostContext) -> LocalBoxFuture<'static, Completion> {
        Box::pin(call::execute(self.prelude_bytecode, invocation, host))
    }
}

/// A fresh context with the isolate's built-ins.
fn new_context(runtime: &Runtime) -> rquickjs::Result<Context> {
    let context = Context::custom::<Intrinsics>(runtime)?;
    // SAFETY: the context pointer is live; these calls only add globals / set a flag.
    let added = unsafe {
        let raw = context.as_raw().as_ptr();
        // `Atomics.wait` must never block a worker (QuickJS's default, made explicit).
        qjs::JS_SetCanBlock(qjs::JS_GetRuntime(raw), false);
        qjs::JS_AddIntrinsicAToB(raw)
    };
    if added < 0 {
        return Err(Error::Allocation);
    }
    Ok(context)
}

/// `JS_Eval` without rquickjs's `CString` conversion, so a NUL byte in a handler is a
/// syntax error like any other instead of a conversion failure.
fn eval_raw<'js>(ctx: &Ctx<'js>, source: &str, file: &CStr, flags: u32) -> rquickjs::Result<Value<'js>> {
    let mut buffer = Vec::with_capacity(source.len() + 1);
    buffer.extend_from_slice(source.as_bytes());
    buffer.push(0); // JS_Eval requires input[len] == '\0'
    // SAFETY: the buffer is NUL-terminated and outlives the call; the returned value is
    // owned and handed to `Value::from_raw` exactly once.
    unsafe {
        let raw = ctx.as_raw().as_ptr();
        let value = qjs::JS_Eval(raw, buffer.as_ptr().cast(), source.len() as _, file.as_ptr(), flags as i32);
        if qjs::JS_IsException(value) {
            return Err(Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), value))
    }
}

fn wrap_handler(body: &str) -> String {
    wrap(WRAPPER_HEAD, body)
}

/// Compiles (and evaluates — it is a single function expression) the wrapped handler or script.
fn compile_handler<'js>(ctx: &Ctx<'js>, body: &str, program: &Program) -> rquickjs::Result<Function<'js>> {
    let head = match program {
        Program::Handler => WRAPPER_HEAD,
        Program::Script { .. } => SCRIPT_WRAPPER_HEAD,
    };
    let value = eval_raw(ctx, &wrap(head, body), HANDLER_FILE, qjs::JS_EVAL_TYPE_GLOBAL)?;
    let type_name = value.type_name();
    value.into_function().ok_or_else(|| Error::new_from_js(type_name, "handler function"))
}

/// Evaluates the prelude, returning the function that installs the globals.
fn load_prelude<'js>(ctx: &Ctx<'js>, bytecode: Option<&[u8]>) -> rquickjs::Result<Function<'js>> {
    let value = match bytecode {
        // SAFETY: the bytecode was produced by `compile_prelude` with this very QuickJS
        // build; JS_EvalFunction consumes the object JS_ReadObject returned, and its own
        // result is owned and wrapped exactly once.
        Some(code) => unsafe {
            let raw = ctx.as_raw().as_ptr();
            let object = qjs::JS_ReadObject(raw, code.as_ptr(), code.len() as _, qjs::JS_READ_OBJ_BYTECODE as i32);
            if qjs::JS_IsException(object) {
                return Err(Error::Exception);
            }
            let value = qjs::JS_EvalFunction(raw, object);
            if qjs::JS_IsException(value) {
                return Err(Error::Exception);
            }
            Value::from_raw(ctx.clone(), value)
        },
        None => eval_raw(ctx, PRELUDE_SOURCE, PRELUDE_FILE, qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_STRICT)?,
    };
    let type_name = value.type_name();
    value.into_function().ok_or_else(|| Error::new_from_js(type_name, "prelude function"))
}

/// Compiles the prelude source to bytecode (without running it).
fn compile_prelude() -> Option<Vec<u8>> {
    let runtime = Runtime::new().ok()?;
    let context = new_context(&runtime).ok()?;
    context.with(|ctx| {
        let flags = qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_STRICT | qjs::JS_EVAL_FLAG_COMPILE_ONLY;
        let Ok(function) = eval_raw(&ctx, PRELUDE_SOURCE, PRELUDE_FILE, flags) else {
            let _ = ctx.catch();
            return None;
        };
        // SAFETY: `function` is a live compiled script; the buffer JS_WriteObject returns is
        // copied and then released with js_free.
        unsafe {
            let raw = ctx.as_raw().as_ptr();
            let mut len = 0;
            // Without source text and debug info the bytecode is a quarter of the size and
            // loads faster; prelude frames in stack traces just lose their line numbers.
            let flags = qjs::JS_WRITE_OBJ_BYTECODE | qjs::JS_WRITE_OBJ_STRIP_SOURCE | qjs::JS_WRITE_OBJ_STRIP_DEBUG;
            let buffer = qjs::JS_WriteObject(raw, &mut len, function.as_raw(), flags as i32);
            if buffer.is_null() {
                let _ = ctx.catch();
                return None;
            }
            let bytes = std::slice::from_raw_parts(buffer, len as usize).to_vec();
            qjs::js_free(raw, buffer.cast());
            Some(bytes)
        }
    })
}

/// A runtime kept per thread for compile-only checks. Compiling runs none of the handler's
/// code, so one runtime can check many handlers; building a fresh one per handler was most
/// of the cost of a registration. It is replaced after a check that ran out of memory, time
/// or stack (which may leave half-built state) and after `CHECKER_USES` checks.
struct Checker {
    context: Context,
    deadline: Rc<Cell<Instant>>,
    uses: u32,
}

const CHECKER_USES: u32 = 1000;

thread_local! {
    static CHECKER: RefCell<Option<Checker>> = const { RefCell::new(None) };
}

impl Checker {
    fn new() -> rquickjs::Result<Checker> {
        let runtime = Runtime::new()?;
        runtime.set_memory_limit(CHECK_MEMORY_BYTES);
        runtime.set_max_stack_size(CHECK_STACK_BYTES);
        let deadline = Rc::new(Cell::new(Instant::now()));
        let interrupt = Rc::clone(&deadline);
        runtime.set_interrupt_handler(Some(Box::new(move || Instant::now() >= interrupt.get())));
        Ok(Checker { context: new_context(&runtime)?, deadline, uses: 0 })
    }
}

/// Compile-only syntax check, in this thread's checker runtime.
fn check_syntax(source: &str) -> Result<(), CompileError> {
    CHECKER.with_borrow_mut(|slot| {
        let checker = match slot {
            Some(checker) => checker,
            None => slot.insert(Checker::new().map_err(|e| CompileError {
                line: None,
                message: format!("could not set up the syntax check: {e}"),
            })?),
        };
        checker.deadline.set(Instant::now() + CHECK_TIME);
        checker.uses += 1;
        let (result, clean) = compile_only(&checker.context, source);
        if !clean || checker.uses >= CHECKER_USES {
            *slot = None;
        }
        result
    })
}

/// Compiles `source` without running it; the flag says whether the runtime may be reused.
fn compile_only(context: &Context, source: &str) -> (Result<(), CompileError>, bool) {
    context.with(|ctx| {
        // SAFETY: sets QuickJS's stack reference point to the current frame.
        unsafe { qjs::JS_UpdateStackTop(qjs::JS_GetRuntime(ctx.as_raw().as_ptr())) };
        let flags = qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_COMPILE_ONLY;
        match eval_raw(&ctx, &wrap_handler(source), HANDLER_FILE, flags) {
            Ok(_) => (Ok(()), true),
            Err(Error::Exception) => {
                let exception = ctx.catch();
                let (name, message, stack) = match exception.as_exception() {
                    Some(e) => (
                        e.get::<_, String>("name").unwrap_or_else(|_| "SyntaxError".to_owned()),
                        e.message().unwrap_or_default(),
                        e.stack().unwrap_or_default(),
                    ),
                    None => ("Error".to_owned(), "the handler could not be compiled".to_owned(), String::new()),
                };
                let (message, clean) = match (name.as_str(), message.as_str()) {
                    (_, "out of memory") => {
                        ("the handler is too large or complex to compile (out of memory)".to_owned(), false)
                    }
                    (_, "interrupted") => ("the handler took too long to compile".to_owned(), false),
                    ("RangeError", _) | (_, "stack overflow") => {
                        ("the handler is nested too deeply to compile".to_owned(), false)
                    }
                    _ => (format!("{name}: {message}"), true),
                };
                let error = CompileError { line: handler_line(&stack, source), message };
                (Err(error), clean)
            }
            Err(e) => {
                (Err(CompileError { line: None, message: format!("could not run the syntax check: {e}") }), false)
            }
        }
    })
}
