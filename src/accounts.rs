//! Connected accounts: per-user credentials, the values each caller connects for themselves.
//!
//! A server's credential may be `per_user` (`credentials::per_user`): instead of one value the
//! operator stores, each caller of the mount (the OAuth subject, `iss` + `sub`) brings their own,
//! connected once on the daemon's pages ([`flow`]): their tokens at the upstream's authorization
//! server, or an API key they type in. The values are sealed per (server, credential, issuer,
//! subject) like every credential value and never pass through the MCP host or the model.
//!
//! At call time ([`Accounts::values_for`]) the caller's connections are read from the catalog,
//! refreshed when past their expiry (one refresh at a time per connection: an in-process lock,
//! and a claim in the catalog across replicas), and handed to the egress as ordinary
//! credentials for that call only. A caller who has not connected gets a connect link instead,
//! before any upstream request: the MCP endpoint sends it as a URL elicitation (`-32042`).

pub mod flow;
mod service;
pub mod token_endpoint;

use std::time::Duration;

pub use self::service::{Accounts, token_name};
use self::service::{UnreadableToken, digest};
use crate::catalog::{CatalogError, ConnectionRecord, now_millis};
use crate::credentials::vault::random_token;
use crate::credentials::{Binding, Credential, PerUser};
use crate::telemetry::metrics::AccountEvent;
use crate::toolset::ServerId;

/// A token this close to its expiry is refreshed before it is used.
const REFRESH_AHEAD_MS: i64 = 1_000;
/// How long one replica may hold the right to refresh a connection.
const REFRESH_CLAIM_MS: i64 = 15_000;
/// How often a connection's `last_used_at` is written at most.
const TOUCH_EVERY_MS: i64 = 60_000;

/// A per-user credential of a mounted server: its binding, and the OAuth client secret opened.
#[derive(Clone)]
pub struct PerUserCredential {
    pub name: String,
    pub binding: Binding,
    pub kind: PerUser,
    /// The OAuth client's secret (`oauth2` only), opened from the catalog when the mount is built.
    pub client_secret: Option<String>,
}

impl std::fmt::Debug for PerUserCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerUserCredential").field("name", &self.name).field("kind", &self.kind).finish_non_exhaustive()
    }
}

/// Who makes a call, as the connect flow and the catalog know them.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub issuer: &'a str,
    pub sub: &'a str,
}

/// A call the caller cannot make yet.
#[derive(Debug, Clone)]
pub enum NotConnected {
    /// The caller has not connected this credential (or its connection was revoked or its
    /// refresh refused): they must open `url` first.
    Connect(ConnectLink),
    /// Nothing the caller can fix by connecting: the text says what.
    Unavailable(String),
}

/// A link a caller opens to connect a credential.
#[derive(Debug, Clone)]
pub struct ConnectLink {
    pub credential: String,
    pub url: String,
    /// The MCP `elicitationId`.
    pub elicitation_id: String,
    /// What the host shows the person.
    pub message: String,
}

impl Accounts {
    /// The caller's values for `credentials` of `server`, as credentials the egress injects for
    /// this call, with the connections they came from (`(id, version)`, to tell when a cached
    /// policy is stale).
    pub async fn values_for(
        &self,
        server: &ServerId,
        credentials: &[PerUserCredential],
        subject: Option<&str>,
    ) -> Result<Vec<(Credential, (String, i64))>, NotConnected> {
        let Some(sub) = subject else {
            return Err(NotConnected::Unavailable(format!(
                "server {:?} sends each caller's own credentials upstream, so it must be called through its MCP \
                 endpoint by a signed-in user (OAuth); this call has no user",
                server.as_str()
            )));
        };
        let subject = Subject { issuer: &self.issuer, sub };
        let mut values = Vec::with_capacity(credentials.len());
        for credential in credentials {
            let record = self
                .catalog
                .connection(server, &credential.name, subject.issuer, subject.sub)
                .await
                .map_err(unavailable)?;
            let record = match record {
                Some(record) => self.fresh(server, credential, record, subject).await?,
                None => return Err(self.connect_link(server, &credential.name, subject).await),
            };
            let value = self.open_access(&record).map_err(|e| NotConnected::Unavailable(e.to_string()))?;
            self.touch(&record.id);
            let version = (record.id.clone(), record.version);
            values.push((
                Credential { name: credential.name.clone(), binding: credential.binding.clone(), value },
                version,
            ));
        }
        Ok(values)
    }

    /// The connection, refreshed first when its access token is (about to be) past its expiry.
    async fn fresh(
        &self,
        server: &ServerId,
        credential: &PerUserCredential,
        record: ConnectionRecord,
        subject: Subject<'_>,
    ) -> Result<ConnectionRecord, NotConnected> {
        if !needs_refresh(&record) {
            return Ok(record);
        }
        let PerUser::Oauth2(client) = &credential.kind else { return Ok(record) };
        let lock = {
            let mut refreshing = self.refreshing.lock().unwrap_or_else(|p| p.into_inner());
            refreshing.entry(record.id.clone()).or_default().clone()
        };
        let _one_at_a_time = lock.lock().await;
        // Another call may have refreshed it while this one waited.
        let Some(mut record) = self.catalog.connection_by_id(&record.id).await.map_err(unavailable)? else {
            return Err(self.connect_link(server, &credential.name, subject).await);
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(REFRESH_CLAIM_MS as u64);
        while needs_refresh(&record) {
            let Some(sealed_refresh) = record.sealed_refresh.clone() else {
                // Expired with nothing to refresh it by: the person connects again.
                self.catalog.forget_connection(&record.id, record.version).await.map_err(unavailable)?;
                return Err(self.connect_link(server, &credential.name, subject).await);
            };
            let until = now_millis() + REFRESH_CLAIM_MS;
            if !self
                .catalog
                .claim_refresh(&record.id, record.version, &self.replica, until)
                .await
                .map_err(unavailable)?
            {
                // Another replica is refreshing it: wait for its result.
                if tokio::time::Instant::now() >= deadline {
                    return Err(NotConnected::Unavailable(format!(
                        "the connection for credential {:?} is being refreshed elsewhere and did not finish in time; retry",
                        credential.name
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                record = match self.catalog.connection_by_id(&record.id).await.map_err(unavailable)? {
                    Some(record) => record,
                    None => return Err(self.connect_link(server, &credential.name, subject).await),
                };
                continue;
            }
            let refresh =
                self.open(&record, "refresh", &sealed_refresh).map_err(|e| NotConnected::Unavailable(e.to_string()))?;
            let secret = credential.client_secret.as_deref().unwrap_or_default();
            let granted = token_endpoint::request(
                &self.http,
                &client.token_url,
                &client.client_id,
                secret,
                &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
            )
            .await;
            match granted {
                Ok(granted) => {
                    self.metrics.record_account_event(AccountEvent::Refreshed);
                    let sealed_access = self.seal(&record, "access", &granted.access_token);
                    let sealed_refresh =
                        granted.refresh_token.as_deref().map(|token| self.seal(&record, "refresh", token));
                    let expires_at = granted.expires_in.map(|seconds| now_millis() + seconds * 1000);
                    record = self
                        .catalog
                        .store_refreshed(
                            &record.id,
                            &sealed_access,
                            sealed_refresh.as_deref(),
                            granted.scope.as_deref(),
                            expires_at,
                        )
                        .await
                        .map_err(unavailable)?
                        .ok_or_else(|| {
                            NotConnected::Unavailable("the connection was deleted while it was refreshed".into())
                        })?;
                    tracing::info!(server_id = %server, credential = %credential.name, "connected account refreshed");
                }
                Err(error) if error.is_invalid_grant() => {
                    self.metrics.record_account_event(AccountEvent::RefreshFailed);
                    tracing::info!(server_id = %server, credential = %credential.name, %error, "refresh refused; the connection is forgotten");
                    self.catalog.forget_connection(&record.id, record.version).await.map_err(unavailable)?;
                    return Err(self.connect_link(server, &credential.name, subject).await);
                }
                Err(error) => {
                    self.metrics.record_account_event(AccountEvent::RefreshFailed);
                    let _ = self.catalog.release_refresh(&record.id, &self.replica).await;
                    tracing::warn!(server_id = %server, credential = %credential.name, %error, "cannot refresh a connected account");
                    return Err(NotConnected::Unavailable(format!(
                        "the access token for credential {:?} expired and could not be refreshed: {error}",
                        credential.name
                    )));
                }
            }
        }
        Ok(record)
    }

    /// A fresh connect link for `subject` and `credential` of `server`.
    pub async fn connect_link(&self, server: &ServerId, credential: &str, subject: Subject<'_>) -> NotConnected {
        if !self.configured() {
            return NotConnected::Unavailable(
                "per-user credentials need [auth.oauth] connect_client_id and connect_client_secret".into(),
            );
        }
        let token = random_token();
        let expires_at = now_millis() + self.link_lifetime.as_millis() as i64;
        let stored = self
            .catalog
            .insert_flow(
                &digest(&token),
                flow::Step::Link.as_str(),
                Some(server.as_str()),
                Some(credential),
                subject.issuer,
                Some(subject.sub),
                None,
                expires_at,
            )
            .await;
        if let Err(error) = stored {
            return unavailable(error);
        }
        self.metrics.record_account_event(AccountEvent::Elicitation);
        let url = format!("{}/connect/{token}", self.public_url);
        NotConnected::Connect(ConnectLink {
            credential: credential.to_string(),
            message: format!(
                "Connect your account for {:?} (credential {credential:?}) to use this tool: open {url} within {} \
                 minutes, sign in, then retry the call.",
                server.as_str(),
                self.link_lifetime.as_secs().div_ceil(60)
            ),
            url,
            elicitation_id: uuid::Uuid::now_v7().to_string(),
        })
    }

    fn touch(&self, id: &str) {
        let now = now_millis();
        {
            let mut touched = self.touched.lock().unwrap_or_else(|p| p.into_inner());
            if touched.get(id).is_some_and(|at| now - at < TOUCH_EVERY_MS) {
                return;
            }
            if touched.len() > 65_536 {
                touched.clear();
            }
            touched.insert(id.to_string(), now);
        }
        let catalog = self.catalog.clone();
        let id = id.to_string();
        self.tasks.spawn(async move {
            if let Err(error) = catalog.touch_connection(&id, now).await {
                tracing::debug!(%error, "cannot record a connection's use");
            }
        });
    }

    fn open_access(&self, record: &ConnectionRecord) -> Result<String, UnreadableToken> {
        self.open(record, "access", &record.sealed_access)
    }
}

fn needs_refresh(record: &ConnectionRecord) -> bool {
    record.expires_at.is_some_and(|at| at - REFRESH_AHEAD_MS <= now_millis())
}

fn unavailable(error: CatalogError) -> NotConnected {
    tracing::error!(%error, "connected accounts: the catalog failed");
    NotConnected::Unavailable("the daemon's catalog could not be used for connected accounts; retry shortly".into())
}
