//! The egress policy under attack: one row per attempt, run through the real fetch path.
//!
//! Two daemons stand in for the two network postures: `Open` allows private networks (so the
//! loopback upstream, mapped under real-looking names, plays "the internet"), `Strict` does not
//! (so the same loopback addresses play "internal" hosts that must stay unreachable).

use serde_json::{Value, json};

use crate::helpers::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Posture {
    Open,
    Strict,
}

#[derive(Debug)]
enum Expect {
    /// The request went out and the upstream answered with this status.
    Status(u16),
    /// The fetch threw a policy TypeError.
    Denied,
    /// The fetch threw the generic network error.
    NetworkError,
    /// The fetch threw an error containing this text.
    ErrorContaining(&'static str),
    /// The call ended at a sandbox limit whose message contains this text.
    CallLimit(&'static str),
    /// The upstream echo received these headers and not those.
    EchoHeaders { present: &'static [&'static str], absent: &'static [&'static str], method: &'static str },
}

struct Row {
    name: &'static str,
    posture: Posture,
    url: String,
    init: Value,
    expect: Expect,
}

const PROBE: &str = r#"
try {
  const r = await fetch(args.url, args.init || {});
  const text = await r.text();
  return { status: r.status, redirected: r.redirected, url: r.url, body: text.slice(0, 4000) };
} catch (e) {
  return { error: String(e && e.name) + ': ' + String(e && e.message) };
}"#;

fn row(name: &'static str, posture: Posture, url: impl Into<String>, init: Value, expect: Expect) -> Row {
    Row { name, posture, url: url.into(), init, expect }
}

fn rows(port: u16) -> Vec<Row> {
    use Expect::*;
    use Posture::*;
    let w = |path: &str| format!("http://api.weather.test:{port}{path}");
    let none = json!({});
    vec![
        // Host matching.
        row("whitelisted host", Open, w("/items/1"), none.clone(), Status(200)),
        row(
            "uppercase and trailing dot",
            Open,
            format!("http://API.Weather.TEST.:{port}/items/1"),
            none.clone(),
            Status(200),
        ),
        row(
            "subdomain of a whitelisted domain",
            Open,
            format!("http://v1.api.weather.test:{port}/items/1"),
            none.clone(),
            Status(200),
        ),
        row(
            "full-width dots that canonicalise to the allowed name",
            Open,
            format!("http://api\u{ff0e}weather\u{ff0e}test:{port}/items/1"),
            none.clone(),
            Status(200),
        ),
        row(
            "parent of a whitelisted domain",
            Open,
            format!("http://weather.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        row(
            "look-alike without a dot boundary",
            Open,
            format!("http://evilapi.weather.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        row(
            "whitelisted name as a prefix of another domain",
            Open,
            format!("http://api.weather.test.evil.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        row(
            "percent-encoded dot",
            Open,
            format!("http://api.weather.test%2eevil.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        // Dot segments a handler wrote into a path (an argument like ".." in a template): URL
        // parsing would resolve them and send the request, with the server's credentials, to
        // another resource, so they are refused in every spelling the parser resolves.
        row(
            "dot-dot segment climbs the path",
            Open,
            w("/items/1/../../admin"),
            none.clone(),
            ErrorContaining("\"..\" segment"),
        ),
        row("dot segment at the end", Open, w("/items/1/."), none.clone(), Denied),
        row("percent-encoded dot-dot, mixed case", Open, w("/items/%2E%2e/1"), none.clone(), Denied),
        row("double-encoded dot-dot", Open, w("/items/%252e%252E/1"), none.clone(), Denied),
        row("dot-dot split by a tab the parser drops", Open, w("/items/.\t./1"), none.clone(), Denied),
        row("dot-dot after a backslash separator", Open, w("/items\\..\\1"), none.clone(), Denied),
        row(
            "dots inside a segment and in the query are plain text",
            Open,
            w("/items/1?q=../..&v=1.2.."),
            none.clone(),
            Status(200),
        ),
        row(
            "full-width dot before an evil suffix",
            Open,
            format!("http://api.weather.test\u{ff0e}evil.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        row(
            "homograph (Cyrillic a)",
            Open,
            format!("http://\u{0430}pi.weather.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        row("host not on the whitelist", Open, format!("http://api.other.test:{port}/items/1"), none.clone(), Denied),
        row(
            "backslash is a path separator, not a host trick",
            Open,
            format!("http://api.weather.test:{port}\\@api.other.test/"),
            none.clone(),
            Status(404),
        ),
        // URL shape.
        row("userinfo", Open, format!("http://user:pw@api.weather.test:{port}/items/1"), none.clone(), Denied),
        row(
            "whitelisted name as userinfo",
            Open,
            format!("http://api.weather.test@api.other.test:{port}/items/1"),
            none.clone(),
            Denied,
        ),
        row("ftp scheme", Open, "ftp://api.weather.test/file", none.clone(), Denied),
        row("file scheme", Open, "file:///etc/passwd", none.clone(), Denied),
        row("data URL", Open, "data:text/plain,hello", none.clone(), Denied),
        row("port 0", Open, "http://api.weather.test:0/items/1", none.clone(), Denied),
        row("relative URL", Open, "/items/1", none.clone(), ErrorContaining("not an absolute")),
        row(
            "URL longer than the cap",
            Open,
            format!("{}?q={}", w("/items/1"), "a".repeat(20_000)),
            none.clone(),
            ErrorContaining("longer than"),
        ),
        // IP literals, in every spelling.
        row("IPv4 literal not whitelisted", Open, format!("http://127.0.0.1:{port}/items/1"), none.clone(), Denied),
        row("decimal IPv4", Open, format!("http://2130706433:{port}/items/1"), none.clone(), Denied),
        row("octal IPv4", Open, format!("http://0177.0.0.1:{port}/items/1"), none.clone(), Denied),
        row("hex IPv4", Open, format!("http://0x7f.0.0.1:{port}/items/1"), none.clone(), Denied),
        row("short IPv4", Open, format!("http://127.1:{port}/items/1"), none.clone(), Denied),
        row("IPv6 loopback", Open, format!("http://[::1]:{port}/items/1"), none.clone(), Denied),
        row("IPv4-mapped IPv6", Open, format!("http://[::ffff:127.0.0.1]:{port}/items/1"), none.clone(), Denied),
        row("IPv4-mapped IPv6, hex form", Open, format!("http://[::ffff:7f00:1]:{port}/items/1"), none.clone(), Denied),
        // Methods and headers.
        row("CONNECT", Open, w("/echo"), json!({"method": "CONNECT"}), Denied),
        row("TRACE", Open, w("/echo"), json!({"method": "TRACE"}), Denied),
        row("lowercase trace", Open, w("/echo"), json!({"method": "trace"}), Denied),
        row("Host header override", Open, w("/echo"), json!({"headers": {"Host": "api.other.test"}}), Denied),
        row(
            "Transfer-Encoding header",
            Open,
            w("/echo"),
            json!({"method": "POST", "body": "x", "headers": {"Transfer-Encoding": "chunked"}}),
            Denied,
        ),
        row(
            "Content-Length header",
            Open,
            w("/echo"),
            json!({"method": "POST", "body": "x", "headers": {"Content-Length": "100"}}),
            Denied,
        ),
        row("Connection header", Open, w("/echo"), json!({"headers": {"Connection": "upgrade"}}), Denied),
        row("Upgrade header", Open, w("/echo"), json!({"headers": {"Upgrade": "websocket"}}), Denied),
        row("TE header", Open, w("/echo"), json!({"headers": {"TE": "trailers"}}), Denied),
        row("Keep-Alive header", Open, w("/echo"), json!({"headers": {"Keep-Alive": "timeout=5"}}), Denied),
        row("Trailer header", Open, w("/echo"), json!({"headers": {"Trailer": "X"}}), Denied),
        row(
            "Expect header",
            Open,
            w("/echo"),
            json!({"method": "POST", "body": "x", "headers": {"Expect": "100-continue"}}),
            Denied,
        ),
        row(
            "Proxy-Authorization header",
            Open,
            w("/echo"),
            json!({"headers": {"Proxy-Authorization": "Basic eA=="}}),
            Denied,
        ),
        row(
            "header value with CRLF injection",
            Open,
            w("/echo"),
            json!({"headers": {"X-Test": "a\r\nHost: evil"}}),
            ErrorContaining("Error"),
        ),
        row(
            "ordinary headers pass",
            Open,
            w("/echo"),
            json!({"headers": {"Authorization": "Bearer t", "X-Custom": "1"}}),
            EchoHeaders { present: &["authorization", "x-custom", "user-agent"], absent: &[], method: "GET" },
        ),
        // Redirects.
        row("same-host redirect", Open, w("/redirect?to=/items/2"), none.clone(), Status(200)),
        row(
            "redirect to a host off the whitelist",
            Open,
            w(&format!("/redirect?to=http://api.other.test:{port}/items/1")),
            none.clone(),
            Denied,
        ),
        row(
            "redirect to an IP literal",
            Open,
            w(&format!("/redirect?to=http://127.0.0.1:{port}/items/1")),
            none.clone(),
            Denied,
        ),
        row(
            "redirect to cloud metadata",
            Open,
            w("/redirect?to=http://169.254.169.254/latest/meta-data/"),
            none.clone(),
            Denied,
        ),
        row("redirect to a file URL", Open, w("/redirect?to=file:///etc/passwd"), none.clone(), Denied),
        row("five redirects are followed", Open, w("/chain/5"), none.clone(), Status(200)),
        row("six redirects are too many", Open, w("/chain/6"), none.clone(), NetworkError),
        row(
            "redirect: manual returns the 3xx",
            Open,
            w("/redirect?to=/items/2"),
            json!({"redirect": "manual"}),
            Status(302),
        ),
        row("redirect: error fails", Open, w("/redirect?to=/items/2"), json!({"redirect": "error"}), NetworkError),
        row(
            "cross-origin redirect drops credentials",
            Open,
            w(&format!("/redirect?to=http://v1.api.weather.test:{port}/echo&status=307")),
            json!({"headers": {"Authorization": "Bearer secret", "Cookie": "a=b", "X-Custom": "kept"}}),
            EchoHeaders { present: &["x-custom"], absent: &["authorization", "cookie"], method: "GET" },
        ),
        row(
            "same-origin redirect keeps credentials",
            Open,
            w("/redirect?to=/echo&status=307"),
            json!({"headers": {"Authorization": "Bearer secret"}}),
            EchoHeaders { present: &["authorization"], absent: &[], method: "GET" },
        ),
        row(
            "303 after POST becomes GET",
            Open,
            w("/redirect?to=/echo&status=303"),
            json!({"method": "POST", "body": "x"}),
            EchoHeaders { present: &[], absent: &["content-type"], method: "GET" },
        ),
        row(
            "307 keeps the method",
            Open,
            w("/redirect?to=/echo&status=307"),
            json!({"method": "PUT", "body": "x"}),
            EchoHeaders { present: &[], absent: &[], method: "PUT" },
        ),
        // Responses and time.
        row(
            "response larger than max_response_bytes",
            Open,
            w("/big"),
            none.clone(),
            ErrorContaining("max_response_bytes"),
        ),
        row("body that stalls between reads", Open, w("/drip"), none.clone(), NetworkError),
        row(
            "upstream that never answers ends at the call's wall time",
            Open,
            w("/slow"),
            none.clone(),
            CallLimit("time"),
        ),
        // Private networks with allow_private_networks = false.
        row("whitelisted name mapped to loopback", Strict, w("/items/1"), none.clone(), Denied),
        row("whitelisted loopback literal", Strict, format!("http://127.0.0.1:{port}/items/1"), none.clone(), Denied),
        row("whitelisted metadata address", Strict, "http://169.254.169.254/latest/meta-data/", none.clone(), Denied),
        row("whitelisted IPv6 loopback", Strict, format!("http://[::1]:{port}/"), none.clone(), Denied),
        row("whitelisted AWS IPv6 metadata", Strict, "http://[fd00:ec2::254]/", none.clone(), Denied),
        row("whitelisted RFC 1918 address", Strict, "http://10.0.0.1/", none.clone(), Denied),
        row(
            "v4-mapped form of a whitelisted loopback",
            Strict,
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            none.clone(),
            Denied,
        ),
        row("unspecified address", Strict, format!("http://0.0.0.0:{port}/"), none.clone(), Denied),
        row("name mapped to the metadata address", Strict, "http://metadata.weather.test/", none.clone(), Denied),
        row("name mapped to CGNAT", Strict, "http://cgnat.weather.test/", none.clone(), Denied),
    ]
}

async fn posture_app(posture: Posture, upstream: Upstream) -> TestApp {
    let mut env = vec![
        ("MCPBOOTD_SANDBOX__MAX_RESPONSE_BYTES".to_string(), "32768".to_string()),
        ("MCPBOOTD_EGRESS__READ_TIMEOUT_MS".to_string(), "1000".to_string()),
        ("MCPBOOTD_SANDBOX__TIMEOUT_MS".to_string(), "2500".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__v1.api.weather.test".to_string(), "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__weather.test".to_string(), "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__evilapi.weather.test".to_string(), "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__api.weather.test.evil.test".to_string(), "127.0.0.1".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__metadata.weather.test".to_string(), "169.254.169.254".to_string()),
        ("MCPBOOTD_EGRESS__RESOLVE__cgnat.weather.test".to_string(), "100.64.0.1".to_string()),
    ];
    if posture == Posture::Strict {
        env.push(("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".to_string(), "false".to_string()));
    }
    let app = spawn_app_with(AppOptions { env, upstream: Some(upstream), ..AppOptions::default() }).await;
    let allow: Vec<&str> = match posture {
        Posture::Open => vec![WEATHER_HOST],
        Posture::Strict => {
            vec![WEATHER_HOST, "127.0.0.1", "169.254.169.254", "::1", "fd00:ec2::254", "10.0.0.1", "0.0.0.0"]
        }
    };
    app.register(json!({
        "id": "probe",
        "allow_domains": allow,
        "tools": [{
            "name": "probe",
            "description": "fetch a URL with init",
            "input_schema": {"type": "object", "properties": {"url": {"type": "string"}, "init": {"type": "object"}}, "required": ["url"]},
            "handler": PROBE,
        }],
    }))
    .await;
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_table() {
    let upstream = Upstream::start().await;
    let port = upstream.address.port();
    let open = posture_app(Posture::Open, upstream.clone()).await;
    let strict = posture_app(Posture::Strict, upstream.clone()).await;
    let table = rows(port);
    assert!(table.len() >= 40, "the table keeps at least 40 attack rows");

    let mut failures = Vec::new();
    for row in &table {
        let app = if row.posture == Posture::Open { &open } else { &strict };
        let (status, body) = app.admin_call("probe", "probe", json!({"url": row.url, "init": row.init})).await;
        let outcome = check(row, status, &body);
        println!(
            "{:<58} {:?} -> {}",
            row.name,
            row.posture,
            if outcome.is_ok() { "as expected" } else { "UNEXPECTED" }
        );
        if let Err(why) = outcome {
            failures.push(format!("{}: {why}\n    response: {body}", row.name));
        }
    }
    assert!(failures.is_empty(), "{} rows failed:\n{}", failures.len(), failures.join("\n"));

    // Every denial is in the egress log with the operator-facing reason.
    let (_, calls) = strict.get("/admin/servers/probe/calls?limit=100").await;
    for call in calls["calls"].as_array().unwrap() {
        for egress in call["egress"].as_array().unwrap() {
            assert_eq!(egress["allowed"], false, "strict posture let something out: {egress}");
            assert!(egress["reason"].as_str().is_some_and(|r| !r.is_empty()), "{egress}");
        }
    }
}

fn check(row: &Row, status: u16, body: &Value) -> Result<(), String> {
    if status != 200 {
        return Err(format!("admin call answered {status}"));
    }
    let result = &body["result"];
    let structured = &result["structuredContent"];
    let error = structured["error"].as_str().unwrap_or("");
    let text = result["content"][0]["text"].as_str().unwrap_or("");
    match &row.expect {
        Expect::Status(expected) => match structured["status"].as_u64() {
            Some(got) if got == u64::from(*expected) => Ok(()),
            _ => Err(format!("expected status {expected}")),
        },
        Expect::Denied => {
            if error.starts_with("TypeError") && error.contains("not allowed by network policy") {
                let named_host = matches!(
                    url::Url::parse(&row.url).ok().and_then(|u| u.host().map(|h| h.to_owned())),
                    Some(url::Host::Domain(_))
                );
                let leaked =
                    ["127.0.0.1", "169.254.", "100.64."].iter().any(|ip| error.contains(ip) && !row.url.contains(ip));
                if named_host && leaked {
                    return Err("the error leaks a resolved address".into());
                }
                Ok(())
            } else {
                Err("expected a policy TypeError".into())
            }
        }
        Expect::NetworkError => {
            if error.starts_with("TypeError") && error.contains("network error") {
                Ok(())
            } else {
                Err("expected the generic network error".into())
            }
        }
        Expect::ErrorContaining(needle) => {
            if error.contains(needle) {
                Ok(())
            } else {
                Err(format!("expected an error containing {needle:?}"))
            }
        }
        Expect::CallLimit(needle) => {
            if result["isError"] == true && text.to_lowercase().contains(needle) {
                Ok(())
            } else {
                Err(format!("expected the call to end at a limit naming {needle:?}"))
            }
        }
        Expect::EchoHeaders { present, absent, method } => {
            let echo: Value =
                serde_json::from_str(structured["body"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
            let headers = &echo["headers"];
            for name in *present {
                if headers.get(*name).is_none() {
                    return Err(format!("upstream did not receive {name}"));
                }
            }
            for name in *absent {
                if headers.get(*name).is_some() {
                    return Err(format!("upstream received {name}"));
                }
            }
            if echo["method"] != *method {
                return Err(format!("upstream saw method {} instead of {method}", echo["method"]));
            }
            Ok(())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_six_fetches_are_in_flight_per_call() {
    let app = spawn_app().await;
    let base = app.upstream_url(WEATHER_HOST);
    app.register(json!({
        "id": "fanout",
        "allow_domains": [WEATHER_HOST],
        "tools": [tool("fanout", &format!(
            "const all = await Promise.all(Array.from({{ length: 12 }}, () => fetch('{base}/concurrent').then(r => r.json())));\n\
             return {{ max: Math.max(...all.map(x => x.max_in_flight)), n: all.length }};"
        ))],
    }))
    .await;
    let (status, body) = app.admin_call("fanout", "fanout", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["result"]["structuredContent"];
    assert_eq!(result["n"], 12, "{body}");
    let max = result["max"].as_u64().unwrap();
    assert!((2..=6).contains(&max), "fetches ran {max} at a time; the cap is 6 and they should overlap");
}

/// Handlers cannot reach the daemon's own admin API, whatever the whitelist, the name mapping or
/// a redirect says (attack run D3: a whitelisted name mapped to 127.0.0.1 reached the daemon's
/// port and registered a server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_cannot_reach_the_daemon_itself() {
    let app = spawn_app().await;
    let daemon = format!("http://{WEATHER_HOST}:{}", app.address.port());
    let upstream = app.upstream_url(WEATHER_HOST);
    let redirect_to_daemon = format!("{upstream}/redirect?to={}", urlencode(&format!("{daemon}/admin/servers")));
    app.register(json!({
        "id": "ssrf",
        "allow_domains": [WEATHER_HOST],
        "tools": [
            tool("direct", &format!(
                "const r = await fetch('{daemon}/admin/servers', {{method: 'POST', headers: {{'content-type': 'application/json'}}, \
                 body: JSON.stringify({{id: 'planted', tools: [{{name: 't', description: 'd', input_schema: {{type: 'object'}}, handler: 'return 1;'}}]}})}}); \
                 return r.status;"
            )),
            tool("read", &format!("const r = await fetch('{daemon}/admin/servers'); return await r.text();")),
            tool("redirected", &format!("const r = await fetch('{redirect_to_daemon}'); return await r.text();")),
            tool("loopback_alias", &format!("const r = await fetch('http://127.0.0.2:{}/admin/servers'); return r.status;", app.address.port())),
            tool("upstream", &format!("const r = await fetch('{upstream}/items/1'); return r.status;")),
        ],
    }))
    .await;
    for name in ["direct", "read", "redirected"] {
        let (status, body) = app.admin_call("ssrf", name, json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "error", "{name}: {body}");
        let text = body["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("this daemon's own address"), "{name}: {text}");
    }
    let (_, body) = app.admin_call("ssrf", "loopback_alias", json!({})).await;
    assert_eq!(body["outcome"], "error", "an IP literal is refused as well: {body}");
    let (_, body) = app.admin_call("ssrf", "upstream", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "200", "other loopback services stay reachable: {body}");
    let (status, _) = app.get("/admin/servers/planted").await;
    assert_eq!(status, 404, "nothing was registered through the daemon's own API");
    let (_, calls) = app.get("/admin/servers/ssrf/calls?limit=10").await;
    let direct = calls["calls"].as_array().unwrap().iter().find(|c| c["tool"] == "direct").unwrap();
    assert_eq!(direct["outcome"], "denied", "logged as a policy denial: {direct}");
}

fn urlencode(raw: &str) -> String {
    url::form_urlencoded::byte_serialize(raw.as_bytes()).collect()
}
