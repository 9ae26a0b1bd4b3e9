//! Admin API handlers: inspect, regenerate, call, export and delete servers, and set their
//! access tokens. Registration is in `register.rs`; the bodies are the types of `model.rs`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde_json::json;

use crate::access_token;
use crate::api::door::check_auth;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::extract::{
    ServerIdPath, ServerItemPath, find_server, llm_not_configured, not_found, optional_body, served,
};
use crate::api::model::{
    AccessTokenRequest, AccessTokenSet, AuthSet, AuthView, CallList, CallRequest, CallResult, CallsQuery, ErrorBody,
    GenerationStarted, RegenerateRequest, ServerList, ServerSummary, ServerView, ToolHealthView, ToolsetRegistration,
};
use crate::api::state::AppState;
use crate::catalog::{CallFilter, ServerRecord, StartGeneration};
use crate::generate::Job;
use crate::generate::repair::{self, Repair};
use crate::serve::call::CallError;
use crate::serve::health::Health;
use crate::states::{ServerKind, Status, Trigger, Via};
use crate::toolset::{AuthSetting, ServerId};

const DEFAULT_CALLS_LIMIT: i64 = 50;
const MAX_CALLS_LIMIT: i64 = 1000;

/// List servers
#[utoipa::path(get, path = "/admin/servers", responses((status = 200, description = "every registered server", body = ServerList)))]
pub async fn list_servers(State(state): State<AppState>) -> Result<Json<ServerList>, ApiError> {
    let servers = state.catalog.list_servers().await?;
    let hour_ago = crate::catalog::now_millis() - 3_600_000;
    let counts = state.catalog.call_counts_since(hour_ago).await?;
    let servers = servers
        .into_iter()
        .map(|row| {
            let mut summary = ServerSummary::from(row);
            let recent = counts.get(summary.id.as_str()).copied().unwrap_or_default();
            summary.calls_last_hour = recent.calls;
            summary.errors_last_hour = recent.errors;
            // Servers not called since the daemon started are judged when first called.
            if let Some((_, tools)) = state.registry.tool_health(&summary.id) {
                summary.degraded_tools =
                    tools.into_iter().filter(|(_, health)| health.degraded).map(|(name, _)| name).collect();
            }
            summary
        })
        .collect();
    Ok(Json(ServerList { servers }))
}

/// Everything about a server
///
/// Status, whitelist with provenance, tools with their handlers, and the generation being
/// served (plus the newest one when it is another: running, failed or planned).
#[utoipa::path(
    get,
    path = "/admin/servers/{id}",
    params(("id" = String, Path)),
    responses((status = 200, description = "the server", body = ServerView), (status = 404, description = "no such server", body = ErrorBody)),
)]
pub async fn get_server(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<ServerView>, ApiError> {
    let record = find_server(&state, &id).await?;
    let mut view = ServerView::from(&record);
    view.auth =
        AuthView::of(record.access_token_sha256.is_some(), record.auth.as_ref(), state.config.auth.oauth.required);
    if let Some(served) = &record.generation {
        let health = tool_health(&state, &record.id, served.id).await?;
        for tool in &mut view.tools {
            tool.health = health.get(&tool.tool.name).map(|health| ToolHealthView::from(*health));
        }
    }
    Ok(Json(view))
}

/// Each tool's health: from the built mount when it serves `generation_id`, else from the log.
async fn tool_health(
    state: &AppState,
    id: &ServerId,
    generation_id: i64,
) -> Result<std::collections::BTreeMap<String, Health>, ApiError> {
    if let Some((served, tools)) = state.registry.tool_health(id)
        && served == generation_id
    {
        return Ok(tools.into_iter().collect());
    }
    state.caller.call_log().flush().await;
    let rule = state.registry.health_rule();
    let recent = state.catalog.recent_failures_by_tool(id, generation_id, rule.window).await?;
    Ok(recent.into_iter().map(|(tool, failed)| (tool, rule.judge(&failed))).collect())
}

/// Unmount and delete a server
#[utoipa::path(
    delete,
    path = "/admin/servers/{id}",
    params(("id" = String, Path)),
    responses((status = 204, description = "deleted"), (status = 404, description = "no such server", body = ErrorBody)),
)]
pub async fn delete_server(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<StatusCode, ApiError> {
    // Deleted in the catalog first, then unmounted: a delete that fails leaves the server whole
    // and served. Serialized with registration and token changes of the same id.
    let _change = state.registry.serialize(&id).await;
    let deleted = state.catalog.delete_server(&id).await?;
    state.registry.unmount(&id);
    state.metrics.forget_server(id.as_str());
    if deleted {
        tracing::info!(server_id = %id, "server deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

/// Start a new generation of a prompt server
///
/// The current tools keep serving until the new generation is ready. `force` skips the cache;
/// an empty body means the defaults.
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/regenerate",
    params(("id" = String, Path)),
    request_body(content = Option<RegenerateRequest>),
    responses(
        (status = 202, description = "a new generation started", body = GenerationStarted),
        (status = 400, description = "body is not the expected JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 409, description = "a toolset server, or a generation is running", body = ErrorBody),
        (status = 422, description = "no LLM configured", body = ErrorBody),
    ),
)]
pub async fn regenerate_server(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<GenerationStarted>), ApiError> {
    let shape = "{\"force\"?: bool, \"dry_run\"?: bool, \"tools\"?: [names], \"with_failures\"?: bool}";
    let body: RegenerateRequest = optional_body(&body, shape)?;
    let record = find_server(&state, &id).await?;
    let (prompt, openapi) = match record.kind {
        ServerKind::Prompt => {
            if !state.generator.llm_configured() {
                return Err(llm_not_configured(&state.config.llm));
            }
            (record.prompt.clone().unwrap_or_default(), None)
        }
        // An API description needs no LLM: it is fetched (or read) and derived again.
        ServerKind::OpenApi => (record.prompt.clone().unwrap_or_default(), record.openapi.clone()),
        ServerKind::Toolset => {
            return Err(ApiError::new(
                ErrorCode::NotGenerated,
                format!("server {id:?} was registered as a toolset; there is no prompt to regenerate from"),
            ));
        }
    };
    let repair = match &body.tools {
        Some(tools) => Some(repair_of(&state, &record, tools, body.with_failures, body.dry_run).await?),
        None if body.with_failures => {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                "with_failures repairs named tools: add \"tools\": [\"tool_name\", ...]",
            ));
        }
        None => None,
    };
    let start = StartGeneration {
        dry_run: body.dry_run,
        force: body.force,
        trigger: if repair.is_some() { Trigger::Repair } else { Trigger::Regenerate },
        detail: repair.as_ref().map(|repair| format!("tools: {}", repair.tools.join(", "))),
        repair: repair.as_ref().map(|repair| {
            json!({
                "base_version": record.generation.as_ref().map(|g| g.version),
                "tools": repair.tools,
                "with_failures": body.with_failures,
                "failures": repair.failures,
            })
        }),
    };
    let generation_id = state.catalog.start_regeneration(&record.id, record.kind, &start).await?.ok_or_else(|| {
        ApiError::new(
            ErrorCode::GenerationRunning,
            format!("server {id:?} is already being generated; wait for it to finish"),
        )
    })?;
    state.generator.spawn(Job {
        server: record.id.clone(),
        generation_id,
        prompt,
        allow_domains: record.allow_domains,
        dry_run: body.dry_run,
        force: body.force,
        openapi,
        trigger: start.trigger,
        repair,
    });
    let started = GenerationStarted {
        mcp_path: record.id.mcp_path(),
        id: record.id,
        name: None,
        status: Status::Pending,
        generation_id,
    };
    Ok((StatusCode::ACCEPTED, Json(started)))
}

/// A targeted regeneration of `tools` of the server's active version, with their recent failed
/// calls when `with_failures`; refused with what to do instead when it cannot apply.
async fn repair_of(
    state: &AppState,
    record: &ServerRecord,
    tools: &[String],
    with_failures: bool,
    dry_run: bool,
) -> Result<Repair, ApiError> {
    let id = &record.id;
    if record.kind != ServerKind::Prompt {
        return Err(ApiError::new(
            ErrorCode::NotGenerated,
            format!(
                "server {id:?}'s tools are derived from its API description, not written one by one; regenerate it \
                 without \"tools\""
            ),
        ));
    }
    if dry_run {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            "dry_run stops after planning, and a targeted regeneration reuses the active plan: leave one out",
        ));
    }
    let Some(active) = &record.generation else {
        return Err(ApiError::new(
            ErrorCode::NotGenerated,
            format!("server {id:?} serves no version yet; regenerate it whole first"),
        ));
    };
    let mut names: Vec<String> = Vec::with_capacity(tools.len());
    for tool in tools {
        if !names.contains(tool) {
            names.push(tool.clone());
        }
    }
    let unknown = repair::unknown_tools(active, &names);
    if names.is_empty() || !unknown.is_empty() {
        let known: Vec<&str> = active.tools.tools().iter().map(|t| t.name.as_str()).collect();
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!(
                "tools must name tools of version {} of server {id:?} ({}); unknown: {}",
                active.version,
                known.join(", "),
                if unknown.is_empty() { "(none given)".to_string() } else { unknown.join(", ") }
            ),
        ));
    }
    let mut failures = std::collections::BTreeMap::new();
    if with_failures {
        // The newest calls may still be queued for the log.
        state.caller.call_log().flush().await;
        for name in &names {
            let calls = state.catalog.failed_calls(id, active.id, name, repair::FAILURES_PER_TOOL).await?;
            failures.insert(name.clone(), calls);
        }
    }
    Ok(Repair { base_generation_id: active.id, tools: names, failures })
}

/// Set or rotate a server's access token
///
/// MCP clients must then present it as `Authorization: Bearer <token>`; the old token stops
/// working at once.
#[utoipa::path(
    put,
    path = "/admin/servers/{id}/access-token",
    params(("id" = String, Path)),
    request_body = AccessTokenRequest,
    responses(
        (status = 200, description = "the token is set", body = AccessTokenSet),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "token of the wrong length, or body of the wrong shape", body = ErrorBody),
    ),
)]
pub async fn put_access_token(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<AccessTokenRequest>, JsonRejection>,
) -> Result<Json<AccessTokenSet>, ApiError> {
    let Json(body) = body?;
    let token = access_token::parse(&body.access_token)
        .map_err(|e| ApiError::new(ErrorCode::InvalidAccessToken, e.to_string()))?;
    let auth_setting_removed = set_access_token(&state, &id, Some(&access_token::digest(&token))).await?;
    Ok(Json(AccessTokenSet { id, access_token_set: true, auth_setting_removed }))
}

/// Remove a server's access token; its mount is open again
#[utoipa::path(
    delete,
    path = "/admin/servers/{id}/access-token",
    params(("id" = String, Path)),
    responses((status = 204, description = "removed"), (status = 404, description = "no such server", body = ErrorBody)),
)]
pub async fn delete_access_token(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<StatusCode, ApiError> {
    set_access_token(&state, &id, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Returns whether the token replaced the server's auth setting.
async fn set_access_token(state: &AppState, id: &ServerId, digest: Option<&str>) -> Result<bool, ApiError> {
    let _change = state.registry.serialize(id).await;
    let Some(auth_setting_removed) = state.catalog.set_access_token(id, digest).await? else {
        return Err(not_found(id));
    };
    // Remount so the serving path sees the new token at once.
    state.registry.remount(id).await?;
    tracing::info!(server_id = %id, set = digest.is_some(), auth_setting_removed, "access token changed");
    Ok(auth_setting_removed)
}

/// Set who may use a server's mount
///
/// `{"mode": "open"}` or `{"mode": "oauth", "scopes": [...]}` (an OAuth token from `[auth.oauth]
/// issuer`, holding these scopes besides the daemon's scope model). Replaces the server's static
/// access token, if it had one. Takes effect for the next request.
#[utoipa::path(
    put,
    path = "/admin/servers/{id}/auth",
    params(("id" = String, Path)),
    request_body = AuthSetting,
    responses(
        (status = 200, description = "the setting now in force", body = AuthSet),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "an unknown mode, a bad scope, or OAuth without [auth.oauth]", body = ErrorBody),
    ),
)]
pub async fn put_auth(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    body: Result<Json<AuthSetting>, JsonRejection>,
) -> Result<Json<AuthSet>, ApiError> {
    let Json(setting) = body?;
    let setting = check_auth(&state.config.auth.oauth, setting)?;
    set_auth(&state, &id, Some(setting)).await
}

/// Let the daemon's default decide who may use a server's mount
///
/// Removes the server's auth setting: `[auth.oauth] required` decides again (a static access
/// token, if set, is kept).
#[utoipa::path(
    delete,
    path = "/admin/servers/{id}/auth",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "the mode now in force", body = AuthSet),
        (status = 404, description = "no such server", body = ErrorBody),
    ),
)]
pub async fn delete_auth(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<AuthSet>, ApiError> {
    set_auth(&state, &id, None).await
}

async fn set_auth(state: &AppState, id: &ServerId, setting: Option<AuthSetting>) -> Result<Json<AuthSet>, ApiError> {
    let _change = state.registry.serialize(id).await;
    let Some(had_access_token) = state.catalog.set_auth(id, setting.as_ref()).await? else {
        return Err(not_found(id));
    };
    state.registry.remount(id).await?;
    // A setting replaces the token; clearing the setting keeps it.
    let access_token_removed = had_access_token && setting.is_some();
    let keeps_token = had_access_token && setting.is_none();
    let auth = AuthView::of(keeps_token, setting.as_ref(), state.config.auth.oauth.required);
    tracing::info!(server_id = %id, mode = %auth.mode, access_token_removed, "auth setting changed");
    Ok(Json(AuthSet { id: id.clone(), auth, access_token_removed }))
}

/// Run one tool through the same isolate path as MCP
///
/// The call is logged like an MCP call (`via: admin`). A tool that throws is a 200 with
/// `result.isError`; arguments that do not fit the tool's input schema are a 422.
#[utoipa::path(
    post,
    path = "/admin/servers/{id}/tools/{tool}/call",
    params(("id" = String, Path), ("tool" = String, Path)),
    request_body = CallRequest,
    responses(
        (status = 200, description = "the call ran (its result may be an error result)", body = CallResult),
        (status = 400, description = "body is not JSON", body = ErrorBody),
        (status = 404, description = "no such server or tool", body = ErrorBody),
        (status = 413, description = "body larger than [server] max_body_bytes", body = ErrorBody),
        (status = 415, description = "body is not JSON", body = ErrorBody),
        (status = 422, description = "arguments that do not fit the input schema, or body of the wrong shape", body = ErrorBody),
        (status = 503, description = "server not ready or not servable, every isolate busy, or shutting down", body = ErrorBody),
    ),
)]
pub async fn call_tool(
    State(state): State<AppState>,
    ServerItemPath(id, tool): ServerItemPath<String>,
    body: Result<Json<CallRequest>, JsonRejection>,
) -> Result<Json<CallResult>, ApiError> {
    let Json(body) = body?;
    let server = served(&state, &id).await?;
    let output = server.call(&state.caller, &tool, body.arguments, Via::Admin).await.map_err(|e| match e {
        CallError::UnknownTool(name) => ApiError::new(
            ErrorCode::ToolNotFound,
            format!("server {id:?} has no tool {name:?}; GET /admin/servers/{id} lists its tools"),
        ),
        CallError::InvalidArguments(refused) => ApiError::new(ErrorCode::InvalidArguments, refused.to_string()),
        CallError::UnknownOperation(m) => ApiError::new(ErrorCode::InvalidArguments, m),
        CallError::Unavailable(m) => ApiError::new(ErrorCode::ServerUnavailable, m),
        CallError::Busy(_) => ApiError::new(ErrorCode::Busy, e.to_string()),
        CallError::ShuttingDown => ApiError::new(ErrorCode::ShuttingDown, e.to_string()),
        CallError::Forbidden(missing) => ApiError::new(ErrorCode::Forbidden, missing.to_string()),
        CallError::NotConnected(_) => ApiError::new(ErrorCode::NotConnected, e.to_string()),
        CallError::Limited(refusal) => {
            ApiError::new(ErrorCode::RateLimited, refusal.to_string()).with_retry_after(refusal.retry_after_seconds())
        }
    })?;
    Ok(Json(CallResult { execution_id: output.execution_id, outcome: output.outcome, result: output.result.into() }))
}

/// The call log, newest first, with egress records
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/calls",
    params(("id" = String, Path), CallsQuery),
    responses(
        (status = 200, description = "the newest calls first", body = CallList),
        (status = 400, description = "limit out of range or not a number", body = ErrorBody),
        (status = 404, description = "no such server", body = ErrorBody),
    ),
)]
pub async fn list_calls(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
    query: Result<Query<CallsQuery>, QueryRejection>,
) -> Result<Json<CallList>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(DEFAULT_CALLS_LIMIT);
    if !(1..=MAX_CALLS_LIMIT).contains(&limit) {
        return Err(ApiError::new(ErrorCode::InvalidQuery, format!("limit must be between 1 and {MAX_CALLS_LIMIT}")));
    }
    let filter = CallFilter {
        tool: query.tool,
        outcome: query.outcome,
        since: query.since.as_deref().map(|time| parse_time("since", time)).transpose()?,
        until: query.until.as_deref().map(|time| parse_time("until", time)).transpose()?,
        execution_id: query.execution_id,
    };
    let record = find_server(&state, &id).await?;
    state.caller.call_log().flush().await;
    let calls = state.catalog.list_calls(&record.id, limit, &filter).await?;
    Ok(Json(CallList { calls: calls.into_iter().map(Into::into).collect() }))
}

/// An RFC 3339 UTC time as milliseconds since the Unix epoch.
fn parse_time(parameter: &str, time: &str) -> Result<i64, ApiError> {
    let parsed = humantime::parse_rfc3339_weak(time).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidQuery,
            format!("{parameter} {time:?} is not a time ({e}): use RFC 3339 in UTC, e.g. 2026-11-25T21:00:00Z"),
        )
    })?;
    let since_epoch = parsed.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
}

/// The server's toolset as a body `POST /admin/servers` accepts again
#[utoipa::path(
    get,
    path = "/admin/servers/{id}/export",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "a body POST /admin/servers accepts", body = ToolsetRegistration),
        (status = 404, description = "no such server", body = ErrorBody),
        (status = 409, description = "no generated tools yet", body = ErrorBody),
    ),
)]
pub async fn export_server(
    State(state): State<AppState>,
    ServerIdPath(id): ServerIdPath,
) -> Result<Json<ToolsetRegistration>, ApiError> {
    let record = find_server(&state, &id).await?;
    let generation = record.generation.ok_or_else(|| {
        ApiError::new(
            ErrorCode::NothingToExport,
            format!("server {id:?} has no generated tools yet ({})", record.status),
        )
    })?;
    Ok(Json(ToolsetRegistration {
        id: Some(record.id.to_string()),
        name: Some(record.name),
        description: record.description,
        allow_domains: generation.whitelist.domains(),
        tools: generation.tools.tools().to_vec(),
        // Neither the token nor credential values leave the daemon.
        credentials: Default::default(),
        access_token: None,
        // The auth setting is not a secret and means the same on another daemon.
        auth: record.auth,
        code_mode: record.code_mode,
    }))
}
