//! The OpenAPI quality run on a handful of small real descriptions: each registers, and the
//! requests its tools send are accepted by Prism, a mock that validates every request against
//! the description. The full run over every sample is `cargo bench --bench openapi_quality`.

use std::path::Path;

use crate::helpers::{AppOptions, spawn_app_with};

#[path = "../support/openapi_quality.rs"]
mod runner;

/// Small samples covering OpenAPI 3.0 and 3.1, Swagger 2.0, JSON and YAML, path and query
/// parameters, JSON and form bodies, apiKey and OAuth2 schemes.
const SAMPLES: &[&str] = &[
    "swagger-petstore-v3.yaml",
    "hacker-news.yaml",
    "xkcd.yaml",
    "uber.json",
    "open-meteo-forecast.yaml",
    "resend.yaml",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_real_descriptions_register_and_their_requests_are_valid() {
    if std::env::var("MCPBOOTD_SKIP_SDK_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: the OpenAPI quality run needs Prism (MCPBOOTD_SKIP_SDK_TESTS=1)");
        return;
    }
    assert!(
        runner::prism_binary().exists(),
        "Prism is not installed ({} is missing); run .ci/run once, or: (cd tests/prism && npm ci --ignore-scripts)",
        runner::prism_binary().display()
    );
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi-samples");
    let env = runner::daemon_env();
    let app = spawn_app_with(AppOptions { env, ..Default::default() }).await;
    let run = runner::QualityRun::new(app.url("").trim_end_matches('/').to_string(), 20).await;
    let mut reports = Vec::new();
    for file in SAMPLES {
        reports.push(run.run(&samples.join(file)).await);
    }
    let (accepted, calls) = runner::print_reports(&reports);
    for report in &reports {
        assert_eq!(report.registered, Some(Ok(())), "{} was not registered", report.file);
        assert_eq!(report.mock, Some(Ok(())), "Prism could not mock {}", report.file);
        assert!(report.bad_arguments.is_empty(), "{}: {:?}", report.file, report.bad_arguments);
    }
    assert!(calls >= 30, "only {calls} calls were made");
    assert!(accepted * 100 >= calls * 98, "{accepted} of {calls} requests were valid; at least 98% must be");
    app.stop().await;
}
