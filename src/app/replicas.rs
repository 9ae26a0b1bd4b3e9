//! Keeps this daemon's mounts in line with the catalog: the first mount at start-up (after which
//! `/readyz` turns ready) and, on a catalog shared by replicas, every change another replica
//! makes: announced changes are applied as they arrive (within milliseconds of their commit), and
//! every `[catalog] reconcile_interval` all mounts are compared with the catalog, in case an
//! announcement was lost with the listening connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::catalog::{Catalog, CatalogChange};
use crate::generate::{Generator, StatusEvent};
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry::metrics::Metrics;

/// How long to wait before reading the catalog again when the first mount failed.
const MOUNT_RETRY: Duration = Duration::from_secs(1);

pub struct Replicas {
    pub catalog: Catalog,
    pub registry: Arc<Registry>,
    pub generator: Generator,
    pub metrics: Arc<Metrics>,
    pub tasks: Tasks,
    pub ready: Arc<AtomicBool>,
    pub reconcile_every: Duration,
}

impl Replicas {
    /// Mounts the catalog, turns ready, then follows other replicas' changes until shutdown.
    pub fn spawn(self) {
        let tasks = self.tasks.clone();
        let shutdown = tasks.shutdown_started();
        tasks.spawn(async move {
            tokio::select! {
                () = self.run() => {}
                () = shutdown => {}
            }
        });
    }

    async fn run(self) {
        // Listening starts before the first mount, so no change falls between the two.
        let mut changes = self.catalog.watch_changes();
        loop {
            match self.registry.mount_from_catalog().await {
                Ok(servers) => {
                    tracing::info!(servers, "servers mounted from the catalog");
                    break;
                }
                Err(error) => {
                    tracing::error!(%error, "cannot read servers from the catalog; not ready, retrying");
                    tokio::time::sleep(MOUNT_RETRY).await;
                }
            }
        }
        self.ready.store(true, Ordering::Release);
        let Some(changes) = changes.as_mut() else { return };
        let mut reconcile = tokio::time::interval(self.reconcile_every);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reconcile.reset();
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Some(change) => self.apply(change).await,
                    None => return,
                },
                _ = reconcile.tick() => self.reconcile("interval").await,
            }
        }
    }

    async fn apply(&self, change: CatalogChange) {
        match change {
            CatalogChange::Mount(id) => {
                self.metrics.record_replica_change("mount");
                if let Err(error) = self.registry.sync(&id, true).await {
                    tracing::warn!(server_id = %id, %error, "cannot follow a change in the shared catalog; \
                        the next reconciliation retries");
                }
            }
            CatalogChange::Status(id) => {
                self.metrics.record_replica_change("status");
                match self.catalog.get_server(&id).await {
                    Ok(Some(record)) => self.generator.relay(StatusEvent::current(&record)),
                    Ok(None) => {}
                    Err(error) => tracing::debug!(server_id = %id, %error, "cannot read a server's new status"),
                }
            }
            CatalogChange::Resync => self.reconcile("reconnected").await,
        }
    }

    async fn reconcile(&self, why: &'static str) {
        match self.registry.reconcile().await {
            Ok(0) => {}
            Ok(fixed) => {
                self.metrics.record_reconciled(fixed);
                tracing::info!(fixed, why, "mounts reconciled with the shared catalog");
            }
            Err(error) => tracing::warn!(%error, why, "cannot reconcile mounts with the shared catalog"),
        }
    }
}
