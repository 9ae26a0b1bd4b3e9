//! `POST /admin/servers`: registration of a prompt (tools generated in the background) or of a
//! ready toolset, one function each behind a dispatcher that tells them apart.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::access_token;
use crate::api::code_mode::check_code_mode;
use crate::api::credentials::{check_per_user_door, reach_warnings, seal};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::{Kind, llm_not_configured};
use crate::api::model::{
    CredentialRequest, ErrorBody, GenerationStarted, OpenApiRegistration, PromptRegistration, Registered, Registration,
    ToolsetRegistered, ToolsetRegistration,
};
use crate::api::state::AppState;
use crate::catalog::{CatalogError, MountRecord, NewCredential, NewPromptServer, NewToolsetServer};
use crate::config::OAuthConfig;
use crate::credentials::MAX_PER_SERVER;
use crate::generate::{Job, openapi};
use crate::serve::isolate::{check_handler, handler_warnings};
use crate::states::{Status, Trigger};
use crate::toolset::{AuthSetting, CodeModeSettings, NUL_REFUSED, OpenApiSettings, ServerId, Toolset};
use crate::whitelist::Whitelist;

const MAX_PROMPT_CHARS: usize = 32 * 1024;
/// A display name: shown in tables, logs and hosts' server lists.
const MAX_NAME_CHARS: usize = 200;
/// A server description is sent to MCP hosts as `instructions`; they may put it in the prompt.
const MAX_SERVER_DESCRIPTION_CHARS: usize = 8 * 1024;

/// Register a server from a prompt or a toolset
///
/// A body with `prompt` is generated in the background (202; follow `.../events`); a body with
/// `tools` is checked, stored and mounted at once (201). The tools' handlers are compiled in the
/// real engine first, so one that does not compile is refused with its line.
#[utoipa::path(
    post,
    path = "/admin/servers",
    request_body = Registration,
    responses(
        (status = 201, description = "a toolset, registered and mounted", body = ToolsetRegistered),
        (status = 202, description = "a prompt, generated in the background", body = GenerationStarted),
        (status = 400, description = "malformed body, unknown or ill-typed field, neither or both of prompt and tools", body = ErrorBody),
        (status = 409, description = "the id is taken", body = ErrorBody),
        (status = 413, description = "body larger than [server] max_body_bytes", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "invalid id, domain, access token or tool; handler that does not compile; prompt too long; no LLM configured", body = ErrorBody),
    ),
)]
pub async fn create_server(
    State(state): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Registered, ApiError> {
    let Json(body) = body?;
    let Value::Object(body) = body else {
        return Err(ApiError::with_status(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidBody,
            "the body must be a JSON object",
        ));
    };
    let described = body.contains_key("openapi") || body.contains_key("openapi_spec");
    if described && body.contains_key("tools") {
        return Err(ApiError::new(
            ErrorCode::AmbiguousRegistration,
            "send either \"openapi\"/\"openapi_spec\" (derive tools from an API description) or \"tools\" (a ready \
             toolset), not both",
        ));
    }
    if described {
        return register_openapi(&state, parse_body(body)?).await;
    }
    match (body.contains_key("prompt"), body.contains_key("tools")) {
        (true, false) => register_prompt(&state, parse_body(body)?).await,
        (false, true) => register_toolset(&state, parse_body(body)?).await,
        (true, true) => Err(ApiError::new(
            ErrorCode::AmbiguousRegistration,
            "send either \"prompt\" (generate tools) or \"tools\" (a ready toolset), not both",
        )),
        (false, false) => Err(ApiError::new(
            ErrorCode::MissingField,
            "the body needs \"prompt\" (generate tools from a description), \"openapi\" or \"openapi_spec\" (derive \
             them from an API description) or \"tools\" (a ready toolset)",
        )),
    }
}

/// Stores the server with a pending generation and starts generating.
async fn register_prompt(state: &AppState, body: PromptRegistration) -> Result<Registered, ApiError> {
    let allow_domains = with_credential_domains(body.allow_domains, &body.credentials);
    let access = (body.access_token, body.auth, &state.config.auth.oauth);
    let server = Checked::new(body.id, body.name, body.description, access, &allow_domains)?;
    let prompt = body.prompt;
    check_prompt(&prompt)?;
    if !state.generator.llm_configured() {
        return Err(llm_not_configured(&state.config.llm));
    }
    let pending = Pending {
        prompt,
        allow_domains,
        dry_run: body.dry_run,
        code_mode: body.code_mode,
        openapi: None,
        require_approval: body.require_approval,
    };
    start_generation(state, server, body.credentials, pending, None).await
}

/// What a registration that is generated in the background stores besides its [`Checked`] part.
struct Pending {
    prompt: String,
    allow_domains: Vec<String>,
    dry_run: bool,
    code_mode: Option<CodeModeSettings>,
    openapi: Option<OpenApiSettings>,
    require_approval: Option<bool>,
}

/// Seals the credentials, stores the server with a pending generation and starts the job: the
/// common end of prompt and API-description registrations. `inline_spec` is the text of an
/// inline description, kept under `openapi.sha256`.
async fn start_generation(
    state: &AppState,
    server: Checked,
    credentials: BTreeMap<String, CredentialRequest>,
    pending: Pending,
    inline_spec: Option<&str>,
) -> Result<Registered, ApiError> {
    let Checked { id, name, description, access_token_sha256, auth, whitelist } = server;
    let credentials = seal_credentials(state, &id, credentials, &whitelist)?;
    check_per_user_door(state, &credentials, access_token_sha256.is_some(), auth.as_ref())?;
    // Logged only: generation may add hosts to the whitelist, so this answer could not list them
    // all.
    reach_warnings(&id, &credentials, &whitelist);
    check_code_mode(pending.code_mode.as_ref())?;
    let Pending { prompt, allow_domains, dry_run, code_mode, openapi, require_approval } = pending;
    let generation_id = state
        .catalog
        .create_prompt_server(NewPromptServer {
            id: &id,
            name: &name,
            description: description.as_deref(),
            prompt: &prompt,
            allow_domains: &allow_domains,
            credentials: &credentials,
            dry_run,
            access_token_sha256: access_token_sha256.as_deref(),
            auth: auth.as_ref(),
            code_mode: code_mode.as_ref(),
            openapi: openapi.as_ref(),
            inline_spec,
            require_approval,
        })
        .await?;
    let described = openapi.is_some();
    state.generator.spawn(Job {
        server: id.clone(),
        generation_id,
        prompt,
        allow_domains,
        dry_run,
        force: false,
        openapi,
        trigger: Trigger::Registration,
        repair: None,
    });
    if described {
        tracing::info!(server_id = %id, generation_id, dry_run, "API description server registered; derivation started");
    } else {
        tracing::info!(server_id = %id, generation_id, dry_run, "prompt server registered; generation started");
    }
    Ok(Registered::Prompt(GenerationStarted {
        mcp_path: id.mcp_path(),
        id,
        name: Some(name),
        status: Status::Pending,
        generation_id,
    }))
}

/// The registration's `allow_domains` plus its credentials' domains: the operator named where
/// each credential goes, so those hosts are meant to be reachable.
fn with_credential_domains(
    mut allow_domains: Vec<String>,
    credentials: &BTreeMap<String, CredentialRequest>,
) -> Vec<String> {
    for credential in credentials.values() {
        allow_domains
            .extend(credential.domains.iter().filter(|d| !allow_domains.contains(d)).cloned().collect::<Vec<_>>());
    }
    allow_domains
}

/// Whether `raw` is an absolute http(s) URL with a host.
fn is_http_url(raw: &str) -> bool {
    url::Url::parse(raw).is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host_str().is_some())
}

/// Stores a server derived from an API description and starts deriving. An inline description
/// is parsed and derived here first, so one that yields no tools is refused before anything is
/// stored; one given by URL is fetched by the generation.
async fn register_openapi(state: &AppState, body: OpenApiRegistration) -> Result<Registered, ApiError> {
    let allow_domains = with_credential_domains(body.allow_domains, &body.credentials);
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidOpenapi, message);
    if let Some(raw) = body.base_url.as_deref().filter(|raw| !is_http_url(raw)) {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!("base_url {raw:?} must be an absolute http(s) URL such as \"https://api.example.com/v1\""),
        ));
    }
    let base_url = body.base_url;
    let (url, inline) = match (body.openapi, body.openapi_spec) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                ErrorCode::AmbiguousRegistration,
                "send either \"openapi\" (the description's URL) or \"openapi_spec\" (the description itself), not both",
            ));
        }
        (Some(raw), None) if is_http_url(&raw) => (Some(raw), None),
        (Some(raw), None) => {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                format!(
                    "openapi {raw:?} must be the http(s) URL of an OpenAPI or Swagger description; send the \
                     description itself as \"openapi_spec\""
                ),
            ));
        }
        (None, Some(Value::String(text))) => (None, Some(text)),
        (None, Some(Value::Object(object))) => (None, Some(Value::Object(object).to_string())),
        (None, Some(other)) => {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                format!(
                    "openapi_spec must be the description as a JSON object or as JSON/YAML text, not {}",
                    Kind::of(&other)
                ),
            ));
        }
        (None, None) => unreachable!("the dispatcher sends only bodies with openapi or openapi_spec"),
    };
    let prompt = body.prompt.unwrap_or_default();
    if !prompt.is_empty() {
        check_prompt(&prompt)?;
    }
    let mut name = body.name;
    if let Some(text) = &inline {
        // Parsing is bounded and stops if this request is dropped; deriving is bounded by the
        // schema budgets of `openapi::spec`.
        let root = openapi::document::read(text.clone()).await.map_err(|e| invalid(format!("openapi_spec: {e}")))?;
        let (filter, base_url, max_tools, discovery) =
            (body.operations.clone(), base_url.clone(), state.config.generation.max_tools, body.discovery);
        let title = tokio::task::spawn_blocking(move || {
            let spec = openapi::Spec::from_value(root).map_err(|e| invalid(format!("openapi_spec: {e}")))?;
            let selection = openapi::Selection { filter: &filter, max_tools, discovery, chosen: None };
            openapi::derive(&spec, None, base_url.as_deref(), &selection)
                .map_err(|e| invalid(format!("openapi_spec: {e}")))?;
            Ok::<_, ApiError>(spec.title().map(str::to_owned))
        })
        .await
        .map_err(ApiError::internal)??;
        if name.is_none() {
            name = title.map(|t| t.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect());
        }
    }
    let access = (body.access_token, body.auth, &state.config.auth.oauth);
    let server = Checked::new(body.id, name, body.description, access, &allow_domains)?;
    let settings = OpenApiSettings {
        url,
        sha256: inline.as_ref().map(|text| hex::encode(Sha256::digest(text.as_bytes()))),
        operations: body.operations,
        base_url,
        discovery: body.discovery,
    };
    let pending = Pending {
        prompt,
        allow_domains,
        dry_run: body.dry_run,
        code_mode: body.code_mode,
        openapi: Some(settings),
        require_approval: body.require_approval,
    };
    start_generation(state, server, body.credentials, pending, inline.as_deref()).await
}

/// A prompt's checks: not blank, not too long, no pasted secret.
fn check_prompt(prompt: &str) -> Result<(), ApiError> {
    if prompt.trim().is_empty() {
        return Err(ApiError::new(ErrorCode::InvalidField, "prompt must be a non-empty string"));
    }
    if prompt.chars().count() > MAX_PROMPT_CHARS {
        return Err(ApiError::new(
            ErrorCode::PromptTooLong,
            format!(
                "prompt is longer than {MAX_PROMPT_CHARS} characters; link the documentation instead of pasting it"
            ),
        ));
    }
    if prompt.contains('\0') {
        return Err(ApiError::new(ErrorCode::InvalidField, format!("prompt {NUL_REFUSED}")));
    }
    if let Some(secret) = crate::credentials::pasted_secret(prompt) {
        return Err(ApiError::new(
            ErrorCode::InvalidCredential,
            format!(
                "the prompt seems to contain a secret ({secret}): prompts are stored and sent to the LLM. Remove it \
                 and give it as a credential instead (\"credentials\" in this registration, or \
                 PUT /admin/servers/{{id}}/credentials/{{name}} / mcpbootd credentials set): the daemon then adds it \
                 to the API's requests without handlers, agents or the LLM seeing it"
            ),
        ));
    }
    Ok(())
}

/// Checks the tools, compiles their handlers, then stores and mounts the server.
async fn register_toolset(state: &AppState, body: ToolsetRegistration) -> Result<Registered, ApiError> {
    let access = (body.access_token, body.auth, &state.config.auth.oauth);
    let Checked { id, name, description, access_token_sha256, auth, whitelist } =
        Checked::new(body.id, body.name, body.description, access, &body.allow_domains)?;
    let credentials = seal_credentials(state, &id, body.credentials, &whitelist)?;
    check_per_user_door(state, &credentials, access_token_sha256.is_some(), auth.as_ref())?;
    check_code_mode(body.code_mode.as_ref())?;
    let toolset = Toolset::new(body.tools).map_err(|e| ApiError::new(ErrorCode::InvalidTool, e.to_string()))?;
    let (toolset, mut warnings) = check_handlers(toolset).await?;
    warnings.extend(reach_warnings(&id, &credentials, &whitelist));
    let tool_names: Vec<String> = toolset.tools().iter().map(|t| t.name.clone()).collect();
    let new = NewToolsetServer {
        id: id.clone(),
        name: name.clone(),
        description,
        access_token_sha256: access_token_sha256.clone(),
        auth: auth.clone(),
        allow_domains: body.allow_domains,
        whitelist,
        toolset,
        credentials,
        code_mode: body.code_mode.clone(),
    };
    // Stored and mounted in a task of its own, so a client that hangs up while the write is
    // queued cannot leave a stored server unmounted.
    let (catalog, registry) = (state.catalog.clone(), state.registry.clone());
    let record = (id.clone(), name.clone(), access_token_sha256, auth, body.code_mode);
    let has_credentials = !new.credentials.is_empty();
    state
        .tasks
        .spawn(async move {
            let (id, name, access_token_sha256, auth, code_mode) = record;
            let _change = registry.serialize(&id).await;
            let generation_id = catalog.create_toolset_server(new).await?;
            // Everything the mount needs is at hand (but the credentials' times, set by the
            // catalog); its validators are built on first use.
            let record = match has_credentials {
                false => Some(MountRecord {
                    id,
                    name,
                    generation_id,
                    access_token_sha256,
                    auth,
                    code_mode,
                    // Limits are set after registration (PUT /admin/servers/{id}/limits).
                    limits: None,
                    credentials_stamp: (0, 0),
                }),
                true => catalog.mount_record(&id).await?,
            };
            if let Some(record) = record {
                registry.mount(record);
            }
            Ok::<_, CatalogError>(())
        })
        .await
        .map_err(ApiError::internal)??;
    tracing::info!(server_id = %id, tools = tool_names.len(), warnings = warnings.len(), "toolset server registered");
    Ok(Registered::Toolset(ToolsetRegistered {
        mcp_path: id.mcp_path(),
        id,
        name,
        status: Status::Ready,
        tools: tool_names,
        warnings,
    }))
}

/// Inline credentials of a registration, checked and sealed before anything is stored.
fn seal_credentials(
    state: &AppState,
    id: &ServerId,
    credentials: BTreeMap<String, CredentialRequest>,
    whitelist: &Whitelist,
) -> Result<Vec<NewCredential>, ApiError> {
    if credentials.len() > MAX_PER_SERVER {
        return Err(ApiError::new(
            ErrorCode::InvalidCredential,
            format!("{} credentials given; a server holds at most {MAX_PER_SERVER}", credentials.len()),
        ));
    }
    credentials.into_iter().map(|(name, request)| seal(&state.vault, id, name, request, whitelist)).collect()
}

/// What both kinds of registration have, checked.
struct Checked {
    id: ServerId,
    name: String,
    description: Option<String>,
    access_token_sha256: Option<String>,
    auth: Option<AuthSetting>,
    whitelist: Whitelist,
}

impl Checked {
    fn new(
        id: Option<String>,
        name: Option<String>,
        description: Option<String>,
        (access_token, auth, oauth): (Option<String>, Option<AuthSetting>, &OAuthConfig),
        allow_domains: &[String],
    ) -> Result<Checked, ApiError> {
        if let Some(name) = &name {
            let problem = if name.trim().is_empty() {
                Some("must not be empty; leave it out to use the id".to_string())
            } else if name.chars().count() > MAX_NAME_CHARS {
                Some(format!("is longer than {MAX_NAME_CHARS} characters"))
            } else if name.chars().any(char::is_control) {
                Some("must not contain control characters (newlines, tabs, escapes)".to_string())
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(ApiError::new(ErrorCode::InvalidField, format!("name {problem}")));
            }
        }
        if let Some(description) = &description {
            if description.trim().is_empty() {
                return Err(ApiError::new(
                    ErrorCode::InvalidField,
                    "description must not be empty; leave it out instead",
                ));
            }
            if description.chars().count() > MAX_SERVER_DESCRIPTION_CHARS {
                return Err(ApiError::new(
                    ErrorCode::InvalidField,
                    format!("description is longer than {MAX_SERVER_DESCRIPTION_CHARS} characters"),
                ));
            }
            if description.contains('\0') {
                return Err(ApiError::new(ErrorCode::InvalidField, format!("description {NUL_REFUSED}")));
            }
        }
        let id = match id {
            Some(raw) => ServerId::parse(&raw).map_err(|e| ApiError::new(ErrorCode::InvalidId, e.to_string()))?,
            None => ServerId::generate(name.as_deref()),
        };
        let name = name.unwrap_or_else(|| id.to_string());
        let access_token_sha256 = access_token
            .map(|raw| access_token::parse(&raw).map(|t| access_token::digest(&t)))
            .transpose()
            .map_err(|e| ApiError::new(ErrorCode::InvalidAccessToken, e.to_string()))?;
        if access_token_sha256.is_some() && auth.is_some() {
            return Err(ApiError::new(
                ErrorCode::InvalidAuth,
                "send either \"access_token\" (a static bearer token) or \"auth\" (open, or OAuth), not both",
            ));
        }
        let auth = auth.map(|auth| crate::api::door::check_auth(oauth, auth)).transpose()?;
        let whitelist = Whitelist::from_operator_domains(allow_domains)
            .map_err(|e| ApiError::new(ErrorCode::InvalidDomain, e.to_string()))?;
        Ok(Checked { id, name, description, access_token_sha256, auth, whitelist })
    }
}

/// A registration body as `T`; errors name the field (`tools[2].input_schema: invalid type: …`).
/// A field the registration does not have is `unknown_field`, a problem inside a tool
/// `invalid_tool` (422, like the tool checks that follow), any other field of the wrong type
/// `invalid_field`.
fn parse_body<T: DeserializeOwned>(body: Map<String, Value>) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Value::Object(body)).map_err(|error| {
        let depth = error.path().iter().count();
        let in_tools =
            matches!(error.path().iter().next(), Some(serde_path_to_error::Segment::Map { key }) if key == "tools");
        let code = if in_tools && depth > 1 {
            ErrorCode::InvalidTool
        } else if depth == 1 && error.inner().to_string().starts_with("unknown field") {
            ErrorCode::UnknownField
        } else {
            ErrorCode::InvalidField
        };
        ApiError::new(code, error.to_string())
    })
}

/// Compiles every handler in the real engine, off the async threads; hands the toolset back
/// with the warnings about its handlers.
async fn check_handlers(toolset: Toolset) -> Result<(Toolset, Vec<String>), ApiError> {
    let (toolset, failure) = tokio::task::spawn_blocking(move || {
        let failure = toolset.tools().iter().enumerate().find_map(|(index, tool)| {
            check_handler(&tool.handler).err().map(|error| (index, tool.name.clone(), error))
        });
        (toolset, failure)
    })
    .await
    .map_err(ApiError::internal)?;
    match failure {
        None => {
            let warnings = toolset
                .tools()
                .iter()
                .enumerate()
                .flat_map(|(index, tool)| {
                    handler_warnings(&tool.handler)
                        .into_iter()
                        .map(move |warning| format!("tools[{index}].handler ({}): {warning}", tool.name))
                })
                .collect();
            Ok((toolset, warnings))
        }
        Some((index, name, error)) => {
            let line = error.line.map(|l| format!(" at line {l}")).unwrap_or_default();
            Err(ApiError::new(
                ErrorCode::HandlerCompileError,
                format!("tools[{index}].handler ({name}) does not compile{line}: {}", error.message),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused<T: DeserializeOwned + std::fmt::Debug>(body: Value) -> (ErrorCode, u16, String) {
        let Value::Object(body) = body else { panic!("not an object") };
        let error = parse_body::<T>(body).unwrap_err();
        (error.code, error.status.as_u16(), error.message)
    }

    #[test]
    fn body_errors_name_the_field_and_keep_their_codes() {
        let tool = json!({"name": "a", "description": "d", "input_schema": {"type": "object"}, "handler": "return 1;"});
        let mut bad_schema = tool.clone();
        bad_schema["input_schema"] = json!(5);
        let mut extra = tool.clone();
        extra["extra"] = json!(1);
        let cases: Vec<(Value, ErrorCode, u16, &str)> = vec![
            (
                json!({"tools": [tool, tool, bad_schema]}),
                ErrorCode::InvalidTool,
                422,
                "tools[2].input_schema: invalid type: integer `5`, expected a map",
            ),
            (json!({"tools": [extra]}), ErrorCode::InvalidTool, 422, "tools[0].extra: unknown field `extra`"),
            (json!({"tools": [{"name": "a"}]}), ErrorCode::InvalidTool, 422, "tools[0]: missing field `description`"),
            (
                json!({"tools": [5]}),
                ErrorCode::InvalidTool,
                422,
                "tools[0]: invalid type: integer `5`, expected a tool object",
            ),
            (
                json!({"tools": "nope"}),
                ErrorCode::InvalidField,
                400,
                "tools: invalid type: string \"nope\", expected a sequence",
            ),
            (
                json!({"tools": [], "allow_domains": ["a.com", 5]}),
                ErrorCode::InvalidField,
                400,
                "allow_domains[1]: invalid type",
            ),
            (json!({"tools": [], "surprise": 1}), ErrorCode::UnknownField, 400, "surprise: unknown field `surprise`"),
        ];
        for (body, code, status, message) in cases {
            let (got_code, got_status, got_message) = refused::<ToolsetRegistration>(body.clone());
            assert_eq!((got_code, got_status), (code, status), "{body}: {got_message}");
            assert!(got_message.starts_with(message), "{body}: {got_message:?} does not start with {message:?}");
        }
        let (code, _, message) = refused::<PromptRegistration>(json!({"prompt": "p", "dry_run": "yes"}));
        assert_eq!(code, ErrorCode::InvalidField);
        assert!(message.starts_with("dry_run: invalid type: string \"yes\", expected a boolean"), "{message}");
        let (code, _, message) = refused::<PromptRegistration>(json!({"prompt": "p", "tools": []}));
        assert_eq!((code, message.starts_with("tools: unknown field")), (ErrorCode::UnknownField, true), "{message}");
    }

    #[test]
    fn null_means_absent_for_optional_fields() {
        let body = json!({"prompt": "p", "id": null, "name": null, "allow_domains": null, "dry_run": null, "access_token": null});
        let Value::Object(body) = body else { unreachable!() };
        let parsed: PromptRegistration = parse_body(body).unwrap();
        assert!(parsed.id.is_none() && parsed.allow_domains.is_empty() && !parsed.dry_run);
    }
}
