//! Generation: from a prompt to a hosted server, as a background job per registration.
//!
//! ```text
//! pending ─► fetching (docs) ─► cache lookup ─► planning (LLM) ─► [planned: dry run ends here]
//!         ─► compiling (LLM, per tool) ─► testing (self-test in the isolate) ─► ready ─► mount
//! ```
//!
//! Every stage writes its status to the catalog before it starts, so the admin view shows where a
//! job is; any failure ends the job as `failed` with the stage and the reason. A finished
//! generation with the same (prompt hash, content hash, model, generator version) is reused
//! without any LLM request. The LLM is used here and nowhere on the serving side.
//!
//! This module runs jobs and sequences the stages; each stage's work lives in a submodule:
//! [`docs`] (fetching), [`candidates`] (the whitelist), [`plan`], [`compile`], [`self_test`].
//! What the stages share is below them: the job and its events (`job`), the generator's state
//! (`generator`), and a stage's error, clock and LLM usage (`stage`).

pub mod candidates;
pub mod compile;
mod described;
pub mod docs;
pub mod drift;
pub mod endpoint;
pub mod extract;
mod generator;
pub mod html;
mod job;
pub mod openapi;
pub mod plan;
pub mod repair;
pub mod self_test;
mod stage;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use self::generator::Inner;
pub use self::generator::{Generator, GeneratorParts};
pub use self::job::{Job, LifecycleEvent, StatusEvent};
use self::stage::{StageClock, StageError, add_usage};
use crate::catalog::{CatalogError, FinishedGeneration, NewDocument, ToolExtras};
use crate::config::Config;
use crate::credentials::Credential;
use crate::generate::candidates::Candidates;
use crate::generate::compile::{CompileRequest, CompiledTool};
use crate::generate::docs::{DocsLimits, FetchedDocument};
use crate::generate::endpoint::Method;
use crate::generate::plan::{Plan, PlanRequest, PlannedTool, SourceDocument, credentials_section};
use crate::generate::self_test::{SelfTest, SelfTestOutcome};
use crate::llm::LlmClient;
use crate::serve::egress::ServerPolicy;
use crate::states::{GenerationOutcome, ServerKind, Stage, Status, Trigger};
use crate::toolset::{OpenApiSettings, ToolSpec, Toolset};

impl Generator {
    pub fn new(config: &Config, parts: GeneratorParts) -> Generator {
        let GeneratorParts { catalog, egress, caller, registry, vault, llm, metrics, tasks } = parts;
        Generator {
            inner: Arc::new(Inner {
                catalog,
                egress,
                max_response_bytes: caller.max_response_bytes(),
                caller,
                registry,
                vault,
                llm,
                metrics,
                settings: config.generation.clone(),
                keep_versions: config.catalog.max_versions_per_server,
                permits: Semaphore::new(config.generation.concurrency),
                tasks,
                events: tokio::sync::broadcast::channel(256).0,
                lifecycle: tokio::sync::broadcast::channel(64).0,
                drift_checks: tokio::sync::Mutex::new(()),
                running: std::sync::Mutex::default(),
                stage_spans: std::sync::Mutex::default(),
            }),
        }
    }

    /// Status changes of every generation, as they happen.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StatusEvent> {
        self.inner.events.subscribe()
    }

    /// Drift and version events of every server, as they happen.
    pub fn subscribe_lifecycle(&self) -> tokio::sync::broadcast::Receiver<LifecycleEvent> {
        self.inner.lifecycle.subscribe()
    }

    /// Tells `GET /admin/events` subscribers about a change to a server's versions.
    pub fn announce(&self, event: LifecycleEvent) {
        self.inner.announce(event);
    }

    /// Publishes a status change another replica made (its generation job runs there), so
    /// event streams on this replica follow it too.
    pub fn relay(&self, event: StatusEvent) {
        // No subscribers is the normal case; the send error only says so.
        let _ = self.inner.events.send(event);
    }

    pub fn llm_configured(&self) -> bool {
        self.inner.llm.is_some()
    }

    /// Starts a job in the background; it waits for a free slot in `pending`.
    pub fn spawn(&self, job: Job) {
        let inner = self.inner.clone();
        let shutdown = self.inner.tasks.shutdown_started();
        self.inner.tasks.spawn(async move {
            let span = tracing::info_span!("generation", server_id = %job.server, generation_id = job.generation_id);
            inner.caller.traces().start_trace(&span, None);
            inner.running.lock().unwrap_or_else(|e| e.into_inner()).insert(job.generation_id);
            let run = async {
                let Ok(_permit) = inner.permits.acquire().await else { return };
                inner.run(job.clone()).await;
            };
            tokio::select! {
                () = tracing::Instrument::instrument(run, span) => {}
                () = shutdown => inner.interrupted(&job).await,
            }
            inner.stage_spans.lock().unwrap_or_else(|e| e.into_inner()).remove(&job.generation_id);
            inner.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&job.generation_id);
        });
    }
}

impl Generator {
    /// On a catalog shared by replicas: renews the leases this replica holds, every third of
    /// `[catalog] lease_ttl`, and takes over the jobs of replicas that stopped renewing theirs.
    pub fn spawn_lease_keeper(&self) {
        let generator = self.clone();
        let shutdown = self.inner.tasks.shutdown_started();
        let every = self.inner.catalog.replica().lease_ttl / 3;
        self.inner.tasks.spawn(async move {
            let keep = async {
                loop {
                    tokio::time::sleep(every).await;
                    let running: Vec<i64> =
                        generator.inner.running.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
                    if let Err(error) = generator.inner.catalog.renew_leases(&running).await {
                        // Not claiming either: this replica's own leases may have lapsed meanwhile,
                        // and it would take its own running jobs over.
                        tracing::warn!(%error, "cannot renew this replica's leases; other replicas may take its jobs over");
                        continue;
                    }
                    generator.take_over_abandoned().await;
                }
            };
            tokio::select! {
                () = keep => {}
                () = shutdown => {}
            }
        });
    }

    /// Claims and runs every job whose lease has expired.
    async fn take_over_abandoned(&self) {
        loop {
            let claimed = match self.inner.catalog.claim_abandoned_generation().await {
                Ok(Some(claimed)) => claimed,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "cannot look for generation jobs to take over");
                    return;
                }
            };
            self.inner.metrics.record_job_taken_over();
            tracing::warn!(server_id = %claimed.server, generation_id = claimed.generation_id,
                "taking over a generation job whose replica stopped renewing its lease; running it again");
            if claimed.repair {
                // A repair's input (the failures the other replica read) is not kept whole.
                let finished = FinishedGeneration {
                    error: Some(format!(
                        "the replica running this repair stopped; POST /admin/servers/{}/regenerate with the same \
                         tools to run it again",
                        claimed.server
                    )),
                    refused_domains: json!([]),
                    ..Default::default()
                };
                let (server, generation_id) = (claimed.server, claimed.generation_id);
                if let Err(error) = self
                    .inner
                    .catalog
                    .finish_generation(&server, generation_id, GenerationOutcome::Failed, &finished)
                    .await
                {
                    tracing::warn!(%error, "cannot mark an abandoned repair failed");
                }
                continue;
            }
            let openapi = if claimed.kind == ServerKind::OpenApi { claimed.openapi } else { None };
            self.spawn(Job {
                server: claimed.server,
                generation_id: claimed.generation_id,
                prompt: claimed.prompt,
                allow_domains: claimed.allow_domains,
                dry_run: claimed.dry_run,
                force: claimed.force,
                openapi,
                trigger: claimed.trigger,
                repair: None,
            });
        }
    }
}

impl Inner {
    async fn interrupted(&self, job: &Job) {
        if self.catalog.is_shared() {
            // Another replica runs it again at once rather than after the lease expires.
            match self.catalog.release_lease(job.generation_id).await {
                Ok(()) => {
                    tracing::info!(server_id = %job.server, "generation interrupted by shutdown; left to another replica")
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot release an interrupted generation; another replica takes it over when its lease expires")
                }
            }
            return;
        }
        let finished = FinishedGeneration {
            error: Some(format!(
                "interrupted by a daemon shutdown; POST /admin/servers/{}/regenerate to run it again",
                job.server
            )),
            refused_domains: json!([]),
            ..Default::default()
        };
        if let Err(error) =
            self.catalog.finish_generation(&job.server, job.generation_id, GenerationOutcome::Failed, &finished).await
        {
            tracing::error!(%error, "could not mark an interrupted generation");
        }
        self.publish(job, Status::Failed, finished.error.clone());
        tracing::info!(server_id = %job.server, "generation interrupted by shutdown");
    }

    async fn run(&self, job: Job) {
        let started = Instant::now();
        let mut finished = FinishedGeneration { refused_domains: json!([]), ..Default::default() };
        let outcome = match self.stages(&job, &mut finished).await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::warn!(stage = %error.stage, error = %error.message, "generation failed");
                finished.error = Some(error.to_string());
                GenerationOutcome::Failed
            }
        };
        finished.timings.total_ms = Some(started.elapsed().as_millis() as u64);
        finished.require_approval = self.settings.require_approval;
        // A candidate nobody asked for is served unreviewed only if every self-test passed.
        finished.hold_for_review =
            job.trigger == Trigger::Drift && finished.tools.iter().any(|(_, extras)| self_test_failed(extras));
        let status = match self.catalog.finish_generation(&job.server, job.generation_id, outcome, &finished).await {
            Ok(status) => status,
            Err(CatalogError::LeaseLost(replica)) => {
                tracing::warn!(%replica, "another replica took this generation over (its lease expired); result dropped");
                return;
            }
            Err(error) => {
                tracing::error!(%error, "could not store the generation's result");
                return;
            }
        };
        let stage_millis: Vec<(Stage, u64)> = finished.timings.stages.iter().map(|(s, ms)| (*s, *ms)).collect();
        self.metrics.record_generation(outcome, &stage_millis, finished.input_tokens, finished.output_tokens);
        // Mount before announcing `ready`, so a client that reacts to the event finds the server;
        // prune after mounting, since the version the mount served until now may be pruned.
        if status == Status::Ready || self.keep_versions > 0 {
            let _change = self.registry.serialize(&job.server).await;
            if status == Status::Ready {
                match self.catalog.mount_record(&job.server).await {
                    Ok(Some(record)) => self.registry.mount(record),
                    Ok(None) => tracing::info!("server was deleted while it was being generated"),
                    Err(error) => tracing::error!(%error, "could not read the generated server"),
                }
            }
            match self.catalog.prune_versions(&job.server, self.keep_versions).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, keep = self.keep_versions, "old versions pruned"),
                Err(error) => tracing::warn!(%error, "could not prune old versions"),
            }
        }
        self.publish(&job, status, finished.error.clone());
        tracing::info!(outcome = %status, elapsed_ms = started.elapsed().as_millis() as u64, cache_hit = finished.cached_from.is_some(), "generation finished");
    }

    /// Runs the stages in order; each one enters its status first and records its time.
    async fn stages(&self, job: &Job, finished: &mut FinishedGeneration) -> Result<GenerationOutcome, StageError> {
        if let Some(repair) = &job.repair {
            let base = self
                .catalog
                .generation_record(repair.base_generation_id)
                .await
                .map_err(|e| StageError::internal(Stage::Compiling, e))?
                .ok_or_else(|| StageError::new(Stage::Compiling, "the version to repair no longer exists"))?;
            return self.repair_stages(job, repair, &base, finished).await;
        }
        if let Some(settings) = &job.openapi {
            return self.described_stages(job, settings, finished).await;
        }
        let llm = self.llm(Stage::Planning)?;
        let mut clock = StageClock::new();
        let credentials = self.credentials(job).await?;
        let credentials_section = credentials_section(&credentials);

        self.enter(job, Stage::Fetching).await?;
        let (urls, documents) = self.fetch(job, llm.model(), finished).await?;
        finished.prompt_hash = Some(prompt_hash(&job.prompt, &job.allow_domains, &credentials_section));
        clock.lap(&mut finished.timings, Stage::Fetching);
        // A linked API description is derived from, not summarised for the LLM to write code.
        if let Some(described) = self.description_among(&documents, finished).await {
            let settings =
                OpenApiSettings { url: described.url.as_ref().map(url::Url::to_string), ..Default::default() };
            return self.derive_stages(job, described, &settings, credentials, clock, finished).await;
        }
        let candidates = Candidates::collect(&urls, &job.allow_domains, &documents);
        if !job.force
            && let Some(outcome) = self.reuse_cached(job, llm.model(), finished).await?
        {
            return Ok(outcome);
        }

        self.enter(job, Stage::Planning).await?;
        let sources: Vec<SourceDocument<'_>> =
            documents.iter().map(|d| SourceDocument { url: &d.final_url, text: &d.text }).collect();
        let plan = self.plan(job, llm.as_ref(), &sources, &candidates, &credentials_section, finished).await?;
        clock.lap(&mut finished.timings, Stage::Planning);
        if job.dry_run {
            return Ok(GenerationOutcome::Planned);
        }

        self.enter(job, Stage::Compiling).await?;
        let whitelist_domains = finished.whitelist.domains();
        let request = CompileRequest {
            prompt: &job.prompt,
            documents: &sources,
            whitelist_domains: &whitelist_domains,
            credentials: &credentials_section,
        };
        let (compiled, usage) = compile::compile_all(llm.as_ref(), &request, &plan, self.settings.compile_concurrency)
            .await
            .map_err(|e| StageError::new(Stage::Compiling, e))?;
        add_usage(finished, usage);
        clock.lap(&mut finished.timings, Stage::Compiling);

        self.enter(job, Stage::Testing).await?;
        finished.tools = self.test(llm.as_ref(), &request, &plan, compiled, credentials, finished).await?;
        clock.lap(&mut finished.timings, Stage::Testing);
        Ok(GenerationOutcome::Ready)
    }

    /// Fetching: the documents the prompt links to, stored with the generation; sets the cache
    /// key. Returns the prompt's URLs and the documents.
    async fn fetch(
        &self,
        job: &Job,
        model: &str,
        finished: &mut FinishedGeneration,
    ) -> Result<(Vec<String>, Vec<FetchedDocument>), StageError> {
        let urls = docs::extract_urls(&job.prompt);
        let fetched = docs::fetch_documents(&self.egress, &urls, &self.docs_limits()).await;
        finished.warnings.extend(fetched.warnings.iter().cloned());
        let documents = fetched.documents;
        let stored: Vec<NewDocument<'_>> = documents.iter().map(new_document).collect();
        self.catalog
            .record_documents(job.generation_id, &stored)
            .await
            .map_err(|e| StageError::internal(Stage::Fetching, e))?;
        finished.content_hash = Some(docs::content_hash(&documents));
        finished.model = Some(model.to_string());
        Ok((urls, documents))
    }

    /// The cache: the same prompt over the same documents with the same model needs no LLM.
    async fn reuse_cached(
        &self,
        job: &Job,
        model: &str,
        finished: &mut FinishedGeneration,
    ) -> Result<Option<GenerationOutcome>, StageError> {
        let hit = self
            .catalog
            .find_cached_generation(
                finished.prompt_hash.as_deref().unwrap_or_default(),
                finished.content_hash.as_deref().unwrap_or_default(),
                model,
                !job.dry_run,
            )
            .await
            .map_err(|e| StageError::internal(Stage::Fetching, e))?;
        let Some(cached) = hit else { return Ok(None) };
        finished.cached_from = Some(cached.id);
        finished.plan = cached.plan;
        finished.whitelist = cached.whitelist;
        finished.refused_domains = cached.refused_domains;
        if job.dry_run {
            return Ok(Some(GenerationOutcome::Planned));
        }
        finished.tools = cached.tools;
        Ok(Some(GenerationOutcome::Ready))
    }

    /// How documentation is fetched, from `[generation]`: by generation and by drift checks
    /// alike, so a drift check hashes the text a generation would read.
    fn docs_limits(&self) -> DocsLimits {
        DocsLimits {
            timeout: Duration::from_millis(self.settings.fetch_timeout_ms),
            max_page_chars: self.settings.max_page_chars,
            max_total_chars: self.settings.max_total_chars,
            ..DocsLimits::default()
        }
    }

    /// The LLM, or the failure of `stage` that says how to configure one.
    fn llm(&self, stage: Stage) -> Result<Arc<dyn LlmClient>, StageError> {
        self.llm.clone().ok_or_else(|| StageError::new(stage, "no LLM is configured; set [llm] provider and model"))
    }

    /// The server's credentials, opened (their names and bindings go to the LLM, their values
    /// only to the self-test's egress).
    async fn credentials(&self, job: &Job) -> Result<Vec<Credential>, StageError> {
        let records =
            self.catalog.credentials(&job.server).await.map_err(|e| StageError::new(Stage::Planning, e.to_string()))?;
        records
            .into_iter()
            .map(|record| {
                let value = self
                    .vault
                    .open_value(job.server.as_str(), &record.name, &record.sealed)
                    .map_err(|e| StageError::new(Stage::Planning, e.to_string()))?;
                Ok(Credential { name: record.name, binding: record.binding, value })
            })
            .collect()
    }

    /// Planning: the tools to build, and the whitelist their endpoints need.
    async fn plan(
        &self,
        job: &Job,
        llm: &dyn LlmClient,
        sources: &[SourceDocument<'_>],
        candidates: &Candidates,
        credentials: &str,
        finished: &mut FinishedGeneration,
    ) -> Result<Plan, StageError> {
        let candidate_domains = candidates.domains();
        let request =
            PlanRequest { prompt: &job.prompt, documents: sources, candidate_domains: &candidate_domains, credentials };
        let (plan, usage) = plan::plan(llm, &request).await.map_err(|e| StageError::new(Stage::Planning, e))?;
        add_usage(finished, usage);
        finished.plan = Some(serde_json::to_value(&plan).unwrap_or(Value::Null));
        let (whitelist, refused) = candidates.whitelist_for(&plan);
        finished.whitelist = whitelist;
        finished.refused_domains = serde_json::to_value(&refused).unwrap_or(Value::Null);
        Ok(plan)
    }

    /// Testing: each read-only tool is called once with the plan's example arguments (see
    /// [`self_test`]); then the whole toolset is checked as a registration would be.
    async fn test(
        &self,
        llm: &dyn LlmClient,
        request: &CompileRequest<'_>,
        plan: &Plan,
        compiled: Vec<CompiledTool>,
        credentials: Vec<Credential>,
        finished: &mut FinishedGeneration,
    ) -> Result<Vec<(ToolSpec, ToolExtras)>, StageError> {
        // The self-test calls the API as the served tools will: with the server's credentials.
        let policy = ServerPolicy::whitelisted(finished.whitelist.clone(), self.max_response_bytes)
            .with_credentials(credentials);
        let self_test = SelfTest { caller: &self.caller, egress: &self.egress, policy: Arc::new(policy), llm, request };
        let mut tools = Vec::with_capacity(plan.tools.len());
        for planned in &plan.tools {
            let handler =
                compiled.iter().find(|c| c.name == planned.name).map(|c| c.handler.clone()).ok_or_else(|| {
                    StageError::new(Stage::Compiling, format!("no handler for tool {}", planned.name))
                })?;
            let (handler, outcome) = if self.settings.self_test {
                let (handler, outcome, usage) = self_test.run(planned, handler).await;
                add_usage(finished, usage);
                (handler, outcome)
            } else {
                (handler, SelfTestOutcome::Skipped { reason: "[generation] self_test is off".into() })
            };
            let spec = ToolSpec {
                name: planned.name.clone(),
                title: planned.title.clone(),
                description: planned.description.clone(),
                input_schema: planned.input_schema.clone(),
                output_schema: planned.output_schema.clone(),
                handler,
                annotations: Some(annotations_for(planned)),
            };
            tools.push((
                spec,
                ToolExtras { needs_network: Some(planned.needs_network), self_test: Some(outcome.to_json()) },
            ));
        }
        // The plan was validated piece by piece; check the whole toolset as registration would.
        let specs: Vec<ToolSpec> = tools.iter().map(|(spec, _)| spec.clone()).collect();
        Toolset::check(&specs).map_err(|e| StageError::new(Stage::Testing, e))?;
        Ok(tools)
    }

    async fn enter(&self, job: &Job, stage: Stage) -> Result<(), StageError> {
        tracing::debug!(%stage, "generation stage");
        // Under the job's span; replacing the previous stage's span ends it.
        let span = tracing::debug_span!("generation stage", stage = %stage);
        self.stage_spans.lock().unwrap_or_else(|e| e.into_inner()).insert(job.generation_id, span);
        self.catalog
            .set_generation_stage(&job.server, job.generation_id, stage)
            .await
            .map_err(|e| StageError::internal(stage, e))?;
        self.publish(job, stage.into(), None);
        Ok(())
    }

    fn announce(&self, event: LifecycleEvent) {
        // No subscribers is the normal case; the send error only says so.
        let _ = self.lifecycle.send(event);
    }

    fn publish(&self, job: &Job, status: Status, error: Option<String>) {
        // No subscribers is the normal case; the send error only says so.
        let _ =
            self.events.send(StatusEvent { id: job.server.clone(), status, generation_id: job.generation_id, error });
    }
}

fn self_test_failed(extras: &ToolExtras) -> bool {
    extras.self_test.as_ref().and_then(|outcome| outcome.get("status")).and_then(Value::as_str) == Some("failed")
}

/// MCP annotations from the HTTP methods a tool's endpoints use.
fn annotations_for(tool: &PlannedTool) -> Map<String, Value> {
    let read_only = tool.is_read_only();
    let mut annotations = Map::new();
    annotations.insert("readOnlyHint".into(), json!(read_only));
    if !read_only {
        let mut methods = tool.endpoints_used.iter().map(|endpoint| endpoint.method());
        annotations.insert("destructiveHint".into(), json!(methods.clone().any(|m| m == Method::Delete)));
        annotations.insert("idempotentHint".into(), json!(methods.all(Method::is_idempotent)));
    }
    annotations.insert("openWorldHint".into(), json!(tool.needs_network));
    annotations
}

/// The cache key's prompt part: the prompt, the operator's domains and the credentials' names
/// and bindings (they shape the plan too: a key the daemon adds is not a tool argument).
fn prompt_hash(prompt: &str, allow_domains: &[String], credentials: &str) -> String {
    let mut domains = allow_domains.to_vec();
    domains.sort();
    let mut hasher = Sha256::new();
    hasher.update(prompt.as_bytes());
    hasher.update(b"\n--\n");
    hasher.update(domains.join("\n").as_bytes());
    if !credentials.is_empty() {
        hasher.update(b"\n--\n");
        hasher.update(credentials.as_bytes());
    }
    hex::encode(hasher.finalize())
}

fn new_document(document: &FetchedDocument) -> NewDocument<'_> {
    NewDocument {
        url: &document.url,
        source_url: &document.source_url,
        final_url: &document.final_url,
        content_type: &document.content_type,
        sha256: &document.sha256,
        text: &document.text,
        bytes: document.bytes,
        truncated: document.truncated,
        summarised: document.summarised,
        discovered_urls: &document.discovered_urls,
    }
}
