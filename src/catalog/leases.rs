//! Leases: which replica runs a generation job or a server's drift check.
//!
//! A generation is written with its replica as `lease_owner` and a `lease_expires_at` that the
//! replica pushes forward while the job runs ([`Catalog::renew_leases`]). A replica that dies
//! stops renewing; once the lease has expired another replica claims the job
//! ([`Catalog::claim_abandoned_generation`], `FOR UPDATE SKIP LOCKED`, so two replicas looking at
//! once claim different jobs) and runs it from the start. Every write a job makes checks that its
//! replica still holds the lease ([`CatalogError::LeaseLost`] otherwise), so a replica that was
//! only slow, not dead, cannot finish a job another one took over: each job finishes once.

use super::db::Catalog;
use super::error::CatalogError;
use super::sql::{Backend, status_list};
use super::values::{Flag, from_json, from_optional_json, now_millis, to_json};
use crate::states::{ServerKind, Status, Trigger};
use crate::toolset::{OpenApiSettings, ServerId};

/// A generation job taken over from a replica that stopped renewing its lease.
#[derive(Debug, Clone)]
pub struct ClaimedGeneration {
    pub generation_id: i64,
    pub server: ServerId,
    pub kind: ServerKind,
    pub prompt: String,
    pub allow_domains: Vec<String>,
    pub openapi: Option<OpenApiSettings>,
    pub dry_run: bool,
    pub force: bool,
    pub trigger: Trigger,
    /// A targeted repair, which is not run again (its failures were the other replica's input).
    pub repair: bool,
}

impl Catalog {
    /// When a lease written now expires.
    pub(crate) fn lease_expiry(&self, now: i64) -> i64 {
        now + i64::try_from(self.replica.lease_ttl.as_millis()).unwrap_or(i64::MAX / 2)
    }

    /// Pushes the expiry of the leases this replica holds forward: those of `running` (the jobs
    /// it runs now), and drift checks' not yet released.
    pub async fn renew_leases(&self, running: &[i64]) -> Result<u64, CatalogError> {
        let now = now_millis();
        let renewed = sqlx::query(self.sql(
            "UPDATE generations SET lease_expires_at = $1
             WHERE lease_owner = $2 AND id IN (SELECT value FROM json_each($3))",
            "UPDATE generations SET lease_expires_at = $1
             WHERE lease_owner = $2 AND id IN (SELECT json_array_elements_text($3::json)::bigint)",
        ))
        .bind(self.lease_expiry(now))
        .bind(self.replica.id.as_str())
        .bind(to_json(running))
        .execute(&self.writer)
        .await?;
        let checks = sqlx::query(
            "UPDATE servers SET drift_lease_expires_at = $1 WHERE drift_lease_owner = $2 AND drift_lease_expires_at > $3",
        )
        .bind(self.lease_expiry(now))
        .bind(self.replica.id.as_str())
        .bind(now)
        .execute(&self.writer)
        .await?;
        Ok(renewed.rows_affected() + checks.rows_affected())
    }

    /// Takes the lease on checking `id`'s documentation for drift; `false` while another
    /// replica holds it.
    pub async fn claim_drift_check(&self, id: &ServerId) -> Result<bool, CatalogError> {
        let now = now_millis();
        let claimed = sqlx::query(
            "UPDATE servers SET drift_lease_owner = $1, drift_lease_expires_at = $2
             WHERE id = $3 AND (COALESCE(drift_lease_expires_at, 0) < $4 OR drift_lease_owner = $1)",
        )
        .bind(self.replica.id.as_str())
        .bind(self.lease_expiry(now))
        .bind(id.as_str())
        .bind(now)
        .execute(&self.writer)
        .await?;
        Ok(claimed.rows_affected() == 1)
    }

    /// Ends a drift check this replica ran.
    pub async fn release_drift_check(&self, id: &ServerId) -> Result<(), CatalogError> {
        sqlx::query("UPDATE servers SET drift_lease_expires_at = 0 WHERE id = $1 AND drift_lease_owner = $2")
            .bind(id.as_str())
            .bind(self.replica.id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Whether other replicas may share this catalog (jobs are then leased and taken over).
    pub fn is_shared(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// Lets go of a job this replica stops running (shutdown), so another replica claims it at
    /// once instead of after the lease expires.
    pub async fn release_lease(&self, generation_id: i64) -> Result<(), CatalogError> {
        sqlx::query("UPDATE generations SET lease_expires_at = 0 WHERE id = $1 AND lease_owner = $2")
            .bind(generation_id)
            .bind(self.replica.id.as_str())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Claims one running job whose lease has expired, for this replica, clearing what its
    /// previous run stored (documents, tools) so it can run again from the start.
    pub async fn claim_abandoned_generation(&self) -> Result<Option<ClaimedGeneration>, CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        let running = status_list(&Status::RUNNING);
        let candidate = match self.backend {
            Backend::Postgres => format!(
                "SELECT id FROM generations WHERE status IN ({running}) AND COALESCE(lease_expires_at, 0) < $1
                 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
            ),
            Backend::Sqlite => format!(
                "SELECT id FROM generations WHERE status IN ({running}) AND COALESCE(lease_expires_at, 0) < $1
                 ORDER BY id LIMIT 1"
            ),
        };
        let Some(generation_id): Option<i64> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(candidate)).bind(now).fetch_optional(&mut *tx).await?
        else {
            return Ok(None);
        };
        sqlx::query("UPDATE generations SET lease_owner = $1, lease_expires_at = $2 WHERE id = $3")
            .bind(self.replica.id.as_str())
            .bind(self.lease_expiry(now))
            .bind(generation_id)
            .execute(&mut *tx)
            .await?;
        for statement in
            ["DELETE FROM generation_documents WHERE generation_id = $1", "DELETE FROM tools WHERE generation_id = $1"]
        {
            sqlx::query(statement).bind(generation_id).execute(&mut *tx).await?;
        }
        let row = sqlx::query_as::<_, ClaimedRow>(
            "SELECT g.server_id, g.dry_run, g.force, g.triggered_by, g.repair, s.kind, s.prompt, s.allow_domains,
                    s.openapi
             FROM generations g JOIN servers s ON s.id = g.server_id WHERE g.id = $1",
        )
        .bind(generation_id)
        .fetch_one(&mut *tx)
        .await?;
        let claimed = ClaimedGeneration {
            generation_id,
            server: ServerId::parse(&row.server_id)?,
            kind: row.kind,
            prompt: row.prompt.unwrap_or_default(),
            allow_domains: from_json(&row.allow_domains)?,
            openapi: from_optional_json(row.openapi.as_deref())?,
            dry_run: row.dry_run,
            force: row.force,
            trigger: row.triggered_by,
            repair: row.repair.is_some(),
        };
        tx.commit().await?;
        Ok(Some(claimed))
    }
}

/// A claimed generation's row with its server's.
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    server_id: String,
    #[sqlx(try_from = "Flag")]
    dry_run: bool,
    #[sqlx(try_from = "Flag")]
    force: bool,
    triggered_by: Trigger,
    repair: Option<String>,
    kind: ServerKind,
    prompt: Option<String>,
    allow_domains: String,
    openapi: Option<String>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::catalog::db::Replica;
    use crate::catalog::generations::{NewDocument, NewPromptServer};
    use crate::config::CatalogLocation;
    use crate::tasks::Tasks;

    fn document(text: &str) -> NewDocument<'_> {
        NewDocument {
            url: "https://docs.example.com/api",
            source_url: "https://docs.example.com/api",
            final_url: "https://docs.example.com/api",
            content_type: "text/html",
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
            text,
            bytes: text.len(),
            truncated: false,
            summarised: false,
            discovered_urls: &[],
        }
    }

    /// A replica whose job was taken over (it was slow, not dead) cannot store documents for it,
    /// fetched or copied, any more than its other writes: the new owner's run would otherwise
    /// meet them.
    #[tokio::test]
    async fn a_document_write_after_the_lease_passed_on_fails_with_lease_lost() {
        let Some(url) = crate::catalog::db::postgres_support::fresh_database().await else {
            eprintln!("skipped: PostgreSQL tests are off (MCPBOOTD_SKIP_POSTGRES_TESTS=1)");
            return;
        };
        let location = CatalogLocation::Postgres { url, password_file: None, max_connections: 4 };
        let replica = |id: &str| Replica { id: id.into(), lease_ttl: Duration::from_secs(15) };
        let slow = Catalog::open(&location, replica("slow"), &Tasks::new()).await.unwrap();
        let other = Catalog::open(&location, replica("other"), &Tasks::new()).await.unwrap();
        let id = ServerId::parse("docs").unwrap();
        let generation = slow.create_prompt_server(NewPromptServer::for_test(&id)).await.unwrap();
        slow.record_documents(generation, &[document("while the lease is held")]).await.unwrap();

        // The lease runs out (released here, as an expired one would be) and the other replica
        // claims the job.
        slow.release_lease(generation).await.unwrap();
        let claimed = other.claim_abandoned_generation().await.unwrap().expect("the job is claimed");
        assert_eq!(claimed.generation_id, generation);

        let fetched = slow.record_documents(generation, &[document("too late")]).await.unwrap_err();
        assert!(matches!(&fetched, CatalogError::LeaseLost(owner) if owner == "other"), "{fetched:?}");
        let copied = slow.copy_documents(generation, generation).await.unwrap_err();
        assert!(matches!(&copied, CatalogError::LeaseLost(owner) if owner == "other"), "{copied:?}");
        other.record_documents(generation, &[document("the new owner's")]).await.expect("the owner writes");
        let stored: Vec<String> = sqlx::query_scalar("SELECT url FROM generation_documents WHERE generation_id = $1")
            .bind(generation)
            .fetch_all(&other.reader)
            .await
            .unwrap();
        assert_eq!(stored.len(), 1, "only the new owner's documents: {stored:?}");
    }
}
