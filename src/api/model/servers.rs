//! Servers: the list (`GET /admin/servers`) and everything about one (`GET
//! /admin/servers/{id}`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::AuthView;
use super::generations::{GenerationView, ToolView};
use super::versions::DriftView;
use crate::catalog::{self, ServerRecord, format_millis};
use crate::states::{DriftStatus, ServerKind, Status};
use crate::toolset::{CodeModeSettings, OpenApiSettings, ServerId};
use crate::whitelist::WhitelistEntry;

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
