//! Catalog-scale benchmark: the real daemon binary with many registered servers.
//!
//! `cargo bench --bench catalog_scale` (add `-- --quick` for 1,000 servers instead of 10,000).
//! Prints, from one run:
//! * the registration rate through `POST /admin/servers` (5 tools per server, 16 requests in
//!   flight), and the daemon's RSS once registration is done;
//! * after SIGTERM and a restart on the same catalog, the time from spawning the process to the
//!   first 200 from `/readyz` (every server mounted), the same with the compiled engine not
//!   cached, and the RSS once it has sat idle.
//!
//! The daemon runs as a child process so that start-up and RSS are the real binary's, not the
//! benchmark's; a guard kills it if the benchmark fails. It is the binary cargo built beside this
//! benchmark, or the one `BENCH_DAEMON_BIN` names (another build to compare, or a copy that a
//! later build into the same target directory cannot replace mid-run).

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::process::{DaemonProcess, daemon_binary, wait_ready};

mod support;

/// Registration requests in flight at once.
const REGISTRATION_CONCURRENCY: usize = 16;

/// How long the daemon sits idle before its RSS is read.
const IDLE: Duration = Duration::from_secs(2);

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let servers = if quick { 1_000 } else { 10_000 };
    let dir = tempfile::tempdir()?;
    mcpbootd::install_crypto_provider();
    let http = reqwest::Client::new();
    println!("mcpbootd catalog-scale benchmark: {servers} servers x 5 tools, daemon {}\n", daemon_binary().display());

    // 1. Register every server through the admin API.
    let daemon = DaemonProcess::spawn(dir.path(), "first")?;
    wait_ready(&http, daemon.address, Duration::from_secs(30)).await?;
    let started = Instant::now();
    register_all(&http, daemon.address, servers).await.map_err(|e| daemon.explain(e))?;
    let elapsed = started.elapsed();
    println!(
        "{:<44} {:>9.0} servers/s   ({servers} in {:.2} s)   target >= 1000/s",
        format!("registration, {REGISTRATION_CONCURRENCY} requests in flight"),
        servers as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    tokio::time::sleep(IDLE).await;
    println!(
        "{:<44} {:>9.1} MB   (peak {:.1} MB)",
        "RSS after registration, idle",
        daemon.rss_mb("VmRSS")?,
        daemon.rss_mb("VmHWM")?
    );
    println!("{:<44} {:>9.1} MB", "catalog on disk", catalog_bytes(dir.path()) as f64 / 1e6);

    // 2. SIGTERM, then restart on the same catalog.
    let stopped = Instant::now();
    daemon.terminate(Duration::from_secs(30))?;
    println!("{:<44} {:>9.1} ms", "SIGTERM -> exit", stopped.elapsed().as_secs_f64() * 1000.0);

    let spawned = Instant::now();
    let daemon = DaemonProcess::spawn(dir.path(), "restart")?;
    let ready = wait_ready(&http, daemon.address, Duration::from_secs(120)).await.map_err(|e| daemon.explain(e))?;
    let restart = spawned.elapsed();
    anyhow::ensure!(
        ready["mounted"] == servers,
        "after the restart /readyz reports {} mounted, expected {servers}",
        ready["mounted"]
    );
    println!("{:<44} {:>9.1} ms   target < 1000 ms", "restart: spawn -> /readyz 200", restart.as_secs_f64() * 1000.0);
    // The same restart compiling the WebAssembly engine instead of loading it from the cache.
    daemon.terminate(Duration::from_secs(30))?;
    let spawned = Instant::now();
    let daemon =
        DaemonProcess::spawn_with(dir.path(), "uncached", &[("MCPBOOTD_SANDBOX__COMPILE_CACHE", "off".to_string())])?;
    wait_ready(&http, daemon.address, Duration::from_secs(120)).await.map_err(|e| daemon.explain(e))?;
    println!("{:<44} {:>9.1} ms", "restart without the compile cache", spawned.elapsed().as_secs_f64() * 1000.0);

    // A server from the end of the catalog answers, so "ready" means what it says.
    let tools = tools_list(&http, daemon.address, &server_id(servers - 1)).await.map_err(|e| daemon.explain(e))?;
    anyhow::ensure!(tools == 5, "the last server lists {tools} tools after the restart, expected 5");

    // The servers list as the console shows it (every 10 s while open): every server with its
    // calls and errors of the last hour, counted from the call log.
    let list = list_latency(&http, daemon.address, servers).await.map_err(|e| daemon.explain(e))?;
    println!(
        "{:<44} {:>9.1} ms   (p50 of 20)",
        format!("GET /admin/servers, {servers} servers"),
        list.as_secs_f64() * 1000.0
    );

    tokio::time::sleep(IDLE).await;
    println!(
        "{:<44} {:>9.1} MB   (peak {:.1} MB)   target < 300 MB",
        format!("RSS after restart, idle {} s", IDLE.as_secs()),
        daemon.rss_mb("VmRSS")?,
        daemon.rss_mb("VmHWM")?
    );
    daemon.terminate(Duration::from_secs(30))?;
    Ok(())
}

/// Registers `servers` servers with `REGISTRATION_CONCURRENCY` requests in flight.
async fn register_all(http: &reqwest::Client, address: SocketAddr, servers: usize) -> anyhow::Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..REGISTRATION_CONCURRENCY)
        .map(|_| {
            let (http, next) = (http.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= servers {
                        return anyhow::Ok(());
                    }
                    let response =
                        http.post(format!("http://{address}/admin/servers")).json(&toolset(n)).send().await?;
                    anyhow::ensure!(
                        response.status() == 201,
                        "registering server {n} failed: {}",
                        response.text().await?
                    );
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    Ok(())
}

fn server_id(n: usize) -> String {
    format!("api-{n:05}")
}

/// A realistic generated server: five tools over one REST API, each handler a small fetch wrapper
/// of a few hundred bytes, as the compiler writes them.
fn toolset(n: usize) -> Value {
    let host = format!("api{n}.example.com");
    let base = format!("https://{host}/v1");
    let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
    json!({
        "id": server_id(n),
        "name": format!("Example API {n}"),
        "allow_domains": [host],
        "tools": [
            {
                "name": "get_item",
                "description": "Fetch one item by id, with its title, owner and last update time.",
                "input_schema": object(json!({"id": {"type": "integer", "minimum": 1}}), &["id"]),
                "annotations": {"readOnlyHint": true},
                "handler": format!(
                    "const r = await fetch(`{base}/items/${{args.id}}`, {{ headers: {{ accept: 'application/json' }} }});\n\
                     if (!r.ok) throw new Error(`item ${{args.id}}: upstream answered ${{r.status}}`);\n\
                     const item = await r.json();\n\
                     return {{ id: item.id, title: item.title, owner: item.owner, updated: item.updated_at }};"
                ),
            },
            {
                "name": "list_items",
                "description": "List items, newest first, one page at a time.",
                "input_schema": object(json!({"page": {"type": "integer", "minimum": 1}, "per_page": {"type": "integer", "maximum": 100}}), &[]),
                "annotations": {"readOnlyHint": true},
                "handler": format!(
                    "const url = new URL('{base}/items');\n\
                     url.searchParams.set('page', String(args.page ?? 1));\n\
                     url.searchParams.set('per_page', String(args.per_page ?? 20));\n\
                     const r = await fetch(url.toString());\n\
                     if (!r.ok) throw new Error(`upstream answered ${{r.status}}`);\n\
                     const items = await r.json();\n\
                     return {{ items: items.map(i => ({{ id: i.id, title: i.title }})) }};"
                ),
            },
            {
                "name": "search",
                "description": "Full-text search over item titles and bodies.",
                "input_schema": object(json!({"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer"}}), &["query"]),
                "annotations": {"readOnlyHint": true},
                "handler": format!(
                    "const q = encodeURIComponent(args.query);\n\
                     const r = await fetch(`{base}/search?q=${{q}}&limit=${{args.limit ?? 10}}`);\n\
                     if (!r.ok) throw new Error(`search failed: ${{r.status}}`);\n\
                     const body = await r.json();\n\
                     return {{ total: body.total, hits: body.hits.map(h => ({{ id: h.id, title: h.title, score: h.score }})) }};"
                ),
            },
            {
                "name": "get_user",
                "description": "Fetch a user's public profile by user name.",
                "input_schema": object(json!({"name": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}}), &["name"]),
                "annotations": {"readOnlyHint": true},
                "handler": format!(
                    "const r = await fetch(`{base}/users/${{encodeURIComponent(args.name)}}`);\n\
                     if (r.status === 404) return `no user named ${{args.name}}`;\n\
                     if (!r.ok) throw new Error(`upstream answered ${{r.status}}`);\n\
                     const u = await r.json();\n\
                     return {{ name: u.name, created: u.created_at, karma: u.karma, about: u.about }};"
                ),
            },
            {
                "name": "add_comment",
                "description": "Post a comment on an item.",
                "input_schema": object(json!({"id": {"type": "integer"}, "text": {"type": "string", "maxLength": 2000}}), &["id", "text"]),
                "handler": format!(
                    "const r = await fetch(`{base}/items/${{args.id}}/comments`, {{\n\
                       method: 'POST',\n\
                       headers: {{ 'content-type': 'application/json' }},\n\
                       body: JSON.stringify({{ text: args.text }}),\n\
                     }});\n\
                     if (!r.ok) throw new Error(`comment refused: ${{r.status}} ${{await r.text()}}`);\n\
                     const c = await r.json();\n\
                     return {{ id: c.id, url: c.url }};"
                ),
            },
        ],
    })
}

/// Lists a server's tools over MCP and returns how many there are.
/// The median time of 20 `GET /admin/servers`, each checked to list every server.
async fn list_latency(http: &reqwest::Client, address: SocketAddr, servers: usize) -> anyhow::Result<Duration> {
    let mut times = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let list: Value =
            http.get(format!("http://{address}/admin/servers")).send().await?.error_for_status()?.json().await?;
        times.push(started.elapsed());
        let listed = list["servers"].as_array().map(Vec::len).unwrap_or_default();
        anyhow::ensure!(listed == servers, "GET /admin/servers listed {listed} servers, expected {servers}");
    }
    times.sort();
    Ok(times[times.len() / 2])
}

async fn tools_list(http: &reqwest::Client, address: SocketAddr, server: &str) -> anyhow::Result<usize> {
    let reply: Value = http
        .post(format!("http://{address}/servers/{server}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .await?
        .json()
        .await?;
    reply["result"]["tools"].as_array().map(Vec::len).ok_or_else(|| anyhow::anyhow!("tools/list failed: {reply}"))
}

/// The catalog's files (database, WAL, shared memory) in bytes.
fn catalog_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("catalog.db"))
        .filter_map(|entry| entry.metadata().ok())
        .map(|metadata| metadata.len())
        .sum()
}
