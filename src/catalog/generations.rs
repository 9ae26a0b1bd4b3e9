//! Generations: the life of a prompt generation from `pending` to `ready`/`planned`/`failed`,
//! its documents, the generation cache, and a generation as the admin view shows it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::credential_rows::{NewCredential, insert_credentials};
use super::db::Catalog;
use super::discovery::{DiscoveryRecord, insert_discovery};
use super::error::CatalogError;
use super::sql::status_list;
use super::tools::{StoredTool, ToolExtras, ToolRow, insert_tools};
use super::values::{Flag, GENERATOR_VERSION, from_json, from_optional_json, now_millis, stored_text, to_json};
use crate::states::{GenerationOutcome, GenerationSource, ServerKind, Stage, Status, Trigger};
use crate::toolset::{AuthSetting, CodeModeSettings, OpenApiSettings, ServerId, ToolSpec, Toolset};
use crate::whitelist::{RefusedDomain, Whitelist};

/// Everything written when a generation finishes, in one transaction.
#[derive(Debug, Default)]
pub struct FinishedGeneration {
    pub error: Option<String>,
    pub prompt_hash: Option<String>,
    pub content_hash: Option<String>,
    pub model: Option<String>,
    pub plan: Option<Value>,
    pub whitelist: Whitelist,
    pub refused_domains: Value,
    pub warnings: Vec<String>,
    pub timings: StageTimings,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub llm_requests: u32,
    pub cached_from: Option<i64>,
    pub tools: Vec<(ToolSpec, ToolExtras)>,
    /// A discovery-mode version's every operation and search index (`None`: it lists all of
    /// its tools).
    pub discovery: Option<DiscoveryRecord>,
    /// Whether a ready generation waits for an operator's approval before it is served, unless
    /// the server says otherwise (`[generation] require_approval`).
    pub require_approval: bool,
    /// Wait for approval whatever the settings say (an automatic candidate whose self-test failed).
    pub hold_for_review: bool,
}

/// How long each stage of a generation took, stored as
/// `{"fetching_ms": 12, "planning_ms": 3400, …, "total_ms": 3600}`.
#[derive(Debug, Clone, Default)]
pub struct StageTimings {
    pub stages: BTreeMap<Stage, u64>,
    /// Set when the generation ran to an end (not when it was interrupted).
    pub total_ms: Option<u64>,
}

impl serde::Serialize for StageTimings {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (stage, millis) in &self.stages {
            map.serialize_entry(&format!("{stage}_ms"), millis)?;
        }
        if let Some(total) = self.total_ms {
            map.serialize_entry("total_ms", &total)?;
        }
        map.end()
    }
}

#[derive(Debug, Clone)]
pub struct GenerationRecord {
    pub id: i64,
    /// Its number among its server's generations: 1, 2, …
    pub version: i64,
    pub triggered_by: Trigger,
    pub trigger_detail: Option<String>,
    /// An operator's decision, when it awaited approval: `{"decision", "reason", "at"}`.
    pub review: Option<Value>,
    /// A targeted regeneration's tools and the failures given to the compiler.
    pub repair: Option<Value>,
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

/// A fetched document to store with a generation.
pub struct NewDocument<'a> {
    pub url: &'a str,
    pub source_url: &'a str,
    pub final_url: &'a str,
    pub content_type: &'a str,
    pub sha256: &'a str,
    pub text: &'a str,
    pub bytes: usize,
    pub truncated: bool,
    pub summarised: bool,
    pub discovered_urls: &'a [String],
}

/// What a new generation is and why it started.
#[derive(Debug, Clone)]
pub struct StartGeneration {
    pub dry_run: bool,
    pub force: bool,
    pub trigger: Trigger,
    pub detail: Option<String>,
    /// A targeted regeneration: its tools and the failures the compiler gets.
    pub repair: Option<Value>,
}

impl StartGeneration {
    pub fn new(trigger: Trigger) -> StartGeneration {
        StartGeneration { dry_run: false, force: false, trigger, detail: None, repair: None }
    }
}

/// A finished generation whose plan (and tools, if it compiled) can be reused.
pub struct CachedGeneration {
    pub id: i64,
    pub status: Status,
    pub plan: Option<Value>,
    pub whitelist: Whitelist,
    pub refused_domains: Value,
    pub tools: Vec<(ToolSpec, ToolExtras)>,
}

/// What a prompt registration stores before generation starts.
pub struct NewPromptServer<'a> {
    pub id: &'a ServerId,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub prompt: &'a str,
    pub allow_domains: &'a [String],
    pub dry_run: bool,
    /// `None`: `[generation] require_approval` decides.
    pub require_approval: Option<bool>,
    pub access_token_sha256: Option<&'a str>,
    pub auth: Option<&'a AuthSetting>,
    pub credentials: &'a [NewCredential],
    pub code_mode: Option<&'a CodeModeSettings>,
    /// Set for a server derived from an API description (kind `openapi`).
    pub openapi: Option<&'a OpenApiSettings>,
    /// The text of an inline API description, kept in `documents` under `openapi.sha256`.
    pub inline_spec: Option<&'a str>,
}

#[cfg(test)]
impl<'a> NewPromptServer<'a> {
    /// A prompt server named after its id, for the catalog's tests to adjust.
    pub fn for_test(id: &'a ServerId) -> NewPromptServer<'a> {
        NewPromptServer {
            id,
            name: id.as_str(),
            description: None,
            prompt: "the API at https://docs.example.com/api",
            allow_domains: &[],
            dry_run: false,
            require_approval: None,
            access_token_sha256: None,
            auth: None,
            credentials: &[],
            code_mode: None,
            openapi: None,
            inline_spec: None,
        }
    }
}

impl Catalog {
    /// Stores a new prompt or API-description server and its first generation (`pending`).
    /// Returns the generation id.
    pub async fn create_prompt_server(&self, new: NewPromptServer<'_>) -> Result<i64, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let kind = if new.openapi.is_some() { ServerKind::OpenApi } else { ServerKind::Prompt };
        if let (Some(settings), Some(text)) = (new.openapi, new.inline_spec) {
            sqlx::query(
                "INSERT INTO documents (sha256, text, created_at) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
            )
            .bind(settings.sha256.as_deref().unwrap_or_default())
            .bind(stored_text(text))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let inserted = sqlx::query(
            "INSERT INTO servers (id, name, description, kind, prompt, allow_domains, status, created_at, updated_at,
                                  access_token_sha256, code_mode, openapi, require_approval, auth)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (id) DO NOTHING",
        )
        .bind(new.id.as_str())
        .bind(new.name)
        .bind(new.description)
        .bind(kind)
        .bind(Some(new.prompt).filter(|p| !p.is_empty()))
        .bind(to_json(new.allow_domains))
        .bind(Status::Pending)
        .bind(now)
        .bind(now)
        .bind(new.access_token_sha256)
        .bind(new.code_mode.map(to_json))
        .bind(new.openapi.map(to_json))
        .bind(new.require_approval)
        .bind(new.auth.map(to_json))
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(CatalogError::Conflict(new.id.to_string()));
        }
        insert_credentials(&mut tx, new.id, new.credentials, now).await?;
        let start = StartGeneration { dry_run: new.dry_run, ..StartGeneration::new(Trigger::Registration) };
        let generation_id =
            insert_generation(&mut tx, new.id, kind, &start, now, (&self.replica.id, self.lease_expiry(now))).await?;
        tx.commit().await?;
        Ok(generation_id)
    }

    /// Starts another generation of an existing prompt or API-description server (`kind`).
    /// `None` if one is already running.
    pub async fn start_regeneration(
        &self,
        id: &ServerId,
        kind: ServerKind,
        start: &StartGeneration,
    ) -> Result<Option<i64>, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        // Replicas starting generations of one server at once wait for each other here, so the
        // count below sees the other's (SQLite's single writer already orders them).
        sqlx::query(
            self.sql("SELECT 1 FROM servers WHERE id = $1", "SELECT 1 FROM servers WHERE id = $1 FOR NO KEY UPDATE"),
        )
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
        let running: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM generations WHERE server_id = $1 AND status IN ({})",
            status_list(&Status::RUNNING)
        )))
        .bind(id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        if running > 0 {
            return Ok(None);
        }
        let generation_id =
            insert_generation(&mut tx, id, kind, start, now, (&self.replica.id, self.lease_expiry(now))).await?;
        sqlx::query("UPDATE servers SET status = $1, updated_at = $2 WHERE id = $3")
            .bind(Status::Pending)
            .bind(now)
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(generation_id))
    }

    /// Moves a running generation (and its server's status) to the next stage.
    pub async fn set_generation_stage(
        &self,
        server: &ServerId,
        generation_id: i64,
        stage: Stage,
    ) -> Result<(), CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let updated = sqlx::query(
            "UPDATE generations SET status = $1 WHERE id = $2 AND (lease_owner IS NULL OR lease_owner = $3)",
        )
        .bind(Status::from(stage))
        .bind(generation_id)
        .bind(self.replica.id.as_str())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(lease_lost(&mut tx, generation_id).await);
        }
        sqlx::query("UPDATE servers SET status = $1, updated_at = $2 WHERE id = $3")
            .bind(Status::from(stage))
            .bind(now)
            .bind(server.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// One generation whole, by id; `None` if it no longer exists.
    pub async fn generation_record(&self, id: i64) -> Result<Option<GenerationRecord>, CatalogError> {
        let mut conn = self.reader.acquire().await?;
        Catalog::generation(&mut conn, id).await
    }

    /// Records that generation `to` was built from the same documents as `from` (a targeted
    /// regeneration fetches nothing). `to` is a running job's: its lease is checked.
    pub async fn copy_documents(&self, from: i64, to: i64) -> Result<(), CatalogError> {
        let mut tx = self.writer.begin().await?;
        self.hold_lease(&mut tx, to).await?;
        sqlx::query(
            "INSERT INTO generation_documents (generation_id, position, url, source_url, final_url, content_type,
                 sha256, bytes, chars, truncated, summarised, discovered_urls, fetched_at)
             SELECT $1, position, url, source_url, final_url, content_type, sha256, bytes, chars, truncated,
                    summarised, discovered_urls, fetched_at
             FROM generation_documents WHERE generation_id = $2",
        )
        .bind(to)
        .bind(from)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A stored document's text by its SHA-256 (an inline API description, say).
    pub async fn document_text(&self, sha256: &str) -> Result<Option<String>, CatalogError> {
        Ok(sqlx::query_scalar("SELECT text FROM documents WHERE sha256 = $1")
            .bind(sha256)
            .fetch_optional(&self.reader)
            .await?)
    }

    /// Stores the documents a running generation fetched, if this replica still holds its lease;
    /// texts are deduplicated by hash.
    pub async fn record_documents(
        &self,
        generation_id: i64,
        documents: &[NewDocument<'_>],
    ) -> Result<(), CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        self.hold_lease(&mut tx, generation_id).await?;
        for (position, document) in documents.iter().enumerate() {
            sqlx::query(
                "INSERT INTO documents (sha256, text, created_at) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
            )
            .bind(document.sha256)
            .bind(stored_text(document.text))
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO generation_documents (generation_id, position, url, source_url, final_url, content_type,
                     sha256, bytes, chars, truncated, summarised, discovered_urls, fetched_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            )
            .bind(generation_id)
            .bind(position as i64)
            .bind(document.url)
            .bind(document.source_url)
            .bind(document.final_url)
            .bind(document.content_type)
            .bind(document.sha256)
            .bind(document.bytes as i64)
            .bind(document.text.chars().count() as i64)
            .bind(document.truncated)
            .bind(document.summarised)
            .bind(to_json(document.discovered_urls))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn generation_documents(
        conn: &mut sqlx::AnyConnection,
        generation_id: i64,
    ) -> Result<Vec<DocumentRef>, CatalogError> {
        let rows = sqlx::query_as::<_, DocumentRow>(
            "SELECT url, source_url, final_url, content_type, sha256, bytes, chars, truncated, summarised,
                    discovered_urls, fetched_at
             FROM generation_documents WHERE generation_id = $1 ORDER BY position",
        )
        .bind(generation_id)
        .fetch_all(&mut *conn)
        .await?;
        rows.into_iter().map(DocumentRef::try_from).collect()
    }

    /// The newest finished generation with this cache key. With `need_tools`, only a `ready` one
    /// (a dry run's `planned` generation has no handlers to reuse).
    pub async fn find_cached_generation(
        &self,
        prompt_hash: &str,
        content_hash: &str,
        model: &str,
        need_tools: bool,
    ) -> Result<Option<CachedGeneration>, CatalogError> {
        // A targeted repair shares its base's key but not its provenance: a regeneration starts
        // from what the documents give, not from a repair an operator may have rolled back.
        let row = sqlx::query_as::<_, CachedRow>(
            "SELECT id, status, plan, whitelist, refused_domains FROM generations
             WHERE prompt_hash = $1 AND content_hash = $2 AND model = $3 AND generator_version = $4
               AND triggered_by != 'repair'
               AND (status = $5 OR (status = $6 AND NOT $7)) AND plan IS NOT NULL
             ORDER BY id DESC LIMIT 1",
        )
        .bind(prompt_hash)
        .bind(content_hash)
        .bind(model)
        .bind(GENERATOR_VERSION)
        .bind(Status::Ready)
        .bind(Status::Planned)
        .bind(need_tools)
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let id = row.id;
        let mut conn = self.reader.acquire().await?;
        let Some(record) = Catalog::generation(&mut conn, id).await? else { return Ok(None) };
        let tools = record.tools.tools().iter().cloned().zip(record.tool_extras.iter().cloned()).collect();
        Ok(Some(CachedGeneration {
            id,
            status: row.status,
            plan: from_optional_json(row.plan.as_deref())?,
            whitelist: from_json(&row.whitelist)?,
            refused_domains: from_json(&row.refused_domains)?,
            tools,
        }))
    }

    /// Writes how a generation ended, its tools, and the server's new state, in one transaction.
    /// A `Ready` generation becomes the server's active one, unless approval is required (the
    /// server's `require_approval`, else `finished.require_approval`, or `hold_for_review`): then
    /// it is stored as `awaiting_approval`. Otherwise the server keeps serving whatever it served
    /// before (its status says what happened to the newest attempt). Returns the stored status.
    pub async fn finish_generation(
        &self,
        server: &ServerId,
        generation_id: i64,
        outcome: GenerationOutcome,
        finished: &FinishedGeneration,
    ) -> Result<Status, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let mut status = Status::from(outcome);
        if outcome == GenerationOutcome::Ready {
            let required = sqlx::query_scalar::<_, Option<Flag>>("SELECT require_approval FROM servers WHERE id = $1")
                .bind(server.as_str())
                .fetch_optional(&mut *tx)
                .await?
                .flatten()
                .map(bool::from);
            if finished.hold_for_review || required.unwrap_or(finished.require_approval) {
                status = Status::AwaitingApproval;
            }
        }
        let updated = sqlx::query(
            "UPDATE generations SET status = $1, error = $2, prompt_hash = $3, content_hash = $4, model = $5, plan = $6,
                 whitelist = $7, refused_domains = $8, warnings = $9, timings = $10, input_tokens = $11, output_tokens = $12,
                 llm_requests = $13, cache_hit = $14, cached_from = $15, finished_at = $16
             WHERE id = $17 AND (lease_owner IS NULL OR lease_owner = $18)",
        )
        .bind(status)
        .bind(finished.error.as_deref().map(stored_text))
        .bind(&finished.prompt_hash)
        .bind(&finished.content_hash)
        .bind(&finished.model)
        .bind(finished.plan.as_ref().map(to_json))
        .bind(to_json(&finished.whitelist))
        .bind(to_json(&finished.refused_domains))
        .bind(to_json(&finished.warnings))
        .bind(to_json(&finished.timings))
        .bind(finished.input_tokens as i64)
        .bind(finished.output_tokens as i64)
        .bind(i64::from(finished.llm_requests))
        .bind(finished.cached_from.is_some())
        .bind(finished.cached_from)
        .bind(now)
        .bind(generation_id)
        .bind(self.replica.id.as_str())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(lease_lost(&mut tx, generation_id).await);
        }
        let tools: Vec<_> = finished.tools.iter().map(|(tool, extras)| ToolRow::new(tool, extras)).collect();
        insert_tools(&mut tx, generation_id, &tools).await?;
        if let Some(discovery) = &finished.discovery {
            insert_discovery(&mut tx, generation_id, discovery).await?;
        }
        let activate = status == Status::Ready;
        sqlx::query(
            "UPDATE servers SET status = $1, updated_at = $2,
                 active_generation_id = CASE WHEN $3 THEN $4 ELSE active_generation_id END
             WHERE id = $5",
        )
        .bind(status)
        .bind(now)
        .bind(activate)
        .bind(generation_id)
        .bind(server.as_str())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(status)
    }

    /// Marks generations that a previous run of the daemon left unfinished as failed, so nothing
    /// stays "planning" forever. Returns (server, status it stopped in) for each.
    pub async fn fail_interrupted_generations(&self) -> Result<Vec<(String, Status)>, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let rows = sqlx::query_as::<_, (i64, String, Status)>(sqlx::AssertSqlSafe(format!(
            "SELECT id, server_id, status FROM generations WHERE status IN ({})",
            status_list(&Status::RUNNING)
        )))
        .fetch_all(&mut *tx)
        .await?;
        let mut interrupted = Vec::with_capacity(rows.len());
        for (id, server, stage) in rows {
            let error = format!(
                "interrupted while {stage}: the daemon stopped before this generation finished; \
                 POST /admin/servers/{server}/regenerate to run it again"
            );
            sqlx::query("UPDATE generations SET status = $1, error = $2, finished_at = $3 WHERE id = $4")
                .bind(Status::Failed)
                .bind(&error)
                .bind(now)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE servers SET status = $1, updated_at = $2 WHERE id = $3")
                .bind(Status::Failed)
                .bind(now)
                .bind(&server)
                .execute(&mut *tx)
                .await?;
            interrupted.push((server, stage));
        }
        tx.commit().await?;
        Ok(interrupted)
    }
}

impl Catalog {
    /// Fails with [`CatalogError::LeaseLost`] unless this replica still holds the lease of the
    /// running generation a job's transaction writes for. On PostgreSQL the generation's row stays
    /// locked until the transaction ends, so a replica claiming the job waits for it (or skips
    /// it) instead of slipping in between this check and the writes after it; SQLite has one
    /// writer anyway.
    async fn hold_lease(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        generation_id: i64,
    ) -> Result<(), CatalogError> {
        let held = sqlx::query(self.sql(
            "SELECT 1 FROM generations WHERE id = $1 AND (lease_owner IS NULL OR lease_owner = $2)",
            "SELECT 1 FROM generations WHERE id = $1 AND (lease_owner IS NULL OR lease_owner = $2) FOR NO KEY UPDATE",
        ))
        .bind(generation_id)
        .bind(self.replica.id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        match held {
            Some(_) => Ok(()),
            None => Err(lease_lost(tx, generation_id).await),
        }
    }
}

/// Why a job's write matched no generation: another replica took it over (its lease expired), or
/// the generation is gone (its server was deleted), which the caller's next step reports.
async fn lease_lost(tx: &mut sqlx::Transaction<'_, sqlx::Any>, generation_id: i64) -> CatalogError {
    match sqlx::query_scalar::<_, Option<String>>("SELECT lease_owner FROM generations WHERE id = $1")
        .bind(generation_id)
        .fetch_optional(&mut **tx)
        .await
    {
        Ok(Some(owner)) => CatalogError::LeaseLost(owner.unwrap_or_default()),
        Ok(None) => CatalogError::Corrupt(format!("generation {generation_id} no longer exists")),
        Err(error) => error.into(),
    }
}

/// A new `pending` generation, leased to `owner` until `lease_expires_at`; the catalog's trigger
/// gives it the server's next version number.
async fn insert_generation(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    server: &ServerId,
    kind: ServerKind,
    start: &StartGeneration,
    now: i64,
    (owner, lease_expires_at): (&str, i64),
) -> Result<i64, CatalogError> {
    let source = if kind == ServerKind::OpenApi { GenerationSource::OpenApi } else { GenerationSource::Llm };
    Ok(sqlx::query_scalar(
        "INSERT INTO generations (server_id, source, status, generator_version, created_at, dry_run, force,
                                  triggered_by, trigger_detail, repair, lease_owner, lease_expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
    )
    .bind(server.as_str())
    .bind(source)
    .bind(Status::Pending)
    .bind(GENERATOR_VERSION)
    .bind(now)
    .bind(start.dry_run)
    .bind(start.force)
    .bind(start.trigger)
    .bind(start.detail.as_deref())
    .bind(start.repair.as_ref().map(to_json))
    .bind(owner)
    .bind(lease_expires_at)
    .fetch_one(&mut **tx)
    .await?)
}

impl Catalog {
    /// One generation with its tools, read on `conn` so a caller can keep its reads in one
    /// snapshot. `None` if it does not exist (its server was deleted meanwhile).
    pub(crate) async fn generation(
        conn: &mut sqlx::AnyConnection,
        id: i64,
    ) -> Result<Option<GenerationRecord>, CatalogError> {
        let Some(row) = sqlx::query_as::<_, GenerationRow>(
            "SELECT id, version, triggered_by, trigger_detail, review, repair, source, status, error,
                    generator_version, whitelist, created_at, finished_at, dry_run, force, prompt_hash, content_hash, model, plan, cache_hit, cached_from,
                    input_tokens, output_tokens, llm_requests, timings, warnings, refused_domains
             FROM generations WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        else {
            return Ok(None);
        };
        let tool_rows = sqlx::query_as::<_, GenerationToolRow>(
            "SELECT name, title, description, input_schema, output_schema, handler, annotations, needs_network,
                    self_test
             FROM tools WHERE generation_id = $1 ORDER BY position",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        let mut tools = Vec::with_capacity(tool_rows.len());
        let mut tool_extras = Vec::with_capacity(tool_rows.len());
        for row in tool_rows {
            tool_extras.push(ToolExtras {
                needs_network: row.needs_network.map(bool::from),
                self_test: from_optional_json(row.self_test.as_deref())?,
            });
            tools.push(ToolSpec::try_from(row.tool)?);
        }
        let documents = Catalog::generation_documents(conn, id).await?;
        Ok(Some(GenerationRecord {
            id: row.id,
            version: row.version.unwrap_or_default(),
            triggered_by: row.triggered_by,
            trigger_detail: row.trigger_detail,
            review: from_optional_json(row.review.as_deref())?,
            repair: from_optional_json(row.repair.as_deref())?,
            source: row.source,
            status: row.status,
            error: row.error,
            generator_version: row.generator_version,
            whitelist: from_json(&row.whitelist)?,
            created_at: row.created_at,
            finished_at: row.finished_at,
            tools: Toolset::from_trusted(tools),
            tool_extras,
            details: GenerationDetails {
                dry_run: row.dry_run,
                force: row.force,
                prompt_hash: row.prompt_hash,
                content_hash: row.content_hash,
                model: row.model,
                plan: from_optional_json(row.plan.as_deref())?,
                cache_hit: row.cache_hit,
                cached_from: row.cached_from,
                input_tokens: row.input_tokens,
                output_tokens: row.output_tokens,
                llm_requests: row.llm_requests,
                timings: from_json(&row.timings)?,
                warnings: from_json(&row.warnings)?,
                refused_domains: from_json(&row.refused_domains)?,
                documents,
            },
        }))
    }
}

/// A `generations` row as [`Catalog::generation`] reads it, JSON columns still text.
#[derive(sqlx::FromRow)]
struct GenerationRow {
    id: i64,
    version: Option<i64>,
    triggered_by: Trigger,
    trigger_detail: Option<String>,
    review: Option<String>,
    repair: Option<String>,
    source: GenerationSource,
    status: Status,
    error: Option<String>,
    generator_version: String,
    whitelist: String,
    created_at: i64,
    finished_at: Option<i64>,
    #[sqlx(try_from = "Flag")]
    dry_run: bool,
    #[sqlx(try_from = "Flag")]
    force: bool,
    prompt_hash: Option<String>,
    content_hash: Option<String>,
    model: Option<String>,
    plan: Option<String>,
    #[sqlx(try_from = "Flag")]
    cache_hit: bool,
    cached_from: Option<i64>,
    input_tokens: i64,
    output_tokens: i64,
    llm_requests: i64,
    timings: String,
    warnings: String,
    refused_domains: String,
}

/// A generation's tool with what generation learned about it.
#[derive(sqlx::FromRow)]
struct GenerationToolRow {
    #[sqlx(flatten)]
    tool: StoredTool,
    needs_network: Option<Flag>,
    self_test: Option<String>,
}

/// A `generation_documents` row.
#[derive(sqlx::FromRow)]
struct DocumentRow {
    url: String,
    source_url: String,
    final_url: String,
    content_type: String,
    sha256: String,
    bytes: i64,
    chars: i64,
    #[sqlx(try_from = "Flag")]
    truncated: bool,
    #[sqlx(try_from = "Flag")]
    summarised: bool,
    discovered_urls: String,
    fetched_at: i64,
}

impl TryFrom<DocumentRow> for DocumentRef {
    type Error = CatalogError;

    fn try_from(row: DocumentRow) -> Result<DocumentRef, CatalogError> {
        Ok(DocumentRef {
            url: row.url,
            source_url: row.source_url,
            final_url: row.final_url,
            content_type: row.content_type,
            sha256: row.sha256,
            bytes: row.bytes,
            chars: row.chars,
            truncated: row.truncated,
            summarised: row.summarised,
            discovered_urls: from_json(&row.discovered_urls)?,
            fetched_at: row.fetched_at,
        })
    }
}

/// A finished generation the cache may reuse.
#[derive(sqlx::FromRow)]
struct CachedRow {
    id: i64,
    status: Status,
    plan: Option<String>,
    whitelist: String,
    refused_domains: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags are integers on SQLite and `BOOLEAN` on PostgreSQL; nullable ones stay `None`
    /// until set. Each reads back as it was written, through every row that carries one.
    #[tokio::test]
    async fn flags_and_json_columns_read_back_on_both_backends() {
        let dir = tempfile::tempdir().unwrap();
        for catalog in crate::catalog::db::catalogs_of_each_backend(&dir.path().join("catalog.db")).await {
            let backend = catalog.backend();
            let (held, open) = (ServerId::parse("held").unwrap(), ServerId::parse("open").unwrap());
            let allow_domains = ["docs.example.com".to_string()];
            for (id, require_approval) in [(&held, Some(true)), (&open, None)] {
                let generation = catalog
                    .create_prompt_server(NewPromptServer {
                        allow_domains: &allow_domains,
                        dry_run: true,
                        require_approval,
                        ..NewPromptServer::for_test(id)
                    })
                    .await
                    .unwrap();
                let document = NewDocument {
                    url: "https://docs.example.com/api",
                    source_url: "https://docs.example.com/api",
                    final_url: "https://docs.example.com/api",
                    content_type: "text/html",
                    sha256: "0000000000000000000000000000000000000000000000000000000000000000",
                    text: "the reference",
                    bytes: 13,
                    truncated: true,
                    summarised: false,
                    discovered_urls: &["https://docs.example.com/more".to_string()],
                };
                catalog.record_documents(generation, &[document]).await.unwrap();
            }

            let server = catalog.get_server(&held).await.unwrap().expect("the server is stored");
            assert_eq!(server.require_approval, Some(true), "{backend:?}");
            assert_eq!(server.allow_domains, allow_domains, "{backend:?}");
            let generation = server.latest_generation.expect("its first generation");
            assert!(generation.details.dry_run && !generation.details.force, "{backend:?}");
            assert!(!generation.details.cache_hit, "{backend:?}");
            let document = &generation.details.documents[0];
            assert!(document.truncated && !document.summarised, "{backend:?}");
            assert_eq!(document.discovered_urls, ["https://docs.example.com/more"], "{backend:?}");
            let (_, versions) = catalog.list_versions(&held).await.unwrap().expect("the server is stored");
            assert!(versions[0].dry_run && !versions[0].cache_hit, "{backend:?}");

            let unset = catalog.get_server(&open).await.unwrap().expect("the server is stored");
            assert_eq!(unset.require_approval, None, "{backend:?}");
            catalog.close().await;
        }
    }
}
