//! The call log: one row per finished tool call with its egress rows, written in batches by a
//! background writer and pruned to `[catalog] max_calls_per_server` per server.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::db::Catalog;
use super::error::CatalogError;
use super::sql::{Backend, insert_values};
use super::values::{Flag, stored_text, to_json};
use crate::states::{CacheUse, CallOutcome, UpstreamDecision, Via};
use crate::toolset::ServerId;

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
    /// The agent received an error result (the handler's own `isError` result included).
    pub is_error: bool,
    /// A failed call's arguments, secrets redacted and long values cut (repair context).
    pub arguments: Option<serde_json::Value>,
    pub fetches: i64,
    pub console: String,
    pub egress: Vec<EgressRecord>,
    /// The code-mode script that made this call (its execution id).
    pub parent_execution_id: Option<String>,
    /// A script run's code (its start, as much as the log keeps).
    pub code: Option<String>,
    /// The OAuth caller: the token's `sub`.
    pub subject: Option<String>,
    /// The OAuth caller's client (`client_id` or `azp`).
    pub client_id: Option<String>,
    /// Filled by [`Catalog::list_calls`]: the tool calls a script made, oldest first.
    pub children: Vec<CallRecord>,
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
    /// Names of the credentials added to the request.
    pub credentials: Vec<String>,
    /// Credential values taken out of the response before the handler saw it.
    pub scrubs: i64,
    /// What the egress's upstream protection did with the request, if anything.
    pub decision: Option<UpstreamDecision>,
    /// How long the request waited (for `Retry-After` or a rate limit) before it was sent.
    pub waited_ms: Option<i64>,
    /// How the egress's HTTP cache took part, for a GET it looked up.
    pub cache: Option<CacheUse>,
}

/// The columns a [`CallRow`] reads.
macro_rules! call_columns {
    () => {
        "execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome, error, fetches, console, \
         parent_execution_id, code, is_error, arguments, subject, client_id"
    };
}

/// Which calls [`Catalog::list_calls`] returns; every field that is set must match.
#[derive(Debug, Clone, Default)]
pub struct CallFilter {
    pub tool: Option<String>,
    pub outcome: Option<CallOutcome>,
    /// Started at or after this time (milliseconds since the Unix epoch).
    pub since: Option<i64>,
    /// Started before this time.
    pub until: Option<i64>,
    pub execution_id: Option<String>,
}

/// A server's calls in a time window, as the servers list shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub calls: i64,
    /// Calls whose outcome is not `ok` (a handler that threw, a refusal, a limit, …).
    pub errors: i64,
}

impl Catalog {
    /// Every server's calls started at or after `since` (milliseconds), by server id. Each count is
    /// a range of the server's index on `(server_id, started_at)`.
    pub async fn call_counts_since(&self, since: i64) -> Result<HashMap<String, CallCounts>, CatalogError> {
        let rows = sqlx::query_as::<_, (String, i64, i64)>(
            "SELECT s.id,
                    (SELECT COUNT(*) FROM calls c WHERE c.server_id = s.id AND c.started_at >= $1) AS calls,
                    (SELECT COUNT(*) FROM calls c
                     WHERE c.server_id = s.id AND c.started_at >= $1 AND c.outcome <> 'ok') AS errors
             FROM servers s",
        )
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        Ok(rows.into_iter().map(|(id, calls, errors)| (id, CallCounts { calls, errors })).collect())
    }

    /// Newest calls first that pass `filter`, each with its egress rows. The tool calls a script
    /// made are nested under its entry (`children`, whichever server they belong to) instead of
    /// listed beside it; a script's call to another server is listed in that server's log at the
    /// top level. A call asked for by its execution id is listed even when a script made it.
    pub async fn list_calls(
        &self,
        id: &ServerId,
        limit: i64,
        filter: &CallFilter,
    ) -> Result<Vec<CallRecord>, CatalogError> {
        let mut sql = String::from(concat!("SELECT ", call_columns!(), " FROM calls AS c WHERE server_id = $1"));
        let mut values: Vec<String> = Vec::new();
        let mut times: Vec<i64> = Vec::new();
        // Placeholders are numbered in the order the values are bound below: text, then times.
        let mut condition = |column: &str, value: String| {
            values.push(value);
            format!(" AND {column} = ${}", values.len() + 1)
        };
        match &filter.execution_id {
            Some(execution) => sql.push_str(&condition("execution_id", execution.clone())),
            None => sql.push_str(
                " AND NOT EXISTS (SELECT 1 FROM calls AS p
                                  WHERE p.execution_id = c.parent_execution_id AND p.server_id = c.server_id)",
            ),
        }
        if let Some(tool) = &filter.tool {
            sql.push_str(&condition("tool", tool.clone()));
        }
        if let Some(outcome) = filter.outcome {
            sql.push_str(&condition("outcome", outcome.as_str().to_string()));
        }
        let first_time = values.len() + 2;
        for (bound, operator) in [(filter.since, ">="), (filter.until, "<")] {
            if let Some(millis) = bound {
                times.push(millis);
                sql.push_str(&format!(" AND started_at {operator} ${}", first_time + times.len() - 1));
            }
        }
        sql.push_str(&format!(" ORDER BY started_at DESC, rowid DESC LIMIT ${}", first_time + times.len()));
        let mut query = sqlx::query_as::<_, CallRow>(sqlx::AssertSqlSafe(sql)).bind(id.as_str());
        for value in values {
            query = query.bind(value);
        }
        for millis in times {
            query = query.bind(millis);
        }
        let rows = query.bind(limit).fetch_all(&self.reader).await?;
        let mut calls: Vec<CallRecord> = rows.into_iter().map(CallRecord::from).collect();
        let scripts: Vec<&str> = calls.iter().filter(|c| c.code.is_some()).map(|c| c.execution_id.as_str()).collect();
        let children = if scripts.is_empty() {
            Vec::new()
        } else {
            let ids = serde_json::to_string(&scripts).unwrap_or_else(|_| "[]".into());
            let rows = sqlx::query_as::<_, CallRow>(self.sql(
                concat!(
                    "SELECT ",
                    call_columns!(),
                    " FROM calls WHERE parent_execution_id IN (SELECT value FROM json_each($1))
                     ORDER BY started_at ASC, rowid ASC"
                ),
                concat!(
                    "SELECT ",
                    call_columns!(),
                    " FROM calls WHERE parent_execution_id IN (SELECT json_array_elements_text($1::json))
                     ORDER BY started_at ASC, rowid ASC"
                ),
            ))
            .bind(ids)
            .fetch_all(&self.reader)
            .await?;
            rows.into_iter().map(CallRecord::from).collect()
        };
        // All egress rows of those calls in one query, rather than one query per call.
        let all_ids: Vec<&str> = calls.iter().chain(&children).map(|c| c.execution_id.as_str()).collect();
        let mut egress_by_call: std::collections::HashMap<String, Vec<EgressRecord>> = std::collections::HashMap::new();
        let egress_rows = sqlx::query_as::<_, EgressRow>(self.sql(
            "SELECT execution_id, method, host, path, allowed, status, bytes, duration_us, reason, credentials, scrubs,
                    decision, waited_ms, cache
             FROM egress WHERE execution_id IN (SELECT value FROM json_each($1))
             ORDER BY execution_id, seq",
            "SELECT execution_id, method, host, path, allowed, status, bytes, duration_us, reason, credentials, scrubs,
                    decision, waited_ms, cache
             FROM egress WHERE execution_id IN (SELECT json_array_elements_text($1::json))
             ORDER BY execution_id, seq",
        ))
        .bind(serde_json::to_string(&all_ids).unwrap_or_else(|_| "[]".into()))
        .fetch_all(&self.reader)
        .await?;
        for row in egress_rows {
            let (execution_id, egress) = row.into_record();
            egress_by_call.entry(execution_id).or_default().push(egress);
        }
        let mut children: Vec<CallRecord> = children;
        for call in calls.iter_mut().chain(children.iter_mut()) {
            call.egress = egress_by_call.remove(&call.execution_id).unwrap_or_default();
        }
        for child in children {
            let parent = child.parent_execution_id.as_deref();
            if let Some(script) = calls.iter_mut().find(|c| Some(c.execution_id.as_str()) == parent) {
                script.children.push(child);
            }
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
    ///
    /// Then keeps the newest calls whose console and error text add up to `keep_bytes`: a handler
    /// that logs its 64 KiB on every call would otherwise hold gigabytes per server. The sizes
    /// come from the record headers (`octet_length` of a column does not read its content).
    async fn prune_calls(&self, server: &str, keep: u64, keep_bytes: u64) -> Result<(), CatalogError> {
        sqlx::query(self.sql(
            "DELETE FROM calls WHERE rowid IN (
                 SELECT rowid FROM calls WHERE server_id = $1 ORDER BY started_at ASC, rowid ASC
                 LIMIT max(0, (SELECT COUNT(*) FROM calls WHERE server_id = $1) - $2))",
            "DELETE FROM calls WHERE rowid IN (
                 SELECT rowid FROM calls WHERE server_id = $1 ORDER BY started_at ASC, rowid ASC
                 LIMIT GREATEST(0, (SELECT COUNT(*) FROM calls WHERE server_id = $1) - $2))",
        ))
        .bind(server)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .execute(&self.writer)
        .await?;
        sqlx::query(
            "DELETE FROM calls WHERE rowid IN (
                 SELECT rowid FROM (
                     SELECT rowid, SUM(octet_length(console) + coalesce(octet_length(error), 0)
                                       + coalesce(octet_length(code), 0) + coalesce(octet_length(arguments), 0))
                         OVER (ORDER BY started_at DESC, rowid DESC) AS newer_bytes
                     FROM calls WHERE server_id = $1) AS sized
                 WHERE newer_bytes > $2)",
        )
        .bind(server)
        .bind(i64::try_from(keep_bytes).unwrap_or(i64::MAX))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Writes a batch of calls in one transaction. Calls of a server deleted meanwhile are dropped.
    /// A few statements per batch, not one per call and per outbound request: on PostgreSQL each
    /// statement is a round trip. Writing a batch again stores nothing twice: a call is its
    /// execution id, and an egress row its call's id and position (see [`ON_CONFLICT_KEEP`]).
    async fn insert_calls(&self, batch: &[CallRecord]) -> Result<(), CatalogError> {
        let mut tx = self.writer.begin().await?;
        let servers: BTreeSet<&str> = batch.iter().map(|call| call.server_id.as_str()).collect();
        let existing: BTreeSet<String> = sqlx::query_scalar(self.sql(
            "SELECT id FROM servers WHERE id IN (SELECT value FROM json_each($1))",
            "SELECT id FROM servers WHERE id IN (SELECT json_array_elements_text($1::json))",
        ))
        .bind(to_json(&servers))
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let calls: Vec<&CallRecord> = batch.iter().filter(|call| existing.contains(&call.server_id)).collect();
        let rows_per_insert = self.rows_per_insert();
        for chunk in calls.chunks(rows_per_insert) {
            let sql = insert_values(
                "INSERT INTO calls (execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome,
                     error, fetches, console, parent_execution_id, code, is_error, arguments, subject, client_id)",
                17,
                chunk.len(),
            ) + ON_CONFLICT_KEEP;
            let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
            for call in chunk {
                insert = insert
                    .bind(&call.execution_id)
                    .bind(&call.server_id)
                    .bind(call.generation_id)
                    .bind(stored_text(&call.tool))
                    .bind(call.via)
                    .bind(call.started_at)
                    .bind(call.duration_us)
                    .bind(call.outcome)
                    .bind(call.error.as_deref().map(stored_text))
                    .bind(call.fetches)
                    .bind(stored_text(&call.console))
                    .bind(&call.parent_execution_id)
                    .bind(call.code.as_deref().map(stored_text))
                    .bind(call.is_error)
                    .bind(call.arguments.as_ref().map(to_json))
                    .bind(call.subject.as_deref().map(stored_text))
                    .bind(call.client_id.as_deref().map(stored_text));
            }
            insert.execute(&mut *tx).await?;
        }
        let egress: Vec<(&str, i64, &EgressRecord)> = calls
            .iter()
            .flat_map(|call| call.egress.iter().enumerate().map(|(seq, e)| (call.execution_id.as_str(), seq as i64, e)))
            .collect();
        for chunk in egress.chunks(rows_per_insert) {
            let sql = insert_values(
                "INSERT INTO egress (execution_id, seq, method, host, path, allowed, status, bytes, duration_us, reason,
                     credentials, scrubs, decision, waited_ms, cache)",
                15,
                chunk.len(),
            ) + ON_CONFLICT_KEEP;
            let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (execution_id, seq, egress) in chunk {
                insert = insert
                    .bind(*execution_id)
                    .bind(*seq)
                    .bind(stored_text(&egress.method))
                    .bind(stored_text(&egress.host))
                    .bind(stored_text(&egress.path))
                    .bind(egress.allowed)
                    .bind(egress.status)
                    .bind(egress.bytes)
                    .bind(egress.duration_us)
                    .bind(egress.reason.as_deref().map(stored_text))
                    .bind((!egress.credentials.is_empty()).then(|| egress.credentials.join(",")))
                    .bind(egress.scrubs)
                    .bind(egress.decision)
                    .bind(egress.waited_ms)
                    .bind(egress.cache);
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Ends the call log's inserts: a row whose key is already stored is left as it is. The writer
/// tries a batch again after an error, and a COMMIT that succeeded but whose answer was lost (a
/// connection cut, a PostgreSQL failover) is an error too: without this, its retries would be
/// refused for the stored keys until the writer gave up, holding up the queue for a minute and
/// counting stored records as lost.
const ON_CONFLICT_KEEP: &str = " ON CONFLICT DO NOTHING";

impl Catalog {
    /// Rows per `INSERT` of the call log. On PostgreSQL many (each statement is a round trip;
    /// 17 columns × 500 stays far below its 65,535 bound values); on SQLite one, which costs no
    /// round trip and keeps a single prepared statement, where statements of every batch size
    /// would each be parsed and cached anew.
    fn rows_per_insert(&self) -> usize {
        match self.backend {
            Backend::Sqlite => 1,
            Backend::Postgres => 500,
        }
    }
}

/// A `calls` row: the columns of [`call_columns!`].
#[derive(sqlx::FromRow)]
struct CallRow {
    execution_id: String,
    server_id: String,
    generation_id: i64,
    tool: String,
    via: Via,
    started_at: i64,
    duration_us: i64,
    outcome: CallOutcome,
    error: Option<String>,
    fetches: i64,
    console: String,
    parent_execution_id: Option<String>,
    code: Option<String>,
    #[sqlx(try_from = "Flag")]
    is_error: bool,
    arguments: Option<String>,
    subject: Option<String>,
    client_id: Option<String>,
}

impl From<CallRow> for CallRecord {
    fn from(row: CallRow) -> CallRecord {
        CallRecord {
            execution_id: row.execution_id,
            server_id: row.server_id,
            generation_id: row.generation_id,
            tool: row.tool,
            via: row.via,
            started_at: row.started_at,
            duration_us: row.duration_us,
            outcome: row.outcome,
            error: row.error,
            is_error: row.is_error,
            arguments: row.arguments.and_then(|text| serde_json::from_str(&text).ok()),
            fetches: row.fetches,
            console: row.console,
            egress: Vec::new(),
            parent_execution_id: row.parent_execution_id,
            code: row.code,
            subject: row.subject,
            client_id: row.client_id,
            children: Vec::new(),
        }
    }
}

/// An `egress` row, with the execution id of the call that made the request.
#[derive(sqlx::FromRow)]
struct EgressRow {
    execution_id: String,
    method: String,
    host: String,
    path: String,
    #[sqlx(try_from = "Flag")]
    allowed: bool,
    status: Option<i64>,
    bytes: i64,
    duration_us: i64,
    reason: Option<String>,
    credentials: Option<String>,
    scrubs: i64,
    decision: Option<String>,
    waited_ms: Option<i64>,
    cache: Option<String>,
}

impl EgressRow {
    /// The call's execution id and the request as the call log shows it.
    fn into_record(self) -> (String, EgressRecord) {
        let record = EgressRecord {
            method: self.method,
            host: self.host,
            path: self.path,
            allowed: self.allowed,
            status: self.status,
            bytes: self.bytes,
            duration_us: self.duration_us,
            reason: self.reason,
            credentials: self
                .credentials
                .map(|names| names.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            scrubs: self.scrubs,
            // A value a newer daemon wrote and this one does not know is left out.
            decision: self.decision.and_then(|d| d.parse().ok()),
            waited_ms: self.waited_ms,
            cache: self.cache.and_then(|c| c.parse().ok()),
        };
        (self.execution_id, record)
    }
}

/// Handle to the background call-log writer.
///
/// Calls are queued without waiting and written in batches (one transaction per batch), which keeps
/// SQLite off the tool-call hot path. [`CallLog::flush`] waits until everything queued so far is on
/// disk, so the admin API can show a call right after it returned.
#[derive(Clone)]
pub struct CallLog {
    sender: mpsc::Sender<LogMessage>,
    /// Records lost: dropped at a full queue, or in a batch the catalog kept refusing.
    dropped: Arc<Dropped>,
}

/// Counts lost records and says so in the log at most every [`DROP_WARNING_INTERVAL`], so a
/// catalog that cannot keep up (or cannot be written) is visible without a line per call.
#[derive(Default)]
struct Dropped {
    total: AtomicU64,
    /// `total` when the last warning was written, and when.
    warned: std::sync::Mutex<(u64, Option<std::time::Instant>)>,
}

impl Dropped {
    fn add(&self, records: u64, why: &str) {
        let total = self.total.fetch_add(records, Ordering::Relaxed) + records;
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.1.is_none_or(|at| at.elapsed() >= DROP_WARNING_INTERVAL) {
            tracing::warn!(
                dropped = total - warned.0,
                dropped_total = total,
                "call log records lost: {why} (mcpbootd_call_log_dropped_records_total counts them)"
            );
            *warned = (total, Some(std::time::Instant::now()));
        }
    }
}

/// At most one warning about lost call-log records per this interval.
const DROP_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// How long the writer waits before it tries a refused batch once more (a fresh connection,
/// a transient lock or I/O error gone).
const RETRY_AFTER: Duration = Duration::from_millis(200);

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

/// How much of a server's call log is kept: the newest `calls`, within `bytes` of console and
/// error text.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub calls: u64,
    pub bytes: u64,
}

/// Writes a batch, trying again after a failure: once on a SQLite file (a fresh connection, a
/// transient lock or I/O error gone; a full disk stays full), and with backoff for up to
/// [`SHARED_RETRY_FOR`] on a shared PostgreSQL catalog, so a database restart or failover costs a
/// delay, not records. Calls made meanwhile wait in the queue (and are counted as dropped only if
/// it fills); tool calls never wait for the writer.
async fn write_batch(catalog: &Catalog, calls: &[CallRecord], lost: &Dropped) {
    let Err(mut error) = catalog.insert_calls(calls).await else { return };
    let give_up = tokio::time::Instant::now() + if catalog.is_shared() { SHARED_RETRY_FOR } else { RETRY_AFTER };
    let mut wait = RETRY_AFTER;
    loop {
        tracing::warn!(%error, calls = calls.len(), "could not write the call log; trying again");
        tokio::time::sleep(wait).await;
        match catalog.insert_calls(calls).await {
            Ok(()) => return,
            Err(again) => error = again,
        }
        if tokio::time::Instant::now() >= give_up {
            tracing::error!(%error, calls = calls.len(), "could not write the call log");
            lost.add(calls.len() as u64, "the catalog refused a batch until the writer gave up");
            return;
        }
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}

/// How long a batch is tried again on a shared catalog before its records are dropped.
const SHARED_RETRY_FOR: Duration = Duration::from_secs(60);

impl CallLog {
    /// The log and its writer, for the caller to spawn; the writer ends at [`CallLog::close`] or
    /// when every handle is dropped.
    pub fn new(catalog: Catalog, keep: Retention) -> (CallLog, impl Future<Output = ()> + Send + 'static) {
        let (sender, mut receiver) = mpsc::channel::<LogMessage>(CALL_LOG_QUEUE);
        let dropped = Arc::new(Dropped::default());
        let lost = dropped.clone();
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
                        prune(&catalog, &mut unpruned, keep).await;
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
                    write_batch(&catalog, &calls, &lost).await;
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
                    prune(&catalog, &mut unpruned, keep).await;
                }
                for waiter in waiters {
                    let _ = waiter.send(());
                }
            }
            prune(&catalog, &mut unpruned, keep).await;
        };
        (CallLog { sender, dropped }, writer)
    }

    /// Records lost since start: at a full queue, or in batches the catalog refused.
    pub fn dropped(&self) -> u64 {
        self.dropped.total.load(Ordering::Relaxed)
    }

    pub fn record(&self, call: CallRecord) {
        if self.sender.try_send(LogMessage::Call(Box::new(call))).is_err() {
            self.dropped.add(1, "the queue is full (the catalog is not keeping up)");
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
async fn prune(catalog: &Catalog, servers: &mut BTreeSet<String>, keep: Retention) {
    for server in std::mem::take(servers) {
        if let Err(error) = catalog.prune_calls(&server, keep.calls, keep.bytes).await {
            tracing::error!(%error, server_id = server, "could not prune the call log");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

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
            is_error: false,
            arguments: None,
            fetches: 0,
            console: String::new(),
            egress: Vec::new(),
            parent_execution_id: None,
            code: None,
            subject: None,
            client_id: None,
            children: Vec::new(),
        }
    }

    async fn ids(catalog: &Catalog, server: &str) -> Vec<String> {
        let mut ids: Vec<String> = sqlx::query_scalar("SELECT execution_id FROM calls WHERE server_id = $1")
            .bind(server)
            .fetch_all(&catalog.reader)
            .await
            .unwrap();
        ids.sort();
        ids
    }

    #[tokio::test]
    async fn records_past_a_full_queue_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        for catalog in catalogs_with_servers(dir.path(), &["a"]).await {
            let keep = Retention { calls: 100, bytes: u64::MAX };
            // The writer is not started: the queue fills and the call path never waits for it.
            let (log, writer) = CallLog::new(catalog.clone(), keep);
            for i in 0..CALL_LOG_QUEUE + 7 {
                log.record(call(&format!("c{i}"), "a", i as i64));
            }
            assert_eq!(log.dropped(), 7);
            // Started late, the writer writes what was queued; nothing else is lost.
            tokio::spawn(writer);
            log.flush().await;
            assert_eq!(log.dropped(), 7);
            assert_eq!(ids(&catalog, "a").await.len(), 100, "pruned to the newest 100 of the queued calls");
        }
    }

    /// PostgreSQL's TEXT cannot hold NUL: a call whose handler printed or threw one, or whose
    /// fetch was refused over one, is logged with U+FFFD in its place, the same on both backends.
    #[tokio::test]
    async fn a_call_whose_text_holds_nul_is_logged_on_both_backends() {
        let dir = tempfile::tempdir().unwrap();
        for catalog in catalogs_with_servers(dir.path(), &["a"]).await {
            let (log, writer) = CallLog::new(catalog.clone(), Retention { calls: 100, bytes: u64::MAX });
            tokio::spawn(writer);
            let egress = EgressRecord {
                method: "GET".into(),
                host: "api.example.com".into(),
                path: "/x".into(),
                allowed: false,
                status: None,
                bytes: 0,
                duration_us: 1,
                reason: Some("refused: \0 in the query".into()),
                credentials: Vec::new(),
                scrubs: 0,
                decision: Some(UpstreamDecision::RetryAfterWait),
                waited_ms: Some(1_500),
                cache: Some(CacheUse::Revalidated),
            };
            log.record(CallRecord {
                console: "before\0after\n".into(),
                error: Some("threw \u{0}".into()),
                is_error: true,
                outcome: CallOutcome::Error,
                code: Some("return '\0';".into()),
                subject: Some("user\0".into()),
                egress: vec![egress],
                ..call("nul", "a", 1)
            });
            log.flush().await;
            assert_eq!(log.dropped(), 0, "{:?}", catalog.backend());
            let calls = catalog.list_calls(&ServerId::parse("a").unwrap(), 10, &CallFilter::default()).await.unwrap();
            assert_eq!(calls.len(), 1, "{:?}", catalog.backend());
            let logged = &calls[0];
            assert_eq!(logged.console, "before\u{FFFD}after\n");
            assert_eq!(logged.error.as_deref(), Some("threw \u{FFFD}"));
            assert_eq!(logged.code.as_deref(), Some("return '\u{FFFD}';"));
            assert_eq!(logged.subject.as_deref(), Some("user\u{FFFD}"));
            assert_eq!(logged.egress[0].reason.as_deref(), Some("refused: \u{FFFD} in the query"));
            let protection = (logged.egress[0].decision, logged.egress[0].waited_ms, logged.egress[0].cache);
            assert_eq!(protection, (Some(UpstreamDecision::RetryAfterWait), Some(1_500), Some(CacheUse::Revalidated)));
        }
    }

    /// A batch whose COMMIT succeeded but whose answer was lost is written again by the retry:
    /// it stores nothing twice, and the retry succeeds instead of being refused until the
    /// writer gives up (and counts stored records as lost).
    #[tokio::test]
    async fn a_batch_written_twice_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        for catalog in catalogs_with_servers(dir.path(), &["a"]).await {
            let egress = |path: &str| EgressRecord {
                method: "GET".into(),
                host: "api.example.com".into(),
                path: path.into(),
                allowed: true,
                status: Some(200),
                bytes: 2,
                duration_us: 1,
                reason: None,
                credentials: Vec::new(),
                scrubs: 0,
                decision: None,
                waited_ms: None,
                cache: None,
            };
            let batch: Vec<CallRecord> = (0..3)
                .map(|i| CallRecord { egress: vec![egress("/one"), egress("/two")], ..call(&format!("a{i}"), "a", i) })
                .collect();
            catalog.insert_calls(&batch).await.unwrap();
            catalog.insert_calls(&batch).await.expect("the same batch again is no error");
            let lost = Dropped::default();
            write_batch(&catalog, &batch, &lost).await;
            assert_eq!(lost.total.load(Ordering::Relaxed), 0, "{:?}", catalog.backend());
            assert_eq!(ids(&catalog, "a").await, ["a0", "a1", "a2"], "{:?}", catalog.backend());
            let egress_rows: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM egress").fetch_one(&catalog.reader).await.unwrap();
            assert_eq!(egress_rows, 6, "{:?}", catalog.backend());
        }
    }

    /// A catalog of each backend (SQLite in `dir`, a fresh PostgreSQL database unless PostgreSQL
    /// tests are skipped), each holding `servers`: the tests below run on both.
    async fn catalogs_with_servers(dir: &std::path::Path, servers: &[&str]) -> Vec<Catalog> {
        let catalogs = crate::catalog::db::catalogs_of_each_backend(&dir.join("c.db")).await;
        for catalog in &catalogs {
            add_servers(catalog, servers).await;
        }
        catalogs
    }

    async fn add_servers(catalog: &Catalog, servers: &[&str]) {
        for server in servers {
            sqlx::query("INSERT INTO servers (id, name, kind, status, created_at, updated_at) VALUES ($1, $2, 'toolset', 'ready', 0, 0)")
                .bind(server)
                .bind(server)
                .execute(&catalog.writer)
                .await
                .unwrap();
        }
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
        let mut before = sqlx::migrate!("./migrations/sqlite");
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
                 VALUES ($1, 's', 1, 't', 'mcp', 0, 1, $2, $3, 1)",
            )
            .bind(id)
            .bind(outcome)
            .bind(error)
            .execute(&old)
            .await
            .unwrap();
            sqlx::query("INSERT INTO egress (execution_id, seq, method, host, path, allowed, duration_us) VALUES ($1, 0, 'GET', 'h', '/', 1, 1)")
                .bind(id)
                .execute(&old)
                .await
                .unwrap();
        }
        old.close().await;

        let catalog = Catalog::open_file(&path).await.unwrap();
        let calls = catalog.list_calls(&ServerId::parse("s").unwrap(), 10, &CallFilter::default()).await.unwrap();
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
        for catalog in catalogs_with_servers(dir.path(), &["a", "b"]).await {
            // Inserted out of start order, with ties that only the insertion order breaks.
            let starts = [5, 1, 3, 3, 9, 1, 3, 7];
            let calls: Vec<CallRecord> =
                starts.iter().enumerate().map(|(i, start)| call(&format!("a{i}"), "a", *start)).collect();
            catalog.insert_calls(&calls).await.unwrap();
            catalog.insert_calls(&[call("b0", "b", 0), call("b1", "b", 0)]).await.unwrap();

            catalog.prune_calls("a", 10, u64::MAX).await.unwrap();
            assert_eq!(ids(&catalog, "a").await.len(), 8);
            // The newest four: 9 (a4), 7 (a7), 5 (a0), then of the three at 3 the last inserted (a6).
            catalog.prune_calls("a", 4, u64::MAX).await.unwrap();
            assert_eq!(ids(&catalog, "a").await, ["a0", "a4", "a6", "a7"]);
            catalog.prune_calls("a", 1, u64::MAX).await.unwrap();
            assert_eq!(ids(&catalog, "a").await, ["a4"]);
            assert_eq!(ids(&catalog, "b").await, ["b0", "b1"], "other servers are left alone");
        }
    }

    #[tokio::test]
    async fn pruning_keeps_the_newest_calls_within_the_byte_budget() {
        let dir = tempfile::tempdir().unwrap();
        for catalog in catalogs_with_servers(dir.path(), &["a"]).await {
            let calls: Vec<CallRecord> =
                (0..6).map(|i| CallRecord { console: "x".repeat(1000), ..call(&format!("a{i}"), "a", i) }).collect();
            catalog.insert_calls(&calls).await.unwrap();
            catalog.prune_calls("a", 100, 3500).await.unwrap();
            assert_eq!(ids(&catalog, "a").await, ["a3", "a4", "a5"], "three calls of 1000 bytes fit in 3500");
            catalog.prune_calls("a", 100, 0).await.unwrap();
            assert!(ids(&catalog, "a").await.is_empty());
        }
    }

    #[tokio::test]
    async fn the_writer_prunes_before_a_flush_and_within_the_interval_without_one() {
        let dir = tempfile::tempdir().unwrap();
        for catalog in catalogs_with_servers(dir.path(), &["a"]).await {
            let (log, writer) = CallLog::new(catalog.clone(), Retention { calls: 2, bytes: u64::MAX });
            let task = tokio::spawn(writer);
            for i in 0..5 {
                log.record(call(&format!("a{i}"), "a", i));
            }
            log.flush().await;
            assert_eq!(ids(&catalog, "a").await, ["a3", "a4"]);

            for i in 5..10 {
                log.record(call(&format!("a{i}"), "a", i));
            }
            // Pruned within the interval, without a flush; polled, so a loaded machine only slows it.
            tokio::time::sleep(PRUNE_INTERVAL).await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while ids(&catalog, "a").await != ["a8", "a9"] && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(ids(&catalog, "a").await, ["a8", "a9"], "pruned without a flush");

            log.record(call("a10", "a", 10));
            log.close().await;
            task.await.unwrap();
            assert_eq!(ids(&catalog, "a").await, ["a10", "a9"], "pruned at close");
        }
    }
}
