//! The catalog on a real filesystem that fills up (attack run D2): writes that fail say so, no
//! write is acknowledged and then lost, `/readyz` tells, and the daemon recovers on its own once
//! space is back. Needs a tmpfs mount (root, or a user namespace allowing it); skipped with the
//! reason where the machine does not allow one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::helpers::*;

/// A small tmpfs mounted on a temporary directory, unmounted on drop.
struct SmallFilesystem {
    dir: Arc<tempfile::TempDir>,
}

impl SmallFilesystem {
    fn mount(megabytes: u32) -> Result<SmallFilesystem, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !status.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&status.stderr).trim()));
        }
        Ok(SmallFilesystem { dir: Arc::new(dir) })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Fills the filesystem with a file until writing fails; the file, to delete later.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // Whatever is left (less than a chunk) goes too.
    while file.write_all(&[0u8; 512]).is_ok() {}
    let _ = file.sync_all();
    path
}

fn server(id: &str) -> serde_json::Value {
    // A large handler makes each registration need pages the full disk does not have.
    let padding = "x".repeat(60 * 1024);
    json!({"id": id, "tools": [tool("hi", &format!("const pad = '{padding}'; return 'hi';"))]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_loses_no_acknowledged_write_and_the_daemon_recovers() {
    if crate::helpers::on_postgres() {
        return; // works on the SQLite catalog file itself
    }
    let filesystem = match SmallFilesystem::mount(8) {
        Ok(filesystem) => filesystem,
        Err(reason) => {
            eprintln!("skipped: the disk-full test needs a tmpfs mount ({reason})");
            return;
        }
    };
    let data_dir = filesystem.dir.clone();
    let app = spawn_app_with(AppOptions { data_dir: Some(data_dir.clone()), ..AppOptions::default() }).await;
    app.register(server("before")).await;
    let filler = fill(filesystem.path());

    // While the disk is full: refusals are clear, and nothing is acknowledged that is not stored.
    let mut acknowledged = Vec::new();
    for n in 0..20 {
        let id = format!("during-{n}");
        let (status, body) = app.post("/admin/servers", &server(&id)).await;
        if status == 201 {
            acknowledged.push(id);
        } else {
            assert_eq!(status, 503, "{body}");
            assert_eq!(body["error"]["code"], "catalog_unwritable", "{body}");
        }
    }
    eprintln!("while full: {} of 20 registrations acknowledged", acknowledged.len());
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "a catalog that cannot be written is not ready");
    assert_eq!(ready["catalog"], "unwritable", "{ready}");
    let token = app
        .http
        .put(app.url("/admin/servers/before/access-token"))
        .json(&json!({"access_token": "disk-full-token-0123456789"}))
        .send()
        .await
        .unwrap();
    let token_set = token.status() == 200;
    eprintln!("while full: setting a token answered {}", token.status());

    // Space comes back: the daemon recovers without a restart.
    std::fs::remove_file(&filler).unwrap();
    within(std::time::Duration::from_secs(5), "/readyz turns ready again once space is back", || async {
        app.get("/readyz").await.0 == 200
    })
    .await;
    app.register(server("after")).await;
    let (status, _) = app.delete("/admin/servers/after").await;
    assert_eq!(status, 204);
    let (status, body) = app.post("/admin/servers", &server("after-token")).await;
    assert_eq!(status, 201, "{body}");
    let token_after = app
        .http
        .put(app.url("/admin/servers/after-token/access-token"))
        .json(&json!({"access_token": "after-token-0123456789"}))
        .send()
        .await
        .unwrap();
    assert_eq!(token_after.status(), 200);

    // After a restart, exactly what was acknowledged is there.
    let upstream = app.upstream.clone();
    app.stop().await;
    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    for id in acknowledged.iter().map(String::as_str).chain(["before", "after-token"]) {
        assert_eq!(app.get(&format!("/admin/servers/{id}")).await.0, 200, "{id} was acknowledged and must be there");
    }
    assert_eq!(app.get("/admin/servers/after").await.0, 404, "the acknowledged delete held");
    let (_, view) = app.get("/admin/servers/after-token").await;
    assert_eq!(view["access_token_set"], true, "{view}");
    let (_, before) = app.get("/admin/servers/before").await;
    assert_eq!(before["access_token_set"], token_set, "the token is set exactly when it was acknowledged: {before}");
    app.stop().await;
    drop(filesystem);
}
