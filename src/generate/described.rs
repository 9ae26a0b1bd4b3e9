//! Generation from an API description: the stages of a job whose server was registered with an
//! OpenAPI or Swagger document (or whose prompt linked one).
//!
//! ```text
//! pending ─► fetching (the description, by URL or from the catalog) ─► planning (select
//!         operations; derive tools, whitelist and credentials needs) ─► [planned]
//!         ─► testing (read-only tools with the description's examples) ─► ready
//! ```
//!
//! Request code is never written by the LLM here: every tool runs the one tested executor of
//! [`openapi`]. The LLM, when the registration has a prompt and one is configured, only chooses
//! operations and rewrites names and descriptions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::generator::Inner;
use super::job::Job;
use super::openapi::select::{self, Choice};
use super::openapi::{self, Derived, Spec, SpecError};
use super::self_test::SelfTestOutcome;
use super::stage::{StageClock, StageError, add_usage};
use crate::catalog::{DiscoveryRecord, FinishedGeneration, NewDocument, OperationRecord, ToolExtras};
use crate::credentials::Credential;
use crate::generate::docs::FetchedDocument;
use crate::serve::egress::{Failure, ServerPolicy};
use crate::states::{GenerationOutcome, Stage};
use crate::toolset::{OpenApiSettings, ToolSpec, Toolset};
use crate::whitelist::{Provenance, Whitelist, admit};

/// A parsed description and where it was read from (for messages and relative URLs).
pub(super) struct Described {
    spec: Spec,
    /// Where it was fetched from; `None` for an inline description.
    pub(super) url: Option<url::Url>,
}

impl Inner {
    /// Runs the stages of a generation from an API description.
    pub(super) async fn described_stages(
        &self,
        job: &Job,
        settings: &OpenApiSettings,
        finished: &mut FinishedGeneration,
    ) -> Result<GenerationOutcome, StageError> {
        let mut clock = StageClock::new();
        let credentials = self.credentials(job).await?;
        self.enter(job, Stage::Fetching).await?;
        let described = self.read_description(job, settings, finished).await?;
        clock.lap(&mut finished.timings, Stage::Fetching);

        self.derive_stages(job, described, settings, credentials, clock, finished).await
    }

    /// Planning (choosing operations, deriving tools) and testing, for a description at hand:
    /// the rest of [`Inner::described_stages`], and where a prompt generation goes when one of
    /// its documents is an API description.
    pub(super) async fn derive_stages(
        &self,
        job: &Job,
        described: Described,
        settings: &OpenApiSettings,
        credentials: Vec<Credential>,
        mut clock: StageClock,
        finished: &mut FinishedGeneration,
    ) -> Result<GenerationOutcome, StageError> {
        self.enter(job, Stage::Planning).await?;
        let spec = Arc::new(described.spec);
        let max_tools = self.settings.max_tools;
        let (discovery, choices) = self.choose_operations(job, &spec, settings, finished).await?;
        let (source, base_url) = (described.url.clone(), settings.base_url.clone());
        let derive_spec = spec.clone();
        let filter = settings.operations.clone();
        let chosen: Option<Vec<String>> = choices.as_ref().map(|c| c.iter().map(|c| c.operation.clone()).collect());
        let mut derived = tokio::task::spawn_blocking(move || {
            let selection = openapi::Selection { filter: &filter, max_tools, discovery, chosen: chosen.as_deref() };
            openapi::derive(&derive_spec, source.as_ref(), base_url.as_deref(), &selection)
        })
        .await
        .map_err(|e| StageError::new(Stage::Planning, e))?
        .map_err(|e| StageError::new(Stage::Planning, e))?;
        derived.apply(choices.as_deref().unwrap_or_default());
        let configured: Vec<String> = credentials.iter().map(|c| c.name.clone()).collect();
        finished.whitelist = whitelist(job, &derived, described.url.as_ref())?;
        finished.plan = Some(plan_record(&spec, described.url.as_ref(), &derived, &configured));
        finished.discovery = derived.discovery.as_ref().map(discovery_record);
        finished.warnings.extend(derived.warnings.iter().cloned());
        finished.warnings.extend(credential_warnings(job, &derived, &configured));
        clock.lap(&mut finished.timings, Stage::Planning);
        if job.dry_run {
            return Ok(GenerationOutcome::Planned);
        }

        self.enter(job, Stage::Testing).await?;
        finished.tools = self.test_derived(&derived, credentials, &configured, &finished.whitelist).await;
        let specs: Vec<_> = finished.tools.iter().map(|(spec, _)| spec.clone()).collect();
        Toolset::check(&specs).map_err(|e| StageError::new(Stage::Testing, e))?;
        clock.lap(&mut finished.timings, Stage::Testing);
        Ok(GenerationOutcome::Ready)
    }

    /// The first fetched document that is an API description, read whole (the fetching stage
    /// keeps only the start of long pages). A document that only looked like one is noted in
    /// the warnings and left to the LLM pipeline.
    pub(super) async fn description_among(
        &self,
        documents: &[FetchedDocument],
        finished: &mut FinishedGeneration,
    ) -> Option<Described> {
        for document in documents.iter().filter(|d| openapi::looks_like_spec(&d.text)) {
            let read = match self.fetch_description(&document.final_url).await {
                Ok((text, url, _)) => {
                    match openapi::document::read(text).await.map_err(SpecError::from).and_then(Spec::from_value) {
                        Ok(spec) => return Some(Described { spec, url: Some(url) }),
                        Err(error) => error.to_string(),
                    }
                }
                Err(error) => error.to_string(),
            };
            finished.warnings.push(format!(
                "{} looks like an API description but could not be read ({read}); the tools are written from its \
                 text instead",
                document.final_url
            ));
        }
        None
    }

    /// Which operations are listed: with a prompt and an LLM, the LLM's choice among those the
    /// operator's filter selects and the executor can call (with its names and descriptions);
    /// otherwise `None`, and the derivation's own rule. Returns the discovery setting the
    /// derivation must follow (decided here when the LLM needs to know how many to choose).
    async fn choose_operations(
        &self,
        job: &Job,
        spec: &Arc<Spec>,
        settings: &OpenApiSettings,
        finished: &mut FinishedGeneration,
    ) -> Result<(Option<bool>, Option<Vec<Choice>>), StageError> {
        if job.prompt.trim().is_empty() {
            return Ok((settings.discovery, None));
        }
        let Some(llm) = self.llm.clone() else {
            finished.warnings.push(
                "no LLM is configured, so the prompt did not choose the operations; \"operations\" did (or the \
                 first [generation] max_tools, or in discovery mode the rule of docs/openapi.md)"
                    .into(),
            );
            return Ok((settings.discovery, None));
        };
        let (listed, operator) = (spec.clone(), settings.operations.clone());
        let operations = tokio::task::spawn_blocking(move || {
            let heads = listed.operations_where(|_| false);
            let selected: std::collections::HashSet<String> =
                openapi::filtered(&heads, &operator).into_iter().map(select::key).collect();
            listed
                .operations_where(|op| selected.contains(&select::key(op)))
                .into_iter()
                .filter(|op| selected.contains(&select::key(op)) && openapi::supported(op).is_ok())
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| StageError::new(Stage::Planning, e))?;
        let candidates: Vec<&openapi::Operation> = operations.iter().collect();
        let max_tools = self.settings.max_tools;
        let discovery = openapi::discovery_mode(settings.discovery, candidates.len(), max_tools);
        let limit = openapi::listed_limit(discovery, max_tools);
        let (choices, usage) = select::select(llm.as_ref(), &job.prompt, spec.title(), &candidates, limit)
            .await
            .map_err(|e| StageError::new(Stage::Planning, e))?;
        add_usage(finished, usage);
        finished.model = Some(llm.model().to_string());
        Ok((Some(discovery), Some(choices)))
    }

    /// Fetching: the description's text from its URL or the catalog, stored with the
    /// generation, then parsed.
    async fn read_description(
        &self,
        job: &Job,
        settings: &OpenApiSettings,
        finished: &mut FinishedGeneration,
    ) -> Result<Described, StageError> {
        let fail = |message: String| StageError::new(Stage::Fetching, message);
        let (text, url, bytes) = match (&settings.url, &settings.sha256) {
            (Some(url), _) => {
                let (text, final_url, bytes) = self.fetch_description(url).await.map_err(|e| fail(e.to_string()))?;
                (text, Some(final_url), bytes)
            }
            (None, Some(sha256)) => {
                let text = self
                    .catalog
                    .document_text(sha256)
                    .await
                    .map_err(|e| StageError::internal(Stage::Fetching, e))?
                    .ok_or_else(|| fail("the inline API description is no longer in the catalog".into()))?;
                let bytes = text.len();
                (text, None, bytes)
            }
            (None, None) => {
                return Err(fail("the server has no API description (neither a URL nor an inline one)".into()));
            }
        };
        let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
        let shown_url = url.as_ref().map(url::Url::to_string).unwrap_or_else(|| "inline".to_string());
        let document = NewDocument {
            url: settings.url.as_deref().unwrap_or("inline"),
            source_url: settings.url.as_deref().unwrap_or("inline"),
            final_url: &shown_url,
            content_type: "application/openapi",
            sha256: &sha256,
            text: &text,
            bytes,
            truncated: false,
            summarised: false,
            discovered_urls: &[],
        };
        self.catalog
            .record_documents(job.generation_id, &[document])
            .await
            .map_err(|e| StageError::internal(Stage::Fetching, e))?;
        finished.content_hash = Some(sha256);
        let mut root = openapi::document::read(text).await.map_err(|e| fail(format!("{shown_url}: {e}")))?;
        if let Some(source) = &url {
            finished.warnings.extend(self.inline_external_refs(job, &mut root, source).await);
        }
        let spec = Spec::from_value(root).map_err(|e| fail(format!("{shown_url}: {e}")))?;
        Ok(Described { spec, url })
    }

    /// Fetches the files the description's `$ref`s name, from its own origin and the operator's
    /// domains only, and makes the description one document.
    async fn inline_external_refs(&self, job: &Job, root: &mut Value, source: &url::Url) -> Vec<String> {
        let operator = Whitelist::from_operator_domains(&job.allow_domains).unwrap_or_default();
        let allowed =
            |url: &url::Url| crate::whitelist::CanonicalHost::of_url(url).is_some_and(|host| operator.allows(&host));
        let fetch = |url: url::Url| async move { self.fetch_description(url.as_str()).await.map(|(text, _, _)| text) };
        openapi::external::inline(root, source, allowed, fetch).await
    }

    /// The description at `url` (GitHub pages are read raw), through the egress's document
    /// rules, up to [`openapi::MAX_SPEC_BYTES`]. Returns its text, final URL and size.
    async fn fetch_description(&self, url: &str) -> Result<(String, url::Url, usize), DescriptionFetchError> {
        let parsed =
            url::Url::parse(url).map_err(|cause| DescriptionFetchError::NotAUrl { url: url.to_string(), cause })?;
        let target = super::docs::rewrite_github(&parsed).unwrap_or(parsed);
        let deadline = Instant::now() + Duration::from_millis(self.settings.fetch_timeout_ms.max(30_000));
        let accept = "application/json, application/yaml, application/x-yaml, text/yaml, */*;q=0.5";
        let response = self
            .egress
            .fetch_document(
                target.as_str(),
                vec![("accept".into(), accept.into())],
                openapi::MAX_SPEC_BYTES as u64,
                deadline,
            )
            .await
            .map_err(|cause| DescriptionFetchError::Unfetched { target: target.clone(), cause })?;
        if !(200..300).contains(&response.status) {
            return Err(DescriptionFetchError::Status {
                target,
                status: response.status,
                status_text: response.status_text,
            });
        }
        let bytes = response.body.len();
        let Ok(text) = String::from_utf8(response.body.to_vec()) else {
            return Err(DescriptionFetchError::NotUtf8 { target });
        };
        let final_url = url::Url::parse(&response.url).unwrap_or(target);
        Ok((text, final_url, bytes))
    }

    /// Testing: each read-only tool whose credentials are configured is called once with the
    /// description's example arguments. Tools are kept whatever the outcome: an upstream that
    /// is down at generation time says nothing about the executor.
    async fn test_derived(
        &self,
        derived: &Derived,
        credentials: Vec<Credential>,
        configured: &[String],
        whitelist: &Whitelist,
    ) -> Vec<(crate::toolset::ToolSpec, ToolExtras)> {
        let policy = Arc::new(
            ServerPolicy::whitelisted(whitelist.clone(), self.max_response_bytes).with_credentials(credentials),
        );
        let mut tools = Vec::with_capacity(derived.tools.len());
        for tool in &derived.tools {
            let skipped = if !self.settings.self_test {
                Some("[generation] self_test is off".to_string())
            } else if !tool.read_only {
                Some("the operation writes".to_string())
            } else if !tool.satisfied_by(configured) {
                Some(format!("it needs {}, which is not configured", needed_credentials(&tool.security)))
            } else {
                tool.example.as_ref().err().map(ToString::to_string)
            };
            let outcome = match (skipped, &tool.example) {
                (Some(reason), _) => SelfTestOutcome::Skipped { reason },
                (None, Ok(arguments)) => {
                    match super::self_test::try_handler(
                        &self.caller,
                        &self.egress,
                        &policy,
                        &tool.spec.handler,
                        arguments,
                    )
                    .await
                    {
                        Ok(()) => {
                            SelfTestOutcome::Passed { arguments: arguments.clone(), attempts: 1, first_error: None }
                        }
                        Err(error) => SelfTestOutcome::Failed {
                            arguments: arguments.clone(),
                            attempts: 1,
                            error: error.to_string(),
                            first_error: None,
                            repair_error: None,
                        },
                    }
                }
                (None, Err(reason)) => SelfTestOutcome::Skipped { reason: reason.to_string() },
            };
            let extras = ToolExtras { needs_network: Some(true), self_test: Some(outcome.to_json()) };
            tools.push((tool.spec.clone(), extras));
        }
        tools
    }
}

/// Why an API description could not be fetched.
#[derive(Debug, thiserror::Error)]
enum DescriptionFetchError {
    #[error("the API description URL {url:?} is not a URL: {cause}")]
    NotAUrl { url: String, cause: url::ParseError },
    #[error("the API description at {target} could not be fetched: {cause}")]
    Unfetched { target: url::Url, cause: Failure },
    #[error("the API description at {target} answered {status} {status_text}")]
    Status { target: url::Url, status: u16, status_text: String },
    #[error("the API description at {target} is not UTF-8 text")]
    NotUtf8 { target: url::Url },
}

/// The operator's domains, plus the host of the API's base URL unless they cover it already.
fn whitelist(job: &Job, derived: &Derived, source: Option<&url::Url>) -> Result<Whitelist, StageError> {
    let mut whitelist =
        Whitelist::from_operator_domains(&job.allow_domains).map_err(|e| StageError::new(Stage::Planning, e))?;
    let Some(host) = crate::whitelist::CanonicalHost::of_url(&derived.base_url) else {
        return Err(StageError::new(Stage::Planning, format!("the API's base URL {} has no host", derived.base_url)));
    };
    if whitelist.allows(&host) {
        return Ok(whitelist);
    }
    let raw = derived.base_url.host_str().unwrap_or_default();
    let detail = format!("openapi servers of {}", source.map(url::Url::as_str).unwrap_or("the inline description"));
    match admit(raw, Provenance::Openapi, Some(detail)) {
        Ok(entry) => {
            whitelist.add(entry);
            Ok(whitelist)
        }
        Err(refused) => Err(StageError::new(
            Stage::Planning,
            format!(
                "the API's host {raw} is not admitted to the whitelist: {}; list it in allow_domains if it is meant",
                refused.reason
            ),
        )),
    }
}

/// A discovery-mode version's operations as the catalog stores them: each handler without the
/// executor they all end with, which is stored once.
fn discovery_record(derived: &openapi::DerivedOperations) -> DiscoveryRecord {
    let operations = derived
        .operations
        .iter()
        .map(|operation| {
            let (method, path) = operation.operation.split_once(' ').unwrap_or(("", &operation.operation));
            let handler = operation.spec.handler.strip_suffix(openapi::EXECUTOR).unwrap_or(&operation.spec.handler);
            OperationRecord {
                tool: ToolSpec { handler: handler.to_string(), ..operation.spec.clone() },
                method: method.to_string(),
                path: path.to_string(),
            }
        })
        .collect();
    DiscoveryRecord {
        operations,
        search_index: serde_json::to_value(&derived.search_index).unwrap_or_default(),
        executor: openapi::EXECUTOR.to_string(),
    }
}

/// What the generation record shows about the description and the derivation.
fn plan_record(spec: &Spec, source: Option<&url::Url>, derived: &Derived, configured: &[String]) -> Value {
    let auth: Vec<Value> = derived
        .auth
        .iter()
        .map(|need| {
            json!({
                "scheme": need.scheme,
                "credential": need.credential,
                "configured": configured.contains(&need.credential),
                "inject": need.inject,
                "domains": [derived.base_url.host_str().unwrap_or_default()],
                "tools": need.tools,
            })
        })
        .collect();
    let unsatisfied: Vec<&str> = derived
        .tools
        .iter()
        .filter(|tool| !tool.satisfied_by(configured))
        .map(|tool| tool.spec.name.as_str())
        .collect();
    json!({
        "openapi": {
            "title": spec.title(),
            "version": spec.root.pointer("/info/version"),
            "flavour": spec.flavour.as_str(),
            "source": source.map(url::Url::as_str).unwrap_or("inline"),
            "base_url": derived.base_url.as_str(),
            "operations": derived.operations_total,
            "discovery": derived.discovery.as_ref().map(|d| json!({"operations": d.operations.len()})),
            "tools": derived.tools.iter().map(|t| json!({"name": t.spec.name, "operation": t.operation})).collect::<Vec<_>>(),
            "auth": auth,
            "missing_credentials": unsatisfied,
        }
    })
}

/// One warning per security scheme the tools need and the server has no credential for.
fn credential_warnings(job: &Job, derived: &Derived, configured: &[String]) -> Vec<String> {
    derived
        .auth
        .iter()
        .filter(|need| !configured.contains(&need.credential))
        .map(|need| {
            format!(
                "{} tool(s) need the credential {:?} ({}), which is not configured: PUT /admin/servers/{}/credentials/{} \
                 with {{\"value\": \"...\", \"inject\": {}, \"domains\": [{:?}]}}",
                need.tools.len(),
                need.credential,
                need.tools.join(", "),
                job.server,
                need.credential,
                need.inject,
                derived.base_url.host_str().unwrap_or_default(),
            )
        })
        .collect()
}

/// "the credential \"key\"" or "the credentials \"a\" and \"b\"" or alternatives joined by "or".
fn needed_credentials(alternatives: &[Vec<String>]) -> String {
    alternatives
        .iter()
        .map(|all| {
            let names: Vec<String> = all.iter().map(|n| format!("{n:?}")).collect();
            if names.len() == 1 {
                format!("the credential {}", names[0])
            } else {
                format!("the credentials {}", names.join(" and "))
            }
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_failures_read_as_before() {
        let target = url::Url::parse("https://api.example.test/openapi.json").unwrap();
        let cases = [
            (
                DescriptionFetchError::NotAUrl {
                    url: "openapi.json".into(),
                    cause: url::ParseError::RelativeUrlWithoutBase,
                },
                "the API description URL \"openapi.json\" is not a URL: relative URL without a base",
            ),
            (
                DescriptionFetchError::Unfetched {
                    target: target.clone(),
                    cause: Failure::Network("connection refused".into()),
                },
                "the API description at https://api.example.test/openapi.json could not be fetched: connection refused",
            ),
            (
                DescriptionFetchError::Status { target: target.clone(), status: 404, status_text: "Not Found".into() },
                "the API description at https://api.example.test/openapi.json answered 404 Not Found",
            ),
            (
                DescriptionFetchError::NotUtf8 { target },
                "the API description at https://api.example.test/openapi.json is not UTF-8 text",
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(error.to_string(), expected);
        }
    }
}
