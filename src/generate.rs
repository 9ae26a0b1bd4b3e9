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

pub mod compile;
pub mod docs;
pub mod extract;
pub mod html;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::catalog::{Catalog, FinishedGeneration, GenerationOutcome, NewDocument, ToolExtras};
use crate::config::{Config, GenerationConfig};
use crate::generate::compile::{CompileRequest, CompiledTool};
use crate::generate::docs::{DocsLimits, FetchedDocument};
use crate::generate::plan::{Plan, PlanRequest, PlannedTool, SourceDocument};
use crate::llm::{LlmClient, Usage};
use crate::serve::call::Caller;
use crate::serve::egress::{Egress, ServerPolicy};
use crate::serve::isolate::{Invocation, Outcome};
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry::metrics::Metrics;
use crate::toolset::{ServerId, ToolSpec, Toolset};
use crate::whitelist::{Provenance, RefusedDomain, Whitelist, WhitelistEntry, admit};

/// One generation to run.
#[derive(Debug, Clone)]
pub struct Job {
    pub server: ServerId,
    pub generation_id: i64,
    pub prompt: String,
    pub allow_domains: Vec<String>,
    pub dry_run: bool,
    pub force: bool,
}

/// Runs generation jobs in the background, at most `[generation] concurrency` at once.
#[derive(Clone)]
pub struct Generator {
    inner: Arc<Inner>,
}

struct Inner {
    catalog: Catalog,
    egress: Arc<Egress>,
    caller: Caller,
    registry: Arc<Registry>,
    llm: Option<Arc<dyn LlmClient>>,
    metrics: Arc<Metrics>,
    settings: GenerationConfig,
    max_response_bytes: u64,
    permits: Semaphore,
    /// At shutdown running jobs stop and are marked failed (regenerate resumes them).
    tasks: Tasks,
    events: tokio::sync::broadcast::Sender<StatusEvent>,
}

/// A generation's status changed; published to `GET /admin/servers/{id}/events` subscribers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatusEvent {
    pub id: ServerId,
    pub status: String,
    pub generation_id: i64,
    pub error: Option<String>,
}

impl StatusEvent {
    /// Whether this status ends a generation.
    pub fn is_final(&self) -> bool {
        is_final_status(&self.status)
    }
}

/// `ready`, `failed` and `planned` end a generation; the other statuses are stages.
pub fn is_final_status(status: &str) -> bool {
    matches!(status, "ready" | "failed" | "planned")
}

/// A stage failure: which stage, and what went wrong.
struct StageError {
    stage: &'static str,
    message: String,
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
    /// None when no `[llm]` provider is configured: prompt registrations are refused.
    pub llm: Option<Arc<dyn LlmClient>>,
    pub metrics: Arc<Metrics>,
    /// Jobs run here and stop when shutdown starts.
    pub tasks: Tasks,
}

impl Generator {
    pub fn new(config: &Config, parts: GeneratorParts) -> Generator {
        let GeneratorParts { catalog, egress, caller, registry, llm, metrics, tasks } = parts;
        Generator {
            inner: Arc::new(Inner {
                catalog,
                egress,
                max_response_bytes: caller.max_response_bytes(),
                caller,
                registry,
                llm,
                metrics,
                settings: config.generation.clone(),
                permits: Semaphore::new(config.generation.concurrency),
                tasks,
                events: tokio::sync::broadcast::channel(256).0,
            }),
        }
    }

    /// Status changes of every generation, as they happen.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StatusEvent> {
        self.inner.events.subscribe()
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
            let run = async {
                let Ok(_permit) = inner.permits.acquire().await else { return };
                inner.run(job.clone()).await;
            };
            tokio::select! {
                () = tracing::Instrument::instrument(run, span) => {}
                () = shutdown => inner.interrupted(&job).await,
            }
        });
    }
}

impl Inner {
    async fn interrupted(&self, job: &Job) {
        let finished = FinishedGeneration {
            error: Some(format!(
                "interrupted by a daemon shutdown; POST /admin/servers/{}/regenerate to run it again",
                job.server
            )),
            refused_domains: json!([]),
            timings: json!({}),
            ..Default::default()
        };
        if let Err(error) =
            self.catalog.finish_generation(&job.server, job.generation_id, GenerationOutcome::Failed, &finished).await
        {
            tracing::error!(%error, "could not mark an interrupted generation");
        }
        self.publish(job, "failed", finished.error.clone());
        tracing::info!(server_id = %job.server, "generation interrupted by shutdown");
    }

    async fn run(&self, job: Job) {
        let started = Instant::now();
        let mut finished = FinishedGeneration { refused_domains: json!([]), timings: json!({}), ..Default::default() };
        let outcome = match self.stages(&job, &mut finished).await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::warn!(stage = error.stage, error = %error.message, "generation failed");
                finished.error = Some(format!("{} failed: {}", error.stage, error.message));
                GenerationOutcome::Failed
            }
        };
        if let Value::Object(timings) = &mut finished.timings {
            timings.insert("total_ms".into(), json!(started.elapsed().as_millis() as u64));
        }
        if let Err(error) = self.catalog.finish_generation(&job.server, job.generation_id, outcome, &finished).await {
            tracing::error!(%error, "could not store the generation's result");
            return;
        }
        let status = match outcome {
            GenerationOutcome::Ready => "ready",
            GenerationOutcome::Planned => "planned",
            GenerationOutcome::Failed => "failed",
        };
        let stage_millis: Vec<(String, u64)> = finished
            .timings
            .as_object()
            .map(|timings| {
                timings
                    .iter()
                    .filter(|(name, _)| name.as_str() != "total_ms")
                    .filter_map(|(name, ms)| Some((name.trim_end_matches("_ms").to_string(), ms.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default();
        self.metrics.record_generation(status, &stage_millis, finished.input_tokens, finished.output_tokens);
        // Mount before announcing `ready`, so a client that reacts to the event finds the server.
        let announce = finished.error.clone();
        if outcome == GenerationOutcome::Ready {
            match self.catalog.mount_record(&job.server).await {
                Ok(Some(record)) => self.registry.mount(record),
                Ok(None) => tracing::info!("server was deleted while it was being generated"),
                Err(error) => tracing::error!(%error, "could not read the generated server"),
            }
        }
        self.publish(&job, status, announce);
        tracing::info!(outcome = ?outcome, elapsed_ms = started.elapsed().as_millis() as u64, cache_hit = finished.cached_from.is_some(), "generation finished");
    }

    async fn stages(&self, job: &Job, finished: &mut FinishedGeneration) -> Result<GenerationOutcome, StageError> {
        let llm = self.llm.clone().ok_or_else(|| StageError {
            stage: "planning",
            message: "no LLM is configured; set [llm] provider and model".into(),
        })?;
        let mut clock = StageClock::new();

        // Fetching: the documents the prompt links to.
        self.enter(job, "fetching").await?;
        let urls = docs::extract_urls(&job.prompt);
        let limits = DocsLimits {
            timeout: Duration::from_millis(self.settings.fetch_timeout_ms),
            max_page_chars: self.settings.max_page_chars,
            max_total_chars: self.settings.max_total_chars,
            ..DocsLimits::default()
        };
        let fetched = docs::fetch_documents(&self.egress, &urls, &limits).await;
        finished.warnings.extend(fetched.warnings.iter().cloned());
        let documents = fetched.documents;
        let stored: Vec<NewDocument<'_>> = documents.iter().map(new_document).collect();
        self.catalog.record_documents(job.generation_id, &stored).await.map_err(|e| internal("fetching", e))?;
        finished.content_hash = Some(docs::content_hash(&documents));
        finished.prompt_hash = Some(prompt_hash(&job.prompt, &job.allow_domains));
        finished.model = Some(llm.model().to_string());
        clock.lap(finished, "fetching");

        let candidates = Candidates::collect(&urls, &job.allow_domains, &documents);

        // The cache: the same prompt over the same documents with the same model needs no LLM.
        if !job.force {
            let hit = self
                .catalog
                .find_cached_generation(
                    finished.prompt_hash.as_deref().unwrap_or_default(),
                    finished.content_hash.as_deref().unwrap_or_default(),
                    llm.model(),
                    !job.dry_run,
                )
                .await
                .map_err(|e| internal("fetching", e))?;
            if let Some(cached) = hit {
                finished.cached_from = Some(cached.id);
                finished.plan = cached.plan;
                finished.whitelist = cached.whitelist;
                finished.refused_domains = cached.refused_domains;
                if job.dry_run {
                    return Ok(GenerationOutcome::Planned);
                }
                finished.tools = cached.tools;
                return Ok(GenerationOutcome::Ready);
            }
        }

        // Planning.
        self.enter(job, "planning").await?;
        let sources: Vec<SourceDocument<'_>> =
            documents.iter().map(|d| SourceDocument { url: &d.final_url, text: &d.text }).collect();
        let candidate_domains = candidates.domains();
        let planned = plan::plan(
            llm.as_ref(),
            &PlanRequest { prompt: &job.prompt, documents: &sources, candidate_domains: &candidate_domains },
        )
        .await;
        let (plan, usage) = planned.map_err(|e| StageError { stage: "planning", message: e.to_string() })?;
        add_usage(finished, usage);
        finished.plan = Some(serde_json::to_value(&plan).unwrap_or(Value::Null));
        let (whitelist, refused) = candidates.whitelist_for(&plan);
        finished.whitelist = whitelist;
        finished.refused_domains = serde_json::to_value(&refused).unwrap_or(Value::Null);
        clock.lap(finished, "planning");
        if job.dry_run {
            return Ok(GenerationOutcome::Planned);
        }

        // Compiling: one handler per tool, several in flight.
        self.enter(job, "compiling").await?;
        let whitelist_domains = finished.whitelist.domains();
        let request =
            CompileRequest { prompt: &job.prompt, documents: &sources, whitelist_domains: &whitelist_domains };
        let (compiled, usage) = compile::compile_all(llm.as_ref(), &request, &plan, self.settings.compile_concurrency)
            .await
            .map_err(|e| StageError { stage: "compiling", message: e.to_string() })?;
        add_usage(finished, usage);
        clock.lap(finished, "compiling");

        // Testing: call each read-only tool once with the plan's example arguments.
        self.enter(job, "testing").await?;
        let policy = Arc::new(ServerPolicy {
            whitelist: finished.whitelist.clone(),
            max_response_bytes: self.max_response_bytes,
            any_host: false,
        });
        let mut tools = Vec::with_capacity(plan.tools.len());
        for planned in &plan.tools {
            let handler =
                compiled.iter().find(|c| c.name == planned.name).map(|c: &CompiledTool| c.handler.clone()).ok_or_else(
                    || StageError { stage: "compiling", message: format!("no handler for tool {}", planned.name) },
                )?;
            let (handler, self_test) = if self.settings.self_test {
                self.self_test(llm.as_ref(), &request, planned, handler, &policy, finished).await
            } else {
                (handler, json!({"status": "skipped", "reason": "[generation] self_test is off"}))
            };
            let spec = ToolSpec {
                name: planned.name.clone(),
                description: planned.description.clone(),
                input_schema: planned.input_schema.clone(),
                handler,
                annotations: Some(annotations_for(planned)),
            };
            tools.push((spec, ToolExtras { needs_network: Some(planned.needs_network), self_test: Some(self_test) }));
        }
        // The plan was validated piece by piece; check the whole toolset as registration would.
        let as_json: Vec<Value> =
            tools.iter().map(|(spec, _)| serde_json::to_value(spec).unwrap_or(Value::Null)).collect();
        Toolset::parse(&as_json).map_err(|e| StageError { stage: "testing", message: e.to_string() })?;
        finished.tools = tools;
        clock.lap(finished, "testing");
        Ok(GenerationOutcome::Ready)
    }

    /// Runs a read-only tool with its example arguments; one repair round on failure. The tool is
    /// kept either way, with the outcome recorded for the operator.
    async fn self_test(
        &self,
        llm: &dyn LlmClient,
        request: &CompileRequest<'_>,
        planned: &PlannedTool,
        handler: String,
        policy: &Arc<ServerPolicy>,
        finished: &mut FinishedGeneration,
    ) -> (String, Value) {
        let Some(arguments) = planned.example_args.clone().filter(|_| planned.is_read_only()) else {
            let reason = if planned.is_read_only() { "the plan gave no example arguments" } else { "the tool writes" };
            return (handler, json!({"status": "skipped", "reason": reason}));
        };
        let first = self.try_tool(&handler, &arguments, policy).await;
        let Err(failure) = first else {
            return (handler, json!({"status": "passed", "arguments": arguments, "attempts": 1}));
        };
        match compile::repair(llm, request, planned, &handler, &failure).await {
            Ok((repaired, usage)) => {
                add_usage(finished, usage);
                match self.try_tool(&repaired, &arguments, policy).await {
                    Ok(()) => (
                        repaired,
                        json!({"status": "passed", "arguments": arguments, "attempts": 2, "first_error": failure}),
                    ),
                    Err(error) => (
                        repaired,
                        json!({"status": "failed", "arguments": arguments, "attempts": 2, "error": error, "first_error": failure}),
                    ),
                }
            }
            Err(error) => (
                handler,
                json!({"status": "failed", "arguments": arguments, "attempts": 1, "error": failure, "repair_error": error.to_string()}),
            ),
        }
    }

    async fn try_tool(&self, handler: &str, arguments: &Value, policy: &Arc<ServerPolicy>) -> Result<(), String> {
        let invocation = Invocation {
            handler: Arc::from(handler),
            arguments: arguments.clone(),
            limits: self.caller.sandbox_limits(),
            fetch: Arc::new(self.egress.for_call(policy.clone())),
        };
        // Self-tests share one admission tenant (no server id can contain parentheses), so a
        // burst of generations cannot crowd out the servers being called.
        let completion = self
            .caller
            .pool()
            .run("(self-test)", invocation)
            .await
            .map_err(|e| format!("the self-test call could not run: {e}"))?;
        if completion.outcome == Outcome::Ok && !completion.result.is_error {
            return Ok(());
        }
        let text = completion
            .result
            .content
            .first()
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        Err(completion.error.unwrap_or(text))
    }

    async fn enter(&self, job: &Job, stage: &'static str) -> Result<(), StageError> {
        tracing::debug!(stage, "generation stage");
        self.catalog
            .set_generation_stage(&job.server, job.generation_id, stage)
            .await
            .map_err(|e| internal(stage, e))?;
        self.publish(job, stage, None);
        Ok(())
    }

    fn publish(&self, job: &Job, status: &str, error: Option<String>) {
        // No subscribers is the normal case; the send error only says so.
        let _ = self.events.send(StatusEvent {
            id: job.server.clone(),
            status: status.to_string(),
            generation_id: job.generation_id,
            error,
        });
    }
}

/// Whitelist candidates with their provenance, before and after the plan is known.
struct Candidates {
    /// Prompt URL hosts and operator domains: always on the whitelist.
    fixed: Vec<WhitelistEntry>,
    /// Hosts found in documents: on the whitelist only if the plan uses them.
    discovered: Vec<WhitelistEntry>,
    refused: Vec<RefusedDomain>,
}

impl Candidates {
    fn collect(prompt_urls: &[String], allow_domains: &[String], documents: &[FetchedDocument]) -> Candidates {
        let mut candidates = Candidates { fixed: Vec::new(), discovered: Vec::new(), refused: Vec::new() };
        for url in prompt_urls {
            if let Some(host) = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)) {
                candidates.consider(&host, Provenance::Prompt, Some(format!("in the prompt: {url}")));
            }
        }
        for domain in allow_domains {
            candidates.consider(domain, Provenance::Operator, None);
        }
        for document in documents {
            for found in &document.discovered_urls {
                if let Some(host) = url::Url::parse(found).ok().and_then(|u| u.host_str().map(str::to_string)) {
                    candidates.consider(&host, Provenance::Discovered, Some(format!("found on {}", document.url)));
                }
            }
        }
        candidates
    }

    fn consider(&mut self, host: &str, source: Provenance, detail: Option<String>) {
        match admit(host, source, detail) {
            Ok(entry) => {
                let known = self.fixed.iter().chain(&self.discovered).any(|e| e.domain == entry.domain);
                if !known {
                    match source {
                        Provenance::Discovered => self.discovered.push(entry),
                        _ => self.fixed.push(entry),
                    }
                }
            }
            Err(refused) => {
                if !self.refused.iter().any(|r| r.domain == refused.domain) {
                    self.refused.push(refused);
                }
            }
        }
    }

    /// Every admitted candidate, for the planner.
    fn domains(&self) -> Vec<String> {
        self.fixed.iter().chain(&self.discovered).map(|e| e.domain.clone()).collect()
    }

    /// Fixed entries plus the discovered domains the plan's endpoints reference.
    fn whitelist_for(&self, plan: &Plan) -> (Whitelist, Vec<RefusedDomain>) {
        let mut whitelist = Whitelist::default();
        for entry in &self.fixed {
            whitelist.add(entry.clone());
        }
        let mut refused = self.refused.clone();
        let endpoint_hosts: Vec<(String, crate::whitelist::CanonicalHost)> = plan
            .tools
            .iter()
            .flat_map(|tool| tool.endpoints_used.iter().map(move |e| (tool.name.clone(), e)))
            .filter_map(|(tool, endpoint)| {
                let url = endpoint.split_whitespace().last()?.replace(['{', '}'], "");
                let url = url::Url::parse(&url).ok()?;
                Some((tool, crate::whitelist::CanonicalHost::of_url(&url)?))
            })
            .collect();
        for entry in &self.discovered {
            let single = Whitelist::from_entries(vec![entry.clone()]);
            let users: Vec<&str> =
                endpoint_hosts.iter().filter(|(_, host)| single.allows(host)).map(|(tool, _)| tool.as_str()).collect();
            if users.is_empty() {
                refused.push(RefusedDomain {
                    domain: entry.domain.clone(),
                    source: Provenance::Discovered,
                    detail: entry.detail.clone(),
                    reason: "no planned tool uses it".into(),
                });
            } else {
                let mut users = users;
                users.dedup();
                let detail = format!("{}; used by {}", entry.detail.clone().unwrap_or_default(), users.join(", "));
                whitelist.add(WhitelistEntry { detail: Some(detail), ..entry.clone() });
            }
        }
        (whitelist, refused)
    }
}

/// MCP annotations from the HTTP methods a tool's endpoints use.
fn annotations_for(tool: &PlannedTool) -> Map<String, Value> {
    let methods: Vec<String> =
        tool.endpoints_used.iter().filter_map(|e| e.split_whitespace().next().map(str::to_ascii_uppercase)).collect();
    let read_only = tool.is_read_only();
    let mut annotations = Map::new();
    annotations.insert("readOnlyHint".into(), json!(read_only));
    if !read_only {
        annotations.insert("destructiveHint".into(), json!(methods.iter().any(|m| m == "DELETE")));
        annotations.insert(
            "idempotentHint".into(),
            json!(methods.iter().all(|m| matches!(m.as_str(), "GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE"))),
        );
    }
    annotations.insert("openWorldHint".into(), json!(tool.needs_network));
    annotations
}

/// The cache key's prompt part: the prompt and the operator's domains (they shape the plan too).
fn prompt_hash(prompt: &str, allow_domains: &[String]) -> String {
    let mut domains = allow_domains.to_vec();
    domains.sort();
    let mut hasher = Sha256::new();
    hasher.update(prompt.as_bytes());
    hasher.update(b"\n--\n");
    hasher.update(domains.join("\n").as_bytes());
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

fn add_usage(finished: &mut FinishedGeneration, usage: Usage) {
    finished.input_tokens += usage.input_tokens;
    finished.output_tokens += usage.output_tokens;
    finished.llm_requests += usage.requests;
}

fn internal(stage: &'static str, error: impl std::fmt::Display) -> StageError {
    tracing::error!(stage, %error, "catalog error during generation");
    StageError { stage, message: "internal error; see the daemon log".into() }
}

/// Milliseconds per stage, written into the generation's timings.
struct StageClock {
    last: Instant,
    laps: BTreeMap<&'static str, u64>,
}

impl StageClock {
    fn new() -> StageClock {
        StageClock { last: Instant::now(), laps: BTreeMap::new() }
    }

    fn lap(&mut self, finished: &mut FinishedGeneration, stage: &'static str) {
        let now = Instant::now();
        self.laps.insert(stage, (now - self.last).as_millis() as u64);
        self.last = now;
        finished.timings = json!(self.laps.iter().map(|(k, v)| (format!("{k}_ms"), json!(v))).collect::<Map<_, _>>());
    }
}
