//! Register a toolset, list it over MCP, call its tools.

use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_list_and_call_a_tool_that_reshapes_upstream_json() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    let id = app
        .register(json!({
            "id": "items",
            "name": "Items API",
            "allow_domains": [WEATHER_HOST],
            "tools": [{
                "name": "get_item",
                "description": "Fetch one item and keep the interesting fields",
                "input_schema": {
                    "type": "object",
                    "properties": {"id": {"type": "integer", "minimum": 1}},
                    "required": ["id"]
                },
                "annotations": {"readOnlyHint": true, "openWorldHint": true},
                "handler": format!(
                    "const res = await fetch(`{base}/items/${{args.id}}`);\n\
                     if (!res.ok) throw new Error('upstream said ' + res.status);\n\
                     const item = await res.json();\n\
                     return {{ id: item.id, title: item.title, author: item.by, replies: item.kids.length }};"
                ),
            }],
        }))
        .await;
    assert_eq!(id, "items");

    let client = app.mcp("items").await;
    let tools = client.list_tools(None).await.unwrap().tools;
    assert_eq!(tools.len(), 1);
    let listed = serde_json::to_value(&tools[0]).unwrap();
    assert_eq!(listed["name"], "get_item");
    assert_eq!(listed["description"], "Fetch one item and keep the interesting fields");
    assert_eq!(listed["inputSchema"]["required"], json!(["id"]));
    assert_eq!(listed["annotations"]["readOnlyHint"], true);
    assert!(listed.get("handler").is_none(), "handler source must never be exposed over MCP");
    assert!(!listed.to_string().contains("fetch("), "handler source must never be exposed over MCP");

    let result = mcp_call(&client, "get_item", json!({"id": 7})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let structured = result.structured_content.clone().expect("object results carry structuredContent");
    assert_eq!(structured, json!({"id": 7, "title": "Item 7", "author": "alice", "replies": 2}));
    let text: serde_json::Value = serde_json::from_str(&text_of(&result)).unwrap();
    assert_eq!(text, structured, "the text item is the same JSON, pretty-printed");

    let seen = app.upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/items/7");
    assert!(seen[0].host.starts_with(WEATHER_HOST), "sent with the whitelisted host name: {}", seen[0].host);

    // The same tool through the admin door, and the call log sees both calls with their egress rows.
    let (status, body) = app.admin_call("items", "get_item", json!({"id": 3})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["execution_id"].as_str().unwrap().len() >= 32);
    assert_eq!(body["outcome"], "ok");
    assert_eq!(body["result"]["structuredContent"]["title"], "Item 3");

    let (status, calls) = app.get("/admin/servers/items/calls").await;
    assert_eq!(status, 200);
    let calls = calls["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["execution_id"], body["execution_id"], "newest first");
    assert_eq!(calls[0]["via"], "admin");
    assert_eq!(calls[1]["via"], "mcp");
    assert_eq!(calls[0]["outcome"], "ok");
    assert_eq!(calls[0]["fetches"], 1);
    assert_eq!(calls[0]["egress"][0]["host"], WEATHER_HOST);
    assert_eq!(calls[0]["egress"][0]["path"], "/items/3");
    assert_eq!(calls[0]["egress"][0]["status"], 200);
    assert_eq!(calls[0]["egress"][0]["allowed"], true);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_with_headers_and_json_body_reaches_upstream_intact() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "poster",
        "allow_domains": [WEATHER_HOST],
        "tools": [{
            "name": "create",
            "description": "POST a JSON document",
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
            "handler": format!(
                "const res = await fetch('{base}/echo', {{ method: 'POST', \
                   headers: {{ 'Content-Type': 'application/json', 'X-Api-Key': 'k-123' }}, \
                   body: JSON.stringify({{ title: args.title }}) }});\n\
                 return await res.json();"
            ),
        }, {
            "name": "form",
            "description": "POST a form",
            "input_schema": {"type": "object"},
            "handler": format!(
                "const res = await fetch('{base}/echo', {{ method: 'PUT', body: new URLSearchParams({{ a: '1 2', b: 'x&y' }}) }});\n\
                 return await res.json();"
            ),
        }],
    }))
    .await;
    let client = app.mcp("poster").await;
    let result = mcp_call(&client, "create", json!({"title": "hello"})).await;
    let echoed = result.structured_content.clone().unwrap_or_else(|| panic!("{result:?}"));
    assert_eq!(echoed["method"], "POST");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(echoed["body"].as_str().unwrap()).unwrap(),
        json!({"title": "hello"})
    );
    let seen = app.upstream.requests();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].headers["x-api-key"], "k-123");
    assert_eq!(seen[0].headers["content-type"], "application/json");
    assert_eq!(seen[0].body, r#"{"title":"hello"}"#);

    let result = mcp_call(&client, "form", json!({})).await;
    let echoed = result.structured_content.clone().unwrap_or_else(|| panic!("{result:?}"));
    assert_eq!(echoed["method"], "PUT");
    assert_eq!(echoed["body"], "a=1+2&b=x%26y");
    assert!(echoed["headers"]["content-type"].as_str().unwrap().starts_with("application/x-www-form-urlencoded"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_normalised_and_arguments_are_validated() {
    let app = spawn_app().await;
    app.register(json!({
        "id": "shapes",
        "tools": [
            tool("text", "return 'plain ' + 'text';"),
            tool("mcp_shape", "return { content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] };"),
            tool("array", "return [1, 2, 3];"),
            tool("thrower", "const x = 1;\nthrow new Error('bad thing ' + x);"),
            tool("logger", "console.log('hello', { a: 1 }); console.error('oops'); return 'ok';"),
            {
                "name": "typed",
                "description": "needs a number",
                "input_schema": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"], "additionalProperties": false},
                "handler": "return args.n * 2;"
            },
        ],
    }))
    .await;
    let client = app.mcp("shapes").await;

    let result = mcp_call(&client, "text", json!({})).await;
    assert_eq!(text_of(&result), "plain text");
    assert!(result.structured_content.is_none());

    let result = serde_json::to_value(mcp_call(&client, "mcp_shape", json!({})).await).unwrap();
    assert_eq!(result["content"], json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]));

    let result = mcp_call(&client, "array", json!({})).await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text_of(&result)).unwrap(), json!([1, 2, 3]));
    assert!(result.structured_content.is_none(), "structuredContent is only for objects");

    let result = mcp_call(&client, "thrower", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    let message = text_of(&result);
    assert!(message.contains("bad thing 1") && message.contains("line 2"), "{message}");

    let result = mcp_call(&client, "typed", json!({"n": "three"})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(text_of(&result).contains("n"), "names the field: {}", text_of(&result));
    let result = mcp_call(&client, "typed", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(text_of(&result).contains("\"n\""), "names the missing field: {}", text_of(&result));
    let result = mcp_call(&client, "typed", json!({"n": 4})).await;
    assert_eq!(text_of(&result), "8");

    let (status, body) = app.admin_call("shapes", "typed", json!({"n": "x"})).await;
    assert_eq!(status, 422);
    assert!(error_message(&body).contains("n"), "{body}");

    mcp_call(&client, "logger", json!({})).await;
    let (_, calls) = app.get("/admin/servers/shapes/calls?limit=1").await;
    let console = calls["calls"][0]["console"].as_str().unwrap();
    assert!(console.contains("hello") && console.contains("oops"), "{console}");

    // An unknown tool is a protocol error, not a tool result.
    let mut params = rmcp::model::CallToolRequestParams::new("nope");
    params = params.with_arguments(serde_json::Map::new());
    assert!(client.call_tool(params).await.is_err());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_round_trips_through_registration() {
    let app = spawn_app().await;
    app.register(json!({
        "id": "orig",
        "name": "Original",
        "allow_domains": [WEATHER_HOST],
        "tools": [tool("one", "return 1;"), tool("two", "return 2;")],
    }))
    .await;
    let (status, mut exported) = app.get("/admin/servers/orig/export").await;
    assert_eq!(status, 200);
    assert_eq!(exported["tools"].as_array().unwrap().len(), 2);
    exported["id"] = json!("copy");
    let copy = app.register(exported).await;
    let (_, view) = app.get(&format!("/admin/servers/{copy}")).await;
    assert_eq!(view["tools"][1]["handler"], "return 2;");
    assert_eq!(view["whitelist"][0]["domain"], WEATHER_HOST);
    assert_eq!(view["whitelist"][0]["source"], "operator");
    assert_eq!(view["status"], "ready");
    assert_eq!(view["mcp_path"], "/servers/copy/mcp");

    let (status, list) = app.get("/admin/servers").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["servers"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["orig", "copy"]);
    assert_eq!(list["servers"][0]["tool_count"], 2);
}

/// Registrations that arrive together are written together; each is still all-or-nothing, and
/// an id taken within the same batch is a conflict like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_each_get_their_own_answer() {
    let app = spawn_app().await;
    let register = |id: String, reply: &'static str| {
        let request = app
            .http
            .post(app.url("/admin/servers"))
            .json(&json!({"id": id, "tools": [tool("hi", &format!("return '{reply}';"))]}));
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap())
        })
    };
    let distinct: Vec<_> = (0..16).map(|i| register(format!("batch-{i}"), "distinct")).collect();
    let same: Vec<_> = (0..8).map(|_| register("contested".into(), "contested")).collect();
    for request in distinct {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 201, "{body}");
    }
    let mut statuses = Vec::new();
    for request in same {
        let (status, body) = request.await.unwrap();
        if status == 409 {
            assert_eq!(body["error"]["code"], "server_exists", "{body}");
        }
        statuses.push(status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409, 409, 409, 409, 409, 409, 409]);

    let (_, listed) = app.get("/admin/servers").await;
    assert_eq!(listed["servers"].as_array().unwrap().len(), 17);
    for i in [0, 15] {
        let (status, body) = app.admin_call(&format!("batch-{i}"), "hi", json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["content"][0]["text"], "distinct");
    }
    let (_, contested) = app.get("/admin/servers/contested").await;
    assert_eq!(contested["tools"].as_array().unwrap().len(), 1, "{contested}");
}
