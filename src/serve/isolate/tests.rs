//! Isolate tests. No real network: fetches go to `FakeHost`, which answers by host name.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::*;

fn tokio_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("test runtime")
    })
}

#[derive(Default)]
struct HostState {
    requests: Mutex<Vec<FetchRequest>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Fetch futures not yet finished or dropped (an aborted fetch is dropped).
    live: AtomicUsize,
}

/// Counts a fetch future as live until it is dropped, however it ends.
struct Live(Arc<HostState>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answers by host: `denied.test` is refused, `down.test` fails, `hang.test` never answers,
/// `slow.test` answers after 40 ms, `wait.test/<ms>` after that many milliseconds, anything
/// else echoes the request back as JSON.
#[derive(Clone, Default)]
struct FakeHost(Arc<HostState>);

impl FakeHost {
    fn requests(&self) -> Vec<FetchRequest> {
        self.0.requests.lock().unwrap().clone()
    }
}

impl FetchHost for FakeHost {
    fn fetch(
        &self,
        request: FetchRequest,
        _deadline: Instant,
    ) -> BoxFuture<'static, Result<FetchResponse, FetchError>> {
        let state = Arc::clone(&self.0);
        state.requests.lock().unwrap().push(request.clone());
        state.live.fetch_add(1, Ordering::SeqCst);
        let live = Live(Arc::clone(&state));
        Box::pin(async move {
            let _live = live;
            let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            state.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let host =
                url::Url::parse(&request.url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
            let result = match host.as_str() {
                "" => Err(FetchError::Denied(format!("invalid URL {:?}", request.url))),
                "denied.test" => Err(FetchError::Denied(format!("egress to {host} is not allowed"))),
                "down.test" => Err(FetchError::Network("connection refused".into())),
                "hang.test" => futures_util::future::pending().await,
                _ => {
                    if host == "slow.test" {
                        tokio::time::sleep(Duration::from_millis(40)).await;
                    }
                    if host == "wait.test" {
                        let ms = request.url.rsplit('/').next().and_then(|ms| ms.parse().ok());
                        tokio::time::sleep(Duration::from_millis(ms.unwrap_or(0))).await;
                    }
                    let echo = json!({
                        "method": request.method,
                        "url": request.url,
                        "headers": request.headers,
                        "body": request.body.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
                        "redirect": request.redirect,
                    });
                    Ok(FetchResponse {
                        status: 201,
                        status_text: "Created".into(),
                        url: request.url.clone(),
                        redirected: false,
                        headers: vec![
                            ("content-type".into(), "application/json".into()),
                            ("set-cookie".into(), "a=1".into()),
                            ("set-cookie".into(), "b=2".into()),
                        ],
                        body: echo.to_string().into(),
                    })
                }
            };
            state.in_flight.fetch_sub(1, Ordering::SeqCst);
            result
        })
    }
}

fn invocation(handler: &str, arguments: Value, limits: SandboxLimits, host: &FakeHost) -> Invocation {
    Invocation { handler: handler.into(), arguments, limits, fetch: Arc::new(host.clone()), program: Program::Handler }
}

fn host_context() -> HostContext {
    HostContext { runtime: tokio_runtime().handle().clone(), memory: IsolateMemory::new(1 << 30) }
}

/// Runs a call's future on the current thread, as a pool worker does.
fn drive<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("worker-like runtime").block_on(call)
}

/// Runs one invocation directly on a thread of its own, as a pool worker would, bypassing the
/// pool so tests do not queue behind each other.
fn execute(invocation: Invocation) -> Completion {
    let engine = WasmEngine::process_wide().expect("the WebAssembly engine builds");
    std::thread::spawn(move || drive(engine.execute(invocation, host_context()))).join().unwrap()
}

/// A pool of `workers` threads admitting at most `in_flight` calls, with room for `queue`.
fn pool(workers: usize, in_flight: usize, queue: usize) -> IsolatePool {
    let mut settings = PoolSettings::with_workers(workers);
    settings.admission.max_in_flight = in_flight;
    settings.admission.max_queued = queue;
    settings.admission.max_queued_per_tenant = queue;
    IsolatePool::new(settings, tokio_runtime().handle().clone())
}

fn run_with(handler: &str, limits: SandboxLimits) -> Completion {
    execute(invocation(handler, json!({}), limits, &FakeHost::default()))
}

fn run(handler: &str) -> Completion {
    run_with(handler, SandboxLimits::default())
}

fn text(completion: &Completion) -> &str {
    completion.result.content[0]["text"].as_str().unwrap_or("<no text>")
}

fn fast_limits() -> SandboxLimits {
    SandboxLimits {
        cpu: Duration::from_millis(250),
        wall: Duration::from_secs(3),
        memory_bytes: 16 * 1024 * 1024,
        ..SandboxLimits::default()
    }
}

#[track_caller]
fn assert_limit(completion: &Completion, needle: &str) {
    assert_eq!(completion.outcome, Outcome::Limit, "{completion:?}");
    assert!(completion.result.is_error);
    let error = completion.error.as_deref().unwrap_or("");
    assert!(error.contains(needle), "expected {needle:?} in {error:?}");
}

// ---- results ---------------------------------------------------------------------------

#[test]
fn returns_object_as_text_and_structured_content() {
    let c = execute(invocation(
        "return { sum: args.a + args.b, list: [1, 2] };",
        json!({"a": 2, "b": 3}),
        SandboxLimits::default(),
        &FakeHost::default(),
    ));
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert!(!c.result.is_error);
    assert_eq!(c.result.structured_content, Some(json!({"sum": 5, "list": [1, 2]})));
    assert_eq!(serde_json::from_str::<Value>(text(&c)).unwrap(), json!({"sum": 5, "list": [1, 2]}));
    assert!(c.error.is_none());
    assert!(c.wall_time >= c.cpu_time);
}

#[test]
fn returns_string_number_array_and_undefined() {
    let c = run("return 'hello';");
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, "hello"));
    assert!(c.result.structured_content.is_none());
    let c = run("return 42;");
    assert_eq!(text(&c), "42");
    let c = run("return [1, 'a'];");
    assert_eq!(serde_json::from_str::<Value>(text(&c)).unwrap(), json!([1, "a"]));
    assert!(c.result.structured_content.is_none());
    let c = run("const x = 1;");
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, ""));
    let c = run("return () => 1;");
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, ""));
}

#[test]
fn mcp_shaped_results_pass_through_and_are_validated() {
    let c = run(
        r#"return { content: [{ type: 'text', text: 'hi' }, { type: 'image', data: 'AAAA', mimeType: 'image/png' }], structuredContent: { n: 1 } };"#,
    );
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert_eq!(c.result.content.len(), 2);
    assert_eq!(c.result.content[1]["mimeType"], "image/png");
    assert_eq!(c.result.structured_content, Some(json!({"n": 1})));

    let c = run(r#"return { content: [{ type: 'text', text: 'nope' }], isError: true };"#);
    assert_eq!(c.outcome, Outcome::Error);
    assert!(c.result.is_error);
    assert_eq!(text(&c), "nope");

    let c = run(r#"return { content: [{ type: 'text', text: 5 }] };"#);
    assert_eq!(c.outcome, Outcome::Error);
    assert!(c.result.is_error);
    assert!(text(&c).contains("content[0]") && text(&c).contains("'text'"), "{}", text(&c));

    let c = run(r#"return { content: ['x'] };"#);
    assert!(c.result.is_error && text(&c).contains("must be an object"));

    // A plain object that merely has a `content` field is data, not an MCP result.
    let c = run(r#"return { title: 't', content: 'body' };"#);
    assert_eq!(c.outcome, Outcome::Ok);
    assert_eq!(c.result.structured_content, Some(json!({"title": "t", "content": "body"})));
}

#[test]
fn throw_reports_message_and_handler_line() {
    let c = run("const a = 1;\nconst b = 2;\nthrow new Error('boom');");
    assert_eq!(c.outcome, Outcome::Error);
    assert!(c.result.is_error);
    assert_eq!(text(&c), "Error: boom (handler line 3)");
    assert_eq!(c.error.as_deref(), Some("Error: boom (handler line 3)"));

    let c = run("function helper(x) {\n  return x.missing.field;\n}\nawait null;\nreturn helper({});");
    assert!(text(&c).starts_with("TypeError: ") && text(&c).ends_with("(handler line 2)"), "{}", text(&c));

    // A syntax error in a handler that was never checked.
    let c = run("let ok = 1;\nlet = = 2;");
    assert_eq!(c.outcome, Outcome::Error);
    assert!(text(&c).starts_with("SyntaxError") && text(&c).ends_with("(handler line 2)"), "{}", text(&c));
}

#[test]
fn hostile_values_never_panic() {
    for (handler, needle) in [
        ("throw 'plain string';", "plain string"),
        ("throw { code: 7 };", "{\"code\":7}"),
        ("throw null;", "null"),
        ("throw Symbol('s');", "Symbol(s)"),
        ("const o = {}; o.self = o; return o;", "circular"),
        ("return { big: 10n };", "BigInt"),
        ("return { get x() { throw new Error('getter'); } };", "getter"),
        ("return new Proxy({}, { ownKeys() { throw new Error('trap'); } });", "trap"),
        ("const e = new Error('x'); Object.defineProperty(e, 'message', { get() { throw 1; } }); throw e;", "Error"),
    ] {
        let c = run(handler);
        assert_eq!(c.outcome, Outcome::Error, "{handler}: {c:?}");
        assert!(c.result.is_error);
        assert!(text(&c).contains(needle), "{handler}: {}", text(&c));
    }
    // Symbols and lone surrogates in results.
    let c = run("return Symbol('x');");
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, ""));
    let c = run("return ['\\ud800 lone', '\\\\ud800', '\\ud83d\\ude00'];");
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert_eq!(serde_json::from_str::<Value>(text(&c)).unwrap(), json!(["\u{fffd} lone", "\\ud800", "😀"]));
    let c = run("console.log('\\ud800', 'a\\udc00b'); return 1;");
    assert_eq!(c.outcome, Outcome::Ok);
    assert_eq!(c.console, "[log] \u{fffd} a\u{fffd}b\n");
}

// ---- fetch -----------------------------------------------------------------------------

#[test]
fn fetch_get_and_post_forward_everything() {
    let host = FakeHost::default();
    let handler = r#"
        const r1 = await fetch('https://api.example/items?q=1', { headers: { 'X-Key': 'abc' } });
        const j1 = await r1.json();
        const r2 = await fetch(new URL('https://api.example/items'), {
            method: 'post',
            headers: [['Content-Type', 'text/plain'], ['X-Multi', 'a'], ['x-multi', 'b']],
            body: 'payload',
            redirect: 'manual',
        });
        const j2 = await r2.json();
        const r3 = await fetch('https://api.example/json', { method: 'PUT', body: { a: 1 } });
        const r4 = await fetch('https://api.example/form', { method: 'POST', body: new URLSearchParams({ x: '1 2', y: 'ä' }) });
        const r5 = await fetch('https://api.example/bytes', { method: 'POST', body: new Uint8Array([104, 105]) });
        return {
            status: r1.status, ok: r1.ok, statusText: r1.statusText, url: r1.url, redirected: r1.redirected,
            ct: r1.headers.get('Content-Type'), cookies: r1.headers.getSetCookie(), has: r1.headers.has('X-NOPE'),
            m1: j1.method, m2: j2.method, b2: j2.body, redirect: j2.redirect,
            j3: (await r3.json()).body, ct3: (await fetch('https://api.example/x')).headers.get('content-type'),
            f4: (await r4.json()).body, b5: (await r5.text()).includes('"body":"hi"'),
        };
    "#;
    let c = execute(invocation(handler, json!({}), SandboxLimits::default(), &host));
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    let s = c.result.structured_content.clone().unwrap();
    assert_eq!(s["status"], 201);
    assert_eq!(s["ok"], true);
    assert_eq!(s["statusText"], "Created");
    assert_eq!(s["url"], "https://api.example/items?q=1");
    assert_eq!(s["redirected"], false);
    assert_eq!(s["ct"], "application/json");
    assert_eq!(s["cookies"], json!(["a=1", "b=2"]));
    assert_eq!(s["has"], false);
    assert_eq!((s["m1"].as_str(), s["m2"].as_str()), (Some("GET"), Some("POST")));
    assert_eq!(s["b2"], "payload");
    assert_eq!(s["redirect"], "manual");
    assert_eq!(s["j3"], "{\"a\":1}");
    assert_eq!(s["f4"], "x=1+2&y=%C3%A4");
    assert_eq!(s["b5"], true);
    assert_eq!(c.fetches, 6);

    let requests = host.requests();
    assert_eq!(requests.len(), 6);
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].headers, vec![("x-key".to_owned(), "abc".to_owned())]);
    assert_eq!(requests[0].body, None);
    assert_eq!(requests[0].redirect, RedirectMode::Follow);
    assert_eq!(requests[1].url, "https://api.example/items");
    assert_eq!(
        requests[1].headers,
        vec![
            ("content-type".to_owned(), "text/plain".to_owned()),
            ("x-multi".to_owned(), "a".to_owned()),
            ("x-multi".to_owned(), "b".to_owned()),
        ]
    );
    assert_eq!(requests[1].body.as_deref(), Some(&b"payload"[..]));
    assert_eq!(requests[2].headers, vec![("content-type".to_owned(), "application/json".to_owned())]);
    assert_eq!(
        requests[3].headers,
        vec![("content-type".to_owned(), "application/x-www-form-urlencoded;charset=UTF-8".to_owned())]
    );
    assert_eq!(requests[4].body.as_deref(), Some(&b"hi"[..]));
}

#[test]
fn fetch_errors_become_type_errors() {
    let handler = r#"
        const out = [];
        for (const url of ['https://denied.test/x', 'https://down.test/', 'not a url']) {
            try { await fetch(url); out.push('no error'); }
            catch (e) { out.push(`${e instanceof TypeError} ${e.message}`); }
        }
        try { await fetch('https://a.test/', { method: 'GET', body: 'x' }); } catch (e) { out.push(e.message); }
        try { await fetch('https://a.test/', { headers: { 'bad header': 'x' } }); } catch (e) { out.push(e.message); }
        return out;
    "#;
    let c = run(handler);
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    let out: Vec<String> = serde_json::from_str(text(&c)).unwrap();
    assert_eq!(out[0], "true egress to denied.test is not allowed");
    assert_eq!(out[1], "true connection refused");
    assert_eq!(out[2], "true invalid URL \"not a url\"", "unparseable URLs go to the host");
    assert!(out[3].contains("cannot have a body"));
    assert!(out[4].contains("Invalid header name"));
    assert!(c.fetch_denied);
    assert_eq!(c.fetches, 3, "requests refused by the isolate itself are not counted");

    // Uncaught: the handler line of the fetch() call is reported.
    let c = run("const x = 1;\nawait fetch('https://denied.test/');");
    assert_eq!(c.outcome, Outcome::Error);
    assert_eq!(text(&c), "TypeError: egress to denied.test is not allowed (handler line 2)");
    assert!(c.fetch_denied);
}

#[test]
fn max_fetches_is_a_limit_even_when_caught() {
    let limits = SandboxLimits { max_fetches: 3, ..SandboxLimits::default() };
    let c = run_with(
        "for (let i = 0; i < 10; i++) { try { await fetch('https://a.test/' + i); } catch {} }\nreturn 'done';",
        limits,
    );
    assert_limit(&c, "max_fetches");
    assert_eq!(c.fetches, 3);
}

#[test]
fn concurrent_fetches_are_capped_and_queued() {
    let host = FakeHost::default();
    let limits = SandboxLimits { max_concurrent_fetches: 2, ..SandboxLimits::default() };
    let handler = "const rs = await Promise.all([1,2,3,4,5].map(i => fetch('https://slow.test/' + i).then(r => r.json())));\nreturn rs.map(r => r.url);";
    let c = execute(invocation(handler, json!({}), limits, &host));
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert_eq!(c.fetches, 5);
    assert_eq!(host.0.max_in_flight.load(Ordering::SeqCst), 2);
    let urls: Vec<String> = serde_json::from_str(text(&c)).unwrap();
    assert_eq!(urls, (1..=5).map(|i| format!("https://slow.test/{i}")).collect::<Vec<_>>());
    // Waiting for the network is not CPU time.
    assert!(c.cpu_time < c.wall_time, "{c:?}");
}

// ---- limits ----------------------------------------------------------------------------

#[test]
fn busy_loop_hits_the_cpu_limit() {
    let started = Instant::now();
    let c = run_with("while (true) {}", fast_limits());
    assert_limit(&c, "`cpu`");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(c.cpu_time >= Duration::from_millis(250));

    let c = run_with("await null;\nlet i = 0;\nwhile (true) { i++; }", fast_limits());
    assert_limit(&c, "`cpu`");

    let c = run_with("await new Promise(r => setTimeout(r, 10));\nfor (;;) {}", fast_limits());
    assert_limit(&c, "`cpu`");

    // Catastrophic backtracking is interrupted too.
    let c = run_with("return /^(a+)+$/.test('a'.repeat(40) + 'b');", fast_limits());
    assert_limit(&c, "`cpu`");
}

/// Every array built-in whose loop walks `0..length` without polling QuickJS's interrupt handler,
/// on a length no memory can back: refused at once, naming the method, instead of running until a
/// limit ends it.
#[test]
fn array_builtins_refuse_lengths_no_memory_can_hold() {
    const HUGE: &str = "{length: 2 ** 53 - 1}";
    // Built-ins whose loops QuickJS does not interrupt: refused before they start.
    let refused = [
        ("reverse", ""),
        ("copyWithin", "0, 1"),
        ("join", "','"),
        ("splice", "0, 1"),
        ("shift", ""),
        ("unshift", "1"),
        ("sort", ""),
        ("fill", "0"),
        ("slice", "1"),
        ("toLocaleString", ""),
        ("flat", ""),
        ("flatMap", "x => x"),
        ("toReversed", ""),
        ("toSorted", ""),
        ("toSpliced", "0, 1"),
        ("with", "0, 1"),
    ];
    let call = |name: &str, args: &str| {
        let args = if args.is_empty() { String::new() } else { format!(", {args}") };
        format!("return Array.prototype.{name}.call({HUGE}{args});")
    };
    let mut cases: Vec<(String, String)> =
        refused.iter().map(|(name, args)| (name.to_string(), call(name, args))).collect();
    cases.push(("sort".into(), "return new Array(2 ** 32 - 1).sort().length;".into()));
    cases.push(("join".into(), "return new Array(2 ** 32 - 1).join(',').length;".into()));
    cases.push(("join".into(), "const a = []; a.length = 2 ** 32 - 1; return String(a).length;".into()));
    cases.push((
        "concat".into(),
        format!("const o = {HUGE}; o[Symbol.isConcatSpreadable] = true; return [].concat(o).length;"),
    ));
    let limits = SandboxLimits { wall: Duration::from_secs(10), ..fast_limits() };
    for (name, handler) in cases {
        let c = run_with(&handler, limits.clone());
        assert_eq!(c.outcome, Outcome::Error, "{handler}: {c:?}");
        let error = c.error.as_deref().unwrap_or("");
        assert!(error.contains(&format!("RangeError: Array.prototype.{name}: a length of")), "{handler}: {error}");
    }
    // Built-ins whose loops poll the interrupt handler: they end at the CPU limit (or refuse the
    // length themselves, as `map` and `filter` do when creating their result).
    let polled = [
        ("includes", "1"),
        ("indexOf", "1"),
        ("lastIndexOf", "1"),
        ("forEach", "x => x"),
        ("map", "x => x"),
        ("filter", "x => x"),
        ("some", "x => x"),
        ("every", "x => !x"),
        ("find", "x => x"),
        ("findIndex", "x => x"),
        ("findLast", "x => x"),
        ("findLastIndex", "x => x"),
        ("reduce", "(a, x) => x, 0"),
        ("reduceRight", "(a, x) => x, 0"),
    ];
    for (name, args) in polled {
        let handler = call(name, args);
        let c = run_with(&handler, limits.clone());
        let error = c.error.as_deref().unwrap_or("");
        let ended = match c.outcome {
            Outcome::Limit => error.contains("CPU time limit"),
            Outcome::Error => error.starts_with("RangeError"),
            _ => false,
        };
        assert!(ended, "{handler}: {c:?}");
    }
    // Arrays a call can hold, and array-likes that tell the truth, work as before.
    let c = run(
        "const a = new Array(100000).fill(1); return [a.reverse().length, Array.prototype.join.call({length: 3, 0: 'a', 2: 'c'}, '-'), [3, 1, 2].sort().concat([4]).join(''), Array.prototype.map.name, Array.prototype.map.length];",
    );
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert_eq!(c.result.structured_content, None);
    assert_eq!(text(&c).split_whitespace().collect::<String>(), r#"[100000,"a--c","1234","map",1]"#);
}

#[test]
fn catching_a_limit_does_not_help() {
    let c = run_with("try { while (true) {} } catch (e) {}\nreturn 'survived';", fast_limits());
    assert_limit(&c, "`cpu`");

    let c = run_with(
        "let caught = 0;\ntry { const a = []; while (true) a.push(new Array(100000).fill(1)); } catch (e) { caught++; }\nreturn caught;",
        SandboxLimits { cpu: Duration::from_secs(5), ..fast_limits() },
    );
    assert_limit(&c, "memory");

    let c = run_with(
        "function f(n) { return f(n + 1) + 1; }\ntry { f(0); } catch (e) {}\nreturn 'survived';",
        fast_limits(),
    );
    assert_limit(&c, "stack");

    let c = run_with("function f() { f(); }\nfor (;;) { try { f(); } catch (e) {} }", fast_limits());
    assert_limit(&c, "stack");
}

#[test]
fn memory_blowup_hits_the_memory_limit() {
    // A generous CPU budget so a loaded (debug-build) test machine still runs out of
    // memory first.
    let limits = SandboxLimits { cpu: Duration::from_secs(5), ..fast_limits() };
    let c = run_with("const a = [];\nwhile (true) a.push('x'.repeat(10000) + a.length);", limits.clone());
    assert_limit(&c, "memory_bytes");
    let c = run_with("return new ArrayBuffer(1024 * 1024 * 1024).byteLength;", limits);
    assert_limit(&c, "memory_bytes");
}

/// Natives' copies outside the JS heap count against the call's memory: a
/// TextEncoder cannot be used to keep memory the budget does not see, nor a TextDecoder to
/// build text three times the size of its input on the side.
#[test]
fn natives_copies_count_against_the_memory_limit() {
    let limits = SandboxLimits { cpu: Duration::from_secs(5), memory_bytes: 32 * 1024 * 1024, ..fast_limits() };
    let keep_encoded = "const text = 'a'.repeat(4 << 20); const kept = [];\n\
                        for (let i = 0; i < 20; i++) kept.push(new TextEncoder().encode(text));\n\
                        return kept.length;";
    assert_limit(&run_with(keep_encoded, limits.clone()), "memory_bytes");
    let decode_invalid = "return new TextDecoder().decode(new Uint8Array(8 << 20).fill(255)).length;";
    assert_limit(&run_with(decode_invalid, limits.clone()), "memory_bytes");
    let log_huge = "const line = 'x'.repeat(12 << 20); const also = line + 'y'; console.log(also); return 1;";
    assert_limit(&run_with(log_huge, limits.clone()), "memory_bytes");
    // What fits is unchanged: the same operations on sizes the budget covers.
    let fits = "const bytes = new TextEncoder().encode('h\\u00e9llo '.repeat(100000));\n\
                const text = new TextDecoder().decode(bytes);\n\
                const lossy = new TextDecoder().decode(new Uint8Array(1000).fill(255));\n\
                const url = new URL('https://api.example.test/' + 'p'.repeat(100000) + '?q=1');\n\
                return [bytes.length, text.length, lossy.length, url.searchParams.get('q')].join();";
    let c = run_with(fits, limits);
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, "700000,600000,1000,1"), "{c:?}");
}

#[test]
fn infinite_recursion_hits_the_stack_limit() {
    let c = run_with("function f(n) { return f(n + 1) + 1; }\nreturn f(0);", fast_limits());
    assert_limit(&c, "stack_bytes");
    let c = run_with("const deep = (n) => n === 0 ? 0 : 1 + deep(n - 1);\nreturn deep(50);", fast_limits());
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, "50"), "{c:?}");
}

#[test]
fn never_settling_promise_is_a_timeout() {
    let started = Instant::now();
    let c = run("await new Promise(() => {});");
    assert_eq!(c.outcome, Outcome::Timeout, "{c:?}");
    assert!(c.result.is_error);
    // Nothing could ever settle it, so the worker is released at once.
    assert!(started.elapsed() < Duration::from_secs(1));

    // A fetch that never answers runs into the wall clock.
    let limits = SandboxLimits { wall: Duration::from_millis(300), ..SandboxLimits::default() };
    let started = Instant::now();
    let c = run_with("await fetch('https://hang.test/');", limits.clone());
    assert_eq!(c.outcome, Outcome::Timeout, "{c:?}");
    assert!(c.error.as_deref().unwrap().contains("`wall`"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(c.cpu_time < Duration::from_millis(200), "{c:?}");

    // A timer past the deadline cannot help either.
    let c = run_with("await new Promise(r => setTimeout(r, 60000));", limits);
    assert_eq!(c.outcome, Outcome::Timeout, "{c:?}");
}

#[test]
fn result_size_is_limited() {
    let limits = SandboxLimits { max_result_bytes: 1000, ..SandboxLimits::default() };
    let c = run_with("return 'x'.repeat(2000);", limits.clone());
    assert_limit(&c, "max_result_bytes");
    let c = run_with("return 'x'.repeat(900);", limits);
    assert_eq!(c.outcome, Outcome::Ok);
}

// ---- console, timers, globals ------------------------------------------------------------

#[test]
fn console_is_captured_and_capped() {
    let c = run(
        "console.log('a', 1, { b: [2] }, null, undefined);\nconsole.warn('w');\nconsole.error(new TypeError('t'));\nconsole.info(1n);\nconsole.debug([1, 2]);\nreturn 1;",
    );
    assert_eq!(c.outcome, Outcome::Ok);
    let lines: Vec<&str> = c.console.lines().collect();
    assert_eq!(lines[0], "[log] a 1 {\"b\":[2]} null undefined");
    assert_eq!(lines[1], "[warn] w");
    assert_eq!(lines[2], "[error] TypeError: t");
    assert!(lines[3].starts_with("    at "), "{lines:?}");
    assert!(c.console.contains("[info] 1n\n[debug] [1,2]\n"), "{}", c.console);

    let limits = SandboxLimits { max_console_bytes: 100, ..SandboxLimits::default() };
    let c = run_with("for (let i = 0; i < 1000; i++) console.log('line ' + i);\nreturn 'ok';", limits);
    assert_eq!(c.outcome, Outcome::Ok);
    assert!(c.console.starts_with("[log] line 0\n[log] line 1\n"));
    assert!(c.console.ends_with("[console output truncated: max_console_bytes reached]\n"), "{}", c.console);
    assert!(c.console.len() <= 100 + 60);
}

#[test]
fn set_timeout_works_and_is_bounded() {
    let c = run(r#"
        const order = [];
        await new Promise((resolve) => {
            setTimeout(() => order.push('b'), 20);
            setTimeout((x, y) => order.push(x + y), 0, 'a', '!');
            const t = setTimeout(() => order.push('never'), 5);
            clearTimeout(t);
            setTimeout(resolve, 40);
        });
        return order;
    "#);
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert_eq!(serde_json::from_str::<Value>(text(&c)).unwrap(), json!(["a!", "b"]));
    assert!(c.wall_time >= Duration::from_millis(40));

    let limits = SandboxLimits { max_timers: 5, ..SandboxLimits::default() };
    let c = run_with("for (let i = 0; i < 10; i++) { try { setTimeout(() => {}, 0); } catch {} }\nreturn 1;", limits);
    assert_limit(&c, "max_timers");

    let c = run("await new Promise((r) => setTimeout(() => { r(); missing(); }, 0));");
    assert_eq!(c.outcome, Outcome::Error);
    assert!(text(&c).starts_with("uncaught error in a setTimeout callback: ReferenceError"), "{}", text(&c));
}

#[test]
fn only_the_documented_globals_exist() {
    let c = run(r#"
        const absent = ['require', 'process', 'Deno', 'module', 'exports', 'queueMicrotask', 'performance', 'Bun', 'std', 'os'];
        const present = ['fetch', 'Headers', 'Response', 'URL', 'URLSearchParams', 'TextEncoder', 'TextDecoder',
                         'atob', 'btoa', 'console', 'structuredClone', 'setTimeout', 'clearTimeout', 'pathSegment', 'JSON', 'Promise'];
        let imported;
        try { await import('data:text/javascript,export default 1'); imported = 'loaded'; } catch (e) { imported = 'rejected'; }
        return {
            absent: absent.filter((n) => typeof globalThis[n] !== 'undefined'),
            missing: present.filter((n) => typeof globalThis[n] === 'undefined'),
            imported,
            argFetch: typeof fetch === 'function',
        };
    "#);
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    let s = c.result.structured_content.unwrap();
    assert_eq!(s["absent"], json!([]));
    assert_eq!(s["missing"], json!([]));
    assert_eq!(s["imported"], "rejected");
    assert_eq!(s["argFetch"], true);

    let c = run("return require('fs');");
    assert_eq!(c.outcome, Outcome::Error);
    assert!(text(&c).starts_with("ReferenceError"), "{}", text(&c));
}

#[test]
fn web_apis_behave() {
    let c = run(r#"
        const u = new URL('https://user:pw@Example.com:8443/a/b?x=1&y=2#frag');
        const parts = [u.protocol, u.username, u.password, u.hostname, u.host, u.port, u.pathname, u.search, u.hash, u.origin];
        u.searchParams.append('z', 'a b');
        u.pathname = '/c d';
        u.search = '?q=1';
        const rel = new URL('../up?k=v', 'https://h.test/a/b/c').href;
        let bad; try { new URL('nope'); } catch (e) { bad = e instanceof TypeError; }
        const sp = new URLSearchParams('a=1&b=2&a=3');
        sp.set('b', 'x'); sp.delete('a', '3');
        const sp2 = new URLSearchParams([['k', 'v']]);
        const sp3 = new URLSearchParams({ o: 'p' });
        const enc = new TextEncoder().encode('héllo €');
        const dec = new TextDecoder().decode(enc);
        const stream = new TextDecoder();
        const euro = new TextEncoder().encode('€');
        const streamed = stream.decode(euro.subarray(0, 1), { stream: true }) + stream.decode(euro.subarray(1));
        let fatal; try { new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xff])); } catch (e) { fatal = e instanceof TypeError; }
        const h = new Headers({ 'X-A': '1' }); h.append('x-a', '2'); h.set('B', ' v ');
        const clone = structuredClone({ d: new Date(0), m: new Map([[1, { s: new Set([2]) }]]), a: [1, { b: 2 }] });
        let cloneErr; try { structuredClone({ f() {} }); } catch (e) { cloneErr = e.name; }
        const r = new Response('{"j":1}', { status: 202, headers: { 'X-R': 'y' } });
        return {
            parts, href: u.href, sp: u.searchParams.toString(), rel, bad,
            spStr: sp.toString(), spAll: [...sp.entries()], sp2: sp2.get('k'), sp3: sp3.toString(), spMissing: sp.get('zz'),
            enc: Array.from(enc).length, dec, streamed, fatal,
            b64: btoa('hi!'), unb64: atob('aGkh'),
            headers: [...h], hget: h.get('X-A'),
            clone: [clone.d instanceof Date, clone.m.get(1).s.has(2), clone.a[1].b], cloneErr,
            resp: [r.status, r.ok, r.headers.get('x-r'), r.headers.get('content-type'), (await r.json()).j, r.bodyUsed],
        };
    "#);
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    let s = c.result.structured_content.unwrap();
    assert_eq!(
        s["parts"],
        json!([
            "https:",
            "user",
            "pw",
            "example.com",
            "example.com:8443",
            "8443",
            "/a/b",
            "?x=1&y=2",
            "#frag",
            "https://example.com:8443"
        ])
    );
    assert_eq!(s["href"], "https://user:pw@example.com:8443/c%20d?q=1#frag");
    assert_eq!(s["sp"], "q=1");
    assert_eq!(s["rel"], "https://h.test/a/up?k=v");
    assert_eq!(s["bad"], true);
    assert_eq!(s["spStr"], "a=1&b=x");
    assert_eq!(s["spAll"], json!([["a", "1"], ["b", "x"]]));
    assert_eq!((s["sp2"].as_str(), s["sp3"].as_str()), (Some("v"), Some("o=p")));
    assert_eq!(s["spMissing"], Value::Null);
    assert_eq!(s["enc"], 10);
    assert_eq!(s["dec"], "héllo €");
    assert_eq!(s["streamed"], "€");
    assert_eq!(s["fatal"], true);
    assert_eq!((s["b64"].as_str(), s["unb64"].as_str()), (Some("aGkh"), Some("hi!")));
    assert_eq!(s["headers"], json!([["b", "v"], ["x-a", "1, 2"]]));
    assert_eq!(s["hget"], "1, 2");
    assert_eq!(s["clone"], json!([true, true, 2]));
    assert_eq!(s["cloneErr"], "DataCloneError");
    assert_eq!(s["resp"], json!([202, true, "y", "text/plain;charset=UTF-8", 1, true]));
}

#[test]
fn path_segment_encodes_one_segment_and_refuses_values_that_would_change_the_path() {
    let c = run(r#"
        const refusal = (value) => {
            try { return `accepted as ${pathSegment(value)}`; } catch (e) { return `${e.name}: ${e.message}`; }
        };
        return {
            encoded: [pathSegment('a b/c?d#e'), pathSegment(42), pathSegment('a..b'), pathSegment('...'), pathSegment('.json')],
            refused: ['..', '.', '%2E%2e', '%2e', '.%2E', '%252e%252E', '．．', '../../admin', 'a/./b', '..\\x']
                .map(refusal).filter((r) => !r.startsWith('RangeError') || !r.includes('path segment')),
            empty: refusal(''),
            missing: refusal(undefined),
            object: refusal({ id: 1 }),
        };
    "#);
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    let s = c.result.structured_content.unwrap();
    assert_eq!(s["encoded"], json!(["a%20b%2Fc%3Fd%23e", "42", "a..b", "...", ".json"]));
    assert_eq!(s["refused"], json!([]), "each of these would reach another path");
    assert!(s["empty"].as_str().unwrap().starts_with("RangeError: pathSegment(value): the value is empty"), "{s}");
    assert_eq!(s["missing"], "TypeError: pathSegment(value): the value must be a string or a number, not undefined");
    assert!(s["object"].as_str().unwrap().ends_with("not object"), "{s}");
}

// ---- check_handler ---------------------------------------------------------------------

#[test]
fn check_handler_accepts_valid_code() {
    for source in [
        "return args.x;",
        "const r = await fetch('https://a.test'); return r.json();",
        "const o = { import: 1, require: 2 }; return o.require + obj.import;",
        "const s = 'require(\"fs\")'; const t = `import x from ${'y'}`; return s + t; // import y",
        "/* require('x') */ return /import\\(/.test('a') / 2;",
        "x.require('y'); a?.import;",
        "const f = (a) => { if (a) { return {}; } };",
    ] {
        assert_eq!(check_handler(source), Ok(()), "{source}");
    }
}

#[test]
fn a_whole_function_is_refused_with_the_right_form() {
    for source in [
        "async function handler(args, fetch) {\n  const r = await fetch('https://a.test');\n  return r.json();\n}",
        "function handler(args) { return args.x; };\n",
        "// the tool\nasync function (args, fetch) { return 1; }",
        "async (args, fetch) => {\n  return args.x;\n}",
        "(args) => args.a + args.b",
        "args => ({ sum: args.a + args.b });",
        "async args => { return 1; } // done",
    ] {
        let error = check_handler(source).unwrap_err();
        assert!(error.message.starts_with("the handler is a whole function"), "{source}: {error:?}");
        assert!(error.message.contains("async function (args, fetch) { <handler> }"), "{error:?}");
    }
    // Functions that are part of a body are fine.
    for source in [
        "function helper(x) { return x * 2; }\nreturn helper(args.n);",
        "async function handler(args, fetch) { return 1; }\nreturn handler(args, fetch);",
        "(async () => { await 1; })();\nreturn 2;",
        "((a) => a)(1); return 3;",
        "functional(); return 1;",
        "asyncThing => 1; return 2;",
    ] {
        assert_eq!(check_handler(source), Ok(()), "{source}");
    }
}

#[test]
fn a_handler_without_return_is_warned_about() {
    assert_eq!(handler_warnings("return args.x;"), Vec::<String>::new());
    assert_eq!(handler_warnings("if (args.x) { return 1; } throw new Error('no');"), Vec::<String>::new());
    for source in
        ["args.a + args.b;", "const r = await fetch(args.url); r.json();", "// return 1\nconst s = 'return'; x.return;"]
    {
        let warnings = handler_warnings(source);
        assert_eq!(warnings.len(), 1, "{source}");
        assert!(warnings[0].contains("no `return`"), "{warnings:?}");
    }
}

#[test]
fn check_handler_reports_syntax_errors_with_lines() {
    let err = check_handler("const a = 1;\nconst b = ;\nreturn a;").unwrap_err();
    assert_eq!(err.line, Some(2), "{err:?}");
    assert!(err.message.starts_with("SyntaxError"), "{err:?}");

    let err = check_handler("if (true) {\n  return 1;\n").unwrap_err();
    assert_eq!(err.line, Some(2), "{err:?}");
}

#[test]
fn check_handler_recovers_after_a_check_that_exhausted_its_runtime() {
    let deep = format!("return {}1{};", "(".repeat(100_000), ")".repeat(100_000));
    let err = check_handler(&deep).unwrap_err();
    assert!(err.message.contains("nested too deeply"), "{err:?}");
    // Each check runs in a fresh instance: ordinary checks keep working after one that trapped.
    for _ in 0..3 {
        assert_eq!(check_handler("return args.x;"), Ok(()));
        assert!(check_handler("return ;;(").is_err());
    }
}

#[test]
fn check_handler_rejects_modules() {
    let err = check_handler("const x = 1;\nconst fs = require('fs');").unwrap_err();
    assert_eq!(err.line, Some(2));
    assert!(err.message.starts_with("require() is not available"), "{err:?}");

    let err = check_handler("\n\nconst m = await import('https://cdn/x.js');").unwrap_err();
    assert_eq!(err.line, Some(3));
    assert!(err.message.starts_with("import() is not available"), "{err:?}");

    let err = check_handler("import { x } from 'y';\nreturn x;").unwrap_err();
    assert_eq!(err.line, Some(1));
    assert!(err.message.starts_with("import statements are not available"), "{err:?}");

    let err = check_handler("return 1;\n});\n(function () {").unwrap_err();
    assert_eq!(err.line, Some(2));
    assert!(err.message.contains("unbalanced"), "{err:?}");
}

// ---- pool ------------------------------------------------------------------------------

/// Polls `condition` until it holds, failing the test after five seconds.
#[track_caller]
fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn pool_is_busy_when_the_queue_is_full() {
    let rt = tokio_runtime();
    let pool = Arc::new(pool(1, 1, 1));
    let host = FakeHost::default();
    let spin = invocation("while (true) {}", json!({}), fast_limits(), &host);
    let quick = invocation("return 'quick';", json!({}), SandboxLimits::default(), &host);

    let first = rt.spawn({
        let pool = Arc::clone(&pool);
        let spin = spin.clone();
        async move { pool.run("a", spin).await }
    });
    wait_until("the spinner runs", || pool.stats().busy == 1);
    let second = rt.spawn({
        let pool = Arc::clone(&pool);
        let quick = quick.clone();
        async move { pool.run("b", quick).await }
    });
    wait_until("a call is queued", || pool.stats().queued == 1);
    let stats = pool.stats();
    assert_eq!((stats.workers, stats.busy, stats.in_flight, stats.queued), (1, 1, 1, 1));
    let busy = rt.block_on(pool.run("c", quick.clone())).unwrap_err();
    assert!(matches!(busy, PoolError::Busy(Busy::Queue { limit: 1 })), "{busy:?}");
    assert!(busy.to_string().contains("[sandbox] queue"), "{busy}");

    assert_eq!(rt.block_on(first).unwrap().unwrap().outcome, Outcome::Limit);
    assert_eq!(rt.block_on(second).unwrap().unwrap().outcome, Outcome::Ok);
    wait_until("the pool is idle", || pool.stats().in_flight == 0);
    assert_eq!(pool.stats().queued, 0);

    pool.close();
    assert_eq!(rt.block_on(pool.run("a", quick)).unwrap_err(), PoolError::Closed);
}

#[test]
fn pool_keeps_serving_while_a_worker_spins() {
    let rt = tokio_runtime();
    let pool = Arc::new(pool(2, 100, 8));
    let host = FakeHost::default();
    let limits = SandboxLimits { cpu: Duration::from_millis(800), ..SandboxLimits::default() };
    let spinner = rt.spawn({
        let pool = Arc::clone(&pool);
        let spin = invocation("for (;;) {}", json!({}), limits, &host);
        async move { pool.run("a", spin).await }
    });
    wait_until("the spinner runs", || pool.stats().busy == 1);
    let started = Instant::now();
    for i in 0..5 {
        let c = rt
            .block_on(
                pool.run("b", invocation("return args.i * 2;", json!({ "i": i }), SandboxLimits::default(), &host)),
            )
            .unwrap();
        assert_eq!((c.outcome, text(&c)), (Outcome::Ok, (i * 2).to_string().as_str()));
    }
    let quick_total = started.elapsed();
    assert!(!spinner.is_finished(), "the spinner should still be running after the quick calls ({quick_total:?})");
    let spun = rt.block_on(spinner).unwrap().unwrap();
    assert_eq!(spun.outcome, Outcome::Limit);
}

/// Runs `count` copies of `invocation` through `pool` at once and returns their completions.
fn run_concurrently(pool: &Arc<IsolatePool>, tenant: &str, count: usize, invocation: &Invocation) -> Vec<Completion> {
    let rt = tokio_runtime();
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let pool = Arc::clone(pool);
            let invocation = invocation.clone();
            let tenant = tenant.to_owned();
            rt.spawn(async move { pool.run(&tenant, invocation).await })
        })
        .collect();
    tasks.into_iter().map(|task| rt.block_on(task).unwrap().unwrap()).collect()
}

#[test]
fn calls_waiting_on_fetches_do_not_hold_a_worker() {
    // 200 calls each awaiting a 300 ms upstream on two workers: holding a worker per call
    // would take 200 × 300 ms / 2 = 30 s; parked calls overlap their waits.
    let pool = Arc::new(pool(2, 1000, 0));
    let host = FakeHost::default();
    let call = invocation(
        "const r = await fetch('https://wait.test/300'); return (await r.json()).method;",
        json!({}),
        SandboxLimits::default(),
        &host,
    );
    let started = Instant::now();
    let completions = run_concurrently(&pool, "a", 200, &call);
    let elapsed = started.elapsed();
    for c in &completions {
        assert_eq!((c.outcome, text(c)), (Outcome::Ok, "GET"), "{c:?}");
    }
    assert!(elapsed < Duration::from_secs(10), "200 parked calls took {elapsed:?}");
    // Far more fetches were in flight at once than there are workers (how many overlap
    // depends on how fast this build creates isolates).
    let overlapping = host.0.max_in_flight.load(Ordering::SeqCst);
    assert!(overlapping >= 50, "only {overlapping} fetches overlapped");
    // Parked time is not CPU time.
    assert!(completions.iter().all(|c| c.cpu_time < Duration::from_millis(250)), "{completions:?}");
}

#[test]
fn timers_park_too() {
    let pool = Arc::new(pool(1, 1000, 0));
    let call = invocation(
        "await new Promise(r => setTimeout(r, 200)); return 'late';",
        json!({}),
        SandboxLimits::default(),
        &FakeHost::default(),
    );
    let started = Instant::now();
    let completions = run_concurrently(&pool, "a", 50, &call);
    assert!(completions.iter().all(|c| c.outcome == Outcome::Ok && text(c) == "late"));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn the_cpu_limit_ends_a_spinner_while_other_calls_on_its_worker_are_parked() {
    let rt = tokio_runtime();
    let pool = Arc::new(pool(1, 1000, 0));
    let host = FakeHost::default();
    let parked: Vec<_> = (0..20)
        .map(|i| {
            let pool = Arc::clone(&pool);
            let call = invocation(
                "const r = await fetch('https://wait.test/400'); return args.i;",
                json!({ "i": i }),
                SandboxLimits::default(),
                &host,
            );
            rt.spawn(async move { pool.run("parked", call).await })
        })
        .collect();
    wait_until("the calls are parked", || host.0.in_flight.load(Ordering::SeqCst) == 20);
    let spin = invocation(
        "await fetch('https://wait.test/1'); for (;;) {}",
        json!({}),
        SandboxLimits { cpu: Duration::from_millis(200), ..SandboxLimits::default() },
        &host,
    );
    let spun = rt.block_on(pool.run("spinner", spin)).unwrap();
    assert_limit(&spun, "CPU time limit exceeded");
    for (i, call) in parked.into_iter().enumerate() {
        let c = rt.block_on(call).unwrap().unwrap();
        assert_eq!((c.outcome, text(&c)), (Outcome::Ok, i.to_string().as_str()));
    }
}

#[test]
fn a_cancelled_call_drops_its_fetches_and_timers() {
    let rt = tokio_runtime();
    let pool = Arc::new(pool(1, 1000, 0));
    let host = FakeHost::default();
    let call = invocation(
        "setTimeout(() => {}, 60000); await fetch('https://hang.test/'); return 1;",
        json!({}),
        SandboxLimits::default(),
        &host,
    );
    let task = rt.spawn({
        let pool = Arc::clone(&pool);
        async move { pool.run("a", call).await }
    });
    wait_until("the fetch is in flight", || host.0.live.load(Ordering::SeqCst) == 1);
    assert_eq!(pool.stats().in_flight, 1);
    task.abort();
    wait_until("the fetch is dropped", || host.0.live.load(Ordering::SeqCst) == 0);
    wait_until("the slot is free", || pool.stats().in_flight == 0);
}

#[test]
fn a_call_past_the_daemon_memory_budget_ends_cleanly() {
    let rt = tokio_runtime();
    let mut settings = PoolSettings::with_workers(1);
    settings.memory_budget_bytes = 8 * 1024 * 1024;
    let pool = IsolatePool::new(settings, rt.handle().clone());
    let host = FakeHost::default();
    let hog = invocation(
        "const a = []; for (;;) a.push('x'.repeat(1024) + a.length);",
        json!({}),
        SandboxLimits::default(),
        &host,
    );
    let c = rt.block_on(pool.run("a", hog)).unwrap();
    assert_limit(&c, "the daemon's isolate memory is exhausted");
    assert!(c.error.as_deref().unwrap_or("").contains("[sandbox] memory_budget_mb"), "{c:?}");
    // Everything it held was given back: the next call runs.
    assert_eq!(pool.stats().memory_bytes, 0);
    let c =
        rt.block_on(pool.run("a", invocation("return 'fine';", json!({}), SandboxLimits::default(), &host))).unwrap();
    assert_eq!((c.outcome, text(&c)), (Outcome::Ok, "fine"));
}

#[test]
fn one_server_at_its_cap_does_not_hold_up_another() {
    let rt = tokio_runtime();
    let mut settings = PoolSettings::with_workers(1);
    settings.admission.max_in_flight_per_tenant = 50;
    settings.admission.max_queued_per_tenant = 1;
    let pool = Arc::new(IsolatePool::new(settings, rt.handle().clone()));
    let host = FakeHost::default();
    let hang = invocation("await fetch('https://hang.test/'); return 1;", json!({}), fast_limits(), &host);
    let parked: Vec<_> = (0..51)
        .map(|_| {
            let pool = Arc::clone(&pool);
            let hang = hang.clone();
            rt.spawn(async move { pool.run("noisy", hang).await })
        })
        .collect();
    wait_until("the noisy server is at its cap", || {
        let stats = pool.stats();
        stats.in_flight == 50 && stats.queued == 1
    });
    let refused = rt.block_on(pool.run("noisy", hang.clone())).unwrap_err();
    assert!(matches!(refused, PoolError::Busy(Busy::TenantQueue { limit: 1 })), "{refused:?}");
    for i in 0..20 {
        let c = rt
            .block_on(
                pool.run("quiet", invocation("return args.i;", json!({ "i": i }), SandboxLimits::default(), &host)),
            )
            .unwrap();
        assert_eq!(c.outcome, Outcome::Ok);
    }
    for call in parked {
        // The wall limit of fast_limits ends them.
        let c = rt.block_on(call).unwrap().unwrap();
        assert_eq!(c.outcome, Outcome::Timeout, "{c:?}");
    }
}

/// A stand-in engine: records the worker thread's name, or panics on request.
struct ProbeEngine(Arc<Mutex<Vec<String>>>);

impl Engine for ProbeEngine {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn check(&self, _source: &str) -> Result<(), CompileError> {
        Ok(())
    }

    fn execute(
        &self,
        invocation: Invocation,
        _host: HostContext,
    ) -> futures_util::future::LocalBoxFuture<'static, Completion> {
        let names = Arc::clone(&self.0);
        Box::pin(async move {
            if &*invocation.handler == "panic" {
                panic!("engine bug");
            }
            let name = std::thread::current().name().unwrap_or("").to_owned();
            names.lock().unwrap().push(name);
            Completion {
                result: ToolResult::text("ok", false),
                outcome: Outcome::Ok,
                error: None,
                console: String::new(),
                fetches: 0,
                fetch_denied: false,
                cpu_time: Duration::ZERO,
                wall_time: Duration::ZERO,
            }
        })
    }
}

#[test]
fn workers_are_named_and_survive_engine_panics() {
    let rt = tokio_runtime();
    let names = Arc::new(Mutex::new(Vec::new()));
    let pool = IsolatePool::with_engine(
        Arc::new(ProbeEngine(Arc::clone(&names))),
        PoolSettings::with_workers(1),
        rt.handle().clone(),
    );
    let host = FakeHost::default();
    let c = rt.block_on(pool.run("a", invocation("panic", json!({}), SandboxLimits::default(), &host))).unwrap();
    assert_eq!(c.outcome, Outcome::Error);
    assert!(c.result.is_error);
    // The worker is not left marked as running JavaScript.
    assert_eq!(pool.stats().busy, 0);
    let c = rt.block_on(pool.run("a", invocation("x", json!({}), SandboxLimits::default(), &host))).unwrap();
    assert_eq!(c.outcome, Outcome::Ok);
    assert_eq!(*names.lock().unwrap(), vec!["mcpbootd-isolate-0".to_owned()]);
}

#[test]
#[ignore = "profiling aid: run under callgrind"]
fn profile_pure_calls() {
    let engine = WasmEngine::process_wide().expect("the WebAssembly engine builds");
    let host = FakeHost::default();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let n: usize = std::env::var("N").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
        let started = Instant::now();
        for _ in 0..n {
            let c = rt.block_on(engine.execute(
                invocation(
                    "return { sum: args.a + args.b };",
                    json!({"a": 1, "b": 2}),
                    SandboxLimits::default(),
                    &host,
                ),
                host_context(),
            ));
            assert_eq!(c.outcome, Outcome::Ok);
        }
        println!("{:.3} ms per call", started.elapsed().as_secs_f64() * 1000.0 / n as f64);
    })
    .join()
    .unwrap();
}

#[test]
#[ignore = "measurement aid"]
fn measure_parked_memory() {
    /// The process's resident memory (Linux), in bytes.
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        statm.split_whitespace().nth(1).and_then(|pages| pages.parse::<usize>().ok()).unwrap_or(0) * 4096
    }
    let rt = tokio_runtime();
    let pool = Arc::new(pool(2, 10_000, 0));
    let host = FakeHost::default();
    let call = invocation(
        "const r = await fetch('https://wait.test/3000'); return (await r.json()).method;",
        json!({}),
        SandboxLimits::default(),
        &host,
    );
    // The engine is built and a worker has run a call before the baseline is taken.
    rt.block_on(pool.run("a", invocation("return 1;", json!({}), SandboxLimits::default(), &host))).unwrap();
    let before = resident();
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let pool = Arc::clone(&pool);
            let call = call.clone();
            rt.spawn(async move { pool.run("a", call).await })
        })
        .collect();
    wait_until("all parked", || host.0.live.load(Ordering::SeqCst) == 1000);
    let stats = pool.stats();
    println!(
        "parked 1000 calls: {} KiB per call resident, {} KiB per call drawn from the memory budget (linear memory \
         grown past the image, natives' copies)",
        resident().saturating_sub(before) / 1000 / 1024,
        stats.memory_bytes / 1000 / 1024
    );
    for task in tasks {
        rt.block_on(task).unwrap().unwrap();
    }
}

// ---- code-mode scripts -------------------------------------------------------------------

/// A script's host: `tool:<server>/<tool>` answers `{ok: true, value: {server, tool, args}}`,
/// except server `missing` (NOT_FOUND); anything else is refused, as a script's real host does.
#[derive(Clone, Default)]
struct ToolEcho(Arc<Mutex<Vec<String>>>);

impl FetchHost for ToolEcho {
    fn fetch(
        &self,
        request: FetchRequest,
        _deadline: Instant,
    ) -> BoxFuture<'static, Result<FetchResponse, FetchError>> {
        self.0.lock().unwrap().push(request.url.clone());
        let answer = match request.url.strip_prefix("tool:").and_then(|rest| rest.split_once('/')) {
            Some(("missing", _)) => Ok(json!({"ok": false, "error": {"code": "NOT_FOUND", "message": "no server"}})),
            Some((server, tool)) => {
                let args: Value = serde_json::from_slice(request.body.as_deref().unwrap_or(b"null")).unwrap();
                Ok(json!({"ok": true, "value": {"server": server, "tool": tool, "args": args}}))
            }
            None => Err(FetchError::Denied(format!("a script cannot fetch {}", request.url))),
        };
        Box::pin(async move {
            answer.map(|body| FetchResponse {
                status: 200,
                status_text: "OK".into(),
                url: String::new(),
                redirected: false,
                headers: Vec::new(),
                body: body.to_string().into(),
            })
        })
    }
}

fn run_script(code: &str, input: Value, host: &ToolEcho) -> Completion {
    execute(Invocation {
        handler: code.into(),
        arguments: input,
        limits: fast_limits(),
        fetch: Arc::new(host.clone()),
        program: Program::Script { tools: r#"{"geo": ["lookup"], "my-server": ["echo"], "missing": ["x"]}"#.into() },
    })
}

fn script_value(completion: &Completion) -> &Value {
    assert_eq!(completion.outcome, Outcome::Ok, "{completion:?}");
    completion.result.structured_content.as_ref().expect("structured content")
}

#[test]
fn a_script_calls_tools_through_call_tool_and_the_stubs() {
    let host = ToolEcho::default();
    let c = run_script(
        "const a = await call_tool('geo', 'lookup', {q: input.city});\n\
         const b = await tools['my-server'].echo({n: 2});\n\
         const missing = await call_tool('missing', 'x', {});\n\
         return {a, b, missing, input};",
        json!({"city": "Oslo"}),
        &host,
    );
    assert_eq!(
        script_value(&c),
        &json!({"value": {
            "a": {"ok": true, "value": {"server": "geo", "tool": "lookup", "args": {"q": "Oslo"}}},
            "b": {"server": "my-server", "tool": "echo", "args": {"n": 2}},
            "missing": {"ok": false, "error": {"code": "NOT_FOUND", "message": "no server"}},
            "input": {"city": "Oslo"},
        }})
    );
    assert_eq!(*host.0.lock().unwrap(), ["tool:geo/lookup", "tool:my-server/echo", "tool:missing/x"]);
}

#[test]
fn a_script_has_no_fetch_and_its_stubs_throw_tool_errors_at_the_calling_line() {
    let host = ToolEcho::default();
    let c = run_script("return [typeof fetch, typeof call_tool, typeof tools.geo.lookup];", json!({}), &host);
    assert_eq!(script_value(&c), &json!({"value": ["undefined", "function", "function"]}));

    let c = run_script("const x = 1;\nawait fetch('https://example.com/');", json!({}), &host);
    let thrown = script_value(&c);
    assert!(thrown["thrown"].as_str().unwrap().starts_with("ReferenceError") && thrown["line"] == 2, "{thrown}");
    assert!(thrown["stack"].as_str().unwrap().contains("script:2"), "{thrown}");
    assert!(host.0.lock().unwrap().is_empty(), "nothing left the script");

    let host = ToolEcho::default();
    let code = "const bad = [await call_tool(1, 'x'), await call_tool('geo', 'lookup', [1])];\n\
                try {\n\
                  await tools.missing.x({});\n\
                } catch (e) {\n\
                  return {bad: bad.map((r) => r.error.code), name: e.name, code: e.code, message: e.message, stack: e.stack};\n\
                }";
    let c = run_script(code, json!({}), &host);
    let value = &script_value(&c)["value"];
    assert_eq!(value["bad"], json!(["INVALID_ARGUMENTS", "INVALID_ARGUMENTS"]));
    assert_eq!((&value["name"], &value["code"]), (&json!("ToolError"), &json!("NOT_FOUND")));
    assert_eq!(value["message"], "missing.x: no server");
    assert!(value["stack"].as_str().unwrap().contains("handler:4"), "{value}");
}

#[test]
fn a_script_result_must_be_json() {
    let host = ToolEcho::default();
    let cases = [
        ("return () => 1;", "the result is a function"),
        ("return {a: {b: Symbol('s')}};", "the value at key \"b\" is a symbol"),
        ("const o = {}; o.self = o; return o;", "circular"),
        ("return {n: 10n};", "BigInt"),
    ];
    for (code, needle) in cases {
        let c = run_script(code, json!({}), &host);
        let reason = script_value(&c)["unserialisable"].as_str().unwrap_or_default().to_owned();
        assert!(reason.to_lowercase().contains(&needle.to_lowercase()), "{code}: {reason:?} lacks {needle:?}");
    }
    let c = run_script("const x = 1;", json!({}), &host);
    assert_eq!(script_value(&c), &json!({}), "nothing returned");
}

#[test]
fn the_webassembly_engine_runs_handlers_in_a_fresh_instance() {
    let engine = WasmEngine::process_wide().expect("the WebAssembly engine builds");
    let run = |handler: &str| {
        let engine = Arc::clone(&engine);
        let invocation = invocation(handler, json!({"a": 2, "b": 3}), SandboxLimits::default(), &FakeHost::default());
        std::thread::spawn(move || drive(engine.execute(invocation, host_context()))).join().unwrap()
    };
    let c = run(
        "globalThis.leak = (globalThis.leak || 0) + 1; return {sum: args.a + args.b, leak: globalThis.leak, r: typeof Math.random()};",
    );
    assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    assert_eq!(c.result.structured_content, Some(json!({"sum": 5, "leak": 1, "r": "number"})));
    // Nothing of the first call is visible to the second, and the random sequence differs.
    let c = run("return [globalThis.leak, Math.random()];");
    let first = run("return Math.random();");
    assert_eq!(c.result.structured_content, None);
    assert!(c.result.content[0]["text"].as_str().unwrap().contains("null"), "{c:?}");
    assert_ne!(first.result.content, run("return Math.random();").result.content);
    assert_eq!(engine.name(), "quickjs-wasm");
}

#[test]
fn the_compiled_engine_is_kept_between_starts_and_a_damaged_or_exposed_cache_is_not_trusted() {
    use super::{CacheUse, CompileCache, WasmEngine};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let cache = CompileCache::at(&cache_dir);
    let sum = |engine: WasmEngine| {
        let engine = Arc::new(engine);
        let invocation = invocation(
            "return {sum: args.a + args.b};",
            json!({"a": 2, "b": 3}),
            SandboxLimits::default(),
            &FakeHost::default(),
        );
        let c = std::thread::spawn(move || drive(engine.execute(invocation, host_context()))).join().unwrap();
        c.result.structured_content
    };

    // Each engine reserves address space for its slots: few slots, and one engine at a time.
    assert_eq!(WasmEngine::build(&cache, 8).expect("builds").cache_use(), CacheUse::Stored);
    assert_eq!(std::fs::metadata(&cache_dir).unwrap().permissions().mode() & 0o777, 0o700);
    let second = WasmEngine::build(&cache, 8).expect("loads");
    assert_eq!(second.cache_use(), CacheUse::Loaded);
    assert_eq!(sum(second), Some(json!({"sum": 5})));

    // A damaged module is rebuilt and replaced, not loaded.
    let module = cache_dir.join("quickjs.cwasm");
    let mut bytes = std::fs::read(&module).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&module, &bytes).unwrap();
    let rebuilt = WasmEngine::build(&cache, 8).expect("rebuilds");
    assert_eq!(rebuilt.cache_use(), CacheUse::Stored);
    assert_eq!(sum(rebuilt), Some(json!({"sum": 5})));
    assert_eq!(WasmEngine::build(&cache, 8).unwrap().cache_use(), CacheUse::Loaded);

    // A directory others may write is not used, for reading or writing.
    std::fs::set_permissions(&cache_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let exposed = WasmEngine::build(&cache, 8).expect("builds without the cache");
    assert_eq!(exposed.cache_use(), CacheUse::Unusable);
    assert_eq!(sum(exposed), Some(json!({"sum": 5})));

    // Settings: "off", a directory, and the default locations.
    assert_eq!(CompileCache::from_setting("off"), CompileCache::off());
    assert_eq!(CompileCache::from_setting("/var/cache/x").dir(), Some(std::path::Path::new("/var/cache/x")));
}

#[test]
fn a_handler_read_back_from_its_bytecode_behaves_as_when_compiled() {
    let host = FakeHost::default();
    let handler = "const x = args.n * 2;\nif (x > 10) throw new TypeError('too big: ' + x);\nreturn {x, s: `${x}`};";
    let run = |n: i64| execute(invocation(handler, json!({"n": n}), SandboxLimits::default(), &host));
    // The first call compiles; the later ones read the bytecode it left.
    let first = (run(2), run(9));
    for _ in 0..3 {
        let again = (run(2), run(9));
        assert_eq!(again.0.result.structured_content, first.0.result.structured_content);
        assert_eq!(again.0.result.structured_content, Some(json!({"x": 4, "s": "4"})));
        assert_eq!(again.1.result.content, first.1.result.content, "the error and its line read the same");
        let text = again.1.result.content[0]["text"].as_str().unwrap_or_default().to_owned();
        assert!(text.contains("too big: 18") && text.contains("line 2"), "{text}");
    }
}
