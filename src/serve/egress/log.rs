//! The egress log: one entry per hop of every request a call made, allowed or not, with the
//! operator-facing reason for a refusal or a failure. It goes into the call log; handlers never
//! see it.

use std::sync::Mutex;
use std::time::Instant;

use super::policy::Failure;
use crate::catalog::EgressRecord;

/// One call's (or one documentation fetch's) log.
#[derive(Default)]
pub struct EgressLog {
    entries: Mutex<Vec<EgressRecord>>,
}

/// Where a hop went.
pub struct Hop<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub started: Instant,
    /// Names of the credentials added to this hop.
    pub credentials: &'a [String],
}

impl<'a> Hop<'a> {
    pub fn of(method: &'a str, url: &'a url::Url, started: Instant) -> Hop<'a> {
        Hop { method, host: url.host_str().unwrap_or(""), path: url.path(), started, credentials: &[] }
    }
}

impl EgressLog {
    /// A hop that got a response (`status`, `bytes` of body as the handler got it, `scrubs`
    /// credential values taken out of it).
    pub fn answered(&self, hop: &Hop<'_>, status: u16, bytes: usize, scrubs: usize) {
        self.push(hop, Some(status), bytes, scrubs, None);
    }

    /// A hop that was refused or failed.
    pub fn failed(&self, hop: &Hop<'_>, failure: &Failure) {
        self.push(hop, None, 0, 0, Some(failure));
    }

    /// Everything logged so far, leaving the log empty.
    pub fn take(&self) -> Vec<EgressRecord> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, hop: &Hop<'_>, status: Option<u16>, bytes: usize, scrubs: usize, failure: Option<&Failure>) {
        let entry = EgressRecord {
            method: hop.method.chars().take(16).collect(),
            host: hop.host.chars().take(255).collect(),
            // The query string is left out: it often carries API keys.
            path: hop.path.chars().take(512).collect(),
            allowed: !failure.is_some_and(Failure::is_policy_decision),
            status: status.map(i64::from),
            bytes: bytes as i64,
            duration_us: hop.started.elapsed().as_micros() as i64,
            reason: failure.map(|f| f.reason().to_string()),
            credentials: hop.credentials.to_vec(),
            scrubs: scrubs as i64,
        };
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
    }
}
