//! The HTTP side of the MCP endpoint, around rmcp's Streamable HTTP service.
//!
//! rmcp answers transport mistakes with plain-text bodies and statuses that MCP clients turn into
//! "Server returned an error response": invalid JSON as 415, `Accept: */*` as 406, a JSON-RPC
//! batch as 415, a wrong `Host` as 403 without naming it. Here every such answer becomes a
//! JSON-RPC error that says what was wrong and how to fix it, and three things rmcp refuses are
//! taken as clients mean them:
//!
//! * **`Accept`.** rmcp wants both `application/json` and `text/event-stream` listed. This
//!   endpoint is stateless and answers JSON, so a client that accepts JSON any other way
//!   (`*/*`, `application/*`, `application/json` alone, no header at all) is served.
//! * **Batches.** Protocol revision 2025-03-26 allows a JSON-RPC batch (an array of messages);
//!   later revisions removed it. Under 2025-03-26 (or without an `MCP-Protocol-Version` header,
//!   which means 2025-03-26) each message is answered as its own request and the answers come
//!   back as one array; under a later revision the batch is refused with the reason.
//! * **`Host`.** Checked before the request gets here (`api::hosts`), with the same rule as
//!   rmcp's (the host, and the port when an entry has one), so the refusal can name the host and
//!   the setting to change.
//!
//! A single `tools/call` that rmcp would answer as plain JSON is handed to the mount's direct
//! path instead (`serve::mount::direct_tool_call`), which answers it with the same bytes.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::{ACCEPT, ALLOW, CONTENT_TYPE, ORIGIN};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use serde_json::Value;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::mcp::params;
use crate::serve::mount::{self, McpEndpoint};

/// The protocol revision assumed when a request names none (the MCP specification's rule),
/// and the only one with JSON-RPC batches.
const BATCH_REVISION: &str = "2025-03-26";
/// Messages in one batch at most: each is a request of its own, admitted like any other.
pub const MAX_BATCH: usize = 64;
/// Bytes of rmcp's own plain-text refusals read to explain them.
const REFUSAL_BYTES: usize = 16 * 1024;
/// What rmcp needs to see to answer; this endpoint answers JSON whichever the client prefers.
const ACCEPT_BOTH: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");

/// Looks at a message before rmcp does, and may refuse it (a `tools/call` the caller's token
/// does not cover).
pub type Gate<'a> = &'a (dyn Fn(&[u8]) -> Option<ApiError> + Sync);

/// Answers one HTTP request to a mounted server's MCP endpoint; `gate` sees every message first.
pub async fn answer(mount: &McpEndpoint, request: Request, max_body_bytes: usize, gate: Option<Gate<'_>>) -> Response {
    if request.method() != axum::http::Method::POST {
        // rmcp answers 405 for the methods a stateless endpoint does not serve; say why.
        return explain_refusal(mount.handle(request).await, None, &Bytes::new()).await;
    }
    let (mut parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, max_body_bytes).await {
        Ok(body) => body,
        Err(error) => return unreadable_body(&error, max_body_bytes).into_response(),
    };
    let refusal = match complete_accept(&mut parts.headers) {
        Err(error) => Some(error),
        Ok(()) if !is_json(&parts.headers) => Some(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the JSON-RPC message as JSON, with Content-Type: application/json",
        )),
        Ok(()) => None,
    };
    if let Some(error) = refusal.or_else(|| removed_method(&parts.headers)) {
        return error.in_reply_to(id_of(&body)).into_response();
    }
    let origin = parts.headers.get(ORIGIN).cloned();
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return answer_batch(mount, parts, &body, gate).await;
    }
    if let Some(error) = params::misfit(&body).or_else(|| gate.and_then(|gate| gate(&body))) {
        return error.in_reply_to(id_of(&body)).into_response();
    }
    // A `tools/call` is answered by the mount itself when rmcp would answer it the same way;
    // every other request goes through rmcp.
    if let Some(call) = mount::direct_tool_call(&parts.headers, &body) {
        return mount.call_tool_directly(&parts, call).await;
    }
    let response = mount.handle(Request::from_parts(parts, Body::from(body.clone()))).await;
    explain_refusal(response, origin.as_ref(), &body).await
}

/// Fills in `Accept` for a client that accepts JSON without listing both types rmcp wants;
/// refuses one that excludes JSON.
fn complete_accept(headers: &mut HeaderMap) -> Result<(), ApiError> {
    // What the SDKs send, on every request: nothing to parse.
    if headers.get_all(ACCEPT).iter().any(|value| value == ACCEPT_BOTH) {
        return Ok(());
    }
    let mut listed = headers.get_all(ACCEPT).iter().filter(|v| !v.as_bytes().trim_ascii().is_empty()).peekable();
    if listed.peek().is_none() {
        headers.insert(ACCEPT, ACCEPT_BOTH);
        return Ok(());
    }
    let accepted: Vec<String> = listed
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|range| {
            let mut pieces = range.split(';');
            let essence = pieces.next()?.trim().to_ascii_lowercase();
            let refused = pieces.any(|p| {
                p.split_once('=').is_some_and(|(name, q)| {
                    name.trim().eq_ignore_ascii_case("q") && q.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
                })
            });
            (!refused).then_some(essence)
        })
        .collect();
    let has = |media: &str| accepted.iter().any(|a| a == media);
    if has("application/json") && has("text/event-stream") {
        return Ok(());
    }
    if has("application/json") || has("application/*") || has("*/*") {
        headers.insert(ACCEPT, ACCEPT_BOTH);
        return Ok(());
    }
    let said = headers.get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    Err(ApiError::new(
        ErrorCode::NotAcceptable,
        format!(
            "this endpoint answers application/json, which Accept {said:?} excludes; send Accept: application/json, text/event-stream"
        ),
    ))
}

/// The id of the JSON-RPC request in a body, so a refusal can name the request it answers
/// (clients match answers to requests by id); null when the body has none or cannot be read.
pub async fn request_id(request: Request, max_body_bytes: usize) -> Value {
    match axum::body::to_bytes(request.into_body(), max_body_bytes).await {
        Ok(body) => id_of(&body),
        Err(_) => Value::Null,
    }
}

fn id_of(body: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct Message {
        #[serde(default)]
        id: Value,
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(Message { id: id @ (Value::String(_) | Value::Number(_)) }) => id,
        _ => Value::Null,
    }
}

/// `ping` under a revision that removed it (2026-07-28 and later; every request there names its
/// method in `Mcp-Method`). rmcp answers only "ping" with -32601; this says why.
fn removed_method(headers: &HeaderMap) -> Option<ApiError> {
    let method = headers.get("mcp-method")?.to_str().ok()?;
    let revision = headers.get("mcp-protocol-version")?.to_str().ok()?;
    (method == "ping" && !revision.starts_with("2025-") && !revision.starts_with("2024-")).then(|| {
        ApiError::new(
            ErrorCode::MethodNotFound,
            format!(
                "ping is not part of MCP protocol revision {revision}, which this request speaks \
                 (MCP-Protocol-Version): requests are stateless and need no keep-alive; clients on 2025 \
                 revisions may still send ping"
            ),
        )
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|value| {
        let essence = value.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    })
}

fn unreadable_body(error: &axum::Error, max_body_bytes: usize) -> ApiError {
    let too_large = std::iter::successors(Some(error as &dyn std::error::Error), |e| e.source())
        .any(|e| e.is::<http_body_util::LengthLimitError>());
    let error = if too_large {
        ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("the request body is larger than [server] max_body_bytes ({max_body_bytes} bytes)"),
        )
    } else {
        ApiError::new(ErrorCode::InvalidMessage, format!("the request body could not be read: {error}"))
    };
    error.as_jsonrpc()
}

/// A JSON-RPC batch: each message answered as a request of its own (concurrently, like
/// separate POSTs), the answers returned together; notifications get none, so a batch of only
/// notifications is answered 202 like a single one.
async fn answer_batch(mount: &McpEndpoint, parts: Parts, body: &Bytes, gate: Option<Gate<'_>>) -> Response {
    let revision = parts.headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()).unwrap_or(BATCH_REVISION);
    if revision != BATCH_REVISION {
        return ApiError::new(
            ErrorCode::BatchNotSupported,
            format!(
                "JSON-RPC batches are not part of MCP protocol revision {revision} (only of {BATCH_REVISION}): \
                 send one JSON-RPC message per POST"
            ),
        )
        .as_jsonrpc()
        .into_response();
    }
    let messages: Vec<Value> = match serde_json::from_slice(body) {
        Ok(messages) => messages,
        Err(error) => return parse_error(&error).into_response(),
    };
    if messages.is_empty() || messages.len() > MAX_BATCH {
        return ApiError::new(
            ErrorCode::BatchNotSupported,
            format!("a batch holds 1 to {MAX_BATCH} JSON-RPC messages; this one holds {}", messages.len()),
        )
        .as_jsonrpc()
        .into_response();
    }
    let origin = parts.headers.get(ORIGIN).cloned();
    let answers = join_all(messages.into_iter().map(|message| {
        let mut request = Request::builder().method(parts.method.clone()).uri(parts.uri.clone()).version(parts.version);
        if let Some(headers) = request.headers_mut() {
            headers.clone_from(&parts.headers);
        }
        // What the route attached travels with each message as with a single request: the OAuth
        // grant above all, which the serving path checks every tool call (and script) against.
        if let Some(extensions) = request.extensions_mut() {
            extensions.clone_from(&parts.extensions);
        }
        let body = Bytes::from(serde_json::to_vec(&message).unwrap_or_default());
        let request = request.body(Body::from(body.clone())).expect("parts of a valid request");
        let origin = origin.clone();
        async move {
            if let Some(error) = params::misfit(&body).or_else(|| gate.and_then(|gate| gate(&body))) {
                return batch_answer(error.in_reply_to(id_of(&body)).into_response(), &message).await;
            }
            let response = explain_refusal(mount.handle(request).await, origin.as_ref(), &body).await;
            batch_answer(response, &message).await
        }
    }))
    .await;
    let answers: Vec<Value> = answers.into_iter().flatten().collect();
    if answers.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    axum::Json(answers).into_response()
}

/// One message's part of a batch answer: its JSON-RPC response, or nothing for a notification.
async fn batch_answer(response: Response, message: &Value) -> Option<Value> {
    if response.status() == StatusCode::ACCEPTED {
        return None;
    }
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.ok()?;
    let mut answer: Value = serde_json::from_slice(&body).ok()?;
    // A refusal written before the message was read has `id: null`; give it the message's id
    // so the client can tell which message it answers.
    if answer.get("error").is_some() && answer.get("id").is_some_and(Value::is_null) {
        answer["id"] = message.get("id").cloned().unwrap_or(Value::Null);
    }
    Some(answer)
}

fn parse_error(error: &serde_json::Error) -> ApiError {
    ApiError::new(ErrorCode::MalformedJson, format!("the body is not valid JSON: {error}")).as_jsonrpc()
}

/// rmcp's own refusals are plain text; this rewrites them as JSON-RPC errors that say what to
/// change. Successes and JSON answers pass through untouched, so the common path only looks at
/// the status and one header.
async fn explain_refusal(response: Response, origin: Option<&HeaderValue>, body: &Bytes) -> Response {
    let status = response.status();
    let is_json_answer = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if status.is_success() {
        return response;
    }
    if is_json_answer {
        // rmcp's own JSON-RPC refusal (a 2026-07-28 request without its Mcp-* headers, say): its
        // body says what is wrong; marked so the route counts it like the refusals written here.
        let mut response = response;
        if status.is_client_error() {
            response.extensions_mut().insert(ErrorCode::InvalidMessage);
        }
        return response;
    }
    let allow = response.headers().get(ALLOW).cloned();
    let text = axum::body::to_bytes(response.into_body(), REFUSAL_BYTES).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let error = match status {
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            ErrorCode::MethodNotAllowed,
            "this MCP endpoint answers POST only: it is stateless, with no event stream to GET and no session to DELETE",
        ),
        StatusCode::FORBIDDEN if text.contains("Origin") => {
            let origin = origin.and_then(|o| o.to_str().ok()).unwrap_or_default();
            ApiError::new(
                ErrorCode::OriginNotAllowed,
                format!(
                    "the Origin {origin:?} may not call this daemon's MCP endpoints: add it to [server] \
                     allowed_origins (MCPBOOTD_SERVER__ALLOWED_ORIGINS) if that web page should"
                ),
            )
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(ErrorCode::BodyTooLarge, "the request body is larger than [server] max_body_bytes")
        }
        // The content type was checked before the hand-over, so rmcp's 415 means the body did
        // not deserialise: not JSON at all, or JSON that is not a JSON-RPC message.
        StatusCode::UNSUPPORTED_MEDIA_TYPE => match serde_json::from_slice::<Value>(body) {
            Err(error) => parse_error(&error),
            Ok(_) => ApiError::new(
                ErrorCode::InvalidMessage,
                "the body is JSON but not a JSON-RPC 2.0 request or notification ({\"jsonrpc\": \"2.0\", \
                 \"id\": 1, \"method\": \"tools/list\"} is one)",
            ),
        },
        status if status.is_server_error() => ApiError::internal(format!("MCP transport answered {status}: {text}")),
        status => ApiError::with_status(status, ErrorCode::InvalidMessage, text.trim().to_string()),
    };
    let mut response = error.in_reply_to(id_of(body)).into_response();
    if let Some(allow) = allow {
        response.headers_mut().insert(ALLOW, allow);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(values: &[&str]) -> Result<String, ApiError> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        complete_accept(&mut headers)?;
        Ok(headers.get_all(ACCEPT).iter().map(|v| v.to_str().unwrap()).collect::<Vec<_>>().join(" | "))
    }

    #[test]
    fn accept_is_completed_for_clients_that_take_json() {
        for taken in [&[][..], &[""], &["*/*"], &["application/*"], &["application/json"], &["text/plain, */*;q=0.1"]] {
            assert_eq!(accept(taken).unwrap(), "application/json, text/event-stream", "{taken:?}");
        }
        let both = "application/json, text/event-stream;q=0.5";
        assert_eq!(accept(&[both]).unwrap(), both, "left as sent");
        for refused in [&["text/html"][..], &["application/json;q=0"], &["text/event-stream"]] {
            let error = accept(refused).unwrap_err();
            assert_eq!(error.code, ErrorCode::NotAcceptable, "{refused:?}");
            assert_eq!(error.status, StatusCode::NOT_ACCEPTABLE);
        }
    }
}
