//! Native helpers behind the prelude's `URL`, `URLSearchParams`, `TextEncoder` and
//! `TextDecoder`. They are installed on the private bindings object the prelude receives,
//! never on the global object, and charge every copy they make to the call's memory budget
//! ([`Copies`]).
//!
//! Arguments are produced by the prelude, not by handler code, but nothing here trusts them:
//! every conversion failure becomes a JS exception, never a panic.

use std::rc::Rc;

use rquickjs::{Ctx, Exception, Function, IntoJs, Object, Result, TypedArray, Value, qjs};
use url::Url;

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

/// Decodes QuickJS's WTF-8 (UTF-8 that may encode lone surrogates as `ED A0..BF xx`),
/// turning each lone surrogate — or any other invalid sequence — into one U+FFFD, which is
/// what `String.prototype.toWellFormed` and `TextEncoder` would produce. For WTF-8 input the
/// output has the input's length (a surrogate and U+FFFD both take three bytes).
pub(in crate::serve::isolate) fn wtf8_lossy(mut bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(valid) => {
                out.push_str(valid);
                return out;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                // SAFETY: `from_utf8` just validated this prefix.
                out.push_str(unsafe { std::str::from_utf8_unchecked(valid) });
                out.push(char::REPLACEMENT_CHARACTER);
                let skip = match rest {
                    [0xed, b1, b2, ..] if *b1 & 0xe0 == 0xa0 && *b2 & 0xc0 == 0x80 => 3,
                    _ => e.error_len().unwrap_or(rest.len()),
                };
                bytes = &rest[skip.min(rest.len())..];
            }
        }
    }
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

/// `[href, origin, protocol, username, password, host, hostname, port, pathname, search,
/// hash]`, the WHATWG getters, in the order the prelude's `URL` class expects.
pub(in crate::serve::isolate) fn url_components(url: &Url) -> Vec<String> {
    use url::quirks as q;
    vec![
        q::href(url).to_owned(),
        q::origin(url),
        q::protocol(url).to_owned(),
        q::username(url).to_owned(),
        q::password(url).to_owned(),
        q::host(url).to_owned(),
        q::hostname(url).to_owned(),
        q::port(url).to_owned(),
        q::pathname(url).to_owned(),
        q::search(url).to_owned(),
        q::hash(url).to_owned(),
    ]
}

pub(in crate::serve::isolate) fn url_parse(input: &str, base: Option<&str>) -> Option<Vec<String>> {
    let url = match base {
        Some(base) => Url::parse(base).ok()?.join(input).ok()?,
        None => Url::parse(input).ok()?,
    };
    Some(url_components(&url))
}

/// Applies a WHATWG setter. Invalid values leave the URL unchanged, as in browsers, except
/// for `href`, where the caller gets `None` (the prelude throws a `TypeError`).
pub(in crate::serve::isolate) fn url_set(href: &str, field: &str, value: &str) -> Option<Vec<String>> {
    use url::quirks as q;
    let mut url = Url::parse(href).ok()?;
    // The setters report failure by leaving the URL untouched, which is the behaviour we
    // want, so their results are deliberately ignored.
    match field {
        "href" => q::set_href(&mut url, value).ok()?,
        "protocol" => q::set_protocol(&mut url, value).unwrap_or(()),
        "username" => q::set_username(&mut url, value).unwrap_or(()),
        "password" => q::set_password(&mut url, value).unwrap_or(()),
        "host" => q::set_host(&mut url, value).unwrap_or(()),
        "hostname" => q::set_hostname(&mut url, value).unwrap_or(()),
        "port" => q::set_port(&mut url, value).unwrap_or(()),
        "pathname" => q::set_pathname(&mut url, value),
        "search" => q::set_search(&mut url, value),
        "hash" => q::set_hash(&mut url, value),
        _ => return None,
    }
    Some(url_components(&url))
}

/// `application/x-www-form-urlencoded` parsing, flattened to `[k1, v1, k2, v2, ...]`.
pub(in crate::serve::isolate) fn form_parse(query: &str) -> Vec<String> {
    url::form_urlencoded::parse(query.as_bytes()).flat_map(|(k, v)| [k.into_owned(), v.into_owned()]).collect()
}

pub(in crate::serve::isolate) fn form_serialize(flat: &[String]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for pair in flat.chunks_exact(2) {
        out.append_pair(&pair[0], &pair[1]);
    }
    out.finish()
}

/// What a URL operation may build from an input of `n` bytes at most: the parsed URL and its
/// eleven components, each at most the href, which percent-encoding makes at most three times
/// the input. Charged while the operation runs; the strings handed to JS are QuickJS's.
pub(in crate::serve::isolate) const URL_COPIES: usize = 3 * 13;
/// Form encoding at most triples its input; parsing never grows it.
pub(in crate::serve::isolate) const FORM_COPIES: usize = 3 + 1;

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
