//! Registration-time checks that QuickJS's parser cannot make for us.
//!
//! A handler body parses fine with `require(...)` or `import(...)` in it and only fails when
//! that line runs; `import x from "y"` fails with an unhelpful "unexpected identifier"; and a
//! body containing an unbalanced `}` can close the wrapper function and run code at script
//! level. This is a small JavaScript tokenizer (comments, strings, template literals, regular
//! expressions, brace depth) that finds those cases and reports them with a clear message
//! and the line. It is a usability check, not a security boundary: whatever slips past it
//! fails at run time inside the sandbox (there is no module loader and no `require`).

use super::invocation::CompileError;

pub(super) fn check_source(source: &str) -> Result<(), CompileError> {
    Scanner::new(source).run()
}

/// Whether `return` appears anywhere as a keyword (not in a string, comment or property name).
/// A handler without one always returns `undefined`, the empty result.
pub(super) fn has_return(source: &str) -> bool {
    let mut scanner = Scanner::new(source);
    // A body the checks refuse has no result to speak of; only the keyword search matters here.
    let _ = scanner.run();
    scanner.saw_return
}

/// Whether the body starts like a whole function: `function`, `async function`, or an arrow
/// function (`(args, fetch) =>`, `args =>`, `async (…) =>`) after any comments. Whether it is
/// *only* that function is for the parser to say (see `isolate::check_handler`).
pub(super) fn starts_like_function(source: &str) -> bool {
    let rest = skip_comments(source);
    let rest = rest
        .strip_prefix("async")
        .filter(|r| r.starts_with(|c: char| c.is_whitespace() || c == '('))
        .map_or(rest, skip_comments);
    if let Some(after) = rest.strip_prefix("function") {
        return !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    }
    let after_params = if let Some(inner) = rest.strip_prefix('(') {
        // Parameters without nested parentheses: `((a) => a)()` is a call, not a declaration.
        match inner.find([')', '(']) {
            Some(end) if inner.as_bytes()[end] == b')' => &inner[end + 1..],
            _ => return false,
        }
    } else {
        let ident = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$')).unwrap_or(rest.len());
        if ident == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return false;
        }
        &rest[ident..]
    };
    skip_comments(after_params).starts_with("=>")
}

/// `source` without leading whitespace and comments.
fn skip_comments(mut source: &str) -> &str {
    loop {
        source = source.trim_start();
        if let Some(rest) = source.strip_prefix("//") {
            source = rest.find('\n').map_or("", |end| &rest[end..]);
        } else if let Some(rest) = source.strip_prefix("/*") {
            source = rest.find("*/").map_or("", |end| &rest[end + 2..]);
        } else {
            return source;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start of input, punctuation or an operator keyword: a `/` here starts a regex.
    Operator,
    /// An identifier, literal or closing bracket: a `/` here is division.
    Operand,
    /// A `.` or `?.`: the next identifier is a property name.
    Dot,
}

/// Keywords after which an expression (so possibly a regex literal) starts.
const EXPRESSION_KEYWORDS: &[&str] = &[
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
    "yield",
    "await",
];

struct Scanner<'a> {
    src: &'a [u8],
    pos: usize,
    line: u32,
    /// A `return` keyword was seen.
    saw_return: bool,
}

enum TemplateEnd {
    Closed,
    Substitution,
}

impl<'a> Scanner<'a> {
    fn new(source: &'a str) -> Scanner<'a> {
        Scanner { src: source.as_bytes(), pos: 0, line: 1, saw_return: false }
    }

    fn peek(&self, offset: usize) -> u8 {
        self.src.get(self.pos + offset).copied().unwrap_or(0)
    }

    fn error(&self, line: u32, message: impl Into<String>) -> CompileError {
        CompileError { line: Some(line), message: message.into() }
    }

    fn run(&mut self) -> Result<(), CompileError> {
        let mut prev = Prev::Operator;
        let mut depth: i64 = 0;
        // Brace depth at which each open `${` substitution started.
        let mut templates: Vec<i64> = Vec::new();
        while self.pos < self.src.len() {
            let c = self.src[self.pos];
            match c {
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                }
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => self.pos += 1,
                b'/' if self.peek(1) == b'/' => self.skip_line_comment(),
                b'/' if self.peek(1) == b'*' => self.skip_block_comment(),
                b'\'' | b'"' => {
                    self.skip_string(c);
                    prev = Prev::Operand;
                }
                b'`' => {
                    self.pos += 1;
                    match self.skip_template_chunk() {
                        TemplateEnd::Closed => prev = Prev::Operand,
                        TemplateEnd::Substitution => {
                            templates.push(depth);
                            depth += 1;
                            prev = Prev::Operator;
                        }
                    }
                }
                b'{' | b'(' | b'[' => {
                    if c == b'{' {
                        depth += 1;
                    }
                    self.pos += 1;
                    prev = Prev::Operator;
                }
                b'}' => {
                    depth -= 1;
                    self.pos += 1;
                    if templates.last() == Some(&depth) {
                        templates.pop();
                        match self.skip_template_chunk() {
                            TemplateEnd::Closed => prev = Prev::Operand,
                            TemplateEnd::Substitution => {
                                templates.push(depth);
                                depth += 1;
                                prev = Prev::Operator;
                            }
                        }
                    } else if depth < 0 {
                        return Err(self.error(
                            self.line,
                            "unbalanced '}': the handler is the body of a function and must not close it",
                        ));
                    } else {
                        prev = Prev::Operand;
                    }
                }
                b')' | b']' => {
                    self.pos += 1;
                    prev = Prev::Operand;
                }
                b'/' if prev == Prev::Operator => {
                    self.skip_regex();
                    prev = Prev::Operand;
                }
                b'/' => {
                    self.pos += 1;
                    prev = Prev::Operator;
                }
                b'.' if !self.peek(1).is_ascii_digit() => {
                    self.pos += 1;
                    prev = Prev::Dot;
                }
                b'?' if self.peek(1) == b'.' && !self.peek(2).is_ascii_digit() => {
                    self.pos += 2;
                    prev = Prev::Dot;
                }
                b'0'..=b'9' | b'.' => {
                    self.skip_number();
                    prev = Prev::Operand;
                }
                c if is_ident_start(c) => {
                    let line = self.line;
                    let word = self.read_ident();
                    if prev != Prev::Dot {
                        self.check_word(word, line)?;
                        self.saw_return |= word == "return";
                    }
                    prev = if EXPRESSION_KEYWORDS.contains(&word) { Prev::Operator } else { Prev::Operand };
                }
                _ => {
                    self.pos += 1;
                    prev = Prev::Operator;
                }
            }
        }
        Ok(())
    }

    fn check_word(&self, word: &str, line: u32) -> Result<(), CompileError> {
        let next = self.next_significant();
        match word {
            "require" if next == b'(' => Err(self.error(
                line,
                "require() is not available: handlers run in an isolate without modules; \
                 fetch, URL, URLSearchParams, Headers, Response, TextEncoder, TextDecoder, \
                 atob/btoa, structuredClone, setTimeout, console and pathSegment are globals",
            )),
            "import" if next == b'(' => Err(self.error(
                line,
                "import() is not available: handlers run in an isolate without modules; \
                 everything a handler can use is a global",
            )),
            // `{ import: 1 }` is an object key; anything else is an import statement or
            // `import.meta`, neither of which exists here.
            "import" if next != b':' => Err(self.error(
                line,
                "import statements are not available: the handler is the body of an async \
                 function, not a module; everything a handler can use is a global",
            )),
            _ => Ok(()),
        }
    }

    /// Next byte that is not whitespace, without consuming anything.
    fn next_significant(&self) -> u8 {
        self.src[self.pos..].iter().copied().find(|c| !c.is_ascii_whitespace()).unwrap_or(0)
    }

    fn read_ident(&mut self) -> &'a str {
        let src: &'a [u8] = self.src;
        let start = self.pos;
        self.pos += 1;
        while self.pos < self.src.len() && is_ident_continue(self.src[self.pos]) {
            self.pos += 1;
        }
        // Identifiers are split on ASCII bytes only, so both ends are char boundaries.
        std::str::from_utf8(&src[start..self.pos]).unwrap_or("")
    }

    fn skip_line_comment(&mut self) {
        while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
            self.pos += 1;
        }
    }

    fn skip_block_comment(&mut self) {
        self.pos += 2;
        while self.pos < self.src.len() {
            match self.src[self.pos] {
                b'*' if self.peek(1) == b'/' => {
                    self.pos += 2;
                    return;
                }
                b'\n' => self.line += 1,
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// Skips a backslash and the character it escapes (a line continuation counts as a line).
    fn skip_escape(&mut self) {
        if self.peek(1) == b'\n' {
            self.line += 1;
        }
        self.pos += 2;
    }

    fn skip_string(&mut self, quote: u8) {
        self.pos += 1;
        while self.pos < self.src.len() {
            match self.src[self.pos] {
                b'\\' => {
                    self.skip_escape();
                    continue;
                }
                // An unterminated string; let the parser report it.
                b'\n' => return,
                c if c == quote => {
                    self.pos += 1;
                    return;
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// Skips template text up to and including the closing backtick or a `${`.
    fn skip_template_chunk(&mut self) -> TemplateEnd {
        while self.pos < self.src.len() {
            match self.src[self.pos] {
                b'\\' => {
                    self.skip_escape();
                    continue;
                }
                b'`' => {
                    self.pos += 1;
                    return TemplateEnd::Closed;
                }
                b'$' if self.peek(1) == b'{' => {
                    self.pos += 2;
                    return TemplateEnd::Substitution;
                }
                b'\n' => self.line += 1,
                _ => {}
            }
            self.pos += 1;
        }
        TemplateEnd::Closed
    }

    fn skip_regex(&mut self) {
        self.pos += 1;
        let mut in_class = false;
        while self.pos < self.src.len() {
            match self.src[self.pos] {
                b'\\' => {
                    self.pos += 2;
                    continue;
                }
                b'[' => in_class = true,
                b']' => in_class = false,
                b'/' if !in_class => {
                    self.pos += 1;
                    break;
                }
                // Not a regex after all (or an invalid one); the parser will tell.
                b'\n' => return,
                _ => {}
            }
            self.pos += 1;
        }
        while self.pos < self.src.len() && is_ident_continue(self.src[self.pos]) {
            self.pos += 1;
        }
    }

    fn skip_number(&mut self) {
        while self.pos < self.src.len()
            && (self.src[self.pos].is_ascii_alphanumeric() || matches!(self.src[self.pos], b'.' | b'_'))
        {
            self.pos += 1;
        }
    }
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'#' | b'\\') || c >= 0x80
}

fn is_ident_continue(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'\\') || c >= 0x80
}
