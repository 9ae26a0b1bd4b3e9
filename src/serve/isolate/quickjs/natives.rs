//! Native helpers behind the prelude's `URL`, `URLSearchParams`, `TextEncoder` and
//! `TextDecoder`. They are installed on the private bindings object the prelude receives,
//! never on the global object, and charge every copy they make to the call's memory budget
//! ([`Copies`]).
//!
//! Arguments are produced by the prelude, not by handler code, but nothing here trusts them:
//! every conversion failure becomes a JS exception, never a panic.

use std::rc::Rc;

use rquickjs::{Ctx, Exception, Function, IntoJs, Object, Result, TypedArray, Value, qjs};

use super::super::wasm::web::{FORM_COPIES, URL_COPIES, form_parse, form_serialize, url_parse, url_set, wtf8_lossy};
use super::memory::{Charge, MemoryBudget};

/// Calls `f` with the WTF-8 bytes of a JS string. The bytes are in QuickJS's heap, so the
/// call's budget already counts them; an empty slice if QuickJS cannot produce them.
pub(super) fn with_wtf8<R>(ctx: &Ctx<'_>, value: &rquickjs::String<'_>, f: impl FnOnce(&[u8]) -> R) -> R {
    let mut len = 0;
    // SAFETY: `value` is a live string of this context; the returned buffer is valid for
    // `len` bytes until freed with JS_FreeCString, which we do before returning (`f` cannot
    // run JavaScript: it only gets the bytes).
    unsafe {
        let ptr = qjs::JS_ToCStringLen(ctx.as_raw().as_ptr(), &mut len, value.as_raw());
        if ptr.is_null() {
            return f(&[]);
        }
        let out = f(std::slice::from_raw_parts(ptr.cast::<u8>(), len));
        qjs::JS_FreeCString(ctx.as_raw().as_ptr(), ptr);
        out
    }
}

/// Converts a JS string to Rust, replacing lone surrogates (which QuickJS hands out as
/// WTF-8, rejected by `String::from_utf8`) with U+FFFD instead of failing. Not charged to the
/// budget: for strings whose size the caller bounds (or whose copy is the call's result).
pub(super) fn lossy_string(ctx: &Ctx<'_>, value: &rquickjs::String<'_>) -> String {
    with_wtf8(ctx, value, wtf8_lossy)
}

/// Lossy conversion of any value that should be a string (the prelude passes strings), for
/// strings whose size is bounded elsewhere; see [`Copies`] for the rest.
pub(super) fn value_to_string(ctx: &Ctx<'_>, value: &Value<'_>) -> Option<String> {
    value.as_string().map(|s| lossy_string(ctx, s))
}

/// Calls `f` with the bytes of a `Uint8Array` in place; `None` if the value is not one.
fn with_typed_bytes<R>(value: &Value<'_>, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let array = TypedArray::<u8>::from_value(value.clone()).ok()?;
    // SAFETY: `f` gets the bytes and cannot run JavaScript, so nothing can mutate or detach the
    // buffer while it reads them.
    unsafe { array.as_bytes() }.map(f)
}

/// Copies natives make outside QuickJS's heap, charged to the call's memory budget before they
/// are made and for as long as they live, so that no native (a `TextDecoder` turning 24 MiB of
/// bytes into 72 MiB of text, say) holds memory the budget does not count. A copy the budget
/// cannot cover throws QuickJS's own "out of memory", and the call ends over its limit.
#[derive(Clone)]
pub(super) struct Copies(pub(super) Rc<MemoryBudget>);

impl Copies {
    /// Charges `bytes` until the charge is dropped.
    pub(super) fn charge(&self, ctx: &Ctx<'_>, bytes: usize) -> Result<Charge> {
        self.0.charge(bytes).ok_or_else(|| Exception::throw_internal(ctx, "out of memory"))
    }

    /// A JS string copied to Rust with its copy charged; `None` if the value is not a string.
    pub(super) fn string(&self, ctx: &Ctx<'_>, value: &Value<'_>) -> Result<Option<(String, Charge)>> {
        let Some(value) = value.as_string() else { return Ok(None) };
        with_wtf8(ctx, value, |bytes| {
            let charge = self.charge(ctx, bytes.len())?;
            Ok(Some((wtf8_lossy(bytes), charge)))
        })
    }

    /// The bytes of a `Uint8Array` copied with the copy charged; `None` if the value is not one
    /// (or is detached).
    pub(super) fn bytes(&self, ctx: &Ctx<'_>, value: &Value<'_>) -> Option<Result<(Vec<u8>, Charge)>> {
        with_typed_bytes(value, |bytes| {
            let charge = self.charge(ctx, bytes.len())?;
            Ok((bytes.to_vec(), charge))
        })
    }

    /// A string argument of a native, or the empty string.
    pub(super) fn text(&self, ctx: &Ctx<'_>, value: &Value<'_>) -> Result<(String, Option<Charge>)> {
        Ok(match self.string(ctx, value)? {
            Some((text, charge)) => (text, Some(charge)),
            None => (String::new(), None),
        })
    }
}

/// Installs the natives on `target` (the prelude's private bindings object).
pub(super) fn install<'js>(ctx: &Ctx<'js>, target: &Object<'js>, copies: &Copies) -> Result<()> {
    let c = copies.clone();
    target.set(
        "urlParse",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, input: Value<'js>, base: Value<'js>| {
            let (input, _input) = c.text(&ctx, &input)?;
            let (base, _base) = match c.string(&ctx, &base)? {
                Some((base, charge)) => (Some(base), Some(charge)),
                None => (None, None),
            };
            let _work = c.charge(&ctx, (input.len() + base.as_ref().map_or(0, String::len)) * URL_COPIES)?;
            url_parse(&input, base.as_deref()).into_js(&ctx)
        })?,
    )?;
    let c = copies.clone();
    target.set(
        "urlSet",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, href: Value<'js>, field: Value<'js>, value: Value<'js>| {
            let (href, _href) = c.text(&ctx, &href)?;
            let field = value_to_string(&ctx, &field).filter(|f| f.len() <= 16).unwrap_or_default();
            let (value, _value) = c.text(&ctx, &value)?;
            let _work = c.charge(&ctx, (href.len() + value.len()) * URL_COPIES)?;
            url_set(&href, &field, &value).into_js(&ctx)
        })?,
    )?;
    let c = copies.clone();
    target.set(
        "formParse",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, query: Value<'js>| {
            let (query, _query) = c.text(&ctx, &query)?;
            let _work = c.charge(&ctx, query.len() * FORM_COPIES)?;
            form_parse(&query).into_js(&ctx)
        })?,
    )?;
    let c = copies.clone();
    target.set(
        "formSerialize",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, flat: Value<'js>| -> Result<rquickjs::String<'js>> {
            let Some(array) = flat.as_array() else {
                return Err(Exception::throw_type(&ctx, "formSerialize: expected an array"));
            };
            let mut items = Vec::with_capacity(array.len());
            let mut charges = Vec::with_capacity(array.len());
            for item in array.iter::<Value<'js>>() {
                let (text, charge) = c.text(&ctx, &item?)?;
                charges.push(c.charge(&ctx, text.len() * FORM_COPIES)?);
                charges.extend(charge);
                items.push(text);
            }
            rquickjs::String::from_str(ctx.clone(), &form_serialize(&items))
        })?,
    )?;
    let c = copies.clone();
    target.set(
        "utf8Encode",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, text: Value<'js>| -> Result<TypedArray<'js, u8>> {
            let Some(text) = text.as_string() else { return TypedArray::new_copy(ctx.clone(), []) };
            // Well-formed text (nearly always) goes from QuickJS's bytes to the new array
            // without a copy in between; text with lone surrogates is copied once, charged.
            with_wtf8(&ctx, text, |bytes| match std::str::from_utf8(bytes) {
                Ok(_) => TypedArray::new_copy(ctx.clone(), bytes),
                Err(_) => {
                    let _copy = c.charge(&ctx, bytes.len())?;
                    TypedArray::new_copy(ctx.clone(), wtf8_lossy(bytes).as_bytes())
                }
            })
        })?,
    )?;
    let c = copies.clone();
    target.set(
        "utf8Decode",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, bytes: Value<'js>, fatal: Value<'js>| {
            let fatal = fatal.as_bool().unwrap_or(false);
            let decoded = with_typed_bytes(&bytes, |bytes| -> Result<rquickjs::String<'js>> {
                if let Ok(text) = std::str::from_utf8(bytes) {
                    return rquickjs::String::from_str(ctx.clone(), text);
                }
                if fatal {
                    let error = std::str::from_utf8(bytes).unwrap_err();
                    return Err(Exception::throw_type(&ctx, &format!("The encoded data was not valid UTF-8: {error}")));
                }
                // Every invalid sequence becomes U+FFFD (three bytes): size the text first, so
                // the charge comes before the copy.
                let size: usize =
                    bytes.utf8_chunks().map(|c| c.valid().len() + if c.invalid().is_empty() { 0 } else { 3 }).sum();
                let _copy = c.charge(&ctx, size)?;
                rquickjs::String::from_str(ctx.clone(), &String::from_utf8_lossy(bytes))
            });
            decoded.unwrap_or_else(|| Err(Exception::throw_type(&ctx, "expected a Uint8Array")))
        })?,
    )?;
    Ok(())
}
