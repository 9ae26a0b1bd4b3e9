//! Copying a whole catalog into an empty PostgreSQL one (`mcpbootd migrate`): the way from one
//! daemon on a SQLite file to replicas on a shared database.
//!
//! Columns are copied by the target's schema (`information_schema`), so a column added by a later
//! migration is copied without a change here; values are read by the type the target column
//! has (flags from SQLite integers, `BYTEA` from blobs). Everything is written in one
//! transaction, so a failed copy leaves the target empty. Rows keep their ids; the identity
//! sequences continue after them.

use sqlx::{Executor, Row};

use super::db::Catalog;
use super::error::CatalogError;
use super::sql::Backend;
use super::values::{Flag, stored_text};

/// Tables in the order their references allow. `calls` and `egress` only with the call log.
const TABLES: [&str; 10] = [
    "servers",
    "generations",
    "tools",
    "discovery",
    "discovery_operations",
    "documents",
    "generation_documents",
    "credentials",
    "connections",
    "drift_events",
];
const CALL_LOG_TABLES: [&str; 2] = ["calls", "egress"];

/// How many rows of each table were copied, and counted in the target afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedTable {
    pub table: &'static str,
    pub source_rows: i64,
    pub target_rows: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("the target catalog must be PostgreSQL (postgres://…)")]
    TargetNotPostgres,
    #[error("the target catalog already holds {0} server(s); migrate into an empty database")]
    TargetNotEmpty(i64),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// One column as the target declares it.
struct Column {
    name: String,
    data_type: String,
}

/// A value on its way from one catalog to the other.
enum Value {
    Text(Option<String>),
    Int(Option<i64>),
    Flag(Option<bool>),
    Bytes(Option<Vec<u8>>),
}

impl Catalog {
    /// Copies every server, version, document, credential (still sealed: the target needs the
    /// same credentials key) and drift event, and the call log when `with_calls`, into `target`.
    pub async fn copy_into(&self, target: &Catalog, with_calls: bool) -> Result<Vec<CopiedTable>, CopyError> {
        if target.backend != Backend::Postgres {
            return Err(CopyError::TargetNotPostgres);
        }
        let servers: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM servers")
            .fetch_one(&target.reader)
            .await
            .map_err(CatalogError::from)?;
        if servers > 0 {
            return Err(CopyError::TargetNotEmpty(servers));
        }
        let tables: Vec<&'static str> =
            TABLES.iter().chain(if with_calls { &CALL_LOG_TABLES[..] } else { &[] }).copied().collect();
        let mut source = self.reader.acquire().await.map_err(CatalogError::from)?;
        let mut tx = target.writer.begin().await.map_err(CatalogError::from)?;
        for table in &tables {
            let columns = target_columns(&mut tx, table).await?;
            copy_table(&mut source, &mut tx, table, &columns).await?;
        }
        // Servers were written without their served generation (it did not exist yet).
        let active = sqlx::query_as::<_, (String, i64)>(
            "SELECT id, active_generation_id FROM servers WHERE active_generation_id IS NOT NULL",
        )
        .fetch_all(&mut *source)
        .await
        .map_err(CatalogError::from)?;
        for (id, generation_id) in active {
            sqlx::query("UPDATE servers SET active_generation_id = $1 WHERE id = $2")
                .bind(generation_id)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(CatalogError::from)?;
        }
        for statement in [
            "SELECT setval(pg_get_serial_sequence('generations', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM generations",
            "SELECT setval(pg_get_serial_sequence('drift_events', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM drift_events",
        ] {
            tx.execute(statement).await.map_err(CatalogError::from)?;
        }
        tx.commit().await.map_err(CatalogError::from)?;
        let mut counts = Vec::with_capacity(tables.len());
        for table in tables {
            counts.push(CopiedTable {
                table,
                source_rows: count(&self.reader, table).await?,
                target_rows: count(&target.reader, table).await?,
            });
        }
        Ok(counts)
    }
}

async fn count(pool: &sqlx::AnyPool, table: &str) -> Result<i64, CatalogError> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"))).fetch_one(pool).await?)
}

/// The target table's columns, without those the database fills itself (`calls.rowid`).
async fn target_columns(tx: &mut sqlx::AnyConnection, table: &str) -> Result<Vec<Column>, CatalogError> {
    let rows = sqlx::query_as::<_, (String, String)>(
        "SELECT column_name::text AS name, data_type::text AS data_type FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = $1 AND COALESCE(identity_generation, '') != 'ALWAYS'
         ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(|(name, data_type)| Column { name, data_type }).collect())
}

async fn copy_table(
    source: &mut sqlx::AnyConnection,
    target: &mut sqlx::AnyConnection,
    table: &str,
    columns: &[Column],
) -> Result<(), CatalogError> {
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    // Calls in the order they were written, which breaks ties between equal start times.
    let order = if table == "calls" { " ORDER BY rowid" } else { "" };
    let select = format!("SELECT {} FROM {table}{order}", names.join(", "));
    let placeholders: Vec<String> = (1..=columns.len()).map(|n| format!("${n}")).collect();
    let insert = format!("INSERT INTO {table} ({}) VALUES ({})", names.join(", "), placeholders.join(", "));
    let rows = sqlx::query(sqlx::AssertSqlSafe(select)).fetch_all(&mut *source).await?;
    for row in rows {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(insert.clone()));
        for column in columns {
            // Servers are written first, before the generations they serve exist.
            let value = if table == "servers" && column.name == "active_generation_id" {
                Value::Int(None)
            } else {
                read(&row, column)?
            };
            query = match value {
                // A SQLite catalog written before text was stored without NUL may hold some.
                Value::Text(v) => query.bind(v.as_deref().map(stored_text)),
                Value::Int(v) => query.bind(v),
                Value::Flag(v) => query.bind(v),
                Value::Bytes(v) => query.bind(v),
            };
        }
        query.execute(&mut *target).await?;
    }
    Ok(())
}

fn read(row: &sqlx::any::AnyRow, column: &Column) -> Result<Value, CatalogError> {
    let name = column.name.as_str();
    Ok(match column.data_type.as_str() {
        "bigint" | "integer" | "smallint" => Value::Int(row.try_get(name)?),
        "boolean" => Value::Flag(row.try_get::<Option<Flag>, _>(name)?.map(bool::from)),
        "bytea" => Value::Bytes(row.try_get(name)?),
        _ => Value::Text(row.try_get(name)?),
    })
}
