//! OpenTelemetry traces of tool calls, sent to a collector over OTLP/HTTP (protobuf).
//!
//! The spans are the `tracing` spans the serving path already opens, turned into OpenTelemetry
//! spans by a `tracing-opentelemetry` layer that [`super::init`] adds to the subscriber when
//! `[telemetry] otlp_endpoint` is set. Without it no layer is installed, the extra spans of the
//! call path are at debug level (so the log filter drops them at their call sites), and
//! [`Traces::start_trace`] returns at once: tracing off costs nothing on the call path.
//!
//! The subscriber, and so the layer and its tracer provider, is process-wide, but spans are
//! exported per daemon (tests run several daemons in one process, each with its own collector,
//! or none). A call's root span is given a parent context carrying its daemon's [`Route`]; every
//! span below it inherits that context, and the provider's only span processor
//! ([`DaemonRouter`]) hands each finished span to the batch exporter of the daemon it belongs to.
//! A span without a route (one outside any call, or a call of a daemon with traces off) is
//! dropped. Each daemon's exporter batches on the tokio runtime and is flushed by
//! [`Traces::shutdown`], which `app` calls when the daemon stops.
//!
//! A call continues the trace named by the W3C `traceparent` its MCP request carried (see
//! [`TraceParent`]); a caller's sampling decision is kept, so an unsampled parent exports
//! nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

use crate::config::TelemetryConfig;

/// The header (and `_meta` key) a W3C trace context travels in.
pub const TRACEPARENT: &str = "traceparent";
/// Vendor data that goes with a `traceparent`.
pub const TRACESTATE: &str = "tracestate";

/// One daemon's traces: where its spans go, or nothing when traces are off. Cheap to clone.
#[derive(Clone, Default)]
pub struct Traces {
    export: Option<Route>,
    propagate_traceparent: bool,
}

/// A remote parent for a call's trace, parsed from a W3C `traceparent` value.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceParent(SpanContext);

/// The daemon a span belongs to, carried in the OpenTelemetry context of a call's root span and
/// so inherited by every span below it.
#[derive(Clone)]
struct Route(Arc<DaemonExport>);

/// One daemon's batch exporter.
struct DaemonExport {
    processor: BatchSpanProcessor<opentelemetry_sdk::runtime::Tokio>,
}

/// The OTLP exporter, with its failures in the daemon's log: the first of a run of failed
/// exports is a warning naming the endpoint, and the first success after them says so, so a
/// collector that is down is neither silent nor a line every few seconds.
#[derive(Debug)]
struct ReportingExporter {
    inner: opentelemetry_otlp::SpanExporter,
    endpoint: String,
    failing: AtomicBool,
}

/// The span processor of the process-wide provider: sends each finished span to its daemon.
#[derive(Debug)]
struct DaemonRouter;

/// The daemon of every span started with a route and not yet finished, by span id (span ids are
/// random per span, so two daemons continuing the same remote trace do not collide).
static OPEN_SPANS: LazyLock<Mutex<HashMap<SpanId, Route>>> = LazyLock::new(Mutex::default);

static PROVIDER: LazyLock<SdkTracerProvider> =
    LazyLock::new(|| SdkTracerProvider::builder().with_span_processor(DaemonRouter).build());

/// How long the exporter waits for the collector per batch, and shutdown for the last batch.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

impl Traces {
    /// Traces for a daemon configured with `config`: off when `otlp_endpoint` is empty.
    /// `replica_id` names the daemon in the spans' resource (`service.instance.id`). Must be
    /// called on the tokio runtime, which runs the exporter.
    pub fn start(config: &TelemetryConfig, replica_id: &str) -> anyhow::Result<Traces> {
        if !config.traces_enabled() {
            return Ok(Traces::default());
        }
        // No proxy, as for the daemon's other clients; a collector that hangs costs one export
        // task, never a call (spans are queued, and dropped when the queue is full).
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(EXPORT_TIMEOUT)
            .timeout(EXPORT_TIMEOUT)
            .build()
            .context("cannot build the HTTP client for [telemetry] otlp_endpoint")?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(http)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.otlp_endpoint.trim())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .context("cannot build the OTLP exporter for [telemetry] otlp_endpoint")?;
        let exporter = ReportingExporter {
            inner: exporter,
            endpoint: config.otlp_endpoint.trim().to_string(),
            failing: AtomicBool::new(false),
        };
        let mut processor = BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        processor.set_resource(
            &Resource::builder_empty()
                .with_service_name("mcpbootd")
                .with_attributes([
                    KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                    KeyValue::new("service.instance.id", replica_id.to_string()),
                ])
                .build(),
        );
        Ok(Traces {
            export: Some(Route(Arc::new(DaemonExport { processor }))),
            propagate_traceparent: config.propagate_traceparent,
        })
    }

    pub fn enabled(&self) -> bool {
        self.export.is_some()
    }

    /// Whether handlers' outbound requests carry a `traceparent` for their span.
    pub fn propagate_traceparent(&self) -> bool {
        self.propagate_traceparent && self.enabled()
    }

    /// Makes `span` (a call's span, not yet entered) the root of its own trace, exported by this
    /// daemon: a child of `parent` when the caller sent one, else a new trace. Does nothing when
    /// traces are off.
    pub fn start_trace(&self, span: &tracing::Span, parent: Option<&TraceParent>) {
        let Some(route) = &self.export else { return };
        let context = match parent {
            Some(TraceParent(remote)) => Context::new().with_remote_span_context(remote.clone()),
            None => Context::new(),
        };
        // Fails only when the span is disabled or no layer is installed: then nothing is traced.
        let _ = span.set_parent(context.with_value(route.clone()));
    }

    /// Sends the spans still queued and stops the exporter; spans finished later are dropped.
    pub async fn shutdown(&self) {
        let Some(Route(export)) = self.export.clone() else { return };
        // The processor waits for its export task by blocking, so it waits on a blocking thread
        // while the runtime runs the export.
        let flushed = tokio::time::timeout(
            EXPORT_TIMEOUT * 2,
            tokio::task::spawn_blocking(move || export.processor.shutdown_with_timeout(EXPORT_TIMEOUT)),
        )
        .await;
        match flushed {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => {
                tracing::warn!(%error, "the last spans could not be sent to [telemetry] otlp_endpoint")
            }
            Ok(Err(_)) | Err(_) => {
                tracing::warn!("the last spans could not be sent to [telemetry] otlp_endpoint in time")
            }
        }
    }
}

impl TraceParent {
    /// The trace context in a `traceparent` value, or `None` when it is not a valid one. (W3C
    /// Trace Context says an invalid value is ignored and a new trace started, never that the
    /// request fails.)
    pub fn parse(value: &str) -> Option<TraceParent> {
        struct Header<'a>(&'a str);
        impl Extractor for Header<'_> {
            fn get(&self, key: &str) -> Option<&str> {
                key.eq_ignore_ascii_case(TRACEPARENT).then_some(self.0)
            }
            fn keys(&self) -> Vec<&str> {
                vec![TRACEPARENT]
            }
        }
        let context = TraceContextPropagator::new().extract(&Header(value.trim()));
        let remote = context.span().span_context().clone();
        remote.is_valid().then_some(TraceParent(remote))
    }
}

/// The `traceparent` value naming `span`, when it is part of a trace (a span of a call whose
/// daemon has traces on); for the egress to send upstream.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_ref = context.span();
    let span_context = span_ref.span_context();
    if !span_context.is_valid() || context.get::<Route>().is_none() {
        return None;
    }
    Some(format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8()
    ))
}

/// What a query parameter's name is encoded with when shown: whatever would end it or start a value.
const QUERY_NAME: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'&')
    .add(b'+')
    .add(b'=')
    .add(b'<')
    .add(b'>');

/// `url` as an outbound span's `url.full`: no user name or password, no fragment, and each
/// query parameter's name without its value (values may be credentials or arguments).
pub fn url_without_query_values(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_fragment(None);
    let names: Vec<String> = url.query_pairs().map(|(name, _)| name.into_owned()).collect();
    if names.is_empty() {
        shown.set_query(None);
    } else {
        // Names are re-encoded, so a name cannot smuggle a value in with its own `=`.
        let query = names
            .iter()
            .map(|name| percent_encoding::utf8_percent_encode(name, QUERY_NAME).to_string())
            .collect::<Vec<_>>()
            .join("&");
        shown.set_query(Some(&query));
    }
    shown.to_string()
}

/// The layer that turns the serving path's spans into OpenTelemetry spans. Only spans of the
/// serving and generation modules pass its filter (events never do: their messages are for the
/// log, and may name what a trace must not carry), up to debug level whatever the log level is.
pub(super) fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let tracer = PROVIDER.tracer("mcpbootd");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(
            filter_fn(|metadata| {
                metadata.is_span()
                    && *metadata.level() <= tracing::Level::DEBUG
                    && (metadata.target().starts_with("mcpbootd::serve")
                        || metadata.target().starts_with("mcpbootd::generate"))
            })
            .with_max_level_hint(tracing::Level::DEBUG),
        )
}

impl SpanExporter for ReportingExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let exported = self.inner.export(batch).await;
        match &exported {
            Err(error) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                endpoint = %self.endpoint,
                %error,
                spans,
                "spans could not be sent to [telemetry] otlp_endpoint; they are dropped until it answers"
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(endpoint = %self.endpoint, "spans are sent to [telemetry] otlp_endpoint again")
            }
            _ => {}
        }
        exported
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl SpanProcessor for DaemonRouter {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, context: &Context) {
        use opentelemetry::trace::Span as _;
        let Some(route) = context.get::<Route>() else { return };
        let span_id = span.span_context().span_id();
        OPEN_SPANS.lock().unwrap_or_else(PoisonError::into_inner).insert(span_id, route.clone());
    }

    fn on_end(&self, span: SpanData) {
        let route = OPEN_SPANS.lock().unwrap_or_else(PoisonError::into_inner).remove(&span.span_context.span_id());
        if let Some(Route(export)) = route {
            export.processor.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::TraceParent;

    #[test]
    fn traceparent_values_are_parsed_or_ignored() {
        let parsed = TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        assert_eq!(parsed.0.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(parsed.0.span_id().to_string(), "b7ad6b7169203331");
        assert!(parsed.0.is_sampled() && parsed.0.is_remote());
        for invalid in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "not a traceparent",
        ] {
            assert_eq!(TraceParent::parse(invalid), None, "{invalid:?}");
        }
    }

    #[test]
    fn outbound_urls_keep_query_names_but_no_values_or_user_info() {
        for (url, shown) in [
            ("https://api.example.test/v1/items", "https://api.example.test/v1/items"),
            ("https://api.example.test/search?q=secret&api_key=k-123", "https://api.example.test/search?q&api_key"),
            ("https://user:pw@api.example.test/a?x=1#frag", "https://api.example.test/a?x"),
            ("https://api.example.test/a?", "https://api.example.test/a"),
            ("https://api.example.test/a?token", "https://api.example.test/a?token"),
            ("https://api.example.test/a?a%3Db=c", "https://api.example.test/a?a%3Db"),
        ] {
            let url = url::Url::parse(url).unwrap();
            assert_eq!(super::url_without_query_values(&url), shown);
        }
    }
}
