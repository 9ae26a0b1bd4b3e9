//! OpenAPI quality: how many of the requests the derived tools send does a spec-driven mock
//! (Prism) accept as valid for their operation?
//!
//! `cargo bench --bench openapi_quality [-- [--sample N] [--only FILE,...] [DIR]]`: every JSON or
//! YAML description in DIR (default `../shared/openapi-samples`, or `MCPBOOTD_OPENAPI_SAMPLES`)
//! is registered inline with a fresh daemon, mocked by Prism (`tests/prism`, installed by
//! `.ci/run`) behind a proxy that records Prism's verdict, and up to N of its tools (default 20,
//! spread evenly) are called once with schema-valid arguments. Prints per-description and total
//! figures: descriptions registered (or the precise reason they were refused), operations left
//! out (and why), the size of `tools/list`, calls accepted, and how many successful results do not
//! match their tool's output schema as the MCP Python SDK's client checks it
//! (`tests/sdk/python/validate_results.py`, with the SDK `.ci/run` installs).

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

mod support;

#[path = "../tests/support/openapi_quality.rs"]
mod openapi_quality;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut sample = 20;
    let mut only: Vec<String> = Vec::new();
    let mut dir = std::env::var_os("MCPBOOTD_OPENAPI_SAMPLES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/openapi-samples"));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sample" => sample = args.next().and_then(|n| n.parse().ok()).unwrap_or(sample),
            "--only" => only = args.next().unwrap_or_default().split(',').map(str::to_owned).collect(),
            "--bench" | "--quick" => {}
            other if !other.starts_with('-') => dir = PathBuf::from(other),
            _ => {}
        }
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let described = [".json", ".yaml", ".yml"].iter().any(|ext| name.ends_with(ext)) && name != "manifest.json";
            described && (only.is_empty() || only.contains(&name))
        })
        .collect();
    files.sort();
    large_description(&dir);
    let env = openapi_quality::daemon_env().into_iter().collect::<Vec<_>>();
    let daemon = support::start_daemon(env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect()).await?;
    let run = openapi_quality::QualityRun::new(format!("http://{}", daemon.address), sample).await;
    println!("OpenAPI quality: {} descriptions from {}, up to {sample} calls each\n", files.len(), dir.display());
    let mut reports = Vec::new();
    for file in &files {
        let report = run.run(file).await;
        eprintln!("{}: {}/{} accepted ({:.1} s)", report.file, report.accepted, report.calls(), report.seconds);
        reports.push(report);
    }
    println!();
    openapi_quality::print_reports(&reports);
    daemon.stop().await
}

/// Parsing and deriving from a description of over 20 MB: the largest sample's paths repeated
/// under distinct prefixes until the JSON text passes 20 MB.
fn large_description(dir: &std::path::Path) {
    use mcpbootd::generate::openapi::{OperationFilter, Selection, Spec, derive};
    let Ok(text) = std::fs::read_to_string(dir.join("digitalocean.json")) else { return };
    let mut root: serde_json::Value = serde_json::from_str(&text).expect("digitalocean.json is JSON");
    let paths = root["paths"].as_object().cloned().unwrap_or_default();
    let mut copy = 0;
    while serde_json::to_string(&root).unwrap().len() < 20 * 1024 * 1024 {
        copy += 1;
        for (path, item) in &paths {
            root["paths"][format!("/copy{copy}{path}")] = item.clone();
        }
    }
    let text = serde_json::to_string(&root).unwrap();
    let started = std::time::Instant::now();
    let spec = Spec::parse(&text).expect("the large description parses");
    let parsed = started.elapsed();
    let filter = OperationFilter::default();
    let listing = Selection { filter: &filter, max_tools: 64, discovery: Some(false), chosen: None };
    let derived = derive(&spec, None, None, &listing).expect("tools are derived");
    println!(
        "large description: {:.1} MB, {} operations; parsed in {:.0} ms, 64 tools derived in {:.0} ms more\n",
        text.len() as f64 / 1048576.0,
        derived.operations_total,
        parsed.as_secs_f64() * 1000.0,
        (started.elapsed() - parsed).as_secs_f64() * 1000.0
    );
}
