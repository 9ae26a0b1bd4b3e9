//! Stateless native helpers behind the prelude's `URL`, `URLSearchParams`, `TextEncoder` and
//! `TextDecoder`. They are installed on the private bindings object the prelude receives,
//! never on the global object.
//!
//! Arguments are produced by the prelude, not by handler code, but nothing here trusts them:
//! every conversion failure becomes a JS exception, never a panic.

use rquickjs::{Ctx, Exception, Function, Object, Result, TypedArray, Value, qjs};
use url::Url;

/// Converts a JS string to Rust, replacing lone surrogates (which QuickJS hands out as
/// WTF-8, rejected by `String::from_utf8`) with U+FFFD instead of failing.
pub(super) fn lossy_string(ctx: &Ctx<'_>, value: &rquickjs::String<'_>) -> String {
    let mut len = 0;
    // SAFETY: `value` is a live string of this context; the returned buffer is valid for
    // `len` bytes until freed with JS_FreeCString, which we do before returning.
    unsafe {
        let ptr = qjs::JS_ToCStringLen(ctx.as_raw().as_ptr(), &mut len, value.as_raw());
        if ptr.is_null() {
            return String::new();
        }
        let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
        let out = wtf8_lossy(bytes);
        qjs::JS_FreeCString(ctx.as_raw().as_ptr(), ptr);
        out
    }
}

/// Decodes QuickJS's WTF-8 (UTF-8 that may encode lone surrogates as `ED A0..BF xx`),
/// turning each lone surrogate — or any other invalid sequence — into one U+FFFD, which is
/// what `String.prototype.toWellFormed` and `TextEncoder` would produce.
pub(super) fn wtf8_lossy(mut bytes: &[u8]) -> String {
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

/// Lossy conversion of any value that should be a string (the prelude passes strings).
pub(super) fn value_to_string(ctx: &Ctx<'_>, value: &Value<'_>) -> Option<String> {
    value.as_string().map(|s| lossy_string(ctx, s))
}

/// Copies the bytes of a `Uint8Array`; `None` if the value is not one (or is detached).
pub(super) fn typed_bytes(value: &Value<'_>) -> Option<Vec<u8>> {
    let array = TypedArray::<u8>::from_value(value.clone()).ok()?;
    // SAFETY: the slice is copied before any JS can run and mutate or detach the buffer.
    unsafe { array.as_bytes() }.map(<[u8]>::to_vec)
}

/// `[href, origin, protocol, username, password, host, hostname, port, pathname, search,
/// hash]`, the WHATWG getters, in the order the prelude's `URL` class expects.
pub(super) fn url_components(url: &Url) -> Vec<String> {
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

pub(super) fn url_parse(input: &str, base: Option<&str>) -> Option<Vec<String>> {
    let url = match base {
        Some(base) => Url::parse(base).ok()?.join(input).ok()?,
        None => Url::parse(input).ok()?,
    };
    Some(url_components(&url))
}

/// Applies a WHATWG setter. Invalid values leave the URL unchanged, as in browsers, except
/// for `href`, where the caller gets `None` (the prelude throws a `TypeError`).
pub(super) fn url_set(href: &str, field: &str, value: &str) -> Option<Vec<String>> {
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
pub(super) fn form_parse(query: &str) -> Vec<String> {
    url::form_urlencoded::parse(query.as_bytes()).flat_map(|(k, v)| [k.into_owned(), v.into_owned()]).collect()
}

pub(super) fn form_serialize(flat: &[String]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for pair in flat.chunks_exact(2) {
        out.append_pair(&pair[0], &pair[1]);
    }
    out.finish()
}

/// Installs the stateless natives on `target` (the prelude's private bindings object).
pub(super) fn install<'js>(ctx: &Ctx<'js>, target: &Object<'js>) -> Result<()> {
    target.set(
        "urlParse",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, input: Value<'js>, base: Value<'js>| {
            let input = value_to_string(&ctx, &input).unwrap_or_default();
            let base = value_to_string(&ctx, &base);
            url_parse(&input, base.as_deref())
        })?,
    )?;
    target.set(
        "urlSet",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, href: Value<'js>, field: Value<'js>, value: Value<'js>| {
            let href = value_to_string(&ctx, &href).unwrap_or_default();
            let field = value_to_string(&ctx, &field).unwrap_or_default();
            let value = value_to_string(&ctx, &value).unwrap_or_default();
            url_set(&href, &field, &value)
        })?,
    )?;
    target.set(
        "formParse",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, query: Value<'js>| {
            form_parse(&value_to_string(&ctx, &query).unwrap_or_default())
        })?,
    )?;
    target.set(
        "formSerialize",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, flat: Value<'js>| -> Result<String> {
            let Some(array) = flat.as_array() else {
                return Err(Exception::throw_type(&ctx, "formSerialize: expected an array"));
            };
            let mut items = Vec::with_capacity(array.len());
            for item in array.iter::<Value<'js>>() {
                items.push(value_to_string(&ctx, &item?).unwrap_or_default());
            }
            Ok(form_serialize(&items))
        })?,
    )?;
    target.set(
        "utf8Encode",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: Value<'js>| {
            let text = value_to_string(&ctx, &text).unwrap_or_default();
            TypedArray::<u8>::new(ctx.clone(), text.into_bytes())
        })?,
    )?;
    target.set(
        "utf8Decode",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, bytes: Value<'js>, fatal: Value<'js>| -> Result<String> {
            let Some(bytes) = typed_bytes(&bytes) else {
                return Err(Exception::throw_type(&ctx, "expected a Uint8Array"));
            };
            if fatal.as_bool().unwrap_or(false) {
                String::from_utf8(bytes)
                    .map_err(|e| Exception::throw_type(&ctx, &format!("The encoded data was not valid UTF-8: {e}")))
            } else {
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        })?,
    )?;
    Ok(())
}
