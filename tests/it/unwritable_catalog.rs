//! The catalog's files turn immutable under a running daemon (`chattr +i`, as a read-only
//! remount after disk errors would leave them): the writes that fail say so, the process lives,
//! reads and tool calls go on, `/readyz` tells, and everything works again once the files can be
//! written. Needs root and a filesystem with the immutable attribute (ext4, xfs, btrfs; not
//! tmpfs); skipped with the reason elsewhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

/// The files of a directory, made immutable; made mutable again on drop, so the temporary
/// directory can be removed even when the test fails.
struct Immutable {
    files: Vec<PathBuf>,
}

impl Immutable {
    /// Every file in `dir`.
    fn make(dir: &Path) -> Result<Immutable, String> {
        Immutable::only(files_in(dir))
    }

    fn only(files: Vec<PathBuf>) -> Result<Immutable, String> {
        let mut immutable = Immutable { files: Vec::new() };
        for file in files {
            chattr("+i", &file)?;
            immutable.files.push(file);
        }
        Ok(immutable)
    }

    fn release(&mut self) {
        for file in self.files.drain(..) {
            let _ = chattr("-i", &file);
        }
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        self.release();
    }
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn chattr(flag: &str, file: &Path) -> Result<(), String> {
    let output = std::process::Command::new("chattr")
        .arg(flag)
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run chattr: {e}"))?;
    if !output.status.success() {
        return Err(format!("chattr {flag} {}: {}", file.display(), String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(())
}

fn server(id: &str) -> serde_json::Value {
    json!({"id": id, "tools": [tool("hi", "return 'hi from ' + 'the handler';")]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_catalog_files_cost_the_writes_not_the_daemon() {
    if on_postgres() {
        return; // works on the SQLite catalog's own files
    }
    let app = spawn_app().await;
    app.register(server("kept")).await;
    app.register(server("doomed")).await;
    let client = app.mcp("kept").await;
    assert_eq!(text_of(&mcp_call(&client, "hi", json!({})).await), "hi from the handler");

    let mut immutable = match Immutable::make(app.data_dir.path()) {
        Ok(immutable) => immutable,
        Err(reason) => {
            eprintln!("skipped: the unwritable-catalog test needs `chattr +i` on its temporary directory ({reason})");
            app.stop().await;
            return;
        }
    };

    // Writes fail with an answer that says why; the daemon lives.
    let (status, body) = app.delete("/admin/servers/doomed").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "catalog_unwritable", "{body}");
    let message = error_message(&body);
    assert!(message.contains("cannot be written"), "{message}");
    let (status, body) = app.post("/admin/servers", &server("refused")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "catalog_unwritable", "{body}");

    // Reads and tool calls go on.
    let (status, view) = app.get("/admin/servers/doomed").await;
    assert_eq!(status, 200, "the refused delete left the server: {view}");
    assert_eq!(app.get("/admin/servers/refused").await.0, 404);
    assert_eq!(text_of(&mcp_call(&client, "hi", json!({})).await), "hi from the handler");
    let doomed = app.mcp("doomed").await;
    assert_eq!(text_of(&mcp_call(&doomed, "hi", json!({})).await), "hi from the handler");
    let (status, body) = app.admin_call("kept", "hi", json!({})).await;
    assert_eq!(status, 200, "{body}");

    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["catalog"], "unwritable", "{ready}");

    // The files turn writable again: so does the daemon, without a restart.
    immutable.release();
    within(Duration::from_secs(5), "/readyz turns ready again once the files can be written", || async {
        app.get("/readyz").await.0 == 200
    })
    .await;
    let (status, body) = app.delete("/admin/servers/doomed").await;
    assert_eq!(status, 204, "{body}");
    app.register(server("after")).await;
    assert_eq!(text_of(&mcp_call(&client, "hi", json!({})).await), "hi from the handler");

    // After a restart, exactly the acknowledged writes are there.
    let data_dir = app.data_dir.clone();
    let upstream = app.upstream.clone();
    drop(client);
    drop(doomed);
    app.stop().await;
    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    assert_eq!(app.get("/admin/servers/kept").await.0, 200);
    assert_eq!(app.get("/admin/servers/after").await.0, 200);
    assert_eq!(app.get("/admin/servers/doomed").await.0, 404);
    assert_eq!(app.get("/admin/servers/refused").await.0, 404);
    app.stop().await;
}

/// The same with one file at a time immutable (the database, its WAL, the lock or key file):
/// whatever a write answers, it is never a 500, the daemon goes on serving, and once the file is
/// writable again so is the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_immutable_catalog_file_at_a_time_costs_at_most_the_writes() {
    if on_postgres() {
        return; // works on the SQLite catalog's own files
    }
    let app = spawn_app().await;
    app.register(server("kept")).await;
    let client = app.mcp("kept").await;
    for (n, file) in files_in(app.data_dir.path()).into_iter().enumerate() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut immutable = match Immutable::only(vec![file]) {
            Ok(immutable) => immutable,
            Err(reason) => {
                eprintln!(
                    "skipped: the unwritable-catalog test needs `chattr +i` on its temporary directory ({reason})"
                );
                break;
            }
        };
        let id = format!("while-{n}");
        let (status, body) = app.post("/admin/servers", &server(&id)).await;
        assert!(status == 201 || status == 503, "{name} immutable: {status} {body}");
        assert_eq!(text_of(&mcp_call(&client, "hi", json!({})).await), "hi from the handler", "{name} immutable");
        assert_eq!(app.get("/admin/servers/kept").await.0, 200, "{name} immutable");

        immutable.release();
        within(Duration::from_secs(5), &format!("{name} writable again: /readyz turns ready"), || async {
            app.get("/readyz").await.0 == 200
        })
        .await;
        app.register(server(&format!("after-{n}"))).await;
    }
    drop(client);
    app.stop().await;
}
