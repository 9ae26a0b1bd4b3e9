//! Admin API handlers: register, inspect, call, export and delete servers.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::access_token;
use crate::api::AppState;
use crate::api::error::{ApiError, ErrorCode};
use crate::catalog::{CatalogError, GenerationRecord, MountRecord, NewToolsetServer, ServerRecord, format_millis};
use crate::generate::Job;
use crate::serve::call::{CallError, result_json};
use crate::serve::isolate::check_handler;
use crate::serve::registry::MountError;
use crate::states::{ServerKind, Status, Via};
use crate::toolset::{ServerId, Toolset};
use crate::whitelist::Whitelist;

const REGISTER_FIELDS: &[&str] = &["id", "name", "prompt", "tools", "allow_domains", "dry_run", "access_token"];
const DEFAULT_CALLS_LIMIT: i64 = 50;
const MAX_PROMPT_CHARS: usize = 32 * 1024;
const MAX_CALLS_LIMIT: i64 = 1000;

/// `POST /admin/servers`
pub async fn create_server(
    State(state): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let body = body.as_object().ok_or_else(|| {
        ApiError::with_status(StatusCode::BAD_REQUEST, ErrorCode::InvalidBody, "the body must be a JSON object")
    })?;
    for key in body.keys() {
        if !REGISTER_FIELDS.contains(&key.as_str()) {
            return Err(ApiError::new(
                ErrorCode::UnknownField,
                format!("unknown field {key:?}; expected some of {}", REGISTER_FIELDS.join(", ")),
            ));
        }
    }
    let id = match optional_string(body, "id")? {
        Some(raw) => ServerId::parse(&raw).map_err(|m| ApiError::new(ErrorCode::InvalidId, m))?,
        None => ServerId::generate(optional_string(body, "name")?.as_deref()),
    };
    let name = optional_string(body, "name")?.unwrap_or_else(|| id.to_string());
    let access_token = optional_string(body, "access_token")?
        .map(|raw| access_token::parse(&raw).map(|t| access_token::digest(&t)))
        .transpose()
        .map_err(|m| ApiError::new(ErrorCode::InvalidAccessToken, m))?;
    let allow_domains = string_list(body, "allow_domains")?;
    let whitelist =
        Whitelist::from_operator_domains(&allow_domains).map_err(|m| ApiError::new(ErrorCode::InvalidDomain, m))?;

    match (body.get("tools"), body.get("prompt")) {
        (Some(_), Some(_)) => Err(ApiError::new(
            ErrorCode::AmbiguousRegistration,
            "send either \"prompt\" (generate tools) or \"tools\" (a ready toolset), not both",
        )),
        (None, None) => Err(ApiError::new(
            ErrorCode::MissingField,
            "the body needs \"prompt\" (generate tools from a description) or \"tools\" (a ready toolset)",
        )),
        (None, Some(prompt)) => {
            let prompt = prompt
                .as_str()
                .filter(|p| !p.trim().is_empty())
                .ok_or_else(|| ApiError::new(ErrorCode::InvalidField, "prompt must be a non-empty string"))?;
            if prompt.chars().count() > MAX_PROMPT_CHARS {
                return Err(ApiError::new(
                    ErrorCode::PromptTooLong,
                    format!(
                        "prompt is longer than {MAX_PROMPT_CHARS} characters; link the documentation instead of pasting it"
                    ),
                ));
            }
            let dry_run = optional_bool(body, "dry_run")?;
            if !state.generator.llm_configured() {
                return Err(llm_not_configured());
            }
            let generation_id = state
                .catalog
                .create_prompt_server(&id, &name, prompt, &allow_domains, dry_run, access_token.as_deref())
                .await?;
            state.generator.spawn(Job {
                server: id.clone(),
                generation_id,
                prompt: prompt.to_string(),
                allow_domains,
                dry_run,
                force: false,
            });
            tracing::info!(server_id = %id, generation_id, dry_run, "prompt server registered; generation started");
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({
                    "id": id,
                    "name": name,
                    "status": Status::Pending,
                    "mcp_path": id.mcp_path(),
                    "generation_id": generation_id,
                })),
            )
                .into_response())
        }
        (Some(tools), None) => {
            let tools = tools
                .as_array()
                .ok_or_else(|| ApiError::new(ErrorCode::InvalidField, "tools must be an array of tool objects"))?;
            let toolset = Toolset::parse(tools).map_err(|e| ApiError::new(ErrorCode::InvalidTool, e.to_string()))?;
            let toolset = check_handlers(toolset).await?;
            let tool_names: Vec<String> = toolset.tools().iter().map(|t| t.name.clone()).collect();
            let new = NewToolsetServer {
                id: id.clone(),
                name: name.clone(),
                access_token_sha256: access_token.clone(),
                allow_domains,
                whitelist,
                toolset,
            };
            // Stored and mounted in a task of its own, so a client that hangs up while the write
            // is queued cannot leave a stored server unmounted.
            let (catalog, registry) = (state.catalog.clone(), state.registry.clone());
            let record = (id.clone(), name.clone(), access_token);
            state
                .tasks
                .spawn(async move {
                    let generation_id = catalog.create_toolset_server(new).await?;
                    // Everything the mount needs is at hand; its validators are built on first use.
                    let (id, name, access_token_sha256) = record;
                    registry.mount(MountRecord { id, name, generation_id, access_token_sha256 });
                    Ok::<_, CatalogError>(())
                })
                .await
                .map_err(ApiError::internal)??;
            tracing::info!(server_id = %id, tools = tool_names.len(), "toolset server registered");
            Ok((
                StatusCode::CREATED,
                Json(json!({
                    "id": id,
                    "name": name,
                    "status": Status::Ready,
                    "mcp_path": id.mcp_path(),
                    "tools": tool_names,
                })),
            )
                .into_response())
        }
    }
}

/// Compiles every handler in the real engine, off the async threads; hands the toolset back.
async fn check_handlers(toolset: Toolset) -> Result<Toolset, ApiError> {
    let (toolset, failure) = tokio::task::spawn_blocking(move || {
        let failure = toolset.tools().iter().enumerate().find_map(|(index, tool)| {
            check_handler(&tool.handler).err().map(|error| (index, tool.name.clone(), error))
        });
        (toolset, failure)
    })
    .await
    .map_err(ApiError::internal)?;
    match failure {
        None => Ok(toolset),
        Some((index, name, error)) => {
            let line = error.line.map(|l| format!(" at line {l}")).unwrap_or_default();
            Err(ApiError::new(
                ErrorCode::HandlerCompileError,
                format!("tools[{index}].handler ({name}) does not compile{line}: {}", error.message),
            ))
        }
    }
}

/// `GET /admin/servers`
pub async fn list_servers(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let servers = state.catalog.list_servers().await?;
    Ok(Json(json!({ "servers": servers })))
}

/// `GET /admin/servers/{id}`
pub async fn get_server(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let record = find_server(&state, &id).await?;
    Ok(Json(server_view(&record)))
}

/// `DELETE /admin/servers/{id}`
pub async fn delete_server(State(state): State<AppState>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    // Unmount first: from here on the mount answers 404 even while the rows are being deleted.
    state.registry.unmount(&id);
    state.metrics.forget_server(id.as_str());
    if state.catalog.delete_server(&id).await? {
        tracing::info!(server_id = %id, "server deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RegenerateBody {
    #[serde(default)]
    force: bool,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /admin/servers/{id}/regenerate`: a new generation; `{"force": true}` skips the cache.
pub async fn regenerate_server(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    // An empty body means the defaults, so `curl -X POST .../regenerate` works.
    let body: RegenerateBody = if body.iter().all(u8::is_ascii_whitespace) {
        RegenerateBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::with_status(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidBody,
                format!("expected {{\"force\"?: bool, \"dry_run\"?: bool}}: {e}"),
            )
        })?
    };
    let record = find_server(&state, &id).await?;
    let Some(prompt) = record.prompt.clone().filter(|_| record.kind == ServerKind::Prompt) else {
        return Err(ApiError::new(
            ErrorCode::NotGenerated,
            format!("server {id:?} was registered as a toolset; there is no prompt to regenerate from"),
        ));
    };
    if !state.generator.llm_configured() {
        return Err(llm_not_configured());
    }
    let generation_id =
        state.catalog.start_regeneration(&record.id, body.dry_run, body.force).await?.ok_or_else(|| {
            ApiError::new(
                ErrorCode::GenerationRunning,
                format!("server {id:?} is already being generated; wait for it to finish"),
            )
        })?;
    state.generator.spawn(Job {
        server: record.id.clone(),
        generation_id,
        prompt,
        allow_domains: record.allow_domains.clone(),
        dry_run: body.dry_run,
        force: body.force,
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": record.id, "status": Status::Pending, "mcp_path": record.id.mcp_path(), "generation_id": generation_id})),
    )
        .into_response())
}

fn llm_not_configured() -> ApiError {
    ApiError::new(
        ErrorCode::LlmNotConfigured,
        "prompt registrations need an LLM: set [llm] provider (\"anthropic\" or \"openai\") and model \
         (MCPBOOTD_LLM__PROVIDER, MCPBOOTD_LLM__MODEL) and an API key ([llm] api_key, ANTHROPIC_API_KEY or \
         OPENAI_API_KEY); toolset registrations ({\"tools\": [...]}) work without one",
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessTokenBody {
    access_token: String,
}

/// `PUT /admin/servers/{id}/access-token`: set or rotate the token MCP clients must present.
/// The old token stops working at once.
pub async fn put_access_token(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Json<AccessTokenBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let id = parse_id(&id)?;
    let token = access_token::parse(&body.access_token).map_err(|m| ApiError::new(ErrorCode::InvalidAccessToken, m))?;
    set_access_token(&state, &id, Some(&access_token::digest(&token))).await?;
    Ok(Json(json!({"id": id, "access_token_set": true})))
}

/// `DELETE /admin/servers/{id}/access-token`: the mount becomes open again.
pub async fn delete_access_token(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    set_access_token(&state, &id, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_access_token(state: &AppState, id: &ServerId, digest: Option<&str>) -> Result<(), ApiError> {
    if !state.catalog.set_access_token(id, digest).await? {
        return Err(not_found(id));
    }
    // Remount so the serving path sees the new token at once.
    if state.registry.get(id).is_some()
        && let Some(record) = state.catalog.mount_record(id).await?
    {
        state.registry.mount(record);
    }
    tracing::info!(server_id = %id, set = digest.is_some(), "access token changed");
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallBody {
    #[serde(default = "empty_object")]
    arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// `POST /admin/servers/{id}/tools/{tool}/call`
pub async fn call_tool(
    State(state): State<AppState>,
    Path((id, tool)): Path<(String, String)>,
    body: Result<Json<CallBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let id = parse_id(&id)?;
    let mounted = match state.registry.mounted(&id).await {
        Ok(Some(mounted)) => mounted,
        Ok(None) | Err(MountError::Gone { .. }) => {
            return Err(match state.catalog.server_status(&id).await? {
                Some(status) => ApiError::new(
                    ErrorCode::ServerNotReady,
                    format!("server {id:?} is {status}; it can be called once it is ready"),
                ),
                None => not_found(&id),
            });
        }
        Err(failure) => return Err(ApiError::new(ErrorCode::ServerUnavailable, failure.to_string())),
    };
    let output = mounted.server.call(&state.caller, &tool, body.arguments, Via::Admin).await.map_err(|e| match e {
        CallError::UnknownTool(name) => ApiError::new(
            ErrorCode::ToolNotFound,
            format!("server {id:?} has no tool {name:?}; GET /admin/servers/{id} lists its tools"),
        ),
        CallError::InvalidArguments(m) => ApiError::new(ErrorCode::InvalidArguments, m),
        CallError::Busy(_) => ApiError::new(ErrorCode::Busy, e.to_string()),
        CallError::ShuttingDown => ApiError::new(ErrorCode::ShuttingDown, e.to_string()),
    })?;
    Ok(Json(json!({
        "execution_id": output.execution_id,
        "outcome": output.outcome.as_str(),
        "result": result_json(output.result),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsQuery {
    limit: Option<i64>,
}

/// `GET /admin/servers/{id}/calls?limit=N`
pub async fn list_calls(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<CallsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(DEFAULT_CALLS_LIMIT);
    if !(1..=MAX_CALLS_LIMIT).contains(&limit) {
        return Err(ApiError::new(ErrorCode::InvalidQuery, format!("limit must be between 1 and {MAX_CALLS_LIMIT}")));
    }
    let record = find_server(&state, &id).await?;
    state.caller.call_log().flush().await;
    let calls = state.catalog.list_calls(&record.id, limit).await?;
    Ok(Json(json!({ "calls": calls })))
}

/// `GET /admin/servers/{id}/export`: a body that `POST /admin/servers` accepts again.
pub async fn export_server(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let record = find_server(&state, &id).await?;
    let generation = record.generation.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NothingToExport,
            format!("server {id:?} has no generated tools yet ({})", record.status),
        )
    })?;
    Ok(Json(json!({
        "id": record.id,
        "name": record.name,
        "allow_domains": generation.whitelist.domains(),
        "tools": generation.tools,
    })))
}

fn server_view(record: &ServerRecord) -> Value {
    let (whitelist, tools) = match &record.generation {
        Some(g) => (json!(g.whitelist), tools_view(g)),
        None => (json!([]), json!([])),
    };
    json!({
        "id": record.id,
        "name": record.name,
        "kind": record.kind,
        "status": record.status,
        "serving": record.generation.is_some(),
        "access_token_set": record.access_token_sha256.is_some(),
        "mcp_path": record.id.mcp_path(),
        "prompt": record.prompt,
        "allow_domains": record.allow_domains,
        "whitelist": whitelist,
        "tools": tools,
        "generation": record.generation.as_ref().map(generation_view),
        "latest_generation": record.latest_generation.as_ref().map(generation_view),
        "created_at": format_millis(record.created_at),
        "updated_at": format_millis(record.updated_at),
    })
}

fn tools_view(generation: &GenerationRecord) -> Value {
    let tools: Vec<Value> = generation
        .tools
        .tools()
        .iter()
        .zip(&generation.tool_extras)
        .map(|(tool, extras)| {
            let mut view = json!(tool);
            if let Some(needs_network) = extras.needs_network {
                view["needs_network"] = json!(needs_network);
            }
            if let Some(self_test) = &extras.self_test {
                view["self_test"] = self_test.clone();
            }
            view
        })
        .collect();
    Value::Array(tools)
}

fn generation_view(g: &GenerationRecord) -> Value {
    let d = &g.details;
    json!({
        "id": g.id,
        "source": g.source,
        "status": g.status,
        "stage": g.status,
        "error": g.error,
        "dry_run": d.dry_run,
        "force": d.force,
        "cache_hit": d.cache_hit,
        "cached_from": d.cached_from,
        "prompt_hash": d.prompt_hash,
        "content_hash": d.content_hash,
        "model": d.model,
        "generator_version": g.generator_version,
        "tokens": {"input": d.input_tokens, "output": d.output_tokens, "requests": d.llm_requests},
        "timings": d.timings,
        "warnings": d.warnings,
        "whitelist": g.whitelist,
        "refused_domains": d.refused_domains,
        "documents": d.documents,
        "plan": d.plan,
        "tools": tools_view(g),
        "created_at": format_millis(g.created_at),
        "finished_at": g.finished_at.map(format_millis),
    })
}

async fn find_server(state: &AppState, raw_id: &str) -> Result<ServerRecord, ApiError> {
    let id = parse_id(raw_id)?;
    state.catalog.get_server(&id).await?.ok_or_else(|| not_found(&id))
}

fn parse_id(raw: &str) -> Result<ServerId, ApiError> {
    ServerId::parse(raw)
        .map_err(|_| ApiError::new(ErrorCode::ServerNotFound, format!("no server {raw:?} (ids use a-z, 0-9 and '-')")))
}

fn not_found(id: &ServerId) -> ApiError {
    ApiError::new(ErrorCode::ServerNotFound, format!("no server {id:?}; GET /admin/servers lists them"))
}

fn optional_string(body: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::new(ErrorCode::InvalidField, format!("{key} must be a string"))),
    }
}

fn optional_bool(body: &Map<String, Value>, key: &str) -> Result<bool, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::new(ErrorCode::InvalidField, format!("{key} must be true or false"))),
    }
}

fn string_list(body: &Map<String, Value>, key: &str) -> Result<Vec<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::new(ErrorCode::InvalidField, format!("{key}[{i}] must be a string")))
            })
            .collect(),
        Some(_) => Err(ApiError::new(ErrorCode::InvalidField, format!("{key} must be an array of strings"))),
    }
}
