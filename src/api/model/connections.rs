//! Connected accounts (`/admin/servers/{id}/connections`): each caller's connection to a
//! per-user credential, never its token.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::catalog;

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
