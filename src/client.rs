//! The admin API client behind the `mcpbootd` client commands: one method per route, taking and
//! returning the daemon's own body types (`api::model`), errors shaped by what the command line
//! does with them (exit 1, 3).
//!
//! Bodies are encoded and decoded with `serde_json` (the library's reqwest has no `json`
//! feature). Every failure ends up in [`ClientError`]: the API's own `{"error": {code, message}}`,
//! a daemon that cannot be reached, or an answer that is not the admin API's JSON.

pub mod commands;
pub mod output;
pub mod progress;

use std::fmt;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sse_stream::{Sse, SseStream};
use url::Url;

use crate::api::error::ErrorCode;
use crate::api::model::{
    ActivateRequest, AuthSet, CallList, CallRequest, CallResult, ConnectionList, CredentialList, CredentialView,
    DriftReport, ErrorBody, GenerationStarted, LimitsView, RegenerateRequest, Registered, Registration, RejectRequest,
    ScriptRequest, ScriptResult, ServerList, ServerView, ToolsetRegistration, VersionChanged, VersionDiff, VersionList,
};
use crate::toolset::AuthSetting;

/// For requests without a body.
const NO_BODY: Option<&()> = None;

/// The default daemon address, the same as `[server] listen`'s default.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";
/// The environment variable holding the admin token (the daemon accepts it too).
pub const TOKEN_ENV: &str = "MCPBOOTD_ADMIN_TOKEN";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request did not produce the JSON the command wanted.
#[derive(Debug)]
pub enum ClientError {
    /// The daemon answered with an error status; `code` and `message` come from its error body
    /// (or describe the status when the body was not the API's error shape).
    Api { status: u16, code: String, message: String },
    /// No answer: connection refused, unknown host, reset, timeout.
    Unreachable { url: String, origin: String, cause: String },
    /// An answer that is not the admin API's JSON (something else listens at the URL).
    Protocol(String),
}

impl ClientError {
    /// 1 when the daemon answered, 3 when it could not be reached.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Api { .. } | ClientError::Protocol(_) => 1,
            ClientError::Unreachable { .. } => 3,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Api { status, code, message } => write!(f, "{message} ({code}, HTTP {status})"),
            ClientError::Unreachable { url, origin, cause } => write!(
                f,
                "cannot reach mcpbootd at {url} ({origin}): {cause}; is the daemon running (`mcpbootd serve`), \
                 and do --url / MCPBOOTD_URL point at it?"
            ),
            ClientError::Protocol(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ClientError {}

/// A client for one daemon's `/admin/*` routes.
pub struct AdminClient {
    base: Url,
    origin: String,
    token: Option<HeaderValue>,
    http: reqwest::Client,
}

impl AdminClient {
    /// `origin` says where `base` came from ("from --url", "from MCPBOOTD_URL", "the default"),
    /// for the message when the daemon cannot be reached. An empty `token` sends none.
    pub fn new(base: Url, origin: impl Into<String>, token: Option<&str>) -> Result<AdminClient, ClientError> {
        crate::install_crypto_provider();
        let token = match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => None,
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    ClientError::Protocol(format!("{TOKEN_ENV} contains characters a header cannot carry"))
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("mcpbootd-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Protocol(format!("cannot build the HTTP client: {e}")))?;
        Ok(AdminClient { base, origin: origin.into(), token, http })
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    /// Where MCP hosts reach server `id`.
    pub fn mcp_url(&self, id: &str) -> String {
        self.endpoint(&["servers", id, "mcp"]).to_string()
    }

    /// `POST /admin/servers`: a prompt (202) or a toolset (201) registration.
    pub async fn register(&self, body: &Registration) -> Result<Registered, ClientError> {
        self.json(Method::POST, &["admin", "servers"], &[], Some(body)).await
    }

    /// `GET /admin/servers`
    pub async fn list_servers(&self) -> Result<ServerList, ClientError> {
        self.json(Method::GET, &["admin", "servers"], &[], NO_BODY).await
    }

    /// `GET /admin/servers/{id}`
    pub async fn server(&self, id: &str) -> Result<ServerView, ClientError> {
        self.json(Method::GET, &["admin", "servers", id], &[], NO_BODY).await
    }

    /// `DELETE /admin/servers/{id}`; the API answers 204 without a body.
    pub async fn delete_server(&self, id: &str) -> Result<(), ClientError> {
        self.send_json(Method::DELETE, &["admin", "servers", id], &[], NO_BODY).await.map(drop)
    }

    /// `PUT /admin/servers/{id}/auth`
    pub async fn put_auth(&self, id: &str, setting: &AuthSetting) -> Result<AuthSet, ClientError> {
        self.json(Method::PUT, &["admin", "servers", id, "auth"], &[], Some(setting)).await
    }

    /// `DELETE /admin/servers/{id}/auth`
    pub async fn delete_auth(&self, id: &str) -> Result<AuthSet, ClientError> {
        self.json(Method::DELETE, &["admin", "servers", id, "auth"], &[], NO_BODY).await
    }

    /// `POST /admin/servers/{id}/regenerate`
    pub async fn regenerate(&self, id: &str, body: &RegenerateRequest) -> Result<GenerationStarted, ClientError> {
        self.json(Method::POST, &["admin", "servers", id, "regenerate"], &[], Some(body)).await
    }

    /// `GET /admin/servers/{id}/versions`
    pub async fn versions(&self, id: &str) -> Result<VersionList, ClientError> {
        self.json(Method::GET, &["admin", "servers", id, "versions"], &[], NO_BODY).await
    }

    /// `GET /admin/servers/{id}/versions/{from}/diff/{to}`
    pub async fn diff(&self, id: &str, from: i64, to: i64) -> Result<VersionDiff, ClientError> {
        let (from, to) = (from.to_string(), to.to_string());
        self.json(Method::GET, &["admin", "servers", id, "versions", &from, "diff", &to], &[], NO_BODY).await
    }

    /// `POST /admin/servers/{id}/versions/{n}/approve`
    pub async fn approve(&self, id: &str, version: i64) -> Result<VersionChanged, ClientError> {
        let version = version.to_string();
        self.json(Method::POST, &["admin", "servers", id, "versions", &version, "approve"], &[], NO_BODY).await
    }

    /// `POST /admin/servers/{id}/versions/{n}/reject`
    pub async fn reject(&self, id: &str, version: i64, body: &RejectRequest) -> Result<VersionChanged, ClientError> {
        let version = version.to_string();
        self.json(Method::POST, &["admin", "servers", id, "versions", &version, "reject"], &[], Some(body)).await
    }

    /// `POST /admin/servers/{id}/activate`
    pub async fn activate(&self, id: &str, version: i64) -> Result<VersionChanged, ClientError> {
        self.json(Method::POST, &["admin", "servers", id, "activate"], &[], Some(&ActivateRequest { version })).await
    }

    /// `POST /admin/servers/{id}/check-drift`
    pub async fn check_drift(&self, id: &str) -> Result<DriftReport, ClientError> {
        self.json(Method::POST, &["admin", "servers", id, "check-drift"], &[], NO_BODY).await
    }

    /// `POST /admin/servers/{id}/tools/{tool}/call`
    pub async fn call_tool(&self, id: &str, tool: &str, arguments: Value) -> Result<CallResult, ClientError> {
        let body = CallRequest { arguments };
        self.json(Method::POST, &["admin", "servers", id, "tools", tool, "call"], &[], Some(&body)).await
    }

    /// `POST /admin/servers/{id}/code`
    pub async fn run_code(&self, id: &str, request: &ScriptRequest) -> Result<ScriptResult, ClientError> {
        self.json(Method::POST, &["admin", "servers", id, "code"], &[], Some(request)).await
    }

    /// `GET /admin/servers/{id}/calls` with filters (`limit`, `tool`, `outcome`, `since`, …)
    pub async fn calls(&self, id: &str, query: &[(&str, &str)]) -> Result<CallList, ClientError> {
        self.json(Method::GET, &["admin", "servers", id, "calls"], query, NO_BODY).await
    }

    /// `PUT /admin/servers/{id}/credentials/{name}` (the body holds the value: built from stdin).
    pub async fn put_credential(&self, id: &str, name: &str, body: &Value) -> Result<CredentialView, ClientError> {
        self.json(Method::PUT, &["admin", "servers", id, "credentials", name], &[], Some(body)).await
    }

    /// `GET /admin/servers/{id}/credentials`
    pub async fn credentials(&self, id: &str) -> Result<CredentialList, ClientError> {
        self.json(Method::GET, &["admin", "servers", id, "credentials"], &[], NO_BODY).await
    }

    /// `GET /admin/servers/{id}/limits`
    pub async fn limits(&self, id: &str) -> Result<LimitsView, ClientError> {
        self.json(Method::GET, &["admin", "servers", id, "limits"], &[], NO_BODY).await
    }

    /// `PUT /admin/servers/{id}/limits`
    pub async fn put_limits(&self, id: &str, limits: &crate::toolset::ServerLimits) -> Result<LimitsView, ClientError> {
        self.json(Method::PUT, &["admin", "servers", id, "limits"], &[], Some(limits)).await
    }

    /// `GET /admin/servers/{id}/connections`
    pub async fn connections(&self, id: &str) -> Result<ConnectionList, ClientError> {
        self.json(Method::GET, &["admin", "servers", id, "connections"], &[], NO_BODY).await
    }

    /// `DELETE /admin/servers/{id}/connections/{connection}`; 204 without a body.
    pub async fn delete_connection(&self, id: &str, connection: &str) -> Result<(), ClientError> {
        self.send_json(Method::DELETE, &["admin", "servers", id, "connections", connection], &[], NO_BODY)
            .await
            .map(drop)
    }

    /// `DELETE /admin/servers/{id}/credentials/{name}`; 204 without a body.
    pub async fn delete_credential(&self, id: &str, name: &str) -> Result<(), ClientError> {
        self.send_json(Method::DELETE, &["admin", "servers", id, "credentials", name], &[], NO_BODY).await.map(drop)
    }

    /// `GET /admin/servers/{id}/export`
    pub async fn export(&self, id: &str) -> Result<ToolsetRegistration, ClientError> {
        self.json(Method::GET, &["admin", "servers", id, "export"], &[], NO_BODY).await
    }

    /// `GET /admin/servers/{id}/events` (Server-Sent Events). `None` when the daemon does not
    /// serve the route (older daemons answer 404), so the caller can poll instead.
    pub async fn events(&self, id: &str) -> Result<Option<EventStream<'_>>, ClientError> {
        let url = self.endpoint(&["admin", "servers", id, "events"]);
        let request = self.request(Method::GET, url).header(ACCEPT, "text/event-stream");
        let response = self.send(request).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(self.error_from(response).await);
        }
        let is_event_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_event_stream {
            return Ok(None);
        }
        Ok(Some(EventStream { events: Box::pin(SseStream::from_bytes_stream(response.bytes_stream())), client: self }))
    }

    /// `base` + the given path segments (each percent-encoded), keeping any path prefix of `base`.
    fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        let mut request = self.http.request(method, url);
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, token.clone());
        }
        request
    }

    async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        request.send().await.map_err(|e| self.transport_error(&e))
    }

    /// Sends `body` (if any) and reads the answer as `T`.
    async fn json<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let bytes = self.send_json(method, segments, query, body).await?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| {
            ClientError::Protocol(format!(
                "the answer from {} is not JSON; is this an mcpbootd daemon? ({})",
                self.base,
                snippet(&bytes)
            ))
        })?;
        serde_path_to_error::deserialize(value).map_err(|e| {
            ClientError::Protocol(format!(
                "the answer from {} is not what this client expects ({e}); is the daemon the same version?",
                self.base
            ))
        })
    }

    /// Sends `body` (if any) as JSON and returns the body of a successful answer.
    async fn send_json<B: Serialize>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<bytes::Bytes, ClientError> {
        let mut url = self.endpoint(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self.request(method, url).header(ACCEPT, "application/json");
        if let Some(body) = body {
            let bytes = serde_json::to_vec(body)
                .map_err(|e| ClientError::Protocol(format!("cannot encode the request: {e}")))?;
            request = request.header(CONTENT_TYPE, "application/json").body(bytes);
        }
        let response = self.send(request).await?;
        if !response.status().is_success() {
            return Err(self.error_from(response).await);
        }
        response.bytes().await.map_err(|e| self.transport_error(&e))
    }

    /// The API's error object, or a description of the status when the body is something else
    /// (a proxy's HTML page, an empty 502).
    async fn error_from(&self, response: Response) -> ClientError {
        let status = response.status();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => return self.transport_error(&e),
        };
        match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(ErrorBody { error }) => ClientError::Api {
                status: status.as_u16(),
                code: error.code.to_string(),
                message: for_the_command_line(error.code, error.message),
            },
            Err(_) => {
                let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
                let body = if bytes.is_empty() { String::new() } else { format!(": {}", snippet(&bytes)) };
                ClientError::Api {
                    status: status.as_u16(),
                    code: "unexpected_response".into(),
                    message: format!("{} answered {reason}{body}", self.base),
                }
            }
        }
    }

    fn transport_error(&self, error: &reqwest::Error) -> ClientError {
        // reqwest's own message is "error sending request for url (...)"; the useful part
        // ("Connection refused", "dns error") is at the bottom of the source chain.
        let mut cause: &dyn std::error::Error = error;
        while let Some(source) = cause.source() {
            cause = source;
        }
        let cause = if error.is_timeout() { "timed out".to_string() } else { cause.to_string() };
        ClientError::Unreachable { url: self.base.to_string(), origin: self.origin.clone(), cause }
    }
}

/// One Server-Sent Event; `event` is `"message"` when the stream named none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

type SseEvents = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// An open `events` stream: Server-Sent Events parsed (by `sse-stream`) off the response body
/// as they arrive.
pub struct EventStream<'a> {
    events: SseEvents,
    client: &'a AdminClient,
}

impl EventStream<'_> {
    /// The next event, or `None` when the daemon closed the stream. Cancel-safe: the parser's
    /// state lives in the stream, and an event is only taken in the poll that returns it.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, ClientError> {
        use futures_util::StreamExt;
        while let Some(item) = self.events.next().await {
            match item {
                // Comments (keep-alives) and `retry:`-only blocks carry no data.
                Ok(Sse { data: None, .. }) => continue,
                Ok(Sse { event, data: Some(data), .. }) => {
                    let event = event.filter(|e| !e.is_empty()).unwrap_or_else(|| "message".into());
                    return Ok(Some(SseEvent { event, data }));
                }
                Err(sse_stream::Error::Body(cause)) => {
                    let cause = std::iter::successors(Some(&*cause as &dyn std::error::Error), |e| e.source())
                        .last()
                        .map(|e| e.to_string())
                        .unwrap_or_default();
                    return Err(ClientError::Unreachable {
                        url: self.client.base.to_string(),
                        origin: self.client.origin.clone(),
                        cause,
                    });
                }
                Err(error) => return Err(ClientError::Protocol(format!("the event stream is malformed: {error}"))),
            }
        }
        Ok(None)
    }
}

/// The start of a body, for messages about unexpected answers.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let mut cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// Parses `--url` / `MCPBOOTD_URL`: an http(s) base URL; `host:port` alone means http.
pub fn parse_base_url(raw: &str) -> Result<Url, InvalidBaseUrl> {
    let raw = raw.trim();
    // `host` or `host:port` alone means http; `mailto:x` and friends stay what they are (refused).
    let bare_host = !raw.contains("://")
        && raw.split_once(':').is_none_or(|(_, rest)| rest.starts_with(|c: char| c.is_ascii_digit()));
    let with_scheme = if bare_host { format!("http://{raw}") } else { raw.to_string() };
    let url = Url::parse(&with_scheme).map_err(|cause| InvalidBaseUrl::NotUrl { raw: raw.to_string(), cause })?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() || url.host().is_none() {
        return Err(InvalidBaseUrl::NotHttp { raw: raw.to_string() });
    }
    Ok(url)
}

/// Why [`parse_base_url`] refused a daemon URL; `raw` is the URL as given, trimmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBaseUrl {
    #[error("{raw:?} is not a URL ({cause}); expected e.g. {DEFAULT_URL}")]
    NotUrl { raw: String, cause: url::ParseError },
    #[error("{raw:?} is not an http:// or https:// URL; expected e.g. {DEFAULT_URL}")]
    NotHttp { raw: String },
}

/// The daemon's message as a command-line user can act on it: its hints name HTTP routes and
/// headers (it also answers curl), the command line names its own commands and variables.
fn for_the_command_line(code: ErrorCode, message: String) -> String {
    match code {
        ErrorCode::Unauthorized => format!(
            "the daemon requires its admin token: set {TOKEN_ENV} to the daemon's [admin] token \
             (export {TOKEN_ENV}=...; on a systemd host it is in the service's EnvironmentFile)"
        ),
        ErrorCode::Forbidden => format!("{TOKEN_ENV} is not the daemon's admin token ([admin] token); check its value"),
        _ => {
            let message = message.replace("GET /admin/servers lists them", "`mcpbootd list` shows them");
            routes_as_commands(&message)
        }
    }
}

/// Replaces each `METHOD /admin/servers/{id}…` route in a hint with the command that does the
/// same; routes without a command stay as they are.
fn routes_as_commands(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = ["GET ", "POST ", "DELETE "]
        .iter()
        .filter_map(|method| rest.find(&format!("{method}/admin/servers/")).map(|at| (at, *method)))
        .min()
    {
        let (at, method) = start;
        let route_start = at + method.len() + "/admin/servers/".len();
        let route_len = rest[route_start..].find([' ', ')', ',', ';']).unwrap_or(rest.len() - route_start);
        let route = &rest[route_start..route_start + route_len];
        let (id, path) = route.split_once('/').map_or((route, ""), |(id, path)| (id, path));
        let parts: Vec<&str> = path.split('/').collect();
        let command = match (method.trim(), parts.as_slice()) {
            ("GET", [""]) => Some(format!("mcpbootd show {id}")),
            ("GET", ["versions"]) => Some(format!("mcpbootd versions {id}")),
            ("POST", ["regenerate"]) => Some(format!("mcpbootd regenerate {id}")),
            ("POST", ["check-drift"]) => Some(format!("mcpbootd check-drift {id}")),
            ("POST", ["versions", n, "approve"]) => Some(format!("mcpbootd approve {id} {}", n.replace("{n}", "N"))),
            ("DELETE", [""]) => Some(format!("mcpbootd delete {id}")),
            _ => None,
        };
        out.push_str(&rest[..at]);
        match command {
            Some(command) => out.push_str(&format!("`{command}`")),
            None => out.push_str(&rest[at..route_start + route_len]),
        }
        rest = &rest[route_start + route_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_hints_become_commands() {
        let cases = [
            (
                "server \"calc\" has no version 7; GET /admin/servers/calc/versions lists them",
                "server \"calc\" has no version 7; `mcpbootd versions calc` lists them",
            ),
            (
                "no tool \"x\"; GET /admin/servers/calc lists its tools",
                "no tool \"x\"; `mcpbootd show calc` lists its tools",
            ),
            (
                "approve one with POST /admin/servers/hn/versions/{n}/approve (GET /admin/servers/hn/versions lists them)",
                "approve one with `mcpbootd approve hn N` (`mcpbootd versions hn` lists them)",
            ),
            ("DELETE /admin/servers/hn first", "`mcpbootd delete hn` first"),
            ("PUT /admin/servers/hn/credentials/key with {...}", "PUT /admin/servers/hn/credentials/key with {...}"),
            ("POST /admin/servers/hn/regenerate to run it again", "`mcpbootd regenerate hn` to run it again"),
        ];
        for (daemon, cli) in cases {
            assert_eq!(routes_as_commands(daemon), cli);
        }
    }

    fn client(base: &str) -> AdminClient {
        AdminClient::new(parse_base_url(base).unwrap(), "the default", None).unwrap()
    }

    #[test]
    fn endpoints_keep_the_base_path_and_encode_segments() {
        assert_eq!(client("http://127.0.0.1:8080").mcp_url("hn"), "http://127.0.0.1:8080/servers/hn/mcp");
        assert_eq!(client("http://h:1/").mcp_url("hn"), "http://h:1/servers/hn/mcp");
        assert_eq!(client("https://h/prefix/").mcp_url("hn"), "https://h/prefix/servers/hn/mcp");
        assert_eq!(client("https://h/prefix").mcp_url("hn"), "https://h/prefix/servers/hn/mcp");
        let c = client("http://h");
        assert_eq!(c.endpoint(&["admin", "servers", "a/b?c"]).as_str(), "http://h/admin/servers/a%2Fb%3Fc");
    }

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(parse_base_url("localhost:9000").unwrap().as_str(), "http://localhost:9000/");
        assert_eq!(parse_base_url("10.0.0.5").unwrap().as_str(), "http://10.0.0.5/");
        assert_eq!(parse_base_url("https://example.com").unwrap().as_str(), "https://example.com/");
        assert!(parse_base_url("ftp://example.com").is_err());
        assert!(parse_base_url("http://").is_err());
        assert!(parse_base_url("mailto:me@example.com").is_err());
        // People read these on the command line, so they are pinned word for word.
        assert_eq!(
            parse_base_url(" http:// ").unwrap_err().to_string(),
            r#""http://" is not a URL (empty host); expected e.g. http://127.0.0.1:8080"#
        );
        assert_eq!(
            parse_base_url("ftp://example.com").unwrap_err().to_string(),
            r#""ftp://example.com" is not an http:// or https:// URL; expected e.g. http://127.0.0.1:8080"#
        );
    }

    #[test]
    fn exit_codes_follow_the_kind_of_failure() {
        let api = ClientError::Api { status: 404, code: "server_not_found".into(), message: "no server".into() };
        assert_eq!(api.exit_code(), 1);
        assert_eq!(api.to_string(), "no server (server_not_found, HTTP 404)");
        let down =
            ClientError::Unreachable { url: "http://x/".into(), origin: "from --url".into(), cause: "refused".into() };
        assert_eq!(down.exit_code(), 3);
        assert!(down.to_string().contains("http://x/ (from --url)"));
    }
}
