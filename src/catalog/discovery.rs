//! A discovery-mode version's whole API, stored with the generation in the transaction that
//! finishes it: the full-text index that ranks its operations and the executor their handlers
//! end with (`discovery`, one row), and every operation as a tool (`discovery_operations`, one
//! row each). Serving reads them lazily: the index with each operation's name, request, summary
//! and required arguments when the server is first searched ([`Catalog::discovery_index`]),
//! and one operation's tool when it is described or called ([`Catalog::discovery_operation`]),
//! so a large API's schemas and handlers are read only for the operations used.

use super::db::Catalog;
use super::error::CatalogError;
use super::sql::insert_values;
use super::values::{from_json, to_json};
use crate::toolset::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Characters of an operation's title (else description) kept as its summary.
const SUMMARY_CHARS: usize = 160;
/// Operations written per statement: eight values each stays far below both engines' limits
/// on bound values.
const ROWS_PER_INSERT: usize = 200;

/// Every operation of a discovery-mode version, and its search index (opaque here: serving's
/// search builds and reads it), as a generation writes them.
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

/// What serving reads first: the search index, the executor and a short entry per operation,
/// in the index's order; no schema or handler.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveryIndex {
    pub search_index: Value,
    pub executor: String,
    pub operations: Vec<OperationEntry>,
}

/// An operation as a search hit shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationEntry {
    /// Its id: the tool's name.
    pub name: String,
    pub method: String,
    pub path: String,
    /// Its title, else its description, cut to [`SUMMARY_CHARS`].
    pub summary: String,
    /// The names of its required arguments.
    pub required: Vec<String>,
}

impl OperationRecord {
    fn summary(&self) -> String {
        self.tool.title.as_deref().unwrap_or(&self.tool.description).chars().take(SUMMARY_CHARS).collect()
    }

    fn required(&self) -> Vec<String> {
        let required = self.tool.input_schema.get("required").and_then(Value::as_array);
        required
            .map(|names| names.iter().filter_map(|name| name.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }
}

/// A generation's discovery rows, inside the caller's transaction.
pub async fn insert_discovery(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    generation_id: i64,
    discovery: &DiscoveryRecord,
) -> Result<(), CatalogError> {
    sqlx::query("INSERT INTO discovery (generation_id, search_index, executor) VALUES ($1, $2, $3)")
        .bind(generation_id)
        .bind(to_json(&discovery.search_index))
        .bind(discovery.executor.as_str())
        .execute(&mut **tx)
        .await?;
    let numbered: Vec<(usize, &OperationRecord)> = discovery.operations.iter().enumerate().collect();
    for chunk in numbered.chunks(ROWS_PER_INSERT) {
        let sql = insert_values(
            "INSERT INTO discovery_operations (generation_id, name, position, method, path, summary, required, tool)",
            8,
            chunk.len(),
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (position, operation) in chunk {
            query = query
                .bind(generation_id)
                .bind(operation.tool.name.as_str())
                .bind(*position as i64)
                .bind(operation.method.as_str())
                .bind(operation.path.as_str())
                .bind(operation.summary())
                .bind(to_json(&operation.required()))
                .bind(to_json(&operation.tool));
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

impl Catalog {
    /// The search index, executor and operation entries of a discovery-mode generation;
    /// `None` for a generation that lists all of its tools.
    pub async fn discovery_index(&self, generation_id: i64) -> Result<Option<DiscoveryIndex>, CatalogError> {
        let row = sqlx::query_as::<_, (String, String)>(
            "SELECT search_index, executor FROM discovery WHERE generation_id = $1",
        )
        .bind(generation_id)
        .fetch_optional(&self.reader)
        .await?;
        let Some((search_index, executor)) = row else { return Ok(None) };
        let rows = sqlx::query_as::<_, EntryRow>(
            "SELECT name, method, path, summary, required FROM discovery_operations
             WHERE generation_id = $1 ORDER BY position",
        )
        .bind(generation_id)
        .fetch_all(&self.reader)
        .await?;
        let operations = rows.into_iter().map(OperationEntry::try_from).collect::<Result<Vec<_>, CatalogError>>()?;
        Ok(Some(DiscoveryIndex { search_index: from_json(&search_index)?, executor, operations }))
    }

    /// The code every operation's handler of a discovery-mode generation ends with; `None` for
    /// a generation that lists all of its tools.
    pub async fn discovery_executor(&self, generation_id: i64) -> Result<Option<String>, CatalogError> {
        Ok(sqlx::query_scalar("SELECT executor FROM discovery WHERE generation_id = $1")
            .bind(generation_id)
            .fetch_optional(&self.reader)
            .await?)
    }

    /// One operation of a discovery-mode generation by its id; `None` if it has no such
    /// operation.
    pub async fn discovery_operation(
        &self,
        generation_id: i64,
        name: &str,
    ) -> Result<Option<OperationRecord>, CatalogError> {
        let row = sqlx::query_as::<_, (String, String, String)>(
            "SELECT method, path, tool FROM discovery_operations WHERE generation_id = $1 AND name = $2",
        )
        .bind(generation_id)
        .bind(name)
        .fetch_optional(&self.reader)
        .await?;
        let Some((method, path, tool)) = row else { return Ok(None) };
        Ok(Some(OperationRecord { tool: from_json(&tool)?, method, path }))
    }
}

/// An operation's entry as stored: its required arguments are a JSON array.
#[derive(sqlx::FromRow)]
struct EntryRow {
    name: String,
    method: String,
    path: String,
    summary: String,
    required: String,
}

impl TryFrom<EntryRow> for OperationEntry {
    type Error = CatalogError;

    fn try_from(row: EntryRow) -> Result<Self, CatalogError> {
        let EntryRow { name, method, path, summary, required } = row;
        Ok(OperationEntry { name, method, path, summary, required: from_json(&required)? })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, title: Option<&str>, description: &str, required: &[&str]) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: title.map(str::to_owned),
            description: description.into(),
            input_schema: json!({"type": "object", "required": required}).as_object().unwrap().clone(),
            output_schema: None,
            handler: format!("return {name:?};"),
            annotations: None,
        }
    }

    /// Two operations as a version stored them whole: one with a title and a required argument,
    /// one whose summary comes from a long description.
    fn whole_api() -> Vec<OperationRecord> {
        vec![
            OperationRecord {
                tool: tool("get_pet", Some("Get a pet"), "One pet.", &["petId"]),
                method: "GET".into(),
                path: "/pets/{petId}".into(),
            },
            OperationRecord {
                tool: tool("list_pets", None, &"é".repeat(300), &[]),
                method: "GET".into(),
                path: "/pets".into(),
            },
        ]
    }

    /// What the migration must have made of [`whole_api`]: each operation's row, in the index's
    /// order, with its summary and required arguments, and the tool it was stored with.
    async fn assert_carried_over(catalog: &Catalog) {
        let operations = whole_api();
        let index = catalog.discovery_index(7).await.unwrap().unwrap();
        assert_eq!(index.executor, "run()");
        let entries: Vec<(&str, &str, usize, &[String])> = index
            .operations
            .iter()
            .map(|e| (e.name.as_str(), e.path.as_str(), e.summary.chars().count(), e.required.as_slice()))
            .collect();
        assert_eq!(
            entries,
            [
                ("get_pet", "/pets/{petId}", 9, &["petId".to_string()][..]),
                ("list_pets", "/pets", SUMMARY_CHARS, &[][..])
            ]
        );
        for operation in &operations {
            let stored = catalog.discovery_operation(7, &operation.tool.name).await.unwrap();
            assert_eq!(stored.as_ref(), Some(operation));
        }
        assert_eq!(catalog.discovery_operation(7, "nope").await.unwrap(), None);
    }

    /// The rows a version stored whole needs: its server and its generation (7), then the whole
    /// API in its discovery row.
    const WHOLE_ROWS: [&str; 2] = [
        "INSERT INTO servers (id, name, kind, status, created_at, updated_at) VALUES ('big', 'big', 'openapi', 'ready', 0, 0)",
        "INSERT INTO generations (id, server_id, source, status, generator_version, created_at)
         VALUES (7, 'big', 'openapi', 'ready', 'test', 0)",
    ];
    const WHOLE_DISCOVERY: &str =
        "INSERT INTO discovery (generation_id, operations, search_index, executor) VALUES (7, $1, '{}', 'run()')";

    /// Runs `migrator`'s migrations up to `last` on `pool` and stores a version whole, as it was
    /// before operations had rows. A macro, as sqlx's pools and migrators differ by backend.
    macro_rules! store_whole_api_before {
        ($pool:expr, $migrator:expr, $last:expr) => {{
            let mut before = $migrator;
            let earlier: Vec<_> = before.migrations.iter().filter(|m| m.version <= $last).cloned().collect();
            before.migrations = std::borrow::Cow::Owned(earlier);
            before.run(&$pool).await.unwrap();
            for statement in WHOLE_ROWS {
                sqlx::query(statement).execute(&$pool).await.unwrap();
            }
            sqlx::query(WHOLE_DISCOVERY).bind(to_json(&whole_api())).execute(&$pool).await.unwrap();
            $pool.close().await;
        }};
    }

    /// A version stored before operations had rows of their own (the whole API in one JSON
    /// column) is carried over by the SQLite migration.
    #[tokio::test]
    async fn a_whole_api_stored_in_one_row_is_carried_into_one_row_per_operation_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect(&url).await.unwrap();
        store_whole_api_before!(pool, sqlx::migrate!("./migrations/sqlite"), 17);

        let catalog = Catalog::open_file(&path).await.unwrap();
        assert_carried_over(&catalog).await;
        catalog.close().await;
    }

    /// The same on PostgreSQL.
    #[tokio::test]
    async fn a_whole_api_stored_in_one_row_is_carried_into_one_row_per_operation_on_postgres() {
        let Some(url) = crate::catalog::db::postgres_support::fresh_database().await else { return };
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
        store_whole_api_before!(pool, sqlx::migrate!("./migrations/postgres"), 8);

        let location = crate::config::CatalogLocation::Postgres { url, password_file: None, max_connections: 2 };
        let catalog =
            Catalog::open(&location, crate::catalog::db::Replica::single(), &crate::tasks::Tasks::new()).await.unwrap();
        assert_carried_over(&catalog).await;
        catalog.close().await;
    }
}
