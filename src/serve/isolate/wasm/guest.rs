//! The QuickJS API as the module exports it, called from Rust.
//!
//! The module is quickjs-ng built for `wasm32-wasi` with the daemon's interface layer
//! (vendor/quickjs-wasm/interface.c). Its `JS_*` exports are QuickJS's own C API; on wasm32 a
//! `JSValue` is NaN-boxed into one `u64`, so values cross as `i64` with no boxing, and
//! pointers are offsets into the instance's linear memory. Every call here runs guest code,
//! so every call is `call_async`: a long one yields at epoch deadlines like any other turn.
//!
//! Nothing returned by the guest is trusted: a pointer is bounds-checked before it is read,
//! a length is capped, and a value of the wrong type is an error, never a panic.

use wasmtime::{AsContext, AsContextMut, Instance, Memory, Result, TypedFunc, bail};

/// A QuickJS `JSValue` (NaN-boxed on wasm32).
pub type JsValue = i64;

/// Tags of `JSValue`s (quickjs.h, `JS_VALUE_GET_TAG`: the high 32 bits).
pub mod tag {
    pub const OBJECT: i32 = -1;
    pub const STRING: i32 = -7;
    pub const STRING_ROPE: i32 = -6;
    pub const INT: i32 = 0;
    pub const BOOL: i32 = 1;
    pub const NULL: i32 = 2;
    pub const UNDEFINED: i32 = 3;
    pub const EXCEPTION: i32 = 6;
}

pub const fn make(tag: i32, payload: u32) -> JsValue {
    (((tag as u32 as u64) << 32) | payload as u64) as i64
}

pub const UNDEFINED: JsValue = make(tag::UNDEFINED, 0);
pub const NULL: JsValue = make(tag::NULL, 0);

pub fn tag_of(value: JsValue) -> i32 {
    (value as u64 >> 32) as u32 as i32
}

pub fn is_exception(value: JsValue) -> bool {
    tag_of(value) == tag::EXCEPTION
}

pub fn is_string(value: JsValue) -> bool {
    matches!(tag_of(value), tag::STRING | tag::STRING_ROPE)
}

pub fn is_object(value: JsValue) -> bool {
    tag_of(value) == tag::OBJECT
}

pub fn as_bool(value: JsValue) -> Option<bool> {
    (tag_of(value) == tag::BOOL).then_some(value as u32 != 0)
}

pub fn as_int(value: JsValue) -> Option<i32> {
    (tag_of(value) == tag::INT).then_some(value as u32 as i32)
}

/// `JS_EVAL_TYPE_GLOBAL`, `JS_EVAL_FLAG_STRICT`, `JS_EVAL_FLAG_COMPILE_ONLY` (quickjs.h).
pub const EVAL_GLOBAL: i32 = 0;
pub const EVAL_STRICT: i32 = 1 << 3;
pub const EVAL_COMPILE_ONLY: i32 = 1 << 5;

/// `JS_WRITE_OBJ_BYTECODE` and `JS_READ_OBJ_BYTECODE` (quickjs.h): functions as bytecode.
const WRITE_OBJ_BYTECODE: i32 = 1;
const READ_OBJ_BYTECODE: i32 = 1;

/// `JSPromiseStateEnum`.
pub const PROMISE_PENDING: i32 = 0;
pub const PROMISE_FULFILLED: i32 = 1;

/// The exports of one instance the daemon uses. `TypedFunc`s are handles into the store, so
/// this is cheap to copy into a host function.
#[derive(Clone)]
pub struct Guest {
    pub memory: Memory,
    /// The `JSContext *` (the image's one context).
    pub ctx: i32,
    malloc: TypedFunc<i32, i32>,
    free: TypedFunc<i32, ()>,
    set_memory_limit: TypedFunc<i32, ()>,
    set_max_stack_size: TypedFunc<i32, ()>,
    execute_pending_job: TypedFunc<(), i32>,
    eval: TypedFunc<(i32, i32, i32, i32, i32), i64>,
    eval_function: TypedFunc<(i32, i64), i64>,
    write_object: TypedFunc<(i32, i32, i64, i32), i32>,
    read_object: TypedFunc<(i32, i32, i32, i32), i64>,
    js_free: TypedFunc<(i32, i32), ()>,
    parse_json: TypedFunc<(i32, i32, i32, i32), i64>,
    call: TypedFunc<(i32, i64, i64, i32, i32), i64>,
    call_constructor: TypedFunc<(i32, i64, i32, i32), i64>,
    promise_state: TypedFunc<(i32, i64), i32>,
    promise_result: TypedFunc<(i32, i64), i64>,
    json_stringify: TypedFunc<(i32, i64, i64, i64), i64>,
    to_cstring: TypedFunc<(i32, i32, i64, i32), i32>,
    free_cstring: TypedFunc<(i32, i32), ()>,
    get_exception: TypedFunc<i32, i64>,
    throw: TypedFunc<(i32, i64), i64>,
    throw_out_of_memory: TypedFunc<i32, i64>,
    new_string: TypedFunc<(i32, i32, i32), i64>,
    new_number: TypedFunc<(i32, f64), i64>,
    new_array_buffer_copy: TypedFunc<(i32, i32, i32), i64>,
    new_uint8_array_copy: TypedFunc<(i32, i32, i32), i64>,
    get_uint8_array: TypedFunc<(i32, i32, i64), i32>,
    get_length: TypedFunc<(i32, i64, i32), i32>,
    get_index: TypedFunc<(i32, i64, i32), i64>,
    set_index: TypedFunc<(i32, i64, i32, i64), i32>,
    set_property: TypedFunc<(i32, i64, i32, i64), i32>,
    to_float64: TypedFunc<(i32, i32, i64), i32>,
    is_promise: TypedFunc<i64, i32>,
    new_host_function: TypedFunc<(i32, i32, i32), i32>,
    run_gc: TypedFunc<(), ()>,
}

impl Guest {
    /// Looks up every export the daemon uses; an error names the first one missing or of the
    /// wrong type (a module that does not have the ABI this code was written against).
    pub(super) fn new(mut store: impl AsContextMut, instance: &Instance, ctx: i32) -> Result<Guest> {
        let mut store = store.as_context_mut();
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("the QuickJS module exports no memory"))?;
        macro_rules! f {
            ($name:literal) => {
                instance.get_typed_func(&mut store, $name).map_err(|e| e.context(concat!("QuickJS export ", $name)))?
            };
        }
        Ok(Guest {
            memory,
            ctx,
            malloc: f!("wasm_malloc"),
            free: f!("wasm_free"),
            set_memory_limit: f!("qjs_set_memory_limit"),
            set_max_stack_size: f!("qjs_set_max_stack_size"),
            execute_pending_job: f!("qjs_execute_pending_job"),
            eval: f!("JS_Eval"),
            eval_function: f!("JS_EvalFunction"),
            write_object: f!("JS_WriteObject"),
            read_object: f!("JS_ReadObject"),
            js_free: f!("js_free"),
            parse_json: f!("JS_ParseJSON"),
            call: f!("JS_Call"),
            call_constructor: f!("JS_CallConstructor"),
            promise_state: f!("JS_PromiseState"),
            promise_result: f!("JS_PromiseResult"),
            json_stringify: f!("JS_JSONStringify"),
            to_cstring: f!("JS_ToCStringLen2"),
            free_cstring: f!("JS_FreeCString"),
            get_exception: f!("JS_GetException"),
            throw: f!("JS_Throw"),
            throw_out_of_memory: f!("JS_ThrowOutOfMemory"),
            new_string: f!("JS_NewStringLen"),
            new_number: f!("JS_NewNumber"),
            new_array_buffer_copy: f!("JS_NewArrayBufferCopy"),
            new_uint8_array_copy: f!("JS_NewUint8ArrayCopy"),
            get_uint8_array: f!("JS_GetUint8Array"),
            get_length: f!("JS_GetLength"),
            get_index: f!("JS_GetPropertyUint32"),
            set_index: f!("JS_SetPropertyUint32"),
            set_property: f!("JS_SetPropertyStr"),
            to_float64: f!("JS_ToFloat64"),
            is_promise: f!("JS_IsPromise"),
            new_host_function: f!("qjs_new_host_function"),
            run_gc: f!("qjs_run_gc"),
        })
    }

    // ---- memory -------------------------------------------------------------------------

    /// Copies `bytes` into a new `malloc`ed block (with a NUL after them, which `JS_Eval` and
    /// C strings want), returning its address.
    pub(super) async fn put(&self, mut store: impl AsContextMut<Data: Send>, bytes: &[u8]) -> Result<i32> {
        let size = i32::try_from(bytes.len() + 1).map_err(|_| wasmtime::Error::msg("value too large"))?;
        let ptr = self.malloc.call_async(&mut store, size).await?;
        if ptr == 0 {
            bail!(OutOfMemory);
        }
        let memory = self.memory.data_mut(&mut store);
        let start = ptr as u32 as usize;
        let Some(slot) = memory.get_mut(start..start + bytes.len() + 1) else {
            bail!("malloc returned a block outside memory");
        };
        slot[..bytes.len()].copy_from_slice(bytes);
        slot[bytes.len()] = 0;
        Ok(ptr)
    }

    pub(super) async fn free(&self, mut store: impl AsContextMut<Data: Send>, ptr: i32) -> Result<()> {
        self.free.call_async(&mut store, ptr).await
    }

    /// Reads `len` bytes at `ptr`.
    pub(super) fn read<'a, T: 'static>(
        &self,
        store: impl Into<wasmtime::StoreContext<'a, T>>,
        ptr: i32,
        len: usize,
    ) -> Result<&'a [u8]> {
        let memory = self.memory.data(store);
        let start = ptr as u32 as usize;
        match start.checked_add(len).and_then(|end| memory.get(start..end)) {
            Some(bytes) => Ok(bytes),
            None => bail!("a guest pointer is outside memory"),
        }
    }

    pub(super) fn read_u32(&self, store: impl AsContext, ptr: i32) -> Result<u32> {
        let memory = self.memory.data(&store);
        let start = ptr as u32 as usize;
        match memory.get(start..start + 4) {
            Some(bytes) => Ok(u32::from_le_bytes(bytes.try_into().expect("four bytes"))),
            None => bail!("a guest pointer is outside memory"),
        }
    }

    pub(super) fn read_u64(&self, store: impl AsContext, ptr: i32) -> Result<u64> {
        let memory = self.memory.data(&store);
        let start = ptr as u32 as usize;
        match memory.get(start..start + 8) {
            Some(bytes) => Ok(u64::from_le_bytes(bytes.try_into().expect("eight bytes"))),
            None => bail!("a guest pointer is outside memory"),
        }
    }

    pub(super) fn write_u64s(&self, mut store: impl AsContextMut, ptr: i32, values: &[i64]) -> Result<()> {
        let memory = self.memory.data_mut(&mut store);
        let start = ptr as u32 as usize;
        let Some(slot) = memory.get_mut(start..start + values.len() * 8) else {
            bail!("a guest pointer is outside memory");
        };
        for (chunk, value) in slot.chunks_exact_mut(8).zip(values) {
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        Ok(())
    }

    // ---- limits and jobs ----------------------------------------------------------------

    pub(super) async fn set_limits(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        memory: usize,
        stack: usize,
    ) -> Result<()> {
        let memory = i32::try_from(memory).unwrap_or(i32::MAX);
        let stack = i32::try_from(stack).unwrap_or(i32::MAX);
        self.set_memory_limit.call_async(&mut store, memory).await?;
        self.set_max_stack_size.call_async(&mut store, stack).await
    }

    /// Runs one pending promise job: `Ok(true)` if one ran, `Ok(false)` if none was pending,
    /// `Err` for a trap. A job that threw has left its exception pending (`< 0`), returned as
    /// `Ok(true)` too: promise jobs that throw reject their promise, which the caller sees.
    pub(super) async fn run_job(&self, mut store: impl AsContextMut<Data: Send>) -> Result<JobRan> {
        Ok(match self.execute_pending_job.call_async(&mut store, ()).await? {
            0 => JobRan::None,
            n if n < 0 => JobRan::Threw,
            _ => JobRan::Ran,
        })
    }

    pub(super) async fn run_gc(&self, mut store: impl AsContextMut<Data: Send>) -> Result<()> {
        self.run_gc.call_async(&mut store, ()).await
    }

    // ---- values -------------------------------------------------------------------------

    /// `JS_Eval` of `source` as a global script named `file` (a NUL-terminated guest string).
    pub(super) async fn eval(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        source: &str,
        file: i32,
        flags: i32,
    ) -> Result<JsValue> {
        let ptr = self.put(&mut store, source.as_bytes()).await?;
        let len = i32::try_from(source.len()).map_err(|_| wasmtime::Error::msg("source too large"))?;
        let value = self.eval.call_async(&mut store, (self.ctx, ptr, len, file, flags)).await?;
        self.free(&mut store, ptr).await?;
        Ok(value)
    }

    /// Compiles `source` as a script without running it and returns the compiled function with
    /// its bytecode (`JS_WriteObject`), or the exception value with nothing when it does not
    /// compile. `scratch` receives the bytecode's length.
    pub(super) async fn compile(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        source: &str,
        file: i32,
        scratch: i32,
    ) -> Result<(JsValue, Option<Vec<u8>>)> {
        let compiled = self.eval(&mut store, source, file, EVAL_GLOBAL | EVAL_COMPILE_ONLY).await?;
        if is_exception(compiled) {
            return Ok((compiled, None));
        }
        let ptr = self.write_object.call_async(&mut store, (self.ctx, scratch, compiled, WRITE_OBJ_BYTECODE)).await?;
        if ptr == 0 {
            return Ok((compiled, None));
        }
        let len = self.read_u32(&store, scratch)? as usize;
        let bytecode = self.read(store.as_context(), ptr, len)?.to_vec();
        self.js_free.call_async(&mut store, (self.ctx, ptr)).await?;
        Ok((compiled, Some(bytecode)))
    }

    /// Runs what [`Guest::compile`] compiled, as `JS_Eval` would have.
    pub(super) async fn run_compiled(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        compiled: JsValue,
    ) -> Result<JsValue> {
        self.eval_function.call_async(&mut store, (self.ctx, compiled)).await
    }

    /// Reads bytecode written by [`Guest::compile`] back into a compiled function, to run with
    /// [`Guest::run_compiled`].
    pub(super) async fn read_compiled(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        bytecode: &[u8],
    ) -> Result<JsValue> {
        let ptr = self.put(&mut store, bytecode).await?;
        let len = i32::try_from(bytecode.len()).map_err(|_| wasmtime::Error::msg("bytecode too large"))?;
        let value = self.read_object.call_async(&mut store, (self.ctx, ptr, len, READ_OBJ_BYTECODE)).await?;
        self.free(&mut store, ptr).await?;
        Ok(value)
    }

    pub(super) async fn parse_json(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        json: &str,
        file: i32,
    ) -> Result<JsValue> {
        let ptr = self.put(&mut store, json.as_bytes()).await?;
        let len = i32::try_from(json.len()).map_err(|_| wasmtime::Error::msg("JSON too large"))?;
        let value = self.parse_json.call_async(&mut store, (self.ctx, ptr, len, file)).await?;
        self.free(&mut store, ptr).await?;
        Ok(value)
    }

    /// Calls `function` with `args`, using `scratch` (room for at least `args.len()` values).
    pub(super) async fn call(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        function: JsValue,
        this: JsValue,
        args: &[JsValue],
        scratch: i32,
    ) -> Result<JsValue> {
        self.write_u64s(&mut store, scratch, args)?;
        let argc = args.len() as i32;
        self.call.call_async(&mut store, (self.ctx, function, this, argc, scratch)).await
    }

    pub(super) async fn construct(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        constructor: JsValue,
        args: &[JsValue],
        scratch: i32,
    ) -> Result<JsValue> {
        self.write_u64s(&mut store, scratch, args)?;
        let argc = args.len() as i32;
        self.call_constructor.call_async(&mut store, (self.ctx, constructor, argc, scratch)).await
    }

    pub(super) async fn promise_state(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        promise: JsValue,
    ) -> Result<i32> {
        self.promise_state.call_async(&mut store, (self.ctx, promise)).await
    }

    pub(super) async fn promise_result(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        promise: JsValue,
    ) -> Result<JsValue> {
        self.promise_result.call_async(&mut store, (self.ctx, promise)).await
    }

    pub(super) async fn is_promise(&self, mut store: impl AsContextMut<Data: Send>, value: JsValue) -> Result<bool> {
        Ok(self.is_promise.call_async(&mut store, value).await? != 0)
    }

    /// `JSON.stringify(value)`: a string value, `undefined`, or an exception.
    pub(super) async fn stringify(&self, mut store: impl AsContextMut<Data: Send>, value: JsValue) -> Result<JsValue> {
        self.json_stringify.call_async(&mut store, (self.ctx, value, UNDEFINED, UNDEFINED)).await
    }

    /// Calls `f` with the WTF-8 bytes of `value` converted to a string (`ToString`, which may
    /// run JS and throw: `None` then, with the exception pending).
    pub(super) async fn with_string<R>(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        value: JsValue,
        scratch: i32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let ptr = self.to_cstring.call_async(&mut store, (self.ctx, scratch, value, 0)).await?;
        if ptr == 0 {
            return Ok(None);
        }
        let len = self.read_u32(&store, scratch)? as usize;
        let out = f(self.read(store.as_context(), ptr, len)?);
        self.free_cstring.call_async(&mut store, (self.ctx, ptr)).await?;
        Ok(Some(out))
    }

    /// The WTF-8 bytes of a string value as a C string in guest memory (address, length), to
    /// be freed with [`Guest::free_c_string`].
    pub(super) async fn c_string(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        value: JsValue,
        scratch: i32,
    ) -> Result<(i32, usize)> {
        let ptr = self.to_cstring.call_async(&mut store, (self.ctx, scratch, value, 0)).await?;
        if ptr == 0 {
            bail!(OutOfMemory);
        }
        Ok((ptr, self.read_u32(&store, scratch)? as usize))
    }

    pub(super) async fn free_c_string(&self, mut store: impl AsContextMut<Data: Send>, ptr: i32) -> Result<()> {
        self.free_cstring.call_async(&mut store, (self.ctx, ptr)).await
    }

    /// The guest address and length of the bytes of a `Uint8Array`; `None` if it is not one.
    pub(super) async fn uint8_array(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        value: JsValue,
        scratch: i32,
    ) -> Result<Option<(i32, usize)>> {
        let ptr = self.get_uint8_array.call_async(&mut store, (self.ctx, scratch, value)).await?;
        if ptr == 0 {
            return Ok(None);
        }
        Ok(Some((ptr, self.read_u32(&store, scratch)? as usize)))
    }

    /// A new string from bytes already in guest memory (UTF-8).
    pub(super) async fn new_string_at(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        ptr: i32,
        len: usize,
    ) -> Result<JsValue> {
        self.new_string.call_async(&mut store, (self.ctx, ptr, len as i32)).await
    }

    pub(super) async fn new_string(&self, mut store: impl AsContextMut<Data: Send>, text: &str) -> Result<JsValue> {
        let ptr = self.put(&mut store, text.as_bytes()).await?;
        let value = self.new_string_at(&mut store, ptr, text.len()).await?;
        self.free(&mut store, ptr).await?;
        Ok(value)
    }

    pub(super) async fn new_number(&self, mut store: impl AsContextMut<Data: Send>, number: f64) -> Result<JsValue> {
        self.new_number.call_async(&mut store, (self.ctx, number)).await
    }

    pub(super) async fn new_array_buffer(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        bytes: &[u8],
    ) -> Result<JsValue> {
        let ptr = self.put(&mut store, bytes).await?;
        let value = self.new_array_buffer_copy.call_async(&mut store, (self.ctx, ptr, bytes.len() as i32)).await?;
        self.free(&mut store, ptr).await?;
        Ok(value)
    }

    pub(super) async fn new_uint8_array_at(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        ptr: i32,
        len: usize,
    ) -> Result<JsValue> {
        self.new_uint8_array_copy.call_async(&mut store, (self.ctx, ptr, len as i32)).await
    }

    pub(super) async fn new_uint8_array(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        bytes: &[u8],
    ) -> Result<JsValue> {
        let ptr = self.put(&mut store, bytes).await?;
        let value = self.new_uint8_array_at(&mut store, ptr, bytes.len()).await?;
        self.free(&mut store, ptr).await?;
        Ok(value)
    }

    /// `value.length` as an integer (`None` if reading it threw).
    pub(super) async fn length(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        value: JsValue,
        scratch: i32,
    ) -> Result<Option<u64>> {
        if self.get_length.call_async(&mut store, (self.ctx, value, scratch)).await? < 0 {
            return Ok(None);
        }
        Ok(Some(self.read_u64(&store, scratch)?))
    }

    pub(super) async fn get_index(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        object: JsValue,
        index: u32,
    ) -> Result<JsValue> {
        self.get_index.call_async(&mut store, (self.ctx, object, index as i32)).await
    }

    /// `object[index] = value`, taking ownership of `value`.
    pub(super) async fn set_index(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        object: JsValue,
        index: u32,
        value: JsValue,
    ) -> Result<bool> {
        Ok(self.set_index.call_async(&mut store, (self.ctx, object, index as i32, value)).await? >= 0)
    }

    /// `object[name] = value` (`name` a NUL-terminated guest string), taking ownership of `value`.
    pub(super) async fn set_property(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        object: JsValue,
        name: i32,
        value: JsValue,
    ) -> Result<bool> {
        Ok(self.set_property.call_async(&mut store, (self.ctx, object, name, value)).await? >= 0)
    }

    pub(super) async fn to_number(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        value: JsValue,
        scratch: i32,
    ) -> Result<Option<f64>> {
        if self.to_float64.call_async(&mut store, (self.ctx, scratch, value)).await? < 0 {
            return Ok(None);
        }
        Ok(Some(f64::from_bits(self.read_u64(&store, scratch)?)))
    }

    /// Takes the pending exception.
    pub(super) async fn exception(&self, mut store: impl AsContextMut<Data: Send>) -> Result<JsValue> {
        self.get_exception.call_async(&mut store, self.ctx).await
    }

    /// Makes `value` the pending exception (taking ownership of it).
    pub(super) async fn throw(&self, mut store: impl AsContextMut<Data: Send>, value: JsValue) -> Result<()> {
        self.throw.call_async(&mut store, (self.ctx, value)).await.map(drop)
    }

    /// Throws QuickJS's own "out of memory" `InternalError`.
    pub(super) async fn throw_out_of_memory(&self, mut store: impl AsContextMut<Data: Send>) -> Result<()> {
        self.throw_out_of_memory.call_async(&mut store, self.ctx).await.map(drop)
    }

    /// A function that calls the `env.host_call` import with `name`; a boxed (`malloc`ed)
    /// `JSValue *`.
    pub(super) async fn new_host_function(
        &self,
        mut store: impl AsContextMut<Data: Send>,
        name: &str,
        arity: i32,
    ) -> Result<JsValue> {
        let ptr = self.put(&mut store, name.as_bytes()).await?;
        let boxed = self.new_host_function.call_async(&mut store, (ptr, name.len() as i32, arity)).await?;
        self.free(&mut store, ptr).await?;
        self.unbox(&mut store, boxed).await
    }

    /// The value in a `malloc`ed `JSValue` box, freeing the box (the value's reference moves
    /// to the caller).
    pub(super) async fn unbox(&self, mut store: impl AsContextMut<Data: Send>, boxed: i32) -> Result<JsValue> {
        if boxed == 0 {
            bail!(OutOfMemory);
        }
        let value = self.read_u64(&store, boxed)? as i64;
        self.free(&mut store, boxed).await?;
        Ok(value)
    }

    /// A `malloc`ed box holding `value` (what `host_call` returns).
    pub(super) async fn boxed(&self, mut store: impl AsContextMut<Data: Send>, value: JsValue) -> Result<i32> {
        let ptr = self.malloc.call_async(&mut store, 8).await?;
        if ptr == 0 {
            bail!(OutOfMemory);
        }
        self.write_u64s(&mut store, ptr, &[value])?;
        Ok(ptr)
    }
}

/// What [`Guest::run_job`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRan {
    None,
    Ran,
    Threw,
}

/// The guest's `malloc` failed: the call is out of memory.
#[derive(Debug)]
pub struct OutOfMemory;

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the isolate is out of memory")
    }
}

impl std::error::Error for OutOfMemory {}
