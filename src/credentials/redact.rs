//! Taking credential values out of what upstreams send back and handlers produce.
//!
//! An upstream that echoes a request (httpbin-style endpoints, many APIs' error bodies, redirect
//! URLs that keep the query) hands the value back in whatever encoding it uses, and a handler that
//! holds any exact form can transform it (reverse it, base64 it) past every later check. So the
//! egress takes the values out of each response before JavaScript sees it (`serve::egress`), and
//! results, console output and errors are scrubbed again after the call as a second layer
//! (`serve::call`).
//!
//! [`Redactor`] looks for every form a value takes on the wire ([`common_forms`] and
//! [`variant_forms`]): as is; percent-encoded the ways clients and servers do it (form encoding
//! with `+` for spaces, RFC 3986, `encodeURIComponent`, `encodeURI`, path quoting; upper- and
//! lower-case hex); JSON-escaped (with or without `\/`, `\uXXXX` for non-ASCII or for `<>&`) and
//! HTML-escaped, each of those also over the percent-encoded forms; and base64 (standard and
//! URL-safe) of the value and, for basic auth, of `user:value`, at each of the three offsets the
//! value can have inside a longer encoded text. The header value as sent (`Bearer <value>`) holds
//! the value as is, so it needs no form of its own. Each form is replaced by `[redacted:NAME]`.
//!
//! The forms of all of a server's credentials are found in one pass: an Aho-Corasick automaton
//! finds where one may start (its first bytes) and the candidates there are compared whole,
//! longest first, so a form that contains another is replaced whole. It is built once per mount.
//! [`BodyRedaction`] does the same over a body read chunk by chunk: it holds back the last
//! (longest form − 1) bytes of what arrived, so a value split across chunks is still found, and
//! never holds more than that.
//!
//! What no scrubbing can catch: an upstream that hands back a part of a value (a byte range, a
//! truncated echo) or a transformation the daemon does not know (a hash, its own encryption).
//! Credentials are warned about when their server may fetch hosts they are not sent to
//! (`Binding::reach_warning`), since a handler could carry such a piece there.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use bytes::BufMut;

use super::credential::{Credential, Injection, MIN_VALUE_CHARS};

/// The most bytes of forms one server keeps. Every credential's common forms ([`common_forms`])
/// are always kept: 32 values of 8 KiB made of characters every encoding writes differently take
/// about 4.5 MiB of them. The rarer variants are added while they fit. Typical keys take a few KiB
/// in all.
const MAX_FORM_BYTES: usize = 8 * 1024 * 1024;
/// Bytes of a form's start that the automaton looks for. Forms are found by their start and then
/// compared whole, so the automaton stays small (it would take about 11 bytes per byte of every
/// form otherwise) and quick to build, whatever the values' lengths.
const ANCHOR_BYTES: usize = 32;

/// Replaces credential values, in every form they take on the wire, with `[redacted:NAME]`.
/// Cheap to clone; empty (and free to run) for a server without credentials.
#[derive(Clone, Default)]
pub struct Redactor {
    forms: Option<Arc<Forms>>,
}

struct Forms {
    /// Finds the starts of forms: the first [`ANCHOR_BYTES`] of each (leftmost-longest).
    anchors: AhoCorasick,
    /// By anchor: the forms that may start where it was found (those that begin with it, and
    /// shorter ones that the anchor begins with), longest first, as indexes into `forms`.
    candidates: Vec<Vec<usize>>,
    forms: Vec<Form>,
    /// Bytes of the longest form.
    longest: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let forms = self.forms.as_ref().map_or(0, |forms| forms.forms.len());
        f.debug_struct("Redactor").field("forms", &forms).finish()
    }
}

impl Redactor {
    pub fn new(credentials: &[Credential]) -> Redactor {
        let markers: Vec<Arc<[u8]>> =
            credentials.iter().map(|c| Arc::from(format!("[redacted:{}]", c.name).into_bytes())).collect();
        let mut kept = KeptForms::default();
        for (credential, marker) in credentials.iter().zip(&markers) {
            for form in common_forms(credential) {
                kept.keep(form, marker);
            }
        }
        // The variants only while they fit; a value's variants are not even written out once the
        // budget is spent.
        for (credential, marker) in credentials.iter().zip(&markers) {
            for form in variant_forms(credential) {
                if kept.bytes.saturating_add(form.len()) > MAX_FORM_BYTES {
                    break;
                }
                kept.keep(form, marker);
            }
        }
        let forms = kept.forms;
        if forms.is_empty() {
            return Redactor::default();
        }
        let mut anchors: Vec<&[u8]> =
            forms.iter().map(|form| &form.text[..form.text.len().min(ANCHOR_BYTES)]).collect();
        anchors.sort();
        anchors.dedup();
        let candidates = anchors
            .iter()
            .map(|anchor| {
                let mut starting: Vec<usize> = (0..forms.len())
                    .filter(|&i| {
                        let form = &forms[i].text;
                        form.starts_with(anchor) || anchor.starts_with(form)
                    })
                    .collect();
                starting.sort_by_key(|&i| std::cmp::Reverse(forms[i].text.len()));
                starting
            })
            .collect();
        let longest = forms.iter().map(|form| form.text.len()).max().unwrap_or(0);
        let anchors = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&anchors)
            .expect("at most a few thousand anchors of 32 bytes, far below the automaton's limits");
        Redactor { forms: Some(Arc::new(Forms { anchors, candidates, forms, longest })) }
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_none()
    }

    /// `text` with every value replaced; borrowed when there is nothing to replace.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.counted_text(text).0
    }

    /// `text` with every value replaced, and how many were.
    pub fn counted_text<'a>(&self, text: &'a str) -> (Cow<'a, str>, usize) {
        match self.counted_bytes(text.as_bytes()) {
            (Cow::Borrowed(_), _) => (Cow::Borrowed(text), 0),
            // Every pattern is whole UTF-8 and so is every marker, so a match in valid UTF-8
            // starts and ends on character boundaries and the result is valid UTF-8 too.
            (Cow::Owned(bytes), count) => (
                Cow::Owned(
                    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                ),
                count,
            ),
        }
    }

    /// `bytes` with every value replaced, and how many were; borrowed when there were none.
    pub fn counted_bytes<'a>(&self, bytes: &'a [u8]) -> (Cow<'a, [u8]>, usize) {
        let Some(forms) = &self.forms else { return (Cow::Borrowed(bytes), 0) };
        if forms.next_form(bytes, 0, bytes.len()).is_none() {
            return (Cow::Borrowed(bytes), 0);
        }
        let mut out = Vec::with_capacity(bytes.len());
        let (_, count) = forms.replace(bytes, bytes.len(), &mut out);
        (Cow::Owned(out), count)
    }

    /// Every string in a JSON value (keys too), scrubbed in place.
    pub fn json(&self, value: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        match value {
            serde_json::Value::String(text) => {
                if let Cow::Owned(scrubbed) = self.text(text) {
                    *text = scrubbed;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|item| self.json(item)),
            serde_json::Value::Object(map) => {
                map.values_mut().for_each(|item| self.json(item));
                // Keys are rebuilt only when one holds a value (rare), keeping their order.
                if map.keys().any(|key| matches!(self.text(key), Cow::Owned(_))) {
                    for (key, item) in std::mem::take(map) {
                        map.insert(self.text(&key).into_owned(), item);
                    }
                }
            }
            _ => {}
        }
    }

    /// Scrubbing for a body that arrives in chunks.
    pub fn body(&self) -> BodyRedaction<'_> {
        BodyRedaction { redactor: self, held: Vec::new(), count: 0 }
    }
}

/// One body being scrubbed as it arrives: [`push`](Self::push) each chunk, then
/// [`finish`](Self::finish).
pub struct BodyRedaction<'a> {
    redactor: &'a Redactor,
    /// The tail of what arrived that could still be the start of a form.
    held: Vec<u8>,
    count: usize,
}

impl BodyRedaction<'_> {
    /// Writes to `out` what of `chunk` (after what was held back) can no longer be part of a value
    /// that continues in a later chunk, with values replaced; holds back the rest.
    pub fn push(&mut self, chunk: &[u8], out: &mut impl BufMut) {
        let Some(forms) = &self.redactor.forms else {
            out.put_slice(chunk);
            return;
        };
        // A match starting before `settled` lies wholly within what arrived, so it is final.
        let settled = |len: usize| len.saturating_sub(forms.longest - 1);
        if self.held.is_empty() {
            let (kept_from, count) = forms.replace(chunk, settled(chunk.len()), out);
            self.held.extend_from_slice(&chunk[kept_from..]);
            self.count += count;
        } else {
            self.held.extend_from_slice(chunk);
            let (kept_from, count) = forms.replace(&self.held, settled(self.held.len()), out);
            self.held.drain(..kept_from);
            self.count += count;
        }
    }

    /// Writes what was held back, with values replaced, and returns how many values were
    /// replaced in the whole body.
    pub fn finish(mut self, out: &mut impl BufMut) -> usize {
        if let Some(forms) = &self.redactor.forms {
            let (_, count) = forms.replace(&self.held, self.held.len(), out);
            self.count += count;
        }
        self.count
    }

    /// Bytes held back so far (at most the longest form less one).
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// One form of a value, and the marker that replaces it.
struct Form {
    text: Box<[u8]>,
    marker: Arc<[u8]>,
}

/// The forms chosen so far, each once.
#[derive(Default)]
struct KeptForms {
    forms: Vec<Form>,
    seen: std::collections::HashSet<String>,
    bytes: usize,
}

impl KeptForms {
    /// Keeps `form` unless it is too short to tell from chance (or kept already).
    fn keep(&mut self, form: String, marker: &Arc<[u8]>) {
        if form.chars().count() >= MIN_VALUE_CHARS && !self.seen.contains(&form) {
            self.bytes += form.len();
            self.forms.push(Form { text: form.clone().into_bytes().into_boxed_slice(), marker: marker.clone() });
            self.seen.insert(form);
        }
    }
}

impl Forms {
    /// Writes `input` to `out` with every form that starts before `settled` replaced, stopping at
    /// the first form at or after it. Returns where the part not written starts (never before
    /// `settled`) and how many forms were replaced.
    fn replace(&self, input: &[u8], settled: usize, out: &mut impl BufMut) -> (usize, usize) {
        let (mut written, mut count) = (0, 0);
        while let Some((start, form)) = self.next_form(input, written, settled) {
            let Form { text, marker } = &self.forms[form];
            out.put_slice(&input[written..start]);
            out.put_slice(marker);
            written = start + text.len();
            count += 1;
        }
        let kept_from = written.max(settled);
        out.put_slice(&input[written..kept_from]);
        (kept_from, count)
    }

    /// The leftmost form in `input` from `from` on that starts before `settled` (the longest
    /// where several start there): its start and index.
    ///
    /// A form starting before `settled` lies wholly within `input` (`settled` is at most the
    /// input's length less the longest form, less one), so comparing it whole is final.
    fn next_form(&self, input: &[u8], from: usize, settled: usize) -> Option<(usize, usize)> {
        let mut at = from;
        while at < settled {
            let found = self.anchors.find(aho_corasick::Input::new(input).span(at..input.len()))?;
            if found.start() >= settled {
                return None;
            }
            let rest = &input[found.start()..];
            let whole =
                self.candidates[found.pattern().as_usize()].iter().find(|&&i| rest.starts_with(&self.forms[i].text));
            if let Some(&form) = whole {
                return Some((found.start(), form));
            }
            // Only the start matched; a form may still begin inside it.
            at = found.start() + 1;
        }
        None
    }
}

/// The forms of a credential's value upstreams use most: as is, form-encoded, JSON-escaped, and
/// base64 of the value and (for basic auth) of `user:value`, as sent.
pub fn common_forms(credential: &Credential) -> Vec<String> {
    let value = &credential.value;
    let mut forms = vec![value.clone(), percent(value, &FORM, true), json_escaped(value, JsonStyle::default())];
    forms.extend(base64_forms(value.as_bytes()));
    if let Injection::Basic { basic } = &credential.binding.inject {
        forms.extend(base64_forms(format!("{}:{value}", basic.username).as_bytes()));
    }
    forms
}

/// The rarer forms of a credential's value: every percent-encoding, and each of those (and the
/// value) inside JSON and HTML as the various encoders escape it. Built lazily, since for a long
/// value of characters every encoding writes differently there are hundreds.
pub fn variant_forms(credential: &Credential) -> impl Iterator<Item = String> + '_ {
    let value = &credential.value;
    let mut in_urls = vec![value.clone()];
    for keeps in [&FORM, &RFC3986, &URI_COMPONENT, &URI, &PATH] {
        for upper in [true, false] {
            in_urls.push(percent(value, keeps, upper));
            if value.contains(' ') && keeps.space_as_plus {
                in_urls.push(percent(value, &Keeps { space_as_plus: false, ..*keeps }, upper));
            }
        }
    }
    in_urls.sort();
    in_urls.dedup();
    in_urls.into_iter().flat_map(|text| {
        let json = JsonStyle::all().filter(|style| style.changes(&text)).map(|style| json_escaped(&text, style));
        let html = HtmlStyle::all().filter(|style| style.changes(&text)).map(|style| html_escaped(&text, style));
        let escaped: Vec<String> = json.chain(html).collect();
        std::iter::once(text).chain(escaped)
    })
}

/// Which bytes a percent-encoding leaves as they are, besides ASCII letters and digits.
#[derive(Clone, Copy)]
struct Keeps {
    unreserved: &'static [u8],
    /// A space is written `+` (form encoding) rather than `%20`.
    space_as_plus: bool,
}

/// `application/x-www-form-urlencoded`, as browsers, `url` and most server frameworks write it.
const FORM: Keeps = Keeps { unreserved: b"*-._", space_as_plus: true };
const RFC3986: Keeps = Keeps { unreserved: b"-._~", space_as_plus: false };
/// JavaScript's `encodeURIComponent`.
const URI_COMPONENT: Keeps = Keeps { unreserved: b"-_.!~*'()", space_as_plus: false };
/// JavaScript's `encodeURI`: what an echoed whole URL keeps.
const URI: Keeps = Keeps { unreserved: b"-_.!~*'();/?:@&=+$,#", space_as_plus: false };
/// Path quoting (Python's `quote`, Go's `PathEscape`-like encoders that keep `/`).
const PATH: Keeps = Keeps { unreserved: b"-._~/", space_as_plus: false };

fn percent(text: &str, keeps: &Keeps, upper: bool) -> String {
    let digits: &[u8; 16] = if upper { b"0123456789ABCDEF" } else { b"0123456789abcdef" };
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || keeps.unreserved.contains(&byte) {
            out.push(byte as char);
        } else if byte == b' ' && keeps.space_as_plus {
            out.push('+');
        } else {
            out.extend(['%', digits[usize::from(byte >> 4)] as char, digits[usize::from(byte & 15)] as char]);
        }
    }
    out
}

/// How a JSON encoder writes a string: which characters it escapes beyond `"` and `\`.
#[derive(Clone, Copy, Default)]
struct JsonStyle {
    /// `/` as `\/` (PHP's `json_encode`).
    slash: bool,
    /// Non-ASCII as `\uXXXX` (Python's `json.dumps`).
    ascii_only: bool,
    /// `<`, `>` and `&` as `\uXXXX` (Go's `encoding/json`, HTML-safe encoders).
    html_safe: bool,
    upper_hex: bool,
}

impl JsonStyle {
    fn all() -> impl Iterator<Item = JsonStyle> {
        (0..16u8).map(|bits| JsonStyle {
            slash: bits & 1 != 0,
            ascii_only: bits & 2 != 0,
            html_safe: bits & 4 != 0,
            upper_hex: bits & 8 != 0,
        })
    }

    /// Whether each choice of this style makes a difference to `text`, so that a style that
    /// writes it as a simpler one does is not built again.
    fn changes(&self, text: &str) -> bool {
        let non_ascii = !text.is_ascii();
        let html = text.contains(['<', '>', '&']);
        (!self.slash || text.contains('/'))
            && (!self.ascii_only || non_ascii)
            && (!self.html_safe || html)
            && (!self.upper_hex || (self.ascii_only && non_ascii) || (self.html_safe && html))
    }
}

fn json_escaped(text: &str, style: JsonStyle) -> String {
    let mut out = String::with_capacity(text.len());
    let unicode = |out: &mut String, unit: u16| {
        out.push_str(&if style.upper_hex { format!("\\u{unit:04X}") } else { format!("\\u{unit:04x}") })
    };
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if style.slash => out.push_str("\\/"),
            '<' | '>' | '&' if style.html_safe => unicode(&mut out, c as u16),
            c if c.is_control() || (style.ascii_only && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    unicode(&mut out, *unit);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// How an HTML encoder writes the characters it escapes.
#[derive(Clone, Copy)]
struct HtmlStyle {
    quote: &'static str,
    apostrophe: &'static str,
    slash: &'static str,
}

impl HtmlStyle {
    fn all() -> impl Iterator<Item = HtmlStyle> {
        ["&quot;", "&#34;"].into_iter().flat_map(|quote| {
            ["&#39;", "&#x27;"].into_iter().flat_map(move |apostrophe| {
                ["/", "&#x2F;"].into_iter().map(move |slash| HtmlStyle { quote, apostrophe, slash })
            })
        })
    }
}

impl HtmlStyle {
    /// Whether each choice of this style makes a difference to `text` (see `JsonStyle::changes`).
    fn changes(&self, text: &str) -> bool {
        (self.quote == "&quot;" || text.contains('"'))
            && (self.apostrophe == "&#39;" || text.contains('\''))
            && (self.slash == "/" || text.contains('/'))
    }
}

fn html_escaped(text: &str, style: HtmlStyle) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str(style.quote),
            '\'' => out.push_str(style.apostrophe),
            '/' => out.push_str(style.slash),
            c => out.push(c),
        }
    }
    out
}

/// `bytes` in base64, standard and URL-safe: whole (with and without padding, as a header or a
/// token carries it), and the characters that depend on `bytes` alone at each of the three
/// offsets `bytes` can have inside a longer encoded text.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut forms = Vec::new();
    for engine in [STANDARD, URL_SAFE] {
        let whole = engine.encode(bytes);
        forms.push(whole.trim_end_matches('=').to_string());
        forms.push(whole);
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            // Character i holds bits 6i..6i+6; keep those that lie within `bytes`.
            let (first, end) = ((8 * offset).div_ceil(6), 8 * (offset + bytes.len()) / 6);
            forms.push(encoded[first..end].to_string());
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::credential::{BasicUser, Binding, check_value};

    fn credential(name: &str, value: &str, inject: Injection) -> Credential {
        Credential {
            name: name.into(),
            binding: Binding { domains: vec!["api.example.test".into()], inject, per_user: None },
            value: value.into(),
        }
    }

    fn header() -> Injection {
        Injection::Header { header: "authorization".into(), format: "token {value}".into() }
    }

    #[test]
    fn redaction_covers_the_forms_a_value_takes_on_the_wire() {
        let redactor = Redactor::new(&[
            credential("gh", "ghp_secret/value+1", header()),
            credential("basic", "hunter2hunter2", Injection::Basic { basic: BasicUser { username: "me".into() } }),
        ]);
        let text = "a ghp_secret/value+1 b ghp_secret%2Fvalue%2B1 c bWU6aHVudGVyMmh1bnRlcjI= d";
        assert_eq!(redactor.text(text), "a [redacted:gh] b [redacted:gh] c [redacted:basic] d");
        let mut json = serde_json::json!({"echo": ["x ghp_secret/value+1"], "ghp_secret/value+1": 1});
        redactor.json(&mut json);
        assert_eq!(json, serde_json::json!({"echo": ["x [redacted:gh]"], "[redacted:gh]": 1}));
        assert!(matches!(redactor.text("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn every_encoding_an_echo_may_use_is_found() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let value = "k3y/with+sp ce=\"é<&>'";
        let redactor = Redactor::new(&[credential("key", value, header())]);
        let mut echoes = vec![
            value.to_string(),
            "k3y%2Fwith%2Bsp+ce%3D%22%C3%A9%3C%26%3E%27".into(),
            "k3y%2fwith%2bsp+ce%3d%22%c3%a9%3c%26%3e%27".into(),
            "k3y%2Fwith%2Bsp%20ce%3D%22%C3%A9%3C%26%3E'".into(),
            "k3y/with+sp%20ce=%22%C3%A9%3C&%3E'".into(),
            "k3y/with%2Bsp%20ce%3D%22%C3%A9%3C%26%3E%27".into(),
            "k3y/with+sp ce=\\\"é<&>'".into(),
            "k3y\\/with+sp ce=\\\"\\u00e9<&>'".into(),
            "k3y/with+sp ce=\\\"\\u00E9\\u003C\\u0026\\u003E'".into(),
            "k3y/with+sp ce=&quot;é&lt;&amp;&gt;&#39;".into(),
            "k3y&#x2F;with+sp ce=&#34;é&lt;&amp;&gt;&#x27;".into(),
            STANDARD.encode(value),
            URL_SAFE_NO_PAD.encode(value),
        ];
        // Inside a longer base64 text, at each offset.
        for prefix in ["", "a", "ab"] {
            echoes.push(STANDARD.encode(format!("{prefix}{value} and more")));
        }
        for echo in echoes {
            let text = format!("before {echo} after");
            let (scrubbed, count) = redactor.counted_text(&text);
            assert!(count >= 1 && scrubbed.contains("[redacted:key]"), "{echo:?} was not found: {scrubbed}");
        }
    }

    #[test]
    fn a_value_split_across_chunks_is_found_and_nothing_else_changes() {
        let value = "split-secret-0123456789";
        let redactor = Redactor::new(&[credential("key", value, header())]);
        let body = format!("{{\"a\": \"{value}\", \"b\": \"x{value}{value}\", \"c\": \"{}\"}} tail", &value[..10]);
        let expected = redactor.text(&body).into_owned();
        let longest = redactor.forms.as_ref().unwrap().longest;
        assert_eq!(expected.matches("[redacted:key]").count(), 3, "{expected}");
        // Every chunk size from one byte to the whole body, so that every boundary falls inside a
        // value somewhere.
        for size in 1..=body.len() {
            let mut redaction = redactor.body();
            let mut out = Vec::new();
            for chunk in body.as_bytes().chunks(size) {
                redaction.push(chunk, &mut out);
                assert!(redaction.held() < longest, "holds back less than the longest form");
            }
            assert_eq!(redaction.finish(&mut out), 3, "chunks of {size}");
            assert_eq!(String::from_utf8(out).unwrap(), expected, "chunks of {size}");
        }
    }

    #[test]
    fn bodies_that_are_not_text_are_scrubbed_as_bytes() {
        let redactor = Redactor::new(&[credential("key", "binary-secret-42", header())]);
        let mut body = vec![0xff, 0x00, 0xfe];
        body.extend_from_slice(b"binary-secret-42");
        body.extend_from_slice(&[0x80, 0x81]);
        let mut redaction = redactor.body();
        let mut out = Vec::new();
        for chunk in body.chunks(5) {
            redaction.push(chunk, &mut out);
        }
        assert_eq!(redaction.finish(&mut out), 1);
        assert_eq!(out, [&[0xff, 0x00, 0xfe][..], b"[redacted:key]", &[0x80, 0x81]].concat());
    }

    #[test]
    fn a_server_without_credentials_passes_bodies_through() {
        let redactor = Redactor::new(&[]);
        assert!(redactor.is_empty());
        let mut redaction = redactor.body();
        let mut out = Vec::new();
        redaction.push(b"anything", &mut out);
        assert_eq!((redaction.finish(&mut out), out.as_slice()), (0, &b"anything"[..]));
    }

    #[test]
    fn forms_stay_within_their_budget_for_the_largest_credentials() {
        // The most a server may have: 32 values of 8 KiB, every character one that encodings
        // write differently.
        let value = |i: usize| format!("{i:02}{}", "/+= \"<é'".repeat(1000)).chars().take(7200).collect::<String>();
        let credentials: Vec<Credential> = (0..32).map(|i| credential(&format!("k{i}"), &value(i), header())).collect();
        assert!(credentials.iter().all(|c| check_value(&c.value).is_ok()));
        let redactor = Redactor::new(&credentials);
        let forms = redactor.forms.as_ref().unwrap();
        let kept: std::collections::HashSet<&[u8]> = forms.forms.iter().map(|form| &*form.text).collect();
        for credential in &credentials {
            for form in common_forms(credential) {
                assert!(kept.contains(form.as_bytes()), "every common form of {} is kept", credential.name);
            }
        }
        let form_bytes: usize = forms.forms.iter().map(|form| form.text.len()).sum();
        assert!(form_bytes <= MAX_FORM_BYTES, "{form_bytes} bytes");
        assert!(forms.anchors.memory_usage() < 1 << 20, "{} bytes", forms.anchors.memory_usage());
        // Found in a body as well as short keys are.
        let body = format!("{{\"echo\": {}}}", serde_json::to_string(&credentials[31].value).unwrap());
        assert_eq!(redactor.counted_text(&body).1, 1);
    }
}
