//! Connected accounts: each user's sealed tokens (or key) for a server's per-user credential, and
//! the connect flows a link starts (see `crate::accounts`).
//!
//! A flow row is found by the sha256 of its live secret (the link's token, then the OAuth
//! `state` of each browser step), and taking it deletes it: a link or a callback is spent the
//! moment it is used, on every replica at once.

use super::db::Catalog;
use super::error::CatalogError;
use super::values::now_millis;
use crate::toolset::ServerId;

/// One user's connection to a per-user credential, as stored (tokens sealed).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConnectionRecord {
    pub id: String,
    pub server_id: String,
    pub credential: String,
    pub issuer: String,
    pub subject: String,
    pub sealed_access: Vec<u8>,
    pub sealed_refresh: Option<Vec<u8>>,
    pub scopes: String,
    pub connected_at: i64,
    /// When the access token expires, in milliseconds (`None`: it does not say).
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    /// Bumped by every refresh.
    pub version: i64,
}

/// A connection to store: a first connect, or a reconnect that replaces the tokens.
#[derive(Debug, Clone)]
pub struct NewConnection {
    pub server_id: String,
    pub credential: String,
    pub issuer: String,
    pub subject: String,
    pub sealed_access: Vec<u8>,
    pub sealed_refresh: Option<Vec<u8>>,
    pub scopes: String,
    pub expires_at: Option<i64>,
}

/// One step of a connect flow, as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FlowRecord {
    pub step: String,
    pub server_id: Option<String>,
    pub credential: Option<String>,
    pub issuer: String,
    pub subject: Option<String>,
    pub sealed_verifier: Option<Vec<u8>>,
    pub expires_at: i64,
}

/// What [`Catalog::take_flow`] found.
#[derive(Debug)]
pub enum TakenFlow {
    Taken(FlowRecord),
    /// The secret was live, but past its lifetime (it is spent now all the same).
    Expired,
    /// No such live secret: never issued, already used, or another step's.
    Unknown,
}

/// The columns of a [`ConnectionRecord`], spelled once for every statement that returns a connection.
macro_rules! connection_columns {
    () => {
        "id, server_id, credential, issuer, subject, sealed_access, sealed_refresh, scopes, connected_at, expires_at, \
         last_used_at, version"
    };
}

impl Catalog {
    /// Stores a connection, replacing the tokens of the same user's earlier one (whose id stays).
    /// `None` when the credential no longer exists.
    pub async fn put_connection(&self, new: &NewConnection) -> Result<Option<ConnectionRecord>, CatalogError> {
        let mut tx = self.writer.begin().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM credentials WHERE server_id = $1 AND name = $2")
            .bind(&new.server_id)
            .bind(&new.credential)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let now = now_millis();
        let updated = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "UPDATE connections SET sealed_access = $1, sealed_refresh = $2, scopes = $3, expires_at = $4,
                connected_at = $5, version = version + 1, refresh_owner = NULL, refresh_until = NULL
             WHERE server_id = $6 AND credential = $7 AND issuer = $8 AND subject = $9 RETURNING ",
            connection_columns!(),
            ""
        ))
        .bind(&new.sealed_access)
        .bind(&new.sealed_refresh)
        .bind(&new.scopes)
        .bind(new.expires_at)
        .bind(now)
        .bind(&new.server_id)
        .bind(&new.credential)
        .bind(&new.issuer)
        .bind(&new.subject)
        .fetch_optional(&mut *tx)
        .await?;
        let row = match updated {
            Some(row) => row,
            None => {
                sqlx::query_as::<_, ConnectionRecord>(concat!(
                    "INSERT INTO connections (id, server_id, credential, issuer, subject, sealed_access, sealed_refresh,
                        scopes, connected_at, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING ", connection_columns!(), ""
                ))
                .bind(uuid::Uuid::now_v7().simple().to_string())
                .bind(&new.server_id)
                .bind(&new.credential)
                .bind(&new.issuer)
                .bind(&new.subject)
                .bind(&new.sealed_access)
                .bind(&new.sealed_refresh)
                .bind(&new.scopes)
                .bind(now)
                .bind(new.expires_at)
                .fetch_one(&mut *tx)
                .await?
            }
        };
        tx.commit().await?;
        Ok(Some(row))
    }

    /// A user's connection to a server's credential.
    pub async fn connection(
        &self,
        server: &ServerId,
        credential: &str,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<ConnectionRecord>, CatalogError> {
        let row = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "SELECT ",
            connection_columns!(),
            " FROM connections
             WHERE server_id = $1 AND credential = $2 AND issuer = $3 AND subject = $4"
        ))
        .bind(server.as_str())
        .bind(credential)
        .bind(issuer)
        .bind(subject)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row)
    }

    /// The connection with this id, read from the writer (which a refresh just wrote).
    pub async fn connection_by_id(&self, id: &str) -> Result<Option<ConnectionRecord>, CatalogError> {
        let row = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "SELECT ",
            connection_columns!(),
            " FROM connections WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.writer)
        .await?;
        Ok(row)
    }

    /// A server's connections, by credential and subject.
    pub async fn connections(&self, server: &ServerId) -> Result<Vec<ConnectionRecord>, CatalogError> {
        let rows = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "SELECT ",
            connection_columns!(),
            " FROM connections WHERE server_id = $1 ORDER BY credential, subject, issuer"
        ))
        .bind(server.as_str())
        .fetch_all(&self.reader)
        .await?;
        Ok(rows)
    }

    /// One person's connections, on every server.
    pub async fn connections_of(&self, issuer: &str, subject: &str) -> Result<Vec<ConnectionRecord>, CatalogError> {
        let rows = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "SELECT ",
            connection_columns!(),
            " FROM connections WHERE issuer = $1 AND subject = $2
             ORDER BY server_id, credential"
        ))
        .bind(issuer)
        .bind(subject)
        .fetch_all(&self.reader)
        .await?;
        Ok(rows)
    }

    /// Deletes a connection of `server` (or, with `owner`, only if it is that person's); the
    /// deleted row, whose tokens the caller may still revoke upstream.
    pub async fn delete_connection(
        &self,
        server: Option<&ServerId>,
        id: &str,
        owner: Option<(&str, &str)>,
    ) -> Result<Option<ConnectionRecord>, CatalogError> {
        let row = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "DELETE FROM connections WHERE id = $1 AND ($2 = '' OR server_id = $2)
                AND ($3 = '' OR (issuer = $3 AND subject = $4)) RETURNING ",
            connection_columns!(),
            ""
        ))
        .bind(id)
        .bind(server.map_or("", ServerId::as_str))
        .bind(owner.map_or("", |(issuer, _)| issuer))
        .bind(owner.map_or("", |(_, subject)| subject))
        .fetch_optional(&self.writer)
        .await?;
        Ok(row)
    }

    /// Forgets a connection whose refresh token the upstream refused (`invalid_grant`), unless
    /// another refresh replaced its tokens meanwhile.
    pub async fn forget_connection(&self, id: &str, version: i64) -> Result<(), CatalogError> {
        sqlx::query("DELETE FROM connections WHERE id = $1 AND version = $2")
            .bind(id)
            .bind(version)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Records a use, at most this often per connection (the caller throttles).
    pub async fn touch_connection(&self, id: &str, at: i64) -> Result<(), CatalogError> {
        sqlx::query("UPDATE connections SET last_used_at = $1 WHERE id = $2")
            .bind(at)
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Takes the right to refresh a connection until `until` (milliseconds): one refresh at a
    /// time per connection, across replicas. False when another holder's right is still live
    /// or the connection changed since `version`.
    pub async fn claim_refresh(&self, id: &str, version: i64, owner: &str, until: i64) -> Result<bool, CatalogError> {
        let claimed = sqlx::query(
            "UPDATE connections SET refresh_owner = $1, refresh_until = $2
             WHERE id = $3 AND version = $4 AND (refresh_until IS NULL OR refresh_until < $5)",
        )
        .bind(owner)
        .bind(until)
        .bind(id)
        .bind(version)
        .bind(now_millis())
        .execute(&self.writer)
        .await?;
        Ok(claimed.rows_affected() == 1)
    }

    /// Stores refreshed tokens (keeping the refresh token when the upstream sent no new one) and
    /// gives up the right to refresh.
    pub async fn store_refreshed(
        &self,
        id: &str,
        sealed_access: &[u8],
        sealed_refresh: Option<&[u8]>,
        scopes: Option<&str>,
        expires_at: Option<i64>,
    ) -> Result<Option<ConnectionRecord>, CatalogError> {
        let row = sqlx::query_as::<_, ConnectionRecord>(concat!(
            "UPDATE connections SET sealed_access = $1, sealed_refresh = COALESCE($2, sealed_refresh),
                scopes = COALESCE($3, scopes), expires_at = $4, version = version + 1,
                refresh_owner = NULL, refresh_until = NULL
             WHERE id = $5 RETURNING ",
            connection_columns!(),
            ""
        ))
        .bind(sealed_access)
        .bind(sealed_refresh)
        .bind(scopes)
        .bind(expires_at)
        .bind(id)
        .fetch_optional(&self.writer)
        .await?;
        Ok(row)
    }

    /// Gives up the right to refresh after a refresh that failed for a passing reason.
    pub async fn release_refresh(&self, id: &str, owner: &str) -> Result<(), CatalogError> {
        sqlx::query(
            "UPDATE connections SET refresh_owner = NULL, refresh_until = NULL WHERE id = $1 AND refresh_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Every connection's sealed tokens, for re-encryption under a new key.
    pub async fn sealed_connections(&self) -> Result<Vec<ConnectionRecord>, CatalogError> {
        let rows =
            sqlx::query_as::<_, ConnectionRecord>(concat!("SELECT ", connection_columns!(), " FROM connections"))
                .fetch_all(&self.reader)
                .await?;
        Ok(rows)
    }

    /// Stores a flow step, live until `expires_at` (milliseconds), found by `secret_sha256`.
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_flow(
        &self,
        secret_sha256: &str,
        step: &str,
        server: Option<&str>,
        credential: Option<&str>,
        issuer: &str,
        subject: Option<&str>,
        sealed_verifier: Option<&[u8]>,
        expires_at: i64,
    ) -> Result<(), CatalogError> {
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        // Expired steps go as new ones come, so abandoned flows do not pile up.
        sqlx::query("DELETE FROM connect_flows WHERE expires_at < $1").bind(now).execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO connect_flows (secret_sha256, step, server_id, credential, issuer, subject, sealed_verifier,
                created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(secret_sha256)
        .bind(step)
        .bind(server)
        .bind(credential)
        .bind(issuer)
        .bind(subject)
        .bind(sealed_verifier)
        .bind(now)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A live flow step, left in place (a signed-in session on the connect pages).
    pub async fn live_flow(&self, secret_sha256: &str, step: &str) -> Result<Option<FlowRecord>, CatalogError> {
        let row = sqlx::query_as::<_, FlowRecord>(
            "SELECT step, server_id, credential, issuer, subject, sealed_verifier, expires_at FROM connect_flows
             WHERE secret_sha256 = $1 AND step = $2 AND expires_at >= $3",
        )
        .bind(secret_sha256)
        .bind(step)
        .bind(now_millis())
        .fetch_optional(&self.writer)
        .await?;
        Ok(row)
    }

    /// Spends a flow step: deletes it and returns it if it was live at `step`.
    pub async fn take_flow(&self, secret_sha256: &str, step: &str) -> Result<TakenFlow, CatalogError> {
        let row = sqlx::query_as::<_, FlowRecord>(
            "DELETE FROM connect_flows WHERE secret_sha256 = $1 AND step = $2
             RETURNING step, server_id, credential, issuer, subject, sealed_verifier, expires_at",
        )
        .bind(secret_sha256)
        .bind(step)
        .fetch_optional(&self.writer)
        .await?;
        let Some(flow) = row else { return Ok(TakenFlow::Unknown) };
        Ok(if flow.expires_at < now_millis() { TakenFlow::Expired } else { TakenFlow::Taken(flow) })
    }
}
