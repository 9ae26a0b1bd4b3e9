//! Calls: calling a tool through the admin API (`POST /admin/servers/{id}/tools/{tool}/call`)
//! and reading the call log (`GET /admin/servers/{id}/calls`), each call with its outbound
//! requests.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::catalog::{self, format_millis};
use crate::serve::isolate::{Outcome, ToolResult};
use crate::states::{CacheUse, CallOutcome, UpstreamDecision, Via};

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

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}
