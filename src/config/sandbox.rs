//! `[sandbox]`: the limits of each call's isolate and of the calls in flight, and the engine.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

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

/// The most calls `[sandbox] max_in_flight` may allow: every call in flight holds an instance slot
/// of the WebAssembly engine, and each slot reserves address space for a whole 4 GiB memory.
pub const MAX_IN_FLIGHT: usize = 16_384;

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

impl SandboxConfig {
    /// Checks the limits; messages name the key and its env var.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("timeout_ms", self.timeout_ms),
            ("cpu_ms", self.cpu_ms),
            ("memory_mb", self.memory_mb),
            ("stack_kb", self.stack_kb),
            ("max_fetches", u64::from(self.max_fetches)),
            ("max_concurrent_fetches", u64::from(self.max_concurrent_fetches)),
            ("max_response_bytes", self.max_response_bytes),
            ("max_result_bytes", self.max_result_bytes as u64),
            ("queue", self.queue as u64),
            ("max_in_flight", self.max_in_flight as u64),
            ("max_in_flight_per_server", self.max_in_flight_per_server as u64),
            ("max_queued_per_server", self.max_queued_per_server as u64),
            ("queue_timeout_ms", self.queue_timeout_ms),
            ("memory_budget_mb", self.memory_budget_mb),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "[sandbox] {key} must be greater than 0 (MCPBOOTD_SANDBOX__{})",
                    key.to_uppercase()
                )));
            }
        }
        if self.max_in_flight > MAX_IN_FLIGHT {
            return Err(ConfigError::Invalid(format!(
                "[sandbox] max_in_flight ({}) must be at most {MAX_IN_FLIGHT}: each call in flight holds one of the \
                 WebAssembly engine's instance slots, which reserve address space (MCPBOOTD_SANDBOX__MAX_IN_FLIGHT)",
                self.max_in_flight
            )));
        }
        if self.memory_budget_mb < self.memory_mb {
            return Err(ConfigError::Invalid(format!(
                "[sandbox] memory_budget_mb ({}) must be at least memory_mb ({}): the budget is shared by all \
                 calls in flight, and one call may use memory_mb",
                self.memory_budget_mb, self.memory_mb
            )));
        }
        if self.stack_kb * 1024 > 8 * 1024 * 1024 {
            return Err(ConfigError::Invalid(
                "[sandbox] stack_kb must be at most 8192 (MCPBOOTD_SANDBOX__STACK_KB)".into(),
            ));
        }
        Ok(())
    }
}

/// Refuses the keys that asked for the native engine or its worker processes, with what to do,
/// before deserialising would call them merely unknown.
pub(super) fn refuse_removed_keys(merged: &toml::Table) -> Result<(), ConfigError> {
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
