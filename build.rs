//! Build-time inputs the compiler cannot see by itself.
//!
//! * `sqlx::migrate!` embeds `migrations/` at compile time, and cargo does not otherwise notice a
//!   new file there (as the sqlx documentation says): rebuild when one is added or changed.
//! * The web console's files (`console/assets/`) are embedded in the binary: this writes the table
//!   `src/api/console.rs` includes, one `include_bytes!` per file, so adding a file needs no edit
//!   in Rust.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=console/assets");
    // Read at run time, not with `env!`: worktrees sharing one target directory share this
    // script's binary, and a path compiled into it would embed another worktree's files.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir).join("console/assets");
    let mut files = Vec::new();
    collect(&root, &mut files);
    // Sorted by the name the console looks up (a string), not by path: paths order `server/x.js`
    // before `server.js`, strings the other way round.
    let mut named: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|file| {
            let name = file.strip_prefix(&root).expect("under the root").to_str().expect("UTF-8 file names");
            (name.replace('\\', "/"), file)
        })
        .collect();
    named.sort();
    let mut table = String::from("&[\n");
    for (name, file) in &named {
        // Every directory is watched too, so a file added to a subdirectory is picked up.
        println!("cargo:rerun-if-changed={}", file.display());
        let path = file.to_str().expect("UTF-8 paths");
        writeln!(table, "    ({name:?}, include_bytes!({path:?}) as &[u8]),").expect("write to a String");
    }
    table.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("console_assets.rs");
    std::fs::write(out, table).expect("write console_assets.rs");
}

/// Every file under `dir`, recursively; directories are reported to cargo as they are read.
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}
