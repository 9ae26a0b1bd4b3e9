//! The catalog's errors, shaped by what callers branch on: a conflict, a catalog that refuses
//! writes or cannot be reached (both answered with 503), data it cannot read, a shared batch
//! that failed, a generation lease lost to another replica. A database error is sorted into
//! these where it is converted ([`From<sqlx::Error>`]).

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("a server with id {0:?} already exists")]
    Conflict(String),
    #[error("catalog error: {0}")]
    Database(sqlx::Error),
    /// The catalog answers but refuses writes: its disk is full, its files or file system are
    /// read-only, or writing them fails (SQLite's I/O errors; PostgreSQL's disk full, I/O
    /// error and read-only transaction). Nothing of the write was stored; the message is the
    /// cause.
    #[error("the catalog cannot be written: {0}")]
    Unwritable(String),
    /// The catalog cannot be reached: its database server is down, restarting or refusing
    /// connections, or no connection came free in time. Nothing of the write was stored; the
    /// message is the cause.
    #[error("the catalog cannot be reached: {0}")]
    Unavailable(String),
    #[error("catalog holds unreadable data: {0}")]
    Corrupt(String),
    /// A write shared with other requests (a batch) failed; the message is the cause.
    #[error("catalog write failed: {0}")]
    WriteFailed(String),
    /// A generation job's write after its lease passed to another replica (named).
    #[error("replica {0:?} took this generation over after its lease expired")]
    LeaseLost(String),
}

impl From<sqlx::Error> for CatalogError {
    fn from(error: sqlx::Error) -> CatalogError {
        if refuses_writes(&error) {
            CatalogError::Unwritable(error.to_string())
        } else if is_unreachable(&error) {
            CatalogError::Unavailable(error.to_string())
        } else {
            CatalogError::Database(error)
        }
    }
}

/// A stored server id that is not a valid one: the catalog's data, not the caller, is wrong.
impl From<crate::toolset::InvalidServerId> for CatalogError {
    fn from(error: crate::toolset::InvalidServerId) -> CatalogError {
        CatalogError::Corrupt(error.to_string())
    }
}

impl CatalogError {
    /// This error once more, for each of the writes that shared a failed transaction (a batch).
    pub(crate) fn shared(&self) -> CatalogError {
        match self {
            CatalogError::Unwritable(cause) => CatalogError::Unwritable(cause.clone()),
            CatalogError::Unavailable(cause) => CatalogError::Unavailable(cause.clone()),
            other => CatalogError::WriteFailed(other.to_string()),
        }
    }
}

/// Whether a database error says that the catalog's storage refuses writes, as opposed to a
/// mistake in the statement or a conflict: the error the API answers with 503 and `/readyz`
/// reports.
fn refuses_writes(error: &sqlx::Error) -> bool {
    use sqlx::error::DatabaseError;
    let Some(error) = error.as_database_error() else {
        return false;
    };
    if let Some(error) = error.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        // The primary result code is the low byte of the extended one sqlx reports.
        let code = error.code().and_then(|code| code.parse::<i32>().ok()).unwrap_or(0) & 0xff;
        const SQLITE_READONLY: i32 = 8;
        const SQLITE_IOERR: i32 = 10;
        const SQLITE_FULL: i32 = 13;
        return matches!(code, SQLITE_READONLY | SQLITE_IOERR | SQLITE_FULL);
    }
    // PostgreSQL's SQLSTATEs: read_only_sql_transaction (a standby, or
    // default_transaction_read_only), disk_full, io_error.
    matches!(error.code().as_deref(), Some("25006" | "53100" | "58030"))
}

/// Whether an error says the catalog's database could not be reached (as opposed to refusing
/// the statement): the connection failed or broke, the pool found none in time, or PostgreSQL
/// reports a connection exception (SQLSTATE class 08) or is shutting down or starting
/// (57P01–57P03). The API answers it with 503, as it does an unwritable catalog.
fn is_unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(error) => {
            error.code().is_some_and(|code| code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03"))
        }
        _ => false,
    }
}
