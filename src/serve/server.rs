//! A mounted server, built: [`Server`] is what a call needs (its tools, egress policy,
//! per-user credentials, quota, code-mode settings and discovery data), and
//! [`Server::call`] is the one path every call of a listed or standard tool takes, from
//! MCP, the admin API and scripts alike.
//!
//! One server goes by three names on the serving side, one per job: the registry's lazy entry
//! is a `registry::Mount` (what routing and authentication need, built on first use), the
//! built server is a [`Server`], and its MCP endpoint is a `mount::McpEndpoint`, which holds
//! the `Arc<Server>` it answers for.
//!
//! Code mode finds the other servers a script may call through [`ServerLookup`], which the
//! registry implements; this module knows neither of them.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use rmcp::model::Tool;
use serde_json::Value;

use crate::catalog::now_millis;
use crate::serve::call::{AnsweredCall, CallError, CallOutput, CallableTool, Caller, Origin};
use crate::serve::discovery::{Discovery, STANDARD_TOOLS, StandardTool};
use crate::serve::egress::ServerPolicy;
use crate::serve::isolate::Outcome;
use crate::serve::per_user::PerUserCredentials;
use crate::serve::quota::{CallerKey, ServerQuota};
use crate::telemetry::metrics::ToolSeries;
use crate::toolset::{CodeModeSettings, ServerId};

/// A mounted server, built: everything a call needs.
pub struct Server {
    pub id: ServerId,
    pub name: String,
    /// What the server is for, in the operator's words: MCP `instructions`.
    pub description: Option<String>,
    pub generation_id: i64,
    pub policy: Arc<ServerPolicy>,
    /// Its tools as calls run them: handlers and compiled validators.
    pub tools: Vec<CallableTool>,
    /// Its tools as `tools/list` shows them (without `code_execution`), in order: the MCP
    /// definitions, which hold the descriptions and schemas the callable tools do not keep.
    pub listing: Vec<Tool>,
    /// Its per-user credentials, whose values each caller brings (`None`: it has none).
    pub per_user: Option<PerUserCredentials>,
    /// Its traffic limits at the door (`None`: every one is off).
    pub quota: Option<ServerQuota>,
    /// Its code-mode settings (`None`: off).
    pub code_mode: Option<CodeModeSettings>,
    /// The series its `code_execution` runs are counted under, when code mode is on.
    pub code_series: Option<ToolSeries>,
    /// In discovery mode, the operations its standard tools reach (`None`: it lists them all).
    pub discovery: Option<Discovery>,
}

/// Where code mode finds the servers a script may call (the registry, held weakly).
pub trait ServerLookup: Send + Sync {
    /// The generation `id` serves, if it is mounted, without building it.
    fn served_generation(&self, id: &ServerId) -> Option<i64>;

    /// The built server `id`, built first if this is its first use; `None` if it is not
    /// mounted or cannot be served.
    fn find_server<'a>(&'a self, id: &'a ServerId) -> BoxFuture<'a, Option<Arc<Server>>>;
}

impl Server {
    pub fn tool(&self, name: &str) -> Option<&CallableTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The names a call may give: its tools, and in discovery mode the standard tools.
    pub fn tool_names(&self) -> Vec<String> {
        let standard = if self.discovery.is_some() { &STANDARD_TOOLS[..] } else { &[] };
        self.tools.iter().map(|t| t.name.clone()).chain(standard.iter().map(|name| name.to_string())).collect()
    }

    pub async fn call(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: Value,
        origin: impl Into<Origin>,
    ) -> Result<CallOutput, CallError> {
        let listed = self.tool(tool);
        let standard = match listed {
            Some(_) => None,
            None => self.discovery.as_ref().zip(StandardTool::named(tool)),
        };
        if listed.is_none() && standard.is_none() {
            return Err(CallError::UnknownTool(tool.to_string()));
        }
        let origin = origin.into();
        // Held until the call ends: the caller's place among their running calls.
        let _admitted = match &self.quota {
            None => None,
            Some(quota) => {
                let who = origin.caller.clone().unwrap_or_else(|| match &origin.grant {
                    Some(grant) => CallerKey::subject(&grant.claims.sub),
                    None => CallerKey::unknown(),
                });
                match quota.admit(&who, tool) {
                    Ok(admitted) => Some(admitted),
                    Err(refusal) => {
                        let series = match (listed, standard) {
                            (Some(listed), _) => Some(listed.series()),
                            (None, Some((discovery, tool))) => discovery.series(tool),
                            (None, None) => None,
                        };
                        if let Some(series) = series {
                            caller.metrics().record_quota_refusal(series, refusal.limit);
                        }
                        return Err(CallError::Limited(refusal));
                    }
                }
            }
        };
        let (target, arguments) = match (listed, standard) {
            (Some(listed), _) => (Target::Listed(listed), arguments),
            (None, Some((discovery, StandardTool::Call))) => {
                let (operation, arguments) = discovery.target(arguments).await?;
                (Target::Operation(operation), arguments)
            }
            (None, Some((discovery, answered))) => {
                // Searching and describing read what the version stores: read-only by the scope
                // rule, and no isolate.
                if let Some(grant) = &origin.grant
                    && let Err(missing) = grant.check_tool(tool, true)
                {
                    caller.metrics().record_oauth_refusal("insufficient_scope");
                    return Err(CallError::Forbidden(missing));
                }
                let (started_at, started) = (now_millis(), Instant::now());
                // Logged like a tool call that ran: an answer, or an operation that is not there
                // or cannot be read; arguments refused before anything ran are not, as for any tool.
                let answer = match discovery.answer(answered, &arguments).await {
                    Err(refused @ CallError::InvalidArguments(_)) => return Err(refused),
                    answer => answer,
                };
                let execution_id = match discovery.series(answered) {
                    Some(series) => {
                        let error = answer.as_ref().err().map(ToString::to_string);
                        let call = AnsweredCall {
                            server: &self.id,
                            generation_id: self.generation_id,
                            tool,
                            series,
                            started_at,
                            started,
                            error,
                        };
                        caller.record_answered(call, origin)
                    }
                    None => origin.execution_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
                };
                return answer.map(|result| CallOutput { execution_id, outcome: Outcome::Ok, result });
            }
            (None, None) => return Err(CallError::UnknownTool(tool.to_string())),
        };
        let policy = match &self.per_user {
            None => self.policy.clone(),
            Some(per_user) => {
                let subject = origin.grant.as_ref().map(|grant| grant.claims.sub.as_str());
                per_user.policy_for(&self.id, &self.policy, subject).await.map_err(CallError::NotConnected)?
            }
        };
        let tool = match &target {
            Target::Listed(listed) => *listed,
            Target::Operation(operation) => operation.as_ref(),
        };
        caller.call(&self.id, self.generation_id, &policy, tool, arguments, origin).await
    }
}

/// What a call runs: a listed tool, or an operation `call_operation` named.
enum Target<'a> {
    Listed(&'a CallableTool),
    Operation(Arc<CallableTool>),
}
