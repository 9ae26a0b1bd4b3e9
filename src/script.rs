//! The `code_execution` tool's wire format (`docs/code-mode.md`): the request a script run
//! takes (`{code, input?, options?}`) and the result it gives (`{ok, value | error, calls}`).
//!
//! Serving runs scripts (`serve::code_mode`), the admin API takes and answers them and describes
//! them in the OpenAPI document (`api::model` re-exports these types), and the command-line
//! client sends them; all three use these types, so none of them needs another's module. This is
//! a leaf: it names no other part of the daemon but the shared `states`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::states::text_enum;

/// The tool's arguments: `{code, input?, options?}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptRequest {
    /// JavaScript: the body of an async function; `return` the result.
    pub code: String,
    /// Any JSON value; the script reads it as `input`.
    #[serde(default)]
    pub input: Value,
    #[serde(default)]
    pub options: ScriptOptions,
}

/// Per-request limits: they may only lower what the daemon and the server allow.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// 0: no lower limit than the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    /// The servers this run may call, among those allowed; `[]` allows none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_servers: Option<Vec<String>>,
}

text_enum! {
    /// Why a script or one of its tool calls failed: `error.code` in results.
    pub enum ErrorKind ("code-mode error code") {
        /// The request is not `{code, input?, options?}`.
        InvalidRequest = "INVALID_REQUEST",
        /// Code mode is off for this server (or daemon-wide).
        CodeModeDisabled = "CODE_MODE_DISABLED",
        /// The script does not compile; nothing ran.
        SyntaxError = "SYNTAX_ERROR",
        /// The script threw (or rejected) and nothing caught it.
        RuntimeError = "RUNTIME_ERROR",
        /// The script's result cannot be sent as JSON (a function, a cycle, a BigInt).
        NotSerializable = "NOT_SERIALIZABLE",
        /// The script (or a tool call) ran past its wall-clock limit.
        Timeout = "TIMEOUT",
        /// A resource limit: CPU time, memory, stack, result size.
        Limit = "LIMIT",
        /// Too many scripts or calls are running; retry shortly.
        Busy = "BUSY",
        ShuttingDown = "SHUTTING_DOWN",
        /// `call_tool`: no such server or tool.
        NotFound = "NOT_FOUND",
        /// `call_tool`: the server is not among this script's allowed servers.
        ServerNotAllowed = "SERVER_NOT_ALLOWED",
        /// `call_tool`: the script has made `max_tool_calls` calls.
        MaxToolCalls = "MAX_TOOL_CALLS",
        /// `call_tool`: the caller's OAuth token lacks the scope the tool needs.
        InsufficientScope = "INSUFFICIENT_SCOPE",
        /// `call_tool`: the tool's server sends each caller's own credential, which the caller has
        /// not connected yet; the message carries the link to connect it.
        NotConnected = "NOT_CONNECTED",
        /// `call_tool`: the arguments do not match the tool's input schema.
        InvalidArguments = "INVALID_ARGUMENTS",
        /// `call_tool`: the tool ran and returned an error.
        ToolError = "TOOL_ERROR",
        /// `call_tool`: the tool results handed to this script exceed `max_tool_result_bytes`.
        ResultTooLarge = "RESULT_TOO_LARGE",
        /// A tool call still running when its script ended; it was stopped.
        Cancelled = "CANCELLED",
        /// A failure of the daemon, not of the script.
        Internal = "INTERNAL",
    }
}

/// `{ok, value | error, calls}`: what a run returns, as `structuredContent` and to the admin API.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScriptResult {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptError>,
    /// Every tool call the script made, in the order they started.
    pub calls: Vec<ToolCallTrace>,
    /// What the script logged with `console`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub console: String,
    /// The run's id in the call log (its tool calls name it as their parent).
    pub execution_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScriptError {
    #[schema(value_type = String)]
    pub code: ErrorKind,
    pub message: String,
    /// The script's stack at the throw, lines counted within the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// The script line that failed, 1-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// One tool call a script made.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCallTrace {
    pub server: String,
    pub tool: String,
    pub ok: bool,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub error_code: Option<ErrorKind>,
    pub duration_ms: f64,
    /// The call's own call-log entry; absent for calls refused before they ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
}

impl ScriptResult {
    /// A failed run: `ok: false`, this error, no value and no tool calls yet.
    pub fn failed(execution_id: String, code: ErrorKind, message: impl Into<String>) -> ScriptResult {
        ScriptResult {
            ok: false,
            value: None,
            error: Some(ScriptError { code, message: message.into(), stack: None, line: None }),
            calls: Vec::new(),
            console: String::new(),
            execution_id,
        }
    }
}
