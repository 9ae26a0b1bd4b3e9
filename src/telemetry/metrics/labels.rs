//! The label sets of the daemon's metrics, and the label values of their fixed sets: each
//! label set is a struct, so a series cannot be recorded with a label missing or misspelt.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::states::{CacheUse, CallOutcome, DriftStatus, GenerationOutcome, Stage, UpstreamDecision, VersionChange};

/// Egress request outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EgressOutcome {
    Allowed,
    Denied,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SeriesLabels {
    pub server: Arc<str>,
    pub tool: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RejectionLabels {
    pub server: Arc<str>,
    pub status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ClientErrorLabels {
    pub server: Arc<str>,
    pub kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
}

/// What a client got wrong, for `mcpbootd_mcp_client_errors_total{kind}`: the daemon's error
/// code of a refusal (a fixed set), or a protocol error a mounted server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMistake {
    /// An `ErrorCode`'s spelling (`malformed_json`, `host_not_allowed`, …).
    Refused(&'static str),
    UnknownTool,
    UnsupportedMethod,
}

impl ClientMistake {
    pub fn kind(self) -> &'static str {
        match self {
            ClientMistake::Refused(code) => code,
            ClientMistake::UnknownTool => "unknown_tool",
            ClientMistake::UnsupportedMethod => "unsupported_method",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CallLabels {
    pub server: Arc<str>,
    pub tool: Arc<str>,
    pub outcome: CallOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EgressLabels {
    pub outcome: EgressOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UpstreamDecisionLabels {
    pub decision: UpstreamDecision,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CacheLabels {
    pub result: CacheUse,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ServerLabels {
    pub server: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReplicaLabels {
    pub replica: String,
    pub catalog: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReplicaChangeLabels {
    pub kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DriftCheckLabels {
    pub result: DriftStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct VersionChangeLabels {
    pub result: VersionChange,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct GenerationLabels {
    pub outcome: GenerationOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: Stage,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ScriptLabels {
    pub outcome: CallOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ScriptToolCallLabels {
    pub result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TokenLabels {
    pub direction: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct QuotaLabels {
    pub server: Arc<str>,
    pub limit: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct AccountEventLabels {
    pub event: &'static str,
}

/// What happened to a connected account (per-user credentials), counted by event only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountEvent {
    /// A call needed a connection the caller had not made: a connect link was sent.
    Elicitation,
    Connected,
    Refreshed,
    RefreshFailed,
    Revoked,
}

impl AccountEvent {
    pub const ALL: [AccountEvent; 5] = [
        AccountEvent::Elicitation,
        AccountEvent::Connected,
        AccountEvent::Refreshed,
        AccountEvent::RefreshFailed,
        AccountEvent::Revoked,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AccountEvent::Elicitation => "elicitation",
            AccountEvent::Connected => "connected",
            AccountEvent::Refreshed => "refreshed",
            AccountEvent::RefreshFailed => "refresh_failed",
            AccountEvent::Revoked => "revoked",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OAuthRefusalLabels {
    pub reason: &'static str,
}

/// The label values of the fixed sets are their catalog spellings.
macro_rules! label_value_as_str {
    ($($type:ty),+) => {$(
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    )+};
}

label_value_as_str!(CallOutcome, GenerationOutcome, Stage, DriftStatus, VersionChange, UpstreamDecision, CacheUse);

impl EncodeLabelValue for EgressOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let label = match self {
            EgressOutcome::Allowed => "allowed",
            EgressOutcome::Denied => "denied",
            EgressOutcome::Error => "error",
        };
        EncodeLabelValue::encode(&label, encoder)
    }
}
