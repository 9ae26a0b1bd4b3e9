//! Command line: `mcpbootd serve`, `print-config`, and the client commands that drive a running
//! daemon's admin API (`register`, `list`, `show`, `call`, `calls`, `delete`, `export`,
//! `regenerate`). Argument definitions and dispatch only; the client lives in `client`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgGroup, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::json;
use url::Url;

use crate::api::model::RegenerateRequest;
use crate::client::commands::{self, Failure, Register, Session};
use crate::client::{AdminClient, DEFAULT_URL, TOKEN_ENV, parse_base_url};
use crate::config::{CliOverrides, Config, EXAMPLE_CONFIG, parse_listen};
use crate::toolset::OperationFilter;

#[derive(Parser)]
#[command(
    name = "mcpbootd",
    version,
    about = "Hosts MCP servers whose tools run in per-call JavaScript isolates",
    after_help = "Client commands talk to a running daemon at --url / MCPBOOTD_URL and send the admin token \
                  from MCPBOOTD_ADMIN_TOKEN.\nExit codes: 0 ok, 1 the API answered with an error (or a tool \
                  result is isError, or a generation failed), 2 usage or local error, 3 daemon unreachable."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    conn: Connection,
}

#[derive(Subcommand)]
enum Command {
    /// Copy a catalog into an empty PostgreSQL database (SQLite file to shared catalog), with
    /// the daemon stopped; checks every table's row count afterwards.
    Migrate {
        /// The catalog to copy: sqlite://PATH (or a path), or postgres://…
        #[arg(long, value_name = "URL")]
        from: String,
        /// The empty PostgreSQL database: postgres://user@host/db (password in the URL or PGPASSWORD).
        #[arg(long, value_name = "URL")]
        to: String,
        /// Copy the call log too (it can be large; without it, the new catalog starts with none).
        #[arg(long)]
        with_calls: bool,
    },
    /// Run the daemon.
    Serve {
        /// TOML config file (see `mcpbootd print-config`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Listen address (IP:PORT, or localhost:PORT), overriding [server] listen.
        #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
        listen: Option<SocketAddr>,
    },
    /// Print the documented example configuration (every key with its default).
    PrintConfig,
    /// Register a server: generate it from a prompt, or load a toolset file.
    #[command(
        group(ArgGroup::new("source").required(true).multiple(true).args(["prompt", "toolset", "openapi"])),
        after_help = "Examples:\n  mcpbootd register --wait \"Create MCP tools for the Hacker News API: \
                      https://github.com/HackerNews/API\"\n  mcpbootd register --toolset weather.json\n  \
                      mcpbootd export hn | mcpbootd register --toolset - --id hn-copy\n  \
                      mcpbootd register --wait --openapi https://petstore3.swagger.io/api/v3/openapi.json \
                      --include tag:pet\n\n\
                      A toolset file is a registration body: {\"name\", \"tools\": [{\"name\", \"description\", \
                      \"input_schema\", \"handler\"}], \"allow_domains\", \"access_token\"}; a handler is the body of \
                      `async function (args, fetch)`."
    )]
    Register {
        /// What the server should do, with links to the API's documentation.
        prompt: Option<String>,
        /// A registration body such as `mcpbootd export` prints (`-` reads stdin); ready at once.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["dry_run", "openapi", "prompt"])]
        toolset: Option<PathBuf>,
        /// An OpenAPI 3 or Swagger 2.0 description to derive the tools from: its URL, or a JSON or
        /// YAML file (`-` reads stdin). A prompt given too lets the LLM choose operations.
        #[arg(long, value_name = "URL|FILE")]
        openapi: Option<String>,
        /// With --openapi: operations to turn into tools (repeatable): `tag:NAME`,
        /// `"GET /path/{id}"`, `operationId:ID`. Default: all, up to [generation] max_tools.
        #[arg(long, value_name = "RULE", requires = "openapi")]
        include: Vec<String>,
        /// With --openapi: operations to leave out (repeatable), as for --include.
        #[arg(long, value_name = "RULE", requires = "openapi")]
        exclude: Vec<String>,
        /// With --openapi: the API's base URL, replacing the description's servers.
        #[arg(long, value_name = "URL", requires = "openapi")]
        base_url: Option<String>,
        /// Server id (a-z, 0-9, '-'); generated from the name when left out.
        #[arg(long)]
        id: Option<String>,
        /// Display name (what MCP hosts show as the server's title).
        #[arg(long)]
        name: Option<String>,
        /// What the server is for; MCP hosts get it as the server's instructions.
        #[arg(long)]
        description: Option<String>,
        /// A domain the tools may fetch from, besides those the prompt links (repeatable).
        #[arg(long = "allow-domain", value_name = "DOMAIN")]
        allow_domains: Vec<String>,
        /// Stop after planning: store the plan, mount nothing.
        #[arg(long)]
        dry_run: bool,
        /// Every new version waits for approval (`mcpbootd approve`) before it is served.
        #[arg(long, conflicts_with = "toolset")]
        require_approval: bool,
        /// Follow the generation until it is ready or failed, then print the MCP URL.
        #[arg(long)]
        wait: bool,
    },
    /// List the registered servers.
    List,
    /// Show one server: status, whitelist, tools, generation.
    Show {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
    },
    /// Call a tool through the admin API (as an MCP host would, with the call logged).
    #[command(
        after_help = "Examples:\n  mcpbootd call hn get_item --args '{\"id\": 8863}'\n  mcpbootd call hn get_item --args @args.json"
    )]
    Call {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The tool's name, as `mcpbootd show <ID>` lists it.
        tool: String,
        /// The tool's arguments as a JSON object; `@FILE` reads a file, `@-` stdin.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
    },
    /// Show a server's call log, newest first.
    Calls {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// How many calls (1-1000; the daemon's default is 50).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Only the calls of this tool.
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// Only calls that ended this way: ok, error, denied, timeout, limit, busy, shutting_down
        /// or cancelled.
        #[arg(long, value_name = "OUTCOME")]
        outcome: Option<String>,
        /// Only calls started since this long ago (`15m`, `2h`, `1d`) or this time (RFC 3339 UTC).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
    },
    /// Choose who may use a server's MCP mount: open, OAuth (with extra scopes) or the daemon's
    /// default (docs/oauth.md). A static token is set with `register`'s access_token.
    #[command(after_help = "Examples:\n  mcpbootd auth hn oauth --scope hn:read\n  mcpbootd auth hn open\n  \
                            mcpbootd auth hn default")]
    Auth {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// open, oauth or default (`[auth.oauth] required` decides); open and oauth replace a
        /// static access token.
        mode: String,
        /// With oauth: a scope tokens need on this server, besides the daemon's scope model
        /// (repeatable).
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
    },
    /// Unmount and delete a server.
    Delete {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
    },
    /// Print a server's toolset as JSON that `register --toolset` accepts.
    Export {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
    },
    /// Credentials for a server's upstream API: added by the daemon to matching requests, never
    /// shown to handlers, agents or logs.
    Credentials {
        #[command(subcommand)]
        action: CredentialsAction,
    },
    /// Connected accounts: each caller's own connection to a server's per-user credentials
    /// (docs/connected-accounts.md). Lists subjects, scopes and times, never a token.
    #[command(
        after_help = "Examples:\n  mcpbootd connections github\n  mcpbootd connections github --delete 0190c1d2e3f4"
    )]
    Connections {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// Delete this connection (its caller connects again on their next call).
        #[arg(long, value_name = "CONNECTION_ID")]
        delete: Option<String>,
    },
    /// Show or change a server's traffic limits (docs/traffic.md): with no option it shows them;
    /// each option sets one (0 turns it off for the server), the others are kept.
    #[command(
        after_help = "Examples:\n  mcpbootd limits github\n  mcpbootd limits github --per-caller-per-minute 60 --per-caller-concurrency 4\n  \
                      mcpbootd limits github --upstream https://api.github.com=5000"
    )]
    Limits {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// Tool calls per minute by one caller on this server (0: off for this server).
        #[arg(long, value_name = "N")]
        per_caller_per_minute: Option<u32>,
        /// Tool calls per minute on this server, whoever makes them (0: off).
        #[arg(long, value_name = "N")]
        per_server_per_minute: Option<u32>,
        /// Calls per minute of each of this server's tools (0: off).
        #[arg(long, value_name = "N")]
        per_tool_per_minute: Option<u32>,
        /// Calls one caller may have running at once on this server (0: off).
        #[arg(long, value_name = "N")]
        per_caller_concurrency: Option<u32>,
        /// Requests per minute to an upstream origin, as ORIGIN=N (repeatable; N = 0 removes it).
        #[arg(long, value_name = "ORIGIN=N")]
        upstream: Vec<String>,
    },
    /// Code mode: run a script that calls a server's tools (docs/code-mode.md).
    Code {
        #[command(subcommand)]
        action: CodeAction,
    },
    /// List a server's versions: status, what started each, tools, self-tests (docs/versions.md).
    Versions {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
    },
    /// Show what changes between two versions of a server (coloured on a terminal).
    Diff {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The version to compare from.
        from: i64,
        /// The version to compare to.
        to: i64,
    },
    /// Approve a version that awaits approval; it is served at once.
    Approve {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The version to approve, as `mcpbootd versions <ID>` lists it.
        version: i64,
    },
    /// Reject a version that awaits approval; it is kept and never served.
    Reject {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The version to reject, as `mcpbootd versions <ID>` lists it.
        version: i64,
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Serve an earlier ready version at once (default: the newest ready one before the active).
    Rollback {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The ready version to serve, as `mcpbootd versions <ID>` lists it (default: the newest
        /// ready one before the active).
        version: Option<i64>,
    },
    /// Fetch a prompt server's documents again now; a change starts a candidate version.
    CheckDrift {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
    },
    /// Generate a prompt server again; the current tools keep serving until the new ones are ready.
    Regenerate {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// Skip the cache: plan and compile again even if nothing changed.
        #[arg(long)]
        force: bool,
        /// Stop after planning.
        #[arg(long)]
        dry_run: bool,
        /// Write only this tool of the active version again (repeatable); the others are kept.
        #[arg(long = "tool", value_name = "NAME")]
        tools: Vec<String>,
        /// With --tool: give the compiler the tool's recent failed calls to repair it from.
        #[arg(long, requires = "tools")]
        with_failures: bool,
        /// Follow the generation until it is ready or failed.
        #[arg(long)]
        wait: bool,
    },
}

#[derive(Subcommand)]
enum CodeAction {
    /// Run a script on a server, as its `code_execution` tool would, and print the result;
    /// exits with 1 when the result is not ok.
    #[command(
        group(ArgGroup::new("source").required(true).args(["code", "file"])),
        after_help = "Examples:\n  mcpbootd code exec weather --code 'return await tools.weather.forecast({city: input.city})' --input '{\"city\": \"Oslo\"}'\n  \
                      mcpbootd code exec weather --file script.js --input-file input.json --max-tool-calls 10"
    )]
    Exec {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The script: the body of an async function that `return`s the result.
        #[arg(long, value_name = "JS")]
        code: Option<String>,
        /// Read the script from a file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// The script's `input`, as JSON.
        #[arg(long, value_name = "JSON", conflicts_with = "input_file")]
        input: Option<String>,
        /// Read the script's `input` from a JSON file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        input_file: Option<PathBuf>,
        /// Lower the wall-time limit for this run.
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// Lower the tool-call budget for this run.
        #[arg(long, value_name = "N")]
        max_tool_calls: Option<u32>,
        /// Allow only these servers for this run (comma-separated; empty: none).
        #[arg(long, value_name = "A,B", value_delimiter = ',', num_args = 0..)]
        allowed_servers: Option<Vec<String>>,
    },
}

#[derive(Subcommand)]
enum CredentialsAction {
    /// Set or rotate a credential. The value is read from stdin (a prompt without echo on a
    /// terminal), never from the command line, where other users and shell history could see it.
    #[command(
        group(ArgGroup::new("inject").required(true).args(["header", "query", "basic"])),
        after_help = "Examples:\n  mcpbootd credentials set gh token --domain api.github.com --header Authorization --format 'Bearer {value}'\n  \
                      printf %s \"$OWM_KEY\" | mcpbootd credentials set weather owm --domain api.openweathermap.org --query appid\n  \
                      mcpbootd credentials set svc login --domain api.example.com --basic alice"
    )]
    Set {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The credential's name (a-z, A-Z, 0-9, '-', '_'), as the egress log will show it.
        name: String,
        /// A host that gets the credential, with its subdomains; must be on the server's whitelist (repeatable).
        #[arg(long = "domain", value_name = "DOMAIN", required = true)]
        domains: Vec<String>,
        /// Send it in this header.
        #[arg(long, value_name = "NAME")]
        header: Option<String>,
        /// The header's value, with {value} where the secret goes.
        #[arg(long, value_name = "FORMAT", requires = "header", default_value = "{value}")]
        format: String,
        /// Send it as this query parameter.
        #[arg(long, value_name = "NAME")]
        query: Option<String>,
        /// Send it as the password of HTTP basic authentication with this user name.
        #[arg(long, value_name = "USERNAME")]
        basic: Option<String>,
    },
    /// List a server's credentials: names, domains, how they are sent, fingerprints (never values).
    List {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
    },
    /// Delete a credential.
    Delete {
        /// The server's id, as `mcpbootd list` shows it.
        id: String,
        /// The credential's name, as `mcpbootd credentials list` shows it.
        name: String,
    },
    /// Re-encrypt every credential under a new key, with the daemon stopped. The new key replaces
    /// the key file; with the key in MCPBOOTD_CREDENTIALS_KEY, --new-key-file says where to put it.
    Rekey {
        /// TOML config file the daemon runs with (for the catalog path and the current key).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Where to write the new key (a new file); default: replace the current key file.
        #[arg(long, value_name = "FILE")]
        new_key_file: Option<PathBuf>,
    },
}

/// Options of the client commands, accepted before or after the command's name.
#[derive(Args)]
struct Connection {
    /// The daemon's base URL (client commands).
    #[arg(
        long,
        global = true,
        env = "MCPBOOTD_URL",
        hide_env_values = true,
        default_value = DEFAULT_URL,
        value_parser = parse_base_url
    )]
    url: Url,
    /// Print the API's JSON answers (pretty) instead of text (client commands).
    #[arg(long, global = true)]
    json: bool,
}

pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::PrintConfig => {
            print!("{EXAMPLE_CONFIG}");
            ExitCode::SUCCESS
        }
        Command::Serve { config, listen } => {
            let config = match Config::load(config.as_deref(), std::env::vars(), &CliOverrides { listen }) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("mcpbootd: {error}");
                    return ExitCode::from(2);
                }
            };
            crate::telemetry::init(&config.log, &config.telemetry);
            match serve(config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    eprintln!("mcpbootd: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Credentials { action: CredentialsAction::Rekey { config, new_key_file } } => {
            rekey(config.as_deref(), new_key_file.as_deref())
        }
        Command::Migrate { from, to, with_calls } => migrate(&from, &to, with_calls),
        client_command => run_client(client_command, &cli.conn, url_origin(&matches)),
    }
}

/// Where `--url`'s value came from, for the message when the daemon cannot be reached.
fn url_origin(matches: &clap::ArgMatches) -> &'static str {
    // A global argument's value is recorded where it was given: before or after the command.
    let given_after = matches.subcommand().and_then(|(_, sub)| sub.value_source("url"));
    match given_after.max(matches.value_source("url")) {
        Some(ValueSource::CommandLine) => "from --url",
        Some(ValueSource::EnvVariable) => "from MCPBOOTD_URL",
        _ => "the default; set --url or MCPBOOTD_URL",
    }
}

/// Runs one client command on a small runtime and turns its outcome into the exit code.
fn run_client(command: Command, conn: &Connection, url_origin: &str) -> ExitCode {
    let (url, json) = (conn.url.clone(), conn.json);
    let token = std::env::var(TOKEN_ENV).ok();
    let outcome = AdminClient::new(url, url_origin, token.as_deref())
        .map_err(|e| Failure::Local(e.to_string()))
        .and_then(|client| {
            let session = Session { client, json };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::Local(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(dispatch(&session, command))
        });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            failure.report();
            ExitCode::from(failure.exit_code())
        }
    }
}

async fn dispatch(session: &Session, command: Command) -> Result<(), Failure> {
    match command {
        Command::Register {
            prompt,
            toolset,
            openapi,
            include,
            exclude,
            base_url,
            id,
            name,
            description,
            allow_domains,
            dry_run,
            require_approval,
            wait,
        } => {
            let register = Register {
                prompt,
                toolset,
                openapi,
                operations: OperationFilter { include, exclude },
                base_url,
                id,
                name,
                description,
                allow_domains,
                dry_run,
                require_approval,
                wait,
            };
            commands::register(session, register).await
        }
        Command::List => commands::list(session).await,
        Command::Show { id, .. } => commands::show(session, &id).await,
        Command::Call { id, tool, args, .. } => commands::call(session, &id, &tool, &args).await,
        Command::Calls { id, limit, tool, outcome, since, .. } => {
            commands::calls(session, &id, commands::CallsFilter { limit, tool, outcome, since }).await
        }
        Command::Auth { id, mode, scopes } => commands::auth(session, &id, &mode, scopes).await,
        Command::Delete { id, .. } => commands::delete(session, &id).await,
        Command::Export { id, .. } => commands::export(session, &id).await,
        Command::Versions { id } => commands::versions(session, &id).await,
        Command::Diff { id, from, to } => commands::diff(session, &id, from, to).await,
        Command::Approve { id, version } => commands::approve(session, &id, version).await,
        Command::Reject { id, version, reason } => commands::reject(session, &id, version, reason).await,
        Command::Rollback { id, version } => commands::rollback(session, &id, version).await,
        Command::CheckDrift { id } => commands::check_drift(session, &id).await,
        Command::Regenerate { id, force, dry_run, tools, with_failures, wait } => {
            let tools = (!tools.is_empty()).then_some(tools);
            let body = RegenerateRequest { force, dry_run, tools, with_failures };
            commands::regenerate(session, &id, body, wait).await
        }
        Command::Code {
            action: CodeAction::Exec { id, code, file, input, input_file, timeout_ms, max_tool_calls, allowed_servers },
        } => {
            let exec =
                commands::CodeExec { code, file, input, input_file, timeout_ms, max_tool_calls, allowed_servers };
            commands::code_exec(session, &id, exec).await
        }
        Command::Limits {
            id,
            per_caller_per_minute,
            per_server_per_minute,
            per_tool_per_minute,
            per_caller_concurrency,
            upstream,
        } => {
            let change = commands::LimitsChange {
                per_caller_per_minute,
                per_server_per_minute,
                per_tool_per_minute,
                per_caller_concurrency,
                upstream,
            };
            commands::limits(session, &id, change).await
        }
        Command::Connections { id, delete: Some(connection) } => {
            commands::delete_connection(session, &id, &connection).await
        }
        Command::Connections { id, delete: None } => commands::list_connections(session, &id).await,
        Command::Credentials { action } => match action {
            CredentialsAction::Set { id, name, domains, header, format, query, basic } => {
                let inject = match (header, query, basic) {
                    (Some(header), _, _) => json!({"header": header, "format": format}),
                    (_, Some(query), _) => json!({"query": query}),
                    (_, _, Some(username)) => json!({"basic": {"username": username}}),
                    (None, None, None) => unreachable!("clap requires one of --header, --query, --basic"),
                };
                commands::set_credential(session, &id, &name, domains, inject).await
            }
            CredentialsAction::List { id } => commands::list_credentials(session, &id).await,
            CredentialsAction::Delete { id, name } => commands::delete_credential(session, &id, &name).await,
            CredentialsAction::Rekey { .. } => unreachable!("rekey runs locally"),
        },
        Command::Serve { .. } | Command::PrintConfig | Command::Migrate { .. } => {
            unreachable!("not a client command")
        }
    }
}

/// `credentials rekey`: runs here, on the catalog file, not through the daemon.
fn rekey(config: Option<&std::path::Path>, new_key_file: Option<&std::path::Path>) -> ExitCode {
    let config = match Config::load(config, std::env::vars(), &CliOverrides::default()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("mcpbootd: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(crate::app::rekey::rekey(&config, new_key_file)));
    match outcome {
        Ok(done) => {
            println!("re-encrypted {} credential(s); the key is now in {}", done.credentials, done.key_file.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("mcpbootd: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `migrate`: runs here, on both catalogs, not through the daemon.
fn migrate(from: &str, to: &str, with_calls: bool) -> ExitCode {
    let outcome = (|| {
        let (from, to) = (crate::app::migrate::location(from)?, crate::app::migrate::location(to)?);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(crate::app::migrate::migrate(&from, &to, with_calls))
    })();
    match outcome {
        Ok(copied) => {
            for table in copied {
                println!("{:<22} {:>9} rows copied", table.table, table.target_rows);
            }
            println!("every table has as many rows in the target as in the source");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("mcpbootd: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("mcpbootd-io").build()?;
    runtime.block_on(async move {
        let listener = listen(config.server.listen).map_err(|e| {
            anyhow::anyhow!("cannot listen on {} ([server] listen or --listen): {e}", config.server.listen)
        })?;
        crate::app::run(config, listener, shutdown_signal()).await
    })
}

/// Connections the kernel queues before the daemon accepts them. Tokio's `bind` uses 128, and a
/// burst of more new connections than that (a load balancer opening a pool, many hosts at once)
/// has the rest dropped and retried a second later; the kernel caps this at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

fn listen(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits the process at once, for an
/// operator who does not want to wait for the drain.
async fn shutdown_signal() {
    next_signal().await;
    tokio::spawn(async {
        next_signal().await;
        eprintln!("mcpbootd: second signal, exiting without waiting for in-flight work");
        std::process::exit(130);
    });
}

async fn next_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument and command a user can see says what it is, so `--help` never shows a
    /// bare `<ID> <VERSION>`.
    #[test]
    fn every_visible_command_and_argument_has_help() {
        fn undescribed(command: &clap::Command, path: &str, found: &mut Vec<String>) {
            for argument in command.get_arguments().filter(|argument| !argument.is_hide_set()) {
                if argument.get_help().is_none() && argument.get_long_help().is_none() {
                    found.push(format!("{path}: argument {}", argument.get_id()));
                }
            }
            for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
                let path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    found.push(format!("{path}: the command itself"));
                }
                undescribed(sub, &path, found);
            }
        }
        let command = Cli::command();
        command.clone().debug_assert();
        let mut found = Vec::new();
        undescribed(&command, "mcpbootd", &mut found);
        assert!(found.is_empty(), "without help:\n{}", found.join("\n"));
    }
}
