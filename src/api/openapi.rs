//! `GET /admin/openapi.json`: the OpenAPI 3.1 description of every HTTP route.
//!
//! Built from [`ROUTES`], the same list the tests compare with the router in `api.rs` (every
//! route there must be described here, and every path here must be served), so the description
//! cannot drift from the code without a test failing.

use axum::Json;
use serde_json::{Map, Value, json};

/// One documented operation.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// Name of the request body schema in `components.schemas`, if any.
    pub body: Option<&'static str>,
    /// Success status and the name of its schema (`None`: no body).
    pub success: (u16, Option<&'static str>),
    /// Error statuses this operation can answer with (all use the `Error` schema).
    pub errors: &'static [u16],
    /// Whether `Authorization: Bearer <admin token>` applies (when a token is configured).
    pub admin: bool,
}

pub const ROUTES: &[Route] = &[
    Route {
        method: "post",
        path: "/admin/servers",
        summary: "Register a server from a prompt (202, generated in the background) or a toolset (201, ready at once)",
        body: Some("Register"),
        success: (201, Some("Registered")),
        errors: &[400, 401, 403, 409, 413, 415, 422],
        admin: true,
    },
    Route {
        method: "get",
        path: "/admin/servers",
        summary: "List servers",
        body: None,
        success: (200, Some("ServerList")),
        errors: &[401, 403],
        admin: true,
    },
    Route {
        method: "get",
        path: "/admin/servers/{id}",
        summary: "Everything about a server: status, whitelist with provenance, tools with handlers, generations",
        body: None,
        success: (200, Some("Server")),
        errors: &[401, 403, 404],
        admin: true,
    },
    Route {
        method: "delete",
        path: "/admin/servers/{id}",
        summary: "Unmount and delete a server",
        body: None,
        success: (204, None),
        errors: &[401, 403, 404],
        admin: true,
    },
    Route {
        method: "post",
        path: "/admin/servers/{id}/regenerate",
        summary: "Start a new generation of a prompt server (force skips the cache)",
        body: Some("Regenerate"),
        success: (202, Some("Registered")),
        errors: &[400, 401, 403, 404, 409, 422],
        admin: true,
    },
    Route {
        method: "get",
        path: "/admin/servers/{id}/events",
        summary: "Generation progress as Server-Sent Events (`status` events, then `done`)",
        body: None,
        success: (200, None),
        errors: &[401, 403, 404],
        admin: true,
    },
    Route {
        method: "put",
        path: "/admin/servers/{id}/access-token",
        summary: "Set or rotate the bearer token MCP clients must present on this server's mount",
        body: Some("AccessToken"),
        success: (200, Some("AccessTokenSet")),
        errors: &[400, 401, 403, 404, 415, 422],
        admin: true,
    },
    Route {
        method: "delete",
        path: "/admin/servers/{id}/access-token",
        summary: "Remove the mount's access token",
        body: None,
        success: (204, None),
        errors: &[401, 403, 404],
        admin: true,
    },
    Route {
        method: "post",
        path: "/admin/servers/{id}/tools/{tool}/call",
        summary: "Run one tool through the same isolate path as MCP",
        body: Some("Call"),
        success: (200, Some("CallResult")),
        errors: &[400, 401, 403, 404, 415, 422, 503],
        admin: true,
    },
    Route {
        method: "get",
        path: "/admin/servers/{id}/calls",
        summary: "The call log, newest first, with egress records (query: limit 1-1000)",
        body: None,
        success: (200, Some("CallList")),
        errors: &[400, 401, 403, 404],
        admin: true,
    },
    Route {
        method: "get",
        path: "/admin/servers/{id}/export",
        summary: "The toolset as a body POST /admin/servers accepts again",
        body: None,
        success: (200, Some("Register")),
        errors: &[401, 403, 404, 409],
        admin: true,
    },
    Route {
        method: "get",
        path: "/admin/openapi.json",
        summary: "This document",
        body: None,
        success: (200, None),
        errors: &[401, 403],
        admin: true,
    },
    Route {
        method: "get",
        path: "/metrics",
        summary: "Prometheus metrics (text exposition format)",
        body: None,
        success: (200, None),
        errors: &[401, 403],
        admin: true,
    },
    Route {
        method: "get",
        path: "/healthz",
        summary: "Liveness",
        body: None,
        success: (200, None),
        errors: &[],
        admin: false,
    },
    Route {
        method: "get",
        path: "/readyz",
        summary: "Readiness: catalog open and every server mounted",
        body: None,
        success: (200, None),
        errors: &[503],
        admin: false,
    },
    Route {
        method: "post",
        path: "/servers/{id}/mcp",
        summary: "MCP Streamable HTTP endpoint of one server (JSON-RPC; stateless)",
        body: None,
        success: (200, None),
        errors: &[401, 403, 404, 503],
        admin: false,
    },
];

/// `GET /admin/openapi.json`
pub async fn openapi() -> Json<Value> {
    Json(document())
}

pub fn document() -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        let entry = paths.entry(route.path.to_string()).or_insert_with(|| json!({}));
        entry[route.method] = operation(route);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mcpbootd admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Register, inspect, call and delete hosted MCP servers. Errors are always {\"error\": {\"code\", \"message\"}}."
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer", "description": "[admin] token; required when configured"}},
            "schemas": schemas(),
        },
    })
}

fn operation(route: &Route) -> Value {
    let mut responses = Map::new();
    let (status, schema) = route.success;
    responses.insert(status.to_string(), match schema {
        Some(name) => json!({"description": "success", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}}),
        None => json!({"description": "success"}),
    });
    if route.path == "/admin/servers" {
        responses.insert("202".into(), json!({"description": "prompt accepted; generation runs in the background", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Registered"}}}}));
    }
    for status in route.errors {
        responses.insert(status.to_string(), json!({"description": error_description(*status), "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}));
    }
    let mut parameters = Vec::new();
    for name in ["id", "tool"] {
        if route.path.contains(&format!("{{{name}}}")) {
            parameters.push(json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}));
        }
    }
    if route.path.ends_with("/calls") {
        parameters.push(json!({"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}}));
    }
    let mut op = json!({
        "summary": route.summary,
        "operationId": operation_id(route),
        "parameters": parameters,
        "responses": responses,
    });
    if let Some(body) = route.body {
        op["requestBody"] = json!({"required": body != "Regenerate", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{body}")}}}});
    }
    if route.admin {
        op["security"] = json!([{"adminToken": []}]);
    }
    op
}

fn operation_id(route: &Route) -> String {
    let mut id = route.method.to_string();
    for part in route.path.split('/').filter(|p| !p.is_empty()) {
        let part = part.trim_matches(|c| c == '{' || c == '}').replace(['-', '.'], "_");
        id.push('_');
        id.push_str(&part);
    }
    id
}

fn error_description(status: u16) -> &'static str {
    match status {
        400 => "malformed request",
        401 => "missing token",
        403 => "wrong token, or Host not allowed",
        404 => "unknown server, tool or route",
        409 => "conflict (id taken, generation running, nothing to export)",
        413 => "body too large",
        415 => "body is not JSON",
        422 => "invalid content (tool definitions, handler that does not compile, arguments, no LLM configured)",
        503 => "not ready, or every isolate worker busy",
        _ => "error",
    }
}

fn schemas() -> Value {
    json!({
        "Error": {
            "type": "object", "required": ["error"],
            "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string", "description": "snake_case error code"},
                "message": {"type": "string", "description": "what went wrong and how to fix it"}
            }}}
        },
        "Tool": {
            "type": "object", "required": ["name", "description", "input_schema", "handler"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"},
                "description": {"type": "string"},
                "input_schema": {"type": "object", "description": "JSON Schema with \"type\": \"object\""},
                "handler": {"type": "string", "description": "body of async function (args, fetch)"},
                "annotations": {"type": "object", "properties": {
                    "title": {"type": "string"}, "readOnlyHint": {"type": "boolean"}, "destructiveHint": {"type": "boolean"},
                    "idempotentHint": {"type": "boolean"}, "openWorldHint": {"type": "boolean"}
                }, "additionalProperties": false}
            }
        },
        "Register": {
            "type": "object", "additionalProperties": false,
            "description": "Either prompt or tools.",
            "properties": {
                "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
                "name": {"type": "string"},
                "prompt": {"type": "string"},
                "tools": {"type": "array", "items": {"$ref": "#/components/schemas/Tool"}},
                "allow_domains": {"type": "array", "items": {"type": "string"}},
                "dry_run": {"type": "boolean"},
                "access_token": {"type": "string", "minLength": 16, "maxLength": 512}
            }
        },
        "Registered": {
            "type": "object", "required": ["id", "status", "mcp_path"],
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "status": {"type": "string"}, "mcp_path": {"type": "string"},
                "generation_id": {"type": "integer"}, "tools": {"type": "array", "items": {"type": "string"}}}
        },
        "Regenerate": {"type": "object", "additionalProperties": false, "properties": {"force": {"type": "boolean"}, "dry_run": {"type": "boolean"}}},
        "AccessToken": {"type": "object", "required": ["access_token"], "additionalProperties": false, "properties": {"access_token": {"type": "string", "minLength": 16, "maxLength": 512}}},
        "AccessTokenSet": {"type": "object", "properties": {"id": {"type": "string"}, "access_token_set": {"type": "boolean"}}},
        "Call": {"type": "object", "additionalProperties": false, "properties": {"arguments": {"type": "object"}}},
        "CallResult": {
            "type": "object", "required": ["execution_id", "outcome", "result"],
            "properties": {"execution_id": {"type": "string"}, "outcome": {"type": "string", "enum": ["ok", "error", "timeout", "limit"]},
                "result": {"type": "object", "description": "MCP CallToolResult: content, structuredContent, isError"}}
        },
        "ServerSummary": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "kind": {"type": "string"}, "status": {"type": "string"},
                "tool_count": {"type": "integer"}, "mcp_path": {"type": "string"}, "created_at": {"type": "string"}, "updated_at": {"type": "string"}}
        },
        "ServerList": {"type": "object", "properties": {"servers": {"type": "array", "items": {"$ref": "#/components/schemas/ServerSummary"}}}},
        "Server": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "kind": {"type": "string"}, "status": {"type": "string"},
                "serving": {"type": "boolean"}, "access_token_set": {"type": "boolean"}, "mcp_path": {"type": "string"},
                "prompt": {"type": ["string", "null"]}, "allow_domains": {"type": "array", "items": {"type": "string"}},
                "whitelist": {"type": "array"}, "tools": {"type": "array"}, "generation": {"type": ["object", "null"]},
                "latest_generation": {"type": ["object", "null"]}}
        },
        "CallList": {"type": "object", "properties": {"calls": {"type": "array", "items": {"type": "object"}}}},
    })
}
