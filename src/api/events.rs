//! `GET /admin/servers/{id}/events`: generation progress as Server-Sent Events.
//!
//! The stream starts with the server's current status, then sends a `status` event for every
//! stage change of its generations, and ends with a `done` event once a generation reaches a
//! final status (`ready`, `failed`, `planned`, `awaiting_approval`). A server that is not
//! generating gets its current status and `done` at once. `GET /admin/events` streams every
//! server's status, drift and version events until shutdown. Every stream ends when the daemon
//! starts shutting down.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use tokio::sync::broadcast::{Receiver, error::RecvError};

use crate::api::error::{ApiError, ErrorCode};
use crate::api::model::{DaemonEvent, ErrorBody, GenerationEvent};
use crate::api::state::AppState;
use crate::catalog::Catalog;
use crate::generate::StatusEvent;
use crate::toolset::ServerId;

enum Step {
    /// Send this status; then follow (or finish, if it is final).
    Emit(StatusEvent, Follow),
    /// Wait for the next status change, then send it.
    Wait(Follow),
    /// Send `done` with this status and end.
    Done(StatusEvent),
    Ended,
}

struct Follow {
    id: ServerId,
    events: Receiver<StatusEvent>,
    catalog: Catalog,
}

/// Generation progress as Server-Sent Events
///
/// A `status` event with the server's current status, one per stage change of its generations,
/// and `done` once a generation reaches `ready`, `failed` or `planned`. Each event's data is a
/// `GenerationEvent`.
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/events",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "an event stream of `GenerationEvent`s", content_type = "text/event-stream", body = GenerationEvent),
        (status = 404, description = "no such server", body = ErrorBody),
    ),
)]
pub async fn server_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = ServerId::parse(&id).map_err(|_| ApiError::new(ErrorCode::ServerNotFound, format!("no server {id:?}")))?;
    // Subscribe before reading the current status, so no change falls between the two.
    let events = state.generator.subscribe();
    let record = state.catalog.get_server(&id).await?.ok_or_else(|| {
        ApiError::new(ErrorCode::ServerNotFound, format!("no server {id:?}; GET /admin/servers lists them"))
    })?;
    let current = StatusEvent::current(&record);
    let follow = Follow { id, events, catalog: state.catalog.clone() };
    // Each status is sent as soon as it is known; only then does the stream wait for the next
    // change (waiting first would hold every event back until the following one).
    let stream = futures_util::stream::unfold(Step::Emit(current, follow), |step| async move {
        let (status, follow) = match step {
            Step::Emit(status, follow) => (status, follow),
            Step::Wait(follow) => next_change(follow).await?,
            Step::Done(status) => return Some((Ok(to_event("done", &status)), Step::Ended)),
            Step::Ended => return None,
        };
        let event = to_event("status", &status);
        let next = if status.status.is_final() { Step::Done(status) } else { Step::Wait(follow) };
        Some((Ok(event), next))
    });
    // A stream open at shutdown ends at once rather than holding the drain to its deadline.
    let stream = stream.take_until(state.tasks.shutdown_started());
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Waits for the next status change of this server; `None` when there will be none.
async fn next_change(mut follow: Follow) -> Option<(StatusEvent, Follow)> {
    loop {
        match follow.events.recv().await {
            Ok(event) if event.id == follow.id => return Some((event, follow)),
            Ok(_) => continue,
            // Missed some events: the catalog has the truth.
            Err(RecvError::Lagged(_)) => match follow.catalog.get_server(&follow.id).await {
                Ok(Some(record)) => return Some((StatusEvent::current(&record), follow)),
                _ => return None,
            },
            Err(RecvError::Closed) => return None,
        }
    }
}

fn to_event(name: &str, status: &StatusEvent) -> Event {
    let data = serde_json::to_string(&GenerationEvent::from(status)).unwrap_or_else(|_| "{}".into());
    Event::default().event(name).data(data)
}

/// Every server's events as Server-Sent Events
///
/// `status` (a generation's status changed), `drift` (a server's documentation changed and a
/// candidate version started) and `version` (a version was approved, rejected or activated).
/// Each event's data is a `DaemonEvent`; the stream stays open until the daemon shuts down.
#[utoipa::path(
    get,
    path = "/admin/events",
    responses((status = 200, description = "an event stream of `DaemonEvent`s", content_type = "text/event-stream", body = DaemonEvent)),
)]
pub async fn daemon_events(State(state): State<AppState>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receivers = (state.generator.subscribe(), state.generator.subscribe_lifecycle());
    let stream = futures_util::stream::unfold(receivers, |(mut statuses, mut lifecycle)| async move {
        {
            let event = tokio::select! {
                status = statuses.recv() => match status {
                    Ok(status) => DaemonEvent {
                        kind: "status".into(),
                        id: Some(status.id),
                        status: Some(status.status),
                        generation_id: Some(status.generation_id),
                        version: None,
                        detail: status.error,
                    },
                    Err(RecvError::Lagged(missed)) => lagged(missed),
                    Err(RecvError::Closed) => return None,
                },
                change = lifecycle.recv() => match change {
                    Ok(change) => DaemonEvent {
                        kind: change.kind.into(),
                        id: Some(change.id),
                        status: change.status,
                        generation_id: change.generation_id,
                        version: change.version,
                        detail: change.detail,
                    },
                    Err(RecvError::Lagged(missed)) => lagged(missed),
                    Err(RecvError::Closed) => return None,
                },
            };
            let data = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
            let sse = Event::default().event(event.kind.as_str()).data(data);
            Some((Ok(sse), (statuses, lifecycle)))
        }
    });
    let stream = stream.take_until(state.tasks.shutdown_started());
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// A slow reader missed events: say so, so it can re-read the servers it follows.
fn lagged(missed: u64) -> DaemonEvent {
    DaemonEvent {
        kind: "lagged".into(),
        id: None,
        status: None,
        generation_id: None,
        version: None,
        detail: Some(format!("{missed} events were missed; GET /admin/servers for the current state")),
    }
}
