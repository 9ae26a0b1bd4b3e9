//! Keeping the compiled image between starts, so a restart does not compile QuickJS again.
//!
//! Building the engine compiles the vendored module, runs the prelude and compiles the image
//! module made from it: about a second of CPU in a release build, on every start. The cache
//! keeps the image module as Wasmtime's serialised machine code (`Module::serialize`) and the
//! image's addresses beside it, in two files of one directory:
//!
//! * `quickjs.cwasm`: the compiled image module;
//! * `quickjs.json`: the [`Image`], the SHA-256 of `quickjs.cwasm`, and the key it was built for.
//!
//! The key names the executable that built the entry (its path, size and modification time):
//! the image depends on the daemon's own code (the natives it installs, the prelude, where it
//! keeps things), so any other build must not use it. Wasmtime refuses machine code from
//! another version or configuration on its own. A stale, damaged or foreign entry is not an
//! error: the engine is built as without a cache and the entry replaced.
//!
//! Loading machine code is trusting it, so the directory and both files must belong to the
//! daemon's user and be writable by nobody else; otherwise the cache is not used (and a warning
//! says why). The directory is created with mode 0700.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wasmtime::{Engine as Wasmtime, Module};

use super::image::Image;

const MODULE_FILE: &str = "quickjs.cwasm";
const INDEX_FILE: &str = "quickjs.json";

/// Where the compiled engine is kept between starts, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileCache {
    dir: Option<PathBuf>,
}

/// What the index file holds.
#[derive(Serialize, Deserialize)]
struct Index {
    key: String,
    module_sha256: String,
    image: Image,
}

/// How a cached engine was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// No cache configured.
    Off,
    /// Loaded from the cache.
    Loaded,
    /// Built, and written to the cache.
    Stored,
    /// Built; the cache could not be read or written (a warning says why).
    Unusable,
}

impl CompileCache {
    /// No cache: the engine is compiled at every start.
    pub fn off() -> Self {
        CompileCache { dir: None }
    }

    /// A cache in `dir`, created when first written.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        CompileCache { dir: Some(dir.into()) }
    }

    /// The cache a `[sandbox] compile_cache` setting names: `"off"`, a directory, or empty for
    /// the first of `$CACHE_DIRECTORY` (systemd's `CacheDirectory=`), `$XDG_CACHE_HOME/mcpbootd`
    /// and `$HOME/.cache/mcpbootd` that is set (none set: off).
    pub fn from_setting(setting: &str) -> Self {
        match setting {
            "off" => Self::off(),
            "" => {
                let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
                let dir = var("CACHE_DIRECTORY")
                    .map(|list| {
                        // systemd lists several directories separated by ':' when the unit names several.
                        let list = list.to_string_lossy().into_owned();
                        PathBuf::from(list.split(':').next().unwrap_or_default())
                    })
                    .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("mcpbootd")))
                    .or_else(|| var("HOME").map(|d| d.join(".cache").join("mcpbootd")));
                CompileCache { dir }
            }
            path => Self::at(path),
        }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The cached image module and its addresses, when there is a usable entry for this build.
    pub(super) fn load(&self, wasmtime: &Wasmtime) -> Option<(Module, Image)> {
        let dir = self.dir.as_deref()?;
        let index_path = dir.join(INDEX_FILE);
        if !index_path.exists() {
            return None;
        }
        match load_entry(dir, wasmtime) {
            Ok(entry) => entry,
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), "not using the compiled engine cache: {reason}");
                None
            }
        }
    }

    /// Writes the entry for this build, replacing what was there. Errors are reported, not
    /// returned: a daemon that cannot write its cache still runs.
    pub(super) fn store(&self, module: &Module, image: &Image) -> CacheUse {
        let Some(dir) = self.dir.as_deref() else { return CacheUse::Off };
        match store_entry(dir, module, image) {
            Ok(()) => CacheUse::Stored,
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), "could not write the compiled engine cache: {reason}");
                CacheUse::Unusable
            }
        }
    }
}

/// Why the cache was not used or not written; logged, never returned: the engine is built as
/// without a cache.
#[derive(Debug, thiserror::Error)]
enum CacheProblem {
    #[error("cannot read {}: {error}", path.display())]
    Unreadable { path: PathBuf, error: std::io::Error },
    #[error("cannot create {}: {error}", path.display())]
    Uncreatable { path: PathBuf, error: std::io::Error },
    #[error("cannot write {}: {error}", path.display())]
    Unwritable { path: PathBuf, error: std::io::Error },
    #[error("{} is a symbolic link", .0.display())]
    SymbolicLink(PathBuf),
    #[error("{} belongs to user {owner}, not to the daemon's user {me}", path.display())]
    ForeignOwner { path: PathBuf, owner: u32, me: u32 },
    #[error("{} is writable by other users (mode {mode:o})", path.display())]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error("{} is not a cache index ({error})", path.display())]
    NotAnIndex { path: PathBuf, error: serde_json::Error },
    #[error("{} does not match its index (damaged or partly written)", .0.display())]
    Damaged(PathBuf),
    #[error("Wasmtime refused {}: {error}", path.display())]
    Refused { path: PathBuf, error: wasmtime::Error },
    #[error("cannot serialise the compiled module: {0}")]
    Unserialisable(wasmtime::Error),
    #[error("cannot encode the cache index: {0}")]
    Unencodable(serde_json::Error),
    #[error("cannot find this program: {0}")]
    NoExecutable(std::io::Error),
}

fn load_entry(dir: &Path, wasmtime: &Wasmtime) -> Result<Option<(Module, Image)>, CacheProblem> {
    check_private(dir)?;
    let index_path = dir.join(INDEX_FILE);
    check_private(&index_path)?;
    let index: Index = serde_json::from_slice(&read(&index_path)?)
        .map_err(|error| CacheProblem::NotAnIndex { path: index_path.clone(), error })?;
    if index.key != build_key()? {
        // Another build wrote it; this start replaces it.
        return Ok(None);
    }
    let module_path = dir.join(MODULE_FILE);
    check_private(&module_path)?;
    let bytes = read(&module_path)?;
    if hex::encode(Sha256::digest(&bytes)) != index.module_sha256 {
        return Err(CacheProblem::Damaged(module_path));
    }
    // SAFETY: the bytes are what `Module::serialize` wrote for this executable (the key and the
    // digest say so), in a directory only the daemon's user can write; Wasmtime checks that its
    // version and configuration match before using them.
    let module = unsafe { Module::deserialize(wasmtime, &bytes) }
        .map_err(|error| CacheProblem::Refused { path: module_path, error })?;
    Ok(Some((module, index.image)))
}

fn store_entry(dir: &Path, module: &Module, image: &Image) -> Result<(), CacheProblem> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|error| CacheProblem::Uncreatable { path: dir.to_path_buf(), error })?;
    check_private(dir)?;
    let bytes = module.serialize().map_err(CacheProblem::Unserialisable)?;
    let index = Index { key: build_key()?, module_sha256: hex::encode(Sha256::digest(&bytes)), image: image.clone() };
    let index = serde_json::to_vec_pretty(&index).map_err(CacheProblem::Unencodable)?;
    // The module first, the index last: a reader finds either the old index (whose digest the new
    // module fails, so it rebuilds) or the new one with its module in place.
    write_atomically(&dir.join(MODULE_FILE), &bytes)?;
    write_atomically(&dir.join(INDEX_FILE), &index)
}

/// What identifies the executable that built an entry.
fn build_key() -> Result<String, CacheProblem> {
    let exe = std::env::current_exe().map_err(CacheProblem::NoExecutable)?;
    let meta = std::fs::metadata(&exe).map_err(|error| CacheProblem::Unreadable { path: exe.clone(), error })?;
    Ok(format!(
        "{} {} {} {}.{:09}",
        env!("CARGO_PKG_VERSION"),
        exe.display(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    ))
}

/// Refuses a path another user owns or may write.
fn check_private(path: &Path) -> Result<(), CacheProblem> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|error| CacheProblem::Unreadable { path: path.to_path_buf(), error })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.file_type().is_symlink() {
        return Err(CacheProblem::SymbolicLink(path.to_path_buf()));
    }
    if meta.uid() != me {
        return Err(CacheProblem::ForeignOwner { path: path.to_path_buf(), owner: meta.uid(), me });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(CacheProblem::WritableByOthers { path: path.to_path_buf(), mode: meta.mode() & 0o777 });
    }
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>, CacheProblem> {
    std::fs::read(path).map_err(|error| CacheProblem::Unreadable { path: path.to_path_buf(), error })
}

/// Writes `bytes` to a temporary file beside `path` (named after it and this process, so two
/// daemons sharing the directory never write the same one) and renames it over `path`, so a
/// reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CacheProblem> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!("{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut file =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        CacheProblem::Unwritable { path: path.to_path_buf(), error }
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// The warnings say which file and what is wrong with it, as they did when they were text.
    #[test]
    fn an_exposed_or_linked_entry_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let exposed = dir.path().join("exposed");
        std::fs::write(&exposed, b"x").unwrap();
        std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            check_private(&exposed).unwrap_err().to_string(),
            format!("{} is writable by other users (mode 666)", exposed.display())
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&exposed, &link).unwrap();
        assert_eq!(check_private(&link).unwrap_err().to_string(), format!("{} is a symbolic link", link.display()));
        let missing = dir.path().join("missing");
        assert_eq!(
            check_private(&missing).unwrap_err().to_string(),
            format!("cannot read {}: No such file or directory (os error 2)", missing.display())
        );
    }
}
