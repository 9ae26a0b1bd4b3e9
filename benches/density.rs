//! Density benchmark: what calls parked on a slow API cost in memory, and where it goes.
//!
//! `cargo bench --bench density` (10,000 calls; add `-- --quick` for 2,000). The real daemon
//! binary runs as a child process (`support/process.rs`) and the benchmark measures its
//! proportional set size (PSS: shared pages divided among their sharers) through four steps,
//! each on the same client connections:
//!
//! 1. the idle daemon with two servers registered;
//! 2. N keep-alive connections, each after one `GET /healthz`: the inbound connection;
//! 3. N `tools/call`s parked on a 12 s timer: the call and its isolate, without an upstream
//!    request (the isolate part is the WebAssembly instances' linear memory);
//! 4. N `tools/call`s parked on a fetch to an upstream that answers after 12 s: adds the
//!    outbound connection and the fetch.
//!
//! Each step prints PSS and KB per call against the step before, and every call must answer.
//! The benchmark raises its descriptor limit (the daemon inherits it): N client sockets, N
//! upstream sockets here, N inbound and N outbound in the daemon.

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

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
use support::process::{DaemonProcess, wait_ready};

mod support;

/// How long the upstream and the timer hold each call.
const PARKED_FOR: Duration = Duration::from_secs(12);
/// Connections opened at once while setting up.
const CONNECTING_AT_ONCE: usize = 256;
/// The size of a fiber stack's mapping: the engine's `async_stack_size`, 1.5 MiB.
const FIBER_STACK: u64 = 1536 * 1024;
/// Pause before each reading, so that freed memory settles.
const SETTLE: Duration = Duration::from_secs(2);

static ARRIVALS: AtomicU64 = AtomicU64::new(0);

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--upstream") {
        return serve_upstream().await;
    }
    mcpbootd::install_crypto_provider();
    let quick = std::env::args().any(|a| a == "--quick");
    let wanted = if quick { 2_000 } else { 10_000 };
    // The daemon holds two descriptors per call parked on a fetch (inbound and outbound), and
    // the limit is the hard one where it cannot be raised.
    let limit = raise_descriptor_limit(2 * wanted as u64 + 1_000);
    let calls = wanted.min((limit.saturating_sub(400) / 2) as usize);
    println!(
        "mcpbootd density benchmark: {calls} calls parked {} s, descriptor limit {limit}{}\n",
        PARKED_FOR.as_secs(),
        if calls < wanted { format!(" ({wanted} would need {})", 2 * wanted + 400) } else { String::new() }
    );
    // The upstream runs in a process of its own, so its sockets do not count against this one's.
    let (upstream, _upstream_process) = spawn_upstream()?;
    measure(calls, upstream).await
}

async fn measure(calls: usize, upstream: SocketAddr) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let room = (calls + 100).to_string();
    let daemon = DaemonProcess::spawn_with(
        dir.path(),
        "daemon",
        &[
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT", room.clone()),
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", room.clone()),
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS", "60000".to_string()),
            // The default 1 GiB budget for all isolates is what the operator would raise for
            // this many calls; the figures below show what they use.
            ("MCPBOOTD_SANDBOX__MEMORY_BUDGET_MB", "16384".to_string()),
            ("MCPBOOTD_SERVER__MAX_CONNECTIONS", (2 * calls + 100).to_string()),
            ("MCPBOOTD_SERVER__HEADER_READ_TIMEOUT_MS", "600000".to_string()),
            ("MCPBOOTD_EGRESS__RESOLVE__api.bench.test", "127.0.0.1".to_string()),
            ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS", "true".to_string()),
        ],
    )?;
    let http = reqwest::Client::new();
    wait_ready(&http, daemon.address, Duration::from_secs(60)).await.map_err(|e| daemon.explain(e))?;
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
    let label = |step: &str| step.to_string();
    tokio::time::sleep(SETTLE).await;
    let idle = Pss::of(pid)?;
    idle.print(&label("idle daemon"), None, calls);

    let connections = open_connections(daemon.address, calls).await?;
    tokio::time::sleep(SETTLE).await;
    let connected = Pss::of(pid)?;
    connected.print(&label(&format!("+ {calls} keep-alive connections")), Some(&idle), calls);

    let mut timers = park(connections, "timer", pid, daemon.address, &http, calls, None).await?;
    timers.pss.print(&label(&format!("+ {calls} calls parked on a timer")), Some(&connected), calls);
    tokio::time::sleep(SETTLE).await;
    let after_timers = Pss::of(pid)?;

    let before = arrivals(&http, upstream).await;
    let fetches = park(
        std::mem::take(&mut timers.connections),
        "fetch",
        pid,
        daemon.address,
        &http,
        calls,
        Some((upstream, before)),
    )
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
        "{:<52} {:.1} KB: inbound connection {:.1}, isolate {:.1}, rest of the call {:.1} (fiber stack {:.1}), \
         outbound connection and fetch {:.1} (of which more isolate {:.1})",
        label("KB per call parked on the API"),
        per_call(fetches.pss.total, idle.total),
        per_call(connected.total, idle.total),
        per_call(timers.pss.isolate, connected.isolate),
        per_call(timers.pss.total - timers.pss.isolate, connected.total - connected.isolate),
        per_call(timers.pss.stacks, connected.stacks),
        per_call(fetches.pss.total, timers.pss.total),
        per_call(fetches.pss.isolate, timers.pss.isolate),
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
/// reports them in flight and, for fetches, the upstream `(address, requests before)` has had
/// them all, or 5 s have passed), then waits for
/// every answer.
async fn park(
    connections: Vec<SendRequest<Full<Bytes>>>,
    tool: &str,
    pid: u32,
    address: SocketAddr,
    http: &reqwest::Client,
    calls: usize,
    upstream: Option<(SocketAddr, u64)>,
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
    while sent.elapsed() < Duration::from_secs(5) {
        let arrived = match upstream {
            Some((upstream, before)) => arrivals(http, upstream).await - before >= calls as u64,
            None => true,
        };
        let in_flight = support::load::gauge(http, address, "mcpbootd_isolate_in_flight_calls").await;
        if arrived && in_flight.is_some_and(|n| n as usize >= calls) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Admitted is not yet started: give the workers time to run every call's first turn (the
    // calls stay parked for 12 s).
    if upstream.is_none() {
        tokio::time::sleep(SETTLE).await;
    }
    let pss = Pss::of(pid)?;
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
    support::load::classify_reply(status, &body)
}

/// PSS of the daemon, in KB: in all, and the part that is isolates (the
/// WebAssembly instances' linear memory).
#[derive(Clone, Copy)]
struct Pss {
    total: u64,
    isolate: u64,
    /// The fiber stacks parked stores keep (part of the rest, not of `isolate`).
    stacks: u64,
}

impl Pss {
    fn of(pid: u32) -> anyhow::Result<Pss> {
        let (total, isolate, stacks) = smaps(pid)?;
        Ok(Pss { total, isolate, stacks })
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

/// A process's PSS in KB, and the part that is WebAssembly linear memory: the mappings of the
/// engine's memory image (`memfd:wasm-memory-image`, copy-on-write, so a call's writes land in
/// them) and the anonymous mappings between them (memory grown past the image); and the part
/// that is fiber stacks (the pool's anonymous writable mappings of exactly [`FIBER_STACK`]).
fn smaps(pid: u32) -> anyhow::Result<(u64, u64, u64)> {
    /// One mapping of `/proc/<pid>/smaps`, as far as the split needs it.
    struct Mapping {
        start: u64,
        end: u64,
        image: bool,
        anonymous: bool,
        fiber_stack: bool,
        pss_kb: u64,
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut mappings: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        if let Some(kb) = line.strip_prefix("Pss:") {
            if let Some(last) = mappings.last_mut() {
                last.pss_kb = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
            continue;
        }
        // A mapping's header: `start-end perms offset device inode [path]`.
        let mut fields = line.split_whitespace();
        let Some((start, end)) = fields.next().and_then(|range| range.split_once('-')) else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) else { continue };
        let writable = fields.next().is_some_and(|perms| perms.starts_with("rw"));
        let path = fields.nth(3).unwrap_or("");
        mappings.push(Mapping {
            start,
            end,
            image: path.contains("wasm-memory-image"),
            anonymous: path.is_empty(),
            fiber_stack: writable && path.is_empty() && end - start == FIBER_STACK,
            pss_kb: 0,
        });
    }
    let total = mappings.iter().map(|m| m.pss_kb).sum();
    let images = mappings.iter().filter(|m| m.image);
    let (low, high) = images.fold((u64::MAX, 0), |(low, high), m| (low.min(m.start), high.max(m.end)));
    let in_pool = |m: &&Mapping| m.start >= low && m.end <= high && (m.image || m.anonymous);
    let linear = mappings.iter().filter(in_pool).map(|m| m.pss_kb).sum();
    let stacks = mappings.iter().filter(|m| m.fiber_stack).map(|m| m.pss_kb).sum();
    Ok((total, linear, stacks))
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

/// This benchmark again as the upstream (`--upstream`), killed on drop; its address.
fn spawn_upstream() -> anyhow::Result<(SocketAddr, KillOnDrop)> {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("--upstream")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let address = line.trim().parse().map_err(|_| anyhow::anyhow!("the upstream printed {line:?}"))?;
    Ok((address, KillOnDrop(child)))
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The upstream: `/park` answers after [`PARKED_FOR`]; `/arrivals` counts the requests so far.
async fn serve_upstream() -> anyhow::Result<()> {
    let router = axum::Router::new()
        .route(
            "/park",
            get(|| async {
                ARRIVALS.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(PARKED_FOR).await;
                Json(json!({"id": 3, "title": "A slow item"}))
            }),
        )
        .route("/arrivals", get(|| async { ARRIVALS.load(Ordering::SeqCst).to_string() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}

/// Requests the upstream has had.
async fn arrivals(http: &reqwest::Client, upstream: SocketAddr) -> u64 {
    let Ok(response) = http.get(format!("http://{upstream}/arrivals")).send().await else { return 0 };
    response.text().await.ok().and_then(|t| t.parse().ok()).unwrap_or(0)
}
