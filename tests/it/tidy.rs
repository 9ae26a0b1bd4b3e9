//! Invariants of the code base, checked as tests so they stay true.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(src()).unwrap().display().to_string()
}

#[test]
fn every_module_says_what_it_is_for() {
    for file in rust_files(&src()) {
        let text = std::fs::read_to_string(&file).unwrap();
        let in_test_module = file.file_name().is_some_and(|n| n == "tests.rs");
        if !in_test_module {
            assert!(text.trim_start().starts_with("//!"), "{} lacks a //! module doc", relative(&file));
        }
    }
}

#[test]
fn only_the_catalog_holds_sql() {
    let sql = ["sqlx::query", "SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", "CREATE TABLE"];
    for file in rust_files(&src()) {
        let name = relative(&file);
        if name == "catalog.rs" || name.starts_with("catalog/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in sql {
            assert!(!text.contains(needle), "{name} contains SQL ({needle:?}); SQL belongs in catalog.rs");
        }
    }
}

/// The module path of a source file: `serve/isolate/pool.rs` is `["serve", "isolate", "pool"]`.
fn module_path(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> =
        file.strip_prefix(src()).unwrap().with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|last| last == "mod" || last == "lib") {
        parts.pop();
    }
    parts
}

/// The top-level modules a file names: every `crate::x`, `crate::{x, y::z}` and `super::` path
/// that climbs out of the file's own top-level module, in code (comments are skipped).
fn named_modules(file: &Path) -> std::collections::BTreeSet<String> {
    names_in(&std::fs::read_to_string(file).unwrap(), &module_path(file))
}

fn names_in(text: &str, path: &[String]) -> std::collections::BTreeSet<String> {
    let code: String = text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut named = std::collections::BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue; // `mycrate::`, not `crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // The top-level items of `{a, b::c, d::{e, f}}`.
            let (mut depth, mut start) = (0, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        named.insert(ident(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            named.insert(ident(rest));
        }
    }
    // `super::super::x` from `a/b/c.rs` names the crate root's `x`.
    let mut rest = code.as_str();
    while let Some(at) = rest.find("super::") {
        rest = &rest[at..];
        let mut climbs = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = after;
        }
        // A file's own items are its module's; `mod tests` inside it adds one level.
        if climbs >= path.len() {
            named.insert(ident(rest));
        }
    }
    named.retain(|m| !m.is_empty() && m != "self" && path.first() != Some(m));
    named
}

/// Top-level module → the top-level modules it names.
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut graph = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for file in rust_files(&src()) {
        let path = module_path(&file);
        let Some(top) = path.first() else { continue };
        if top == "main" {
            continue;
        }
        graph.entry(top.clone()).or_default().extend(named_modules(&file));
    }
    graph
}

#[test]
fn the_module_graph_follows_the_layers() {
    let graph = module_graph();
    let rules: [(&str, &[&str], &str); 4] = [
        (
            "serve",
            &["app", "api", "generate", "llm", "cli", "client"],
            "serving must not depend on HTTP glue or generation",
        ),
        ("generate", &["app", "api", "cli", "client"], "generation must not depend on the HTTP glue"),
        ("catalog", &["app", "api", "generate", "llm", "serve", "cli", "client"], "the catalog is storage only"),
        (
            "accounts",
            &["app", "api", "generate", "llm", "serve", "cli", "client"],
            "connected accounts serve the serving side and the pages, below both",
        ),
    ];
    for (module, forbidden, why) in rules {
        let named = graph.get(module).unwrap_or_else(|| panic!("no module {module}"));
        for bad in forbidden {
            assert!(!named.contains(*bad), "{module} names {bad}: {why} (see ARCHITECTURE.md, Invariants)");
        }
    }
}

#[test]
fn top_level_modules_have_no_import_cycle() {
    let graph = module_graph();
    // Depth-first search; a back edge is a cycle, reported as the path that closes it.
    fn visit<'a>(
        module: &'a str,
        graph: &'a std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        stack: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) {
        if done.contains(module) {
            return;
        }
        if let Some(at) = stack.iter().position(|m| *m == module) {
            panic!("import cycle: {} -> {module}", stack[at..].join(" -> "));
        }
        stack.push(module);
        for next in graph.get(module).into_iter().flatten() {
            if graph.contains_key(next) {
                visit(next, graph, stack, done);
            }
        }
        stack.pop();
        done.insert(module);
    }
    let mut done = std::collections::BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_graph_check_sees_grouped_and_relative_imports() {
    let path = ["serve".to_string(), "mount".to_string()];
    let code = "use crate::{app::AppState, catalog::{A, B}, serve::call};\n\
                // crate::llm only in a comment\n\
                fn f() { crate::generate::x(); mycrate::api::y(); super::registry::z(); super::super::cli::w() }\n";
    let named: Vec<String> = names_in(code, &path).into_iter().collect();
    assert_eq!(named, ["app", "catalog", "cli", "generate"]);
}

#[test]
fn only_egress_makes_outbound_requests_for_handlers() {
    for file in rust_files(&src().join("serve")).into_iter().chain([src().join("serve.rs")]) {
        let name = relative(&file);
        if name == "serve/egress.rs" || name.starts_with("serve/egress/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("reqwest::"), "{name} uses reqwest; outbound requests go through serve/egress");
    }
}

/// A task spawned beside the tracker in `tasks.rs` is one shutdown neither cancels nor waits
/// for. Test modules may spawn what they like; the two files named here spawn what shutdown
/// already sees or must not wait for.
#[test]
fn only_the_task_tracker_spawns_tasks() {
    let untracked_on_purpose = [
        // Each connection's task: the server's graceful shutdown waits for it, within the grace.
        "api/connections.rs",
        // The watcher of a second SIGTERM, which exits at once and must outlive the drain.
        "cli.rs",
    ];
    let spawns = ["tokio::spawn(", "tokio::task::spawn("];
    for file in rust_files(&src()) {
        let name = relative(&file);
        let test_module = file.file_name().is_some_and(|n| n == "tests.rs");
        if name == "tasks.rs" || test_module || untracked_on_purpose.contains(&name.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for needle in spawns {
            assert!(
                !code.contains(needle),
                "{name} calls {needle}..); spawn on crate::tasks::Tasks so shutdown cancels and waits for it"
            );
        }
    }
}

/// The Dockerfile builds dependencies against stub targets before copying the sources; a target
/// without a stub makes that step fail ("can't find bench"), so every one declared must have one.
#[test]
fn the_dockerfile_stubs_every_cargo_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml")).unwrap().parse().unwrap();
    let dockerfile = std::fs::read_to_string(root.join("deploy/Dockerfile")).unwrap();
    for (kind, folder) in [("bench", "benches"), ("test", "tests")] {
        for target in manifest[kind].as_array().unwrap() {
            let path = match target.get("path") {
                Some(path) => path.as_str().unwrap().to_string(),
                None => format!("{folder}/{}.rs", target["name"].as_str().unwrap()),
            };
            assert!(dockerfile.contains(&path), "deploy/Dockerfile does not stub {path} ([[{kind}]] in Cargo.toml)");
        }
    }
}
