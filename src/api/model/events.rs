//! The event streams' `data`: a server's generation status (`GET /admin/servers/{id}/events`)
//! and the daemon's events (`GET /admin/events`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::generate::StatusEvent;
use crate::states::Status;
use crate::toolset::ServerId;

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
