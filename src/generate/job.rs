//! What a generation job is asked to do ([`Job`], and [`Repair`] for a targeted regeneration),
//! and what generation announces while jobs run ([`StatusEvent`], [`LifecycleEvent`]).

use std::collections::BTreeMap;

use crate::catalog::FailedCall;
use crate::states::{Status, Trigger};
use crate::toolset::{OpenApiSettings, ServerId};

/// One generation to run.
#[derive(Debug, Clone)]
pub struct Job {
    pub server: ServerId,
    pub generation_id: i64,
    pub prompt: String,
    pub allow_domains: Vec<String>,
    pub dry_run: bool,
    pub force: bool,
    /// Set when the server is derived from an API description; `prompt` may then be empty.
    pub openapi: Option<OpenApiSettings>,
    /// What started it (a drift candidate whose self-test fails waits for review).
    pub trigger: Trigger,
    /// Set for a targeted regeneration of some of the active version's tools.
    pub repair: Option<Repair>,
}

/// What to write again, and what went wrong with it.
#[derive(Debug, Clone, Default)]
pub struct Repair {
    /// The version the tools are taken from: the one active when the operator asked (the job
    /// may start later, after another version became active).
    pub base_generation_id: i64,
    /// The tools to write again, by name (each one of the active version's).
    pub tools: Vec<String>,
    /// Per tool, its recent failed calls, newest first; empty when not asked for.
    pub failures: BTreeMap<String, Vec<FailedCall>>,
}

/// A generation's status changed; published to `GET /admin/servers/{id}/events` subscribers.
#[derive(Debug, Clone)]
pub struct StatusEvent {
    pub id: ServerId,
    pub status: Status,
    pub generation_id: i64,
    pub error: Option<String>,
}

impl StatusEvent {
    /// The server's status now, as its stored record says.
    pub fn current(record: &crate::catalog::ServerRecord) -> StatusEvent {
        let generation = record.latest_generation.as_ref().or(record.generation.as_ref());
        StatusEvent {
            id: record.id.clone(),
            status: record.status,
            generation_id: generation.map(|g| g.id).unwrap_or(0),
            error: generation.and_then(|g| g.error.clone()).filter(|_| record.status == Status::Failed),
        }
    }
}

/// Something happened to a server's versions: documentation drift was found, or an operator
/// approved, rejected or activated a version. Published to `GET /admin/events` subscribers.
#[derive(Debug, Clone)]
pub struct LifecycleEvent {
    /// `drift` or `version`.
    pub kind: &'static str,
    pub id: ServerId,
    pub status: Option<Status>,
    pub generation_id: Option<i64>,
    pub version: Option<i64>,
    pub detail: Option<String>,
}
