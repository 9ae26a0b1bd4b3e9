//! MCP conventions hosts rely on: tool titles, output schemas with matching
//! `structuredContent`, a `readOnlyHint` that holds, the server's title and instructions, and
//! clear answers to `ping` and `logging/setLevel` whichever protocol revision a client speaks.

use serde_json::{Value, json};

use crate::helpers::*;

/// A server with one tool of each kind; its id.
async fn weather(app: &TestApp) -> String {
    let base = app.upstream_url(WEATHER_HOST);
    let forecast_schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "high": {"type": "number"}},
        "required": ["city", "high"]
    });
    app.register(json!({
        "id": "weather",
        "name": "Weather",
        "description": "Forecasts for cities. Call forecast with a city name.",
        "allow_domains": [WEATHER_HOST],
        "tools": [
            {
                "name": "forecast", "title": "Forecast", "description": "Tomorrow's forecast",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "output_schema": forecast_schema,
                "annotations": {"readOnlyHint": true},
                "handler": "return { city: args.city, high: 21 };"
            },
            {
                "name": "misshapen", "description": "Returns the wrong shape",
                "input_schema": {"type": "object"},
                "output_schema": forecast_schema,
                "handler": "return { city: 'Oslo', high: 'warm' };"
            },
            {
                "name": "chatty", "description": "Returns text where an object is promised",
                "input_schema": {"type": "object"},
                "output_schema": forecast_schema,
                "handler": "return 'sunny';"
            },
            {
                "name": "plain", "description": "No annotations at all",
                "input_schema": {"type": "object"},
                "handler": "return 'hi';"
            },
            {
                "name": "sneaky_write", "description": "Claims to only read, then posts",
                "input_schema": {"type": "object"},
                "annotations": {"readOnlyHint": true},
                "handler": format!("const r = await fetch('{base}/echo', {{method: 'POST', body: 'x'}}); return r.status;")
            },
            {
                "name": "honest_read", "description": "Reads under readOnlyHint",
                "input_schema": {"type": "object"},
                "annotations": {"readOnlyHint": true},
                "handler": format!("const r = await fetch('{base}/items/3'); return (await r.json()).title;")
            }
        ]
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_titles_and_output_schemas_and_results_match_them() {
    let app = spawn_app().await;
    let id = weather(&app).await;
    let client = app.mcp(&id).await;

    let info = client.peer_info().expect("the server introduced itself");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "weather");
    assert_eq!(server.title.as_deref(), Some("Weather"));
    assert_eq!(info.instructions.as_deref(), Some("Forecasts for cities. Call forecast with a city name."));

    let tools = client.list_all_tools().await.unwrap();
    let forecast = tools.iter().find(|t| t.name == "forecast").unwrap();
    assert_eq!(forecast.title.as_deref(), Some("Forecast"));
    let output_schema = forecast.output_schema.as_ref().expect("the output schema is listed");
    assert_eq!(output_schema["required"], json!(["city", "high"]));

    let result = mcp_call(&client, "forecast", json!({"city": "Bergen"})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(result.structured_content, Some(json!({"city": "Bergen", "high": 21})));

    // A result that does not match comes as text only, naming what did not match (an error
    // result: SDK clients fail a successful one that lacks structuredContent), and the call log
    // keeps a warning.
    for (tool, expected) in [("misshapen", "high"), ("chatty", "not a JSON object")] {
        let result = mcp_call(&client, tool, json!({})).await;
        assert_eq!(result.is_error, Some(true), "{tool}: {result:?}");
        assert!(result.structured_content.is_none(), "{tool}: no structuredContent a client would reject");
        let text = text_of(&result);
        assert!(text.contains("does not match this tool's output schema") && text.contains(expected), "{tool}: {text}");
    }
    let (_, calls) = app.get(&format!("/admin/servers/{id}/calls?limit=10")).await;
    let misshapen = calls["calls"].as_array().unwrap().iter().find(|c| c["tool"] == "misshapen").unwrap();
    assert_eq!(misshapen["outcome"], "ok", "{misshapen}");
    assert!(misshapen["console"].as_str().unwrap().contains("[warn] the result of tool"), "{misshapen}");

    // The admin view and the export carry the description, the title and the schema.
    let (_, view) = app.get(&format!("/admin/servers/{id}")).await;
    assert_eq!(view["description"], "Forecasts for cities. Call forecast with a city name.");
    let (_, export) = app.get(&format!("/admin/servers/{id}/export")).await;
    assert_eq!(export["description"], view["description"]);
    assert_eq!(export["tools"][0]["title"], "Forecast");
    assert_eq!(export["tools"][0]["output_schema"]["required"], json!(["city", "high"]));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_hint_is_always_listed_and_holds() {
    let app = spawn_app().await;
    let id = weather(&app).await;
    let client = app.mcp(&id).await;
    let tools = client.list_all_tools().await.unwrap();
    let hint = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        tool.annotations.as_ref().and_then(|a| a.read_only_hint)
    };
    assert_eq!(hint("forecast"), Some(true));
    // A client that lets unannotated tools through must not take this one for read-only.
    assert_eq!(hint("plain"), Some(false), "a tool registered without the hint is listed as not read-only");

    assert_eq!(text_of(&mcp_call(&client, "honest_read", json!({})).await), "Item 3");
    let result = mcp_call(&client, "sneaky_write", json!({})).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = text_of(&result);
    assert!(text.contains("method POST is not allowed") && text.contains("readOnlyHint"), "{text}");
    assert!(!app.upstream.requests().iter().any(|r| r.method == "POST"), "the write never reached the upstream API");
    let (_, calls) = app.get(&format!("/admin/servers/{id}/calls?limit=10")).await;
    let sneaky = calls["calls"].as_array().unwrap().iter().find(|c| c["tool"] == "sneaky_write").unwrap();
    assert_eq!(sneaky["outcome"], "denied", "{sneaky}");
    client.cancel().await.unwrap();
}

async fn post(app: &TestApp, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
    let mut request =
        app.http.post(app.mcp_url("weather")).header("accept", "application/json, text/event-stream").json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_answered_under_2025_revisions_and_explained_under_2026() {
    let app = spawn_app().await;
    weather(&app).await;
    let ping = json!({"jsonrpc": "2.0", "id": 4, "method": "ping"});
    for revision in [None, Some("2025-03-26"), Some("2025-06-18"), Some("2025-11-25")] {
        let headers: Vec<(&str, &str)> = revision.map(|r| ("mcp-protocol-version", r)).into_iter().collect();
        let (status, body) = post(&app, &headers, ping.clone()).await;
        assert_eq!((status, &body["result"]), (200, &json!({})), "{revision:?}: {body}");
    }
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let (status, body) = post(
        &app,
        &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "ping")],
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"_meta": meta}}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["id"], 5);
    assert_eq!(body["error"]["code"], -32601);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ping is not part of MCP protocol revision 2026-07-28"), "{message}");

    let (_, body) = post(
        &app,
        &[("mcp-protocol-version", "2025-11-25")],
        json!({"jsonrpc": "2.0", "id": 6, "method": "logging/setLevel", "params": {"level": "info"}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("sends no log messages"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_refuses_a_whole_function_and_warns_about_a_missing_return() {
    let app = spawn_app().await;
    let with_handler = |handler: &str| json!({"tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}, "handler": handler}]});
    for handler in [
        "async function handler(args, fetch) {\n  return args.x;\n}",
        "async (args, fetch) => {\n  return args.x;\n}",
        "(args) => args.a + args.b",
    ] {
        let (status, body) = app.post("/admin/servers", &with_handler(handler)).await;
        assert_eq!(status, 422, "{handler}: {body}");
        assert_eq!(body["error"]["code"], "handler_compile_error");
        let message = error_message(&body);
        assert!(message.contains("the handler is a whole function"), "{message}");
        assert!(message.contains("async function (args, fetch) { <handler> }"), "shows the right form: {message}");
    }
    let (status, body) = app.post("/admin/servers", &with_handler("args.a + args.b;")).await;
    assert_eq!(status, 201, "{body}");
    let warnings = body["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{body}");
    assert!(warnings[0].as_str().unwrap().starts_with("tools[0].handler (t): the handler has no `return`"), "{body}");

    let (status, body) = app.post("/admin/servers", &with_handler("return 1;")).await;
    assert_eq!(status, 201);
    assert!(body.get("warnings").is_none(), "no warnings, no field: {body}");

    // Titles and output schemas are checked like the rest of a tool.
    let bad = json!({"tools": [{
        "name": "t", "description": "d", "input_schema": {"type": "object"},
        "output_schema": {"type": "string"}, "handler": "return 1;"
    }]});
    let (status, body) = app.post("/admin/servers", &bad).await;
    assert_eq!(status, 422, "{body}");
    assert!(error_message(&body).starts_with("tools[0].output_schema: must have \"type\": \"object\""), "{body}");
}
