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
