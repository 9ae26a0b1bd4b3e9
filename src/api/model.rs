//! The admin API's request and response bodies: what the handlers accept and send, what the
//! command-line client (`client`) writes and reads, and what the OpenAPI document describes.
//!
//! The field names and shapes here are the wire format; the SDK and integration tests assert on
//! them. Values the daemon names elsewhere (statuses, kinds, outcomes, whitelist entries, tool
//! definitions) are the types from `states`, `toolset` and `whitelist`, so they are spelled once.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

use crate::catalog::{self, GenerationRecord, ServerRecord, format_millis};
use crate::credentials::Injection;
use crate::generate::StatusEvent;
use crate::serve::isolate::{Outcome, ToolResult};
use crate::states::{
    CacheUse, CallOutcome, DriftStatus, GenerationSource, ServerKind, Status, Trigger, UpstreamDecision, Via, text_enum,
};
use crate::toolset::{AuthSetting, CodeModeSettings, OpenApiSettings, OperationFilter, ServerId, ToolSpec};
use crate::whitelist::{RefusedDomain, WhitelistEntry};

// Errors: the shapes live beside the codes they carry (`api::error`).

pub use crate::api::error::{ErrorBody, ErrorDetail, JsonRpcError, JsonRpcErrorData, JsonRpcErrorDetail, OAuthError};

// Registration: `POST /admin/servers`.

/// A registration: a prompt to generate tools from, an API description to derive them from,
/// or a ready toolset. The daemon tells them apart by which of `tools`, `openapi` /
/// `openapi_spec` and `prompt` the body has.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Registration {
    Prompt(PromptRegistration),
    OpenApi(OpenApiRegistration),
    Toolset(ToolsetRegistration),
}

/// Derive a server's tools from an OpenAPI 3.0/3.1 or Swagger 2.0 description, in the
/// background (202): one tool per selected operation, each calling the API as the description
/// says. Works without an LLM; with one, a `prompt` lets it choose the operations and rewrite
/// names and descriptions (never schemas or requests).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApiRegistration {
    /// The server id; derived from `name` (or the description's title) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 8192)]
    pub description: Option<String>,
    /// The description's URL (JSON or YAML; GitHub pages are read raw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openapi: Option<String>,
    /// The description itself: a JSON object, or JSON or YAML text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub openapi_spec: Option<Value>,
    /// Which operations become tools (default: all; past `[generation] max_tools`, see
    /// `discovery`).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "OperationFilter::is_empty")]
    pub operations: OperationFilter,
    /// The API's base URL, replacing the description's `servers` (or `host`/`basePath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Discovery mode: list at most `[generation] max_tools` minus 3 operations as tools, plus
    /// `search_operations`, `describe_operation` and `call_operation`, which reach every
    /// operation. Absent: on when more operations can become tools than `max_tools`; `true` or
    /// `false` forces it (off: the first `max_tools` operations become tools, the rest are left
    /// out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<bool>,
    /// What the tools are for; with an LLM configured it chooses the operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 32768)]
    pub prompt: Option<String>,
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub allow_domains: Vec<String>,
    /// Stop after deriving: store the plan, mount nothing (status `planned`).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// Credentials by name; name one after a security scheme of the description to satisfy it.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing)]
    pub credentials: BTreeMap<String, CredentialRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: Option<String>,
    /// Who may use the mount when it has no `access_token`: `{"mode": "open"}`, or `{"mode":
    /// "oauth", "scopes": [...]}` (needs `[auth.oauth]`). Absent: `[auth.oauth] required` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSetting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
    /// Whether each new version waits for an operator's approval; absent: `[generation]
    /// require_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
}

/// Generate a server's tools from a prompt, in the background (202).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRegistration {
    /// The server id; derived from `name` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub id: Option<String>,
    /// A display name; the id when absent. MCP hosts get it as the server's `title`. Not blank,
    /// without control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*\S[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<String>,
    /// What the server is for and how to use its tools; MCP hosts get it as the server's
    /// `instructions` and may give it to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 8192)]
    pub description: Option<String>,
    /// What the tools should do, with links to the API's documentation.
    #[schema(min_length = 1, max_length = 32768, pattern = r"\S")]
    pub prompt: String,
    /// Domains the handlers may fetch besides those the prompt and its documents name.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub allow_domains: Vec<String>,
    /// Stop after planning: store the plan, mount nothing (status `planned`).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// Credentials for the upstream API, by name (see `PUT .../credentials/{name}`). Their
    /// domains are added to `allow_domains`. Never returned, logged or exported.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing)]
    pub credentials: BTreeMap<String, CredentialRequest>,
    /// The bearer token MCP clients must present on the server's mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: Option<String>,
    /// Who may use the mount when it has no `access_token`: `{"mode": "open"}`, or `{"mode":
    /// "oauth", "scopes": [...]}` (needs `[auth.oauth]`). Absent: `[auth.oauth] required` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSetting>,
    /// Code mode: the `code_execution` tool (`docs/code-mode.md`). Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
    /// Whether each new version waits for an operator's approval before it is served
    /// (`docs/versions.md`); absent: `[generation] require_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
}

/// Register hand-written tools, ready at once without an LLM (201). `GET .../export` answers
/// with this body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetRegistration {
    /// The server id; derived from `name` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub id: Option<String>,
    /// A display name; the id when absent. MCP hosts get it as the server's `title`. Not blank,
    /// without control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*\S[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<String>,
    /// What the server is for and how to use its tools; MCP hosts get it as the server's
    /// `instructions` and may give it to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 8192)]
    pub description: Option<String>,
    /// The domains the handlers may fetch.
    #[serde(default, deserialize_with = "null_as_default")]
    pub allow_domains: Vec<String>,
    pub tools: Vec<ToolSpec>,
    /// Credentials for the upstream API, by name (see `PUT .../credentials/{name}`); their
    /// domains must be in `allow_domains`. Never returned, logged or exported.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing)]
    pub credentials: BTreeMap<String, CredentialRequest>,
    /// The bearer token MCP clients must present on the server's mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: Option<String>,
    /// Who may use the mount when it has no `access_token`: `{"mode": "open"}`, or `{"mode":
    /// "oauth", "scopes": [...]}` (needs `[auth.oauth]`). Absent: `[auth.oauth] required` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSetting>,
    /// Code mode: the `code_execution` tool (`docs/code-mode.md`). Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
}

/// The answer to a registration: 201 for a toolset, 202 for a prompt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Registered {
    Toolset(ToolsetRegistered),
    Prompt(GenerationStarted),
}

impl IntoResponse for Registered {
    fn into_response(self) -> Response {
        match self {
            Registered::Toolset(body) => (StatusCode::CREATED, Json(body)).into_response(),
            Registered::Prompt(body) => (StatusCode::ACCEPTED, Json(body)).into_response(),
        }
    }
}

/// A toolset registered and mounted; its tools are served at once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ToolsetRegistered {
    pub id: ServerId,
    pub name: String,
    /// Always `ready`.
    pub status: Status,
    pub mcp_path: String,
    /// The tool names.
    pub tools: Vec<String>,
    /// Problems that do not stop the tools from running but probably are mistakes: a handler
    /// without `return` (naming the tool), a credential the handlers may fetch hosts beyond
    /// (naming the credential).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

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

// Access tokens.

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessTokenRequest {
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AccessTokenSet {
    pub id: ServerId,
    /// Always `true`.
    pub access_token_set: bool,
    /// The server had an auth setting (open or OAuth), which the token replaced.
    #[serde(default)]
    pub auth_setting_removed: bool,
}

// Servers.

/// `GET /admin/servers`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ServerList {
    pub servers: Vec<ServerSummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ServerSummary {
    pub id: ServerId,
    pub name: String,
    pub kind: ServerKind,
    pub status: Status,
    /// Tools of the generation being served.
    pub tool_count: i64,
    /// Calls started in the last hour (from the call log, every replica's).
    #[serde(default)]
    pub calls_last_hour: i64,
    /// Of those, the calls whose outcome is not `ok`.
    #[serde(default)]
    pub errors_last_hour: i64,
    pub mcp_path: String,
    /// The version being served.
    #[serde(default)]
    pub active_version: Option<i64>,
    /// Tools whose recent calls mostly failed (as far as this daemon has seen them called).
    #[serde(default)]
    pub degraded_tools: Vec<String>,
    /// How the last documentation drift check went: changes found (`drifted`), none, or it could
    /// not run (`failed`).
    #[serde(default)]
    pub drift: Option<DriftStatus>,
    /// RFC 3339, UTC, milliseconds.
    pub created_at: String,
    pub updated_at: String,
}

impl From<catalog::ServerSummary> for ServerSummary {
    fn from(row: catalog::ServerSummary) -> ServerSummary {
        ServerSummary {
            mcp_path: row.id.mcp_path(),
            id: row.id,
            name: row.name,
            kind: row.kind,
            status: row.status,
            tool_count: row.tool_count,
            calls_last_hour: 0,
            errors_last_hour: 0,
            active_version: row.active_version,
            degraded_tools: Vec::new(),
            drift: row.drift.map(|drift| drift.status),
            created_at: format_millis(row.created_at),
            updated_at: format_millis(row.updated_at),
        }
    }
}

/// `GET /admin/servers/{id}`: everything about a server.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ServerView {
    pub id: ServerId,
    pub name: String,
    /// The registration's description (the MCP `instructions`).
    pub description: Option<String>,
    pub kind: ServerKind,
    pub status: Status,
    /// Whether a generation is being served (a server keeps serving during a regeneration).
    pub serving: bool,
    pub access_token_set: bool,
    /// Who may use the mount, as it applies now.
    #[serde(default)]
    pub auth: AuthView,
    /// Names of the server's upstream credentials (`GET .../credentials` has the details; values
    /// are never shown).
    #[serde(default)]
    pub credentials: Vec<String>,
    /// Code-mode settings (`PUT .../code-mode`); absent when never set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
    pub mcp_path: String,
    /// The prompt of a prompt registration.
    pub prompt: Option<String>,
    /// Where an API-description server's description comes from and which operations it uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openapi: Option<OpenApiSettings>,
    /// The registration's `allow_domains`.
    pub allow_domains: Vec<String>,
    /// The served generation's whitelist, each domain with its provenance.
    pub whitelist: Vec<WhitelistEntry>,
    /// The served generation's tools, with their handlers.
    pub tools: Vec<ToolView>,
    /// The generation being served.
    pub generation: Option<GenerationView>,
    /// The newest generation when it is not the one being served (running, failed, planned,
    /// awaiting approval or rejected).
    pub latest_generation: Option<GenerationView>,
    /// Whether new versions wait for approval, as the server sets it; `null`: it follows
    /// `[generation] require_approval`.
    #[serde(default)]
    pub require_approval: Option<bool>,
    /// The last documentation drift check, when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftView>,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&ServerRecord> for ServerView {
    fn from(record: &ServerRecord) -> ServerView {
        let served = record.generation.as_ref();
        ServerView {
            id: record.id.clone(),
            name: record.name.clone(),
            description: record.description.clone(),
            kind: record.kind,
            status: record.status,
            serving: served.is_some(),
            access_token_set: record.access_token_sha256.is_some(),
            // Depends on the daemon's `[auth.oauth] required`: `GET /admin/servers/{id}` fills it in.
            auth: AuthView::default(),
            credentials: record.credentials.clone(),
            code_mode: record.code_mode.clone(),
            mcp_path: record.id.mcp_path(),
            prompt: record.prompt.clone(),
            openapi: record.openapi.clone(),
            allow_domains: record.allow_domains.clone(),
            whitelist: served.map(|g| g.whitelist.entries().to_vec()).unwrap_or_default(),
            tools: served.map(ToolView::all).unwrap_or_default(),
            generation: served.map(GenerationView::from),
            latest_generation: record.latest_generation.as_ref().map(GenerationView::from),
            require_approval: record.require_approval,
            drift: record.drift.as_ref().map(DriftView::from),
            created_at: format_millis(record.created_at),
            updated_at: format_millis(record.updated_at),
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
    fn all(generation: &GenerationRecord) -> Vec<ToolView> {
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

/// A `status` or `done` event of `GET /admin/servers/{id}/events` (its `data`, as JSON).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GenerationEvent {
    pub id: ServerId,
    pub status: Status,
    /// The generation the status is of; 0 when the server has none.
    pub generation_id: i64,
    /// Why the generation failed, with status `failed`.
    pub error: Option<String>,
}

impl From<&StatusEvent> for GenerationEvent {
    fn from(event: &StatusEvent) -> GenerationEvent {
        GenerationEvent {
            id: event.id.clone(),
            status: event.status,
            generation_id: event.generation_id,
            error: event.error.clone(),
        }
    }
}

// Versions (`docs/versions.md`).

fn registration() -> Trigger {
    Trigger::Registration
}

/// `GET /admin/servers/{id}/versions`: every version, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionList {
    pub id: ServerId,
    /// The version being served.
    pub active_version: Option<i64>,
    pub versions: Vec<VersionSummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionSummary {
    pub version: i64,
    pub generation_id: i64,
    /// Whether this version is the one being served.
    pub active: bool,
    pub status: Status,
    pub source: GenerationSource,
    pub triggered_by: Trigger,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_detail: Option<String>,
    pub model: Option<String>,
    pub prompt_hash: Option<String>,
    pub content_hash: Option<String>,
    pub cache_hit: bool,
    pub dry_run: bool,
    pub tools: Vec<String>,
    /// Self-test outcomes counted by status: `{"passed": 2, "skipped": 1}`.
    pub self_test: BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub review: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

impl VersionSummary {
    pub fn new(row: catalog::VersionSummary, active: Option<i64>) -> VersionSummary {
        VersionSummary {
            version: row.version,
            generation_id: row.generation_id,
            active: Some(row.generation_id) == active,
            status: row.status,
            source: row.source,
            triggered_by: row.triggered_by,
            trigger_detail: row.trigger_detail,
            model: row.model,
            prompt_hash: row.prompt_hash,
            content_hash: row.content_hash,
            cache_hit: row.cache_hit,
            dry_run: row.dry_run,
            tools: row.tools,
            self_test: row.self_test,
            review: row.review,
            error: row.error,
            created_at: format_millis(row.created_at),
            finished_at: row.finished_at.map(format_millis),
        }
    }
}

/// `GET /admin/servers/{id}/versions/{n}`: one version whole, and for one awaiting approval its
/// diff against the active version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionView {
    #[serde(flatten)]
    pub generation: GenerationView,
    /// Whether this version is the one being served.
    pub active: bool,
    /// What approving it would change (versions awaiting approval only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_from_active: Option<VersionDiff>,
}

/// `GET /admin/servers/{id}/versions/{a}/diff/{b}`: what changes going from `a` to `b`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct VersionDiff {
    pub from: i64,
    pub to: i64,
    /// Tools only in `to`.
    pub added: Vec<String>,
    /// Tools only in `from`.
    pub removed: Vec<String>,
    /// A tool of `from` that reappears in `to` under another name with the same handler or the
    /// same input schema.
    pub renamed: Vec<Renamed>,
    /// Tools in both (or renamed) whose definition or handler changed.
    pub changed: Vec<ToolChange>,
    /// Whitelist domains only in `to` / only in `from`.
    pub whitelist_added: Vec<String>,
    pub whitelist_removed: Vec<String>,
    /// Credentials the tools need (API-description servers' security schemes): only in `to` /
    /// only in `from`.
    pub credentials_added: Vec<String>,
    pub credentials_removed: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Renamed {
    pub from: String,
    pub to: String,
}

/// How one tool differs between two versions.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ToolChange {
    /// Its name in `to`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<TextChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<TextChange>,
    /// Structural changes (`op`, `path`, `from`, `to`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_schema: Vec<ValueChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_schema: Vec<ValueChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<ValueChange>,
    /// The handler's change as a unified diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct TextChange {
    pub from: Option<String>,
    pub to: Option<String>,
}

/// One structural change in a JSON value: `add`, `remove` or `replace` at a JSON Pointer path.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ValueChange {
    pub op: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub from: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub to: Option<Value>,
}

/// `POST /admin/servers/{id}/versions/{n}/reject`; the body may be empty.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectRequest {
    /// Why, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2000)]
    pub reason: Option<String>,
}

/// `POST /admin/servers/{id}/activate`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivateRequest {
    /// A ready version of the server.
    pub version: i64,
}

/// `PUT /admin/servers/{id}/approval`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSetting {
    /// Whether new versions wait for approval; `null`: follow `[generation] require_approval`.
    pub require_approval: Option<bool>,
}

/// The answer to approve, reject and activate.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionChanged {
    pub id: ServerId,
    pub version: i64,
    pub status: Status,
    /// The version being served afterwards.
    pub active_version: Option<i64>,
}

/// A server's last documentation drift check.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DriftView {
    /// `checking`, `unchanged`, `drifted` (changes found; a candidate version was started) or
    /// `failed` (the documents could not be fetched, or a restart interrupted the check).
    pub status: DriftStatus,
    pub checked_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The newest drift event's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<i64>,
    /// A candidate version a drift started awaits approval; the documents are not checked again
    /// until it is approved or rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_version: Option<i64>,
}

impl From<&catalog::DriftState> for DriftView {
    fn from(state: &catalog::DriftState) -> DriftView {
        DriftView {
            status: state.status,
            checked_at: format_millis(state.checked_at),
            error: state.error.clone(),
            last_event: state.last_event,
            awaiting_version: state.awaiting_version,
        }
    }
}

/// `POST /admin/servers/{id}/check-drift`: what the check found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DriftReport {
    pub id: ServerId,
    pub drift: DriftView,
    /// The documents that changed: `url`, `before_sha256`, `after_sha256`, `before_bytes`,
    /// `after_bytes` (empty when none did).
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<Value>,
    /// The drift event recorded for the changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<i64>,
    /// The candidate version's generation, when one started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_id: Option<i64>,
}

/// An event of `GET /admin/events` (its `data`, as JSON); the SSE event name is `kind`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DaemonEvent {
    /// `status` (a generation's status changed), `drift` (a server's documentation changed) or
    /// `version` (a version was approved, rejected or activated); `lagged` when a slow reader
    /// missed events.
    pub kind: String,
    /// The server; absent for `lagged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<ServerId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// A failure's error, a drift's changed URLs, a version change's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

// Calls.

/// `POST /admin/servers/{id}/tools/{tool}/call`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The tool's arguments, checked against its input schema.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub arguments: Value,
}

/// The answer to an admin call: the tool's result and where the call log has it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CallResult {
    pub execution_id: String,
    /// How the handler run ended; the call log says `denied` where the run failed after the
    /// egress policy refused a request.
    pub outcome: Outcome,
    pub result: McpResult,
}

/// A tool result as MCP's `CallToolResult` has it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct McpResult {
    /// MCP content items, e.g. `{"type": "text", "text": "..."}`.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub content: Vec<Value>,
    #[serde(rename = "structuredContent", default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub structured_content: Option<Value>,
    #[serde(rename = "isError", default)]
    pub is_error: bool,
}

impl From<ToolResult> for McpResult {
    fn from(result: ToolResult) -> McpResult {
        McpResult { content: result.content, structured_content: result.structured_content, is_error: result.is_error }
    }
}

/// How a mount lets requests in: `GET /admin/servers/{id}` (`auth`), `PUT /admin/servers/{id}/auth`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct AuthView {
    pub mode: AuthMode,
    /// Scopes an OAuth token needs on this mount besides the daemon's scope model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// `server` when the server sets its mode (an access token or an auth setting), `default`
    /// when `[auth.oauth] required` decides.
    pub source: String,
}

text_enum! {
    /// Who may use a mount, as it applies now.
    #[derive(Default)]
    pub enum AuthMode ("auth mode") {
        /// Any client that reaches the daemon.
        #[default]
        Open = "open",
        /// Clients that send the server's static access token.
        AccessToken = "access_token",
        /// Clients with an OAuth token from the daemon's identity provider.
        OAuth = "oauth",
    }
}

impl AuthView {
    /// The mode in force for a server with (or without) a token and this setting, on a daemon with
    /// `[auth.oauth] required` = `required` (the same rule as the mount's door).
    pub fn of(access_token: bool, setting: Option<&AuthSetting>, required: bool) -> AuthView {
        let source = if !access_token && setting.is_none() { "default" } else { "server" };
        let (mode, scopes) = match super::door::door(access_token.then_some(()), setting, required) {
            super::door::Door::Open => (AuthMode::Open, Vec::new()),
            super::door::Door::AccessToken(_) => (AuthMode::AccessToken, Vec::new()),
            super::door::Door::OAuth(scopes) => (AuthMode::OAuth, scopes.to_vec()),
        };
        AuthView { mode, scopes, source: source.into() }
    }
}

/// `PUT /admin/servers/{id}/auth`: the setting now in force.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthSet {
    pub id: ServerId,
    pub auth: AuthView,
    /// The server had a static access token, which the setting replaced.
    pub access_token_removed: bool,
}

/// RFC 9728 Protected Resource Metadata.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProtectedResource {
    /// The mount's canonical URL: the audience its tokens must carry (RFC 8707).
    pub resource: String,
    /// The issuer, exactly as configured.
    pub authorization_servers: Vec<String>,
    /// Tokens are accepted in the `Authorization` header only.
    pub bearer_methods_supported: Vec<String>,
    /// The scopes this resource may ask for (the daemon's scope model and the server's own
    /// scopes); left out when it asks for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
}

impl ProtectedResource {
    pub fn new(oauth: &crate::config::OAuthConfig, resource: String, scopes: Vec<String>) -> ProtectedResource {
        ProtectedResource {
            resource,
            authorization_servers: vec![oauth.issuer.clone()],
            bearer_methods_supported: vec!["header".into()],
            scopes_supported: scopes,
        }
    }
}

/// `GET /admin/overview`: this daemon's calls and load over the last minutes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Overview {
    /// Seconds between two points.
    pub interval_seconds: u64,
    /// How far back the points go.
    pub window_seconds: u64,
    /// The daemon these figures are from (`[catalog] replica_id`).
    pub replica: String,
    pub mounted_servers: usize,
    /// Oldest first; empty until the second sample.
    pub samples: Vec<OverviewPoint>,
}

/// One sampling interval.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OverviewPoint {
    /// The end of the interval (RFC 3339, UTC).
    pub at: String,
    pub calls_per_second: f64,
    /// Calls per second whose outcome was not `ok`.
    pub errors_per_second: f64,
    /// Median latency of the calls that finished in the interval (absent without calls),
    /// interpolated within the buckets of `mcpbootd_call_duration_seconds`.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// At the end of the interval: calls running or parked, calls waiting for admission, isolate
    /// workers busy of all, isolate memory in use and its budget.
    pub in_flight_calls: usize,
    pub queue_depth: usize,
    pub busy_workers: usize,
    pub workers: usize,
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
}

/// `GET /admin/servers/{id}/calls?limit=N&tool=…&outcome=…&since=…&until=…&execution_id=…`
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CallsQuery {
    /// How many calls, newest first: 1 to 1000, 50 when absent.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// Only calls that ended this way.
    pub outcome: Option<CallOutcome>,
    /// Only calls started at or after this time: RFC 3339 in UTC, e.g. `2026-11-25T21:00:00Z`.
    pub since: Option<String>,
    /// Only calls started before this time (RFC 3339 in UTC).
    pub until: Option<String>,
    /// Only this call (the `execution_id` a call's result names), also when a script made it.
    pub execution_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CallList {
    pub calls: Vec<CallEntry>,
}

/// One finished call, with the outbound requests it made.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CallEntry {
    pub execution_id: String,
    pub generation_id: i64,
    pub tool: String,
    pub via: Via,
    pub started_at: String,
    pub duration_us: i64,
    pub outcome: CallOutcome,
    pub error: Option<String>,
    pub fetches: i64,
    /// What the handler wrote with `console`.
    pub console: String,
    pub egress: Vec<EgressEntry>,
    /// The code-mode script that made this call (`via: script`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_execution_id: Option<String>,
    /// A script run's code (`tool: code_execution`), cut at `[code_mode] log_code_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Who called, for a call made with an OAuth token: the token's `sub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The OAuth client the caller used (the token's `client_id`, or `azp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// A script run's tool calls, oldest first, whichever server they went to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(no_recursion)]
    pub children: Vec<CallEntry>,
}

impl From<catalog::CallRecord> for CallEntry {
    fn from(call: catalog::CallRecord) -> CallEntry {
        CallEntry {
            execution_id: call.execution_id,
            generation_id: call.generation_id,
            tool: call.tool,
            via: call.via,
            started_at: format_millis(call.started_at),
            duration_us: call.duration_us,
            outcome: call.outcome,
            error: call.error,
            fetches: call.fetches,
            console: call.console,
            egress: call.egress.into_iter().map(EgressEntry::from).collect(),
            parent_execution_id: call.parent_execution_id,
            code: call.code,
            subject: call.subject,
            client_id: call.client_id,
            children: call.children.into_iter().map(CallEntry::from).collect(),
        }
    }
}

/// One outbound request of a call, allowed or denied by the egress policy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EgressEntry {
    pub method: String,
    pub host: String,
    pub path: String,
    pub allowed: bool,
    /// The upstream's HTTP status.
    pub status: Option<i64>,
    pub bytes: i64,
    pub duration_us: i64,
    /// Why it was denied or failed.
    pub reason: Option<String>,
    /// Names of the credentials the daemon added to the request (never their values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// How many credential values the daemon took out of the response (replaced by
    /// `[redacted:NAME]`) before the handler saw it: the upstream echoes credentials.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scrubs: i64,
    /// What the daemon's upstream protection did with the request: waited for the origin's
    /// `Retry-After` or the server's rate limit for it, refused it for either or for the origin's
    /// open circuit breaker, or let it through as the breaker's probe. Absent: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<UpstreamDecision>,
    /// How long the request waited before it was sent, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<i64>,
    /// How the daemon's HTTP cache took part in a GET: `hit` (not sent), `revalidated` (the
    /// upstream answered 304), `miss` or `stored`. Absent: not looked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheUse>,
}

impl From<catalog::EgressRecord> for EgressEntry {
    fn from(e: catalog::EgressRecord) -> EgressEntry {
        EgressEntry {
            method: e.method,
            host: e.host,
            path: e.path,
            allowed: e.allowed,
            status: e.status,
            bytes: e.bytes,
            duration_us: e.duration_us,
            reason: e.reason,
            credentials: e.credentials,
            scrubs: e.scrubs,
            decision: e.decision,
            waited_ms: e.waited_ms,
            cache: e.cache,
        }
    }
}

// Credentials: `/admin/servers/{id}/credentials`.

/// A credential for an upstream API: its value (or `per_user`), where it may be sent, and how it
/// is added.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialRequest {
    /// The secret. Stored encrypted; no response, log or export ever shows it again. Absent for a
    /// `per_user` credential.
    #[serde(default)]
    #[schema(min_length = 8, max_length = 8192)]
    pub value: Option<String>,
    /// Each caller's own value instead of one: `{"kind": "oauth2", "authorize_url", "token_url",
    /// "client_id", "client_secret", "scopes"}` or `{"kind": "api_key"}`
    /// (docs/connected-accounts.md). Needs OAuth on the server's mount.
    #[serde(default)]
    #[schema(value_type = Option<PerUserSettings>)]
    pub per_user: Option<PerUserRequest>,
    /// Hosts that get it (and their subdomains); each must be on the server's whitelist.
    pub domains: Vec<String>,
    /// `{"header": "Authorization", "format": "Bearer {value}"}`, `{"query": "api_key"}` or
    /// `{"basic": {"username": "..."}}`.
    pub inject: Injection,
}

impl std::fmt::Debug for CredentialRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRequest")
            .field("per_user", &self.per_user.as_ref().map(PerUserRequest::kind))
            .field("domains", &self.domains)
            .field("inject", &self.inject)
            .finish_non_exhaustive()
    }
}

/// A per-user credential as registered: how each user's value is obtained, and for `oauth2` the
/// daemon's client secret at the upstream's authorization server (sealed like a value, never
/// shown again).
#[derive(Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PerUserRequest {
    Oauth2 {
        authorize_url: String,
        token_url: String,
        client_id: String,
        client_secret: String,
        #[serde(default)]
        scopes: Vec<String>,
        /// Extra parameters for the authorization request (`audience`, `resource`, `prompt`, …).
        #[serde(default)]
        authorize_params: BTreeMap<String, String>,
        /// RFC 7009 endpoint called when a connection is deleted.
        #[serde(default)]
        revocation_url: Option<String>,
    },
    ApiKey,
}

/// A per-user credential's settings as the API describes them, in one shape for both kinds:
/// `kind` says which fields apply (the OAuth ones for `oauth2`, none for `api_key`).
/// `client_secret` is accepted when setting the credential and never shown.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PerUserSettings {
    #[schema(pattern = "^(oauth2|api_key)$")]
    kind: String,
    authorize_url: Option<String>,
    token_url: Option<String>,
    client_id: Option<String>,
    #[schema(write_only)]
    client_secret: Option<String>,
    scopes: Option<Vec<String>>,
    /// Extra parameters for the authorization request (`audience`, `resource`, `prompt`, …).
    authorize_params: Option<BTreeMap<String, String>>,
    /// RFC 7009 endpoint called when a connection is deleted.
    revocation_url: Option<String>,
}

impl PerUserRequest {
    /// What is stored in the clear, and the client secret to seal.
    pub fn split(self) -> (crate::credentials::PerUser, Option<String>) {
        match self {
            PerUserRequest::Oauth2 {
                authorize_url,
                token_url,
                client_id,
                client_secret,
                scopes,
                authorize_params,
                revocation_url,
            } => (
                crate::credentials::PerUser::Oauth2(crate::credentials::per_user::OAuth2Client {
                    authorize_url,
                    token_url,
                    client_id,
                    scopes,
                    authorize_params,
                    revocation_url,
                }),
                Some(client_secret),
            ),
            PerUserRequest::ApiKey => (crate::credentials::PerUser::ApiKey, None),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            PerUserRequest::Oauth2 { .. } => "oauth2",
            PerUserRequest::ApiKey => "api_key",
        }
    }
}

/// A credential as listed: never its value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialView {
    pub name: String,
    /// How each caller's own value is obtained, for a per-user credential (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<PerUserSettings>)]
    pub per_user: Option<crate::credentials::PerUser>,
    pub domains: Vec<String>,
    pub inject: Injection,
    /// The first 8 hex digits of the value's sha256, to tell values apart.
    pub fingerprint: String,
    pub created_at: i64,
    pub rotated_at: i64,
    /// In the answer to setting a credential: the hosts the server's handlers may fetch that the
    /// credential is not sent to (see README, *Credentials for upstream APIs*).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A server's credentials, by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialList {
    pub credentials: Vec<CredentialView>,
}

impl From<catalog::CredentialRecord> for CredentialView {
    fn from(record: catalog::CredentialRecord) -> CredentialView {
        CredentialView {
            per_user: record.binding.per_user,
            name: record.name,
            domains: record.binding.domains,
            inject: record.binding.inject,
            fingerprint: record.fingerprint,
            created_at: record.created_at,
            rotated_at: record.rotated_at,
            warnings: Vec::new(),
        }
    }
}

// Probes.

text_enum! {
    pub enum LiveStatus ("liveness") {
        Ok = "ok",
    }
}

text_enum! {
    pub enum ReadyStatus ("readiness") {
        Ready = "ready",
        NotReady = "not_ready",
    }
}

text_enum! {
    pub enum CatalogHealth ("catalog health") {
        Ok = "ok",
        Unavailable = "unavailable",
        /// The catalog answers reads but refuses writes (a full disk, read-only files): servers
        /// are served, changes are refused.
        Unwritable = "unwritable",
    }
}

/// `GET /admin/backup`: the bytes of a SQLite database file. Only describes the response in the
/// OpenAPI document; the handler streams the file.
#[derive(Debug, Clone, ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct CatalogBackup(pub Vec<u8>);

/// `GET /healthz`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Liveness {
    pub status: LiveStatus,
}

/// `GET /readyz`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    pub status: ReadyStatus,
    pub catalog: CatalogHealth,
    /// Whether every ready server in the catalog has been mounted.
    pub servers_mounted: bool,
    /// How many servers are mounted.
    pub mounted: usize,
    /// What runs the handlers' JavaScript: `quickjs-wasm` (QuickJS in WebAssembly under Wasmtime).
    pub engine: String,
    /// With `[auth.oauth]`: whether the identity provider has been discovered (`ok`); until then
    /// (`unavailable`) the OAuth mounts answer 503 while the others serve, so the daemon stays ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<CatalogHealth>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn is_false(value: &bool) -> bool {
    !value
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// `null` as the default, as if the field were absent.
fn null_as_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(deserializer: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

// Connected accounts: `/admin/servers/{id}/connections`.

/// One caller's connection to a per-user credential: never a token.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConnectionView {
    pub id: String,
    pub credential: String,
    /// The caller as the identity provider names them (`sub`).
    pub subject: String,
    pub issuer: String,
    /// The scopes granted, space separated (empty for an API key).
    pub scopes: String,
    pub connected_at: i64,
    /// When the access token expires (milliseconds); it is refreshed when next used after that.
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

/// A server's connections, by credential and subject.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConnectionList {
    pub connections: Vec<ConnectionView>,
}

impl From<catalog::ConnectionRecord> for ConnectionView {
    fn from(record: catalog::ConnectionRecord) -> ConnectionView {
        ConnectionView {
            id: record.id,
            credential: record.credential,
            subject: record.subject,
            issuer: record.issuer,
            scopes: record.scopes,
            connected_at: record.connected_at,
            expires_at: record.expires_at,
            last_used_at: record.last_used_at,
        }
    }
}

// Traffic limits: `/admin/servers/{id}/limits`.

/// A server's traffic limits: its own, the daemon's defaults, and what applies.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LimitsView {
    pub id: String,
    /// What the server sets (keys left out inherit `defaults`).
    pub limits: crate::toolset::ServerLimits,
    /// The daemon's `[limits]`.
    pub defaults: EffectiveLimitsView,
    /// What applies to the server's calls (0: off).
    pub effective: EffectiveLimitsView,
}

/// One set of door limits (0: off).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EffectiveLimitsView {
    pub per_caller_per_minute: u32,
    pub per_server_per_minute: u32,
    pub per_tool_per_minute: u32,
    pub per_caller_concurrency: u32,
}

impl From<crate::serve::quota::EffectiveLimits> for EffectiveLimitsView {
    fn from(limits: crate::serve::quota::EffectiveLimits) -> EffectiveLimitsView {
        EffectiveLimitsView {
            per_caller_per_minute: limits.per_caller_per_minute,
            per_server_per_minute: limits.per_server_per_minute,
            per_tool_per_minute: limits.per_tool_per_minute,
            per_caller_concurrency: limits.per_caller_concurrency,
        }
    }
}
