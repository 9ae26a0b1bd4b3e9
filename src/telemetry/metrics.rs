//! Prometheus metrics, rendered at `/metrics` in the Prometheus text format (0.0.4) by
//! `prometheus-client`.
//!
//! Labels are typed and bounded by construction: server ids and tool names of at most
//! `[metrics] max_labelled_servers` servers (the calls of further servers are counted under
//! `server="other"`, `tool="other"`), and fixed sets ([`crate::states`]' outcomes and stages,
//! error codes, HTTP statuses); never execution ids, URLs, hosts, or ids a client made up.
//!
//! Recording a call is on the hot path: the labels are decided once per tool when its server is
//! mounted ([`Metrics::tool_series`]) and held by the tool with its duration histogram, so a call
//! clones two `Arc`s, takes the counter family's read lock and adds to atomics; nothing is
//! allocated once the series exists. Gauges are read from the running parts at scrape time
//! ([`Gauges`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use self::labels::{AccountEvent, ClientMistake, EgressOutcome};
use self::labels::{
    AccountEventLabels, BuildLabels, CacheLabels, CallLabels, ClientErrorLabels, DriftCheckLabels, EgressLabels,
    GenerationLabels, OAuthRefusalLabels, QuotaLabels, RejectionLabels, ReplicaChangeLabels, ReplicaLabels,
    ScriptLabels, ScriptToolCallLabels, SeriesLabels, ServerLabels, StageLabels, TokenLabels, UpstreamDecisionLabels,
    VersionChangeLabels,
};
use super::CALL_BUCKETS;
use crate::states::{CacheUse, CallOutcome, DriftStatus, GenerationOutcome, Stage, UpstreamDecision, VersionChange};

mod labels;

/// Upper bounds (seconds) of the generation-stage histogram buckets.
const STAGE_BUCKETS: [f64; 11] = [0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// The label value for servers (and their tools) past `max_labelled_servers`.
const OTHER: &str = "other";
/// The label value for requests to ids that are not mounted servers.
const UNKNOWN: &str = "unknown";
/// The MCP endpoint refusals counted by server.
const REJECTION_STATUSES: [StatusCode; 3] = [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN, StatusCode::NOT_FOUND];

/// The labels a tool's calls are counted under and its duration histogram, made once per tool
/// when its server is mounted ([`Metrics::tool_series`]).
#[derive(Debug, Clone)]
pub struct ToolSeries {
    server: Arc<str>,
    tool: Arc<str>,
    duration: Histogram,
}

/// The servers with labels of their own, up to the configured number.
struct LabelledServers {
    servers: HashSet<Arc<str>>,
    max: usize,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    /// The tools of each labelled server, so a deleted server's series can be removed. Written
    /// when a server is mounted, never on the call path.
    series_by_server: Mutex<HashMap<Arc<str>, HashSet<Arc<str>>>>,
    labelled: Mutex<LabelledServers>,
    other: Arc<str>,
    unknown: Arc<str>,
    call_duration: HistogramFamily<SeriesLabels>,
    mcp_rejections: Family<RejectionLabels, Counter>,
    mcp_client_errors: Family<ClientErrorLabels, Counter>,
    /// The kinds counted so far (a fixed set), so a deleted server's series can be removed.
    client_error_kinds: Mutex<HashSet<&'static str>>,
    build_info: Family<BuildLabels, Gauge>,
    replica_info: Family<ReplicaLabels, Gauge>,
    replica_changes: Family<ReplicaChangeLabels, Counter>,
    reconciled_mounts: Counter,
    jobs_taken_over: Counter,
    egress: Family<EgressLabels, Counter>,
    egress_credential_scrubs: Family<ServerLabels, Counter>,
    egress_upstream_decisions: Family<UpstreamDecisionLabels, Counter>,
    egress_cache: Family<CacheLabels, Counter>,
    generations: Family<GenerationLabels, Counter>,
    stage_durations: HistogramFamily<StageLabels>,
    llm_tokens: Family<TokenLabels, Counter>,
    code_executions: Family<ScriptLabels, Counter>,
    code_tool_calls: Family<ScriptToolCallLabels, Counter>,
    code_sandboxed_bytes: Counter,
    tool_degraded: Family<SeriesLabels, Gauge>,
    drift_checks: Family<DriftCheckLabels, Counter>,
    drift_events: Counter,
    version_changes: Family<VersionChangeLabels, Counter>,
    gauges: GaugeHandles,
    /// Every call whatever its server, for the console's overview.
    totals: super::overview::CallTotals,
    oauth_refusals: Family<OAuthRefusalLabels, Counter>,
    account_events: Family<AccountEventLabels, Counter>,
    quota_refusals: Family<QuotaLabels, Counter>,
}

/// The limits a refusal can name (`serve::quota`).
const QUOTA_LIMITS: [&str; 4] =
    ["per_caller_per_minute", "per_server_per_minute", "per_tool_per_minute", "per_caller_concurrency"];

/// Point-in-time values read at scrape time.
pub struct Gauges {
    pub queue_depth: usize,
    pub busy_workers: usize,
    pub workers: usize,
    pub in_flight_calls: usize,
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
    pub mounted_servers: usize,
    /// Running totals from the isolate pool, rendered as counters.
    pub isolate_overruns: u64,
    /// Call-log records lost (queue full, or a batch the catalog kept refusing).
    pub call_log_dropped: u64,
    /// Bytes of responses the egress's HTTP cache holds.
    pub egress_cache_bytes: u64,
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
    egress_cache_bytes: Gauge,
    overruns: Counter,
    call_log_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(crate::config::MetricsConfig::default().max_labelled_servers)
    }
}

impl Metrics {
    /// Metrics with server and tool labels for up to `max_labelled_servers` servers.
    pub fn new(max_labelled_servers: usize) -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            calls: Family::default(),
            series_by_server: Mutex::default(),
            labelled: Mutex::new(LabelledServers { servers: HashSet::new(), max: max_labelled_servers }),
            other: Arc::from(OTHER),
            unknown: Arc::from(UNKNOWN),
            call_duration: Family::new_with_constructor(|| Histogram::new(CALL_BUCKETS)),
            mcp_rejections: Family::default(),
            mcp_client_errors: Family::default(),
            client_error_kinds: Mutex::default(),
            build_info: Family::default(),
            replica_info: Family::default(),
            replica_changes: Family::default(),
            reconciled_mounts: Counter::default(),
            jobs_taken_over: Counter::default(),
            egress: Family::default(),
            egress_credential_scrubs: Family::default(),
            egress_upstream_decisions: Family::default(),
            egress_cache: Family::default(),
            generations: Family::default(),
            stage_durations: Family::new_with_constructor(|| Histogram::new(STAGE_BUCKETS)),
            llm_tokens: Family::default(),
            code_executions: Family::default(),
            code_tool_calls: Family::default(),
            code_sandboxed_bytes: Counter::default(),
            tool_degraded: Family::default(),
            drift_checks: Family::default(),
            drift_events: Counter::default(),
            version_changes: Family::default(),
            gauges: GaugeHandles::default(),
            totals: super::overview::CallTotals::default(),
            oauth_refusals: Family::default(),
            account_events: Family::default(),
            quota_refusals: Family::default(),
        };
        for event in AccountEvent::ALL {
            let _ = metrics.account_events.get_or_create(&AccountEventLabels { event: event.label() });
        }
        // Zero-valued series that dashboards expect to exist from the start.
        for outcome in [EgressOutcome::Allowed, EgressOutcome::Denied, EgressOutcome::Error] {
            let _ = metrics.egress.get_or_create(&EgressLabels { outcome });
        }
        for decision in UpstreamDecision::ALL {
            let _ = metrics.egress_upstream_decisions.get_or_create(&UpstreamDecisionLabels { decision: *decision });
        }
        for result in CacheUse::ALL {
            let _ = metrics.egress_cache.get_or_create(&CacheLabels { result: *result });
        }
        for outcome in GenerationOutcome::ALL {
            let _ = metrics.generations.get_or_create(&GenerationLabels { outcome: *outcome });
        }
        for result in ["ok", "error"] {
            let _ = metrics.code_tool_calls.get_or_create(&ScriptToolCallLabels { result });
        }
        for kind in ["mount", "status"] {
            let _ = metrics.replica_changes.get_or_create(&ReplicaChangeLabels { kind });
        }
        for direction in ["input", "output"] {
            let _ = metrics.llm_tokens.get_or_create(&TokenLabels { direction });
        }
        for result in [DriftStatus::Unchanged, DriftStatus::Drifted, DriftStatus::Failed] {
            let _ = metrics.drift_checks.get_or_create(&DriftCheckLabels { result });
        }
        for result in VersionChange::ALL {
            let _ = metrics.version_changes.get_or_create(&VersionChangeLabels { result: *result });
        }
        metrics.build_info.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        metrics.register();
        metrics
    }

    /// Every metric in the order it is rendered. Counter names get `_total` from the encoder.
    fn register(&mut self) {
        let registry = &mut self.registry;
        let g = &self.gauges;
        registry.register("mcpbootd_tool_calls", "Tool calls by server, tool and outcome", self.calls.clone());
        registry.register(
            "mcpbootd_quota_refusals",
            "Tool calls refused at the door by a traffic limit, by server and limit ([limits]; never by caller)",
            self.quota_refusals.clone(),
        );
        registry.register(
            "mcpbootd_connected_account_events",
            "Connected accounts (per-user credentials): connect links sent, connects, token refreshes and their \
             failures, revocations; never by subject",
            self.account_events.clone(),
        );
        registry.register(
            "mcpbootd_oauth_refusals",
            "Requests refused at OAuth mounts, by reason (missing_token, insufficient_scope, expired, wrong_audience, …)",
            self.oauth_refusals.clone(),
        );
        registry.register(
            "mcpbootd_tool_call_duration_seconds",
            "Tool call duration by server and tool, from arguments check to result",
            self.call_duration.clone(),
        );
        registry.register(
            "mcpbootd_mcp_rejections",
            "MCP endpoint requests refused by server and status: 401 access token, 403 Host or Origin, \
             404 no such server",
            self.mcp_rejections.clone(),
        );
        registry.register(
            "mcpbootd_mcp_client_errors",
            "MCP requests a client got wrong, by server and kind (logged at debug level)",
            self.mcp_client_errors.clone(),
        );
        registry.register(
            "mcpbootd_build_info",
            "The running build: 1, labelled with its version",
            self.build_info.clone(),
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
            "mcpbootd_isolate_overruns",
            "Calls found running past their wall limit plus 1 s without yielding (an engine bug: the engine \
             ends every call at its limits)",
            g.overruns.clone(),
        );
        registry.register(
            "mcpbootd_replica_info",
            "This daemon's name among the replicas of its catalog, and the catalog's engine (always 1)",
            self.replica_info.clone(),
        );
        registry.register(
            "mcpbootd_replica_changes",
            "Changes other replicas made to the shared catalog that this one followed, by kind (mount, status)",
            self.replica_changes.clone(),
        );
        registry.register(
            "mcpbootd_reconciled_mounts",
            "Mounts found out of step with the shared catalog by a periodic comparison and corrected \
             (changes whose announcement was lost)",
            self.reconciled_mounts.clone(),
        );
        registry.register(
            "mcpbootd_generation_jobs_taken_over",
            "Generation jobs this replica took over after the replica running them stopped renewing their lease",
            self.jobs_taken_over.clone(),
        );
        registry.register(
            "mcpbootd_egress_requests",
            "Outbound requests from handlers by outcome",
            self.egress.clone(),
        );
        registry.register(
            "mcpbootd_egress_credential_scrubs",
            "Credential values taken out of upstream responses before handlers saw them, by server \
             (an upstream echoes credentials; the call log's egress entries say which request)",
            self.egress_credential_scrubs.clone(),
        );
        registry.register(
            "mcpbootd_egress_upstream_decisions",
            "Outbound requests the upstream protection held or refused, by decision: waited for or refused by \
             an origin's Retry-After or a server's rate limit for it, refused by an open circuit breaker, or \
             let through as a breaker's probe",
            self.egress_upstream_decisions.clone(),
        );
        registry.register(
            "mcpbootd_egress_cache_lookups",
            "GETs the egress's HTTP cache took part in, by result: hit, revalidated (304), miss, stored",
            self.egress_cache.clone(),
        );
        registry.register(
            "mcpbootd_egress_cache_bytes",
            "Bytes of responses the egress's HTTP cache holds",
            g.egress_cache_bytes.clone(),
        );
        registry.register("mcpbootd_generations", "Finished generations by outcome", self.generations.clone());
        registry.register(
            "mcpbootd_generation_stage_duration_seconds",
            "Time spent per generation stage",
            self.stage_durations.clone(),
        );
        registry.register("mcpbootd_llm_tokens", "LLM tokens used by generation", self.llm_tokens.clone());
        registry.register(
            "mcpbootd_code_executions",
            "Code-mode scripts run, by outcome",
            self.code_executions.clone(),
        );
        registry.register(
            "mcpbootd_code_tool_calls",
            "Tool calls made by code-mode scripts, by result (ok or error)",
            self.code_tool_calls.clone(),
        );
        registry.register(
            "mcpbootd_code_sandboxed_bytes",
            "Bytes of tool results that stayed inside code-mode scripts instead of going back to the agent \
             (tool results handed to scripts minus the scripts' own results)",
            self.code_sandboxed_bytes.clone(),
        );
        registry.register("mcpbootd_mounted_servers", "Servers mounted and serving MCP", g.mounted_servers.clone());
        registry.register(
            "mcpbootd_call_log_dropped_records",
            "Call-log records lost because the writer's queue was full or the catalog kept refusing a batch \
             (the calls themselves were answered)",
            g.call_log_dropped.clone(),
        );
        registry.register(
            "mcpbootd_tool_degraded",
            "1 while a tool's error rate over its last calls is at or past [generation] degraded_error_rate",
            self.tool_degraded.clone(),
        );
        registry.register(
            "mcpbootd_drift_checks",
            "Documentation drift checks by result (unchanged, drifted, failed)",
            self.drift_checks.clone(),
        );
        registry.register(
            "mcpbootd_drift_events",
            "Changes found in servers' documentation (each starts a candidate version)",
            self.drift_events.clone(),
        );
        registry.register(
            "mcpbootd_version_changes",
            "Operator decisions on versions (approved, rejected, activated)",
            self.version_changes.clone(),
        );
    }

    /// The series a tool's calls are counted under: its own labels while fewer than
    /// `max_labelled_servers` servers have them (or its server already does), `other` after.
    pub fn tool_series(&self, server: &str, tool: &str) -> ToolSeries {
        let (server, tool) = match self.server_label(server, true) {
            Some(server) => {
                let tool: Arc<str> = Arc::from(tool);
                // Remembered so that deleting the server removes its series, histograms included
                // (they exist from mount time, also for tools never called).
                lock(&self.series_by_server).entry(server.clone()).or_default().insert(tool.clone());
                (server, tool)
            }
            None => (self.other.clone(), self.other.clone()),
        };
        let duration = self.call_duration.get_or_create(&SeriesLabels { server: server.clone(), tool: tool.clone() });
        ToolSeries { duration: duration.clone(), server, tool }
    }

    /// `server`'s label if it has one, taking a free one when `take` is set; `None`: `other`.
    fn server_label(&self, server: &str, take: bool) -> Option<Arc<str>> {
        let mut labelled = lock(&self.labelled);
        if let Some(label) = labelled.servers.get(server) {
            return Some(label.clone());
        }
        if !take || labelled.servers.len() >= labelled.max {
            return None;
        }
        let label: Arc<str> = Arc::from(server);
        labelled.servers.insert(label.clone());
        Some(label)
    }

    /// Counts a refused MCP request (401, 403 and 404 only). `mounted` is the server the path
    /// names when it is a mounted one; anything else is `unknown`, so made-up ids create no series.
    pub fn record_mcp_rejection(&self, mounted: Option<&str>, status: StatusCode) {
        if !REJECTION_STATUSES.contains(&status) {
            return;
        }
        let server = match mounted {
            Some(server) => self.server_label(server, true).unwrap_or_else(|| self.other.clone()),
            None => self.unknown.clone(),
        };
        self.mcp_rejections.get_or_create(&RejectionLabels { server, status: status.as_u16() }).inc();
    }

    /// Counts a client's mistake on a mounted server's endpoint (`None`: not a mounted server).
    pub fn record_client_error(&self, mounted: Option<&str>, mistake: ClientMistake) {
        let server = match mounted {
            Some(server) => self.server_label(server, true).unwrap_or_else(|| self.other.clone()),
            None => self.unknown.clone(),
        };
        let kind = mistake.kind();
        let counter = self.mcp_client_errors.get_or_create(&ClientErrorLabels { server, kind });
        counter.inc();
        drop(counter);
        lock(&self.client_error_kinds).insert(kind);
    }

    /// Counts a finished call.
    pub fn record_call(&self, series: &ToolSeries, outcome: CallOutcome, duration: Duration) {
        let labels = CallLabels { server: series.server.clone(), tool: series.tool.clone(), outcome };
        let counted = self.calls.get(&labels).map(|counter| counter.inc()).is_some();
        if !counted {
            self.calls.get_or_create(&labels).inc();
        }
        series.duration.observe(duration.as_secs_f64());
        self.totals.record(outcome != CallOutcome::Ok, duration);
    }

    /// A request refused at an OAuth mount, by reason (never by subject or client).
    pub fn record_oauth_refusal(&self, reason: &'static str) {
        self.oauth_refusals.get_or_create(&OAuthRefusalLabels { reason }).inc();
    }

    /// A call refused by a traffic limit, counted under its tool's server label.
    pub fn record_quota_refusal(&self, series: &ToolSeries, limit: &'static str) {
        self.quota_refusals.get_or_create(&QuotaLabels { server: series.server.clone(), limit }).inc();
    }

    /// An event of a connected account (never by subject or server).
    pub fn record_account_event(&self, event: AccountEvent) {
        self.account_events.get_or_create(&AccountEventLabels { event: event.label() }).inc();
    }

    /// Every call counted so far, whatever its server.
    pub fn call_totals(&self) -> &super::overview::CallTotals {
        &self.totals
    }

    /// A finished code-mode script: its outcome, the bytes of tool results handed to it and
    /// the size of its own result.
    pub fn record_script(&self, outcome: CallOutcome, tool_result_bytes: u64, result_bytes: u64) {
        self.code_executions.get_or_create(&ScriptLabels { outcome }).inc();
        self.code_sandboxed_bytes.inc_by(tool_result_bytes.saturating_sub(result_bytes));
    }

    pub fn record_script_tool_call(&self, ok: bool) {
        self.code_tool_calls.get_or_create(&ScriptToolCallLabels { result: if ok { "ok" } else { "error" } }).inc();
    }

    pub fn record_egress(&self, outcome: EgressOutcome) {
        self.egress.get_or_create(&EgressLabels { outcome }).inc();
    }

    /// Counts what the upstream protection and the cache did with one outbound request.
    pub fn record_egress_protection(&self, decision: Option<UpstreamDecision>, cache: Option<CacheUse>) {
        if let Some(decision) = decision {
            self.egress_upstream_decisions.get_or_create(&UpstreamDecisionLabels { decision }).inc();
        }
        if let Some(result) = cache {
            self.egress_cache.get_or_create(&CacheLabels { result }).inc();
        }
    }

    /// Counts credential values the egress took out of the responses of one of a tool's calls.
    pub fn record_credential_scrubs(&self, series: &ToolSeries, scrubs: u64) {
        self.egress_credential_scrubs.get_or_create(&ServerLabels { server: series.server.clone() }).inc_by(scrubs);
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

    /// Whether a tool is degraded (see `serve::health`). Tools of unlabelled servers share
    /// `other`, which then says whether the last of them to change is degraded.
    pub fn record_tool_health(&self, series: &ToolSeries, degraded: bool) {
        let labels = SeriesLabels { server: series.server.clone(), tool: series.tool.clone() };
        self.tool_degraded.get_or_create(&labels).set(i64::from(degraded));
    }

    /// A documentation drift check ended: `unchanged`, `drifted` or `failed`.
    pub fn record_drift_check(&self, result: DriftStatus) {
        self.drift_checks.get_or_create(&DriftCheckLabels { result }).inc();
        if result == DriftStatus::Drifted {
            self.drift_events.inc();
        }
    }

    /// Names this daemon among the replicas of its catalog (`catalog`: `sqlite` or `postgres`).
    pub fn set_replica(&self, replica: &str, catalog: &'static str) {
        self.replica_info.get_or_create(&ReplicaLabels { replica: replica.to_string(), catalog }).set(1);
    }

    /// A change another replica made was followed: `mount` or `status`.
    pub fn record_replica_change(&self, kind: &'static str) {
        self.replica_changes.get_or_create(&ReplicaChangeLabels { kind }).inc();
    }

    /// A periodic comparison found mounts out of step with the shared catalog.
    pub fn record_reconciled(&self, mounts: usize) {
        self.reconciled_mounts.inc_by(mounts as u64);
    }

    /// A generation job whose replica stopped renewing its lease was taken over.
    pub fn record_job_taken_over(&self) {
        self.jobs_taken_over.inc();
    }

    /// An operator approved, rejected or activated a version.
    pub fn record_version_change(&self, result: VersionChange) {
        self.version_changes.get_or_create(&VersionChangeLabels { result }).inc();
    }

    /// Forgets a deleted server's series and frees its label, so label sets do not grow with
    /// churn. (Its calls counted under `other` stay there.)
    pub fn forget_server(&self, server: &str) {
        let Some(label) = lock(&self.labelled).servers.take(server) else { return };
        let tools = lock(&self.series_by_server).remove(server).unwrap_or_default();
        for tool in tools {
            for outcome in CallOutcome::ALL {
                self.calls.remove(&CallLabels { server: label.clone(), tool: tool.clone(), outcome: *outcome });
            }
            self.tool_degraded.remove(&SeriesLabels { server: label.clone(), tool: tool.clone() });
            self.call_duration.remove(&SeriesLabels { server: label.clone(), tool });
        }
        for status in REJECTION_STATUSES {
            self.mcp_rejections.remove(&RejectionLabels { server: label.clone(), status: status.as_u16() });
        }
        self.egress_credential_scrubs.remove(&ServerLabels { server: label.clone() });
        for limit in QUOTA_LIMITS {
            self.quota_refusals.remove(&QuotaLabels { server: label.clone(), limit });
        }
        let kinds: Vec<&'static str> = lock(&self.client_error_kinds).iter().copied().collect();
        for kind in kinds {
            self.mcp_client_errors.remove(&ClientErrorLabels { server: label.clone(), kind });
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
        g.egress_cache_bytes.set(i64::try_from(gauges.egress_cache_bytes).unwrap_or(i64::MAX));
        // The pool keeps the totals; the counters catch up with them.
        for (counter, total) in [(&g.overruns, gauges.isolate_overruns), (&g.call_log_dropped, gauges.call_log_dropped)]
        {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
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
            isolate_overruns: n as u64,
            call_log_dropped: 0,
            egress_cache_bytes: 0,
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
        let series = metrics.tool_series("s", "t");
        metrics.record_call(&series, CallOutcome::Ok, Duration::from_millis(3));
        metrics.record_call(&series, CallOutcome::Ok, Duration::from_millis(30));
        metrics.record_egress(EgressOutcome::Denied);
        metrics.record_generation(GenerationOutcome::Ready, &[(Stage::Planning, 1500)], 10, 20);
        let text = metrics.render(&gauges(2));
        for expected in [
            "# TYPE mcpbootd_tool_calls_total counter",
            "mcpbootd_tool_calls_total{server=\"s\",tool=\"t\",outcome=\"ok\"} 2",
            "mcpbootd_tool_call_duration_seconds_bucket{server=\"s\",tool=\"t\",le=\"0.005\"} 1",
            "mcpbootd_tool_call_duration_seconds_bucket{server=\"s\",tool=\"t\",le=\"+Inf\"} 2",
            "mcpbootd_tool_call_duration_seconds_count{server=\"s\",tool=\"t\"} 2",
            &format!("mcpbootd_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
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
        let series = metrics.tool_series("s", "t");
        metrics.record_call(&series, CallOutcome::Error, Duration::ZERO);
        metrics.forget_server("s");
        assert!(!metrics.render(&gauges(0)).contains("server=\"s\""));
    }

    #[test]
    fn call_series_and_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.record_call(&metrics.tool_series("b", "t"), CallOutcome::Ok, Duration::from_millis(1));
        metrics.record_call(&metrics.tool_series("a", "z"), CallOutcome::Timeout, Duration::from_secs(60));
        let y = metrics.tool_series("a", "y");
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
            "mcpbootd_tool_call_duration_seconds_bucket{server=\"a\",tool=\"y\",le=\"0.001\"} 1",
            "mcpbootd_tool_call_duration_seconds_bucket{server=\"a\",tool=\"y\",le=\"0.0025\"} 2",
            "mcpbootd_tool_call_duration_seconds_bucket{server=\"a\",tool=\"z\",le=\"30\"} 0",
            "mcpbootd_tool_call_duration_seconds_bucket{server=\"a\",tool=\"z\",le=\"+Inf\"} 1",
            "mcpbootd_tool_call_duration_seconds_sum{server=\"a\",tool=\"z\"} 60.0",
            "mcpbootd_tool_call_duration_seconds_count{server=\"a\",tool=\"y\"} 2",
            "mcpbootd_tool_call_duration_seconds_count{server=\"b\",tool=\"t\"} 1",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        metrics.record_call(&metrics.tool_series("s", "a\"b\\c"), CallOutcome::Ok, Duration::ZERO);
        let text = metrics.render(&gauges(0));
        assert!(text.contains("tool=\"a\\\"b\\\\c\""), "{text}");
    }

    #[test]
    fn servers_past_the_limit_fold_into_other_and_made_up_ids_create_no_series() {
        let metrics = Metrics::new(2);
        for server in ["a", "b", "c", "d"] {
            let series = metrics.tool_series(server, "t");
            metrics.record_call(&series, CallOutcome::Ok, Duration::from_millis(1));
        }
        let text = metrics.render(&gauges(0));
        for expected in [
            "mcpbootd_tool_calls_total{server=\"a\",tool=\"t\",outcome=\"ok\"} 1",
            "mcpbootd_tool_calls_total{server=\"b\",tool=\"t\",outcome=\"ok\"} 1",
            "mcpbootd_tool_calls_total{server=\"other\",tool=\"other\",outcome=\"ok\"} 2",
            "mcpbootd_tool_call_duration_seconds_count{server=\"other\",tool=\"other\"} 2",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
        assert!(!text.contains("server=\"c\"") && !text.contains("server=\"d\""), "{text}");

        metrics.record_mcp_rejection(Some("a"), StatusCode::UNAUTHORIZED);
        metrics.record_mcp_rejection(Some("c"), StatusCode::UNAUTHORIZED);
        metrics.record_mcp_rejection(None, StatusCode::NOT_FOUND);
        metrics.record_mcp_rejection(None, StatusCode::NOT_FOUND);
        metrics.record_mcp_rejection(Some("a"), StatusCode::SERVICE_UNAVAILABLE);
        metrics.record_client_error(Some("a"), ClientMistake::UnknownTool);
        metrics.record_client_error(None, ClientMistake::Refused("malformed_json"));
        let text = metrics.render(&gauges(0));
        for expected in [
            "mcpbootd_mcp_rejections_total{server=\"a\",status=\"401\"} 1",
            "mcpbootd_mcp_rejections_total{server=\"other\",status=\"401\"} 1",
            "mcpbootd_mcp_rejections_total{server=\"unknown\",status=\"404\"} 2",
            "mcpbootd_mcp_client_errors_total{server=\"a\",kind=\"unknown_tool\"} 1",
            "mcpbootd_mcp_client_errors_total{server=\"unknown\",kind=\"malformed_json\"} 1",
        ] {
            assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
        }
        assert!(!text.contains("status=\"503\""), "only 401, 403 and 404 are counted: {text}");

        // Deleting a labelled server frees its label for the next server mounted.
        metrics.forget_server("a");
        assert!(!metrics.render(&gauges(0)).contains("server=\"a\""));
        metrics.record_call(&metrics.tool_series("e", "t"), CallOutcome::Ok, Duration::ZERO);
        assert!(metrics.render(&gauges(0)).contains("server=\"e\",tool=\"t\""));
    }
}
