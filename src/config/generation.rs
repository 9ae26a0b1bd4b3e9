//! `[generation]`: generation jobs, self-tests, approval, drift checks and tool health.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

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

impl GenerationConfig {
    /// `drift_check_interval` as a duration; `None` when drift checks are off.
    pub fn drift_interval(&self) -> Option<Duration> {
        let text = self.drift_check_interval.trim();
        if text.is_empty() || text == "off" {
            return None;
        }
        humantime::parse_duration(text).ok().filter(|d| !d.is_zero())
    }

    /// Checks the concurrency, drift and health settings.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 || self.compile_concurrency == 0 {
            return Err(ConfigError::Invalid(
                "[generation] concurrency and compile_concurrency must be at least 1".into(),
            ));
        }
        let interval = self.drift_check_interval.trim();
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
        if !(1..=64).contains(&self.health_window) || self.degraded_min_calls > self.health_window {
            return Err(ConfigError::Invalid(
                "[generation] health_window must be between 1 and 64, and degraded_min_calls at most health_window"
                    .into(),
            ));
        }
        if !(self.degraded_error_rate > 0.0 && self.degraded_error_rate <= 1.0) {
            return Err(ConfigError::Invalid(
                "[generation] degraded_error_rate must be a share of calls above 0 and at most 1, e.g. 0.5".into(),
            ));
        }
        if !(1..=crate::toolset::MAX_TOOLS).contains(&self.max_tools) {
            return Err(ConfigError::Invalid(format!(
                "[generation] max_tools must be between 1 and {} (the most tools a server may have)",
                crate::toolset::MAX_TOOLS
            )));
        }
        Ok(())
    }
}
