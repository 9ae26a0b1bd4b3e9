//! Logging and trace set-up, and the per-request span.

pub mod metrics;
pub mod overview;
mod span_fields;
pub mod traces;

use std::io::IsTerminal;

use axum::extract::MatchedPath;
use axum::http::Request;
use tower_http::trace::DefaultOnResponse;
use tracing::Level;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// Upper bounds (seconds) of the call-duration buckets: the per-tool Prometheus histogram
/// (`metrics`) and the console's daemon-wide latency percentiles (`overview`) count calls into
/// the same buckets, so the two agree.
const CALL_BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Installs the global subscriber: human-readable on a terminal, JSON lines otherwise (or as
/// configured). `RUST_LOG` overrides `[log] level`. With `[telemetry] otlp_endpoint` set, spans
/// of the serving path also become OpenTelemetry spans (see [`traces`]), whatever the log level.
/// Safe to call more than once: the first call wins.
pub fn init(log: &LogConfig, telemetry: &TelemetryConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    let json = match log.format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    // The log filter is the log layer's own, so the traces layer sees spans the log leaves out.
    let logs = if json {
        logs.json()
            .flatten_event(true)
            .with_current_span(true)
            .fmt_fields(span_fields::SpanJsonFields)
            .with_filter(filter)
            .boxed()
    } else {
        logs.with_filter(filter).boxed()
    };
    let traces = telemetry.traces_enabled().then(traces::layer);
    let not_a_client_mistake = filter_fn(|metadata| !is_rmcp_response_error(metadata));
    let _ = tracing_subscriber::registry().with(logs).with(traces).with(not_a_client_mistake).try_init();
}

/// rmcp logs every error a server handler answers as a WARN "response error" (with `id` and
/// `error` fields, which no other rmcp warning has). Here those are clients' mistakes (an
/// unknown tool, a method the server does not offer); `serve::mount` and `api::mcp` log them at
/// debug level and count them, and WARN stays for what the operator must look at.
fn is_rmcp_response_error(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.target() == "rmcp::service"
        && *metadata.level() == Level::WARN
        && metadata.fields().field("id").is_some()
        && metadata.fields().field("error").is_some()
}

/// One span per HTTP request, named by the matched route (never the raw path, which may carry
/// ids without bound) plus the server id for MCP mounts and admin routes.
pub fn http_span(request: &Request<axum::body::Body>) -> tracing::Span {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str);
    let path = request.uri().path();
    let server_id = path
        .strip_prefix("/servers/")
        .or_else(|| path.strip_prefix("/admin/servers/"))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("");
    // At most 63 characters, cut on a character boundary.
    let server_id = server_id.char_indices().nth(63).map_or(server_id, |(end, _)| &server_id[..end]);
    if route == "/healthz" || route == "/readyz" {
        tracing::debug_span!("http", method = %request.method(), route, server_id)
    } else {
        tracing::info_span!("http", method = %request.method(), route, server_id)
    }
}

/// The response log line: debug level, since the span already says which request it was.
pub fn http_on_response() -> DefaultOnResponse {
    DefaultOnResponse::new().level(Level::DEBUG)
}

/// Server errors are logged at error level, except 503: a `/readyz` probe during start-up or a
/// call refused as busy is the daemon working as designed (the refusals are counted in metrics).
pub fn http_on_failure(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: std::time::Duration,
    _span: &tracing::Span,
) {
    use tower_http::classify::ServerErrorsFailureClass;
    let latency_ms = latency.as_millis() as u64;
    match class {
        ServerErrorsFailureClass::StatusCode(status) if status.as_u16() == 503 => {
            tracing::debug!(%status, latency_ms, "service unavailable");
        }
        class => tracing::error!(classification = %class, latency_ms, "response failed"),
    }
}
