//! OpenTelemetry traces as a collector sees them: an OTLP/HTTP receiver on loopback decodes what
//! the daemon exports with the official protobuf definitions (`opentelemetry-proto`), and the
//! fake upstream shows the `traceparent` each outbound request carried.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig, RequestMetaObject};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::helpers::*;

/// A span as the collector received it.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    attributes: HashMap<String, String>,
    service_instance: String,
}

/// An OTLP/HTTP traces endpoint on loopback that keeps every span it is sent.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

impl Collector {
    async fn start() -> Collector {
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let router = axum::Router::new().route("/v1/traces", post(receive)).with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Collector { url, spans }
    }

    fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export request");
    let mut received = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name.clone(),
                    attributes: attributes(&span.attributes),
                    service_instance: resource.get("service.instance.id").cloned().unwrap_or_default(),
                });
            }
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

fn attributes(list: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> HashMap<String, String> {
    list.iter()
        .map(|pair| {
            let value = match pair.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(text)) => text.clone(),
                Some(AnyValue::IntValue(number)) => number.to_string(),
                Some(AnyValue::BoolValue(flag)) => flag.to_string(),
                Some(AnyValue::DoubleValue(number)) => number.to_string(),
                other => format!("{other:?}"),
            };
            (pair.key.clone(), value)
        })
        .collect()
}

/// The process-wide subscriber with the traces layer (the logs off), as `mcpbootd serve` sets it
/// up with `[telemetry] otlp_endpoint`. Which daemon's collector a span goes to is per daemon.
fn install_traces_layer() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let log = mcpbootd::config::LogConfig { level: "off".into(), ..Default::default() };
        let telemetry = mcpbootd::config::TelemetryConfig {
            otlp_endpoint: "http://127.0.0.1:4318/v1/traces".into(),
            propagate_traceparent: false,
        };
        mcpbootd::telemetry::init(&log, &telemetry);
    });
}

async fn traced_app(collector: &Collector, replica: &str) -> TestApp {
    install_traces_layer();
    spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_TELEMETRY__OTLP_ENDPOINT".into(), collector.url.clone()),
            ("MCPBOOTD_TELEMETRY__PROPAGATE_TRACEPARENT".into(), "true".into()),
            ("MCPBOOTD_CATALOG__REPLICA_ID".into(), replica.into()),
        ],
        ..AppOptions::default()
    })
    .await
}

/// A handler that fetches with a query carrying an argument and a key, and sets a
/// `traceparent` of its own (which the egress replaces).
fn lookup_toolset(app: &TestApp, id: &str) -> Value {
    let base = app.upstream_url(WEATHER_HOST);
    json!({
        "id": id,
        "allow_domains": [WEATHER_HOST],
        "tools": [{
            "name": "lookup",
            "description": "looks a city up",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "handler": format!(
                "const r = await fetch('{base}/echo?city=' + encodeURIComponent(args.city) + '&api_key=key-in-query', \
                 {{ headers: {{ traceparent: '00-11111111111111111111111111111111-2222222222222222-01' }} }}); \
                 const echoed = await r.json(); return {{ traceparent: echoed.headers.traceparent || null }};"
            ),
        }],
    })
}

/// An MCP client whose HTTP requests all carry `traceparent`.
async fn client_with_header(url: &str, traceparent: &str) -> McpClient {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("traceparent", traceparent.parse().unwrap());
    let http = reqwest::Client::builder().default_headers(headers).build().unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url.to_string()),
    );
    ClientConfig::default().serve(transport).await.unwrap()
}

fn call_params(city: &str, meta: Option<RequestMetaObject>) -> CallToolRequestParams {
    let mut params =
        CallToolRequestParams::new("lookup").with_arguments(json!({"city": city}).as_object().unwrap().clone());
    params.meta = meta;
    params
}

/// `_meta` carrying `traceparent`.
fn meta_with(traceparent: &str) -> Option<RequestMetaObject> {
    let mut meta = RequestMetaObject::new();
    meta.insert("traceparent".into(), Value::String(traceparent.to_string()));
    Some(meta)
}

/// A fresh W3C trace context: random ids, sampled.
fn fresh_traceparent() -> (String, String, String) {
    let trace_id = hex::encode(rand::random::<[u8; 16]>());
    let span_id = hex::encode(rand::random::<[u8; 8]>());
    (format!("00-{trace_id}-{span_id}-01"), trace_id, span_id)
}

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace_id: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.trace_id == trace_id).collect()
}

fn named<'a>(spans: &[&'a ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<&&ReceivedSpan> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(found.len(), 1, "one {name:?} span expected in {spans:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_one_trace_that_continues_the_callers_traceparent() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, "traced-replica").await;
    app.register(lookup_toolset(&app, "traced")).await;

    // A call without a trace context starts a trace of its own.
    let client = app.mcp("traced").await;
    let plain = client.call_tool(call_params("Paris-argument", None)).await.unwrap();
    assert_ne!(plain.is_error, Some(true), "{plain:?}");

    // One in `params._meta`, the MCP convention.
    let (in_meta, meta_trace, meta_parent) = fresh_traceparent();
    let from_meta = client.call_tool(call_params("Oslo", meta_with(&in_meta))).await.unwrap();
    let upstream_saw_for_meta = from_meta.structured_content.clone().unwrap()["traceparent"].clone();
    client.cancel().await.unwrap();

    // One in the HTTP header.
    let (in_header, header_trace, header_parent) = fresh_traceparent();
    let header_client = client_with_header(&app.mcp_url("traced"), &in_header).await;
    let from_header = header_client.call_tool(call_params("Lima", None)).await.unwrap();
    let upstream_saw_for_header = from_header.structured_content.clone().unwrap()["traceparent"].clone();
    header_client.cancel().await.unwrap();

    let upstream_requests = app.upstream.requests();
    app.stop().await;
    let spans = collector.spans();

    // Exactly three call spans, each the root of its own trace, with the call's identity.
    let calls: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.name == "call").collect();
    assert_eq!(calls.len(), 3, "{spans:#?}");
    let traces: std::collections::BTreeSet<&str> = calls.iter().map(|span| span.trace_id.as_str()).collect();
    assert_eq!(traces.len(), 3, "one trace per call");
    for call in &calls {
        assert_eq!(call.attributes["server_id"], "traced");
        assert_eq!(call.attributes["tool"], "lookup");
        assert_eq!(call.attributes["outcome"], "ok");
        assert!(!call.attributes["execution_id"].is_empty());
        assert_eq!(call.service_instance, "traced-replica");
    }

    // The plain call's trace: admission and the call-log enqueue under the call, the isolate run
    // under the call, the outbound request under the isolate run.
    let plain_call = calls.iter().find(|call| call.trace_id != meta_trace && call.trace_id != header_trace).unwrap();
    assert_eq!(plain_call.parent_span_id, "", "a call without a traceparent is a root");
    let plain_trace = in_trace(&spans, &plain_call.trace_id);
    let admission = named(&plain_trace, "admission");
    let isolate = named(&plain_trace, "isolate run");
    let outbound = named(&plain_trace, "outbound request");
    let enqueue = named(&plain_trace, "call-log enqueue");
    assert_eq!(admission.parent_span_id, plain_call.span_id);
    assert_eq!(isolate.parent_span_id, plain_call.span_id);
    assert_eq!(enqueue.parent_span_id, plain_call.span_id);
    assert_eq!(outbound.parent_span_id, isolate.span_id);
    assert!(isolate.attributes["turns"].parse::<u32>().unwrap() >= 1, "{isolate:?}");
    assert_eq!(isolate.attributes["outcome"], "ok");

    // The outbound span names the request without its query values.
    let port = app_port(&upstream_requests);
    assert_eq!(outbound.attributes["server.address"], WEATHER_HOST);
    assert_eq!(outbound.attributes["url.full"], format!("http://{WEATHER_HOST}:{port}/echo?city&api_key"));
    assert_eq!(outbound.attributes["http.request.method"], "GET");
    assert_eq!(outbound.attributes["http.response.status_code"], "200");
    for span in &spans {
        for (key, value) in &span.attributes {
            for secret in ["Paris-argument", "key-in-query", "Oslo", "Lima"] {
                assert!(!value.contains(secret), "{secret} in {key} of {span:?}");
            }
        }
    }

    // `_meta` and header trace contexts are continued: the call's parent is the caller's span.
    for (trace_id, parent, upstream_saw) in
        [(&meta_trace, &meta_parent, &upstream_saw_for_meta), (&header_trace, &header_parent, &upstream_saw_for_header)]
    {
        let call = calls.iter().find(|call| &call.trace_id == trace_id).expect("the caller's trace is continued");
        assert_eq!(&call.parent_span_id, parent);
        // The upstream got the outbound span's traceparent, not the handler's own.
        let trace = in_trace(&spans, trace_id);
        let outbound = named(&trace, "outbound request");
        assert_eq!(upstream_saw, &json!(format!("00-{trace_id}-{}-01", outbound.span_id)));
    }
    assert!(
        upstream_requests
            .iter()
            .all(|request| request.headers["traceparent"] != "00-11111111111111111111111111111111-2222222222222222-01"),
        "the handler's traceparent is replaced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_is_a_trace_with_a_span_per_stage() {
    use crate::generation::{docs_html, prompt, register_prompt, script_happy_path, spawn_with_llm};
    let collector = Collector::start().await;
    install_traces_layer();
    let llm = crate::scripted_llm::ScriptedLlm::start().await;
    let env = vec![("MCPBOOTD_TELEMETRY__OTLP_ENDPOINT".to_string(), collector.url.clone())];
    let app = spawn_with_llm(&llm, false, env, None).await;
    let port = app.upstream.address.port();
    app.upstream.set_docs(&docs_html(port));
    script_happy_path(&llm, port);
    let id = register_prompt(&app, json!({"id": "generated", "prompt": prompt(&app)})).await;
    let view = wait_for_status(&app, &id, &["ready", "failed"]).await;
    assert_eq!(view["status"], "ready", "{view:#}");
    app.stop().await;

    let spans = collector.spans();
    let generation = spans
        .iter()
        .find(|span| span.name == "generation" && span.attributes.get("server_id").is_some_and(|id| id == "generated"))
        .unwrap_or_else(|| panic!("no generation span in {spans:#?}"));
    assert_eq!(generation.parent_span_id, "", "a generation is a trace of its own");
    let stages: Vec<&str> = in_trace(&spans, &generation.trace_id)
        .into_iter()
        .filter(|span| span.name == "generation stage")
        .inspect(|stage| assert_eq!(stage.parent_span_id, generation.span_id))
        .map(|stage| stage.attributes["stage"].as_str())
        .collect();
    assert_eq!(stages, ["fetching", "planning", "compiling", "testing"]);
}

/// The fake upstream's port, from the `Host` its requests named.
fn app_port(requests: &[SeenRequest]) -> String {
    requests[0].host.rsplit(':').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_without_an_endpoint_exports_nothing_and_adds_no_traceparent() {
    let collector = Collector::start().await;
    // A traced daemon in the same process: its layer is installed, and its collector must see
    // none of the other daemon's calls.
    let traced = traced_app(&collector, "traced-neighbour").await;
    let plain = spawn_app().await;
    plain.register(lookup_toolset(&plain, "untraced")).await;
    let client = plain.mcp("untraced").await;
    let (traceparent, trace_id, _) = fresh_traceparent();
    let result = client.call_tool(call_params("Quito", meta_with(&traceparent))).await.unwrap();
    client.cancel().await.unwrap();
    // The handler's own header goes out unchanged: nothing here traces.
    assert_eq!(
        result.structured_content.unwrap()["traceparent"],
        "00-11111111111111111111111111111111-2222222222222222-01"
    );
    plain.stop().await;
    traced.stop().await;
    let spans = collector.spans();
    assert!(spans.iter().all(|span| span.trace_id != trace_id), "{spans:#?}");
    assert!(spans.iter().all(|span| span.attributes.get("server_id").is_none_or(|id| id != "untraced")), "{spans:#?}");
}
