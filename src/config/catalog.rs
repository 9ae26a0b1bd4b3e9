//! `[catalog]`: where the catalog is, the replicas' timing and how much of the call log is kept.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

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

const DEFAULT_CATALOG_PATH: &str = "./data/mcpbootd.db";

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

    /// `reconcile_interval` and `lease_ttl` as durations (checked by `CatalogConfig::validate`).
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

    /// Checks where the catalog is, the replicas' timing and the call log's size.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.location()?;
        self.replica_timing()?;
        if self.replica_id.len() > 63 || self.replica_id.contains(char::is_whitespace) {
            return Err(ConfigError::Invalid(
                "[catalog] replica_id must be at most 63 characters, without spaces (MCPBOOTD_CATALOG__REPLICA_ID)"
                    .into(),
            ));
        }
        if self.max_calls_per_server == 0 {
            return Err(ConfigError::Invalid(
                "[catalog] max_calls_per_server must be at least 1 (MCPBOOTD_CATALOG__MAX_CALLS_PER_SERVER)".into(),
            ));
        }
        Ok(())
    }
}
