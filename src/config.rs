//! Layered configuration: embedded defaults < `--config` file < `MCPBOOTD_*` environment < CLI flags.
//!
//! Every layer is merged as a TOML table before anything is deserialised, so a key set in any layer is
//! checked by the same typed structs, and unknown keys are refused wherever they come from (a typo in
//! an env var name is as loud as a typo in the file). `mcpbootd.toml.example` is the reference and is
//! embedded; a test keeps it parsing.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The documented example config, shipped inside the binary (`mcpbootd print-config`).
pub const EXAMPLE_CONFIG: &str = include_str!("../mcpbootd.toml.example");

/// Env var prefix; `MCPBOOTD_SANDBOX__CPU_MS=500` sets `[sandbox] cpu_ms`.
const ENV_PREFIX: &str = "MCPBOOTD_";
/// The shortest admin token accepted, as for the mounts' access tokens.
const MIN_ADMIN_TOKEN_CHARS: usize = 16;
/// Short form accepted for the admin token so one variable configures the daemon and the CLI client.
const ENV_ADMIN_TOKEN_SHORT: &str = "MCPBOOTD_ADMIN_TOKEN";
/// Short form for the credentials key, as the operator's documentation names it.
const ENV_CREDENTIALS_KEY_SHORT: &str = "MCPBOOTD_CREDENTIALS_KEY";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[derive(Default)]
pub struct Config {
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub auth: AuthConfig,
    pub catalog: CatalogConfig,
    pub credentials: CredentialsConfig,
    pub sandbox: SandboxConfig,
    pub code_mode: CodeModeConfig,
    pub limits: LimitsConfig,
    pub egress: EgressConfig,
    pub llm: LlmConfig,
    pub generation: GenerationConfig,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
    pub telemetry: TelemetryConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// `IP:PORT`; `localhost:PORT` means 127.0.0.1 (see [`parse_listen`]).
    #[serde(deserialize_with = "deserialize_listen")]
    pub listen: SocketAddr,
    /// `Host` header values accepted on MCP mounts (DNS-rebinding protection). Empty means the
    /// loopback names plus the listen address.
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted on MCP mounts; empty disables the Origin check.
    pub allowed_origins: Vec<String>,
    /// Largest accepted admin or MCP request body.
    pub max_body_bytes: usize,
    /// How long in-flight calls may run after a shutdown signal.
    pub shutdown_grace_ms: u64,
    /// How long a connection may take to send a request's headers, counted from when it is
    /// opened or its previous response was written: silent, dripping and idle keep-alive
    /// connections are closed after it.
    pub header_read_timeout_ms: u64,
    /// Connections open at once; at the cap a new one replaces the oldest connection that has not
    /// sent a byte, or is answered 503 and closed. Lowered at start-up to leave
    /// descriptors for the catalog and egress when the process's open-file limit is smaller.
    pub max_connections: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Bearer token for `/admin/*`; required when `listen` is not a loopback address.
    pub token: Secret,
    /// Serve the web console at `/console` (it asks for `token` and uses the admin API).
    pub console: bool,
    /// Serve the console's files from this directory (a checkout's `console/assets`) instead of
    /// the copies in the binary, to work on the console without rebuilding. Any file under it
    /// with a plain relative name is served (no `..`, no hidden files or directories).
    pub console_assets_dir: PathBuf,
}

/// How MCP hosts authenticate to the mounts, besides per-server static access tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub oauth: OAuthConfig,
}

/// The mounts as OAuth 2.1 resource servers that trust one identity provider (docs/oauth.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OAuthConfig {
    /// The authorization server's issuer, compared and published exactly as written (no `/` is
    /// added). Empty: OAuth is off.
    pub issuer: String,
    /// How MCP hosts reach this daemon (`https://mcp.example.com`): a mount's canonical URL, the
    /// audience its tokens must carry, is this + `/servers/<id>/mcp`.
    pub public_url: String,
    /// Every mount without a static access token requires an OAuth token.
    pub required: bool,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_seconds: u64,
    /// With `write_scope`, the scope model of docs/oauth.md: a token with this scope may call the
    /// tools marked `readOnlyHint: true`. Empty: no per-tool scopes.
    pub read_scope: String,
    /// A token with this scope may call every tool. Empty: no per-tool scopes.
    pub write_scope: String,
    /// A token from the issuer with this scope, whose audience is `<public_url>/admin`, is
    /// accepted on `/admin/*` next to the static admin token. Empty: it is not.
    pub admin_scope: String,
    /// Client credentials for the issuer's token introspection endpoint (RFC 7662), which checks
    /// tokens that are not JWTs (opaque tokens). Empty: only JWT access tokens are accepted.
    pub introspection_client_id: String,
    pub introspection_client_secret: Secret,
    /// How long an introspection answer is reused (never past the token's `exp`).
    pub introspection_cache_seconds: u64,
    /// The daemon as an OpenID client of `issuer`, for its connect pages (docs/connected-accounts.md):
    /// a person who opens a connect link signs in first, so a forwarded link is refused. Its
    /// redirect URI is `<public_url>/connect/signin`. Empty: per-user credentials are refused.
    pub connect_client_id: String,
    pub connect_client_secret: Secret,
    /// How long a connect link stays usable, in seconds.
    pub connect_link_seconds: u64,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuer: String::new(),
            public_url: String::new(),
            required: false,
            leeway_seconds: 60,
            read_scope: String::new(),
            write_scope: String::new(),
            admin_scope: String::new(),
            introspection_client_id: String::new(),
            introspection_client_secret: Secret::default(),
            introspection_cache_seconds: 30,
            connect_client_id: String::new(),
            connect_client_secret: Secret::default(),
            connect_link_seconds: 600,
        }
    }
}

impl OAuthConfig {
    pub fn enabled(&self) -> bool {
        !self.issuer.is_empty()
    }

    /// The canonical URL of a mount: the audience its tokens must name.
    pub fn resource(&self, mcp_path: &str) -> String {
        format!("{}{mcp_path}", self.public_url.trim_end_matches('/'))
    }

    /// Whether the connect pages are configured, which per-user credentials need.
    pub fn connects(&self) -> bool {
        self.enabled() && !self.connect_client_id.is_empty()
    }

    /// The daemon's URL for `path` (which starts with `/`).
    pub fn public(&self, path: &str) -> String {
        format!("{}{path}", self.public_url.trim_end_matches('/'))
    }

    /// The audience of tokens for the admin API (`admin_scope`).
    pub fn admin_resource(&self) -> String {
        self.resource("/admin")
    }

    /// The scope model: which scope calls which tools (none when both scopes are empty).
    pub fn scope_rule(&self, extra: &[String]) -> crate::oauth::ScopeRule {
        let scope = |s: &str| (!s.is_empty()).then(|| s.to_string());
        crate::oauth::ScopeRule::new(scope(&self.read_scope), scope(&self.write_scope), extra.to_vec())
    }

    /// Where a host finds a mount's Protected Resource Metadata (RFC 9728 §3.1: inserted after
    /// the host, before the path).
    pub fn metadata_url(&self, mcp_path: &str) -> String {
        format!("{}/.well-known/oauth-protected-resource{mcp_path}", self.public_url.trim_end_matches('/'))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if !self.enabled() {
            let set = [
                ("required", self.required),
                ("read_scope", !self.read_scope.is_empty()),
                ("write_scope", !self.write_scope.is_empty()),
                ("admin_scope", !self.admin_scope.is_empty()),
                ("introspection_client_id", !self.introspection_client_id.is_empty()),
                ("connect_client_id", !self.connect_client_id.is_empty()),
            ];
            if let Some((key, _)) = set.iter().find(|(_, set)| *set) {
                return invalid(format!(
                    "[auth.oauth] {key} needs [auth.oauth] issuer (MCPBOOTD_AUTH__OAUTH__ISSUER) and public_url"
                ));
            }
            return Ok(());
        }
        for (key, value) in [("issuer", &self.issuer), ("public_url", &self.public_url)] {
            let variable = format!("MCPBOOTD_AUTH__OAUTH__{}", key.to_uppercase());
            let Ok(url) = url::Url::parse(value) else {
                return invalid(format!("[auth.oauth] {key} ({variable}) = {value:?} is not a URL"));
            };
            let loopback = match url.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                Some(url::Host::Domain(name)) => name == "localhost",
                None => false,
            };
            if url.scheme() != "https" && !(url.scheme() == "http" && loopback) {
                return invalid(format!(
                    "[auth.oauth] {key} ({variable}) = {value:?} must be an https:// URL \
                     (http:// is accepted only on a loopback address, for tests and local development)"
                ));
            }
            if url.query().is_some() || url.fragment().is_some() {
                return invalid(format!(
                    "[auth.oauth] {key} ({variable}) = {value:?} must not have a query or fragment"
                ));
            }
        }
        for (key, value) in
            [("read_scope", &self.read_scope), ("write_scope", &self.write_scope), ("admin_scope", &self.admin_scope)]
        {
            if !value.is_empty()
                && let Err(problem) = crate::oauth::check_scope(value)
            {
                return invalid(format!("[auth.oauth] {key} = {value:?}: {problem}"));
            }
        }
        if self.introspection_cache_seconds > 3600 {
            return invalid(format!(
                "[auth.oauth] introspection_cache_seconds = {} is more than 3600: a revoked token would stay \
                 usable that long",
                self.introspection_cache_seconds
            ));
        }
        if self.read_scope.is_empty() != self.write_scope.is_empty() {
            return invalid(
                "[auth.oauth] read_scope and write_scope go together: set both (a read-only tool needs either, \
                 every other tool write_scope) or neither"
                    .into(),
            );
        }
        if self.introspection_client_id.is_empty() != self.introspection_client_secret.is_empty() {
            return invalid(
                "[auth.oauth] introspection_client_id and introspection_client_secret go together: the \
                 introspection endpoint needs both (MCPBOOTD_AUTH__OAUTH__INTROSPECTION_CLIENT_SECRET)"
                    .into(),
            );
        }
        if self.connect_client_id.is_empty() != self.connect_client_secret.is_empty() {
            return invalid(
                "[auth.oauth] connect_client_id and connect_client_secret go together: the connect pages sign \
                 people in as this client of the issuer (MCPBOOTD_AUTH__OAUTH__CONNECT_CLIENT_SECRET)"
                    .into(),
            );
        }
        if !(10..=86_400).contains(&self.connect_link_seconds) {
            return invalid(format!(
                "[auth.oauth] connect_link_seconds = {} must be between 10 and 86400: a connect link is short-lived",
                self.connect_link_seconds
            ));
        }
        if url::Url::parse(&self.public_url).is_ok_and(|url| url.path() != "/") {
            return invalid(format!(
                "[auth.oauth] public_url = {:?} must be the daemon's origin without a path \
                 (mounts are at <public_url>/servers/<id>/mcp)",
                self.public_url
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// Where the catalog is: `sqlite://<path>` or `postgres://user@host/db` (a database shared by
    /// replicas). Empty: `sqlite://` + `path`.
    pub url: String,
    /// The SQLite file, when `url` is not given (the older spelling of `url = "sqlite://…"`).
    pub path: PathBuf,
    /// A file holding the PostgreSQL password, when the URL and `PGPASSWORD` do not give it.
    pub password_file: PathBuf,
    /// PostgreSQL connections this daemon opens at most.
    pub max_connections: u32,
    /// This daemon's name among the replicas sharing a PostgreSQL catalog (leases, logs,
    /// metrics). Empty: the host name (a Kubernetes pod's name) and a random suffix.
    pub replica_id: String,
    /// How often a replica compares its mounts with a shared catalog, besides acting on the
    /// changes announced to it (a safety net for announcements lost with a connection).
    pub reconcile_interval: String,
    /// How long a generation job's or drift check's lease lasts without being renewed: a replica
    /// that dies holding one loses it this long after, and another replica takes the job over.
    pub lease_ttl: String,
    /// Calls kept in the call log per server; older ones (and their egress rows) are pruned.
    pub max_calls_per_server: u64,
    /// Console, error and failed-call argument text kept in the call log per server, in MiB: the
    /// oldest calls beyond it are pruned too, so a chatty server cannot fill the disk.
    pub max_call_log_mb_per_server: u64,
    /// Versions kept per server (0: all); the oldest inactive ones beyond it are deleted, never
    /// the active one or one awaiting approval.
    pub max_versions_per_server: u64,
}

/// Where the key that encrypts upstream API credentials at rest comes from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CredentialsConfig {
    /// The key itself, 64 hex characters (MCPBOOTD_CREDENTIALS_KEY); wins over `key_file`.
    pub key: Secret,
    /// A file holding the key. Empty: `<catalog path>.key`, created (mode 0600) when missing.
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    pub timeout_ms: u64,
    pub cpu_ms: u64,
    pub memory_mb: u64,
    pub stack_kb: u64,
    pub max_fetches: u32,
    pub max_concurrent_fetches: u32,
    pub max_response_bytes: u64,
    pub max_result_bytes: usize,
    pub max_argument_bytes: usize,
    pub max_console_bytes: usize,
    /// Isolate worker threads, each driving many calls; 0 means one per CPU.
    pub workers: usize,
    /// What runs JavaScript: `wasm`, the only engine (QuickJS compiled to WebAssembly, run by
    /// Wasmtime in the isolate threads: every call preemptible and confined to its own memory).
    /// Kept as a key so `print-config` and `/readyz` name the engine.
    pub engine: EngineKind,
    /// Calls in flight (running or waiting on a fetch or timer), daemon-wide and per server.
    pub max_in_flight: usize,
    pub max_in_flight_per_server: usize,
    /// Calls that may wait for a slot, daemon-wide and per server, and for how long, before
    /// calls get a "busy" error.
    pub queue: usize,
    pub max_queued_per_server: usize,
    pub queue_timeout_ms: u64,
    /// Memory all isolates in flight may use together.
    pub memory_budget_mb: u64,
    /// Where the compiled WebAssembly engine is kept between starts, so a restart does not
    /// compile it again: a directory, `off`, or empty for `$CACHE_DIRECTORY` (systemd),
    /// `$XDG_CACHE_HOME/mcpbootd` or `$HOME/.cache/mcpbootd`, the first that is set.
    pub compile_cache: String,
}

/// The most calls `[sandbox] max_in_flight` may allow: every call in flight holds an instance slot
/// of the WebAssembly engine, and each slot reserves address space for a whole 4 GiB memory.
pub const MAX_IN_FLIGHT: usize = 16_384;

/// `[limits]`: the daemon-wide defaults of the traffic limits at the door (docs/traffic.md). A
/// server's own limits (`PUT /admin/servers/{id}/limits`) replace each key they name. 0 is off.
/// They are counted per replica: behind a balancer over R replicas a caller may get up to R
/// times each rate, so set them to the rate wanted divided by R.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Tool calls per minute by one caller on one server (a burst of N refilled over a minute).
    pub per_caller_per_minute: u32,
    /// Tool calls per minute on one server.
    pub per_server_per_minute: u32,
    /// Calls per minute of one tool.
    pub per_tool_per_minute: u32,
    /// Calls one caller may have running at once on one server.
    pub per_caller_concurrency: u32,
}

/// `[code_mode]`: agents send a script that calls several tools (`docs/code-mode.md`).
/// The limits are defaults: a server's `code_mode` settings may replace them, and a request's
/// `options` may only narrow what applies.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CodeModeConfig {
    /// The daemon-wide switch: off, no server lists `code_execution`, whatever its settings.
    pub enabled: bool,
    /// Wall time per script, tool calls included.
    pub timeout_ms: u64,
    /// JavaScript execution time per script (its tool calls run in isolates of their own).
    pub cpu_ms: u64,
    /// Memory limit of a script's isolate.
    pub memory_mb: u64,
    /// Tool calls per script; the next one returns `MAX_TOOL_CALLS`. 0: no limit.
    pub max_tool_calls: u32,
    /// Tool calls one script has in flight at once; more wait for a free slot.
    pub max_concurrent_tool_calls: u32,
    /// Bytes of tool results handed into one script, in all; past it calls return `RESULT_TOO_LARGE`.
    pub max_tool_result_bytes: u64,
    /// Size of a script's JSON result.
    pub max_result_bytes: usize,
    /// Scripts running at once, daemon-wide; more wait for a slot, then get `BUSY`. Kept well
    /// below `[sandbox] max_in_flight`, so waiting scripts never hold every slot their tool calls
    /// need.
    pub max_concurrent_scripts: usize,
    /// Scripts one server may run at once, so that one server's clients cannot take every slot
    /// of `max_concurrent_scripts`; 0: a quarter of it (at least 1). See
    /// [`CodeModeConfig::scripts_per_server`].
    pub max_concurrent_scripts_per_server: usize,
    /// How much of a script's code its call-log entry keeps.
    pub log_code_bytes: usize,
}

impl Default for CodeModeConfig {
    fn default() -> Self {
        CodeModeConfig {
            enabled: false,
            timeout_ms: 60_000,
            cpu_ms: 5_000,
            memory_mb: 64,
            max_tool_calls: 100,
            max_concurrent_tool_calls: 4,
            max_tool_result_bytes: 16 * 1024 * 1024,
            max_result_bytes: 1024 * 1024,
            max_concurrent_scripts: 64,
            max_concurrent_scripts_per_server: 0,
            log_code_bytes: 2048,
        }
    }
}

impl CodeModeConfig {
    /// Scripts one server may run at once: `max_concurrent_scripts_per_server`, or when that is
    /// 0, a quarter of `max_concurrent_scripts`, as `[sandbox] max_in_flight_per_server` is a
    /// quarter of `max_in_flight` by default. A share below the whole leaves slots for other
    /// servers even when an operator lowers `max_concurrent_scripts` alone.
    pub fn scripts_per_server(&self) -> usize {
        match self.max_concurrent_scripts_per_server {
            0 => (self.max_concurrent_scripts / 4).max(1),
            share => share,
        }
    }
}

/// `[sandbox] engine`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Wasm,
}

/// `[sandbox]` keys of the native engine and its worker processes, both removed: each with what
/// a config that still sets it is told.
const REMOVED_SANDBOX_KEYS: [(&str, Option<&str>); 3] =
    [("engine", Some("native")), ("isolation", None), ("worker_executable", None)];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Let handlers reach loopback, RFC 1918, link-local and other non-global addresses.
    pub allow_private_networks: bool,
    pub connect_timeout_ms: u64,
    /// Longest pause between two reads of a response body.
    pub read_timeout_ms: u64,
    pub max_redirects: u32,
    pub user_agent: String,
    /// Host name -> IP address, used instead of DNS. The URL's port is kept.
    pub resolve: BTreeMap<String, IpAddr>,
    /// Hold requests to an origin that answered 429 or 503 with `Retry-After` until then.
    pub respect_retry_after: bool,
    /// Consecutive connection failures or 502/503/504 answers that open an origin's circuit
    /// breaker; 0 turns breakers off.
    pub breaker_failures: u32,
    /// How long an open breaker refuses requests before it lets one probe through.
    pub breaker_open_ms: u64,
    pub cache: EgressCacheConfig,
}

/// `[egress.cache]`: the HTTP cache of handlers' GET responses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EgressCacheConfig {
    pub enabled: bool,
    /// Bytes of responses kept at most, least recently used out first.
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// `anthropic` or `openai` (any OpenAI-compatible server); empty: no LLM, so prompt
    /// registrations are refused while toolset registrations keep working.
    #[serde(with = "provider_text")]
    pub provider: Option<Provider>,
    pub model: String,
    /// Empty: the provider's public endpoint.
    pub base_url: String,
    /// Empty: `ANTHROPIC_API_KEY` or `OPENAI_API_KEY`, by provider.
    pub api_key: Secret,
    pub max_tokens: u32,
    /// Per request, including the time the provider takes to write the reply.
    pub timeout_ms: u64,
    /// Extra attempts on 429, 5xx, 529 and timeouts, with exponential backoff.
    pub max_retries: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    /// OpenAI's Chat Completions, or any server that speaks it (Ollama, vLLM, llama.cpp).
    OpenAi,
}

impl LlmConfig {
    /// Why a configured provider cannot be used: its public endpoint without an API key (it
    /// would fail at the first planning request). A custom `base_url` may need no key (a local
    /// server), so that is not a problem here.
    pub fn missing_key(&self) -> Option<String> {
        let provider = self.provider?;
        if !self.api_key.is_empty() || !self.base_url.trim().is_empty() {
            return None;
        }
        let key_env = match provider {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAi => "OPENAI_API_KEY",
        };
        Some(format!(
            "[llm] provider is \"{provider}\" but no API key is set: set {key_env} (or [llm] api_key, \
             MCPBOOTD_LLM__API_KEY) in the daemon's environment and restart it"
        ))
    }
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::OpenAi => "https://api.openai.com/v1",
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            Provider::Anthropic => "Anthropic",
            Provider::OpenAi => "OpenAI",
        }
    }
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Provider, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Ok(Provider::Anthropic),
            "openai" => Ok(Provider::OpenAi),
            other => Err(format!(
                "[llm] provider = {other:?} is not supported: use \"anthropic\" or \"openai\" (OpenAI-compatible servers such as Ollama or vLLM use \"openai\" with a base_url)"
            )),
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[llm] provider` as text: empty for none.
mod provider_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Provider;

    pub fn serialize<S: Serializer>(provider: &Option<Provider>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(provider.map_or("", Provider::as_str))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Provider>, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GenerationConfig {
    /// Generation jobs running at once; further registrations wait their turn.
    pub concurrency: usize,
    /// Handler compile requests in flight per generation.
    pub compile_concurrency: usize,
    pub fetch_timeout_ms: u64,
    pub max_page_chars: usize,
    pub max_total_chars: usize,
    /// Call each read-only tool once with the plan's example arguments after compiling.
    pub self_test: bool,
    /// Tools derived from one API description when the registration does not choose operations.
    pub max_tools: usize,
    /// A finished generation waits in `awaiting_approval` until an operator approves it (a
    /// server's own `require_approval` wins).
    pub require_approval: bool,
    /// How often each prompt server's documents are re-fetched and compared (`"24h"`, `"90m"`);
    /// `"off"` (or empty) never.
    pub drift_check_interval: String,
    /// A tool's health is judged over its last this many calls.
    pub health_window: u32,
    /// A tool whose share of failed calls in the window reaches this is `degraded`.
    pub degraded_error_rate: f64,
    /// Calls in the window before a tool can be judged at all.
    pub degraded_min_calls: u32,
}

impl GenerationConfig {
    /// `drift_check_interval` as a duration; `None` when drift checks are off.
    pub fn drift_interval(&self) -> Option<Duration> {
        let text = self.drift_check_interval.trim();
        if text.is_empty() || text == "off" {
            return None;
        }
        humantime::parse_duration(text).ok().filter(|d| !d.is_zero())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `auto` (human on a terminal, JSON lines otherwise), `json` or `pretty`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `mcpbootd=debug,tower_http=info`; `RUST_LOG` wins.
    pub level: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Servers whose calls get `server` and `tool` labels of their own; the calls of servers
    /// mounted after these are counted under `server="other"`, `tool="other"`, so the number of
    /// series stays bounded however many servers are registered.
    pub max_labelled_servers: usize,
}

/// OpenTelemetry traces of tool calls (see `telemetry::traces`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Where spans are sent, over OTLP/HTTP with protobuf bodies (a collector's
    /// `http://HOST:4318/v1/traces`); empty turns traces off.
    pub otlp_endpoint: String,
    /// Outbound requests of handlers carry a W3C `traceparent` header naming their span, so an
    /// upstream that traces too joins the call's trace.
    pub propagate_traceparent: bool,
}

impl TelemetryConfig {
    /// Whether spans are exported at all.
    pub fn traces_enabled(&self) -> bool {
        !self.otlp_endpoint.trim().is_empty()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.traces_enabled() {
            return Ok(());
        }
        let endpoint = self.otlp_endpoint.trim();
        let problem = match url::Url::parse(endpoint) {
            Err(url::ParseError::RelativeUrlWithoutBase) => Some("it has no scheme: start it with http://".to_string()),
            Err(error) => Some(error.to_string()),
            Ok(url) if url.scheme() != "http" && url.scheme() != "https" => {
                Some(format!("the scheme is {:?}, not http or https", url.scheme()))
            }
            Ok(url) if url.host_str().is_none_or(str::is_empty) => Some("it has no host".to_string()),
            Ok(url) if !url.username().is_empty() || url.password().is_some() => {
                Some("it carries a user name or password, which would be sent with every export".to_string())
            }
            Ok(_) => None,
        };
        match problem {
            Some(problem) => Err(ConfigError::Invalid(format!(
                "[telemetry] otlp_endpoint = {endpoint:?} is not a usable OTLP/HTTP URL ({problem}): give the \
                 collector's traces URL, such as \"http://127.0.0.1:4318/v1/traces\", or leave it empty to turn \
                 traces off (MCPBOOTD_TELEMETRY__OTLP_ENDPOINT)"
            ))),
            None => Ok(()),
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { token: Secret::default(), console: true, console_assets_dir: PathBuf::new() }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { max_labelled_servers: 100 }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Auto,
    Json,
    Pretty,
}

/// A string that never shows up in logs, `Debug` output or `print-config`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"<redacted>\"" })
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(if self.0.is_empty() { "" } else { "<redacted>" })
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            shutdown_grace_ms: 10_000,
            header_read_timeout_ms: 10_000,
            max_connections: 4096,
        }
    }
}

/// Where the catalog is: `[catalog] url` (or the older `path`).
#[derive(Debug, Clone, PartialEq)]
pub enum CatalogLocation {
    /// A SQLite file, created when missing.
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by every replica.
    Postgres {
        /// `postgres://user[:password]@host[:port]/database[?sslmode=…]`.
        url: String,
        /// A file holding the password, when the URL and `PGPASSWORD` do not.
        password_file: Option<PathBuf>,
        /// Connections this daemon opens at most.
        max_connections: u32,
    },
}

impl CatalogLocation {
    /// The location for logs and messages: a PostgreSQL URL without its password.
    pub fn display(&self) -> String {
        match self {
            CatalogLocation::Sqlite(path) => path.display().to_string(),
            CatalogLocation::Postgres { url, .. } => match url::Url::parse(url) {
                Ok(mut url) => {
                    if url.password().is_some() {
                        let _ = url.set_password(Some("***"));
                    }
                    url.to_string()
                }
                Err(_) => "postgres://…".into(),
            },
        }
    }

    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            CatalogLocation::Sqlite(path) => Some(path),
            CatalogLocation::Postgres { .. } => None,
        }
    }
}

const DEFAULT_CATALOG_PATH: &str = "./data/mcpbootd.db";

impl CatalogConfig {
    /// Where the catalog is, from `url` (or `path`).
    pub fn location(&self) -> Result<CatalogLocation, ConfigError> {
        let url = self.url.trim();
        if url.is_empty() {
            return Ok(CatalogLocation::Sqlite(self.path.clone()));
        }
        if let Some(path) = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
            if path.is_empty() {
                return Err(ConfigError::Invalid(
                    "[catalog] url \"sqlite://\" names no file; write sqlite://./data/mcpbootd.db".into(),
                ));
            }
            if self.path != Path::new(DEFAULT_CATALOG_PATH) && self.path != Path::new(path) {
                return Err(ConfigError::Invalid(format!(
                    "[catalog] url ({url}) and path ({}) name different catalogs; keep one of them",
                    self.path.display()
                )));
            }
            return Ok(CatalogLocation::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            if let Err(error) = url::Url::parse(url) {
                return Err(ConfigError::Invalid(format!(
                    "[catalog] url is not a valid PostgreSQL URL ({error}); write postgres://user@host:5432/database"
                )));
            }
            if self.max_connections == 0 {
                return Err(ConfigError::Invalid(
                    "[catalog] max_connections must be at least 1 (MCPBOOTD_CATALOG__MAX_CONNECTIONS)".into(),
                ));
            }
            let password_file = (!self.password_file.as_os_str().is_empty()).then(|| self.password_file.clone());
            return Ok(CatalogLocation::Postgres {
                url: url.to_string(),
                password_file,
                max_connections: self.max_connections,
            });
        }
        let scheme = url.split(':').next().unwrap_or_default();
        Err(ConfigError::Invalid(format!(
            "[catalog] url has the scheme {scheme:?}; it must be sqlite://<path> or postgres://user@host/database \
             (MCPBOOTD_CATALOG__URL)"
        )))
    }
}

impl CatalogConfig {
    /// `reconcile_interval` and `lease_ttl` as durations (checked by `Config::validate`).
    pub fn replica_timing(&self) -> Result<(Duration, Duration), ConfigError> {
        let parse = |key: &str, text: &str| match humantime::parse_duration(text.trim()) {
            Ok(duration) if duration >= Duration::from_secs(1) => Ok(duration),
            Ok(_) => Err(ConfigError::Invalid(format!("[catalog] {key} must be at least 1s"))),
            Err(error) => Err(ConfigError::Invalid(format!(
                "[catalog] {key} {text:?} is not a duration ({error}); write e.g. \"30s\" or \"2m\""
            ))),
        };
        Ok((parse("reconcile_interval", &self.reconcile_interval)?, parse("lease_ttl", &self.lease_ttl)?))
    }

    /// `replica_id`, or the host name with a random suffix (two daemons on one host differ).
    pub fn replica_id(&self) -> String {
        let configured = self.replica_id.trim();
        if !configured.is_empty() {
            return configured.to_string();
        }
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|name| !name.is_empty())
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|name| name.trim().to_string()))
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "mcpbootd".to_string());
        let suffix = uuid::Uuid::now_v7().simple().to_string();
        format!("{host}-{}", &suffix[suffix.len() - 6..])
    }
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            url: String::new(),
            path: PathBuf::from(DEFAULT_CATALOG_PATH),
            password_file: PathBuf::new(),
            max_connections: 10,
            replica_id: String::new(),
            reconcile_interval: "30s".to_string(),
            lease_ttl: "15s".to_string(),
            max_calls_per_server: 10_000,
            max_call_log_mb_per_server: 64,
            max_versions_per_server: 0,
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            timeout_ms: 30_000,
            cpu_ms: 2_000,
            memory_mb: 64,
            stack_kb: 1024,
            max_fetches: 50,
            max_concurrent_fetches: 6,
            max_response_bytes: 10 * 1024 * 1024,
            max_result_bytes: 1024 * 1024,
            max_argument_bytes: 1024 * 1024,
            max_console_bytes: 64 * 1024,
            workers: 0,
            engine: EngineKind::Wasm,
            max_in_flight: 4096,
            max_in_flight_per_server: 1024,
            queue: 256,
            max_queued_per_server: 64,
            queue_timeout_ms: 5_000,
            memory_budget_mb: 1024,
            compile_cache: String::new(),
        }
    }
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            allow_private_networks: false,
            connect_timeout_ms: 5_000,
            read_timeout_ms: 15_000,
            max_redirects: 5,
            user_agent: concat!("mcpbootd/", env!("CARGO_PKG_VERSION")).to_string(),
            resolve: BTreeMap::new(),
            respect_retry_after: true,
            breaker_failures: 5,
            breaker_open_ms: 30_000,
            cache: EgressCacheConfig::default(),
        }
    }
}

impl Default for EgressCacheConfig {
    fn default() -> Self {
        EgressCacheConfig { enabled: true, max_bytes: 64 * 1024 * 1024 }
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: None,
            model: String::new(),
            base_url: String::new(),
            api_key: Secret::default(),
            max_tokens: 16_384,
            timeout_ms: 180_000,
            max_retries: 3,
        }
    }
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            concurrency: 2,
            compile_concurrency: 4,
            fetch_timeout_ms: 15_000,
            max_page_chars: 100_000,
            max_total_chars: 200_000,
            self_test: true,
            max_tools: 64,
            require_approval: false,
            drift_check_interval: "off".to_string(),
            health_window: 20,
            degraded_error_rate: 0.5,
            degraded_min_calls: 5,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { format: LogFormat::Auto, level: "info,rmcp=warn".to_string() }
    }
}

/// A listen address: `IP:PORT` (`[::1]:8080` for IPv6), or `localhost:PORT` for 127.0.0.1. Other
/// host names are refused rather than resolved: a daemon should not listen wherever DNS says at
/// start-up, and the message shows the form to use.
pub fn parse_listen(raw: &str) -> Result<SocketAddr, String> {
    let raw = raw.trim();
    if let Ok(address) = raw.parse::<SocketAddr>() {
        return Ok(address);
    }
    let (host, port) = raw.rsplit_once(':').unwrap_or((raw, ""));
    let Ok(port) = port.parse::<u16>() else {
        return Err(format!(
            "{raw:?} is not a listen address: give an IP address and a port, such as 127.0.0.1:8080 \
             (0.0.0.0:8080 for every interface, [::1]:8080 for IPv6)"
        ));
    };
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(format!(
        "{raw:?} is not a listen address: the host must be an IP address (or localhost), such as 127.0.0.1:{port} \
         or 0.0.0.0:{port} for every interface; host names are not resolved"
    ))
}

fn deserialize_listen<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let raw = String::deserialize(deserializer)?;
    parse_listen(&raw).map_err(serde::de::Error::custom)
}

/// Values given as command-line flags; they override every other layer.
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("environment variable {name} does not name a config key: {reason}")]
    Env { name: String, reason: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Loads the layered config. `env` is passed in (rather than read here) so tests can pin the
    /// precedence without touching the process environment.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        cli: &CliOverrides,
    ) -> Result<Config, ConfigError> {
        let mut merged = toml::Table::try_from(Config::default()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        // The serialised default shows the redacted placeholder; an unset token is empty.
        set_path(&mut merged, &["admin", "token"], toml::Value::String(String::new()));
        set_path(&mut merged, &["llm", "api_key"], toml::Value::String(String::new()));
        set_path(&mut merged, &["credentials", "key"], toml::Value::String(String::new()));

        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
            let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
            merge(&mut merged, table);
        }

        let env: Vec<(String, String)> = env.into_iter().collect();
        let provider_key = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let anthropic_key = provider_key("ANTHROPIC_API_KEY");
        let openai_key = provider_key("OPENAI_API_KEY");
        let mut env: Vec<(String, String)> = env.into_iter().filter(|(name, _)| name.starts_with(ENV_PREFIX)).collect();
        // The long form must win over the short form whatever order the environment lists them in.
        env.sort_by_key(|(name, _)| name != ENV_ADMIN_TOKEN_SHORT && name != ENV_CREDENTIALS_KEY_SHORT);
        let sections: Vec<String> = merged.keys().cloned().collect();
        for (name, value) in env {
            let Some(path) = env_key_path(&name, &sections)? else { continue };
            let refs: Vec<&str> = path.iter().map(String::as_str).collect();
            set_path(&mut merged, &refs, parse_env_value(&value));
        }

        if let Some(listen) = cli.listen {
            set_path(&mut merged, &["server", "listen"], toml::Value::String(listen.to_string()));
        }
        refuse_removed_keys(&merged)?;

        let mut config: Config = merged
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string().trim().replace('\n', " ")))?;
        if config.llm.api_key.is_empty() {
            let fallback = match config.llm.provider {
                Some(Provider::Anthropic) => anthropic_key,
                Some(Provider::OpenAi) => openai_key,
                None => None,
            };
            if let Some(key) = fallback {
                config.llm.api_key = Secret::new(key);
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks that the values make sense together; messages name the key and its env var.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let token = self.admin.token.expose();
        if !token.is_empty() && token.trim().chars().count() < MIN_ADMIN_TOKEN_CHARS {
            return Err(ConfigError::Invalid(format!(
                "[admin] token (MCPBOOTD_ADMIN_TOKEN) is {}: use at least {MIN_ADMIN_TOKEN_CHARS} characters, \
                 e.g. from `openssl rand -hex 32`, or leave it unset on a loopback-only daemon",
                if token.trim().is_empty() { "blank" } else { "too short" }
            )));
        }
        // An admin scope guards the admin API too (OAuth tokens), so it stands in for the token.
        if !self.server.listen.ip().is_loopback()
            && self.admin.token.is_empty()
            && self.auth.oauth.admin_scope.is_empty()
        {
            return Err(ConfigError::Invalid(format!(
                "[server] listen = \"{}\" is not a loopback address, so the admin API needs a token: \
                 set [admin] token, or MCPBOOTD_ADMIN__TOKEN / MCPBOOTD_ADMIN_TOKEN (or [auth.oauth] admin_scope)",
                self.server.listen
            )));
        }
        self.auth.oauth.validate()?;
        let sandbox = &self.sandbox;
        for (key, value) in [
            ("timeout_ms", sandbox.timeout_ms),
            ("cpu_ms", sandbox.cpu_ms),
            ("memory_mb", sandbox.memory_mb),
            ("stack_kb", sandbox.stack_kb),
            ("max_fetches", u64::from(sandbox.max_fetches)),
            ("max_concurrent_fetches", u64::from(sandbox.max_concurrent_fetches)),
            ("max_response_bytes", sandbox.max_response_bytes),
            ("max_result_bytes", sandbox.max_result_bytes as u64),
            ("queue", sandbox.queue as u64),
            ("max_in_flight", sandbox.max_in_flight as u64),
            ("max_in_flight_per_server", sandbox.max_in_flight_per_server as u64),
            ("max_queued_per_server", sandbox.max_queued_per_server as u64),
            ("queue_timeout_ms", sandbox.queue_timeout_ms),
            ("memory_budget_mb", sandbox.memory_budget_mb),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "[sandbox] {key} must be greater than 0 (MCPBOOTD_SANDBOX__{})",
                    key.to_uppercase()
                )));
            }
        }
        if sandbox.max_in_flight > MAX_IN_FLIGHT {
            return Err(ConfigError::Invalid(format!(
                "[sandbox] max_in_flight ({}) must be at most {MAX_IN_FLIGHT}: each call in flight holds one of the \
                 WebAssembly engine's instance slots, which reserve address space (MCPBOOTD_SANDBOX__MAX_IN_FLIGHT)",
                sandbox.max_in_flight
            )));
        }
        let code = &self.code_mode;
        for (key, value) in [
            ("timeout_ms", code.timeout_ms),
            ("cpu_ms", code.cpu_ms),
            ("memory_mb", code.memory_mb),
            ("max_concurrent_tool_calls", u64::from(code.max_concurrent_tool_calls)),
            ("max_tool_result_bytes", code.max_tool_result_bytes),
            ("max_result_bytes", code.max_result_bytes as u64),
            ("max_concurrent_scripts", code.max_concurrent_scripts as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "[code_mode] {key} must be greater than 0 (MCPBOOTD_CODE_MODE__{})",
                    key.to_uppercase()
                )));
            }
        }
        if code.max_concurrent_scripts_per_server > code.max_concurrent_scripts {
            return Err(ConfigError::Invalid(format!(
                "[code_mode] max_concurrent_scripts_per_server ({}) must be at most max_concurrent_scripts ({}); \
                 lower it (MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS_PER_SERVER), or set 0 for a quarter of \
                 max_concurrent_scripts",
                code.max_concurrent_scripts_per_server, code.max_concurrent_scripts
            )));
        }
        if code.enabled && code.max_concurrent_scripts * 2 > sandbox.max_in_flight.min(sandbox.max_in_flight_per_server)
        {
            return Err(ConfigError::Invalid(format!(
                "[code_mode] max_concurrent_scripts ({}) must be at most half of [sandbox] max_in_flight_per_server \
                 and max_in_flight ({}): scripts wait on tool calls that need slots of their own",
                code.max_concurrent_scripts,
                sandbox.max_in_flight.min(sandbox.max_in_flight_per_server)
            )));
        }
        let catalog = self.catalog.location()?;
        self.catalog.replica_timing()?;
        if self.catalog.replica_id.len() > 63 || self.catalog.replica_id.contains(char::is_whitespace) {
            return Err(ConfigError::Invalid(
                "[catalog] replica_id must be at most 63 characters, without spaces (MCPBOOTD_CATALOG__REPLICA_ID)"
                    .into(),
            ));
        }
        if catalog.sqlite_path().is_none()
            && self.credentials.key.expose().trim().is_empty()
            && self.credentials.key_file.as_os_str().is_empty()
        {
            return Err(ConfigError::Invalid(
                "a PostgreSQL catalog needs [credentials] key or key_file (MCPBOOTD_CREDENTIALS_KEY): every replica \
                 must seal and open credentials with the same key, and there is no catalog file to keep one beside"
                    .into(),
            ));
        }
        if self.catalog.max_calls_per_server == 0 {
            return Err(ConfigError::Invalid(
                "[catalog] max_calls_per_server must be at least 1 (MCPBOOTD_CATALOG__MAX_CALLS_PER_SERVER)".into(),
            ));
        }
        if sandbox.memory_budget_mb < sandbox.memory_mb {
            return Err(ConfigError::Invalid(format!(
                "[sandbox] memory_budget_mb ({}) must be at least memory_mb ({}): the budget is shared by all \
                 calls in flight, and one call may use memory_mb",
                sandbox.memory_budget_mb, sandbox.memory_mb
            )));
        }
        if sandbox.stack_kb * 1024 > 8 * 1024 * 1024 {
            return Err(ConfigError::Invalid(
                "[sandbox] stack_kb must be at most 8192 (MCPBOOTD_SANDBOX__STACK_KB)".into(),
            ));
        }
        self.telemetry.validate()?;
        if let Some(provider) = self.llm.provider
            && self.llm.model.trim().is_empty()
        {
            return Err(ConfigError::Invalid(format!(
                "[llm] provider = \"{provider}\" needs a model: set [llm] model or MCPBOOTD_LLM__MODEL"
            )));
        }
        if self.generation.concurrency == 0 || self.generation.compile_concurrency == 0 {
            return Err(ConfigError::Invalid(
                "[generation] concurrency and compile_concurrency must be at least 1".into(),
            ));
        }
        let generation = &self.generation;
        let interval = generation.drift_check_interval.trim();
        if !(interval.is_empty() || interval == "off") {
            match humantime::parse_duration(interval) {
                Ok(every) if every >= Duration::from_secs(1) => {}
                Ok(_) => {
                    return Err(ConfigError::Invalid(
                        "[generation] drift_check_interval must be at least 1s, or \"off\"".into(),
                    ));
                }
                Err(error) => {
                    return Err(ConfigError::Invalid(format!(
                        "[generation] drift_check_interval {interval:?} is not a duration ({error}); write e.g. \"24h\", \
                         \"90m\" or \"off\""
                    )));
                }
            }
        }
        if !(1..=64).contains(&generation.health_window) || generation.degraded_min_calls > generation.health_window {
            return Err(ConfigError::Invalid(
                "[generation] health_window must be between 1 and 64, and degraded_min_calls at most health_window"
                    .into(),
            ));
        }
        if !(generation.degraded_error_rate > 0.0 && generation.degraded_error_rate <= 1.0) {
            return Err(ConfigError::Invalid(
                "[generation] degraded_error_rate must be a share of calls above 0 and at most 1, e.g. 0.5".into(),
            ));
        }
        if !(1..=crate::toolset::MAX_TOOLS).contains(&self.generation.max_tools) {
            return Err(ConfigError::Invalid(format!(
                "[generation] max_tools must be between 1 and {} (the most tools a server may have)",
                crate::toolset::MAX_TOOLS
            )));
        }
        if self.egress.breaker_failures > 0 && !(100..=3_600_000).contains(&self.egress.breaker_open_ms) {
            return Err(ConfigError::Invalid(
                "[egress] breaker_open_ms must be between 100 and 3600000 (one hour), e.g. 30000; to turn circuit \
                 breakers off, set breaker_failures = 0"
                    .into(),
            ));
        }
        if self.egress.cache.enabled && self.egress.cache.max_bytes < 1024 * 1024 {
            return Err(ConfigError::Invalid(
                "[egress.cache] max_bytes must be at least 1048576 (1 MiB), e.g. 67108864; to turn the cache off, \
                 set enabled = false"
                    .into(),
            ));
        }
        for host in self.egress.resolve.keys() {
            if host.is_empty() || host.contains('/') || host.contains(':') {
                return Err(ConfigError::Invalid(format!(
                    "[egress.resolve] key {host:?} must be a bare host name such as \"api.example.test\""
                )));
            }
        }
        Ok(())
    }

    pub fn worker_threads(&self) -> usize {
        match self.sandbox.workers {
            0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            n => n,
        }
    }

    /// The host names the MCP mounts accept in `Host` headers.
    pub fn mcp_allowed_hosts(&self) -> Vec<String> {
        if !self.server.allowed_hosts.is_empty() {
            return self.server.allowed_hosts.clone();
        }
        let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
        let ip = self.server.listen.ip();
        if !ip.is_unspecified() && !ip.is_loopback() {
            hosts.push(ip.to_string());
        }
        hosts
    }

    /// The config as TOML, secrets redacted.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

/// Refuses the keys that asked for the native engine or its worker processes, with what to do,
/// before deserialising would call them merely unknown.
fn refuse_removed_keys(merged: &toml::Table) -> Result<(), ConfigError> {
    let Some(sandbox) = merged.get("sandbox").and_then(toml::Value::as_table) else { return Ok(()) };
    for (key, removed_value) in REMOVED_SANDBOX_KEYS {
        let Some(value) = sandbox.get(key) else { continue };
        if removed_value.is_some_and(|removed| value.as_str() != Some(removed)) {
            continue;
        }
        let set = match removed_value {
            Some(removed) => format!("[sandbox] {key} = \"{removed}\""),
            None => format!("[sandbox] {key}"),
        };
        return Err(ConfigError::Invalid(format!(
            "{set} (MCPBOOTD_SANDBOX__{}) is no longer supported: the native JavaScript engine and its isolate \
             worker processes were removed, and every call now runs in the WebAssembly engine, which ends a call \
             at its limits inside any built-in and confines it to its own memory; delete the `{key}` line from the \
             config file (or unset the variable)",
            key.to_uppercase()
        )));
    }
    Ok(())
}

/// `MCPBOOTD_EGRESS__RESOLVE__api.example.test` -> ["egress", "resolve", "api.example.test"].
/// Section and key names are lower-cased (also in `[auth.oauth]`); the tail of a map path (host
/// names) is kept as written.
///
/// Config keys always have a section (`__` after it). A name without one is not a config key but
/// one of the project's other variables (`MCPBOOTD_URL` for the client, test switches such as
/// `MCPBOOTD_SKIP_SDK_TESTS`): `None`, ignored here. One that starts like a section with a single
/// underscore (`MCPBOOTD_SANDBOX_CPU_MS`) is a typo and an error.
fn env_key_path(name: &str, sections: &[String]) -> Result<Option<Vec<String>>, ConfigError> {
    if name == ENV_ADMIN_TOKEN_SHORT {
        return Ok(Some(vec!["admin".into(), "token".into()]));
    }
    if name == ENV_CREDENTIALS_KEY_SHORT {
        return Ok(Some(vec!["credentials".into(), "key".into()]));
    }
    let rest = &name[ENV_PREFIX.len()..];
    if !rest.contains("__") {
        let lower = rest.to_lowercase();
        return match sections.iter().find(|section| lower.starts_with(&format!("{section}_"))) {
            Some(section) => Err(ConfigError::Env {
                name: name.to_string(),
                reason: format!(
                    "config keys need two underscores after the section: MCPBOOTD_{}__{}",
                    section.to_uppercase(),
                    &rest[section.len() + 1..]
                ),
            }),
            None => Ok(None),
        };
    }
    let parts: Vec<&str> = rest.split("__").collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::Env {
            name: name.to_string(),
            reason: "expected MCPBOOTD_<SECTION>__<KEY>, e.g. MCPBOOTD_SERVER__LISTEN".into(),
        });
    }
    // Sections within sections (`[auth.oauth]`) have a key one level deeper.
    let nested = NESTED_SECTIONS.iter().any(|(section, sub)| {
        parts.len() > 2 && parts[0].eq_ignore_ascii_case(section) && parts[1].eq_ignore_ascii_case(sub)
    });
    let names = if nested { 3 } else { 2 };
    Ok(Some(parts.iter().enumerate().map(|(i, p)| if i < names { p.to_lowercase() } else { p.to_string() }).collect()))
}

/// `[section.sub]` tables whose keys are config keys (not map keys such as `[egress.resolve]`'s
/// host names).
const NESTED_SECTIONS: [(&str, &str); 2] = [("auth", "oauth"), ("egress", "cache")];

/// Env values are TOML values when they parse as one (`500`, `true`, `["a", "b"]`), strings otherwise,
/// so `MCPBOOTD_SERVER__LISTEN=0.0.0.0:80` needs no quoting.
fn parse_env_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    let (last, parents) = path.split_last().expect("non-empty config path");
    let mut current = table;
    for part in parents {
        let entry = current.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        current = entry.as_table_mut().expect("just made a table");
    }
    current.insert(last.to_string(), value);
}

fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base_table)), toml::Value::Table(overlay_table)) => {
                merge(base_table, overlay_table)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn otlp_endpoints_are_http_urls_or_empty() {
        let load = |endpoint: &str| {
            Config::load(None, env(&[("MCPBOOTD_TELEMETRY__OTLP_ENDPOINT", endpoint)]), &CliOverrides::default())
        };
        assert!(!load("").unwrap().telemetry.traces_enabled(), "traces are off by default");
        let config = load("http://127.0.0.1:4318/v1/traces").unwrap();
        assert!(config.telemetry.traces_enabled() && !config.telemetry.propagate_traceparent);
        for (endpoint, problem) in [
            ("collector.internal", "no scheme"),
            ("grpc://collector:4317", "scheme"),
            ("not a url", "no scheme"),
            ("http://user:pw@collector:4318/v1/traces", "password"),
        ] {
            let error = load(endpoint).unwrap_err().to_string();
            assert!(
                error.contains("[telemetry] otlp_endpoint")
                    && error.contains("MCPBOOTD_TELEMETRY__OTLP_ENDPOINT")
                    && error.contains(problem),
                "{endpoint}: {error}"
            );
        }
        let unknown = Config::load(None, env(&[("MCPBOOTD_TELEMETRY__ENDPOINT", "x")]), &CliOverrides::default());
        assert!(unknown.unwrap_err().to_string().contains("endpoint"));
    }

    #[test]
    fn oauth_issuers_are_https_except_on_loopback_and_kept_as_written() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &CliOverrides::default());
        let config = load(&[
            ("MCPBOOTD_AUTH__OAUTH__ISSUER", "https://idp.example.com"),
            ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", "https://mcp.example.com/"),
            ("MCPBOOTD_AUTH__OAUTH__REQUIRED", "true"),
        ])
        .unwrap();
        let oauth = &config.auth.oauth;
        assert_eq!(oauth.issuer, "https://idp.example.com", "no slash added to a path-less issuer");
        assert_eq!(oauth.resource("/servers/hn/mcp"), "https://mcp.example.com/servers/hn/mcp");
        assert_eq!(
            oauth.metadata_url("/servers/hn/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/servers/hn/mcp"
        );
        assert!(
            load(&[
                ("MCPBOOTD_AUTH__OAUTH__ISSUER", "http://127.0.0.1:9000/realms/main"),
                ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", "http://localhost:8080"),
            ])
            .is_ok(),
            "http:// on loopback is for tests and local development"
        );
        for (pairs, says) in [
            (
                vec![
                    ("MCPBOOTD_AUTH__OAUTH__ISSUER", "http://idp.example.com"),
                    ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", "https://m.example.com"),
                ],
                "must be an https:// URL",
            ),
            (
                vec![
                    ("MCPBOOTD_AUTH__OAUTH__ISSUER", "https://idp.example.com"),
                    ("MCPBOOTD_AUTH__OAUTH__PUBLIC_URL", "https://m.example.com/mcp"),
                ],
                "without a path",
            ),
            (
                vec![("MCPBOOTD_AUTH__OAUTH__ISSUER", "https://idp.example.com")],
                "public_url (MCPBOOTD_AUTH__OAUTH__PUBLIC_URL) = \"\" is not a URL",
            ),
            (vec![("MCPBOOTD_AUTH__OAUTH__REQUIRED", "true")], "needs [auth.oauth] issuer"),
        ] {
            let error = load(&pairs).unwrap_err().to_string();
            assert!(error.contains(says), "{pairs:?}: {error}");
        }
    }

    #[test]
    fn listen_addresses_take_ips_and_localhost_and_say_the_form_otherwise() {
        assert_eq!(parse_listen("127.0.0.1:8092").unwrap().to_string(), "127.0.0.1:8092");
        assert_eq!(parse_listen("[::1]:8092").unwrap().to_string(), "[::1]:8092");
        assert_eq!(parse_listen("localhost:8092").unwrap().to_string(), "127.0.0.1:8092");
        assert_eq!(parse_listen(" LOCALHOST:1 ").unwrap().to_string(), "127.0.0.1:1");
        let error = parse_listen("example.com:8092").unwrap_err();
        assert!(error.contains("must be an IP address") && error.contains("127.0.0.1:8092"), "{error}");
        for raw in ["localhost", "8092", "127.0.0.1", ""] {
            let error = parse_listen(raw).unwrap_err();
            assert!(error.contains("such as 127.0.0.1:8080"), "{raw}: {error}");
        }
        let from_env =
            Config::load(None, env(&[("MCPBOOTD_SERVER__LISTEN", "localhost:7005")]), &CliOverrides::default());
        assert_eq!(from_env.unwrap().server.listen.to_string(), "127.0.0.1:7005");
        let error = Config::load(None, env(&[("MCPBOOTD_SERVER__LISTEN", "myhost:7005")]), &CliOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("must be an IP address"), "{error}");
    }

    #[test]
    fn defaults_work_on_a_fresh_machine() {
        let config = Config::load(None, env(&[]), &CliOverrides::default()).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.catalog.path, PathBuf::from("./data/mcpbootd.db"));
    }

    #[test]
    fn example_config_parses_and_matches_defaults_where_it_sets_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("example.toml");
        std::fs::write(&path, EXAMPLE_CONFIG).unwrap();
        let config = Config::load(Some(&path), env(&[]), &CliOverrides::default()).unwrap();
        assert_eq!(config.sandbox, SandboxConfig::default());
        assert_eq!(config.server.listen, ServerConfig::default().listen);
        let egress = EgressConfig { user_agent: config.egress.user_agent.clone(), ..EgressConfig::default() };
        assert_eq!(config.egress, egress);
    }

    #[test]
    fn upstream_protection_and_cache_keys_are_checked_and_set_from_the_environment() {
        let load = |vars: &[(&str, &str)]| Config::load(None, env(vars), &CliOverrides::default());
        let config = load(&[
            ("MCPBOOTD_EGRESS__CACHE__MAX_BYTES", "2097152"),
            ("MCPBOOTD_EGRESS__BREAKER_FAILURES", "0"),
            ("MCPBOOTD_EGRESS__BREAKER_OPEN_MS", "0"),
        ])
        .unwrap();
        assert_eq!((config.egress.cache.max_bytes, config.egress.breaker_failures), (2_097_152, 0));
        let err = load(&[("MCPBOOTD_EGRESS__BREAKER_OPEN_MS", "10")]).unwrap_err().to_string();
        assert!(err.contains("[egress] breaker_open_ms") && err.contains("breaker_failures = 0"), "{err}");
        let err = load(&[("MCPBOOTD_EGRESS__CACHE__MAX_BYTES", "1000")]).unwrap_err().to_string();
        assert!(err.contains("[egress.cache] max_bytes") && err.contains("enabled = false"), "{err}");
        assert!(
            load(&[("MCPBOOTD_EGRESS__CACHE__MAX_BYTES", "0"), ("MCPBOOTD_EGRESS__CACHE__ENABLED", "false")]).is_ok()
        );
        let err = load(&[("MCPBOOTD_EGRESS__CACHE__MAX_BYTE", "1")]).unwrap_err().to_string();
        assert!(err.contains("max_byte"), "{err}");
    }

    #[test]
    fn precedence_is_defaults_then_file_then_env_then_cli() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[server]\nlisten = \"127.0.0.1:7000\"\n[sandbox]\ncpu_ms = 100\nmemory_mb = 32\n\
             [egress.resolve]\n\"api.weather.test\" = \"127.0.0.1\"\n",
        )
        .unwrap();
        let vars = env(&[
            ("MCPBOOTD_SERVER__LISTEN", "127.0.0.1:7001"),
            ("MCPBOOTD_SANDBOX__CPU_MS", "200"),
            ("MCPBOOTD_EGRESS__RESOLVE__api.other.test", "::1"),
            ("PATH", "/usr/bin"),
        ]);
        let cli = CliOverrides { listen: Some("127.0.0.1:7002".parse().unwrap()) };

        let file_only = Config::load(Some(&path), env(&[]), &CliOverrides::default()).unwrap();
        assert_eq!(file_only.server.listen.port(), 7000);
        assert_eq!(file_only.sandbox.cpu_ms, 100);

        let with_env = Config::load(Some(&path), vars.clone(), &CliOverrides::default()).unwrap();
        assert_eq!(with_env.server.listen.port(), 7001);
        assert_eq!(with_env.sandbox.cpu_ms, 200);
        assert_eq!(with_env.sandbox.memory_mb, 32, "file value survives when env does not set it");
        assert_eq!(with_env.egress.resolve.len(), 2);
        assert_eq!(with_env.egress.resolve["api.other.test"], "::1".parse::<IpAddr>().unwrap());

        let with_cli = Config::load(Some(&path), vars, &cli).unwrap();
        assert_eq!(with_cli.server.listen.port(), 7002);
        assert_eq!(with_cli.sandbox.timeout_ms, 30_000, "default survives every layer");
    }

    #[test]
    fn admin_token_short_form_and_long_form() {
        let short =
            Config::load(None, env(&[("MCPBOOTD_ADMIN_TOKEN", "s3-0123456789abcdef")]), &CliOverrides::default())
                .unwrap();
        assert_eq!(short.admin.token.expose(), "s3-0123456789abcdef");
        let both = Config::load(
            None,
            env(&[
                ("MCPBOOTD_ADMIN__TOKEN", "long-0123456789abcdef"),
                ("MCPBOOTD_ADMIN_TOKEN", "short-0123456789abcdef"),
            ]),
            &CliOverrides::default(),
        )
        .unwrap();
        assert_eq!(both.admin.token.expose(), "long-0123456789abcdef");
        for (token, said) in [("   ", "blank"), ("hunter2", "too short")] {
            let err = Config::load(None, env(&[("MCPBOOTD_ADMIN_TOKEN", token)]), &CliOverrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(said) && err.contains("at least 16 characters"), "{err}");
        }
    }

    #[test]
    fn llm_key_falls_back_to_the_provider_env_var() {
        let vars = env(&[
            ("MCPBOOTD_LLM__PROVIDER", "anthropic"),
            ("MCPBOOTD_LLM__MODEL", "m"),
            ("ANTHROPIC_API_KEY", "ak"),
            ("OPENAI_API_KEY", "ok"),
        ]);
        let config = Config::load(None, vars, &CliOverrides::default()).unwrap();
        assert_eq!(config.llm.api_key.expose(), "ak");
        let vars = env(&[
            ("MCPBOOTD_LLM__PROVIDER", "openai"),
            ("MCPBOOTD_LLM__MODEL", "m"),
            ("MCPBOOTD_LLM__API_KEY", "explicit"),
            ("OPENAI_API_KEY", "ok"),
        ]);
        assert_eq!(Config::load(None, vars, &CliOverrides::default()).unwrap().llm.api_key.expose(), "explicit");
        let err =
            Config::load(None, env(&[("MCPBOOTD_LLM__PROVIDER", "anthropic")]), &CliOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("[llm] model"), "{err}");
        let err =
            Config::load(None, env(&[("MCPBOOTD_LLM__PROVIDER", "gemini")]), &CliOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("anthropic"), "{err}");
    }

    #[test]
    fn secrets_are_redacted() {
        let secret = "hunter2-hunter2-hunter2";
        let config = Config::load(None, env(&[("MCPBOOTD_ADMIN_TOKEN", secret)]), &CliOverrides::default()).unwrap();
        assert!(!format!("{config:?}").contains(secret));
        assert!(!config.to_toml().contains(secret));
    }

    /// The project's own variables (the client's, test switches) are not config keys.
    #[test]
    fn variables_without_a_section_are_not_config_keys() {
        let vars =
            [("MCPBOOTD_URL", "http://x"), ("MCPBOOTD_SKIP_SDK_TESTS", "1"), ("MCPBOOTD_SDK_NODE", "/usr/bin/node")];
        assert_eq!(
            Config::load(None, env(&vars), &CliOverrides::default()).unwrap(),
            Config::load(None, env(&[]), &CliOverrides::default()).unwrap()
        );
    }

    #[test]
    fn bad_input_names_the_key() {
        let err = Config::load(None, env(&[("MCPBOOTD_SANDBOX__CPU_MSS", "1")]), &CliOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("cpu_mss"), "{err}");

        let err = Config::load(None, env(&[("MCPBOOTD_SANDBOX_CPU_MS", "1")]), &CliOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("MCPBOOTD_SANDBOX__CPU_MS"), "{err}");
        let err =
            Config::load(None, env(&[("MCPBOOTD_SANDBOX__", "1")]), &CliOverrides::default()).unwrap_err().to_string();
        assert!(err.contains("expected MCPBOOTD_<SECTION>__<KEY>"), "{err}");

        let err = Config::load(None, env(&[("MCPBOOTD_SANDBOX__CPU_MS", "fast")]), &CliOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("cpu_ms"), "{err}");

        let cli = CliOverrides { listen: Some("0.0.0.0:8080".parse().unwrap()) };
        let err = Config::load(None, env(&[]), &cli).unwrap_err().to_string();
        assert!(err.contains("[admin] token") && err.contains("MCPBOOTD_ADMIN__TOKEN"), "{err}");
        assert!(Config::load(None, env(&[("MCPBOOTD_ADMIN_TOKEN", "t-0123456789abcdef")]), &cli).is_ok());
    }

    /// The native engine and its worker processes are gone: a config that still asks for them
    /// fails at load, saying so and what to do, whether it comes from the file or the environment.
    #[test]
    fn the_native_engine_and_worker_process_keys_are_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        for (key, value) in
            [("engine", "native"), ("isolation", "process"), ("isolation", "thread"), ("worker_executable", "")]
        {
            let path = dir.path().join("c.toml");
            std::fs::write(&path, format!("[sandbox]\n{key} = \"{value}\"\n")).unwrap();
            let variable = format!("MCPBOOTD_SANDBOX__{}", key.to_uppercase());
            let from_file = Config::load(Some(&path), env(&[]), &CliOverrides::default());
            let from_env = Config::load(None, env(&[(&variable, value)]), &CliOverrides::default());
            for error in [from_file.unwrap_err().to_string(), from_env.unwrap_err().to_string()] {
                assert!(error.contains(&format!("[sandbox] {key}")) && error.contains(&variable), "{error}");
                assert!(error.contains("removed") && error.contains("WebAssembly"), "{error}");
                assert!(error.contains(&format!("delete the `{key}` line")), "{error}");
            }
        }
        // The engine is still named, with its one value.
        let config = Config::load(None, env(&[("MCPBOOTD_SANDBOX__ENGINE", "wasm")]), &CliOverrides::default());
        assert!(config.unwrap().to_toml().contains("engine = \"wasm\""));
        let error = Config::load(None, env(&[("MCPBOOTD_SANDBOX__ENGINE", "v8")]), &CliOverrides::default());
        assert!(error.unwrap_err().to_string().contains("wasm"));
    }

    #[test]
    fn code_mode_scripts_may_hold_at_most_half_the_slots_when_code_mode_is_on() {
        let small = [("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", "16")];
        assert!(Config::load(None, env(&small), &CliOverrides::default()).is_ok(), "off: not checked");
        let on = [("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", "16"), ("MCPBOOTD_CODE_MODE__ENABLED", "true")];
        let error = Config::load(None, env(&on), &CliOverrides::default()).unwrap_err().to_string();
        assert!(error.contains("[code_mode] max_concurrent_scripts (64) must be at most half"), "{error}");
        let fits = [
            ("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT_PER_SERVER", "16"),
            ("MCPBOOTD_CODE_MODE__ENABLED", "true"),
            ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS", "8"),
        ];
        assert!(Config::load(None, env(&fits), &CliOverrides::default()).is_ok());
        let zero = [("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_TOOL_CALLS", "0")];
        let error = Config::load(None, env(&zero), &CliOverrides::default()).unwrap_err().to_string();
        assert!(error.contains("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_TOOL_CALLS"), "{error}");
    }

    #[test]
    fn one_server_gets_a_share_of_the_script_slots_never_all_of_them_by_default() {
        let share = |total: &str, per_server: &str| {
            let settings = [
                ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS", total),
                ("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS_PER_SERVER", per_server),
            ];
            Config::load(None, env(&settings), &CliOverrides::default()).map(|c| c.code_mode.scripts_per_server())
        };
        assert_eq!(share("64", "0").unwrap(), 16);
        assert_eq!(share("4", "0").unwrap(), 1);
        assert_eq!(share("1", "0").unwrap(), 1);
        assert_eq!(share("8", "3").unwrap(), 3);
        let error = share("4", "5").unwrap_err().to_string();
        assert!(
            error.contains("max_concurrent_scripts_per_server (5) must be at most max_concurrent_scripts (4)")
                && error.contains("MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS_PER_SERVER"),
            "{error}"
        );
    }

    #[test]
    fn calls_in_flight_are_capped_by_the_engine_slots() {
        let load = |value: &str| {
            Config::load(None, env(&[("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT", value)]), &CliOverrides::default())
        };
        assert!(load("16384").is_ok());
        let error = load("16385").unwrap_err().to_string();
        assert!(
            error.contains("max_in_flight (16385) must be at most 16384")
                && error.contains("MCPBOOTD_SANDBOX__MAX_IN_FLIGHT"),
            "{error}"
        );
    }

    #[test]
    fn the_catalog_url_names_sqlite_or_postgres_and_is_checked() {
        let location = |url: &str, path: &str| {
            CatalogConfig { url: url.into(), path: path.into(), ..CatalogConfig::default() }.location()
        };
        assert_eq!(location("", "./data/mcpbootd.db").unwrap(), CatalogLocation::Sqlite("./data/mcpbootd.db".into()));
        assert_eq!(
            location("sqlite://./x.db", "./data/mcpbootd.db").unwrap(),
            CatalogLocation::Sqlite("./x.db".into())
        );
        assert!(matches!(
            location("postgres://u@db/c", "./data/mcpbootd.db").unwrap(),
            CatalogLocation::Postgres { .. }
        ));
        let error = location("sqlite://./x.db", "./y.db").unwrap_err().to_string();
        assert!(error.contains("name different catalogs"), "{error}");
        let error = location("mysql://db/c", "./data/mcpbootd.db").unwrap_err().to_string();
        assert!(error.contains("sqlite://<path> or postgres://"), "{error}");
        // A PostgreSQL catalog refuses to start without a shared credentials key.
        let env = vec![("MCPBOOTD_CATALOG__URL".to_string(), "postgres://u@db/c".to_string())];
        let error = Config::load(None, env, &CliOverrides::default()).unwrap_err().to_string();
        assert!(error.contains("needs [credentials] key or key_file"), "{error}");
    }
}
