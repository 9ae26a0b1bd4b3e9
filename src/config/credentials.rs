//! `[credentials]`: where the key that encrypts upstream API credentials at rest comes from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// Where the key that encrypts upstream API credentials at rest comes from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CredentialsConfig {
    /// The key itself, 64 hex characters (MCPBOOTD_CREDENTIALS_KEY); wins over `key_file`.
    pub key: Secret,
    /// A file holding the key. Empty: `<catalog path>.key`, created (mode 0600) when missing.
    pub key_file: PathBuf,
}
