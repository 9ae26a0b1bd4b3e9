//! Versions and their lifecycle (`docs/versions.md`): the list, one version, the diff between
//! two, approval, rejection and activation, and documentation drift checks.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

use super::generations::GenerationView;
use crate::catalog::{self, format_millis};
use crate::states::{DriftStatus, GenerationSource, Status, Trigger};
use crate::toolset::ServerId;

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
