//! Request bodies: which ones the executor can send, and how each becomes a tool argument. A
//! JSON, form or text body is its schema; a file (a binary body, or a multipart field of bytes)
//! is given as `{content_base64 | url, filename, media_type}`, whose bytes the executor sends
//! raw or as base64 text, as the description says.

use serde_json::{Value, json};

use super::spec::{Body, Operation};

/// Whether the executor can call `op`, or why not. The one place that decides it: the cap on
/// tools and discovery mode count only the operations it accepts.
pub fn supported(op: &Operation) -> Result<(), Unsupported> {
    let Some(body) = &op.body else { return Ok(()) };
    let kind = BodyKind::of(&body.content_type);
    if kind == BodyKind::Multipart && !body.content_type.starts_with("multipart/form-data") {
        return Err(Unsupported::Multipart { content_type: body.content_type.clone() });
    }
    Ok(())
}

/// Why the executor cannot call an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("its body is {content_type}, and the only multipart body the executor sends is multipart/form-data")]
    Multipart { content_type: String },
}

/// How the executor encodes a request body, from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json` and `*+json`: the argument as JSON.
    Json,
    /// `application/x-www-form-urlencoded`: the argument's fields as a form.
    Form,
    /// `multipart/form-data`: one part per field; file fields from base64 content or a URL.
    Multipart,
    /// `text/*`: the argument as text.
    Text,
    /// Anything else (`application/octet-stream`, `image/png`, …): the bytes of one file.
    Binary,
}

impl BodyKind {
    pub fn of(content_type: &str) -> BodyKind {
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if media.contains("json") {
            BodyKind::Json
        } else if media == "application/x-www-form-urlencoded" {
            BodyKind::Form
        } else if media.starts_with("multipart/") {
            BodyKind::Multipart
        } else if media.starts_with("text/") || media.ends_with("+xml") || media == "application/xml" {
            BodyKind::Text
        } else {
            BodyKind::Binary
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BodyKind::Json => "json",
            BodyKind::Form => "form",
            BodyKind::Multipart => "multipart",
            BodyKind::Text => "text",
            BodyKind::Binary => "binary",
        }
    }
}

/// A request body as a tool argument: the schema the argument is given, the example a self-test
/// sends, and what the executor needs to encode it.
pub struct BodyArgument {
    pub schema: Value,
    pub example: Option<Value>,
    pub kind: BodyKind,
    /// The fields of a multipart body that are files.
    pub files: Vec<String>,
    /// `"base64"` when a binary body is sent as the base64 text of its bytes; else null.
    pub encoding: Value,
}

/// The argument `body` becomes.
pub fn argument(body: &Body) -> BodyArgument {
    let kind = BodyKind::of(&body.content_type);
    let mut schema = body.schema.clone();
    if !schema.is_object() {
        schema = json!({});
    }
    let mut files = Vec::new();
    let mut example = body.example.clone();
    let mut encoding = Value::Null;
    match kind {
        BodyKind::Binary => {
            if base64_encoded(&schema) {
                encoding = Value::String("base64".into());
            }
            schema = file_schema(None);
            example = Some(schema["examples"][0].clone());
        }
        BodyKind::Multipart => {
            (schema, files) = multipart_schema(schema);
            // A file field's example is a file argument, not the bytes the description shows.
            if let Some(Value::Object(fields)) = &mut example {
                for name in &files {
                    if let Some(field) = fields.get_mut(name) {
                        let file = file_schema(None)["examples"][0].clone();
                        *field = if field.is_array() { Value::Array(vec![file]) } else { file };
                    }
                }
            }
        }
        _ => {}
    }
    BodyArgument { schema, example, kind, files, encoding }
}

/// The argument a file is given as: its bytes in base64, or a URL the call fetches through the
/// server's egress policy (so only a whitelisted host, with the same limits as any fetch).
fn file_schema(description: Option<&Value>) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "content_base64": {"type": "string", "description": "The file's bytes, base64-encoded."},
            "url": {"type": "string", "description": "Or an http(s) URL to fetch the file from; only hosts this server may reach are fetched."},
            "filename": {"type": "string", "description": "The file name sent with it (default: the URL's last segment, or the field name)."},
            "media_type": {"type": "string", "description": "Its media type (default: the fetched response's, or application/octet-stream)."}
        },
        "anyOf": [{"required": ["content_base64"]}, {"required": ["url"]}],
        "additionalProperties": false,
        "examples": [{"content_base64": "aGVsbG8gd29ybGQ=", "filename": "hello.txt", "media_type": "text/plain"}]
    });
    let text = description.and_then(Value::as_str).map(|d| format!("{} ", d.trim_end())).unwrap_or_default();
    schema["description"] = Value::String(format!(
        "{text}A file: {{\"content_base64\": ...}} or {{\"url\": ...}}, with optional filename and media_type."
    ));
    schema
}

/// Whether a schema describes a file's bytes: OpenAPI 3.0's `format: binary` (Swagger 2.0's
/// `file` is read as that), or 3.1's `contentMediaType` without a `contentEncoding`.
fn is_file(schema: &Value) -> bool {
    let binary = schema.get("format").is_some_and(|f| f == "binary");
    let raw_content = schema.get("contentMediaType").is_some() && schema.get("contentEncoding").is_none();
    (binary || raw_content)
        && schema
            .get("type")
            .is_none_or(|t| t == "string" || t.as_array().is_some_and(|a| a.contains(&json!("string"))))
}

/// Whether a binary body is sent as the base64 text of its bytes rather than the bytes: OpenAPI
/// 3.0's `format: byte` ("base64 encoded characters", and the `format: base64` its section on file
/// uploads shows) and 3.1's `contentEncoding: base64` say so, while `format: binary` (3.0) or no
/// encoding (3.1) means the octets themselves. Either way the argument is a file, so an agent gives
/// the same `content_base64` or `url` and the executor encodes what the API asks for.
fn base64_encoded(schema: &Value) -> bool {
    let format = schema.get("format").and_then(Value::as_str);
    let encoding = schema.get("contentEncoding").and_then(Value::as_str);
    matches!(format, Some("byte" | "base64")) || encoding.is_some_and(|e| e.eq_ignore_ascii_case("base64"))
}

/// A multipart body's schema with its file fields (and lists of files) given as file arguments,
/// and the names of those fields.
fn multipart_schema(mut schema: Value) -> (Value, Vec<String>) {
    let mut files = Vec::new();
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, field) in properties.iter_mut() {
            if is_file(field) {
                *field = file_schema(field.get("description"));
                files.push(name.clone());
            } else if field.get("items").is_some_and(is_file) {
                let items = file_schema(field["items"].get("description"));
                field["items"] = items;
                files.push(name.clone());
            }
        }
    }
    (schema, files)
}
