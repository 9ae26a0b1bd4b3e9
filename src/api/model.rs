//! The admin API's request and response bodies: what the handlers accept and send, what the
//! command-line client (`client`) writes and reads, and what the OpenAPI document describes.
//!
//! The field names and shapes here are the wire format; the SDK and integration tests assert on
//! them. Values the daemon names elsewhere (statuses, kinds, outcomes, whitelist entries, tool
//! definitions) are the types from `states`, `toolset` and `whitelist`, so they are spelled once.
//!
//! One file per resource holds its bodies; this file only re-exports them, so every body is
//! `crate::api::model::X` wherever it is defined. The files name each other as `super::file`,
//! never this one.

mod auth;
mod calls;
mod connections;
mod credentials;
mod daemon;
mod events;
mod generations;
mod limits;
mod registration;
mod servers;
mod versions;

pub use auth::{AccessTokenRequest, AccessTokenSet, AuthMode, AuthSet, AuthView, ProtectedResource};
pub use calls::{CallEntry, CallList, CallRequest, CallResult, CallsQuery, EgressEntry, McpResult};
pub use connections::{ConnectionList, ConnectionView};
pub use credentials::{CredentialList, CredentialRequest, CredentialView, PerUserRequest, PerUserSettings};
pub use daemon::{CatalogBackup, CatalogHealth, LiveStatus, Liveness, Overview, OverviewPoint, Readiness, ReadyStatus};
pub use events::{DaemonEvent, GenerationEvent};
pub use generations::{
    DocumentView, GenerationStarted, GenerationView, RegenerateRequest, TokenUsage, ToolHealthView, ToolView,
};
pub use limits::{EffectiveLimitsView, LimitsView};
pub use registration::{
    OpenApiRegistration, PromptRegistration, Registered, Registration, ToolsetRegistered, ToolsetRegistration,
};
pub use servers::{ServerList, ServerSummary, ServerView};
pub use versions::{
    ActivateRequest, ApprovalSetting, DriftReport, DriftView, RejectRequest, Renamed, TextChange, ToolChange,
    ValueChange, VersionChanged, VersionDiff, VersionList, VersionSummary, VersionView,
};

// The code-mode tool's request and result live in a leaf of their own (`script`): serving
// uses them too, and serving never names `api`.
pub use crate::script::{ScriptError, ScriptOptions, ScriptRequest, ScriptResult, ToolCallTrace};

// Errors: the shapes live beside the codes they carry (`api::error`).
pub use crate::api::error::{ErrorBody, ErrorDetail, JsonRpcError, JsonRpcErrorData, JsonRpcErrorDetail, OAuthError};
