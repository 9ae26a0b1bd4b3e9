//! `GET /admin/backup`: a consistent copy of a SQLite catalog, downloaded while the daemon serves
//! (the only way to take one online: no other process can read the catalog meanwhile).

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::io::AsyncReadExt;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::model::{CatalogBackup, ErrorBody};
use crate::api::state::AppState;

/// How much of the copy is read per chunk of the response.
const CHUNK: usize = 64 * 1024;

/// A backup of the catalog
///
/// A SQLite database holding one consistent snapshot of the catalog, taken without stopping the
/// daemon: servers, versions, credentials (sealed: keep the credentials key with the backup) and
/// the call log up to the request. Restore it by stopping the daemon and putting the file in
/// place of the catalog (removing the catalog's `-wal` file). A catalog in PostgreSQL is backed
/// up with PostgreSQL's tools (`pg_dump`).
#[utoipa::path(
    get,
    path = "/admin/backup",
    responses(
        (status = 200, description = "the catalog as a SQLite database file", content_type = "application/octet-stream", body = inline(CatalogBackup)),
        (status = 409, description = "the catalog is a PostgreSQL database", body = ErrorBody),
        (status = 503, description = "the copy cannot be written beside the catalog (a full disk)", body = ErrorBody),
    ),
)]
pub async fn backup(State(state): State<AppState>) -> Result<Response, ApiError> {
    // The calls answered so far belong in the copy; some may still be queued for the log.
    state.caller.call_log().flush().await;
    let Some(copy) = state.catalog.backup().await? else {
        return Err(ApiError::new(
            ErrorCode::BackupNotSupported,
            "the catalog is a PostgreSQL database: back it up with PostgreSQL's tools (pg_dump), \
             which see every replica's writes",
        ));
    };
    let length = copy.metadata().map_err(ApiError::internal)?.len();
    let file = tokio::fs::File::from_std(copy);
    let chunks = stream::try_unfold(file, |mut file| async move {
        let mut chunk = vec![0; CHUNK];
        let read = file.read(&mut chunk).await?;
        chunk.truncate(read);
        Ok::<_, std::io::Error>((read > 0).then_some((bytes::Bytes::from(chunk), file)))
    });
    Ok((
        [
            (CONTENT_TYPE, "application/octet-stream".to_string()),
            (CONTENT_LENGTH, length.to_string()),
            (CONTENT_DISPOSITION, "attachment; filename=\"mcpbootd-catalog.db\"".to_string()),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}
