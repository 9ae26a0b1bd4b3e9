//! Servers: what is registered, what is served, and the admin view of one server.

use super::db::Catalog;
use super::error::CatalogError;
use super::generations::GenerationRecord;
use super::tools::StoredTool;
use super::values::{Flag, from_json, from_optional_json, now_millis, to_json};
use super::versions::DriftState;
use crate::states::{ServerKind, Status};
use crate::toolset::{AuthSetting, CodeModeSettings, OpenApiSettings, ServerId, ServerLimits, ToolSpec};
use crate::whitelist::Whitelist;

/// A server as the list of servers shows it.
#[derive(Debug, Clone)]
pub struct ServerSummary {
    pub id: ServerId,
    pub name: String,
    pub kind: ServerKind,
    pub status: Status,
    /// Tools of the generation being served.
    pub tool_count: i64,
    /// The version being served.
    pub active_version: Option<i64>,
    pub drift: Option<DriftState>,
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
    /// The server's own auth setting (never together with an access token).
    pub auth: Option<AuthSetting>,
    pub code_mode: Option<CodeModeSettings>,
    /// Its traffic limits (`None`: the daemon's defaults).
    pub limits: Option<ServerLimits>,
    /// How many credentials the server has and when the newest was set: a mount built with
    /// other credentials is out of date.
    pub credentials_stamp: (i64, i64),
}

/// What serving a generation takes: its whitelist and its tools, in order.
#[derive(Debug, Clone)]
pub struct ServedGeneration {
    /// The server's description, the `instructions` MCP hosts get.
    pub description: Option<String>,
    pub whitelist: Whitelist,
    pub tools: Vec<ToolSpec>,
    /// Whether it is in discovery mode: its tools are a few of its operations, and the rest are
    /// reached through the standard tools (read with [`Catalog::discovery_index`] and
    /// [`Catalog::discovery_operation`] when first needed).
    pub discovery: bool,
}

/// A server with its active generation and tools, as the admin view needs it.
#[derive(Debug, Clone)]
pub struct ServerRecord {
    pub id: ServerId,
    pub name: String,
    pub description: Option<String>,
    pub kind: ServerKind,
    pub prompt: Option<String>,
    pub allow_domains: Vec<String>,
    pub status: Status,
    pub created_at: i64,
    pub updated_at: i64,
    /// Hex sha256 of the MCP access token, when the mount requires one.
    pub access_token_sha256: Option<String>,
    /// The server's own auth setting (never together with an access token).
    pub auth: Option<AuthSetting>,
    /// Names of the server's upstream credentials.
    pub credentials: Vec<String>,
    pub code_mode: Option<CodeModeSettings>,
    pub limits: Option<ServerLimits>,
    /// How tools are derived, for a server registered from an API description.
    pub openapi: Option<OpenApiSettings>,
    /// Whether new versions wait for approval; `None`: the daemon's setting.
    pub require_approval: Option<bool>,
    /// The last documentation drift check.
    pub drift: Option<DriftState>,
    /// The generation being served.
    pub generation: Option<GenerationRecord>,
    /// The newest generation, when it is not the one being served (running, failed or planned).
    pub latest_generation: Option<GenerationRecord>,
}

impl Catalog {
    pub async fn list_servers(&self) -> Result<Vec<ServerSummary>, CatalogError> {
        let rows = sqlx::query_as::<_, SummaryRow>(
            "SELECT s.id, s.name, s.kind, s.status, s.created_at, s.updated_at, s.drift,
                    (SELECT COUNT(*) FROM tools t WHERE t.generation_id = s.active_generation_id) AS tool_count,
                    (SELECT version FROM generations g WHERE g.id = s.active_generation_id) AS active_version
             FROM servers s ORDER BY s.created_at, s.id",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter().map(ServerSummary::try_from).collect()
    }

    /// One server as the admin view shows it, read in one snapshot: a server deleted or
    /// regenerated meanwhile is seen whole before or whole after, never half.
    pub async fn get_server(&self, id: &ServerId) -> Result<Option<ServerRecord>, CatalogError> {
        let mut snapshot = self.snapshot().await?;
        let row = sqlx::query_as::<_, ServerRow>(
            "SELECT id, name, description, kind, prompt, allow_domains, status, active_generation_id, created_at,
                    updated_at, access_token_sha256, auth, code_mode, limits, openapi, require_approval, drift
             FROM servers WHERE id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *snapshot)
        .await?;
        let server = match row {
            Some(row) => Some(server_from_row(&mut snapshot, row).await?),
            None => None,
        };
        snapshot.rollback().await?;
        Ok(server)
    }

    /// Every server with a generation to serve, in one query: what start-up mounts.
    pub async fn mount_records(&self) -> Result<Vec<MountRecord>, CatalogError> {
        let rows = sqlx::query_as::<_, MountRow>(
            "SELECT id, name, active_generation_id, access_token_sha256, auth, code_mode, limits,
                    (SELECT COUNT(*) FROM credentials c WHERE c.server_id = s.id) AS credential_count,
                    (SELECT COALESCE(MAX(rotated_at), 0) FROM credentials c WHERE c.server_id = s.id) AS credentials_at
             FROM servers s WHERE active_generation_id IS NOT NULL",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter().map(MountRecord::try_from).collect()
    }

    /// One server's [`MountRecord`]; `None` if it does not exist or serves no generation yet.
    pub async fn mount_record(&self, id: &ServerId) -> Result<Option<MountRecord>, CatalogError> {
        let row = sqlx::query_as::<_, MountRow>(
            "SELECT id, name, active_generation_id, access_token_sha256, auth, code_mode, limits,
                    (SELECT COUNT(*) FROM credentials c WHERE c.server_id = s.id) AS credential_count,
                    (SELECT COALESCE(MAX(rotated_at), 0) FROM credentials c WHERE c.server_id = s.id) AS credentials_at
             FROM servers s WHERE id = $1 AND active_generation_id IS NOT NULL",
        )
        .bind(id.as_str())
        .fetch_optional(&self.reader)
        .await?;
        row.map(MountRecord::try_from).transpose()
    }

    /// A finished generation's whitelist and tools, in one query: what a mount is built from.
    /// `None` if the generation no longer exists (its server was deleted).
    pub async fn served_generation(&self, generation_id: i64) -> Result<Option<ServedGeneration>, CatalogError> {
        let rows = sqlx::query_as::<_, ServedRow>(
            "SELECT s.description AS server_description, g.whitelist, t.name, t.title, t.description,
                    t.input_schema, t.output_schema, t.handler, t.annotations,
                    (SELECT COUNT(*) FROM discovery d WHERE d.generation_id = g.id) AS discovery
             FROM generations g JOIN servers s ON s.id = g.server_id
             LEFT JOIN tools t ON t.generation_id = g.id
             WHERE g.id = $1 ORDER BY t.position",
        )
        .bind(generation_id)
        .fetch_all(&self.reader)
        .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let whitelist = from_json(&first.whitelist)?;
        let description = first.server_description.clone();
        let discovery = first.discovery > 0;
        let mut tools = Vec::with_capacity(rows.len());
        for row in rows {
            // A generation without tools yields one row of NULLs from the outer join.
            if let Some(tool) = row.tool()? {
                tools.push(ToolSpec::try_from(tool)?);
            }
        }
        Ok(Some(ServedGeneration { description, whitelist, tools, discovery }))
    }

    /// A server's status without loading its generations; `None` if there is no such server.
    pub async fn server_status(&self, id: &ServerId) -> Result<Option<Status>, CatalogError> {
        Ok(sqlx::query_scalar("SELECT status FROM servers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.reader)
            .await?)
    }

    /// Sets (or, with `None`, removes) a server's MCP access token digest; a token replaces the
    /// server's auth setting. Returns whether a setting was removed, `None` if there is no such
    /// server.
    pub async fn set_access_token(&self, id: &ServerId, sha256: Option<&str>) -> Result<Option<bool>, CatalogError> {
        let mut tx = self.writer.begin().await?;
        let setting: Option<Option<String>> = sqlx::query_scalar("SELECT auth FROM servers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(setting) = setting else {
            return Ok(None);
        };
        let removes_setting = sha256.is_some() && setting.is_some();
        let sql = if sha256.is_some() {
            "UPDATE servers SET access_token_sha256 = $1, auth = NULL, updated_at = $2 WHERE id = $3"
        } else {
            "UPDATE servers SET access_token_sha256 = $1, updated_at = $2 WHERE id = $3"
        };
        sqlx::query(sql).bind(sha256).bind(now_millis()).bind(id.as_str()).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Some(removes_setting))
    }

    /// Sets (or with `None` clears) a server's auth setting; a setting replaces the server's
    /// access token. Returns whether the server had a token (removed by a setting, kept when the
    /// setting is cleared), `None` if there is no such server.
    pub async fn set_auth(&self, id: &ServerId, setting: Option<&AuthSetting>) -> Result<Option<bool>, CatalogError> {
        let mut tx = self.writer.begin().await?;
        let token: Option<Option<String>> = sqlx::query_scalar("SELECT access_token_sha256 FROM servers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(token) = token else {
            return Ok(None);
        };
        let sql = if setting.is_some() {
            "UPDATE servers SET auth = $1, access_token_sha256 = NULL, updated_at = $2 WHERE id = $3"
        } else {
            "UPDATE servers SET auth = $1, updated_at = $2 WHERE id = $3"
        };
        sqlx::query(sql).bind(setting.map(to_json)).bind(now_millis()).bind(id.as_str()).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Some(token.is_some()))
    }

    /// Sets (or with `None` clears) whether a server's new versions wait for approval; `false`
    /// if there is no such server.
    pub async fn set_require_approval(&self, id: &ServerId, required: Option<bool>) -> Result<bool, CatalogError> {
        let updated = sqlx::query("UPDATE servers SET require_approval = $1, updated_at = $2 WHERE id = $3")
            .bind(required)
            .bind(now_millis())
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(updated.rows_affected() == 1)
    }

    /// Sets (or with `None` clears) a server's code-mode settings; `false` if there is no
    /// such server.
    pub async fn set_code_mode(
        &self,
        id: &ServerId,
        settings: Option<&CodeModeSettings>,
    ) -> Result<bool, CatalogError> {
        let updated = sqlx::query("UPDATE servers SET code_mode = $1, updated_at = $2 WHERE id = $3")
            .bind(settings.map(to_json))
            .bind(now_millis())
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(updated.rows_affected() == 1)
    }

    /// Sets (or with `None` clears) a server's traffic limits; `false` if there is no such server.
    pub async fn set_limits(&self, id: &ServerId, limits: Option<&ServerLimits>) -> Result<bool, CatalogError> {
        let updated = sqlx::query("UPDATE servers SET limits = $1, updated_at = $2 WHERE id = $3")
            .bind(limits.map(to_json))
            .bind(now_millis())
            .bind(id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(updated.rows_affected() == 1)
    }

    /// Deletes a server with its generations, tools and call log. Returns false if it did not exist.
    pub async fn delete_server(&self, id: &ServerId) -> Result<bool, CatalogError> {
        let mut tx = self.writer.begin().await?;
        // Break the server -> generation reference first so the cascade has a clean order.
        sqlx::query("UPDATE servers SET active_generation_id = NULL WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        let deleted = sqlx::query("DELETE FROM servers WHERE id = $1").bind(id.as_str()).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(deleted.rows_affected() > 0)
    }
}

/// The rest of a server's admin view, read in the caller's snapshot so the rows agree.
async fn server_from_row(snapshot: &mut sqlx::AnyConnection, row: ServerRow) -> Result<ServerRecord, CatalogError> {
    let id = ServerId::parse(&row.id)?;
    let generation_id = row.active_generation_id;
    let generation = match generation_id {
        Some(generation_id) => Some(present(Catalog::generation(snapshot, generation_id).await?)?),
        None => None,
    };
    let latest_id: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM generations WHERE server_id = $1")
        .bind(id.as_str())
        .fetch_one(&mut *snapshot)
        .await?;
    let credentials: Vec<String> =
        sqlx::query_scalar("SELECT name FROM credentials WHERE server_id = $1 ORDER BY name")
            .bind(id.as_str())
            .fetch_all(&mut *snapshot)
            .await?;
    let latest_generation = match latest_id {
        Some(latest) if Some(latest) != generation_id => Some(present(Catalog::generation(snapshot, latest).await?)?),
        _ => None,
    };
    Ok(ServerRecord {
        id,
        name: row.name,
        description: row.description,
        kind: row.kind,
        prompt: row.prompt,
        allow_domains: from_json(&row.allow_domains)?,
        status: row.status,
        created_at: row.created_at,
        updated_at: row.updated_at,
        access_token_sha256: row.access_token_sha256,
        auth: from_optional_json(row.auth.as_deref())?,
        code_mode: from_optional_json(row.code_mode.as_deref())?,
        limits: from_optional_json(row.limits.as_deref())?,
        openapi: from_optional_json(row.openapi.as_deref())?,
        require_approval: row.require_approval.map(bool::from),
        drift: from_optional_json(row.drift.as_deref())?,
        credentials,
        generation,
        latest_generation,
    })
}

/// A generation the server row points at; within one snapshot it must be there.
fn present(generation: Option<GenerationRecord>) -> Result<GenerationRecord, CatalogError> {
    generation.ok_or_else(|| CatalogError::Corrupt("a server refers to a generation that does not exist".into()))
}

/// A `servers` row as the list of servers reads it, with its tool count and active version.
#[derive(sqlx::FromRow)]
struct SummaryRow {
    id: String,
    name: String,
    kind: ServerKind,
    status: Status,
    tool_count: i64,
    active_version: Option<i64>,
    drift: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<SummaryRow> for ServerSummary {
    type Error = CatalogError;

    fn try_from(row: SummaryRow) -> Result<ServerSummary, CatalogError> {
        Ok(ServerSummary {
            id: ServerId::parse(&row.id)?,
            name: row.name,
            kind: row.kind,
            status: row.status,
            tool_count: row.tool_count,
            active_version: row.active_version,
            drift: from_optional_json(row.drift.as_deref())?,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// A `servers` row as the admin view reads it.
#[derive(sqlx::FromRow)]
struct ServerRow {
    id: String,
    name: String,
    description: Option<String>,
    kind: ServerKind,
    prompt: Option<String>,
    allow_domains: String,
    status: Status,
    active_generation_id: Option<i64>,
    created_at: i64,
    updated_at: i64,
    access_token_sha256: Option<String>,
    auth: Option<String>,
    code_mode: Option<String>,
    limits: Option<String>,
    openapi: Option<String>,
    require_approval: Option<Flag>,
    drift: Option<String>,
}

/// A served server's row with its credentials' count and newest rotation.
#[derive(sqlx::FromRow)]
struct MountRow {
    id: String,
    name: String,
    active_generation_id: i64,
    access_token_sha256: Option<String>,
    auth: Option<String>,
    code_mode: Option<String>,
    limits: Option<String>,
    credential_count: i64,
    credentials_at: i64,
}

impl TryFrom<MountRow> for MountRecord {
    type Error = CatalogError;

    fn try_from(row: MountRow) -> Result<MountRecord, CatalogError> {
        Ok(MountRecord {
            id: ServerId::parse(&row.id)?,
            name: row.name,
            generation_id: row.active_generation_id,
            access_token_sha256: row.access_token_sha256,
            auth: from_optional_json(row.auth.as_deref())?,
            code_mode: from_optional_json(row.code_mode.as_deref())?,
            limits: from_optional_json(row.limits.as_deref())?,
            credentials_stamp: (row.credential_count, row.credentials_at),
        })
    }
}

/// One row of a served generation: its server's description, its whitelist, whether it is in
/// discovery mode, and one of its tools (all `NULL` for a generation without tools, which the
/// outer join still answers with one row).
#[derive(sqlx::FromRow)]
struct ServedRow {
    server_description: Option<String>,
    whitelist: String,
    discovery: i64,
    name: Option<String>,
    title: Option<String>,
    description: Option<String>,
    input_schema: Option<String>,
    output_schema: Option<String>,
    handler: Option<String>,
    annotations: Option<String>,
}

impl ServedRow {
    /// The row's tool; `None` for the row of a generation without tools.
    fn tool(self) -> Result<Option<StoredTool>, CatalogError> {
        let Some(name) = self.name else { return Ok(None) };
        let missing = |column: &str| CatalogError::Corrupt(format!("tool {name:?} has no {column}"));
        Ok(Some(StoredTool {
            title: self.title,
            description: self.description.ok_or_else(|| missing("description"))?,
            input_schema: self.input_schema.ok_or_else(|| missing("input_schema"))?,
            output_schema: self.output_schema,
            handler: self.handler.ok_or_else(|| missing("handler"))?,
            annotations: self.annotations,
            name,
        }))
    }
}
