//! Toolset registrations, written with group commit.
//!
//! With `synchronous = FULL` every write transaction ends in a WAL sync, and there is one writer.
//! Registrations therefore go to a background task that writes everything waiting at that moment
//! in one transaction and answers each caller after the commit: one sync for many registrations
//! when they arrive together, no added wait when one arrives alone. Each registration is still
//! all-or-nothing: a taken id writes nothing for that registration and is answered with
//! [`CatalogError::Conflict`]; a failing transaction fails every registration in it and leaves
//! nothing behind.

use sqlx::AnyPool;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::credential_rows::{NewCredential, insert_credentials};
use super::error::CatalogError;
use super::tools::{ToolExtras, ToolRow, insert_tools};
use super::values::{GENERATOR_VERSION, now_millis, to_json};
use crate::states::{GenerationSource, ServerKind, Status};
use crate::tasks::Tasks;
use crate::toolset::{AuthSetting, CodeModeSettings, ServerId, Toolset};
use crate::whitelist::Whitelist;

/// Registrations written in one transaction at most.
const BATCH: usize = 64;
/// Registrations waiting for the writer before callers wait to queue.
const QUEUE: usize = 1024;

/// What a toolset registration stores.
pub struct NewToolsetServer {
    pub id: ServerId,
    pub name: String,
    pub description: Option<String>,
    pub access_token_sha256: Option<String>,
    pub auth: Option<AuthSetting>,
    pub allow_domains: Vec<String>,
    pub whitelist: Whitelist,
    pub toolset: Toolset,
    pub credentials: Vec<NewCredential>,
    pub code_mode: Option<CodeModeSettings>,
}

/// The queue of toolset registrations, and the writer task behind it.
#[derive(Clone)]
pub struct Registrations {
    queue: mpsc::Sender<Pending>,
}

/// A registration as the writer stores it, JSON columns already serialised by the caller.
struct Pending {
    id: ServerId,
    name: String,
    description: Option<String>,
    access_token_sha256: Option<String>,
    auth: Option<String>,
    allow_domains: String,
    whitelist: String,
    tools: Vec<ToolRow>,
    credentials: Vec<NewCredential>,
    code_mode: Option<String>,
    done: oneshot::Sender<Result<i64, CatalogError>>,
}

impl Registrations {
    /// Starts the writer on `tasks`, writing through `writer`.
    pub fn start(writer: AnyPool, tasks: &Tasks) -> Registrations {
        let (queue, received) = mpsc::channel(QUEUE);
        tasks.spawn(write(writer, received, tasks.requests_drained()));
        Registrations { queue }
    }

    /// Stores a ready toolset server, its generation and tools; returns the generation id once
    /// the transaction is committed (and synced).
    pub async fn register(&self, new: NewToolsetServer) -> Result<i64, CatalogError> {
        let no_extras = ToolExtras::default();
        let (done, answer) = oneshot::channel();
        let pending = Pending {
            allow_domains: to_json(&new.allow_domains),
            whitelist: to_json(&new.whitelist),
            tools: new.toolset.tools().iter().map(|tool| ToolRow::new(tool, &no_extras)).collect(),
            id: new.id,
            name: new.name,
            description: new.description,
            access_token_sha256: new.access_token_sha256,
            auth: new.auth.as_ref().map(to_json),
            credentials: new.credentials,
            code_mode: new.code_mode.as_ref().map(to_json),
            done,
        };
        let stopped = || CatalogError::WriteFailed("the catalog writer has stopped".into());
        self.queue.send(pending).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The writer task: runs until every [`Registrations`] handle (every catalog handle) is
/// dropped, or until requests are drained at shutdown, after which it writes what is already
/// queued and refuses the rest.
async fn write(writer: AnyPool, mut queue: mpsc::Receiver<Pending>, drained: WaitForCancellationFutureOwned) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut drained = std::pin::pin!(drained);
    let mut closed = false;
    loop {
        let received = tokio::select! {
            received = queue.recv_many(&mut batch, BATCH) => received,
            () = &mut drained, if !closed => {
                // What is queued is still written; `recv_many` answers 0 once it is.
                queue.close();
                closed = true;
                continue;
            }
        };
        if received == 0 {
            break;
        }
        match store(&writer, &batch).await {
            Ok(outcomes) => {
                for (pending, outcome) in batch.drain(..).zip(outcomes) {
                    let _ = pending.done.send(outcome);
                }
            }
            Err(error) => {
                for pending in batch.drain(..) {
                    let _ = pending.done.send(Err(error.shared()));
                }
            }
        }
    }
}

/// One transaction for the whole batch; per registration the generation id or a conflict.
async fn store(writer: &AnyPool, batch: &[Pending]) -> Result<Vec<Result<i64, CatalogError>>, CatalogError> {
    let now = now_millis();
    let mut tx = writer.begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for new in batch {
        let inserted = sqlx::query(
            "INSERT INTO servers (id, name, description, kind, prompt, allow_domains, status, created_at, updated_at,
                                  access_token_sha256, code_mode, auth)
             VALUES ($1, $2, $3, $4, NULL, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING",
        )
        .bind(new.id.as_str())
        .bind(&new.name)
        .bind(&new.description)
        .bind(ServerKind::Toolset)
        .bind(&new.allow_domains)
        .bind(Status::Ready)
        .bind(now)
        .bind(now)
        .bind(&new.access_token_sha256)
        .bind(&new.code_mode)
        .bind(&new.auth)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            // Nothing was written for this one (the id is taken, possibly earlier in this batch).
            outcomes.push(Err(CatalogError::Conflict(new.id.to_string())));
            continue;
        }
        let generation_id: i64 = sqlx::query_scalar(
            "INSERT INTO generations (server_id, source, status, generator_version, whitelist, created_at, finished_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(new.id.as_str())
        .bind(GenerationSource::Toolset)
        .bind(Status::Ready)
        .bind(GENERATOR_VERSION)
        .bind(&new.whitelist)
        .bind(now)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        insert_tools(&mut tx, generation_id, &new.tools).await?;
        insert_credentials(&mut tx, &new.id, &new.credentials, now).await?;
        sqlx::query("UPDATE servers SET active_generation_id = $1 WHERE id = $2")
            .bind(generation_id)
            .bind(new.id.as_str())
            .execute(&mut *tx)
            .await?;
        outcomes.push(Ok(generation_id));
    }
    tx.commit().await?;
    Ok(outcomes)
}
