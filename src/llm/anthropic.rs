//! The Anthropic Messages API (`POST /v1/messages`), non-streaming.
//!
//! Request: `{model, max_tokens, system, messages: [{role, content}]}` with `x-api-key` and
//! `anthropic-version` headers. Reply: the text blocks of `content`, concatenated (other block
//! types, such as `thinking`, are not part of the answer), and `usage`.

use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use super::chat::{LlmClient, LlmError, Message, Reply, UnusableReply, Usage};
use super::http::{Http, SetupError, endpoint_url, secret_header};
use super::settings::LlmSettings;
use crate::config::Provider;

pub(super) const PATH: &str = "v1/messages";
const API_VERSION: &str = "2023-06-01";

pub(super) struct Anthropic {
    http: Http,
    model: String,
    max_tokens: u32,
    headers: HeaderMap,
}

impl Anthropic {
    pub(super) fn new(settings: LlmSettings) -> Result<Anthropic, SetupError> {
        // Operators often copy a base URL that already ends in /v1; never send /v1/v1/messages.
        let base = settings.base_url.as_deref().map(|b| b.trim().trim_end_matches('/')).filter(|b| !b.is_empty());
        let path = if base.is_some_and(|b| b.ends_with("/v1")) { "messages" } else { PATH };
        let url = endpoint_url(Provider::Anthropic, base, path)?;
        let mut headers = HeaderMap::new();
        // No key is sent when none is configured (e.g. a gateway that adds it).
        if !settings.api_key.is_empty() {
            headers.insert("x-api-key", secret_header(&settings.api_key, "Anthropic API key")?);
        }
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(Anthropic {
            http: Http::new(&settings, url)?,
            model: settings.model,
            max_tokens: settings.max_tokens,
            headers,
        })
    }
}

impl LlmClient for Anthropic {
    fn model(&self) -> &str {
        &self.model
    }

    fn complete<'a>(&'a self, system: &'a str, messages: &'a [Message]) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(async move {
            let body = request_body(&self.model, self.max_tokens, system, messages);
            let body = serde_json::to_vec(&body).map_err(|e| self.http.bad_response(UnusableReply::Encode(e)))?;
            let reply = self.http.post(&self.headers, Bytes::from(body)).await?;
            let parsed = parse_reply(&reply).map_err(|problem| self.http.bad_response(problem))?;
            if parsed.stop_reason.as_deref() == Some("max_tokens") {
                tracing::warn!(model = %self.model, max_tokens = self.max_tokens, "the LLM reply was cut off at max_tokens");
            }
            Ok(Reply { text: parsed.text, usage: parsed.usage })
        })
    }
}

fn request_body(model: &str, max_tokens: u32, system: &str, messages: &[Message]) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(max_tokens));
    // An empty system prompt is omitted: the API rejects empty text.
    if !system.is_empty() {
        body.insert("system".into(), json!(system));
    }
    let messages: Vec<Value> =
        messages.iter().map(|m| json!({"role": m.role.as_str(), "content": m.content})).collect();
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

#[derive(Debug, PartialEq)]
struct Parsed {
    text: String,
    usage: Usage,
    stop_reason: Option<String>,
}

fn parse_reply(body: &[u8]) -> Result<Parsed, UnusableReply> {
    let value: Value = serde_json::from_slice(body).map_err(UnusableReply::NotJson)?;
    if value.get("type").and_then(Value::as_str) == Some("error") {
        let message = value.pointer("/error/message").and_then(Value::as_str).unwrap_or("no message");
        return Err(UnusableReply::Reported(message.to_string()));
    }
    let Some(content) = value.get("content").and_then(Value::as_array) else {
        return Err(UnusableReply::NoContent);
    };
    let text: String = content
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    let tokens = |key: &str| value.get("usage").and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
    // Cached prompt tokens are reported apart from `input_tokens` but are input all the same.
    let input_tokens = tokens("input_tokens")
        .saturating_add(tokens("cache_creation_input_tokens"))
        .saturating_add(tokens("cache_read_input_tokens"));
    Ok(Parsed {
        text,
        usage: Usage { input_tokens, output_tokens: tokens("output_tokens"), requests: 1 },
        stop_reason: value.get("stop_reason").and_then(Value::as_str).map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::chat::Role;

    #[test]
    fn body_shape() {
        let messages = [Message::user("q"), Message { role: Role::Assistant, content: "a".into() }];
        assert_eq!(
            request_body("m", 10, "sys", &messages),
            json!({"model": "m", "max_tokens": 10, "system": "sys", "messages": [
                {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
        );
        assert!(request_body("m", 10, "", &messages).get("system").is_none());
    }

    #[test]
    fn replies() {
        let ok = br#"{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"x"},{"type":"text","text":"b"}],
            "stop_reason":"max_tokens","usage":{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":10}}"#;
        assert_eq!(
            parse_reply(ok).unwrap(),
            Parsed {
                text: "ab".into(),
                usage: Usage { input_tokens: 13, output_tokens: 4, requests: 1 },
                stop_reason: Some("max_tokens".into())
            }
        );
        assert_eq!(parse_reply(br#"{"content":[]}"#).unwrap().usage.input_tokens, 0);
        // Operators read these in failed generations, so they are pinned word for word.
        let no_content = r#"the body has no "content" array; is base_url an Anthropic Messages API?"#;
        let cases: [(&[u8], &str); 5] = [
            (b"<html>", "the body is not JSON (expected value at line 1 column 1)"),
            (br#"{"choices":[]}"#, no_content),
            (br#"{"content":"text"}"#, no_content),
            (
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "the API reported an error: Overloaded",
            ),
            (br#"{"type":"error"}"#, "the API reported an error: no message"),
        ];
        for (body, expected) in cases {
            assert_eq!(parse_reply(body).unwrap_err().to_string(), expected);
        }
    }
}
