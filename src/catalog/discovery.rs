//! A discovery-mode version's whole API: every operation as a tool (schemas, plan,
//! annotations) and the full-text index that ranks them, stored with the generation in the
//! transaction that finishes it and read by serving the first time the server's operations are
//! searched, described or called.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::db::Catalog;
use super::error::CatalogError;
use super::values::{from_json, to_json};
use crate::toolset::ToolSpec;

/// Every operation of a discovery-mode version, and its search index (opaque here: serving's
/// search builds and reads it).
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveryRecord {
    pub operations: Vec<OperationRecord>,
    pub search_index: Value,
    /// The code every operation's handler ends with, stored once: an operation's handler is
    /// its `tool.handler` followed by this.
    pub executor: String,
}

/// One operation: the tool a listed tool would be (its name is the operation's id in
/// `call_operation`; its handler without the shared executor), and its method and path for
/// signatures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRecord {
    pub tool: ToolSpec,
    pub method: String,
    pub path: String,
}

/// A generation's discovery row, inside the caller's transaction.
pub async fn insert_discovery(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    generation_id: i64,
    discovery: &DiscoveryRecord,
) -> Result<(), CatalogError> {
    sqlx::query("INSERT INTO discovery (generation_id, operations, search_index, executor) VALUES ($1, $2, $3, $4)")
        .bind(generation_id)
        .bind(to_json(&discovery.operations))
        .bind(to_json(&discovery.search_index))
        .bind(discovery.executor.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl Catalog {
    /// The operations and search index of a discovery-mode generation; `None` for a generation
    /// that lists all of its tools.
    pub async fn discovery(&self, generation_id: i64) -> Result<Option<DiscoveryRecord>, CatalogError> {
        let row = sqlx::query_as::<_, (String, String, String)>(
            "SELECT operations, search_index, executor FROM discovery WHERE generation_id = $1",
        )
        .bind(generation_id)
        .fetch_optional(&self.reader)
        .await?;
        let Some((operations, search_index, executor)) = row else { return Ok(None) };
        Ok(Some(DiscoveryRecord {
            operations: from_json(&operations)?,
            search_index: from_json(&search_index)?,
            executor,
        }))
    }
}
