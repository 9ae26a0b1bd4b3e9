//! Noticing that QuickJS hit its stack limit, even when the handler caught the error.
//!
//! QuickJS reports stack exhaustion as an ordinary, catchable `RangeError`, and it offers no
//! hook at that moment: when the limit is reached there is no stack left to call back into
//! anything, Rust included. What *is* certain is that producing that error (building the
//! exception, formatting the message and the backtrace) runs C code a few KiB past QuickJS's
//! limit, where nothing else on a worker thread ever goes: our own Rust code uses a few tens
//! of KiB, QuickJS's limit sits hundreds of KiB deeper.
//!
//! So before a call the worker paints a strip of its native stack just below that limit
//! with a known pattern, and afterwards (from the interrupt handler and between event-loop
//! turns) checks whether the pattern is intact. A changed strip means the stack limit was
//! hit. The check is a few hundred volatile loads, cheap enough for the interrupt handler.
//!
//! The strip lies beyond the current stack pointer, i.e. outside any live Rust allocation,
//! inside the worker thread's own stack mapping (we know its size because the pool created
//! the thread). It is only touched with volatile accesses, only from the thread that owns
//! it, and only on threads registered with [`register_worker_thread`]; on any other thread
//! the guard is simply not armed and only the uncaught-error path reports stack exhaustion.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;

thread_local! {
    /// (approximate highest stack address, native stack size) of a pool worker thread.
    static WORKER_STACK: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
}

/// Native stack kept free below everything the guard uses. C code keeps running a little
/// past QuickJS's limit (error construction, natives entered at the edge), and the thread's
/// guard page must never be reached.
const NATIVE_HEADROOM: usize = 256 * 1024;
/// Distance between our estimate of QuickJS's limit and the strip, covering the few hundred
/// bytes by which the estimate can be off.
const GAP: usize = 1024;
/// Size of the painted strip.
const STRIP: usize = 8 * 1024;
const WORD: usize = std::mem::size_of::<u64>();
const PATTERN: u64 = 0x6d63_7062_6f6f_7464; // "mcpbootd"

/// Address of a local in a frame one level below the caller.
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker as *const u8).addr()
}

/// Records the current thread as an isolate worker with a native stack of `stack_size`
/// bytes. Call first thing in the thread's main function.
pub(super) fn register_worker_thread(stack_size: usize) {
    WORKER_STACK.set(Some((stack_position(), stack_size)));
}

/// Largest QuickJS stack limit the current thread can afford, or `None` on threads that
/// were not registered (their stack size is unknown).
pub(super) fn max_js_stack() -> Option<usize> {
    let (top, size) = WORKER_STACK.get()?;
    let used = top.saturating_sub(stack_position());
    Some(size.saturating_sub(used + NATIVE_HEADROOM + GAP + STRIP))
}

/// A painted strip of the current thread's stack.
#[derive(Clone, Copy, Debug)]
pub(super) struct StackCanary {
    lo: usize,
    words: usize,
    /// Only meaningful on the thread that painted it.
    _not_send: PhantomData<*const ()>,
}

impl StackCanary {
    /// Paints the strip just below QuickJS's stack limit. The caller must have set QuickJS's
    /// stack top (`JS_UpdateStackTop`) from the same frame immediately before, with a max
    /// stack size of `js_stack_bytes`, and must only check the canary while that frame is
    /// live. Returns `None` if the thread is not a registered worker or the strip would
    /// not fit inside its stack.
    #[inline(never)]
    pub(super) fn arm(js_stack_bytes: usize) -> Option<Self> {
        let (top, size) = WORKER_STACK.get()?;
        let limit = stack_position().checked_sub(js_stack_bytes)?;
        let hi = limit.checked_sub(GAP)? & !(WORD - 1);
        let lo = hi.checked_sub(STRIP)?;
        let floor = top.checked_sub(size)?.checked_add(NATIVE_HEADROOM / 2)?;
        if lo < floor {
            return None;
        }
        let canary = StackCanary { lo, words: STRIP / WORD, _not_send: PhantomData };
        for addr in canary.addresses() {
            // SAFETY: `addr` is 8-aligned and inside this thread's stack mapping (between the
            // floor computed from the registered stack size and the current stack pointer),
            // below every live frame, so it belongs to no Rust allocation; volatile writes
            // there are not observed by any Rust code.
            unsafe { ptr::write_volatile(ptr::with_exposed_provenance_mut::<u64>(addr), expected(addr)) };
        }
        Some(canary)
    }

    /// True once anything has written to the strip since it was painted.
    pub(super) fn tripped(&self) -> bool {
        self.addresses().any(|addr| {
            // SAFETY: as in `arm`; the strip is still inside this thread's stack mapping and
            // is only read with volatile loads.
            let word = unsafe { ptr::read_volatile(ptr::with_exposed_provenance::<u64>(addr)) };
            word != expected(addr)
        })
    }

    fn addresses(&self) -> impl Iterator<Item = usize> + use<> {
        let lo = self.lo;
        (0..self.words).map(move |i| lo + i * WORD)
    }
}

fn expected(addr: usize) -> u64 {
    PATTERN ^ addr as u64
}
