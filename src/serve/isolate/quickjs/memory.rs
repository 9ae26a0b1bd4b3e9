//! The per-call memory budget, enforced by the runtime's allocator.
//!
//! QuickJS's own `JS_SetMemoryLimit` makes allocations fail, but the failure surfaces only
//! as a catchable "out of memory" `InternalError` (or a thrown `null` when even that could
//! not be allocated): a handler that catches it keeps running and we would never know. So
//! the runtime is created with this allocator (`Runtime::new_with_alloc`, no rquickjs
//! feature needed), which refuses allocations past the budget and *records* that it did.
//! The call then ends as `Limit` no matter what JS does with the error. QuickJS's limit is
//! still set, slightly above the budget, as a backstop.
//!
//! The budget counts every block QuickJS takes from the system allocator, which is the number
//! that matters for the host.
//!
//! Every call also draws on the daemon-wide [`IsolateMemory`], so that a thousand parked
//! calls cannot together take the machine down even though each stays within its own limit.
//! A call takes memory from the daemon pool in chunks of [`CHUNK`] bytes (one atomic
//! operation per chunk, not per allocation) and returns what it no longer needs; an
//! allocation that the daemon pool cannot cover is refused like one past the call's own
//! limit, and recorded as such, so the call ends with a message naming the daemon budget.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use rquickjs::allocator::Allocator;

use super::super::IsolateMemory;

/// Header in front of every block holding its usable size, as QuickJS needs
/// `malloc_usable_size`. 16 bytes keeps the returned pointers 16-byte aligned like malloc's.
const HEADER: usize = 16;
const ALIGN: usize = 16;

/// Granularity of what a call takes from (and gives back to) the daemon-wide pool.
pub(super) const CHUNK: usize = 64 * 1024;

#[derive(Debug)]
pub(super) struct MemoryBudget {
    limit: usize,
    used: Cell<usize>,
    /// Bytes taken from the daemon pool; always `>= used`, returned on drop.
    held: Cell<usize>,
    exhausted: Cell<bool>,
    /// The refusal came from the daemon pool, not from this call's own limit.
    daemon_exhausted: Cell<bool>,
    daemon: Arc<IsolateMemory>,
}

impl MemoryBudget {
    pub(super) fn new(limit: usize, daemon: Arc<IsolateMemory>) -> Rc<Self> {
        Rc::new(Self {
            limit,
            used: Cell::new(0),
            held: Cell::new(0),
            exhausted: Cell::new(false),
            daemon_exhausted: Cell::new(false),
            daemon,
        })
    }

    /// True once an allocation has been refused.
    pub(super) fn exhausted(&self) -> bool {
        self.exhausted.get()
    }

    pub(super) fn daemon_limit(&self) -> usize {
        self.daemon.limit()
    }

    /// True when the refusal was the daemon-wide budget's.
    pub(super) fn daemon_exhausted(&self) -> bool {
        self.daemon_exhausted.get()
    }

    fn reserve(&self, bytes: usize) -> bool {
        let total = match self.used.get().checked_add(bytes) {
            Some(total) if total <= self.limit => total,
            _ => {
                self.exhausted.set(true);
                return false;
            }
        };
        let held = self.held.get();
        if total > held {
            let want = (total - held).div_ceil(CHUNK) * CHUNK;
            if !self.daemon.take(want) {
                self.exhausted.set(true);
                self.daemon_exhausted.set(true);
                return false;
            }
            self.held.set(held + want);
        }
        self.used.set(total);
        true
    }

    fn release(&self, bytes: usize) {
        let used = self.used.get().saturating_sub(bytes);
        self.used.set(used);
        // Keep one chunk of slack so that a call hovering around a chunk boundary does not
        // hit the shared counter on every allocation.
        let held = self.held.get();
        if held - used.min(held) > 2 * CHUNK {
            let keep = used.div_ceil(CHUNK) * CHUNK + CHUNK;
            self.daemon.give_back(held - keep);
            self.held.set(keep);
        }
    }
}

impl MemoryBudget {
    /// Charges `bytes` that a native is about to hold outside QuickJS's heap (a Rust copy of a
    /// string, a decoded text, a request body) to this call until the charge is dropped, so
    /// natives cannot be used to hold memory the budget does not see. `None` when the budget
    /// cannot cover them: the call is then over its limit exactly as if QuickJS had asked.
    pub(super) fn charge(self: &Rc<Self>, bytes: usize) -> Option<Charge> {
        self.reserve(bytes).then(|| Charge { budget: Rc::clone(self), bytes })
    }
}

/// Memory a native holds outside QuickJS's heap, counted in the call's budget while it lives.
pub(in crate::serve::isolate) struct Charge {
    budget: Rc<MemoryBudget>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

impl Drop for MemoryBudget {
    fn drop(&mut self) {
        self.daemon.give_back(self.held.get());
    }
}

pub(super) struct BudgetAllocator(pub(super) Rc<MemoryBudget>);

impl BudgetAllocator {
    fn allocate(&mut self, size: usize, zeroed: bool) -> *mut u8 {
        let Some(layout) = block_layout(size) else {
            self.0.exhausted.set(true);
            return std::ptr::null_mut();
        };
        if !self.0.reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the layout has a non-zero size (it includes the header).
        let base = unsafe { if zeroed { alloc::alloc_zeroed(layout) } else { alloc::alloc(layout) } };
        if base.is_null() {
            self.0.release(layout.size());
            self.0.exhausted.set(true);
            return base;
        }
        // SAFETY: `base` is valid for `layout.size() >= HEADER` bytes and 16-byte aligned.
        unsafe {
            base.cast::<usize>().write(size);
            base.add(HEADER)
        }
    }
}

fn block_layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(HEADER)?, ALIGN).ok()
}

// SAFETY: blocks are allocated with a 16-byte header recording the requested size, which
// `usable_size`, `dealloc` and `realloc` read back to rebuild the exact layout; every pointer
// handed out is 16-byte aligned and valid for the requested size. Allocation failure returns
// null and never panics (this runs inside QuickJS, across an FFI boundary).
unsafe impl Allocator for BudgetAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        self.allocate(size, false)
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        match count.checked_mul(size) {
            Some(total) => self.allocate(total, true),
            None => {
                self.0.exhausted.set(true);
                std::ptr::null_mut()
            }
        }
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        // SAFETY: `ptr` came from `allocate`/`realloc`, so a header precedes it and the
        // recorded size rebuilds the layout it was allocated with.
        unsafe {
            let base = ptr.sub(HEADER);
            let size = base.cast::<usize>().read();
            let layout = Layout::from_size_align_unchecked(size + HEADER, ALIGN);
            self.0.release(layout.size());
            alloc::dealloc(base, layout);
        }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.allocate(new_size, false);
        }
        let Some(new_layout) = block_layout(new_size) else {
            self.0.exhausted.set(true);
            return std::ptr::null_mut();
        };
        // SAFETY: as in `dealloc`; `alloc::realloc` gets the block's original layout and a
        // non-zero new size, and on failure leaves the old block untouched.
        unsafe {
            let base = ptr.sub(HEADER);
            let old_size = base.cast::<usize>().read();
            let old_layout = Layout::from_size_align_unchecked(old_size + HEADER, ALIGN);
            let grow = new_layout.size().saturating_sub(old_layout.size());
            if grow > 0 && !self.0.reserve(grow) {
                return std::ptr::null_mut();
            }
            let new_base = alloc::realloc(base, old_layout, new_layout.size());
            if new_base.is_null() {
                self.0.release(grow);
                self.0.exhausted.set(true);
                return new_base;
            }
            self.0.release(old_layout.size().saturating_sub(new_layout.size()));
            new_base.cast::<usize>().write(new_size);
            new_base.add(HEADER)
        }
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: `ptr` came from this allocator, so a header precedes it.
        unsafe { ptr.sub(HEADER).cast::<usize>().read() }
    }
}
