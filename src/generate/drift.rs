//! Documentation drift: a prompt server's documents are fetched again (through the egress, with
//! the limits generation uses) and compared, URL by URL, with the documents of its newest
//! finished version (`Catalog::drift_baseline`). A change is recorded as a drift event and starts
//! a candidate version, which goes through the review gate like any other (and waits for review
//! when a self-test fails, even with the gate off).
//!
//! Checks run every `[generation] drift_check_interval` in the background, one server at a
//! time (a check on request waits for the running one), and on
//! `POST /admin/servers/{id}/check-drift`. The state of the last check is kept on
//! the server row, so a restart resumes: a check a restart interrupted is marked `failed` at
//! start-up and is due one interval after it started, one never checked is due one interval
//! after the daemon started.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::docs;
use super::generator::{Generator, Inner};
use super::job::{Job, LifecycleEvent};
use crate::catalog::{CatalogError, DriftState, DriftSubject, StartGeneration, now_millis};
use crate::states::{DriftStatus, ServerKind, Trigger};
use crate::toolset::ServerId;

/// What one check found.
#[derive(Debug, Clone)]
pub struct DriftOutcome {
    pub state: DriftState,
    /// `[{"url", "before_sha256", "after_sha256", "before_bytes", "after_bytes"}]`.
    pub changes: Vec<Value>,
    pub event_id: Option<i64>,
    /// The candidate version's generation, when one started.
    pub generation_id: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error("no server {0:?}")]
    NoServer(ServerId),
    #[error(
        "server {0:?} was not generated from documentation (its tools are a registered toolset or derived from an \
         API description); there is nothing to check"
    )]
    NoDocuments(ServerId),
    #[error("server {0:?} is being generated; check again when it has finished")]
    Generating(ServerId),
    #[error("another replica is checking server {0:?} now; its result shows in GET /admin/servers/{0} shortly")]
    CheckedElsewhere(ServerId),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

impl Generator {
    /// Checks one server's documents now.
    pub async fn check_drift(&self, id: &ServerId) -> Result<DriftOutcome, DriftError> {
        if !self.inner.catalog.claim_drift_check(id).await? {
            return Err(match self.inner.catalog.server_status(id).await? {
                Some(_) => DriftError::CheckedElsewhere(id.clone()),
                None => DriftError::NoServer(id.clone()),
            });
        }
        let checked = match self.inner.catalog.drift_subject(id).await {
            Ok(Some(subject)) => self.inner.check(&subject).await,
            Ok(None) => Err(DriftError::NoServer(id.clone())),
            Err(error) => Err(error.into()),
        };
        self.inner.release_drift_check(id).await;
        checked
    }

    /// Starts the background checks, every `every`.
    pub fn spawn_drift_checks(&self, every: Duration) {
        let inner = self.inner.clone();
        let shutdown = self.inner.tasks.shutdown_started();
        let started_at = now_millis();
        self.inner.tasks.spawn(async move {
            tokio::select! {
                () = inner.check_periodically(every, started_at) => {}
                () = shutdown => {}
            }
        });
    }
}

impl Inner {
    async fn check_periodically(self: Arc<Self>, every: Duration, started_at: i64) {
        let every_ms = every.as_millis() as i64;
        loop {
            let now = now_millis();
            let mut next_due = now + every_ms;
            match self.catalog.drift_subjects().await {
                Ok(subjects) => {
                    for subject in subjects {
                        let due = match &subject.drift {
                            Some(state) => state.checked_at + every_ms,
                            None => started_at + every_ms,
                        };
                        if due > now {
                            next_due = next_due.min(due);
                            continue;
                        }
                        match self.check_if_still_due(&subject.id, every_ms, started_at).await {
                            Ok(_)
                            | Err(
                                DriftError::Generating(_) | DriftError::NoServer(_) | DriftError::CheckedElsewhere(_),
                            ) => {}
                            Err(error) => tracing::warn!(server_id = %subject.id, %error, "drift check failed"),
                        }
                    }
                }
                Err(error) => tracing::error!(%error, "cannot list the servers to check for drift"),
            }
            let wait = (next_due - now_millis()).clamp(1_000, 60_000);
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
    }

    /// Checks `id` if no other replica is checking it and, read again after taking its lease,
    /// it is still due (another replica may have checked it since the list was read).
    async fn check_if_still_due(
        self: &Arc<Self>,
        id: &ServerId,
        every_ms: i64,
        started_at: i64,
    ) -> Result<Option<DriftOutcome>, DriftError> {
        if !self.catalog.claim_drift_check(id).await? {
            return Err(DriftError::CheckedElsewhere(id.clone()));
        }
        let checked = async {
            let Some(subject) = self.catalog.drift_subject(id).await? else { return Ok(None) };
            let due = subject.drift.as_ref().map_or(started_at, |state| state.checked_at) + every_ms;
            if due > now_millis() {
                return Ok(None);
            }
            self.check(&subject).await.map(Some)
        }
        .await;
        self.release_drift_check(id).await;
        checked
    }

    async fn release_drift_check(&self, id: &ServerId) {
        if let Err(error) = self.catalog.release_drift_check(id).await {
            tracing::warn!(server_id = %id, %error, "cannot release a drift check's lease; it expires by itself");
        }
    }

    async fn check(self: &Arc<Self>, subject: &DriftSubject) -> Result<DriftOutcome, DriftError> {
        // One check at a time: a check on request and the periodic one never race on a server.
        let _one = self.drift_checks.lock().await;
        let id = &subject.id;
        if subject.kind != ServerKind::Prompt {
            return Err(DriftError::NoDocuments(id.clone()));
        }
        if self.catalog.server_status(id).await?.is_some_and(|status| !status.is_final()) {
            return Err(DriftError::Generating(id.clone()));
        }
        let last_event = subject.drift.as_ref().and_then(|state| state.last_event);
        let state = |status, error, last_event, awaiting_version| DriftState {
            status,
            checked_at: now_millis(),
            error,
            last_event,
            awaiting_version,
        };
        if let Some(version) = self.catalog.awaiting_drift_candidate(id).await? {
            // The candidate answers the change already seen; newer changes wait for its review.
            let held = state(DriftStatus::Drifted, None, last_event, Some(version));
            if !self.catalog.set_drift_state(id, &held).await? {
                return Err(DriftError::NoServer(id.clone()));
            }
            return Ok(DriftOutcome { state: held, changes: Vec::new(), event_id: None, generation_id: None });
        }
        if !self.catalog.set_drift_state(id, &state(DriftStatus::Checking, None, last_event, None)).await? {
            return Err(DriftError::NoServer(id.clone()));
        }
        let baseline = self.catalog.drift_baseline(id).await?;
        let urls: Vec<String> = baseline.iter().map(|document| document.source_url.clone()).collect();
        let fetched = if urls.is_empty() {
            None
        } else {
            Some(docs::fetch_documents(&self.egress, &urls, &self.docs_limits()).await)
        };
        let mut changes = Vec::new();
        let mut missing = Vec::new();
        for before in &baseline {
            let now = fetched.iter().flat_map(|f| &f.documents).find(|d| d.source_url == before.source_url);
            match now {
                Some(now) if now.sha256 != before.sha256 => changes.push(json!({
                    "url": before.source_url,
                    "before_sha256": before.sha256,
                    "after_sha256": now.sha256,
                    "before_bytes": before.bytes,
                    "after_bytes": now.bytes,
                })),
                Some(_) => {}
                None => missing.push(before.source_url.clone()),
            }
        }
        let (finished, event_id, generation_id) = if !changes.is_empty() {
            let (event_id, generation_id) = self.drifted(subject, &changes).await?;
            (state(DriftStatus::Drifted, None, Some(event_id), None), Some(event_id), generation_id)
        } else if missing.is_empty() {
            (state(DriftStatus::Unchanged, None, last_event, None), None, None)
        } else {
            // A page that cannot be fetched now says nothing about whether it changed.
            let warnings = fetched.map(|f| f.warnings.join("; ")).unwrap_or_default();
            let error = format!("could not fetch {}: {warnings}", missing.join(", "));
            (state(DriftStatus::Failed, Some(error), last_event, None), None, None)
        };
        self.metrics.record_drift_check(finished.status);
        self.catalog.set_drift_state(id, &finished).await?;
        tracing::info!(server_id = %id, status = %finished.status, changes = changes.len(), "drift check finished");
        Ok(DriftOutcome { state: finished, changes, event_id, generation_id })
    }

    /// Records the drift event and starts the candidate version; returns the event and, when
    /// one could start, the candidate's generation.
    async fn drifted(
        self: &Arc<Self>,
        subject: &DriftSubject,
        changes: &[Value],
    ) -> Result<(i64, Option<i64>), DriftError> {
        let id = &subject.id;
        let event_id = self.catalog.record_drift_event(id, &Value::Array(changes.to_vec())).await?;
        let urls: Vec<&str> = changes.iter().filter_map(|c| c["url"].as_str()).collect();
        let detail = format!("drift event {event_id}: {} changed", urls.join(", "));
        let start = StartGeneration { detail: Some(detail.clone()), ..StartGeneration::new(Trigger::Drift) };
        let generation_id = self.catalog.start_regeneration(id, ServerKind::Prompt, &start).await?;
        if let Some(generation_id) = generation_id {
            self.catalog.set_drift_candidate(event_id, generation_id).await?;
        }
        self.announce(LifecycleEvent {
            kind: "drift",
            id: id.clone(),
            status: None,
            generation_id,
            version: None,
            detail: Some(detail),
        });
        if let Some(generation_id) = generation_id {
            Generator { inner: self.clone() }.spawn(Job {
                server: id.clone(),
                generation_id,
                prompt: subject.prompt.clone().unwrap_or_default(),
                allow_domains: subject.allow_domains.clone(),
                dry_run: false,
                force: false,
                openapi: None,
                trigger: Trigger::Drift,
                repair: None,
            });
        }
        Ok((event_id, generation_id))
    }
}
