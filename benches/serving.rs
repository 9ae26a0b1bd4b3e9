//! Serving benchmark: prints figures from one run, side by side, so ratios survive a noisy machine.
//!
//! `cargo bench --bench serving` (add `-- --quick` for a short run). Measures:
//! * isolate create + run + drop (through the worker pool, one call at a time);
//! * MCP `tools/call` round trip for a pure handler;
//! * the same for a handler doing one fetch to a loopback upstream, beside a direct HTTP GET to
//!   that upstream (the overhead is the difference);
//! * pure calls per second with 1, 16 and 64 concurrent MCP clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::get;
use mcpbootd::serve::isolate::{FetchError, FetchHost, FetchRequest, FetchResponse, Invocation, IsolatePool, PoolSettings, SandboxLimits};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

mod support;

struct NoNetwork;

impl FetchHost for NoNetwork {
    fn fetch(&self, _: FetchRequest, _: Instant) -> futures_util::future::BoxFuture<'static, Result<FetchResponse, FetchError>> {
        Box::pin(async { Err(FetchError::Denied("no network in this benchmark".into())) })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn summarise(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
    println!("{name:<44} p50 {:>9.3} ms   p99 {:>9.3} ms   (n={})", ms(p50), ms(p99), samples.len());
    (p50, p99)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let iterations = if quick { 300 } else { 3000 };
    let throughput_window = if quick { Duration::from_secs(2) } else { Duration::from_secs(5) };
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    println!("mcpbootd serving benchmark: {cpus} CPUs, {iterations} iterations per latency figure\n");

    // 1. Isolate create + run + drop through the pool, one at a time.
    let pool = IsolatePool::new(PoolSettings::with_workers(1), tokio::runtime::Handle::current());
    let handler: Arc<str> = Arc::from("return { sum: args.a + args.b };");
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let invocation = Invocation {
            handler: handler.clone(),
            arguments: json!({"a": 1, "b": 2}),
            limits: SandboxLimits::default(),
            fetch: Arc::new(NoNetwork),
        };
        let started = Instant::now();
        let completion = pool.run("bench", invocation).await.map_err(|_| anyhow::anyhow!("pool refused"))?;
        samples.push(started.elapsed());
        assert_eq!(completion.outcome.as_str(), "ok");
    }
    pool.close();
    summarise("isolate create+run+drop (via pool)", samples);

    // 2. The daemon on a port-0 listener with a loopback upstream.
    let upstream = start_upstream().await?;
    let daemon = support::start_daemon(vec![
        ("MCPBOOTD_EGRESS__RESOLVE__api.bench.test", "127.0.0.1".to_string()),
        ("MCPBOOTD_SANDBOX__QUEUE", "4096".to_string()),
    ])
    .await?;
    let address = daemon.address;
    let http = reqwest::Client::new();
    let upstream_url = format!("http://api.bench.test:{}/item", upstream.port());
    let registration = json!({
        "id": "bench",
        "allow_domains": ["api.bench.test"],
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

    // 4. Throughput with concurrent clients, each with its own connection.
    println!();
    for clients in [1usize, 16, 64] {
        let mut connected = Vec::with_capacity(clients);
        for _ in 0..clients {
            connected.push(connect(&mcp_url).await?);
        }
        let deadline = Instant::now() + throughput_window;
        let started = Instant::now();
        let tasks = connected.into_iter().map(|client| {
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    let mut params = CallToolRequestParams::new("pure");
                    params = params.with_arguments(json!({"a": 1, "b": 2}).as_object().unwrap().clone());
                    if client.call_tool(params).await.is_ok() {
                        done += 1;
                    }
                }
                let _ = client.cancel().await;
                done
            })
        });
        let mut total = 0;
        for task in tasks.collect::<Vec<_>>() {
            total += task.await?;
        }
        let elapsed = started.elapsed().as_secs_f64();
        println!("{:<44} {:>9.0} calls/s", format!("pure calls, {clients} concurrent client(s)"), total as f64 / elapsed);
    }

    let _ = client.cancel().await;
    daemon.stop().await
}

async fn connect(url: &str) -> anyhow::Result<rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>> {
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url.to_string()),
    );
    Ok(ClientConfig::default().serve(transport).await?)
}

async fn start_upstream() -> anyhow::Result<std::net::SocketAddr> {
    let router = axum::Router::new().route(
        "/item",
        get(|| async { Json(json!({"id": 1, "title": "An item", "score": 42, "kids": [2, 3, 4]})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}
