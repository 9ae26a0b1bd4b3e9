//! The shape of a JSON or YAML document, how deeply it nests and how many values it holds,
//! found by a linear scan before a parser sees it.
//!
//! libyaml, which reads YAML descriptions, keeps one possible key per open flow collection and
//! walks that list for every token, so `[[[[…]]]]` costs time quadratic in its depth before the
//! deserialiser's recursion limit is ever reached: 50,000 levels took seconds, 200,000 did not
//! finish. And it keeps every event of a document (well over a hundred bytes each) before the
//! first value is built, so a document made of the smallest values costs far more memory than a
//! real one of its size. [`measure`] reads every byte once and returns the nesting depth,
//! counting block collections (by indentation, as libyaml's indentation stack does) and flow
//! collections (`[` and `{`) together, stopping at the first place deeper than the limit, and
//! the number of values (scalars, aliases and collections; empty values are not counted).
//!
//! The count is only a bound if brackets libyaml reads as structure are never skipped, so the
//! scan follows libyaml's scanner where it decides what is text: where a token starts, how far a
//! quoted, plain or block scalar reaches (which depends on the indentation of the enclosing
//! block collection), comments, tags and anchors. Where libyaml would stop with an error, the
//! scan goes on: counting text libyaml never reads can only raise the bound. Block sequences
//! written at their mapping's own indentation count one more level, as they are for the parser.
//! A test scans thousands of random documents with libyaml's own scanner and checks that none
//! is counted shallower than libyaml goes.

/// Where a document first nests deeper than allowed (1-based, in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub line: usize,
    pub column: usize,
}

/// How deeply a document nests and how many values it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub depth: usize,
    pub values: usize,
}

/// The shape of `text` read as YAML (JSON included), or where it first nests deeper than
/// `max_depth`.
pub fn measure(text: &str, max_depth: usize) -> Result<Shape, TooDeep> {
    let mut scanner = Scanner::new(text.as_bytes(), max_depth);
    scanner.run()?;
    Ok(Shape { depth: scanner.deepest, values: scanner.values })
}

/// A block collection open in the indentation stack.
struct Level {
    column: usize,
    sequence: bool,
    /// A mapping whose value is a sequence written at the mapping's own indentation, which
    /// libyaml's indentation stack does not hold but the parser nests.
    indentless: bool,
}

/// A flow collection written where a simple key may start, and its deepest nesting.
#[derive(Clone, Copy)]
struct KeyCollection {
    key: usize,
    deepest: usize,
}

/// A position, as libyaml counts it: characters, not bytes.
#[derive(Clone, Copy)]
struct Mark {
    line: usize,
    column: usize,
    index: usize,
}

/// libyaml forgets a possible simple key this many characters after it started.
const SIMPLE_KEY_REACH: usize = 1024;
/// A byte order mark, in UTF-8.
const BOM: &[u8] = "\u{feff}".as_bytes();

struct Scanner<'a> {
    text: &'a [u8],
    pos: usize,
    mark: Mark,
    limit: usize,
    deepest: usize,
    values: usize,
    flow: usize,
    levels: Vec<Level>,
    indentless: usize,
    /// The possible simple key of the block context (a key's column opens a mapping there).
    key: Option<Mark>,
    /// The flow collection that is (or starts) the possible simple key, if one is: when a `:`
    /// makes it a key, a mapping opens around it.
    key_collection: Option<KeyCollection>,
    key_allowed: bool,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a [u8], limit: usize) -> Scanner<'a> {
        Scanner {
            text,
            // libyaml's reader takes a byte order mark at the start as the encoding's, not text.
            pos: if text.starts_with(BOM) { BOM.len() } else { 0 },
            mark: Mark { line: 0, column: 0, index: 0 },
            limit,
            deepest: 0,
            values: 0,
            flow: 0,
            levels: Vec::new(),
            indentless: 0,
            key: None,
            key_collection: None,
            key_allowed: true,
        }
    }

    /// One token at a time, as `yaml_parser_fetch_next_token` takes them.
    fn run(&mut self) -> Result<(), TooDeep> {
        loop {
            self.skip_to_next_token();
            if self.at_end() {
                return Ok(());
            }
            if self.flow == 0 {
                self.unroll(self.mark.column);
            }
            let c = self.peek(0);
            if self.mark.column == 0 && c == b'%' {
                // A directive takes its whole line and ends every open block collection.
                self.end_block_collections();
                self.key_allowed = false;
                self.skip_to_break();
                continue;
            }
            if self.at_document_indicator() {
                // A new document (or the end of one): nothing stays open. Inside a flow
                // collection libyaml stops with an error here, so starting afresh costs nothing.
                self.end_block_collections();
                self.flow = 0;
                self.key_allowed = false;
                self.skip_chars(3);
                continue;
            }
            match c {
                b'[' | b'{' => {
                    self.save_key();
                    if self.flow == 0 {
                        self.key_collection = None;
                        if let Some(key) = self.key.filter(|key| key.column as isize > self.indent()) {
                            self.key_collection = Some(KeyCollection { key: key.index, deepest: 0 });
                        }
                    }
                    self.flow += 1;
                    self.values += 1;
                    if let Some(collection) = &mut self.key_collection {
                        collection.deepest = collection.deepest.max(self.flow);
                    }
                    self.check_depth(self.mark.column)?;
                    self.key_allowed = true;
                    self.skip_char();
                }
                b']' | b'}' => {
                    self.remove_key();
                    self.flow = self.flow.saturating_sub(1);
                    self.key_allowed = false;
                    self.skip_char();
                }
                b',' => {
                    self.remove_key();
                    self.key_allowed = true;
                    self.skip_char();
                }
                b'-' if self.blankz_at(1) => {
                    self.roll(self.mark.column, true)?;
                    self.remove_key();
                    self.key_allowed = true;
                    self.skip_char();
                }
                b'?' if self.flow > 0 || self.blankz_at(1) => {
                    self.roll(self.mark.column, false)?;
                    self.remove_key();
                    self.key_allowed = self.flow == 0;
                    self.skip_char();
                }
                b':' if self.flow > 0 || self.blankz_at(1) => {
                    self.value()?;
                    self.skip_char();
                }
                b'*' | b'&' => {
                    self.save_key();
                    self.key_allowed = false;
                    self.values += usize::from(c == b'*');
                    self.skip_char();
                    while self.peek(0).is_ascii_alphanumeric() || matches!(self.peek(0), b'_' | b'-') {
                        self.skip_char();
                    }
                }
                b'!' => {
                    self.save_key();
                    self.key_allowed = false;
                    self.tag();
                }
                b'|' | b'>' if self.flow == 0 => {
                    self.remove_key();
                    self.key_allowed = true;
                    self.values += 1;
                    self.block_scalar();
                }
                b'\'' | b'"' => {
                    self.save_key();
                    self.key_allowed = false;
                    self.values += 1;
                    self.quoted_scalar(c);
                }
                _ if self.starts_plain_scalar(c) => {
                    self.save_key();
                    self.key_allowed = false;
                    self.values += 1;
                    self.plain_scalar();
                }
                // A character no token starts with: libyaml stops here; the scan goes on.
                _ => self.skip_char(),
            }
        }
    }

    fn starts_plain_scalar(&self, c: u8) -> bool {
        const INDICATORS: &[u8] = b"-?:,[]{}#&*!|>'\"%@`";
        !(self.blankz_at(0) || INDICATORS.contains(&c))
            || (c == b'-' && !self.blank_at(1))
            || (self.flow == 0 && matches!(c, b'?' | b':') && !self.blankz_at(1))
    }

    /// `:` as a value indicator: the possible simple key before it (still on this line, not too
    /// far back) starts a mapping at its column; otherwise the mapping starts here.
    fn value(&mut self) -> Result<(), TooDeep> {
        if self.flow > 0 {
            self.key_allowed = false;
            return Ok(());
        }
        match self.key.take().filter(|key| self.possible(key)) {
            Some(key) => {
                self.roll(key.column, false)?;
                self.key_allowed = false;
                if let Some(collection) = self.key_collection.take().filter(|collection| collection.key == key.index) {
                    // The collection already read is inside the mapping that opened here.
                    let depth = self.levels.len() + self.indentless + collection.deepest;
                    self.record(depth, key.column)?;
                }
            }
            None => {
                self.roll(self.mark.column, false)?;
                self.key_allowed = true;
            }
        }
        Ok(())
    }

    fn possible(&self, key: &Mark) -> bool {
        key.line == self.mark.line && key.index + SIMPLE_KEY_REACH >= self.mark.index
    }

    /// Only the block context's simple key matters: inside flow collections the indentation
    /// stack does not change.
    fn save_key(&mut self) {
        if self.flow == 0 && self.key_allowed {
            self.key = Some(self.mark);
        }
    }

    fn remove_key(&mut self) {
        if self.flow == 0 {
            self.key = None;
        }
    }

    fn indent(&self) -> isize {
        self.levels.last().map_or(-1, |level| level.column as isize)
    }

    /// `yaml_parser_roll_indent`: a block collection starts at `column` if it is deeper than the
    /// current one.
    fn roll(&mut self, column: usize, sequence: bool) -> Result<(), TooDeep> {
        if self.flow > 0 {
            return Ok(());
        }
        if self.indent() < column as isize {
            self.levels.push(Level { column, sequence, indentless: false });
            self.values += 1;
            return self.check_depth(column);
        }
        if let Some(top) = self.levels.last_mut().filter(|top| top.column == column) {
            if sequence && !top.sequence && !top.indentless {
                top.indentless = true;
                self.indentless += 1;
                self.values += 1;
                return self.check_depth(column);
            }
            if !sequence && top.indentless {
                // The next key of the mapping: its indentless sequence has ended.
                top.indentless = false;
                self.indentless -= 1;
            }
        }
        Ok(())
    }

    /// `yaml_parser_unroll_indent`: block collections deeper than `column` end.
    fn unroll(&mut self, column: usize) {
        while self.levels.last().is_some_and(|level| level.column > column) {
            self.pop_level();
        }
    }

    fn end_block_collections(&mut self) {
        while !self.levels.is_empty() {
            self.pop_level();
        }
        self.key = None;
    }

    fn pop_level(&mut self) {
        if self.levels.pop().is_some_and(|level| level.indentless) {
            self.indentless -= 1;
        }
    }

    /// Records the depth now; past the limit, names the collection just opened, which starts
    /// on this line at `column`.
    fn check_depth(&mut self, column: usize) -> Result<(), TooDeep> {
        self.record(self.levels.len() + self.indentless + self.flow, column)
    }

    fn record(&mut self, depth: usize, column: usize) -> Result<(), TooDeep> {
        self.deepest = self.deepest.max(depth);
        if depth > self.limit {
            return Err(TooDeep { line: self.mark.line + 1, column: column + 1 });
        }
        Ok(())
    }

    /// `yaml_parser_scan_to_next_token`: spaces (and tabs where libyaml takes them), comments
    /// and line breaks; a line break in the block context allows a simple key again.
    fn skip_to_next_token(&mut self) {
        loop {
            if self.mark.column == 0 && self.text[self.pos..].starts_with(BOM) {
                self.skip_char();
            }
            while self.peek(0) == b' ' || (self.peek(0) == b'\t' && (self.flow > 0 || !self.key_allowed)) {
                self.skip_char();
            }
            if self.peek(0) == b'#' {
                self.skip_to_break();
            }
            if self.break_len() == 0 {
                return;
            }
            self.skip_break();
            if self.flow == 0 {
                self.key_allowed = true;
            }
        }
    }

    /// A single- or double-quoted scalar: it ends only at its closing quote (libyaml stops with
    /// an error at a document indicator or the end instead).
    fn quoted_scalar(&mut self, quote: u8) {
        self.skip_char();
        while !self.at_end() {
            if self.at_document_indicator() {
                return;
            }
            let c = self.peek(0);
            if quote == b'\'' && c == b'\'' && self.peek(1) == b'\'' {
                self.skip_chars(2);
            } else if c == quote {
                self.skip_char();
                return;
            } else if quote == b'"' && c == b'\\' {
                self.skip_char();
                if self.break_len() > 0 {
                    self.skip_break();
                } else if !self.at_end() {
                    self.skip_char();
                }
            } else if self.break_len() > 0 {
                self.skip_break();
            } else {
                self.skip_char();
            }
        }
    }

    /// `yaml_parser_scan_plain_scalar`: in the block context it goes on over lines indented
    /// deeper than the enclosing collection; in a flow collection, up to a flow indicator.
    fn plain_scalar(&mut self) {
        let indent = self.indent() + 1;
        let mut last_blanks_had_break = false;
        loop {
            if self.at_document_indicator() || self.peek(0) == b'#' {
                break;
            }
            while !self.blankz_at(0) {
                let c = self.peek(0);
                let ends = (c == b':' && (self.blankz_at(1) || (self.flow > 0 && b",?[]{}".contains(&self.peek(1)))))
                    || (self.flow > 0 && b",[]{}".contains(&c));
                if ends {
                    break;
                }
                self.skip_char();
                last_blanks_had_break = false;
            }
            if !(self.blank_at(0) || self.break_len() > 0) {
                break;
            }
            while self.blank_at(0) || self.break_len() > 0 {
                if self.blank_at(0) {
                    self.skip_char();
                } else {
                    self.skip_break();
                    last_blanks_had_break = true;
                }
            }
            if self.flow == 0 && (self.mark.column as isize) < indent {
                break;
            }
        }
        if last_blanks_had_break {
            self.key_allowed = true;
        }
    }

    /// `yaml_parser_scan_block_scalar`: `|` or `>` with its header, then every line indented at
    /// least as deep as the content (given by the indentation indicator, else by the first line
    /// that is not empty, and always deeper than the enclosing collection).
    fn block_scalar(&mut self) {
        self.skip_char();
        let mut increment = 0;
        if matches!(self.peek(0), b'+' | b'-') {
            self.skip_char();
            if self.peek(0).is_ascii_digit() {
                increment = (self.peek(0) - b'0') as isize;
                self.skip_char();
            }
        } else if self.peek(0).is_ascii_digit() {
            increment = (self.peek(0) - b'0') as isize;
            self.skip_char();
            if matches!(self.peek(0), b'+' | b'-') {
                self.skip_char();
            }
        }
        while self.blank_at(0) {
            self.skip_char();
        }
        if self.peek(0) == b'#' {
            self.skip_to_break();
        }
        if self.break_len() == 0 {
            // Something else after the header (libyaml stops), or the end.
            return;
        }
        self.skip_break();
        let parent = self.indent();
        let mut indent = match increment {
            0 => 0,
            _ if parent >= 0 => parent + increment,
            _ => increment,
        };
        if !self.block_scalar_breaks(&mut indent) {
            return;
        }
        while self.mark.column as isize == indent && !self.at_end() {
            self.skip_to_break();
            if self.at_end() {
                return;
            }
            self.skip_break();
            if !self.block_scalar_breaks(&mut indent) {
                return;
            }
        }
    }

    /// `yaml_parser_scan_block_scalar_breaks`: the indentation and empty lines before the next
    /// content line; settles the content's indentation if it is not known yet. False where
    /// libyaml stops (a tab in the indentation).
    fn block_scalar_breaks(&mut self, indent: &mut isize) -> bool {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || (self.mark.column as isize) < *indent) && self.peek(0) == b' ' {
                self.skip_char();
            }
            max_indent = max_indent.max(self.mark.column as isize);
            if (*indent == 0 || (self.mark.column as isize) < *indent) && self.peek(0) == b'\t' {
                return false;
            }
            if self.break_len() == 0 {
                break;
            }
            self.skip_break();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent() + 1).max(1);
        }
        true
    }

    /// A tag: `!<…>` up to its `>`, any other up to a blank (or `,` in a flow collection);
    /// libyaml refuses a tag followed by anything else.
    fn tag(&mut self) {
        if self.peek(1) == b'<' {
            while !self.at_end() && self.peek(0) != b'>' && !self.blankz_at(0) {
                self.skip_char();
            }
            if self.peek(0) == b'>' {
                self.skip_char();
            }
            return;
        }
        while !(self.blankz_at(0) || (self.flow > 0 && self.peek(0) == b',')) {
            self.skip_char();
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn peek(&self, ahead: usize) -> u8 {
        self.text.get(self.pos + ahead).copied().unwrap_or(0)
    }

    fn at_document_indicator(&self) -> bool {
        let rest = &self.text[self.pos..];
        self.mark.column == 0 && (rest.starts_with(b"---") || rest.starts_with(b"...")) && self.blankz_at(3)
    }

    fn blank_at(&self, ahead: usize) -> bool {
        matches!(self.peek(ahead), b' ' | b'\t')
    }

    /// A blank, a line break, or the end (libyaml's `IS_BLANKZ`).
    fn blankz_at(&self, ahead: usize) -> bool {
        self.blank_at(ahead) || self.pos + ahead >= self.text.len() || break_len(&self.text[self.pos + ahead..]) > 0
    }

    fn break_len(&self) -> usize {
        break_len(&self.text[self.pos..])
    }

    fn skip_char(&mut self) {
        if let Some(&lead) = self.text.get(self.pos) {
            self.pos += utf8_len(lead);
            self.mark.column += 1;
            self.mark.index += 1;
        }
    }

    fn skip_chars(&mut self, count: usize) {
        for _ in 0..count {
            self.skip_char();
        }
    }

    fn skip_break(&mut self) {
        let length = self.break_len();
        // libyaml counts `\r\n` as two characters and every other break as one.
        self.mark.index += if length == 2 && self.peek(0) == b'\r' { 2 } else { 1 };
        self.pos += length;
        self.mark.line += 1;
        self.mark.column = 0;
    }

    fn skip_to_break(&mut self) {
        while !self.at_end() && self.break_len() == 0 {
            self.skip_char();
        }
    }
}

/// The length of the line break `text` starts with, or 0: libyaml breaks lines at `\r\n`, `\r`,
/// `\n`, NEL, and the Unicode line and paragraph separators.
fn break_len(text: &[u8]) -> usize {
    match text {
        [b'\r', b'\n', ..] => 2,
        [b'\r' | b'\n', ..] => 1,
        [0xC2, 0x85, ..] => 2,
        [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
        _ => 0,
    }
}

fn utf8_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(text: &str, limit: usize) -> Result<usize, TooDeep> {
        measure(text, limit).map(|shape| shape.depth)
    }

    #[test]
    fn depth_counts_flow_and_block_collections_and_nothing_inside_text() {
        let cases: &[(&str, &str, usize)] = &[
            ("a scalar", "hello", 0),
            ("json", r#"{"a": {"b": [1, {"c": 2}]}}"#, 4),
            ("block mapping", "a:\n  b:\n    c: 1\n", 3),
            ("block sequence", "a:\n  - 1\n  - b: 2\n", 3),
            ("indentless sequence", "a:\n- b: 1\n- c:\n  - d\n", 4),
            ("compact nested sequences", "- - - x\n", 3),
            ("flow inside block", "paths:\n  /a: {get: [1, [2]]}\n", 5),
            ("flow over lines", "a: [\n  [1,\n   2],\n  3\n]\n", 3),
            ("flow collection as a key", "[a, [b]]: c\n", 3),
            ("flow collection as a key after an anchor", "x:\n  &k {a: 1}: c\n", 3),
            ("brackets in double quotes", "a: \"[[[[{{{\"\nb: 1\n", 1),
            ("brackets in single quotes", "a: '[[[ it''s ]'\n", 1),
            ("escaped quote", "a: \"x\\\" [[[\"\n", 1),
            ("multi-line quote", "a: \"[[[\n  [[[\"\nb: [1]\n", 2),
            ("multi-line quote in flow", "a: [\"multi\n  line [\", [x]]\n", 3),
            ("brackets in a plain scalar", "pattern: ^[a-z]{2}$\n", 1),
            ("plain scalar over lines", "a: see [the\n  docs [here\nb: 1\n", 1),
            ("plain scalar with an inner quote", "a: it's [x\n  \"more [\nb: [1]\n", 2),
            ("flow plain scalar with a quote", "[a'b, [c]]\n", 2),
            ("flow plain scalar with a colon", "{a:b, c: [d]}\n", 2),
            ("comment", "a: 1 # [[[[ {{{{\nb: 2\n", 1),
            ("comment line", "# [[[[\na: 1\n", 1),
            ("literal block scalar", "a: |\n  [[[[\n  {{{{\nb: 1\n", 1),
            ("folded block scalar with indicator", "a: >2-\n   [[[\n  ]]]\nb: [1]\n", 2),
            ("block scalar in a sequence", "- |\n [[[\n \"\n- [1]\n", 2),
            ("block scalar ended by a key", "k:\n  a: |\n    text\n  b: [[x]]\n", 4),
            ("tag and anchor", "a: !!str &x [1]\nb: *x\n", 2),
            ("verbatim tag", "a: !<tag:x,[y]> [1]\n", 2),
            ("second document", "a: 1\n---\n[[[x]]]\n", 3),
            ("directive", "%YAML 1.1\n---\na: [1]\n", 2),
            ("crlf and tabs", "a:\r\n  b: [\t1,\t[2]]\r\n", 4),
        ];
        for (what, text, expected) in cases {
            assert_eq!(depth(text, 64), Ok(*expected), "{what}: {text:?}");
        }
    }

    #[test]
    fn text_that_only_looks_like_a_scalar_to_a_careless_scan_is_counted() {
        // Each line after the scalar is structure to libyaml; a scan that kept skipping would
        // miss the nesting there.
        let deep = format!("{}x{}", "[".repeat(10), "]".repeat(10));
        let cases = [
            format!("a: x\n  \"q\nb: {deep}\n"),
            format!("a: |\n  text\n  \"\nb: {deep}\n"),
            format!("- a: |\n    text\n  b: {deep}\n"),
            format!("a: 'unterminated\n---\nb: {deep}\n"),
            format!("a: b # \"\nc: {deep}\n"),
            format!("[a\"b, {deep}]\n"),
        ];
        for text in &cases {
            assert!(depth(text, 64).unwrap() >= 10, "{text:?}");
        }
    }

    #[test]
    fn values_are_counted_with_keys_and_without_what_is_inside_text() {
        let cases: &[(&str, usize)] = &[
            ("a: 1\nb: [x, 'y # z', {c: d}]\n", 10),
            ("- |\n  [1, 2]\n- *anchor\n- \"a, b\"\n", 4),
            ("a:\n- 1\n- 2\n", 5),
            (r#"{"a": [1, 2, 3], "b": null}"#, 8),
        ];
        for (text, values) in cases {
            assert_eq!(measure(text, 64).map(|shape| shape.values), Ok(*values), "{text:?}");
        }
    }

    #[test]
    fn the_first_place_past_the_limit_is_reported() {
        let deep = format!("openapi: 3.0.0\npaths: {}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert_eq!(depth(&deep, 64), Err(TooDeep { line: 2, column: 71 }));
        let block: String = (0..70).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert_eq!(depth(&block, 64), Err(TooDeep { line: 65, column: 65 }));
        assert_eq!(depth(&"- ".repeat(100), 64).unwrap_err().line, 1);
        let json = format!("{}{}", "{\"a\": ".repeat(65), "}".repeat(65));
        assert!(depth(&json, 64).is_err());
        assert_eq!(depth(&json, 65), Ok(65));
    }

    /// libyaml's own count: the deepest its scanner's flow and block collections go, token by
    /// token, up to where a parse would stop (its scanner's first error, or a document boundary
    /// inside a flow collection, which the parser refuses).
    fn libyaml_depth(text: &str) -> usize {
        use std::mem::MaybeUninit;

        use libyaml_rs::yaml_token_type_t::*;
        use libyaml_rs::{yaml_parser_delete, yaml_parser_initialize, yaml_parser_scan, yaml_parser_set_input_string};
        use libyaml_rs::{yaml_parser_t, yaml_token_delete, yaml_token_t};

        let (mut flow, mut block, mut deepest) = (0usize, 0usize, 0usize);
        // SAFETY: the parser is initialised before use and deleted once; `text` outlives it;
        // every token the scanner fills in is deleted before the next.
        unsafe {
            let mut parser = MaybeUninit::<yaml_parser_t>::uninit();
            assert!(yaml_parser_initialize(parser.as_mut_ptr()).ok);
            let parser = parser.as_mut_ptr();
            yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
            loop {
                let mut token = MaybeUninit::<yaml_token_t>::uninit();
                if yaml_parser_scan(parser, token.as_mut_ptr()).fail {
                    break;
                }
                let kind = (*token.as_ptr()).type_;
                yaml_token_delete(token.as_mut_ptr());
                match kind {
                    YAML_FLOW_SEQUENCE_START_TOKEN | YAML_FLOW_MAPPING_START_TOKEN => flow += 1,
                    YAML_FLOW_SEQUENCE_END_TOKEN | YAML_FLOW_MAPPING_END_TOKEN => flow = flow.saturating_sub(1),
                    YAML_BLOCK_SEQUENCE_START_TOKEN | YAML_BLOCK_MAPPING_START_TOKEN => block += 1,
                    YAML_BLOCK_END_TOKEN => block = block.saturating_sub(1),
                    _ => {}
                }
                deepest = deepest.max(flow + block);
                let boundary = matches!(
                    kind,
                    YAML_DOCUMENT_START_TOKEN
                        | YAML_DOCUMENT_END_TOKEN
                        | YAML_VERSION_DIRECTIVE_TOKEN
                        | YAML_TAG_DIRECTIVE_TOKEN
                );
                if kind == YAML_STREAM_END_TOKEN || (boundary && flow > 0) {
                    break;
                }
            }
            yaml_parser_delete(parser);
        }
        deepest
    }

    #[test]
    fn no_document_is_counted_shallower_than_libyaml_scans_it() {
        use rand::{RngExt, SeedableRng};

        // Pieces that move libyaml's scanner between its states: indicators, quotes and escapes,
        // block scalar headers, indentation, every kind of line break, document markers,
        // directives, tags, anchors, byte order marks and characters no token starts with.
        const PIECES: &[&str] = &[
            "[",
            "]",
            "{",
            "}",
            ",",
            ":",
            ": ",
            "- ",
            "-",
            "? ",
            "?",
            "'",
            "\"",
            "\\",
            "#",
            " #",
            "|",
            ">",
            "|2",
            ">-",
            "\n",
            "\n",
            "\n  ",
            "\n    ",
            "\n ",
            " ",
            "  ",
            "\t",
            "a",
            "b",
            "key",
            "x: ",
            "&a ",
            "*a",
            "!t ",
            "!<x,[y]>",
            "!",
            "--- ",
            "---\n",
            "...\n",
            "%YAML 1.1\n",
            "\r\n",
            "\r",
            "\u{85}",
            "\u{2028}",
            "é",
            "''",
            "\\\"",
            "[[",
            "]]",
            "@",
            "`",
            "%",
            "\n- ",
            "\n  - ",
            "key: |\n",
            "  text [[\n",
            "k: >\n",
            "- |\n",
            ": [",
            "{a: ",
            "\"x\n",
            "'y\n",
            "\u{feff}",
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let pieces = rng.random_range(1..80);
            let text: String = (0..pieces).map(|_| PIECES[rng.random_range(0..PIECES.len())]).collect();
            let ours = measure(&text, usize::MAX).unwrap().depth;
            assert!(ours >= libyaml_depth(&text), "{text:?}: {ours} levels, libyaml {}", libyaml_depth(&text));
        }
    }
}
