//! Request bodies and results of tools derived from API descriptions, as an API receives and
//! answers them: multipart forms with file parts (from base64 content or from a URL fetched
//! through the server's whitelist), binary bodies (as bytes, or as base64 text for `format:
//! byte`), the size limits on both, and a result that does not match its output schema.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::helpers::{AppOptions, TestApp, mcp_call, spawn_app_with, text_of, wait_for_status};

const FILES_HOST: &str = "api.files.test";
/// Resolved to loopback like the API, but never on the server's whitelist.
const ELSEWHERE_HOST: &str = "files.elsewhere.test";
/// `[sandbox] max_response_bytes` for these tests.
const MAX_RESPONSE_BYTES: usize = 4096;

/// A raw request the API received.
#[derive(Debug, Clone)]
struct Raw {
    method: String,
    host: String,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Raw {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

/// Every byte value once: a file no text encoding would carry unchanged.
fn all_bytes() -> Vec<u8> {
    (0..=255u8).collect()
}

/// A loopback API that records raw requests. `/files/logo.png` is a small PNG-typed file,
/// `/files/huge.bin` one larger than the response limit; `/orders/mismatched` answers an order
/// whose id is not the integer the description promises; anything else answers `{id, size}`.
async fn start_api() -> (u16, Arc<Mutex<Vec<Raw>>>) {
    let seen: Arc<Mutex<Vec<Raw>>> = Arc::default();
    let record = seen.clone();
    let router = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
        let record = record.clone();
        async move {
            let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("").to_string();
            let size = body.len();
            record.lock().unwrap().push(Raw {
                method: method.to_string(),
                host,
                path: uri.path().to_string(),
                headers,
                body,
            });
            match uri.path() {
                "/files/logo.png" => ([("content-type", "image/png")], all_bytes()).into_response(),
                "/files/huge.bin" => vec![7u8; MAX_RESPONSE_BYTES * 2].into_response(),
                "/v1/orders/mismatched" => axum::Json(json!({"id": "not-a-number", "total": 3})).into_response(),
                _ => axum::Json(json!({"id": 1, "size": size})).into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (port, seen)
}

fn files_api(port: u16) -> Value {
    let received = json!({"200": {"description": "received", "content": {"application/json": {"schema": {
        "type": "object", "properties": {"id": {"type": "integer"}, "size": {"type": "integer"}}}}}}});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Files", "version": "1"},
        "servers": [{"url": format!("http://{FILES_HOST}:{port}/v1")}],
        "paths": {
            "/documents": {"post": {
                "operationId": "uploadDocument",
                "requestBody": {"required": true, "content": {"multipart/form-data": {"schema": {
                    "type": "object", "required": ["file"], "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "attachments": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "purpose": {"type": "string"},
                        "labels": {"type": "object", "properties": {"team": {"type": "string"}}}}}}}},
                "responses": received.clone()
            }},
            "/images/{name}": {"put": {
                "operationId": "putImage",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
                "responses": received
            }},
            "/attachments/{name}": {"post": {
                "operationId": "postAttachment",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "byte"}}}},
                "responses": received.clone()
            }},
            "/orders/mismatched": {"get": {
                "operationId": "getOrder",
                "responses": {"200": {"description": "an order", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}, "total": {"type": "number"}}}}}}}
            }}
        }
    })
}

async fn files_app(port: u16) -> TestApp {
    let env = [
        (format!("MCPBOOTD_EGRESS__RESOLVE__{FILES_HOST}"), "127.0.0.1".to_string()),
        (format!("MCPBOOTD_EGRESS__RESOLVE__{ELSEWHERE_HOST}"), "127.0.0.1".to_string()),
        ("MCPBOOTD_SANDBOX__MAX_RESPONSE_BYTES".into(), MAX_RESPONSE_BYTES.to_string()),
        ("MCPBOOTD_SANDBOX__MAX_ARGUMENT_BYTES".into(), "8192".into()),
    ];
    let app = spawn_app_with(AppOptions { env: env.into(), ..Default::default() }).await;
    let (status, started) = app.post("/admin/servers", &json!({"id": "files", "openapi_spec": files_api(port)})).await;
    assert_eq!(status, 202, "{started}");
    let view = wait_for_status(&app, "files", &["ready", "failed"]).await;
    assert_eq!(view["status"], "ready", "{view:#}");
    app
}

/// A multipart part: its headers (lower-case names) and its bytes.
#[derive(Debug)]
struct Part {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Part {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Splits a multipart body at `boundary`, checking its framing (RFC 2046) on the way.
fn parts(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}");
    let find = |haystack: &[u8], needle: &[u8], from: usize| {
        haystack[from..].windows(needle.len()).position(|w| w == needle).map(|i| i + from)
    };
    assert!(body.starts_with(delimiter.as_bytes()), "the body starts with the boundary");
    assert!(body.ends_with(format!("--{boundary}--\r\n").as_bytes()), "the body ends with the closing boundary");
    let separator = format!("\r\n--{boundary}");
    let mut out = Vec::new();
    let mut at = delimiter.len();
    while body[at..].starts_with(b"\r\n") {
        let start = at + 2;
        let head_end = find(body, b"\r\n\r\n", start).expect("a part has headers");
        let head = std::str::from_utf8(&body[start..head_end]).unwrap();
        let headers = head
            .split("\r\n")
            .map(|line| {
                let (name, value) = line.split_once(": ").unwrap();
                (name.to_ascii_lowercase(), value.to_string())
            })
            .collect();
        let end = find(body, separator.as_bytes(), head_end + 4).expect("a part ends at the boundary");
        out.push(Part { headers, body: body[head_end + 4..end].to_vec() });
        at = end + separator.len();
    }
    out
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_forms_carry_fields_and_files_from_base64_or_a_whitelisted_url() {
    let (port, seen) = start_api().await;
    let app = files_app(port).await;
    let client = app.mcp("files").await;
    let tools = client.list_all_tools().await.unwrap();
    let upload = tools.iter().find(|t| t.name == "upload_document").unwrap();
    let file_schema = &upload.input_schema["properties"]["body"]["properties"]["file"];
    assert!(
        file_schema["properties"]["content_base64"].is_object(),
        "a host is told how to send a file: {file_schema}"
    );

    let logo = format!("http://{FILES_HOST}:{port}/files/logo.png");
    let arguments = json!({"body": {
        "file": {"content_base64": base64(&all_bytes()), "filename": "report \"final\".bin", "media_type": "application/x-report"},
        "attachments": [{"url": logo}, {"content_base64": "aGk=", "filename": "hi.txt"}],
        "purpose": "héllo",
        "labels": {"team": "ops"}
    }});
    let result = mcp_call(&client, "upload_document", arguments).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));

    let requests = seen.lock().unwrap().clone();
    let fetched: Vec<&Raw> = requests.iter().filter(|r| r.path == "/files/logo.png").collect();
    assert_eq!(fetched.len(), 1, "the url file was fetched once, through the egress");
    assert_eq!(fetched[0].host, format!("{FILES_HOST}:{port}"));
    let upload = requests.iter().find(|r| r.path == "/v1/documents").expect("the form was sent");
    assert_eq!(upload.method, "POST");
    let content_type = upload.header("content-type");
    let boundary = content_type.strip_prefix("multipart/form-data; boundary=").expect(content_type);
    assert!(boundary.len() >= 20, "a boundary no content is likely to contain: {boundary}");
    let parts = parts(&upload.body, boundary);
    let dispositions: Vec<&str> = parts.iter().map(|p| p.header("content-disposition").unwrap()).collect();
    assert_eq!(
        dispositions,
        [
            r#"form-data; name="file"; filename="report %22final%22.bin""#,
            r#"form-data; name="attachments"; filename="logo.png""#,
            r#"form-data; name="attachments"; filename="hi.txt""#,
            r#"form-data; name="purpose""#,
            r#"form-data; name="labels""#,
        ]
    );
    assert_eq!(parts[0].body, all_bytes(), "every byte arrives as it was given");
    assert_eq!(parts[0].header("content-type"), Some("application/x-report"));
    assert_eq!(parts[1].body, all_bytes(), "the fetched file's bytes");
    assert_eq!(parts[1].header("content-type"), Some("image/png"), "the fetched file's type");
    assert_eq!(
        (parts[2].body.as_slice(), parts[2].header("content-type")),
        (&b"hi"[..], Some("application/octet-stream"))
    );
    assert_eq!(parts[3].body, "héllo".as_bytes());
    assert_eq!(parts[3].header("content-type"), None, "a text field is a plain part");
    assert_eq!(
        (parts[4].body.as_slice(), parts[4].header("content-type")),
        (&br#"{"team":"ops"}"#[..], Some("application/json"))
    );
    assert_eq!(result.structured_content, Some(json!({"id": 1, "size": upload.body.len()})));

    // A media type that would add lines to the part's headers is refused before anything is sent.
    seen.lock().unwrap().clear();
    let injected = json!({"body": {"file": {"content_base64": "aGk=", "media_type": "text/plain\r\nX-Evil: 1"}}});
    let result = mcp_call(&client, "upload_document", injected).await;
    assert_eq!(result.is_error, Some(true));
    assert!(text_of(&result).contains("media_type"), "{}", text_of(&result));
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
    client.cancel().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_bodies_are_sent_as_given_bytes() {
    let (port, seen) = start_api().await;
    let app = files_app(port).await;
    let (status, call) = app
        .admin_call("files", "put_image", json!({"name": "cat", "body": {"content_base64": base64(&all_bytes())}}))
        .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["result"]["isError"], false, "{call}");
    let requests = seen.lock().unwrap().clone();
    let put = requests.iter().find(|r| r.path == "/v1/images/cat").expect("the body was sent");
    assert_eq!((put.method.as_str(), put.header("content-type")), ("PUT", "application/octet-stream"));
    assert_eq!(put.body.as_ref(), all_bytes().as_slice());

    // From a URL on the whitelist too.
    let logo = format!("http://{FILES_HOST}:{port}/files/logo.png");
    let (_, call) = app.admin_call("files", "put_image", json!({"name": "logo", "body": {"url": logo}})).await;
    assert_eq!(call["result"]["isError"], false, "{call}");
    let requests = seen.lock().unwrap().clone();
    let put = requests.iter().find(|r| r.path == "/v1/images/logo").expect("the body was sent");
    assert_eq!(put.body.as_ref(), all_bytes().as_slice());

    let (_, call) =
        app.admin_call("files", "put_image", json!({"name": "x", "body": {"content_base64": "not base64!"}})).await;
    assert_eq!(call["result"]["isError"], true, "{call}");
    assert!(call["result"]["content"][0]["text"].as_str().unwrap().contains("not valid base64"), "{call}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_bodies_are_sent_as_base64_text() {
    let (port, seen) = start_api().await;
    let app = files_app(port).await;
    // Given as URL-safe base64 with a line break, sent as the standard base64 of the same bytes.
    let given = base64(&all_bytes()).replace('+', "-").replace('/', "_");
    let given = format!("{}\n{}", &given[..40], &given[40..]);
    let (status, call) =
        app.admin_call("files", "post_attachment", json!({"name": "given", "body": {"content_base64": given}})).await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["result"]["isError"], false, "{call}");
    let logo = format!("http://{FILES_HOST}:{port}/files/logo.png");
    let (_, call) = app.admin_call("files", "post_attachment", json!({"name": "fetched", "body": {"url": logo}})).await;
    assert_eq!(call["result"]["isError"], false, "{call}");
    let requests = seen.lock().unwrap().clone();
    for name in ["given", "fetched"] {
        let post = requests.iter().find(|r| r.path == format!("/v1/attachments/{name}")).expect("the body was sent");
        assert_eq!(post.header("content-type"), "application/octet-stream");
        assert_eq!(std::str::from_utf8(&post.body).unwrap(), base64(&all_bytes()), "{name}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_url_off_the_whitelist_is_denied_like_any_fetch() {
    let (port, seen) = start_api().await;
    let app = files_app(port).await;
    for url in [
        "file:///etc/passwd".to_string(),
        format!("http://127.0.0.1:{port}/files/logo.png"),
        format!("http://{ELSEWHERE_HOST}:{port}/files/logo.png"),
    ] {
        seen.lock().unwrap().clear();
        let (status, call) =
            app.admin_call("files", "upload_document", json!({"body": {"file": {"url": url.clone()}}})).await;
        assert_eq!(status, 200, "{call}");
        assert_eq!(call["result"]["isError"], true, "{url}: {call}");
        let text = call["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("the file at") && text.contains("could not be fetched"), "{url}: {text}");
        assert!(seen.lock().unwrap().is_empty(), "{url}: nothing reached the network, not even the upload");
    }
    let (_, calls) = app.get("/admin/servers/files/calls?limit=1").await;
    let last = &calls["calls"][0];
    assert_eq!(last["outcome"], "denied", "{last}");
    assert_eq!(
        (last["egress"][0]["allowed"].clone(), last["egress"][0]["host"].clone()),
        (json!(false), json!(ELSEWHERE_HOST))
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_larger_than_the_sandbox_limits_are_refused_naming_the_limit() {
    let (port, seen) = start_api().await;
    let app = files_app(port).await;
    let huge = format!("http://{FILES_HOST}:{port}/files/huge.bin");
    let (_, call) = app.admin_call("files", "upload_document", json!({"body": {"file": {"url": huge}}})).await;
    assert_eq!(call["result"]["isError"], true, "{call}");
    let text = call["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("max_response_bytes") && text.contains(&MAX_RESPONSE_BYTES.to_string()), "{text}");
    assert!(!seen.lock().unwrap().iter().any(|r| r.path == "/v1/documents"), "no upload of a cut file");

    let big = base64(&vec![1u8; 9000]);
    let (status, refused) =
        app.admin_call("files", "upload_document", json!({"body": {"file": {"content_base64": big}}})).await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_argument_bytes") && message.contains("8192"), "{message}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_does_not_match_its_output_schema_comes_as_text_with_a_warning() {
    let (port, _seen) = start_api().await;
    let app = files_app(port).await;
    let client = app.mcp("files").await;
    let result = mcp_call(&client, "get_order", json!({})).await;
    assert!(result.structured_content.is_none(), "no structuredContent a client would reject: {result:?}");
    let text = text_of(&result);
    assert!(text.contains("does not match this tool's output schema") && text.contains("id"), "{text}");
    assert!(text.contains("not-a-number"), "the answer itself is still there: {text}");
    let (_, calls) = app.get("/admin/servers/files/calls?limit=1").await;
    let call = &calls["calls"][0];
    assert_eq!(call["outcome"], "ok", "the call worked: {call}");
    let console = call["console"].as_str().unwrap();
    assert!(console.contains("[warn]") && console.contains("does not match its output_schema"), "{console}");
    client.cancel().await.unwrap();
    app.stop().await;
}
