/*
 * The daemon's interface to QuickJS: the few functions it calls besides QuickJS's own C API
 * (quickjs.h's JS_* functions, which the module exports as they are).
 *
 * The module is a WASI reactor: no main; the daemon calls `_initialize`, then `qjs_init2`, and
 * from then on the exports below and the JS_* ones. Values cross the boundary as NaN-boxed
 * 64-bit JSValues, except where a function returns a JSValue "box": a malloc'ed JSValue the
 * daemon reads and frees (`wasm_free`).
 */

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quickjs.h"

#define EXPORT(name) __attribute__((export_name(#name)))

static JSRuntime *rt;
static JSContext *ctx;

/* ---- Allocation ---- */

/* QuickJS counts what it allocates (its GC threshold and memory usage are based on it) with
   the allocator's usable size; wasi-libc's dlmalloc can tell it. */
static void *rt_calloc(void *opaque, size_t count, size_t size)
{
    (void)opaque;
    return calloc(count, size);
}

static void *rt_malloc(void *opaque, size_t size)
{
    (void)opaque;
    return malloc(size);
}

static void rt_free(void *opaque, void *ptr)
{
    (void)opaque;
    free(ptr);
}

static void *rt_realloc(void *opaque, void *ptr, size_t size)
{
    (void)opaque;
    return realloc(ptr, size);
}

static size_t rt_usable_size(const void *ptr)
{
    return malloc_usable_size((void *)ptr);
}

static const JSMallocFunctions malloc_functions = {
    rt_calloc, rt_malloc, rt_free, rt_realloc, rt_usable_size,
};

EXPORT(wasm_malloc) void *wasm_malloc(size_t size)
{
    return malloc(size);
}

EXPORT(wasm_free) void wasm_free(void *ptr)
{
    free(ptr);
}

/* ---- Set-up ---- */

/* Bits of qjs_init2's mask, one per optional group of built-ins. */
enum {
    INTRINSIC_DATE = 1 << 0,
    INTRINSIC_EVAL = 1 << 1,
    INTRINSIC_REGEXP = 1 << 2,
    INTRINSIC_JSON = 1 << 3,
    INTRINSIC_PROXY = 1 << 4,
    INTRINSIC_MAP_SET = 1 << 5,
    INTRINSIC_TYPED_ARRAYS = 1 << 6,
    INTRINSIC_PROMISE = 1 << 7,
    INTRINSIC_BIG_INT = 1 << 8,
    INTRINSIC_WEAK_REF = 1 << 9,
    INTRINSIC_PERFORMANCE = 1 << 10,
    INTRINSIC_DOM_EXCEPTION = 1 << 11,
    INTRINSIC_ATOB_BTOA = 1 << 12,
};

/* Creates the runtime and its one context with the base objects and the built-ins `mask`
   names. 0 on success. */
EXPORT(qjs_init2) int qjs_init2(unsigned int mask)
{
    if (rt)
        return -1;
    rt = JS_NewRuntime2(&malloc_functions, NULL);
    if (!rt)
        return -1;
    ctx = JS_NewContextRaw(rt);
    if (!ctx || JS_AddIntrinsicBaseObjects(ctx) < 0) {
        JS_FreeRuntime(rt);
        rt = NULL;
        ctx = NULL;
        return -1;
    }
    if (mask & INTRINSIC_DATE) JS_AddIntrinsicDate(ctx);
    if (mask & INTRINSIC_EVAL) JS_AddIntrinsicEval(ctx);
    if (mask & INTRINSIC_REGEXP) {
        JS_AddIntrinsicRegExpCompiler(ctx);
        JS_AddIntrinsicRegExp(ctx);
    }
    if (mask & INTRINSIC_JSON) JS_AddIntrinsicJSON(ctx);
    if (mask & INTRINSIC_PROXY) JS_AddIntrinsicProxy(ctx);
    if (mask & INTRINSIC_MAP_SET) JS_AddIntrinsicMapSet(ctx);
    if (mask & INTRINSIC_TYPED_ARRAYS) JS_AddIntrinsicTypedArrays(ctx);
    if (mask & INTRINSIC_PROMISE) JS_AddIntrinsicPromise(ctx);
    if (mask & INTRINSIC_BIG_INT) JS_AddIntrinsicBigInt(ctx);
    if (mask & INTRINSIC_WEAK_REF) JS_AddIntrinsicWeakRef(ctx);
    if (mask & INTRINSIC_PERFORMANCE) JS_AddPerformance(ctx);
    if (mask & INTRINSIC_DOM_EXCEPTION) JS_AddIntrinsicDOMException(ctx);
    if (mask & INTRINSIC_ATOB_BTOA) JS_AddIntrinsicAToB(ctx);
    return 0;
}

EXPORT(qjs_get_context_ptr) JSContext *qjs_get_context_ptr(void)
{
    return ctx;
}

/* ---- Limits, jobs, GC ---- */

/* 0: no limit (the daemon bounds the instance's memory itself). */
EXPORT(qjs_set_memory_limit) void qjs_set_memory_limit(size_t limit)
{
    JS_SetMemoryLimit(rt, limit);
}

EXPORT(qjs_set_max_stack_size) void qjs_set_max_stack_size(size_t size)
{
    JS_SetMaxStackSize(rt, size);
}

/* 1 if a job ran, 0 if none was pending, < 0 if the job threw (its exception is pending). */
EXPORT(qjs_execute_pending_job) int qjs_execute_pending_job(void)
{
    JSContext *job_ctx;
    return JS_ExecutePendingJob(rt, &job_ctx);
}

EXPORT(qjs_run_gc) void qjs_run_gc(void)
{
    JS_RunGC(rt);
}

/* ---- Host functions ---- */

/*
 * Implemented by the daemon: runs the native `name`. `this_box` and `argv` (`argc` pointers
 * to JSValues) are borrowed for the call. Returns a malloc'ed box holding the result, whose
 * reference passes to the caller, or NULL when the native threw (the exception is pending).
 */
__attribute__((import_module("env"), import_name("host_call")))
extern JSValue *host_call(const char *name, int name_len, JSValue *this_box, int argc, JSValue **argv);

/* A native's name, allocated once when its function is made (in the image) and never freed. */
typedef struct HostName {
    int len;
    char bytes[];
} HostName;

static JSValue host_function(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv,
                             int magic, JSValueConst *data)
{
    (void)c;
    (void)magic;
    const HostName *name = (const HostName *)(uintptr_t)(uint32_t)JS_VALUE_GET_INT(data[0]);
    /* The daemon reads the arguments and does not keep them: they are passed in place, on
       the shadow stack, without taking references. */
    JSValue this_copy = this_val;
    JSValue *boxes[argc > 0 ? argc : 1];
    for (int i = 0; i < argc; i++)
        boxes[i] = (JSValue *)&argv[i];
    JSValue *result = host_call(name->bytes, name->len, &this_copy, argc, boxes);
    if (!result)
        return JS_EXCEPTION;
    JSValue value = *result;
    free(result);
    return value;
}

/* A function that calls host_call with `name`; returns a box, NULL when out of memory. */
EXPORT(qjs_new_host_function) JSValue *qjs_new_host_function(const char *name, int name_len, int arity)
{
    HostName *stored = malloc(sizeof(HostName) + (size_t)name_len + 1);
    JSValue *box = malloc(sizeof(JSValue));
    if (!stored || !box) {
        free(stored);
        free(box);
        return NULL;
    }
    stored->len = name_len;
    memcpy(stored->bytes, name, (size_t)name_len);
    stored->bytes[name_len] = 0;
    /* The name's address rides in the function's data as an integer (a pointer fits in one
       on wasm32), so a call needs no allocation to find it. */
    JSValue data = JS_NewInt32(ctx, (int32_t)(uintptr_t)stored);
    *box = JS_NewCFunctionData2(ctx, host_function, stored->bytes, arity, 0, 1, &data);
    return box;
}

/* ---- The image ---- */

/* A block larger than any free chunk left between the image's blocks: the allocator serves it
   from the top of the heap, so its address tells where the top is. */
#define PROBE_BYTES (64 * 1024)

/*
 * Called once set-up is done, just before the memory becomes the image every call starts from,
 * so that a call writes as few of the image's pages as it can (see JS_FreezeHeap in the patch):
 *
 * 1. QuickJS's lazily made built-ins are made now, once, instead of by every call that uses one.
 * 2. The allocator's free chunks between the image's blocks are taken and never given back: a
 *    call's allocations then all come from above the image, not from holes in its pages.
 * 3. Everything allocated so far becomes immortal.
 *
 * 0 on success.
 */
EXPORT(qjs_freeze_image) int qjs_freeze_image(void)
{
    if (JS_InstantiateLazyProperties(ctx) < 0)
        return -1;
    JS_RunGC(rt);

    void *probe = malloc(PROBE_BYTES);
    if (!probe)
        return -1;
    uintptr_t top = (uintptr_t)probe;
    free(probe);
    for (size_t size = PROBE_BYTES / 2; size >= 8; size /= 2) {
        for (;;) {
            void *block = malloc(size);
            if (!block)
                break;
            if ((uintptr_t)block >= top) {
                /* from the top: no hole of this size is left */
                free(block);
                break;
            }
        }
    }

    /* With the holes taken, the next block comes from the top of the heap: where the image
       ends. (Were it to come from a hole after all, the objects between it and the real top
       would simply stay ordinary, mortal ones.) */
    probe = malloc(1);
    if (!probe)
        return -1;
    top = (uintptr_t)probe;
    free(probe);
    JS_FreezeHeap(rt, top);
    return 0;
}
