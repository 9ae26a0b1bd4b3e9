//! `[admin]`: the admin API's token and the web console.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::secret::Secret;

/// The shortest admin token accepted, as for the mounts' access tokens.
const MIN_ADMIN_TOKEN_CHARS: usize = 16;

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

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { token: Secret::default(), console: true, console_assets_dir: PathBuf::new() }
    }
}

impl AdminConfig {
    /// Checks the admin token's length; messages name the key and its env var.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let token = self.token.expose();
        if !token.is_empty() && token.trim().chars().count() < MIN_ADMIN_TOKEN_CHARS {
            return Err(ConfigError::Invalid(format!(
                "[admin] token (MCPBOOTD_ADMIN_TOKEN) is {}: use at least {MIN_ADMIN_TOKEN_CHARS} characters, \
                 e.g. from `openssl rand -hex 32`, or leave it unset on a loopback-only daemon",
                if token.trim().is_empty() { "blank" } else { "too short" }
            )));
        }
        Ok(())
    }
}
