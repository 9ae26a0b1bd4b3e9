//! MCP endpoints: `/servers/{id}/mcp` over rmcp's Streamable HTTP transport.
//!
//! An [`McpEndpoint`] answers MCP for one built [`Server`], which it holds; the registry keeps
//! it in the server's `registry::Mount` once built, so nothing here looks servers up.
//!
//! Every endpoint is **stateless** (`legacy_session_mode = false`, JSON responses): a request
//! carries all it needs, so any replica can answer it, a restart loses no sessions, and thousands
//! of hosts cost no per-session memory. The HTTP route (`api/mcp.rs`) looks the server up in the
//! registry, checks its access token, builds its mount on first use and hands the request to
//! [`McpEndpoint::handle`], or, for a single `tools/call` that rmcp would answer as plain JSON, to
//! [`McpEndpoint::call_tool_directly`], which runs the same handler code without rmcp's
//! per-request service (see [`direct_tool_call`]).

use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::Request;
use axum::http::header::{ACCEPT, CONTENT_TYPE, HOST, ORIGIN};
use axum::http::request::Parts;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ClientRequest, ContentBlock,
    GetMeta, Implementation, JsonRpcRequest, ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestId,
    ServerCapabilities, ServerConfig, ServerJsonRpcMessage, ServerResult, Tool,
};
// Logging is deprecated in the newest revision; older clients still send logging/setLevel.
#[allow(deprecated)]
use rmcp::model::{RequestMetaObject, SetLevelRequestParams};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::accounts::{ConnectLink, NotConnected};
use crate::config::Config;
use crate::oauth::{Admission, Grant};
use crate::script::ScriptRequest;
use crate::serve::call::{CallError, Caller, Origin};
use crate::serve::code_mode::{self, CodeMode};
use crate::serve::isolate::ToolResult;
use crate::serve::quota::CallerKey;
use crate::serve::server::Server;
use crate::states::Via;
use crate::telemetry::metrics::ClientMistake;
use crate::telemetry::traces::{TRACEPARENT, TraceParent};
use crate::toolset::{ServerId, ToolSpec};

type McpService = StreamableHttpService<Arc<McpHandler>, NeverSessionManager>;

/// The `Accept` value rmcp needs to see, as `api::mcp::transport` completes it.
const ACCEPT_BOTH: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// JSON-RPC's first implementation-defined server error, which the daemon answers when a server
/// cannot serve a request (see `ErrorCode::jsonrpc_code` in `api/error.rs`).
const SERVER_ERROR: i32 = -32000;

/// What every mount shares: transport settings, the caller that runs tools and the runner of
/// code-mode scripts.
#[derive(Clone)]
pub struct McpSettings {
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    max_body_bytes: usize,
    caller: Caller,
    code_mode: Arc<CodeMode>,
    elicitation: Arc<UrlElicitationClients>,
}

/// Signed-in clients whose last `initialize` declared URL-mode elicitation.
///
/// A stateless request of the handshake revisions (2025-11-25 and before) does not say what its
/// client can do: only `initialize` did, on a request of its own. So what a client declared
/// there is remembered per (subject, OAuth client), the closest these revisions come to a
/// session, and read when one of its calls needs a connect link. A 2026-07-28 request carries
/// its capabilities in `_meta` and is judged by them alone.
#[derive(Default)]
pub struct UrlElicitationClients {
    declared: Mutex<std::collections::HashSet<(String, Option<String>)>>,
}

/// Clients remembered at most; past it the set starts afresh (a forgotten client gets the link
/// as a tool error, which every host shows).
const MAX_ELICITATION_CLIENTS: usize = 65_536;

impl UrlElicitationClients {
    fn record(&self, grant: &Grant, declared: bool) {
        let key = (grant.claims.sub.clone(), grant.claims.client_id.clone());
        let mut set = lock(&self.declared);
        if declared {
            if set.len() >= MAX_ELICITATION_CLIENTS {
                set.clear();
            }
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }

    fn declared(&self, grant: &Grant) -> bool {
        lock(&self.declared).contains(&(grant.claims.sub.clone(), grant.claims.client_id.clone()))
    }
}

/// MCP's `URLElicitationRequiredError`: the request needs the user to open a URL first.
const URL_ELICITATION_REQUIRED: i32 = -32042;

/// One server's MCP endpoint.
pub struct McpEndpoint {
    service: McpService,
    handler: Arc<McpHandler>,
}

/// Ends a mount's calls in flight when its server stops being served here, and says why. The
/// registry holds one per mount and ends it on unmount and at shutdown; a remount (a new
/// version, token or credential) does not: calls already routed finish on the mount they
/// started on.
#[derive(Clone, Default)]
pub struct Unmounting {
    token: CancellationToken,
    why: Arc<OnceLock<Unmounted>>,
}

/// Why a mount stopped serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    /// The server was deleted (here, or on another replica of a shared catalog).
    Deleted,
    ShuttingDown,
}

impl Unmounting {
    /// Stops the mount's calls in flight; the first reason given is the one they are told.
    pub fn end(&self, why: Unmounted) {
        let _ = self.why.set(why);
        self.token.cancel();
    }

    async fn ended(&self) -> Unmounted {
        self.token.cancelled().await;
        self.why.get().copied().unwrap_or(Unmounted::Deleted)
    }
}

/// The rmcp handler for one mounted server; tools are data, not code, so this is hand-written.
pub struct McpHandler {
    server: Arc<Server>,
    caller: Caller,
    code_mode: Arc<CodeMode>,
    elicitation: Arc<UrlElicitationClients>,
    unmounting: Unmounting,
    /// The `code_execution` tool as last listed, with the generations it was built from: its
    /// description declares the tools of other servers, which may have changed since.
    code_tool: Mutex<Option<(ListingKey, Tool)>>,
}

/// The generation each server a script can reach serves (see `CodeMode::listing_key`).
type ListingKey = Vec<(ServerId, i64)>;

impl McpSettings {
    pub fn new(config: &Config, caller: Caller, code_mode: Arc<CodeMode>) -> McpSettings {
        McpSettings {
            allowed_hosts: config.mcp_allowed_hosts(),
            allowed_origins: config.server.allowed_origins.clone(),
            max_body_bytes: config.server.max_body_bytes,
            caller,
            code_mode,
            elicitation: Arc::default(),
        }
    }

    pub fn code_mode(&self) -> &Arc<CodeMode> {
        &self.code_mode
    }
}

impl McpEndpoint {
    /// The endpoint of `server`, listing its [`Server::listing`]; `unmounting` stops its calls.
    ///
    /// rmcp is not given that token: cancelled, it would drop a request in flight and answer it
    /// with a bare 500, whose body hosts do not show. The handler watches it instead and answers
    /// the calls it stops with a JSON-RPC error that says why (see [`McpHandler::stopped`]).
    pub fn new(server: Arc<Server>, settings: &McpSettings, unmounting: Unmounting) -> McpEndpoint {
        let handler = Arc::new(McpHandler {
            server,
            caller: settings.caller.clone(),
            code_mode: settings.code_mode.clone(),
            elicitation: settings.elicitation.clone(),
            unmounting,
            code_tool: Mutex::new(None),
        });
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_allowed_hosts(settings.allowed_hosts.clone())
            .with_allowed_origins(settings.allowed_origins.clone())
            .with_max_request_body_bytes(settings.max_body_bytes);
        // Stateless mode builds the handler per request: hand out clones of one Arc.
        let service = StreamableHttpService::new(
            {
                let handler = handler.clone();
                move || Ok(handler.clone())
            },
            Arc::new(NeverSessionManager::default()),
            config,
        );
        McpEndpoint { service, handler }
    }

    /// The server this endpoint answers for.
    pub fn server(&self) -> &Arc<Server> {
        &self.handler.server
    }

    /// Answers one HTTP request to this server's MCP endpoint.
    ///
    /// rmcp's future is boxed, so that it does not make the future of every request that can
    /// reach this (a tool call answered by [`McpEndpoint::call_tool_directly`] included) as large
    /// as rmcp's own: a call parked on a slow API holds its request's whole future.
    pub async fn handle(&self, request: Request) -> Response {
        Box::pin(self.service.handle(request)).await.map(axum::body::Body::new)
    }

    /// Answers a `tools/call` [`direct_tool_call`] found, as rmcp would: the
    /// handler's result or error as a JSON-RPC response, 200 and JSON (the handler sends no
    /// notifications, so rmcp never switches such a call to an event stream), `resultType`
    /// left out as it is for revisions before 2026-07-28.
    ///
    /// The call runs in the HTTP request's own future: a client that goes away drops it, which
    /// stops the call as rmcp's cancellation of its task would.
    pub async fn call_tool_directly(&self, parts: &Parts, call: DirectToolCall) -> Response {
        let DirectToolCall { id, params, meta } = call;
        let from = CallRequest { parts: Some(parts), meta: &meta, cancelled: std::future::pending() };
        let message = match self.handler.answer_call(params, from).await {
            Ok(response) => {
                let mut result = ServerResult::from(response);
                result.strip_result_type_for_legacy_peer();
                ServerJsonRpcMessage::response(result, id)
            }
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        match serde_json::to_vec(&message) {
            Ok(body) => ([(CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response(),
            Err(error) => {
                tracing::error!(server_id = %self.handler.server.id, %error, "a tools/call answer could not be serialised");
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }
        }
    }
}

/// A single `tools/call` that [`McpEndpoint::handle`] would answer with a JSON response and
/// that the mount can answer itself ([`McpEndpoint::call_tool_directly`]); `None` for every
/// other request, which goes to rmcp.
///
/// rmcp answers a stateless request by building a one-message transport, a peer and a
/// service task around the handler, and keeps them while the call runs: about 26 KB per
/// call, which thousands of calls parked on a slow API add up. A `tools/call` needs none of
/// it, so it is answered here, when rmcp's own checks would all pass and its answer would
/// be the handler's result as JSON:
///
/// * `Accept` as `api::mcp::transport` completes it, a `Host` that parses (the route has
///   checked it against `[server] allowed_hosts` with rmcp's rule) and no `Origin` (rmcp
///   checks that one);
/// * a protocol revision from before 2026-07-28, in the `MCP-Protocol-Version` header or
///   none (2025-03-26), and no `protocolVersion` in the request's `_meta`: later revisions
///   negotiate per request and check more headers, which rmcp does;
/// * a body that rmcp reads as one `tools/call` request.
pub fn direct_tool_call(headers: &HeaderMap, body: &[u8]) -> Option<DirectToolCall> {
    let mut accept = headers.get_all(ACCEPT).iter();
    let host = headers.get(HOST).and_then(|host| host.to_str().ok());
    if accept.next() != Some(&ACCEPT_BOTH)
        || accept.next().is_some()
        || host.is_none_or(|host| Authority::try_from(host).is_err())
        || headers.contains_key(ORIGIN)
    {
        return None;
    }
    if let Some(revision) = headers.get(PROTOCOL_VERSION_HEADER) {
        let revision = revision.to_str().ok()?;
        let known = ProtocolVersion::KNOWN_VERSIONS.iter().any(|known| known.as_str() == revision);
        if !known || revision >= ProtocolVersion::V_2026_07_28.as_str() {
            return None;
        }
    }
    let ClientJsonRpcMessage::Request(JsonRpcRequest { id, mut request, .. }) = serde_json::from_slice(body).ok()?
    else {
        return None;
    };
    // Where rmcp's service loop puts the request's `_meta`: in the handler's context.
    let meta = std::mem::take(request.get_meta_mut());
    match request {
        ClientRequest::CallToolRequest(call) if meta.protocol_version().is_none() => {
            Some(DirectToolCall { id, params: call.params, meta })
        }
        _ => None,
    }
}

/// A `tools/call` request [`McpEndpoint::call_tool_directly`] answers without rmcp.
pub struct DirectToolCall {
    id: RequestId,
    params: CallToolRequestParams,
    meta: RequestMetaObject,
}

/// The MCP tool definition: name, title, description, schemas and annotations; never the
/// handler. Takes the spec by value, so the schemas are moved into the definition, not copied.
///
/// `readOnlyHint` is always sent: MCP reads a missing hint as `false`, but clients that guard
/// against writes often let a tool without annotations through, so a tool registered without
/// the hint is listed with `readOnlyHint: false`. A tool listed as read-only can only send
/// GET, HEAD and OPTIONS requests (`serve::egress`), so the hint is a guarantee, not a claim.
pub fn mcp_tool(spec: ToolSpec) -> Tool {
    let mut tool = Tool::new(spec.name, spec.description, Arc::new(spec.input_schema));
    tool.title = spec.title;
    tool.output_schema = spec.output_schema.map(Arc::new);
    let mut annotations = spec.annotations.unwrap_or_default();
    annotations.entry("readOnlyHint").or_insert(Value::Bool(false));
    // Annotations were validated at registration; a tool without them beats no tool.
    tool.annotations = serde_json::from_value(Value::Object(annotations)).ok();
    tool
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        // `name` is the identifier, `title` what hosts show (MCP 2025-06-18 and later).
        let mut info = Implementation::new(self.server.id.to_string(), env!("CARGO_PKG_VERSION"));
        info.title = Some(self.server.name.clone());
        info.description = self.server.description.clone();
        let config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(info);
        match &self.server.description {
            Some(description) => config.with_instructions(description.clone()),
            None => config,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self.server.listing.clone();
        if self.code_mode.enabled_for(&self.server) && self.server.tool(code_mode::TOOL_NAME).is_none() {
            tools.push(self.code_tool().await);
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// No logging capability is offered (handlers' console output goes to the call log), so
    /// there is nothing to set; the refusal says so instead of rmcp's bare method name.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tracing::debug!(server_id = %self.server.id, "logging/setLevel refused: no logging capability");
        self.caller.metrics().record_client_error(Some(self.server.id.as_str()), ClientMistake::UnsupportedMethod);
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            "this server sends no log messages (it does not offer the logging capability), so logging/setLevel \
             has nothing to set; handlers' console output is in the daemon's call log",
            None,
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.server.listing.iter().find(|t| t.name == name).cloned()
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        if let Ok(Some(grant)) = self.admission(context.extensions.get::<Parts>()) {
            let declared =
                request.capabilities.elicitation.as_ref().is_some_and(|elicitation| elicitation.url.is_some());
            self.elicitation.record(&grant, declared);
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp runs this in its own task and cancels `context.ct` when the client goes away
        // (disconnect, notifications/cancelled); dropping the call then frees its isolate and
        // stops its fetches instead of finishing work nobody will read.
        let from = CallRequest {
            parts: context.extensions.get::<Parts>(),
            meta: &context.meta,
            cancelled: context.ct.cancelled(),
        };
        self.answer_call(request, from).await
    }
}

/// What a tool call needs of the request that brought it: the HTTP request's parts (the door's
/// admission, the caller's key, the `traceparent` header), the request's `_meta`, and a future
/// that completes when the client has gone.
struct CallRequest<'a, Cancelled> {
    parts: Option<&'a Parts>,
    meta: &'a RequestMetaObject,
    cancelled: Cancelled,
}

impl McpHandler {
    /// Answers `tools/call`, for rmcp's `call_tool` and for [`McpEndpoint::call_tool_directly`].
    async fn answer_call(
        &self,
        request: CallToolRequestParams,
        from: CallRequest<'_, impl Future<Output = ()>>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        if request.name == code_mode::TOOL_NAME && self.server.tool(code_mode::TOOL_NAME).is_none() {
            return self.run_script(arguments, from).await;
        }
        let caller = from.parts.and_then(|parts| parts.extensions.get::<CallerKey>()).cloned();
        let origin = Origin {
            grant: self.admission(from.parts)?,
            caller,
            trace_parent: trace_parent(request.meta.as_ref(), from.meta, from.parts),
            ..Origin::from(Via::Mcp)
        };
        let call = self.server.call(&self.caller, &request.name, arguments, origin);
        let outcome = tokio::select! {
            outcome = call => outcome,
            () = from.cancelled => {
                return Err(ErrorData::internal_error("the request was cancelled by the client", None));
            }
            why = self.unmounting.ended() => return Err(self.stopped(why)),
        };
        match outcome {
            Ok(output) => Ok(call_tool_result(output.result).into()),
            Err(CallError::UnknownTool(name)) => {
                tracing::debug!(server_id = %self.server.id, tool = %name, "tools/call of an unknown tool");
                self.caller.metrics().record_client_error(Some(self.server.id.as_str()), ClientMistake::UnknownTool);
                Err(ErrorData::invalid_params(
                    format!("unknown tool {name:?}; tools/list shows the tools of this server"),
                    None,
                ))
            }
            // Refused before any work: a JSON-RPC error, which a host retries later rather than a
            // tool error a model would read as the tool failing.
            Err(CallError::Limited(refusal)) => Err(ErrorData::new(
                rmcp::model::ErrorCode(SERVER_ERROR),
                refusal.to_string(),
                Some(serde_json::json!({
                    "code": "rate_limited",
                    "limit": refusal.limit,
                    "retry_after_seconds": refusal.retry_after_seconds(),
                })),
            )),
            Err(CallError::NotConnected(NotConnected::Connect(link)))
                if self.declares_url_elicitation(from.meta, from.parts) =>
            {
                Err(url_elicitation_required(&link))
            }
            // Argument and capacity problems are tool errors, so the model can read them and adapt;
            // so is a connect link for a host that cannot open one itself: the person reads it.
            Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into()),
        }
    }
}

/// The trace a request continues: `params._meta.traceparent` (the MCP convention), else the HTTP
/// `traceparent` header. A value that is not a valid W3C trace context is ignored and the call
/// starts a trace of its own, as W3C Trace Context asks (a trace context never fails a request).
/// (rmcp may hand the request's `_meta` on in the parameters or in the context.)
fn trace_parent(
    params_meta: Option<&RequestMetaObject>,
    request_meta: &RequestMetaObject,
    parts: Option<&Parts>,
) -> Option<TraceParent> {
    let in_meta = |meta: &RequestMetaObject| meta.get(TRACEPARENT).and_then(Value::as_str).and_then(TraceParent::parse);
    params_meta
        .and_then(in_meta)
        .or_else(|| in_meta(request_meta))
        .or_else(|| parts?.headers.get(TRACEPARENT)?.to_str().ok().and_then(TraceParent::parse))
}

impl McpHandler {
    /// Whether the client making this request takes URL-mode elicitations (see
    /// [`UrlElicitationClients`]).
    fn declares_url_elicitation(&self, meta: &RequestMetaObject, parts: Option<&Parts>) -> bool {
        if let Some(capabilities) = meta.client_capabilities() {
            return capabilities.elicitation.is_some_and(|elicitation| elicitation.url.is_some());
        }
        match self.admission(parts) {
            Ok(Some(grant)) => self.elicitation.declared(&grant),
            _ => false,
        }
    }

    /// How the HTTP door let this request in (`api/mcp.rs` puts it in the HTTP request's
    /// extensions, which rmcp hands on with the request's parts): the OAuth grant to check every
    /// call against, or none to check. A request without it is refused, so a path into the mount
    /// that forgets it fails closed.
    fn admission(&self, parts: Option<&Parts>) -> Result<Option<Arc<Grant>>, ErrorData> {
        match parts.and_then(|parts| parts.extensions.get::<Admission>()) {
            Some(Admission::Unscoped) => Ok(None),
            Some(Admission::Granted(grant)) => Ok(Some(grant.clone())),
            None => {
                tracing::error!(server_id = %self.server.id, "a tool call reached the mount without its door's admission");
                Err(ErrorData::internal_error("the request was not admitted by the server's door", None))
            }
        }
    }

    /// The answer to a call (or script) stopped because its server is no longer served here.
    ///
    /// A JSON-RPC error rather than a tool result with `isError`: the tool did not fail, the
    /// server it belongs to went away, and a host hands a tool error to the model as the tool's
    /// output, inviting it to try the tool again with other arguments, while a JSON-RPC error
    /// reads as the request itself failing, which it did. rmcp sends it as the request's answer
    /// with HTTP 200; a 5xx would lose the message, since hosts show only the status of one.
    fn stopped(&self, why: Unmounted) -> ErrorData {
        let message = match why {
            Unmounted::Deleted => format!(
                "server {:?} was deleted while this call was running: the call was stopped before it finished \
                 (requests it had already sent may have reached their APIs), and the server is no longer served",
                self.server.id.as_str()
            ),
            Unmounted::ShuttingDown => "the daemon is shutting down: the call was stopped before it finished \
                 (requests it had already sent may have reached their APIs); retry it once the daemon is back"
                .to_string(),
        };
        ErrorData::new(rmcp::model::ErrorCode(SERVER_ERROR), message, None)
    }

    /// The `code_execution` tool, rebuilt when a server its scripts can reach has changed.
    async fn code_tool(&self) -> Tool {
        let key = self.code_mode.listing_key(&self.server);
        if let Some((built_for, tool)) = lock(&self.code_tool).as_ref()
            && *built_for == key
        {
            return tool.clone();
        }
        let description = self.code_mode.tool_description(&self.server).await;
        let mut tool = Tool::new(code_mode::TOOL_NAME, description, Arc::new(code_mode::declarations::input_schema()));
        tool.title = Some("Run a script that calls tools".into());
        tool.output_schema = Some(Arc::new(code_mode::declarations::output_schema()));
        let mut annotations = rmcp::model::ToolAnnotations::default();
        annotations.read_only_hint = Some(false);
        annotations.open_world_hint = Some(true);
        tool.annotations = Some(annotations);
        *lock(&self.code_tool) = Some((key, tool.clone()));
        tool
    }

    async fn run_script(
        &self,
        arguments: Value,
        from: CallRequest<'_, impl Future<Output = ()>>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(refusal) = self.code_mode.refusal(&self.server) {
            self.caller.metrics().record_client_error(Some(self.server.id.as_str()), ClientMistake::UnknownTool);
            return Err(ErrorData::invalid_params(refusal, None));
        }
        let request = match serde_path_to_error::deserialize::<_, ScriptRequest>(arguments) {
            Ok(request) => request,
            Err(error) => {
                let message = format!(
                    "invalid {} arguments: {error}; send {{\"code\": \"...\", \"input\"?: any, \"options\"?: \
                     {{\"timeout_ms\", \"max_tool_calls\", \"allowed_servers\"}}}}",
                    code_mode::TOOL_NAME
                );
                return Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
            }
        };
        let run = self.code_mode.run(&self.server, request, Via::Mcp, self.admission(from.parts)?);
        let result = tokio::select! {
            result = run => result,
            () = from.cancelled => {
                return Err(ErrorData::internal_error("the request was cancelled by the client", None));
            }
            why = self.unmounting.ended() => return Err(self.stopped(why)),
        };
        Ok(call_tool_result(ToolResult::from(result)).into())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The MCP result for a tool result: what deserialising its JSON (`content`, `structuredContent`,
/// `isError`) would give, without building that JSON object (and copying the content into it)
/// first.
/// The `-32042` error naming the link a caller must open (MCP 2025-11-25, URL-mode elicitation):
/// the host shows the message and offers to open the URL, outside the model's context.
fn url_elicitation_required(link: &ConnectLink) -> ErrorData {
    let data = serde_json::json!({
        "elicitations": [{
            "mode": "url",
            "elicitationId": link.elicitation_id,
            "url": link.url,
            "message": link.message,
        }]
    });
    ErrorData::new(rmcp::model::ErrorCode(URL_ELICITATION_REQUIRED), link.message.clone(), Some(data))
}

fn call_tool_result(result: ToolResult) -> CallToolResult {
    let mut mcp = match serde_json::from_value::<Vec<ContentBlock>>(Value::Array(result.content)) {
        Ok(content) => CallToolResult::success(content),
        Err(e) => {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "the tool returned a result that is not valid MCP content: {e}"
            ))]);
        }
    };
    mcp.structured_content = result.structured_content;
    mcp.is_error = Some(result.is_error);
    // Protocol 2026-07-28 requires `resultType` (the constructors set it); rmcp strips it again
    // for clients on older protocol versions.
    debug_assert_eq!(mcp.result_type, Some(rmcp::model::ResultType::COMPLETE));
    mcp
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A tool result as MCP's `CallToolResult` JSON, as the admin API sends it.
    fn result_json(result: ToolResult) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("content".into(), Value::Array(result.content));
        if let Some(structured) = result.structured_content {
            object.insert("structuredContent".into(), structured);
        }
        object.insert("isError".into(), Value::Bool(result.is_error));
        Value::Object(object)
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    const CALL: &str = r#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "hi", "arguments": {"a": 1}, "_meta": {"progressToken": 9}}}"#;
    const SDK: [(&str, &str); 3] = [
        ("host", "127.0.0.1:8080"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    #[test]
    fn only_calls_rmcp_would_answer_as_json_without_more_checks_are_answered_directly() {
        let call = direct_tool_call(&headers(&SDK), CALL.as_bytes()).expect("what SDK clients send");
        assert_eq!(call.id, RequestId::Number(4));
        assert_eq!(call.params.name, "hi");
        assert_eq!(call.params.arguments, Some(serde_json::from_value(json!({"a": 1})).unwrap()));
        assert_eq!(
            call.meta.get("progressToken"),
            Some(&json!(9)),
            "the _meta reaches the handler as rmcp hands it on"
        );
        assert!(direct_tool_call(&headers(&SDK[..2]), CALL.as_bytes()).is_some(), "no revision header: 2025-03-26");

        let rmcp = |extra: &[(&'static str, &'static str)], body: &str| {
            let mut all = headers(&SDK);
            for (name, value) in extra {
                all.insert(*name, HeaderValue::from_static(value));
            }
            direct_tool_call(&all, body.as_bytes()).is_none()
        };
        assert!(rmcp(&[("origin", "http://localhost:3000")], CALL), "rmcp checks the Origin");
        assert!(rmcp(&[("accept", "text/event-stream, application/json")], CALL));
        assert!(rmcp(&[("host", "bad host")], CALL), "rmcp refuses a Host it cannot parse");
        assert!(rmcp(&[("mcp-protocol-version", "2026-07-28")], CALL), "negotiated per request");
        assert!(rmcp(&[("mcp-protocol-version", "1999-01-01")], CALL), "rmcp refuses unknown revisions");
        let with_version = r#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "hi", "_meta": {"io.modelcontextprotocol/protocolVersion": "2025-06-18"}}}"#;
        assert!(rmcp(&[], with_version), "a revision in _meta is negotiated per request");
        for other in [
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#,
            r#"{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}"#,
            r#"[{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hi"}}]"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call""#,
        ] {
            assert!(rmcp(&[], other), "{other}");
        }
    }

    #[test]
    fn results_convert_as_their_json_would_deserialise() {
        let results = [
            ToolResult::text("hello", false),
            ToolResult::text("it broke", true),
            ToolResult {
                content: vec![json!({"type": "text", "text": "{\"a\": 1}"})],
                structured_content: Some(json!({"a": 1, "nested": [1, {"b": null}]})),
                is_error: false,
            },
            ToolResult {
                content: vec![
                    json!({"type": "image", "data": "aGk=", "mimeType": "image/png"}),
                    json!({"type": "text", "text": "x", "annotations": {"audience": ["user"], "priority": 0.5}}),
                ],
                structured_content: Some(Value::Null),
                is_error: false,
            },
            ToolResult { content: Vec::new(), structured_content: None, is_error: false },
            ToolResult { content: vec![json!({"type": "no such type"})], structured_content: None, is_error: false },
        ];
        for result in results {
            let expected = match serde_json::from_value::<CallToolResult>(result_json(result.clone())) {
                Ok(mut expected) => {
                    expected.result_type = Some(rmcp::model::ResultType::COMPLETE);
                    expected
                }
                Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                    "the tool returned a result that is not valid MCP content: {e}"
                ))]),
            };
            assert_eq!(call_tool_result(result.clone()), expected, "{result:?}");
        }
    }
}
