//! Invariants of the code base, checked as tests so they stay true.

use std::path::{Path, PathBuf};

pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
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

pub fn src() -> PathBuf {
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
    let rules: [(&str, &[&str], &str); 6] = [
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
        (
            "client",
            &[
                "app",
                "cli",
                "serve",
                "generate",
                "llm",
                "catalog",
                "accounts",
                "credentials",
                "oauth",
                "telemetry",
                "tasks",
            ],
            "the command-line client speaks the admin API's wire types (`api::model`), never the daemon's parts",
        ),
        (
            "script",
            &["app", "api", "generate", "llm", "serve", "catalog", "cli", "client"],
            "the code-mode wire types are a leaf that serving, the admin API and the client share",
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

/// # Every room is a DAG, one level down
///
/// A *room* is a directory module of `src/` with its parent file: `src/api.rs` plus `src/api/`,
/// and, nested inside it, `src/api/model.rs` plus `src/api/model/` (the room `api/model`; to the
/// room `api` it is the one node `model`). Each file of a room is a node: the parent (`api.rs`), and each child module with everything
/// below it (`mcp` is `api/mcp.rs` and `api/mcp/*`). An edge `a -> b` is a path in `a`'s code
/// (comments skipped) that names `b`: `crate::api::b…`, `super::b…` (climbing from the module
/// the path is written in, so `use super::*` in `mod tests` names the file itself), `self::b…`,
/// grouped imports (`crate::api::{b::X, c}`), and, in the parent file only, a bare `b::…`. A
/// path that names a room-level item which is not a child (`crate::api::AppState`) is an edge
/// to the parent. Two rules hold for every room:
///
/// 1. **No cycle among a room's files.** A cycle fails the test, printed as the path that
///    closes it.
/// 2. **No sibling's private helper.** A child may name another child's items only if they are
///    `pub`: an item declared `pub(crate)`, `pub(super)` or `pub(in …)` at the top of a module
///    file of `b` is lent to the crate or to the parent, not to `b`'s siblings. The exception is
///    the room's declared shared module ([`SHARED_MODULES`]), which exists to be shared inside
///    the room. The parent may name any child's items.
///
/// There is no allow-list: a room that breaks a rule is fixed, not listed.
///
/// `cargo test --test it tidy::rooms -- --nocapture` prints every room's import graph.
#[test]
fn rooms_are_dags_one_level_down() {
    let mut failures = Vec::new();
    for room in rooms() {
        let graph = room_graph(&room);
        println!("{}", graph.render());
        for knot in graph.knots() {
            failures.push(format!("import cycle in {room}/: {}", graph.cycle_through(&knot).join(" -> ")));
        }
        for (from, path) in &graph.private_imports {
            failures.push(format!(
                "{room}/{from} names {}::{path}, a sibling's private helper: make it `pub` if it is \
                 that module's interface, or move it to the room's shared module",
                room.replace('/', "::")
            ));
        }
    }
    assert!(failures.is_empty(), "rooms are not DAGs (see the rule in tests/it/tidy.rs):\n{}", failures.join("\n"));
}

/// Each room's shared module: the child whose restricted items its siblings may name.
const SHARED_MODULES: &[(&str, &str)] = &[("api", "extract")];

/// The directory modules of `src/` that have a parent file beside them, at any depth, each as
/// its path below `src/` (`api`, `api/model`).
fn rooms() -> Vec<String> {
    fn rooms_in(dir: &Path, rooms: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && path.with_extension("rs").is_file() {
                let room = path.strip_prefix(src()).unwrap().iter().map(|part| part.to_string_lossy());
                rooms.push(room.collect::<Vec<_>>().join("/"));
                rooms_in(&path, rooms);
            }
        }
    }
    let mut rooms = Vec::new();
    rooms_in(&src(), &mut rooms);
    rooms.sort();
    rooms
}

/// One room's files, the edges between them and the private helpers its children borrow.
struct RoomGraph {
    room: String,
    /// Node → the nodes it names; the parent is `<room>.rs`.
    edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// (importing child, room-relative path of a sibling's restricted item).
    private_imports: std::collections::BTreeSet<(String, String)>,
}

fn room_graph(room: &str) -> RoomGraph {
    let room_path: Vec<String> = room.split('/').map(String::from).collect();
    let parent = format!("{}.rs", room_path.last().unwrap());
    let dir = src().join(room);
    let children: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs") || path.is_dir())
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let shared = SHARED_MODULES.iter().find(|(r, _)| *r == room).map(|(_, shared)| *shared);
    let mut files = vec![(parent.clone(), src().join(format!("{room}.rs")))];
    files.extend(rust_files(&dir).into_iter().map(|file| (module_path(&file)[room_path.len()].clone(), file)));
    let mut graph =
        RoomGraph { room: room.to_string(), edges: Default::default(), private_imports: Default::default() };
    for node in std::iter::once(&parent).chain(&children) {
        graph.edges.entry(node.clone()).or_default();
    }
    for (node, file) in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let in_parent = node == parent;
        for path in paths_in(&text, &module_path(&file), in_parent.then_some(&children)) {
            let Some(relative) = path.strip_prefix(&room_path[..]) else { continue };
            let target = match relative.first() {
                Some(child) if children.contains(child) => child.clone(),
                _ => parent.clone(),
            };
            if target == node {
                continue;
            }
            graph.edges.get_mut(&node).unwrap().insert(target.clone());
            if !in_parent && target != parent && Some(target.as_str()) != shared {
                for end in 1..relative.len() {
                    if restricted_items(room, &relative[..end]).contains(&relative[end]) {
                        graph.private_imports.insert((node.clone(), relative[..=end].join("::")));
                    }
                }
            }
        }
    }
    graph
}

/// The items a module file of a room declares at its top level as `pub(crate)`, `pub(super)` or
/// `pub(in …)`; `module` is room-relative (`["mcp", "params"]` is `api/mcp/params.rs`).
fn restricted_items(room: &str, module: &[String]) -> std::collections::BTreeSet<String> {
    let file = module.iter().fold(src().join(room), |dir, part| dir.join(part)).with_extension("rs");
    let Ok(text) = std::fs::read_to_string(file) else { return Default::default() };
    let keywords = ["async", "const", "unsafe", "fn", "struct", "enum", "static", "type", "trait", "mod"];
    text.lines()
        .filter_map(|line| {
            let rest = ["pub(crate) ", "pub(super) "].iter().find_map(|p| line.strip_prefix(p)).or_else(|| {
                let after = line.strip_prefix("pub(in ")?;
                Some(&after[after.find(") ")? + 2..])
            })?;
            let mut words = rest.split_whitespace().skip_while(|word| keywords.contains(word));
            let name: String = words.next()?.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Every module path the code names, resolved from the crate root: `crate::a::b`, `super::b`
/// and `self::b` (each climbing from the module it is written in, inline `mod x {` blocks
/// included), grouped imports expanded; with `bare`, also `x::…` for each name `x` it holds.
fn paths_in(text: &str, file_module: &[String], bare: Option<&std::collections::BTreeSet<String>>) -> Vec<Vec<String>> {
    // Each line's module: rustfmt closes an inline module with a `}` at the `mod` line's indent.
    let mut code = String::new();
    let mut line_modules: Vec<(usize, Vec<String>)> = Vec::new();
    let mut inline: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed == "}" && inline.last().is_some_and(|(at, _)| *at == indent) {
            inline.pop();
        }
        let module: Vec<String> =
            file_module.iter().cloned().chain(inline.iter().map(|(_, name)| name.clone())).collect();
        line_modules.push((code.len(), module));
        if !trimmed.starts_with("//") {
            code.push_str(line);
        }
        code.push('\n');
        let declaration = trimmed.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ");
        let declaration = declaration.trim_start_matches("pub ");
        if let Some(name) = declaration.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(" {")) {
            inline.push((indent, name.to_string()));
        }
    }
    let module_at = |offset: usize| -> &[String] {
        let line = line_modules.partition_point(|(start, _)| *start <= offset) - 1;
        &line_modules[line].1
    };
    let mut paths = Vec::new();
    let starts_path = |at: usize| !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let start = if !starts_path(at) {
            None
        } else if let Some(after) = rest.strip_prefix("crate::") {
            Some((Vec::new(), after))
        } else if rest.starts_with("super::") {
            let mut after = rest;
            let mut module = module_at(at).to_vec();
            while let Some(next) = after.strip_prefix("super::") {
                module.pop();
                after = next;
            }
            Some((module, after))
        } else if let Some(after) = rest.strip_prefix("self::") {
            Some((module_at(at).to_vec(), after))
        } else if let Some(name) = bare.and_then(|names| {
            names.iter().find(|name| rest.strip_prefix(name.as_str()).is_some_and(|r| r.starts_with("::")))
        }) {
            let _ = name;
            Some((file_module.to_vec(), rest))
        } else {
            None
        };
        match start {
            Some((base, tree)) => {
                for mut tail in use_tree(tree) {
                    if tail.last().is_some_and(|last| last == "self") {
                        tail.pop();
                    }
                    paths.push(base.iter().cloned().chain(tail).collect());
                }
                at += rest.find("::").map_or(1, |i| i + 2);
            }
            None => at += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    paths
}

/// The paths a use tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`; a path in
/// an expression ends at its first non-path character (`a::f(x)` is `a::f`).
fn use_tree(text: &str) -> Vec<Vec<String>> {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut trees = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    trees.extend(use_tree(&group[start..i]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    trees.extend(use_tree(&group[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        return trees;
    }
    if text.starts_with('*') {
        return vec![vec!["*".to_string()]];
    }
    let name: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if name.is_empty() {
        return Vec::new();
    }
    match text[name.len()..].strip_prefix("::") {
        Some(rest)
            if rest.trim_start().starts_with(|c: char| c == '{' || c == '*' || c.is_alphabetic() || c == '_') =>
        {
            use_tree(rest).into_iter().map(|tail| std::iter::once(name.clone()).chain(tail).collect()).collect()
        }
        _ => vec![vec![name]],
    }
}

impl RoomGraph {
    fn render(&self) -> String {
        let mut out = format!("{}/\n", self.room);
        for (node, targets) in &self.edges {
            let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
            out.push_str(&format!("  {node} -> {}\n", targets.join(", ")));
        }
        for knot in self.knots() {
            out.push_str(&format!("  knot: {{{}}}\n", knot.join(", ")));
        }
        for (from, path) in &self.private_imports {
            out.push_str(&format!("  private: {from} -> {path}\n"));
        }
        out
    }

    /// The strongly connected components with more than one node, each sorted.
    fn knots(&self) -> Vec<Vec<String>> {
        let reaches = |from: &String| -> std::collections::BTreeSet<String> {
            let mut seen = std::collections::BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(node) = todo.pop() {
                for next in &self.edges[&node] {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let reach: std::collections::BTreeMap<&String, _> = self.edges.keys().map(|n| (n, reaches(n))).collect();
        let mut knots: Vec<Vec<String>> = Vec::new();
        for node in self.edges.keys() {
            let knot: Vec<String> = self
                .edges
                .keys()
                .filter(|other| reach[node].contains(*other) && reach[other].contains(node))
                .cloned()
                .collect();
            if knot.len() > 1 && !knots.contains(&knot) {
                knots.push(knot);
            }
        }
        knots
    }

    /// A shortest cycle through the knot's first node, as the path that closes it.
    fn cycle_through(&self, knot: &[String]) -> Vec<String> {
        let first = &knot[0];
        let mut came_from = std::collections::BTreeMap::<String, String>::new();
        let mut todo = std::collections::VecDeque::from([first.clone()]);
        while let Some(node) = todo.pop_front() {
            for next in &self.edges[&node] {
                if next == first {
                    let mut cycle = vec![first.clone(), node.clone()];
                    while let Some(previous) = came_from.get(cycle.last().unwrap()) {
                        cycle.push(previous.clone());
                    }
                    cycle.reverse();
                    return cycle;
                }
                if knot.contains(next) && !came_from.contains_key(next) && next != first {
                    came_from.insert(next.clone(), node.clone());
                    todo.push_back(next.clone());
                }
            }
        }
        knot.to_vec()
    }
}

#[test]
fn the_room_check_resolves_relative_grouped_and_bare_paths() {
    let module = ["api".to_string(), "mcp".to_string()];
    let code = "use crate::api::{error::{ApiError, ErrorCode}, AppState};\n\
                // crate::api::admin only in a comment\n\
                fn f() { super::oauth::challenge(x); transport::y(); }\n\
                mod tests {\n    use super::*;\n}\n";
    let bare: std::collections::BTreeSet<String> = ["transport".to_string()].into();
    let paths: Vec<String> = paths_in(code, &module, Some(&bare)).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "api::error::ApiError",
            "api::error::ErrorCode",
            "api::AppState",
            "api::oauth::challenge",
            "api::mcp::transport::y",
            "api::mcp::*"
        ]
    );
}
