//! Checked types for what a server is made of: its id, its tools' names, schemas and handlers.
//!
//! Registration bodies are parsed into these types once, at the edge; everything after that
//! (catalog, mounts, calls) takes the checked types and never re-validates.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Largest handler source accepted, in bytes.
pub const MAX_HANDLER_BYTES: usize = 256 * 1024;
/// Most tools one server may expose.
pub const MAX_TOOLS: usize = 128;
const MAX_DESCRIPTION_CHARS: usize = 8 * 1024;
const MAX_TITLE_CHARS: usize = 200;
/// Why a text field holding NUL is refused: the catalog cannot store it on PostgreSQL, and MCP
/// hosts would show it to the model.
pub const NUL_REFUSED: &str = "contains a NUL character (\\u0000), which the catalog cannot store; remove it";
const ANNOTATION_BOOL_KEYS: &[&str] = &["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];

/// A server's code-mode settings: `"code_mode"` at registration, `PUT /admin/servers/{id}/code-mode`
/// later. The limits replace the daemon's `[code_mode]` defaults for this server's scripts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeModeSettings {
    /// List the `code_execution` tool on this server's mount (needs `[code_mode] enabled` too).
    pub enabled: bool,
    /// Other servers whose tools this server's scripts may call (the server itself always
    /// may). Listing a server here lets this server's MCP clients use its tools without its
    /// access token.
    #[serde(default)]
    pub allowed_servers: Vec<ServerId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_tool_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_result_bytes: Option<u64>,
}

/// A server's traffic limits (`PUT /admin/servers/{id}/limits`, docs/traffic.md): each key left
/// out inherits the daemon's `[limits]` default; 0 turns a limit off for this server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerLimits {
    /// Tool calls per minute by one caller (OAuth subject, else the static token, else the
    /// client's address): a burst of N, refilled over a minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_caller_per_minute: Option<u32>,
    /// Tool calls per minute on the server, whoever makes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_server_per_minute: Option<u32>,
    /// Calls per minute of each of the server's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_tool_per_minute: Option<u32>,
    /// Calls one caller may have running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_caller_concurrency: Option<u32>,
    /// Whether the server's upstream GETs may be answered from the daemon's HTTP cache
    /// (`[egress.cache]`); absent: yes, when the cache is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
    /// Requests per minute to each upstream origin (`scheme://host:port`), for a paid API's quota.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub upstream: std::collections::BTreeMap<String, UpstreamLimit>,
}

/// The rate the server's handlers may send to one upstream origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamLimit {
    pub per_minute: u32,
}

impl ServerLimits {
    /// Checks the upstream origins (serialised as `scheme://host:port`) and rates; returns the
    /// settings with each origin in canonical form.
    pub fn checked(mut self) -> Result<ServerLimits, LimitsError> {
        let mut upstream = std::collections::BTreeMap::new();
        for (origin, limit) in std::mem::take(&mut self.upstream) {
            let url = match url::Url::parse(&origin) {
                Ok(url) => url,
                Err(error) => return Err(LimitsError::NotAUrl { origin, error }),
            };
            if !matches!(url.scheme(), "http" | "https")
                || url.host_str().is_none()
                || url.path() != "/"
                || url.query().is_some()
            {
                return Err(LimitsError::NotAnOrigin(origin));
            }
            if limit.per_minute == 0 {
                return Err(LimitsError::ZeroRate(origin));
            }
            upstream.insert(url.origin().ascii_serialization(), limit);
        }
        self.upstream = upstream;
        Ok(self)
    }
}

/// Why a server's traffic limits were refused.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("upstream origin {origin:?} is not a URL ({error}); write it as scheme://host:port")]
    NotAUrl { origin: String, error: url::ParseError },
    #[error(
        "upstream origin {0:?} must be scheme://host:port (http or https, no path), e.g. https://api.example.com:443"
    )]
    NotAnOrigin(String),
    #[error("upstream.{0}.per_minute must be at least 1 (leave the origin out for no limit)")]
    ZeroRate(String),
}

/// Who may use a server's MCP mount, when set per server: `"auth"` at registration,
/// `PUT /admin/servers/{id}/auth` later. Without it the mount has a static access token if one was
/// set, else the daemon's `[auth.oauth] required` decides (docs/oauth.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthSetting {
    /// No token: anyone who reaches the daemon may use the mount. (A struct variant, so that
    /// `{"mode": "open", "scopes": [...]}` is refused rather than its scopes ignored.)
    Open {},
    /// An OAuth access token from `[auth.oauth] issuer` for this mount, holding `scopes` as well
    /// as what the daemon's scope model asks for.
    Oauth {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
    },
}

/// Where an API-description server's description comes from and how tools are derived from it,
/// as stored with the server so a regeneration derives the same way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OpenApiSettings {
    /// The description's URL (`"openapi"` at registration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// SHA-256 of an inline description (`"openapi_spec"`), kept in the catalog's documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "OperationFilter::is_empty")]
    pub operations: OperationFilter,
    /// Replaces the description's own server URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Discovery mode forced on or off; `None`: on when more operations can become tools than
    /// `[generation] max_tools` (docs/openapi.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<bool>,
}

/// Which operations of an API description become tools: `include` (empty: all) minus
/// `exclude`. Each entry is `tag:<tag>`, `<METHOD> <path>`, `operationId:<id>` or a bare
/// operationId.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationFilter {
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl OperationFilter {
    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }
}

/// Longest wall time a server's scripts may be given.
pub const MAX_SCRIPT_TIMEOUT_MS: u64 = 15 * 60 * 1000;

impl CodeModeSettings {
    /// Refuses settings no script could run under, naming the field.
    pub fn check(&self) -> Result<(), CodeModeError> {
        if let Some(ms) = self.timeout_ms
            && !(1..=MAX_SCRIPT_TIMEOUT_MS).contains(&ms)
        {
            return Err(CodeModeError::Timeout(ms));
        }
        if self.max_concurrent_tool_calls == Some(0) {
            return Err(CodeModeError::Zero("max_concurrent_tool_calls"));
        }
        if self.max_tool_result_bytes == Some(0) {
            return Err(CodeModeError::Zero("max_tool_result_bytes"));
        }
        if self.allowed_servers.len() > MAX_ALLOWED_SERVERS {
            return Err(CodeModeError::TooManyServers);
        }
        Ok(())
    }
}

/// Most servers one server's scripts may be allowed to call.
const MAX_ALLOWED_SERVERS: usize = 64;

/// Why a server's code-mode settings were refused; each names its field.
#[derive(Debug, thiserror::Error)]
pub enum CodeModeError {
    #[error("code_mode.timeout_ms must be between 1 and {MAX_SCRIPT_TIMEOUT_MS}, not {0}")]
    Timeout(u64),
    #[error("code_mode.{0} must be at least 1")]
    Zero(&'static str),
    #[error("code_mode.allowed_servers lists more than {MAX_ALLOWED_SERVERS} servers")]
    TooManyServers,
}

/// A server id: `[a-z0-9][a-z0-9-]{0,62}`, used in the mount path `/servers/<id>/mcp`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ServerId(String);

/// Read back from the admin API's answers; a malformed id is an error.
impl<'de> Deserialize<'de> for ServerId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ServerId::parse(&String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for ServerId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(ServerId::PATTERN))
            .into()
    }
}

impl utoipa::ToSchema for ServerId {}

/// Debug-formats as the quoted id, so messages read `server "hn"`, not `ServerId("hn")`.
impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A server id that [`ServerId::parse`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server id {raw:?} is invalid: use 1-63 characters from a-z, 0-9 and '-', starting with a letter or digit")]
pub struct InvalidServerId {
    pub raw: String,
}

impl ServerId {
    /// What [`ServerId::parse`] accepts, as a regular expression.
    pub const PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,62}$";

    pub fn parse(raw: &str) -> Result<ServerId, InvalidServerId> {
        let valid = !raw.is_empty()
            && raw.len() <= 63
            && raw
                .bytes()
                .enumerate()
                .all(|(i, b)| b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && b == b'-'));
        if valid { Ok(ServerId(raw.to_string())) } else { Err(InvalidServerId { raw: raw.to_string() }) }
    }

    /// A fresh id derived from a display name: its slug plus a short random suffix.
    pub fn generate(name: Option<&str>) -> ServerId {
        let mut slug = String::new();
        for c in name.unwrap_or("").chars() {
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
            if slug.len() >= 40 {
                break;
            }
        }
        let slug = slug.trim_end_matches('-');
        let slug = if slug.is_empty() { "server" } else { slug };
        let suffix = &uuid::Uuid::now_v7().simple().to_string()[26..];
        ServerId(format!("{slug}-{suffix}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn mcp_path(&self) -> String {
        format!("/servers/{}/mcp", self.0)
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One tool: a name matching `^[a-z][a-z0-9_]{0,63}$`, an object input schema and a handler body.
/// Its shape is checked when it is read, its content when it joins a toolset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, expecting = "a tool object with name, description, input_schema and handler")]
#[schema(as = Tool)]
pub struct ToolSpec {
    #[schema(pattern = "^[a-z][a-z0-9_]{0,63}$")]
    pub name: String,
    /// A name for people (`Get item`), which hosts show instead of `name`; MCP's tool `title`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub title: Option<String>,
    /// What the tool does; MCP hosts show it to the model.
    pub description: String,
    /// A JSON Schema with `"type": "object"`, the tool's arguments.
    #[schema(value_type = Object)]
    pub input_schema: Map<String, Value>,
    /// A JSON Schema with `"type": "object"` for the tool's result. When present, the tool
    /// must return an object matching it (sent as `structuredContent`, with its JSON as text);
    /// any other result becomes an error result that says what did not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Map<String, Value>>,
    /// The body of `async function (args, fetch)`.
    pub handler: String,
    /// MCP tool annotations: `title`, `readOnlyHint`, `destructiveHint`, `idempotentHint`,
    /// `openWorldHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<Map<String, Value>>,
}

/// A validated, non-empty list of tools with unique names.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Toolset {
    tools: Vec<ToolSpec>,
}

/// Why a toolset was refused; `field` points at the offending part of the request body.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct ToolsetError {
    pub field: String,
    pub problem: FieldProblem,
}

/// What is wrong with one field of a toolset, worded to follow the field's path
/// (`tools[0].title: must not be empty; ...`). [`ToolsetError`] says which field; the generator
/// lists the same problems in its repair prompts.
#[derive(Debug, thiserror::Error)]
pub enum FieldProblem {
    #[error("must contain at least one tool")]
    NoTools,
    #[error("has {0} tools; at most {MAX_TOOLS} are allowed")]
    TooManyTools(usize),
    #[error("duplicate tool name {0:?}")]
    DuplicateName(String),
    #[error("tool name {0:?} is invalid: use 1-64 characters from a-z, 0-9 and '_', starting with a letter")]
    InvalidName(String),
    #[error("must not be empty{0}")]
    Empty(&'static str),
    #[error("is longer than {0} characters")]
    TooLong(usize),
    #[error("is larger than {MAX_HANDLER_BYTES} bytes")]
    HandlerTooLarge,
    #[error("{NUL_REFUSED}")]
    Nul,
    #[error(
        "contains a NUL character, which the catalog cannot store; in a string literal write it as the \
         escape \\0 or \\u0000 instead"
    )]
    NulInHandler,
    /// A tool's arguments or results (`what`) are not described as an object; `found` is the
    /// `type` given instead, if any.
    #[error("must have \"type\": \"object\" (tool {what} are an object){}", found.as_ref().map(|t| format!(", found {t}")).unwrap_or_default())]
    NotAnObject { what: &'static str, found: Option<Value> },
    /// The schema does not follow the JSON Schema meta-schema; `at` is the JSON pointer inside it.
    #[error("is not a valid JSON Schema{}: {message}", if at.is_empty() { String::new() } else { format!(" at {at}") })]
    NotAJsonSchema { at: String, message: String },
    #[error("cannot be used for validation: {0}")]
    Unusable(SchemaError),
    #[error("{0} must be true or false")]
    AnnotationNotABool(String),
    #[error("title must be a string")]
    AnnotationTitleNotAString,
    #[error("unknown annotation {0:?}; use title, readOnlyHint, destructiveHint, idempotentHint or openWorldHint")]
    UnknownAnnotation(String),
}

/// Why a JSON Schema cannot be compiled into a validator.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A `pattern` the linear-time engine cannot run (a backreference, lookaround, or a
    /// malformed expression).
    #[error(
        "{0} (patterns run on a linear-time regex engine without backreferences or lookaround; \
         rewrite the pattern without them)"
    )]
    Pattern(jsonschema::ValidationError<'static>),
    #[error("{0}")]
    Invalid(jsonschema::ValidationError<'static>),
}

impl Toolset {
    /// Checks every tool's content (its shape was checked when it was read). Handler
    /// compilation is checked separately, by the engine.
    pub fn new(tools: Vec<ToolSpec>) -> Result<Toolset, ToolsetError> {
        Toolset::check(&tools)?;
        Ok(Toolset { tools })
    }

    /// What [`Toolset::new`] checks, for tools that are not made into a toolset here.
    pub fn check(tools: &[ToolSpec]) -> Result<(), ToolsetError> {
        if tools.is_empty() {
            return Err(err("tools", FieldProblem::NoTools));
        }
        if tools.len() > MAX_TOOLS {
            return Err(err("tools", FieldProblem::TooManyTools(tools.len())));
        }
        for (index, tool) in tools.iter().enumerate() {
            let at = format!("tools[{index}]");
            check_tool(tool, &at)?;
            if tools[..index].iter().any(|t| t.name == tool.name) {
                return Err(err(&format!("{at}.name"), FieldProblem::DuplicateName(tool.name.clone())));
            }
        }
        Ok(())
    }

    /// Rebuilds a toolset from catalog rows, which were validated when they were written.
    pub fn from_trusted(tools: Vec<ToolSpec>) -> Toolset {
        Toolset { tools }
    }

    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }
}

fn err(field: &str, problem: FieldProblem) -> ToolsetError {
    ToolsetError { field: field.to_string(), problem }
}

fn check_tool(tool: &ToolSpec, at: &str) -> Result<(), ToolsetError> {
    let field = |name: &str| format!("{at}.{name}");
    check_tool_name(&tool.name).map_err(|p| err(&field("name"), p))?;
    if tool.description.trim().is_empty() {
        return Err(err(&field("description"), FieldProblem::Empty("; MCP hosts show it to the model")));
    }
    if tool.description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(err(&field("description"), FieldProblem::TooLong(MAX_DESCRIPTION_CHARS)));
    }
    if tool.description.contains('\0') {
        return Err(err(&field("description"), FieldProblem::Nul));
    }
    if tool.handler.trim().is_empty() {
        return Err(err(&field("handler"), FieldProblem::Empty("")));
    }
    if tool.handler.len() > MAX_HANDLER_BYTES {
        return Err(err(&field("handler"), FieldProblem::HandlerTooLarge));
    }
    if tool.handler.contains('\0') {
        return Err(err(&field("handler"), FieldProblem::NulInHandler));
    }
    if let Some(title) = &tool.title {
        check_title(title).map_err(|p| err(&field("title"), p))?;
    }
    check_input_schema(&tool.input_schema).map_err(|p| err(&field("input_schema"), p))?;
    if let Some(schema) = &tool.output_schema {
        check_output_schema(schema).map_err(|p| err(&field("output_schema"), p))?;
    }
    if let Some(annotations) = &tool.annotations {
        check_annotations(annotations).map_err(|p| err(&field("annotations"), p))?;
    }
    Ok(())
}

pub fn check_tool_name(name: &str) -> Result<(), FieldProblem> {
    let bytes = name.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
    if valid { Ok(()) } else { Err(FieldProblem::InvalidName(name.to_string())) }
}

pub fn check_title(title: &str) -> Result<(), FieldProblem> {
    if title.trim().is_empty() {
        return Err(FieldProblem::Empty("; leave it out to show the name"));
    }
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(FieldProblem::TooLong(MAX_TITLE_CHARS));
    }
    if title.contains('\0') {
        return Err(FieldProblem::Nul);
    }
    Ok(())
}

/// An output schema, like an input schema, must describe an object (MCP requires it).
pub fn check_output_schema(schema: &Map<String, Value>) -> Result<(), FieldProblem> {
    check_object_schema(schema, "results")
}

/// The validator for a tool's schema. `pattern`s run on the linear-time `regex` engine: a
/// backtracking engine lets one argument hold a thread for seconds (`^(a*)*\1b$` against a
/// string of `a`s), so backreferences and lookaround are refused when the schema is registered.
pub fn validator(schema: &Value) -> Result<jsonschema::Validator, SchemaError> {
    jsonschema::options().with_pattern_options(jsonschema::PatternOptions::regex()).build(schema).map_err(|error| {
        // A pattern the engine cannot compile is reported as the format `regex` (jsonschema's
        // `pattern` and `patternProperties` keywords), whatever made it fail.
        match error.kind() {
            jsonschema::error::ValidationErrorKind::Format { format } if format == "regex" => {
                SchemaError::Pattern(error)
            }
            _ => SchemaError::Invalid(error),
        }
    })
}

/// An input schema must describe an object (MCP requires it) and be a valid JSON Schema.
pub fn check_input_schema(schema: &Map<String, Value>) -> Result<(), FieldProblem> {
    check_object_schema(schema, "arguments")
}

/// A schema of tool `what` (arguments or results): MCP requires both to be objects.
fn check_object_schema(schema: &Map<String, Value>, what: &'static str) -> Result<(), FieldProblem> {
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        found => return Err(FieldProblem::NotAnObject { what, found: found.cloned() }),
    }
    let value = Value::Object(schema.clone());
    jsonschema::meta::validate(&value)
        .map_err(|e| FieldProblem::NotAJsonSchema { at: e.instance_path().to_string(), message: e.to_string() })?;
    validator(&value).map_err(FieldProblem::Unusable)?;
    Ok(())
}

fn check_annotations(annotations: &Map<String, Value>) -> Result<(), FieldProblem> {
    for (key, value) in annotations {
        if ANNOTATION_BOOL_KEYS.contains(&key.as_str()) {
            if !value.is_boolean() {
                return Err(FieldProblem::AnnotationNotABool(key.clone()));
            }
        } else if key == "title" {
            if !value.is_string() {
                return Err(FieldProblem::AnnotationTitleNotAString);
            }
        } else {
            return Err(FieldProblem::UnknownAnnotation(key.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "d", "input_schema": {"type": "object"}, "handler": "return 1;"})
    }

    #[test]
    fn server_ids() {
        for ok in ["a", "hn", "hacker-news-2", "0abc"] {
            assert!(ServerId::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "A", "a_b", "a/b", &"a".repeat(64), "ü"] {
            assert!(ServerId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            ServerId::parse("A").unwrap_err().to_string(),
            r#"server id "A" is invalid: use 1-63 characters from a-z, 0-9 and '-', starting with a letter or digit"#
        );
        let generated = ServerId::generate(Some("Hacker News API!"));
        assert!(generated.as_str().starts_with("hacker-news-api-"), "{generated}");
        assert!(ServerId::parse(generated.as_str()).is_ok());
        assert!(ServerId::parse(ServerId::generate(None).as_str()).is_ok());
    }

    #[test]
    fn tool_names() {
        for ok in ["a", "get_item", "x1", &"a".repeat(64)] {
            assert!(check_tool_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "_a", "Get", "get-item", "get item", &"a".repeat(65)] {
            assert!(check_tool_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn toolset_errors_name_the_field() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "tools"),
            (json!([tool("a"), tool("a")]), "tools[1].name"),
            (json!([tool("Bad")]), "tools[0].name"),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "string"}, "handler": "x"}]),
                "tools[0].input_schema",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object", "properties": 3}, "handler": "x"}]),
                "tools[0].input_schema",
            ),
            (json!([{"name": "a", "description": "d", "input_schema": {}, "handler": "x"}]), "tools[0].input_schema"),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}, "handler": " "}]),
                "tools[0].handler",
            ),
            (
                json!([{"name": "a", "description": "", "input_schema": {"type": "object"}, "handler": "x"}]),
                "tools[0].description",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}, "handler": "x", "annotations": {"readOnly": true}}]),
                "tools[0].annotations",
            ),
            (
                json!([{"name": "a", "title": " ", "description": "d", "input_schema": {"type": "object"}, "handler": "x"}]),
                "tools[0].title",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}, "output_schema": {"type": "array"}, "handler": "x"}]),
                "tools[0].output_schema",
            ),
            (
                json!([{"name": "a", "description": "d", "input_schema": {"type": "object"}, "output_schema": {"type": "object", "required": 1}, "handler": "x"}]),
                "tools[0].output_schema",
            ),
        ];
        for (tools, field) in cases {
            let specs: Vec<ToolSpec> = serde_json::from_value(tools.clone()).unwrap();
            let error = Toolset::new(specs).unwrap_err();
            assert_eq!(error.field, field, "{tools}: {error}");
        }
        let specs: Vec<ToolSpec> = serde_json::from_value(json!([tool("a"), tool("b")])).unwrap();
        assert_eq!(Toolset::new(specs).unwrap().tools().len(), 2);
    }

    /// Each refusal reads as it did when the checks returned text, behind the field it names.
    #[test]
    fn refusals_are_worded_for_their_field() {
        let refusal = |tools: Value| Toolset::new(serde_json::from_value(tools).unwrap()).unwrap_err().to_string();
        let with = |extra: Value| {
            let mut tool = tool("a");
            tool.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            json!([tool])
        };
        let cases = [
            (json!([]), "tools: must contain at least one tool".to_string()),
            (json!([tool("a"), tool("a")]), r#"tools[1].name: duplicate tool name "a""#.to_string()),
            (
                json!([tool("Bad")]),
                r#"tools[0].name: tool name "Bad" is invalid: use 1-64 characters from a-z, 0-9 and '_', starting with a letter"#
                    .to_string(),
            ),
            (
                with(json!({"description": " "})),
                "tools[0].description: must not be empty; MCP hosts show it to the model".to_string(),
            ),
            (
                with(json!({"description": "d".repeat(MAX_DESCRIPTION_CHARS + 1)})),
                format!("tools[0].description: is longer than {MAX_DESCRIPTION_CHARS} characters"),
            ),
            (with(json!({"description": "a\0"})), format!("tools[0].description: {NUL_REFUSED}")),
            (with(json!({"handler": " "})), "tools[0].handler: must not be empty".to_string()),
            (
                with(json!({"handler": "x".repeat(MAX_HANDLER_BYTES + 1)})),
                format!("tools[0].handler: is larger than {MAX_HANDLER_BYTES} bytes"),
            ),
            (
                with(json!({"handler": "return '\0';"})),
                "tools[0].handler: contains a NUL character, which the catalog cannot store; in a string literal \
                 write it as the escape \\0 or \\u0000 instead"
                    .to_string(),
            ),
            (
                with(json!({"title": " "})),
                "tools[0].title: must not be empty; leave it out to show the name".to_string(),
            ),
            (
                with(json!({"title": "t".repeat(MAX_TITLE_CHARS + 1)})),
                format!("tools[0].title: is longer than {MAX_TITLE_CHARS} characters"),
            ),
            (
                with(json!({"input_schema": {"type": "string"}})),
                r#"tools[0].input_schema: must have "type": "object" (tool arguments are an object), found "string""#
                    .to_string(),
            ),
            (
                with(json!({"input_schema": {}})),
                r#"tools[0].input_schema: must have "type": "object" (tool arguments are an object)"#.to_string(),
            ),
            (
                with(json!({"output_schema": {"type": "array"}})),
                r#"tools[0].output_schema: must have "type": "object" (tool results are an object), found "array""#
                    .to_string(),
            ),
            (
                with(json!({"annotations": {"readOnlyHint": 1}})),
                "tools[0].annotations: readOnlyHint must be true or false".to_string(),
            ),
            (
                with(json!({"annotations": {"title": 1}})),
                "tools[0].annotations: title must be a string".to_string(),
            ),
            (
                with(json!({"annotations": {"readOnly": true}})),
                r#"tools[0].annotations: unknown annotation "readOnly"; use title, readOnlyHint, destructiveHint, idempotentHint or openWorldHint"#
                    .to_string(),
            ),
        ];
        for (tools, expected) in cases {
            assert_eq!(refusal(tools), expected);
        }
        let invalid = refusal(with(json!({"input_schema": {"type": "object", "properties": 3}})));
        assert!(invalid.starts_with("tools[0].input_schema: is not a valid JSON Schema at /properties: "), "{invalid}");
    }

    #[test]
    fn patterns_run_on_a_linear_time_engine() {
        let schema = |pattern: &str| {
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}})
                .as_object()
                .unwrap()
                .clone()
        };
        for refused in [r"^(a*)*\1b$", r"^(?=a)a$", r"^(?<!b)a$"] {
            let error = check_input_schema(&schema(refused)).unwrap_err();
            assert!(matches!(error, FieldProblem::Unusable(SchemaError::Pattern(_))), "{refused}: {error:?}");
            assert!(error.to_string().contains("linear-time regex engine"), "{refused}: {error}");
        }
        check_input_schema(&schema(r"^[a-z]+(-[a-z]+)*$")).unwrap();
        // Nested quantifiers that backtrack exponentially elsewhere are linear here: this input
        // would not finish on a backtracking engine.
        let validator = validator(&Value::Object(schema(r"^(a*)*b$"))).unwrap();
        assert!(!validator.is_valid(&json!({"s": format!("{}c", "a".repeat(5000))})));
    }

    #[test]
    fn tools_of_the_wrong_shape_are_refused_when_read() {
        for bad in [
            json!({"name": "a", "description": "d", "input_schema": [], "handler": "x"}),
            json!({"name": "a", "description": "d", "input_schema": {"type": "object"}}),
            json!({"name": "a", "description": "d", "input_schema": {"type": "object"}, "handler": "x", "extra": 1}),
            json!({"name": 5, "description": "d", "input_schema": {"type": "object"}, "handler": "x"}),
        ] {
            assert!(serde_json::from_value::<ToolSpec>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn server_ids_read_back_only_when_valid() {
        assert_eq!(serde_json::from_value::<ServerId>(json!("hn")).unwrap(), ServerId::parse("hn").unwrap());
        assert!(serde_json::from_value::<ServerId>(json!("Not Valid")).is_err());
    }

    #[test]
    fn code_mode_settings_are_checked() {
        let parse = |v: serde_json::Value| serde_json::from_value::<CodeModeSettings>(v);
        assert!(parse(serde_json::json!({"enabled": true, "allowed_servers": ["geo"]})).unwrap().check().is_ok());
        assert!(parse(serde_json::json!({"enabled": true, "allowed_servers": ["Not An Id"]})).is_err());
        assert!(parse(serde_json::json!({"enabled": true, "bogus": 1})).is_err());
        for (settings, needle) in [
            (serde_json::json!({"enabled": true, "timeout_ms": 0}), "timeout_ms"),
            (serde_json::json!({"enabled": true, "timeout_ms": 86_400_000u64}), "timeout_ms"),
            (serde_json::json!({"enabled": true, "max_concurrent_tool_calls": 0}), "max_concurrent_tool_calls"),
            (serde_json::json!({"enabled": true, "max_tool_result_bytes": 0}), "max_tool_result_bytes"),
        ] {
            let problem = parse(settings).unwrap().check().unwrap_err();
            assert!(problem.to_string().contains(needle), "{problem}");
        }
    }
}
