//! Human output of the client commands: tables, the server summary, tool results, the MCP client
//! config snippet. Pure functions from the API's bodies (`api::model`) to text, so they are easy
//! to test; fields the daemon did not fill are left out rather than shown empty.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::api::model::{
    AuthMode, AuthSet, CallEntry, CallList, CallResult, ConnectionList, GenerationView, LimitsView, ScriptResult,
    ServerList, ServerView, ToolView, VersionDiff, VersionList,
};
use crate::states::GenerationSource;

/// Writes to stdout, ignoring a closed pipe (`mcpbootd list | head -1`) instead of panicking.
pub fn print_out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = stdout.write_all(b"\n");
    }
    let _ = stdout.flush();
}

/// `--json` output: the API's body, pretty.
pub fn pretty(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `list`: ID, NAME, STATUS, TOOLS, CALLS 1H (errors in brackets), MCP PATH, CREATED.
pub fn servers_table(body: &ServerList) -> String {
    if body.servers.is_empty() {
        return "no servers; register one with `mcpbootd register`\n".into();
    }
    let rows = body
        .servers
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                s.name.clone(),
                s.status.to_string(),
                s.tool_count.to_string(),
                match s.errors_last_hour {
                    0 => s.calls_last_hour.to_string(),
                    errors => format!("{} ({errors} failed)", s.calls_last_hour),
                },
                s.mcp_path.clone(),
                timestamp(&s.created_at),
            ]
        })
        .collect();
    table(&["ID", "NAME", "STATUS", "TOOLS", "CALLS 1H", "MCP PATH", "CREATED"], rows)
}

/// `versions`: VERSION (`*` active), STATUS, TRIGGER, TOOLS, SELF-TEST, CREATED.
pub fn versions_table(body: &VersionList) -> String {
    if body.versions.is_empty() {
        return "no versions\n".into();
    }
    let rows = body
        .versions
        .iter()
        .map(|v| {
            let self_test: Vec<String> = v.self_test.iter().map(|(status, n)| format!("{n} {status}")).collect();
            vec![
                format!("{}{}", v.version, if v.active { " *" } else { "" }),
                v.status.to_string(),
                v.triggered_by.to_string(),
                shorten(&v.tools.join(", "), 60),
                self_test.join(", "),
                timestamp(&v.created_at),
            ]
        })
        .collect();
    let mut text = table(&["VERSION", "STATUS", "TRIGGER", "TOOLS", "SELF-TEST", "CREATED"], rows);
    text.push_str("* serving\n");
    text
}

/// `diff`: tools added, removed, renamed and changed, with unified handler diffs; `colour`
/// marks removals red, additions green and hunks cyan (ANSI, for a terminal).
pub fn version_diff(diff: &VersionDiff, colour: bool) -> String {
    let paint = |code: &str, line: &str| if colour { format!("\x1b[{code}m{line}\x1b[0m") } else { line.to_string() };
    let mut out = format!("version {} → {}\n", diff.from, diff.to);
    for name in &diff.added {
        out.push_str(&paint("32", &format!("+ tool {name}")));
        out.push('\n');
    }
    for name in &diff.removed {
        out.push_str(&paint("31", &format!("- tool {name}")));
        out.push('\n');
    }
    for renamed in &diff.renamed {
        out.push_str(&format!("~ tool {} renamed to {}\n", renamed.from, renamed.to));
    }
    for (label, domains, code) in
        [("+ domain", &diff.whitelist_added, "32"), ("- domain", &diff.whitelist_removed, "31")]
    {
        for domain in domains {
            out.push_str(&paint(code, &format!("{label} {domain}")));
            out.push('\n');
        }
    }
    for (label, names, code) in
        [("+ credential", &diff.credentials_added, "32"), ("- credential", &diff.credentials_removed, "31")]
    {
        for name in names {
            out.push_str(&paint(code, &format!("{label} {name}")));
            out.push('\n');
        }
    }
    for change in &diff.changed {
        out.push_str(&format!("\n~ tool {}\n", change.name));
        for (what, text) in [("title", &change.title), ("description", &change.description)] {
            if let Some(text) = text {
                out.push_str(&paint("31", &format!("  - {what}: {}", text.from.as_deref().unwrap_or(""))));
                out.push('\n');
                out.push_str(&paint("32", &format!("  + {what}: {}", text.to.as_deref().unwrap_or(""))));
                out.push('\n');
            }
        }
        for (what, changes) in [
            ("input_schema", &change.input_schema),
            ("output_schema", &change.output_schema),
            ("annotations", &change.annotations),
        ] {
            for c in changes {
                let value = |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string()).unwrap_or_default();
                let line = match c.op.as_str() {
                    "add" => paint("32", &format!("  + {what}{}: {}", c.path, value(&c.to))),
                    "remove" => paint("31", &format!("  - {what}{}: {}", c.path, value(&c.from))),
                    _ => format!("  ~ {what}{}: {} → {}", c.path, value(&c.from), value(&c.to)),
                };
                out.push_str(&line);
                out.push('\n');
            }
        }
        if let Some(handler) = &change.handler {
            for line in handler.lines() {
                let code = match line.as_bytes().first() {
                    _ if line.starts_with("---") || line.starts_with("+++") => "1",
                    Some(b'+') => "32",
                    Some(b'-') => "31",
                    Some(b'@') => "36",
                    _ => "",
                };
                out.push_str(&if code.is_empty() { line.to_string() } else { paint(code, line) });
                out.push('\n');
            }
        }
    }
    if diff.added.is_empty() && diff.removed.is_empty() && diff.renamed.is_empty() && diff.changed.is_empty() {
        out.push_str("no tool changed\n");
    }
    out
}

/// `calls`: TIME, TOOL, OUTCOME, DURATION, FETCHES, ERROR (first line).
pub fn calls_table(body: &CallList) -> String {
    if body.calls.is_empty() {
        return "no calls yet\n".into();
    }
    let with_callers = body.calls.iter().any(|call| call.subject.is_some());
    let rows = body
        .calls
        .iter()
        .map(|c| {
            let duration = u64::try_from(c.duration_us).map(micros).unwrap_or_default();
            let error = c.error.as_deref().map(|e| shorten(e.lines().next().unwrap_or(""), 100)).unwrap_or_default();
            let mut row =
                vec![timestamp(&c.started_at), c.tool.clone(), c.outcome.to_string(), duration, c.fetches.to_string()];
            if with_callers {
                row.push(caller(c));
            }
            row.push(error);
            row
        })
        .collect();
    if with_callers {
        table(&["TIME", "TOOL", "OUTCOME", "DURATION", "FETCHES", "CALLER", "ERROR"], rows)
    } else {
        table(&["TIME", "TOOL", "OUTCOME", "DURATION", "FETCHES", "ERROR"], rows)
    }
}

/// `connections <id>`: ID, CREDENTIAL, SUBJECT, SCOPES, CONNECTED, EXPIRES, LAST USED (the subject
/// comes from the identity provider: control characters are left out before it reaches a terminal).
pub fn connections_table(body: &ConnectionList) -> String {
    let plain = |text: &str| text.chars().filter(|c| !c.is_control()).collect::<String>();
    let when = |millis: Option<i64>| match millis {
        Some(millis) => timestamp(
            &humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64))
                .to_string(),
        ),
        None => "-".to_string(),
    };
    let rows = body
        .connections
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                plain(&c.credential),
                plain(&c.subject),
                if c.scopes.is_empty() { "-".into() } else { plain(&c.scopes) },
                when(Some(c.connected_at)),
                when(c.expires_at),
                when(c.last_used_at),
            ]
        })
        .collect();
    table(&["ID", "CREDENTIAL", "SUBJECT", "SCOPES", "CONNECTED", "EXPIRES", "LAST USED"], rows)
}

/// `limits <id>`: each limit as it applies, and whether the server or the default sets it.
pub fn limits_summary(view: &LimitsView) -> String {
    let row = |name: &str, own: Option<u32>, effective: u32| {
        let value = if effective == 0 { "off".to_string() } else { effective.to_string() };
        let from = if own.is_some() { "set for this server" } else { "daemon default" };
        vec![name.to_string(), value, from.to_string()]
    };
    let own = &view.limits;
    let effective = &view.effective;
    let mut rows = vec![
        row("per_caller_per_minute", own.per_caller_per_minute, effective.per_caller_per_minute),
        row("per_server_per_minute", own.per_server_per_minute, effective.per_server_per_minute),
        row("per_tool_per_minute", own.per_tool_per_minute, effective.per_tool_per_minute),
        row("per_caller_concurrency", own.per_caller_concurrency, effective.per_caller_concurrency),
    ];
    for (origin, limit) in &own.upstream {
        rows.push(vec![
            format!("upstream {origin}"),
            format!("{} per minute", limit.per_minute),
            "set for this server".into(),
        ]);
    }
    table(&["LIMIT", "VALUE", "FROM"], rows)
}

/// Who made a call with an OAuth token: its subject, and the client it used (control characters
/// left out: these come from the identity provider and reach a terminal).
fn caller(call: &CallEntry) -> String {
    let plain = |text: &str| text.chars().filter(|c| !c.is_control()).collect::<String>();
    match (&call.subject, &call.client_id) {
        (Some(subject), Some(client)) => format!("{} via {}", plain(subject), plain(client)),
        (Some(subject), None) => plain(subject),
        (None, _) => "-".into(),
    }
}

/// `auth <id> …`: the mode now in force, in words.
pub fn auth_summary(set: &AuthSet) -> String {
    let mode = match set.auth.mode {
        AuthMode::OAuth if set.auth.scopes.is_empty() => "OAuth sign-in at the identity provider".to_string(),
        AuthMode::OAuth => format!("OAuth sign-in; tokens need {}", set.auth.scopes.join(" ")),
        AuthMode::AccessToken => "its static access token".to_string(),
        AuthMode::Open => "open to any client that reaches the daemon".to_string(),
    };
    let default = if set.auth.source == "default" { " (the daemon's default, [auth.oauth] required)" } else { "" };
    let removed = if set.access_token_removed { "; its static access token was removed" } else { "" };
    format!("{}: {mode}{default}{removed}\n", set.id)
}

/// `show`: status, error, prompt, whitelist with provenance, refused domains, tools with their
/// self-tests, and the generation's metadata (plus the newest attempt when it is not the one
/// serving, e.g. a failed or running regeneration).
pub fn server_summary(view: &ServerView, mcp_url: &str) -> String {
    let mut out = String::new();
    let latest = view.latest_generation.as_ref();
    let active = view.generation.as_ref();
    field(&mut out, "id", view.id.as_str());
    field(&mut out, "name", &view.name);
    field(&mut out, "kind", view.kind.as_str());
    field(&mut out, "status", view.status.as_str());
    if let Some(error) = latest.or(active).and_then(|g| g.error.as_deref()) {
        field(&mut out, "error", error);
    }
    let note = if view.serving { "" } else { "  (not serving yet)" };
    field(&mut out, "mcp url", &format!("{mcp_url}{note}"));
    let scopes = view.auth.scopes.join(" ");
    let default = if view.auth.source == "default" { " ([auth.oauth] required)" } else { "" };
    let auth = match view.auth.mode {
        AuthMode::OAuth if scopes.is_empty() => {
            format!("OAuth: hosts sign the user in at the identity provider{default}")
        }
        AuthMode::OAuth => {
            format!("OAuth: hosts sign the user in at the identity provider; tokens need {scopes}{default}")
        }
        _ if view.access_token_set => {
            "static token: MCP hosts send Authorization: Bearer <access_token> (`mcpbootd register` prints the config)"
                .to_string()
        }
        _ => "open: any client that reaches the daemon may call the tools".to_string(),
    };
    field(&mut out, "auth", &auth);
    if !view.credentials.is_empty() {
        let names = format!("{} (added by the daemon to matching requests)", view.credentials.join(", "));
        field(&mut out, "credentials", &names);
    }
    if let Some(description) = &view.description {
        field(&mut out, "description", &description.trim().replace('\n', "\n             "));
    }
    if let Some(required) = view.require_approval {
        field(&mut out, "approval", if required { "required for new versions" } else { "not required" });
    }
    if let Some(drift) = &view.drift {
        let mut text = format!("{} (checked {})", drift.status, timestamp(&drift.checked_at));
        if let Some(error) = &drift.error {
            text.push_str(&format!(": {}", first_line(error)));
        }
        field(&mut out, "docs drift", &text);
    }
    field(&mut out, "created", &timestamp(&view.created_at));
    field(&mut out, "updated", &timestamp(&view.updated_at));
    if let Some(prompt) = &view.prompt {
        field(&mut out, "prompt", &prompt.trim().replace('\n', "\n             "));
    }

    if view.whitelist.is_empty() {
        if !view.allow_domains.is_empty() {
            field(&mut out, "allowed", &view.allow_domains.join(", "));
        }
    } else {
        let _ = writeln!(out, "\nwhitelist:");
        let rows = view
            .whitelist
            .iter()
            .map(|w| vec![w.domain.clone(), label(&w.source), w.detail.clone().unwrap_or_default()])
            .collect();
        indent(&mut out, &table(&["DOMAIN", "SOURCE", "DETAIL"], rows));
    }
    if let Some(refused) = latest.or(active).map(|g| &g.refused_domains).filter(|r| !r.is_empty()) {
        let _ = writeln!(out, "\nrefused domains:");
        let rows = refused
            .iter()
            .map(|r| vec![r.domain.clone(), label(&r.source), r.reason.clone(), r.detail.clone().unwrap_or_default()])
            .collect();
        indent(&mut out, &table(&["DOMAIN", "SOURCE", "REASON", "DETAIL"], rows));
    }

    if !view.tools.is_empty() {
        let _ = writeln!(out, "\ntools ({}):", view.tools.len());
        tool_list(&mut out, &view.tools);
    }
    if let Some(generation) = active {
        let _ = writeln!(
            out,
            "\nversion {} (generation {}, {}, serving; {}):",
            generation.version, generation.id, generation.status, generation.triggered_by
        );
        generation_details(&mut out, generation);
    }
    if let Some(generation) = latest {
        let _ = writeln!(
            out,
            "\nlatest version {} (generation {}, {}; {}):",
            generation.version, generation.id, generation.status, generation.triggered_by
        );
        generation_details(&mut out, generation);
        if !view.serving {
            let planned = planned_tools(generation);
            if !planned.is_empty() {
                let _ = writeln!(out, "  planned tools:");
                for (name, description) in planned {
                    let _ = writeln!(out, "    {name}  {description}");
                }
            }
        }
    }
    out
}

/// `call`: the text items of the result, other items described, and `structuredContent`
/// pretty when the text does not already say the same.
/// A script's result: the value (or the error with its stack), then one line per tool call.
pub fn script_result(result: &ScriptResult) -> String {
    let mut out = String::new();
    match (&result.value, &result.error) {
        (_, Some(error)) => {
            let _ = writeln!(out, "error {}: {}", error.code, error.message);
            if let Some(stack) = error.stack.as_deref().filter(|s| !s.is_empty()) {
                let _ = writeln!(out, "{stack}");
            }
        }
        (Some(value), None) => {
            let _ = writeln!(out, "{}", serde_json::to_string_pretty(value).unwrap_or_default());
        }
        (None, None) => out.push_str("null\n"),
    }
    if !result.console.is_empty() {
        let _ = write!(out, "console:\n{}", result.console);
    }
    if !result.calls.is_empty() {
        let _ = writeln!(out, "tool calls ({}):", result.calls.len());
        for call in &result.calls {
            let status = match call.error_code {
                None => "ok".to_string(),
                Some(code) => code.to_string(),
            };
            let _ = writeln!(out, "  {}.{}  {status}  {:.1} ms", call.server, call.tool, call.duration_ms);
        }
    }
    let _ = writeln!(out, "execution {}", result.execution_id);
    out
}

pub fn call_result(response: &CallResult) -> String {
    let result = &response.result;
    let mut out = String::new();
    let mut texts = Vec::new();
    for item in &result.content {
        match item["type"].as_str() {
            Some("text") => {
                let t = item["text"].as_str().unwrap_or_default();
                texts.push(t);
                out.push_str(t);
            }
            Some(kind @ ("image" | "audio")) => {
                let size = item["data"].as_str().map(|d| d.len() * 3 / 4).unwrap_or(0);
                let _ = write!(out, "[{kind}: {}, {size} bytes]", text(&item["mimeType"]));
            }
            Some("resource_link") => {
                let _ = write!(out, "[resource link: {}]", text(&item["uri"]));
            }
            Some("resource") => {
                let resource = &item["resource"];
                match resource["text"].as_str() {
                    Some(t) => out.push_str(t),
                    None => {
                        let _ = write!(out, "[resource: {}]", text(&resource["uri"]));
                    }
                }
            }
            _ => out.push_str(&item.to_string()),
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    if let Some(structured) = result.structured_content.as_ref().filter(|s| !s.is_null()) {
        let repeated = texts.iter().any(|t| serde_json::from_str::<Value>(t).is_ok_and(|v| &v == structured));
        if !repeated {
            let _ = writeln!(out, "structured content:\n{}", pretty(structured));
        }
    }
    out
}

/// The ready-to-paste MCP host configuration for one server (`url` transport).
pub fn mcp_config(id: &str, mcp_url: &str, token_required: bool) -> Value {
    if token_required {
        json!({"mcpServers": {id: {"url": mcp_url, "headers": {"Authorization": format!("Bearer {TOKEN_PLACEHOLDER}")}}}})
    } else {
        json!({"mcpServers": {id: {"url": mcp_url}}})
    }
}

/// Stands for the server's access token in printed configs: the daemon keeps only its digest,
/// and a secret does not belong in terminal output anyway.
const TOKEN_PLACEHOLDER: &str = "<access_token>";

/// The end of a successful registration: where MCP hosts connect and the config to paste.
pub fn connect_block(id: &str, mcp_url: &str, token_required: bool) -> String {
    let mut block =
        format!("MCP URL: {mcp_url}\n\nMCP client config:\n{}\n", pretty(&mcp_config(id, mcp_url, token_required)));
    if token_required {
        block.push_str(&format!(
            "\nThe server requires its access token: replace {TOKEN_PLACEHOLDER} with the access_token it was \
             registered with.\n"
        ));
    }
    block
}

/// `name: description` of the tools a generation's plan holds (a dry run mounts none).
pub fn planned_tools(generation: &GenerationView) -> Vec<(String, String)> {
    let Some(plan) = &generation.plan else { return Vec::new() };
    array(&plan["tools"]).iter().map(|t| (text(&t["name"]), first_line(&text(&t["description"])))).collect()
}

/// The generation with this id in a server view (serving or newest), if the view has it.
pub fn generation_by_id(view: &ServerView, id: Option<i64>) -> Option<&GenerationView> {
    let mut candidates = [view.latest_generation.as_ref(), view.generation.as_ref()].into_iter().flatten();
    match id {
        Some(id) => candidates.find(|g| g.id == id),
        None => candidates.next(),
    }
}

/// A wall time the way the progress display shows it: `0.4s`, `12s`, `2m05s`.
pub fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.1}s")
    } else if secs < 60.0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}m{:02}s", duration.as_secs() / 60, duration.as_secs() % 60)
    }
}

fn tool_list(out: &mut String, tools: &[ToolView]) {
    let width = tools.iter().map(|t| t.tool.name.chars().count()).max().unwrap_or(0);
    for tool in tools {
        let name = &tool.tool.name;
        let _ = writeln!(out, "  {name:<width$}  {}", first_line(&tool.tool.description));
        if let Some(test) = tool.self_test.as_ref().filter(|t| t.is_object()) {
            let status = text(&test["status"]);
            let detail = test["error"].as_str().or(test["reason"].as_str()).map(|d| format!(": {}", first_line(d)));
            let repaired =
                if status == "passed" && test["attempts"].as_u64() > Some(1) { " after a repair" } else { "" };
            let _ = writeln!(out, "  {:<width$}  self-test: {status}{repaired}{}", "", detail.unwrap_or_default());
        }
        if let Some(health) = tool.health.as_ref().filter(|h| h.degraded) {
            let _ = writeln!(
                out,
                "  {:<width$}  DEGRADED: {} of its last {} calls failed; repair it with `mcpbootd regenerate <id> \
                 --tool {name} --with-failures`",
                "", health.failures, health.calls
            );
        }
    }
}

fn generation_details(out: &mut String, g: &GenerationView) {
    let mut facts = Vec::new();
    if let Some(model) = &g.model {
        facts.push(format!("model {model}"));
    }
    if g.source == GenerationSource::Toolset {
        facts.push("registered as a toolset".into());
    } else {
        let cache = match g.cached_from {
            Some(from) => format!("cache hit (from generation {from})"),
            None if g.cache_hit => "cache hit".into(),
            None => "cache miss".into(),
        };
        facts.push(cache);
        let tokens = &g.tokens;
        facts.push(format!("{} tokens in, {} out, {} LLM requests", tokens.input, tokens.output, tokens.requests));
    }
    if g.dry_run {
        facts.push("dry run".into());
    }
    let _ = writeln!(out, "  {}", facts.join(" · "));
    if let Some(error) = &g.error {
        let _ = writeln!(out, "  error: {error}");
    }
    if !g.timings.is_empty() {
        let mut parts: Vec<String> = g
            .timings
            .iter()
            .filter(|(k, _)| k.as_str() != "total_ms")
            .map(|(k, v)| format!("{} {}", k.trim_end_matches("_ms"), millis(v)))
            .collect();
        if let Some(total) = g.timings.get("total_ms") {
            parts.push(format!("total {}", millis(total)));
        }
        let _ = writeln!(out, "  timings: {}", parts.join(" · "));
    }
    let started = timestamp(&g.created_at);
    if !started.is_empty() {
        let until = g.finished_at.as_deref().map(|f| format!(", finished {}", timestamp(f))).unwrap_or_default();
        let _ = writeln!(out, "  started {started}{until}");
    }
    if !g.documents.is_empty() {
        let _ = writeln!(out, "  documents:");
        for d in &g.documents {
            let mut notes = vec![format!("{} chars", d.chars)];
            if d.truncated {
                notes.push("truncated".into());
            }
            if d.summarised {
                notes.push("summarised".into());
            }
            let _ = writeln!(out, "    {}  ({})", d.url, notes.join(", "));
        }
    }
    if !g.warnings.is_empty() {
        let _ = writeln!(out, "  warnings:");
        for w in &g.warnings {
            let _ = writeln!(out, "    - {w}");
        }
    }
}

/// Columns padded to their widest cell, two spaces apart; the last column is not padded.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn field(out: &mut String, label: &str, value: &str) {
    if !value.is_empty() {
        let _ = writeln!(out, "{:<11}  {value}", format!("{label}:"));
    }
}

fn indent(out: &mut String, block: &str) {
    for line in block.lines() {
        let _ = writeln!(out, "  {line}");
    }
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A JSON scalar as a table cell: strings without quotes, null as empty.
fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `2025-01-02T03:04:05.678Z` as `2025-01-02 03:04:05`; anything else as it is.
fn timestamp(raw: &str) -> String {
    match (raw.get(..10), raw.get(10..11), raw.get(11..19)) {
        (Some(date), Some("T"), Some(time)) if raw.ends_with('Z') => format!("{date} {time}"),
        _ => raw.to_string(),
    }
}

/// A value that serialises as a string (a spelled-once enum), as that string.
fn label(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn micros(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..1_000_000 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

fn millis(value: &Value) -> String {
    match value.as_u64() {
        Some(ms) if ms < 1_000 => format!("{ms}ms"),
        Some(ms) => format!("{:.1}s", ms as f64 / 1e3),
        None => text(value),
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;

    use super::*;

    #[test]
    fn a_version_diff_is_coloured_only_for_a_terminal() {
        let diff: VersionDiff = body(serde_json::json!({
            "from": 1, "to": 2, "added": ["search"], "removed": [], "renamed": [{"from": "get", "to": "get_item"}],
            "changed": [{"name": "get_item", "handler": "--- before\n+++ after\n@@ -1 +1 @@\n-return 1;\n+return 2;\n",
                         "input_schema": [{"op": "replace", "path": "/properties/id/type", "from": "integer", "to": "string"}]}],
            "whitelist_added": [], "whitelist_removed": ["api.old.test"], "credentials_added": [], "credentials_removed": []
        }));
        let plain = version_diff(&diff, false);
        assert!(!plain.contains('\x1b'), "{plain}");
        for line in [
            "+ tool search",
            "~ tool get renamed to get_item",
            "- domain api.old.test",
            "~ tool get_item",
            "  ~ input_schema/properties/id/type: \"integer\" → \"string\"",
            "-return 1;",
            "+return 2;",
        ] {
            assert!(plain.contains(line), "{line:?} missing from:\n{plain}");
        }
        let coloured = version_diff(&diff, true);
        assert!(coloured.contains("\x1b[31m-return 1;\x1b[0m") && coloured.contains("\x1b[32m+return 2;\x1b[0m"));
        assert!(coloured.contains("\x1b[36m@@ -1 +1 @@\x1b[0m"), "{coloured}");
    }

    /// A body as the daemon would send it.
    fn body<T: DeserializeOwned>(value: Value) -> T {
        serde_path_to_error::deserialize(value).unwrap()
    }

    #[test]
    fn tables_align_columns_and_leave_the_last_one_unpadded() {
        let list: ServerList = body(json!({"servers": [
            {"id": "hn", "name": "Hacker News", "kind": "prompt", "status": "ready", "tool_count": 2,
             "calls_last_hour": 12, "errors_last_hour": 1, "mcp_path": "/servers/hn/mcp", "created_at": "2025-01-02T03:04:05.678Z", "updated_at": "2025-01-02T03:04:05.678Z"},
            {"id": "weather-long", "name": "w", "kind": "prompt", "status": "planning", "tool_count": 0,
             "mcp_path": "/servers/weather-long/mcp", "created_at": "2025-01-02T03:04:06.000Z", "updated_at": "2025-01-02T03:04:06.000Z"},
        ]}));
        let expected = "\
ID            NAME         STATUS    TOOLS  CALLS 1H       MCP PATH                   CREATED
hn            Hacker News  ready     2      12 (1 failed)  /servers/hn/mcp            2025-01-02 03:04:05
weather-long  w            planning  0      0              /servers/weather-long/mcp  2025-01-02 03:04:06
";
        assert_eq!(servers_table(&list), expected);
        assert!(servers_table(&body(json!({"servers": []}))).starts_with("no servers"));
    }

    #[test]
    fn calls_table_shows_durations_and_the_first_error_line() {
        let call = |tool: &str, outcome: &str, duration_us: u64, error: Option<&str>| {
            json!({"execution_id": "e", "generation_id": 1, "tool": tool, "via": "mcp", "started_at": "2025-01-02T03:04:05.678Z",
                   "duration_us": duration_us, "outcome": outcome, "error": error, "fetches": 1, "console": "", "egress": []})
        };
        let list: CallList = body(
            json!({"calls": [call("get", "error", 1500, Some("boom\n    at line 2")), call("add", "ok", 420, None)]}),
        );
        let table = calls_table(&list);
        assert!(table.lines().next().unwrap().starts_with("TIME"), "{table}");
        assert!(table.contains("1.5ms") && table.contains("420µs") && table.contains("boom"), "{table}");
        assert!(!table.contains("at line 2"), "{table}");
    }

    #[test]
    fn call_results_print_text_and_structured_content_once() {
        let structured = json!({"a": 1});
        let response: CallResult = body(json!({"execution_id": "e", "outcome": "ok",
            "result": {"content": [{"type": "text", "text": pretty(&structured)}], "structuredContent": structured, "isError": false}}));
        assert_eq!(call_result(&response), "{\n  \"a\": 1\n}\n");
        let response: CallResult = body(json!({"execution_id": "e", "outcome": "ok",
            "result": {"content": [{"type": "text", "text": "summary"}, {"type": "image", "mimeType": "image/png", "data": "AAAA"}],
                       "structuredContent": {"b": 2}}}));
        assert_eq!(
            call_result(&response),
            "summary\n[image: image/png, 3 bytes]\nstructured content:\n{\n  \"b\": 2\n}\n"
        );
    }

    #[test]
    fn the_config_snippet_names_the_server_and_its_url() {
        let snippet = mcp_config("hn", "http://127.0.0.1:8080/servers/hn/mcp", false);
        assert_eq!(snippet, json!({"mcpServers": {"hn": {"url": "http://127.0.0.1:8080/servers/hn/mcp"}}}));
        let snippet = mcp_config("hn", "http://127.0.0.1:8080/servers/hn/mcp", true);
        assert_eq!(
            snippet,
            json!({"mcpServers": {"hn": {"url": "http://127.0.0.1:8080/servers/hn/mcp",
                                         "headers": {"Authorization": "Bearer <access_token>"}}}})
        );
    }

    #[test]
    fn summaries_show_whitelist_provenance_tools_and_generation_facts() {
        let tool = json!({"name": "get_item", "description": "Fetch one item", "input_schema": {"type": "object"},
                          "handler": "return 1;", "self_test": {"status": "passed", "attempts": 2}});
        let view: ServerView = body(json!({
            "id": "hn", "name": "HN", "kind": "prompt", "status": "ready", "serving": true, "access_token_set": false,
            "mcp_path": "/servers/hn/mcp", "prompt": "Create tools", "allow_domains": [],
            "whitelist": [{"domain": "api.example.com", "source": "prompt"}],
            "tools": [tool],
            "generation": {"id": 3, "source": "llm", "status": "ready", "stage": "ready", "error": null, "dry_run": false,
                           "force": false, "cache_hit": false, "cached_from": null, "prompt_hash": null, "content_hash": null,
                           "model": "m", "generator_version": "v", "tokens": {"input": 10, "output": 5, "requests": 2},
                           "timings": {"planning_ms": 1200, "total_ms": 1500}, "warnings": [], "whitelist": [],
                           "refused_domains": [{"domain": "github.io", "source": "discovered", "reason": "public suffix"}],
                           "documents": [], "plan": null, "tools": [tool], "created_at": "2025-01-02T03:04:05.678Z",
                           "finished_at": null},
            "latest_generation": null,
            "created_at": "2025-01-02T03:04:05.678Z", "updated_at": "2025-01-02T03:04:05.678Z",
        }));
        let summary = server_summary(&view, "http://h/servers/hn/mcp");
        for needle in [
            "status:      ready",
            "api.example.com  prompt",
            "github.io  discovered  public suffix",
            "get_item  Fetch one item",
            "self-test: passed after a repair",
            "cache miss · 10 tokens in, 5 out, 2 LLM requests",
            "timings: planning 1.2s · total 1.5s",
        ] {
            assert!(summary.contains(needle), "{needle:?} missing in\n{summary}");
        }
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(seconds(Duration::from_millis(400)), "0.4s");
        assert_eq!(seconds(Duration::from_secs(12)), "12s");
        assert_eq!(seconds(Duration::from_secs(125)), "2m05s");
    }
}
