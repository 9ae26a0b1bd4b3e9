//! How Wasmtime is set up for calls: epoch interruption, the bounds on native and async stacks,
//! copy-on-write images and the pooling allocator's slots.

use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Native stack for compiled WebAssembly frames (QuickJS's C recursion lives there and in the
/// module's shadow stack); past it the call traps with a stack overflow.
const MAX_WASM_STACK: usize = 1024 * 1024;
/// Largest linear memory an instance may reach (its call's limit is lower; see `call.rs`).
const MAX_MEMORY: usize = 1 << 32;

/// The configuration of an engine with room for `slots` instances at once.
pub fn config(slots: u32) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    config.async_stack_size(MAX_WASM_STACK + 512 * 1024);
    config.memory_init_cow(true);
    let mut pool = PoolingAllocationConfig::new();
    // Slots cost address space, not memory, until used.
    // A store keeps the fiber stack of its last call into the guest until it is dropped, so a
    // parked call holds a stack too: one per slot.
    pool.total_core_instances(slots).total_memories(slots).total_tables(slots).total_stacks(slots);
    pool.max_memory_size(MAX_MEMORY);
    // Resetting a slot by rewriting the pages it dirtied is cheaper than unmapping them, for
    // the first few MiB (the image and a small call's heap).
    pool.linear_memory_keep_resident(4 << 20).table_keep_resident(64 << 10);
    pool.max_unused_warm_slots(256);
    // Where the kernel can say which pages a call dirtied (Linux 6.7 and later), reset only
    // those: without it every reset rewrites the whole resident part of the slot.
    pool.pagemap_scan(Enabled::Auto);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}
