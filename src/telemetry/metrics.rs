//! Prometheus metrics, rendered at `/metrics` in the Prometheus text format (0.0.4) by
//! `prometheus-client`.
//!
//! Labels are typed and bounded by construction: server ids and tool names (bounded by
//! registrations), and the fixed sets in [`crate::states`] (call and generation outcomes,
//! stages); never execution ids, URLs or hosts.
//!
//! Recording a call is on the hot path: the series' labels are shared strings held by the tool
//! ([`ToolSeries`]), so counting clones two `Arc`s, takes the family's read lock and adds to an
//! atomic; nothing is allocated once the series exists. Gauges are read from the running parts
//! at scrape time ([`Gauges`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::states::{CallOutcome, GenerationOutcome, Stage};

/// Upper bounds (seconds) of the call-duration histogram buckets.
const CALL_BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Upper bounds (seconds) of the generation-stage histogram buckets.
const STAGE_BUCKETS: [f64; 11] = [0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// Egress request outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EgressOutcome {
    Allowed,
    Denied,
    Error,
}

/// The labels a tool's calls are counted under, made once per tool when its server is mounted.
#[derive(Debug, Clone)]
pub struct ToolSeries {
    server: Arc<str>,
    tool: Arc<str>,
}

impl ToolSeries {
    pub fn new(server: &str, tool: &str) -> ToolSeries {
        ToolSeries { server: Arc::from(server), tool: Arc::from(tool) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CallLabels {
    server: Arc<str>,
    tool: Arc<str>,
    outcome: CallOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EgressLabels {
    outcome: EgressOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GenerationLabels {
    outcome: GenerationOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabels {
    stage: Stage,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenLabels {
    direction: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    /// The tools each server has call series for, so a deleted server's series can be removed.
    /// Written once per new series, never on the common path.
    series_by_server: Mutex<HashMap<Arc<str>, HashSet<Arc<str>>>>,
    call_duration: Histogram,
    egress: Family<EgressLabels, Counter>,
    generations: Family<GenerationLabels, Counter>,
    stage_durations: HistogramFamily<StageLabels>,
    llm_tokens: Family<TokenLabels, Counter>,
    gauges: GaugeHandles,
}

/// Point-in-time values read at scrape time.
pub struct Gauges {
    pub queue_depth: usize,
    pub busy_workers: usize,
    pub workers: usize,
    pub in_flight_calls: usize,
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
    pub mounted_servers: usize,
}

#[derive(Default)]
struct GaugeHandles {
    queue_depth: Gauge,
    in_flight_calls: Gauge,
    memory_bytes: Gauge,
    memory_budget_bytes: Gauge,
    busy_workers: Gauge,
    workers: Gauge,
    mounted_servers: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            calls: Family::default(),
            series_by_server: Mutex::default(),
            call_duration: Histogram::new(CALL_BUCKETS),
            egress: Family::default(),
            generations: Family::default(),
            stage_durations: Family::new_with_constructor(|| Histogram::new(STAGE_BUCKETS)),
            llm_tokens: Family::default(),
            gauges: GaugeHandles::default(),
        };
        // Zero-valued series that dashboards expect to exist from the start.
        for outcome in [EgressOutcome::Allowed, EgressOutcome::Denied, EgressOutcome::Error] {
            let _ = metrics.egress.get_or_create(&EgressLabels { outcome });
        }
        for outcome in GenerationOutcome::ALL {
            let _ = metrics.generations.get_or_create(&GenerationLabels { outcome: *outcome });
        }
        for direction in ["input", "output"] {
            let _ = metrics.llm_tokens.get_or_create(&TokenLabels { direction });
        }
        metrics.register();
        metrics
    }
}

impl Metrics {
    /// Every metric in the order it is rendered. Counter names get `_total` from the encoder.
    fn register(&mut self) {
        let registry = &mut self.registry;
        let g = &self.gauges;
        registry.register("mcpbootd_tool_calls", "Tool calls by server, tool and outcome", self.calls.clone());
        registry.register(
            "mcpbootd_tool_call_duration_seconds",
            "Tool call duration, from arguments check to result",
            self.call_duration.clone(),
        );
        registry.register("mcpbootd_isolate_queue_depth", "Calls waiting to be admitted", g.queue_depth.clone());
        registry.register(
            "mcpbootd_isolate_in_flight_calls",
            "Calls admitted and not finished, running or parked on a fetch or timer",
            g.in_flight_calls.clone(),
        );
        registry.register(
            "mcpbootd_isolate_memory_bytes",
            "Isolate memory in use across all calls",
            g.memory_bytes.clone(),
        );
        registry.register(
            "mcpbootd_isolate_memory_budget_bytes",
            "Daemon-wide isolate memory budget ([sandbox] memory_budget_mb)",
            g.memory_budget_bytes.clone(),
        );
        registry.register(
            "mcpbootd_isolate_busy_workers",
            "Isolate workers running JavaScript right now",
            g.busy_workers.clone(),
        );
        registry.register("mcpbootd_isolate_workers", "Isolate worker threads", g.workers.clone());
        registry.register(
            "mcpbootd_egress_requests",
            "Outbound requests from handlers by outcome",
            self.egress.clone(),
        );
        registry.register("mcpbootd_generations", "Finished generations by outcome", self.generations.clone());
        registry.register(
            "mcpbootd_generation_stage_duration_seconds",
            "Time spent per generation stage",
            self.stage_durations.clone(),
        );
        registry.register("mcpbootd_llm_tokens", "LLM tokens used by generation", self.llm_tokens.clone());
        registry.register("mcpbootd_mounted_servers", "Servers mounted and serving MCP", g.mounted_servers.clone());
    }

    /// Counts a finished call.
    pub fn record_call(&self, series: &ToolSeries, outcome: CallOutcome, duration: Duration) {
        let labels = CallLabels { server: series.server.clone(), tool: series.tool.clone(), outcome };
        let counted = self.calls.get(&labels).map(|counter| counter.inc()).is_some();
        if !counted {
            lock(&self.series_by_server).entry(series.server.clone()).or_default().insert(series.tool.clone());
            self.calls.get_or_create(&labels).inc();
        }
        self.call_duration.observe(duration.as_secs_f64());
    }

    pub fn record_egress(&self, outcome: EgressOutcome) {
        self.egress.get_or_create(&EgressLabels { outcome }).inc();
    }

    pub fn record_generation(
        &self,
        outcome: GenerationOutcome,
        stage_millis: &[(Stage, u64)],
        input_tokens: u64,
        output_tokens: u64,
    ) {
        self.generations.get_or_create(&GenerationLabels { outcome }).inc();
        for (stage, millis) in stage_millis {
            self.stage_durations.get_or_create(&StageLabels { stage: *stage }).observe(*millis as f64 / 1000.0);
        }
        self.llm_tokens.get_or_create(&TokenLabels { direction: "input" }).inc_by(input_tokens);
        self.llm_tokens.get_or_create(&TokenLabels { direction: "output" }).inc_by(output_tokens);
    }

    /// Forgets a deleted server's series, so label sets do not grow with churn.
    pub fn forget_server(&self, server: &str) {
        let Some(tools) = lock(&self.series_by_server).remove(server) else { return };
        let server: Arc<str> = Arc::from(server);
        for tool in tools {
            for outcome in CallOutcome::ALL {
                self.calls.remove(&CallLabels { server: server.clone(), tool: tool.clone(), outcome: *outcome });
            }
        }
    }

    /// The exposition, with the gauges set to `gauges` first.
    pub fn render(&self, gauges: &Gauges) -> String {
        let g = &self.gauges;
        for (gauge, value) in [
            (&g.queue_depth, gauges.queue_depth),
            (&g.in_flight_calls, gauges.in_flight_calls),
            (&g.memory_bytes, gauges.memory_bytes),
            (&g.memory_budget_bytes, gauges.memory_budget_bytes),
            (&g.busy_workers, gauges.busy_workers),
            (&g.workers, gauges.workers),
            (&g.mounted_servers, gauges.mounted_servers),
        ] {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// The label values of the fixed sets are their catalog spellings.
macro_rules! label_value_as_str {
    ($($type:ty),+) => {$(
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    )+};
}

label_value_as_str!(CallOutcome, GenerationOutcome, Stage);

impl EncodeLabelValue for EgressOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let label = match self {
            EgressOutcome::Allowed => "allowed",
            EgressOutcome::Denied => "denied",
            EgressOutcome::Error => "error",
        };
        EncodeLabelValue::encode(&label, encoder)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges(n: usize) -> Gauges {
        Gauges {
            queue_depth: n,
            busy_workers: n,
            workers: n,
            in_flight_calls: n,
            memory_bytes: n,
            memory_budget_bytes: n,
            mounted_servers: n,
        }
    }

    fn sorted_lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
        lines.sort_unstable();
        lines
    }

    #[test]
    fn renders_counters_and_histograms() {
        let metrics = Metrics::default();
        let series = ToolSeries::new("s", "t");
        metrics.record_call(&series, CallOutcome::Ok, Duration::from_millis(3));
        metrics.record_call(&series, CallOutcome::Ok, Duration::from_millis(30));
        metrics.record_egress(EgressOutcome::Denied);
        metrics.record_generation(GenerationOutcome::Ready, &[(Stage::Planning, 1500)], 10, 20);
        let text = metrics.render(&gauges(2));
        for expected in [
            "# TYPE mcpbootd_tool_calls_total counter",
            "mcpbootd_tool_calls_total{server=\"s\",tool=\"t\",outcome=\"ok\"} 2",
            "mcpbootd_tool_call_duration_seconds_bucket{le=\"0.005\"} 1",
            "mcpbootd_tool_call_duration_seconds_bucket{le=\"+Inf\"} 2",
            "mcpbootd_tool_call_duration_seconds_count 2",
            "mcpbootd_egress_requests_total{outcome=\"denied\"} 1",
            "mcpbootd_egress_requests_total{outcome=\"allowed\"} 0",
            "mcpbootd_generations_total{outcome=\"ready\"} 1",
            "mcpbootd_generations_total{outcome=\"failed\"} 0",
            "mcpbootd_generation_stage_duration_seconds_bucket{stage=\"planning\",le=\"5\"} 1",
            "mcpbootd_llm_tokens_total{direction=\"output\"} 20",
            "mcpbootd_isolate_busy_workers 2",
            "mcpbootd_mounted_servers 2",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
        metrics.forget_server("s");
        assert!(!metrics.render(&gauges(0)).contains("server=\"s\""));
        // A forgotten server's tool counts from zero if it is registered again.
        metrics.record_call(&series, CallOutcome::Error, Duration::ZERO);
        metrics.forget_server("s");
        assert!(!metrics.render(&gauges(0)).contains("server=\"s\""));
    }

    #[test]
    fn call_series_and_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.record_call(&ToolSeries::new("b", "t"), CallOutcome::Ok, Duration::from_millis(1));
        metrics.record_call(&ToolSeries::new("a", "z"), CallOutcome::Timeout, Duration::from_secs(60));
        let y = ToolSeries::new("a", "y");
        metrics.record_call(&y, CallOutcome::Ok, Duration::from_micros(1500));
        metrics.record_call(&y, CallOutcome::ShuttingDown, Duration::ZERO);
        let text = metrics.render(&gauges(0));
        assert_eq!(
            sorted_lines(&text, "mcpbootd_tool_calls_total{"),
            [
                "mcpbootd_tool_calls_total{server=\"a\",tool=\"y\",outcome=\"ok\"} 1",
                "mcpbootd_tool_calls_total{server=\"a\",tool=\"y\",outcome=\"shutting_down\"} 1",
                "mcpbootd_tool_calls_total{server=\"a\",tool=\"z\",outcome=\"timeout\"} 1",
                "mcpbootd_tool_calls_total{server=\"b\",tool=\"t\",outcome=\"ok\"} 1",
            ]
        );
        for expected in [
            "mcpbootd_tool_call_duration_seconds_bucket{le=\"0.001\"} 2",
            "mcpbootd_tool_call_duration_seconds_bucket{le=\"0.0025\"} 3",
            "mcpbootd_tool_call_duration_seconds_bucket{le=\"30\"} 3",
            "mcpbootd_tool_call_duration_seconds_bucket{le=\"+Inf\"} 4",
            "mcpbootd_tool_call_duration_seconds_sum 60.0025",
            "mcpbootd_tool_call_duration_seconds_count 4",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        metrics.record_call(&ToolSeries::new("s", "a\"b\\c"), CallOutcome::Ok, Duration::ZERO);
        let text = metrics.render(&gauges(0));
        assert!(text.contains("tool=\"a\\\"b\\\\c\""), "{text}");
    }
}
