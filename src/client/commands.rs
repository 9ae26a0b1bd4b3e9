//! The client commands: each checks its local input, calls the admin API and prints the answer
//! (human text, or the API's JSON with `--json`), and says how the process should exit.
//!
//! Exit codes: 0 ok; 1 the API answered with an error, a tool result is `isError`, or a waited-for
//! generation failed; 2 a local problem (usage, unreadable file, invalid JSON argument); 3 the
//! daemon cannot be reached; 130 interrupted while waiting.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::api::model::{
    OpenApiRegistration, PromptRegistration, RegenerateRequest, Registered, Registration, RejectRequest, ScriptOptions,
    ScriptRequest, ToolsetRegistration,
};
use crate::client::output::{self, print_out};
use crate::client::progress::{self, GenerationEnd};
use crate::client::{AdminClient, ClientError};
use crate::states::Status;
use crate::toolset::{AuthSetting, OperationFilter};

/// What a command needs: the client and the output mode.
pub struct Session {
    pub client: AdminClient,
    pub json: bool,
}

/// Why a command did not succeed, and so which exit code it gets.
#[derive(Debug)]
pub enum Failure {
    /// The request failed (exit 1 or 3, see [`ClientError::exit_code`]).
    Client(ClientError),
    /// A local problem before any request: unreadable file, invalid JSON argument (exit 2).
    Local(String),
    /// The request worked and the outcome is a failure: a tool's `isError`, a failed
    /// generation (exit 1).
    Failed(String),
    /// Ctrl-C while waiting for a generation, which goes on in the daemon (exit 130).
    Interrupted { id: String },
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Client(error) => error.exit_code(),
            Failure::Local(_) => 2,
            Failure::Failed(_) => 1,
            Failure::Interrupted { .. } => 130,
        }
    }

    /// Prints the failure to stderr.
    pub fn report(&self) {
        match self {
            Failure::Client(error) => eprintln!("error: {error}"),
            Failure::Local(message) | Failure::Failed(message) => eprintln!("error: {message}"),
            Failure::Interrupted { id } => {
                eprintln!("stopped waiting; the generation goes on in the daemon (follow it with `mcpbootd show {id}`)")
            }
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Failure {
        Failure::Client(error)
    }
}

/// `register`: a prompt to generate from, or a toolset file.
#[derive(Debug, Default)]
pub struct Register {
    pub prompt: Option<String>,
    /// A registration body (`export` output); `-` reads stdin.
    pub toolset: Option<PathBuf>,
    /// An API description's URL, or a file holding one (`-` reads stdin).
    pub openapi: Option<String>,
    pub operations: OperationFilter,
    pub base_url: Option<String>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub allow_domains: Vec<String>,
    pub dry_run: bool,
    /// Every new version waits for an operator's approval (docs/versions.md).
    pub require_approval: bool,
    pub wait: bool,
}

/// The registration body for `register --openapi`: a URL is passed on, a file is sent inline.
fn openapi_body(register: &Register) -> Result<OpenApiRegistration, Failure> {
    let source = register.openapi.clone().unwrap_or_default();
    let is_url = source.starts_with("http://") || source.starts_with("https://");
    let (openapi, openapi_spec) = if is_url {
        (Some(source), None)
    } else {
        let text = if source == "-" {
            std::io::read_to_string(std::io::stdin())
                .map_err(|e| Failure::Local(format!("could not read the API description from stdin: {e}")))?
        } else {
            std::fs::read_to_string(&source)
                .map_err(|e| Failure::Local(format!("could not read the API description {source}: {e}")))?
        };
        (None, Some(serde_json::Value::String(text)))
    };
    Ok(OpenApiRegistration {
        id: register.id.clone(),
        name: register.name.clone(),
        description: register.description.clone(),
        openapi,
        openapi_spec,
        operations: register.operations.clone(),
        base_url: register.base_url.clone(),
        prompt: register.prompt.clone(),
        allow_domains: register.allow_domains.clone(),
        dry_run: register.dry_run,
        require_approval: register.require_approval.then_some(true),
        ..Default::default()
    })
}

pub async fn register(session: &Session, register: Register) -> Result<(), Failure> {
    let body = match (&register.prompt, &register.toolset) {
        (_, Some(path)) => Registration::Toolset(toolset_body(path, &register)?),
        _ if register.openapi.is_some() => Registration::OpenApi(openapi_body(&register)?),
        (Some(prompt), None) => Registration::Prompt(PromptRegistration {
            id: register.id.clone(),
            name: register.name.clone(),
            description: register.description.clone(),
            prompt: prompt.clone(),
            allow_domains: register.allow_domains.clone(),
            dry_run: register.dry_run,
            access_token: None,
            auth: None,
            credentials: Default::default(),
            code_mode: None,
            require_approval: register.require_approval.then_some(true),
        }),
        (None, None) => return Err(Failure::Local("register needs a prompt or --toolset FILE".into())),
    };
    let token_required = match &body {
        Registration::Toolset(toolset) => toolset.access_token.is_some(),
        Registration::Prompt(prompt) => prompt.access_token.is_some(),
        Registration::OpenApi(described) => described.access_token.is_some(),
    };
    let started = match session.client.register(&body).await? {
        Registered::Toolset(registered) => {
            // Ready at once.
            let id = registered.id.as_str();
            if session.json {
                print_out(&output::pretty(&registered));
            } else {
                let tools = &registered.tools;
                print_out(&format!("registered {id}: ready, {} ({})\n", plural(tools.len(), "tool"), tools.join(", ")));
                print_out(&output::connect_block(id, &session.client.mcp_url(id), token_required));
                for warning in &registered.warnings {
                    eprintln!("warning: {warning}");
                }
            }
            return Ok(());
        }
        Registered::Prompt(started) => started,
    };
    let id = started.id.to_string();
    let generation_id = Some(started.generation_id);
    if register.wait {
        if !session.json {
            eprintln!("registered {id}; generating{}", generation_note(generation_id));
        }
        return wait_and_report(session, &id, generation_id).await;
    }
    if session.json {
        print_out(&output::pretty(&started));
    } else {
        print_out(&format!(
            "registered {id}: generating{} in the background\n\
             follow it with `mcpbootd show {id}` (or register with --wait)\n\
             MCP URL once ready: {}\n",
            generation_note(generation_id),
            session.client.mcp_url(&id),
        ));
    }
    Ok(())
}

/// `list`
pub async fn list(session: &Session) -> Result<(), Failure> {
    let body = session.client.list_servers().await?;
    print_out(&if session.json { output::pretty(&body) } else { output::servers_table(&body) });
    Ok(())
}

/// `show <id>`
pub async fn show(session: &Session, id: &str) -> Result<(), Failure> {
    let view = session.client.server(id).await?;
    let text = if session.json {
        output::pretty(&view)
    } else {
        output::server_summary(&view, &session.client.mcp_url(view.id.as_str()))
    };
    print_out(&text);
    Ok(())
}

/// `call <id> <tool> --args JSON`; `--args @FILE` reads the file, `@-` stdin.
pub async fn call(session: &Session, id: &str, tool: &str, args: &str) -> Result<(), Failure> {
    let arguments = parse_arguments(args)?;
    let response = session.client.call_tool(id, tool, arguments).await?;
    print_out(&if session.json { output::pretty(&response) } else { output::call_result(&response) });
    if response.result.is_error {
        return Err(Failure::Failed(format!(
            "the call of tool {tool:?} failed (outcome {}, execution {}); `mcpbootd calls {id}` shows the call log",
            response.outcome, response.execution_id
        )));
    }
    Ok(())
}

/// What `code exec` was given.
pub struct CodeExec {
    pub code: Option<String>,
    pub file: Option<PathBuf>,
    pub input: Option<String>,
    pub input_file: Option<PathBuf>,
    pub timeout_ms: Option<u64>,
    pub max_tool_calls: Option<u32>,
    pub allowed_servers: Option<Vec<String>>,
}

/// `code exec <id> (--code JS | --file F) [--input JSON | --input-file F] [limits]`
pub async fn code_exec(session: &Session, id: &str, exec: CodeExec) -> Result<(), Failure> {
    let code = match (exec.code, &exec.file) {
        (Some(code), _) => code,
        (None, Some(path)) => {
            read_input(path).map_err(|e| Failure::Local(format!("cannot read --file {}: {e}", path.display())))?
        }
        (None, None) => return Err(Failure::Local("code exec needs --code JS or --file FILE".into())),
    };
    let (text, source) = match (&exec.input, &exec.input_file) {
        (Some(text), _) => (text.clone(), "--input".to_string()),
        (None, Some(path)) => (
            read_input(path)
                .map_err(|e| Failure::Local(format!("cannot read --input-file {}: {e}", path.display())))?,
            format!("--input-file {}", path.display()),
        ),
        (None, None) => ("null".to_string(), String::new()),
    };
    let input: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::Local(format!("{source} is not valid JSON ({e}); e.g. '{{\"city\": \"Oslo\"}}'")))?;
    let allowed_servers =
        exec.allowed_servers.map(|names| names.into_iter().filter(|n| !n.trim().is_empty()).collect());
    let request = ScriptRequest {
        code,
        input,
        options: ScriptOptions { timeout_ms: exec.timeout_ms, max_tool_calls: exec.max_tool_calls, allowed_servers },
    };
    let result = session.client.run_code(id, &request).await?;
    print_out(&if session.json { output::pretty(&result) } else { output::script_result(&result) });
    if let Some(error) = &result.error {
        return Err(Failure::Failed(format!(
            "the script failed ({}: execution {}); `mcpbootd calls {id}` shows its tool calls",
            error.code, result.execution_id
        )));
    }
    Ok(())
}

/// `--since`: `15m` means 15 minutes before now; anything else is passed on as a time, for the
/// daemon to check.
fn since_time(when: &str) -> Result<String, Failure> {
    match humantime::parse_duration(when) {
        Ok(back) => {
            let time = std::time::SystemTime::now().checked_sub(back).ok_or_else(|| {
                Failure::Local(format!("--since {when}: that is before the Unix epoch; try e.g. 15m, 2h or 1d"))
            })?;
            Ok(humantime::format_rfc3339_millis(time).to_string())
        }
        Err(_) => Ok(when.to_string()),
    }
}

/// What `calls` asks for.
#[derive(Debug, Default)]
pub struct CallsFilter {
    pub limit: Option<u32>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    /// A duration back from now (`15m`) or a time (RFC 3339), as the operator typed it.
    pub since: Option<String>,
}

/// `calls <id> [--limit N] [--tool NAME] [--outcome OUTCOME] [--since WHEN]`
pub async fn calls(session: &Session, id: &str, filter: CallsFilter) -> Result<(), Failure> {
    let since = filter.since.as_deref().map(since_time).transpose()?;
    let limit = filter.limit.map(|n| n.to_string());
    let query: Vec<(&str, &str)> = [
        ("limit", limit.as_deref()),
        ("tool", filter.tool.as_deref()),
        ("outcome", filter.outcome.as_deref()),
        ("since", since.as_deref()),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some((key, value?)))
    .collect();
    let body = session.client.calls(id, &query).await?;
    print_out(&if session.json { output::pretty(&body) } else { output::calls_table(&body) });
    Ok(())
}

/// `auth <id> open|oauth|default [--scope S]…`
pub async fn auth(session: &Session, id: &str, mode: &str, scopes: Vec<String>) -> Result<(), Failure> {
    let setting = match mode {
        "open" if scopes.is_empty() => Some(AuthSetting::Open {}),
        "oauth" => Some(AuthSetting::Oauth { scopes }),
        "default" if scopes.is_empty() => None,
        "open" | "default" => return Err(Failure::Local(format!("--scope goes with oauth, not with {mode}"))),
        other => {
            return Err(Failure::Local(format!("unknown auth mode {other:?}: use open, oauth or default")));
        }
    };
    let set = match &setting {
        Some(setting) => session.client.put_auth(id, setting).await?,
        None => session.client.delete_auth(id).await?,
    };
    print_out(&if session.json { output::pretty(&set) } else { output::auth_summary(&set) });
    Ok(())
}

/// `delete <id>`. The API answers 204 without a body; `--json` prints `{"id", "deleted": true}`
/// so scripts always get JSON.
pub async fn delete(session: &Session, id: &str) -> Result<(), Failure> {
    session.client.delete_server(id).await?;
    print_out(&if session.json {
        output::pretty(&json!({"id": id, "deleted": true}))
    } else {
        format!("deleted {id}")
    });
    Ok(())
}

/// `export <id>`: the registration body, always JSON (it is meant for `register --toolset`).
pub async fn export(session: &Session, id: &str) -> Result<(), Failure> {
    let body = session.client.export(id).await?;
    print_out(&output::pretty(&body));
    // The daemon keeps only the token's digest, so the export cannot carry it; say so rather
    // than let a re-registration silently open the server to everyone.
    if session.client.server(id).await.is_ok_and(|view| view.access_token_set) {
        eprintln!(
            "note: {id} requires an access token, which is not exported (the daemon keeps only its digest); \
             add \"access_token\" to the file before registering it again"
        );
    }
    Ok(())
}

/// `versions <id>`
pub async fn versions(session: &Session, id: &str) -> Result<(), Failure> {
    let body = session.client.versions(id).await?;
    print_out(&if session.json { output::pretty(&body) } else { output::versions_table(&body) });
    Ok(())
}

/// `diff <id> <from> <to>`: coloured on a terminal.
pub async fn diff(session: &Session, id: &str, from: i64, to: i64) -> Result<(), Failure> {
    let body = session.client.diff(id, from, to).await?;
    print_out(&if session.json {
        output::pretty(&body)
    } else {
        use std::io::IsTerminal;
        output::version_diff(&body, std::io::stdout().is_terminal())
    });
    Ok(())
}

/// `approve <id> <n>`
pub async fn approve(session: &Session, id: &str, version: i64) -> Result<(), Failure> {
    let changed = session.client.approve(id, version).await?;
    print_out(&if session.json {
        output::pretty(&changed)
    } else {
        format!("{id}: version {version} approved and served")
    });
    Ok(())
}

/// `reject <id> <n> [--reason TEXT]`
pub async fn reject(session: &Session, id: &str, version: i64, reason: Option<String>) -> Result<(), Failure> {
    let changed = session.client.reject(id, version, &RejectRequest { reason }).await?;
    print_out(&if session.json {
        output::pretty(&changed)
    } else {
        let active = changed.active_version.map_or("none".to_string(), |v| v.to_string());
        format!("{id}: version {version} rejected; serving version {active}")
    });
    Ok(())
}

/// `rollback <id> [n]`: to version `n`, or to the newest ready version before the active one.
pub async fn rollback(session: &Session, id: &str, version: Option<i64>) -> Result<(), Failure> {
    let version = match version {
        Some(version) => version,
        None => {
            let list = session.client.versions(id).await?;
            let active = list.active_version.unwrap_or(i64::MAX);
            list.versions
                .iter()
                .rev()
                .find(|v| v.version < active && v.status == Status::Ready)
                .map(|v| v.version)
                .ok_or_else(|| {
                    Failure::Local(format!(
                        "{id} has no ready version before version {active} to roll back to; `mcpbootd versions {id}` \
                         lists them"
                    ))
                })?
        }
    };
    let changed = session.client.activate(id, version).await?;
    print_out(&if session.json { output::pretty(&changed) } else { format!("{id}: serving version {version}") });
    Ok(())
}

/// `check-drift <id>`
pub async fn check_drift(session: &Session, id: &str) -> Result<(), Failure> {
    let report = session.client.check_drift(id).await?;
    print_out(&if session.json {
        output::pretty(&report)
    } else {
        let mut text = format!("{id}: documentation {}", report.drift.status);
        for change in &report.changes {
            text.push_str(&format!("\n  changed: {}", change["url"].as_str().unwrap_or_default()));
        }
        if let Some(error) = &report.drift.error {
            text.push_str(&format!("\n  {error}"));
        }
        if let Some(generation_id) = report.generation_id {
            text.push_str(&format!("\n  candidate version started (generation {generation_id})"));
        }
        text
    });
    Ok(())
}

/// `regenerate <id> [--force] [--dry-run] [--tool NAME]… [--with-failures] [--wait]`
pub async fn regenerate(session: &Session, id: &str, body: RegenerateRequest, wait: bool) -> Result<(), Failure> {
    let started = session.client.regenerate(id, &body).await?;
    let id = started.id.to_string();
    let generation_id = Some(started.generation_id);
    if wait {
        if !session.json {
            eprintln!("regenerating {id}{}", generation_note(generation_id));
        }
        return wait_and_report(session, &id, generation_id).await;
    }
    if session.json {
        print_out(&output::pretty(&started));
    } else {
        print_out(&format!(
            "regenerating {id}{} in the background; the current tools keep serving until it is ready\n\
             follow it with `mcpbootd show {id}` (or regenerate with --wait)\n",
            generation_note(generation_id),
        ));
    }
    Ok(())
}

/// Follows the generation (Ctrl-C stops waiting, not the generation) and prints how it ended.
async fn wait_and_report(session: &Session, id: &str, generation_id: Option<i64>) -> Result<(), Failure> {
    let end = tokio::select! {
        end = progress::follow(&session.client, id, generation_id) => end?,
        _ = tokio::signal::ctrl_c() => return Err(Failure::Interrupted { id: id.to_string() }),
    };
    report_end(session, id, generation_id, &end)
}

fn report_end(session: &Session, id: &str, generation_id: Option<i64>, end: &GenerationEnd) -> Result<(), Failure> {
    if session.json {
        print_out(&output::pretty(&end.view));
    }
    match end.status {
        Status::Failed => {
            let error = end.error.as_deref().unwrap_or("no error recorded");
            if !session.json {
                eprintln!("details: `mcpbootd show {id}`");
            }
            let which = generation_id.map(|g| format!("generation {g}")).unwrap_or_else(|| "the generation".into());
            Err(Failure::Failed(format!("{which} of {id} failed: {error}")))
        }
        _ if session.json => Ok(()),
        Status::AwaitingApproval => {
            let version = output::generation_by_id(&end.view, generation_id).map_or(0, |g| g.version);
            print_out(&format!(
                "version {version} of {id} awaits approval; nothing new is served until it is approved\n\
                 review it with `mcpbootd diff {id} <active> {version}` (or `mcpbootd versions {id}`), then \
                 `mcpbootd approve {id} {version}` or `mcpbootd reject {id} {version} --reason ...`\n"
            ));
            Ok(())
        }
        Status::Planned => {
            let planned =
                output::generation_by_id(&end.view, generation_id).map(output::planned_tools).unwrap_or_default();
            let mut text = format!("planned {id} (dry run): {}; nothing was mounted\n", plural(planned.len(), "tool"));
            for (name, description) in planned {
                text.push_str(&format!("  {name}  {description}\n"));
            }
            text.push_str(&format!("generate it for real with `mcpbootd regenerate {id} --wait`\n"));
            print_out(&text);
            Ok(())
        }
        _ => {
            let tools: Vec<&str> = end.view.tools.iter().map(|t| t.tool.name.as_str()).collect();
            print_out(&format!("{id} is ready: {} ({})\n", plural(tools.len(), "tool"), tools.join(", ")));
            print_out(&output::connect_block(id, &session.client.mcp_url(id), end.view.access_token_set));
            Ok(())
        }
    }
}

/// A toolset file as a registration body, with `--id`, `--name` and `--allow-domain` applied.
fn toolset_body(path: &Path, register: &Register) -> Result<ToolsetRegistration, Failure> {
    let shown = path.display();
    let text = read_input(path).map_err(|e| Failure::Local(format!("cannot read {shown}: {e}")))?;
    let mut body: ToolsetRegistration =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)).map_err(|e| {
            Failure::Local(format!(
                "{shown} is not a toolset like `mcpbootd export` prints \
                 ({{\"id\", \"name\", \"description\", \"allow_domains\", \"tools\"}}): {e}"
            ))
        })?;
    if let Some(id) = &register.id {
        body.id = Some(id.clone());
    }
    if let Some(name) = &register.name {
        body.name = Some(name.clone());
    }
    if let Some(description) = &register.description {
        body.description = Some(description.clone());
    }
    for domain in &register.allow_domains {
        if !body.allow_domains.contains(domain) {
            body.allow_domains.push(domain.clone());
        }
    }
    if !body.credentials.is_empty() {
        // Secret values are not relayed from files by the CLI (it would keep them in a file
        // next to the toolset); they are set one by one, read from stdin.
        return Err(Failure::Local(format!(
            "{shown} holds credentials; remove them from the file and set each after registering with              `mcpbootd credentials set <server> <name> --domain ... --header ...` (the value is read from stdin)"
        )));
    }
    Ok(body)
}

/// `--args`: a JSON object, inline or `@FILE` / `@-`.
fn parse_arguments(raw: &str) -> Result<Value, Failure> {
    let (text, source) = match raw.strip_prefix('@') {
        Some(path) => {
            let text = read_input(Path::new(path))
                .map_err(|e| Failure::Local(format!("cannot read --args file {path}: {e}")))?;
            (text, format!("--args file {path}"))
        }
        None => (raw.to_string(), "--args".to_string()),
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        Failure::Local(format!("{source} is not valid JSON ({e}); expected an object like '{{\"id\": 1}}'"))
    })?;
    if !value.is_object() {
        return Err(Failure::Local(format!("{source} must be a JSON object like '{{\"id\": 1}}', not {value}")));
    }
    Ok(value)
}

/// A file's text; `-` is stdin.
fn read_input(path: &Path) -> std::io::Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

fn generation_note(generation_id: Option<i64>) -> String {
    generation_id.map(|g| format!(" (generation {g})")).unwrap_or_default()
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") }
}

/// `credentials set <id> <name> --domain ... (--header|--query|--basic)`: the value comes from
/// stdin, with a prompt that does not echo when stdin is a terminal.
pub async fn set_credential(
    session: &Session,
    id: &str,
    name: &str,
    domains: Vec<String>,
    inject: Value,
) -> Result<(), Failure> {
    let value = read_secret(name)?;
    let body = json!({"value": value, "domains": domains, "inject": inject});
    let view = session.client.put_credential(id, name, &body).await?;
    if !session.json {
        for warning in &view.warnings {
            eprintln!("warning: {warning}");
        }
    }
    print_out(&if session.json {
        output::pretty(&view)
    } else {
        format!(
            "credential {} of {id} set (fingerprint {}); sent to {}",
            view.name,
            view.fingerprint,
            view.domains.join(", ")
        )
    });
    Ok(())
}

/// `credentials list <id>`
pub async fn list_credentials(session: &Session, id: &str) -> Result<(), Failure> {
    let list = session.client.credentials(id).await?;
    if session.json {
        print_out(&output::pretty(&list));
        return Ok(());
    }
    if list.credentials.is_empty() {
        print_out(&format!("{id} has no credentials; `mcpbootd credentials set {id} NAME --domain ...` adds one"));
        return Ok(());
    }
    let lines: Vec<String> = list
        .credentials
        .iter()
        .map(|c| {
            let how = serde_json::to_string(&c.inject).unwrap_or_default();
            format!("{}  {}  {how}  fingerprint {}", c.name, c.domains.join(","), c.fingerprint)
        })
        .collect();
    print_out(&lines.join("\n"));
    Ok(())
}

/// `credentials delete <id> <name>`
pub async fn delete_credential(session: &Session, id: &str, name: &str) -> Result<(), Failure> {
    session.client.delete_credential(id, name).await?;
    print_out(&if session.json {
        output::pretty(&json!({"id": id, "credential": name, "deleted": true}))
    } else {
        format!("deleted credential {name} of {id}")
    });
    Ok(())
}

/// What `limits <id> --…` changes; nothing set: show only.
pub struct LimitsChange {
    pub per_caller_per_minute: Option<u32>,
    pub per_server_per_minute: Option<u32>,
    pub per_tool_per_minute: Option<u32>,
    pub per_caller_concurrency: Option<u32>,
    /// `ORIGIN=N`.
    pub upstream: Vec<String>,
}

/// `limits <id> [--…]`
pub async fn limits(session: &Session, id: &str, change: LimitsChange) -> Result<(), Failure> {
    let mut view = session.client.limits(id).await?;
    let changes = change.per_caller_per_minute.is_some()
        || change.per_server_per_minute.is_some()
        || change.per_tool_per_minute.is_some()
        || change.per_caller_concurrency.is_some()
        || !change.upstream.is_empty();
    if changes {
        let mut limits = view.limits.clone();
        limits.per_caller_per_minute = change.per_caller_per_minute.or(limits.per_caller_per_minute);
        limits.per_server_per_minute = change.per_server_per_minute.or(limits.per_server_per_minute);
        limits.per_tool_per_minute = change.per_tool_per_minute.or(limits.per_tool_per_minute);
        limits.per_caller_concurrency = change.per_caller_concurrency.or(limits.per_caller_concurrency);
        for entry in &change.upstream {
            let Some((origin, rate)) = entry.rsplit_once('=') else {
                return Err(Failure::Local(format!(
                    "--upstream {entry:?}: write ORIGIN=N, e.g. https://api.github.com=5000"
                )));
            };
            let rate: u32 = rate.parse().map_err(|_| {
                Failure::Local(format!("--upstream {entry:?}: {rate:?} is not a number of requests per minute"))
            })?;
            if rate == 0 {
                limits.upstream.remove(origin);
            } else {
                limits.upstream.insert(origin.to_string(), crate::toolset::UpstreamLimit { per_minute: rate });
            }
        }
        view = session.client.put_limits(id, &limits).await?;
    }
    if session.json {
        print_out(&output::pretty(&view));
    } else {
        print_out(&output::limits_summary(&view));
    }
    Ok(())
}

/// `connections <id>`
pub async fn list_connections(session: &Session, id: &str) -> Result<(), Failure> {
    let list = session.client.connections(id).await?;
    if session.json {
        print_out(&output::pretty(&list));
        return Ok(());
    }
    if list.connections.is_empty() {
        print_out(&format!("{id} has no connected accounts"));
        return Ok(());
    }
    print_out(&output::connections_table(&list));
    Ok(())
}

/// `connections <id> --delete <connection>`
pub async fn delete_connection(session: &Session, id: &str, connection: &str) -> Result<(), Failure> {
    session.client.delete_connection(id, connection).await?;
    print_out(&if session.json {
        output::pretty(&json!({"id": id, "connection": connection, "deleted": true}))
    } else {
        format!("deleted connection {connection} of {id}; its caller connects again on their next call")
    });
    Ok(())
}

/// The secret, from a no-echo prompt on a terminal or the first line of piped stdin.
fn read_secret(name: &str) -> Result<String, Failure> {
    use std::io::IsTerminal;
    let value = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("value of credential {name} (not echoed): "))
            .map_err(|e| Failure::Local(format!("cannot read the value: {e}")))?
    } else {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| Failure::Local(format!("cannot read stdin: {e}")))?;
        text.lines().next().unwrap_or_default().to_string()
    };
    if value.is_empty() {
        return Err(Failure::Local("no value given on stdin".into()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_a_json_object() {
        assert_eq!(parse_arguments("{\"a\": 1}").unwrap(), json!({"a": 1}));
        for bad in ["{", "[1]", "3", "nope"] {
            let error = parse_arguments(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad}");
        }
        assert!(
            matches!(parse_arguments("@/nonexistent/args.json"), Err(Failure::Local(m)) if m.contains("cannot read"))
        );
    }

    #[test]
    fn toolset_files_take_overrides() {
        let dir = std::env::temp_dir().join(format!("mcpbootd-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("toolset.json");
        let tool = json!({"name": "t", "description": "d", "input_schema": {"type": "object"}, "handler": "return 1;"});
        let toolset = json!({"id": "a", "name": "A", "allow_domains": ["x.test"], "tools": [tool]});
        std::fs::write(&file, toolset.to_string()).unwrap();
        let register = Register {
            id: Some("b".into()),
            allow_domains: vec!["x.test".into(), "y.test".into()],
            ..Register::default()
        };
        let body = toolset_body(&file, &register).unwrap();
        let expected = json!({"id": "b", "name": "A", "allow_domains": ["x.test", "y.test"], "tools": [tool]});
        assert_eq!(serde_json::to_value(&body).unwrap(), expected);
        for bad in ["[]", "{\"tools\": [{\"name\": 5}]}", "{"] {
            std::fs::write(&file, bad).unwrap();
            let error = toolset_body(&file, &register).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad}");
        }
        std::fs::write(&file, "{\"tools\": [{\"name\": 5}]}").unwrap();
        let Failure::Local(message) = toolset_body(&file, &register).unwrap_err() else { panic!() };
        assert!(message.contains("tools[0].name: invalid type"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
