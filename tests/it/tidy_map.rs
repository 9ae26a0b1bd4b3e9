//! ARCHITECTURE.md's code map stays in step with `src/`: every module and every file of a room is
//! named in a section heading, and every path a heading names exists.
//!
//! A heading names paths in backticks, relative to `src/`: a top-level module by its name
//! (`config`) or file (`api.rs`), a room's files as `room/{a,b}.rs` or `room/a.rs`, and a room's
//! subdirectories as `room/{a,b}/` or `room/a/` (what is under those is left to their module docs).

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs`; a span without braces is itself.
fn expand(span: &str) -> Vec<String> {
    match (span.find('{'), span.find('}')) {
        (Some(open), Some(close)) if open < close => span[open + 1..close]
            .split(',')
            .map(|part| format!("{}{}{}", &span[..open], part.trim(), &span[close + 1..]))
            .collect(),
        _ => vec![span.to_string()],
    }
}

/// Every path the code map's headings name.
fn named_paths() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut named = BTreeSet::new();
    for heading in text.lines().filter(|line| line.starts_with("### ")) {
        for (i, span) in heading.split('`').enumerate() {
            if i % 2 == 1 {
                named.extend(expand(span));
            }
        }
    }
    named
}

/// What `src/` holds, in the same spelling: top-level modules (`config`, also as `config.rs`),
/// each room's files (`api/admin.rs`) and subdirectories (`api/mcp/`).
fn source_paths() -> (BTreeSet<String>, BTreeSet<String>) {
    let src = root().join("src");
    let (mut modules, mut room_entries) = (BTreeSet::new(), BTreeSet::new());
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            for inner in std::fs::read_dir(&path).unwrap() {
                let inner = inner.unwrap().path();
                let file = inner.file_name().unwrap().to_string_lossy().into_owned();
                if inner.is_dir() {
                    room_entries.insert(format!("{name}/{file}/"));
                } else if file.ends_with(".rs") && file != "tests.rs" {
                    room_entries.insert(format!("{name}/{file}"));
                }
            }
        } else if let Some(module) = name.strip_suffix(".rs")
            && !["main", "lib"].contains(&module)
        {
            modules.insert(module.to_string());
        }
    }
    (modules, room_entries)
}

#[test]
fn the_code_map_names_every_module_and_room_file() {
    let named = named_paths();
    let (modules, room_entries) = source_paths();
    let mut missing = Vec::new();
    for module in &modules {
        if !named.contains(module) && !named.contains(&format!("{module}.rs")) {
            missing.push(module.clone());
        }
    }
    missing.extend(room_entries.iter().filter(|entry| !named.contains(*entry)).cloned());
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name {missing:?}: add each to the heading of its module's section"
    );
    let stale: Vec<&String> = named
        .iter()
        .filter(|path| path.contains('/') || path.ends_with(".rs"))
        .filter(|path| !root().join("src").join(path.trim_end_matches('/')).exists())
        .collect();
    assert!(stale.is_empty(), "ARCHITECTURE.md's code map names {stale:?}, which src/ does not have");
}

#[test]
fn headings_expand_braces() {
    assert_eq!(expand("api/{model,error}.rs"), ["api/model.rs", "api/error.rs"]);
    assert_eq!(expand("serve/{code_mode, isolate}/"), ["serve/code_mode/", "serve/isolate/"]);
    assert_eq!(expand("config"), ["config"]);
}
