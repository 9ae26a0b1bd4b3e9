//! The pre-initialised image every call starts from.
//!
//! Creating a QuickJS runtime and context and running the prelude is most of what a fresh
//! isolate would cost, and the result is the same for every call. So it is done once, in an
//! instance of the vendored module: the instance's linear memory is then written back into a
//! copy of the module as its data segments (only the 4 KiB pages that are not zero), with the
//! memory's minimum size raised to match and every mutable global's initial value set to what
//! it holds now (Wizer's technique). Wasmtime maps such a module's memory copy-on-write, so a
//! call's instance starts with QuickJS ready and the prelude run, and pays only for the pages
//! it writes.
//!
//! **Immortal image objects.** A page of the image a call writes becomes that call's own copy for
//! as long as it lives, parked calls included, so what matters is how few pages a call writes.
//! Stock QuickJS writes many: every object has a reference count in front of it, and a call
//! that merely uses a prototype, a built-in function, a shape or an atom of the image increments
//! and decrements it; its cycle collector writes the count and mark of every object; and its
//! allocator hands out free blocks left in the image's pages. The module is built with a patch
//! (`vendor/quickjs-wasm/patches/immortal.patch`) for this: `qjs_freeze_image`, called last
//! before the snapshot, makes QuickJS's lazily created built-ins, takes the free chunks left
//! between the image's blocks, and marks the top of the heap. Every object below it is
//! immortal: its count is never written (a decrement never reaches 0, and a "sole owner" test
//! is false, so nothing frees it or updates it in place), the collector never visits it, memory
//! below the top is never freed into the allocator, and a call's blocks all come from above the
//! image, packed together whatever their size. A block of the image a call lets go of (an image
//! object's old property array, say) stays allocated until the instance is dropped. A call
//! parked on a timer or a fetch then writes about 14 pages instead of about 40 (the runtime and
//! context structs, the allocator's state, a page of the atom and shape tables, the prelude's
//! per-call state, the shadow stack and the call's own objects).
//!
//! Pointers stay valid in the image because nothing in the module depends on where it was
//! instantiated: the shadow stack sits at the bottom of memory and the heap above it, the
//! function table is static, and `__stack_pointer` is the module's only mutable global (any
//! other mutable global that is not exported makes building the image fail rather than go
//! stale silently).

use wasm_encoder::{ConstExpr, DataCountSection, DataSection, GlobalSection, MemorySection, MemoryType, RawSection};
use wasmparser::{Operator, Parser, Payload};
use wasmtime::{Result, bail};

use super::guest::JsValue;

/// Granularity of the data segments written for the image.
const PAGE: usize = 4096;

/// What every instance of the image holds at the same addresses.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Image {
    pub ctx: i32,
    /// The prelude's hooks: `[fetchDone, fetchFail, timerFire, describe, fetch, runScript]`.
    pub hooks: [JsValue; 6],
    /// The private bindings object the prelude reads `maxElements` from.
    pub bindings: JsValue,
    pub type_error: JsValue,
    pub range_error: JsValue,
    /// NUL-terminated names: `"handler"`, `"arguments"`, `"maxElements"`.
    pub handler_file: i32,
    pub arguments_file: i32,
    pub max_elements_name: i32,
    /// Two 64-byte scratch areas: one for the event loop, one for natives (they never run at
    /// the same time as each other's use of it: natives only run inside the loop's calls and
    /// use theirs only between their own guest calls).
    pub loop_scratch: i32,
    pub native_scratch: i32,
    /// Size of the image's linear memory; a call's memory limit is counted above it.
    pub memory_bytes: usize,
    /// The shadow stack's top (`__stack_pointer` at rest). The module puts the stack first, at
    /// the bottom of memory, so a call that lowers its top to its stack limit traps (the stack
    /// runs below address 0) instead of running into data (checked when the image is built).
    pub stack_top: i32,
}

/// A mutable global's value at snapshot time, by global index.
#[derive(Debug, Clone, Copy)]
pub enum GlobalValue {
    I32(i32),
}

/// A copy of `module` whose initial state is `memory` and `globals`.
pub fn snapshot(module: &[u8], memory: &[u8], globals: &[(u32, GlobalValue)]) -> Result<Vec<u8>> {
    let mut out = wasm_encoder::Module::new();
    let segments = page_runs(memory);
    for payload in Parser::new(0).parse_all(module) {
        let payload = payload?;
        match &payload {
            Payload::MemorySection(reader) => {
                let mut section = MemorySection::new();
                for memory_type in reader.clone() {
                    let memory_type = memory_type?;
                    let pages = (memory.len() as u64).div_ceil(1 << 16);
                    section.memory(MemoryType {
                        minimum: pages.max(memory_type.initial),
                        maximum: memory_type.maximum,
                        memory64: memory_type.memory64,
                        shared: memory_type.shared,
                        page_size_log2: memory_type.page_size_log2,
                    });
                }
                out.section(&section);
            }
            Payload::GlobalSection(reader) => {
                let mut section = GlobalSection::new();
                for (index, global) in reader.clone().into_iter().enumerate() {
                    let global = global?;
                    let value = globals.iter().find(|(at, _)| *at as usize == index).map(|(_, value)| *value);
                    let init = match value {
                        Some(GlobalValue::I32(v)) => ConstExpr::i32_const(v),
                        None if global.ty.mutable => {
                            bail!("global {index} of the QuickJS module is mutable but its value was not captured")
                        }
                        None => const_expr(&global.init_expr)?,
                    };
                    let ty = wasm_encoder::GlobalType {
                        val_type: val_type(global.ty.content_type)?,
                        mutable: global.ty.mutable,
                        shared: global.ty.shared,
                    };
                    section.global(ty, &init);
                }
                out.section(&section);
            }
            Payload::DataCountSection { .. } => {
                out.section(&DataCountSection { count: segments.len() as u32 });
            }
            Payload::DataSection(_) => {
                let mut section = DataSection::new();
                for (start, end) in &segments {
                    section.active(0, &ConstExpr::i32_const(*start as i32), memory[*start..*end].iter().copied());
                }
                out.section(&section);
            }
            // Names and producers are not needed to run, and a stale name section would be
            // misleading.
            Payload::CustomSection(_) => {}
            other => {
                if let Some((id, range)) = other.as_section() {
                    out.section(&RawSection { id, data: &module[range] });
                }
            }
        }
    }
    Ok(out.finish())
}

/// The lowest address any active data segment of `module` initialises (`None`: none does).
pub fn lowest_data_address(module: &[u8]) -> Result<Option<u32>> {
    let mut lowest: Option<u32> = None;
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::DataSection(reader) = payload? {
            for data in reader {
                if let wasmparser::DataKind::Active { offset_expr, .. } = data?.kind
                    && let Operator::I32Const { value } = offset_expr.get_operators_reader().read()?
                {
                    let address = value as u32;
                    lowest = Some(lowest.map_or(address, |l| l.min(address)));
                }
            }
        }
    }
    Ok(lowest)
}

/// Maximal runs of pages holding at least one non-zero byte, as byte ranges.
fn page_runs(memory: &[u8]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (index, page) in memory.chunks(PAGE).enumerate() {
        if page.iter().all(|b| *b == 0) {
            continue;
        }
        let start = index * PAGE;
        let end = start + page.len();
        match runs.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => runs.push((start, end)),
        }
    }
    runs
}

fn val_type(ty: wasmparser::ValType) -> Result<wasm_encoder::ValType> {
    Ok(match ty {
        wasmparser::ValType::I32 => wasm_encoder::ValType::I32,
        wasmparser::ValType::I64 => wasm_encoder::ValType::I64,
        wasmparser::ValType::F32 => wasm_encoder::ValType::F32,
        wasmparser::ValType::F64 => wasm_encoder::ValType::F64,
        other => bail!("the QuickJS module has a global of type {other:?}, which the image cannot hold"),
    })
}

/// An immutable global's initialiser, re-encoded (constants and `global.get` only).
fn const_expr(expr: &wasmparser::ConstExpr<'_>) -> Result<ConstExpr> {
    let mut reader = expr.get_operators_reader();
    let value = match reader.read()? {
        Operator::I32Const { value } => ConstExpr::i32_const(value),
        Operator::I64Const { value } => ConstExpr::i64_const(value),
        Operator::F32Const { value } => ConstExpr::f32_const(f32::from_bits(value.bits()).into()),
        Operator::F64Const { value } => ConstExpr::f64_const(f64::from_bits(value.bits()).into()),
        Operator::GlobalGet { global_index } => ConstExpr::global_get(global_index),
        other => bail!("the QuickJS module has a global initialiser the image cannot copy: {other:?}"),
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_runs_cover_exactly_the_pages_with_data() {
        let mut memory = vec![0u8; PAGE * 6];
        memory[10] = 1;
        memory[PAGE + 5] = 2;
        memory[PAGE * 4] = 3;
        assert_eq!(page_runs(&memory), vec![(0, 2 * PAGE), (4 * PAGE, 5 * PAGE)]);
        assert!(page_runs(&[0u8; PAGE]).is_empty());
    }
}
