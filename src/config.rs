//! Layered configuration: embedded defaults < `--config` file < `MCPBOOTD_*` environment < CLI flags.
//!
//! Every layer is merged as a TOML table before anything is deserialised, so a key set in any layer is
//! checked by the same typed structs, and unknown keys are refused wherever they come from (a typo in
//! an env var name is as loud as a typo in the file). `mcpbootd.toml.example` is the reference and is
//! embedded; a test keeps it parsing.

use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod admin;
mod auth;
mod catalog;
mod code_mode;
mod credentials;
mod egress;
mod error;
mod generation;
mod limits;
mod llm;
mod log;
mod metrics;
mod sandbox;
mod secret;
mod server;
mod telemetry;

pub use admin::AdminConfig;
pub use auth::{AuthConfig, OAuthConfig};
pub use catalog::{CatalogConfig, CatalogLocation};
pub use code_mode::CodeModeConfig;
pub use credentials::CredentialsConfig;
pub use egress::{EgressCacheConfig, EgressConfig};
pub use error::ConfigError;
pub use generation::GenerationConfig;
pub use limits::LimitsConfig;
pub use llm::{LlmConfig, Provider};
pub use log::{LogConfig, LogFormat};
pub use metrics::MetricsConfig;
pub use sandbox::{EngineKind, MAX_IN_FLIGHT, SandboxConfig};
pub use secret::Secret;
pub use server::{ServerConfig, parse_listen};
pub use telemetry::TelemetryConfig;

use sandbox::refuse_removed_keys;

/// The documented example config, shipped inside the binary (`mcpbootd print-config`).
pub const EXAMPLE_CONFIG: &str = include_str!("../mcpbootd.toml.example");

/// Env var prefix; `MCPBOOTD_SANDBOX__CPU_MS=500` sets `[sandbox] cpu_ms`.
const ENV_PREFIX: &str = "MCPBOOTD_";
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

/// Values given as command-line flags; they override every other layer.
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    pub listen: Option<SocketAddr>,
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

    /// Checks that the values make sense together; messages name the key and its env var. Each
    /// section checks its own keys; the checks across sections are here.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.admin.validate()?;
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
        self.sandbox.validate()?;
        self.code_mode.validate()?;
        let sandbox = &self.sandbox;
        let code = &self.code_mode;
        if code.enabled && code.max_concurrent_scripts * 2 > sandbox.max_in_flight.min(sandbox.max_in_flight_per_server)
        {
            return Err(ConfigError::Invalid(format!(
                "[code_mode] max_concurrent_scripts ({}) must be at most half of [sandbox] max_in_flight_per_server \
                 and max_in_flight ({}): scripts wait on tool calls that need slots of their own",
                code.max_concurrent_scripts,
                sandbox.max_in_flight.min(sandbox.max_in_flight_per_server)
            )));
        }
        self.catalog.validate()?;
        let catalog = self.catalog.location()?;
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
        self.telemetry.validate()?;
        self.llm.validate()?;
        self.generation.validate()?;
        self.egress.validate()?;
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
    use std::net::IpAddr;
    use std::path::PathBuf;

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
        // Operators read these at start-up, so they are pinned word for word.
        assert_eq!(
            parse_listen("example.com:8092").unwrap_err().to_string(),
            r#""example.com:8092" is not a listen address: the host must be an IP address (or localhost), such as 127.0.0.1:8092 or 0.0.0.0:8092 for every interface; host names are not resolved"#
        );
        for raw in ["localhost", "8092", "127.0.0.1", ""] {
            assert_eq!(
                parse_listen(raw).unwrap_err().to_string(),
                format!(
                    "{raw:?} is not a listen address: give an IP address and a port, such as 127.0.0.1:8080 \
                     (0.0.0.0:8080 for every interface, [::1]:8080 for IPv6)"
                )
            );
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
