//! HTML to plain text, and link extraction, for documentation pages that are handed to the LLM.
//!
//! Both are single-pass, hand-written scanners over the input — linear in its size, no DOM, no
//! regular expressions — because documentation pages can be megabytes of markup and all we need
//! is text a model can read (it tolerates noise; a full HTML parser would buy little).
//!
//! [`html_to_text`]:
//! * drops page chrome and non-text content together with everything inside it: `script`,
//!   `style`, `nav`, `header`, `footer`, `noscript`, `svg`, `template`, `iframe`, `object`,
//!   `canvas`. A `header`/`footer` *inside* `article`, `main` or `section` is kept: there it is the
//!   section's own heading (often the endpoint's name), not the site banner;
//! * drops comments, doctypes and processing instructions;
//! * turns block elements into line breaks (paragraph-like ones into a blank line) and table
//!   cells into ` | ` separators, strips all other tags;
//! * decodes character references (common named ones, decimal and hex; invalid code points
//!   become U+FFFD);
//! * collapses whitespace outside `<pre>`, trims trailing spaces and collapses blank-line runs;
//! * keeps `<pre>` content verbatim inside a Markdown code fence, labelled with the language
//!   from a `language-xxx` / `lang-xxx` class when there is one, so code samples stay readable
//!   and the summarising rule in `docs` can recognise JSON/YAML/HTTP blocks.
//!
//! Unclosed elements and tags at the end of input are tolerated: what cannot be closed is
//! treated as running to the end.
//!
//! [`extract_links`] finds absolute http(s) URLs in `href`/`src` attributes (resolved against a
//! base) and bare URLs in text; it works on HTML and on Markdown, JSON or plain text alike.

use std::collections::HashSet;

use url::Url;

/// Most links [`extract_links`] returns for one document.
pub const MAX_LINKS: usize = 500;
/// Longer URL tokens are ignored (the egress refuses URLs over 16 KiB anyway).
const MAX_URL_CHARS: usize = 4096;

// ---------------------------------------------------------------------------------------------
// HTML → text
// ---------------------------------------------------------------------------------------------

/// Converts an HTML document (or fragment) to readable plain text. Never panics.
pub fn html_to_text(html: &str) -> String {
    let bytes = html.as_bytes();
    let mut writer = Writer::with_capacity(html.len() / 2);
    // The element being dropped with its content, and how deeply it is nested in itself.
    let mut skip: Option<(&'static str, usize)> = None;
    // Open `article` / `main` / `section` elements (see the module doc on header/footer).
    let mut sectioning = 0usize;
    let mut i = 0;
    let mut text_start = 0;
    while i < bytes.len() {
        let Some(offset) = memchr(b'<', &bytes[i..]) else { break };
        let lt = i + offset;
        let markup = match markup_at(html, lt) {
            Some(markup) => markup,
            None => {
                // A `<` that starts no markup ("a < b") is text; keep scanning the same run.
                i = lt + 1;
                continue;
            }
        };
        if skip.is_none() {
            writer.text(&html[text_start..lt]);
        }
        i = match markup {
            Markup::Comment { end } | Markup::Declaration { end } => end,
            Markup::Tag(tag) => {
                let mut next = tag.end;
                if tag.role == Role::RawText && !tag.closing {
                    // Script-like content is not markup: jump to the matching end tag.
                    next = end_of_raw_text(html, tag.end, tag.name);
                } else if let Some((skipped, depth)) = skip.as_mut() {
                    if tag.name == *skipped {
                        if tag.closing {
                            *depth -= 1;
                            if *depth == 0 {
                                skip = None;
                                writer.block(1);
                            }
                        } else if !tag.self_closing {
                            *depth += 1;
                        }
                    }
                } else {
                    open_or_close(&tag, html, &mut writer, &mut skip, &mut sectioning);
                }
                next
            }
        };
        text_start = i;
    }
    if skip.is_none() && text_start < html.len() {
        writer.text(&html[text_start..]);
    }
    writer.finish()
}

/// What a tag means to the converter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Content is raw text, not markup (`script`, `style`), and is dropped.
    RawText,
    /// Dropped with everything inside (page chrome, non-text content); nesting is counted.
    Dropped,
    Pre,
    Code,
    /// `article`, `main`, `section`: a `header`/`footer` inside them is kept.
    Sectioning,
    /// A table cell: ` | ` between cells.
    Cell,
    /// A block element standing for this many line breaks (2 = a blank line).
    Block(u8),
    /// Everything else: the tag disappears, its text stays.
    Inline,
}

/// The lowercase name and role of a tag, for the names the converter treats specially (other
/// names come back as `("", Inline)`). One `match` on the lowercased bytes: this runs for every
/// tag of a page, so it must not scan lists.
fn tag_role(raw_name: &[u8]) -> (&'static str, Role) {
    use Role::*;
    let mut buffer = [0u8; 10];
    let Some(name) = buffer.get_mut(..raw_name.len()) else { return ("", Inline) };
    name.copy_from_slice(raw_name);
    name.make_ascii_lowercase();
    match &*name {
        b"script" => ("script", RawText),
        b"style" => ("style", RawText),
        b"xmp" => ("xmp", RawText),
        b"noembed" => ("noembed", RawText),
        b"noframes" => ("noframes", RawText),
        b"plaintext" => ("plaintext", RawText),
        b"nav" => ("nav", Dropped),
        b"header" => ("header", Dropped),
        b"footer" => ("footer", Dropped),
        b"noscript" => ("noscript", Dropped),
        b"svg" => ("svg", Dropped),
        b"template" => ("template", Dropped),
        b"iframe" => ("iframe", Dropped),
        b"object" => ("object", Dropped),
        b"canvas" => ("canvas", Dropped),
        b"pre" => ("pre", Pre),
        b"code" => ("code", Code),
        b"article" => ("article", Sectioning),
        b"main" => ("main", Sectioning),
        b"section" => ("section", Sectioning),
        b"td" => ("td", Cell),
        b"th" => ("th", Cell),
        b"p" | b"h1" | b"h2" | b"h3" | b"h4" | b"h5" | b"h6" | b"table" | b"aside" | b"blockquote" | b"ul" | b"ol"
        | b"dl" | b"figure" | b"form" | b"fieldset" | b"details" | b"address" | b"hgroup" => ("", Block(2)),
        b"br" | b"div" | b"li" | b"tr" | b"dt" | b"dd" | b"title" | b"summary" | b"figcaption" | b"caption"
        | b"option" | b"hr" | b"legend" | b"center" | b"thead" | b"tbody" | b"tfoot" | b"body" | b"html" | b"head"
        | b"menu" | b"textarea" => ("", Block(1)),
        _ => ("", Inline),
    }
}

fn open_or_close(
    tag: &Tag,
    html: &str,
    writer: &mut Writer,
    skip: &mut Option<(&'static str, usize)>,
    sectioning: &mut usize,
) {
    // A `header`/`footer` inside a sectioning element is that section's own heading, kept as a
    // paragraph-like block; elsewhere it is the site's banner or footer, dropped.
    let kept_heading = matches!(tag.name, "header" | "footer") && *sectioning > 0;
    if tag.closing {
        match tag.role {
            Role::Pre => writer.close_pre(),
            Role::Sectioning => {
                *sectioning = sectioning.saturating_sub(1);
                writer.block(2);
            }
            Role::Dropped if kept_heading => writer.block(2),
            Role::Block(breaks) => writer.block(breaks),
            _ => {}
        }
        return;
    }
    match tag.role {
        Role::Dropped if kept_heading => writer.block(2),
        Role::Dropped => {
            // `<svg/>` is self-closing (foreign content): it has nothing to drop.
            if !tag.self_closing {
                *skip = Some((tag.name, 1));
            }
            writer.block(1);
        }
        Role::Pre => writer.open_pre(&code_language(attribute(html, tag, "class").as_deref())),
        Role::Code => writer.code_in_pre(&code_language(attribute(html, tag, "class").as_deref())),
        Role::Sectioning => {
            *sectioning += 1;
            writer.block(2);
        }
        Role::Cell => writer.cell(),
        Role::Block(breaks) => writer.block(breaks),
        Role::RawText | Role::Inline => {}
    }
}

/// The language of a code block from its class attribute (`language-json`, `lang-yaml`,
/// `highlight-source-json`, or a bare well-known name), lowercase; empty when unknown.
fn code_language(class: Option<&str>) -> String {
    const BARE: &[&str] = &[
        "json",
        "yaml",
        "yml",
        "http",
        "xml",
        "html",
        "bash",
        "sh",
        "shell",
        "python",
        "javascript",
        "js",
        "typescript",
        "ts",
        "graphql",
        "curl",
    ];
    let Some(class) = class else { return String::new() };
    let clean = |s: &str| -> String {
        s.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '_')).take(20).collect::<String>()
    };
    for token in class.split_ascii_whitespace() {
        let lower = token.to_ascii_lowercase();
        for prefix in ["language-", "lang-", "highlight-source-", "highlight-"] {
            if let Some(rest) = lower.strip_prefix(prefix) {
                let lang = clean(rest);
                if !lang.is_empty() {
                    return lang;
                }
            }
        }
    }
    class.split_ascii_whitespace().map(str::to_ascii_lowercase).find(|t| BARE.contains(&t.as_str())).unwrap_or_default()
}

/// Accumulates text with whitespace normalisation: runs of spaces collapse outside `<pre>`, line
/// breaks are requested rather than written (so several block boundaries make at most one
/// blank line), and trailing spaces are trimmed whenever a line ends.
struct Writer {
    out: String,
    pending_space: bool,
    /// Line breaks to write before the next text (at most 2: one blank line).
    pending_newlines: u8,
    pre_depth: usize,
    /// Inside a fresh `<pre>` nothing has been written since its fence: whitespace is held back
    /// in `fresh_whitespace`, and a following `<code class=…>` may still name the language.
    fence_fresh: bool,
    fresh_whitespace: String,
    fence_has_lang: bool,
    fence_has_content: bool,
    fence_start: usize,
}

impl Writer {
    fn with_capacity(capacity: usize) -> Writer {
        Writer {
            out: String::with_capacity(capacity),
            pending_space: false,
            pending_newlines: 0,
            pre_depth: 0,
            fence_fresh: false,
            fresh_whitespace: String::new(),
            fence_has_lang: false,
            fence_has_content: false,
            fence_start: 0,
        }
    }

    /// Text between tags, with character references decoded.
    fn text(&mut self, raw: &str) {
        let mut rest = raw;
        while let Some(amp) = rest.find('&') {
            self.chars(&rest[..amp]);
            match decode_reference(&rest[amp + 1..]) {
                Some((c, consumed)) => {
                    self.char(c);
                    rest = &rest[amp + 1 + consumed..];
                }
                None => {
                    self.char('&');
                    rest = &rest[amp + 1..];
                }
            }
        }
        self.chars(rest);
    }

    fn chars(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            // Fast path: after its first character, a run of visible ASCII needs no decisions
            // (the first one settles pending spaces and line breaks), so it is copied at once.
            let run = bytes[i..].iter().take_while(|b| b.is_ascii_graphic()).count();
            if run > 0 {
                self.char(char::from(bytes[i]));
                self.out.push_str(&s[i + 1..i + run]);
                i += run;
                continue;
            }
            let Some(c) = s[i..].chars().next() else { break };
            self.char(c);
            i += c.len_utf8();
        }
    }

    fn char(&mut self, c: char) {
        // Invisible characters that only break up words or lines for rendering.
        if matches!(c, '\u{ad}' | '\u{200b}' | '\u{feff}') {
            return;
        }
        if self.pre_depth > 0 {
            if self.fence_fresh {
                if c.is_whitespace() {
                    self.fresh_whitespace.push(c);
                    return;
                }
                // The block has content after all: replay its leading whitespace, except the one
                // newline right after `<pre>` that HTML ignores.
                self.fence_fresh = false;
                let leading = std::mem::take(&mut self.fresh_whitespace);
                let leading = leading.strip_prefix("\r\n").or_else(|| leading.strip_prefix('\n')).unwrap_or(&leading);
                for w in leading.chars() {
                    self.pre_char(w);
                }
            }
            self.pre_char(c);
            return;
        }
        if c.is_whitespace() {
            self.pending_space = true;
            return;
        }
        if self.pending_newlines > 0 {
            self.apply_newlines();
        } else if self.pending_space && !self.out.is_empty() && !self.out.ends_with([' ', '\n']) {
            self.out.push(' ');
        }
        self.pending_space = false;
        self.out.push(c);
    }

    /// A character inside `<pre>`: written as is, except that line ends go through the
    /// pending-newline logic (so trailing spaces are trimmed and blank-line runs collapse).
    fn pre_char(&mut self, c: char) {
        match c {
            '\r' => {}
            '\n' => self.pending_newlines = (self.pending_newlines + 1).min(2),
            _ => {
                if !c.is_whitespace() {
                    self.fence_has_content = true;
                }
                self.apply_newlines();
                self.out.push(c);
            }
        }
    }

    /// Writes the requested line breaks, trimming the line's trailing spaces first.
    fn apply_newlines(&mut self) {
        if self.pending_newlines == 0 {
            return;
        }
        self.trim_trailing_spaces();
        if !self.out.is_empty() {
            let have = self.out.bytes().rev().take(2).take_while(|b| *b == b'\n').count() as u8;
            for _ in have..self.pending_newlines {
                self.out.push('\n');
            }
        }
        self.pending_newlines = 0;
        self.pending_space = false;
    }

    fn trim_trailing_spaces(&mut self) {
        let kept = self.out.trim_end_matches([' ', '\t']).len();
        self.out.truncate(kept);
    }

    fn block(&mut self, breaks: u8) {
        if breaks == 0 {
            return;
        }
        // Inside code a block boundary is a line break, never a blank line.
        let breaks = if self.pre_depth > 0 { 1 } else { breaks.min(2) };
        self.pending_newlines = self.pending_newlines.max(breaks);
    }

    fn cell(&mut self) {
        if self.pre_depth == 0 && self.pending_newlines == 0 && !self.out.is_empty() && !self.out.ends_with('\n') {
            self.trim_trailing_spaces();
            self.out.push_str(" | ");
            self.pending_space = false;
        }
    }

    fn open_pre(&mut self, language: &str) {
        self.pre_depth += 1;
        if self.pre_depth > 1 {
            return;
        }
        self.pending_newlines = self.pending_newlines.max(2);
        self.apply_newlines();
        self.fence_start = self.out.len();
        self.out.push_str("```");
        self.out.push_str(language);
        self.pending_newlines = 1;
        self.fence_fresh = true;
        self.fresh_whitespace.clear();
        self.fence_has_lang = !language.is_empty();
        self.fence_has_content = false;
    }

    fn code_in_pre(&mut self, language: &str) {
        if self.pre_depth == 0 || !self.fence_fresh {
            return;
        }
        if !self.fence_has_lang && !language.is_empty() {
            // Nothing was written since the fence, so the output still ends with it.
            self.out.push_str(language);
            self.fence_has_lang = true;
        }
        // Whitespace between `<pre>` and `<code>` is markup layout; after `<code>` it is the first
        // line's indentation, kept from here on.
        self.fresh_whitespace.clear();
        self.fence_fresh = false;
    }

    fn close_pre(&mut self) {
        if self.pre_depth == 0 {
            return;
        }
        self.pre_depth -= 1;
        if self.pre_depth > 0 {
            return;
        }
        self.fence_fresh = false;
        self.fresh_whitespace.clear();
        if self.fence_has_content {
            self.pending_newlines = self.pending_newlines.clamp(1, 1);
            self.apply_newlines();
            self.out.push_str("```");
        } else {
            // An empty block: drop its fence rather than print an empty one.
            self.out.truncate(self.fence_start);
        }
        self.pending_newlines = 2;
    }

    fn finish(mut self) -> String {
        if self.pre_depth > 0 {
            self.pre_depth = 1;
            self.close_pre();
        }
        let kept = self.out.trim_end().len();
        self.out.truncate(kept);
        self.out
    }
}

// ---------------------------------------------------------------------------------------------
// Markup scanning
// ---------------------------------------------------------------------------------------------

enum Markup {
    Comment {
        end: usize,
    },
    /// `<!doctype …>`, `<![CDATA[…]]>`, `<?…>`: skipped.
    Declaration {
        end: usize,
    },
    Tag(Tag),
}

struct Tag {
    /// Lowercase, for the names that matter in nesting; empty otherwise (see [`tag_role`]).
    name: &'static str,
    role: Role,
    closing: bool,
    self_closing: bool,
    /// Byte range of the attribute text (between the name and the closing `>`).
    attrs: (usize, usize),
    /// Byte index just past the tag's `>` (or the end of input for an unterminated tag).
    end: usize,
}

/// The markup starting at `lt` (a `<`), or `None` when this `<` is just text.
fn markup_at(html: &str, lt: usize) -> Option<Markup> {
    let bytes = html.as_bytes();
    let after = &bytes[lt + 1..];
    if after.starts_with(b"!--") {
        let end = find(bytes, lt + 4, b"-->").map_or(bytes.len(), |p| p + 3);
        return Some(Markup::Comment { end });
    }
    if matches!(after.first(), Some(b'!' | b'?')) {
        let end = if after.starts_with(b"![CDATA[") {
            find(bytes, lt, b"]]>").map_or(bytes.len(), |p| p + 3)
        } else {
            memchr(b'>', &bytes[lt..]).map_or(bytes.len(), |p| lt + p + 1)
        };
        return Some(Markup::Declaration { end });
    }
    let closing = after.first() == Some(&b'/');
    let name_start = lt + 1 + usize::from(closing);
    if !bytes.get(name_start).is_some_and(u8::is_ascii_alphabetic) {
        if closing && bytes.get(name_start).is_some() {
            // `</ 3>` and the like are bogus comments in HTML: skipped up to `>`.
            let end = memchr(b'>', &bytes[lt..]).map_or(bytes.len(), |p| lt + p + 1);
            return Some(Markup::Declaration { end });
        }
        return None;
    }
    let mut name_end = name_start;
    while name_end < bytes.len() && !matches!(bytes[name_end], b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>') {
        name_end += 1;
    }
    let (name, role) = tag_role(&bytes[name_start..name_end]);
    // Find the `>` that ends the tag, skipping quoted attribute values.
    let mut j = name_end;
    let mut quote: Option<u8> = None;
    let mut last_significant = 0u8;
    let mut end = bytes.len();
    let mut attrs_end = bytes.len();
    let mut self_closing = false;
    while j < bytes.len() {
        let b = bytes[j];
        match quote {
            Some(q) => {
                if b == q {
                    quote = None;
                    last_significant = b;
                }
            }
            None => match b {
                b'"' | b'\'' if last_significant == b'=' => quote = Some(b),
                b'>' => {
                    self_closing = last_significant == b'/';
                    attrs_end = j;
                    end = j + 1;
                    break;
                }
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => {}
                _ => last_significant = b,
            },
        }
        j += 1;
    }
    Some(Markup::Tag(Tag { name, role, closing, self_closing, attrs: (name_end, attrs_end), end }))
}

/// Where the raw-text element `name` ends: just past its end tag, or the end of input.
fn end_of_raw_text(html: &str, from: usize, name: &str) -> usize {
    let bytes = html.as_bytes();
    let mut at = from;
    while let Some(p) = find(bytes, at, b"</") {
        let name_at = p + 2;
        let name_end = name_at + name.len();
        if bytes.get(name_at..name_end).is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
            && bytes.get(name_end).is_none_or(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>'))
        {
            return memchr(b'>', &bytes[name_end..]).map_or(bytes.len(), |q| name_end + q + 1);
        }
        at = name_at;
    }
    bytes.len()
}

/// The entity-decoded value of attribute `wanted` of a tag.
fn attribute(html: &str, tag: &Tag, wanted: &str) -> Option<String> {
    let (start, end) = tag.attrs;
    let attrs = html.get(start..end)?;
    let bytes = attrs.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b'/') {
            i += 1;
        }
        let name_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() && !matches!(bytes[i], b'=' | b'/' | b'>') {
            i += 1;
        }
        let name = &attrs[name_start..i];
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = None;
        if i < bytes.len() && bytes[i] == b'=' {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            let (v, next) = attribute_value(attrs, i);
            value = Some(v);
            i = next;
        } else if name.is_empty() {
            i += 1; // a stray character: step over it
        }
        if name.eq_ignore_ascii_case(wanted) {
            return Some(decode_references(value.unwrap_or("")));
        }
    }
    None
}

/// An attribute value starting at `i` (quoted or not) and the index after it.
fn attribute_value(s: &str, i: usize) -> (&str, usize) {
    let bytes = s.as_bytes();
    match bytes.get(i) {
        Some(&q @ (b'"' | b'\'')) => match memchr(q, &bytes[i + 1..]) {
            Some(p) => (&s[i + 1..i + 1 + p], i + 2 + p),
            None => (&s[i + 1..], bytes.len()),
        },
        Some(_) => {
            let mut j = i;
            while j < bytes.len() && !bytes[j].is_ascii_whitespace() && bytes[j] != b'>' {
                j += 1;
            }
            (&s[i..j], j)
        }
        None => ("", i),
    }
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|b| *b == needle)
}

/// The first index ≥ `from` where `needle` occurs in `haystack`.
fn find(haystack: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = from;
    while at + needle.len() <= haystack.len() {
        let p = at + memchr(first, &haystack[at..haystack.len() - needle.len() + 1])?;
        if haystack[p..].starts_with(needle) {
            return Some(p);
        }
        at = p + 1;
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Character references
// ---------------------------------------------------------------------------------------------

/// Decodes every character reference in `s`.
fn decode_references(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        match decode_reference(&rest[amp + 1..]) {
            Some((c, consumed)) => {
                out.push(c);
                rest = &rest[amp + 1 + consumed..];
            }
            None => {
                out.push('&');
                rest = &rest[amp + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Decodes the reference after an `&`: the character and how many bytes of `s` it used.
/// Named references need their `;` (as browsers do for all but a few legacy ones); numeric ones
/// do not.
fn decode_reference(s: &str) -> Option<(char, usize)> {
    let bytes = s.as_bytes();
    if bytes.first() == Some(&b'#') {
        let hex = matches!(bytes.get(1), Some(b'x' | b'X'));
        let digits_start = if hex { 2 } else { 1 };
        let mut i = digits_start;
        let mut value: u32 = 0;
        while let Some(&b) = bytes.get(i) {
            let digit = if hex { (b as char).to_digit(16) } else { (b as char).to_digit(10) };
            let Some(digit) = digit else { break };
            // Saturate: anything past U+10FFFF is invalid anyway.
            value = value.saturating_mul(if hex { 16 } else { 10 }).saturating_add(digit).min(0x11_0000);
            i += 1;
        }
        if i == digits_start {
            return None;
        }
        if bytes.get(i) == Some(&b';') {
            i += 1;
        }
        return Some((numeric_reference(value), i));
    }
    let name_len = bytes.iter().take(32).take_while(|b| b.is_ascii_alphanumeric()).count();
    if name_len == 0 || bytes.get(name_len) != Some(&b';') {
        return None;
    }
    named_reference(&s[..name_len]).map(|c| (c, name_len + 1))
}

/// The character for `&#N;`, following the HTML rules: NUL, surrogates and out-of-range values
/// become U+FFFD, and 0x80–0x9F are read as Windows-1252 (what pages that use them meant).
fn numeric_reference(value: u32) -> char {
    match value {
        0x80..=0x9f => windows_1252(value as u8),
        0 | 0x01..=0x08 | 0x0b | 0x0e..=0x1f | 0x7f => '\u{fffd}',
        _ => char::from_u32(value).unwrap_or('\u{fffd}'),
    }
}

/// A byte of Windows-1252 (a superset of ISO-8859-1 as browsers read it) as a character;
/// the five undefined bytes become U+FFFD.
pub(crate) fn windows_1252(byte: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{fffd}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{fffd}', 'Ž', '\u{fffd}',
        '\u{fffd}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{fffd}', 'ž', 'Ÿ',
    ];
    match byte {
        0x80..=0x9f => HIGH[usize::from(byte - 0x80)],
        _ => char::from(byte),
    }
}

fn named_reference(name: &str) -> Option<char> {
    Some(match name {
        "amp" | "AMP" => '&',
        "lt" | "LT" => '<',
        "gt" | "GT" => '>',
        "quot" | "QUOT" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        "ensp" | "emsp" | "thinsp" => ' ',
        "zwsp" | "ZeroWidthSpace" | "shy" => '\u{ad}',
        "copy" | "COPY" => '©',
        "reg" | "REG" => '®',
        "trade" => '™',
        "hellip" => '…',
        "mdash" => '—',
        "ndash" => '–',
        "lsquo" => '‘',
        "rsquo" => '’',
        "sbquo" => '‚',
        "ldquo" => '“',
        "rdquo" => '”',
        "bdquo" => '„',
        "laquo" => '«',
        "raquo" => '»',
        "lsaquo" => '‹',
        "rsaquo" => '›',
        "bull" => '•',
        "middot" => '·',
        "deg" => '°',
        "plusmn" => '±',
        "times" => '×',
        "divide" => '÷',
        "minus" => '−',
        "le" => '≤',
        "ge" => '≥',
        "ne" => '≠',
        "asymp" => '≈',
        "infin" => '∞',
        "larr" => '←',
        "rarr" => '→',
        "uarr" => '↑',
        "darr" => '↓',
        "harr" => '↔',
        "rArr" => '⇒',
        "para" => '¶',
        "sect" => '§',
        "euro" => '€',
        "pound" => '£',
        "yen" => '¥',
        "cent" => '¢',
        "micro" => 'µ',
        "dagger" => '†',
        "check" => '✓',
        "iexcl" => '¡',
        "iquest" => '¿',
        // Punctuation that code-heavy pages escape.
        "num" => '#',
        "dollar" => '$',
        "percnt" => '%',
        "ast" => '*',
        "plus" => '+',
        "comma" => ',',
        "period" => '.',
        "sol" => '/',
        "bsol" => '\\',
        "colon" => ':',
        "semi" => ';',
        "equals" => '=',
        "quest" => '?',
        "excl" => '!',
        "commat" => '@',
        "lpar" => '(',
        "rpar" => ')',
        "lsqb" | "lbrack" => '[',
        "rsqb" | "rbrack" => ']',
        "lcub" | "lbrace" => '{',
        "rcub" | "rbrace" => '}',
        "verbar" | "vert" | "VerticalLine" => '|',
        "grave" | "DiacriticalGrave" => '`',
        "Hat" => '^',
        "lowbar" | "UnderBar" => '_',
        "tilde" => '˜',
        "Tab" => '\t',
        "NewLine" => '\n',
        // Latin-1 letters common in names and prose.
        "auml" => 'ä',
        "ouml" => 'ö',
        "uuml" => 'ü',
        "Auml" => 'Ä',
        "Ouml" => 'Ö',
        "Uuml" => 'Ü',
        "szlig" => 'ß',
        "eacute" => 'é',
        "egrave" => 'è',
        "ecirc" => 'ê',
        "Eacute" => 'É',
        "aacute" => 'á',
        "agrave" => 'à',
        "acirc" => 'â',
        "iacute" => 'í',
        "oacute" => 'ó',
        "uacute" => 'ú',
        "ntilde" => 'ñ',
        "ccedil" => 'ç',
        "oslash" => 'ø',
        "aring" => 'å',
        "aelig" => 'æ',
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------------

/// Absolute http(s) URLs in `href`/`src` attributes (resolved against `base`) and bare URLs in
/// the text, without fragments, deduplicated, in order of appearance, at most [`MAX_LINKS`].
pub fn extract_links(html_or_text: &str, base: &Url) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut links = Vec::new();
    scan_urls(html_or_text, true, |found| {
        let resolved = match found {
            Found::Bare(token) => Url::parse(&token).ok(),
            Found::Attribute(value) => {
                let value = value.trim();
                if value.is_empty() || value.starts_with('#') { None } else { base.join(value).ok() }
            }
        };
        if let Some(mut url) = resolved.filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some()) {
            url.set_fragment(None);
            let url = String::from(url);
            if seen.insert(url.clone()) {
                links.push(url);
            }
        }
        links.len() < MAX_LINKS
    });
    links
}

/// A URL candidate found by [`scan_urls`].
pub(crate) enum Found {
    /// A bare `http(s)://…` token as written, trailing punctuation trimmed, `&amp;` decoded.
    Bare(String),
    /// The decoded value of an `href` or `src` attribute (possibly relative).
    Attribute(String),
}

/// Calls `found` for every URL candidate in `text`, in order, until it returns false.
/// `attributes` also looks for `href=`/`src=` values.
pub(crate) fn scan_urls(text: &str, attributes: bool, mut found: impl FnMut(Found) -> bool) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let at_word_start = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if matches!(b, b'h' | b'H')
            && at_word_start
            && (starts_with_ignore_case(&bytes[i..], b"http://") || starts_with_ignore_case(&bytes[i..], b"https://"))
        {
            let (token, end) = bare_url(text, i);
            i = end;
            if let Some(token) = token
                && !found(Found::Bare(token))
            {
                return;
            }
            continue;
        }
        if attributes && matches!(b, b'h' | b'H' | b's' | b'S') && i > 0 && bytes[i - 1].is_ascii_whitespace() {
            let name_len = if starts_with_ignore_case(&bytes[i..], b"href") {
                4
            } else if starts_with_ignore_case(&bytes[i..], b"src") {
                3
            } else {
                0
            };
            if name_len > 0
                && let Some((value, end)) = attribute_after_name(text, i + name_len)
            {
                i = end;
                if value.chars().count() <= MAX_URL_CHARS && !found(Found::Attribute(decode_references(value))) {
                    return;
                }
                continue;
            }
        }
        i += 1;
    }
}

/// `= value` after an attribute name at `i`: the raw value and the index after it.
fn attribute_after_name(text: &str, mut i: usize) -> Option<(&str, usize)> {
    let bytes = text.as_bytes();
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    if bytes.get(i) != Some(&b'=') {
        return None;
    }
    i += 1;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    if i >= bytes.len() {
        return None;
    }
    let (value, end) = attribute_value(text, i);
    Some((value, end))
}

fn starts_with_ignore_case(haystack: &[u8], prefix: &[u8]) -> bool {
    haystack.len() >= prefix.len() && haystack[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// The bare URL starting at `start`: the cleaned token (None when unusable) and where it ended.
fn bare_url(text: &str, start: usize) -> (Option<String>, usize) {
    const ENTITY_ENDS: &[&str] = &["&quot;", "&lt;", "&gt;", "&apos;", "&#39;", "&#34;", "&#x27;", "&#x22;"];
    let rest = &text[start..];
    let mut end = rest.len();
    for (i, c) in rest.char_indices() {
        let stop = c.is_whitespace()
            || c.is_control()
            || matches!(c, '"' | '\'' | '<' | '>' | '`' | '\\')
            || matches!(c, '«' | '»' | '“' | '”' | '‘' | '’' | '「' | '」' | '。' | '、' | '，')
            || (c == '&' && ENTITY_ENDS.iter().any(|e| rest[i..].starts_with(e)));
        if stop {
            end = i;
            break;
        }
    }
    let mut token = &rest[..end];
    let next = start + end;
    if token.len() > MAX_URL_CHARS * 4 {
        return (None, next);
    }
    // Trailing punctuation belongs to the sentence, and a closing bracket to the text around the
    // URL unless the URL opened it (Wikipedia's `Foo_(bar)`).
    let count = |c: char| token.bytes().filter(|b| *b == c as u8).count();
    let mut brackets = [(count('('), count(')')), (count('['), count(']')), (count('{'), count('}'))];
    while let Some(last) = token.chars().next_back() {
        let trim = match last {
            '.' | ',' | ';' | ':' | '!' | '?' | '\'' | '"' | '*' | '…' => true,
            ')' | ']' | '}' => {
                let pair = &mut brackets[match last {
                    ')' => 0,
                    ']' => 1,
                    _ => 2,
                }];
                let unbalanced = pair.1 > pair.0;
                if unbalanced {
                    pair.1 -= 1;
                }
                unbalanced
            }
            _ => false,
        };
        if !trim {
            break;
        }
        token = &token[..token.len() - last.len_utf8()];
    }
    let scheme_len = if token.len() >= 8 && token.as_bytes()[4].eq_ignore_ascii_case(&b's') { 8 } else { 7 };
    if token.len() <= scheme_len || token.chars().count() > MAX_URL_CHARS {
        return (None, next);
    }
    (Some(token.replace("&amp;", "&")), next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_html_to_text() {
        let cases: &[(&str, &str, &str)] = &[
            ("plain text", "hello world", "hello world"),
            ("inline tags vanish", "a<b>b</b><i>c</i> d", "abc d"),
            ("paragraphs", "<p>one</p><p>two</p>", "one\n\ntwo"),
            ("br and div", "a<br>b<br/>c<div>d</div>e", "a\nb\nc\nd\ne"),
            ("list items", "<ul><li>x</li><li>y</li></ul>", "x\ny"),
            ("headings", "<h1>Title</h1>text", "Title\n\ntext"),
            ("whitespace collapses", "  a \n\n\t b   ", "a b"),
            ("blank-line runs collapse", "<p>a</p><p></p><p></p><div></div><p>b</p>", "a\n\nb"),
            ("trailing spaces trimmed", "a   <br>  b", "a\nb"),
            ("script dropped", "a<script>var x = '<p>no</p>';</script>b", "ab"),
            ("script with attributes and odd case", "a<SCRIPT type=\"x\">1</ScRiPt >b", "ab"),
            ("script end tag in a string", "a<script>s='</scripts>'</script>b", "ab"),
            ("style dropped", "<style>p { color: red }</style>text", "text"),
            ("nav dropped", "<nav><a href=x>Home</a></nav><p>body</p>", "body"),
            ("nested nav", "<nav>a<nav>b</nav>c</nav>d", "d"),
            ("header and footer dropped", "<header>Site</header><p>x</p><footer>(c)</footer>", "x"),
            (
                "header inside article kept",
                "<article><header><h1>GET /items</h1></header>body</article>",
                "GET /items\n\nbody",
            ),
            (
                "noscript svg template",
                "a<noscript>js</noscript>b<svg><text>t</text></svg>c<template>z</template>d",
                "a\nb\nc\nd",
            ),
            ("self-closing svg", "a<svg/>b", "a\nb"),
            ("unclosed script at EOF", "a<script>if (x < 1) {", "a"),
            ("unclosed nav at EOF", "a<nav>menu", "a"),
            ("unterminated tag at EOF", "a<div class=\"x", "a"),
            ("comments dropped", "a<!-- <p>hidden</p> -->b<!-- unterminated", "ab"),
            ("doctype dropped", "<!DOCTYPE html><html><body>x</body></html>", "x"),
            ("lone less-than is text", "a < b and c<3", "a < b and c<3"),
            ("quoted > in attribute", "<a title=\"1 > 0\">x</a>", "x"),
            ("named entities", "&lt;tag&gt; &amp; &quot;q&quot; &apos;s&apos; &copy; &mdash;", "<tag> & \"q\" 's' © —"),
            ("nbsp is a space", "a&nbsp;&nbsp;b", "a b"),
            ("numeric entities", "&#65;&#x42;&#X43;&#100", "ABCd"),
            ("invalid code points", "&#0;&#xD800;&#x110000;&#99999999999;", "\u{fffd}\u{fffd}\u{fffd}\u{fffd}"),
            ("windows-1252 references", "&#150;&#147;x&#148;", "–“x”"),
            ("unknown entity kept", "&bogus; & &amp", "&bogus; & &amp"),
            ("escaped tags are text", "&lt;p&gt;not a tag&lt;/p&gt;", "<p>not a tag</p>"),
            (
                "table cells",
                "<table><tr><th>Name</th><th>Type</th></tr><tr><td>id</td><td>int</td></tr></table>",
                "Name | Type\nid | int",
            ),
            ("pre keeps layout", "<p>x</p><pre>  a\n    b  \n\n\n\nc</pre>y", "x\n\n```\n  a\n    b\n\nc\n```\n\ny"),
            (
                "pre language from code",
                "<pre><code class=\"language-json\">{\n  \"a\": 1\n}</code></pre>",
                "```json\n{\n  \"a\": 1\n}\n```",
            ),
            ("pre language from pre", "<pre class=\"highlight lang-yaml\">a: 1</pre>", "```yaml\na: 1\n```"),
            ("pre entities and tags", "<pre>a &lt; b <span>c</span></pre>", "```\na < b c\n```"),
            ("empty pre has no fence", "a<pre>  </pre>b", "a\n\nb"),
            ("unclosed pre at EOF", "<pre>x", "```\nx\n```"),
            ("title is a line", "<head><title>Doc</title></head><body>text</body>", "Doc\ntext"),
            ("soft hyphens vanish", "co&shy;de", "code"),
            ("empty", "", ""),
        ];
        for (what, html, want) in cases {
            assert_eq!(html_to_text(html), *want, "{what}");
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        let inputs = [
            "<",
            "<<",
            "</",
            "<!",
            "<!-",
            "<!--",
            "<?",
            "&",
            "&#",
            "&#x",
            "&#;",
            "<a",
            "<a href",
            "<a href=",
            "<a href='",
            "<pre><pre></pre>",
            "</pre></pre>x",
            "<script",
            "<script>",
            "</script>",
            "<nav></nav></nav>",
            "é<é>ü&ü;",
            "<![CDATA[x",
            "<p\u{0}>",
            "&#x10FFFF;",
            "<code class=language-json>x</code>",
        ];
        for input in inputs {
            let _ = html_to_text(input);
            let _ = extract_links(input, &Url::parse("https://x.test/").unwrap());
        }
        // Every prefix of a realistic page, cut anywhere (including inside multi-byte characters
        // — which str slicing prevents — so cut on char boundaries).
        let page = "<html><head><style>a{}</style></head><body><nav>n</nav><p>é &amp; <a href=\"/x?a=1&amp;b=2\">l</a>\
                    </p><pre><code class=\"lang-json\">{}</code></pre><!-- c --></body></html>";
        for (cut, _) in page.char_indices() {
            let _ = html_to_text(&page[..cut]);
            let _ = extract_links(&page[..cut], &Url::parse("https://x.test/").unwrap());
        }
    }

    #[test]
    fn extracts_links() {
        let base = Url::parse("https://docs.example.test/guide/intro.html").unwrap();
        let cases: &[(&str, &str, &[&str])] = &[
            ("absolute href", "<a href=\"https://api.example.test/v1\">", &["https://api.example.test/v1"]),
            ("relative href", "<a href=\"/relative/path\">", &["https://docs.example.test/relative/path"]),
            ("sibling href", "<a href='other.html#part'>", &["https://docs.example.test/guide/other.html"]),
            ("unquoted and uppercase", "<A HREF=next.html>", &["https://docs.example.test/guide/next.html"]),
            ("src attribute", "<img src=\"//cdn.example.test/i.png\">", &["https://cdn.example.test/i.png"]),
            ("srcset is not src", "<img srcset=\"a.png 1x\">", &[]),
            ("data-href still an href", "<a data-x=1 href = \"a\">", &["https://docs.example.test/guide/a"]),
            ("entities in attributes", "<a href=\"/q?a=1&amp;b=2\">", &["https://docs.example.test/q?a=1&b=2"]),
            ("fragment-only ignored", "<a href=\"#top\">", &[]),
            ("other schemes ignored", "<a href=\"mailto:a@b.c\"><a href=\"javascript:void(0)\">", &[]),
            ("bare URL in text", "see https://api.example.test/v2/items.", &["https://api.example.test/v2/items"]),
            ("bare URL in JSON", "{\"url\": \"https://api.example.test/v3\"}", &["https://api.example.test/v3"]),
            ("markdown link", "[docs](https://api.example.test/docs)", &["https://api.example.test/docs"]),
            ("markdown autolink", "<https://api.example.test/auto>", &["https://api.example.test/auto"]),
            ("bare URL with &amp;", "https://a.test/?x=1&amp;y=2&quot;", &["https://a.test/?x=1&y=2"]),
            (
                "dedupe, order kept",
                "https://b.test/ https://a.test/ <a href=\"https://b.test/\">",
                &["https://b.test/", "https://a.test/"],
            ),
            ("href to bare URL found once", "<a href=\"https://c.test/x\">https://c.test/x</a>", &["https://c.test/x"]),
            ("not a URL", "xhttps://a.test/ http:// https://", &[]),
        ];
        for (what, input, want) in cases {
            assert_eq!(extract_links(input, &base), *want, "{what}");
        }
    }

    #[test]
    fn caps_links() {
        let base = Url::parse("https://x.test/").unwrap();
        let text: String = (0..2000).map(|i| format!("https://x.test/{i} ")).collect();
        let links = extract_links(&text, &base);
        assert_eq!(links.len(), MAX_LINKS);
        assert_eq!(links[0], "https://x.test/0");
    }

    #[test]
    fn code_language_from_class() {
        let cases: &[(Option<&str>, &str)] = &[
            (None, ""),
            (Some("language-json"), "json"),
            (Some("hljs language-YAML"), "yaml"),
            (Some("highlight-source-shell"), "shell"),
            (Some("sourceCode http"), "http"),
            (Some("random"), ""),
        ];
        for (class, want) in cases {
            assert_eq!(code_language(*class), *want, "{class:?}");
        }
    }

    #[test]
    fn is_linear_on_large_inputs() {
        // 1 MB of markup, including pathological shapes: many unclosed `<`, many `&`, long
        // attribute lists, a huge comment. Quadratic scanning would take seconds here.
        let mut page = String::new();
        while page.len() < 1_000_000 {
            page.push_str("<div class=\"row\"><p>Some <b>text</b> &amp; more &#x41; <a href=\"/p?q=1\">link</a> < 3 & 4</p></div>\n");
        }
        let lone_lt = "a < ".repeat(250_000);
        let amps = "&&&&#&#x".repeat(125_000);
        let unclosed_comment = format!("x<!--{}", "-".repeat(1_000_000));
        let base = Url::parse("https://x.test/").unwrap();
        for input in [&page, &lone_lt, &amps, &unclosed_comment] {
            let started = std::time::Instant::now();
            let text = html_to_text(input);
            let links = extract_links(input, &base);
            let took = started.elapsed();
            println!("{} bytes → {} chars, {} links in {took:?}", input.len(), text.len(), links.len());
            assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
        }
    }
}
