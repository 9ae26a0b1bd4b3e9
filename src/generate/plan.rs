//! The planner: asks the LLM which tools to build from a prompt and its documentation, and
//! checks the answer before anything is compiled.
//!
//! The contract follows mcpboot's (`GenerationPlan`): a JSON object `{tools: [...]}` whose
//! entries carry a name, description, input schema, the endpoints used, implementation notes
//! for the compiler and whether the tool needs the network, plus `example_args` for the
//! self-test of read-only tools. The system prompt is `config/planner.md`.
//!
//! Everything the model controls is checked here, so that later stages can trust the plan:
//! names and schemas with the same checks as explicit toolsets, endpoints as
//! `METHOD absolute-URL` on the candidate domains (with the egress whitelist's matching rule),
//! example arguments against the tool's own schema. A reply that is not JSON or fails a check
//! is sent back once or twice with the complete list of problems (a repair turn), because
//! models fix a precise list reliably and a fresh attempt would make new mistakes.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::credentials::{Binding, Credential};
use crate::generate::endpoint::Endpoint;
use crate::generate::extract;
use crate::llm::{LlmClient, LlmError, Message, Usage};
use crate::states::Stage;
use crate::toolset::{FieldProblem, SchemaError};
use crate::whitelist::{Provenance, Whitelist, WhitelistEntry};

pub const PLANNER_PROMPT: &str = include_str!("../../config/planner.md");

/// Tools per plan.
pub const MAX_PLANNED_TOOLS: usize = 64;
/// Requests per conversation: the first answer and up to two repairs.
pub const MAX_ATTEMPTS: u32 = 3;
/// The explicit-toolset limit on descriptions, so a plan always makes a registrable toolset.
const MAX_DESCRIPTION_CHARS: usize = 8 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub tools: Vec<PlannedTool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedTool {
    pub name: String,
    /// A name for people, shown by hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Map<String, Value>,
    /// The JSON Schema of the tool's result, when it returns an object of known shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Map<String, Value>>,
    /// `"GET https://api.example.com/items/{id}"`; empty for tools without network.
    #[serde(default)]
    pub endpoints_used: Vec<Endpoint>,
    pub implementation_notes: String,
    pub needs_network: bool,
    /// Arguments for a one-off self-test of a read-only tool.
    #[serde(default)]
    pub example_args: Option<Value>,
}

impl PlannedTool {
    /// Whether the tool only reads: no network, or only GET/HEAD/OPTIONS endpoints. Only such
    /// tools are worth calling with `example_args` after compiling.
    pub fn is_read_only(&self) -> bool {
        self.endpoints_used.iter().all(|endpoint| endpoint.method().is_read_only())
    }
}

/// A fetched documentation page, already truncated by the caller.
#[derive(Debug, Clone, Copy)]
pub struct SourceDocument<'a> {
    pub url: &'a str,
    pub text: &'a str,
}

#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    pub prompt: &'a str,
    pub documents: &'a [SourceDocument<'a>],
    /// Domains the tools may reach (each with its subdomains).
    pub candidate_domains: &'a [String],
    /// The credentials section (`credentials::prompt_section`); empty when there are none.
    pub credentials: &'a str,
}

/// Why planning or compiling failed.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the LLM request failed: {0}")]
    Llm(#[from] LlmError),
    /// The model's answers stayed unusable after the repair turns; `message` is the last list
    /// of problems.
    #[error("the LLM's answer was still unusable after {attempts} attempts: {message}")]
    Invalid { stage: Stage, message: String, attempts: u32 },
}

/// Asks for a plan, repairing invalid answers up to twice.
pub async fn plan(llm: &dyn LlmClient, request: &PlanRequest<'_>) -> Result<(Plan, Usage), GenerateError> {
    let mut messages = vec![Message::user(user_message(request))];
    let mut usage = Usage::default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reply = llm.complete(PLANNER_PROMPT, &messages).await?;
        usage += reply.usage;
        let problems = match parse_plan(&reply.text) {
            Ok(plan) => match validate_plan(&plan, request.candidate_domains) {
                Ok(()) => {
                    tracing::info!(tools = plan.tools.len(), attempts = attempt, "plan accepted");
                    return Ok((plan, usage));
                }
                Err(problems) => problems.to_string(),
            },
            Err(problems) => problems,
        };
        tracing::info!(attempt, problems = %problems, "the LLM's plan is invalid");
        if attempt >= MAX_ATTEMPTS {
            return Err(GenerateError::Invalid { stage: Stage::Planning, message: problems, attempts: attempt });
        }
        messages.push(Message::assistant(reply.text));
        messages.push(Message::user(repair_message(&problems)));
    }
}

/// The first user turn: the request, the domains and the documents.
fn user_message(request: &PlanRequest<'_>) -> String {
    let mut message = String::new();
    message.push_str("# Request\n\n");
    message.push_str(request.prompt.trim());
    message.push_str("\n\n# Allowed domains\n\n");
    message.push_str(&domains_section(request.candidate_domains));
    if !request.credentials.is_empty() {
        message.push_str("\n\n");
        message.push_str(request.credentials);
    }
    message.push_str("\n\n# Documentation\n\n");
    message.push_str(&documents_section(request.documents));
    message.push_str("\n\nReply with the plan as one JSON object.");
    message
}

/// What the LLM is told about the server's credentials: their names and bindings, never values.
pub fn credentials_section(credentials: &[Credential]) -> String {
    let bindings: Vec<(String, Binding)> = credentials.iter().map(|c| (c.name.clone(), c.binding.clone())).collect();
    crate::credentials::prompt_section(&bindings)
}

/// The allowed domains as a list, or a note that there are none.
pub fn domains_section(domains: &[String]) -> String {
    if domains.is_empty() {
        return "(none: the tools cannot use the network)".into();
    }
    domains.iter().map(|d| format!("- {d} (and its subdomains)")).collect::<Vec<_>>().join("\n")
}

/// The documents, each labelled with its URL. The markers make document boundaries explicit
/// so that text inside a document cannot pass for the request.
pub fn documents_section(documents: &[SourceDocument<'_>]) -> String {
    if documents.is_empty() {
        return "(no documentation was fetched: rely on the request and on well-known public APIs)".into();
    }
    documents
        .iter()
        .map(|d| format!("<document url=\"{}\">\n{}\n</document>", d.url, d.text.trim()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn repair_message(problems: &str) -> String {
    format!(
        "That plan cannot be used. Problems:\n{problems}\n\nReply with the complete corrected plan as one JSON object \
         in the same format (all tools, not only the fixed ones), and nothing else."
    )
}

/// The plan in a reply; problems are listed one per line ([`plan`] sends them back to the model
/// or ends with them in [`GenerateError::Invalid`]).
fn parse_plan(reply: &str) -> Result<Plan, String> {
    let value = extract::json_value(reply).map_err(|e| e.to_string())?;
    let tools = match value {
        Value::Object(mut object) => match object.remove("tools") {
            Some(Value::Array(tools)) => tools,
            Some(_) => return Err("- \"tools\" must be an array of tool objects".into()),
            None => return Err("- the JSON object has no \"tools\" array".into()),
        },
        // A bare list of tools is unambiguous enough to accept.
        Value::Array(tools) => tools,
        _ => return Err("- the reply must be a JSON object {\"tools\": [...]}".into()),
    };
    let mut parsed = Vec::with_capacity(tools.len());
    let mut problems = Vec::new();
    for (index, tool) in tools.into_iter().enumerate() {
        let label = tool_label(index, tool.get("name").and_then(Value::as_str));
        match serde_json::from_value::<PlannedTool>(tool) {
            Ok(tool) => parsed.push(tool),
            Err(e) => problems.push(format!("- {label}: {e}")),
        }
    }
    if problems.is_empty() { Ok(Plan { tools: parsed }) } else { Err(problems.join("\n")) }
}

fn tool_label(index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) if !name.is_empty() => format!("tools[{index}] ({name:?})"),
        _ => format!("tools[{index}]"),
    }
}

/// Checks a plan against the contract; the error lists every problem, one per line, in words
/// meant for the model's repair turn.
pub fn validate_plan(plan: &Plan, candidate_domains: &[String]) -> Result<(), PlanProblems> {
    let mut problems = Vec::new();
    if plan.tools.is_empty() {
        problems.push(PlanProblem::NoTools);
    }
    if plan.tools.len() > MAX_PLANNED_TOOLS {
        problems.push(PlanProblem::TooManyTools { count: plan.tools.len() });
    }
    let whitelist = candidate_whitelist(candidate_domains);
    let allowed = if candidate_domains.is_empty() { "none".to_string() } else { candidate_domains.join(", ") };
    let mut names = HashSet::new();
    for (index, tool) in plan.tools.iter().enumerate() {
        let label = tool_label(index, Some(&tool.name));
        let mut problem = |problem: ToolProblem| problems.push(PlanProblem::Tool { label: label.clone(), problem });
        if let Err(e) = crate::toolset::check_tool_name(&tool.name) {
            problem(ToolProblem::Name(e));
        } else if !names.insert(tool.name.as_str()) {
            problem(ToolProblem::DuplicateName { name: tool.name.clone() });
        }
        if tool.description.trim().is_empty() {
            problem(ToolProblem::EmptyDescription);
        } else if tool.description.chars().count() > MAX_DESCRIPTION_CHARS {
            problem(ToolProblem::LongDescription);
        }
        if tool.implementation_notes.trim().is_empty() {
            problem(ToolProblem::EmptyImplementationNotes);
        }
        let schema_ok = match crate::toolset::check_input_schema(&tool.input_schema) {
            Ok(()) => true,
            Err(e) => {
                problem(ToolProblem::InputSchema(e));
                false
            }
        };
        if let Some(title) = &tool.title
            && let Err(e) = crate::toolset::check_title(title)
        {
            problem(ToolProblem::Title(e));
        }
        if let Some(schema) = &tool.output_schema
            && let Err(e) = crate::toolset::check_output_schema(schema)
        {
            problem(ToolProblem::OutputSchema(e));
        }
        if tool.needs_network && tool.endpoints_used.is_empty() {
            problem(ToolProblem::NetworkWithoutEndpoints);
        }
        for endpoint in &tool.endpoints_used {
            if tool.needs_network && !whitelist.allows(endpoint.host()) {
                problem(ToolProblem::EndpointNotAllowed { endpoint: endpoint.clone(), allowed: allowed.clone() });
            }
        }
        match &tool.example_args {
            None => {}
            Some(Value::Object(_)) if !schema_ok => {}
            Some(args @ Value::Object(_)) => {
                if let Err(e) = check_example_args(&tool.input_schema, args) {
                    problem(e);
                }
            }
            Some(_) => problem(ToolProblem::ExampleArgsNotObject),
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(PlanProblems(problems)) }
}

/// Every problem [`validate_plan`] found; shown one per line, each after `- `.
#[derive(Debug)]
pub struct PlanProblems(pub Vec<PlanProblem>);

impl std::fmt::Display for PlanProblems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, problem) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "- {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanProblems {}

/// One problem of a plan: with the plan as a whole, or with one of its tools.
#[derive(Debug, thiserror::Error)]
pub enum PlanProblem {
    #[error("the plan has no tools; plan at least one")]
    NoTools,
    #[error("the plan has {count} tools; plan at most {MAX_PLANNED_TOOLS}")]
    TooManyTools { count: usize },
    /// `label` names the tool by its place and name (`tools[1] ("get_item")`).
    #[error("{label}: {problem}")]
    Tool { label: String, problem: ToolProblem },
}

/// What is wrong with one planned tool.
#[derive(Debug, thiserror::Error)]
pub enum ToolProblem {
    #[error(transparent)]
    Name(FieldProblem),
    #[error("the name {name:?} is used by another tool; names must be unique")]
    DuplicateName { name: String },
    #[error("description must not be empty")]
    EmptyDescription,
    #[error("description is longer than {MAX_DESCRIPTION_CHARS} characters")]
    LongDescription,
    #[error("implementation_notes must not be empty")]
    EmptyImplementationNotes,
    #[error("input_schema {0}")]
    InputSchema(FieldProblem),
    #[error("title {0}")]
    Title(FieldProblem),
    #[error("output_schema {0}")]
    OutputSchema(FieldProblem),
    #[error("needs_network is true but endpoints_used is empty; list every \"METHOD URL\" the tool calls")]
    NetworkWithoutEndpoints,
    /// `allowed` lists the candidate domains, or says `none`.
    #[error(
        "endpoint {:?} is on {}, which is not an allowed domain (allowed: {allowed}); use only documented endpoints \
         on the allowed domains",
        .endpoint.as_str(),
        .endpoint.host()
    )]
    EndpointNotAllowed { endpoint: Endpoint, allowed: String },
    #[error("input_schema cannot be used for validation: {0}")]
    UnusableSchema(SchemaError),
    /// `errors` are the validator's first few, each with the path it is at.
    #[error("example_args do not match input_schema: {}", .errors.join("; "))]
    ExampleArgsMismatch { errors: Vec<String> },
    #[error("example_args must be an object of arguments (or null)")]
    ExampleArgsNotObject,
}

/// The candidate domains as a whitelist. Entries are added as given (lower-cased, without a
/// trailing dot) rather than through the operator rules, which refuse names such as
/// `localhost` that a prompt may legitimately point at; matching is the egress rule itself.
fn candidate_whitelist(domains: &[String]) -> Whitelist {
    let mut whitelist = Whitelist::default();
    for domain in domains {
        let domain =
            domain.trim().trim_end_matches('.').trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        if !domain.is_empty() {
            whitelist.add(WhitelistEntry { domain, source: Provenance::Prompt, detail: None });
        }
    }
    whitelist
}

fn check_example_args(schema: &Map<String, Value>, args: &Value) -> Result<(), ToolProblem> {
    let validator = crate::toolset::validator(&Value::Object(schema.clone())).map_err(ToolProblem::UnusableSchema)?;
    let errors: Vec<String> = validator
        .iter_errors(args)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() { e.to_string() } else { format!("{path}: {e}") }
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(ToolProblem::ExampleArgsMismatch { errors }) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::testing::FakeLlm;

    fn tool(name: &str, endpoints: &[&str]) -> Value {
        json!({
            "name": name,
            "description": "Fetch one item by id.",
            "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "endpoints_used": endpoints,
            "implementation_notes": "GET the item and return it.",
            "needs_network": !endpoints.is_empty(),
            "example_args": {"id": 1}
        })
    }

    fn plan_json(tools: Vec<Value>) -> String {
        json!({ "tools": tools }).to_string()
    }

    fn domains() -> Vec<String> {
        vec!["example.com".to_string()]
    }

    /// What the model's reply goes through: parsing (which checks endpoints), then validation.
    fn check(tools: Vec<Value>, domains: &[String]) -> Result<(), String> {
        validate_plan(&parse_plan(&plan_json(tools))?, domains).map_err(|problems| problems.to_string())
    }

    #[tokio::test]
    async fn a_fenced_plan_is_accepted() {
        let reply = format!(
            "Here you go:\n```json\n{}\n```",
            plan_json(vec![tool("get_item", &["GET https://api.example.com/items/{id}"])])
        );
        let llm = FakeLlm::scripted([reply]);
        let documents = [SourceDocument { url: "https://example.com/docs", text: "GET /items/{id} returns an item" }];
        let domains = domains();
        let request = PlanRequest {
            prompt: "Tools for the example API",
            documents: &documents,
            candidate_domains: &domains,
            credentials: "",
        };
        let (plan, usage) = plan(&llm, &request).await.unwrap();
        assert_eq!(plan.tools.len(), 1);
        assert_eq!(plan.tools[0].name, "get_item");
        assert_eq!(plan.tools[0].example_args, Some(json!({"id": 1})));
        assert_eq!(usage.requests, 1);
        let calls = llm.calls();
        assert_eq!(calls[0].system, PLANNER_PROMPT);
        let user = &calls[0].messages[0].content;
        assert!(user.contains("Tools for the example API"), "{user}");
        assert!(
            user.contains("<document url=\"https://example.com/docs\">\nGET /items/{id} returns an item\n</document>"),
            "{user}"
        );
        assert!(user.contains("- example.com (and its subdomains)"), "{user}");
    }

    #[tokio::test]
    async fn an_invalid_plan_is_repaired() {
        let bad = plan_json(vec![
            tool("Get-Item", &["GET https://api.example.com/items/{id}"]),
            tool("steal", &["POST https://evil.test/collect"]),
        ]);
        let good = plan_json(vec![tool("get_item", &["GET https://api.example.com/items/{id}"])]);
        let llm = FakeLlm::scripted([bad.clone(), good]);
        let domains = domains();
        let request = PlanRequest { prompt: "p", documents: &[], candidate_domains: &domains, credentials: "" };
        let (plan, usage) = plan(&llm, &request).await.unwrap();
        assert_eq!(plan.tools[0].name, "get_item");
        assert_eq!(usage.requests, 2);
        let calls = llm.calls();
        assert_eq!(calls.len(), 2);
        let conversation = &calls[1].messages;
        assert_eq!(conversation.len(), 3);
        assert_eq!(conversation[1], Message::assistant(bad));
        let repair = &conversation[2].content;
        assert!(
            repair.contains("tools[0] (\"Get-Item\")") && repair.contains("tool name \"Get-Item\" is invalid"),
            "{repair}"
        );
        assert!(repair.contains("evil.test") && repair.contains("not an allowed domain"), "{repair}");
    }

    #[tokio::test]
    async fn gives_up_after_three_attempts() {
        let llm = FakeLlm::scripted(["no plan, sorry", "{\"tools\": []}", "still nothing"]);
        let request = PlanRequest { prompt: "p", documents: &[], candidate_domains: &[], credentials: "" };
        let error = plan(&llm, &request).await.unwrap_err();
        match &error {
            GenerateError::Invalid { stage, message, attempts } => {
                assert_eq!((*stage, *attempts), (Stage::Planning, 3));
                assert!(message.contains("no JSON object"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(llm.calls().len(), 3);
        assert!(llm.calls()[2].messages[4].content.contains("the plan has no tools"));
        assert!(error.to_string().starts_with("the LLM's answer was still unusable after 3 attempts"), "{error}");
    }

    #[tokio::test]
    async fn llm_errors_end_planning() {
        let llm = FakeLlm::scripted(Vec::<String>::new());
        let request = PlanRequest { prompt: "p", documents: &[], candidate_domains: &[], credentials: "" };
        assert!(matches!(plan(&llm, &request).await, Err(GenerateError::Llm(_))));
    }

    #[test]
    fn validation_problems() {
        let domains = domains();
        let mut base = tool("get_item", &["GET https://api.example.com/items/{id}"]);
        let with = |change: &dyn Fn(&mut Value)| {
            let mut t = base.clone();
            change(&mut t);
            t
        };
        let cases: Vec<(&str, Vec<Value>, Option<&str>)> = vec![
            ("valid", vec![base.clone()], None),
            ("exact domain", vec![with(&|t| t["endpoints_used"] = json!(["GET https://example.com/x"]))], None),
            (
                "query placeholders",
                vec![with(&|t| t["endpoints_used"] = json!(["GET https://api.example.com/s?q={query}&n={n}"]))],
                None,
            ),
            (
                "lower-case method",
                vec![with(&|t| t["endpoints_used"] = json!(["get https://api.example.com/x"]))],
                None,
            ),
            ("no network", vec![tool("add", &[])], None),
            ("null example", vec![with(&|t| t["example_args"] = Value::Null)], None),
            ("empty", vec![], Some("no tools")),
            ("bad name", vec![tool("GetItem", &[])], Some("tool name \"GetItem\" is invalid")),
            (
                "duplicate",
                vec![base.clone(), base.clone()],
                Some("tools[1] (\"get_item\"): the name \"get_item\" is used by another tool"),
            ),
            (
                "empty description",
                vec![with(&|t| t["description"] = json!(" "))],
                Some("description must not be empty"),
            ),
            (
                "empty notes",
                vec![with(&|t| t["implementation_notes"] = json!(""))],
                Some("implementation_notes must not be empty"),
            ),
            (
                "schema not object",
                vec![with(&|t| t["input_schema"] = json!({"type": "string"}))],
                Some("input_schema must have \"type\": \"object\""),
            ),
            (
                "schema invalid",
                vec![with(&|t| t["input_schema"] = json!({"type": "object", "properties": 5}))],
                Some("input_schema is not a valid JSON Schema"),
            ),
            (
                "unknown domain",
                vec![with(&|t| t["endpoints_used"] = json!(["GET https://api.other.com/x"]))],
                Some("api.other.com, which is not an allowed domain (allowed: example.com)"),
            ),
            (
                "suffix trick",
                vec![with(&|t| t["endpoints_used"] = json!(["GET https://evilexample.com/x"]))],
                Some("not an allowed domain"),
            ),
            (
                "relative URL",
                vec![with(&|t| t["endpoints_used"] = json!(["GET /items/{id}"]))],
                Some("does not have an absolute URL"),
            ),
            (
                "no method",
                vec![with(&|t| t["endpoints_used"] = json!(["https://api.example.com/x"]))],
                Some("must be \"METHOD URL\""),
            ),
            (
                "bad method",
                vec![with(&|t| t["endpoints_used"] = json!(["FETCH https://api.example.com/x"]))],
                Some("unknown HTTP method \"FETCH\""),
            ),
            (
                "ftp",
                vec![with(&|t| t["endpoints_used"] = json!(["GET ftp://example.com/x"]))],
                Some("http:// or https://"),
            ),
            (
                "network without endpoints",
                vec![with(&|t| {
                    t["endpoints_used"] = json!([]);
                    t["needs_network"] = json!(true)
                })],
                Some("needs_network is true but endpoints_used is empty"),
            ),
            (
                "example args wrong type",
                vec![with(&|t| t["example_args"] = json!({"id": "one"}))],
                Some("example_args do not match input_schema: /id: \"one\" is not of type \"integer\""),
            ),
            (
                "example args missing",
                vec![with(&|t| t["example_args"] = json!({}))],
                Some("example_args do not match input_schema: \"id\" is a required property"),
            ),
            (
                "example args not object",
                vec![with(&|t| t["example_args"] = json!([1]))],
                Some("example_args must be an object"),
            ),
        ];
        for (name, tools, expected) in cases {
            let result = check(tools, &domains);
            match expected {
                None => assert_eq!(result, Ok(()), "{name}"),
                Some(expected) => {
                    let message = result.expect_err(name);
                    assert!(message.contains(expected), "{name}: {message}");
                }
            }
        }
        // Every problem is listed, not only the first.
        base["name"] = json!("Bad Name");
        base["implementation_notes"] = json!("");
        let message = check(vec![base], &[]).unwrap_err();
        assert_eq!(message.lines().count(), 3, "{message}");
        assert!(message.contains("allowed: none"), "{message}");
        let many = (0..65).map(|i| tool(&format!("t{i}"), &[])).collect();
        assert!(check(many, &domains).unwrap_err().contains("at most 64"));
    }

    #[test]
    fn each_plan_problem_reads_as_before() {
        let tool = |problem: ToolProblem| PlanProblem::Tool { label: "tools[1] (\"get_item\")".into(), problem };
        let endpoint = Endpoint::parse("GET https://api.other.com/x").unwrap();
        let unusable = crate::toolset::validator(&json!({"type": 5})).unwrap_err();
        let unusable_text = unusable.to_string();
        let cases = [
            (PlanProblem::NoTools, "the plan has no tools; plan at least one".to_string()),
            (PlanProblem::TooManyTools { count: 65 }, "the plan has 65 tools; plan at most 64".into()),
            (
                tool(ToolProblem::DuplicateName { name: "get_item".into() }),
                "tools[1] (\"get_item\"): the name \"get_item\" is used by another tool; names must be unique".into(),
            ),
            (tool(ToolProblem::EmptyDescription), "tools[1] (\"get_item\"): description must not be empty".into()),
            (
                tool(ToolProblem::LongDescription),
                "tools[1] (\"get_item\"): description is longer than 8192 characters".into(),
            ),
            (
                tool(ToolProblem::EmptyImplementationNotes),
                "tools[1] (\"get_item\"): implementation_notes must not be empty".into(),
            ),
            (
                tool(ToolProblem::NetworkWithoutEndpoints),
                "tools[1] (\"get_item\"): needs_network is true but endpoints_used is empty; list every \"METHOD URL\" \
                 the tool calls"
                    .into(),
            ),
            (
                tool(ToolProblem::EndpointNotAllowed { endpoint, allowed: "example.com, example.org".into() }),
                "tools[1] (\"get_item\"): endpoint \"GET https://api.other.com/x\" is on api.other.com, which is not an \
                 allowed domain (allowed: example.com, example.org); use only documented endpoints on the allowed domains"
                    .into(),
            ),
            (
                tool(ToolProblem::UnusableSchema(unusable)),
                format!("tools[1] (\"get_item\"): input_schema cannot be used for validation: {unusable_text}"),
            ),
            (
                tool(ToolProblem::ExampleArgsMismatch { errors: vec!["/id: a".into(), "b".into()] }),
                "tools[1] (\"get_item\"): example_args do not match input_schema: /id: a; b".into(),
            ),
            (
                tool(ToolProblem::ExampleArgsNotObject),
                "tools[1] (\"get_item\"): example_args must be an object of arguments (or null)".into(),
            ),
        ];
        for (problem, expected) in cases {
            assert_eq!(problem.to_string(), expected);
        }
        let name = crate::toolset::check_tool_name("Get").unwrap_err();
        let name_text = name.to_string();
        assert_eq!(tool(ToolProblem::Name(name)).to_string(), format!("tools[1] (\"get_item\"): {name_text}"));
        let listed = PlanProblems(vec![PlanProblem::NoTools, tool(ToolProblem::EmptyDescription)]);
        assert_eq!(
            listed.to_string(),
            "- the plan has no tools; plan at least one\n- tools[1] (\"get_item\"): description must not be empty"
        );
    }

    #[test]
    fn candidate_domains_match_like_the_whitelist() {
        let domains = vec!["Example.COM.".to_string(), "localhost".to_string(), "10.0.0.5".to_string()];
        let whitelist = candidate_whitelist(&domains);
        for (url, allowed) in [
            ("https://example.com/", true),
            ("https://api.example.com/", true),
            ("https://notexample.com/", false),
            ("http://localhost:8080/", true),
            ("http://10.0.0.5/", true),
            ("http://10.0.0.6/", false),
        ] {
            let host = crate::whitelist::CanonicalHost::of_url(&url::Url::parse(url).unwrap()).unwrap();
            assert_eq!(whitelist.allows(&host), allowed, "{url}");
        }
    }

    #[test]
    fn parsing_problems_name_the_tool() {
        let reply = json!({"tools": [{"name": "a", "description": "d"}]}).to_string();
        let error = parse_plan(&reply).unwrap_err();
        assert!(error.contains("tools[0] (\"a\"): missing field"), "{error}");
        assert!(parse_plan("{\"tool\": []}").unwrap_err().contains("no \"tools\" array"));
        let bare = json!([tool("get_item", &[])]).to_string();
        assert_eq!(parse_plan(&bare).unwrap().tools.len(), 1);
    }

    #[test]
    fn read_only_tools() {
        let read: PlannedTool =
            serde_json::from_value(tool("a", &["GET https://example.com/a", "get https://example.com/b"])).unwrap();
        assert!(read.is_read_only());
        let write: PlannedTool =
            serde_json::from_value(tool("b", &["GET https://example.com/a", "POST https://example.com/b"])).unwrap();
        assert!(!write.is_read_only());
        let compute: PlannedTool = serde_json::from_value(tool("c", &[])).unwrap();
        assert!(compute.is_read_only());
    }
}
