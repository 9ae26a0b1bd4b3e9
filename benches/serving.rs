//! Serving benchmark: prints figures from one run, side by side, so ratios survive a noisy machine.
//!
//! `cargo bench --bench serving` (add `-- --quick` for a short run, `-- --isolates-only` for the
//! first section alone, e.g. under `valgrind --tool=callgrind`). Measures:
//! * isolate create + run + drop (through the worker pool, one call at a time), with a pure
//!   handler and one that spends its time in JavaScript;
//! * MCP `tools/call` round trip for a pure handler;
//! * the same for a handler doing one fetch to a loopback upstream, beside a direct HTTP GET to
//!   that upstream (the overhead is the difference);
//! * pure calls per second with 1, 16 and 64 concurrent MCP clients, with p50/p99;
//! * I/O-bound calls (one fetch to an upstream that answers after 100 ms) per second and p50/p99
//!   with 32, 256 and 1,024 concurrent clients, beside the ideal rate (clients / 0.1 s);
//! * noisy neighbour: server B's pure calls at 16 clients, alone and while server A keeps 512
//!   calls parked on an upstream that answers after 5 s, and the ratio of B's p99s;
//! * `tools/list` beside pure and one-fetch `tools/call`s on the same mount at 64 clients: the
//!   MCP path without an isolate is the limit a tool call could reach.
//!
//! The loaded sections (each I/O-bound client count, the noisy neighbour) get a fresh daemon and
//! send raw JSON-RPC `tools/call` POSTs; a call counts only if it returns a result that is not
//! `isError`, and failures (busy, timeouts) are counted and printed by kind. Every call has a
//! client-side timeout, so a daemon that cannot keep up makes the figures bad, not the run endless.
//! The load generation and the upstream are `support/load.rs`, shared with `benches/replicas.rs`.

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcpbootd::serve::isolate::{
    CompileCache, Engine, FetchError, FetchHost, FetchRequest, FetchResponse, Invocation, IsolatePool, PoolSettings,
    Program, SandboxLimits, WasmEngine,
};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use support::load::{
    CALL_TIMEOUT, RawCall, Report, SLOW5_ARRIVALS, Window, classify_tool_error, client_loop, loaded_daemon_env, ms,
    percentile, print_left_queued, register, spawn_raw_clients, start_upstream, truncate,
};

mod support;

struct NoNetwork;

impl FetchHost for NoNetwork {
    fn fetch(
        &self,
        _: FetchRequest,
        _: Instant,
    ) -> futures_util::future::BoxFuture<'static, Result<FetchResponse, FetchError>> {
        Box::pin(async { Err(FetchError::Denied("no network in this benchmark".into())) })
    }
}

fn summarise(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
    println!("{name:<44} p50 {:>9.3} ms   p99 {:>9.3} ms   (n={})", ms(p50), ms(p99), samples.len());
    (p50, p99)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let iterations = if quick { 300 } else { 3000 };
    let throughput_window = if quick { Duration::from_secs(2) } else { Duration::from_secs(5) };
    let warmup = Duration::from_secs(1);
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    println!("mcpbootd serving benchmark: {cpus} CPUs, {iterations} iterations per latency figure\n");

    // 1. Isolate create + run + drop through the pool, one at a time: a pure handler, then one
    //    that spends its time in JavaScript.
    // A few slots: the pool reserves address space per slot, and valgrind has less of it.
    let wasm = Arc::new(WasmEngine::build(&CompileCache::off(), 16)?);
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        wasm.instantiate_and_drop()?;
        samples.push(started.elapsed());
    }
    summarise("isolate create+drop (instantiate, drop)", samples);
    let engine: Arc<dyn Engine> = wasm;
    let pool = IsolatePool::with_engine(engine, PoolSettings::with_workers(1), tokio::runtime::Handle::current());
    let pure_handler: Arc<str> = Arc::from("return { sum: args.a + args.b };");
    let cpu_handler: Arc<str> =
        Arc::from("let s = 0; for (let i = 0; i < 1e6; i++) { s += i % 7; } return { s, j: JSON.stringify(args) };");
    for (label, handler, rounds) in [("pure handler", &pure_handler, iterations), ("1M additions", &cpu_handler, 30)] {
        let mut samples = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            samples.push(run_once(&pool, handler).await?);
        }
        summarise(&format!("isolate create+run+drop, {label}"), samples);
    }
    pool.close();
    if std::env::args().any(|a| a == "--isolates-only") {
        return Ok(());
    }

    // 2. The daemon on a port-0 listener with a loopback upstream.
    let upstream = start_upstream().await?;
    let daemon = support::start_daemon(vec![
        ("MCPBOOTD_EGRESS__RESOLVE__api.bench.test", "127.0.0.1".to_string()),
        ("MCPBOOTD_SANDBOX__QUEUE", "4096".to_string()),
        ("MCPBOOTD_CODE_MODE__ENABLED", "true".to_string()),
    ])
    .await?;
    let address = daemon.address;
    let http = reqwest::Client::new();
    let upstream_url = format!("http://api.bench.test:{}/item", upstream.port());
    let registration = json!({
        "id": "bench",
        "allow_domains": ["api.bench.test"],
        "code_mode": {"enabled": true},
        "tools": [
            {"name": "pure", "description": "pure", "input_schema": {"type": "object"}, "handler": "return { sum: args.a + args.b };"},
            {"name": "one_fetch", "description": "one fetch", "input_schema": {"type": "object"},
             "handler": format!("const r = await fetch('{upstream_url}'); return await r.json();")},
        ],
    });
    let response = http.post(format!("http://{address}/admin/servers")).json(&registration).send().await?;
    anyhow::ensure!(response.status() == 201, "registration failed: {}", response.text().await?);
    let mcp_url = format!("http://{address}/servers/bench/mcp");
    let client = connect(&mcp_url).await?;

    let call = |tool: &'static str| {
        let mut params = CallToolRequestParams::new(tool);
        params = params.with_arguments(json!({"a": 1, "b": 2}).as_object().unwrap().clone());
        params
    };
    for _ in 0..200 {
        client.call_tool(call("pure")).await?;
        client.call_tool(call("one_fetch")).await?;
    }
    let mut pure = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        let result = client.call_tool(call("pure")).await?;
        pure.push(started.elapsed());
        assert_ne!(result.is_error, Some(true));
    }
    println!();
    summarise("MCP tools/call, pure handler", pure);
    code_mode_section(&client, &http, address, iterations / 3).await?;

    // 3. One fetch through the isolate vs a direct GET, interleaved so both see the same machine.
    let direct_url = format!("http://127.0.0.1:{}/item", upstream.port());
    let mut fetched = Vec::with_capacity(iterations);
    let mut direct = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        let result = client.call_tool(call("one_fetch")).await?;
        fetched.push(started.elapsed());
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let started = Instant::now();
        let body = http.get(&direct_url).send().await?.bytes().await?;
        direct.push(started.elapsed());
        assert!(!body.is_empty());
    }
    let (fetch_p50, fetch_p99) = summarise("MCP tools/call, handler with one fetch", fetched);
    let (direct_p50, direct_p99) = summarise("direct HTTP GET to the same upstream", direct);
    println!(
        "{:<44} p50 {:>9.3} ms   p99 {:>9.3} ms   ratio p50 {:.1}x",
        "overhead (one-fetch call - direct GET)",
        ms(fetch_p50.saturating_sub(direct_p50)),
        ms(fetch_p99.saturating_sub(direct_p99)),
        fetch_p50.as_secs_f64() / direct_p50.as_secs_f64()
    );

    // 4. Pure calls with concurrent clients, each an rmcp client with its own connection.
    println!();
    for clients in [1usize, 16, 64] {
        let mut connected = Vec::with_capacity(clients);
        for _ in 0..clients {
            connected.push(connect(&mcp_url).await?);
        }
        let window = Window::after(warmup, throughput_window);
        let tasks = connected.into_iter().map(|client| {
            tokio::spawn(async move {
                let samples = client_loop(window, || rmcp_call(&client, "pure")).await;
                let _ = client.cancel().await;
                samples
            })
        });
        let report = Report::collect(window, tasks.collect()).await?;
        let target = if clients == 64 { "target >= 5000/s" } else { "" };
        report.print(&format!("pure calls, {clients} concurrent client(s)"), target);
    }

    let _ = client.cancel().await;
    daemon.stop().await?;

    // 5. I/O-bound calls: each waits 100 ms on the upstream, so the ideal rate is clients / 0.1 s.
    //    A fresh daemon for each client count: calls that timed-out clients left queued in an
    //    overloaded daemon would otherwise be counted against the next run.
    println!();
    let slow_url = format!("http://api.bench.test:{}/slow", upstream.port());
    for (clients, target) in [(32usize, "target >= 90%"), (256, "target >= 90%"), (1024, "target >= 2000/s")] {
        let daemon = support::start_daemon(loaded_daemon_env()).await?;
        register(&http, daemon.address, "io", &format!("const r = await fetch('{slow_url}'); return await r.json();"))
            .await?;
        let io = RawCall::new(daemon.address, "io");
        let window = Window::after(warmup, throughput_window);
        let report = Report::collect(window, spawn_raw_clients(&io, clients, window)).await?;
        let ideal = clients as f64 / 0.1;
        report.print(
            &format!("I/O-bound (100 ms upstream), {clients} clients"),
            &format!("ideal {ideal:>5.0}/s = {:>5.1}%   {target}", 100.0 * report.rate() / ideal),
        );
        print_left_queued(&http, daemon.address).await;
        daemon.stop().await?;
    }

    // 6. Noisy neighbour: server A has calls parked on a 5 s upstream while server B's pure calls
    //    run; B's latency should barely notice.
    println!();
    let daemon = support::start_daemon(loaded_daemon_env()).await?;
    let slow5_url = format!("http://api.bench.test:{}/slow5", upstream.port());
    register(
        &http,
        daemon.address,
        "noisy-a",
        &format!("const r = await fetch('{slow5_url}'); return await r.json();"),
    )
    .await?;
    register(&http, daemon.address, "quiet-b", "return { sum: args.a + args.b };").await?;
    // A's calls must outlast the 5 s upstream; they are aborted once B has been measured.
    let noisy = RawCall::with_timeout(daemon.address, "noisy-a", Duration::from_secs(120));
    let quiet = RawCall::new(daemon.address, "quiet-b");

    let window = Window::after(warmup, throughput_window);
    let alone = Report::collect(window, spawn_raw_clients(&quiet, 16, window)).await?;
    alone.print("B pure calls, 16 clients, alone", "");

    let parked = Arc::new(ParkedCalls::default());
    let arrived_before = SLOW5_ARRIVALS.load(Ordering::SeqCst);
    let neighbours: Vec<_> =
        (0..NOISY_CALLS).map(|_| tokio::spawn(parked.clone().keep_in_flight(noisy.clone()))).collect();
    // Give A's calls time to reach the upstream (or to be stuck before it).
    let parking = Instant::now();
    while SLOW5_ARRIVALS.load(Ordering::SeqCst) - arrived_before < NOISY_CALLS as u64
        && parking.elapsed() < Duration::from_secs(2)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let arrived = SLOW5_ARRIVALS.load(Ordering::SeqCst) - arrived_before;
    let parked_for = parking.elapsed();

    let window = Window::after(warmup, throughput_window);
    let beside = Report::collect(window, spawn_raw_clients(&quiet, 16, window)).await?;
    beside.print(&format!("B pure calls, 16 clients, beside {NOISY_CALLS} A calls"), "");
    for task in &neighbours {
        task.abort();
    }
    println!(
        "{:<44} {arrived} of {NOISY_CALLS} reached the upstream within {:.1} s; {} finished, {} failed while B ran",
        "A calls parked on the 5 s upstream",
        parked_for.as_secs_f64(),
        parked.finished.load(Ordering::SeqCst),
        parked.failed.load(Ordering::SeqCst),
    );
    match (alone.p99(), beside.p99()) {
        (Some(alone), Some(beside)) => println!(
            "{:<44} {:>9.1}x   target <= 2x",
            "B p99 beside A / B p99 alone",
            beside.as_secs_f64() / alone.as_secs_f64()
        ),
        _ => println!("{:<44} n/a (no successful B call in one of the windows)", "B p99 beside A / B p99 alone"),
    }
    print_left_queued(&http, daemon.address).await;
    daemon.stop().await?;

    // 7. The MCP path with and without an isolate: `tools/list` on a mount beside a pure
    //    `tools/call` and a one-fetch call on the same mount, 64 clients, two rounds.
    //    `tools/list` is the limit a tool call could reach.
    println!();
    let fast_url = format!("http://api.bench.test:{}/item", upstream.port());
    let mut rates: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for _round in 0..2 {
        let daemon = support::start_daemon(loaded_daemon_env()).await?;
        register(&http, daemon.address, "pure", "return { sum: args.a + args.b };").await?;
        register(
            &http,
            daemon.address,
            "fetch",
            &format!("const r = await fetch('{fast_url}'); return await r.json();"),
        )
        .await?;
        // The same pure call through every limit at the door, set too high to refuse: what
        // admission costs a call.
        register(&http, daemon.address, "limited", "return { sum: args.a + args.b };").await?;
        let limits = json!({"per_caller_per_minute": 1_000_000_000u32, "per_server_per_minute": 1_000_000_000u32,
            "per_tool_per_minute": 1_000_000_000u32, "per_caller_concurrency": 1_000_000u32});
        let response =
            http.put(format!("http://{}/admin/servers/limited/limits", daemon.address)).json(&limits).send().await?;
        anyhow::ensure!(response.status() == 200, "setting limits failed: {}", response.text().await?);
        for (what, target) in [
            ("tools/list", RawCall::tools_list(daemon.address, "pure")),
            ("pure tools/call", RawCall::new(daemon.address, "pure")),
            ("pure tools/call, every limit on", RawCall::new(daemon.address, "limited")),
            ("one-fetch tools/call", RawCall::new(daemon.address, "fetch")),
        ] {
            let window = Window::after(warmup, throughput_window);
            let report = Report::collect(window, spawn_raw_clients(&target, 64, window)).await?;
            report.print(&format!("{what}, 64 clients"), "");
            rates.entry(what).or_default().push(report.rate());
        }
        daemon.stop().await?;
    }
    let mean = |what| {
        let r: &Vec<f64> = &rates[what];
        r.iter().sum::<f64>() / r.len() as f64
    };
    println!(
        "{:<44} {:>9.2}x   target >= 0.40",
        "pure tools/call / tools/list",
        mean("pure tools/call") / mean("tools/list")
    );
    println!(
        "{:<44} {:>9.2}x   target >= 0.95",
        "with every limit on / without",
        mean("pure tools/call, every limit on") / mean("pure tools/call")
    );
    Ok(())
}

/// One pure call through `pool`: how long from asking to the completion.
async fn run_once(pool: &IsolatePool, handler: &Arc<str>) -> anyhow::Result<Duration> {
    let invocation = Invocation {
        handler: handler.clone(),
        arguments: json!({"a": 1, "b": 2}),
        limits: SandboxLimits::default(),
        fetch: Arc::new(NoNetwork),
        program: Program::Handler,
    };
    let started = Instant::now();
    let completion = pool.run("bench", invocation).await.map_err(|_| anyhow::anyhow!("pool refused"))?;
    let elapsed = started.elapsed();
    anyhow::ensure!(completion.outcome.as_str() == "ok", "the call ended {:?}", completion.outcome.as_str());
    Ok(elapsed)
}

/// Code mode: three dependent pure calls made by a client one after another (three round
/// trips) beside one `code_execution` script making the same three calls, interleaved; then the
/// size of the `code_execution` description for a server with 20 tools.
async fn code_mode_section(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    http: &reqwest::Client,
    address: SocketAddr,
    rounds: usize,
) -> anyhow::Result<()> {
    let pure = |a: i64| {
        CallToolRequestParams::new("pure").with_arguments(json!({"a": a, "b": 1}).as_object().unwrap().clone())
    };
    let script = "const x = await tools.bench.pure({a: 1, b: 1});\n\
                  const y = await tools.bench.pure({a: x.sum, b: 1});\n\
                  const z = await tools.bench.pure({a: y.sum, b: 1});\n\
                  return z.sum;";
    let code = CallToolRequestParams::new("code_execution")
        .with_arguments(json!({"code": script}).as_object().unwrap().clone());
    for _ in 0..50 {
        client.call_tool(code.clone()).await?;
    }
    let (mut round_trips, mut scripted) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let started = Instant::now();
        let mut sum = 1;
        for _ in 0..3 {
            let result = client.call_tool(pure(sum)).await?;
            sum = result.structured_content.as_ref().and_then(|v| v["sum"].as_i64()).unwrap_or(0);
        }
        round_trips.push(started.elapsed());
        anyhow::ensure!(sum == 4, "the round trips added up to {sum}");
        let started = Instant::now();
        let result = client.call_tool(code.clone()).await?;
        scripted.push(started.elapsed());
        let value = result.structured_content.as_ref().map(|v| v["value"].clone());
        anyhow::ensure!(value == Some(json!(4)), "the script returned {result:?}");
    }
    let per_second = |samples: &[Duration]| samples.len() as f64 / samples.iter().sum::<Duration>().as_secs_f64();
    let (trips_rate, script_rate) = (per_second(&round_trips), per_second(&scripted));
    println!();
    let (trips_p50, _) = summarise("3 pure calls as 3 MCP round trips", round_trips);
    let (script_p50, _) = summarise("the same 3 calls in one code_execution", scripted);
    println!("{:<44} {trips_rate:>9.1} /s   script {script_rate:>9.1} /s", "composites per second (one client): trips");
    println!("{:<44} {:>9.2}x", "script p50 / round-trips p50", ms(script_p50) / ms(trips_p50));

    // A server with 20 tools: the first 20 operations of the crates.io sample (or stand-ins).
    let tools = sample_tools(20);
    let registration = json!({"id": "twenty", "code_mode": {"enabled": true}, "tools": tools});
    let response = http.post(format!("http://{address}/admin/servers")).json(&registration).send().await?;
    anyhow::ensure!(response.status() == 201, "registration failed: {}", response.text().await?);
    let twenty = connect(&format!("http://{address}/servers/twenty/mcp")).await?;
    let listed = twenty.list_all_tools().await?;
    let description = listed.iter().find(|t| t.name == "code_execution").and_then(|t| t.description.clone());
    let description = description.unwrap_or_default();
    let tool_descriptions: usize = listed
        .iter()
        .filter(|t| t.name != "code_execution")
        .map(|t| serde_json::to_string(t).unwrap_or_default().len())
        .sum();
    println!(
        "{:<44} {:>9} bytes (~{} tokens); the 20 tools' own definitions: {} bytes",
        "code_execution description, 20 tools",
        description.len(),
        description.len() / 4,
        tool_descriptions
    );
    twenty.cancel().await?;
    Ok(())
}

/// `count` tools built from the operations of `openapi-samples/crates-io.json` (beside the
/// repository), with their parameters as input schemas; stand-ins when the sample is absent.
fn sample_tools(count: usize) -> Vec<serde_json::Value> {
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/openapi-samples/crates-io.json");
    let spec: serde_json::Value =
        std::fs::read(&sample).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default();
    let mut tools = Vec::new();
    for (path, item) in spec["paths"].as_object().into_iter().flatten() {
        for (method, operation) in item.as_object().into_iter().flatten() {
            if !["get", "put", "post", "delete", "patch"].contains(&method.as_str()) || tools.len() == count {
                continue;
            }
            let name: String = operation["operationId"]
                .as_str()
                .unwrap_or("op")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
                .collect();
            let mut properties = serde_json::Map::new();
            let mut required = Vec::new();
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                let Some(parameter_name) = parameter["name"].as_str() else { continue };
                let mut schema = parameter["schema"].clone();
                if !schema.is_object() || schema.get("$ref").is_some() {
                    schema = json!({"type": "string"});
                }
                if let Some(text) = parameter["description"].as_str() {
                    schema["description"] = json!(text);
                }
                if parameter["required"] == true {
                    required.push(parameter_name.to_string());
                }
                properties.insert(parameter_name.to_string(), schema);
            }
            tools.push(json!({
                "name": format!("{}_{}", name.trim_matches('_'), tools.len()),
                "description": operation["summary"].as_str().unwrap_or(path),
                "input_schema": {"type": "object", "properties": properties, "required": required},
                "handler": "return args;",
            }));
        }
    }
    while tools.len() < count {
        let n = tools.len();
        tools.push(json!({
            "name": format!("tool_{n}"),
            "description": "A stand-in tool.",
            "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "handler": "return args;",
        }));
    }
    tools
}

/// Calls server A keeps in flight in the noisy-neighbour section.
const NOISY_CALLS: usize = 512;

/// A `tools/call` through an rmcp client, as an MCP host makes it.
async fn rmcp_call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    tool: &'static str,
) -> Result<(), String> {
    let params = CallToolRequestParams::new(tool).with_arguments(json!({"a": 1, "b": 2}).as_object().unwrap().clone());
    match tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params)).await {
        Err(_) => Err("client timeout".into()),
        Ok(Err(error)) => Err(truncate(&format!("rmcp error: {error}"))),
        Ok(Ok(result)) if result.is_error == Some(true) => {
            Err(classify_tool_error(result.content.first().and_then(|c| c.as_text()).map_or("", |t| t.text.as_str())))
        }
        Ok(Ok(_)) => Ok(()),
    }
}

/// Server A's calls in the noisy-neighbour section, each re-issued as soon as it ends so that
/// `NOISY_CALLS` stay in flight until the task is aborted.
#[derive(Default)]
struct ParkedCalls {
    finished: AtomicU64,
    failed: AtomicU64,
}

impl ParkedCalls {
    async fn keep_in_flight(self: Arc<Self>, target: RawCall) {
        loop {
            match target.call().await {
                Ok(()) => self.finished.fetch_add(1, Ordering::SeqCst),
                Err(_) => self.failed.fetch_add(1, Ordering::SeqCst),
            };
        }
    }
}

async fn connect(url: &str) -> anyhow::Result<rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>> {
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url.to_string()),
    );
    Ok(ClientConfig::default().serve(transport).await?)
}
