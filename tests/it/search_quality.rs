//! Search quality of discovery mode: 50 plain-language queries over GitHub, Stripe and the
//! Telegram Bot API (`tests/fixtures/search-queries.json`, written before the search was tuned),
//! each with the operation it means. Prints the top-5 hit rate and the misses, and requires at
//! least 90%. GitHub and Stripe come from the OpenAPI samples (`MCPBOOTD_OPENAPI_SAMPLES`,
//! default `../shared/openapi-samples`, as for `cargo bench --bench openapi_quality`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use mcpbootd::generate::openapi::{self, OperationFilter, Selection, Spec};
use serde_json::Value;

fn samples() -> PathBuf {
    std::env::var_os("MCPBOOTD_OPENAPI_SAMPLES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/openapi-samples"))
}

async fn operations(file: PathBuf) -> openapi::DerivedOperations {
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!("cannot read {} ({e}); set MCPBOOTD_OPENAPI_SAMPLES to the OpenAPI samples' directory", file.display())
    });
    let root = openapi::document::read(text).await.unwrap();
    let spec = Spec::from_value(root).unwrap();
    let filter = OperationFilter::default();
    let selection = Selection { filter: &filter, max_tools: 64, discovery: Some(true), chosen: None };
    let derived = openapi::derive(&spec, None, Some("https://api.example.test"), &selection).unwrap();
    derived.discovery.unwrap()
}

#[tokio::test]
async fn search_finds_the_intended_operation_in_its_top_five() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let queries: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("tests/fixtures/search-queries.json")).unwrap())
            .unwrap();
    let mut apis = BTreeMap::new();
    apis.insert("github", operations(samples().join("github-v3-unofficial.yaml")).await);
    apis.insert("stripe", operations(samples().join("stripe.yaml")).await);
    apis.insert("telegram", operations(root.join("tests/fixtures/telegram-bot-api.json")).await);
    for (name, api) in &apis {
        let schemas: usize = api.operations.iter().map(|op| serde_json::to_vec(&op.spec).unwrap().len()).sum();
        println!("{name}: {} operations, {} KB of tool definitions stored", api.operations.len(), schemas / 1024);
    }
    let searchers: BTreeMap<&str, _> =
        apis.iter().map(|(name, api)| (*name, api.search_index.clone().searcher())).collect();
    let queries = queries["queries"].as_array().unwrap();
    let mut found = 0;
    let mut misses = Vec::new();
    for entry in queries {
        let (api, query, intended) =
            (entry["spec"].as_str().unwrap(), entry["query"].as_str().unwrap(), entry["operation"].as_str().unwrap());
        let names: Vec<&str> = apis[api].operations.iter().map(|op| op.spec.name.as_str()).collect();
        assert!(names.contains(&intended), "{api} has no operation {intended:?} (the query file names it)");
        let top: Vec<&str> = searchers[api].search(query, 5).into_iter().map(|(i, _)| names[i]).collect();
        if top.contains(&intended) {
            found += 1;
        } else {
            misses.push(format!("{api}: {query:?} wants {intended}, got {top:?}"));
        }
    }
    let rate = found as f64 * 100.0 / queries.len() as f64;
    println!("search top-5 hit rate: {found}/{} ({rate:.0}%)", queries.len());
    for miss in &misses {
        println!("  miss: {miss}");
    }
    assert_eq!(queries.len(), 50);
    assert!(rate >= 90.0, "top-5 hit rate {rate:.0}% is below 90%: {misses:#?}");
}

/// The resident memory of this process, in KiB (Linux).
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap_or("VmRSS: 0 kB");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// What a discovery-mode server's first search reads on GitHub's description,
/// stored whole as before (every operation's tool in one row) and as now (the index with each
/// operation's light entry; tools are read one at a time when described or called): bytes
/// parsed, time and resident memory of the load and first search, and the size of code mode's
/// description against declaring every operation. Run on its own, one stored form per process:
/// `MCPBOOTD_FIRST_SEARCH=whole|index cargo test --test it first_search -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement: prints figures"]
async fn first_search_cost_on_github() {
    use mcpbootd::catalog::{OperationEntry, OperationRecord};
    use mcpbootd::serve::code_mode::declarations::{Reachable, ReachableServer, StatedLimits, description};
    use mcpbootd::serve::discovery::search::SearchIndex;
    use mcpbootd::toolset::ServerId;

    let api = operations(samples().join("github-v3-unofficial.yaml")).await;
    let records: Vec<OperationRecord> = api
        .operations
        .iter()
        .map(|op| {
            let (method, path) = op.operation.split_once(' ').unwrap();
            OperationRecord { tool: op.spec.clone(), method: method.into(), path: path.into() }
        })
        .collect();
    let whole = serde_json::to_string(&records).unwrap();
    let index = serde_json::to_string(&api.search_index).unwrap();
    let entries: Vec<(String, String, String, String, String)> = records
        .iter()
        .map(|r| {
            let summary: String =
                r.tool.title.clone().unwrap_or(r.tool.description.clone()).chars().take(160).collect();
            let required = serde_json::to_string(r.tool.input_schema.get("required").unwrap_or(&Value::Null)).unwrap();
            (r.tool.name.clone(), r.method.clone(), r.path.clone(), summary, required)
        })
        .collect();
    let light: usize = entries.iter().map(|e| e.0.len() + e.1.len() + e.2.len() + e.3.len() + e.4.len()).sum();
    println!(
        "github: {} operations; index {} KB, tools {} KB, light entries {} KB",
        records.len(),
        index.len() / 1024,
        whole.len() / 1024,
        light / 1024
    );

    let form = std::env::var("MCPBOOTD_FIRST_SEARCH").unwrap_or_else(|_| "index".into());
    let before = resident_kib();
    let started = std::time::Instant::now();
    let searcher = serde_json::from_str::<SearchIndex>(&index).unwrap().searcher();
    let kept: usize = if form == "whole" {
        let loaded: Vec<OperationRecord> = serde_json::from_str(&whole).unwrap();
        std::hint::black_box(&loaded);
        let kept = loaded.len();
        std::mem::forget(loaded);
        kept
    } else {
        let loaded: Vec<OperationEntry> = entries
            .iter()
            .map(|(name, method, path, summary, required)| OperationEntry {
                name: name.clone(),
                method: method.clone(),
                path: path.clone(),
                summary: summary.clone(),
                required: serde_json::from_str::<Option<Vec<String>>>(required).unwrap().unwrap_or_default(),
            })
            .collect();
        let kept = loaded.len();
        std::mem::forget(loaded);
        kept
    };
    let hits = searcher.search("list the issues of a repository", 10);
    let elapsed = started.elapsed();
    std::mem::forget(searcher);
    println!(
        "first search, {form}: {:.1} ms, resident +{} KiB ({kept} operations kept, {} hits)",
        elapsed.as_secs_f64() * 1000.0,
        resident_kib().saturating_sub(before),
        hits.len()
    );

    let derived_listed: Vec<&OperationRecord> = records.iter().take(61).collect();
    let reachable = |all: bool| {
        let tools: Vec<&OperationRecord> = if all { records.iter().collect() } else { derived_listed.clone() };
        tools
            .into_iter()
            .map(|r| Reachable {
                name: &r.tool.name,
                description: &r.tool.description,
                input_schema: &r.tool.input_schema,
                output_schema: r.tool.output_schema.as_ref(),
            })
            .collect::<Vec<_>>()
    };
    let limits = StatedLimits { timeout_ms: 60_000, max_tool_calls: 100, max_concurrent_tool_calls: 4 };
    let id = ServerId::parse("github").unwrap();
    let listed =
        description(&id, &[ReachableServer { id: id.clone(), tools: reachable(false), operations: true }], &limits);
    let every =
        description(&id, &[ReachableServer { id: id.clone(), tools: reachable(true), operations: false }], &limits);
    println!(
        "code_execution description: {} KB with 61 operations declared and the rest by id, {} KB declaring all {}",
        listed.len() / 1024,
        every.len() / 1024,
        records.len()
    );
}
