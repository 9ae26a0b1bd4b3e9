//! The settings of one provider, read from `[llm]`.

use std::fmt;
use std::time::Duration;

use crate::config::Provider;

/// Back-off unit when the configuration does not say: 1 s, 2 s, 4 s, ... (plus jitter).
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(1);

/// Everything needed to talk to one provider.
#[derive(Clone)]
pub struct LlmSettings {
    pub provider: Provider,
    pub model: String,
    /// `None` (or empty): the provider's public endpoint ([`Provider::default_base_url`]).
    pub base_url: Option<String>,
    /// May be empty for local OpenAI-compatible servers, which need none.
    pub api_key: String,
    pub max_tokens: u32,
    /// Per attempt, including the time the provider takes to write the reply.
    pub timeout: Duration,
    /// Extra attempts after a retryable failure.
    pub max_retries: u32,
    /// First backoff step; doubles on every retry.
    pub retry_base: Duration,
}

impl fmt::Debug for LlmSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmSettings")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &if self.api_key.is_empty() { "" } else { "<redacted>" })
            .field("max_tokens", &self.max_tokens)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .finish()
    }
}

impl LlmSettings {
    /// Settings from the `[llm]` section; `None` when no provider is configured (prompt
    /// registrations are then refused, toolsets keep working). The section was checked when the
    /// configuration loaded; what it cannot check is [`build_client`](super::build_client)'s.
    pub fn from_config(config: &crate::config::LlmConfig) -> Option<LlmSettings> {
        let provider = config.provider?;
        let base_url = config.base_url.trim();
        Some(LlmSettings {
            provider,
            model: config.model.trim().to_string(),
            base_url: (!base_url.is_empty()).then(|| base_url.to_string()),
            api_key: config.api_key.expose().to_string(),
            max_tokens: config.max_tokens,
            timeout: Duration::from_millis(config.timeout_ms),
            max_retries: config.max_retries,
            retry_base: DEFAULT_RETRY_BASE,
        })
    }
}
