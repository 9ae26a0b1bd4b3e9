//! `GET /admin/backup`: a SQLite catalog is copied while the daemon serves, and the copy, put in
//! place of the catalog, is what a restarted daemon serves.

use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serving_restores_the_catalog() {
    let app = spawn_app().await;
    if on_postgres() {
        let (status, body) = app.get("/admin/backup").await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "backup_not_supported", "{body}");
        assert!(error_message(&body).contains("pg_dump"), "{body}");
        app.stop().await;
        return;
    }
    app.register(json!({"id": "kept", "tools": [tool("hi", "return 'hi';")]})).await;
    let (status, _) = app.admin_call("kept", "hi", json!({})).await;
    assert_eq!(status, 200);
    let files_before = files(app.data_dir.path());

    let response = app.http.get(app.url("/admin/backup")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/octet-stream");
    let length: usize = response.headers()["content-length"].to_str().unwrap().parse().unwrap();
    let copy = response.bytes().await.unwrap();
    assert_eq!(copy.len(), length);
    assert!(copy.starts_with(b"SQLite format 3\0"), "a SQLite database file");
    assert_eq!(files(app.data_dir.path()), files_before, "the copy leaves nothing beside the catalog");

    // Registered after the backup: not in it.
    app.register(json!({"id": "later", "tools": [tool("hi", "return 'hi';")]})).await;

    // Restored in place of the catalog, with the daemon stopped.
    let data_dir = app.data_dir.clone();
    let upstream = app.upstream.clone();
    app.stop().await;
    let catalog = catalog_path(data_dir.path());
    for stale in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{stale}", catalog.display()));
    }
    std::fs::write(&catalog, &copy).unwrap();
    let app =
        spawn_app_with(AppOptions { data_dir: Some(data_dir), upstream: Some(upstream), ..AppOptions::default() })
            .await;
    assert_eq!(app.get("/admin/servers/later").await.0, 404);
    let (status, calls) = app.get("/admin/servers/kept/calls").await;
    assert_eq!(status, 200, "{calls}");
    assert_eq!(calls["calls"].as_array().unwrap().len(), 1, "the call log is in the backup: {calls}");
    let client = app.mcp("kept").await;
    assert_eq!(text_of(&mcp_call(&client, "hi", json!({})).await), "hi");
    drop(client);
    app.stop().await;
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
