//! With an LLM and a prompt: choosing which operations of a description become tools.
//!
//! The LLM sees a compact index of the operations (method, path, operationId, tags, summary; a
//! line each, not the description itself) and answers with the operations it chose plus better
//! names and descriptions. It never sees or changes schemas or request code: the choice becomes
//! an `operations` filter and the renames are applied to the derived tools.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use super::spec::Operation;
use crate::generate::extract;
use crate::llm::{LlmClient, LlmError, Message, Usage};

pub const SELECTOR_PROMPT: &str = include_str!("../../../config/selector.md");
/// Replies the LLM gets to correct its choice before the generation fails.
const MAX_ATTEMPTS: u32 = 3;
/// Characters of an operation's summary shown in the index.
const SUMMARY_CHARS: usize = 100;

/// One operation the LLM chose, with the name and description it gave (if any).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    /// `METHOD /path`, as in the index.
    pub operation: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// `METHOD /path`: how an operation is named in the index and in choices.
pub fn key(operation: &Operation) -> String {
    format!("{} {}", operation.method, operation.path)
}

/// The index the LLM chooses from: a line per operation.
pub fn index(operations: &[&Operation]) -> String {
    let mut text = String::new();
    for op in operations {
        let summary = op.summary.as_deref().or(op.description.as_deref()).unwrap_or("");
        let summary: String =
            summary.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(SUMMARY_CHARS).collect();
        let deprecated = if op.deprecated { " (deprecated)" } else { "" };
        text.push_str(&format!(
            "{} | {} | {} | {summary}{deprecated}\n",
            key(op),
            op.operation_id.as_deref().unwrap_or("-"),
            op.tags.join(","),
        ));
    }
    text
}

/// Why the LLM did not choose operations.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// `problems` is the list last sent back to the model, one per line.
    #[error("the LLM's choice of operations was still invalid after {attempts} attempts:\n{problems}")]
    StillInvalid { attempts: u32, problems: String },
}

/// Asks the LLM to choose among `operations` for `prompt`; at most `max_tools`.
pub async fn select(
    llm: &dyn LlmClient,
    prompt: &str,
    title: Option<&str>,
    operations: &[&Operation],
    max_tools: usize,
) -> Result<(Vec<Choice>, Usage), SelectError> {
    let known: HashSet<String> = operations.iter().map(|op| key(op)).collect();
    let first = format!(
        "# Request\n\n{}\n\n# API\n\n{} ({} operations; choose at most {max_tools})\n\n# Operations\n\n{}\nReply with \
         the JSON object.",
        prompt.trim(),
        title.unwrap_or("untitled"),
        operations.len(),
        index(operations),
    );
    let mut messages = vec![Message::user(first)];
    let mut usage = Usage::default();
    for attempt in 1..=MAX_ATTEMPTS {
        let reply = llm.complete(SELECTOR_PROMPT, &messages).await?;
        usage += reply.usage;
        let problems = match parse(&reply.text, &known, max_tools) {
            Ok(choices) => return Ok((choices, usage)),
            Err(problems) => problems,
        };
        tracing::info!(attempt, problems = %problems, "the LLM's choice of operations is invalid");
        if attempt == MAX_ATTEMPTS {
            return Err(SelectError::StillInvalid { attempts: attempt, problems });
        }
        messages.push(Message::assistant(reply.text));
        messages.push(Message::user(format!(
            "Your reply has these problems:\n{problems}\n\nReply again with the whole JSON object, corrected."
        )));
    }
    unreachable!("the loop returns on its last attempt")
}

/// The choices in a reply, or the problems to send back (as [`select`] does, in a repair turn or
/// in [`SelectError::StillInvalid`]).
fn parse(reply: &str, known: &HashSet<String>, max_tools: usize) -> Result<Vec<Choice>, String> {
    let value = extract::json_value(reply).map_err(|e| e.to_string())?;
    let list = match value {
        Value::Object(mut object) => match object.remove("operations") {
            Some(Value::Array(list)) => list,
            _ => return Err("- the reply must be {\"operations\": [...]}".into()),
        },
        Value::Array(list) => list,
        _ => return Err("- the reply must be {\"operations\": [...]}".into()),
    };
    let mut problems = Vec::new();
    let mut choices: Vec<Choice> = Vec::new();
    let mut names = HashSet::new();
    for (index, item) in list.into_iter().enumerate() {
        let choice: Choice = match serde_json::from_value(item) {
            Ok(choice) => choice,
            Err(e) => {
                problems.push(format!("- operations[{index}]: {e}"));
                continue;
            }
        };
        let operation = choice.operation.split_whitespace().collect::<Vec<_>>().join(" ");
        let operation = match operation.split_once(' ') {
            Some((method, path)) => format!("{} {path}", method.to_ascii_uppercase()),
            None => operation,
        };
        if !known.contains(&operation) {
            problems.push(format!("- operations[{index}]: {:?} is not in the index", choice.operation));
            continue;
        }
        if let Some(name) = &choice.name
            && (crate::toolset::check_tool_name(name).is_err() || !names.insert(name.clone()))
        {
            problems
                .push(format!("- operations[{index}].name {name:?} must match ^[a-z][a-z0-9_]{{0,63}}$ and be unique"));
            continue;
        }
        if !choices.iter().any(|c| c.operation == operation) {
            choices.push(Choice { operation, ..choice });
        }
    }
    if choices.is_empty() && problems.is_empty() {
        problems.push("- choose at least one operation".into());
    }
    if choices.len() > max_tools {
        problems.push(format!("- {} operations chosen; at most {max_tools}", choices.len()));
    }
    if problems.is_empty() { Ok(choices) } else { Err(problems.join("\n")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_checked_against_the_index() {
        let known: HashSet<String> = ["GET /pets".to_string(), "POST /pets".to_string()].into();
        let ok = parse(
            r#"Here: {"operations": [{"operation": "get  /pets", "name": "list_pets"}, {"operation": "POST /pets", "description": "Adds a pet."}]}"#,
            &known,
            5,
        )
        .unwrap();
        assert_eq!(ok[0], Choice { operation: "GET /pets".into(), name: Some("list_pets".into()), description: None });
        assert_eq!(ok[1].description.as_deref(), Some("Adds a pet."));
        let problems = parse(
            r#"{"operations": [{"operation": "GET /cats"}, {"operation": "GET /pets", "name": "Bad-Name"}]}"#,
            &known,
            5,
        )
        .unwrap_err();
        assert!(problems.contains("\"GET /cats\" is not in the index") && problems.contains("Bad-Name"), "{problems}");
        assert!(
            parse(r#"{"operations": [{"operation": "GET /pets"}, {"operation": "POST /pets"}]}"#, &known, 1).is_err()
        );
        assert!(parse(r#"{"tools": []}"#, &known, 1).unwrap_err().contains("{\"operations\""));
    }

    #[test]
    fn a_choice_still_invalid_reads_as_before() {
        let error = SelectError::StillInvalid { attempts: 3, problems: "- choose at least one operation".into() };
        assert_eq!(
            error.to_string(),
            "the LLM's choice of operations was still invalid after 3 attempts:\n- choose at least one operation"
        );
    }
}
