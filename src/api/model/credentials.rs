//! Upstream credentials (`/admin/servers/{id}/credentials`): what an operator sends, shared or
//! per user, and what the daemon shows back, which is never a value or a client secret.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

use crate::catalog;
use crate::credentials::Injection;

/// A credential for an upstream API: its value (or `per_user`), where it may be sent, and how it
/// is added.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialRequest {
    /// The secret. Stored encrypted; no response, log or export ever shows it again. Absent for a
    /// `per_user` credential.
    #[serde(default)]
    #[schema(min_length = 8, max_length = 8192)]
    pub value: Option<String>,
    /// Each caller's own value instead of one: `{"kind": "oauth2", "authorize_url", "token_url",
    /// "client_id", "client_secret", "scopes"}` or `{"kind": "api_key"}`
    /// (docs/connected-accounts.md). Needs OAuth on the server's mount.
    #[serde(default)]
    #[schema(value_type = Option<PerUserSettings>)]
    pub per_user: Option<PerUserRequest>,
    /// Hosts that get it (and their subdomains); each must be on the server's whitelist.
    pub domains: Vec<String>,
    /// `{"header": "Authorization", "format": "Bearer {value}"}`, `{"query": "api_key"}` or
    /// `{"basic": {"username": "..."}}`.
    pub inject: Injection,
}

impl std::fmt::Debug for CredentialRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRequest")
            .field("per_user", &self.per_user.as_ref().map(PerUserRequest::kind))
            .field("domains", &self.domains)
            .field("inject", &self.inject)
            .finish_non_exhaustive()
    }
}

/// A per-user credential as registered: how each user's value is obtained, and for `oauth2` the
/// daemon's client secret at the upstream's authorization server (sealed like a value, never
/// shown again).
#[derive(Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PerUserRequest {
    Oauth2 {
        authorize_url: String,
        token_url: String,
        client_id: String,
        client_secret: String,
        #[serde(default)]
        scopes: Vec<String>,
        /// Extra parameters for the authorization request (`audience`, `resource`, `prompt`, …).
        #[serde(default)]
        authorize_params: BTreeMap<String, String>,
        /// RFC 7009 endpoint called when a connection is deleted.
        #[serde(default)]
        revocation_url: Option<String>,
    },
    ApiKey,
}

/// A per-user credential's settings as the API describes them, in one shape for both kinds:
/// `kind` says which fields apply (the OAuth ones for `oauth2`, none for `api_key`).
/// `client_secret` is accepted when setting the credential and never shown.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PerUserSettings {
    #[schema(pattern = "^(oauth2|api_key)$")]
    kind: String,
    authorize_url: Option<String>,
    token_url: Option<String>,
    client_id: Option<String>,
    #[schema(write_only)]
    client_secret: Option<String>,
    scopes: Option<Vec<String>>,
    /// Extra parameters for the authorization request (`audience`, `resource`, `prompt`, …).
    authorize_params: Option<BTreeMap<String, String>>,
    /// RFC 7009 endpoint called when a connection is deleted.
    revocation_url: Option<String>,
}

impl PerUserRequest {
    /// What is stored in the clear, and the client secret to seal.
    pub fn split(self) -> (crate::credentials::PerUser, Option<String>) {
        match self {
            PerUserRequest::Oauth2 {
                authorize_url,
                token_url,
                client_id,
                client_secret,
                scopes,
                authorize_params,
                revocation_url,
            } => (
                crate::credentials::PerUser::Oauth2(crate::credentials::per_user::OAuth2Client {
                    authorize_url,
                    token_url,
                    client_id,
                    scopes,
                    authorize_params,
                    revocation_url,
                }),
                Some(client_secret),
            ),
            PerUserRequest::ApiKey => (crate::credentials::PerUser::ApiKey, None),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            PerUserRequest::Oauth2 { .. } => "oauth2",
            PerUserRequest::ApiKey => "api_key",
        }
    }
}

/// A credential as listed: never its value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialView {
    pub name: String,
    /// How each caller's own value is obtained, for a per-user credential (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<PerUserSettings>)]
    pub per_user: Option<crate::credentials::PerUser>,
    pub domains: Vec<String>,
    pub inject: Injection,
    /// The first 8 hex digits of the value's sha256, to tell values apart.
    pub fingerprint: String,
    pub created_at: i64,
    pub rotated_at: i64,
    /// In the answer to setting a credential: the hosts the server's handlers may fetch that the
    /// credential is not sent to (see README, *Credentials for upstream APIs*).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A server's credentials, by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialList {
    pub credentials: Vec<CredentialView>,
}

impl From<catalog::CredentialRecord> for CredentialView {
    fn from(record: catalog::CredentialRecord) -> CredentialView {
        CredentialView {
            per_user: record.binding.per_user,
            name: record.name,
            domains: record.binding.domains,
            inject: record.binding.inject,
            fingerprint: record.fingerprint,
            created_at: record.created_at,
            rotated_at: record.rotated_at,
            warnings: Vec::new(),
        }
    }
}
