//! `POST /admin/servers`: the three kinds of registration and the answer to one.
//!
//! The daemon tells a prompt, an API description and a toolset apart by which fields the body
//! has (`api::register`); each kind's struct denies unknown fields, so a typo is an error that
//! names the field rather than a registration of another kind.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

use super::credentials::CredentialRequest;
use super::generations::GenerationStarted;
use crate::states::Status;
use crate::toolset::{AuthSetting, CodeModeSettings, OperationFilter, ServerId, ToolSpec};

/// A registration: a prompt to generate tools from, an API description to derive them from,
/// or a ready toolset. The daemon tells them apart by which of `tools`, `openapi` /
/// `openapi_spec` and `prompt` the body has.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Registration {
    Prompt(PromptRegistration),
    OpenApi(OpenApiRegistration),
    Toolset(ToolsetRegistration),
}

/// Derive a server's tools from an OpenAPI 3.0/3.1 or Swagger 2.0 description, in the
/// background (202): one tool per selected operation, each calling the API as the description
/// says. Works without an LLM; with one, a `prompt` lets it choose the operations and rewrite
/// names and descriptions (never schemas or requests).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApiRegistration {
    /// The server id; derived from `name` (or the description's title) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 8192)]
    pub description: Option<String>,
    /// The description's URL (JSON or YAML; GitHub pages are read raw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openapi: Option<String>,
    /// The description itself: a JSON object, or JSON or YAML text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub openapi_spec: Option<Value>,
    /// Which operations become tools (default: all; past `[generation] max_tools`, see
    /// `discovery`).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "OperationFilter::is_empty")]
    pub operations: OperationFilter,
    /// The API's base URL, replacing the description's `servers` (or `host`/`basePath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Discovery mode: list at most `[generation] max_tools` minus 3 operations as tools, plus
    /// `search_operations`, `describe_operation` and `call_operation`, which reach every
    /// operation. Absent: on when more operations can become tools than `max_tools`; `true` or
    /// `false` forces it (off: the first `max_tools` operations become tools, the rest are left
    /// out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<bool>,
    /// What the tools are for; with an LLM configured it chooses the operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 32768)]
    pub prompt: Option<String>,
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub allow_domains: Vec<String>,
    /// Stop after deriving: store the plan, mount nothing (status `planned`).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// Credentials by name; name one after a security scheme of the description to satisfy it.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing)]
    pub credentials: BTreeMap<String, CredentialRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: Option<String>,
    /// Who may use the mount when it has no `access_token`: `{"mode": "open"}`, or `{"mode":
    /// "oauth", "scopes": [...]}` (needs `[auth.oauth]`). Absent: `[auth.oauth] required` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSetting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
    /// Whether each new version waits for an operator's approval; absent: `[generation]
    /// require_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
}

/// Generate a server's tools from a prompt, in the background (202).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRegistration {
    /// The server id; derived from `name` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub id: Option<String>,
    /// A display name; the id when absent. MCP hosts get it as the server's `title`. Not blank,
    /// without control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*\S[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<String>,
    /// What the server is for and how to use its tools; MCP hosts get it as the server's
    /// `instructions` and may give it to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 8192)]
    pub description: Option<String>,
    /// What the tools should do, with links to the API's documentation.
    #[schema(min_length = 1, max_length = 32768, pattern = r"\S")]
    pub prompt: String,
    /// Domains the handlers may fetch besides those the prompt and its documents name.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub allow_domains: Vec<String>,
    /// Stop after planning: store the plan, mount nothing (status `planned`).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// Credentials for the upstream API, by name (see `PUT .../credentials/{name}`). Their
    /// domains are added to `allow_domains`. Never returned, logged or exported.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing)]
    pub credentials: BTreeMap<String, CredentialRequest>,
    /// The bearer token MCP clients must present on the server's mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: Option<String>,
    /// Who may use the mount when it has no `access_token`: `{"mode": "open"}`, or `{"mode":
    /// "oauth", "scopes": [...]}` (needs `[auth.oauth]`). Absent: `[auth.oauth] required` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSetting>,
    /// Code mode: the `code_execution` tool (`docs/code-mode.md`). Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
    /// Whether each new version waits for an operator's approval before it is served
    /// (`docs/versions.md`); absent: `[generation] require_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
}

/// Register hand-written tools, ready at once without an LLM (201). `GET .../export` answers
/// with this body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetRegistration {
    /// The server id; derived from `name` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub id: Option<String>,
    /// A display name; the id when absent. MCP hosts get it as the server's `title`. Not blank,
    /// without control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*\S[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<String>,
    /// What the server is for and how to use its tools; MCP hosts get it as the server's
    /// `instructions` and may give it to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 8192)]
    pub description: Option<String>,
    /// The domains the handlers may fetch.
    #[serde(default, deserialize_with = "null_as_default")]
    pub allow_domains: Vec<String>,
    pub tools: Vec<ToolSpec>,
    /// Credentials for the upstream API, by name (see `PUT .../credentials/{name}`); their
    /// domains must be in `allow_domains`. Never returned, logged or exported.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing)]
    pub credentials: BTreeMap<String, CredentialRequest>,
    /// The bearer token MCP clients must present on the server's mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub access_token: Option<String>,
    /// Who may use the mount when it has no `access_token`: `{"mode": "open"}`, or `{"mode":
    /// "oauth", "scopes": [...]}` (needs `[auth.oauth]`). Absent: `[auth.oauth] required` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSetting>,
    /// Code mode: the `code_execution` tool (`docs/code-mode.md`). Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_mode: Option<CodeModeSettings>,
}

/// The answer to a registration: 201 for a toolset, 202 for a prompt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Registered {
    Toolset(ToolsetRegistered),
    Prompt(GenerationStarted),
}

impl IntoResponse for Registered {
    fn into_response(self) -> Response {
        match self {
            Registered::Toolset(body) => (StatusCode::CREATED, Json(body)).into_response(),
            Registered::Prompt(body) => (StatusCode::ACCEPTED, Json(body)).into_response(),
        }
    }
}

/// A toolset registered and mounted; its tools are served at once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ToolsetRegistered {
    pub id: ServerId,
    pub name: String,
    /// Always `ready`.
    pub status: Status,
    pub mcp_path: String,
    /// The tool names.
    pub tools: Vec<String>,
    /// Problems that do not stop the tools from running but probably are mistakes: a handler
    /// without `return` (naming the tool), a credential the handlers may fetch hosts beyond
    /// (naming the credential).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `null` as the default, as if the field were absent.
fn null_as_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(deserializer: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn is_false(value: &bool) -> bool {
    !value
}
