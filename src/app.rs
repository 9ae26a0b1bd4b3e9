//! Start-up and shutdown: builds the daemon's parts from the config and serves until told to stop.

pub mod migrate;
pub mod rekey;
mod replicas;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::accounts::Accounts;
use crate::api::AppState;
use crate::api::connections::{self, ConnectionLimits, effective_max_connections};
use crate::api::hosts::AllowedHosts;
use crate::catalog::{CallLog, Catalog, Retention};
use crate::config::Config;
use crate::credentials::vault::Vault;
use crate::generate::{Generator, GeneratorParts};
use crate::serve::call::Caller;
use crate::serve::egress::Egress;
use crate::serve::egress::own_socket::OwnAddresses;
use crate::serve::isolate::{AdmissionLimits, CompileCache, IsolatePool, PoolSettings, WasmEngine};
use crate::serve::registry::Registry;
use crate::tasks::Tasks;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::traces::Traces;

/// Runs the daemon on `listener` until `shutdown` resolves, then drains and closes.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    build(config).await?.serve(listener, shutdown).await
}

/// A built daemon: the catalog is open and migrated, every part is wired, nothing is served yet.
pub struct Daemon {
    state: AppState,
    pool: Arc<IsolatePool>,
    /// Where the daemon listens, for egress to refuse (set in `serve`).
    own_addresses: OwnAddresses,
}

/// Opens the catalog and builds every part from `config`; fails on what the config cannot give
/// (a catalog that cannot be opened, an LLM provider without its key).
/// The token checker for `[auth.oauth]`, which discovers the issuer in the background: a daemon
/// whose identity provider is down starts, and its OAuth mounts answer 503 until it is back.
fn oauth_validator(config: &Config, tasks: &Tasks) -> anyhow::Result<Option<crate::oauth::Validator>> {
    let oauth = &config.auth.oauth;
    if !oauth.enabled() {
        return Ok(None);
    }
    // No redirects: a token posted for introspection must not be re-posted wherever an answer
    // points, and the provider's metadata names its endpoints directly.
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build the HTTP client for [auth.oauth]")?;
    let mut settings = crate::oauth::ValidatorConfig::new(&oauth.issuer);
    settings.leeway = Duration::from_secs(oauth.leeway_seconds);
    if !oauth.introspection_client_id.is_empty() {
        settings.introspection = Some(crate::oauth::IntrospectionClient {
            client_id: oauth.introspection_client_id.clone(),
            client_secret: oauth.introspection_client_secret.expose().to_string(),
            cache_for: Duration::from_secs(oauth.introspection_cache_seconds),
        });
    }
    let validator = crate::oauth::Validator::new(http, settings);
    // Discovered in the background, and again until it works or shutdown starts: `/readyz`
    // reports it, and the first token check does not wait for it.
    let warm = validator.clone();
    let shutdown = tasks.shutdown_started();
    tasks.spawn(async move {
        tokio::select! {
            () = discover_issuer(warm) => {}
            () = shutdown => {}
        }
    });
    Ok(Some(validator))
}

/// Discovers the OAuth issuer, retrying until it answers; warns once while it does not.
async fn discover_issuer(validator: crate::oauth::Validator) {
    let mut warned = false;
    loop {
        match validator.prepare().await {
            Ok(metadata) => {
                tracing::info!(issuer = %metadata.issuer, "OAuth issuer discovered");
                return;
            }
            Err(error) if !warned => {
                tracing::warn!(%error, "the OAuth issuer cannot be discovered yet; OAuth mounts answer 503 until it can");
                warned = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(crate::oauth::DEFAULT_DISCOVERY_RETRY_INTERVAL).await;
    }
}

pub async fn build(config: Config) -> anyhow::Result<Daemon> {
    crate::install_crypto_provider();
    let config = Arc::new(config);
    let tasks = Tasks::new();
    let catalog = Catalog::open(&config.catalog.location()?, replica(&config)?, &tasks).await?;
    // Before anything is started (isolate workers, tasks): a key that cannot open the catalog's
    // credentials refuses the start.
    let vault = Vault::open(&config).context("cannot set up the key for credentials")?;
    check_credentials_open(&catalog, &vault).await?;
    let retention = Retention {
        calls: config.catalog.max_calls_per_server,
        bytes: config.catalog.max_call_log_mb_per_server.saturating_mul(1024 * 1024),
    };
    let (call_log, call_log_writer) = CallLog::new(catalog.clone(), retention);
    tasks.spawn(call_log_writer);
    let own_addresses = OwnAddresses::default();
    let egress = Arc::new(Egress::new(&config, own_addresses.clone()).context("cannot build the egress HTTP client")?);
    let pool = Arc::new(isolate_pool(&config)?);
    let metrics = Arc::new(Metrics::new(config.metrics.max_labelled_servers));
    metrics.set_replica(&catalog.replica().id, catalog.backend().name());
    let traces = Traces::start(&config.telemetry, &catalog.replica().id)?;
    let caller = Caller::new(pool.clone(), egress.clone(), call_log, config.sandbox.clone(), metrics.clone(), traces);
    let oauth = oauth_validator(&config, &tasks)?;
    let accounts =
        Accounts::new(&config, catalog.clone(), vault.clone(), oauth.clone(), metrics.clone(), tasks.clone())
            .context("cannot build the HTTP client for connected accounts")?;
    let registry = Registry::new(&config, caller.clone(), catalog.clone(), vault.clone(), accounts.clone());
    let mut llm = crate::llm::LlmSettings::from_config(&config.llm)
        .map(crate::llm::build_client)
        .transpose()
        .map_err(|e| anyhow::anyhow!("[llm]: {e}"))?;
    if let Some(problem) = config.llm.missing_key() {
        // Refused at registration with the same words, rather than failing at planning.
        tracing::warn!("{problem}; until then prompt registrations are refused (toolsets work)");
        llm = None;
    } else if llm.is_none() {
        tracing::info!("no [llm] provider configured: prompt registrations are refused, toolsets work");
    }
    let generator = Generator::new(
        &config,
        GeneratorParts {
            catalog: catalog.clone(),
            egress,
            caller: caller.clone(),
            registry: registry.clone(),
            vault: vault.clone(),
            llm,
            metrics: metrics.clone(),
            tasks: tasks.clone(),
        },
    );
    if catalog.is_shared() {
        // Unfinished jobs belong to other replicas, or to dead ones whose leases expire: they are
        // taken over, not failed.
        generator.spawn_lease_keeper();
    } else {
        for (server, stage) in catalog.fail_interrupted_generations().await? {
            tracing::warn!(server_id = %server, %stage, "generation interrupted by a restart was marked failed");
        }
        let interrupted = catalog.fail_interrupted_drift_checks().await?;
        if interrupted > 0 {
            tracing::warn!(servers = interrupted, "drift checks interrupted by a restart were marked failed");
        }
    }
    if let Some(every) = config.generation.drift_interval() {
        tracing::info!(every = %humantime::format_duration(every), "documentation drift checks on");
        generator.spawn_drift_checks(every);
    }
    let mcp_hosts = Arc::new(AllowedHosts::new(&config.mcp_allowed_hosts()));
    let state = AppState {
        config,
        catalog,
        registry,
        vault,
        caller,
        generator,
        metrics,
        tasks,
        ready: Arc::new(AtomicBool::new(false)),
        mcp_hosts,
        overview: Arc::default(),
        oauth,
        accounts,
    };
    crate::api::overview::spawn_sampler(&state);
    Ok(Daemon { state, pool, own_addresses })
}

/// This daemon among the replicas of its catalog.
fn replica(config: &Config) -> anyhow::Result<crate::catalog::Replica> {
    let (_, lease_ttl) = config.catalog.replica_timing()?;
    Ok(crate::catalog::Replica { id: config.catalog.replica_id(), lease_ttl })
}

/// Refuses to start on a catalog whose credentials the configured key cannot open (a catalog
/// moved without its key, or the wrong key file), with the error naming the key in use, instead
/// of serving those servers without them.
async fn check_credentials_open(catalog: &Catalog, vault: &Vault) -> anyhow::Result<()> {
    if let Some((server, name, sealed)) = catalog.any_credential().await? {
        vault.open_value(&server, &name, &sealed)?;
    }
    Ok(())
}

impl Daemon {
    /// Serves on `listener` until `shutdown` resolves, then drains and closes, in this order:
    /// shutdown starts (generation jobs and `/events` streams wrap up; no new connections),
    /// in-flight requests get `[server] shutdown_grace_ms`, MCP endpoints close, the call log is
    /// written, background tasks get a few seconds to finish, the last spans are sent (`[telemetry]`),
    /// the pool and the catalog close.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Daemon { state, pool, own_addresses } = self;
        let config = state.config.clone();
        let address = listener.local_addr()?;
        own_addresses.add(address);
        tracing::info!(%address, catalog = %config.catalog.location()?.display(), workers = config.worker_threads(), "mcpbootd listening");

        // Serve at once so /healthz answers during start-up; /readyz turns ready after the mount.
        // Mounting reads one row per server; each server's tools are loaded and compiled on first use.
        let (reconcile_every, _) = config.catalog.replica_timing()?;
        replicas::Replicas {
            catalog: state.catalog.clone(),
            registry: state.registry.clone(),
            generator: state.generator.clone(),
            metrics: state.metrics.clone(),
            tasks: state.tasks.clone(),
            ready: state.ready.clone(),
            reconcile_every,
        }
        .spawn();

        let router = crate::api::router(state.clone());
        let grace = Duration::from_millis(config.server.shutdown_grace_ms);
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
            max_connections: effective_max_connections(config.server.max_connections),
        };
        let tasks = state.tasks.clone();
        let server = connections::serve(listener, router, limits, async move {
            shutdown.await;
            tracing::info!(
                grace_ms = grace.as_millis() as u64,
                "shutting down: no new connections; draining in-flight requests"
            );
            tasks.start_shutdown();
        });
        // In-flight requests get the grace period; after it, the remaining ones are dropped.
        let deadline = async {
            state.tasks.shutdown_started().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            served = server => served.context("HTTP server failed")?,
            () = deadline => tracing::warn!("requests still running after the shutdown grace period were dropped"),
        }
        // Not at shutdown start: an MCP endpoint's token also ends its requests in flight.
        state.registry.close_all();
        state.caller.call_log().close().await;
        // Interrupted generation jobs mark themselves failed (resumable with regenerate).
        if !state.tasks.wait(Duration::from_secs(5).min(grace)).await {
            tracing::warn!(tasks = state.tasks.running(), "background tasks did not finish within the grace period");
        }
        state.caller.traces().shutdown().await;
        pool.close();
        state.catalog.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// The isolate workers `[sandbox]` asks for, running the WebAssembly engine (built here, so a
/// daemon that cannot build it does not start).
fn isolate_pool(config: &Config) -> anyhow::Result<IsolatePool> {
    let sandbox = &config.sandbox;
    let started = std::time::Instant::now();
    let cache = CompileCache::from_setting(&sandbox.compile_cache);
    let engine = WasmEngine::shared(&cache, sandbox.max_in_flight)
        .map_err(|e| anyhow::anyhow!("cannot start the WebAssembly engine: {e}"))?;
    tracing::info!(
        cache = ?engine.cache_use(),
        dir = %cache.dir().map(|d| d.display().to_string()).unwrap_or_default(),
        "WebAssembly engine ready in {} ms",
        started.elapsed().as_millis()
    );
    Ok(IsolatePool::with_engine(engine, pool_settings(config), tokio::runtime::Handle::current()))
}

/// How the isolate pool is sized, from `[sandbox]`.
fn pool_settings(config: &Config) -> PoolSettings {
    let sandbox = &config.sandbox;
    PoolSettings {
        workers: config.worker_threads(),
        admission: AdmissionLimits {
            max_in_flight: sandbox.max_in_flight,
            max_in_flight_per_tenant: sandbox.max_in_flight_per_server,
            max_queued: sandbox.queue,
            max_queued_per_tenant: sandbox.max_queued_per_server,
            queue_timeout: Duration::from_millis(sandbox.queue_timeout_ms),
        },
        memory_budget_bytes: usize::try_from(sandbox.memory_budget_mb.saturating_mul(1024 * 1024))
            .unwrap_or(usize::MAX),
    }
}
