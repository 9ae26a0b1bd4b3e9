//! Upstreams protected from handlers, and the HTTP cache of GETs, through the real fetch path:
//! a scripted upstream on loopback counts what reaches it. An origin's `Retry-After` holds later
//! requests until its time (or fails them at once past the call's deadline) and never holds
//! another credential's; a failing origin receives at most the circuit breaker's probes; a
//! cacheable GET is fetched once per server and credentials, revalidated with `If-None-Match`
//! once stale, never served to another server or credential, and `private` is not stored.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::helpers::*;

/// A request the scripted upstream received: its path, when it arrived, and its `If-None-Match`
/// and `X-Api-Key` headers.
type Arrival = (String, Instant, Option<String>, Option<String>);

/// What the scripted upstream received.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Arrival>>>);

impl Seen {
    fn at(&self, path: &str) -> Vec<(Instant, Option<String>, Option<String>)> {
        let seen = self.0.lock().unwrap();
        seen.iter().filter(|(p, ..)| p == path).map(|(_, at, inm, key)| (*at, inm.clone(), key.clone())).collect()
    }
}

/// `/limited/{n}`: 429 with `Retry-After: n` the first time, 200 after. `/down`: always 503.
/// `/cached`, `/stale`, `/private`: JSON `{"n": how many requests it has seen}` with
/// `max-age=60` + ETag, `max-age=0` + ETag (304 to `If-None-Match`), and `private, max-age=60`.
async fn scripted_upstream() -> (u16, Seen) {
    let seen = Seen::default();
    let router = axum::Router::new().route("/{*path}", get(answer)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (port, seen)
}

async fn answer(State(seen): State<Seen>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    let path = format!("/{path}");
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let n = {
        let mut seen = seen.0.lock().unwrap();
        seen.push((path.clone(), Instant::now(), header("if-none-match"), header("x-api-key")));
        seen.iter().filter(|(p, ..)| *p == path).count()
    };
    let body = json!({"n": n}).to_string();
    match path.as_str() {
        limited if limited.starts_with("/limited/") && n == 1 => {
            (axum::http::StatusCode::TOO_MANY_REQUESTS, [("retry-after", &limited["/limited/".len()..])], "slow down")
                .into_response()
        }
        "/down" => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
        "/cached" => ([("cache-control", "max-age=60"), ("etag", "\"c1\"")], body).into_response(),
        "/stale" if header("if-none-match").as_deref() == Some("\"s1\"") => {
            (axum::http::StatusCode::NOT_MODIFIED, [("etag", "\"s1\""), ("cache-control", "max-age=0")]).into_response()
        }
        "/stale" => ([("cache-control", "max-age=0"), ("etag", "\"s1\"")], body).into_response(),
        "/private" => ([("cache-control", "private, max-age=60")], body).into_response(),
        _ => body.into_response(),
    }
}

/// A server whose one tool fetches `args.path` from the scripted upstream and returns the status
/// and body, or the fetch's error message.
fn register_body(id: &str, port: u16) -> Value {
    let handler = format!(
        "try {{ const r = await fetch('http://{WEATHER_HOST}:{port}' + args.path); \
         return {{ status: r.status, body: await r.text() }}; }} catch (e) {{ return {{ error: e.message }}; }}"
    );
    json!({
        "id": id,
        "allow_domains": [WEATHER_HOST],
        "tools": [{
            "name": "get",
            "description": "fetch a path",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "handler": handler,
        }],
    })
}

async fn fetch_via(app: &TestApp, server: &str, path: &str) -> Value {
    let (status, body) = app.admin_call(server, "get", json!({"path": path})).await;
    assert_eq!(status, 200, "{body}");
    body["result"]["structuredContent"].clone()
}

/// The egress rows of `server`'s calls, oldest call first.
async fn egress_rows(app: &TestApp, server: &str) -> Vec<Value> {
    let (_, calls) = app.get(&format!("/admin/servers/{server}/calls")).await;
    let mut calls = calls["calls"].as_array().unwrap().clone();
    calls.reverse();
    calls.iter().flat_map(|call| call["egress"].as_array().unwrap().clone()).collect()
}

async fn with_api_key(app: &TestApp, server: &str, key: &str) {
    let credential =
        json!({"value": key, "domains": [WEATHER_HOST], "inject": {"header": "X-Api-Key", "format": "{value}"}});
    let url = app.url(&format!("/admin/servers/{server}/credentials/key"));
    let response = app.http.put(url).json(&credential).send().await.unwrap();
    assert_eq!(response.status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_holds_later_requests_until_its_time_and_fails_them_past_the_deadline() {
    let app = spawn_app().await;
    let (port, seen) = scripted_upstream().await;
    app.register(register_body("patient", port)).await;

    assert_eq!(fetch_via(&app, "patient", "/limited/2").await["status"], 429);
    let started = Instant::now();
    let second = fetch_via(&app, "patient", "/limited/2").await;
    assert_eq!(second["status"], 200, "{second}");
    assert!(started.elapsed() >= Duration::from_millis(1500), "the call waited: {:?}", started.elapsed());
    let arrivals = seen.at("/limited/2");
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1].0 - arrivals[0].0;
    assert!(gap >= Duration::from_millis(1900), "the upstream got nothing before its Retry-After: {gap:?}");
    let rows = egress_rows(&app, "patient").await;
    assert_eq!(rows[1]["decision"], "retry_after_wait", "{rows:?}");
    assert!(rows[1]["waited_ms"].as_i64().unwrap() >= 1500, "{rows:?}");

    // A Retry-After past the call's deadline (10 s here) fails the fetch at once, saying when.
    assert_eq!(fetch_via(&app, "patient", "/limited/60").await["status"], 429);
    let started = Instant::now();
    let refused = fetch_via(&app, "patient", "/limited/60").await;
    assert!(started.elapsed() < Duration::from_secs(5), "failed fast: {:?}", started.elapsed());
    let message = refused["error"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("http://{WEATHER_HOST}:{port} answered 429; retry after 60 s")), "{refused}");
    assert_eq!(seen.at("/limited/60").len(), 1, "the held request never reached the upstream");
    let rows = egress_rows(&app, "patient").await;
    assert_eq!(rows.last().unwrap()["decision"], "retry_after_refused", "{rows:?}");

    // The hold is for the credentials it answered (none here): a server with its own key goes.
    app.register(register_body("keyed", port)).await;
    with_api_key(&app, "keyed", "key-of-keyed").await;
    assert_eq!(fetch_via(&app, "keyed", "/limited/60").await["status"], 200);
    assert_eq!(seen.at("/limited/60").len(), 2);
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for decision in ["retry_after_wait", "retry_after_refused"] {
        let line = format!("mcpbootd_egress_upstream_decisions_total{{decision=\"{decision}\"}} 1");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_origin_receives_at_most_the_breakers_probes() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_EGRESS__BREAKER_FAILURES".into(), "3".into()),
            ("MCPBOOTD_EGRESS__BREAKER_OPEN_MS".into(), "1000".into()),
        ],
        ..AppOptions::default()
    })
    .await;
    let (port, seen) = scripted_upstream().await;
    app.register(register_body("hopeful", port)).await;
    for _ in 0..8 {
        fetch_via(&app, "hopeful", "/down").await;
    }
    assert_eq!(seen.at("/down").len(), 3, "only the failures that opened the breaker reached it");
    let refused = fetch_via(&app, "hopeful", "/down").await;
    let message = refused["error"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("http://{WEATHER_HOST}:{port} is failing")), "{refused}");

    // After the open period one probe goes; it fails, so the breaker opens again at once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(fetch_via(&app, "hopeful", "/down").await["status"], 503);
    assert!(fetch_via(&app, "hopeful", "/down").await["error"].is_string());
    assert_eq!(seen.at("/down").len(), 4);
    let rows = egress_rows(&app, "hopeful").await;
    let decisions: Vec<&str> = rows.iter().map(|row| row["decision"].as_str().unwrap_or("-")).collect();
    assert_eq!(
        decisions,
        [
            "-",
            "-",
            "-",
            "breaker_open",
            "breaker_open",
            "breaker_open",
            "breaker_open",
            "breaker_open",
            "breaker_open",
            "breaker_probe",
            "breaker_open"
        ]
    );

    // A connection refused counts too: a port nothing listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    app.register(register_body("stranded", closed_port)).await;
    for _ in 0..4 {
        fetch_via(&app, "stranded", "/anything").await;
    }
    let rows = egress_rows(&app, "stranded").await;
    assert_eq!(rows[3]["decision"], "breaker_open", "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cacheable_get_is_fetched_once_per_server_and_credential_and_revalidated_when_stale() {
    let app = spawn_app().await;
    let (port, seen) = scripted_upstream().await;
    for (server, key) in [("alpha", "alpha-key"), ("beta", "beta-key")] {
        app.register(register_body(server, port)).await;
        with_api_key(&app, server, key).await;
    }

    for _ in 0..3 {
        assert_eq!(fetch_via(&app, "alpha", "/cached").await["body"], r#"{"n":1}"#);
    }
    // Another server with another key on the same URL is never served alpha's response.
    assert_eq!(fetch_via(&app, "beta", "/cached").await["body"], r#"{"n":2}"#);
    assert_eq!(fetch_via(&app, "beta", "/cached").await["body"], r#"{"n":2}"#);
    let keys: Vec<Option<String>> = seen.at("/cached").into_iter().map(|(_, _, key)| key).collect();
    assert_eq!(keys, [Some("alpha-key".to_string()), Some("beta-key".to_string())]);
    let cache_uses =
        |rows: Vec<Value>| rows.iter().map(|row| row["cache"].as_str().unwrap_or("-").to_string()).collect::<Vec<_>>();
    assert_eq!(cache_uses(egress_rows(&app, "alpha").await), ["stored", "hit", "hit"]);

    // Stale at once: revalidated with If-None-Match, answered 304, served from the cache.
    for _ in 0..2 {
        let answer = fetch_via(&app, "alpha", "/stale").await;
        assert_eq!((answer["status"].as_i64(), answer["body"].as_str()), (Some(200), Some(r#"{"n":1}"#)), "{answer}");
    }
    let validators: Vec<Option<String>> = seen.at("/stale").into_iter().map(|(_, inm, _)| inm).collect();
    assert_eq!(validators, [None, Some("\"s1\"".to_string())]);

    // `private` is for one user: a shared cache does not keep it.
    assert_eq!(fetch_via(&app, "alpha", "/private").await["body"], r#"{"n":1}"#);
    assert_eq!(fetch_via(&app, "alpha", "/private").await["body"], r#"{"n":2}"#);
    assert_eq!(cache_uses(egress_rows(&app, "alpha").await)[3..], ["stored", "revalidated", "miss", "miss"]);

    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "mcpbootd_egress_cache_lookups_total{result=\"hit\"} 3",
        "mcpbootd_egress_cache_lookups_total{result=\"revalidated\"} 1",
        "mcpbootd_egress_cache_lookups_total{result=\"stored\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("mcpbootd_egress_cache_bytes 0\n"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_rate_for_an_origin_set_through_its_limits_holds_its_requests_to_it() {
    let app = spawn_app().await;
    let (port, seen) = scripted_upstream().await;
    app.register(register_body("paid", port)).await;
    app.register(register_body("free", port)).await;
    // Two requests a minute to the paid API's origin, for this server only.
    let origin = format!("http://{WEATHER_HOST}:{port}");
    let url = app.url("/admin/servers/paid/limits");
    let response =
        app.http.put(url).json(&json!({"upstream": {origin.clone(): {"per_minute": 2}}})).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());

    assert_eq!(fetch_via(&app, "paid", "/a").await["status"], 200);
    assert_eq!(fetch_via(&app, "paid", "/b").await["status"], 200);
    // The third would have to wait 30 s, past the call's deadline: refused at once, with the time.
    let third = fetch_via(&app, "paid", "/c").await;
    let error = third["error"].as_str().unwrap_or_default();
    assert!(error.contains(&origin) || error.contains("per minute"), "{third}");
    assert!(seen.at("/c").is_empty(), "the refused request never reached the upstream");
    // Another server reaching the same origin is not held by the paid server's rate.
    assert_eq!(fetch_via(&app, "free", "/d").await["status"], 200);
    let rows = egress_rows(&app, "paid").await;
    assert_eq!(rows.last().unwrap()["decision"], "upstream_limit_refused", "{rows:?}");

    // And `"cache": false` keeps a server's GETs out of the cache.
    let url = app.url("/admin/servers/free/limits");
    assert_eq!(app.http.put(url).json(&json!({"cache": false})).send().await.unwrap().status(), 200);
    assert_eq!(fetch_via(&app, "free", "/cached").await["status"], 200);
    assert_eq!(fetch_via(&app, "free", "/cached").await["status"], 200);
    assert_eq!(seen.at("/cached").len(), 2, "both went upstream");
}
