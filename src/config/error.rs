//! Why a configuration cannot be loaded: the one error every section's check returns, kept in
//! a file of its own so the sections need nothing from the loader that calls them.

use std::path::PathBuf;

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
