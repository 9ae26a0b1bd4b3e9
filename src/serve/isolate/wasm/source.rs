//! What the engine compiles besides the handler: the prelude that builds the web APIs, and the
//! wrapper a handler or script body is compiled in, with the way back from a line of the
//! wrapped source to a line of the body.

/// The web APIs handlers see, run once into the image (`wasm.rs`).
pub const PRELUDE_SOURCE: &str = include_str!("prelude.js");
/// The file name the handler is compiled under, as its stack frames show it.
pub const HANDLER_FILE: &str = "handler";
/// The handler body is compiled inside this wrapper. The head is exactly one line, so
/// QuickJS line `n` is handler line `n - 1`.
pub const WRAPPER_HEAD: &str = "(async function (args, fetch) {\n";
/// A code-mode script's wrapper: the same shape with no `fetch` in scope.
pub const SCRIPT_WRAPPER_HEAD: &str = "(async function (input, call_tool, tools) {\n";
const WRAPPER_TAIL: &str = "\n})";
const WRAPPER_HEAD_LINES: u32 = 1;

/// `body` inside the wrapper that starts with `head`.
pub fn wrap(head: &str, body: &str) -> String {
    let mut source = String::with_capacity(head.len() + body.len() + WRAPPER_TAIL.len());
    source.push_str(head);
    source.push_str(body);
    source.push_str(WRAPPER_TAIL);
    source
}

/// Handler line (1-based) of the first handler frame in a QuickJS stack trace, clamped to
/// the body (errors such as a missing `}` are reported on the wrapper's closing line).
pub fn handler_line(stack: &str, body: &str) -> Option<u32> {
    let file = HANDLER_FILE;
    let body_lines = u32::try_from(body.lines().count()).unwrap_or(u32::MAX).max(1);
    stack.lines().find_map(|frame| {
        let frame = frame.trim_start();
        let rest = match frame.find(&format!("({file}:")) {
            Some(at) => &frame[at + file.len() + 2..],
            None => frame.strip_prefix("at ")?.strip_prefix(file)?.strip_prefix(':')?,
        };
        let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
        let line: u32 = digits.parse().ok()?;
        Some(line.saturating_sub(WRAPPER_HEAD_LINES).clamp(1, body_lines))
    })
}
