//! `[code_mode]`: scripts that call several tools, and their limits.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

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

    /// Checks the limits; messages name the key and its env var.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("timeout_ms", self.timeout_ms),
            ("cpu_ms", self.cpu_ms),
            ("memory_mb", self.memory_mb),
            ("max_concurrent_tool_calls", u64::from(self.max_concurrent_tool_calls)),
            ("max_tool_result_bytes", self.max_tool_result_bytes),
            ("max_result_bytes", self.max_result_bytes as u64),
            ("max_concurrent_scripts", self.max_concurrent_scripts as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "[code_mode] {key} must be greater than 0 (MCPBOOTD_CODE_MODE__{})",
                    key.to_uppercase()
                )));
            }
        }
        if self.max_concurrent_scripts_per_server > self.max_concurrent_scripts {
            return Err(ConfigError::Invalid(format!(
                "[code_mode] max_concurrent_scripts_per_server ({}) must be at most max_concurrent_scripts ({}); \
                 lower it (MCPBOOTD_CODE_MODE__MAX_CONCURRENT_SCRIPTS_PER_SERVER), or set 0 for a quarter of \
                 max_concurrent_scripts",
                self.max_concurrent_scripts_per_server, self.max_concurrent_scripts
            )));
        }
        Ok(())
    }
}
