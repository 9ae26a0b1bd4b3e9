//! Understanding an API description (its text is read by [`super::document`]): OpenAPI 3.0/3.1
//! or Swagger 2.0, recognised by its content; local `$ref`s resolved with cycles cut; the
//! operations it describes, in one shape for both versions.

use serde_json::{Map, Value};

use super::document::DocumentError;

/// How deep `$ref`s are followed inside one schema before the rest is left open (`{}`).
const MAX_REF_DEPTH: usize = 12;
/// How deep a resolved schema may nest (counting every keyword level).
const MAX_NESTING: usize = 48;
/// Schema objects one resolved schema may hold (a few hundred kilobytes of JSON at most).
const MAX_SCHEMA_NODES: usize = 3000;

/// The state of resolving one schema: the `$ref`s being followed, and what is left of the size
/// budget.
struct Walk {
    stack: Vec<String>,
    budget: usize,
}

/// Which description language a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Swagger2,
    OpenApi30,
    OpenApi31,
}

impl Flavour {
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Swagger2 => "swagger 2.0",
            Flavour::OpenApi30 => "openapi 3.0",
            Flavour::OpenApi31 => "openapi 3.1",
        }
    }
}

/// A parsed API description.
pub struct Spec {
    pub flavour: Flavour,
    pub root: Value,
}

/// One operation, with its parameters resolved and merged with the path item's.
#[derive(Debug, Clone)]
pub struct Operation {
    pub method: String,
    pub path: String,
    pub operation_id: Option<String>,
    pub summary: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub deprecated: bool,
    pub parameters: Vec<Parameter>,
    pub body: Option<Body>,
    /// The schema of the first 2xx JSON response, resolved.
    pub response: Option<Value>,
    /// The media type to ask for (`Accept`): the 2xx response's JSON type, else its first one.
    pub accept: Option<String>,
    /// Alternatives, each a set of scheme names that together satisfy it (`[]`: no auth).
    pub security: Vec<Vec<String>>,
}

#[cfg(test)]
impl Operation {
    /// An operation with a method and a path and nothing else, for tests.
    pub fn bare(method: &str, path: &str) -> Operation {
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
}

#[derive(Debug, Clone)]
pub struct Parameter {
    pub name: String,
    /// `path`, `query`, `header` or `cookie`.
    pub location: String,
    pub required: bool,
    pub description: Option<String>,
    pub schema: Value,
    pub style: String,
    pub explode: bool,
    /// An example value: the parameter's `example`/`examples`, else its schema's example,
    /// default or first enum value.
    pub example: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct Body {
    pub content_type: String,
    pub schema: Value,
    pub required: bool,
    pub description: Option<String>,
    pub example: Option<Value>,
}

/// Whether `text` looks like an API description, without parsing all of it: a JSON object
/// with an `openapi` or `swagger` key near its start, or YAML with one at the top level.
pub fn looks_like_spec(text: &str) -> bool {
    let head: String = text.chars().take(4096).collect();
    let trimmed = head.trim_start();
    if trimmed.starts_with('{') {
        return ["\"openapi\"", "\"swagger\""].iter().any(|key| trimmed.contains(key));
    }
    head.lines().take(100).any(|line| {
        ["openapi:", "swagger:", "\"openapi\":", "'openapi':", "\"swagger\":", "'swagger':"]
            .iter()
            .any(|key| line.starts_with(key))
    })
}

/// Why a document is not a description this module reads.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Document(#[from] DocumentError),
    #[error("unsupported API description version {version:?}: OpenAPI 3.0, 3.1 and Swagger 2.0 are read")]
    UnsupportedVersion { version: String },
    #[error("this is not an OpenAPI or Swagger description: it has neither an `openapi` nor a `swagger` field")]
    NotADescription,
    #[error("the API description has no `paths` object, so it describes no operations")]
    NoPaths,
}

/// Why the description's server URL cannot be where requests go.
#[derive(Debug, thiserror::Error)]
pub enum BaseUrlError {
    #[error("the API's server URL {url} is not http or https")]
    NotHttp { url: url::Url },
    #[error("the API's server URL {raw:?} is not usable: {cause}")]
    Unusable { raw: String, cause: url::ParseError },
    #[error("the API's server URL {raw:?} is relative and the description was given inline: give \"base_url\"")]
    RelativeInline { raw: String },
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec").field("flavour", &self.flavour).field("title", &self.title()).finish_non_exhaustive()
    }
}

impl Spec {
    /// Parses a description from JSON or YAML text and recognises its version, on this thread
    /// (see [`super::document::read`] for the async threads).
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        Spec::from_value(super::document::parse(text)?)
    }

    pub fn from_value(root: Value) -> Result<Spec, SpecError> {
        let version = |key: &str| root.get(key).map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
        let flavour = match (version("openapi"), version("swagger")) {
            (Some(v), _) if v.starts_with("3.1") || v.starts_with("3.2") => Flavour::OpenApi31,
            (Some(v), _) if v.starts_with("3.") => Flavour::OpenApi30,
            (None, Some(v)) if v.starts_with('2') => Flavour::Swagger2,
            (Some(version), _) | (None, Some(version)) => return Err(SpecError::UnsupportedVersion { version }),
            (None, None) => return Err(SpecError::NotADescription),
        };
        if !root.get("paths").is_some_and(Value::is_object) {
            return Err(SpecError::NoPaths);
        }
        Ok(Spec { flavour, root })
    }

    /// The title from `info`, if any.
    pub fn title(&self) -> Option<&str> {
        self.root.pointer("/info/title").and_then(Value::as_str)
    }

    /// Follows a local `$ref` (`#/components/schemas/X`), once.
    fn lookup(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        // JSON pointers in `$ref`s are often percent-encoded too (`%7Bid%7D` for `{id}`).
        let decoded = percent_encoding::percent_decode_str(pointer).decode_utf8_lossy();
        self.root.pointer(pointer).or_else(|| self.root.pointer(&decoded))
    }

    /// `value` with `$ref` replaced by what it points at (not recursively).
    fn deref<'a>(&'a self, value: &'a Value) -> &'a Value {
        let mut current = value;
        for _ in 0..MAX_REF_DEPTH {
            match current.get("$ref").and_then(Value::as_str).and_then(|r| self.lookup(r)) {
                Some(target) => current = target,
                None => break,
            }
        }
        current
    }

    /// A schema with every local `$ref` inlined, `allOf` merged, OpenAPI 3.0's `nullable`
    /// turned into a `null` type, and recursion cut (a schema met again inside itself, or past
    /// [`MAX_REF_DEPTH`], becomes `{}`: anything).
    pub fn resolve_schema(&self, schema: &Value) -> Value {
        let mut walk = Walk { stack: Vec::new(), budget: MAX_SCHEMA_NODES };
        self.resolve(schema, &mut walk, 0)
    }

    fn resolve(&self, schema: &Value, walk: &mut Walk, depth: usize) -> Value {
        match schema {
            // Deeper than any real schema nests, or larger than a tool's schema should be (a
            // description whose schemas nest many distinct `$ref`s would otherwise grow
            // exponentially as they are inlined): the rest is left open.
            Value::Object(_) if depth > MAX_NESTING || walk.budget == 0 => Value::Object(Map::new()),
            Value::Object(map) => {
                walk.budget -= 1;
                if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                    if walk.stack.iter().any(|seen| seen == reference) || walk.stack.len() >= MAX_REF_DEPTH {
                        return Value::Object(Map::new());
                    }
                    let Some(target) = self.lookup(reference) else {
                        return Value::Object(Map::new());
                    };
                    walk.stack.push(reference.to_string());
                    let resolved = self.resolve(target, walk, depth + 1);
                    walk.stack.pop();
                    return resolved;
                }
                let mut out = Map::new();
                for (key, value) in map {
                    let resolved = match key.as_str() {
                        // Examples and vendor extensions are data, not schemas.
                        "example" | "examples" | "default" | "enum" | "const" => value.clone(),
                        k if k.starts_with("x-") => continue,
                        "discriminator" | "xml" | "externalDocs" => continue,
                        // Maps from names to schemas: every name is kept, whatever it is.
                        "properties" | "patternProperties" | "definitions" | "$defs" => match value {
                            Value::Object(named) => Value::Object(
                                named
                                    .iter()
                                    .map(|(name, schema)| (name.clone(), self.resolve(schema, walk, depth + 1)))
                                    .collect(),
                            ),
                            other => other.clone(),
                        },
                        _ => self.resolve(value, walk, depth + 1),
                    };
                    out.insert(key.clone(), resolved);
                }
                if out.remove("nullable") == Some(Value::Bool(true)) {
                    match out.get_mut("type") {
                        Some(Value::String(kind)) => {
                            let kind = kind.clone();
                            out.insert("type".into(), Value::from(vec![kind, "null".to_string()]));
                        }
                        Some(Value::Array(kinds)) if !kinds.iter().any(|k| k == "null") => kinds.push("null".into()),
                        _ => {}
                    }
                }
                if let Some(Value::Array(parts)) = out.remove("allOf") {
                    return merge_all_of(out, parts);
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(|item| self.resolve(item, walk, depth + 1)).collect()),
            other => other.clone(),
        }
    }

    /// Every operation under `paths`, in document order.
    pub fn operations(&self) -> Vec<Operation> {
        self.operations_where(|_| true)
    }

    /// Every operation under `paths`, in document order; only those `complete` accepts (it sees
    /// the method, path, operationId, summary, description, tags and deprecation) get their
    /// parameters, body and response resolved. Choosing first keeps a description with
    /// thousands of operations cheap when a few are wanted.
    pub fn operations_where(&self, complete: impl Fn(&Operation) -> bool) -> Vec<Operation> {
        let mut operations = Vec::new();
        let global_security = self.root.get("security").map(security_alternatives).unwrap_or_default();
        for (path, item) in self.root["paths"].as_object().into_iter().flatten() {
            let item = self.deref(item);
            for method in ["get", "put", "post", "delete", "options", "head", "patch", "trace"] {
                let Some(operation) = item.get(method).filter(|o| o.is_object()) else { continue };
                let text = |key: &str| operation.get(key).and_then(Value::as_str).map(str::to_owned);
                let mut head = Operation {
                    method: method.to_ascii_uppercase(),
                    path: path.clone(),
                    operation_id: text("operationId"),
                    summary: text("summary"),
                    description: text("description"),
                    tags: operation
                        .get("tags")
                        .and_then(Value::as_array)
                        .map(|t| t.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                        .unwrap_or_default(),
                    deprecated: operation.get("deprecated") == Some(&Value::Bool(true)),
                    parameters: Vec::new(),
                    body: None,
                    response: None,
                    accept: None,
                    security: operation
                        .get("security")
                        .map(security_alternatives)
                        .unwrap_or_else(|| global_security.clone()),
                };
                if complete(&head) {
                    let raw = self.merged_parameters(item, operation);
                    (head.parameters, head.body) = self.parameters(&raw, operation);
                    head.response = self.response_schema(operation);
                    head.accept = self.accept(operation);
                }
                operations.push(head);
            }
        }
        operations
    }

    /// The operation's parameters plus its path item's, unless the operation overrides them
    /// (same name and place).
    fn merged_parameters(&self, item: &Value, operation: &Value) -> Vec<Value> {
        let mut raw: Vec<Value> = operation.get("parameters").and_then(Value::as_array).cloned().unwrap_or_default();
        for parameter in item.get("parameters").and_then(Value::as_array).into_iter().flatten() {
            let p = self.deref(parameter);
            let overridden = raw.iter().any(|own| {
                let own = self.deref(own);
                own.get("name") == p.get("name") && own.get("in") == p.get("in")
            });
            if !overridden {
                raw.push(parameter.clone());
            }
        }
        raw
    }

    fn parameters(&self, raw: &[Value], operation: &Value) -> (Vec<Parameter>, Option<Body>) {
        let mut parameters = Vec::new();
        let mut body = None;
        let mut form = Map::new();
        let mut form_required = Vec::new();
        for parameter in raw {
            let p = self.deref(parameter);
            let (Some(name), Some(location)) =
                (p.get("name").and_then(Value::as_str), p.get("in").and_then(Value::as_str))
            else {
                continue;
            };
            let description = p.get("description").and_then(Value::as_str).map(str::to_owned);
            let required = p.get("required") == Some(&Value::Bool(true)) || location == "path";
            match location {
                // Swagger 2.0: the body parameter, and form fields.
                "body" => {
                    let consumes = self.consumes(operation);
                    let schema = self.resolve_schema(p.get("schema").unwrap_or(&Value::Null));
                    body = Some(Body {
                        content_type: consumes.unwrap_or_else(|| "application/json".into()),
                        example: example_of(p, &schema),
                        schema,
                        required,
                        description,
                    });
                }
                "formData" => {
                    let mut schema = swagger2_parameter_schema(p);
                    if let Some(text) = &description {
                        schema["description"] = Value::String(text.clone());
                    }
                    form.insert(name.to_string(), self.resolve_schema(&schema));
                    if required {
                        form_required.push(Value::String(name.to_string()));
                    }
                }
                "path" | "query" | "header" | "cookie" => {
                    let schema = match p.get("schema") {
                        Some(schema) => self.resolve_schema(schema),
                        None => self.resolve_schema(&swagger2_parameter_schema(p)),
                    };
                    let default_style = if matches!(location, "query" | "cookie") { "form" } else { "simple" };
                    let style = p
                        .get("style")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or_else(|| swagger2_style(p))
                        .unwrap_or_else(|| default_style.to_string());
                    let explode = p
                        .get("explode")
                        .and_then(Value::as_bool)
                        .unwrap_or_else(|| style == "form" && p.get("collectionFormat").is_none_or(|f| f == "multi"));
                    parameters.push(Parameter {
                        name: name.to_string(),
                        location: location.to_string(),
                        required,
                        description,
                        example: example_of(p, &schema),
                        schema,
                        style,
                        explode,
                    });
                }
                _ => {}
            }
        }
        if !form.is_empty() {
            // Form fields go as a form: urlencoded unless the operation only takes multipart, or
            // a field is a file (which only multipart can carry).
            let multipart_only = self
                .media_types(operation, "consumes")
                .is_some_and(|kinds| !kinds.is_empty() && kinds.iter().all(|k| k.starts_with("multipart/")));
            let has_file = form.values().any(|field| field.get("format").is_some_and(|f| f == "binary"));
            let content_type =
                if multipart_only || has_file { "multipart/form-data" } else { "application/x-www-form-urlencoded" };
            let content_type = content_type.to_string();
            let schema = serde_json::json!({"type": "object", "properties": form, "required": form_required});
            body = Some(Body {
                content_type,
                example: example_of(&Value::Null, &schema),
                schema,
                required: !form_required.is_empty(),
                description: None,
            });
        }
        if let Some(request_body) = operation.get("requestBody") {
            let request_body = self.deref(request_body);
            if let Some(content) = request_body.get("content").and_then(Value::as_object) {
                let chosen = content
                    .iter()
                    .find(|(kind, _)| kind.contains("json"))
                    .or_else(|| content.iter().find(|(kind, _)| kind.starts_with("application/x-www-form-urlencoded")))
                    .or_else(|| content.iter().find(|(kind, _)| kind.starts_with("multipart/form-data")))
                    .or_else(|| content.iter().next());
                if let Some((kind, media)) = chosen {
                    let schema = self.resolve_schema(media.get("schema").unwrap_or(&Value::Null));
                    body = Some(Body {
                        content_type: kind.clone(),
                        example: example_of(media, &schema),
                        schema,
                        required: request_body.get("required") == Some(&Value::Bool(true)),
                        description: request_body.get("description").and_then(Value::as_str).map(str::to_owned),
                    });
                }
            }
        }
        (parameters, body)
    }

    /// Swagger 2.0's `consumes` (or, with `key` = `produces`, `produces`): the operation's list,
    /// else the document's.
    fn media_types(&self, operation: &Value, key: &str) -> Option<Vec<String>> {
        let list = operation.get(key).or_else(|| self.root.get(key))?.as_array()?;
        Some(list.iter().filter_map(Value::as_str).map(str::to_owned).collect())
    }

    /// Swagger 2.0's `consumes` entry a JSON body is sent as: a JSON type, else the first.
    fn consumes(&self, operation: &Value) -> Option<String> {
        let kinds = self.media_types(operation, "consumes")?;
        kinds.iter().find(|kind| kind.contains("json")).or(kinds.first()).cloned()
    }

    /// The first 2xx response, resolved.
    fn success_response<'a>(&'a self, operation: &'a Value) -> Option<&'a Value> {
        let responses = operation.get("responses")?.as_object()?;
        let (_, response) = responses.iter().find(|(code, _)| code.starts_with('2'))?;
        Some(self.deref(response))
    }

    fn accept(&self, operation: &Value) -> Option<String> {
        let kinds: Vec<String> = match self.flavour {
            Flavour::Swagger2 => self.media_types(operation, "produces")?,
            _ => self.success_response(operation)?.get("content")?.as_object()?.keys().cloned().collect(),
        };
        let valid = |kind: &&String| kind.contains('/') && !kind.contains('*') && !kind.contains(char::is_whitespace);
        kinds.iter().filter(valid).find(|k| k.contains("json")).or_else(|| kinds.iter().find(valid)).cloned()
    }

    fn response_schema(&self, operation: &Value) -> Option<Value> {
        let response = self.success_response(operation)?;
        let schema = match self.flavour {
            Flavour::Swagger2 => response.get("schema")?,
            _ => {
                let content = response.get("content")?.as_object()?;
                content.iter().find(|(kind, _)| kind.contains("json")).map(|(_, media)| media)?.get("schema")?
            }
        };
        Some(self.resolve_schema(schema))
    }

    /// The base URL requests go to: `servers[0]` with its variables' defaults (OpenAPI 3), or
    /// `schemes`/`host`/`basePath` (Swagger 2.0), resolved against where the description came from.
    pub fn base_url(&self, source: Option<&url::Url>) -> Result<url::Url, BaseUrlError> {
        let raw = match self.flavour {
            Flavour::Swagger2 => {
                let host = self.root.get("host").and_then(Value::as_str);
                let base_path = self.root.get("basePath").and_then(Value::as_str).unwrap_or("");
                let scheme = self
                    .root
                    .get("schemes")
                    .and_then(Value::as_array)
                    .and_then(|s| {
                        s.iter().filter_map(Value::as_str).find(|s| *s == "https").or_else(|| s.first()?.as_str())
                    })
                    .unwrap_or("https");
                match host {
                    Some(host) => format!("{scheme}://{host}{base_path}"),
                    None => base_path.to_string(),
                }
            }
            _ => {
                let server = self.root.get("servers").and_then(Value::as_array).and_then(|s| s.first());
                match server {
                    Some(server) => {
                        let mut url = server.get("url").and_then(Value::as_str).unwrap_or("/").to_string();
                        for (name, variable) in server.get("variables").and_then(Value::as_object).into_iter().flatten()
                        {
                            let default = variable
                                .get("default")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                                .or_else(|| variable.get("enum")?.as_array()?.first()?.as_str().map(str::to_owned))
                                .unwrap_or_default();
                            url = url.replace(&format!("{{{name}}}"), &default);
                        }
                        url
                    }
                    None => "/".to_string(),
                }
            }
        };
        match url::Url::parse(&raw) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
            Ok(url) => Err(BaseUrlError::NotHttp { url }),
            Err(_) => match source {
                Some(source) => source.join(&raw).map_err(|cause| BaseUrlError::Unusable { raw, cause }),
                None => Err(BaseUrlError::RelativeInline { raw }),
            },
        }
    }

    /// `securitySchemes` (OpenAPI 3) or `securityDefinitions` (Swagger 2.0), resolved.
    pub fn security_schemes(&self) -> Vec<(String, Value)> {
        let schemes = self
            .root
            .pointer("/components/securitySchemes")
            .or_else(|| self.root.get("securityDefinitions"))
            .and_then(Value::as_object);
        schemes.into_iter().flatten().map(|(name, scheme)| (name.clone(), self.deref(scheme).clone())).collect()
    }
}

/// An example for a parameter or media object: its own `example`, the first of its `examples`
/// (OpenAPI 3 `{name: {value}}` or a list), else one built from the schema.
fn example_of(holder: &Value, schema: &Value) -> Option<Value> {
    if let Some(example) = holder.get("example").or_else(|| holder.get("x-example")) {
        return Some(example.clone());
    }
    match holder.get("examples") {
        Some(Value::Object(named)) => {
            if let Some(value) = named.values().find_map(|e| e.get("value")) {
                return Some(value.clone());
            }
        }
        Some(Value::Array(list)) if !list.is_empty() => return Some(list[0].clone()),
        _ => {}
    }
    schema_example(schema, 0)
}

/// An example value from a schema: its `example`, `default`, first `enum` value or `const`;
/// for an object, one built from its required properties (`None` if one of them has none).
pub fn schema_example(schema: &Value, depth: usize) -> Option<Value> {
    let object = schema.as_object()?;
    for key in ["example", "default", "const"] {
        if let Some(value) = object.get(key) {
            return Some(value.clone());
        }
    }
    if let Some(Value::Array(values)) = object.get("examples")
        && let Some(first) = values.first()
    {
        return Some(first.clone());
    }
    if let Some(first) = object.get("enum").and_then(Value::as_array).and_then(|values| values.first()) {
        return Some(first.clone());
    }
    if depth > 6 {
        return None;
    }
    if object.get("type").is_some_and(|t| t == "array") {
        return Some(Value::Array(vec![schema_example(object.get("items")?, depth + 1)?]));
    }
    let properties = object.get("properties").and_then(Value::as_object)?;
    let mut built = Map::new();
    for name in object.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        built.insert(name.to_string(), schema_example(properties.get(name)?, depth + 1)?);
    }
    Some(Value::Object(built))
}

fn security_alternatives(value: &Value) -> Vec<Vec<String>> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .map(|requirement| requirement.keys().cloned().collect())
        .collect()
}

/// A Swagger 2.0 non-body parameter's type fields as a schema.
fn swagger2_parameter_schema(parameter: &Value) -> Value {
    let mut schema = Map::new();
    for key in ["type", "format", "items", "enum", "default", "minimum", "maximum", "pattern", "maxLength", "minLength"]
    {
        if let Some(value) = parameter.get(key) {
            schema.insert(key.to_string(), value.clone());
        }
    }
    // Swagger 2.0's `file` is OpenAPI 3's binary string: a file part of a multipart form.
    if schema.get("type") == Some(&Value::String("file".into())) {
        schema.insert("type".into(), Value::String("string".into()));
        schema.insert("format".into(), Value::String("binary".into()));
    }
    Value::Object(schema)
}

/// Swagger 2.0's `collectionFormat` as an OpenAPI 3 style.
fn swagger2_style(parameter: &Value) -> Option<String> {
    let style = match parameter.get("collectionFormat")?.as_str()? {
        "ssv" => "spaceDelimited",
        "pipes" => "pipeDelimited",
        "multi" | "csv" | "tsv" => "form",
        _ => return None,
    };
    Some(style.to_string())
}

/// `allOf` merged into one object schema: properties and `required` united, other keywords
/// kept from the first part that has them. Parts that are not objects are kept as `allOf`.
fn merge_all_of(mut base: Map<String, Value>, parts: Vec<Value>) -> Value {
    let mut properties = base.remove("properties").and_then(|p| p.as_object().cloned()).unwrap_or_default();
    let mut required: Vec<Value> = base.remove("required").and_then(|r| r.as_array().cloned()).unwrap_or_default();
    let mut leftovers = Vec::new();
    for part in parts {
        let Value::Object(mut part) = part else { continue };
        let mergeable = part.get("type").is_none_or(|t| t == "object")
            && !part.contains_key("oneOf")
            && !part.contains_key("anyOf");
        if !mergeable {
            leftovers.push(Value::Object(part));
            continue;
        }
        if let Some(Value::Object(more)) = part.remove("properties") {
            properties.extend(more);
        }
        if let Some(Value::Array(more)) = part.remove("required") {
            required.extend(more.into_iter().filter(|r| !required.contains(r)).collect::<Vec<_>>());
        }
        for (key, value) in part {
            base.entry(key).or_insert(value);
        }
    }
    if !properties.is_empty() {
        base.insert("properties".into(), Value::Object(properties));
        base.entry("type").or_insert(Value::String("object".into()));
    }
    if !required.is_empty() {
        base.insert("required".into(), Value::Array(required));
    }
    if !leftovers.is_empty() {
        base.insert("allOf".into(), Value::Array(leftovers));
    }
    Value::Object(base)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn versions_are_recognised_by_content() {
        assert_eq!(Spec::parse("openapi: 3.0.3\npaths: {}\n").unwrap().flavour, Flavour::OpenApi30);
        assert_eq!(Spec::parse(r#"{"openapi": "3.1.0", "paths": {}}"#).unwrap().flavour, Flavour::OpenApi31);
        assert_eq!(Spec::parse("swagger: '2.0'\npaths: {}\n").unwrap().flavour, Flavour::Swagger2);
        assert_eq!(
            Spec::parse("openapi: 4.0.0\npaths: {}").unwrap_err().to_string(),
            "unsupported API description version \"4.0.0\": OpenAPI 3.0, 3.1 and Swagger 2.0 are read"
        );
        assert_eq!(
            Spec::parse("title: hello").unwrap_err().to_string(),
            "this is not an OpenAPI or Swagger description: it has neither an `openapi` nor a `swagger` field"
        );
        assert_eq!(
            Spec::parse("openapi: 3.0.0").unwrap_err().to_string(),
            "the API description has no `paths` object, so it describes no operations"
        );
        assert!(matches!(Spec::parse("a: [unclosed"), Err(SpecError::Document(DocumentError::InvalidYaml(_)))));
        assert!(looks_like_spec("{\n  \"openapi\": \"3.0.0\""));
        assert!(!looks_like_spec("<html>"));
        assert!(looks_like_spec("# comment\nopenapi: 3.1.0\ninfo: {}"));
        assert!(!looks_like_spec("<p>Our API follows openapi: see the spec</p>"));
        assert!(!looks_like_spec("  nested:\n    openapi: 3.0.0"));
    }

    #[test]
    fn yaml_with_integer_keys_and_huge_numbers_reads_as_json() {
        let text = "openapi: 3.0.0\npaths:\n  /a:\n    get:\n      parameters:\n        - {name: seed, in: query, schema: {type: integer, minimum: -9223372036854776000}}\n      responses:\n        200: {description: ok}\n";
        let spec = Spec::parse(text).unwrap();
        assert!(spec.root.pointer("/paths/~1a/get/responses/200").is_some(), "an integer key becomes a string");
        let minimum = &spec.operations()[0].parameters[0].schema["minimum"];
        assert!(minimum.as_f64().unwrap() < -9.2e18, "{minimum}");
    }

    #[test]
    fn property_names_that_look_like_keywords_are_kept() {
        let spec = Spec::from_value(json!({"openapi": "3.0.0", "paths": {}})).unwrap();
        let schema = json!({"type": "object", "properties": {"xml": {"type": "string"}, "x-id": {"type": "integer"}, "example": {"type": "string"}}});
        let resolved = spec.resolve_schema(&schema);
        let names: Vec<&String> = resolved["properties"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["xml", "x-id", "example"]);
    }

    #[test]
    fn examples_come_from_the_parameter_its_schema_or_the_required_fields() {
        let p = |v: Value| v;
        assert_eq!(example_of(&p(json!({"example": 5})), &json!({})), Some(json!(5)));
        assert_eq!(example_of(&p(json!({"examples": {"a": {"value": "x"}}})), &json!({})), Some(json!("x")));
        assert_eq!(example_of(&Value::Null, &json!({"enum": ["on", "off"]})), Some(json!("on")));
        assert_eq!(example_of(&Value::Null, &json!({"type": "array", "items": {"default": 3}})), Some(json!([3])));
        let object =
            json!({"type": "object", "required": ["a"], "properties": {"a": {"example": 1}, "b": {"type": "string"}}});
        assert_eq!(example_of(&Value::Null, &object), Some(json!({"a": 1})));
        assert_eq!(example_of(&Value::Null, &json!({"type": "string"})), None);
    }

    #[test]
    fn refs_resolve_cycles_are_cut_and_all_of_merges() {
        let spec = Spec::from_value(json!({
            "openapi": "3.0.0",
            "paths": {},
            "components": {"schemas": {
                "Node": {"type": "object", "properties": {"name": {"type": "string", "nullable": true}, "child": {"$ref": "#/components/schemas/Node"}}},
                "Named": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
                "Pet": {"allOf": [{"$ref": "#/components/schemas/Named"}, {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}]}
            }}
        }))
        .unwrap();
        let node = spec.resolve_schema(&json!({"$ref": "#/components/schemas/Node"}));
        assert_eq!(node["properties"]["name"]["type"], json!(["string", "null"]));
        assert_eq!(node["properties"]["child"], json!({}), "the cycle is cut where the schema meets itself");
        let pet = spec.resolve_schema(&json!({"$ref": "#/components/schemas/Pet"}));
        assert_eq!(pet["required"], json!(["name", "age"]));
        assert_eq!(pet["properties"]["age"]["type"], "integer");
        assert_eq!(spec.resolve_schema(&json!({"$ref": "#/nowhere"})), json!({}));
    }

    #[test]
    fn swagger2_operations_have_bodies_forms_and_a_base_url() {
        let spec = Spec::from_value(json!({
            "swagger": "2.0",
            "host": "api.example.com",
            "basePath": "/v2",
            "schemes": ["http", "https"],
            "paths": {"/pets/{id}": {
                "parameters": [{"name": "id", "in": "path", "type": "integer", "required": true}],
                "put": {"operationId": "updatePet", "parameters": [
                    {"name": "body", "in": "body", "schema": {"$ref": "#/definitions/Pet"}, "required": true},
                    {"name": "tags", "in": "query", "type": "array", "items": {"type": "string"}, "collectionFormat": "pipes"}
                ], "responses": {"200": {"description": "ok", "schema": {"$ref": "#/definitions/Pet"}}}},
                "post": {"consumes": ["application/x-www-form-urlencoded"], "parameters": [
                    {"name": "name", "in": "formData", "type": "string", "required": true}
                ], "responses": {"201": {"description": "created"}}}
            }},
            "definitions": {"Pet": {"type": "object", "properties": {"name": {"type": "string"}}}}
        }))
        .unwrap();
        assert_eq!(spec.base_url(None).unwrap().as_str(), "https://api.example.com/v2");
        let operations = spec.operations();
        let put = &operations[0];
        assert_eq!((put.method.as_str(), put.operation_id.as_deref()), ("PUT", Some("updatePet")));
        assert_eq!(put.body.as_ref().unwrap().schema["properties"]["name"]["type"], "string");
        assert_eq!(put.body.as_ref().unwrap().content_type, "application/json", "no consumes: a body goes as JSON");
        let tags = put.parameters.iter().find(|p| p.name == "tags").unwrap();
        assert_eq!((tags.style.as_str(), tags.explode), ("pipeDelimited", false));
        assert!(put.parameters.iter().any(|p| p.name == "id" && p.location == "path" && p.required));
        assert_eq!(put.response.as_ref().unwrap()["type"], "object");
        let post = &operations[1];
        let body = post.body.as_ref().unwrap();
        assert_eq!(body.content_type, "application/x-www-form-urlencoded");
        assert_eq!(body.schema["required"], json!(["name"]));
    }

    #[test]
    fn server_variables_and_relative_urls() {
        let spec = Spec::from_value(json!({
            "openapi": "3.0.0",
            "servers": [{"url": "https://{region}.api.example.com/{version}", "variables": {
                "region": {"default": "eu"}, "version": {"enum": ["v1", "v2"]}}}],
            "paths": {}
        }))
        .unwrap();
        assert_eq!(spec.base_url(None).unwrap().as_str(), "https://eu.api.example.com/v1");
        let relative =
            Spec::from_value(json!({"openapi": "3.0.0", "servers": [{"url": "/api/v3"}], "paths": {}})).unwrap();
        let source = url::Url::parse("https://petstore.example.com/openapi.json").unwrap();
        assert_eq!(relative.base_url(Some(&source)).unwrap().as_str(), "https://petstore.example.com/api/v3");
        assert_eq!(
            relative.base_url(None).unwrap_err().to_string(),
            "the API's server URL \"/api/v3\" is relative and the description was given inline: give \"base_url\""
        );
        let ftp = Spec::from_value(
            json!({"openapi": "3.0.0", "servers": [{"url": "ftp://files.example.com/"}], "paths": {}}),
        )
        .unwrap();
        assert_eq!(
            ftp.base_url(None).unwrap_err().to_string(),
            "the API's server URL ftp://files.example.com/ is not http or https"
        );
        let unusable =
            Spec::from_value(json!({"openapi": "3.0.0", "servers": [{"url": "//[::1"}], "paths": {}})).unwrap();
        assert_eq!(
            unusable.base_url(Some(&source)).unwrap_err().to_string(),
            "the API's server URL \"//[::1\" is not usable: invalid IPv6 address"
        );
    }
}
