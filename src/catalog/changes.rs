//! What other replicas changed in a shared catalog, as it commits.
//!
//! PostgreSQL triggers announce every change a replica must act on (migrations/postgres/
//! 0002_replicas.sql); [`Catalog::watch_changes`] listens on a connection of its own and turns
//! the announcements into [`CatalogChange`]s. Announcements are not stored: any made while the
//! listening connection was down are lost, so after every (re)connection a
//! [`CatalogChange::Resync`] tells the receiver to compare everything once.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::mpsc;

use super::db::Catalog;
use crate::toolset::ServerId;

/// The channel the triggers announce on.
const CHANNEL: &str = "mcpbootd_changes";

/// How long to wait before connecting again after the listening connection failed, doubling up
/// to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogChange {
    /// What the server's mount is built from changed, or the server came or went.
    Mount(ServerId),
    /// The server's status changed (generation progress).
    Status(ServerId),
    /// Changes may have been missed (the listening connection was (re)established): compare
    /// everything.
    Resync,
}

impl Catalog {
    /// Changes other replicas make, from a task that listens until the receiver is dropped or
    /// shutdown starts. `None` on SQLite, whose catalog has one daemon.
    pub fn watch_changes(&self) -> Option<mpsc::Receiver<CatalogChange>> {
        let url = self.listen_url.clone()?;
        let replica = self.replica.id.clone();
        let (sender, receiver) = mpsc::channel(1024);
        let shutdown = self.tasks.shutdown_started();
        self.tasks.spawn(async move {
            tokio::select! {
                () = announce_changes(&url, &replica, sender) => {}
                () = shutdown => {}
            }
        });
        Some(receiver)
    }
}

/// Listens for the announcements and sends them to `sender`, reconnecting after a failure,
/// until the receiver is dropped.
async fn announce_changes(url: &str, replica: &str, sender: mpsc::Sender<CatalogChange>) {
    let mut retry = FIRST_RETRY;
    loop {
        match listen(url).await {
            Ok(mut listener) => {
                retry = FIRST_RETRY;
                if sender.send(CatalogChange::Resync).await.is_err() {
                    return;
                }
                loop {
                    let change = match listener.try_recv().await {
                        Ok(Some(notification)) => parse(notification.payload(), replica),
                        Ok(None) => break,
                        Err(error) => {
                            tracing::warn!(%error, "lost the catalog's change announcements; reconnecting");
                            break;
                        }
                    };
                    if let Some(change) = change
                        && sender.send(change).await.is_err()
                    {
                        return;
                    }
                }
            }
            Err(error) => tracing::warn!(%error, retry_ms = retry.as_millis() as u64,
                "cannot listen for the catalog's change announcements; retrying"),
        }
        if sender.is_closed() {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

async fn listen(url: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// `<kind> <replica> <server id>`; `None` for this replica's own changes (already applied) and
/// for what it does not understand (a newer replica's announcement).
fn parse(payload: &str, own_replica: &str) -> Option<CatalogChange> {
    let mut parts = payload.splitn(3, ' ');
    let (kind, replica, id) = (parts.next()?, parts.next()?, parts.next()?);
    if replica == own_replica {
        return None;
    }
    let id = ServerId::parse(id).ok()?;
    match kind {
        "mount" => Some(CatalogChange::Mount(id)),
        "status" => Some(CatalogChange::Status(id)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_of_other_replicas_are_parsed_and_own_ones_skipped() {
        let id = ServerId::parse("weather").unwrap();
        assert_eq!(parse("mount replica-b weather", "replica-a"), Some(CatalogChange::Mount(id.clone())));
        assert_eq!(parse("status replica-b weather", "replica-a"), Some(CatalogChange::Status(id)));
        assert_eq!(parse("mount replica-a weather", "replica-a"), None);
        assert_eq!(parse("rename replica-b weather", "replica-a"), None);
        assert_eq!(parse("mount replica-b", "replica-a"), None);
        // A writer without an application name (psql, a migration) is another replica.
        assert_eq!(
            parse("mount  weather", "replica-a"),
            Some(CatalogChange::Mount(ServerId::parse("weather").unwrap()))
        );
    }
}
