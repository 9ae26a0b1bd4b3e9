//! A new credential as stored, and the insert that writes a server's new credentials inside the
//! caller's transaction: shared by the writers that register servers (prompt, API description,
//! toolset) and by `Catalog::put_credential`, which adds
//! one to a server.

use super::error::CatalogError;
use super::values::to_json;
use crate::credentials::Binding;
use crate::toolset::ServerId;

/// A credential to store with a new server, in its registration's transaction.
#[derive(Debug, Clone)]
pub struct NewCredential {
    pub name: String,
    pub binding: Binding,
    pub sealed: Vec<u8>,
    pub fingerprint: String,
}

/// Inserts a new server's credentials inside its registration transaction.
pub async fn insert_credentials(
    tx: &mut sqlx::AnyConnection,
    server: &ServerId,
    credentials: &[NewCredential],
    now: i64,
) -> Result<(), CatalogError> {
    for credential in credentials {
        sqlx::query(
            "INSERT INTO credentials (server_id, name, binding, sealed, fingerprint, created_at, rotated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
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
