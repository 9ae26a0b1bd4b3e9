//! Density benchmark: what calls parked on a slow API cost in memory, and where it goes.
//!
//! `cargo bench --bench density` (10,000 calls; add `-- --quick` for 2,000). For each engine, the
//! real daemon binary runs as a child process (`support/process.rs`) and the benchmark measures
//! its proportional set size (PSS: the daemon plus any worker processes, shared pages divided
//! among their sharers) through four steps, each on the same client connections:
//!
//! 1. the idle daemon with two servers registered;
//! 2. N keep-alive connections, each after one `GET /healthz`: the inbound connection;
//! 3. N `tools/call`s parked on a 12 s timer: the call and its isolate, without an upstream
//!    request (the isolate part is the WebAssembly pool's pages, or the worker processes');
//! 4. N `tools/call`s parked on a fetch to an upstream that answers after 12 s: adds the
//!    outbound connection and the fetch.
//!
//! Each step prints PSS and KB per call against the step before, and every call must answer.
//! The benchmark raises its descriptor limit (the daemon inherits it): N client sockets, N
//! upstream sockets here, N inbound and N outbound in the daemon.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::json;
use support::process::DaemonProcess;

mod support;

/// How long the upstream and the timer hold each call.
const PARKED_FOR: Duration = Duration::from_secs(12);
/// Connections opened at once while setting up.
const CONNECTING_AT_ONCE: usize = 256;
/// Pause before each reading, so that freed memory settles.
const SETTLE: Duration = Duration::from_secs(2);

static ARRIVALS: AtomicU64 = AtomicU64::new(0);

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let calls = if quick { 2_000 } else { 10_000 };
    let limit = raise_descriptor_limit(4 * calls as u64 + 1_000);
    println!("mcpbootd density benchmark: {calls} calls parked {} s, descriptor limit {limit}\n", PARKED_FOR.as_secs());
    let upstream = start_upstream().await?;
    for engine in ["wasm", "native"] {
        measure(engine, calls, upstream).await?;
        println!();
    }
    Ok(())
}

async fn measure(engine: &str, calls: usize, upstream: SocketAddr) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let room = (calls + 100).to_string();
    let daemon = DaemonProcess::spawn_with(
        dir.path(),
        engine,
        &[
            ("MCPBOOTD_SANDBOX__ENGINE", engine.to_string()),
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT", room.clone()),
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", room.clone()),
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS", "60000".to_string()),
            ("MCPBOOTD_SERVER__MAX_CONNECTIONS", (2 * calls + 100).to_string()),
            ("MCPBOOTD_SERVER__HEADER_READ_TIMEOUT_MS", "600000".to_string()),
            ("MCPBOOTD_EGRESS__RESOLVE__api.bench.test", "127.0.0.1".to_string()),
            ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS", "true".to_string()),
        ],
    )?;
    let http = reqwest::Client::new();
    wait_ready(&http, daemon.address).await.map_err(|e| daemon.explain(e))?;
    let park_url = format!("http://api.bench.test:{}/park", upstream.port());
    support::load::register(
        &http,
        daemon.address,
        "timer",
        &format!("await new Promise(resolve => setTimeout(resolve, {})); return {{ ok: 1 }};", PARKED_FOR.as_millis()),
    )
    .await?;
    support::load::register(
        &http,
        daemon.address,
        "fetch",
        &format!("const r = await fetch('{park_url}'); return await r.json();"),
    )
    .await?;
    // One call of each, so everything a first call initialises is in the idle figure.
    let mut warm = open_connections(daemon.address, 1).await?;
    call(&mut warm[0], "timer").await.map_err(anyhow::Error::msg)?;

    let pid = daemon.pid();
    let label = |step: &str| format!("{engine}: {step}");
    tokio::time::sleep(SETTLE).await;
    let idle = Pss::of_tree(pid)?;
    idle.print(&label("idle daemon"), None, calls);

    let connections = open_connections(daemon.address, calls).await?;
    tokio::time::sleep(SETTLE).await;
    let connected = Pss::of_tree(pid)?;
    connected.print(&label(&format!("+ {calls} keep-alive connections")), Some(&idle), calls);

    let mut timers = park(connections, "timer", pid, daemon.address, &http, calls, || 0).await?;
    timers.pss.print(&label(&format!("+ {calls} calls parked on a timer")), Some(&connected), calls);
    tokio::time::sleep(SETTLE).await;
    let after_timers = Pss::of_tree(pid)?;

    let before = ARRIVALS.load(Ordering::SeqCst);
    let fetches = park(std::mem::take(&mut timers.connections), "fetch", pid, daemon.address, &http, calls, || {
        ARRIVALS.load(Ordering::SeqCst) - before
    })
    .await?;
    fetches.pss.print(&label("  the same calls parked on a fetch (12 s API)"), Some(&after_timers), calls);
    println!(
        "{:<52} {} of {calls} answered ({} and {} failed), all within {:.1} s of being sent   target: all, < 2048 MiB",
        label("parked calls"),
        timers.answered.min(fetches.answered),
        timers.failed_text(),
        fetches.failed_text(),
        timers.longest.max(fetches.longest).as_secs_f64(),
    );
    let per_call = |a: u64, b: u64| (a as f64 - b as f64) / calls as f64;
    println!(
        "{:<52} {:.1} KB: inbound connection {:.1}, isolate {:.1}, rest of the call {:.1}, outbound connection and fetch {:.1}",
        label("KB per call parked on the API"),
        per_call(fetches.pss.total, idle.total),
        per_call(connected.total, idle.total),
        per_call(timers.pss.isolate, connected.isolate),
        per_call(timers.pss.total - timers.pss.isolate, connected.total - connected.isolate),
        per_call(fetches.pss.total, timers.pss.total),
    );
    daemon.terminate(Duration::from_secs(60))?;
    Ok(())
}

/// What one step of parked calls measured.
struct Parked {
    pss: Pss,
    answered: usize,
    failures: std::collections::BTreeMap<String, usize>,
    longest: Duration,
    /// The connections the calls were made on, for the next step.
    connections: Vec<SendRequest<Full<Bytes>>>,
}

impl Parked {
    fn failed_text(&self) -> String {
        if self.failures.is_empty() {
            return "none".to_string();
        }
        self.failures.iter().map(|(kind, n)| format!("{n} {kind}")).collect::<Vec<_>>().join(", ")
    }
}

/// Sends a call of `tool` on every connection, reads PSS once they are all parked (the daemon
/// reports them in flight and `arrived()` reaches the count, or 5 s have passed), then waits for
/// every answer.
async fn park(
    connections: Vec<SendRequest<Full<Bytes>>>,
    tool: &str,
    pid: u32,
    address: SocketAddr,
    http: &reqwest::Client,
    calls: usize,
    arrived: impl Fn() -> u64,
) -> anyhow::Result<Parked> {
    let sent = Instant::now();
    let mut tasks = Vec::with_capacity(connections.len());
    for mut connection in connections {
        let tool = tool.to_string();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let outcome = call(&mut connection, &tool).await;
            (outcome, started.elapsed(), connection)
        }));
    }
    let needed = if tool == "fetch" { calls as u64 } else { 0 };
    while sent.elapsed() < Duration::from_secs(5) {
        if in_flight(http, address).await >= calls && arrived() >= needed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pss = Pss::of_tree(pid)?;
    let (mut answered, mut failures, mut longest) = (0, std::collections::BTreeMap::new(), Duration::ZERO);
    let mut connections = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (outcome, took, connection) = task.await?;
        connections.push(connection);
        longest = longest.max(took);
        match outcome {
            Ok(()) => answered += 1,
            Err(kind) => *failures.entry(kind).or_insert(0) += 1,
        }
    }
    Ok(Parked { pss, answered, failures, longest, connections })
}

/// Calls in flight as the daemon's metrics report them.
async fn in_flight(http: &reqwest::Client, address: SocketAddr) -> usize {
    let Ok(response) = http.get(format!("http://{address}/metrics")).send().await else { return 0 };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix("mcpbootd_isolate_in_flight_calls ")?.trim().parse::<f64>().ok())
        .map_or(0, |n| n as usize)
}

/// `count` HTTP/1.1 connections to the daemon, each after one `GET /healthz`.
async fn open_connections(address: SocketAddr, count: usize) -> anyhow::Result<Vec<SendRequest<Full<Bytes>>>> {
    let mut connections = Vec::with_capacity(count);
    let mut opening = tokio::task::JoinSet::new();
    let mut started = 0;
    while connections.len() < count {
        while started < count && opening.len() < CONNECTING_AT_ONCE {
            opening.spawn(connect(address));
            started += 1;
        }
        if let Some(done) = opening.join_next().await {
            connections.push(done??);
        }
    }
    Ok(connections)
}

async fn connect(address: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(address).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::get("/healthz").header("host", address.to_string()).body(Full::default())?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status() == 200, "GET /healthz answered {}", response.status());
    response.into_body().collect().await?;
    Ok(sender)
}

/// One `tools/call` of server `tool`'s tool `call` on `connection`.
async fn call(connection: &mut SendRequest<Full<Bytes>>, tool: &str) -> Result<(), String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "call", "arguments": {}}});
    let request = hyper::Request::post(format!("/servers/{tool}/mcp"))
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    connection.ready().await.map_err(|_| "connection closed".to_string())?;
    let response = connection.send_request(request).await.map_err(|_| "connection error".to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|_| "connection error".to_string())?.to_bytes();
    if status != 200 {
        return Err(format!("HTTP {status}"));
    }
    let reply: serde_json::Value = serde_json::from_slice(&body).map_err(|_| "unparsable reply".to_string())?;
    if reply["result"]["isError"] == true || reply["result"].is_null() {
        let text = reply["result"]["content"][0]["text"].as_str().or(reply["error"]["message"].as_str());
        return Err(support::load::truncate(text.unwrap_or("no result")));
    }
    Ok(())
}

/// PSS of a process and its descendants, in KB: in all, and the part that is isolates (the
/// WebAssembly pool's memory mappings, or the worker processes).
#[derive(Clone, Copy)]
struct Pss {
    total: u64,
    isolate: u64,
}

impl Pss {
    fn of_tree(pid: u32) -> anyhow::Result<Pss> {
        let mut pss = Pss { total: 0, isolate: 0 };
        let (daemon_total, pool) = smaps(pid)?;
        pss.total += daemon_total;
        pss.isolate += pool;
        for child in descendants(pid) {
            let (child_total, _) = smaps(child).unwrap_or((0, 0));
            pss.total += child_total;
            pss.isolate += child_total;
        }
        Ok(pss)
    }

    fn print(&self, name: &str, before: Option<&Pss>, calls: usize) {
        let mib = |kb: u64| kb as f64 / 1024.0;
        match before {
            None => println!("{name:<52} PSS {:>8.1} MiB (isolates {:>7.1} MiB)", mib(self.total), mib(self.isolate)),
            Some(before) => println!(
                "{name:<52} PSS {:>8.1} MiB (isolates {:>7.1} MiB)   {:>7.1} KB per call more",
                mib(self.total),
                mib(self.isolate),
                self.total.saturating_sub(before.total) as f64 / calls as f64
            ),
        }
    }
}

/// A process's PSS in KB, and the part in mappings of 1 TiB or more (the WebAssembly pool, which
/// reserves address space for every slot's linear memory).
fn smaps(pid: u32) -> anyhow::Result<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let (mut total, mut pool, mut in_pool) = (0, 0, false);
    for line in text.lines() {
        if let Some(kb) = line.strip_prefix("Pss:") {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            total += kb;
            if in_pool {
                pool += kb;
            }
        } else if let Some((range, _)) = line.split_once(' ')
            && let Some((start, end)) = range.split_once('-')
            && let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            in_pool = end - start >= 1 << 40;
        }
    }
    Ok((total, pool))
}

fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(pid) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Raises this process's descriptor limit towards `wanted` (children inherit it); returns it.
fn raise_descriptor_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        let raised = libc::rlimit { rlim_cur: wanted.max(limit.rlim_cur), rlim_max: wanted.max(limit.rlim_max) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
    }
    limit.rlim_cur
}

async fn wait_ready(http: &reqwest::Client, address: SocketAddr) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Ok(response) = http.get(format!("http://{address}/readyz")).send().await
            && response.status() == 200
        {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "/readyz did not answer 200 within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The upstream: `/park` answers after [`PARKED_FOR`], counting arrivals.
async fn start_upstream() -> anyhow::Result<SocketAddr> {
    let router = axum::Router::new().route(
        "/park",
        get(|| async {
            ARRIVALS.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(PARKED_FOR).await;
            Json(json!({"id": 3, "title": "A slow item"}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}
