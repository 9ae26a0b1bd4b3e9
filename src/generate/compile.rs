//! The compiler: one LLM conversation per planned tool that ends in a handler the real engine
//! accepts.
//!
//! Each tool gets its own conversation (system prompt `config/compiler.md`), so tools compile
//! concurrently, up to a limit, and a failure in one does not disturb the others' context.
//! Unlike mcpboot, the user's prompt is part of every conversation: it often says what matters
//! ("only stories with more than 100 points") in ways the plan entry may have lost.
//!
//! The user message puts what all tools share first (request, domains, documents) and the
//! tool's plan entry last, so providers with prefix caching can reuse the long common part.
//!
//! A handler is accepted only when `serve::isolate::check_handler` compiles it in QuickJS as
//! the body of `async function (args, fetch)` and finds no `require`/`import`. Anything else
//! (no code, a syntax error with its line, a whole function declaration instead of a body) is
//! sent back as a repair turn, at most twice. [`repair`] is the same conversation after a
//! failed self-test: the handler and what went wrong when it ran.

use futures_util::StreamExt;

use crate::generate::extract;
use crate::generate::plan::{
    GenerateError, MAX_ATTEMPTS, Plan, PlannedTool, SourceDocument, documents_section, domains_section,
};
use crate::llm::{LlmClient, Message, Usage};
use crate::states::Stage;

pub const COMPILER_PROMPT: &str = include_str!("../../config/compiler.md");

#[derive(Debug, Clone, Copy)]
pub struct CompileRequest<'a> {
    pub prompt: &'a str,
    pub documents: &'a [SourceDocument<'a>],
    /// The server's whitelist: the domains handlers may fetch.
    pub whitelist_domains: &'a [String],
    /// The credentials section (`credentials::prompt_section`); empty when there are none.
    pub credentials: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledTool {
    pub name: String,
    /// The body of `async function (args, fetch)`, checked by the engine.
    pub handler: String,
    /// LLM requests it took (1 = compiled at the first answer).
    pub attempts: u32,
}

/// Compiles every tool of `plan`, at most `concurrency` conversations at a time; results are in
/// plan order. The first tool that cannot be compiled ends the whole run (the conversations
/// still in flight are dropped, which cancels their requests).
pub async fn compile_all(
    llm: &dyn LlmClient,
    request: &CompileRequest<'_>,
    plan: &Plan,
    concurrency: usize,
) -> Result<(Vec<CompiledTool>, Usage), GenerateError> {
    let shared = shared_context(request);
    let shared = shared.as_str();
    // The futures are built up front (they do nothing until polled): a lazy `.map(closure)`
    // over borrowed tools trips rustc's higher-ranked lifetime inference when the whole
    // generation future must be `Send`.
    let conversations: Vec<_> = plan
        .tools
        .iter()
        .enumerate()
        .map(|(index, tool)| async move {
            let messages = vec![Message::user(tool_message(shared, tool))];
            (index, tool, converse(llm, messages, &tool.name).await)
        })
        .collect();
    let mut results = futures_util::stream::iter(conversations).buffer_unordered(concurrency.max(1));
    let mut slots: Vec<Option<CompiledTool>> = (0..plan.tools.len()).map(|_| None).collect();
    let mut usage = Usage::default();
    while let Some((index, tool, result)) = results.next().await {
        let (handler, attempts, tool_usage) = result?;
        usage += tool_usage;
        tracing::info!(tool = %tool.name, attempts, "handler compiled");
        if let Some(slot) = slots.get_mut(index) {
            *slot = Some(CompiledTool { name: tool.name.clone(), handler, attempts });
        }
    }
    Ok((slots.into_iter().flatten().collect(), usage))
}

/// One repair round after a failed self-test: the model sees its handler and the failure and
/// answers with a new handler, which is checked (with compile repairs) like the first one.
pub async fn repair(
    llm: &dyn LlmClient,
    request: &CompileRequest<'_>,
    tool: &PlannedTool,
    handler: &str,
    failure: &str,
) -> Result<(String, Usage), GenerateError> {
    let called_with = match &tool.example_args {
        Some(args) => format!("with the arguments {args}"),
        None => "once".to_string(),
    };
    let problem = format!(
        "The handler was run {called_with} and failed:\n\n{}\n\nFind the cause and fix it. Reply with the complete \
         corrected function body in one ```javascript block, nothing else.",
        failure.trim()
    );
    let (handler, attempts, usage) = rewrite(llm, request, tool, handler, problem).await?;
    tracing::info!(tool = %tool.name, attempts, "handler repaired after a failed self-test");
    Ok((handler, usage))
}

/// The tool's conversation with its current handler as the model's answer, followed by
/// `problem`; asks until the reply holds a handler the engine accepts.
async fn rewrite(
    llm: &dyn LlmClient,
    request: &CompileRequest<'_>,
    tool: &PlannedTool,
    handler: &str,
    problem: String,
) -> Result<(String, u32, Usage), GenerateError> {
    let messages = vec![
        Message::user(tool_message(&shared_context(request), tool)),
        Message::assistant(format!("```javascript\n{}\n```", handler.trim_end())),
        Message::user(problem),
    ];
    converse(llm, messages, &tool.name).await
}

/// A tool in service that fails: the model sees its handler and the calls that failed recently
/// (their arguments, secrets redacted, and the errors they returned) and answers with a new
/// handler, checked like any other.
pub async fn repair_in_service(
    llm: &dyn LlmClient,
    request: &CompileRequest<'_>,
    tool: &PlannedTool,
    handler: &str,
    failures: &str,
) -> Result<(String, Usage), GenerateError> {
    let problem = format!(
        "This handler is in service, and these recent calls of it failed (the arguments each was called with, \
         secrets redacted, and what it returned):\n\n{}\n\nFind the cause and fix it, keeping what works. Reply \
         with the complete corrected function body in one ```javascript block, nothing else.",
        failures.trim()
    );
    let (handler, attempts, usage) = rewrite(llm, request, tool, handler, problem).await?;
    tracing::info!(tool = %tool.name, attempts, "handler repaired from its failed calls");
    Ok((handler, usage))
}

/// What every tool's conversation shares: the request, the domains and the documents.
fn shared_context(request: &CompileRequest<'_>) -> String {
    format!(
        "# The user's request\n\n{}\n\n# Allowed domains\n\n{}{}\n\n# Documentation\n\n{}",
        request.prompt.trim(),
        domains_section(request.whitelist_domains),
        if request.credentials.is_empty() { String::new() } else { format!("\n\n{}", request.credentials) },
        documents_section(request.documents)
    )
}

fn tool_message(shared: &str, tool: &PlannedTool) -> String {
    // Serialising a plan entry cannot fail (string keys, JSON values); fall back to the name.
    let entry = serde_json::to_string_pretty(tool).unwrap_or_else(|_| format!("{{\"name\": {:?}}}", tool.name));
    let network = if tool.needs_network {
        "It may call only the endpoints listed in `endpoints_used`."
    } else {
        "It does not use the network: do not call fetch."
    };
    format!(
        "{shared}\n\n# The tool to implement\n\n```json\n{entry}\n```\n\n{network} Reply with the body of \
         `async function (args, fetch)` for the tool `{}` in one ```javascript block.",
        tool.name
    )
}

/// Asks until the reply holds a handler the engine accepts: the first request plus up to two
/// repairs. Returns the handler, the number of requests and their usage.
async fn converse(
    llm: &dyn LlmClient,
    mut messages: Vec<Message>,
    tool: &str,
) -> Result<(String, u32, Usage), GenerateError> {
    let mut usage = Usage::default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reply = llm.complete(COMPILER_PROMPT, &messages).await?;
        usage += reply.usage;
        let problem = match extract::javascript(&reply.text) {
            None => "The reply contains no code.".to_string(),
            Some(code) => match check_code(code.clone()).await {
                Ok(()) => return Ok((code, attempt, usage)),
                Err(problem) => problem,
            },
        };
        tracing::info!(tool, attempt, problem = %problem, "the LLM's handler was refused");
        if attempt >= MAX_ATTEMPTS {
            return Err(GenerateError::Invalid {
                stage: Stage::Compiling,
                message: format!("tool {tool}: {problem}"),
                attempts: attempt,
            });
        }
        messages.push(Message::assistant(reply.text));
        messages.push(Message::user(format!(
            "That handler cannot be used: {problem}\n\nReply with the complete corrected function body in one \
             ```javascript block, nothing else."
        )));
    }
}

/// The engine's verdict on a handler, phrased for the model: the error with its line quoted.
async fn check_code(code: String) -> Result<(), String> {
    if declares_wrapper(&code) {
        return Err("the code declares a function instead of being the function's body. Write only the statements \
                    that go inside `async function (args, fetch) { ... }`; they run as they are, and `return` gives the \
                    result."
            .into());
    }
    if code.len() > crate::toolset::MAX_HANDLER_BYTES {
        return Err(format!(
            "the handler is {} bytes long; the maximum is {} bytes. Write a shorter handler.",
            code.len(),
            crate::toolset::MAX_HANDLER_BYTES
        ));
    }
    // Compiling runs QuickJS synchronously; keep it off the async worker threads.
    let checked = tokio::task::spawn_blocking(move || {
        crate::serve::isolate::check_handler(&code).map_err(|error| {
            let quoted = error
                .line
                .and_then(|line| code.lines().nth((line as usize).saturating_sub(1)).map(|text| (line, text)))
                .map(|(line, text)| format!("\n\n    {line} | {}", text.trim_end()))
                .unwrap_or_default();
            format!("it does not compile: {error}{quoted}")
        })
    })
    .await;
    match checked {
        Ok(result) => result,
        Err(e) => Err(format!("the compile check failed unexpectedly ({e}); please send the handler again")),
    }
}

/// Whether the code starts by declaring the wrapper itself (`async function handler(args,
/// fetch) {`, `async (args) => {`): such code parses, defines a function and returns nothing.
fn declares_wrapper(code: &str) -> bool {
    fn word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
        let rest = text.strip_prefix(word)?;
        let boundary = rest.chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$'));
        boundary.then(|| rest.trim_start())
    }
    let mut text = code.trim_start();
    text = text.strip_prefix('(').map(str::trim_start).unwrap_or(text);
    let after_async = word(text, "async");
    let after_function = word(after_async.unwrap_or(text), "function");
    let rest = match (after_async, after_function) {
        (_, Some(rest)) => {
            // An optional generator star and function name.
            let rest = rest.trim_start_matches('*').trim_start();
            rest.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_' || c == '$').trim_start()
        }
        (Some(rest), None) => rest,
        (None, None) => return false,
    };
    let params = rest.strip_prefix('(').map(str::trim_start).unwrap_or(rest);
    word(params, "args").is_some() || (word(params, "{").is_some() && params.contains("=>"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::generate::endpoint::Endpoint;
    use crate::llm::testing::FakeLlm;

    fn planned(name: &str) -> PlannedTool {
        PlannedTool {
            name: name.into(),
            title: None,
            description: "Fetch an item.".into(),
            input_schema: json!({"type": "object", "properties": {"id": {"type": "integer"}}})
                .as_object()
                .cloned()
                .unwrap(),
            output_schema: None,
            endpoints_used: vec![Endpoint::parse("GET https://api.example.com/items/{id}").unwrap()],
            implementation_notes: "GET it.".into(),
            needs_network: true,
            example_args: Some(json!({"id": 7})),
        }
    }

    const GOOD: &str = "```javascript\nconst res = await fetch(`https://api.example.com/items/${pathSegment(args.id)}`);\n\
                        if (!res.ok) throw new Error(`failed: ${res.status}`);\nreturn await res.json();\n```";

    fn domains() -> Vec<String> {
        vec!["example.com".into()]
    }

    fn request<'a>(domains: &'a [String], documents: &'a [SourceDocument<'a>]) -> CompileRequest<'a> {
        CompileRequest {
            prompt: "Items API tools, newest first",
            documents,
            whitelist_domains: domains,
            credentials: "",
        }
    }

    #[test]
    fn the_compiler_is_told_to_put_path_arguments_through_path_segment() {
        // A handler that concatenates an argument into a path lets `..` reach another resource.
        assert!(COMPILER_PROMPT.contains("Put every argument that goes into a URL path through `pathSegment(value)`"));
        assert!(COMPILER_PROMPT.contains("`pathSegment`."), "it is listed with the globals");
    }

    #[tokio::test]
    async fn compiles_at_the_first_answer() {
        let llm = FakeLlm::scripted([GOOD]);
        let (domains, documents) = (domains(), [SourceDocument { url: "https://example.com/docs", text: "items API" }]);
        let plan = Plan { tools: vec![planned("get_item")] };
        let (tools, usage) = compile_all(&llm, &request(&domains, &documents), &plan, 4).await.unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].name, "get_item");
        assert_eq!(tools[0].attempts, 1);
        assert!(
            tools[0].handler.starts_with("const res = await fetch(")
                && tools[0].handler.ends_with("return await res.json();")
        );
        assert_eq!(usage.requests, 1);
        let call = &llm.calls()[0];
        assert_eq!(call.system, COMPILER_PROMPT);
        let user = &call.messages[0].content;
        for expected in [
            "Items API tools, newest first",
            "- example.com",
            "<document url=\"https://example.com/docs\">",
            "\"name\": \"get_item\"",
            "GET https://api.example.com/items/{id}",
        ] {
            assert!(user.contains(expected), "missing {expected:?} in {user}");
        }
        // The shared part comes first, the tool last (prefix caching).
        assert!(user.find("items API").unwrap() < user.find("\"name\": \"get_item\"").unwrap());
    }

    #[tokio::test]
    async fn a_syntax_error_is_repaired_with_its_line() {
        let broken = "```js\nconst a = 1;\nconst b = (a +;\nreturn a;\n```";
        let llm = FakeLlm::scripted([broken, GOOD]);
        let domains = domains();
        let plan = Plan { tools: vec![planned("get_item")] };
        let (tools, usage) = compile_all(&llm, &request(&domains, &[]), &plan, 1).await.unwrap();
        assert_eq!(tools[0].attempts, 2);
        assert_eq!(usage.requests, 2);
        let conversation = &llm.calls()[1].messages;
        assert_eq!(conversation[1], Message::assistant(broken));
        let repair = &conversation[2].content;
        assert!(repair.contains("line 2"), "{repair}");
        assert!(repair.contains("2 | const b = (a +;"), "{repair}");
    }

    #[tokio::test]
    async fn require_is_refused_until_attempts_run_out() {
        let with_require = "```js\nconst fs = require('fs');\nreturn fs.readFileSync('/etc/passwd', 'utf8');\n```";
        let llm = FakeLlm::scripted([with_require, with_require, with_require]);
        let domains = domains();
        let plan = Plan { tools: vec![planned("read_file")] };
        let error = compile_all(&llm, &request(&domains, &[]), &plan, 1).await.unwrap_err();
        match error {
            GenerateError::Invalid { stage, message, attempts } => {
                assert_eq!((stage, attempts), (Stage::Compiling, 3));
                assert!(message.starts_with("tool read_file: ") && message.contains("require"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(llm.calls()[1].messages[2].content.contains("require"));
    }

    #[tokio::test]
    async fn missing_code_and_wrappers_are_sent_back() {
        let wrapper = "```js\nasync function handler(args, fetch) {\n  return 1;\n}\n```";
        let llm = FakeLlm::scripted(["", wrapper, "```js\nreturn 1;\n```"]);
        let domains = domains();
        let plan = Plan { tools: vec![planned("one")] };
        let (tools, _) = compile_all(&llm, &request(&domains, &[]), &plan, 1).await.unwrap();
        assert_eq!((tools[0].handler.as_str(), tools[0].attempts), ("return 1;", 3));
        let calls = llm.calls();
        assert!(calls[1].messages[2].content.contains("contains no code"));
        assert!(calls[2].messages[4].content.contains("declares a function"));
    }

    #[tokio::test]
    async fn concurrency_is_bounded_and_order_kept() {
        let llm = FakeLlm::new(|_, messages| {
            let user = &messages[0].content;
            let name =
                (0..8).map(|i| format!("tool_{i}")).find(|n| user.contains(&format!("for the tool `{n}`"))).unwrap();
            Ok(format!("```js\nreturn {name:?};\n```"))
        })
        .with_delay(Duration::from_millis(40));
        let domains = domains();
        let plan = Plan { tools: (0..8).map(|i| planned(&format!("tool_{i}"))).collect() };
        let (tools, usage) = compile_all(&llm, &request(&domains, &[]), &plan, 3).await.unwrap();
        assert_eq!(llm.max_in_flight(), 3);
        assert_eq!(usage.requests, 8);
        let names: Vec<_> = tools.iter().map(|t| t.name.clone()).collect();
        assert_eq!(names, (0..8).map(|i| format!("tool_{i}")).collect::<Vec<_>>());
        for tool in &tools {
            assert_eq!(tool.handler, format!("return {:?};", tool.name));
        }
        // Zero is taken as one, not as "never start".
        let (tools, _) =
            compile_all(&llm, &request(&domains, &[]), &Plan { tools: vec![planned("tool_1")] }, 0).await.unwrap();
        assert_eq!(tools.len(), 1);
    }

    #[tokio::test]
    async fn repair_after_a_failed_self_test() {
        let llm = FakeLlm::scripted(["```js\nreturn args.id;\n```"]);
        let domains = domains();
        let (handler, usage) = repair(
            &llm,
            &request(&domains, &[]),
            &planned("get_item"),
            "return args.idd.x;",
            "TypeError: cannot read property 'x' of undefined",
        )
        .await
        .unwrap();
        assert_eq!(handler, "return args.id;");
        assert_eq!(usage.requests, 1);
        let conversation = &llm.calls()[0].messages;
        assert_eq!(conversation.len(), 3);
        assert!(conversation[1].content.contains("return args.idd.x;"));
        assert!(
            conversation[2].content.contains("{\"id\":7}")
                && conversation[2].content.contains("cannot read property 'x'")
        );
    }

    #[test]
    fn wrapper_detection() {
        let cases = [
            ("async function handler(args, fetch) { return 1; }", true),
            ("async function (args) { return 1; }", true),
            ("function main(args, fetch) {}", true),
            ("(async (args, fetch) => { return 1; })", true),
            ("async args => 1", true),
            ("async ({ id }, fetch) => { return id; }", true),
            ("async function helper(x) { return x; }\nreturn helper(args.a);", false),
            ("(args.items || []).map(x => x)", false),
            ("const asyncResult = await fetch(args.url);", false),
            ("return 1;", false),
        ];
        for (code, expected) in cases {
            assert_eq!(declares_wrapper(code), expected, "{code}");
        }
    }
}
