//! The generator's state: the daemon's parts it works with, its job slots, the event channels and
//! the bookkeeping of running jobs. The parent (`generate.rs`) runs jobs on it; `described`,
//! `drift` and `repair` add their stages to it.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::job::{LifecycleEvent, StatusEvent};
use crate::catalog::Catalog;
use crate::config::GenerationConfig;
use crate::credentials::vault::Vault;
use crate::llm::LlmClient;
use crate::serve::call::Caller;
use crate::serve::egress::Egress;
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry::metrics::Metrics;

/// Runs generation jobs in the background, at most `[generation] concurrency` at once.
#[derive(Clone)]
pub struct Generator {
    pub(super) inner: Arc<Inner>,
}

/// What every stage of every job works with.
pub struct Inner {
    pub(super) catalog: Catalog,
    pub(super) egress: Arc<Egress>,
    pub(super) caller: Caller,
    pub(super) registry: Arc<Registry>,
    /// Opens the server's credentials for the self-test.
    pub(super) vault: Vault,
    pub(super) llm: Option<Arc<dyn LlmClient>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) settings: GenerationConfig,
    /// `[catalog] max_versions_per_server`: older versions are pruned after each generation.
    pub(super) keep_versions: u64,
    pub(super) max_response_bytes: u64,
    pub(super) permits: Semaphore,
    /// At shutdown running jobs stop and are marked failed (regenerate resumes them).
    pub(super) tasks: Tasks,
    pub(super) events: tokio::sync::broadcast::Sender<StatusEvent>,
    pub(super) lifecycle: tokio::sync::broadcast::Sender<LifecycleEvent>,
    /// Held by the documentation drift check that is running (`drift`).
    pub(super) drift_checks: tokio::sync::Mutex<()>,
    /// The generations whose jobs run in this process: only their leases are renewed, so a job
    /// that ended without its final write (a database error) is left to expire and be taken over.
    pub(super) running: std::sync::Mutex<std::collections::BTreeSet<i64>>,
    /// The span of each running generation's current stage, by generation id: it ends when the
    /// next stage starts or the job ends, so a generation's trace shows where its time went.
    pub(super) stage_spans: std::sync::Mutex<std::collections::HashMap<i64, tracing::Span>>,
}

/// The daemon's parts a generator works with.
pub struct GeneratorParts {
    pub catalog: Catalog,
    /// Fetches documentation under each server's policy.
    pub egress: Arc<Egress>,
    /// Runs self-tests in the isolate pool.
    pub caller: Caller,
    /// Where a ready generation is mounted.
    pub registry: Arc<Registry>,
    pub vault: Vault,
    /// None when no `[llm]` provider is configured: prompt registrations are refused.
    pub llm: Option<Arc<dyn LlmClient>>,
    pub metrics: Arc<Metrics>,
    /// Jobs run here and stop when shutdown starts.
    pub tasks: Tasks,
}
