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

#[test]
fn serving_never_imports_generation_code() {
    for file in rust_files(&src().join("serve")).into_iter().chain([src().join("serve.rs")]) {
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in ["crate::generate", "crate::llm"] {
            assert!(
                !text.contains(needle),
                "{} imports {needle}; serving must not depend on generation",
                relative(&file)
            );
        }
    }
}

#[test]
fn only_egress_makes_outbound_requests_for_handlers() {
    for file in rust_files(&src().join("serve")).into_iter().chain([src().join("serve.rs")]) {
        let name = relative(&file);
        if name == "serve/egress.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("reqwest::"), "{name} uses reqwest; outbound requests go through serve/egress.rs");
    }
}
