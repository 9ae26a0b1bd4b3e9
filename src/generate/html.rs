//! HTML to plain text, and link extraction, for documentation pages that are handed to the LLM.
//!
//! [`html_to_text`] runs the page through `html5ever`'s tokenizer (the HTML5 tokenisation
//! algorithm: character references, comments, doctypes, raw-text elements, malformed markup, all
//! as browsers read them) without building a tree: documentation pages can be megabytes of markup
//! and all we need is text a model can read. What to keep and how to lay it out are our rules:
//! * drop page chrome and non-text content together with everything inside it: `script`,
//!   `style`, `nav`, `header`, `footer`, `noscript`, `svg`, `template`, `iframe`, `object`,
//!   `canvas`. A `header`/`footer` *inside* `article`, `main` or `section` is kept: there it is the
//!   section's own heading (often the endpoint's name), not the site banner;
//! * turn block elements into line breaks (paragraph-like ones into a blank line) and table
//!   cells into ` | ` separators; other tags disappear and their text stays;
//! * collapse whitespace outside `<pre>`, trim trailing spaces and collapse blank-line runs;
//! * keep `<pre>` content verbatim inside a Markdown code fence, labelled with the language
//!   from a `language-xxx` / `lang-xxx` class when there is one, so code samples stay readable
//!   and the summarising rule in `docs` can recognise JSON/YAML/HTTP blocks.
//!
//! Unclosed elements at the end of input are treated as running to the end.
//!
//! [`extract_links`] finds absolute http(s) URLs in `href`/`src` attributes (resolved against a
//! base) and bare URLs in text; it is a plain scanner that works on HTML and on Markdown, JSON or
//! plain text alike.

use std::cell::RefCell;
use std::collections::HashSet;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts, states::RawKind,
};
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
    let sink = TextSink(RefCell::new(Converter {
        writer: Writer::with_capacity(html.len() / 2),
        skip: None,
        raw_text: false,
        sectioning: 0,
    }));
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    tokenizer.sink.0.into_inner().writer.finish()
}

/// The converter's state between tokens.
struct Converter {
    writer: Writer,
    /// The element being dropped with its content, and how deeply it is nested in itself.
    skip: Option<(&'static str, usize)>,
    /// Inside a raw-text element (`script`, `style`): its text is not page text.
    raw_text: bool,
    /// Open `article` / `main` / `section` elements (see the module doc on header/footer).
    sectioning: usize,
}

/// Receives the tokenizer's tokens (it takes them by shared reference, hence the cell).
struct TextSink(RefCell<Converter>);

impl TokenSink for TextSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let mut converter = self.0.borrow_mut();
        match token {
            Token::CharacterTokens(text) => {
                if converter.skip.is_none() && !converter.raw_text {
                    converter.writer.chars(&text);
                }
            }
            Token::TagToken(tag) => return converter.tag(&tag),
            Token::NullCharacterToken
            | Token::CommentToken(_)
            | Token::DoctypeToken(_)
            | Token::EOFToken
            | Token::ParseError(_) => {}
        }
        TokenSinkResult::Continue
    }
}

impl Converter {
    fn tag(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let (name, role) = tag_role(&tag.name);
        let start = tag.kind == TagKind::StartTag;
        if role == Role::RawText {
            // Script-like content is not markup: the tokenizer reads it as text up to the
            // matching end tag, and the converter drops it.
            self.raw_text = start && !tag.self_closing;
            return match (self.raw_text, name) {
                (false, _) => TokenSinkResult::Continue,
                (true, "script") => TokenSinkResult::RawData(RawKind::ScriptData),
                (true, "plaintext") => TokenSinkResult::Plaintext,
                (true, _) => TokenSinkResult::RawData(RawKind::Rawtext),
            };
        }
        if let Some((skipped, depth)) = self.skip.as_mut() {
            if name == *skipped {
                if !start {
                    *depth -= 1;
                    if *depth == 0 {
                        self.skip = None;
                        self.writer.block(1);
                    }
                } else if !tag.self_closing {
                    *depth += 1;
                }
            }
            return TokenSinkResult::Continue;
        }
        self.open_or_close(tag, name, role, start);
        // `title` and `textarea` hold text, not markup (with character references decoded).
        if start && matches!(&*tag.name, "title" | "textarea") {
            return TokenSinkResult::RawData(RawKind::Rcdata);
        }
        TokenSinkResult::Continue
    }

    fn open_or_close(&mut self, tag: &Tag, name: &'static str, role: Role, start: bool) {
        let writer = &mut self.writer;
        // A `header`/`footer` inside a sectioning element is that section's own heading, kept as a
        // paragraph-like block; elsewhere it is the site's banner or footer, dropped.
        let kept_heading = matches!(name, "header" | "footer") && self.sectioning > 0;
        if !start {
            match role {
                Role::Pre => writer.close_pre(),
                Role::Sectioning => {
                    self.sectioning = self.sectioning.saturating_sub(1);
                    writer.block(2);
                }
                Role::Dropped if kept_heading => writer.block(2),
                Role::Block(breaks) => writer.block(breaks),
                _ => {}
            }
            return;
        }
        let class = || tag.attrs.iter().find(|a| &*a.name.local == "class").map(|a| &*a.value);
        match role {
            Role::Dropped if kept_heading => writer.block(2),
            Role::Dropped => {
                // `<svg/>` is self-closing (foreign content): it has nothing to drop.
                if !tag.self_closing {
                    self.skip = Some((name, 1));
                }
                writer.block(1);
            }
            Role::Pre => writer.open_pre(&code_language(class())),
            Role::Code => writer.code_in_pre(&code_language(class())),
            Role::Sectioning => {
                self.sectioning += 1;
                writer.block(2);
            }
            Role::Cell => writer.cell(),
            Role::Block(breaks) => writer.block(breaks),
            Role::RawText | Role::Inline => {}
        }
    }
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

/// The name and role of a tag (the tokenizer lower-cases names), for the names the converter
/// treats specially; other names come back as `("", Inline)`. One `match`: this runs for every
/// tag of a page, so it must not scan lists.
fn tag_role(name: &str) -> (&'static str, Role) {
    use Role::*;
    match name.as_bytes() {
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
                if value.chars().count() <= MAX_URL_CHARS && !found(Found::Attribute(decode_ampersands(value))) {
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

/// An attribute value as a URL: the references that stand for `&` (`&amp;`, `&#38;`, `&#x26;`)
/// decoded, the only ones that appear in URLs in practice. (In HTML pages, [`html_to_text`]'s
/// tokenizer decodes every reference; this scanner also reads Markdown and JSON.)
fn decode_ampersands(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let reference = ["&amp;", "&#38;", "&#x26;", "&#X26;"]
            .iter()
            .find(|r| rest.len() >= r.len() && rest[..r.len()].eq_ignore_ascii_case(r));
        out.push('&');
        rest = &rest[reference.map_or(1, |r| r.len())..];
    }
    out.push_str(rest);
    out
}

/// A quoted or bare attribute value starting at `i`, and the index after it.
fn attribute_value(s: &str, i: usize) -> (&str, usize) {
    let bytes = s.as_bytes();
    match bytes.get(i) {
        Some(&q @ (b'"' | b'\'')) => match bytes[i + 1..].iter().position(|&b| b == q) {
            Some(p) => (&s[i + 1..i + 1 + p], i + 2 + p),
            None => (&s[i + 1..], bytes.len()),
        },
        Some(_) => {
            let end =
                bytes[i..].iter().position(|&b| b.is_ascii_whitespace() || b == b'>').map_or(bytes.len(), |p| i + p);
            (&s[i..end], end)
        }
        None => ("", i),
    }
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
            // HTML5: an unknown name stays as written; a legacy name without `;` is still decoded.
            ("unknown entity kept", "&bogus; & &amp", "&bogus; & &"),
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
        // attribute lists, a huge comment. Quadratic scanning would take minutes here; linear takes
        // milliseconds, so the bound is far from both and holds on a loaded machine.
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
            assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
        }
    }
}
