//! The connect flow behind the daemon's `/connect` pages: what each browser step does, without
//! the HTML (`api::connect` renders it).
//!
//! 1. A connect link (`/connect/<token>`, sent to a caller who has not connected) is spent when
//!    opened, and the browser is sent to sign in at the daemon's own OAuth issuer, as the
//!    daemon's OpenID client (`connect_client_id`), with PKCE.
//! 2. The sign-in comes back (`/connect/signin`): the code is traded for an ID token, which must
//!    name the subject the link was made for. A forwarded link completed by someone else stops
//!    here, before anything reaches the upstream.
//! 3. Then the upstream's authorization server (`oauth2`, PKCE and a fresh `state`), whose
//!    callback (`/connect/callback`) trades the code for the user's tokens; or the API-key form
//!    (`api_key`).
//!
//! Every step's secret (link token, `state`) is stored only as its sha256, lives for a bounded
//! time, and is deleted when used, so a callback accepts nothing the daemon did not start and
//! nothing twice. The PKCE verifiers are sealed.

use std::time::Duration;

use super::service::{Accounts, digest, token_name};
use super::token_endpoint::{self, TokenError};
use crate::catalog::{CatalogError, ConnectionRecord, FlowRecord, NewConnection, TakenFlow, now_millis};
use crate::credentials::vault::random_token;
use crate::credentials::{self, PerUser};
use crate::telemetry::metrics::AccountEvent;
use crate::toolset::ServerId;

/// How long a browser may take over one step (sign-in, the upstream's consent, the key form).
const STEP_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How long a signed-in session on the account page lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// A flow row's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Link,
    SignIn,
    Upstream,
    Key,
    Session,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Link => "link",
            Step::SignIn => "signin",
            Step::Upstream => "upstream",
            Step::Key => "key",
            Step::Session => "session",
        }
    }
}

/// What the browser is shown or sent to next.
#[derive(Debug)]
pub enum Next {
    Redirect(String),
    /// The API-key form, posting `flow` back.
    KeyForm {
        flow: String,
        server: String,
        credential: String,
    },
    Connected {
        server: String,
        credential: String,
    },
    /// Signed in for the account page: the session secret to set as a cookie.
    Session(String),
}

/// Why a step stops.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("this link has expired: call the tool again for a new one")]
    Expired,
    #[error("this link was already used or is not valid: call the tool again for a new one")]
    Unknown,
    #[error(
        "this link was made for another user: you signed in as {signed_in:?}; links are bound to the person whose \
         call needed them, so open your own (call the tool again, signed in as yourself)"
    )]
    WrongUser { signed_in: String },
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    Invalid(String),
    #[error("connected accounts are not configured on this daemon ([auth.oauth] connect_client_id)")]
    NotConfigured,
    #[error("{0}")]
    Unavailable(String),
}

impl Refusal {
    /// The HTTP status the page is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Expired => 410,
            Refusal::Unknown | Refusal::Invalid(_) => 400,
            Refusal::WrongUser { .. } => 403,
            Refusal::Upstream(_) => 502,
            Refusal::NotConfigured => 404,
            Refusal::Unavailable(_) => 503,
        }
    }
}

impl From<CatalogError> for Refusal {
    fn from(error: CatalogError) -> Refusal {
        tracing::error!(%error, "connect pages: the catalog failed");
        Refusal::Unavailable("the daemon's catalog could not be used; try again shortly".into())
    }
}

/// A person on the account page.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub issuer: String,
    pub subject: String,
}

impl Accounts {
    /// Step 1: a connect link is opened.
    pub async fn open_link(&self, token: &str) -> Result<Next, Refusal> {
        self.check_configured()?;
        let flow = taken(self.catalog.take_flow(&digest(token), Step::Link.as_str()).await?)?;
        self.sign_in(flow.server_id.as_deref(), flow.credential.as_deref(), flow.subject.as_deref()).await
    }

    /// The account page without a session: sign in first.
    pub async fn open_account(&self) -> Result<Next, Refusal> {
        self.check_configured()?;
        self.sign_in(None, None, None).await
    }

    async fn sign_in(
        &self,
        server: Option<&str>,
        credential: Option<&str>,
        subject: Option<&str>,
    ) -> Result<Next, Refusal> {
        let (_, metadata) = self.identity_provider().await?;
        let endpoint = metadata
            .authorization_endpoint
            .clone()
            .ok_or_else(|| Refusal::Unavailable("the identity provider publishes no authorization_endpoint".into()))?;
        let state = random_token();
        let verifier = random_token();
        let sealed = self.seal_verifier(&state, &verifier);
        let expires_at = now_millis() + STEP_LIFETIME.as_millis() as i64;
        self.catalog
            .insert_flow(
                &digest(&state),
                Step::SignIn.as_str(),
                server,
                credential,
                &self.issuer,
                subject,
                Some(&sealed),
                expires_at,
            )
            .await?;
        let mut url = url::Url::parse(&endpoint).map_err(|e| {
            Refusal::Unavailable(format!("the identity provider's authorization_endpoint is not a URL: {e}"))
        })?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.connect_client_id)
            .append_pair("redirect_uri", &self.redirect_uri("/connect/signin"))
            .append_pair("scope", "openid")
            .append_pair("state", &state)
            .append_pair("code_challenge", &challenge(&verifier))
            .append_pair("code_challenge_method", "S256");
        Ok(Next::Redirect(url.into()))
    }

    /// Step 2: the sign-in at the identity provider came back.
    pub async fn signed_in(&self, code: Option<&str>, state: &str, error: Option<&str>) -> Result<Next, Refusal> {
        self.check_configured()?;
        let flow = taken(self.catalog.take_flow(&digest(state), Step::SignIn.as_str()).await?)?;
        if let Some(error) = error {
            return Err(Refusal::Upstream(format!("the sign-in did not complete: {error}")));
        }
        let code = code.ok_or_else(|| Refusal::Invalid("the sign-in came back without a code".into()))?;
        let verifier = self.open_verifier(state, &flow)?;
        let (validator, metadata) = self.identity_provider().await?;
        let token_url = metadata
            .token_endpoint
            .clone()
            .ok_or_else(|| Refusal::Unavailable("the identity provider publishes no token_endpoint".into()))?;
        let redirect_uri = self.redirect_uri("/connect/signin");
        let granted = token_endpoint::request(
            &self.http,
            &token_url,
            &self.connect_client_id,
            &self.connect_client_secret,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", &redirect_uri),
                ("code_verifier", &verifier),
            ],
        )
        .await
        .map_err(|e| Refusal::Upstream(format!("signing in failed: {e}")))?;
        let id_token = granted
            .id_token
            .ok_or_else(|| Refusal::Upstream("the identity provider sent no ID token (is `openid` allowed?)".into()))?;
        let claims = validator
            .validate_id_token(&id_token, &self.connect_client_id)
            .await
            .map_err(|e| Refusal::Upstream(format!("the identity provider's ID token was refused: {e}")))?;
        match (&flow.server_id, &flow.credential, &flow.subject) {
            (Some(server), Some(credential), Some(subject)) => {
                if *subject != claims.sub {
                    tracing::warn!(server_id = %server, credential = %credential, "a connect link was completed by another user; refused");
                    return Err(Refusal::WrongUser { signed_in: claims.sub });
                }
                self.authorize_upstream(server, credential, subject).await
            }
            _ => {
                let secret = random_token();
                let expires_at = now_millis() + SESSION_LIFETIME.as_millis() as i64;
                self.catalog
                    .insert_flow(
                        &digest(&secret),
                        Step::Session.as_str(),
                        None,
                        None,
                        &self.issuer,
                        Some(&claims.sub),
                        None,
                        expires_at,
                    )
                    .await?;
                Ok(Next::Session(secret))
            }
        }
    }

    /// Step 3: to the upstream's authorization server, or the key form.
    async fn authorize_upstream(&self, server: &str, credential: &str, subject: &str) -> Result<Next, Refusal> {
        let (kind, _) = self.per_user(server, credential).await?;
        let secret = random_token();
        let expires_at = now_millis() + STEP_LIFETIME.as_millis() as i64;
        match kind {
            PerUser::ApiKey => {
                self.catalog
                    .insert_flow(
                        &digest(&secret),
                        Step::Key.as_str(),
                        Some(server),
                        Some(credential),
                        &self.issuer,
                        Some(subject),
                        None,
                        expires_at,
                    )
                    .await?;
                Ok(Next::KeyForm { flow: secret, server: server.to_string(), credential: credential.to_string() })
            }
            PerUser::Oauth2(client) => {
                let verifier = random_token();
                let sealed = self.seal_verifier(&secret, &verifier);
                self.catalog
                    .insert_flow(
                        &digest(&secret),
                        Step::Upstream.as_str(),
                        Some(server),
                        Some(credential),
                        &self.issuer,
                        Some(subject),
                        Some(&sealed),
                        expires_at,
                    )
                    .await?;
                let mut url = url::Url::parse(&client.authorize_url)
                    .map_err(|e| Refusal::Invalid(format!("the credential's authorize_url is not a URL: {e}")))?;
                {
                    let mut query = url.query_pairs_mut();
                    query
                        .append_pair("response_type", "code")
                        .append_pair("client_id", &client.client_id)
                        .append_pair("redirect_uri", &self.redirect_uri("/connect/callback"))
                        .append_pair("state", &secret)
                        .append_pair("code_challenge", &challenge(&verifier))
                        .append_pair("code_challenge_method", "S256");
                    if !client.scopes.is_empty() {
                        query.append_pair("scope", &client.scopes.join(" "));
                    }
                    for (name, value) in &client.authorize_params {
                        query.append_pair(name, value);
                    }
                }
                Ok(Next::Redirect(url.into()))
            }
        }
    }

    /// Step 4 (`oauth2`): the upstream's authorization server came back.
    pub async fn upstream_callback(
        &self,
        code: Option<&str>,
        state: &str,
        error: Option<&str>,
    ) -> Result<Next, Refusal> {
        self.check_configured()?;
        // The state is spent before anything else, whatever the answer: a callback is used once.
        let flow = taken(self.catalog.take_flow(&digest(state), Step::Upstream.as_str()).await?)?;
        if let Some(error) = error {
            return Err(Refusal::Upstream(format!(
                "the authorization at the API's provider did not complete: {error}"
            )));
        }
        let code = code.ok_or_else(|| Refusal::Invalid("the authorization came back without a code".into()))?;
        let verifier = self.open_verifier(state, &flow)?;
        let (server, credential, subject) = flow_owner(&flow)?;
        let (kind, client_secret) = self.per_user(server, credential).await?;
        let PerUser::Oauth2(client) = kind else {
            return Err(Refusal::Invalid(format!("credential {credential:?} is no longer an OAuth credential")));
        };
        let redirect_uri = self.redirect_uri("/connect/callback");
        let granted = token_endpoint::request(
            &self.http,
            &client.token_url,
            &client.client_id,
            client_secret.as_deref().unwrap_or_default(),
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", &redirect_uri),
                ("code_verifier", &verifier),
            ],
        )
        .await
        .map_err(|error| match error {
            TokenError::Refused { .. } => {
                Refusal::Upstream(format!("the API's provider refused the authorization: {error}"))
            }
            TokenError::Unavailable(_) => Refusal::Upstream(format!(
                "the API's provider could not be reached to finish connecting ({error}); nothing was stored: call the \
                 tool again for a new link"
            )),
        })?;
        let expires_at = granted.expires_in.map(|seconds| now_millis() + seconds * 1000);
        let scopes = granted.scope.clone().unwrap_or_else(|| client.scopes.join(" "));
        self.store(
            server,
            credential,
            subject,
            &granted.access_token,
            granted.refresh_token.as_deref(),
            scopes,
            expires_at,
        )
        .await?;
        Ok(Next::Connected { server: server.to_string(), credential: credential.to_string() })
    }

    /// Step 4 (`api_key`): the person's key.
    pub async fn submit_key(&self, flow_secret: &str, key: &str) -> Result<Next, Refusal> {
        self.check_configured()?;
        let flow = taken(self.catalog.take_flow(&digest(flow_secret), Step::Key.as_str()).await?)?;
        let (server, credential, subject) = flow_owner(&flow)?;
        let key = key.trim();
        if let Err(problem) = credentials::check_value(key) {
            // The form may be sent again: the step stays live for what is left of its time.
            self.catalog
                .insert_flow(
                    &digest(flow_secret),
                    Step::Key.as_str(),
                    Some(server),
                    Some(credential),
                    &self.issuer,
                    Some(subject),
                    None,
                    flow.expires_at,
                )
                .await?;
            return Err(Refusal::Invalid(format!("the key was not stored: {problem}")));
        }
        self.store(server, credential, subject, key, None, String::new(), None).await?;
        Ok(Next::Connected { server: server.to_string(), credential: credential.to_string() })
    }

    #[allow(clippy::too_many_arguments)]
    async fn store(
        &self,
        server: &str,
        credential: &str,
        subject: &str,
        access: &str,
        refresh: Option<&str>,
        scopes: String,
        expires_at: Option<i64>,
    ) -> Result<ConnectionRecord, Refusal> {
        let seal = |which: &str, value: &str| {
            self.vault.seal(server, &token_name(credential, &self.issuer, subject, which), value)
        };
        let new = NewConnection {
            server_id: server.to_string(),
            credential: credential.to_string(),
            issuer: self.issuer.clone(),
            subject: subject.to_string(),
            sealed_access: seal("access", access),
            sealed_refresh: refresh.map(|token| seal("refresh", token)),
            scopes,
            expires_at,
        };
        let record = self.catalog.put_connection(&new).await?.ok_or_else(|| {
            Refusal::Invalid(format!("credential {credential:?} of server {server:?} no longer exists"))
        })?;
        self.metrics.record_account_event(AccountEvent::Connected);
        tracing::info!(server_id = %server, credential = %credential, "account connected");
        Ok(record)
    }

    /// The person signed in on the account page with this session, if it is live.
    pub async fn session(&self, secret: &str) -> Result<Option<SignedIn>, Refusal> {
        let flow = self.catalog.live_flow(&digest(secret), Step::Session.as_str()).await?;
        Ok(flow.and_then(|flow| Some(SignedIn { issuer: flow.issuer, subject: flow.subject? })))
    }

    /// A signed-in person's connections, on every server.
    pub async fn connections_of(&self, person: &SignedIn) -> Result<Vec<ConnectionRecord>, Refusal> {
        Ok(self.catalog.connections_of(&person.issuer, &person.subject).await?)
    }

    /// Deletes a connection: the operator's (`server`) or a person's own (`owner`), revoking its
    /// tokens upstream where the credential names a revocation endpoint. False if none matched.
    pub async fn delete_connection(
        &self,
        server: Option<&ServerId>,
        id: &str,
        owner: Option<&SignedIn>,
    ) -> Result<bool, CatalogError> {
        let owner = owner.map(|person| (person.issuer.as_str(), person.subject.as_str()));
        let Some(record) = self.catalog.delete_connection(server, id, owner).await? else { return Ok(false) };
        self.metrics.record_account_event(AccountEvent::Revoked);
        tracing::info!(server_id = %record.server_id, credential = %record.credential, "connected account deleted");
        if let Ok((PerUser::Oauth2(client), secret)) = self.per_user(&record.server_id, &record.credential).await
            && let Some(url) = &client.revocation_url
        {
            let (which, sealed) = match &record.sealed_refresh {
                Some(sealed) => ("refresh", sealed),
                None => ("access", &record.sealed_access),
            };
            match self.open(&record, which, sealed) {
                Ok(token) => {
                    let hint = if which == "refresh" { "refresh_token" } else { "access_token" };
                    if let Err(error) = token_endpoint::revoke(
                        &self.http,
                        url,
                        &client.client_id,
                        secret.as_deref().unwrap_or_default(),
                        &token,
                        hint,
                    )
                    .await
                    {
                        tracing::warn!(server_id = %record.server_id, credential = %record.credential, %error, "cannot revoke a deleted connection's token upstream");
                    }
                }
                Err(error) => {
                    tracing::warn!(server_id = %record.server_id, %error, "cannot revoke a deleted connection's token")
                }
            }
        }
        Ok(true)
    }

    /// A server's connections, for the admin API.
    pub async fn connections(&self, server: &ServerId) -> Result<Vec<ConnectionRecord>, CatalogError> {
        self.catalog.connections(server).await
    }

    /// The credential's per-user kind and OAuth client secret, as stored now.
    async fn per_user(&self, server: &str, credential: &str) -> Result<(PerUser, Option<String>), Refusal> {
        let id = ServerId::parse(server).map_err(|_| Refusal::Unknown)?;
        let records = self.catalog.credentials(&id).await?;
        let record = records.into_iter().find(|record| record.name == credential).ok_or_else(|| {
            Refusal::Invalid(format!("credential {credential:?} of server {server:?} no longer exists"))
        })?;
        let kind = record
            .binding
            .per_user
            .ok_or_else(|| Refusal::Invalid(format!("credential {credential:?} is no longer a per-user credential")))?;
        let secret =
            match kind {
                PerUser::Oauth2(_) => Some(self.vault.open_value(server, credential, &record.sealed).map_err(|e| {
                    Refusal::Unavailable(format!("the credential's client secret cannot be opened: {e}"))
                })?),
                PerUser::ApiKey => None,
            };
        Ok((kind, secret))
    }

    /// The daemon's OAuth issuer, discovered: where the connect pages sign people in.
    async fn identity_provider(&self) -> Result<(&crate::oauth::Validator, &crate::oauth::IssuerMetadata), Refusal> {
        let validator = self.validator.as_ref().ok_or(Refusal::NotConfigured)?;
        let metadata = validator
            .prepare()
            .await
            .map_err(|e| Refusal::Unavailable(format!("the identity provider cannot be reached: {e}")))?;
        Ok((validator, metadata))
    }

    fn check_configured(&self) -> Result<(), Refusal> {
        if self.configured() { Ok(()) } else { Err(Refusal::NotConfigured) }
    }

    fn redirect_uri(&self, path: &str) -> String {
        format!("{}{path}", self.public_url)
    }

    fn seal_verifier(&self, state: &str, verifier: &str) -> Vec<u8> {
        self.vault.seal("connect", &digest(state), verifier)
    }

    fn open_verifier(&self, state: &str, flow: &FlowRecord) -> Result<String, Refusal> {
        let sealed = flow.sealed_verifier.as_deref().ok_or(Refusal::Unknown)?;
        self.vault
            .open_value("connect", &digest(state), sealed)
            .map_err(|e| Refusal::Unavailable(format!("the flow's verifier cannot be opened: {e}")))
    }
}

fn taken(taken: TakenFlow) -> Result<FlowRecord, Refusal> {
    match taken {
        TakenFlow::Taken(flow) => Ok(flow),
        TakenFlow::Expired => Err(Refusal::Expired),
        TakenFlow::Unknown => Err(Refusal::Unknown),
    }
}

fn flow_owner(flow: &FlowRecord) -> Result<(&str, &str, &str), Refusal> {
    match (&flow.server_id, &flow.credential, &flow.subject) {
        (Some(server), Some(credential), Some(subject)) => Ok((server, credential, subject)),
        _ => Err(Refusal::Unknown),
    }
}

/// The PKCE S256 challenge of `verifier` (RFC 7636).
fn challenge(verifier: &str) -> String {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}
