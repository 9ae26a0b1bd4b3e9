//! Servers derived from API descriptions (OpenAPI 3, Swagger 2.0): registration inline and by
//! URL, the tools' schemas and annotations, and the requests they send, checked one by one at a
//! loopback upstream that records everything it receives.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::helpers::{AppOptions, TestApp, error_message, mcp_call, spawn_app_with, text_of, wait_for_status};

const PETS_HOST: &str = "api.pets.test";

/// One request the API saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: String,
}

/// A loopback API that records every request. `/v1/secure*` wants `X-Api-Key: pet-secret-123`
/// or HTTP basic `ops:ops-secret-123`; `/spec.yaml` serves `spec_yaml`; anything else answers a pet.
#[derive(Clone)]
struct PetsApi {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    spec_yaml: Arc<Mutex<String>>,
}

impl PetsApi {
    async fn start() -> PetsApi {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let spec_yaml: Arc<Mutex<String>> = Arc::default();
        let (record, spec) = (seen.clone(), spec_yaml.clone());
        let router = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: String| {
            let (record, spec) = (record.clone(), spec.clone());
            async move {
                if uri.path() == "/defs.yaml" {
                    let text = "Orders:\n  type: object\n  properties:\n    count: {type: integer}\n";
                    return ([("content-type", "application/yaml")], text.to_string()).into_response();
                }
                if uri.path() == "/spec.yaml" {
                    let text = spec.lock().unwrap().clone();
                    return ([("content-type", "application/yaml")], text).into_response();
                }
                record.lock().unwrap().push(Seen {
                    method: method.to_string(),
                    path: uri.path().to_string(),
                    query: uri.query().map(str::to_owned),
                    headers: headers.clone(),
                    body,
                });
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let basic = format!("Basic {}", base64_ops());
                if uri.path().contains("/secure")
                    && header("x-api-key") != "pet-secret-123"
                    && header("authorization") != basic
                {
                    return (StatusCode::UNAUTHORIZED, axum::Json(json!({"message": "who are you?"}))).into_response();
                }
                if method == Method::DELETE {
                    return StatusCode::NO_CONTENT.into_response();
                }
                axum::Json(json!({"id": 7, "name": "Rex", "tag": "dog", "extra": {"unlisted": true}})).into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, router).await });
        PetsApi { port, seen, spec_yaml }
    }

    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// The request `get_pet` sends for `{"petId": "a b/c", "fields": ["name", "tag"], "X-Request-Id":
/// "req-1", "session": "s 1"}`: path encoding, form arrays (not exploded), a header, a cookie and
/// the credential.
fn assert_the_get_pet_request(seen: &Seen) {
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", "/v1/pets/a%20b%2Fc"));
    assert_eq!(seen.query.as_deref(), Some("fields=name,tag"));
    assert_eq!(seen.headers["x-request-id"], "req-1");
    assert_eq!(seen.headers["cookie"], "session=s%201");
    assert_eq!(seen.headers["x-api-key"], "pet-secret-123", "a credential goes with every request to its domains");
}

fn base64_ops() -> String {
    // "ops:ops-secret-123"
    "b3BzOm9wcy1zZWNyZXQtMTIz".to_string()
}

async fn app_for(env: &[(&str, &str)]) -> TestApp {
    let mut all = vec![(format!("MCPBOOTD_EGRESS__RESOLVE__{PETS_HOST}"), "127.0.0.1".to_string())];
    all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    spawn_app_with(AppOptions { env: all, ..Default::default() }).await
}

/// Waits for the server's newest generation to finish; returns the server view.
async fn wait_finished(app: &TestApp, id: &str) -> Value {
    wait_for_status(app, id, &["ready", "failed", "planned"]).await
}

/// An OpenAPI 3.0 description exercising every parameter place and style, three body kinds and
/// an API key.
fn petstore(port: u16) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Pet Store", "version": "1.0.0"},
        "servers": [{"url": format!("http://{PETS_HOST}:{{port}}/v1"), "variables": {"port": {"default": port.to_string()}}}],
        "components": {
            "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}},
            "parameters": {"PetId": {"name": "petId", "in": "path", "required": true, "schema": {"type": "string"}, "example": "a b/c"}},
            "schemas": {
                "Pet": {"type": "object", "required": ["name"], "properties": {
                    "id": {"type": "integer", "format": "int64", "readOnly": true},
                    "name": {"type": "string", "example": "Rex"},
                    "tag": {"type": "string", "nullable": true},
                    "owner": {"$ref": "#/components/schemas/Owner"}}},
                "Owner": {"type": "object", "properties": {"name": {"type": "string"}, "pets": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}
            }
        },
        "paths": {
            "/pets": {
                "get": {
                    "operationId": "listPets", "summary": "List pets", "tags": ["pets"],
                    "parameters": [
                        {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                        {"name": "filter", "in": "query", "style": "deepObject", "explode": true, "schema": {"type": "object", "properties": {"kind": {"type": "string"}}}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 10, "maximum": 100}}
                    ],
                    "responses": {"200": {"description": "pets", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}}}
                },
                "post": {
                    "operationId": "createPet", "summary": "Create a pet", "tags": ["pets"], "security": [{"key": []}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}},
                    "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}}
                }
            },
            "/pets/{petId}": {
                "parameters": [{"$ref": "#/components/parameters/PetId"}],
                "get": {
                    "operationId": "getPet", "summary": "Get a pet", "description": "Returns one pet by its id.", "tags": ["pets"],
                    "parameters": [
                        {"name": "fields", "in": "query", "explode": false, "schema": {"type": "array", "items": {"type": "string"}}},
                        {"name": "X-Request-Id", "in": "header", "schema": {"type": "string"}},
                        {"name": "session", "in": "cookie", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": "a pet", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}}
                },
                "delete": {"operationId": "deletePet", "tags": ["pets"], "responses": {"204": {"description": "gone"}}}
            },
            "/pets/{petId}/photo": {
                "put": {
                    "operationId": "setPhoto", "parameters": [{"$ref": "#/components/parameters/PetId"}],
                    "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": {"type": "object", "properties": {"url": {"type": "string"}, "caption": {"type": "string"}}}}}},
                    "responses": {"200": {"description": "ok"}}
                }
            },
            "/pets/search;matrix": {
                "get": {
                    "operationId": "searchPets",
                    "parameters": [{"name": "ids", "in": "query", "style": "pipeDelimited", "explode": false, "schema": {"type": "array", "items": {"type": "integer"}}}],
                    "responses": {"200": {"description": "ok"}}
                }
            },
            "/secure/stats": {"get": {"operationId": "secureStats", "security": [{"key": []}], "responses": {"200": {"description": "ok"}}}},
            "/upload": {"post": {"operationId": "upload", "requestBody": {"content": {"multipart/mixed": {"schema": {"type": "object"}}}}, "responses": {"200": {"description": "ok"}}}}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_openapi_description_becomes_tools_that_call_the_api_as_described() {
    let api = PetsApi::start().await;
    let app = app_for(&[]).await;
    let body = json!({
        "id": "pets",
        "openapi_spec": petstore(api.port),
        "credentials": {"key": {"value": "pet-secret-123", "domains": [PETS_HOST], "inject": {"header": "X-Api-Key"}}},
    });
    let (status, started) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["name"], "Pet Store", "the title names the server when no name is given");
    let view = wait_finished(&app, "pets").await;
    assert_eq!(view["status"], "ready", "{view:#}");
    assert_eq!(view["kind"], "openapi");
    let generation = &view["generation"];
    assert_eq!(generation["source"], "openapi");
    assert_eq!(generation["tokens"]["input"].as_u64().unwrap_or(0), 0, "no LLM was used");
    let record = &generation["plan"]["openapi"];
    assert_eq!(record["title"], "Pet Store");
    assert_eq!(record["operations"], 8);
    assert_eq!(record["auth"][0]["scheme"], "key");
    assert_eq!(record["auth"][0]["configured"], true);
    assert_eq!(record["missing_credentials"], json!([]));
    let warnings = generation["warnings"].to_string();
    assert!(warnings.contains("upload") && warnings.contains("multipart"), "{warnings}");
    // The credential's domain is the operator's; the description's host is covered by it.
    assert_eq!(generation["whitelist"], json!([{"domain": PETS_HOST, "source": "operator"}]));
    // The self-test called the read-only operations whose examples are complete.
    let self_test = |name: &str| {
        view["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap()["self_test"]["status"].clone()
    };
    assert_eq!(self_test("get_pet"), "passed");
    assert_eq!(self_test("list_pets"), "passed");
    assert_eq!(self_test("delete_pet"), "skipped");
    let self_test_requests = api.take();
    assert!(self_test_requests.iter().all(|r| r.method == "GET"), "only reads are self-tested: {self_test_requests:?}");

    let client = app.mcp("pets").await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["list_pets", "create_pet", "get_pet", "delete_pet", "set_photo", "search_pets", "secure_stats"]);
    let get_pet = tools.iter().find(|t| t.name == "get_pet").unwrap();
    assert!(
        get_pet.description.as_deref().unwrap().contains("Returns an object with id, name, tag, owner"),
        "{get_pet:?}"
    );
    assert_eq!(get_pet.annotations.as_ref().unwrap().read_only_hint, Some(true));
    let schema = serde_json::to_value(&get_pet.input_schema).unwrap();
    assert_eq!(schema["required"], json!(["petId"]));
    assert_eq!(schema["properties"]["fields"]["items"]["type"], "string");
    let create = tools.iter().find(|t| t.name == "create_pet").unwrap();
    let create_schema = serde_json::to_value(&create.input_schema).unwrap();
    assert_eq!(create_schema["properties"]["body"]["properties"]["tag"]["type"], json!(["string", "null"]));
    assert_eq!(
        create_schema["properties"]["body"]["properties"]["owner"]["properties"]["pets"]["items"],
        json!({}),
        "the recursive schema is cut where it meets itself"
    );
    assert!(create.output_schema.is_some(), "an object response gives an output schema");
    let delete = tools.iter().find(|t| t.name == "delete_pet").unwrap().annotations.clone().unwrap();
    assert_eq!((delete.destructive_hint, delete.idempotent_hint), (Some(true), Some(true)));

    // Path encoding, form arrays (not exploded), a header and a cookie.
    let result = mcp_call(
        &client,
        "get_pet",
        json!({"petId": "a b/c", "fields": ["name", "tag"], "X-Request-Id": "req-1", "session": "s 1"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(result.structured_content.as_ref().unwrap()["name"], "Rex");
    assert_the_get_pet_request(&api.take().pop().unwrap());

    // Exploded arrays, deepObject, and a default left to the API.
    mcp_call(&client, "list_pets", json!({"tags": ["a", "b c"], "filter": {"kind": "dog"}})).await;
    let seen = api.take().pop().unwrap();
    assert_eq!(seen.path, "/v1/pets");
    assert_eq!(seen.query.as_deref(), Some("tags=a&tags=b%20c&filter%5Bkind%5D=dog"));

    // JSON body with the credential, checked against the schema first.
    let refused = mcp_call(&client, "create_pet", json!({"body": {"tag": "dog"}})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(api.take().is_empty(), "arguments that break the schema never reach the API");
    let created = mcp_call(&client, "create_pet", json!({"body": {"name": "Rex", "tag": null}})).await;
    assert_ne!(created.is_error, Some(true), "{}", text_of(&created));
    let seen = api.take().pop().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/v1/pets"));
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(serde_json::from_str::<Value>(&seen.body).unwrap(), json!({"name": "Rex", "tag": null}));
    assert_eq!(seen.headers["x-api-key"], "pet-secret-123");

    // A form body, a pipe-delimited array, a literal `;` in the path, a DELETE with no content.
    mcp_call(
        &client,
        "set_photo",
        json!({"petId": "7", "body": {"url": "https://img.test/a b.png", "caption": "x&y"}}),
    )
    .await;
    let seen = api.take().pop().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PUT", "/v1/pets/7/photo"));
    assert_eq!(seen.headers["content-type"], "application/x-www-form-urlencoded");
    assert_eq!(seen.body, "url=https%3A%2F%2Fimg.test%2Fa%20b.png&caption=x%26y");
    mcp_call(&client, "search_pets", json!({"ids": [1, 2, 3]})).await;
    let seen = api.take().pop().unwrap();
    assert_eq!(seen.path, "/v1/pets/search;matrix");
    assert_eq!(seen.query.as_deref(), Some("ids=1|2|3"));
    let deleted = mcp_call(&client, "delete_pet", json!({"petId": "7"})).await;
    assert_ne!(deleted.is_error, Some(true), "{}", text_of(&deleted));
    assert_eq!(api.take().pop().unwrap().method, "DELETE");
    let secure = mcp_call(&client, "secure_stats", json!({})).await;
    assert_ne!(secure.is_error, Some(true), "{}", text_of(&secure));
    client.cancel().await.unwrap();
    app.stop().await;
}

/// A Swagger 2.0 description in YAML, fetched from its URL.
fn swagger_yaml(port: u16) -> String {
    format!(
        r#"swagger: "2.0"
info:
  title: Pet Ops
  version: "2"
host: {PETS_HOST}:{port}
basePath: /ops
schemes: [http]
securityDefinitions:
  basic:
    type: basic
paths:
  /pets/findByStatus:
    get:
      operationId: findByStatus
      tags: [pet]
      parameters:
        - name: status
          in: query
          type: array
          items: {{type: string, enum: [available, sold]}}
          collectionFormat: csv
          required: true
      responses:
        "200":
          description: ok
          schema: {{type: array, items: {{type: object, properties: {{id: {{type: integer}}}}}}}}
  /pets/{{id}}:
    post:
      operationId: updatePetWithForm
      tags: [pet]
      consumes: [application/x-www-form-urlencoded]
      parameters:
        - {{name: id, in: path, type: integer, required: true}}
        - {{name: name, in: formData, type: string, required: true}}
        - {{name: status, in: formData, type: string}}
      responses:
        "200": {{description: ok}}
  /secure/orders:
    get:
      operationId: listOrders
      tags: [store]
      security: [{{basic: []}}]
      responses:
        "200": {{description: ok, schema: {{$ref: "defs.yaml#/Orders"}}}}
  /secure/inventory:
    get:
      operationId: inventory
      tags: [store]
      security: [{{basic: []}}]
      responses:
        "200": {{description: ok}}
  /users:
    get:
      operationId: listUsers
      tags: [user]
      responses:
        "200": {{description: ok}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swagger_description_by_url_with_a_missing_credential_and_a_tool_cap() {
    let api = PetsApi::start().await;
    // The description is served by the API it describes, and names that API's host and port.
    *api.spec_yaml.lock().unwrap() = swagger_yaml(api.port);
    let app = app_for(&[("MCPBOOTD_GENERATION__MAX_TOOLS", "3")]).await;
    let body = json!({
        "id": "ops",
        "openapi": format!("http://{PETS_HOST}:{}/spec.yaml", api.port),
        "operations": {"include": ["tag:pet", "tag:store"], "exclude": ["operationId:nothing"]},
        "discovery": false,
    });
    let (status, started) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202, "{started}");
    let view = wait_finished(&app, "ops").await;
    assert_eq!(view["status"], "ready", "{view:#}");
    assert_eq!(view["openapi"]["url"], body["openapi"]);
    let generation = &view["generation"];
    let warnings = generation["warnings"].to_string();
    assert!(
        warnings.contains("max_tools") && warnings.contains("inventory"),
        "the cut names what was left: {warnings}"
    );
    assert!(warnings.contains("\\\"operationId:nothing\\\" matches no operation"), "{warnings}");
    assert!(warnings.contains("PUT /admin/servers/ops/credentials/basic"), "{warnings}");
    let record = &generation["plan"]["openapi"];
    assert_eq!(record["flavour"], "swagger 2.0");
    assert_eq!(record["missing_credentials"], json!(["list_orders"]));
    assert_eq!(record["auth"][0]["configured"], false);
    assert_eq!(record["auth"][0]["inject"], json!({"basic": {"username": "<username>"}}));
    assert_eq!(generation["documents"][0]["url"], body["openapi"]);
    let whitelist = &generation["whitelist"];
    assert_eq!(whitelist.as_array().unwrap().len(), 1, "{whitelist}");
    assert_eq!((whitelist[0]["domain"].as_str(), whitelist[0]["source"].as_str()), (Some(PETS_HOST), Some("openapi")));
    let detail = whitelist[0]["detail"].as_str().unwrap();
    assert_eq!(detail, format!("openapi servers of {}", body["openapi"].as_str().unwrap()));
    let tool = |name: &str| view["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).cloned().unwrap();
    assert_eq!(tool("find_by_status")["self_test"]["status"], "passed", "the enum gave the example");
    assert!(tool("list_orders")["self_test"]["reason"].as_str().unwrap().contains("\"basic\""));
    assert_eq!(
        tool("list_orders")["output_schema"]["properties"]["count"]["type"],
        json!(["number", "null"]),
        "the schema in the other file was fetched and resolved (its integer made lenient)"
    );
    api.take();

    let client = app.mcp("ops").await;
    mcp_call(&client, "find_by_status", json!({"status": ["available", "sold"]})).await;
    let seen = api.take().pop().unwrap();
    assert_eq!((seen.path.as_str(), seen.query.as_deref()), ("/ops/pets/findByStatus", Some("status=available,sold")));
    mcp_call(&client, "update_pet_with_form", json!({"id": 5, "body": {"name": "Rex", "status": "sold"}})).await;
    let seen = api.take().pop().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/ops/pets/5"));
    assert_eq!(seen.body, "name=Rex&status=sold");

    // Without the credential the API refuses, and the tool says which credential to add.
    let refused = mcp_call(&client, "list_orders", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let message = text_of(&refused);
    assert!(message.contains("401") && message.contains("the credential \"basic\""), "{message}");
    assert!(message.contains("/credentials/"), "{message}");
    let credential =
        json!({"value": "ops-secret-123", "domains": [PETS_HOST], "inject": {"basic": {"username": "ops"}}});
    let response =
        app.http.put(app.url("/admin/servers/ops/credentials/basic")).json(&credential).send().await.unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let allowed = mcp_call(&client, "list_orders", json!({})).await;
    assert_ne!(allowed.is_error, Some(true), "{}", text_of(&allowed));
    client.cancel().await.unwrap();
    app.stop().await;
}

/// The first hit's `operation` of a `search_operations` call, and the hits.
fn hits(result: &rmcp::model::CallToolResult) -> Vec<Value> {
    result.structured_content.as_ref().unwrap()["operations"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_description_larger_than_max_tools_is_served_in_discovery_mode() {
    let api = PetsApi::start().await;
    // Seven operations can be called (the eighth is multipart), more than five.
    let app = app_for(&[("MCPBOOTD_GENERATION__MAX_TOOLS", "5")]).await;
    let body = json!({
        "id": "big",
        "openapi_spec": petstore(api.port),
        "credentials": {"key": {"value": "pet-secret-123", "domains": [PETS_HOST], "inject": {"header": "X-Api-Key"}}},
    });
    let (status, started) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202, "{started}");
    let view = wait_finished(&app, "big").await;
    assert_eq!(view["status"], "ready", "{view:#}");
    assert_eq!(view["generation"]["plan"]["openapi"]["discovery"], json!({"operations": 7}));
    assert!(view["generation"]["warnings"].to_string().contains("discovery mode"), "{view:#}");
    api.take();

    let client = app.mcp("big").await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    assert_eq!(names[2..], ["search_operations", "describe_operation", "call_operation"]);
    let call_tool = tools.iter().find(|t| t.name == "call_operation").unwrap();
    assert_eq!(call_tool.annotations.as_ref().unwrap().read_only_hint, Some(false));

    let found = mcp_call(&client, "search_operations", json!({"query": "remove a pet"})).await;
    assert_ne!(found.is_error, Some(true), "{}", text_of(&found));
    let first = &hits(&found)[0];
    assert_eq!(first["operation"], "delete_pet");
    assert_eq!(first["request"], "DELETE /pets/{petId}");
    assert_eq!(first["required"], json!(["petId"]));
    let limited = mcp_call(&client, "search_operations", json!({"query": "pet", "limit": 2})).await;
    assert_eq!(hits(&limited).len(), 2);

    let described = mcp_call(&client, "describe_operation", json!({"operation": "create_pet"})).await;
    let described = described.structured_content.unwrap();
    assert_eq!(described["request"], "POST /pets");
    assert_eq!(described["input_schema"]["required"], json!(["body"]));
    assert_eq!(described["output_schema"]["type"], "object");
    let declaration = described["declaration"].as_str().unwrap();
    assert!(declaration.contains("create_pet(args: {") && declaration.contains("): Promise<{"), "{declaration}");

    // A call through call_operation is the request the listed tool would send: path encoding,
    // query style, header, cookie and the credential.
    let result = mcp_call(
        &client,
        "call_operation",
        json!({"operation": "get_pet", "arguments":
            {"petId": "a b/c", "fields": ["name", "tag"], "X-Request-Id": "req-1", "session": "s 1"}}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(result.structured_content.as_ref().unwrap()["name"], "Rex");
    assert_the_get_pet_request(&api.take().pop().unwrap());
    let created =
        mcp_call(&client, "call_operation", json!({"operation": "create_pet", "arguments": {"body": {"name": "Rex"}}}))
            .await;
    assert_ne!(created.is_error, Some(true), "{}", text_of(&created));
    let seen = api.take().pop().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/v1/pets"));
    assert_eq!(serde_json::from_str::<Value>(&seen.body).unwrap(), json!({"name": "Rex"}));

    // Mistakes are tool errors that say what to do, and reach nothing.
    let unknown = mcp_call(&client, "call_operation", json!({"operation": "deletePets"})).await;
    assert_eq!(unknown.is_error, Some(true));
    let message = text_of(&unknown);
    assert!(message.contains("no operation \"deletePets\"") && message.contains("search_operations"), "{message}");
    assert!(message.contains("delete_pet"), "the closest ids are named: {message}");
    let invalid =
        mcp_call(&client, "call_operation", json!({"operation": "create_pet", "arguments": {"body": {"tag": "dog"}}}))
            .await;
    assert_eq!(invalid.is_error, Some(true));
    assert!(text_of(&invalid).contains("name"), "{}", text_of(&invalid));
    let empty = mcp_call(&client, "search_operations", json!({"query": "  "})).await;
    assert!(text_of(&empty).contains("query must not be empty"), "{}", text_of(&empty));
    let no_arguments = mcp_call(&client, "describe_operation", json!({})).await;
    assert!(text_of(&no_arguments).contains("operation is required"), "{}", text_of(&no_arguments));
    assert!(api.take().is_empty(), "no mistake reached the API");

    // The call log names the operation, as it would a listed tool.
    let (_, calls) = app.get("/admin/servers/big/calls").await;
    let logged: Vec<&str> = calls["calls"].as_array().unwrap().iter().filter_map(|c| c["tool"].as_str()).collect();
    assert!(logged.contains(&"get_pet") && logged.contains(&"create_pet"), "{calls:#}");
    // Searches and descriptions are logged and counted as tool calls too, an unknown id as an
    // error; arguments refused before anything ran are not logged, as for any tool.
    let (_, searched) = app.get("/admin/servers/big/calls?tool=search_operations").await;
    let searched = searched["calls"].as_array().unwrap();
    assert_eq!(searched.len(), 2, "two searches ran, the empty query was refused: {searched:#?}");
    assert!(searched.iter().all(|c| c["outcome"] == "ok" && c["via"] == "mcp"), "{searched:#?}");
    let (_, described) = app.get("/admin/servers/big/calls?tool=describe_operation").await;
    assert_eq!(described["calls"].as_array().unwrap().len(), 1, "{described:#}");
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "mcpbootd_tool_calls_total{server=\"big\",tool=\"search_operations\",outcome=\"ok\"} 2",
        "mcpbootd_tool_calls_total{server=\"big\",tool=\"describe_operation\",outcome=\"ok\"} 1",
        "mcpbootd_tool_calls_total{server=\"big\",tool=\"get_pet\",outcome=\"ok\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    }
    client.cancel().await.unwrap();

    // A new version, then back to the first: the first version's operations are still there.
    let (status, regenerated) = app.post("/admin/servers/big/regenerate", &json!({})).await;
    assert!(status == 202 || status == 200, "{status} {regenerated}");
    wait_finished(&app, "big").await;
    let (status, activated) = app.post("/admin/servers/big/activate", &json!({"version": 1})).await;
    assert_eq!(status, 200, "{activated}");
    let client = app.mcp("big").await;
    let again =
        mcp_call(&client, "call_operation", json!({"operation": "delete_pet", "arguments": {"petId": "7"}})).await;
    assert_ne!(again.is_error, Some(true), "{}", text_of(&again));
    assert_eq!(api.take().pop().unwrap().method, "DELETE");
    client.cancel().await.unwrap();

    // And after a restart, from the catalog.
    let data_dir = app.data_dir.clone();
    let upstream = app.upstream.clone();
    app.stop().await;
    let env = vec![(format!("MCPBOOTD_EGRESS__RESOLVE__{PETS_HOST}"), "127.0.0.1".to_string())];
    let app = spawn_app_with(AppOptions { env, data_dir: Some(data_dir), upstream: Some(upstream) }).await;
    let client = app.mcp("big").await;
    let found = mcp_call(&client, "search_operations", json!({"query": "photo"})).await;
    assert_eq!(hits(&found)[0]["operation"], "set_photo");
    let photo = mcp_call(
        &client,
        "call_operation",
        json!({"operation": "set_photo", "arguments": {"petId": "7", "body": {"url": "u", "caption": "c"}}}),
    )
    .await;
    assert_ne!(photo.is_error, Some(true), "{}", text_of(&photo));
    assert_eq!(api.take().pop().unwrap().path, "/v1/pets/7/photo");
    client.cancel().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_descriptions_are_refused_before_anything_is_stored() {
    let api = PetsApi::start().await;
    let app = app_for(&[]).await;
    let spec = petstore(api.port);
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (json!({"openapi_spec": {"title": "x"}}), 422, "invalid_openapi", "neither an `openapi` nor a `swagger` field"),
        (json!({"openapi_spec": "openapi: [unclosed"}), 422, "invalid_openapi", "not valid JSON or YAML"),
        (json!({"openapi_spec": {"openapi": "3.0.0", "paths": {}}}), 422, "invalid_openapi", "no operations"),
        (json!({"openapi_spec": 5}), 400, "invalid_field", "a JSON object or as JSON/YAML text, not a number"),
        (
            json!({"openapi_spec": spec, "operations": {"include": ["tag:nothing"]}}),
            422,
            "invalid_openapi",
            "selects none",
        ),
        (json!({"openapi_spec": spec, "operations": {"only": []}}), 400, "invalid_field", "unknown field `only`"),
        (
            json!({"openapi_spec": {"openapi": "3.0.0", "servers": [{"url": "/v1"}], "paths": {"/a": {"get": {"responses": {}}}}}}),
            422,
            "invalid_openapi",
            "give \"base_url\"",
        ),
        (json!({"openapi_spec": spec, "base_url": "ftp://x"}), 400, "invalid_field", "absolute http(s) URL"),
        (json!({"openapi": "file:///etc/passwd"}), 400, "invalid_field", "http(s) URL"),
        (json!({"openapi": "https://a.test/x.json", "openapi_spec": spec}), 400, "ambiguous_registration", "not both"),
        (json!({"openapi_spec": spec, "tools": []}), 400, "ambiguous_registration", "not both"),
    ];
    for (body, status, code, message) in cases {
        let (got, response) = app.post("/admin/servers", &body).await;
        assert_eq!((got, response["error"]["code"].as_str()), (status, Some(code)), "{body}: {response}");
        assert!(error_message(&response).contains(message), "{body}: {response}");
    }
    let (_, servers) = app.get("/admin/servers").await;
    assert_eq!(servers["servers"], json!([]), "nothing was stored: {servers}");

    // A description URL that does not answer one fails the generation with the reason.
    let body = json!({"id": "gone", "openapi": format!("http://{PETS_HOST}:{}/missing.json", api.port)});
    let (status, _) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202);
    let view = wait_finished(&app, "gone").await;
    assert_eq!(view["status"], "failed");
    let error = view["latest_generation"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("fetching failed") && error.contains("not an OpenAPI or Swagger description"), "{error}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_llm_a_prompt_chooses_operations_of_a_linked_description_and_never_writes_requests() {
    use crate::scripted_llm::{Scripted, ScriptedLlm};
    let api = PetsApi::start().await;
    *api.spec_yaml.lock().unwrap() = swagger_yaml(api.port);
    let llm = ScriptedLlm::start().await;
    llm.push(Scripted::text(
        r#"{"operations": [{"operation": "GET /pets/findByStatus", "name": "find_pets", "description": "Finds pets by their status."},
                           {"operation": "GET /users"}]}"#,
    ));
    let mut env = llm.daemon_env(false);
    env.push((format!("MCPBOOTD_EGRESS__RESOLVE__{PETS_HOST}"), "127.0.0.1".to_string()));
    let app = spawn_app_with(AppOptions { env, ..Default::default() }).await;
    // A prompt that links the description: it is recognised by its content and derived from.
    let prompt = format!("Tools to look up pets by status and list users: http://{PETS_HOST}:{}/spec.yaml", api.port);
    let (status, _) = app.post("/admin/servers", &json!({"id": "chosen", "prompt": prompt})).await;
    assert_eq!(status, 202);
    let view = wait_finished(&app, "chosen").await;
    assert_eq!(view["status"], "ready", "{view:#}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "one request: the choice; no planning, no handler writing");
    let sent = requests[0].last_user_message();
    assert!(sent.contains("GET /pets/findByStatus | findByStatus | pet |"), "the index: {sent}");
    assert!(!sent.contains("collectionFormat"), "the index, not the description, goes to the LLM");
    let names: Vec<&str> = view["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["find_pets", "list_users"]);
    let find = &view["tools"][0];
    assert_eq!(find["description"], "Finds pets by their status.");
    assert_eq!(
        find["input_schema"]["properties"]["status"]["items"]["enum"],
        json!(["available", "sold"]),
        "schemas are derived"
    );
    assert!(find["handler"].as_str().unwrap().starts_with("const plan = "), "the handler is the executor");
    assert_eq!(view["generation"]["plan"]["openapi"]["flavour"], "swagger 2.0");
    assert!(view["generation"]["tokens"]["input"].as_u64().unwrap() > 0);
    api.take();
    let client = app.mcp("chosen").await;
    let result = mcp_call(&client, "find_pets", json!({"status": ["sold"]})).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(api.take().pop().unwrap().query.as_deref(), Some("status=sold"));
    client.cancel().await.unwrap();
    app.stop().await;
}

/// An API whose paths end in parameters, as GitHub's organisation membership does.
fn members_api(port: u16) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Orgs", "version": "1"},
        "servers": [{"url": format!("http://{PETS_HOST}:{port}/v1")}],
        "paths": {
            "/orgs/{org}/members/{username}": {
                "parameters": [
                    {"name": "org", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "username", "in": "path", "required": true, "schema": {"type": "string"}}
                ],
                "delete": {"operationId": "removeMember", "responses": {"204": {"description": "removed"}}}
            },
            "/items/{id}{suffix}": {
                "get": {
                    "operationId": "getItem",
                    "parameters": [
                        {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "suffix", "in": "path", "required": true, "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": "ok"}}
                }
            },
            "/labels/{tag}": {
                "get": {
                    "operationId": "getLabel",
                    "parameters": [{"name": "tag", "in": "path", "required": true, "style": "label", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "ok"}}
                }
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_parameters_that_would_move_the_request_to_another_path_are_refused() {
    let api = PetsApi::start().await;
    let app = app_for(&[]).await;
    let (status, started) =
        app.post("/admin/servers", &json!({"id": "orgs", "openapi_spec": members_api(api.port)})).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(wait_finished(&app, "orgs").await["status"], "ready");
    api.take();
    let client = app.mcp("orgs").await;

    // Each of these would send the DELETE (with the server's credentials) to another path:
    // URL normalisation drops `.` segments and climbs on `..` ones, in any encoding, and a
    // server that decodes `%2F` before normalising sees the segments inside a value.
    for username in ["..", ".", "%2E%2e", "%2e", ".%2E", "%252e%252E", "．．", "", "../../admin", "a/./b", "..\\x"] {
        let result = mcp_call(&client, "remove_member", json!({"org": "acme", "username": username})).await;
        assert_eq!(result.is_error, Some(true), "{username:?} was sent: {}", text_of(&result));
        let message = text_of(&result);
        assert!(message.contains("username") && message.contains("path segment"), "{username:?}: {message}");
        assert!(api.take().is_empty(), "{username:?} reached the API");
    }
    let result = mcp_call(&client, "remove_member", json!({"org": "..", "username": "octocat"})).await;
    assert!(text_of(&result).contains("org"), "{}", text_of(&result));
    assert!(api.take().is_empty(), "a dot segment in the middle of the path reached the API");
    // Two parameters in one segment are judged together; a label is judged with its prefix.
    let result = mcp_call(&client, "get_item", json!({"id": ".", "suffix": "."})).await;
    assert_eq!(result.is_error, Some(true), "{}", text_of(&result));
    let result = mcp_call(&client, "get_label", json!({"tag": "."})).await;
    assert_eq!(result.is_error, Some(true), "a label `.` prefix makes `..`: {}", text_of(&result));
    assert!(api.take().is_empty(), "a refused segment reached the API");

    // Dots inside a value, or next to other text, stay one ordinary segment.
    for (tool, arguments, path) in [
        ("remove_member", json!({"org": "acme", "username": "a..b"}), "/v1/orgs/acme/members/a..b"),
        ("remove_member", json!({"org": "acme", "username": "..."}), "/v1/orgs/acme/members/..."),
        ("get_item", json!({"id": ".", "suffix": ".json"}), "/v1/items/..json"),
        ("get_label", json!({"tag": "v1.2"}), "/v1/labels/.v1.2"),
    ] {
        let result = mcp_call(&client, tool, arguments.clone()).await;
        assert_ne!(result.is_error, Some(true), "{arguments}: {}", text_of(&result));
        assert_eq!(api.take().pop().map(|seen| seen.path), Some(path.to_string()), "{arguments}");
    }
    client.cancel().await.unwrap();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_description_is_refused_at_once_inline_and_by_url() {
    let api = PetsApi::start().await;
    let app = app_for(&[]).await;
    // 200,000 nested flow sequences (390 KiB): libyaml's time grows with the square of the
    // depth, so a parser would be busy for minutes before its own recursion limit stopped it.
    let deep = format!("openapi: 3.0.0\npaths: {}{}", "[".repeat(200_000), "]".repeat(200_000));
    let started = std::time::Instant::now();
    let response = app
        .http
        .post(app.url("/admin/servers"))
        .json(&json!({"id": "deep", "openapi_spec": deep}))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .expect("the daemon answers within 10 s");
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_openapi", "{body}");
    let message = error_message(&body);
    assert!(message.contains("more than 64 levels deep (line 2, column 71)"), "{message}");
    assert!(elapsed < std::time::Duration::from_secs(2), "refused after {elapsed:?}");

    // The same as JSON text, and a few kilobytes of YAML aliases that expand to millions of values.
    let json_text = format!("{{\"openapi\": \"3.0.0\", \"paths\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let items = vec!["1"; 3000].join(", ");
    let copies = vec!["*a"; 3000].join(", ");
    let aliases = format!("openapi: 3.0.0\nx: &a [{items}]\npaths: {{/a: {{get: {{responses: [{copies}]}}}}}}\n");
    for (text, expected) in [(json_text, "more than 64 levels deep"), (aliases, "YAML alias")] {
        let started = std::time::Instant::now();
        let (status, body) = app.post("/admin/servers", &json!({"id": "deep", "openapi_spec": text})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (422, Some("invalid_openapi")), "{body}");
        assert!(error_message(&body).contains(expected), "{body}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "refused after {:?}", started.elapsed());
    }
    let (_, servers) = app.get("/admin/servers").await;
    assert_eq!(servers["servers"], json!([]), "nothing was stored: {servers}");

    // Fetched by URL, the generation fails at once with the same reason.
    *api.spec_yaml.lock().unwrap() = deep;
    let body = json!({"id": "deep-url", "openapi": format!("http://{PETS_HOST}:{}/spec.yaml", api.port)});
    let started = std::time::Instant::now();
    let (status, _) = app.post("/admin/servers", &body).await;
    assert_eq!(status, 202);
    let view = wait_finished(&app, "deep-url").await;
    assert_eq!(view["status"], "failed");
    let error = view["latest_generation"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("fetching failed") && error.contains("more than 64 levels deep"), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "failed after {:?}", started.elapsed());
    app.stop().await;
}
