//! The WebAssembly engine: QuickJS compiled to WebAssembly, run by Wasmtime, each call in a
//! fresh instance made from a pre-initialised image.
//!
//! * **Fresh per call, cheaply.** At start the daemon instantiates the vendored module once,
//!   creates QuickJS's runtime and context, installs the natives and runs the prelude, then
//!   turns that memory into an image (`image.rs`). A call instantiates the image with Wasmtime's
//!   pooling allocator, which maps it copy-on-write, so the call starts with the prelude run and
//!   only the pages it writes cost anything; dropping the instance returns the slot. Nothing of
//!   one call can reach another: each has its own linear memory.
//! * **Preemptible everywhere.** Wasmtime's epoch interruption checks a deadline at every loop
//!   back-edge and function entry of the compiled module, QuickJS's own C built-ins included,
//!   so there is no native step a limit cannot stop. A ticker thread advances the epoch every
//!   [`TICK`]; at each deadline the call checks its CPU and wall limits (ending the call with a
//!   trap when one is past) and otherwise yields to the worker's other calls, so a turn that
//!   burns CPU delays them by at most a slice.
//! * **A second wall.** Whatever QuickJS does, even corrupted by a bug, it can only touch its
//!   own linear memory and call the imports below: `host_call` (the natives), the clock, the
//!   random source and discarded output. The module has no file, socket or process access to
//!   give it.
//!
//! Every call into the guest is `call_async`, so it can yield at an epoch deadline; natives run
//! as async host functions that call back into the guest to read and build values
//! (`natives.rs`). Values cross as NaN-boxed `JSValue`s (`guest.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::LocalBoxFuture;
use wasmtime::{Engine as Wasmtime, InstancePre, Linker, Module, Result, Store};

use super::engine::{Engine, HostContext};
use super::invocation::{CompileError, Completion, Invocation};

mod bytecode;
mod cache;
mod call;
mod engine_config;
mod guest;
mod host;
mod image;
mod memory;
mod natives;
mod source;
mod state;
mod web;

pub use cache::{CacheUse, CompileCache};
use engine_config::config;
use guest::{EVAL_GLOBAL, EVAL_STRICT, Guest, is_exception};
use host::Host;
use image::Image;
use source::{HANDLER_FILE, PRELUDE_SOURCE, WRAPPER_HEAD, handler_line, wrap};

/// The QuickJS module, built from source by vendor/quickjs-wasm/build.sh.
const QUICKJS_WASM: &[u8] = include_bytes!("wasm/vendor/quickjs.wasm");

/// How often the epoch advances: the granularity of CPU and wall checks inside a turn.
const TICK: Duration = Duration::from_millis(2);
/// QuickJS's intrinsics, as `qjs_init2`'s mask: all but `performance` (bit 10).
const INTRINSICS: i32 = 0x1fff & !(1 << 10);
/// Instance slots beyond the calls in flight, for syntax checks, which are not admitted: they run
/// on tokio's blocking threads (512 at most) or, for code-mode scripts, its async ones.
const CHECK_SLOTS: usize = 1_024;
/// Memory mappings the pool makes: two per slot from the start (each fiber stack and its guard
/// page), and about three more per live instance (its image, the memory it grew past it, the
/// rest of its reservation). Everything else in the daemon needs far fewer than the margin.
const MAPPINGS_PER_SLOT: u64 = 5;
const MAPPINGS_MARGIN: u64 = 2_048;

/// The engine: the compiled image and how to instantiate it.
pub struct WasmEngine {
    wasmtime: Wasmtime,
    pre: InstancePre<Host>,
    image: Arc<Image>,
    cache_use: CacheUse,
}

static SHARED: OnceLock<Result<Arc<WasmEngine>, EngineUnavailable>> = OnceLock::new();

/// Why the process-wide engine could not be built, with its causes. It is kept: every later
/// caller gets the same answer, since nothing changes between attempts in one process.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0:#}")]
pub struct EngineUnavailable(Arc<wasmtime::Error>);

impl WasmEngine {
    /// The process-wide engine, built on first use with room for `max_in_flight` calls (and
    /// syntax checks beside them): from `cache` when it holds this build's compiled image, else
    /// compiled (about a second: the module twice and the prelude once) and stored there. The
    /// first caller's settings are the ones used.
    pub fn shared(cache: &CompileCache, max_in_flight: usize) -> Result<Arc<WasmEngine>, EngineUnavailable> {
        SHARED
            .get_or_init(|| {
                let slots = u32::try_from(max_in_flight.saturating_add(CHECK_SLOTS)).unwrap_or(u32::MAX);
                WasmEngine::build(cache, slots).map(Arc::new).map_err(|e| EngineUnavailable(Arc::new(e)))
            })
            .clone()
    }

    /// The engine this process built, or (in tests and tools that start no daemon) one built now
    /// for the default settings without a cache.
    pub fn process_wide() -> Result<Arc<WasmEngine>, EngineUnavailable> {
        Self::shared(&CompileCache::off(), crate::config::SandboxConfig::default().max_in_flight)
    }

    /// A new engine with room for `slots` instances at once (the daemon uses
    /// [`WasmEngine::shared`]; this is for measuring start-up and testing the cache). Each slot
    /// reserves address space for a whole 4 GiB memory, so a process has room for about 30,000.
    pub fn build(cache: &CompileCache, slots: u32) -> Result<WasmEngine> {
        check_map_count(slots)?;
        let wasmtime = Wasmtime::new(&config(slots))?;
        start_ticker(&wasmtime);
        let linker = call::linker(&wasmtime)?;
        let (module, image, cache_use) = match cache.load(&wasmtime) {
            Some((module, image)) => (module, image, CacheUse::Loaded),
            None => {
                let original = Module::new(&wasmtime, QUICKJS_WASM)?;
                let (snapshot, image) =
                    futures_util::FutureExt::now_or_never(build_image(&wasmtime, &linker, &original))
                        .ok_or_else(|| wasmtime::Error::msg("building the image had to wait"))??;
                let module = Module::new(&wasmtime, &snapshot)?;
                let cache_use = cache.store(&module, &image);
                (module, image, cache_use)
            }
        };
        let pre = linker.instantiate_pre(&module)?;
        Ok(WasmEngine { wasmtime, pre, image: Arc::new(image), cache_use })
    }

    /// Makes a fresh instance of the image and drops it, as every call does around its work:
    /// what the serving bench measures as an isolate's creation and teardown.
    #[doc(hidden)]
    pub fn instantiate_and_drop(&self) -> Result<()> {
        let mut store = Store::new(&self.wasmtime, Host::for_image());
        store.set_epoch_deadline(u64::MAX / 2);
        futures_util::FutureExt::now_or_never(self.pre.instantiate_async(&mut store))
            .ok_or_else(|| wasmtime::Error::msg("instantiating had to wait"))??;
        Ok(())
    }

    /// Whether this engine came from the compile cache.
    pub fn cache_use(&self) -> CacheUse {
        self.cache_use
    }
}

/// Refuses a slot count the kernel's limit on memory mappings (`vm.max_map_count`) cannot hold
/// once every slot is in use: past it, mapping fails in the middle of a call, and an allocation
/// anywhere in the daemon can fail with it.
fn check_map_count(slots: u32) -> Result<()> {
    let Some(limit) =
        std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse::<u64>().ok())
    else {
        return Ok(());
    };
    let needed = u64::from(slots) * MAPPINGS_PER_SLOT + MAPPINGS_MARGIN;
    if needed > limit {
        let fits = (limit.saturating_sub(MAPPINGS_MARGIN) / MAPPINGS_PER_SLOT).saturating_sub(CHECK_SLOTS as u64);
        wasmtime::bail!(
            "[sandbox] max_in_flight needs about {needed} memory mappings with every call in flight, and the kernel \
             allows {limit} (vm.max_map_count): lower max_in_flight to at most {fits}, or raise the limit \
             (sysctl -w vm.max_map_count={})",
            needed.next_power_of_two()
        );
    }
    Ok(())
}

/// Advances every engine's epoch each [`TICK`], for as long as the process runs.
fn start_ticker(engine: &Wasmtime) {
    static STARTED: AtomicBool = AtomicBool::new(false);
    // Weak, so that an engine dropped (in tests) returns its address space.
    static ENGINES: std::sync::Mutex<Vec<wasmtime::EngineWeak>> = std::sync::Mutex::new(Vec::new());
    ENGINES.lock().unwrap_or_else(|p| p.into_inner()).push(engine.weak());
    if STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let _ = std::thread::Builder::new().name("mcpbootd-epoch".into()).spawn(|| {
        loop {
            std::thread::sleep(TICK);
            ENGINES.lock().unwrap_or_else(|p| p.into_inner()).retain(|engine| match engine.upgrade() {
                Some(engine) => {
                    engine.increment_epoch();
                    true
                }
                None => false,
            });
        }
    });
}

/// Runs QuickJS's set-up and the prelude in an instance of the original module and returns
/// the module rewritten to start from the result, with where things are in it.
async fn build_image(wasmtime: &Wasmtime, linker: &Linker<Host>, original: &Module) -> Result<(Vec<u8>, Image)> {
    let mut store = Store::new(wasmtime, Host::for_image());
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = linker.instantiate_async(&mut store, original).await?;
    instance.get_typed_func::<(), ()>(&mut store, "_initialize")?.call_async(&mut store, ()).await?;
    if instance.get_typed_func::<i32, i32>(&mut store, "qjs_init2")?.call_async(&mut store, INTRINSICS).await? != 0 {
        wasmtime::bail!("QuickJS could not create its runtime");
    }
    let ctx_fn = instance.get_typed_func::<(), i32>(&mut store, "qjs_get_context_ptr")?;
    let ctx = ctx_fn.call_async(&mut store, ()).await?;
    let guest = Guest::new(&mut store, &instance, ctx)?;

    let strings = async |store: &mut Store<Host>, text: &str| guest.put(store, text.as_bytes()).await;
    let handler_file = strings(&mut store, HANDLER_FILE).await?;
    let arguments_file = strings(&mut store, "arguments").await?;
    let prelude_file = strings(&mut store, "prelude").await?;
    let max_elements_name = strings(&mut store, "maxElements").await?;
    let loop_scratch = strings(&mut store, &"\0".repeat(63)).await?;
    let native_scratch = strings(&mut store, &"\0".repeat(63)).await?;

    // The bindings object: one host function per native, and `maxElements` set per call.
    let bindings = guest.eval(&mut store, "({})", prelude_file, EVAL_GLOBAL).await?;
    for (name, arity) in natives::NAMES {
        let function = guest.new_host_function(&mut store, name, *arity).await?;
        let key = strings(&mut store, name).await?;
        if !guest.set_property(&mut store, bindings, key, function).await? {
            wasmtime::bail!("could not install the native {name}");
        }
    }
    let prelude = guest.eval(&mut store, PRELUDE_SOURCE, prelude_file, EVAL_GLOBAL | EVAL_STRICT).await?;
    let hooks = guest.call(&mut store, prelude, guest::UNDEFINED, &[bindings], loop_scratch).await?;
    if is_exception(hooks) || !guest::is_object(hooks) {
        let thrown = guest.exception(&mut store).await?;
        let text =
            guest.with_string(&mut store, thrown, native_scratch, |b| String::from_utf8_lossy(b).into_owned()).await?;
        wasmtime::bail!("the prelude failed: {}", text.unwrap_or_default());
    }
    let mut hook_values = [0; 6];
    for (index, slot) in hook_values.iter_mut().enumerate() {
        *slot = guest.get_index(&mut store, hooks, index as u32).await?;
    }
    // Math.random, reseeded per call: the image would otherwise replay one sequence forever.
    let random = guest.new_host_function(&mut store, "random", 0).await?;
    let install_random = guest
        .eval(
            &mut store,
            "(function (random) { Object.defineProperty(Math, 'random', { value: random, writable: true, configurable: true, enumerable: false }); })",
            prelude_file,
            EVAL_GLOBAL | EVAL_STRICT,
        )
        .await?;
    guest.call(&mut store, install_random, guest::UNDEFINED, &[random], loop_scratch).await?;
    // The error constructors natives throw with, kept before any handler can replace them.
    let type_error = guest.eval(&mut store, "TypeError", prelude_file, EVAL_GLOBAL).await?;
    let range_error = guest.eval(&mut store, "RangeError", prelude_file, EVAL_GLOBAL).await?;
    guest.run_gc(&mut store).await?;
    // Last, so that everything above is in the image and stays clean in calls (`image.rs`).
    let freeze = instance.get_typed_func::<(), i32>(&mut store, "qjs_freeze_image")?;
    if freeze.call_async(&mut store, ()).await? != 0 {
        wasmtime::bail!("QuickJS could not freeze the image");
    }

    let stack_pointer = instance
        .get_global(&mut store, "__stack_pointer")
        .ok_or_else(|| wasmtime::Error::msg("the QuickJS module exports no __stack_pointer"))?;
    let stack_top = stack_pointer.get(&mut store).i32().unwrap_or(0);
    match image::lowest_data_address(QUICKJS_WASM)? {
        Some(lowest) if lowest >= stack_top as u32 => {}
        lowest => wasmtime::bail!(
            "the QuickJS module's shadow stack (top {stack_top:#x}) does not sit below its data (from {lowest:?}); \
             a stack overflow would overwrite data instead of trapping"
        ),
    }
    // `__stack_pointer` is the module's only mutable global (checked by `image::snapshot`).
    let stack_index = global_index(QUICKJS_WASM, "__stack_pointer")?;
    let globals = [(stack_index, image::GlobalValue::I32(stack_top))];
    let memory = guest.memory.data(&store).to_vec();
    let snapshot = image::snapshot(QUICKJS_WASM, &memory, &globals)?;
    let image = Image {
        ctx,
        hooks: hook_values,
        bindings,
        type_error,
        range_error,
        handler_file,
        arguments_file,
        max_elements_name,
        loop_scratch,
        native_scratch,
        memory_bytes: memory.len(),
        stack_top,
    };
    Ok((snapshot, image))
}

/// The index of the global a module exports as `name`.
fn global_index(module: &[u8], name: &str) -> Result<u32> {
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        if let wasmparser::Payload::ExportSection(reader) = payload? {
            for export in reader {
                let export = export?;
                if export.name == name && export.kind == wasmparser::ExternalKind::Global {
                    return Ok(export.index);
                }
            }
        }
    }
    wasmtime::bail!("the QuickJS module does not export the global {name}")
}

impl Engine for WasmEngine {
    fn name(&self) -> &'static str {
        "quickjs-wasm"
    }

    fn check(&self, source: &str) -> Result<(), CompileError> {
        check_syntax(self, source)
    }

    fn execute(&self, invocation: Invocation, host: HostContext) -> LocalBoxFuture<'static, Completion> {
        Box::pin(call::execute(self.pre.clone(), Arc::clone(&self.image), invocation, host))
    }
}

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine").field("image_bytes", &self.image.memory_bytes).finish_non_exhaustive()
    }
}

/// Compiles `source` as a handler body in a fresh instance without running it.
fn check_syntax(engine: &WasmEngine, source: &str) -> Result<(), CompileError> {
    let checked = futures_util::FutureExt::now_or_never(call::check(
        &engine.wasmtime,
        &engine.pre,
        &engine.image,
        &wrap(WRAPPER_HEAD, source),
    ));
    match checked {
        Some(Ok(None)) => Ok(()),
        Some(Ok(Some((message, stack)))) => Err(CompileError { line: handler_line(&stack, source), message }),
        Some(Err(e)) => Err(CompileError { line: None, message: format!("could not run the syntax check: {e:#}") }),
        None => Err(CompileError { line: None, message: "the syntax check had to wait".to_owned() }),
    }
}
