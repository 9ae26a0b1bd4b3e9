//! The OpenAPI fast path: tools derived from an API description deterministically, with no LLM
//! writing request code.
//!
//! Each selected operation becomes one tool: a unique name from its `operationId` (or method and
//! path), its summary as the description, an input schema of its path, query, header and cookie
//! parameters plus `body`, annotations from the method, and an output schema from its 2xx JSON
//! response when that is an object. Every tool's handler is the same tested executor
//! (`openapi/executor.js`) behind a small JSON *plan* (method, base URL, path, how each argument is
//! serialised, the body's content type, the credentials it needs), so a described operation is
//! called as the description says, by construction.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use crate::toolset::OperationFilter;
use crate::toolset::ToolSpec;

pub mod document;
pub mod external;
pub mod listing;
pub mod select;
pub mod spec;

pub use document::MAX_SPEC_BYTES;
pub use spec::{Flavour, Operation, Spec, looks_like_spec};

use crate::serve::discovery::STANDARD_TOOLS;
use crate::serve::discovery::search::{SearchDocument, SearchIndex};

/// The code every derived handler ends with, after its `const plan = …;` line.
pub const EXECUTOR: &str = include_str!("openapi/executor.js");
/// Longest tool description taken from a summary or description.
const MAX_DESCRIPTION_CHARS: usize = 1000;

/// A security scheme the selected tools need, and how the daemon's credential should inject it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AuthNeed {
    /// The scheme's name in the description.
    pub scheme: String,
    /// The name of the server credential that satisfies it: the scheme's name, with characters
    /// a credential name cannot have replaced by `_`.
    pub credential: String,
    /// How to add it: the `inject` of `PUT /admin/servers/{id}/credentials/{scheme}`.
    #[schema(value_type = Object)]
    pub inject: Value,
    /// Tools that need it (alone or with another scheme).
    pub tools: Vec<String>,
}

/// The tools an API description yields, and what the operator should know.
#[derive(Debug, Clone)]
pub struct Derived {
    /// The tools the server lists.
    pub tools: Vec<DerivedTool>,
    pub base_url: url::Url,
    pub auth: Vec<AuthNeed>,
    pub warnings: Vec<String>,
    /// Operations the description has, selected or not.
    pub operations_total: usize,
    /// In discovery mode, every operation that can be called (the listed ones among them) and
    /// their search index; `None` when the server lists all of its tools.
    pub discovery: Option<DerivedOperations>,
}

/// A discovery-mode server's whole API: what `search_operations`, `describe_operation` and
/// `call_operation` reach.
#[derive(Debug, Clone)]
pub struct DerivedOperations {
    pub operations: Vec<DerivedTool>,
    pub search_index: SearchIndex,
}

/// One tool and what the generation needs to know about its operation.
#[derive(Debug, Clone)]
pub struct DerivedTool {
    pub spec: ToolSpec,
    /// `METHOD /path`, for messages.
    pub operation: String,
    pub read_only: bool,
    /// Alternatives, each a set of credential names that together satisfy the operation
    /// (none, or an empty alternative: no credential needed).
    pub security: Vec<Vec<String>>,
    /// Arguments for a self-test call, from the description's examples, defaults and enums; or
    /// why there are none.
    pub example: Result<Value, String>,
}

impl DerivedTool {
    /// Whether the credentials named `configured` satisfy one of the operation's alternatives.
    pub fn satisfied_by(&self, configured: &[String]) -> bool {
        self.security.is_empty() || self.security.iter().any(|all| all.iter().all(|s| configured.contains(s)))
    }
}

/// Which operations become tools, and whether the server lists them all.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// The operator's `operations` filter.
    pub filter: &'a OperationFilter,
    /// `[generation] max_tools`: the most tools a server lists.
    pub max_tools: usize,
    /// The operator's discovery setting; `None`: on when more operations can become tools than
    /// `max_tools`.
    pub discovery: Option<bool>,
    /// The operations (`METHOD /path`) an LLM chose to list, when one chose.
    pub chosen: Option<&'a [String]>,
}

/// Whether a server whose description has `callable` operations that can become tools is in
/// discovery mode.
pub fn discovery_mode(setting: Option<bool>, callable: usize, max_tools: usize) -> bool {
    setting.unwrap_or(callable > max_tools)
}

/// How many of its operations a server lists: all of `max_tools`, or in discovery mode what
/// the standard tools leave.
pub fn listed_limit(discovery: bool, max_tools: usize) -> usize {
    if discovery { max_tools.saturating_sub(STANDARD_TOOLS.len()) } else { max_tools }
}

/// Whether the executor can call `op`, or why not. The one place that decides it: the cap on
/// tools and discovery mode count only the operations it accepts.
pub fn supported(op: &Operation) -> Result<(), String> {
    match unsupported(op) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// Derives tools from `spec`: the operations the selection's filter selects that the executor
/// can call, at most `max_tools` of them listed; in discovery mode all of them reachable.
pub fn derive(
    spec: &Spec,
    source: Option<&url::Url>,
    base_url: Option<&str>,
    selection: &Selection<'_>,
) -> Result<Derived, String> {
    let Selection { filter, max_tools, .. } = *selection;
    let mut warnings = Vec::new();
    // Filter on the operations' heads, then resolve the schemas of the selected ones only.
    let heads = spec.operations_where(|_| false);
    if heads.is_empty() {
        return Err("the API description has no operations".into());
    }
    let base_url = match base_url {
        Some(raw) => url::Url::parse(raw).map_err(|e| format!("base_url {raw:?} is not a URL: {e}"))?,
        None => spec.base_url(source)?,
    };
    let selected = filtered(&heads, filter);
    for rule in filter.include.iter().chain(&filter.exclude) {
        if !heads.iter().any(|op| matches(rule, op)) {
            warnings.push(format!("operations rule {rule:?} matches no operation"));
        }
    }
    if selected.is_empty() {
        return Err(format!(
            "the operations filter selects none of the {} operations; rules look like \"tag:pets\", \"GET /pets/{{id}}\" \
             or \"operationId:listPets\"",
            heads.len()
        ));
    }
    let keys: HashSet<(&str, &str)> = selected.iter().map(|op| (op.method.as_str(), op.path.as_str())).collect();
    let resolved = spec.operations_where(|op| keys.contains(&(op.method.as_str(), op.path.as_str())));
    let mut callable = Vec::new();
    for operation in resolved.iter().filter(|op| keys.contains(&(op.method.as_str(), op.path.as_str()))) {
        match supported(operation) {
            Ok(()) => callable.push(operation),
            Err(reason) => warnings.push(format!("{} is left out: {reason}", describe(operation))),
        }
    }
    if callable.is_empty() {
        return Err(format!("none of the selected operations can be called: {}", warnings.join("; ")));
    }
    let discovery = discovery_mode(selection.discovery, callable.len(), max_tools);
    let limit = listed_limit(discovery, max_tools);
    let mut listed: Vec<usize> = match selection.chosen {
        Some(chosen) => (0..callable.len()).filter(|&i| chosen.contains(&select::key(callable[i]))).collect(),
        None if discovery => most_useful(&callable, limit),
        None => (0..callable.len()).collect(),
    };
    if listed.len() > limit {
        if !discovery {
            let left: Vec<String> = listed[limit..].iter().map(|&i| describe(callable[i])).collect();
            warnings.push(format!(
                "{} operations selected; the first {limit} became tools ([generation] max_tools). Left out: {}{}. \
                 Choose with \"operations\": {{\"include\": [...]}}, or turn \"discovery\" on to reach them all",
                listed.len(),
                left.iter().take(20).cloned().collect::<Vec<_>>().join(", "),
                if left.len() > 20 { format!(" and {} more", left.len() - 20) } else { String::new() }
            ));
        }
        listed.truncate(limit);
    }
    if discovery {
        warnings.push(format!(
            "discovery mode: {} of the {} operations that can be called are listed as tools, with {} that search, \
             describe and call any of them",
            listed.len(),
            callable.len(),
            STANDARD_TOOLS.join(", ")
        ));
    }
    // Discovery mode derives every callable operation; otherwise only the listed ones.
    let derived_ops: Vec<usize> = if discovery { (0..callable.len()).collect() } else { listed.clone() };
    let schemes = spec.security_schemes();
    let mut names: HashSet<String> =
        if discovery { STANDARD_TOOLS.iter().map(|name| name.to_string()).collect() } else { HashSet::new() };
    let mut operations = Vec::with_capacity(derived_ops.len());
    let mut auth: Vec<AuthNeed> = Vec::new();
    for &index in &derived_ops {
        let operation = callable[index];
        let name = unique_name(operation, &mut names);
        let needs: Vec<String> =
            operation.security.iter().flatten().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        for scheme in &needs {
            match auth.iter_mut().find(|a| &a.scheme == scheme) {
                Some(need) => need.tools.push(name.clone()),
                None => match schemes.iter().find(|(n, _)| n == scheme).map(|(_, s)| injection(s)) {
                    Some(Ok(inject)) => auth.push(AuthNeed {
                        scheme: scheme.clone(),
                        credential: credential_name(scheme),
                        inject,
                        tools: vec![name.clone()],
                    }),
                    Some(Err(problem)) => warnings.push(format!("security scheme {scheme:?}: {problem}")),
                    None => warnings.push(format!("security scheme {scheme:?} is used but not defined")),
                },
            }
        }
        let credentials: Vec<String> = needs.iter().map(|s| credential_name(s)).collect();
        let (spec, example) = tool(operation, &name, &base_url, &credentials, &mut warnings);
        operations.push(DerivedTool {
            spec,
            operation: select::key(operation),
            read_only: matches!(operation.method.as_str(), "GET" | "HEAD"),
            security: operation
                .security
                .iter()
                .map(|all| all.iter().map(|scheme| credential_name(scheme)).collect())
                .collect(),
            example,
        });
    }
    if discovery {
        let mut bounded = 0;
        for operation in &mut operations {
            if listing::bound(&mut operation.spec, listing::MAX_OPERATION_SCHEMA_BYTES) {
                bounded += 1;
            }
        }
        if bounded > 0 {
            warnings.push(format!(
                "the schemas of {bounded} operations were trimmed to {} KiB each for describe_operation and \
                 call_operation: their deepest levels accept any value of their type",
                listing::MAX_OPERATION_SCHEMA_BYTES / 1024
            ));
        }
    }
    let discovery = discovery.then(|| {
        let documents: Vec<SearchDocument<'_>> =
            derived_ops.iter().map(|&index| search_document(callable[index])).collect();
        let search_index = SearchIndex::build(&documents);
        let tools = listed.iter().map(|&index| operations[index].clone()).collect();
        (tools, DerivedOperations { operations: operations.clone(), search_index })
    });
    let (mut tools, discovery) = match discovery {
        Some((tools, all)) => (tools, Some(all)),
        None => (operations, None),
    };
    let trimmed = listing::fit(&mut tools.iter_mut().map(|tool| &mut tool.spec).collect::<Vec<_>>());
    if trimmed > 0 {
        warnings.push(format!(
            "the schemas of {trimmed} tools were trimmed so that tools/list stays within {} KiB: their deepest \
             levels and nested descriptions are dropped, and accept any value of their type",
            listing::MAX_LISTING_BYTES / 1024
        ));
    }
    Ok(Derived { tools, base_url, auth, warnings, operations_total: heads.len(), discovery })
}

/// The listed operations of a discovery-mode server when no LLM chose them: the most useful
/// `limit`, by a rule an operator can predict (docs/openapi.md). Operations are grouped by
/// their first tag (else their first path segment), so every part of the API is represented;
/// within a group reads come before writes, live operations before deprecated ones and short
/// paths before long ones; the groups then take turns, in document order, until `limit`.
/// Returns positions in `operations`, in document order.
pub fn most_useful(operations: &[&Operation], limit: usize) -> Vec<usize> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, op) in operations.iter().enumerate() {
        let group = op
            .tags
            .first()
            .cloned()
            .unwrap_or_else(|| op.path.split('/').find(|s| !s.is_empty()).unwrap_or("").to_string());
        match groups.iter_mut().find(|(name, _)| *name == group) {
            Some((_, members)) => members.push(index),
            None => groups.push((group, vec![index])),
        }
    }
    let method_rank = |method: &str| match method {
        "GET" | "HEAD" => 0,
        "POST" => 1,
        "PUT" | "PATCH" => 2,
        _ => 3,
    };
    for (_, members) in &mut groups {
        members.sort_by_key(|&i| {
            let op = operations[i];
            (op.deprecated, method_rank(&op.method), op.path.split('/').filter(|s| !s.is_empty()).count(), i)
        });
    }
    let mut chosen = Vec::with_capacity(limit);
    let mut round = 0;
    while chosen.len() < limit && groups.iter().any(|(_, members)| members.len() > round) {
        for (_, members) in &groups {
            if chosen.len() < limit
                && let Some(&index) = members.get(round)
            {
                chosen.push(index);
            }
        }
        round += 1;
    }
    chosen.sort_unstable();
    chosen
}

/// What an operation is found by in `search_operations`.
fn search_document(op: &Operation) -> SearchDocument<'_> {
    SearchDocument {
        // An operation without an operationId is named after its method and path, which the
        // path's own field already indexes.
        operation: op.operation_id.as_deref().unwrap_or(""),
        method: &op.method,
        path: &op.path,
        // A description without a summary (GitHub's) says what the operation is in its first
        // sentence.
        summary: op.summary.as_deref().or_else(|| op.description.as_deref().map(first_sentence)),
        description: op.description.as_deref(),
        tags: &op.tags,
        parameters: op.parameters.iter().map(|p| p.name.as_str()).collect(),
    }
}

fn first_sentence(text: &str) -> &str {
    let end = text.find(". ").or_else(|| text.find('\n')).unwrap_or(text.len());
    let end = (0..=end.min(200)).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    &text[..end]
}

/// The operations `filter` selects, in document order.
pub fn filtered<'a>(operations: &'a [Operation], filter: &OperationFilter) -> Vec<&'a Operation> {
    operations
        .iter()
        .filter(|op| filter.include.is_empty() || filter.include.iter().any(|rule| matches(rule, op)))
        .filter(|op| !filter.exclude.iter().any(|rule| matches(rule, op)))
        .collect()
}

impl Derived {
    /// Applies the names and descriptions an LLM chose; schemas and requests stay as derived.
    /// A name already taken keeps the derived one (a warning says so).
    pub fn apply(&mut self, choices: &[select::Choice]) {
        for choice in choices {
            let Some(index) = self.tools.iter().position(|t| t.operation == choice.operation) else { continue };
            if let Some(description) = choice.description.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
                self.tools[index].spec.description = trim(description, MAX_DESCRIPTION_CHARS);
                if let Some(discovery) = &mut self.discovery
                    && let Some(operation) = discovery.operations.iter_mut().find(|t| t.operation == choice.operation)
                {
                    operation.spec.description = self.tools[index].spec.description.clone();
                }
            }
            let Some(name) = &choice.name else { continue };
            let old = self.tools[index].spec.name.clone();
            if *name == old {
                continue;
            }
            let taken = self.tools.iter().any(|t| &t.spec.name == name)
                || self.discovery.as_ref().is_some_and(|d| {
                    STANDARD_TOOLS.contains(&name.as_str()) || d.operations.iter().any(|t| &t.spec.name == name)
                });
            if taken {
                self.warnings.push(format!("{}: the name {name:?} is taken; it keeps {old:?}", choice.operation));
                continue;
            }
            self.tools[index].spec.name = name.clone();
            if let Some(discovery) = &mut self.discovery
                && let Some(operation) = discovery.operations.iter_mut().find(|t| t.operation == choice.operation)
            {
                operation.spec.name = name.clone();
            }
            for need in &mut self.auth {
                need.tools.iter_mut().filter(|t| **t == old).for_each(|t| *t = name.clone());
            }
        }
    }
}

/// The credential name for a security scheme: its name where a credential name allows it.
pub fn credential_name(scheme: &str) -> String {
    let mut name: String = scheme
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(64)
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        name.replace_range(..name.chars().next().map_or(0, char::len_utf8), "k");
    }
    if name.is_empty() { "key".to_string() } else { name }
}

/// Why the executor cannot call `op`, or `None` when it can: the rule behind [`supported`].
fn unsupported(op: &Operation) -> Option<String> {
    let body = op.body.as_ref()?;
    let kind = BodyKind::of(&body.content_type);
    if kind == BodyKind::Multipart && !body.content_type.starts_with("multipart/form-data") {
        return Some(format!(
            "its body is {}, and the only multipart body the executor sends is multipart/form-data",
            body.content_type
        ));
    }
    None
}

/// How the executor encodes a request body, from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
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
    fn of(content_type: &str) -> BodyKind {
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

    fn as_str(self) -> &'static str {
        match self {
            BodyKind::Json => "json",
            BodyKind::Form => "form",
            BodyKind::Multipart => "multipart",
            BodyKind::Text => "text",
            BodyKind::Binary => "binary",
        }
    }
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

/// Whether an `operations` rule selects `op`.
fn matches(rule: &str, op: &Operation) -> bool {
    let rule = rule.trim();
    if let Some(tag) = rule.strip_prefix("tag:") {
        return op.tags.iter().any(|t| t.eq_ignore_ascii_case(tag.trim()));
    }
    if let Some(id) = rule.strip_prefix("operationId:") {
        return op.operation_id.as_deref() == Some(id.trim());
    }
    if let Some((method, path)) = rule.split_once(' ') {
        return method.eq_ignore_ascii_case(&op.method) && path.trim() == op.path;
    }
    op.operation_id.as_deref() == Some(rule)
}

fn describe(op: &Operation) -> String {
    match &op.operation_id {
        Some(id) => format!("{id} ({} {})", op.method, op.path),
        None => format!("{} {}", op.method, op.path),
    }
}

/// A tool name from the operationId (`listPets` → `list_pets`) or the method and path, unique
/// among `taken`.
fn unique_name(op: &Operation, taken: &mut HashSet<String>) -> String {
    let source = op.operation_id.clone().unwrap_or_else(|| format!("{} {}", op.method.to_lowercase(), op.path));
    let mut name = String::new();
    let mut previous_lower = false;
    for c in source.chars() {
        if c.is_ascii_uppercase() && previous_lower {
            name.push('_');
        }
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.ends_with('_') {
            name.push('_');
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
    }
    let mut name = name.trim_matches('_').to_string();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = format!("op_{name}");
    }
    name.truncate(60);
    let name = name.trim_end_matches('_').to_string();
    let mut candidate = name.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{name}_{n}");
        n += 1;
    }
    candidate
}

/// How a credential for this scheme is injected (the credentials API's `inject`).
fn injection(scheme: &Value) -> Result<Value, String> {
    let kind = scheme.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "apiKey" => {
            let name = scheme.get("name").and_then(Value::as_str).ok_or("an apiKey scheme without a name")?;
            match scheme.get("in").and_then(Value::as_str) {
                Some("header") => Ok(json!({"header": name, "format": "{value}"})),
                Some("query") => Ok(json!({"query": name})),
                Some("cookie") => Ok(json!({"header": "Cookie", "format": format!("{name}={{value}}")})),
                other => Err(format!("an apiKey scheme in {other:?} cannot be injected")),
            }
        }
        "http" => match scheme.get("scheme").and_then(Value::as_str).map(str::to_ascii_lowercase).as_deref() {
            Some("basic") => Ok(json!({"basic": {"username": "<username>"}})),
            _ => Ok(json!({"header": "Authorization", "format": "Bearer {value}"})),
        },
        // Swagger 2.0 `basic`; OAuth 2 and OpenID Connect as a bearer token the operator obtains.
        "basic" => Ok(json!({"basic": {"username": "<username>"}})),
        "oauth2" | "openIdConnect" => Ok(json!({"header": "Authorization", "format": "Bearer {value}"})),
        other => Err(format!("scheme type {other:?} is not supported")),
    }
}

/// The tool for one operation, and example arguments for its self-test.
fn tool(
    op: &Operation,
    name: &str,
    base: &url::Url,
    needs: &[String],
    warnings: &mut Vec<String>,
) -> (ToolSpec, Result<Value, String>) {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut params = Vec::new();
    let mut example = Ok(Map::new());
    let mut add_example = |arg: &str, value: Option<&Value>, needed: bool| {
        if let Ok(args) = &mut example {
            match value {
                Some(value) if needed => {
                    args.insert(arg.to_string(), value.clone());
                }
                None if needed => example = Err(format!("the description gives no example for {arg}")),
                _ => {}
            }
        }
    };
    for parameter in &op.parameters {
        let mut arg = parameter.name.clone();
        if properties.contains_key(&arg) {
            arg = format!("{}_{}", parameter.name, parameter.location);
        }
        let mut schema = parameter.schema.clone();
        if !schema.is_object() {
            schema = json!({});
        }
        if let Some(text) = &parameter.description {
            schema["description"] = Value::String(trim(text, 300));
        }
        properties.insert(arg.clone(), schema);
        if parameter.required {
            required.push(Value::String(arg.clone()));
        }
        add_example(&arg, parameter.example.as_ref(), parameter.required);
        params.push(json!({
            "arg": arg, "name": parameter.name, "in": parameter.location,
            "style": parameter.style, "explode": parameter.explode,
        }));
    }
    let mut body = Value::Null;
    if let Some(request_body) = &op.body {
        let arg = if properties.contains_key("body") { "request_body".to_string() } else { "body".to_string() };
        let kind = BodyKind::of(&request_body.content_type);
        let mut schema = request_body.schema.clone();
        if !schema.is_object() {
            schema = json!({});
        }
        let mut files = Vec::new();
        let mut example = request_body.example.clone();
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
        if let Some(text) = &request_body.description {
            schema["description"] = Value::String(trim(text, 300));
        }
        properties.insert(arg.clone(), schema);
        if request_body.required {
            required.push(Value::String(arg.clone()));
        }
        add_example(&arg, example.as_ref(), request_body.required);
        body = json!({
            "arg": arg, "type": request_body.content_type, "kind": kind.as_str(), "files": files,
            "encoding": encoding,
        });
    }
    let output_schema = op.response.as_ref().and_then(output_schema);
    let plan = json!({
        "method": op.method,
        "base": base.as_str(),
        "path": op.path,
        "params": params,
        "body": body,
        "accept": op.accept,
        "object": output_schema.is_some(),
        "auth": needs.iter().map(|s| format!("the credential {s:?}")).collect::<Vec<_>>(),
    });
    let description = description(op);
    let mut annotations = Map::new();
    annotations.insert("readOnlyHint".into(), Value::Bool(matches!(op.method.as_str(), "GET" | "HEAD" | "OPTIONS")));
    if op.method == "DELETE" {
        annotations.insert("destructiveHint".into(), Value::Bool(true));
    }
    if matches!(op.method.as_str(), "PUT" | "DELETE") {
        annotations.insert("idempotentHint".into(), Value::Bool(true));
    }
    annotations.insert("openWorldHint".into(), Value::Bool(true));
    let mut input_schema = Map::new();
    input_schema.insert("type".into(), "object".into());
    input_schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        input_schema.insert("required".into(), Value::Array(required));
    }
    if op.response.is_some() && output_schema.is_none() {
        warnings.push(format!("{}: its response is not a JSON object, so it is returned as text", describe(op)));
    }
    let spec = ToolSpec {
        name: name.to_string(),
        title: op.summary.as_deref().filter(|s| !s.trim().is_empty()).map(|s| trim(s, 200)),
        description,
        input_schema: sanitize(input_schema),
        output_schema,
        handler: format!("const plan = {plan};\n{EXECUTOR}"),
        annotations: Some(annotations),
    };
    (spec, example.map(Value::Object))
}

/// A tool description: the summary, what the description adds, and the fields the response
/// has, so an agent can tell what the call gives back without calling it.
fn description(op: &Operation) -> String {
    let summary = op.summary.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let detail = op.description.as_deref().map(str::trim).filter(|d| !d.is_empty() && Some(*d) != summary);
    let mut text = match (summary, detail) {
        (Some(summary), Some(detail)) => {
            let summary = trim(summary, 200);
            let end = if summary.ends_with(['.', '!', '?']) { "" } else { "." };
            format!("{summary}{end} {}", trim(detail, MAX_DESCRIPTION_CHARS - summary.len().min(400)))
        }
        (Some(only), None) | (None, Some(only)) => trim(only, MAX_DESCRIPTION_CHARS),
        (None, None) => format!("{} {}", op.method, op.path),
    };
    if let Some(fields) = op.response.as_ref().and_then(response_fields) {
        let end = if text.ends_with(['.', '!', '?']) { "" } else { "." };
        text.push_str(&format!("{end} Returns {fields}."));
    }
    if op.deprecated { format!("(Deprecated) {text}") } else { text }
}

/// "an object with id, name, …" / "a list of objects with …" from a response schema.
fn response_fields(schema: &Value) -> Option<String> {
    let (what, object) = match schema.get("items") {
        Some(items) if schema.get("type").is_some_and(|t| t == "array") => ("a list of objects", items),
        _ => ("an object", schema),
    };
    let names: Vec<&String> = object.get("properties")?.as_object()?.keys().collect();
    if names.is_empty() {
        return None;
    }
    let shown: Vec<&str> = names.iter().take(8).map(|n| n.as_str()).collect();
    let more = if names.len() > 8 { format!(" and {} more fields", names.len() - 8) } else { String::new() };
    Some(format!("{what} with {}{more}", shown.join(", ")))
}

/// The output schema of an object response, made lenient: real APIs add fields, leave out ones
/// their description calls required, send `null` where it says a string, a float where it says
/// an integer and values its enums do not list, and a client rejects a result that does not
/// match the listed schema. The shape is kept (which fields, of which types); the rest is not.
fn output_schema(schema: &Value) -> Option<Map<String, Value>> {
    let object = schema.as_object()?;
    let is_object = object.get("type").is_some_and(|t| t == "object")
        || (object.get("type").is_none() && object.contains_key("properties"));
    if !is_object {
        return None;
    }
    let mut lenient = schema.clone();
    loosen(&mut lenient);
    // MCP lists an output schema as an object type (the result itself is never null).
    lenient["type"] = Value::String("object".into());
    match lenient {
        Value::Object(map) => Some(sanitize(map)),
        _ => None,
    }
}

/// Keywords a result is not checked against: constraints an API's data rarely keeps to.
const UNCHECKED_IN_RESULTS: &[&str] = &[
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "format",
    "pattern",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "additionalItems",
    "unevaluatedItems",
];

fn loosen(value: &mut Value) {
    each_schema(value, &mut |schema| {
        for key in UNCHECKED_IN_RESULTS {
            schema.remove(*key);
        }
        // Loosened branches overlap, and `oneOf` fails a value that matches two of them.
        if let Some(branches) = schema.remove("oneOf") {
            schema.insert("anyOf".into(), branches);
        }
        // Any field may be null, an integer may come as a float (`1.0`), a string as a number
        // (identifiers and codes described as strings are often sent as numbers), and a boolean
        // as a number (APIs that store flags as integers send `1` and `0`).
        let widened = match schema.get("type") {
            Some(Value::String(name)) => Some(vec![Value::String(name.clone())]),
            Some(Value::Array(names)) => Some(names.clone()),
            _ => None,
        };
        if let Some(names) = widened {
            let mut wide: Vec<Value> = Vec::new();
            let numeric_too =
                names.iter().any(|name| name == "string" || name == "boolean").then(|| Value::String("number".into()));
            for name in names.into_iter().chain(numeric_too).chain([Value::String("null".into())]) {
                let name = if name == "integer" { Value::String("number".into()) } else { name };
                if !wide.contains(&name) {
                    wide.push(name);
                }
            }
            schema.insert("type".into(), Value::Array(wide));
        }
    });
}

/// Calls `visit` on `schema` and every schema inside it, telling keywords from property names:
/// `properties` holds schemas under arbitrary names, `items` a schema, `allOf` a list of them.
fn each_schema(schema: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(map) = schema else { return };
    visit(map);
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "definitions" | "$defs" | "dependentSchemas" => {
                if let Value::Object(named) = value {
                    named.values_mut().for_each(|s| each_schema(s, visit));
                }
            }
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "not"
            | "contains"
            | "propertyNames"
            | "if"
            | "then"
            | "else"
            | "unevaluatedProperties"
            | "unevaluatedItems" => match value {
                Value::Array(list) => list.iter_mut().for_each(|s| each_schema(s, visit)),
                other => each_schema(other, visit),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(list) = value {
                    list.iter_mut().for_each(|s| each_schema(s, visit));
                }
            }
            _ => {}
        }
    }
}

/// A schema the daemon's JSON Schema checks accept: OpenAPI-only keywords removed, and
/// keywords whose values are not what JSON Schema allows (a real description's mistakes)
/// dropped rather than refusing the tool.
fn sanitize(schema: Map<String, Value>) -> Map<String, Value> {
    let mut value = Value::Object(schema);
    each_schema(&mut value, &mut |map| {
        for key in ["nullable", "discriminator", "xml", "externalDocs", "example"] {
            map.remove(key);
        }
        // `$ref`s are inlined by now; `$id`, anchors and recursive references (some of them
        // from other JSON Schema drafts) would only point elsewhere.
        map.retain(|key, _| !key.starts_with('$'));
        for key in ["readOnly", "writeOnly", "deprecated", "uniqueItems"] {
            if map.get(key).is_some_and(|v| !v.is_boolean()) {
                map.remove(key);
            }
        }
        // OpenAPI 3.0's boolean exclusiveMinimum/Maximum are not JSON Schema 2020-12.
        for key in ["exclusiveMinimum", "exclusiveMaximum"] {
            if map.get(key).is_some_and(|v| !v.is_number()) {
                map.remove(key);
            }
        }
        let type_ok = |t: &Value| {
            const TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];
            match t {
                Value::String(name) => TYPES.contains(&name.as_str()),
                Value::Array(names) => names.iter().all(|n| n.as_str().is_some_and(|n| TYPES.contains(&n))),
                _ => false,
            }
        };
        if map.get("type").is_some_and(|t| !type_ok(t)) {
            map.remove("type");
        }
        for key in ["minimum", "maximum", "multipleOf"] {
            if map.get(key).is_some_and(|v| !v.is_number()) {
                map.remove(key);
            }
        }
        for key in ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"] {
            if map.get(key).is_some_and(|v| !v.is_u64()) {
                map.remove(key);
            }
        }
        if map.get("required").is_some_and(|r| !r.as_array().is_some_and(|names| names.iter().all(Value::is_string))) {
            map.remove("required");
        }
        if map.get("enum").is_some_and(|e| !e.is_array()) {
            map.remove("enum");
        }
        if map.get("pattern").is_some_and(|p| !p.as_str().is_some_and(regex_compiles)) {
            map.remove("pattern");
        }
        for key in ["properties", "patternProperties", "definitions", "$defs"] {
            if map.get(key).is_some_and(|p| !p.is_object()) {
                map.remove(key);
            }
        }
        for key in ["items", "additionalProperties", "not"] {
            if map.get(key).is_some_and(|s| !s.is_object() && !s.is_boolean()) {
                map.remove(key);
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if map
                .get(key)
                .is_some_and(|list| !list.as_array().is_some_and(|l| !l.is_empty() && l.iter().all(Value::is_object)))
            {
                map.remove(key);
            }
        }
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Whether a `pattern` is a regular expression the daemon's schema checks can compile.
fn regex_compiles(pattern: &str) -> bool {
    crate::toolset::validator(&json!({"type": "string", "pattern": pattern})).is_ok()
}

/// Whitespace and control characters collapsed to single spaces, and cut at `max` characters.
/// A description's text is shown to models on one line, and a NUL in it is refused by the
/// toolset check (the catalog cannot store one), which would fail the whole server over it.
fn trim(text: &str, max: usize) -> String {
    let collapsed = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if collapsed.chars().count() <= max {
        return collapsed;
    }
    let cut: String = collapsed.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A selection that lists every callable operation, up to `max_tools`, never in discovery
    /// mode.
    fn listing(filter: &OperationFilter, max_tools: usize) -> Selection<'_> {
        Selection { filter, max_tools, discovery: Some(false), chosen: None }
    }

    #[test]
    fn descriptions_lose_control_characters_and_nul() {
        assert_eq!(trim("List\u{0}the\tpets.\r\n Fast\u{7}.", 100), "List the pets. Fast .");
        assert_eq!(trim("abcdef", 4), "abc…");
    }

    fn petstore() -> Spec {
        Spec::from_value(petstore_document()).unwrap()
    }

    /// The pet store with its upload sent as `multipart/mixed`, a body the executor does not send.
    fn petstore_with_an_unsupported_body() -> Spec {
        let text = petstore_document().to_string().replace("multipart/form-data", "multipart/mixed");
        Spec::from_value(serde_json::from_str(&text).unwrap()).unwrap()
    }

    fn petstore_document() -> Value {
        json!({
            "openapi": "3.0.3",
            "info": {"title": "Pets"},
            "servers": [{"url": "https://api.pets.test/v1"}],
            "security": [{"key": []}],
            "components": {
                "securitySchemes": {
                    "key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
                    "bearer": {"type": "http", "scheme": "bearer"}
                },
                "schemas": {"Pet": {"type": "object", "required": ["id"], "additionalProperties": false,
                    "properties": {"id": {"type": "integer", "format": "int64"}, "name": {"type": "string", "nullable": true}}}}
            },
            "paths": {
                "/pets": {
                    "get": {"operationId": "listPets", "summary": "List pets", "tags": ["pets"],
                        "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}}}},
                    "post": {"operationId": "createPet", "tags": ["pets"], "security": [{"bearer": []}],
                        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}},
                        "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}}}
                },
                "/pets/{petId}": {
                    "parameters": [{"name": "petId", "in": "path", "required": true, "schema": {"type": "integer"}}],
                    "get": {"operationId": "getPet", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}}},
                    "delete": {"operationId": "deletePet", "responses": {"204": {"description": "gone"}}}
                },
                "/upload": {"post": {"operationId": "upload", "requestBody": {"content": {"multipart/form-data": {"schema": {"type": "object"}}}}, "responses": {"200": {"description": "ok"}}}}
            }
        })
    }

    #[test]
    fn operations_become_tools_with_schemas_annotations_and_plans() {
        let derived = derive(&petstore(), None, None, &listing(&OperationFilter::default(), 64)).unwrap();
        let names: Vec<&str> = derived.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["list_pets", "create_pet", "get_pet", "delete_pet", "upload"]);
        assert!(!derived.warnings.iter().any(|w| w.contains("left out")), "{:?}", derived.warnings);
        let specs: Vec<&ToolSpec> = derived.tools.iter().map(|t| &t.spec).collect();
        let list = specs[0];
        assert_eq!(list.input_schema["properties"]["limit"]["type"], "integer");
        assert_eq!(list.annotations.as_ref().unwrap()["readOnlyHint"], true);
        assert!(list.output_schema.is_none(), "an array response has no output schema");
        let create = specs[1];
        assert_eq!(create.input_schema["required"], json!(["body"]));
        assert_eq!(create.input_schema["properties"]["body"]["properties"]["name"]["type"], json!(["string", "null"]));
        let output = create.output_schema.as_ref().unwrap();
        assert!(
            output.get("required").is_none() && output.get("additionalProperties").is_none(),
            "lenient: {output:?}"
        );
        let get = specs[2];
        assert_eq!(get.input_schema["required"], json!(["petId"]));
        let delete = specs[3];
        let annotations = delete.annotations.as_ref().unwrap();
        assert_eq!(
            (annotations["destructiveHint"].clone(), annotations["idempotentHint"].clone()),
            (json!(true), json!(true))
        );
        assert!(get.handler.starts_with("const plan = {"), "{}", get.handler);
        for tool in specs {
            crate::serve::isolate::check_handler(&tool.handler).unwrap_or_else(|e| panic!("{}: {e}", tool.name));
            crate::toolset::validator(&Value::Object(tool.input_schema.clone())).unwrap();
        }
        assert_eq!(derived.auth.len(), 2);
        let key = derived.auth.iter().find(|a| a.scheme == "key").unwrap();
        assert_eq!(key.inject, json!({"header": "X-Api-Key", "format": "{value}"}));
        assert_eq!(key.tools, ["list_pets", "get_pet", "delete_pet", "upload"]);
    }

    #[test]
    fn filters_select_and_max_tools_cuts_with_a_warning() {
        let spec = petstore();
        let pick = |include: &[&str], exclude: &[&str]| OperationFilter {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
        };
        let names = |d: Derived| d.tools.into_iter().map(|t| t.spec.name).collect::<Vec<_>>();
        assert_eq!(
            names(derive(&spec, None, None, &listing(&pick(&["tag:pets"], &[]), 64)).unwrap()),
            ["list_pets", "create_pet"]
        );
        assert_eq!(
            names(
                derive(&spec, None, None, &listing(&pick(&["GET /pets/{petId}", "operationId:deletePet"], &[]), 64))
                    .unwrap()
            ),
            ["get_pet", "delete_pet"]
        );
        assert_eq!(
            names(derive(&spec, None, None, &listing(&pick(&[], &["tag:pets", "upload"]), 64)).unwrap()),
            ["get_pet", "delete_pet"]
        );
        let cut = derive(&spec, None, None, &listing(&OperationFilter::default(), 2)).unwrap();
        assert_eq!(cut.tools.len(), 2);
        assert!(cut.warnings.iter().any(|w| w.contains("max_tools") && w.contains("getPet")), "{:?}", cut.warnings);
        let none = derive(&spec, None, None, &listing(&pick(&["tag:nothing"], &[]), 64)).unwrap_err();
        assert!(none.contains("selects none"), "{none}");
    }

    #[test]
    fn the_cap_counts_only_operations_that_can_be_called() {
        let filter = OperationFilter::default();
        // Five operations, one of them with a body the executor does not send: the four callable
        // ones fit a cap of four.
        let selection = Selection { filter: &filter, max_tools: 4, discovery: None, chosen: None };
        let derived = derive(&petstore_with_an_unsupported_body(), None, None, &selection).unwrap();
        assert!(derived.discovery.is_none());
        assert_eq!(derived.tools.len(), 4);
        assert!(!derived.warnings.iter().any(|w| w.contains("max_tools")), "{:?}", derived.warnings);
        assert!(
            supported(&petstore_with_an_unsupported_body().operations_where(|_| true)[4])
                .unwrap_err()
                .contains("multipart")
        );
    }

    #[test]
    fn more_operations_than_max_tools_list_the_most_useful_and_reach_all() {
        let filter = OperationFilter::default();
        let selection = Selection { filter: &filter, max_tools: 3, discovery: None, chosen: None };
        let derived = derive(&petstore_with_an_unsupported_body(), None, None, &selection).unwrap();
        let all = derived.discovery.as_ref().expect("discovery mode");
        assert_eq!(all.operations.len(), 4);
        assert_eq!(all.search_index.len(), 4);
        assert!(derived.tools.is_empty(), "three standard tools leave no room");
        assert!(derived.warnings.iter().any(|w| w.contains("discovery mode")), "{:?}", derived.warnings);

        let forced = Selection { filter: &filter, max_tools: 5, discovery: Some(true), chosen: None };
        let derived = derive(&petstore_with_an_unsupported_body(), None, None, &forced).unwrap();
        let names: Vec<&str> = derived.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["list_pets", "get_pet"], "reads first, short paths first");
        let all = derived.discovery.unwrap();
        assert_eq!(all.operations[2].spec, derived.tools[1].spec, "a listed tool is its operation");
    }

    /// An operation with a method and a path and nothing else.
    fn operation(method: &str, path: &str) -> Operation {
        Operation {
            method: method.into(),
            path: path.into(),
            operation_id: None,
            summary: None,
            description: None,
            tags: vec![],
            deprecated: false,
            parameters: vec![],
            body: None,
            response: None,
            accept: None,
            security: vec![],
        }
    }

    #[test]
    fn the_listing_rule_takes_turns_across_tags() {
        let op = |tag: &str, method: &str, path: &str| Operation { tags: vec![tag.into()], ..operation(method, path) };
        let operations = [
            op("a", "DELETE", "/a/{id}"),
            op("a", "POST", "/a"),
            op("a", "GET", "/a/{id}/deep/list"),
            op("a", "GET", "/a"),
            op("b", "POST", "/b"),
            op("c", "GET", "/c"),
        ];
        let refs: Vec<&Operation> = operations.iter().collect();
        assert_eq!(most_useful(&refs, 3), [3, 4, 5]);
        assert_eq!(most_useful(&refs, 4), [2, 3, 4, 5]);
        assert_eq!(most_useful(&refs, 10).len(), 6);
    }

    #[test]
    fn names_are_valid_and_unique() {
        let mut taken = HashSet::new();
        let op = |id: Option<&str>, method: &str, path: &str| Operation {
            operation_id: id.map(str::to_owned),
            ..operation(method, path)
        };
        assert_eq!(unique_name(&op(Some("repos/get-content"), "GET", "/"), &mut taken), "repos_get_content");
        assert_eq!(unique_name(&op(Some("getHTTPStatus"), "GET", "/"), &mut taken), "get_httpstatus");
        assert_eq!(unique_name(&op(None, "GET", "/users/{id}/repos"), &mut taken), "get_users_id_repos");
        assert_eq!(unique_name(&op(Some("2fa"), "GET", "/"), &mut taken), "op_2fa");
        assert_eq!(unique_name(&op(Some("repos/get-content"), "GET", "/"), &mut taken), "repos_get_content_2");
        let long = "a".repeat(200);
        assert!(unique_name(&op(Some(&long), "GET", "/"), &mut taken).len() <= 64);
        for name in &taken {
            let valid = name.len() <= 64
                && name.starts_with(|c: char| c.is_ascii_lowercase())
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            assert!(valid, "{name}");
        }
    }

    #[test]
    fn broken_keywords_are_dropped_and_output_schemas_are_lenient() {
        let input = json!({"type": "object", "properties": {
            "a": {"type": {}, "minimum": "1", "nullable": true},
            "b": {"type": "string", "pattern": "(?<=x)y", "exclusiveMinimum": true},
            "required": {"type": "string", "format": "uuid"},
            "c": {"allOf": [], "items": "x"}
        }});
        let Value::Object(input) = input else { unreachable!() };
        let clean = Value::Object(sanitize(input));
        assert_eq!(clean["properties"]["a"], json!({}));
        assert_eq!(clean["properties"]["b"], json!({"type": "string"}));
        assert_eq!(clean["properties"]["required"]["format"], "uuid", "a property named `required` is a property");
        assert_eq!(clean["properties"]["c"], json!({}));
        crate::toolset::validator(&clean).unwrap();
        let output = output_schema(&json!({"properties": {"id": {"type": "string", "format": "uuid"}, "format": {"type": "string"}}, "required": ["id"]})).unwrap();
        assert_eq!(
            Value::Object(output),
            json!({"type": "object", "properties": {"id": {"type": ["string", "number", "null"]}, "format": {"type": ["string", "number", "null"]}}})
        );
    }

    #[test]
    fn output_schemas_accept_what_descriptions_are_known_to_get_wrong() {
        let schema = json!({"type": "object", "required": ["id"], "additionalProperties": false, "properties": {
            "id": {"type": "integer", "minimum": 1},
            "state": {"type": "string", "enum": ["open", "closed"]},
            "owner": {"oneOf": [{"type": "object", "properties": {"login": {"type": "string"}}}, {"type": "object"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 1},
            "hidden": {"type": "boolean"}
        }});
        let output = Value::Object(output_schema(&schema).unwrap());
        let validator = crate::toolset::validator(&output).unwrap();
        for result in [
            json!({"id": 1.5, "state": "archived", "owner": {"login": "x"}, "tags": ["a", "b", null], "extra": true}),
            json!({"id": null, "state": null, "owner": null, "tags": null}),
            json!({}),
        ] {
            assert!(validator.is_valid(&result), "{result} against {output}");
        }
        assert!(!validator.is_valid(&json!({"id": "seven"})), "types are still checked");
        assert!(validator.is_valid(&json!({"state": 3})), "a string may come as a number");
        assert!(validator.is_valid(&json!({"hidden": 1})), "a boolean may come as 1 or 0");
        assert!(!validator.is_valid(&json!({"hidden": "yes"})), "but not as text");
        assert_eq!(output["type"], "object", "the result itself is an object");
    }

    #[test]
    fn file_bodies_become_file_arguments_with_a_plan_that_says_how_to_send_them() {
        let spec = Spec::from_value(json!({
            "openapi": "3.0.3",
            "servers": [{"url": "https://files.test"}],
            "paths": {
                "/upload": {"post": {"operationId": "upload", "requestBody": {"required": true, "content": {"multipart/form-data": {"schema": {
                    "type": "object", "required": ["file"], "properties": {
                        "file": {"type": "string", "format": "binary", "description": "The document."},
                        "attachments": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "purpose": {"type": "string"}}}}}}, "responses": {"200": {"description": "ok"}}}},
                "/raw": {"put": {"operationId": "raw", "requestBody": {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}}, "responses": {"204": {"description": "ok"}}}},
                "/mixed": {"post": {"operationId": "mixed", "requestBody": {"content": {"multipart/mixed": {"schema": {"type": "object"}}}}, "responses": {"204": {"description": "ok"}}}}
            }
        }))
        .unwrap();
        let derived = derive(&spec, None, None, &listing(&OperationFilter::default(), 64)).unwrap();
        let names: Vec<&str> = derived.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["upload", "raw"]);
        assert!(derived.warnings.iter().any(|w| w.contains("mixed") && w.contains("multipart/form-data")));
        let upload = &derived.tools[0].spec;
        let body = &upload.input_schema["properties"]["body"];
        assert!(body["properties"]["file"]["properties"]["content_base64"].is_object(), "{body}");
        assert!(body["properties"]["file"]["description"].as_str().unwrap().starts_with("The document. A file"));
        assert!(body["properties"]["attachments"]["items"]["properties"]["url"].is_object(), "{body}");
        assert_eq!(body["properties"]["purpose"]["type"], "string");
        assert!(
            upload.handler.contains(r#""kind":"multipart""#)
                && upload.handler.contains(r#""files":["attachments","file"]"#)
                || upload.handler.contains(r#""files":["file","attachments"]"#),
            "{}",
            upload.handler
        );
        let validator = crate::toolset::validator(&Value::Object(upload.input_schema.clone())).unwrap();
        assert!(validator.is_valid(&json!({"body": {"file": {"url": "https://files.test/a.pdf"}, "purpose": "x"}})));
        assert!(
            !validator.is_valid(&json!({"body": {"file": {"filename": "a.pdf"}}})),
            "a file needs its bytes or a url"
        );
        let raw = &derived.tools[1].spec;
        assert!(raw.input_schema["properties"]["body"]["properties"]["content_base64"].is_object());
        assert!(raw.handler.contains(r#""kind":"binary""#));
        assert!(derived.tools[1].example.is_ok(), "a file body has an example: {:?}", derived.tools[1].example);
    }

    #[test]
    fn byte_bodies_are_files_sent_as_base64_text_and_binary_ones_as_bytes() {
        let body = |media: &str, schema: Value| json!({"put": {"requestBody": {"content": {media: {"schema": schema}}}, "responses": {"204": {"description": "ok"}}}});
        let spec = Spec::from_value(json!({
            "openapi": "3.1.0",
            "servers": [{"url": "https://files.test"}],
            "paths": {
                "/byte": body("application/octet-stream", json!({"type": "string", "format": "byte"})),
                "/base64": body("application/octet-stream", json!({"type": "string", "format": "base64"})),
                "/encoded": body("image/png", json!({"type": "string", "contentEncoding": "base64"})),
                "/binary": body("application/octet-stream", json!({"type": "string", "format": "binary"})),
                "/raw": body("application/pdf", json!({"type": "string", "contentMediaType": "application/pdf"})),
                "/untyped": body("application/octet-stream", json!({}))
            }
        }))
        .unwrap();
        let derived = derive(&spec, None, None, &listing(&OperationFilter::default(), 64)).unwrap();
        for tool in &derived.tools {
            let spec = &tool.spec;
            let encoded = ["PUT /byte", "PUT /base64", "PUT /encoded"].contains(&tool.operation.as_str());
            assert!(
                spec.input_schema["properties"]["body"]["properties"]["content_base64"].is_object(),
                "{}",
                tool.operation
            );
            assert!(spec.handler.contains(r#""kind":"binary""#), "{}", tool.operation);
            assert_eq!(
                spec.handler.contains(r#""encoding":"base64""#),
                encoded,
                "{}: {}",
                tool.operation,
                spec.handler
            );
        }
        assert_eq!(derived.tools.len(), 6);
    }

    #[test]
    fn descriptions_add_the_response_fields() {
        let spec = petstore();
        let derived = derive(&spec, None, None, &listing(&OperationFilter::default(), 64)).unwrap();
        assert_eq!(derived.tools[0].spec.description, "List pets. Returns a list of objects with id, name.");
        assert_eq!(derived.tools[3].spec.description, "DELETE /pets/{petId}");
        assert_eq!(credential_name("petstore auth"), "petstore_auth");
        assert_eq!(credential_name("_x"), "kx");
    }

    #[test]
    fn injections_follow_the_scheme() {
        assert_eq!(
            injection(&json!({"type": "apiKey", "in": "query", "name": "appid"})).unwrap(),
            json!({"query": "appid"})
        );
        assert_eq!(
            injection(&json!({"type": "apiKey", "in": "cookie", "name": "sid"})).unwrap(),
            json!({"header": "Cookie", "format": "sid={value}"})
        );
        assert_eq!(
            injection(&json!({"type": "http", "scheme": "Basic"})).unwrap(),
            json!({"basic": {"username": "<username>"}})
        );
        assert_eq!(injection(&json!({"type": "oauth2"})).unwrap()["format"], "Bearer {value}");
        assert!(injection(&json!({"type": "mutualTLS"})).is_err());
    }
}
