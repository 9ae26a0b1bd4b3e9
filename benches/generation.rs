//! Generation benchmark: the daemon's own overhead from prompt to `ready`, with an LLM that
//! answers instantly, for a prompt linking three 100k-character documentation pages; and a
//! cached re-registration (zero LLM requests) to `ready`.
//!
//! `cargo bench --bench generation` (add `-- --quick` for fewer rounds).

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::{get, post};
use serde_json::{Value, json};

mod support;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 5 } else { 20 };
    let upstream = start_upstream().await?;
    let llm_requests = Arc::new(AtomicU64::new(0));
    let llm = start_instant_llm(upstream.port(), llm_requests.clone()).await?;

    let daemon = support::start_daemon(vec![
        ("MCPBOOTD_EGRESS__RESOLVE__docs.bench.test", "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__api.bench.test", "127.0.0.1".to_string()),
        ("MCPBOOTD_LLM__PROVIDER", "anthropic".to_string()),
        ("MCPBOOTD_LLM__MODEL", "bench-model".to_string()),
        ("MCPBOOTD_LLM__BASE_URL", format!("http://{llm}")),
        ("MCPBOOTD_LLM__API_KEY", "k".to_string()),
    ])
    .await?;
    let address = daemon.address;
    let http = reqwest::Client::new();

    let port = upstream.port();
    let pages: Vec<String> = (1..=3).map(|n| format!("http://docs.bench.test:{port}/page/{n}")).collect();
    println!("mcpbootd generation benchmark: three 100k-character HTML pages, instant LLM, {rounds} rounds\n");

    let mut fresh = Vec::new();
    let mut cached = Vec::new();
    for round in 0..rounds {
        // A fresh prompt each round, so nothing is cached.
        let prompt = format!("Round {round}: tools for the API documented at {} {} {}", pages[0], pages[1], pages[2]);
        let (elapsed, view) = register_until_ready(&http, address, &format!("fresh-{round}"), &prompt).await?;
        anyhow::ensure!(view["generation"]["cache_hit"] == false, "unexpected cache hit");
        fresh.push(elapsed);
        let before = llm_requests.load(Ordering::SeqCst);
        let (elapsed, view) = register_until_ready(&http, address, &format!("cached-{round}"), &prompt).await?;
        anyhow::ensure!(view["generation"]["cache_hit"] == true, "expected a cache hit");
        anyhow::ensure!(llm_requests.load(Ordering::SeqCst) == before, "a cache hit asked the LLM");
        cached.push(elapsed);
    }
    report("prompt -> ready, instant LLM (daemon overhead)", fresh, Duration::from_secs(1));
    report("cached re-registration -> ready (0 LLM requests)", cached, Duration::from_millis(100));
    daemon.stop().await
}

async fn register_until_ready(
    http: &reqwest::Client,
    address: std::net::SocketAddr,
    id: &str,
    prompt: &str,
) -> anyhow::Result<(Duration, Value)> {
    let started = Instant::now();
    let response =
        http.post(format!("http://{address}/admin/servers")).json(&json!({"id": id, "prompt": prompt})).send().await?;
    anyhow::ensure!(response.status() == 202, "registration failed: {}", response.text().await?);
    loop {
        let view: Value = http.get(format!("http://{address}/admin/servers/{id}")).send().await?.json().await?;
        match view["status"].as_str() {
            Some("ready") => return Ok((started.elapsed(), view)),
            Some("failed") => anyhow::bail!("generation failed: {}", view["latest_generation"]["error"]),
            _ => tokio::time::sleep(Duration::from_micros(500)).await,
        }
    }
}

fn report(name: &str, mut samples: Vec<Duration>, target: Duration) {
    samples.sort();
    let p50 = samples[samples.len() / 2];
    let max = samples[samples.len() - 1];
    println!(
        "{name:<52} p50 {:>8.1} ms   max {:>8.1} ms   target < {} ms",
        p50.as_secs_f64() * 1000.0,
        max.as_secs_f64() * 1000.0,
        target.as_millis()
    );
}

/// Three 100k-character HTML pages, each linking the API host.
async fn start_upstream() -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let port = address.port();
    let mut page = format!(
        "<html><head><script>var x = 1;</script></head><body><nav>menu</nav><h1>API</h1>\
         <p>Items: GET http://api.bench.test:{port}/items/{{id}}</p>"
    );
    let mut n = 0;
    while page.len() < 100_000 {
        page.push_str(&format!("<p>Paragraph {n} describing the API &amp; its <b>fields</b> in detail.</p>\n"));
        n += 1;
    }
    page.push_str("</body></html>");
    let page = Arc::new(page);
    let router = axum::Router::new()
        .route(
            "/page/{n}",
            get(move || {
                let page = page.clone();
                async move { ([("content-type", "text/html")], page.as_str().to_owned()) }
            }),
        )
        .route("/items/{id}", get(|| async { Json(json!({"id": 1, "title": "t"})) }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}

/// An Anthropic-format LLM that answers at once: a one-tool plan, then its handler.
async fn start_instant_llm(upstream_port: u16, requests: Arc<AtomicU64>) -> anyhow::Result<std::net::SocketAddr> {
    let plan = json!({"tools": [{
        "name": "get_item",
        "description": "Fetch an item",
        "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        "endpoints_used": [format!("GET http://api.bench.test:{upstream_port}/items/{{id}}")],
        "implementation_notes": "GET it",
        "needs_network": true,
        "example_args": {"id": 1}
    }]})
    .to_string();
    let handler = format!(
        "const r = await fetch(`http://api.bench.test:{upstream_port}/items/${{args.id}}`); return await r.json();"
    );
    let router = axum::Router::new().route(
        "/v1/messages",
        post(move |Json(body): Json<Value>| {
            let (plan, handler, requests) = (plan.clone(), handler.clone(), requests.clone());
            async move {
                requests.fetch_add(1, Ordering::SeqCst);
                let system = body["system"].as_str().unwrap_or("");
                let text = if system.contains("planner") { plan } else { handler };
                Json(json!({
                    "id": "msg", "type": "message", "role": "assistant", "model": "bench-model",
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 10}
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}
