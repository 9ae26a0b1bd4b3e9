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
//!
//! [`derive`] is the pipeline; its stages are the children of this module. `spec` understands a
//! description (its text read by `document`, its external references inlined by `external`);
//! `selection` decides which operations are derived and which listed (`select` lets an LLM
//! choose instead); `tool` makes each operation's tool, with `body` for request bodies,
//! `schema` for the JSON Schemas taken from the description and `auth` for the credentials it
//! needs; `listing` trims the schemas so that `tools/list` stays small.

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;

pub use crate::toolset::OperationFilter;
use crate::toolset::ToolSpec;

mod auth;
mod body;
pub mod document;
pub mod external;
pub mod listing;
mod schema;
pub mod select;
mod selection;
pub mod spec;
mod tool;

pub use auth::{AuthNeed, credential_name};
pub use body::{Unsupported, supported};
pub use document::MAX_SPEC_BYTES;
pub use selection::{Selection, discovery_mode, filtered, listed_limit, most_useful};
pub use spec::{BaseUrlError, Flavour, Operation, Spec, SpecError, looks_like_spec};
pub use tool::{EXECUTOR, NoExample};

use crate::serve::discovery::STANDARD_TOOLS;
use crate::serve::discovery::search::{SearchDocument, SearchIndex};

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
    pub example: Result<Value, NoExample>,
}

/// Why no tools can be derived from a description.
#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    #[error("the API description has no operations")]
    NoOperations,
    #[error("base_url {raw:?} is not a URL: {cause}")]
    BaseUrlNotAUrl { raw: String, cause: url::ParseError },
    #[error(transparent)]
    BaseUrl(#[from] BaseUrlError),
    #[error(
        "the operations filter selects none of the {operations} operations; rules look like \"tag:pets\", \
         \"GET /pets/{{id}}\" or \"operationId:listPets\""
    )]
    NoneSelected { operations: usize },
    /// Every selected operation was left out; `warnings` says why each was, after any notes on
    /// the filter's rules.
    #[error("none of the selected operations can be called: {}", .warnings.join("; "))]
    NoneCallable { warnings: Vec<String> },
}

impl DerivedTool {
    /// Whether the credentials named `configured` satisfy one of the operation's alternatives.
    pub fn satisfied_by(&self, configured: &[String]) -> bool {
        self.security.is_empty() || self.security.iter().any(|all| all.iter().all(|s| configured.contains(s)))
    }
}

/// Derives tools from `spec`: the operations the selection's filter selects that the executor
/// can call, at most `max_tools` of them listed; in discovery mode all of them reachable.
pub fn derive(
    spec: &Spec,
    source: Option<&url::Url>,
    base_url: Option<&str>,
    selection: &Selection<'_>,
) -> Result<Derived, DeriveError> {
    let Selection { filter, max_tools, .. } = *selection;
    let mut warnings = Vec::new();
    // Filter on the operations' heads, then resolve the schemas of the selected ones only.
    let heads = spec.operations_where(|_| false);
    if heads.is_empty() {
        return Err(DeriveError::NoOperations);
    }
    let base_url = match base_url {
        Some(raw) => {
            url::Url::parse(raw).map_err(|cause| DeriveError::BaseUrlNotAUrl { raw: raw.to_string(), cause })?
        }
        None => spec.base_url(source)?,
    };
    let selected = filtered(&heads, filter);
    for rule in filter.include.iter().chain(&filter.exclude) {
        if !heads.iter().any(|op| selection::matches(rule, op)) {
            warnings.push(format!("operations rule {rule:?} matches no operation"));
        }
    }
    if selected.is_empty() {
        return Err(DeriveError::NoneSelected { operations: heads.len() });
    }
    let keys: HashSet<(&str, &str)> = selected.iter().map(|op| (op.method.as_str(), op.path.as_str())).collect();
    let resolved = spec.operations_where(|op| keys.contains(&(op.method.as_str(), op.path.as_str())));
    let mut callable = Vec::new();
    for operation in resolved.iter().filter(|op| keys.contains(&(op.method.as_str(), op.path.as_str()))) {
        match supported(operation) {
            Ok(()) => callable.push(operation),
            Err(reason) => warnings.push(format!("{} is left out: {reason}", tool::describe(operation))),
        }
    }
    if callable.is_empty() {
        return Err(DeriveError::NoneCallable { warnings });
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
            let left: Vec<String> = listed[limit..].iter().map(|&i| tool::describe(callable[i])).collect();
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
        let name = tool::unique_name(operation, &mut names);
        let needs: Vec<String> =
            operation.security.iter().flatten().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        auth::record_needs(&mut auth, &schemes, &needs, &name, &mut warnings);
        let credentials: Vec<String> = needs.iter().map(|s| credential_name(s)).collect();
        let (spec, example) = tool::from_operation(operation, &name, &base_url, &credentials, &mut warnings);
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
            derived_ops.iter().map(|&index| selection::search_document(callable[index])).collect();
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

impl Derived {
    /// Applies the names and descriptions an LLM chose; schemas and requests stay as derived.
    /// A name already taken keeps the derived one (a warning says so).
    pub fn apply(&mut self, choices: &[select::Choice]) {
        for choice in choices {
            let Some(index) = self.tools.iter().position(|t| t.operation == choice.operation) else { continue };
            if let Some(description) = choice.description.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
                self.tools[index].spec.description = tool::trim(description, tool::MAX_DESCRIPTION_CHARS);
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A selection that lists every callable operation, up to `max_tools`, never in discovery
    /// mode.
    fn listing(filter: &OperationFilter, max_tools: usize) -> Selection<'_> {
        Selection { filter, max_tools, discovery: Some(false), chosen: None }
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
        assert_eq!(
            none.to_string(),
            "the operations filter selects none of the 5 operations; rules look like \"tag:pets\", \
             \"GET /pets/{id}\" or \"operationId:listPets\""
        );
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
        assert_eq!(
            supported(&petstore_with_an_unsupported_body().operations_where(|_| true)[4]).unwrap_err().to_string(),
            "its body is multipart/mixed, and the only multipart body the executor sends is multipart/form-data"
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
    }
}
