//! A server's credentials for upstream APIs: the binding in clear, the value sealed (the catalog
//! never holds a value it could print; see `crate::credentials::vault`).

use sqlx::Row;

use super::{Catalog, CatalogError, from_json, now_millis, to_json};
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

/// A credential to store with a new server, in its registration's transaction.
#[derive(Debug, Clone)]
pub struct NewCredential {
    pub name: String,
    pub binding: Binding,
    pub sealed: Vec<u8>,
    pub fingerprint: String,
}

/// Inserts a new server's credentials inside its registration transaction.
pub(super) async fn insert_credentials(
    tx: &mut sqlx::SqliteConnection,
    server: &ServerId,
    credentials: &[NewCredential],
    now: i64,
) -> Result<(), CatalogError> {
    for credential in credentials {
        sqlx::query(
            "INSERT INTO credentials (server_id, name, binding, sealed, fingerprint, created_at, rotated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(server.as_str())
        .bind(&credential.name)
        .bind(to_json(&credential.binding))
        .bind(&credential.sealed)
        .bind(&credential.fingerprint)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

impl Catalog {
    /// Stores (or rotates) a credential. `Ok(None)` if the server does not exist; otherwise
    /// whether it was new.
    pub async fn put_credential(
        &self,
        server: &ServerId,
        name: &str,
        binding: &Binding,
        sealed: &[u8],
        fingerprint: &str,
    ) -> Result<Option<bool>, CatalogError> {
        let mut tx = self.writer.begin().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM servers WHERE id = ?")
            .bind(server.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let now = now_millis();
        let updated = sqlx::query(
            "UPDATE credentials SET binding = ?, sealed = ?, fingerprint = ?, rotated_at = ?
             WHERE server_id = ? AND name = ?",
        )
        .bind(to_json(binding))
        .bind(sealed)
        .bind(fingerprint)
        .bind(now)
        .bind(server.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
        let created = updated.rows_affected() == 0;
        if created {
            sqlx::query(
                "INSERT INTO credentials (server_id, name, binding, sealed, fingerprint, created_at, rotated_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(server.as_str())
            .bind(name)
            .bind(to_json(binding))
            .bind(sealed)
            .bind(fingerprint)
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(created))
    }

    /// A server's credentials, by name.
    pub async fn credentials(&self, server: &ServerId) -> Result<Vec<CredentialRecord>, CatalogError> {
        let rows = sqlx::query(
            "SELECT name, binding, sealed, fingerprint, created_at, rotated_at FROM credentials
             WHERE server_id = ? ORDER BY name",
        )
        .bind(server.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(CredentialRecord {
                    name: row.get("name"),
                    binding: from_json(&row.get::<String, _>("binding"))?,
                    sealed: row.get("sealed"),
                    fingerprint: row.get("fingerprint"),
                    created_at: row.get("created_at"),
                    rotated_at: row.get("rotated_at"),
                })
            })
            .collect()
    }

    /// Some credential, to check at start-up that the key opens the catalog's values.
    pub async fn any_credential(&self) -> Result<Option<(String, String, Vec<u8>)>, CatalogError> {
        let row =
            sqlx::query("SELECT server_id, name, sealed FROM credentials LIMIT 1").fetch_optional(&self.reader).await?;
        Ok(row.map(|row| (row.get("server_id"), row.get("name"), row.get("sealed"))))
    }

    /// Every credential's sealed value, for re-encryption under a new key.
    pub async fn sealed_credentials(&self) -> Result<Vec<(String, String, Vec<u8>)>, CatalogError> {
        let rows = sqlx::query("SELECT server_id, name, sealed FROM credentials ORDER BY server_id, name")
            .fetch_all(&self.reader)
            .await?;
        Ok(rows.into_iter().map(|row| (row.get("server_id"), row.get("name"), row.get("sealed"))).collect())
    }

    /// Replaces the sealed values of credentials, all in one transaction: every row is
    /// re-encrypted, or none is.
    pub async fn replace_sealed(&self, rows: &[(String, String, Vec<u8>)]) -> Result<(), CatalogError> {
        let mut tx = self.writer.begin().await?;
        for (server, name, sealed) in rows {
            let updated = sqlx::query("UPDATE credentials SET sealed = ? WHERE server_id = ? AND name = ?")
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
        let deleted = sqlx::query("DELETE FROM credentials WHERE server_id = ? AND name = ?")
            .bind(server.as_str())
            .bind(name)
            .execute(&self.writer)
            .await?;
        Ok(deleted.rows_affected() > 0)
    }
}
