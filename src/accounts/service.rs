//! The connected-accounts service's state, and the sealing of connection tokens that both the
//! call path (`accounts.rs`) and the connect flow (`flow`) use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::catalog::{Catalog, ConnectionRecord};
use crate::config::Config;
use crate::credentials::vault::{OpenError, Vault, random_token};
use crate::oauth::Validator;
use crate::tasks::Tasks;
use crate::telemetry::metrics::Metrics;

/// The connected-accounts service: one per daemon.
pub struct Accounts {
    pub(super) catalog: Catalog,
    pub(super) vault: Vault,
    pub(super) http: reqwest::Client,
    /// The daemon's OAuth issuer: who the subjects are, and where the connect pages sign in.
    pub(super) validator: Option<Validator>,
    pub(super) issuer: String,
    pub(super) public_url: String,
    pub(super) connect_client_id: String,
    pub(super) connect_client_secret: String,
    pub(super) link_lifetime: Duration,
    /// This replica's name in refresh claims.
    pub(super) replica: String,
    pub(super) metrics: Arc<Metrics>,
    pub(super) tasks: Tasks,
    /// One refresh at a time per connection in this process.
    pub(super) refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// When each connection's use was last written.
    pub(super) touched: Mutex<HashMap<String, i64>>,
}

impl Accounts {
    pub fn new(
        config: &Config,
        catalog: Catalog,
        vault: Vault,
        validator: Option<Validator>,
        metrics: Arc<Metrics>,
        tasks: Tasks,
    ) -> anyhow::Result<Arc<Accounts>> {
        let oauth = &config.auth.oauth;
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .build()?;
        Ok(Arc::new(Accounts {
            catalog,
            vault,
            http,
            validator,
            issuer: oauth.issuer.clone(),
            public_url: oauth.public_url.trim_end_matches('/').to_string(),
            connect_client_id: oauth.connect_client_id.clone(),
            connect_client_secret: oauth.connect_client_secret.expose().to_string(),
            link_lifetime: Duration::from_secs(oauth.connect_link_seconds),
            replica: format!("{}-{}", std::process::id(), random_token().get(..8).unwrap_or_default()),
            metrics,
            tasks,
            refreshing: Mutex::default(),
            touched: Mutex::default(),
        }))
    }

    /// Whether the connect pages can run: OAuth on, and the daemon's own client at the issuer.
    pub fn configured(&self) -> bool {
        !self.issuer.is_empty() && !self.connect_client_id.is_empty()
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub(super) fn open(
        &self,
        record: &ConnectionRecord,
        which: &str,
        sealed: &[u8],
    ) -> Result<String, UnreadableToken> {
        self.vault
            .open_value(
                &record.server_id,
                &token_name(&record.credential, record.issuer.as_str(), &record.subject, which),
                sealed,
            )
            .map_err(UnreadableToken)
    }

    pub(super) fn seal(&self, record: &ConnectionRecord, which: &str, value: &str) -> Vec<u8> {
        self.vault.seal(
            &record.server_id,
            &token_name(&record.credential, &record.issuer, &record.subject, which),
            value,
        )
    }
}

/// A connected account's sealed token that the vault would not open.
#[derive(Debug, thiserror::Error)]
#[error("a connected account's token cannot be opened: {0}")]
pub struct UnreadableToken(pub OpenError);

/// The name a connection's token is sealed under (the vault binds it with the server id as
/// associated data), so a sealed token cannot be moved to another user's row.
pub fn token_name(credential: &str, issuer: &str, subject: &str, which: &str) -> String {
    format!("{credential}\u{0}{issuer}\u{0}{subject}\u{0}{which}")
}

/// The hex sha256 of a secret, which is how the catalog finds flows by it.
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}
