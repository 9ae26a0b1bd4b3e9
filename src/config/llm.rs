//! `[llm]`: the provider that plans and compiles prompt registrations.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::secret::Secret;

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

    /// Checks that a provider comes with a model.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(provider) = self.provider
            && self.model.trim().is_empty()
        {
            return Err(ConfigError::Invalid(format!(
                "[llm] provider = \"{provider}\" needs a model: set [llm] model or MCPBOOTD_LLM__MODEL"
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    /// OpenAI's Chat Completions, or any server that speaks it (Ollama, vLLM, llama.cpp).
    OpenAi,
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

/// A `[llm] provider` the daemon has no client for; `name` is as given, trimmed and lowercased.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "[llm] provider = {name:?} is not supported: use \"anthropic\" or \"openai\" (OpenAI-compatible servers such as Ollama or vLLM use \"openai\" with a base_url)"
)]
pub struct UnknownProvider {
    name: String,
}

impl std::str::FromStr for Provider {
    type Err = UnknownProvider;
    fn from_str(s: &str) -> Result<Provider, UnknownProvider> {
        match s.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Ok(Provider::Anthropic),
            "openai" => Ok(Provider::OpenAi),
            other => Err(UnknownProvider { name: other.to_string() }),
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
