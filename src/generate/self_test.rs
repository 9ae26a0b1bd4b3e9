//! The testing stage: each compiled read-only tool is called once in a real isolate with the
//! plan's example arguments, under the generation's whitelist; a failure gets one repair round
//! from the LLM. A tool is kept either way, with the outcome recorded for the operator, because
//! an upstream that is down at generation time says nothing about the handler.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::generate::compile::{self, CompileRequest};
use crate::generate::plan::PlannedTool;
use crate::llm::{LlmClient, Usage};
use crate::serve::call::Caller;
use crate::serve::egress::{Egress, ServerPolicy};
use crate::serve::isolate::{Invocation, Outcome, PoolError, Program};

/// Self-test calls share one admission tenant (no server id can contain parentheses), so a
/// burst of generations cannot crowd out the servers being called.
const SELF_TEST_TENANT: &str = "(self-test)";

/// How a tool's self-test went, as stored in the tool's extras (`{"status": "passed", …}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum SelfTestOutcome {
    /// The tool was not called: it writes, the plan gave no example, or self-tests are off.
    Skipped { reason: String },
    /// The call succeeded, at the first attempt or after a repair (`first_error` says why the
    /// first one failed).
    Passed {
        arguments: Value,
        attempts: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        first_error: Option<String>,
    },
    /// The call failed, and the repair failed too or could not be made.
    Failed {
        arguments: Value,
        attempts: u32,
        error: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        first_error: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        repair_error: Option<String>,
    },
}

impl SelfTestOutcome {
    /// The outcome as the catalog stores it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a self-test outcome serialises to JSON")
    }
}

/// Runs self-tests for one generation.
pub struct SelfTest<'a> {
    pub caller: &'a Caller,
    pub egress: &'a Arc<Egress>,
    pub policy: Arc<ServerPolicy>,
    pub llm: &'a dyn LlmClient,
    pub request: &'a CompileRequest<'a>,
}

impl SelfTest<'_> {
    /// Tests `handler` and returns the handler to keep (the repaired one if a repair was made),
    /// the outcome as stored in the tool's extras, and the LLM usage of any repair.
    pub async fn run(&self, planned: &PlannedTool, handler: String) -> (String, SelfTestOutcome, Usage) {
        let Some(arguments) = planned.example_args.clone().filter(|_| planned.is_read_only()) else {
            let reason = if planned.is_read_only() { "the plan gave no example arguments" } else { "the tool writes" };
            return (handler, SelfTestOutcome::Skipped { reason: reason.to_string() }, Usage::default());
        };
        let first = self.try_tool(&handler, &arguments).await;
        let Err(failure) = first.map_err(|failure| failure.to_string()) else {
            let outcome = SelfTestOutcome::Passed { arguments, attempts: 1, first_error: None };
            return (handler, outcome, Usage::default());
        };
        match compile::repair(self.llm, self.request, planned, &handler, &failure).await {
            Ok((repaired, usage)) => {
                let outcome = match self.try_tool(&repaired, &arguments).await {
                    Ok(()) => SelfTestOutcome::Passed { arguments, attempts: 2, first_error: Some(failure) },
                    Err(error) => SelfTestOutcome::Failed {
                        arguments,
                        attempts: 2,
                        error: error.to_string(),
                        first_error: Some(failure),
                        repair_error: None,
                    },
                };
                (repaired, outcome, usage)
            }
            Err(error) => (
                handler,
                SelfTestOutcome::Failed {
                    arguments,
                    attempts: 1,
                    error: failure,
                    first_error: None,
                    repair_error: Some(error.to_string()),
                },
                Usage::default(),
            ),
        }
    }

    async fn try_tool(&self, handler: &str, arguments: &Value) -> Result<(), SelfTestFailure> {
        try_handler(self.caller, self.egress, &self.policy, handler, arguments).await
    }
}

/// Why a self-test call failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfTestFailure {
    /// The sandbox pool did not run the call (shutting down, overloaded).
    #[error("the self-test call could not run: {0}")]
    NotRun(PoolError),
    /// The handler threw, or returned a tool error: its message, as the handler wrote it.
    #[error("{0}")]
    Handler(String),
}

/// One self-test call of a read-only tool under `policy`; the error is what the handler threw
/// or returned as a tool error.
pub async fn try_handler(
    caller: &Caller,
    egress: &Arc<Egress>,
    policy: &Arc<ServerPolicy>,
    handler: &str,
    arguments: &Value,
) -> Result<(), SelfTestFailure> {
    let invocation = Invocation {
        handler: Arc::from(handler),
        arguments: arguments.clone(),
        limits: caller.sandbox_limits(),
        // Only read-only tools are self-tested, and they are served with the read-only rule.
        fetch: Arc::new(egress.for_call(policy.clone(), true)),
        program: Program::Handler,
    };
    let completion = caller.pool().run(SELF_TEST_TENANT, invocation).await.map_err(SelfTestFailure::NotRun)?;
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
    Err(SelfTestFailure::Handler(completion.error.unwrap_or(text)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn failures_read_as_before() {
        assert_eq!(
            SelfTestFailure::NotRun(PoolError::Closed).to_string(),
            "the self-test call could not run: the isolate pool is closed"
        );
        assert_eq!(
            SelfTestFailure::Handler("HTTP 404 from api.example.test".into()).to_string(),
            "HTTP 404 from api.example.test"
        );
    }

    #[test]
    fn outcomes_keep_their_stored_shape() {
        let arguments = json!({"city": "Paris"});
        let cases = [
            (
                SelfTestOutcome::Skipped { reason: "the tool writes".into() },
                json!({"status": "skipped", "reason": "the tool writes"}),
            ),
            (
                SelfTestOutcome::Passed { arguments: arguments.clone(), attempts: 1, first_error: None },
                json!({"status": "passed", "arguments": arguments, "attempts": 1}),
            ),
            (
                SelfTestOutcome::Passed { arguments: arguments.clone(), attempts: 2, first_error: Some("404".into()) },
                json!({"status": "passed", "arguments": arguments, "attempts": 2, "first_error": "404"}),
            ),
            (
                SelfTestOutcome::Failed {
                    arguments: arguments.clone(),
                    attempts: 2,
                    error: "500".into(),
                    first_error: Some("404".into()),
                    repair_error: None,
                },
                json!({"status": "failed", "arguments": arguments, "attempts": 2, "error": "500", "first_error": "404"}),
            ),
            (
                SelfTestOutcome::Failed {
                    arguments: arguments.clone(),
                    attempts: 1,
                    error: "404".into(),
                    first_error: None,
                    repair_error: Some("no LLM".into()),
                },
                json!({"status": "failed", "arguments": arguments, "attempts": 1, "error": "404", "repair_error": "no LLM"}),
            ),
        ];
        for (outcome, stored) in cases {
            // Compared as text too: the order of the keys is part of what the catalog stores.
            assert_eq!(outcome.to_json().to_string(), stored.to_string());
        }
    }
}
