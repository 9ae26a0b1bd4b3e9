//! Targeted regeneration: some tools of the active version are written again, the others are
//! kept as they are, and the result is a new version like any other.
//!
//! ```text
//! pending ─► compiling (LLM, the named tools only; with their failed calls when asked)
//!         ─► testing (self-test of those tools) ─► ready / awaiting_approval
//! ```
//!
//! The active version's plan, whitelist and documents are reused (nothing is fetched or
//! planned again), so the compiler sees what it saw when the tool was first written, plus, with
//! `with_failures`, the tool's handler and its recent failed calls: arguments (secrets redacted
//! when they were logged) and the errors they returned.

use serde_json::Value;

use super::compile::{self, CompileRequest};
use super::generator::Inner;
use super::job::Job;
pub use super::job::Repair;
use super::plan::{Plan, SourceDocument, credentials_section};
use super::stage::{StageClock, StageError, add_usage};
use crate::catalog::{FinishedGeneration, GenerationRecord, ToolExtras};
use crate::states::{GenerationOutcome, Stage};
use crate::toolset::{ToolSpec, Toolset};

impl Repair {
    /// The failures of `tool` as the compiler reads them.
    fn failures_text(&self, tool: &str) -> Option<String> {
        let failures = self.failures.get(tool).filter(|f| !f.is_empty())?;
        let lines: Vec<String> = failures
            .iter()
            .map(|call| {
                let arguments = call.arguments.as_ref().map_or_else(|| "(not logged)".to_string(), Value::to_string);
                let error = call.error.as_deref().unwrap_or("(no message)");
                format!("- arguments: {arguments}\n  {}: {error}", call.outcome)
            })
            .collect();
        Some(lines.join("\n"))
    }
}

impl Inner {
    /// The stages of a targeted regeneration of `active`'s (the base version's) tools named in
    /// `repair`.
    pub(super) async fn repair_stages(
        &self,
        job: &Job,
        repair: &Repair,
        active: &GenerationRecord,
        finished: &mut FinishedGeneration,
    ) -> Result<GenerationOutcome, StageError> {
        let llm = self.llm(Stage::Compiling)?;
        let mut clock = StageClock::new();
        let plan: Plan =
            active.details.plan.clone().and_then(|plan| serde_json::from_value(plan).ok()).ok_or_else(|| {
                StageError::new(Stage::Compiling, "the active version has no plan to regenerate tools from")
            })?;
        let credentials = self.credentials(job).await?;
        let credentials_section = credentials_section(&credentials);
        let mut texts = Vec::with_capacity(active.details.documents.len());
        for document in &active.details.documents {
            let text = self
                .catalog
                .document_text(&document.sha256)
                .await
                .map_err(|e| StageError::internal(Stage::Compiling, e))?
                .unwrap_or_default();
            texts.push((document.final_url.clone(), text));
        }
        let sources: Vec<SourceDocument<'_>> = texts.iter().map(|(url, text)| SourceDocument { url, text }).collect();
        finished.plan = active.details.plan.clone();
        finished.whitelist = active.whitelist.clone();
        finished.refused_domains = serde_json::to_value(&active.details.refused_domains).unwrap_or(Value::Null);
        finished.prompt_hash = active.details.prompt_hash.clone();
        finished.content_hash = active.details.content_hash.clone();
        finished.model = Some(llm.model().to_string());

        self.enter(job, Stage::Compiling).await?;
        self.catalog
            .copy_documents(active.id, job.generation_id)
            .await
            .map_err(|e| StageError::internal(Stage::Compiling, e))?;
        let whitelist_domains = finished.whitelist.domains();
        let request = CompileRequest {
            prompt: &job.prompt,
            documents: &sources,
            whitelist_domains: &whitelist_domains,
            credentials: &credentials_section,
        };
        let targets = Plan { tools: plan.tools.iter().filter(|t| repair.tools.contains(&t.name)).cloned().collect() };
        if targets.tools.len() != repair.tools.len() {
            return Err(StageError::new(Stage::Compiling, "a tool to regenerate is not in the active version's plan"));
        }
        let mut compiled = Vec::with_capacity(targets.tools.len());
        let fresh =
            Plan { tools: targets.tools.iter().filter(|t| repair.failures_text(&t.name).is_none()).cloned().collect() };
        if !fresh.tools.is_empty() {
            let (written, usage) =
                compile::compile_all(llm.as_ref(), &request, &fresh, self.settings.compile_concurrency)
                    .await
                    .map_err(|e| StageError::new(Stage::Compiling, e))?;
            add_usage(finished, usage);
            compiled.extend(written);
        }
        for tool in &targets.tools {
            let Some(failures) = repair.failures_text(&tool.name) else { continue };
            let current = active.tools.tools().iter().find(|t| t.name == tool.name).map_or("", |t| t.handler.as_str());
            let (handler, usage) = compile::repair_in_service(llm.as_ref(), &request, tool, current, &failures)
                .await
                .map_err(|e| StageError::new(Stage::Compiling, e))?;
            add_usage(finished, usage);
            compiled.push(compile::CompiledTool { name: tool.name.clone(), handler, attempts: 1 });
        }
        clock.lap(&mut finished.timings, Stage::Compiling);

        self.enter(job, Stage::Testing).await?;
        let mut rewritten = self.test(llm.as_ref(), &request, &targets, compiled, credentials, finished).await?;
        clock.lap(&mut finished.timings, Stage::Testing);
        // The new version: the active one's tools in their order, the rewritten ones replaced.
        let kept = active.tools.tools().iter().cloned().zip(active.tool_extras.iter().cloned());
        let tools: Vec<(ToolSpec, ToolExtras)> = kept
            .map(|(spec, extras)| match rewritten.iter().position(|(new, _)| new.name == spec.name) {
                Some(index) => rewritten.swap_remove(index),
                None => (spec, extras),
            })
            .collect();
        let specs: Vec<ToolSpec> = tools.iter().map(|(spec, _)| spec.clone()).collect();
        Toolset::check(&specs).map_err(|e| StageError::new(Stage::Testing, e))?;
        finished.tools = tools;
        Ok(GenerationOutcome::Ready)
    }
}

/// The names `requested` that are not tools of `active`, for the operator's error message.
pub fn unknown_tools<'a>(active: &GenerationRecord, requested: &'a [String]) -> Vec<&'a str> {
    requested
        .iter()
        .filter(|name| !active.tools.tools().iter().any(|tool| &tool.name == *name))
        .map(String::as_str)
        .collect()
}

/// Shared so the job and the API agree on how many failures a tool brings along.
pub const FAILURES_PER_TOOL: i64 = 5;
