//! The SQLite catalog: the only module that holds SQL.
//!
//! Servers point at their active generation; a generation is immutable once finished and owns its
//! tools. Every multi-row write happens in one transaction, so a failed registration leaves no
//! half-written rows. The call log is written in batches by a background writer (see
//! [`CallLog`]) so that tool calls never wait for the disk.

use std::collections::BTreeSet;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use crate::states::{CallOutcome, GenerationSource, ServerKind, Status, Via};
use crate::toolset::{ServerId, ToolSpec, Toolset};
use crate::whitelist::{RefusedDomain, Whitelist};

mod generations;
mod registrations;

pub use generations::{CachedGeneration, FinishedGeneration, NewDocument, StageTimings};
pub use registrations::NewToolsetServer;

/// Version of the code that produced a generation; part of the generation cache key.
pub const GENERATOR_VERSION: &str = concat!("mcpbootd-", env!("CARGO_PKG_VERSION"));

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("a server with id {0:?} already exists")]
    Conflict(String),
    #[error("catalog error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("catalog holds unreadable data: {0}")]
    Corrupt(String),
    /// A write shared with other requests (a batch) failed; the message is the cause.
    #[error("catalog write failed: {0}")]
    WriteFailed(String),
}

/// Two pools on one file: every write goes through `writer`, a single connection, so writers
/// queue in the pool instead of meeting SQLite's busy handler (which sleeps for milliseconds);
/// reads use `reader` and, with WAL, never wait for a writer.
#[derive(Clone)]
pub struct Catalog {
    reader: SqlitePool,
    writer: SqlitePool,
    /// Toolset registrations, written in batches by [`registrations::write`].
    registrations: mpsc::Sender<registrations::Pending>,
}

/// A server as the list of servers shows it.
#[derive(Debug, Clone)]
pub struct ServerSummary {
    pub id: ServerId,
    pub name: String,
    pub kind: ServerKind,
    pub status: Status,
    /// Tools of the generation being served.
    pub tool_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What routing and authentication need to know about a server that is being served; the rest
/// of a mount is built from its [`ServedGeneration`] when the server is first used.
#[derive(Debug, Clone)]
pub struct MountRecord {
    pub id: ServerId,
    pub name: String,
    /// The generation being served.
    pub generation_id: i64,
    /// Hex sha256 of the MCP access token, when the mount requires one.
    pub access_token_sha256: Option<String>,
}

/// What serving a generation takes: its whitelist and its tools, in order.
#[derive(Debug, Clone)]
pub struct ServedGeneration {
    pub whitelist: Whitelist,
    pub tools: Vec<ToolSpec>,
}

/// A server with its active generation and tools, as the admin view needs it.
#[derive(Debug, Clone)]
pub struct ServerRecord {
    pub id: ServerId,
    pub name: String,
    pub kind: ServerKind,
    pub prompt: Option<String>,
    pub allow_domains: Vec<String>,
    pub status: Status,
    pub created_at: i64,
    pub updated_at: i64,
    /// Hex sha256 of the MCP access token, when the mount requires one.
    pub access_token_sha256: Option<String>,
    /// The generation being served.
    pub generation: Option<GenerationRecord>,
    /// The newest generation, when it is not the one being served (running, failed or planned).
    pub latest_generation: Option<GenerationRecord>,
}

#[derive(Debug, Clone)]
pub struct GenerationRecord {
    pub id: i64,
    pub source: GenerationSource,
    pub status: Status,
    pub error: Option<String>,
    pub generator_version: String,
    pub whitelist: Whitelist,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub tools: Toolset,
    /// Per tool, in the same order as `tools`: what generation learned about it.
    pub tool_extras: Vec<ToolExtras>,
    pub details: GenerationDetails,
}

/// Generation bookkeeping shown in the admin view.
#[derive(Debug, Clone, Default)]
pub struct GenerationDetails {
    pub dry_run: bool,
    pub force: bool,
    pub prompt_hash: Option<String>,
    pub content_hash: Option<String>,
    pub model: Option<String>,
    pub plan: Option<Value>,
    pub cache_hit: bool,
    pub cached_from: Option<i64>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub llm_requests: i64,
    /// Milliseconds per stage, in stage order (see [`StageTimings`]).
    pub timings: Map<String, Value>,
    pub warnings: Vec<String>,
    pub refused_domains: Vec<RefusedDomain>,
    pub documents: Vec<DocumentRef>,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ToolExtras {
    pub needs_network: Option<bool>,
    pub self_test: Option<Value>,
}

/// A fetched document as a generation used it; the text lives in `documents`, keyed by hash.
#[derive(Debug, Clone)]
pub struct DocumentRef {
    pub url: String,
    pub source_url: String,
    pub final_url: String,
    pub content_type: String,
    pub sha256: String,
    pub bytes: i64,
    pub chars: i64,
    pub truncated: bool,
    pub summarised: bool,
    pub discovered_urls: Vec<String>,
    pub fetched_at: i64,
}

/// One finished tool call, with the outbound requests it made.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub execution_id: String,
    pub server_id: String,
    pub generation_id: i64,
    pub tool: String,
    pub via: Via,
    pub started_at: i64,
    pub duration_us: i64,
    pub outcome: CallOutcome,
    pub error: Option<String>,
    pub fetches: i64,
    pub console: String,
    pub egress: Vec<EgressRecord>,
}

#[derive(Debug, Clone)]
pub struct EgressRecord {
    pub method: String,
    pub host: String,
    pub path: String,
    pub allowed: bool,
    pub status: Option<i64>,
    pub bytes: i64,
    pub duration_us: i64,
    pub reason: Option<String>,
}

impl Catalog {
    /// Opens (creating if needed) the catalog file and brings its schema up to date.
    pub async fn open(path: &Path) -> anyhow::Result<Catalog> {
        use anyhow::Context;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the catalog directory {}", dir.display()))?;
        }
        // WAL with synchronous = FULL: every commit syncs the WAL before it returns, so a
        // registration answered 201 survives a crash of the process *and* of the machine (with
        // NORMAL the last commits could roll back on power loss). The cost is one fsync per write
        // transaction; the call log amortises it over a batch.
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .with_context(|| format!("invalid catalog path {}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let open =
            |connections: u32| SqlitePoolOptions::new().max_connections(connections).connect_with(options.clone());
        let writer =
            open(1).await.with_context(|| format!("cannot open the catalog {} ([catalog] path)", path.display()))?;
        sqlx::migrate!("./migrations").run(&writer).await.context("cannot apply catalog migrations")?;
        let reader =
            open(4).await.with_context(|| format!("cannot open the catalog {} ([catalog] path)", path.display()))?;
        let (registrations, queue) = mpsc::channel(registrations::QUEUE);
        tokio::spawn(registrations::write(writer.clone(), queue));
        Ok(Catalog { reader, writer, registrations })
    }

    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.reader).await.is_ok()
    }

    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    pub async fn list_servers(&self) -> Result<Vec<ServerSummary>, CatalogError> {
        let rows = sqlx::query(
            "SELECT s.id, s.name, s.kind, s.status, s.created_at, s.updated_at,
                    (SELECT COUNT(*) FROM tools t WHERE t.generation_id = s.active_generation_id) AS tool_count
             FROM servers s ORDER BY s.created_at, s.id",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(ServerSummary {
                    id: ServerId::parse(&row.get::<String, _>("id")).map_err(CatalogError::Corrupt)?,
                    name: row.get("name"),
                    kind: row.get("kind"),
                    status: row.get("status"),
                    tool_count: row.get("tool_count"),
                    created_at: row.get("created_at"),
                    updated_at: row.get("updated_at"),
                })
            })
            .collect()
    }

    pub async fn get_server(&self, id: &ServerId) -> Result<Option<ServerRecord>, CatalogError> {
        let row = sqlx::query(
            "SELECT id, name, kind, prompt, allow_domains, status, active_generation_id, created_at, updated_at,
                    access_token_sha256
             FROM servers WHERE id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&self.reader)
        .await?;
        match row {
            Some(row) => Ok(Some(self.server_from_row(row).await?)),
            None => Ok(None),
        }
    }

    /// Every server with a generation to serve, in one query: what start-up mounts.
    pub async fn mount_records(&self) -> Result<Vec<MountRecord>, CatalogError> {
        let rows = sqlx::query(
            "SELECT id, name, active_generation_id, access_token_sha256 FROM servers
             WHERE active_generation_id IS NOT NULL",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter().map(mount_record).collect()
    }

    /// One server's [`MountRecord`]; `None` if it does not exist or serves no generation yet.
    pub async fn mount_record(&self, id: &ServerId) -> Result<Option<MountRecord>, CatalogError> {
        let row = sqlx::query(
            "SELECT id, name, active_generation_id, access_token_sha256 FROM servers
             WHERE id = ? AND active_generation_id IS NOT NULL",
        )
        .bind(id.as_str())
        .fetch_optional(&self.reader)
        .await?;
        row.map(mount_record).transpose()
    }

    /// A finished generation's whitelist and tools, in one query: what a mount is built from.
    /// `None` if the generation no longer exists (its server was deleted).
    pub async fn served_generation(&self, generation_id: i64) -> Result<Option<ServedGeneration>, CatalogError> {
        let rows = sqlx::query(
            "SELECT g.whitelist, t.name, t.description, t.input_schema, t.handler, t.annotations
             FROM generations g LEFT JOIN tools t ON t.generation_id = g.id
             WHERE g.id = ? ORDER BY t.position",
        )
        .bind(generation_id)
        .fetch_all(&self.reader)
        .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let whitelist = from_json(&first.get::<String, _>("whitelist"))?;
        let mut tools = Vec::with_capacity(rows.len());
        for row in &rows {
            // A generation without tools yields one row of NULLs from the outer join.
            let Some(name) = row.get::<Option<String>, _>("name") else { continue };
            let annotations: Option<String> = row.get("annotations");
            tools.push(ToolSpec {
                name,
                description: row.get("description"),
                input_schema: from_json(&row.get::<String, _>("input_schema"))?,
                handler: row.get("handler"),
                annotations: annotations.as_deref().map(from_json).transpose()?,
            });
        }
        Ok(Some(ServedGeneration { whitelist, tools }))
    }

    /// A server's status without loading its generations; `None` if there is no such server.
    pub async fn server_status(&self, id: &ServerId) -> Result<Option<Status>, CatalogError> {
        Ok(sqlx::query_scalar("SELECT status FROM servers WHERE id = ?")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?)
    }

    /// Sets (or, with `None`, removes) a server's MCP access token digest. False if no such server.
    pub async fn set_access_token(&self, id: &ServerId, sha256: Option<&str>) -> Result<bool, CatalogError> {
        let updated = sqlx::query("UPDATE servers SET access_token_sha256 = ?, updated_at = ? WHERE id = ?")
            .bind(sha256)
            .bind(now_millis())
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(updated.rows_affected() > 0)
    }

    /// Deletes a server with its generations, tools and call log. Returns false if it did not exist.
    pub async fn delete_server(&self, id: &ServerId) -> Result<bool, CatalogError> {
        let mut tx = self.writer.begin().await?;
        // Break the server -> generation reference first so the cascade has a clean order.
        sqlx::query("UPDATE servers SET active_generation_id = NULL WHERE id = ?")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        let deleted = sqlx::query("DELETE FROM servers WHERE id = ?").bind(id.as_str()).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(deleted.rows_affected() > 0)
    }

    /// Newest calls first, each with its egress rows.
    pub async fn list_calls(&self, id: &ServerId, limit: i64) -> Result<Vec<CallRecord>, CatalogError> {
        let rows = sqlx::query(
            "SELECT execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome, error, fetches, console
             FROM calls WHERE server_id = ? ORDER BY started_at DESC, rowid DESC LIMIT ?",
        )
        .bind(id.as_str())
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        // All egress rows of those calls in one query, rather than one query per call.
        let mut egress_by_call: std::collections::HashMap<String, Vec<EgressRecord>> = std::collections::HashMap::new();
        let egress_rows = sqlx::query(
            "SELECT execution_id, method, host, path, allowed, status, bytes, duration_us, reason FROM egress
             WHERE execution_id IN (
                 SELECT execution_id FROM calls WHERE server_id = ? ORDER BY started_at DESC, rowid DESC LIMIT ?)
             ORDER BY execution_id, seq",
        )
        .bind(id.as_str())
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        for e in egress_rows {
            egress_by_call.entry(e.get("execution_id")).or_default().push(EgressRecord {
                method: e.get("method"),
                host: e.get("host"),
                path: e.get("path"),
                allowed: e.get("allowed"),
                status: e.get("status"),
                bytes: e.get("bytes"),
                duration_us: e.get("duration_us"),
                reason: e.get("reason"),
            });
        }
        let mut calls = Vec::with_capacity(rows.len());
        for row in rows {
            let execution_id: String = row.get("execution_id");
            let egress = egress_by_call.remove(&execution_id).unwrap_or_default();
            calls.push(CallRecord {
                execution_id,
                server_id: row.get("server_id"),
                generation_id: row.get("generation_id"),
                tool: row.get("tool"),
                via: row.get("via"),
                started_at: row.get("started_at"),
                duration_us: row.get("duration_us"),
                outcome: row.get("outcome"),
                error: row.get("error"),
                fetches: row.get("fetches"),
                console: row.get("console"),
                egress,
            });
        }
        Ok(calls)
    }

    /// Keeps the newest `keep` calls of a server (by start time, then insertion order); egress rows
    /// go with their calls (cascade).
    ///
    /// Deletes the oldest `count - keep` rather than skipping the newest `keep` with `OFFSET`: the
    /// same rows, but counting is one walk over the index and the deletion visits only the rows it
    /// removes, where the `OFFSET` form sorted every row of the server through a temporary B-tree
    /// (the index breaks ties by ascending rowid) and then scanned them all again to delete.
    async fn prune_calls(&self, server: &str, keep: u64) -> Result<(), CatalogError> {
        sqlx::query(
            "DELETE FROM calls WHERE rowid IN (
                 SELECT rowid FROM calls WHERE server_id = ?1 ORDER BY started_at ASC, rowid ASC
                 LIMIT max(0, (SELECT COUNT(*) FROM calls WHERE server_id = ?1) - ?2))",
        )
        .bind(server)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Writes a batch of calls in one transaction. Calls of a server deleted meanwhile are dropped.
    async fn insert_calls(&self, batch: &[CallRecord]) -> Result<(), CatalogError> {
        let mut tx = self.writer.begin().await?;
        for call in batch {
            let inserted = sqlx::query(
                "INSERT INTO calls (execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome, error, fetches, console)
                 SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM servers WHERE id = ?)",
            )
            .bind(&call.execution_id)
            .bind(&call.server_id)
            .bind(call.generation_id)
            .bind(&call.tool)
            .bind(call.via)
            .bind(call.started_at)
            .bind(call.duration_us)
            .bind(call.outcome)
            .bind(&call.error)
            .bind(call.fetches)
            .bind(&call.console)
            .bind(&call.server_id)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                continue;
            }
            for (seq, egress) in call.egress.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO egress (execution_id, seq, method, host, path, allowed, status, bytes, duration_us, reason)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&call.execution_id)
                .bind(seq as i64)
                .bind(&egress.method)
                .bind(&egress.host)
                .bind(&egress.path)
                .bind(egress.allowed)
                .bind(egress.status)
                .bind(egress.bytes)
                .bind(egress.duration_us)
                .bind(&egress.reason)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn server_from_row(&self, row: sqlx::sqlite::SqliteRow) -> Result<ServerRecord, CatalogError> {
        let id: String = row.get("id");
        let id = ServerId::parse(&id).map_err(CatalogError::Corrupt)?;
        let generation_id: Option<i64> = row.get("active_generation_id");
        let generation = match generation_id {
            Some(generation_id) => Some(self.generation(generation_id).await?),
            None => None,
        };
        let latest_id: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM generations WHERE server_id = ?")
            .bind(id.as_str())
            .fetch_one(&self.reader)
            .await?;
        let latest_generation = match latest_id {
            Some(latest) if Some(latest) != generation_id => Some(self.generation(latest).await?),
            _ => None,
        };
        Ok(ServerRecord {
            id,
            name: row.get("name"),
            kind: row.get("kind"),
            prompt: row.get("prompt"),
            allow_domains: from_json(&row.get::<String, _>("allow_domains"))?,
            status: row.get("status"),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
            access_token_sha256: row.get("access_token_sha256"),
            generation,
            latest_generation,
        })
    }

    pub(crate) async fn generation(&self, id: i64) -> Result<GenerationRecord, CatalogError> {
        let row = sqlx::query(
            "SELECT id, source, status, error, generator_version, whitelist, created_at, finished_at,
                    dry_run, force, prompt_hash, content_hash, model, plan, cache_hit, cached_from,
                    input_tokens, output_tokens, llm_requests, timings, warnings, refused_domains
             FROM generations WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&self.reader)
        .await?;
        let tool_rows = sqlx::query(
            "SELECT name, description, input_schema, handler, annotations, needs_network, self_test FROM tools
             WHERE generation_id = ? ORDER BY position",
        )
        .bind(id)
        .fetch_all(&self.reader)
        .await?;
        let mut tools = Vec::with_capacity(tool_rows.len());
        let mut tool_extras = Vec::with_capacity(tool_rows.len());
        for t in tool_rows {
            let self_test: Option<String> = t.get("self_test");
            tool_extras.push(ToolExtras {
                needs_network: t.get("needs_network"),
                self_test: self_test.as_deref().map(from_json).transpose()?,
            });
            let annotations: Option<String> = t.get("annotations");
            tools.push(ToolSpec {
                name: t.get("name"),
                description: t.get("description"),
                input_schema: from_json::<Map<String, Value>>(&t.get::<String, _>("input_schema"))?,
                handler: t.get("handler"),
                annotations: annotations.as_deref().map(from_json).transpose()?,
            });
        }
        Ok(GenerationRecord {
            id: row.get("id"),
            source: row.get("source"),
            status: row.get("status"),
            error: row.get("error"),
            generator_version: row.get("generator_version"),
            whitelist: from_json(&row.get::<String, _>("whitelist"))?,
            created_at: row.get("created_at"),
            finished_at: row.get("finished_at"),
            tools: Toolset::from_trusted(tools),
            tool_extras,
            details: GenerationDetails {
                dry_run: row.get("dry_run"),
                force: row.get("force"),
                prompt_hash: row.get("prompt_hash"),
                content_hash: row.get("content_hash"),
                model: row.get("model"),
                plan: row.get::<Option<String>, _>("plan").as_deref().map(from_json).transpose()?,
                cache_hit: row.get("cache_hit"),
                cached_from: row.get("cached_from"),
                input_tokens: row.get("input_tokens"),
                output_tokens: row.get("output_tokens"),
                llm_requests: row.get("llm_requests"),
                timings: from_json(&row.get::<String, _>("timings"))?,
                warnings: from_json(&row.get::<String, _>("warnings"))?,
                refused_domains: from_json(&row.get::<String, _>("refused_domains"))?,
                documents: self.generation_documents(id).await?,
            },
        })
    }
}

/// A tool row as stored, its JSON columns serialised.
pub(crate) struct ToolRow {
    name: String,
    description: String,
    input_schema: String,
    handler: String,
    annotations: Option<String>,
    needs_network: Option<bool>,
    self_test: Option<String>,
}

impl ToolRow {
    pub(crate) fn new(tool: &ToolSpec, extras: &ToolExtras) -> ToolRow {
        ToolRow {
            name: tool.name.clone(),
            description: tool.description.clone(),
            input_schema: to_json(&tool.input_schema),
            handler: tool.handler.clone(),
            annotations: tool.annotations.as_ref().map(to_json),
            needs_network: extras.needs_network,
            self_test: extras.self_test.as_ref().map(to_json),
        }
    }
}

/// A generation's tool rows, in one statement inside the caller's transaction.
pub(crate) async fn insert_tools(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    generation_id: i64,
    tools: &[ToolRow],
) -> Result<(), CatalogError> {
    if tools.is_empty() {
        return Ok(());
    }
    let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "INSERT INTO tools (generation_id, position, name, description, input_schema, handler, annotations,
             needs_network, self_test) ",
    );
    insert.push_values(tools.iter().enumerate(), |mut row, (position, tool)| {
        row.push_bind(generation_id)
            .push_bind(position as i64)
            .push_bind(tool.name.as_str())
            .push_bind(tool.description.as_str())
            .push_bind(tool.input_schema.as_str())
            .push_bind(tool.handler.as_str())
            .push_bind(tool.annotations.as_deref())
            .push_bind(tool.needs_network)
            .push_bind(tool.self_test.as_deref());
    });
    insert.build().execute(&mut **tx).await?;
    Ok(())
}

/// Handle to the background call-log writer.
///
/// Calls are queued without waiting and written in batches (one transaction per batch), which keeps
/// SQLite off the tool-call hot path. [`CallLog::flush`] waits until everything queued so far is on
/// disk, so the admin API can show a call right after it returned.
#[derive(Clone)]
pub struct CallLog {
    sender: mpsc::Sender<LogMessage>,
}

enum LogMessage {
    Call(Box<CallRecord>),
    Flush(oneshot::Sender<()>),
    /// Write what is queued and stop (shutdown; other handles may still exist).
    Close(oneshot::Sender<()>),
}

/// Calls waiting to be written before new ones are dropped (and counted) rather than queued.
const CALL_LOG_QUEUE: usize = 16 * 1024;
const CALL_LOG_BATCH: usize = 512;
/// While calls keep coming, a server's log is pruned at most this often, and always before a flush
/// or close answers. Pruning walks all of the server's index entries (up to
/// `max_calls_per_server`), far more work than writing a small batch, so it is not done after
/// every batch; in between, a busy server may briefly hold up to a second's calls beyond the limit.
const PRUNE_INTERVAL: Duration = Duration::from_secs(1);

impl CallLog {
    /// The log and its writer, for the caller to spawn; the writer ends at [`CallLog::close`] or
    /// when every handle is dropped.
    pub fn new(catalog: Catalog, max_calls_per_server: u64) -> (CallLog, impl Future<Output = ()> + Send + 'static) {
        let (sender, mut receiver) = mpsc::channel::<LogMessage>(CALL_LOG_QUEUE);
        let writer = async move {
            let mut buffer = Vec::with_capacity(CALL_LOG_BATCH);
            let mut closing = false;
            // Servers with calls written since their last prune, and when that prune is due.
            let mut unpruned: BTreeSet<String> = BTreeSet::new();
            let mut prune_due = tokio::time::Instant::now();
            while !closing {
                let received = tokio::select! {
                    received = receiver.recv_many(&mut buffer, CALL_LOG_BATCH) => received,
                    () = tokio::time::sleep_until(prune_due), if !unpruned.is_empty() => {
                        prune(&catalog, &mut unpruned, max_calls_per_server).await;
                        continue;
                    }
                };
                if received == 0 {
                    break;
                }
                let mut calls = Vec::with_capacity(buffer.len());
                let mut waiters = Vec::new();
                for message in buffer.drain(..) {
                    match message {
                        LogMessage::Call(call) => calls.push(*call),
                        LogMessage::Flush(done) => waiters.push(done),
                        LogMessage::Close(done) => {
                            waiters.push(done);
                            closing = true;
                        }
                    }
                }
                if !calls.is_empty() {
                    if let Err(error) = catalog.insert_calls(&calls).await {
                        tracing::error!(%error, calls = calls.len(), "could not write the call log");
                    }
                    if unpruned.is_empty() {
                        prune_due = tokio::time::Instant::now() + PRUNE_INTERVAL;
                    }
                    for call in &calls {
                        if !unpruned.contains(&call.server_id) {
                            unpruned.insert(call.server_id.clone());
                        }
                    }
                }
                if !waiters.is_empty() {
                    prune(&catalog, &mut unpruned, max_calls_per_server).await;
                }
                for waiter in waiters {
                    let _ = waiter.send(());
                }
            }
            prune(&catalog, &mut unpruned, max_calls_per_server).await;
        };
        (CallLog { sender }, writer)
    }

    pub fn record(&self, call: CallRecord) {
        if self.sender.try_send(LogMessage::Call(Box::new(call))).is_err() {
            tracing::warn!("call log queue is full; a call record was dropped");
        }
    }

    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.sender.send(LogMessage::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Writes everything queued so far and stops the writer; later records are dropped.
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.sender.send(LogMessage::Close(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// Prunes the log of every server in `servers` to `keep` calls, and empties the list.
async fn prune(catalog: &Catalog, servers: &mut BTreeSet<String>, keep: u64) {
    for server in std::mem::take(servers) {
        if let Err(error) = catalog.prune_calls(&server, keep).await {
            tracing::error!(%error, server_id = server, "could not prune the call log");
        }
    }
}

pub fn now_millis() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// RFC 3339 with milliseconds, UTC.
pub fn format_millis(millis: i64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("catalog values serialise")
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, CatalogError> {
    serde_json::from_str(text).map_err(|e| CatalogError::Corrupt(e.to_string()))
}

fn mount_record(row: sqlx::sqlite::SqliteRow) -> Result<MountRecord, CatalogError> {
    Ok(MountRecord {
        id: ServerId::parse(&row.get::<String, _>("id")).map_err(CatalogError::Corrupt)?,
        name: row.get("name"),
        generation_id: row.get("active_generation_id"),
        access_token_sha256: row.get("access_token_sha256"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(execution_id: &str, server_id: &str, started_at: i64) -> CallRecord {
        CallRecord {
            execution_id: execution_id.into(),
            server_id: server_id.into(),
            generation_id: 1,
            tool: "t".into(),
            via: Via::Mcp,
            started_at,
            duration_us: 1,
            outcome: CallOutcome::Ok,
            error: None,
            fetches: 0,
            console: String::new(),
            egress: Vec::new(),
        }
    }

    async fn ids(catalog: &Catalog, server: &str) -> Vec<String> {
        let mut ids: Vec<String> = sqlx::query_scalar("SELECT execution_id FROM calls WHERE server_id = ?")
            .bind(server)
            .fetch_all(&catalog.reader)
            .await
            .unwrap();
        ids.sort();
        ids
    }

    async fn catalog_with_servers(dir: &std::path::Path, servers: &[&str]) -> Catalog {
        let catalog = Catalog::open(&dir.join("c.db")).await.unwrap();
        for server in servers {
            sqlx::query("INSERT INTO servers (id, name, kind, status, created_at, updated_at) VALUES (?, ?, 'toolset', 'ready', 0, 0)")
                .bind(server)
                .bind(server)
                .execute(&catalog.writer)
                .await
                .unwrap();
        }
        catalog
    }

    /// A catalog written before `shutting_down` and `cancelled` existed: its calls are relabelled,
    /// and their egress rows survive the table rebuild.
    #[tokio::test]
    async fn the_call_outcome_migration_keeps_calls_and_egress() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .unwrap()
            .create_if_missing(true)
            .foreign_keys(true);
        let old = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
        let mut before = sqlx::migrate!("./migrations");
        before.migrations = before.migrations.iter().filter(|m| m.version < 4).cloned().collect::<Vec<_>>().into();
        before.run(&old).await.unwrap();
        sqlx::query("INSERT INTO servers (id, name, kind, status, created_at, updated_at) VALUES ('s', 's', 'toolset', 'ready', 0, 0)")
            .execute(&old)
            .await
            .unwrap();
        for (id, outcome, error) in [
            ("a", "busy", "the daemon is shutting down"),
            ("b", "error", "cancelled: the client went away before the call finished"),
            ("c", "busy", "busy: the queue is full"),
            ("d", "ok", ""),
        ] {
            sqlx::query(
                "INSERT INTO calls (execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome, error, fetches)
                 VALUES (?, 's', 1, 't', 'mcp', 0, 1, ?, ?, 1)",
            )
            .bind(id)
            .bind(outcome)
            .bind(error)
            .execute(&old)
            .await
            .unwrap();
            sqlx::query("INSERT INTO egress (execution_id, seq, method, host, path, allowed, duration_us) VALUES (?, 0, 'GET', 'h', '/', 1, 1)")
                .bind(id)
                .execute(&old)
                .await
                .unwrap();
        }
        old.close().await;

        let catalog = Catalog::open(&path).await.unwrap();
        let calls = catalog.list_calls(&ServerId::parse("s").unwrap(), 10).await.unwrap();
        let outcomes: BTreeSet<(String, CallOutcome, usize)> =
            calls.iter().map(|c| (c.execution_id.clone(), c.outcome, c.egress.len())).collect();
        let expected = [
            ("a", CallOutcome::ShuttingDown),
            ("b", CallOutcome::Cancelled),
            ("c", CallOutcome::Busy),
            ("d", CallOutcome::Ok),
        ]
        .map(|(id, outcome)| (id.to_string(), outcome, 1));
        assert_eq!(outcomes, expected.into_iter().collect());
        // The rebuilt tables keep their constraints: deleting the server removes calls and egress.
        catalog.delete_server(&ServerId::parse("s").unwrap()).await.unwrap();
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM egress").fetch_one(&catalog.reader).await.unwrap();
        assert_eq!(left, 0);
    }

    #[tokio::test]
    async fn pruning_keeps_the_newest_calls_by_start_then_insertion() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog_with_servers(dir.path(), &["a", "b"]).await;
        // Inserted out of start order, with ties that only the insertion order breaks.
        let starts = [5, 1, 3, 3, 9, 1, 3, 7];
        let calls: Vec<CallRecord> =
            starts.iter().enumerate().map(|(i, start)| call(&format!("a{i}"), "a", *start)).collect();
        catalog.insert_calls(&calls).await.unwrap();
        catalog.insert_calls(&[call("b0", "b", 0), call("b1", "b", 0)]).await.unwrap();

        catalog.prune_calls("a", 10).await.unwrap();
        assert_eq!(ids(&catalog, "a").await.len(), 8);
        // The newest four: 9 (a4), 7 (a7), 5 (a0), then of the three at 3 the last inserted (a6).
        catalog.prune_calls("a", 4).await.unwrap();
        assert_eq!(ids(&catalog, "a").await, ["a0", "a4", "a6", "a7"]);
        catalog.prune_calls("a", 1).await.unwrap();
        assert_eq!(ids(&catalog, "a").await, ["a4"]);
        assert_eq!(ids(&catalog, "b").await, ["b0", "b1"], "other servers are left alone");
    }

    #[tokio::test]
    async fn the_writer_prunes_before_a_flush_and_within_the_interval_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog_with_servers(dir.path(), &["a"]).await;
        let (log, writer) = CallLog::new(catalog.clone(), 2);
        let task = tokio::spawn(writer);
        for i in 0..5 {
            log.record(call(&format!("a{i}"), "a", i));
        }
        log.flush().await;
        assert_eq!(ids(&catalog, "a").await, ["a3", "a4"]);

        for i in 5..10 {
            log.record(call(&format!("a{i}"), "a", i));
        }
        tokio::time::sleep(PRUNE_INTERVAL + Duration::from_millis(500)).await;
        assert_eq!(ids(&catalog, "a").await, ["a8", "a9"], "pruned without a flush");

        log.record(call("a10", "a", 10));
        log.close().await;
        task.await.unwrap();
        assert_eq!(ids(&catalog, "a").await, ["a10", "a9"], "pruned at close");
    }
}
