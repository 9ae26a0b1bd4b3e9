//! Prometheus metrics, rendered as text at `/metrics`.
//!
//! Hand-rolled rather than a metrics crate: the set is small and fixed. Labels are bounded by
//! construction — server ids and tool names (bounded by registrations), outcomes and stages (fixed
//! sets); never execution ids, URLs or hosts.
//!
//! Recording a call is on the hot path, so it takes no lock but a shared read lock, allocates
//! nothing once a tool has been called, and only adds to atomic counters; rendering (rare) does the
//! sorting and summing.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::states::{CallOutcome, GenerationOutcome, Stage};

/// Upper bounds (seconds) of the call-duration histogram buckets.
const CALL_BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Upper bounds (seconds) of the generation-stage histogram buckets.
const STAGE_BUCKETS: &[f64] = &[0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// Every outcome a tool call can be recorded with.
const CALL_OUTCOMES: &[CallOutcome] = CallOutcome::ALL;

/// Egress request outcomes.
#[derive(Debug, Clone, Copy)]
pub enum EgressOutcome {
    Allowed,
    Denied,
    Error,
}

/// One tool's call counts, by the index of the outcome in [`CALL_OUTCOMES`].
type OutcomeCounts = [AtomicU64; CALL_OUTCOMES.len()];
/// One server's tools, by name.
type ToolCounts = HashMap<Box<str>, Arc<OutcomeCounts>>;

#[derive(Default)]
pub struct Metrics {
    /// Server id → tool name → call counts. A tool's first call takes the write lock.
    calls: RwLock<HashMap<Box<str>, ToolCounts>>,
    call_duration: AtomicHistogram<{ CALL_BUCKETS.len() }>,
    egress: [AtomicU64; 3],
    generations: Mutex<BTreeMap<GenerationOutcome, u64>>,
    stage_durations: Mutex<BTreeMap<Stage, Histogram>>,
    llm_input_tokens: AtomicU64,
    llm_output_tokens: AtomicU64,
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

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, buckets: &[f64], seconds: f64) {
        if self.counts.len() != buckets.len() {
            self.counts = vec![0; buckets.len()];
        }
        for (bound, count) in buckets.iter().zip(self.counts.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, buckets: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in buckets.iter().enumerate() {
            let count = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// A histogram updated without a lock: each observation adds to the one bucket it falls in (the
/// last slot is `+Inf`), and rendering accumulates them, so the cumulative buckets and the count
/// a scrape sees always agree.
struct AtomicHistogram<const N: usize> {
    slots: [AtomicU64; N],
    overflow: AtomicU64,
    /// Sum of the observed seconds, as `f64` bits.
    sum: AtomicU64,
}

impl<const N: usize> Default for AtomicHistogram<N> {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }
}

impl<const N: usize> AtomicHistogram<N> {
    fn observe(&self, buckets: &[f64; N], seconds: f64) {
        match buckets.iter().position(|bound| seconds <= *bound) {
            Some(slot) => &self.slots[slot],
            None => &self.overflow,
        }
        .fetch_add(1, Ordering::Relaxed);
        let _ = self.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + seconds).to_bits())
        });
    }

    /// The same state as a [`Histogram`] with cumulative buckets.
    fn snapshot(&self) -> Histogram {
        let mut counts = Vec::with_capacity(N);
        let mut cumulative = 0;
        for slot in &self.slots {
            cumulative += slot.load(Ordering::Relaxed);
            counts.push(cumulative);
        }
        let count = cumulative + self.overflow.load(Ordering::Relaxed);
        Histogram { counts, sum: f64::from_bits(self.sum.load(Ordering::Relaxed)), count }
    }
}

impl Metrics {
    /// Counts a finished call.
    pub fn record_call(&self, server: &str, tool: &str, outcome: CallOutcome, duration: Duration) {
        let index = outcome as usize;
        let counts = read(&self.calls).get(server).and_then(|tools| tools.get(tool)).cloned();
        let counts = counts.unwrap_or_else(|| {
            let mut calls = write(&self.calls);
            let tools = calls.entry(server.into()).or_default();
            tools.entry(tool.into()).or_default().clone()
        });
        counts[index].fetch_add(1, Ordering::Relaxed);
        self.call_duration.observe(&CALL_BUCKETS, duration.as_secs_f64());
    }

    pub fn record_egress(&self, outcome: EgressOutcome) {
        self.egress[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_generation(
        &self,
        outcome: GenerationOutcome,
        stage_millis: &[(Stage, u64)],
        input_tokens: u64,
        output_tokens: u64,
    ) {
        *lock(&self.generations).entry(outcome).or_default() += 1;
        let mut stages = lock(&self.stage_durations);
        for (stage, millis) in stage_millis {
            stages.entry(*stage).or_default().observe(STAGE_BUCKETS, *millis as f64 / 1000.0);
        }
        self.llm_input_tokens.fetch_add(input_tokens, Ordering::Relaxed);
        self.llm_output_tokens.fetch_add(output_tokens, Ordering::Relaxed);
    }

    /// Forgets a deleted server's series, so label sets do not grow with churn.
    pub fn forget_server(&self, server: &str) {
        write(&self.calls).remove(server);
    }

    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::with_capacity(4096);
        header(&mut out, "mcpbootd_tool_calls_total", "counter", "Tool calls by server, tool and outcome.");
        {
            let calls = read(&self.calls);
            let mut series: Vec<(&str, &str, &OutcomeCounts)> = calls
                .iter()
                .flat_map(|(server, tools)| tools.iter().map(move |(tool, counts)| (&**server, &**tool, &**counts)))
                .collect();
            series.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            let mut outcomes = CALL_OUTCOMES.to_vec();
            outcomes.sort_unstable_by_key(|outcome| outcome.as_str());
            for (server, tool, counts) in series {
                for outcome in &outcomes {
                    let count = counts[*outcome as usize].load(Ordering::Relaxed);
                    if count > 0 {
                        let _ = writeln!(
                            out,
                            "mcpbootd_tool_calls_total{{server=\"{}\",tool=\"{}\",outcome=\"{outcome}\"}} {count}",
                            escape(server),
                            escape(tool)
                        );
                    }
                }
            }
        }
        header(
            &mut out,
            "mcpbootd_tool_call_duration_seconds",
            "histogram",
            "Tool call duration, from arguments check to result.",
        );
        self.call_duration.snapshot().render(&mut out, "mcpbootd_tool_call_duration_seconds", "", &CALL_BUCKETS);

        header(&mut out, "mcpbootd_isolate_queue_depth", "gauge", "Calls waiting to be admitted.");
        let _ = writeln!(out, "mcpbootd_isolate_queue_depth {}", gauges.queue_depth);
        header(
            &mut out,
            "mcpbootd_isolate_in_flight_calls",
            "gauge",
            "Calls admitted and not finished, running or parked on a fetch or timer.",
        );
        let _ = writeln!(out, "mcpbootd_isolate_in_flight_calls {}", gauges.in_flight_calls);
        header(&mut out, "mcpbootd_isolate_memory_bytes", "gauge", "Isolate memory in use across all calls.");
        let _ = writeln!(out, "mcpbootd_isolate_memory_bytes {}", gauges.memory_bytes);
        header(
            &mut out,
            "mcpbootd_isolate_memory_budget_bytes",
            "gauge",
            "Daemon-wide isolate memory budget ([sandbox] memory_budget_mb).",
        );
        let _ = writeln!(out, "mcpbootd_isolate_memory_budget_bytes {}", gauges.memory_budget_bytes);
        header(&mut out, "mcpbootd_isolate_busy_workers", "gauge", "Isolate workers running JavaScript right now.");
        let _ = writeln!(out, "mcpbootd_isolate_busy_workers {}", gauges.busy_workers);
        header(&mut out, "mcpbootd_isolate_workers", "gauge", "Isolate worker threads.");
        let _ = writeln!(out, "mcpbootd_isolate_workers {}", gauges.workers);

        header(&mut out, "mcpbootd_egress_requests_total", "counter", "Outbound requests from handlers by outcome.");
        for (label, outcome) in
            [("allowed", EgressOutcome::Allowed), ("denied", EgressOutcome::Denied), ("error", EgressOutcome::Error)]
        {
            let count = self.egress[outcome as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "mcpbootd_egress_requests_total{{outcome=\"{label}\"}} {count}");
        }

        header(&mut out, "mcpbootd_generations_total", "counter", "Finished generations by outcome.");
        let generations = lock(&self.generations);
        for outcome in GenerationOutcome::ALL {
            let count = generations.get(outcome).copied().unwrap_or(0);
            let _ = writeln!(out, "mcpbootd_generations_total{{outcome=\"{outcome}\"}} {count}");
        }
        drop(generations);
        header(&mut out, "mcpbootd_generation_stage_duration_seconds", "histogram", "Time spent per generation stage.");
        for (stage, histogram) in lock(&self.stage_durations).iter() {
            histogram.render(
                &mut out,
                "mcpbootd_generation_stage_duration_seconds",
                &format!("stage=\"{stage}\""),
                STAGE_BUCKETS,
            );
        }
        header(&mut out, "mcpbootd_llm_tokens_total", "counter", "LLM tokens used by generation.");
        let _ = writeln!(
            out,
            "mcpbootd_llm_tokens_total{{direction=\"input\"}} {}",
            self.llm_input_tokens.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "mcpbootd_llm_tokens_total{{direction=\"output\"}} {}",
            self.llm_output_tokens.load(Ordering::Relaxed)
        );

        header(&mut out, "mcpbootd_mounted_servers", "gauge", "Servers mounted and serving MCP.");
        let _ = writeln!(out, "mcpbootd_mounted_servers {}", gauges.mounted_servers);
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Label values as the exposition format requires.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let metrics = Metrics::default();
        metrics.record_call("s", "t", CallOutcome::Ok, Duration::from_millis(3));
        metrics.record_call("s", "t", CallOutcome::Ok, Duration::from_millis(30));
        metrics.record_egress(EgressOutcome::Denied);
        metrics.record_generation(GenerationOutcome::Ready, &[(Stage::Planning, 1500)], 10, 20);
        let text = metrics.render(&Gauges {
            queue_depth: 1,
            busy_workers: 2,
            workers: 2,
            in_flight_calls: 5,
            memory_bytes: 1,
            memory_budget_bytes: 2,
            mounted_servers: 3,
        });
        assert!(text.contains("mcpbootd_tool_calls_total{server=\"s\",tool=\"t\",outcome=\"ok\"} 2"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_count 2"));
        assert!(text.contains("mcpbootd_egress_requests_total{outcome=\"denied\"} 1"));
        assert!(text.contains("mcpbootd_generation_stage_duration_seconds_bucket{stage=\"planning\",le=\"5\"} 1"));
        assert!(text.contains("mcpbootd_llm_tokens_total{direction=\"output\"} 20"));
        assert!(text.contains("mcpbootd_isolate_busy_workers 2"));
        metrics.forget_server("s");
        assert!(
            !metrics
                .render(&Gauges {
                    queue_depth: 0,
                    busy_workers: 0,
                    workers: 0,
                    in_flight_calls: 0,
                    memory_bytes: 0,
                    memory_budget_bytes: 0,
                    mounted_servers: 0
                })
                .contains("server=\"s\"")
        );
    }

    #[test]
    fn call_series_are_sorted_and_buckets_cumulative() {
        let metrics = Metrics::default();
        metrics.record_call("b", "t", CallOutcome::Ok, Duration::from_millis(1));
        metrics.record_call("a", "z", CallOutcome::Timeout, Duration::from_secs(60));
        metrics.record_call("a", "y", CallOutcome::Ok, Duration::from_micros(1500));
        metrics.record_call("a", "y", CallOutcome::Busy, Duration::ZERO);
        let text = metrics.render(&Gauges {
            queue_depth: 0,
            busy_workers: 0,
            workers: 0,
            in_flight_calls: 0,
            memory_bytes: 0,
            memory_budget_bytes: 0,
            mounted_servers: 0,
        });
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with("mcpbootd_tool_calls_total{")).collect();
        assert_eq!(
            series,
            [
                "mcpbootd_tool_calls_total{server=\"a\",tool=\"y\",outcome=\"busy\"} 1",
                "mcpbootd_tool_calls_total{server=\"a\",tool=\"y\",outcome=\"ok\"} 1",
                "mcpbootd_tool_calls_total{server=\"a\",tool=\"z\",outcome=\"timeout\"} 1",
                "mcpbootd_tool_calls_total{server=\"b\",tool=\"t\",outcome=\"ok\"} 1",
            ]
        );
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_bucket{le=\"0.001\"} 2"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_bucket{le=\"0.0025\"} 3"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_bucket{le=\"30\"} 3"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_bucket{le=\"+Inf\"} 4"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_sum 60.0025"));
        assert!(text.contains("mcpbootd_tool_call_duration_seconds_count 4"));
    }
}
