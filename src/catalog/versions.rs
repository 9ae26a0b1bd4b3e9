//! Versions: a server's generations by number, the review gate (approve, reject), activation of
//! any ready version (rollback), retention, documentation drift state, and what the call log
//! says about each tool's health and failures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::db::Catalog;
use super::error::CatalogError;
use super::generations::{DocumentRef, GenerationRecord};
use super::sql::status_list;
use super::values::{Flag, format_millis, from_json, from_optional_json, now_millis, to_json};
use crate::states::{DriftStatus, GenerationSource, ServerKind, Status, Trigger, VersionChange};
use crate::toolset::{OpenApiSettings, ServerId};

/// One version as the list of versions shows it.
#[derive(Debug, Clone)]
pub struct VersionSummary {
    pub version: i64,
    pub generation_id: i64,
    pub source: GenerationSource,
    pub status: Status,
    pub triggered_by: Trigger,
    pub trigger_detail: Option<String>,
    pub model: Option<String>,
    pub prompt_hash: Option<String>,
    pub content_hash: Option<String>,
    pub cache_hit: bool,
    pub dry_run: bool,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub tools: Vec<String>,
    /// Self-test outcomes counted by status (`passed`, `failed`, `skipped`).
    pub self_test: BTreeMap<String, i64>,
    pub review: Option<Value>,
    pub error: Option<String>,
}

/// Why a version could not be approved, rejected or activated.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionRefusal {
    NoServer,
    NoVersion,
    /// It is in a status that does not allow the change.
    Status(Status),
}

/// An operator's decision on a version that awaits approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    Approve,
    Reject,
}

/// The last documentation drift check of a server, kept on the server row.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DriftState {
    pub status: DriftStatus,
    /// When the last check started (`checking`) or finished.
    pub checked_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The newest drift event's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<i64>,
    /// A candidate version a drift started that awaits approval: no check runs until it is
    /// decided, so a page that changes all the time cannot pile up candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_version: Option<i64>,
}

/// A change in a server's documentation, and the candidate version it started.
#[derive(Debug, Clone)]
pub struct DriftEvent {
    pub id: i64,
    pub server_id: String,
    pub detected_at: i64,
    /// `[{"url", "before_sha256", "after_sha256", "before_bytes", "after_bytes"}]`.
    pub changes: Value,
    pub generation_id: Option<i64>,
}

/// What a drift check needs to know about a server whose documents it re-fetches.
#[derive(Debug, Clone)]
pub struct DriftSubject {
    pub id: ServerId,
    pub kind: ServerKind,
    pub prompt: Option<String>,
    pub allow_domains: Vec<String>,
    pub openapi: Option<OpenApiSettings>,
    pub drift: Option<DriftState>,
}

/// A failed call of a tool, as repair context.
#[derive(Debug, Clone, Serialize)]
pub struct FailedCall {
    pub execution_id: String,
    pub started_at: i64,
    pub outcome: String,
    /// The arguments as logged (secrets redacted, long values cut).
    pub arguments: Option<Value>,
    pub error: Option<String>,
}

impl Catalog {
    /// A server's versions, oldest first, and the active one's generation id. `None` if there
    /// is no such server.
    pub async fn list_versions(
        &self,
        id: &ServerId,
    ) -> Result<Option<(Option<i64>, Vec<VersionSummary>)>, CatalogError> {
        let mut snapshot = self.snapshot().await?;
        let Some(active) = active_generation(&mut snapshot, id).await? else { return Ok(None) };
        let rows = sqlx::query_as::<_, VersionRow>(self.sql(
            "SELECT g.id, g.version, g.source, g.status, g.triggered_by, g.trigger_detail, g.model, g.prompt_hash,
                    g.content_hash, g.cache_hit, g.dry_run, g.created_at, g.finished_at, g.review, g.error,
                    (SELECT json_group_array(name) FROM (SELECT name FROM tools WHERE generation_id = g.id
                                                          ORDER BY position)) AS tools,
                    (SELECT json_group_object(status, n) FROM
                        (SELECT json_extract(self_test, '$.status') AS status, COUNT(*) AS n FROM tools
                         WHERE generation_id = g.id AND self_test IS NOT NULL GROUP BY 1)) AS self_test
             FROM generations g WHERE g.server_id = $1 ORDER BY g.version",
            "SELECT g.id, g.version, g.source, g.status, g.triggered_by, g.trigger_detail, g.model, g.prompt_hash,
                    g.content_hash, g.cache_hit, g.dry_run, g.created_at, g.finished_at, g.review, g.error,
                    (SELECT COALESCE(json_agg(name ORDER BY position), '[]')::text FROM tools
                     WHERE generation_id = g.id) AS tools,
                    (SELECT COALESCE(json_object_agg(status, n), '{}')::text FROM
                        (SELECT self_test::json->>'status' AS status, COUNT(*) AS n FROM tools
                         WHERE generation_id = g.id AND self_test IS NOT NULL GROUP BY 1) AS counts) AS self_test
             FROM generations g WHERE g.server_id = $1 ORDER BY g.version",
        ))
        .bind(id.as_str())
        .fetch_all(&mut *snapshot)
        .await?;
        snapshot.rollback().await?;
        let versions = rows.into_iter().map(VersionSummary::try_from).collect::<Result<Vec<_>, CatalogError>>()?;
        Ok(Some((active, versions)))
    }

    /// The number of the version a server serves; `None` if it serves none (or does not exist).
    pub async fn active_version(&self, id: &ServerId) -> Result<Option<i64>, CatalogError> {
        Ok(sqlx::query_scalar(
            "SELECT g.version FROM servers s JOIN generations g ON g.id = s.active_generation_id WHERE s.id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&self.reader)
        .await?
        .flatten())
    }

    /// Version `number` of a server, whole, and the server's active generation id.
    pub async fn version(
        &self,
        id: &ServerId,
        number: i64,
    ) -> Result<Result<(GenerationRecord, Option<i64>), VersionRefusal>, CatalogError> {
        let mut snapshot = self.snapshot().await?;
        let Some(active) = active_generation(&mut snapshot, id).await? else {
            return Ok(Err(VersionRefusal::NoServer));
        };
        let generation_id: Option<i64> =
            sqlx::query_scalar("SELECT id FROM generations WHERE server_id = $1 AND version = $2")
                .bind(id.as_str())
                .bind(number)
                .fetch_optional(&mut *snapshot)
                .await?;
        let record = match generation_id {
            Some(generation_id) => Catalog::generation(&mut snapshot, generation_id).await?,
            None => None,
        };
        snapshot.rollback().await?;
        Ok(record.map(|record| (record, active)).ok_or(VersionRefusal::NoVersion))
    }

    /// Approves or rejects a version that awaits approval. An approved version becomes the
    /// active one (the caller remounts); a rejected one is kept, never served.
    pub async fn review_version(
        &self,
        id: &ServerId,
        number: i64,
        review: Review,
        reason: Option<&str>,
    ) -> Result<Result<i64, VersionRefusal>, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let generation = match version_row(&mut tx, id, number).await? {
            Ok(found) => found,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if generation.1 != Status::AwaitingApproval {
            return Ok(Err(VersionRefusal::Status(generation.1)));
        }
        let (decision, status) = match review {
            Review::Approve => (VersionChange::Approved, Status::Ready),
            Review::Reject => (VersionChange::Rejected, Status::Rejected),
        };
        let record = json!({"decision": decision, "reason": reason, "at": format_millis(now)});
        sqlx::query("UPDATE generations SET status = $1, review = $2 WHERE id = $3")
            .bind(status)
            .bind(to_json(&record))
            .bind(generation.0)
            .execute(&mut *tx)
            .await?;
        if review == Review::Approve {
            activate(&mut tx, id, generation.0).await?;
        }
        settle_status(&mut tx, id, now).await?;
        tx.commit().await?;
        Ok(Ok(generation.0))
    }

    /// Makes a ready version the active one (a rollback, or a roll forward again). Returns its
    /// generation id; the caller remounts.
    pub async fn activate_version(
        &self,
        id: &ServerId,
        number: i64,
    ) -> Result<Result<i64, VersionRefusal>, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let (generation_id, status) = match version_row(&mut tx, id, number).await? {
            Ok(found) => found,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if status != Status::Ready {
            return Ok(Err(VersionRefusal::Status(status)));
        }
        activate(&mut tx, id, generation_id).await?;
        settle_status(&mut tx, id, now).await?;
        tx.commit().await?;
        Ok(Ok(generation_id))
    }

    /// Deletes a server's oldest versions beyond `keep`, never the active one, one awaiting
    /// approval or one still running. Returns how many were deleted.
    pub async fn prune_versions(&self, id: &ServerId, keep: u64) -> Result<u64, CatalogError> {
        if keep == 0 {
            return Ok(0);
        }
        let deleted = sqlx::query(
            "DELETE FROM generations WHERE id IN (
                 SELECT g.id FROM generations g JOIN servers s ON s.id = g.server_id
                 WHERE g.server_id = $1
                   AND g.id IS DISTINCT FROM s.active_generation_id
                   AND g.status IN ($2, $3, $4, $5)
                   AND g.version <= (SELECT MAX(version) FROM generations WHERE server_id = $1) - $6)",
        )
        .bind(id.as_str())
        .bind(Status::Ready)
        .bind(Status::Failed)
        .bind(Status::Planned)
        .bind(Status::Rejected)
        .bind(keep as i64)
        .execute(&self.writer)
        .await?;
        Ok(deleted.rows_affected())
    }

    /// Servers whose documentation can drift: those generated from a prompt's documents.
    pub async fn drift_subjects(&self) -> Result<Vec<DriftSubject>, CatalogError> {
        let rows = sqlx::query_as::<_, DriftSubjectRow>(
            "SELECT id, kind, prompt, allow_domains, openapi, drift FROM servers WHERE kind = $1 ORDER BY id",
        )
        .bind(ServerKind::Prompt)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter().map(DriftSubject::try_from).collect()
    }

    pub async fn drift_subject(&self, id: &ServerId) -> Result<Option<DriftSubject>, CatalogError> {
        let row = sqlx::query_as::<_, DriftSubjectRow>(
            "SELECT id, kind, prompt, allow_domains, openapi, drift FROM servers WHERE id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&self.reader)
        .await?;
        row.map(DriftSubject::try_from).transpose()
    }

    /// The documents a drift check compares against: those of the server's newest finished
    /// version that fetched any (the active one, or a newer candidate built from changed
    /// documents, awaiting approval or rejected). A failed candidate does not count, so the
    /// change that started it is found again and another candidate started.
    pub async fn drift_baseline(&self, id: &ServerId) -> Result<Vec<DocumentRef>, CatalogError> {
        let mut conn = self.reader.acquire().await?;
        let newest: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(g.id) FROM generations g WHERE g.server_id = $1 AND g.status IN ($2, $3, $4)
                 AND EXISTS (SELECT 1 FROM generation_documents d WHERE d.generation_id = g.id)",
        )
        .bind(id.as_str())
        .bind(Status::Ready)
        .bind(Status::AwaitingApproval)
        .bind(Status::Rejected)
        .fetch_one(&mut *conn)
        .await?;
        match newest {
            Some(generation_id) => Catalog::generation_documents(&mut conn, generation_id).await,
            None => Ok(Vec::new()),
        }
    }

    /// Marks drift checks a previous run of the daemon left unfinished as failed, so no server
    /// stays `checking`; the next check (at its interval, or on request) runs them again.
    pub async fn fail_interrupted_drift_checks(&self) -> Result<u64, CatalogError> {
        // The daemon that held their leases is gone (this is the only daemon on this catalog).
        sqlx::query("UPDATE servers SET drift_lease_expires_at = 0 WHERE drift_lease_expires_at > 0")
            .execute(&self.writer)
            .await?;
        let updated = sqlx::query(self.sql(
            "UPDATE servers SET drift = json_set(drift, '$.status', $1, '$.error',
                 'interrupted by a daemon restart; it runs again at the next drift_check_interval, or POST \
                  /admin/servers/' || id || '/check-drift')
             WHERE json_extract(drift, '$.status') = $2",
            "UPDATE servers SET drift = (drift::jsonb || jsonb_build_object('status', $1::text, 'error',
                 'interrupted by a daemon restart; it runs again at the next drift_check_interval, or POST \
                  /admin/servers/' || id || '/check-drift'))::text
             WHERE drift::jsonb->>'status' = $2",
        ))
        .bind(DriftStatus::Failed)
        .bind(DriftStatus::Checking)
        .execute(&self.writer)
        .await?;
        Ok(updated.rows_affected())
    }

    /// The newest version of a server that a drift started and that awaits approval.
    pub async fn awaiting_drift_candidate(&self, id: &ServerId) -> Result<Option<i64>, CatalogError> {
        Ok(sqlx::query_scalar(
            "SELECT MAX(version) FROM generations WHERE server_id = $1 AND status = $2 AND triggered_by = $3",
        )
        .bind(id.as_str())
        .bind(Status::AwaitingApproval)
        .bind(Trigger::Drift)
        .fetch_one(&self.reader)
        .await?)
    }

    /// Records a server's drift state; false if the server is gone.
    pub async fn set_drift_state(&self, id: &ServerId, state: &DriftState) -> Result<bool, CatalogError> {
        let updated = sqlx::query("UPDATE servers SET drift = $1 WHERE id = $2")
            .bind(to_json(state))
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(updated.rows_affected() == 1)
    }

    /// Records a drift event (and, once it started, its candidate generation). Returns its id.
    pub async fn record_drift_event(&self, id: &ServerId, changes: &Value) -> Result<i64, CatalogError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO drift_events (server_id, detected_at, changes) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(id.as_str())
        .bind(now_millis())
        .bind(to_json(changes))
        .fetch_one(&self.writer)
        .await?)
    }

    pub async fn set_drift_candidate(&self, event: i64, generation_id: i64) -> Result<(), CatalogError> {
        sqlx::query("UPDATE drift_events SET generation_id = $1 WHERE id = $2")
            .bind(generation_id)
            .bind(event)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// A server's newest drift events, newest first.
    pub async fn drift_events(&self, id: &ServerId, limit: i64) -> Result<Vec<DriftEvent>, CatalogError> {
        let rows = sqlx::query_as::<_, DriftEventRow>(
            "SELECT id, server_id, detected_at, changes, generation_id FROM drift_events WHERE server_id = $1
             ORDER BY id DESC LIMIT $2",
        )
        .bind(id.as_str())
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(DriftEvent {
                    id: row.id,
                    server_id: row.server_id,
                    detected_at: row.detected_at,
                    changes: from_json(&row.changes)?,
                    generation_id: row.generation_id,
                })
            })
            .collect()
    }

    /// Per tool of a generation, whether each of its last `window` calls failed, newest first,
    /// among the server's last `window` × 50 calls (calls refused before they ran, `busy`,
    /// `shutting_down` and `cancelled`, are not the tool's doing and are left out).
    pub async fn recent_failures_by_tool(
        &self,
        id: &ServerId,
        generation_id: i64,
        window: u32,
    ) -> Result<BTreeMap<String, Vec<bool>>, CatalogError> {
        // Only the server's newest calls are read (along its `calls_by_server` index), so the
        // first use of a server with a full log costs a short scan, not a sort of all of it; a
        // tool not called among them starts with an empty window.
        let rows = sqlx::query_as::<_, (String, Flag)>(
            "SELECT tool, is_error FROM (
                 SELECT tool, is_error, ROW_NUMBER() OVER (PARTITION BY tool ORDER BY started_at DESC, rowid DESC) AS n
                 FROM (SELECT tool, is_error, started_at, rowid FROM calls
                       WHERE server_id = $1 AND generation_id = $2
                         AND outcome NOT IN ('busy', 'shutting_down', 'cancelled')
                       ORDER BY started_at DESC LIMIT $3) AS recent) AS ranked
             WHERE n <= $4 ORDER BY tool, n",
        )
        .bind(id.as_str())
        .bind(generation_id)
        .bind(i64::from(window) * RECENT_CALLS_PER_WINDOW)
        .bind(i64::from(window))
        .fetch_all(&self.reader)
        .await?;
        let mut by_tool: BTreeMap<String, Vec<bool>> = BTreeMap::new();
        for (tool, is_error) in rows {
            by_tool.entry(tool).or_default().push(is_error.into());
        }
        Ok(by_tool)
    }

    /// A tool's newest failed calls in a generation, newest first: repair context.
    pub async fn failed_calls(
        &self,
        id: &ServerId,
        generation_id: i64,
        tool: &str,
        limit: i64,
    ) -> Result<Vec<FailedCall>, CatalogError> {
        let rows = sqlx::query_as::<_, FailedCallRow>(
            "SELECT execution_id, started_at, outcome, arguments, error FROM calls
             WHERE server_id = $1 AND generation_id = $2 AND tool = $3 AND is_error
               AND outcome NOT IN ('busy', 'shutting_down', 'cancelled')
             ORDER BY started_at DESC, rowid DESC LIMIT $4",
        )
        .bind(id.as_str())
        .bind(generation_id)
        .bind(tool)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(FailedCall {
                    execution_id: row.execution_id,
                    started_at: row.started_at,
                    outcome: row.outcome,
                    arguments: from_optional_json(row.arguments.as_deref())?,
                    error: row.error,
                })
            })
            .collect()
    }
}

/// A server's active generation id (`Some(None)`: it serves none); `None` if there is no such
/// server.
async fn active_generation(conn: &mut sqlx::AnyConnection, id: &ServerId) -> Result<Option<Option<i64>>, CatalogError> {
    Ok(sqlx::query_scalar("SELECT active_generation_id FROM servers WHERE id = $1")
        .bind(id.as_str())
        .fetch_optional(conn)
        .await?)
}

/// A tool's health window is filled from the server's last `window` × this many calls.
const RECENT_CALLS_PER_WINDOW: i64 = 50;

/// The generation id and status of version `number`, in the caller's transaction.
async fn version_row(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: &ServerId,
    number: i64,
) -> Result<Result<(i64, Status), VersionRefusal>, CatalogError> {
    let exists: Option<String> =
        sqlx::query_scalar("SELECT id FROM servers WHERE id = $1").bind(id.as_str()).fetch_optional(&mut **tx).await?;
    if exists.is_none() {
        return Ok(Err(VersionRefusal::NoServer));
    }
    let row =
        sqlx::query_as::<_, (i64, Status)>("SELECT id, status FROM generations WHERE server_id = $1 AND version = $2")
            .bind(id.as_str())
            .bind(number)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(row.ok_or(VersionRefusal::NoVersion))
}

/// Points the server at `generation_id`.
async fn activate(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: &ServerId,
    generation_id: i64,
) -> Result<(), CatalogError> {
    sqlx::query("UPDATE servers SET active_generation_id = $1 WHERE id = $2")
        .bind(generation_id)
        .bind(id.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A server's status after an operator's decision: a running generation keeps saying where it
/// is; else another version still awaiting approval says so; else `ready` when a version is
/// served, `rejected` when none is.
async fn settle_status(tx: &mut sqlx::Transaction<'_, sqlx::Any>, id: &ServerId, now: i64) -> Result<(), CatalogError> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE servers SET updated_at = $1, status = CASE
             WHEN EXISTS (SELECT 1 FROM generations WHERE server_id = servers.id AND status IN ({})) THEN status
             WHEN EXISTS (SELECT 1 FROM generations WHERE server_id = servers.id AND status = $2) THEN $2
             WHEN active_generation_id IS NULL THEN $3
             ELSE $4 END
         WHERE id = $5",
        status_list(&Status::RUNNING)
    )))
    .bind(now)
    .bind(Status::AwaitingApproval)
    .bind(Status::Rejected)
    .bind(Status::Ready)
    .bind(id.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A version as the list of versions reads it: its generation's row, its tools' names and its
/// self-test outcomes counted by status, both as JSON text.
#[derive(sqlx::FromRow)]
struct VersionRow {
    id: i64,
    version: Option<i64>,
    source: GenerationSource,
    status: Status,
    triggered_by: Trigger,
    trigger_detail: Option<String>,
    model: Option<String>,
    prompt_hash: Option<String>,
    content_hash: Option<String>,
    #[sqlx(try_from = "Flag")]
    cache_hit: bool,
    #[sqlx(try_from = "Flag")]
    dry_run: bool,
    created_at: i64,
    finished_at: Option<i64>,
    review: Option<String>,
    error: Option<String>,
    tools: String,
    self_test: String,
}

impl TryFrom<VersionRow> for VersionSummary {
    type Error = CatalogError;

    fn try_from(row: VersionRow) -> Result<VersionSummary, CatalogError> {
        Ok(VersionSummary {
            version: row.version.unwrap_or_default(),
            generation_id: row.id,
            source: row.source,
            status: row.status,
            triggered_by: row.triggered_by,
            trigger_detail: row.trigger_detail,
            model: row.model,
            prompt_hash: row.prompt_hash,
            content_hash: row.content_hash,
            cache_hit: row.cache_hit,
            dry_run: row.dry_run,
            created_at: row.created_at,
            finished_at: row.finished_at,
            tools: from_json(&row.tools)?,
            self_test: from_json(&row.self_test)?,
            review: from_optional_json(row.review.as_deref())?,
            error: row.error,
        })
    }
}

/// A `servers` row as a drift check reads it.
#[derive(sqlx::FromRow)]
struct DriftSubjectRow {
    id: String,
    kind: ServerKind,
    prompt: Option<String>,
    allow_domains: String,
    openapi: Option<String>,
    drift: Option<String>,
}

impl TryFrom<DriftSubjectRow> for DriftSubject {
    type Error = CatalogError;

    fn try_from(row: DriftSubjectRow) -> Result<DriftSubject, CatalogError> {
        Ok(DriftSubject {
            id: ServerId::parse(&row.id)?,
            kind: row.kind,
            prompt: row.prompt,
            allow_domains: from_json(&row.allow_domains)?,
            openapi: from_optional_json(row.openapi.as_deref())?,
            drift: from_optional_json(row.drift.as_deref())?,
        })
    }
}

/// A `drift_events` row.
#[derive(sqlx::FromRow)]
struct DriftEventRow {
    id: i64,
    server_id: String,
    detected_at: i64,
    changes: String,
    generation_id: Option<i64>,
}

/// A failed call as repair context reads it from the call log.
#[derive(sqlx::FromRow)]
struct FailedCallRow {
    execution_id: String,
    started_at: i64,
    outcome: String,
    arguments: Option<String>,
    error: Option<String>,
}
