//! `[telemetry]`: OpenTelemetry traces of tool calls.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// OpenTelemetry traces of tool calls (see `telemetry::traces`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Where spans are sent, over OTLP/HTTP with protobuf bodies (a collector's
    /// `http://HOST:4318/v1/traces`); empty turns traces off.
    pub otlp_endpoint: String,
    /// Outbound requests of handlers carry a W3C `traceparent` header naming their span, so an
    /// upstream that traces too joins the call's trace.
    pub propagate_traceparent: bool,
}

impl TelemetryConfig {
    /// Whether spans are exported at all.
    pub fn traces_enabled(&self) -> bool {
        !self.otlp_endpoint.trim().is_empty()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.traces_enabled() {
            return Ok(());
        }
        let endpoint = self.otlp_endpoint.trim();
        let problem = match url::Url::parse(endpoint) {
            Err(url::ParseError::RelativeUrlWithoutBase) => Some("it has no scheme: start it with http://".to_string()),
            Err(error) => Some(error.to_string()),
            Ok(url) if url.scheme() != "http" && url.scheme() != "https" => {
                Some(format!("the scheme is {:?}, not http or https", url.scheme()))
            }
            Ok(url) if url.host_str().is_none_or(str::is_empty) => Some("it has no host".to_string()),
            Ok(url) if !url.username().is_empty() || url.password().is_some() => {
                Some("it carries a user name or password, which would be sent with every export".to_string())
            }
            Ok(_) => None,
        };
        match problem {
            Some(problem) => Err(ConfigError::Invalid(format!(
                "[telemetry] otlp_endpoint = {endpoint:?} is not a usable OTLP/HTTP URL ({problem}): give the \
                 collector's traces URL, such as \"http://127.0.0.1:4318/v1/traces\", or leave it empty to turn \
                 traces off (MCPBOOTD_TELEMETRY__OTLP_ENDPOINT)"
            ))),
            None => Ok(()),
        }
    }
}
