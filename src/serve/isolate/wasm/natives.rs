//! The natives behind the prelude: `fetch`, timers, `console`, `URL`, `URLSearchParams`,
//! `TextEncoder`/`TextDecoder` and `Math.random`, as the `env.host_call` import.
//!
//! The module's host functions all arrive through one import with the function's name (the
//! names in [`NAMES`], installed on the prelude's private bindings object when the image is
//! built) and its arguments as boxed `JSValue`s; the result goes back as a `malloc`ed box, or
//! 0 with an exception pending. The call's state they act on is `state.rs`; the parts of
//! URL and form handling that need no guest are `web.rs`.
//!
//! Arguments come from the prelude, not from handler code, but nothing here trusts them: a
//! value of the wrong type is a `TypeError`, never a panic, and only values that already are
//! strings are read as strings (so reading one never runs JavaScript). Copies made outside the
//! instance's memory are charged to the call's budget first.

use bytes::Bytes;
use wasmtime::{Caller, Linker, Result};

use super::super::invocation::{FetchRequest, RedirectMode};
use super::guest::{self, Guest, JsValue};
use super::host::Host;
use super::web::{FORM_COPIES, URL_COPIES, form_parse, form_serialize, is_token, url_parse, url_set, wtf8_lossy};

/// The natives and their arities.
pub const NAMES: &[(&str, i32)] = &[
    ("fetchStart", 5),
    ("timerSet", 1),
    ("timerClear", 1),
    ("console", 2),
    ("urlParse", 2),
    ("urlSet", 3),
    ("formParse", 1),
    ("formSerialize", 1),
    ("utf8Encode", 1),
    ("utf8Decode", 2),
];

pub fn define(linker: &mut Linker<Host>) -> Result<()> {
    linker.func_wrap_async(
        "env",
        "host_call",
        |mut caller: Caller<'_, Host>, (name, name_len, _this, argc, argv): (i32, i32, i32, i32, i32)| {
            Box::new(async move { dispatch(&mut caller, name, name_len, argc, argv).await })
        },
    )?;
    Ok(())
}

/// What a native returns: a value, or a thrown error (`TypeError`/`RangeError` with a
/// message, or QuickJS's own "out of memory").
enum Answer {
    Value(JsValue),
    TypeError(String),
    RangeError(String),
    OutOfMemory,
}

/// The most arguments a native is called with (`fetchStart` takes five).
const MAX_ARGUMENTS: i32 = 8;

async fn dispatch(caller: &mut Caller<'_, Host>, name: i32, name_len: i32, argc: i32, argv: i32) -> Result<i32> {
    let (Some(guest), Some(image)) = (caller.data().guest.clone(), caller.data().image.clone()) else {
        // Building the image or checking syntax: no call, so no native may run.
        wasmtime::bail!("a native was called outside a call");
    };
    let name = String::from_utf8_lossy(guest.read(&*caller, name, name_len.max(0) as usize)?).into_owned();
    // The natives take a handful of arguments; a count the guest chose must not size an
    // allocation here.
    if !(0..=MAX_ARGUMENTS).contains(&argc) {
        wasmtime::bail!("a native was called with {argc} arguments");
    }
    let mut args = Vec::with_capacity(argc as usize);
    for index in 0..argc.max(0) {
        let boxed = guest.read_u32(&*caller, argv + index * 4)?;
        args.push(guest.read_u64(&*caller, boxed as i32)? as i64);
    }
    let arg = |index: usize| args.get(index).copied().unwrap_or(guest::UNDEFINED);
    let scratch = image.native_scratch;
    let answer = match name.as_str() {
        "fetchStart" => fetch_start(caller, &guest, scratch, [arg(0), arg(1), arg(2), arg(3), arg(4)]).await?,
        "timerSet" => {
            let delay = guest.to_number(&mut *caller, arg(0), scratch).await?.unwrap_or(0.0);
            let call = caller.data_mut().call.as_mut().expect("natives run inside a call");
            match call.set_timer(delay) {
                Ok(id) => Answer::Value(guest.new_number(&mut *caller, f64::from(id)).await?),
                Err(hit) => Answer::RangeError(hit.message(&call.limits)),
            }
        }
        "timerClear" => {
            if let Some(id) = guest::as_int(arg(0)).and_then(|id| u32::try_from(id).ok()) {
                caller.data_mut().call.as_mut().expect("natives run inside a call").timers.clear(id);
            }
            Answer::Value(guest::UNDEFINED)
        }
        "console" => {
            let level = read_string(caller, &guest, arg(0), scratch).await?.unwrap_or_default();
            let level = match level.as_str() {
                "log" | "info" | "warn" | "error" | "debug" => level,
                _ => "log".to_owned(),
            };
            match charged_string(caller, &guest, arg(1), scratch).await? {
                Err(answer) => answer,
                Ok((line, charged)) => {
                    let call = caller.data_mut().call.as_mut().expect("natives run inside a call");
                    let wanted = call.console.push(&level, &line.unwrap_or_default());
                    caller.data_mut().memory.give_back(charged);
                    Answer::Value(guest::make(guest::tag::BOOL, u32::from(wanted)))
                }
            }
        }
        "urlParse" => {
            let input = read_string(caller, &guest, arg(0), scratch).await?.unwrap_or_default();
            let base = read_string(caller, &guest, arg(1), scratch).await?;
            let work = (input.len() + base.as_ref().map_or(0, String::len)) * URL_COPIES;
            match with_charge(caller, work, || url_parse(&input, base.as_deref())) {
                Some(parts) => strings(caller, &guest, &image, parts).await?,
                None => Answer::OutOfMemory,
            }
        }
        "urlSet" => {
            let href = read_string(caller, &guest, arg(0), scratch).await?.unwrap_or_default();
            let field =
                read_string(caller, &guest, arg(1), scratch).await?.filter(|f| f.len() <= 16).unwrap_or_default();
            let value = read_string(caller, &guest, arg(2), scratch).await?.unwrap_or_default();
            let work = (href.len() + value.len()) * URL_COPIES;
            match with_charge(caller, work, || url_set(&href, &field, &value)) {
                Some(parts) => strings(caller, &guest, &image, parts).await?,
                None => Answer::OutOfMemory,
            }
        }
        "formParse" => {
            let query = read_string(caller, &guest, arg(0), scratch).await?.unwrap_or_default();
            let work = query.len() * FORM_COPIES;
            match with_charge(caller, work, || form_parse(&query)) {
                Some(parts) => strings(caller, &guest, &image, Some(parts)).await?,
                None => Answer::OutOfMemory,
            }
        }
        "formSerialize" => {
            let list = arg(0);
            match guest.length(&mut *caller, list, scratch).await? {
                None => Answer::TypeError("formSerialize: expected an array".to_owned()),
                Some(len) => {
                    let mut items = Vec::new();
                    let mut work = 0;
                    for index in 0..len.min(u32::MAX as u64) as u32 {
                        let item = guest.get_index(&mut *caller, list, index).await?;
                        let text = read_string(caller, &guest, item, scratch).await?.unwrap_or_default();
                        work += text.len() * (FORM_COPIES + 1);
                        items.push(text);
                    }
                    match with_charge(caller, work, || form_serialize(&items)) {
                        Some(text) => Answer::Value(guest.new_string(&mut *caller, &text).await?),
                        None => Answer::OutOfMemory,
                    }
                }
            }
        }
        "utf8Encode" => utf8_encode(caller, &guest, arg(0), scratch).await?,
        "utf8Decode" => utf8_decode(caller, &guest, arg(0), guest::as_bool(arg(1)).unwrap_or(false), scratch).await?,
        "random" => {
            let value = caller.data_mut().call.as_mut().expect("natives run inside a call").next_random();
            Answer::Value(guest.new_number(&mut *caller, value).await?)
        }
        other => Answer::TypeError(format!("no native named {other}")),
    };
    match answer {
        Answer::Value(value) => guest.boxed(&mut *caller, value).await,
        Answer::TypeError(message) => throw(caller, &guest, image.type_error, &message, scratch).await,
        Answer::RangeError(message) => throw(caller, &guest, image.range_error, &message, scratch).await,
        Answer::OutOfMemory => {
            guest.throw_out_of_memory(&mut *caller).await?;
            Ok(0)
        }
    }
}

/// Throws `new constructor(message)` and returns the "exception pending" result.
async fn throw(
    caller: &mut Caller<'_, Host>,
    guest: &Guest,
    constructor: JsValue,
    message: &str,
    scratch: i32,
) -> Result<i32> {
    let message = guest.new_string(&mut *caller, message).await?;
    let error = guest.construct(&mut *caller, constructor, &[message], scratch).await?;
    if !guest::is_exception(error) {
        guest.throw(&mut *caller, error).await?;
    }
    Ok(0)
}

/// A string argument (lossy for lone surrogates), `None` if the value is not a string. Not
/// charged: for strings whose size the caller bounds, or charges itself.
async fn read_string(
    caller: &mut Caller<'_, Host>,
    guest: &Guest,
    value: JsValue,
    scratch: i32,
) -> Result<Option<String>> {
    if !guest::is_string(value) {
        return Ok(None);
    }
    guest.with_string(&mut *caller, value, scratch, wtf8_lossy).await
}

/// A string argument with its copy charged to the call (returned with the bytes charged, to
/// give back when the copy is dropped), or the answer that the budget refused it.
async fn charged_string(
    caller: &mut Caller<'_, Host>,
    guest: &Guest,
    value: JsValue,
    scratch: i32,
) -> Result<Result<(Option<String>, usize), Answer>> {
    if !guest::is_string(value) {
        return Ok(Ok((None, 0)));
    }
    let text = guest.with_string(&mut *caller, value, scratch, |bytes| bytes.len()).await?.unwrap_or(0);
    if !caller.data_mut().memory.take(text) {
        return Ok(Err(Answer::OutOfMemory));
    }
    let string = read_string(caller, guest, value, scratch).await?;
    Ok(Ok((string, text)))
}

/// Runs `f` with `bytes` charged for its duration; `None` if the budget refused them.
fn with_charge<R>(caller: &mut Caller<'_, Host>, bytes: usize, f: impl FnOnce() -> R) -> Option<R> {
    if !caller.data_mut().memory.take(bytes) {
        return None;
    }
    let out = f();
    caller.data_mut().memory.give_back(bytes);
    Some(out)
}

/// An array of strings (or `null`) for JS, built by parsing its JSON in the instance.
async fn strings(
    caller: &mut Caller<'_, Host>,
    guest: &Guest,
    image: &super::image::Image,
    parts: Option<Vec<String>>,
) -> Result<Answer> {
    {
        let json = match parts {
            Some(parts) => serde_json::to_string(&parts).unwrap_or_else(|_| "null".to_owned()),
            None => "null".to_owned(),
        };
        if !caller.data_mut().memory.take(json.len()) {
            return Ok(Answer::OutOfMemory);
        }
        let value = guest.parse_json(&mut *caller, &json, image.arguments_file).await?;
        caller.data_mut().memory.give_back(json.len());
        Ok(if guest::is_exception(value) { Answer::OutOfMemory } else { Answer::Value(value) })
    }
}

/// `TextEncoder.encode`: the UTF-8 bytes of a string (lone surrogates as U+FFFD).
async fn utf8_encode(caller: &mut Caller<'_, Host>, guest: &Guest, text: JsValue, scratch: i32) -> Result<Answer> {
    if !guest::is_string(text) {
        return Ok(Answer::Value(guest.new_uint8_array(&mut *caller, &[]).await?));
    }
    // Well-formed text goes from QuickJS's bytes to the new array without leaving the instance.
    let ptr_len = guest
        .with_string(&mut *caller, text, scratch, |bytes| (std::str::from_utf8(bytes).is_ok(), bytes.len()))
        .await?;
    let Some((valid, len)) = ptr_len else { return Ok(Answer::OutOfMemory) };
    if valid {
        let encoded = encode_in_place(caller, guest, text, scratch).await?;
        return Ok(Answer::Value(encoded));
    }
    if !caller.data_mut().memory.take(len) {
        return Ok(Answer::OutOfMemory);
    }
    let text = guest.with_string(&mut *caller, text, scratch, wtf8_lossy).await?.unwrap_or_default();
    let value = guest.new_uint8_array(&mut *caller, text.as_bytes()).await?;
    caller.data_mut().memory.give_back(len);
    Ok(Answer::Value(value))
}

/// A `Uint8Array` copied from a string's UTF-8 bytes inside the instance.
async fn encode_in_place(caller: &mut Caller<'_, Host>, guest: &Guest, text: JsValue, scratch: i32) -> Result<JsValue> {
    // `with_string` frees the C string after the closure, so copy within one conversion: get
    // the pointer, make the array, then free.
    let (ptr, len) = guest.c_string(&mut *caller, text, scratch).await?;
    let value = guest.new_uint8_array_at(&mut *caller, ptr, len).await?;
    guest.free_c_string(&mut *caller, ptr).await?;
    Ok(value)
}

/// `TextDecoder.decode`: UTF-8 bytes to a string, invalid sequences as U+FFFD or, when
/// `fatal`, a `TypeError`.
async fn utf8_decode(
    caller: &mut Caller<'_, Host>,
    guest: &Guest,
    bytes: JsValue,
    fatal: bool,
    scratch: i32,
) -> Result<Answer> {
    let Some((ptr, len)) = guest.uint8_array(&mut *caller, bytes, scratch).await? else {
        return Ok(Answer::TypeError("expected a Uint8Array".to_owned()));
    };
    let data = guest.read(&*caller, ptr, len)?;
    let (invalid, size) = match std::str::from_utf8(data) {
        Ok(_) => (None, 0),
        Err(error) => {
            let size: usize =
                data.utf8_chunks().map(|c| c.valid().len() + if c.invalid().is_empty() { 0 } else { 3 }).sum();
            (Some(error.to_string()), size)
        }
    };
    match invalid {
        None => Ok(Answer::Value(guest.new_string_at(&mut *caller, ptr, len).await?)),
        Some(error) if fatal => Ok(Answer::TypeError(format!("The encoded data was not valid UTF-8: {error}"))),
        Some(_) => {
            if !caller.data_mut().memory.take(size) {
                return Ok(Answer::OutOfMemory);
            }
            let text = String::from_utf8_lossy(guest.read(&*caller, ptr, len)?).into_owned();
            let value = guest.new_string(&mut *caller, &text).await?;
            caller.data_mut().memory.give_back(size);
            Ok(Answer::Value(value))
        }
    }
}

/// `fetchStart(url, method, headers, body, redirect)`: validates what the prelude passed (it
/// checks all of this too; the request leaves the sandbox), charges the request's copies and
/// starts or queues the fetch. Returns its id.
async fn fetch_start(caller: &mut Caller<'_, Host>, guest: &Guest, scratch: i32, args: [JsValue; 5]) -> Result<Answer> {
    let [url, method, headers, body, redirect] = args;
    let call = caller.data_mut().call.as_mut().expect("natives run inside a call");
    if let Err(hit) = call.may_fetch() {
        return Ok(Answer::RangeError(hit.message(&call.limits)));
    }
    let mut charged = 0usize;
    let answer = async {
        let url = match charged_string(caller, guest, url, scratch).await? {
            Err(answer) => return Ok(Err(answer)),
            Ok((None, _)) => return Ok(Err(Answer::TypeError("fetch: the URL must be a string".into()))),
            Ok((Some(url), bytes)) => {
                charged += bytes;
                url
            }
        };
        let Some(method) = read_string(caller, guest, method, scratch).await?.filter(|m| is_token(m)) else {
            return Ok(Err(Answer::TypeError("fetch: invalid method".into())));
        };
        let Some(redirect) =
            read_string(caller, guest, redirect, scratch).await?.and_then(|r| r.parse::<RedirectMode>().ok())
        else {
            return Ok(Err(Answer::TypeError("fetch: invalid redirect mode".into())));
        };
        let Some(count) = guest.length(&mut *caller, headers, scratch).await?.filter(|_| guest::is_object(headers))
        else {
            return Ok(Err(Answer::TypeError("fetch: invalid headers".into())));
        };
        let mut flat = Vec::new();
        for index in 0..count.min(u32::MAX as u64) as u32 {
            let item = guest.get_index(&mut *caller, headers, index).await?;
            match charged_string(caller, guest, item, scratch).await? {
                Err(answer) => return Ok(Err(answer)),
                Ok((text, bytes)) => {
                    charged += bytes;
                    flat.push(text.unwrap_or_default());
                }
            }
        }
        let mut pairs = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks_exact(2) {
            let (name, value) = (&pair[0], &pair[1]);
            if !is_token(name) || value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
                return Ok(Err(Answer::TypeError(format!("fetch: invalid header '{name}'"))));
            }
            pairs.push((name.to_ascii_lowercase(), value.clone()));
        }
        let body = if body == guest::UNDEFINED || body == guest::NULL {
            None
        } else {
            let Some((ptr, len)) = guest.uint8_array(&mut *caller, body, scratch).await? else {
                return Ok(Err(Answer::TypeError("fetch: invalid body".into())));
            };
            if !caller.data_mut().memory.take(len) {
                return Ok(Err(Answer::OutOfMemory));
            }
            charged += len;
            Some(Bytes::copy_from_slice(guest.read(&*caller, ptr, len)?))
        };
        Ok::<_, wasmtime::Error>(Ok(FetchRequest { url, method, headers: pairs, body, redirect }))
    }
    .await?;
    match answer {
        Ok(request) => {
            let id = caller.data_mut().call.as_mut().expect("natives run inside a call").start_fetch(request, charged);
            Ok(Answer::Value(guest.new_number(&mut *caller, f64::from(id)).await?))
        }
        Err(answer) => {
            caller.data_mut().memory.give_back(charged);
            Ok(answer)
        }
    }
}
