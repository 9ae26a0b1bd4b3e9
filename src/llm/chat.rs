//! The chat model's interface: the turns of a conversation, the reply and the tokens it cost,
//! the [`LlmClient`] trait every provider implements, and why a request failed.

use std::ops::{Add, AddAssign};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// Tokens spent and successful requests made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub requests: u32,
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.requests = self.requests.saturating_add(other.requests);
    }
}

impl Add for Usage {
    type Output = Usage;
    fn add(mut self, other: Usage) -> Usage {
        self += other;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One turn of a conversation. Conversations start with a user turn and alternate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Message {
        Message { role: Role::User, content: content.into() }
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message { role: Role::Assistant, content: content.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    pub usage: Usage,
}

/// A chat model. Implementations must be cheap to share between concurrent requests.
pub trait LlmClient: Send + Sync {
    fn model(&self) -> &str;
    fn complete<'a>(&'a self, system: &'a str, messages: &'a [Message]) -> BoxFuture<'a, Result<Reply, LlmError>>;
}

/// Why a request failed, after any retries. `endpoint` names the provider and URL, e.g.
/// `Anthropic at https://api.anthropic.com/v1/messages`.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("{endpoint} answered HTTP {status}: {body}")]
    Status { endpoint: String, status: u16, body: String },
    #[error("{endpoint} did not answer within {after:?} (raise [llm] timeout_ms for slow models)")]
    Timeout { endpoint: String, after: Duration },
    #[error("cannot reach {endpoint}: {message}")]
    Transport { endpoint: String, message: String },
    #[error("{endpoint} sent an unusable reply: {problem}")]
    BadResponse { endpoint: String, problem: UnusableReply },
}

/// What was wrong with a reply (or with the request that would have been sent), in words that
/// tell an operator whether `base_url` points at the right kind of API.
#[derive(Debug, thiserror::Error)]
pub enum UnusableReply {
    #[error("cannot encode the request: {0}")]
    Encode(serde_json::Error),
    #[error("the reply is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the body is not JSON ({0})")]
    NotJson(serde_json::Error),
    /// The API's own error message, as it sent it.
    #[error("the API reported an error: {0}")]
    Reported(String),
    #[error("the body has no \"content\" array; is base_url an Anthropic Messages API?")]
    NoContent,
    #[error("the body has no \"choices\"; is base_url an OpenAI-compatible /v1 endpoint?")]
    NoChoices,
    /// The model's refusal, as it sent it.
    #[error("the model refused: {0}")]
    Refused(String),
    #[error("choices[0].message.content is missing")]
    NoMessageContent,
}

impl LlmError {
    /// Whether another attempt might succeed.
    pub(super) fn is_retryable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => *status == 429 || (500..=599).contains(status),
            LlmError::Timeout { .. } | LlmError::Transport { .. } => true,
            LlmError::BadResponse { .. } => false,
        }
    }
}
