//! The parts of the web APIs the natives implement that need no guest: WHATWG URL parsing and
//! setters, form encoding, the decoding of QuickJS's WTF-8 strings and the HTTP token rule
//! `fetch` checks methods and header names with.
//!
//! Everything here is a pure function of its arguments; `natives.rs` reads the arguments out of
//! the guest, charges the copies to the call and hands the answers back.

use url::Url;

/// What a URL operation may build from an input of `n` bytes at most: the parsed URL and its
/// eleven components, each at most the href, which percent-encoding makes at most three times
/// the input. Charged while the operation runs; the strings handed to JS are QuickJS's.
pub const URL_COPIES: usize = 3 * 13;
/// Form encoding at most triples its input; parsing never grows it.
pub const FORM_COPIES: usize = 3 + 1;

/// Decodes QuickJS's WTF-8 (UTF-8 that may encode lone surrogates as `ED A0..BF xx`),
/// turning each lone surrogate — or any other invalid sequence — into one U+FFFD, which is
/// what `String.prototype.toWellFormed` and `TextEncoder` would produce. For WTF-8 input the
/// output has the input's length (a surrogate and U+FFFD both take three bytes).
pub fn wtf8_lossy(mut bytes: &[u8]) -> String {
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

/// An HTTP token (RFC 9110): what a method or a header name must be.
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `[href, origin, protocol, username, password, host, hostname, port, pathname, search,
/// hash]`, the WHATWG getters, in the order the prelude's `URL` class expects.
fn url_components(url: &Url) -> Vec<String> {
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

/// `new URL(input, base)`: the components, or `None` when it does not parse.
pub fn url_parse(input: &str, base: Option<&str>) -> Option<Vec<String>> {
    let url = match base {
        Some(base) => Url::parse(base).ok()?.join(input).ok()?,
        None => Url::parse(input).ok()?,
    };
    Some(url_components(&url))
}

/// Applies a WHATWG setter. Invalid values leave the URL unchanged, as in browsers, except
/// for `href`, where the caller gets `None` (the prelude throws a `TypeError`).
pub fn url_set(href: &str, field: &str, value: &str) -> Option<Vec<String>> {
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
pub fn form_parse(query: &str) -> Vec<String> {
    url::form_urlencoded::parse(query.as_bytes()).flat_map(|(k, v)| [k.into_owned(), v.into_owned()]).collect()
}

/// The inverse of [`form_parse`]: `[k1, v1, k2, v2, ...]` as a query string.
pub fn form_serialize(flat: &[String]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for pair in flat.chunks_exact(2) {
        out.append_pair(&pair[0], &pair[1]);
    }
    out.finish()
}
