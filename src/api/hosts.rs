//! `[server] allowed_hosts`: the `Host` check the MCP endpoints and the admin routes make before
//! anything else, the defence against DNS rebinding.

use axum::http::header::HOST;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, Uri};

use crate::api::error::{ApiError, ErrorCode};

/// `[server] allowed_hosts` as the MCP endpoint applies it.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// Host (lower case, without brackets) and port when the entry has one. Empty: any host.
    entries: Vec<(String, Option<u16>)>,
    /// As configured, for messages.
    listed: String,
}

impl AllowedHosts {
    pub fn new(configured: &[String]) -> AllowedHosts {
        let entries = configured
            .iter()
            .map(|entry| entry.trim())
            .filter(|entry| !entry.is_empty())
            .map(|entry| match Authority::try_from(entry) {
                Ok(authority) => (normalize_host(authority.host()), authority.port_u16()),
                // A bare IPv6 address (`::1`) is not an authority without its brackets.
                Err(_) => (normalize_host(entry), None),
            })
            .collect();
        AllowedHosts { entries, listed: configured.join(", ") }
    }

    /// Refuses a request whose `Host` (or HTTP/2 `:authority`) is not listed: the defence
    /// against DNS rebinding, where a web page reaches a local daemon through a name it controls.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let presented = headers.get(HOST).and_then(|v| v.to_str().ok()).or_else(|| uri.authority().map(|a| a.as_str()));
        let authority = presented.and_then(|host| Authority::try_from(host).ok());
        let allowed = authority.as_ref().is_some_and(|authority| {
            let host = normalize_host(authority.host());
            self.entries
                .iter()
                .any(|(allowed, port)| *allowed == host && port.is_none_or(|p| Some(p) == authority.port_u16()))
        });
        if allowed {
            return Ok(());
        }
        let named = presented.map_or_else(|| "no Host header".to_string(), |host| format!("the Host header {host:?}"));
        Err(ApiError::new(
            ErrorCode::HostNotAllowed,
            format!(
                "{named} is not one this daemon answers to (it guards against DNS rebinding): add the \
                 name clients use to [server] allowed_hosts (MCPBOOTD_SERVER__ALLOWED_HOSTS); allowed now: {}",
                self.listed
            ),
        ))
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn host_check(allowed: &[&str], host: Option<&str>) -> Result<(), ApiError> {
        let allowed = AllowedHosts::new(&allowed.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(HOST, HeaderValue::from_str(host).unwrap());
        }
        allowed.check(&Uri::from_static("/servers/x/mcp"), &headers)
    }

    #[test]
    fn hosts_match_by_name_and_by_port_when_the_entry_has_one() {
        let allowed = ["localhost", "127.0.0.1", "::1", "mcp.example.test:8443"];
        for host in ["localhost", "LOCALHOST:8080", "127.0.0.1:1", "[::1]:80", "mcp.example.test:8443"] {
            assert!(host_check(&allowed, Some(host)).is_ok(), "{host}");
        }
        for host in [
            Some("evil.test"),
            Some("mcp.example.test"),
            Some("mcp.example.test:443"),
            Some("localhost.evil.test"),
            None,
        ] {
            let error = host_check(&allowed, host).unwrap_err();
            assert_eq!(error.code, ErrorCode::HostNotAllowed);
            assert!(error.message.contains("[server] allowed_hosts"), "{}", error.message);
            if let Some(host) = host {
                assert!(error.message.contains(host), "names the host: {}", error.message);
            }
        }
        assert!(host_check(&[], Some("anything.test")).is_ok(), "an empty list allows any host");
    }
}
