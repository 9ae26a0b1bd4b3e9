//! Attempts to get out of the isolate or past its limits, one handler per attempt.

use serde_json::{Value, json};

use crate::helpers::*;

/// Names a handler may find on `globalThis` beyond the ECMAScript built-ins.
const WEB_GLOBALS: &[&str] = &[
    "fetch",
    "Headers",
    "Response",
    "URL",
    "URLSearchParams",
    "TextEncoder",
    "TextDecoder",
    "atob",
    "btoa",
    "console",
    "structuredClone",
    "setTimeout",
    "clearTimeout",
    "DOMException",
    // The daemon's own: a value encoded as one URL path segment, refused if it would change the path.
    "pathSegment",
];

const ECMASCRIPT_GLOBALS: &[&str] = &[
    "Object",
    "Function",
    "Array",
    "Number",
    "parseFloat",
    "parseInt",
    "Infinity",
    "NaN",
    "undefined",
    "Boolean",
    "String",
    "Symbol",
    "Date",
    "Promise",
    "RegExp",
    "Error",
    "AggregateError",
    "EvalError",
    "RangeError",
    "ReferenceError",
    "SyntaxError",
    "TypeError",
    "URIError",
    "InternalError",
    "globalThis",
    "JSON",
    "Math",
    "Reflect",
    "BigInt",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "FinalizationRegistry",
    "Proxy",
    "ArrayBuffer",
    "SharedArrayBuffer",
    "DataView",
    "Atomics",
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "BigInt64Array",
    "BigUint64Array",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "eval",
    "isFinite",
    "isNaN",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "unescape",
    "Iterator",
    "Intl",
    "Temporal",
    "SuppressedError",
    "DisposableStack",
    "AsyncDisposableStack",
    "AsyncIterator",
    "TypedArray",
    "ShadowRealm",
];

async fn escape_app() -> TestApp {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SANDBOX__MAX_CONSOLE_BYTES".into(), "4096".into()),
            // Generous wall time: the CPU limit (500 ms of CPU time) must end the spinning
            // cases first even on a heavily loaded machine.
            ("MCPBOOTD_SANDBOX__TIMEOUT_MS".into(), "10000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let tools: Vec<Value> = ATTEMPTS.iter().map(|(name, handler, _)| tool(name, handler)).collect();
    app.register(json!({"id": "escape", "tools": tools})).await;
    app.register(json!({"id": "victim", "tools": [tool("check", CHECK_CLEAN)]})).await;
    app
}

/// Reports whether the built-ins look untouched.
const CHECK_CLEAN: &str = "return { polluted: ({}).polluted === undefined ? 'no' : 'yes', \
    map: [1, 2].map(x => x * 2).join(','), parse: JSON.parse('{\"a\":1}').a, stash: typeof globalThis.stash };";

/// (tool name, handler, what must happen)
const ATTEMPTS: &[(&str, &str, Expected)] = &[
    // `require(` and `import` are refused at registration; these reach them indirectly at run time.
    ("use_require", "return globalThis['req' + 'uire']('fs').readFileSync('/etc/passwd', 'utf8');", Expected::ErrorAny),
    ("dynamic_import", "const m = await eval('imp' + 'ort(\"os\")'); return typeof m;", Expected::ErrorAny),
    (
        "std_module",
        "const m = await eval('imp' + 'ort(\"std\")'); return m.loadFile('/etc/passwd');",
        Expected::ErrorAny,
    ),
    ("process_env", "return process.env;", Expected::ErrorMentions("process")),
    ("deno", "return Deno.readTextFileSync('/etc/passwd');", Expected::ErrorMentions("Deno")),
    (
        "globals_probe",
        "return { process: typeof process, Deno: typeof Deno, require: typeof require, std: typeof std, os: typeof os, scriptArgs: typeof scriptArgs, print: typeof print, loadFile: typeof loadFile };",
        Expected::Value(
            r#"{"process":"undefined","Deno":"undefined","require":"undefined","std":"undefined","os":"undefined","scriptArgs":"undefined","print":"undefined","loadFile":"undefined"}"#,
        ),
    ),
    (
        "function_constructor_global",
        "const g = Function('return this')(); return { process: typeof g.process, same: g === globalThis };",
        Expected::Value(r#"{"process":"undefined","same":true}"#),
    ),
    (
        "pollute_prototypes",
        "Object.prototype.polluted = 1; Array.prototype.map = () => 'evil'; JSON.parse = () => 'evil'; globalThis.stash = 'secret'; return 'polluted';",
        Expected::Value(r#""polluted""#),
    ),
    (
        "catch_oom_and_continue",
        "try { const a = []; while (true) a.push(new Array(10000).fill(a.length)); } catch (e) {} return 'survived';",
        Expected::Limit("memory"),
    ),
    (
        "catch_stack_overflow_and_continue",
        "function f() { return f() + 1; } let n = 0; for (;;) { try { f(); } catch (e) { n++; } if (n > 100) return 'survived ' + n; }",
        Expected::Limit("stack"),
    ),
    (
        "catch_interrupt",
        "for (let i = 0; i < 1000; i++) { try { while (true) {} } catch (e) {} } return 'survived';",
        Expected::Limit("cpu"),
    ),
    ("catastrophic_regex", "return /^(a+)+$/.test('a'.repeat(40) + '!');", Expected::Limit("cpu")),
    ("spin_after_many_awaits", "for (let i = 0; i < 100; i++) await null; while (true) {}", Expected::Limit("cpu")),
    ("never_resolves", "await new Promise(() => {});", Expected::Timeout),
    (
        "timer_chain",
        "await new Promise(() => { const tick = () => setTimeout(tick, 1); tick(); });",
        Expected::TimeoutOrLimit,
    ),
    ("huge_string", "return 'x'.repeat(2 ** 29).length;", Expected::Limit("memory")),
    (
        "console_flood",
        "for (let i = 0; i < 200000; i++) console.log('flood ' + i); return 'flooded';",
        Expected::Value(r#""flooded""#),
    ),
    ("cyclic_result", "const a = {}; a.self = a; return a;", Expected::ErrorAny),
    ("throwing_getter_result", "return { get boom() { throw new Error('getter'); } };", Expected::ErrorAny),
    ("throwing_tojson_result", "return { toJSON() { throw new Error('toJSON'); } };", Expected::ErrorAny),
    ("bigint_result", "return 10n;", Expected::ErrorAny),
    ("symbol_result", "return Symbol('s');", Expected::Completed),
    ("throw_non_error", "throw { not: 'an error' };", Expected::ErrorAny),
    ("throw_null", "throw null;", Expected::ErrorAny),
    ("redefine_fetch_global", "globalThis.fetch = () => 'hijacked'; return typeof fetch;", Expected::Completed),
];

#[derive(Debug, Clone, Copy)]
enum Expected {
    /// A normal result whose JSON text is this.
    Value(&'static str),
    /// Any non-error result.
    Completed,
    /// An `isError` result (handler error) mentioning this.
    ErrorMentions(&'static str),
    /// Any `isError` result with outcome `error`.
    ErrorAny,
    /// Outcome `limit`, message naming the limit.
    Limit(&'static str),
    Timeout,
    TimeoutOrLimit,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_escape_attempt_fails_and_leaves_nothing_behind() {
    let app = escape_app().await;
    let mut failures = Vec::new();
    for (name, _, expected) in ATTEMPTS {
        let (status, body) = app.admin_call("escape", name, json!({})).await;
        let outcome = body["outcome"].as_str().unwrap_or("?").to_string();
        let result = &body["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or("").to_string();
        let is_error = result["isError"] == true;
        let ok = status == 200
            && match expected {
                Expected::Value(json_text) => {
                    let got = serde_json::from_str::<Value>(&text).unwrap_or_else(|_| Value::String(text.clone()));
                    !is_error && serde_json::from_str::<Value>(json_text).ok() == Some(got)
                }
                Expected::Completed => !is_error && outcome == "ok",
                Expected::ErrorMentions(needle) => is_error && outcome == "error" && text.contains(needle),
                Expected::ErrorAny => is_error && outcome == "error",
                Expected::Limit(limit) => is_error && outcome == "limit" && text.to_lowercase().contains(limit),
                Expected::Timeout => is_error && outcome == "timeout",
                Expected::TimeoutOrLimit => is_error && (outcome == "timeout" || outcome == "limit"),
            };
        println!("{name:<36} -> {outcome:<8} {}", text.chars().take(100).collect::<String>().replace('\n', " "));
        if !ok {
            failures.push(format!("{name}: expected {expected:?}, got {status} {body}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Prototype pollution in one call is invisible to the next call of the same server and to other servers.
    for (server, tool_name) in [("escape", None), ("victim", Some("check"))] {
        let probe = match tool_name {
            Some(t) => app.admin_call(server, t, json!({})).await,
            None => {
                let (_, _) = app.admin_call("escape", "pollute_prototypes", json!({})).await;
                app.admin_call("victim", "check", json!({})).await
            }
        };
        assert_eq!(
            probe.1["result"]["structuredContent"],
            json!({"polluted": "no", "map": "2,4", "parse": 1, "stash": "undefined"}),
            "{server}: {}",
            probe.1
        );
    }

    // The console flood was capped, not stored in full.
    let (_, calls) = app.get("/admin/servers/escape/calls?limit=100").await;
    let flood = calls["calls"].as_array().unwrap().iter().find(|c| c["tool"] == "console_flood").unwrap();
    let console = flood["console"].as_str().unwrap();
    assert!(console.len() <= 4096 + 256, "console output kept: {} bytes", console.len());
    assert!(console.contains("flood 0"));
    // The daemon is healthy after all of it.
    assert_eq!(app.get("/healthz").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_loading_is_refused_at_registration() {
    let app = spawn_app().await;
    for handler in [
        "const fs = require('fs'); return 1;",
        "const m = await import('os'); return m;",
        "import fs from 'fs'; return 1;",
    ] {
        let (status, body) = app.post("/admin/servers", &json!({"tools": [tool("t", handler)]})).await;
        assert_eq!(status, 422, "{handler}: {body}");
        let message = error_message(&body);
        assert!(message.contains("require") || message.contains("import"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn globals_are_exactly_the_documented_set() {
    let app = spawn_app().await;
    app.register(
        json!({"id": "globals", "tools": [tool("names", "return Object.getOwnPropertyNames(globalThis).sort();")]}),
    )
    .await;
    let (_, body) = app.admin_call("globals", "names", json!({})).await;
    let names: Vec<String> = serde_json::from_str(body["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let unexpected: Vec<&String> = names
        .iter()
        .filter(|n| !WEB_GLOBALS.contains(&n.as_str()) && !ECMASCRIPT_GLOBALS.contains(&n.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "globals beyond the documented set: {unexpected:?}");
    for name in WEB_GLOBALS {
        assert!(names.iter().any(|n| n == name), "{name} missing");
    }
}
