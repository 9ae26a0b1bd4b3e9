//! OpenAI Chat Completions (`POST {base_url}/chat/completions`), non-streaming; also what
//! Ollama, vLLM and llama.cpp serve.
//!
//! Request: `{model, max_tokens, messages}` with the system prompt as the first message and
//! `Authorization: Bearer` only when a key is configured (local servers need none). Reply:
//! `choices[0].message.content`; `usage` is optional (some local servers omit it).
//!
//! OpenAI's reasoning models refuse `max_tokens` and want `max_completion_tokens`, which
//! older compatible servers do not know. So `max_tokens` is sent first and, when a 400 names
//! `max_completion_tokens`, the request is repeated once with that field, and this client
//! keeps using it.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::chat::{LlmClient, LlmError, Message, Reply, UnusableReply, Usage};
use super::http::{Http, SetupError, endpoint_url, secret_header};
use super::settings::LlmSettings;
use crate::config::Provider;

pub(super) const PATH: &str = "chat/completions";

pub(super) struct OpenAi {
    http: Http,
    model: String,
    max_tokens: u32,
    headers: HeaderMap,
    use_max_completion_tokens: AtomicBool,
}

impl OpenAi {
    pub(super) fn new(settings: LlmSettings) -> Result<OpenAi, SetupError> {
        let url = endpoint_url(Provider::OpenAi, settings.base_url.as_deref(), PATH)?;
        let mut headers = HeaderMap::new();
        if !settings.api_key.is_empty() {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {}", settings.api_key), "OpenAI API key")?);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(OpenAi {
            http: Http::new(&settings, url)?,
            model: settings.model,
            max_tokens: settings.max_tokens,
            headers,
            use_max_completion_tokens: AtomicBool::new(false),
        })
    }

    async fn send(&self, system: &str, messages: &[Message], completion_field: bool) -> Result<Bytes, LlmError> {
        let body = request_body(&self.model, self.max_tokens, completion_field, system, messages);
        let body = serde_json::to_vec(&body).map_err(|e| self.http.bad_response(UnusableReply::Encode(e)))?;
        self.http.post(&self.headers, Bytes::from(body)).await
    }
}

impl LlmClient for OpenAi {
    fn model(&self) -> &str {
        &self.model
    }

    fn complete<'a>(&'a self, system: &'a str, messages: &'a [Message]) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(async move {
            let completion_field = self.use_max_completion_tokens.load(Ordering::Relaxed);
            let reply = match self.send(system, messages, completion_field).await {
                Err(LlmError::Status { status: 400, body, .. })
                    if !completion_field && body.contains("max_completion_tokens") =>
                {
                    tracing::info!(model = %self.model, "the model wants max_completion_tokens instead of max_tokens; switching");
                    self.use_max_completion_tokens.store(true, Ordering::Relaxed);
                    self.send(system, messages, true).await?
                }
                other => other?,
            };
            let parsed = parse_reply(&reply).map_err(|problem| self.http.bad_response(problem))?;
            if parsed.finish_reason.as_deref() == Some("length") {
                tracing::warn!(model = %self.model, max_tokens = self.max_tokens, "the LLM reply was cut off at max_tokens");
            }
            Ok(Reply { text: parsed.text, usage: parsed.usage })
        })
    }
}

fn request_body(model: &str, max_tokens: u32, completion_field: bool, system: &str, messages: &[Message]) -> Value {
    let mut all = Vec::with_capacity(messages.len() + 1);
    if !system.is_empty() {
        all.push(json!({"role": "system", "content": system}));
    }
    all.extend(messages.iter().map(|m| json!({"role": m.role.as_str(), "content": m.content})));
    let tokens_field = if completion_field { "max_completion_tokens" } else { "max_tokens" };
    json!({"model": model, tokens_field: max_tokens, "messages": all})
}

#[derive(Debug, PartialEq)]
struct Parsed {
    text: String,
    usage: Usage,
    finish_reason: Option<String>,
}

fn parse_reply(body: &[u8]) -> Result<Parsed, UnusableReply> {
    let value: Value = serde_json::from_slice(body).map_err(UnusableReply::NotJson)?;
    // Some compatible servers report errors with status 200.
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let message =
            error.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| error.to_string());
        return Err(UnusableReply::Reported(message));
    }
    let Some(choice) = value.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        return Err(UnusableReply::NoChoices);
    };
    let message = choice.get("message");
    let text = match message.and_then(|m| m.get("content")) {
        Some(Value::String(text)) => text.clone(),
        // A few servers return content parts instead of a string.
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => {
            if let Some(refusal) = message.and_then(|m| m.get("refusal")).and_then(Value::as_str) {
                return Err(UnusableReply::Refused(refusal.to_string()));
            }
            return Err(UnusableReply::NoMessageContent);
        }
    };
    let tokens = |key: &str| value.get("usage").and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
    Ok(Parsed {
        text,
        usage: Usage { input_tokens: tokens("prompt_tokens"), output_tokens: tokens("completion_tokens"), requests: 1 },
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_shape() {
        assert_eq!(
            request_body("m", 5, false, "sys", &[Message::user("q")]),
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]})
        );
        assert_eq!(
            request_body("m", 5, true, "", &[Message::user("q")]),
            json!({"model": "m", "max_completion_tokens": 5, "messages": [{"role": "user", "content": "q"}]})
        );
    }

    #[test]
    fn replies() {
        let ok = br#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],
            "usage":{"prompt_tokens":2,"completion_tokens":9,"total_tokens":11}}"#;
        assert_eq!(
            parse_reply(ok).unwrap(),
            Parsed {
                text: "hi".into(),
                usage: Usage { input_tokens: 2, output_tokens: 9, requests: 1 },
                finish_reason: Some("length".into())
            }
        );
        let parts = br#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#;
        assert_eq!(parse_reply(parts).unwrap().text, "ab");
        // Operators read these in failed generations, so they are pinned word for word.
        let cases: [(&[u8], &str); 7] = [
            (b"not json", "the body is not JSON (expected ident at line 1 column 2)"),
            (br#"{"content":[]}"#, r#"the body has no "choices"; is base_url an OpenAI-compatible /v1 endpoint?"#),
            (br#"{"choices":[]}"#, r#"the body has no "choices"; is base_url an OpenAI-compatible /v1 endpoint?"#),
            (br#"{"choices":[{"message":{"content":null,"refusal":"no can do"}}]}"#, "the model refused: no can do"),
            (br#"{"choices":[{"message":{}}]}"#, "choices[0].message.content is missing"),
            (br#"{"error":{"message":"model not found"}}"#, "the API reported an error: model not found"),
            (br#"{"error":{"code":7}}"#, r#"the API reported an error: {"code":7}"#),
        ];
        for (body, expected) in cases {
            assert_eq!(parse_reply(body).unwrap_err().to_string(), expected);
        }
    }
}
