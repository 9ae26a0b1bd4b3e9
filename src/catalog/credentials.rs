//! A server's credentials for upstream APIs: the binding in clear, the value sealed (the catalog
//! never holds a value it could print; see `crate::credentials::vault`).

use super::credential_rows::{NewCredential, insert_credentials};
use super::db::Catalog;
use super::error::CatalogError;
use super::values::{from_json, now_millis, to_json};
use crate::credentials::Binding;
use crate::toolset::ServerId;

/// One credential as stored.
#[derive(Debug, Clone)]
pub struct CredentialRecord {
    pub name: String,
    pub binding: Binding,
    pub sealed: Vec<u8>,
    pub fingerprint: String,
    pub created_at: i64,
    pub rotated_at: i64,
}

/// A connection's tokens sealed under a new key: its id, access token, refresh token.
pub type ResealedConnection = (String, Vec<u8>, Option<Vec<u8>>);

/// What [`Catalog::put_credential`] did.
#[derive(Debug)]
pub enum PutCredential {
    NoServer,
    /// A new name on a server that holds the most credentials already; nothing was stored.
    Full,
    Stored {
        created: bool,
        record: Box<CredentialRecord>,
    },
}

impl Catalog {
    /// Stores (or rotates) a credential, in one transaction with the checks that the server
    /// exists and, for a new name, that it holds fewer than `max_per_server`.
    pub async fn put_credential(
        &self,
        server: &ServerId,
        new: &NewCredential,
        max_per_server: usize,
    ) -> Result<PutCredential, CatalogError> {
        let mut tx = self.writer.begin().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM servers WHERE id = $1")
            .bind(server.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(PutCredential::NoServer);
        }
        let now = now_millis();
        let rotated: Option<i64> = sqlx::query_scalar(
            "UPDATE credentials SET binding = $1, sealed = $2, fingerprint = $3, rotated_at = $4
             WHERE server_id = $5 AND name = $6 RETURNING created_at",
        )
        .bind(to_json(&new.binding))
        .bind(&new.sealed)
        .bind(&new.fingerprint)
        .bind(now)
        .bind(server.as_str())
        .bind(&new.name)
        .fetch_optional(&mut *tx)
        .await?;
        if rotated.is_none() {
            let held: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM credentials WHERE server_id = $1")
                .bind(server.as_str())
                .fetch_one(&mut *tx)
                .await?;
            if usize::try_from(held).unwrap_or(usize::MAX) >= max_per_server {
                return Ok(PutCredential::Full);
            }
            insert_credentials(&mut tx, server, std::slice::from_ref(new), now).await?;
        }
        tx.commit().await?;
        let record = CredentialRecord {
            name: new.name.clone(),
            binding: new.binding.clone(),
            sealed: new.sealed.clone(),
            fingerprint: new.fingerprint.clone(),
            created_at: rotated.unwrap_or(now),
            rotated_at: now,
        };
        Ok(PutCredential::Stored { created: rotated.is_none(), record: Box::new(record) })
    }

    /// A server's credentials, by name.
    pub async fn credentials(&self, server: &ServerId) -> Result<Vec<CredentialRecord>, CatalogError> {
        let rows = sqlx::query_as::<_, CredentialRow>(
            "SELECT name, binding, sealed, fingerprint, created_at, rotated_at FROM credentials
             WHERE server_id = $1 ORDER BY name",
        )
        .bind(server.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(CredentialRecord {
                    name: row.name,
                    binding: from_json(&row.binding)?,
                    sealed: row.sealed,
                    fingerprint: row.fingerprint,
                    created_at: row.created_at,
                    rotated_at: row.rotated_at,
                })
            })
            .collect()
    }

    /// Some credential, to check at start-up that the key opens the catalog's values.
    pub async fn any_credential(&self) -> Result<Option<(String, String, Vec<u8>)>, CatalogError> {
        Ok(sqlx::query_as("SELECT server_id, name, sealed FROM credentials LIMIT 1")
            .fetch_optional(&self.reader)
            .await?)
    }

    /// Every credential's sealed value, for re-encryption under a new key.
    pub async fn sealed_credentials(&self) -> Result<Vec<(String, String, Vec<u8>)>, CatalogError> {
        Ok(sqlx::query_as("SELECT server_id, name, sealed FROM credentials ORDER BY server_id, name")
            .fetch_all(&self.reader)
            .await?)
    }

    /// Replaces the sealed values of credentials and the sealed tokens of connections (id,
    /// access, refresh), all in one transaction: every row is re-encrypted, or none is. Connect
    /// flows in progress are dropped (their verifiers were sealed under the old key).
    pub async fn replace_sealed(
        &self,
        rows: &[(String, String, Vec<u8>)],
        connections: &[ResealedConnection],
    ) -> Result<(), CatalogError> {
        let mut tx = self.writer.begin().await?;
        for (id, access, refresh) in connections {
            sqlx::query("UPDATE connections SET sealed_access = $1, sealed_refresh = $2 WHERE id = $3")
                .bind(access)
                .bind(refresh)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM connect_flows").execute(&mut *tx).await?;
        for (server, name, sealed) in rows {
            let updated = sqlx::query("UPDATE credentials SET sealed = $1 WHERE server_id = $2 AND name = $3")
                .bind(sealed)
                .bind(server)
                .bind(name)
                .execute(&mut *tx)
                .await?;
            if updated.rows_affected() != 1 {
                return Err(CatalogError::WriteFailed(format!("credential {name:?} of server {server:?} vanished")));
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Deletes one credential; false if there was none by that name.
    pub async fn delete_credential(&self, server: &ServerId, name: &str) -> Result<bool, CatalogError> {
        let deleted = sqlx::query("DELETE FROM credentials WHERE server_id = $1 AND name = $2")
            .bind(server.as_str())
            .bind(name)
            .execute(&self.writer)
            .await?;
        Ok(deleted.rows_affected() > 0)
    }
}

/// A `credentials` row, its binding still JSON text.
#[derive(sqlx::FromRow)]
struct CredentialRow {
    name: String,
    binding: String,
    sealed: Vec<u8>,
    fingerprint: String,
    created_at: i64,
    rotated_at: i64,
}
