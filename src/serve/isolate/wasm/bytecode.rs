//! Handlers compiled once: QuickJS bytecode per wrapped handler source, shared by every call.
//!
//! Compiling a handler is parsing and code generation in the guest on every call; reading
//! bytecode back is cheaper. The first call of a handler compiles it and writes the function as
//! bytecode (`JS_WriteObject`), later calls read it into their fresh instance (`JS_ReadObject`).
//! The bytecode is QuickJS's own output for the one vendored module, keyed by the exact source
//! it came from, and is only ever read inside an instance, so nothing here trusts it more than
//! the source. Code-mode scripts are one-off and not kept.
//!
//! The cache is bounded in bytes; when a new entry would pass the bound it starts afresh, which
//! costs each handler one more compilation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Bytes of bytecode kept at most (a generated handler's is a few KiB).
const MAX_BYTES: usize = 32 << 20;

#[derive(Default)]
struct Entries {
    by_source: HashMap<Box<str>, Arc<[u8]>>,
    bytes: usize,
}

static ENTRIES: Mutex<Option<Entries>> = Mutex::new(None);

/// The bytecode of `source`, if a call compiled it before.
pub fn get(source: &str) -> Option<Arc<[u8]>> {
    let entries = ENTRIES.lock().unwrap_or_else(|p| p.into_inner());
    entries.as_ref()?.by_source.get(source).cloned()
}

/// Keeps the bytecode of `source`.
pub fn insert(source: &str, bytecode: Vec<u8>) {
    if bytecode.len() > MAX_BYTES {
        return;
    }
    let mut entries = ENTRIES.lock().unwrap_or_else(|p| p.into_inner());
    let entries = entries.get_or_insert_with(Entries::default);
    if entries.bytes + bytecode.len() + source.len() > MAX_BYTES {
        *entries = Entries::default();
    }
    entries.bytes += bytecode.len() + source.len();
    if let Some(old) = entries.by_source.insert(source.into(), bytecode.into()) {
        entries.bytes -= old.len() + source.len();
    }
}
