//! The registry of mounted servers: what `/servers/{id}/mcp` looks up on every request.
//!
//! Mounting is cheap and lazy. A mount starts as what routing and authentication need — id, name,
//! served generation and token digest, a few hundred bytes — so start-up reads one row per server
//! and registering a server adds one entry. Everything a call needs (argument validators, the
//! egress policy, the rmcp service) is built from the catalog the first time the server is used,
//! once even under concurrent first requests, and kept until the server is remounted or
//! unmounted. After that the hot path is a read-lock, a hash lookup and a cell read.
//!
//! A [`Mount`] is the registry's entry for one server; built, it holds the server's
//! [`McpEndpoint`], which holds the [`Server`] every call goes through. The registry is also the
//! [`ServerLookup`] code mode finds the other servers of a script through.
//!
//! A mount that cannot be built (a stored schema that no longer compiles) is logged once and
//! answers every request with that error until it is remounted; a catalog read that fails is
//! reported to the caller and retried on the next request.
//!
//! Whoever changes what an id serves (registration, a finished generation, a token change,
//! deletion) holds [`Registry::serialize`] for that id across its catalog write and the mount
//! change that follows, so the mount always ends up agreeing with the catalog: a `DELETE` racing
//! a registration or a token rotation cannot leave a deleted server mounted.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, RwLock, Weak};

use futures_util::future::BoxFuture;
use tokio::sync::OnceCell;

use crate::accounts::{Accounts, PerUserCredential};
use crate::catalog::{Catalog, CatalogError, CredentialRecord, MountRecord, ServedGeneration};
use crate::config::{Config, LimitsConfig};
use crate::credentials::vault::{OpenError, Vault};
use crate::credentials::{Credential, PerUser};
use crate::serve::call::{CallableTool, Caller, UnusableSchema};
use crate::serve::code_mode::CodeMode;
use crate::serve::discovery::{Discovery, STANDARD_TOOLS, standard_tools};
use crate::serve::egress::ServerPolicy;
use crate::serve::egress::upstream::UpstreamLimitError;
use crate::serve::health::{Health, HealthRule, ToolHealth};
use crate::serve::mount::{self, McpEndpoint, McpSettings, Unmounted, Unmounting};
use crate::serve::per_user::PerUserCredentials;
use crate::serve::quota::{EffectiveLimits, ServerQuota};
use crate::serve::server::{Server, ServerLookup};
use crate::telemetry::metrics::Metrics;
use crate::toolset::{AuthSetting, CodeModeSettings, ServerId, ServerLimits};

const CHANGE_STRIPES: usize = 64;

pub struct Registry {
    mounts: RwLock<HashMap<ServerId, Arc<Mount>>>,
    /// Striped per-id locks for [`Registry::serialize`]; two ids may share a stripe, which
    /// only orders them.
    changes: Box<[tokio::sync::Mutex<()>]>,
    stripe_hasher: std::hash::RandomState,
    catalog: Catalog,
    /// Opens the server's credentials when a mount is built.
    vault: Vault,
    /// Where per-user credentials' values come from.
    accounts: Arc<Accounts>,
    /// The daemon's `[limits]`, which a server's own limits override key by key.
    limits: LimitsConfig,
    mcp: McpSettings,
    metrics: Arc<Metrics>,
    max_response_bytes: u64,
    /// When a tool counts as degraded.
    health: HealthRule,
}

/// One server in the registry: routing and auth data at once, the rest on first use.
pub struct Mount {
    pub id: ServerId,
    pub name: String,
    pub generation_id: i64,
    /// Hex sha256 of the token MCP clients must present, when one is set.
    pub access_token_sha256: Option<String>,
    /// The server's own auth setting (`None`: the daemon's default).
    pub auth: Option<AuthSetting>,
    code_mode: Option<CodeModeSettings>,
    limits: Option<ServerLimits>,
    /// See [`MountRecord::credentials_stamp`].
    credentials_stamp: (i64, i64),
    /// Ended on unmount and at shutdown: stops the calls in flight on this mount.
    unmounting: Unmounting,
    /// The built server's MCP endpoint, which holds the [`Server`]. Build errors are kept (they
    /// repeat until the server is remounted); catalog errors are not.
    built: OnceCell<Result<Arc<McpEndpoint>, Arc<Unmountable>>>,
}

/// Why a stored server cannot be mounted as it is.
#[derive(Debug, thiserror::Error)]
pub enum Unmountable {
    /// A credential's value does not open with the vault's key.
    #[error("{0}")]
    Credential(#[from] OpenError),
    #[error("{0}")]
    Schema(#[from] UnusableSchema),
    #[error("{0}")]
    UpstreamLimit(#[from] UpstreamLimitError),
}

/// Why a mount could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The stored server cannot be served as it is; stays until the server is remounted.
    #[error("server {id:?} cannot be served: {reason}")]
    Broken { id: ServerId, reason: Arc<Unmountable> },
    /// The catalog could not be read; the next request tries again.
    #[error("server {id:?} could not be loaded from the catalog; retry shortly")]
    Catalog { id: ServerId },
    /// The server was deleted while it was being loaded.
    #[error("server {id:?} no longer exists")]
    Gone { id: ServerId },
}

impl Mount {
    fn new(record: MountRecord) -> Mount {
        Mount {
            id: record.id,
            name: record.name,
            generation_id: record.generation_id,
            access_token_sha256: record.access_token_sha256,
            auth: record.auth,
            code_mode: record.code_mode,
            limits: record.limits,
            credentials_stamp: record.credentials_stamp,
            unmounting: Unmounting::default(),
            built: OnceCell::new(),
        }
    }
}

impl Mount {
    /// Whether this mount was built from what `record` says.
    fn matches(&self, record: &MountRecord) -> bool {
        self.generation_id == record.generation_id
            && self.name == record.name
            && self.access_token_sha256 == record.access_token_sha256
            && self.auth == record.auth
            && self.code_mode == record.code_mode
            && self.limits == record.limits
            && self.credentials_stamp == record.credentials_stamp
    }
}

impl Registry {
    pub fn new(
        config: &Config,
        caller: Caller,
        catalog: Catalog,
        vault: Vault,
        accounts: Arc<Accounts>,
    ) -> Arc<Registry> {
        // Scripts look other servers up here, so the code-mode runner holds the registry weakly.
        Arc::new_cyclic(|registry: &Weak<Registry>| {
            let servers: Weak<dyn ServerLookup> = registry.clone();
            let code_mode = CodeMode::new(config.code_mode.clone(), config.sandbox.clone(), caller.clone(), servers);
            Registry {
                mounts: RwLock::new(HashMap::new()),
                changes: (0..CHANGE_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
                stripe_hasher: std::hash::RandomState::new(),
                max_response_bytes: caller.max_response_bytes(),
                health: HealthRule::new(&config.generation),
                metrics: caller.metrics().clone(),
                mcp: McpSettings::new(config, caller, Arc::new(code_mode)),
                catalog,
                vault,
                accounts,
                limits: config.limits.clone(),
            }
        })
    }

    /// Runs code-mode scripts (`POST /admin/servers/{id}/code` uses it directly).
    pub fn code_mode(&self) -> &Arc<CodeMode> {
        self.mcp.code_mode()
    }

    /// Held across a catalog change to `id` and the mount change that follows it (see the
    /// module doc). Not held while serving: calls never wait on it.
    pub async fn serialize(&self, id: &ServerId) -> tokio::sync::MutexGuard<'_, ()> {
        let stripe = self.stripe_hasher.hash_one(id.as_str()) as usize % self.changes.len();
        self.changes[stripe].lock().await
    }

    /// Mounts (or re-mounts) a server; nothing is built until it is first used. A previous mount
    /// of the same id drains: requests already routed to it (a token rotation, a new generation)
    /// finish on it, new ones go to this one, and it is dropped with its last request. (The
    /// endpoints are stateless with JSON answers, so no stream outlives its request.)
    pub fn mount(&self, record: MountRecord) {
        self.write().insert(record.id.clone(), Arc::new(Mount::new(record)));
    }

    /// Rebuilds `id`'s mount from the catalog if it is mounted, so the next request sees a change
    /// (a token, credentials); requests already routed finish on the old one. Call it holding
    /// [`Registry::serialize`] for `id`.
    pub async fn remount(&self, id: &ServerId) -> Result<(), CatalogError> {
        if self.get(id).is_some()
            && let Some(record) = self.catalog.mount_record(id).await?
        {
            self.mount(record);
        }
        Ok(())
    }

    /// Mounts every server the catalog serves (start-up), holding every change lock so a
    /// registration, token change or deletion made meanwhile is seen whole or applied after.
    pub async fn mount_from_catalog(&self) -> Result<usize, CatalogError> {
        let mut held = Vec::with_capacity(self.changes.len());
        for stripe in self.changes.iter() {
            held.push(stripe.lock().await);
        }
        let records = self.catalog.mount_records().await?;
        let servers = records.len();
        let mut mounts = self.write();
        mounts.reserve(records.len());
        for record in records {
            mounts.insert(record.id.clone(), Arc::new(Mount::new(record)));
        }
        Ok(servers)
    }

    /// Brings `id`'s mount in line with the catalog (a change another replica made): mounts,
    /// remounts or unmounts it. An unchanged mount is kept (with its built state and tool
    /// health) unless `force`.
    pub async fn sync(&self, id: &ServerId, force: bool) -> Result<(), CatalogError> {
        let _change = self.serialize(id).await;
        match self.catalog.mount_record(id).await? {
            Some(record) => {
                if force || self.get(id).is_none_or(|mount| !mount.matches(&record)) {
                    tracing::debug!(server_id = %id, "mount follows the shared catalog");
                    self.mount(record);
                }
            }
            None => {
                if self.unmount(id) {
                    tracing::debug!(server_id = %id, "unmounted: no longer served in the shared catalog");
                }
            }
        }
        Ok(())
    }

    /// Compares every mount with the catalog and syncs those that differ: the safety net for
    /// announcements lost with a connection. Returns how many differed.
    pub async fn reconcile(&self) -> Result<usize, CatalogError> {
        let records = self.catalog.mount_records().await?;
        let mut differing: Vec<ServerId> = records
            .iter()
            .filter(|record| self.get(&record.id).is_none_or(|mount| !mount.matches(record)))
            .map(|record| record.id.clone())
            .collect();
        let served: std::collections::HashSet<&ServerId> = records.iter().map(|record| &record.id).collect();
        differing.extend(self.read().keys().filter(|id| !served.contains(id)).cloned());
        for id in &differing {
            self.sync(id, false).await?;
        }
        Ok(differing.len())
    }

    /// Unmounts a deleted server; its calls in flight are stopped at once and told why.
    pub fn unmount(&self, id: &ServerId) -> bool {
        match self.write().remove(id) {
            Some(mount) => {
                mount.unmounting.end(Unmounted::Deleted);
                true
            }
            None => false,
        }
    }

    /// The mount for `id`, built or not: enough to route and authenticate.
    pub fn get(&self, id: &ServerId) -> Option<Arc<Mount>> {
        self.read().get(id).cloned()
    }

    /// The MCP endpoint of `id`, building the server first if this is its first use. `Ok(None)`
    /// if no such server is mounted.
    pub async fn endpoint(&self, id: &ServerId) -> Result<Option<Arc<McpEndpoint>>, MountError> {
        match self.get(id) {
            Some(mount) => self.build(&mount).await.map(Some),
            None => Ok(None),
        }
    }

    /// The built server `id`, building it first if this is its first use. `Ok(None)` if no such
    /// server is mounted.
    pub async fn server(&self, id: &ServerId) -> Result<Option<Arc<Server>>, MountError> {
        Ok(self.endpoint(id).await?.map(|endpoint| endpoint.server().clone()))
    }

    /// Builds `mount` on its first use; later calls return the same result.
    pub async fn build(&self, mount: &Mount) -> Result<Arc<McpEndpoint>, MountError> {
        let built = mount
            .built
            .get_or_try_init(|| async {
                let generation = match self.catalog.served_generation(mount.generation_id).await {
                    Ok(Some(generation)) => generation,
                    Ok(None) => return Err(MountError::Gone { id: mount.id.clone() }),
                    Err(error) => {
                        tracing::error!(server_id = %mount.id, %error, "cannot load the server from the catalog");
                        return Err(MountError::Catalog { id: mount.id.clone() });
                    }
                };
                let credentials = match self.catalog.credentials(&mount.id).await {
                    Ok(records) => records,
                    Err(error) => {
                        tracing::error!(server_id = %mount.id, %error, "cannot load the server's credentials");
                        return Err(MountError::Catalog { id: mount.id.clone() });
                    }
                };
                // Seeded from the log, so a restart or a remount does not forget a failing tool.
                // Health is advice: a log that cannot be read starts the windows empty.
                let recent = self
                    .catalog
                    .recent_failures_by_tool(&mount.id, mount.generation_id, self.health.window)
                    .await
                    .unwrap_or_else(|error| {
                        tracing::warn!(server_id = %mount.id, %error, "cannot read the server's recent calls; tool health starts afresh");
                        Default::default()
                    });
                let built = self
                    .open_credentials(mount, credentials)
                    .map_err(Unmountable::from)
                    .and_then(|(shared, per_user)| self.assemble(mount, generation, shared, per_user, &recent));
                if let Err(reason) = &built {
                    tracing::error!(server_id = %mount.id, generation_id = mount.generation_id, error = %reason, "cannot mount server");
                }
                Ok(built.map_err(Arc::new))
            })
            .await?;
        match built {
            Ok(endpoint) => Ok(endpoint.clone()),
            Err(reason) => Err(MountError::Broken { id: mount.id.clone(), reason: reason.clone() }),
        }
    }

    /// The server's credentials, opened: the shared ones with their values, the per-user ones
    /// with their OAuth client secrets. A value that does not open makes the mount unusable,
    /// with the reason (which names the key in use), rather than send requests without it.
    fn open_credentials(
        &self,
        mount: &Mount,
        records: Vec<CredentialRecord>,
    ) -> Result<(Vec<Credential>, Vec<PerUserCredential>), OpenError> {
        let mut shared = Vec::new();
        let mut per_user = Vec::new();
        for record in records {
            let value = self.vault.open_value(mount.id.as_str(), &record.name, &record.sealed)?;
            match record.binding.per_user.clone() {
                None => shared.push(Credential { name: record.name, binding: record.binding, value }),
                Some(kind) => {
                    let client_secret = matches!(kind, PerUser::Oauth2(_)).then_some(value);
                    per_user.push(PerUserCredential {
                        name: record.name,
                        binding: record.binding,
                        kind,
                        client_secret,
                    });
                }
            }
        }
        Ok((shared, per_user))
    }

    fn assemble(
        &self,
        mount: &Mount,
        generation: ServedGeneration,
        credentials: Vec<Credential>,
        per_user: Vec<PerUserCredential>,
        recent: &std::collections::BTreeMap<String, Vec<bool>>,
    ) -> Result<Arc<McpEndpoint>, Unmountable> {
        let tools = generation.tools.iter().map(|spec| {
            let health = ToolHealth::new(self.health, recent.get(&spec.name).map_or(&[][..], Vec::as_slice));
            let series = self.metrics.tool_series(mount.id.as_str(), &spec.name);
            self.metrics.record_tool_health(&series, health.health().degraded);
            CallableTool::new(spec, series, health)
        });
        let tools = tools.collect::<Result<Vec<_>, _>>()?;
        let upstream: std::collections::BTreeMap<String, u32> = mount
            .limits
            .iter()
            .flat_map(|limits| limits.upstream.iter().map(|(origin, limit)| (origin.clone(), limit.per_minute)))
            .collect();
        let mut policy = ServerPolicy::whitelisted(generation.whitelist, self.max_response_bytes)
            .serving(mount.id.clone())
            .with_upstream_limits(&upstream)?;
        policy.cache = mount.limits.as_ref().and_then(|limits| limits.cache).unwrap_or(true);
        let policy = policy.with_credentials(credentials);
        let quota = {
            let limits = EffectiveLimits::of(&self.limits, mount.limits.as_ref());
            let standard = if generation.discovery { &STANDARD_TOOLS[..] } else { &[] };
            let names = generation.tools.iter().map(|tool| tool.name.as_str()).chain(standard.iter().copied());
            (limits != EffectiveLimits::default()).then(|| ServerQuota::new(limits, names))
        };
        // The specs are moved into the MCP definitions, so their schemas are not kept twice.
        let mut listed = generation.tools;
        if generation.discovery {
            listed.extend(standard_tools());
        }
        let server = Arc::new(Server {
            id: mount.id.clone(),
            name: mount.name.clone(),
            description: generation.description,
            generation_id: mount.generation_id,
            policy: Arc::new(policy),
            tools,
            listing: listed.into_iter().map(mount::mcp_tool).collect(),
            quota,
            per_user: (!per_user.is_empty()).then(|| PerUserCredentials::new(self.accounts.clone(), per_user)),
            code_mode: mount.code_mode.clone(),
            code_series: mount
                .code_mode
                .as_ref()
                .filter(|settings| settings.enabled)
                .map(|_| self.metrics.tool_series(mount.id.as_str(), crate::serve::code_mode::TOOL_NAME)),
            discovery: generation.discovery.then(|| {
                Discovery::new(
                    self.catalog.clone(),
                    mount.id.clone(),
                    mount.generation_id,
                    self.metrics.clone(),
                    self.health,
                )
            }),
        });
        Ok(Arc::new(McpEndpoint::new(server, &self.mcp, mount.unmounting.clone())))
    }

    /// The health of each tool of `id`'s served generation, if its mount has been built (one
    /// that has not has had no calls since the daemon started; the call log knows the rest).
    pub fn tool_health(&self, id: &ServerId) -> Option<(i64, Vec<(String, Health)>)> {
        let mount = self.get(id)?;
        let Some(Ok(built)) = mount.built.get() else { return None };
        let tools = built.server().tools.iter().map(|tool| (tool.name.clone(), tool.health())).collect();
        Some((mount.generation_id, tools))
    }

    /// The rule tools are judged by.
    pub fn health_rule(&self) -> HealthRule {
        self.health
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops every MCP endpoint's calls in flight (shutdown).
    pub fn close_all(&self) {
        for mount in self.read().values() {
            mount.unmounting.end(Unmounted::ShuttingDown);
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ServerId, Arc<Mount>>> {
        self.mounts.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ServerId, Arc<Mount>>> {
        self.mounts.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl ServerLookup for Registry {
    fn served_generation(&self, id: &ServerId) -> Option<i64> {
        self.get(id).map(|mount| mount.generation_id)
    }

    fn find_server<'a>(&'a self, id: &'a ServerId) -> BoxFuture<'a, Option<Arc<Server>>> {
        Box::pin(async move { self.server(id).await.ok().flatten() })
    }
}
