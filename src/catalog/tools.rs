//! A generation's tools: stored in the transaction that finishes the generation (or registers
//! the toolset), in order, with what generation learned about each.

use serde::Serialize;
use serde_json::Value;

use super::error::CatalogError;
use super::sql::insert_values;
use super::values::{from_json, from_optional_json, to_json};
use crate::toolset::ToolSpec;

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ToolExtras {
    pub needs_network: Option<bool>,
    pub self_test: Option<Value>,
}

/// A tool row as stored, its JSON columns serialised.
pub struct ToolRow {
    name: String,
    title: Option<String>,
    description: String,
    input_schema: String,
    output_schema: Option<String>,
    handler: String,
    annotations: Option<String>,
    needs_network: Option<bool>,
    self_test: Option<String>,
}

impl ToolRow {
    pub fn new(tool: &ToolSpec, extras: &ToolExtras) -> ToolRow {
        ToolRow {
            name: tool.name.clone(),
            title: tool.title.clone(),
            description: tool.description.clone(),
            input_schema: to_json(&tool.input_schema),
            output_schema: tool.output_schema.as_ref().map(to_json),
            handler: tool.handler.clone(),
            annotations: tool.annotations.as_ref().map(to_json),
            needs_network: extras.needs_network,
            self_test: extras.self_test.as_ref().map(to_json),
        }
    }
}

/// A generation's tool rows, in one statement inside the caller's transaction.
pub async fn insert_tools(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    generation_id: i64,
    tools: &[ToolRow],
) -> Result<(), CatalogError> {
    if tools.is_empty() {
        return Ok(());
    }
    let sql = insert_values(
        "INSERT INTO tools (generation_id, position, name, title, description, input_schema, output_schema, handler,
             annotations, needs_network, self_test)",
        11,
        tools.len(),
    );
    let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (position, tool) in tools.iter().enumerate() {
        insert = insert
            .bind(generation_id)
            .bind(position as i64)
            .bind(tool.name.as_str())
            .bind(tool.title.as_deref())
            .bind(tool.description.as_str())
            .bind(tool.input_schema.as_str())
            .bind(tool.output_schema.as_deref())
            .bind(tool.handler.as_str())
            .bind(tool.annotations.as_deref())
            .bind(tool.needs_network)
            .bind(tool.self_test.as_deref());
    }
    insert.execute(&mut **tx).await?;
    Ok(())
}

/// A tool as stored: the `tools` columns a [`ToolSpec`] is made of, its schemas and annotations
/// still JSON text.
#[derive(sqlx::FromRow)]
pub struct StoredTool {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: String,
    pub output_schema: Option<String>,
    pub handler: String,
    pub annotations: Option<String>,
}

impl TryFrom<StoredTool> for ToolSpec {
    type Error = CatalogError;

    fn try_from(row: StoredTool) -> Result<ToolSpec, CatalogError> {
        Ok(ToolSpec {
            name: row.name,
            title: row.title,
            description: row.description,
            input_schema: from_json(&row.input_schema)?,
            output_schema: from_optional_json(row.output_schema.as_deref())?,
            handler: row.handler,
            annotations: from_optional_json(row.annotations.as_deref())?,
        })
    }
}
