//! An error that crosses a module boundary is a type, not a `String`: callers match a variant
//! where they would otherwise search the text, and the message is written once, in the
//! error's `Display`. Inside one file a helper may still return text that its caller turns into
//! the typed error (or a log line) before it leaves.

use crate::tidy::{rust_files, src};

/// The generic arguments of the `Result<…>` starting at `text[start..]` (just after `Result<`),
/// split at the top level.
fn result_arguments(text: &str) -> Vec<String> {
    let (mut depth, mut parts, mut current) = (1usize, Vec::new(), String::new());
    let mut previous = ' ';
    for c in text.chars() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' if previous != '-' => depth -= 1,
            ')' | ']' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            break;
        }
        if c == ',' && depth == 1 {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        previous = c;
    }
    parts.push(current);
    parts.into_iter().map(|part| part.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// Whether `text` names a `Result` whose error type is `String`.
fn has_string_result(text: &str) -> bool {
    text.match_indices("Result<").any(|(at, _)| {
        let arguments = result_arguments(&text[at + "Result<".len()..]);
        arguments.len() == 2 && arguments[1] == "String"
    })
}

/// What other modules can see that carries a `Result<_, String>`: a visible function's
/// signature, a visible field or static, or a trait impl's error type.
fn string_errors_in(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("pub") {
        let before = code[..at].chars().next_back().unwrap_or(' ');
        let after = code[at + 3..].chars().next().unwrap_or(' ');
        if before.is_alphanumeric() || before == '_' || !(after == ' ' || after == '(') {
            continue;
        }
        let rest = &code[at..];
        let first_line = rest.lines().next().unwrap_or_default();
        // A function's signature runs to its body (or `;`); any other item is read on its line.
        let declaration =
            if first_line.contains("fn ") { rest.split(['{', ';']).next().unwrap_or_default() } else { first_line };
        if has_string_result(declaration) {
            found.push(first_line.trim().to_string());
        }
    }
    for line in code.lines() {
        let line = line.trim();
        if line == "type Err = String;" || line == "type Error = String;" {
            found.push(line.to_string());
        }
    }
    found
}

#[test]
fn no_string_error_crosses_a_module_boundary() {
    let src = src();
    let mut offenders = Vec::new();
    for file in rust_files(&src).into_iter().filter(|file| file.file_name().is_some_and(|n| n != "tests.rs")) {
        let text = std::fs::read_to_string(&file).unwrap();
        // A file's test module is at its end; other `#[cfg(test)]` items (a test-only `impl`)
        // are still read, as is what follows them.
        let code = text.split("\n#[cfg(test)]\nmod ").next().unwrap_or_default();
        let name = file.strip_prefix(&src).unwrap().display().to_string();
        offenders.extend(string_errors_in(code).into_iter().map(|item| format!("{name}: {item}")));
    }
    assert!(
        offenders.is_empty(),
        "give these an error type of their module (thiserror), with today's message as its Display:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_check_sees_nested_results_fields_and_impls() {
    let code = "pub fn a(x: u8) -> Result<Vec<u8>, String> { }\n\
                pub(super) async fn b() -> Result<Option<(u8, u8)>, String>;\n\
                fn private() -> Result<u8, String> { }\n\
                pub fn fine() -> Result<u8, Problem> { }\n\
                pub fn mapping(f: impl Fn() -> u8) -> Result<String, Problem> { }\n\
                pub struct S {\n    pub built: OnceCell<Result<Arc<E>, String>>,\n    kept: Result<u8, String>,\n}\n\
                // the public API returns Result<u8, String> in a comment\n\
                impl FromStr for P {\n    type Err = String;\n}\n";
    let found = string_errors_in(code);
    assert_eq!(
        found,
        [
            "pub fn a(x: u8) -> Result<Vec<u8>, String> { }",
            "pub(super) async fn b() -> Result<Option<(u8, u8)>, String>;",
            "pub built: OnceCell<Result<Arc<E>, String>>,",
            "type Err = String;",
        ]
    );
}
