//! Generations: how a version's tools were made (`GET /admin/servers/{id}` and the versions
//! routes show them), the tools they made with their self-tests and health, and the answer to
//! starting one (a prompt registration or `POST /admin/servers/{id}/regenerate`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::catalog::{self, GenerationRecord, format_millis};
use crate::states::{GenerationSource, Status, Trigger};
use crate::toolset::{ServerId, ToolSpec};
use crate::whitelist::{RefusedDomain, WhitelistEntry};

/// A generation that started: a prompt registration or a regeneration.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GenerationStarted {
    pub id: ServerId,
    /// The server's name (in answers to a registration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Always `pending`.
    pub status: Status,
    pub mcp_path: String,
    pub generation_id: i64,
}

/// `POST /admin/servers/{id}/regenerate`; an empty body means the defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegenerateRequest {
    /// Skip the generation cache.
    #[serde(default)]
    pub force: bool,
    /// Stop after planning (status `planned`); the current tools keep serving.
    #[serde(default)]
    pub dry_run: bool,
    /// Write only these tools of the active version again; the others are kept as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// With `tools`: give the compiler each tool's handler and its recent failed calls
    /// (arguments, secrets redacted, and errors) to repair it from.
    #[serde(default)]
    pub with_failures: bool,
}

/// One generation of a server: how its tools were made.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GenerationView {
    pub id: i64,
    /// Its number among the server's versions: 1, 2, …
    #[serde(default)]
    pub version: i64,
    /// What started it: `registration`, `regenerate`, `drift` or `repair`.
    #[serde(default = "registration")]
    pub triggered_by: Trigger,
    /// For `drift`, the drift event; for `repair`, the tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_detail: Option<String>,
    /// An operator's decision, when it awaited approval: `{"decision", "reason", "at"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub review: Option<Value>,
    /// A targeted regeneration: `{"tools", "with_failures", "failures"}` as the compiler got them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub repair: Option<Value>,
    pub source: GenerationSource,
    pub status: Status,
    /// The same as `status`.
    pub stage: Status,
    /// Why it failed: the stage and what went wrong.
    pub error: Option<String>,
    pub dry_run: bool,
    pub force: bool,
    pub cache_hit: bool,
    /// The generation whose plan and handlers were reused.
    pub cached_from: Option<i64>,
    pub prompt_hash: Option<String>,
    pub content_hash: Option<String>,
    pub model: Option<String>,
    pub generator_version: String,
    pub tokens: TokenUsage,
    /// Milliseconds per stage: `fetching_ms`, `planning_ms`, `compiling_ms`, `testing_ms`, `total_ms`.
    #[schema(value_type = Object)]
    pub timings: Map<String, Value>,
    pub warnings: Vec<String>,
    pub whitelist: Vec<WhitelistEntry>,
    /// Whitelist candidates that were not admitted, with the reason.
    pub refused_domains: Vec<RefusedDomain>,
    pub documents: Vec<DocumentView>,
    /// The planner's plan.
    #[schema(value_type = Option<Object>)]
    pub plan: Option<Value>,
    pub tools: Vec<ToolView>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

impl From<&GenerationRecord> for GenerationView {
    fn from(g: &GenerationRecord) -> GenerationView {
        let d = &g.details;
        GenerationView {
            id: g.id,
            version: g.version,
            triggered_by: g.triggered_by,
            trigger_detail: g.trigger_detail.clone(),
            review: g.review.clone(),
            repair: g.repair.clone(),
            source: g.source,
            status: g.status,
            stage: g.status,
            error: g.error.clone(),
            dry_run: d.dry_run,
            force: d.force,
            cache_hit: d.cache_hit,
            cached_from: d.cached_from,
            prompt_hash: d.prompt_hash.clone(),
            content_hash: d.content_hash.clone(),
            model: d.model.clone(),
            generator_version: g.generator_version.clone(),
            tokens: TokenUsage { input: d.input_tokens, output: d.output_tokens, requests: d.llm_requests },
            timings: d.timings.clone(),
            warnings: d.warnings.clone(),
            whitelist: g.whitelist.entries().to_vec(),
            refused_domains: d.refused_domains.clone(),
            documents: d.documents.iter().map(DocumentView::from).collect(),
            plan: d.plan.clone(),
            tools: ToolView::all(g),
            created_at: format_millis(g.created_at),
            finished_at: g.finished_at.map(format_millis),
        }
    }
}

/// LLM usage of a generation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TokenUsage {
    pub input: i64,
    pub output: i64,
    pub requests: i64,
}

/// A document a generation fetched; the text itself is kept once per sha256.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocumentView {
    pub url: String,
    /// The URL it was found at (the prompt's, or the page that linked it).
    pub source_url: String,
    /// After redirects and rewrites (a GitHub repository becomes its README).
    pub final_url: String,
    pub content_type: String,
    pub sha256: String,
    pub bytes: i64,
    pub chars: i64,
    pub truncated: bool,
    pub summarised: bool,
    pub discovered_urls: Vec<String>,
    pub fetched_at: String,
}

impl From<&catalog::DocumentRef> for DocumentView {
    fn from(d: &catalog::DocumentRef) -> DocumentView {
        DocumentView {
            url: d.url.clone(),
            source_url: d.source_url.clone(),
            final_url: d.final_url.clone(),
            content_type: d.content_type.clone(),
            sha256: d.sha256.clone(),
            bytes: d.bytes,
            chars: d.chars,
            truncated: d.truncated,
            summarised: d.summarised,
            discovered_urls: d.discovered_urls.clone(),
            fetched_at: format_millis(d.fetched_at),
        }
    }
}

/// A tool with what its generation learned about it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ToolView {
    #[serde(flatten)]
    pub tool: ToolSpec,
    /// Whether the tool calls an API (generated tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_network: Option<bool>,
    /// The generation's self-test of the tool: `status` (`passed`, `failed`, `skipped`),
    /// `attempts`, `error` or `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub self_test: Option<Value>,
    /// How its recent calls went (the served version's tools only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ToolHealthView>,
}

/// A tool's last calls: how many failed, and whether that makes it degraded.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ToolHealthView {
    /// Calls judged (at most `[generation] health_window`).
    pub calls: u32,
    pub failures: u32,
    pub error_rate: f64,
    /// `true` once `error_rate` reaches `[generation] degraded_error_rate` over at least
    /// `degraded_min_calls` calls; `POST .../regenerate {"tools": [name], "with_failures": true}`
    /// repairs it.
    pub degraded: bool,
}

impl From<crate::serve::health::Health> for ToolHealthView {
    fn from(health: crate::serve::health::Health) -> ToolHealthView {
        ToolHealthView {
            calls: health.calls,
            failures: health.failures,
            error_rate: (health.error_rate() * 1000.0).round() / 1000.0,
            degraded: health.degraded,
        }
    }
}

impl ToolView {
    /// A generation's tools, each with what the generation learned about it.
    pub fn all(generation: &GenerationRecord) -> Vec<ToolView> {
        let tools = generation.tools.tools().iter().zip(&generation.tool_extras);
        tools
            .map(|(tool, extras)| ToolView {
                tool: tool.clone(),
                needs_network: extras.needs_network,
                self_test: extras.self_test.clone(),
                health: None,
            })
            .collect()
    }
}

fn registration() -> Trigger {
    Trigger::Registration
}
