//! A mounted server's per-user credentials at call time: the caller's own values (from
//! `accounts`) joined to the server's policy, so the egress injects them, and scrubs them from
//! every response, exactly as it does a shared credential's value.
//!
//! The policy with a caller's values is kept per caller until one of their connections changes
//! (a refresh, a reconnect): building it builds the scrubbing automaton over every value.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::accounts::{Accounts, NotConnected, PerUserCredential};
use crate::serve::egress::ServerPolicy;
use crate::toolset::ServerId;

/// Callers whose policies are kept at most, per server.
const MAX_CACHED_CALLERS: usize = 4_096;

/// A caller's policy, with the connections (`(id, version)`) whose values it holds.
type CallerPolicy = (Vec<(String, i64)>, Arc<ServerPolicy>);

pub struct PerUserCredentials {
    accounts: Arc<Accounts>,
    credentials: Vec<PerUserCredential>,
    /// By subject: the connections the policy was built from, and the policy.
    policies: Mutex<HashMap<String, CallerPolicy>>,
}

impl PerUserCredentials {
    pub fn new(accounts: Arc<Accounts>, credentials: Vec<PerUserCredential>) -> PerUserCredentials {
        PerUserCredentials { accounts, credentials, policies: Mutex::default() }
    }

    pub fn credentials(&self) -> &[PerUserCredential] {
        &self.credentials
    }

    /// The server's policy (`base`) with the values of the caller `subject`, or why the call
    /// cannot be made yet.
    pub async fn policy_for(
        &self,
        server: &ServerId,
        base: &Arc<ServerPolicy>,
        subject: Option<&str>,
    ) -> Result<Arc<ServerPolicy>, NotConnected> {
        let values = self.accounts.values_for(server, &self.credentials, subject).await?;
        let subject = subject.unwrap_or_default();
        let versions: Vec<(String, i64)> = values.iter().map(|(_, version)| version.clone()).collect();
        if let Some((built_from, policy)) = lock(&self.policies).get(subject)
            && *built_from == versions
        {
            return Ok(policy.clone());
        }
        let mut credentials = base.credentials.clone();
        credentials.extend(values.into_iter().map(|(credential, _)| credential));
        let policy = Arc::new(ServerPolicy::whitelisted_as(base).with_credentials(credentials));
        let mut policies = lock(&self.policies);
        if policies.len() >= MAX_CACHED_CALLERS {
            policies.clear();
        }
        policies.insert(subject.to_string(), (versions, policy.clone()));
        Ok(policy)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
